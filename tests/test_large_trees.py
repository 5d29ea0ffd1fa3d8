"""Trees stay balanced as catalogs grow: leaves near max_leaf, depth growing, no branch over its bound.

The catalogs are made by :mod:`tooldns.building.synth` from the 75 tools of the shipped ``zones/``
tree (a few thousand tools, deterministic, built in seconds). No timing assertions: the
figures at 100,000 tools are in docs/building.md.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from conftest import ZONES
from tooldns.building.catalog import parse_catalog
from tooldns.building.synth import synth_catalog
from tooldns.building.trees import (BALANCE, LEAF_SLACK, LEXICAL_SHAPE, WIDEST_ROOT, AutoTreeBuilder, auto_depth,
                                    auto_shape, best_first, capacity_assign, nearest_of, route_scores)
from tooldns.scoring.bm25 import BM25
from tooldns.scoring.tokenize import tokenize
from tooldns.zone.limits import ZoneLimits
from tooldns.zone.zonefile import load_zone

pytestmark = pytest.mark.slow  # catalogs of thousands of tools, trees built in-process



@pytest.fixture(scope="module")
def sources() -> list[dict]:
    """The shipped tree's tools as catalog entries."""
    out = []
    for path in sorted(ZONES.glob("*.yaml")):
        zone = load_zone(path)
        for tool in zone.tools:
            schema = {p.name: {"type": p.type, "description": p.description} for p in tool.parameters}
            out.append({"id": f"{tool.label}.{zone.origin}", "name": tool.name, "description": tool.description,
                        "metadata": {"inputSchema": schema}})
    assert len(out) >= 50
    return out


@pytest.fixture(scope="module")
def catalogs(sources) -> dict[int, tuple[list[dict], list[dict]]]:
    return {n: synth_catalog(sources, n, seed=7, n_queries=40) for n in (300, 3000)}


def _check_tree(root, n_tools: int, max_leaf: int) -> dict:
    """Every tool placed, every leaf within LEAF_SLACK x max_leaf, no child over BALANCE x its fair share."""
    assert root.all_tools() == set(range(n_tools))
    leaves = [len(c.tools) for c, _ in root.walk() if not c.children]
    assert max(leaves) <= LEAF_SLACK * max_leaf, sorted(leaves)[-5:]
    for node, _ in root.walk():
        if not node.children:
            continue
        assert not node.tools  # the auto tree keeps tools in leaves only
        size, fair = len(node.all_tools()), len(node.all_tools()) / len(node.children)
        for child in node.children:
            assert len(child.all_tools()) <= math.ceil(BALANCE * fair), (node.label, child.label)
        assert sum(len(c.all_tools()) for c in node.children) >= size
    return {"depth": max(d for _, d in root.walk()), "leaves": leaves}


def test_synthetic_catalogs_are_deterministic_unique_and_answerable(sources, catalogs):
    tools, queries = catalogs[300]
    again, again_queries = synth_catalog(sources, 300, seed=7, n_queries=40)
    assert tools == again and queries == again_queries
    assert tools != synth_catalog(sources, 300, seed=8)[0]
    ids = [t["id"] for t in tools]
    assert len(set(ids)) == 300 and len(parse_catalog(tools).tools) == 300
    assert len({(t["name"], t["description"]) for t in tools}) > 250  # recombined, not copied
    assert {t["metadata"]["synth"]["source"] for t in tools} == {s["id"] for s in sources}
    assert len(queries) == 20 and all(q["kind"] == "own" for q in queries)  # no dev queries given
    for q in queries:
        (correct,) = q["correct_tools"]
        assert correct["id"] in ids and q["query"]
        tool = tools[ids.index(correct["id"])]
        assert set(tokenize(q["query"])) <= set(tokenize(f"{tool['name']} {tool['description']}"))


def test_dev_queries_answer_with_every_variant_of_their_source(sources):
    dev = [{"id": "d1", "query": "weather tomorrow", "correct_tools": [{"id": sources[0]["id"]}]}]
    tools, queries = synth_catalog(sources, 400, seed=1, dev_queries=dev, n_queries=4)
    (q,) = [q for q in queries if q["kind"] == "dev"]
    expected = {t["id"] for t in tools if t["metadata"]["synth"]["source"] == sources[0]["id"]}
    assert q["query"] == "weather tomorrow" and {c["id"] for c in q["correct_tools"]} == expected and expected


def test_route_scores_are_bm25_of_the_groups_text():
    from sklearn.feature_extraction.text import CountVectorizer

    texts = ["weather forecast rain", "rain wind storm warning", "stock price quote", "stock dividend history",
             "song lyrics artist", "weather history of a city", "artist albums and songs"]
    counts = CountVectorizer(tokenizer=tokenize, lowercase=False, token_pattern=None, dtype=np.float64)
    x = counts.fit_transform(texts).tocsr()
    labels = np.array([0, 0, 1, 1, 2, 0, 2])
    indices, scores = route_scores(x, labels, 3, k1=10.0, b=0.75, chunk=3)
    tokens = [tokenize(t) for t in texts]
    index = BM25(tokens=[[t for i in np.flatnonzero(labels == g) for t in tokens[i]] for g in range(3)], k1=10.0)
    for row, toks in enumerate(tokens):
        expected = index.scores_tokens(toks)
        assert indices[row][0] == int(np.argmax(expected))
        assert np.allclose(scores[row], [expected[c] for c in indices[row]])


def test_chunks_in_threads_cover_every_row_once_in_order(monkeypatch):
    """A split's chunks on a thread per core: every row in exactly one chunk, results in row order, on one
    core or several; and route_scores gives the same in chunks of any size."""
    import threading

    from tooldns.building import trees

    for cores in (1, 2, 5):
        monkeypatch.setattr(trees.os, "cpu_count", lambda: cores)
        seen, names = [], set()
        got = trees.in_threads(lambda a, b: seen.append((a, b)) or names.add(threading.current_thread().name)
                               or list(range(a, b)), 23, 4)
        assert [r for part in got for r in part] == list(range(23)) and sorted(seen)[-1] == (20, 23)
        if cores == 1:  # no pool: the caller's own thread
            assert names == {threading.current_thread().name}
        assert trees.in_threads(lambda a, b: a, 0, 4) == []
    rng = np.random.default_rng(3)
    x = sparse_counts(rng, 200, 40)
    labels = rng.integers(0, 7, 200)
    whole = route_scores(x, labels, 7, k1=10.0, b=0.75, chunk=200)
    for chunk in (1, 13, 64):
        parts = route_scores(x, labels, 7, k1=10.0, b=0.75, chunk=chunk)
        assert np.array_equal(parts[0], whole[0]) and np.array_equal(parts[1], whole[1])


def sparse_counts(rng, rows: int, terms: int):
    from scipy import sparse

    return sparse.csr_matrix(rng.poisson(0.3, (rows, terms)).astype(np.float64))


def test_best_first_is_a_stable_sort_cut_to_m_ties_and_all():
    rng = np.random.default_rng(7)
    for trial in range(200):
        n, groups, m = int(rng.integers(1, 40)), int(rng.integers(1, 30)), int(rng.integers(1, 10))
        s = rng.integers(0, 3, size=(n, groups)).astype(float)  # many ties, zeros among them
        if trial % 2:
            s = np.where(rng.random((n, groups)) < 0.3, 0.0, rng.random((n, groups)))
        assert (best_first(s, m) == np.argsort(-s, axis=1, kind="stable")[:, :m]).all(), trial


def test_capacity_assign_is_argmax_until_a_group_is_full():
    indices = np.array([[0, 1], [0, 1], [0, 1], [1, 0]])
    scores = np.array([[9.0, 1.0], [5.0, 4.0], [6.0, 1.0], [3.0, 1.0]])
    assert capacity_assign(indices, scores, 2, capacity=4).tolist() == [0, 0, 0, 1]
    # room for two in each: the least decided of the three that prefer group 0 moves
    assert capacity_assign(indices, scores, 2, capacity=2).tolist() == [0, 1, 0, 1]


def test_nearest_centres_a_chunk_at_a_time_are_those_of_the_whole_product():
    """A split of a million tools finds each one's nearest centres a chunk of rows at a time (the whole
    product against two thousand centres would take 8 GB): the same centres, in the same order, ties
    to the lower index, as sorting the whole product."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(50, 6)).astype(np.float32)
    centres = rng.normal(size=(9, 6))
    centres[4] = centres[2]  # a tie: the lower index first
    whole = x @ centres.T
    order = np.argsort(-whole, axis=1, kind="stable")[:, :8]
    for chunk in (7, 50, 64):
        got, sims = nearest_of(x, centres, chunk=chunk)
        assert np.array_equal(got, order) and np.allclose(sims, np.take_along_axis(whole, order, axis=1))
    assert all(row.index(2) < row.index(4) for row in order.tolist())
    assert nearest_of(x[:0], centres)[0].shape == (0, 8)


def test_trees_stay_balanced_and_deepen_as_the_catalog_grows(catalogs):
    shapes = {}
    for n, (tools, _) in catalogs.items():
        catalog = parse_catalog(tools)
        messages: list[str] = []
        root = AutoTreeBuilder(max_children=10, max_leaf=10).build(catalog, messages.append)
        shapes[n] = _check_tree(root, n, 10)
        assert messages[-1].startswith("tree: ")
    assert shapes[3000]["depth"] > shapes[300]["depth"] >= 2
    assert np.median(shapes[3000]["leaves"]) <= 12  # near max_leaf, not a few huge leaves


def test_the_default_shape_keeps_leaves_near_max_leaf(catalogs):
    tools, _ = catalogs[3000]
    builder = AutoTreeBuilder()
    root = builder.build(parse_catalog(tools))
    assert (builder.max_children, builder.max_leaf) == auto_shape(3000) == (123, 25)  # what update() is told
    shape = _check_tree(root, 3000, builder.max_leaf)
    assert shape["depth"] == 1 and len(root.children) <= builder.max_children  # two levels: root and leaves
    sizes = Counter(len(c.tools) for c, _ in root.walk() if not c.children)
    assert sum(v for k, v in sizes.items() if k <= 3) <= len(shape["leaves"]) // 4  # few crumbs
    small = AutoTreeBuilder()
    small.build(parse_catalog(catalogs[300][0]))
    assert (small.max_children, small.max_leaf) == LEXICAL_SHAPE


def test_the_default_shape_is_the_cross_validated_one_then_two_levels_then_deep():
    assert auto_shape(1839) == auto_shape(2000) == LEXICAL_SHAPE  # ToolRet's tree as chosen on it
    ratio = LEXICAL_SHAPE[0] / LEXICAL_SHAPE[1]
    for n in (2001, 5000, 20_000, 100_000, 200_000, 1_000_000, 1_250_000):
        children, leaf = auto_shape(n)
        assert children * leaf >= n and LEXICAL_SHAPE[0] < children <= WIDEST_ROOT and leaf >= LEXICAL_SHAPE[1]
        assert auto_depth(n, children, leaf) == 1  # one level of splitting: a root and its leaves
        assert abs(children / leaf - ratio) <= 0.1 * ratio
    assert auto_shape(100_000) == (708, 142)
    assert auto_shape(1_000_000) == (2237, 448)
    assert auto_shape(1_250_001) == auto_shape(5_000_000) == LEXICAL_SHAPE  # a root of 2,500 at most, then deep
    assert auto_depth(5_000_000, *LEXICAL_SHAPE) == 3
    assert ZoneLimits().max_children >= WIDEST_ROOT  # the root it makes can be served


def test_a_given_max_depth_is_never_exceeded(catalogs):
    tools, _ = catalogs[3000]
    root = AutoTreeBuilder(max_children=10, max_leaf=10, max_depth=1).build(parse_catalog(tools))
    assert max(d for _, d in root.walk()) == 1 and root.all_tools() == set(range(3000))
    assert max(len(c.all_tools()) for c in root.children) <= math.ceil(BALANCE * 3000 / len(root.children))


def test_vector_trees_are_balanced_when_asked(catalogs):
    from tooldns.embedding.registry import make_embedder

    tools, _ = catalogs[3000]
    catalog = parse_catalog(tools)
    vectors = np.asarray(make_embedder("hash").embed([t.text() for t in catalog.tools]), dtype=np.float32)
    root = AutoTreeBuilder(max_children=10, max_leaf=12, vectors=vectors, balance=BALANCE).build(catalog)
    _check_tree(root, 3000, 12)
    # by default as before (ToolRet's hybrid tree unchanged): every tool placed, the planned depth only
    root = AutoTreeBuilder(max_children=10, max_leaf=12, vectors=vectors).build(catalog)
    assert root.all_tools() == set(range(3000)) and max(d for _, d in root.walk()) <= 2


def test_a_vector_tree_of_a_large_catalog_gets_two_levels_from_the_dense_shape(catalogs):
    """Clustered on vectors and told no shape, a catalog beyond the dense shape's 1,920 tools gets a root
    of its leaves, as a lexical tree does (measured at 100,000 tools: 0.750 in two levels against 0.699 in
    three); a smaller one keeps the dense shape chosen on ToolRet."""
    from tooldns.building.trees import DENSE_SHAPE
    from tooldns.embedding.registry import make_embedder

    tools, _ = catalogs[3000]
    catalog = parse_catalog(tools)
    vectors = np.asarray(make_embedder("hash").embed([t.text() for t in catalog.tools]), dtype=np.float32)
    builder = AutoTreeBuilder(vectors=vectors)
    root = builder.build(catalog)
    assert (builder.max_children, builder.max_leaf) == auto_shape(3000, DENSE_SHAPE) == (100, 30)
    assert max(d for _, d in root.walk()) == 1 and root.all_tools() == set(range(3000))
    assert auto_shape(100_000, DENSE_SHAPE) == (578, 174) and auto_shape(1920, DENSE_SHAPE) == DENSE_SHAPE
    small = AutoTreeBuilder(vectors=vectors[:300])
    small.build(parse_catalog(tools[:300]))
    assert (small.max_children, small.max_leaf) == DENSE_SHAPE
