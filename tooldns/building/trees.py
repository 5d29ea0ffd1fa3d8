"""Category trees over a catalog: what ``tooldns build`` turns into zones.

A :class:`Category` holds tools (indices into the catalog) and child categories. Builders are
interchangeable behind one method, ``build(catalog, progress) -> Category``:

* :class:`AutoTreeBuilder`: offline, deterministic, no model and no network. Recursive
  splitting (at most 100 children a node and leaves of about 20 tools up to 2,000 tools, as
  ToolRet's 1,839; beyond, two levels up to 1,250,000 tools, a root of 708 leaves of 142 tools at
  100,000 and of 2,233 leaves of 448 at 1,000,000, before tools are placed twice; then as many levels of 100 children as the
  catalog needs: :func:`auto_shape`) by k-means over TF-IDF vectors of the terms each tool's zone
  will index, then a few rounds of moving each tool to the
  group whose aggregated text BM25 ranks first for the tool's own text: the groups become the
  ones a query about the tool would be routed to (measured: routing recall at the root from 83 %
  to 87 % at K = 3 on ToolRet). Balanced at any size: no group takes more than twice its fair
  share (:func:`capacity_assign`), a node still too big gets one more level, and parents of
  big children rank them with a larger BM25 k1 (:func:`scaled_k1`). A tool whose second group
  scores nearly as well is placed in both. Children get short DNS labels from their most
  distinctive terms. Clustered on vectors (hybrid trees), the same from the dense shape: 80
  children of about 24 tools up to 1,920 tools, then two levels (a root of 578 leaves at 100,000).
* :class:`A2XTreeBuilder`: a given tree in the A2X format (``taxonomy.json`` + ``class.json``).
* An LLM builder (A2X's Algorithm 1) plugs in the same way.

    >>> root = AutoTreeBuilder().build(load_catalogs(["services.en.json"]))
    >>> [c.label for c in root.children][:3]
"""

from __future__ import annotations

import json
import math
import os
import re
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from .catalog import Catalog, catalog_terms
from ..exceptions import BuildError

Progress = Callable[[str], None]

#: place a tool in its second group too when that group is nearly as close: measured on ToolRet,
#: 0.9 of the best BM25 routing score, 0.95 of the best cosine
LEXICAL_OVERLAP = 0.9
DENSE_OVERLAP = 0.95
#: (children a node, tools a leaf): wide and shallow trees cost fewer queries for the same hit rate;
#: chosen by cross-validation on ToolRet's dev queries (docs/building.md). Catalogs larger than
#: their product get a wider two-level tree (:func:`auto_shape`)
LEXICAL_SHAPE = (100, 20)
#: the most children :func:`auto_shape` gives a default lexical tree's root (two levels up to 1,250,000
#: tools; measured at a million, a root of 2,237 leaves planned)
WIDEST_ROOT = 2500
DENSE_SHAPE = (80, 24)
#: no group of a split holds more than this many times its fair share (members / groups): k-means on
#: TF-IDF and BM25 self-routing otherwise grow one giant group (53 % of a 100,000-tool catalog)
BALANCE = 2.0
#: below the planned depth, a node is split once more only when it holds more than this many times
#: max_leaf (and at most EXTRA_LEVELS times): leaves stay near max_leaf however unbalanced a split
LEAF_SLACK = 2.0
EXTRA_LEVELS = 2
#: nodes with more tools are clustered on a sample of this many, every tool then to its nearest centre
KMEANS_SAMPLE = 20_000
#: rows whose nearest centres are found at once (bounds the product matrix of a split)
NEAREST_CHUNK = 8192


def auto_depth(n_tools: int, max_children: int, max_leaf: int) -> int:
    """Levels of splitting a catalog of *n_tools* needs for leaves of about *max_leaf* tools."""
    if n_tools <= max_leaf:
        return 1
    return max(1, round(math.log(n_tools / max_leaf) / math.log(max_children)))


def auto_shape(n_tools: int, base: tuple[int, int] = LEXICAL_SHAPE, widest: int = WIDEST_ROOT) -> tuple[int, int]:
    """(children a node, tools a leaf) of a default tree for a catalog of *n_tools* (*base*: the lexical
    shape, or the dense one for a tree clustered on vectors: measured at 100,000 tools with MiniLM, two
    levels of 575 leaves found 0.750 at 7.9 DNS queries where three levels of 80 found 0.699 at 13.7).

    Up to *base*'s product (2,000 tools) the cross-validated *base* shape. Beyond, two levels:
    a root of ``sqrt(n * children / tools)`` leaves of ``n / children`` tools each, *base*'s
    ratio kept, so that a walk asking K = 5 of the root scores about as many summaries at the root
    as tools in its leaves, until the root would have more than *widest* children (1,250,000
    tools); then *base* again, with as many levels as the catalog needs (:func:`auto_depth`).
    Measured on synthetic catalogs of 20,000, 100,000 and 1,000,000 tools (docs/building.md, "Two
    levels up to 1,250,000 tools"): the two-level tree finds more at a third of the DNS queries of
    the deep one; at a million tools 2.9 points under flat BM25 over 5,826 queries at 8 DNS queries,
    where the deep tree was 4.7 under at 16.5."""
    children, leaf = base
    if n_tools <= children * leaf:
        return base
    wide = math.ceil(math.sqrt(n_tools * children / leaf))
    if wide > widest:
        return base
    return wide, math.ceil(n_tools / wide)


def scaled_k1(k1: float, fair_share: float, max_leaf: int) -> float:
    """BM25 k1 for ranking children of *fair_share* tools each: *k1* for children up to
    ``LEAF_SLACK * max_leaf`` tools, growing in proportion beyond. A child's summary is the text of
    every tool beneath it; with a fixed k1 the term frequencies of a child of a thousand tools
    saturate, and a term one tool of it uses counts nearly as much as one they all use. Measured
    on 100,000 synthetic tools at K = 10: routing recall from 92.5 % to 93.3 %, hit rate@10 from
    0.724 to 0.728, zones visited per resolution from 84 to 63."""
    return k1 * max(1.0, fair_share / (LEAF_SLACK * max_leaf))


def _quiet(_: str) -> None:
    pass


@dataclass
class Category:
    label: str  # DNS label ("" for the root)
    title: str
    description: str = ""
    tools: list[int] = field(default_factory=list)  # catalog indices placed at this node
    children: list["Category"] = field(default_factory=list)
    kind: str = "functional"
    keywords: list[str] = field(default_factory=list)
    #: BM25 k1 this category's zone ranks its children with (None: the build's default)
    child_k1: float | None = None

    def walk(self, depth: int = 0):
        yield self, depth
        for child in self.children:
            yield from child.walk(depth + 1)

    def all_tools(self) -> set[int]:
        out = set(self.tools)
        for child in self.children:
            out |= child.all_tools()
        return out


class TreeBuilder(Protocol):
    def build(self, catalog: Catalog, progress: Progress = _quiet) -> Category: ...


def slug(text: str, limit: int = 40) -> str:
    """A DNS label from text: ASCII letters and digits joined by '-', or '' if none remain."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    ascii_text = re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", ascii_text)
    out = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")
    return out[:limit].strip("-")


def unique_label(base: str, taken: set[str], fallback: str) -> str:
    label = base or fallback
    candidate, n = label, 2
    while candidate in taken:
        suffix = f"-{n}"
        candidate = label[:63 - len(suffix)] + suffix
        n += 1
    taken.add(candidate)
    return candidate


def _idna_label(term: str) -> str:
    try:
        label = term.encode("idna").decode("ascii")
    except UnicodeError:
        return ""
    return label if len(label) <= 63 and re.fullmatch(r"[a-z0-9-]+", label) else ""


#: members x groups scores held at once by each of :func:`route_scores`'s threads (dense float32: 20 MB,
#: and as much again for their order): rows are scored in chunks of this many cells
ROUTE_CELLS = 5_000_000
#: terms x groups up to which :func:`route_scores` may hold the groups' term weights dense (128 MB)
DENSE_ROUTE_CELLS = 16_000_000


def route_scores(counts, labels, n_groups: int, k1: float, b: float, top: int = 8, chunk: int | None = None):
    """BM25 of each group's aggregated text (the sum of its members' term counts, as the parent zone
    will score the child) for each member's own text; the *top* best groups of every member.

    *counts* is the members' term-count matrix (sparse, members x terms), *labels* each member's
    group. The same scores as :class:`~tooldns.scoring.bm25.BM25` over the groups' concatenated
    tokens, as sparse products in single precision (the products read the groups' weights from memory
    over and over: half the bytes, half the time), so a node of a million tools is routed in seconds. Returns
    (indices, scores), members x min(*top*, groups), best first, ties by group order. Members are
    scored *chunk* at a time (default: as many as keep :data:`ROUTE_CELLS` scores), so memory does not
    grow with the number of groups (a root of 1,000 children of 100,000 tools: 2.1 GB peak before).
    """
    import numpy as np
    from scipy import sparse

    n = counts.shape[0]
    counts = counts.astype(np.float32, copy=False)
    chunk = chunk or max(1, ROUTE_CELLS // max(n_groups, 1))
    membership = sparse.csr_matrix((np.ones(n), (labels, np.arange(n))), shape=(n_groups, n))
    tf = (membership @ counts).tocsr()  # in double precision: a term's count over a million tools
    dl = np.asarray(tf.sum(axis=1)).ravel()
    avgdl = dl.mean() or 1.0
    df = np.bincount(tf.indices, minlength=tf.shape[1])
    idf = np.log(1 + (n_groups - df + 0.5) / (df + 0.5))
    rows = np.repeat(np.arange(n_groups), np.diff(tf.indptr))
    weights = tf.copy()
    weights.data = idf[tf.indices] * tf.data / (tf.data + k1 * (1 - b + b * dl[rows] / avgdl))
    by_term = weights.T.tocsr().astype(np.float32)
    if by_term.shape[0] * by_term.shape[1] <= min(DENSE_ROUTE_CELLS, 4 * counts.nnz):
        # members' rows times dense columns: the same sums in the same order as the sparse product
        # (each member's terms in its row's order; a group without the term adds 0.0), at a sixth of
        # its cost when the members' terms outnumber the columns' cells
        by_term = by_term.toarray()
    m = min(top, n_groups)
    indices, scores = np.empty((n, m), dtype=np.int32), np.empty((n, m))

    def score(start: int, stop: int) -> None:
        s = counts[start:stop] @ by_term
        s = s if isinstance(s, np.ndarray) else s.toarray()
        order = best_first(s, m)
        indices[start:stop] = order
        scores[start:stop] = np.take_along_axis(s, order, axis=1)

    in_threads(score, n, chunk)
    return indices, scores


def in_threads(work: Callable[[int, int], object], n: int, chunk: int) -> list:
    """``work(start, stop)`` over *n* rows, *chunk* rows at a time, on as many threads as the machine has
    cores; the results in the order of the rows. The splits' products (scipy's sparse times dense) and
    numpy's partitions and sorts let go of the interpreter while they run, so a million-tool split uses
    every core where it used one (each row's result is the same whichever thread computes it)."""
    from concurrent.futures import ThreadPoolExecutor

    chunk = max(1, chunk)
    starts = range(0, n, chunk)
    workers = min(len(starts), os.cpu_count() or 1)
    if workers <= 1:
        return [work(start, min(start + chunk, n)) for start in starts]
    with ThreadPoolExecutor(workers, thread_name_prefix="split") as pool:
        return list(pool.map(lambda start: work(start, min(start + chunk, n)), starts))


def best_first(s, m: int):
    """The columns of each row's *m* largest values of *s*, largest first, ties by column: exactly
    ``np.argsort(-s, kind="stable")[:, :m]``, at the cost of a partition where a row's m-th value is not
    tied (a full sort of 700 groups a member was a fifth of a 100,000-tool build): each row's *m* picked,
    then sorted by value and column; a row with a value outside them equal to its m-th sorted whole."""
    import numpy as np

    neg = -s
    if s.shape[1] <= m:
        return np.argsort(neg, axis=1, kind="stable")[:, :m]
    top = np.argpartition(neg, m - 1, axis=1)[:, :m]
    values = np.take_along_axis(neg, top, axis=1)
    ranked = np.lexsort((top, values), axis=1)  # by value, then column
    top = np.take_along_axis(top, ranked, axis=1)
    last = np.take_along_axis(values, ranked[:, -1:], axis=1)
    tied = np.flatnonzero(np.count_nonzero(neg <= last, axis=1) > m)
    if tied.size:  # a tie across the m-th place: the full sort decides it by column
        top[tied] = np.argsort(neg[tied], axis=1, kind="stable")[:, :m]
    return top


def capacity_assign(indices, scores, n_groups: int, capacity: int):
    """Each member to its best group that has room (at most *capacity* members a group), the most
    decided members (largest gap between their best and second group) first; a member whose listed
    groups are all full goes to the emptiest group. Without a full group this is plain argmax."""
    import numpy as np

    n = len(indices)
    best = scores[:, 0]
    second = scores[:, 1] if scores.shape[1] > 1 else np.zeros(n)
    margin = np.where(best > 0, (best - second) / np.where(best > 0, best, 1.0), 0.0)
    load = [0] * n_groups
    out = np.empty(n, dtype=np.int64)
    choices = indices.tolist()
    for i in np.lexsort((np.arange(n), -margin)).tolist():
        for c in choices[i]:
            if load[c] < capacity:
                break
        else:
            c = min(range(n_groups), key=load.__getitem__)
        load[c] += 1
        out[i] = c
    return out


def unit_centres(x, labels, k: int):
    """The mean of the rows of *x* of each label below *k* (every one has some), at unit length."""
    import numpy as np

    centres = np.array([x[labels == c].mean(axis=0) for c in range(k)])
    return centres / np.maximum(np.linalg.norm(centres, axis=1, keepdims=True), 1e-12)


def nearest_of(x, centres, n: int = 8, chunk: int = NEAREST_CHUNK):
    """For each row of *x*, its *n* nearest *centres* by dot product, nearest first (ties: the lower
    index, as a stable sort of the whole row), and those products: *chunk* rows at a time, so that a
    million rows against two thousand centres never hold the whole product matrix (8 GB), and each row's
    best *n* picked before they are sorted (sorting whole rows took two minutes there)."""
    import numpy as np

    n = min(n, len(centres))
    orders, sims = [], []
    for start in range(0, len(x), chunk):
        products = x[start:start + chunk] @ centres.T
        top = best_first(products, n)
        orders.append(top)
        sims.append(np.take_along_axis(products, top, axis=1))
    if not orders:
        return np.zeros((0, n), dtype=np.int64), np.zeros((0, n))
    return np.concatenate(orders), np.concatenate(sims)


def kmeans(x, k: int, seed: int = 0, rounds: int = 50, inits: int = 3):
    """Lloyd's k-means of the unit-length rows of *x* (sparse TF-IDF), seeded k-means++ style
    (:func:`_seed_centres`) *inits* times, the best fit kept (as scikit-learn's ``n_init``). Sparse
    products only, over the columns *x* uses: a node of 20,000 tools takes seconds where
    scikit-learn's ``KMeans`` took twenty, and trees built with either score the same within
    noise (ToolRet, offline, five seeds: 0.757 and 0.758 at K = 10). The BM25 refinement that
    follows does the finer work. Returns each row's label, the centres (over the columns *cols*
    of *x*) and *cols*."""
    import numpy as np

    cols = np.unique(x.indices)
    x = x[:, cols].tocsr().astype(np.float32, copy=False)  # single precision, as route_scores
    rng = np.random.default_rng(seed)
    cosines = _Cosines(x)
    best = max((_lloyd(x, k, rng, rounds, cosines) for _ in range(inits)), key=lambda fit: fit[2])
    return best[0], best[1], cols


def _lloyd(x, k: int, rng, rounds: int, cosines: "_Cosines"):
    """One run of Lloyd's algorithm from k-means++ seeds; an emptied group restarts at the row that
    fits its centre worst. Returns labels, centres and the fit (sum of 2 x.c - |c|^2: higher is
    better)."""
    import numpy as np
    from scipy import sparse

    n = x.shape[0]
    centres = _seed_centres(x, k, rng, cosines)
    labels = np.full(n, -1)
    share = -(-n // (os.cpu_count() or 1))  # each core its share of the rows: fewer, larger products
    for _ in range(rounds):
        new = _nearest(x, centres, share)
        if (new == labels).all():
            break
        labels = new
        counts = np.bincount(labels, minlength=k)
        if (counts == 0).any():
            for c, row in zip(np.flatnonzero(counts == 0), np.argsort(_fit(x, centres, labels))):
                labels[row] = c
            counts = np.bincount(labels, minlength=k)
        membership = sparse.csr_matrix((np.ones(n, dtype=x.dtype), (labels, np.arange(n))), shape=(k, n))
        del centres  # the old let go before the new is made: k x columns, dense (2,233 x 60,000: 1 GB)
        centres = (membership @ x).toarray()
        centres /= np.maximum(counts, 1)[:, None]
    return labels, centres, float(_fit(x, centres, labels).sum())


def _fit(x, centres, labels):
    """How well each row fits its centre: 2 x.c - |c|^2 (the squared distance, less |x|^2 = 1)."""
    import numpy as np

    return 2 * (x @ centres.T)[np.arange(x.shape[0]), labels] - (centres ** 2).sum(axis=1)[labels]


def _nearest(x, centres, chunk: int | None = None):
    """Each row's nearest centre (Euclidean: the largest 2 x.c - |c|^2), *chunk* rows at a time (default:
    as many as keep :data:`ROUTE_CELLS` scores), the chunks on a thread per core (:func:`in_threads`)."""
    import numpy as np

    columns = np.ascontiguousarray(centres.T, dtype=x.dtype)  # scipy copies a transposed operand at every product
    squares = (columns ** 2).sum(axis=0)  # once, not once a chunk

    def nearest(start: int, stop: int):
        scores = x[start:stop] @ columns
        scores *= 2
        scores -= squares
        return scores.argmax(axis=1)

    return np.concatenate(in_threads(nearest, x.shape[0], chunk or max(1, ROUTE_CELLS // len(centres))))


#: rows of a node up to which k-means++ seeding reads each row's cosines from the node's whole Gram
#: matrix, made once for all its runs (2,048 rows: 32 MB), rather than one sparse product a centre
GRAM_ROWS = 2048


class _Cosines:
    """Each row's cosine to a given row of *x* (unit-length sparse rows): a column of their Gram matrix
    when the rows are few, else the rows times that row made dense. Either way the same sums, added
    in the same order, as the sparse product ``x @ x[row].T`` (the products of the row's terms in
    each row's term order; a term the given row lacks adds 0.0), at a fraction of its cost."""

    def __init__(self, x) -> None:
        self.x = x
        self.gram = (x @ x.T).toarray() if x.shape[0] <= GRAM_ROWS else None

    def __call__(self, row: int):
        import numpy as np

        if self.gram is not None:
            return self.gram[:, row].copy()
        x = self.x
        dense = np.zeros(x.shape[1], dtype=x.dtype)
        start, end = x.indptr[row], x.indptr[row + 1]
        dense[x.indices[start:end]] = x.data[start:end]
        return x @ dense


def _seed_centres(x, k: int, rng, cosines: _Cosines):
    """k-means++ seeding: each next centre a row drawn with probability growing with the square of
    its distance to the nearest centre so far (rows are unit-length: 2 - 2 cosine)."""
    import numpy as np

    n = x.shape[0]
    chosen = [int(rng.integers(n))]
    best = cosines(chosen[0])
    for _ in range(1, k):
        weights = np.maximum(1.0 - best.astype(np.float64), 0.0) ** 2  # probabilities that sum to 1 closely
        total = weights.sum()
        row = int(rng.choice(n, p=weights / total)) if total > 0 else int(rng.integers(n))
        chosen.append(row)
        best = np.maximum(best, cosines(row))
    return x[chosen].toarray()


def nearest_centres(x, centres, cols, chunk: int | None = None):
    """Label of the nearest of *centres* (over the columns *cols*) for each row of *x*, *chunk* rows at
    a time (default: as many as keep :data:`ROUTE_CELLS` scores), in single precision as :func:`kmeans`."""
    import numpy as np

    return _nearest(x[:, cols].tocsr().astype(np.float32, copy=False), centres, chunk)


def _as_given(terms):
    """A tool's terms as the tree builder was handed them (already tokenized)."""
    return terms


def _compact(labels):
    """Labels renumbered 0.. in order of the groups that are not empty; and their number."""
    import numpy as np

    used, out = np.unique(labels, return_inverse=True)
    return out.ravel(), len(used)


class _Throttle:
    """Progress for the many small splits of a big tree: at most one line every *every* seconds,
    and always for nodes of *big* tools or more."""

    def __init__(self, progress: Progress, every: float = 2.0, big: int = 10_000) -> None:
        self.progress, self.every, self.big, self.last = progress, every, big, 0.0

    def __call__(self, message: str, size: int = 0) -> None:
        now = time.monotonic()
        if size >= self.big or now - self.last >= self.every:
            self.last = now
            self.progress(message)


class AutoTreeBuilder:
    """Offline recursive k-means splitting; deterministic for the same input and parameters.

    With *vectors* (one unit-length embedding per catalog tool, ``tooldns build --embed``) the
    groups are k-means clusters of the vectors, and a tool whose second-nearest centroid is
    nearly as close as its nearest (cosine at least *overlap* times) is placed in both: the tree a
    hybrid scorer routes well. Without, they are clusters of TF-IDF vectors moved towards the group
    BM25 routes each tool's own text to. Either way the text is each tool's *terms* as its zone will
    index them (:func:`~.catalog.catalog_terms`; read here unless the caller, who needs them too, has).

    Balance, at any size: no group of a split holds more than *balance* times its fair share
    (members / groups) after refinement or overlap (:func:`capacity_assign`), the planned depth
    (:func:`auto_depth`, or *max_depth*) sets how many levels every branch gets, and without
    *max_depth* a node still larger than ``LEAF_SLACK * max_leaf`` below it is split once more, so
    leaves stay near *max_leaf* and the tree deepens where the catalog needs it. *balance* None
    means BALANCE for TF-IDF trees and off for vector trees (measured only on ToolRet, where
    balancing the vector tree cost 0.3 point of hit rate: 0.817 against 0.820 at K = 7); a
    number applies to both, ``math.inf`` turns it off.
    """

    def __init__(self, max_children: int | None = None, max_leaf: int | None = None, max_depth: int | None = None,
                 overlap: float | None = None, seed: int = 0, refine: int = 3, k1: float = 10.0, b: float = 0.75,
                 vectors=None, balance: float | None = None, terms: list | None = None) -> None:
        dense = vectors is not None
        balance = balance if balance is not None else (math.inf if dense else BALANCE)
        #: none given: the shape follows the catalog's size (:func:`auto_shape`, from the shape of its kind),
        #: set by build()
        self.sized = max_children is None and max_leaf is None and max_depth is None
        self.max_children = max_children or (DENSE_SHAPE if dense else LEXICAL_SHAPE)[0]
        self.max_leaf = max_leaf or (DENSE_SHAPE if dense else LEXICAL_SHAPE)[1]
        self.max_depth = max_depth  # None: what the catalog's size needs (auto_depth), deeper where still too big
        if self.max_children < 2 or self.max_leaf < 1 or (max_depth is not None and max_depth < 1) or balance < 1:
            raise BuildError("max_children must be at least 2, max_leaf and max_depth at least 1, balance at least 1")
        self.vectors = vectors
        self.terms = terms  # each tool's index terms (catalog_terms), read by the caller; else read here
        self.overlap = overlap if overlap is not None else (DENSE_OVERLAP if vectors is not None else LEXICAL_OVERLAP)
        self.seed, self.refine, self.balance = seed, refine, balance
        self.k1, self.b = k1, b  # as the parent zone will score its children

    def build(self, catalog: Catalog, progress: Progress = _quiet) -> Category:
        import numpy as np

        if not catalog.tools:
            raise BuildError("the catalog has no tools")
        if self.vectors is not None and len(self.vectors) != len(catalog.tools):
            raise BuildError(f"{len(self.vectors)} vectors for {len(catalog.tools)} tools")
        if self.terms is not None and len(self.terms) != len(catalog.tools):
            raise BuildError(f"the terms of {len(self.terms)} tools for {len(catalog.tools)} tools")
        self._np = np
        self._counts, self._x, self._terms = self._vectorize(catalog, progress)
        self._say = _Throttle(progress)
        n = len(catalog.tools)
        if self.sized:
            self.max_children, self.max_leaf = auto_shape(n, DENSE_SHAPE if self.vectors is not None else LEXICAL_SHAPE)
        self._depth = self.max_depth or auto_depth(n, self.max_children, self.max_leaf)
        root = Category("", "All tools", "Every tool of the catalog")
        try:
            self._split(root, list(range(n)), 1)
        finally:  # the matrices are the build's largest objects; writing the zones needs none of them
            self._counts = self._x = self._terms = None
        leaves = sorted(len(c.tools) for c, _ in root.walk() if not c.children)
        progress(f"tree: {sum(1 for _ in root.walk())} categories, depth {max(d for _, d in root.walk()) + 1}, "
                 f"{len(leaves)} leaves of {leaves[0]} to {leaves[-1]} tools (median {leaves[len(leaves) // 2]})")
        return root

    def _vectorize(self, catalog: Catalog, progress: Progress):
        """Term counts and TF-IDF vectors of each tool's index terms (:func:`~.catalog.catalog_terms`: the
        terms its zone will hold), in single precision, and the terms."""
        import numpy as np
        from sklearn.feature_extraction.text import CountVectorizer, TfidfTransformer

        terms = self.terms if self.terms is not None else catalog_terms(catalog.tools, progress)
        counter = CountVectorizer(analyzer=_as_given, dtype=np.float32)
        counts = counter.fit_transform(terms).tocsr()
        x = TfidfTransformer(sublinear_tf=True).fit_transform(counts).tocsr().astype(np.float32, copy=False)
        return counts, x, np.array(counter.get_feature_names_out())

    def _splits(self, size: int, depth: int) -> bool:
        """Whether a node of *size* tools at *depth* is split (into children) rather than a leaf."""
        if size <= self.max_leaf:
            return False
        if depth <= self._depth:
            return True
        if self.max_depth is not None or self.balance == math.inf:  # an asked depth is never exceeded
            return False
        return size > LEAF_SLACK * self.max_leaf and depth <= self._depth + EXTRA_LEVELS

    def _split(self, node: Category, members: list[int], depth: int) -> None:
        if not self._splits(len(members), depth):
            node.tools = sorted(members)
            return
        k = min(self.max_children, max(2, math.ceil(len(members) / self.max_leaf)))
        self._say(f"splitting {node.label or 'the root'} ({len(members)} tools) into up to {k}", len(members))
        groups = self._dense_groups(members, k) if self.vectors is not None else self._lexical_groups(members, k)
        if len(groups) < 2 or max(len(g) for g in groups) >= len(members):
            node.tools = sorted(members)  # nothing to split on: keep them here
            return
        if self.vectors is None:
            node.child_k1 = scaled_k1(self.k1, len(members) / k, self.max_leaf)
        self._add_children(node, members, groups, depth)

    def _capacity(self, size: int, asked: int, groups: int) -> int:
        """Most members a group may take: *balance* times the fair share of the *asked* number of
        groups (k-means may leave some empty: near-duplicate tools), and room for all in *groups*."""
        if self.balance == math.inf:
            return size
        return max(math.ceil(self.balance * size / asked), math.ceil(size / groups))

    def _kmeans(self, x, k: int):
        """k-means labels of the rows of *x*: TF-IDF rows (sparse) with :func:`kmeans`, vectors with
        scikit-learn's; past KMEANS_SAMPLE rows, fitted on a sample and every row given its nearest
        centre. Identical rows (nothing to cluster on) are dealt out in turn."""
        from scipy import sparse

        np, n = self._np, x.shape[0]
        sample = np.sort(np.random.default_rng(self.seed).choice(n, KMEANS_SAMPLE, replace=False)) if n > KMEANS_SAMPLE \
            else None
        if sample is not None:
            self._say(f"k-means of {n} tools into {k} on a sample of {KMEANS_SAMPLE}", n)
        if sparse.issparse(x):
            if sample is None:
                labels = kmeans(x, k, self.seed)[0]
            else:
                labels = nearest_centres(x, *kmeans(x[sample], k, self.seed)[1:])
        else:
            from sklearn.cluster import KMeans

            model = KMeans(n_clusters=k, random_state=self.seed, n_init=3, max_iter=100)
            labels = model.fit_predict(x) if sample is None else model.fit(x[sample]).predict(x)
        if len(set(labels.tolist())) < 2:
            labels = np.arange(n) % k
        return labels

    def _dense_groups(self, members: list[int], k: int) -> list[list[int]]:
        np = self._np
        x = self.vectors[members]
        asked = k
        labels, k = _compact(self._kmeans(x, k))
        order, near = nearest_of(x, unit_centres(x, labels, k))
        capacity = self._capacity(len(members), asked, k)
        if np.bincount(labels).max() > capacity:  # to the nearest centres with room; then their centres again
            labels, k = _compact(capacity_assign(order, near, k, capacity))
            order, near = nearest_of(x, unit_centres(x, labels, k))
        groups = [[] for _ in range(k)]
        for m, lab in zip(members, labels.tolist()):
            groups[lab].append(m)
        if self.overlap < 1.0 and k > 1:  # unbalanced, as before balancing: next to each tool's nearest centre
            own = order[:, 0] if self.balance == math.inf else labels
            self._place_twice(members, groups, own, order, near, capacity)
        return groups

    def _lexical_groups(self, members: list[int], k: int) -> list[list[int]]:
        """k-means groups of TF-IDF vectors, then rounds of moving each tool to the group BM25 routes its
        own text to, within each group's capacity."""
        labels, groups_left = _compact(self._kmeans(self._x[members], k))
        counts = self._counts[members]
        capacity, k1 = self._capacity(len(members), k, groups_left), scaled_k1(self.k1, len(members) / k, self.max_leaf)
        k, routed = groups_left, None
        for round_ in range(self.refine):
            indices, scores = route_scores(counts, labels, k, k1, self.b)
            moved = capacity_assign(indices, scores, k, max(capacity, math.ceil(len(members) / k)))
            self._say(f"  refinement round {round_ + 1}: {int((moved != labels).sum())} of {len(members)} tools "
                      f"moved", len(members))
            if (moved == labels).all():
                routed = indices, scores
                break
            labels, k = _compact(moved)
        groups = [[] for _ in range(k)]
        for m, lab in zip(members, labels.tolist()):
            groups[lab].append(m)
        if self.overlap < 1.0 and k > 1:
            indices, scores = routed or route_scores(counts, labels, k, k1, self.b)
            self._place_twice(members, groups, labels, indices, scores, capacity)
        return groups

    def _place_twice(self, members: list[int], groups: list[list[int]], labels, indices, scores,
                     capacity: int) -> None:
        """Put each member in its best other group too when that scores at least *overlap* of its own
        group's score (its best, but for members moved by capacity), while that group has fewer than
        *capacity* members."""
        load = [len(g) for g in groups]
        for row, member in enumerate(members):
            own = int(labels[row])
            ranked = indices[row].tolist()
            others = [(c, s) for c, s in zip(ranked, scores[row].tolist()) if c != own]
            own_score = scores[row][ranked.index(own)] if own in ranked else 0.0
            if not others or own_score <= 0:
                continue
            second, score = others[0]
            if score > 0 and score >= self.overlap * own_score and load[second] < capacity:
                groups[second].append(member)
                load[second] += 1

    def _add_children(self, node: Category, members: list[int], groups: list[list[int]], depth: int) -> None:
        """A child per group, labelled from its most distinctive terms, split in turn."""
        np = self._np
        taken: set[str] = set()
        parent_mean = np.asarray(self._x[members].mean(axis=0)).ravel()
        for i, group in enumerate(sorted(groups, key=lambda g: (-len(g), min(g)))):
            weights = np.asarray(self._x[group].mean(axis=0)).ravel() - 0.5 * parent_mean
            top = [self._terms[j] for j in np.argsort(-weights)[:12]]
            ascii_terms = [t for t in top if slug(t) == t]
            base = "-".join(ascii_terms[:2])[:40] if ascii_terms else next(filter(None, map(_idna_label, top)), "")
            label = unique_label(base, taken, f"c{i + 1}")
            child = Category(label, ", ".join(top[:3]), "Tools about " + ", ".join(top[:8]), keywords=top[:8])
            node.children.append(child)
            self._split(child, group, depth + 1)


class A2XTreeBuilder:
    """A category tree given in the A2X format; tools it does not place go to the root."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def build(self, catalog: Catalog, progress: Progress = _quiet) -> Category:
        try:
            taxonomy = json.loads((self.directory / "taxonomy.json").read_text(encoding="utf-8"))
            classes = json.loads((self.directory / "class.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise BuildError(f"{self.directory}: cannot read taxonomy.json and class.json: {exc}") from None
        cats = taxonomy.get("categories")
        root_id = taxonomy.get("root", "root")
        if not isinstance(cats, dict) or root_id not in cats:
            raise BuildError(f"{self.directory}/taxonomy.json: needs 'categories' with the root '{root_id}'")
        index = {t.id: i for i, t in enumerate(catalog.tools)}
        self.unknown: list[str] = []

        def make(cat_id: str, label: str, seen: frozenset) -> Category:
            if cat_id in seen:
                raise BuildError(f"taxonomy.json: category {cat_id} is its own ancestor")
            info = classes.get(cat_id, {}) if isinstance(classes, dict) else {}
            node_data = cats.get(cat_id) or {}
            name = info.get("name", cat_id)
            node = Category(label, name, " ".join(filter(None, [info.get("description", ""), info.get("boundary", "")])))
            for sid in node_data.get("services", []):
                if sid in index:
                    node.tools.append(index[sid])
                else:
                    self.unknown.append(sid)
            taken: set[str] = set()
            for child_id in node_data.get("children", []):
                if child_id not in cats:
                    raise BuildError(f"taxonomy.json: category {cat_id} names unknown child {child_id}")
                child_name = (classes.get(child_id) or {}).get("name", child_id)
                child_label = unique_label(slug(child_name, 30), taken, slug(child_id, 30) or "c")
                node.children.append(make(child_id, child_label, seen | {cat_id}))
            return node

        root = make(root_id, "", frozenset())
        placed = root.all_tools()
        missing = [i for i in range(len(catalog.tools)) if i not in placed]
        root.tools.extend(missing)
        self.unplaced = len(missing)
        progress(f"A2X tree: {sum(1 for _ in root.walk())} categories; {len(missing)} tools not in it go to the root; "
                 f"{len(self.unknown)} ids in it are not in the catalog")
        return root
