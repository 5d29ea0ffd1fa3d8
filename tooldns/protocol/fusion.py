"""How a client ranks tools that came from several leaves of a hybrid tree: one pure function.

A zone whose scorer is ``hybrid`` sends, with each tool, the parts of its score: the BM25 score
(comparable across zones: built trees carry the catalog's global statistics) and the cosine of
intent and tool vectors (``bm25=`` and ``cos=`` in the tool's TXT record). The client fuses the
parts over the union of every leaf's tools, min-max normalising each part per query, as a flat
hybrid search over the whole catalog would::

    fused = weight * (bm25 - min) / (max - min) + (1 - weight) * (cos - min) / (max - min)

``weight`` is :data:`DEFAULT_WEIGHT`, chosen by cross-validation on ToolRet's dev queries
(``docs/building.md``). A tool without a cosine (no vector: added by hand, or in a language the
model does not cover) is ranked by BM25 alone, its normalised BM25 standing for both parts, as the
hybrid scorer does in a zone. Pure Python, so the resolver library needs nothing more.

    >>> fuse([2.0, 1.0, 0.0], [0.1, 0.9, 0.5], weight=0.5)
    [0.5, 0.75, 0.25]
    >>> fuse([2.0, 1.0], [0.1, None], weight=0.5)
    [0.5, 0.0]
"""

from __future__ import annotations

from typing import Sequence

#: share of BM25 in the fused score
DEFAULT_WEIGHT = 0.4


def _scaled(values: Sequence[float | None]) -> list[float | None]:
    known = [v for v in values if v is not None]
    lo, hi = (min(known), max(known)) if known else (0.0, 0.0)
    return [None if v is None else (v - lo) / (hi - lo) if hi > lo else 0.0 for v in values]


def fuse(bm25: Sequence[float], cosine: Sequence[float | None], weight: float = DEFAULT_WEIGHT) -> list[float]:
    """The fused score of each candidate, in the order given (a None cosine: BM25 alone)."""
    if len(bm25) != len(cosine):
        raise ValueError(f"{len(bm25)} BM25 scores but {len(cosine)} cosines")
    return [b if c is None else weight * b + (1 - weight) * c for b, c in zip(_scaled(bm25), _scaled(cosine))]
