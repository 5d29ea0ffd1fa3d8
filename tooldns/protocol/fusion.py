"""How a client ranks tools that came from several leaves of a hybrid tree: one pure function.

A zone whose scorer is ``hybrid`` sends, with each tool, the parts of its score: the BM25 score
(comparable across zones: built trees carry the catalog's global statistics) and the cosine of
intent and tool vectors (``bm25=`` and ``cos=`` in the tool's TXT record). The client fuses the
parts over the union of every leaf's tools, min-max normalising each part per query, as a flat
hybrid search over the whole catalog would::

    fused = weight * (bm25 - min) / (max - min) + (1 - weight) * (cos - min) / (max - min)

``weight`` is :data:`DEFAULT_WEIGHT`, chosen by cross-validation on ToolRet's dev queries
(``docs/building.md``). Pure Python, so the resolver library needs nothing more.

    >>> fuse([2.0, 1.0, 0.0], [0.1, 0.9, 0.5], weight=0.5)
    [0.5, 0.75, 0.25]
"""

from __future__ import annotations

from typing import Sequence

#: share of BM25 in the fused score
DEFAULT_WEIGHT = 0.4


def _scaled(values: Sequence[float]) -> list[float]:
    lo, hi = (min(values), max(values)) if values else (0.0, 0.0)
    return [(v - lo) / (hi - lo) if hi > lo else 0.0 for v in values]


def fuse(bm25: Sequence[float], cosine: Sequence[float], weight: float = DEFAULT_WEIGHT) -> list[float]:
    """The fused score of each candidate, in the order given."""
    if len(bm25) != len(cosine):
        raise ValueError(f"{len(bm25)} BM25 scores but {len(cosine)} cosines")
    return [weight * b + (1 - weight) * c for b, c in zip(_scaled(bm25), _scaled(cosine))]
