"""The scorer interface: how a zone ranks its children or its tools against an intent.

A scorer is built once per zone (per document set, ``factory(docs, briefs=..., **options)``) and
then asked ``rank(intent, k)``, which returns a :class:`Ranking`: at most *k* (document index,
score) pairs, best first. Besides ranking, a scorer tells the server what it needs to know to
serve it, so that nothing anywhere branches on a scorer's name:

* ``cacheable``: its rankings depend only on (intent, k) and its documents, so a server may keep
  packed replies and answer repeated queries from them;
* ``blocking``: it may wait on I/O (a model's endpoint), so the server calls it off its event loop;
* ``counters()``: what it counts (calls, tokens, fallbacks), summed into the server's counters;
* ``close()``: stop whatever it runs in the background, when its zone is replaced or stopped.

Every scorer must rank sensibly on a corpus of one or two documents. Scorers are picked by name
from :mod:`tooldns.scoring.registry`.

    >>> class Constant(Scorer):
    ...     name = "constant"
    ...     def rank(self, intent, k):
    ...         return Ranking([(0, 1.0)], scorer=self.name)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


@dataclass
class Ranking:
    """What a scorer returns: (index, score) pairs best first, and how it got them."""

    items: list[tuple[int, float]]
    scorer: str = "bm25"
    fallback: bool = False  # the configured scorer failed and a fallback answered


class Scorer(ABC):
    """What a zone's server needs of a scorer; subclasses implement :meth:`rank`."""

    #: the name it is registered under, sent in the reply's meta option
    name: str = ""
    #: rankings depend only on (intent, k) and the documents: replies may be cached
    cacheable: bool = True
    #: may wait on I/O: the server calls it from a thread pool, never on its event loop
    blocking: bool = False

    @abstractmethod
    def rank(self, intent: str, k: int) -> Ranking:
        """The best *k* (index, score) pairs for *intent*, best first."""

    def counters(self) -> dict[str, int]:
        """Counters to report (``dig CH TXT stats.tooldns.``); none by default."""
        return {}

    def close(self) -> None:
        """Stop background work; nothing by default."""
