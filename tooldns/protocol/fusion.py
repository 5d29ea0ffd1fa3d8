"""How a client ranks tools that came from several leaves of a hybrid tree: one pure function.

A zone whose scorer is ``hybrid`` sends, with each tool, the parts of its score: the BM25 score
(comparable across zones: built trees carry the catalog's global statistics) and the cosine of
intent and tool vectors (``bm25=`` and ``cos=`` in the tool's TXT record). The client fuses the
parts over the union of every leaf's tools, each part divided by its largest value there::

    fused = weight * bm25 / max(bm25) + (1 - weight) * cos / max(cos)

A flat hybrid search min-max normalises each part over the whole catalog, where the least BM25 is
0 (most tools share no word with the intent) and the least cosine near 0 (unrelated tools). The
union the walk brings back holds only the best few dozen tools, whose least scores are far above
the catalog's: min-max over them stretched small differences, the cosine's most, and found the
right tool less often than keeping 0 as the floor does (ToolRet's hybrid trees of three k-means
seeds, 10 tools from the best leaf, over DNS: 0.819, 0.824 and 0.826 with min-max, 0.824, 0.825
and 0.828 now; docs/building.md). ``weight`` is :data:`DEFAULT_WEIGHT`, chosen by cross-validation
on ToolRet's dev queries (``docs/building.md``). A tool without a cosine (no vector: added by hand,
or in a language the model does not cover) is ranked by BM25 alone, its normalised BM25 standing for both parts, as the
hybrid scorer does in a zone. Pure Python, so the resolver library needs nothing more.

    >>> [round(x, 3) for x in fuse([2.0, 1.0, 0.0], [0.1, 0.9, 0.5], weight=0.5)]
    [0.556, 0.75, 0.278]
    >>> fuse([2.0, 1.0], [0.1, None], weight=0.5)
    [1.0, 0.5]
"""

from __future__ import annotations

from typing import Sequence

#: share of BM25 in the fused score
DEFAULT_WEIGHT = 0.4


def _scaled(values: Sequence[float | None]) -> list[float | None]:
    """Each value over the largest (None stays None; all 0 when none is above 0)."""
    known = [v for v in values if v is not None]
    hi = max(known) if known else 0.0
    return [None if v is None else v / hi if hi > 0 else 0.0 for v in values]


def _min_max(values: Sequence[float | None]) -> list[float | None]:
    known = [v for v in values if v is not None]
    lo, hi = (min(known), max(known)) if known else (0.0, 0.0)
    return [None if v is None else (v - lo) / (hi - lo) if hi > lo else 0.0 for v in values]


def _fused(bm25: Sequence[float], cosine: Sequence[float | None], weight: float, scale) -> list[float]:
    if len(bm25) != len(cosine):
        raise ValueError(f"{len(bm25)} BM25 scores but {len(cosine)} cosines")
    return [b if c is None else weight * b + (1 - weight) * c for b, c in zip(scale(bm25), scale(cosine))]


def fuse(bm25: Sequence[float], cosine: Sequence[float | None], weight: float = DEFAULT_WEIGHT) -> list[float]:
    """The fused score of each candidate, in the order given (a None cosine: BM25 alone)."""
    return _fused(bm25, cosine, weight, _scaled)


def fuse_min_max(bm25: Sequence[float], cosine: Sequence[float | None], weight: float = DEFAULT_WEIGHT) -> list[float]:
    """:func:`fuse` with each part min-max normalised per query: the benchmark's flat hybrid search
    over every tool of a catalog (the usual definition of that baseline)."""
    return _fused(bm25, cosine, weight, _min_max)
