"""The embedder interface: texts in, unit-length vectors out, under a model name that travels.

Every backend (:mod:`.e5`, :mod:`.local`, :mod:`.remote`, :mod:`.hashing`) is an :class:`Embedder`:
``model`` is the name written on the wire and in zone files (``multilingual-e5-small``), so that a
client and a zone only compare vectors of the same model; ``dim`` is the vectors' length; ``embed``
returns one unit-length vector per text searched for (a tool), ``embed_queries`` one per text that
searches (an intent): the same for symmetric models, with E5's ``query: `` prefix for E5; the cosine
of two vectors is their dot product (:func:`cosine`).

    >>> from tooldns.embedding import make_embedder, cosine
    >>> embedder = make_embedder("hash")
    >>> a, b = embedder.embed(["weather forecast", "forecast the weather"])
    >>> round(cosine(a, b), 6)
    1.0

Standard library only: backends import their heavy libraries when they are built.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from typing import Sequence

from ..exceptions import EmbeddingError
from ..protocol.fusion import DEFAULT_WEIGHT


def unit_vector(vector: Sequence[float]) -> list[float]:
    """*vector* scaled to length 1, as floats; the zero vector stays zero."""
    norm = math.sqrt(math.fsum(x * x for x in vector))
    if norm == 0.0:
        return [0.0] * len(vector)
    return [float(x) / norm for x in vector]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine of two unit vectors (their dot product); EmbeddingError when their lengths differ."""
    if len(a) != len(b):
        raise EmbeddingError(f"cannot compare vectors of {len(a)} and {len(b)} dimensions")
    return math.fsum(x * y for x, y in zip(a, b))


class Embedder(ABC):
    """Texts to unit-length vectors with one model (thread-safe in every backend).

    Subclasses set ``model`` (the name on the wire and in zone files) and ``dim``, and implement
    :meth:`embed`; :meth:`_texts` checks the input and :meth:`_unit` normalises vectors for
    backends whose model does not.
    """

    model: str
    dim: int
    #: whether it waits on an endpoint (a server embedding intents bounds the wait: IntentEmbeddings)
    remote: bool = False
    #: whether a tree is clustered on its vectors (``tooldns build``); False: on the tools' words, as a
    #: BM25 tree is, the zones still ranking with the vectors (a static model's, docs/building.md)
    clusters_tree: bool = True
    #: BM25's share when the client fuses this model's cosines with BM25 (:mod:`tooldns.protocol.fusion`):
    #: what a tree of its vectors publishes (``fusion=`` in its walk) and its zones rank tools with
    fusion: float = DEFAULT_WEIGHT

    @abstractmethod
    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit-length vector of ``dim`` floats per text searched for (a tool's text), in order;
        EmbeddingError on failure."""

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit-length vector per text that searches (an intent): :meth:`embed` unless the model
        embeds the two sides apart (E5's ``query: `` and ``passage: ``)."""
        return self.embed(texts)

    def embed_one(self, text: str) -> list[float]:
        """The unit-length vector of one text searched for."""
        return self.embed([text])[0]

    def embed_query(self, text: str) -> list[float]:
        """The unit-length vector of one intent."""
        return self.embed_queries([text])[0]

    def covers(self, text: str) -> bool:
        """Whether the model can say something about *text*; every language unless a backend knows
        better. Where it cannot, a tool gets no vector and an intent is sent without one, so that
        BM25 alone ranks them: an English-only model's vectors of Chinese text would only add noise."""
        return True

    def counters(self) -> dict[str, int]:
        """What this embedder has done (calls, texts, tokens), for logs and statistics."""
        return {}

    @staticmethod
    def _texts(texts: Sequence[str]) -> list[str]:
        """*texts* as a list, checked: a bare string (a sequence of characters) is refused."""
        if isinstance(texts, (str, bytes)):
            raise EmbeddingError("embed() takes a sequence of texts; use embed_one() for one text")
        out = list(texts)
        bad = [type(t).__name__ for t in out if not isinstance(t, str)]
        if bad:
            raise EmbeddingError(f"embed() takes texts (str), not {bad[0]}")
        return out

    @staticmethod
    def _unit(vectors: Sequence[Sequence[float]]) -> list[list[float]]:
        return [unit_vector(v) for v in vectors]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"


#: CJK ideographs, kana and hangul: the scripts an English-only model has no words for
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_LETTER = re.compile(r"[^\W\d_]")


def cjk_share(text: str) -> float:
    """The share of *text*'s letters that are CJK characters (0 for a text without letters)."""
    letters = len(_LETTER.findall(text))
    return len(_CJK.findall(text)) / letters if letters else 0.0
