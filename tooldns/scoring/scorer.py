"""The scorer interface: how a zone ranks its children or its tools against an intent.

A scorer is built once per zone (per document set, ``factory(docs, briefs=..., vectors=...,
**options)``: *briefs* a short form of each document for scorers that show them to a model,
*vectors* each document's vectors in the vector option's encoding, for scorers that compare
vectors) and then asked ``rank(intent, k, vector)``, which returns a :class:`Ranking`: at most
*k* (document index, score) pairs, best first. *vector* is the query's intent vector
(:class:`tooldns.protocol.vector.Vector`) or None. Besides ranking, a scorer tells the server what it needs to know to
serve it, so that nothing anywhere branches on a scorer's name:

* ``cacheable``: its rankings depend only on (intent, k) and its documents, so a server may keep
  packed replies and answer repeated queries from them;
* ``blocking``: it may wait on I/O (a model's endpoint), so the server calls it off its event loop;
* ``counters()``: what it counts (calls, tokens, fallbacks), summed into the server's counters;
* ``close()``: stop whatever it runs in the background, when its zone is replaced or stopped;
* ``model``: the embedding model whose vectors it compares (None: it uses no vectors), so the
  server knows whether a query's vector can be used or must be ignored (and says so).

Every scorer must rank sensibly on a corpus of one or two documents. Scorers are picked by name
from :mod:`tooldns.scoring.registry`.

    >>> class Constant(Scorer):
    ...     name = "constant"
    ...     def rank(self, intent, k, vector=None):
    ...         return Ranking([(0, 1.0)], scorer=self.name)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from ..protocol.vector import Vector


@dataclass(slots=True, init=False)
class Ranking:
    """What a scorer returns: (index, score) pairs best first, and how it got them."""

    items: list[tuple[int, float]]
    scorer: str = "bm25"
    fallback: bool = False  # the configured scorer failed and a fallback answered
    #: per returned index, the parts a fused score was made of: (BM25 score, cosine or None), so
    #: that a client can fuse scores from several zones again (:mod:`tooldns.scoring.hybrid`)
    parts: dict[int, tuple[float, float | None]] | None = None

    def __init__(self, items, scorer="bm25", fallback=False, parts=None) -> None:
        # written here rather than by dataclass (whose __init__ runs interpreted): compiled, as
        # every query a zone ranks makes one
        self.items = items
        self.scorer = scorer
        self.fallback = fallback
        self.parts = parts


class Scorer(ABC):
    """What a zone's server needs of a scorer; subclasses implement :meth:`rank`."""

    #: the name it is registered under, sent in the reply's meta option
    name: str = ""
    #: rankings depend only on (intent, k) and the documents: replies may be cached
    cacheable: bool = True
    #: may wait on I/O: the server calls it from a thread pool, never on its event loop
    blocking: bool = False
    #: the embedding model whose vectors it compares, and their size; None: it compares none
    model: str | None = None
    dim: int = 0

    @abstractmethod
    def rank(self, intent: str, k: int, vector: Vector | None = None) -> Ranking:
        """The best *k* (index, score) pairs for *intent* (and its *vector*, if the scorer uses one)."""

    def counters(self) -> dict[str, int]:
        """Counters to report (``dig CH TXT stats.tooldns.``); none by default."""
        return {}

    def postings(self) -> list[dict]:
        """The postings dictionaries (term -> postings) of its lexical indexes: most of what a zone's
        index holds, which a loading process pickles and a replaced index frees a piece at a time
        (:mod:`tooldns.serving.loader`, :meth:`tooldns.serving.index.ZoneIndex.release`); none by default."""
        return []

    def close(self) -> None:
        """Stop background work; nothing by default."""
