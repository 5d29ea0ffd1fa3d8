"""The ``hybrid`` scorer: BM25 and the cosine of intent and document vectors, fused per zone.

Documents are a zone's children (each with a few vectors standing for the tools beneath it,
centroids made by ``tooldns build``) or its tools (one vector each). The query brings its intent
text and, when the client embedded it with the zone's model, its vector
(:mod:`tooldns.protocol.vector`). A document's cosine is the best over its vectors, less the
intent's cosine with the zone's *centre* (the mean of the catalog's tool vectors, which every zone
of a built tree carries, ``vector_centre``): 0 is then the catalog's average, whatever the model
(multilingual-e5-small gives every pair of texts a cosine near 0.8; all-MiniLM-L6-v2 near 0.1),
and the per-intent constant changes no ranking by vectors alone. The fused score of a document is
the formula the client fuses leaves with (:func:`tooldns.protocol.fusion.fuse`)::

    fused = alpha * bm25 / max(bm25) + (1 - alpha) * cosine / max(cosine)

over the zone's documents. A document without a vector (a tool an organisation added by hand, not
yet embedded, or one in a language the model does not cover) is scored by its BM25 part alone; when
the query has no usable vector, every document is, with BM25's own scores, so the zone answers
exactly as a ``bm25`` zone would. BM25 scores a document by its best facet when every document has
facets (the children of a built zone), else whole. ``alpha`` is the client's fusion weight, 0.4 by
default, chosen by cross-validation on ToolRet's dev queries; ``tooldns build`` ranks children with
0.6 (``docs/building.md``). Besides the fused score
the ranking keeps each document's raw BM25 score and centred cosine (:attr:`Ranking.parts`), which
answers carry, so that a client can fuse the tools of several leaves over their union.

Cost: one BM25 pass and one small matrix product (a few hundred vectors of 384 int8 values at
most), so scoring vectors adds microseconds to a referral.

    >>> s = HybridScorer(["weather forecast", "stock quotes"], vectors=[[encode_vector("m", [1, 0])],
    ...                                                                  [encode_vector("m", [0, 1])]])
    >>> s.rank("prices", 1, quantize("m", [0.1, 0.9])).items[0][0]
    1
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..exceptions import ScorerError
from ..protocol.fusion import DEFAULT_WEIGHT
from ..protocol.vector import Vector, decode_vector, encode_vector
from .bm25 import BM25, CorpusStats, FacetRanker, best_k
from .scorer import Ranking, Scorer

#: BM25's share of a fused score: the client's fusion weight, so that a leaf ranks its tools as the
#: client ranks the union of the leaves
DEFAULT_ALPHA = DEFAULT_WEIGHT


def one_blas_thread() -> None:
    """Make this process's BLAS (numpy's matrix products) use one thread: what a server wants.

    A zone compares an intent's vector with its children's centroids in one matrix-vector product
    of a few hundred to a few thousand rows, thousands of times a second. OpenBLAS splits such a
    product over every core, and waking its threads costs more than the product: on this machine
    the 1,178 x 384 product of a hybrid root took 68 us with its default threads and 37 us with
    one, the whole ranking 192 us and 101 us (``python scripts/bench/bench_handle.py --zones BUILT``
    measures a reply). The other cores serve other queries (``tooldns serve --workers``). Limits
    BLAS only (not torch, which embeds intents with its own threads), through threadpoolctl.
    """
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


def as_array(vector: Vector) -> np.ndarray:
    """A vector's components as a unit-length float32 array (scale does not change a cosine)."""
    q = np.frombuffer(vector.codes, dtype=np.int8).astype(np.float32)
    norm = float(np.linalg.norm(q))
    return q / norm if norm > 0 else q


def as_values(vector: Vector) -> np.ndarray:
    """A vector's components as they are (codes times scale), as float32: a centre is not unit."""
    return np.frombuffer(vector.codes, dtype=np.int8).astype(np.float32) * np.float32(vector.scale)


#: the most rows k-means is fitted on (:func:`kmeans_centres`); beyond, a fixed sample of them
KMEANS_SAMPLE = 4096


def kmeans_centres(x: np.ndarray, n: int) -> np.ndarray:
    """The means of the rows of *x* nearest each of *n* k-means centres (fewer when some are left
    without rows): the centroids a child's tools are represented by, in ``tooldns build`` and in
    what a zone publishes (:func:`tooldns.serving.summaries.centroids`). More than
    :data:`KMEANS_SAMPLE` rows are clustered on a fixed sample of them, then every row is assigned:
    the root of a million-tool tree, publishing 16 centroids of its 2,233 children's 34,704, took its
    server 11 s of work after every start with every row clustered, and takes 4 s (2026-12-06)."""
    from sklearn.cluster import KMeans

    kmeans = KMeans(n_clusters=n, random_state=0, n_init=3, max_iter=100)
    if len(x) > KMEANS_SAMPLE:
        sample = np.sort(np.random.default_rng(0).choice(len(x), KMEANS_SAMPLE, replace=False))
        labels = kmeans.fit(x[sample]).predict(x)
    else:
        labels = kmeans.fit_predict(x)
    return np.array([x[labels == c].mean(axis=0) for c in range(n) if (labels == c).any()])


def centroid_vectors(model: str, x: np.ndarray, n: int) -> tuple[bytes, ...]:
    """At most *n* unit vectors standing for the rows of *x*, encoded: k-means centres
    (:func:`kmeans_centres`) when there are more rows than *n*, else the rows. A delegation's
    centroids in ``tooldns build`` and ``tooldns embed``
    (:func:`tooldns.building.quantized.row_centroids`) and those a zone publishes
    (:func:`tooldns.serving.summaries.centroids`): one rule."""
    if not len(x):
        return ()
    if len(x) > n:  # tools of the same text share a vector: k-means of fewer rows than n would fail
        x = kmeans_centres(x, n)
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    return tuple(encode_vector(model, row.tolist()) for row in x)


def _scaled(values: np.ndarray) -> np.ndarray:
    """*values* over their largest (all 0 when none is above 0), as :func:`tooldns.protocol.fusion.fuse` scales."""
    hi = values.max() if len(values) else 0.0
    return values / hi if hi > 0 else np.zeros_like(values)


class HybridScorer(Scorer):
    """BM25 fused with cosine similarity; deterministic and cheap, so cacheable and non-blocking."""

    name = "hybrid"

    def __init__(self, docs: Sequence[str], briefs: Sequence[str] | None = None,
                 vectors: Sequence[Sequence[bytes]] | None = None, *, k1: float = 1.5, b: float = 0.75,
                 stats: CorpusStats | None = None, alpha: float = DEFAULT_ALPHA, facet_k1: float = 1.5,
                 centre: bytes = b"") -> None:
        del briefs
        if not 0.0 <= float(alpha) <= 1.0:
            raise ScorerError(f"hybrid: alpha must be from 0 to 1, got {alpha}")
        self.alpha = float(alpha)
        docs = list(docs)
        try:
            self.lexical = BM25(docs, k1=float(k1), b=float(b), stats=stats)
            #: an intent without a usable vector is ranked as the bm25 scorer ranks it: by facets when
            #: every document has them
            self.facets = FacetRanker.of(docs, k1=float(facet_k1), b=float(b))
        except (TypeError, ValueError) as exc:
            raise ScorerError(f"hybrid: {exc}") from exc
        self.n = self.lexical.n
        rows, owners, models = [], [], set()
        for i, encoded in enumerate(vectors or []):
            for data in encoded:
                vector = decode_vector(data)
                models.add((vector.model, vector.dim))
                rows.append(as_array(vector))
                owners.append(i)
        if centre:
            centred = decode_vector(centre)
            models.add((centred.model, centred.dim))
        if len(models) > 1:
            raise ScorerError(f"hybrid: vectors of several models in one zone: {sorted(models)}")
        self.model, self.dim = next(iter(models)) if models else (None, 0)
        #: the zone's centre (None: cosines as they are): an intent's cosine with it is subtracted from every cosine
        self.centre = as_values(decode_vector(centre)) if centre else None
        self._rows(np.vstack(rows) if rows else np.zeros((0, 0), dtype=np.float32), np.asarray(owners, dtype=np.intp))

    def _rows(self, matrix: np.ndarray, owners: np.ndarray) -> None:
        """Keep the unit rows *matrix* and the document each stands for (*owners*, document by document)."""
        self.matrix, self.owners = matrix, owners
        self.has_vector = np.zeros(self.n, dtype=bool)
        self.has_vector[self.owners] = True
        # where each document's rows start: the best cosine of each is one reduceat, not a ufunc.at
        self._starts = np.flatnonzero(np.r_[True, owners[1:] != owners[:-1]]) if len(owners) else owners
        self._with_rows = self.owners[self._starts]

    @classmethod
    def over(cls, lexical: BM25, matrix: np.ndarray, owners: np.ndarray, *, alpha: float, model: str | None,
             dim: int, centre: np.ndarray | None) -> "HybridScorer":
        """A scorer ranking as the one these were taken from ranked (without facets): *lexical* its
        BM25 index, *matrix* and *owners* its rows (:attr:`matrix`, :attr:`owners`), *centre* its
        centre's values. A leaf's map (:mod:`tooldns.serving.mapped`) reads them where they lie."""
        scorer = cls.__new__(cls)
        scorer.alpha, scorer.lexical, scorer.facets, scorer.n = alpha, lexical, None, lexical.n
        scorer.model, scorer.dim, scorer.centre = model, dim, centre
        scorer._rows(matrix, owners)
        return scorer

    def postings(self) -> list[dict]:
        return [self.lexical._postings] + ([self.facets.index._postings] if self.facets is not None else [])

    def usable(self, vector: Vector | None) -> bool:
        """Whether *vector* is of this zone's model (and size), so that it can be compared."""
        return vector is not None and self.model == vector.model and self.dim == vector.dim

    def rank(self, intent: str, k: int, vector: Vector | None = None) -> Ranking:
        fused = self.usable(vector) and len(self.owners)
        if not fused and self.facets is not None:
            return Ranking(self.facets.rank(intent, k), scorer=self.name)
        lexical = (self.facets if self.facets is not None else self.lexical).score_array(intent)
        if not fused:
            # BM25 alone, with its own scores: comparable across zones, as the bm25 scorer's are
            return Ranking(best_k(lexical, k), scorer=self.name)
        best = lexical.max()
        fused = lexical / best if best > 0 else lexical.copy()
        q = as_array(vector)
        cosine = np.full(self.n, -1.0)
        cosine[self._with_rows] = np.maximum.reduceat(self.matrix @ q, self._starts)
        if self.centre is not None:
            cosine[self._with_rows] -= float(self.centre @ q)
        hv = self.has_vector
        fused[hv] = self.alpha * fused[hv] + (1 - self.alpha) * _scaled(cosine[hv])
        items = best_k(fused, k)
        parts = {i: (float(lexical[i]), float(cosine[i]) if hv[i] else None) for i, _ in items}
        return Ranking(items, scorer=self.name, parts=parts)
