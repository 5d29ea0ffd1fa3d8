"""BM25 sums in C (tooldns.scoring.sums): the same K best, scores and ties as BM25's own
ways (a dict for few postings, numpy for many), and a clear error for input it cannot read.

The module exists only compiled (TOOLDNS_COMPILE=1 pip install ..., as CI installs); from source
BM25 keeps numpy, and these tests say so by skipping.
"""

import random
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tooldns.scoring.bm25 as bm25
from tooldns.scoring.bm25 import BM25, MANY_POSTINGS, _Posting, best_of
from tooldns.scoring.registry import make_scorer
from tooldns.scoring.tokenize import Tokenized

sums = pytest.importorskip("tooldns.scoring.sums", reason="tooldns.scoring.sums runs compiled only (installed without TOOLDNS_COMPILE=1, or TOOLDNS_PURE set)",
                           exc_type=ImportError)

WEIGHTS = st.one_of(st.sampled_from([0.25, 0.5, 1.0]), st.floats(min_value=1e-6, max_value=50.0))


@st.composite
def postings(draw, n_max=40):
    """(n documents, posting lists of them: ascending documents, weights above 0, repeated weights
    for ties)."""
    n = draw(st.integers(1, n_max))
    lists = []
    for _ in range(draw(st.integers(0, 6))):
        docs = sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n)))
        lists.append(_Posting((d, draw(WEIGHTS)) for d in docs))
    return n, lists


def _by_owner(lists, owners):
    top: dict[int, float] = {}
    for i, score in BM25._touched(lists).items():
        if score > top.get(owners[i], 0.0):
            top[owners[i]] = score
    return top


@settings(max_examples=400, deadline=None)
@given(postings(), st.integers(1, 50))
def test_best_sums_ranks_as_the_dict_of_few_postings_does(case, k):
    n, lists = case
    expected = best_of(BM25._touched(lists), k, n)
    assert sums.best_sums(lists, n, k) == expected
    assert sums.best_sums(lists, n, k) == expected  # again, from the packed lists kept on them


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=30), st.data(), st.integers(1, 40))
def test_best_sums_ranks_documents_by_their_best_facet(facets_each, data, k):
    owners = [doc for doc, count in enumerate(facets_each) for _ in range(count)]
    n = len(owners)
    lists = []
    for _ in range(data.draw(st.integers(0, 6))):
        docs = sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n)))
        lists.append([(d, data.draw(WEIGHTS)) for d in docs])
    expected = best_of(_by_owner(lists, owners), k, len(facets_each))
    assert sums.best_sums(lists, n, k, sums.owner_numbers(owners)) == expected


def test_best_sums_sums_beyond_its_stack_array_as_numpy_does():
    """More documents than fit best_sums' array on the stack (a large leaf): the heap's, same result."""
    rng = random.Random(7)
    n = 5000
    lists = [_Posting((d, rng.choice([0.5, rng.random() + 0.01])) for d in sorted(rng.sample(range(n), 300)))
             for _ in range(4)]
    index = BM25(["x"] * 1)  # any index: _scores_many's bincount way for more than DENSE_DOCS documents
    index.n = n
    assert sums.best_sums(lists, n, 25) == bm25.best_k(index._scores_many(lists), 25)


@pytest.mark.parametrize("args, error", [
    (([[(5, 1.0)]], 3, 2), IndexError),  # a document beyond n
    (([[(-1, 1.0)]], 3, 2), IndexError),
    (([[(0,)]], 3, 2), TypeError),  # not a pair
    (([[(0, "x")]], 3, 2), TypeError),
    (([(0, 1.0)], 3, 2), TypeError),  # a pair where a list of pairs belongs
    (([], 3, 2, b"xx"), ValueError),  # owners of the wrong length
    (([], 3, 2, "owners"), ValueError),
])
def test_best_sums_refuses_what_it_cannot_read(args, error):
    with pytest.raises(error):
        sums.best_sums(*args)


@pytest.mark.parametrize("k", [10**12, sys.maxsize, 2**61])
def test_best_sums_takes_any_k(k):
    """A K beyond the documents is all of them (nothing is allocated for K itself)."""
    lists = [_Posting([(0, 0.5), (3, 1.0)])]
    assert sums.best_sums(lists, 200_000, k)[:3] == [(3, 1.0), (0, 0.5), (1, 0.0)]
    assert len(sums.best_sums(lists, 5, k)) == 5


@pytest.mark.parametrize("owners", [[0, 2, 2], [1, 1, 1], [0, 1, 0], [0, 0, 2]])
def test_best_sums_refuses_owners_out_of_order(owners):
    with pytest.raises(ValueError, match="owners must number the documents"):
        sums.best_sums([[(0, 1.0)]], 3, 2, sums.owner_numbers(owners))


def _zone_docs(n_docs: int, seed: int):
    """Children with facets of a small vocabulary and one word in every facet: a query of it touches
    more than MANY_POSTINGS postings, the way of best_sums."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(50)]
    docs = []
    for _ in range(n_docs):
        facets = tuple({"common": 1, **{w: rng.randint(1, 3) for w in rng.sample(vocab, rng.randint(1, 5))}}
                       for _ in range(rng.randint(1, 6)))
        total: dict[str, int] = {}
        for f in facets:
            for w, c in f.items():
                total[w] = total.get(w, 0) + c
        docs.append(Tokenized(" ".join(total), total, facets))
    return docs


@pytest.mark.parametrize("facets", [True, False])
def test_a_zone_ranks_alike_in_c_and_with_numpy(monkeypatch, facets):
    """A zone of 200 children asked 200 intents that touch many postings: the K best summed in C are
    numpy's, scores and ties included (the numpy way is what a server running from source takes)."""
    docs = _zone_docs(200, seed=1)
    if not facets:
        docs = [str(d) for d in docs]
    rng = random.Random(2)
    intents = [" ".join(["common", *rng.sample([f"w{i}" for i in range(60)], rng.randint(1, 8))]) for _ in range(200)]
    fast = make_scorer("bm25", docs)
    index = fast.facets.index if facets else fast.index
    assert len(index._lists("common")[0]) > MANY_POSTINGS
    ranked = [fast.rank(intent, k).items for intent in intents for k in (1, 7, 30)]
    monkeypatch.setattr(bm25, "best_sums", None)
    slow = make_scorer("bm25", docs)
    assert [slow.rank(intent, k).items for intent in intents for k in (1, 7, 30)] == ranked


@settings(max_examples=400, deadline=None)
@given(postings())
def test_all_sums_are_every_documents_sum_as_the_dict_adds_them(case):
    """all_sums (what BM25.score_array gives the hybrid scorer, compiled) holds the same floats the dict
    of few postings adds, in document order, 0 where no list touches; into a buffer already written to."""
    n, lists = case
    touched = BM25._touched(lists)
    expected = [touched.get(i, 0.0) for i in range(n)]
    out = np.full(n, 7.0)
    assert sums.all_sums(lists, out) is out and out.tolist() == expected
    assert sums.all_sums(lists, np.zeros(n)).tolist() == expected  # again, from the packed lists kept on them


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=30), st.data())
def test_all_sums_gives_each_document_its_best_facet(facets_each, data):
    owners = [doc for doc, count in enumerate(facets_each) for _ in range(count)]
    lists = []
    for _ in range(data.draw(st.integers(0, 6))):
        docs = sorted(data.draw(st.sets(st.integers(0, len(owners) - 1), min_size=1, max_size=len(owners))))
        lists.append([(d, data.draw(WEIGHTS)) for d in docs])
    top = _by_owner(lists, owners)
    got = sums.all_sums(lists, np.zeros(len(facets_each)), sums.owner_numbers(owners))
    assert got.tolist() == [top.get(i, 0.0) for i in range(len(facets_each))]


@pytest.mark.parametrize("args, error", [
    (([[(5, 1.0)]], np.zeros(3)), IndexError),  # a document beyond the buffer
    (([[(-1, 1.0)]], np.zeros(3)), IndexError),
    (([[(0, "x")]], np.zeros(3)), TypeError),
    (([[(0, 1.0)]], np.zeros(3, dtype=np.float32)), ValueError),  # not C doubles
    (([[(0, 1.0)]], np.zeros(3), b"xx"), ValueError),  # owners of the wrong length
    (([[(0, 1.0)]], np.zeros(3), [0, 1, 2]), ValueError),  # owners not numbered
    (([[(0, 1.0)]], np.zeros(3), sums.owner_numbers([0, 0, 1])), ValueError),  # 2 documents, 3 scores
    (([], np.zeros(2), b""), ValueError),  # documents without facets
])
def test_all_sums_refuses_what_it_cannot_read(args, error):
    with pytest.raises(error):
        sums.all_sums(*args)


@pytest.mark.parametrize("facets", [True, False])
def test_score_array_in_c_is_numpys(monkeypatch, facets):
    """A zone of 200 children's score_array (the hybrid scorer's BM25 part), summed in C, holds the
    floats the ways from source give (the dict, numpy's dense rows, the facets' ranking), many postings
    or few."""
    docs = _zone_docs(200, seed=3)
    if not facets:
        docs = [str(d) for d in docs]
    rng = random.Random(4)
    intents = [" ".join(["common", *rng.sample([f"w{i}" for i in range(60)], rng.randint(1, 8))]) for _ in range(100)]
    intents += [f"w{i}" for i in range(60)] + ["", "nothing known"]
    fast = make_scorer("bm25", docs)
    ranker = fast.facets if facets else fast.index
    got = [ranker.score_array(intent).tolist() for intent in intents]
    monkeypatch.setattr(bm25, "all_sums", None)
    monkeypatch.setattr(bm25, "best_sums", None)
    slow = make_scorer("bm25", docs)
    ranker = slow.facets if facets else slow.index
    assert [ranker.score_array(intent).tolist() for intent in intents] == got
