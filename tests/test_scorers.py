"""Scorers: BM25 agrees with bm25s (Lucene variant), ranks tiny corpora, registry by name."""

from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from tooldns.scoring.bm25 import BM25, CorpusStats
from tooldns.exceptions import ScorerError
from tooldns.scoring.registry import make_scorer, scorer_names
from tooldns.scoring.tokenize import STOPWORDS, tokenize

DOCS = [
    "Historical weather archive: past temperature and rainfall observations",
    "Weather forecast for tomorrow and the next week",
    "Stock market quotes and exchange rates",
    "Send a message to a Slack channel",
    "Geocode an address into coordinates, weather of the place not included",
]


def test_matches_bm25s_lucene():
    bm25s = pytest.importorskip("bm25s")
    tokens = [tokenize(d) for d in DOCS]
    ref = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    ref.index(tokens, show_progress=False)
    ours = BM25(tokens=tokens, k1=1.5, b=0.75)
    for query in ["historical weather", "weather", "slack message", "exchange rates stock", "nothing matches"]:
        q = tokenize(query)
        expected = list(ref.get_scores(q))
        assert ours.scores_tokens(q) == pytest.approx(expected, rel=1e-5, abs=1e-6), query


@pytest.mark.parametrize("docs", [["weather forecast"], ["weather forecast", "stock quotes"]])
def test_tiny_corpora_still_rank(docs):
    # rank_bm25's BM25Okapi scores everything 0 on two documents; this idf never does
    s = make_scorer("bm25", docs)
    items = s.rank("weather", 2).items
    assert items[0] == (0, pytest.approx(items[0][1]))
    assert items[0][1] > 0
    if len(docs) == 2:
        assert items[1][1] == 0


def test_rank_orders_and_truncates():
    s = make_scorer("bm25", DOCS)
    items = s.rank("weather forecast tomorrow", 2).items
    assert [i for i, _ in items] == [1, 0] or [i for i, _ in items][0] == 1
    assert len(items) == 2 and items[0][1] >= items[1][1]


def test_global_stats_make_scores_comparable():
    """The same document scores the same in two zones when both carry the corpus statistics."""
    all_tokens = [tokenize(d) for d in DOCS]
    stats = CorpusStats.from_tokens(all_tokens)
    zone_a = BM25(DOCS[:2], stats=stats)
    zone_b = BM25(DOCS[1:], stats=stats)
    flat = BM25(DOCS)
    q = "weather forecast"
    assert zone_a.scores(q)[1] == pytest.approx(zone_b.scores(q)[0])
    assert zone_a.scores(q)[1] == pytest.approx(flat.scores(q)[1])
    # without the shared statistics they differ
    assert BM25(DOCS[:2]).scores(q)[1] != pytest.approx(BM25(DOCS[1:]).scores(q)[0])


def test_restricted_stats_keep_only_needed_terms():
    stats = CorpusStats.from_tokens([tokenize(d) for d in DOCS])
    small = stats.restricted({"weather", "nope"})
    assert small.df == {"weather": stats.df["weather"]} and small.n_docs == len(DOCS)


def test_unknown_scorer_lists_valid_names():
    with pytest.raises(ScorerError, match="valid names: .*bm25"):
        make_scorer("tfidf", DOCS)
    assert "bm25" in scorer_names()


def test_bad_options():
    with pytest.raises(ScorerError):
        make_scorer("bm25", DOCS, k1=-1)
    with pytest.raises(ScorerError):
        make_scorer("bm25", DOCS, colour="red")


def test_tokenizer_scripts():
    assert tokenize("getHistoricalWeather for Hong Kong") == ["get", "historical", "weather", "hong", "kong"]
    assert tokenize("天气预报") == ["天", "气", "预", "报", "天气", "气预", "预报"]
    assert tokenize("天 weather_forecasts") == ["天", "weather", "forecast"]
    assert tokenize("MP3文件 2023年") == ["mp3", "文", "件", "文件", "2023", "年"]


def _regex_tokens(text):
    """tokenize's way for any script: the regular expression's words, each worked out alone."""
    from tooldns.scoring.tokenize import _TOKEN_RE, _word_tokens

    return [term for word in _TOKEN_RE.findall(text) for term in _word_tokens(word)]


def test_separators_outside_ascii_are_those_of_the_regular_expression():
    """as_ascii spaces out exactly the characters outside ASCII that the tokenizer's regular expression
    splits words on: checked over every code point."""
    from tooldns.scoring.tokenize import _NON_ASCII_SEPARATOR, _TOKEN_RE

    differ = [c for c in range(0x80, 0x110000) if not 0xD800 <= c < 0xE000
              and bool(_NON_ASCII_SEPARATOR.match(chr(c))) == bool(_TOKEN_RE.match(chr(c)))]
    assert differ == []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["Here", "I", "d", "getWeather", "forecasts", "caf\u00e9", "\u5929\u6c14", "2023",
                                 " ", "\u2019", "\u201c", "\u201d", "\u2014", "\u2026", "\u00a0", "_", ",", "\u30fb",
                                 "\U0001f600", "\u00b2"]), max_size=12).map("".join))
def test_text_ascii_but_for_separators_splits_as_the_regular_expression_does(text):
    """Text whose only characters outside ASCII separate words (a model's curly quotes and dashes) takes
    the ASCII path (tokenize.as_ascii), with the terms of the regular expression's path."""
    from tooldns.scoring.tokenize import as_ascii

    assert tokenize(text) == _regex_tokens(text)
    plain = as_ascii(text)
    assert (plain is None) == any(not c.isascii() and (c.isalnum() or c == "\u30fb") for c in text)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="abcdeiorsuyzAEIRSXYZ0123456789", min_size=1, max_size=14)
       | st.sampled_from(sorted(STOPWORDS)))
def test_a_word_never_seen_has_the_terms_of_the_regular_expression_path(word):
    """An ASCII word not seen before is worked out without the regular expression when it has no
    capital letter (nothing to split: most new words, numbers and lower-case words); with the same
    terms, stop words and folded plurals ("queries", "forecasts") included."""
    from tooldns.scoring.tokenize import _ASCII_WORDS, _word_tokens

    _ASCII_WORDS.pop(word.encode(), None)
    assert _ASCII_WORDS[word.encode()] == " ".join(_word_tokens(word))
    for text in (word + "s", word + "ies", word.lower() + "us"):
        _ASCII_WORDS.pop(text.encode(), None)
        assert _ASCII_WORDS[text.encode()] == " ".join(_word_tokens(text))


@pytest.mark.parametrize("way", ["dict", "table"])
def test_word_cache_ranks_as_the_tokenizer_does(monkeypatch, way):
    """An index asked often keeps each word's posting lists (tooldns.scoring.bm25._WordLists: a dict, or
    compiled a table in C, tooldns.scoring.wordtable); its rankings stay those of tokenizing every query,
    and all caches together keep at most bm25.WORDS' limit of words."""
    import tooldns.scoring.bm25 as bm25

    if way == "dict":
        monkeypatch.setattr(bm25, "WordTable", None)
    elif bm25.WordTable is None:
        pytest.skip("tooldns.scoring.wordtable runs compiled only (installed without TOOLDNS_COMPILE=1, or TOOLDNS_PURE set)")

    docs = ["getHistoricalWeather for Hong Kong", "stock quotes and prices", "weather forecasts by city",
            "convert currencies", "translate text between languages"]
    queries = ["historical weather in Hong Kong", "Stock prices, quotes!", "getWeather forecasts", "the of and",
               "currency convert translate languages text", "天气 weather",
               "I\u2019d like \u201cweather\u201d\u2026 for Hong\u00a0Kong \u2014 currencies", "caf\u00e9 weather\u2019s",
               "zzz unknown words"]
    plain = BM25(docs)
    fresh = [plain.rank(q, 5) for q in queries]
    assert plain._words is None  # asked fewer than WORDS_AFTER times: no cache
    monkeypatch.setattr(bm25.WORDS, "limit", 6)
    cached = BM25(docs)
    for _ in range(bm25.WORDS_AFTER):
        cached.rank("weather", 1)
    assert cached._words is not None
    assert [cached.rank(q, 5) for q in queries] == fresh  # every word worked out afresh or from the cache
    assert [cached.rank(q, 5) for q in queries] == fresh  # and again, over a budget of 6 words spent many times
    assert bm25.WORDS.spent <= bm25.WORDS.limit
    kept = cached._words
    if way == "dict":  # words without postings are kept apart (sifted out first), and count towards the budget too
        assert kept.table is None
        assert b"zzz" in kept.dead and b"zzz" not in kept
        assert len(kept) + len(kept.dead) <= bm25.WORDS.limit
        kept.clear()
        assert not kept.dead
    else:  # every word in the table, those without postings too
        assert not kept and not kept.dead and 0 < len(kept.table) <= bm25.WORDS.limit
        kept.clear()
        assert len(kept.table) == 0
    other = BM25(["weather"], tokenizer=str.split)  # a tokenizer of its own: never cached
    for _ in range(bm25.WORDS_AFTER + 1):
        other.rank("weather", 1)
    assert other._words is None


@pytest.mark.parametrize("dense_docs", [1024, 0])  # dense rows summed, or postings added by document
def test_many_postings_rank_as_the_plain_sums(monkeypatch, dense_docs):
    """Queries touching more than MANY_POSTINGS postings are added with numpy (BM25._rank_many): the
    same best documents, scores and ties as the plain sums of scores(), with or without the word cache,
    whichever way numpy adds them."""
    import tooldns.scoring.bm25 as bm25

    monkeypatch.setattr(bm25, "DENSE_DOCS", dense_docs)

    words = ["weather", "stock", "price", "city", "forecast", "map", "route", "news", "sport", "music"]
    # word w in the documents whose number has bit w set (about half), some twice: many ties, many postings
    docs = [" ".join(w for b, w in enumerate(words) if i >> b & 1 for _ in range(1 + (i + b) % 2)) or "empty"
            for i in range(400)]
    queries = ["weather price city", "news sport music map route", "weather weather forecast", "stock"]
    index = BM25(docs)
    for round_ in range(2):  # the second round from the word cache
        for query in queries:
            assert sum(len(index._postings.get(t, ())) for t in tokenize(query)) > bm25.MANY_POSTINGS
            scores = index.scores(query)
            expected = sorted(range(len(docs)), key=lambda i: (-scores[i], i))[:10]
            assert index.rank(query, 10) == [(i, scores[i]) for i in expected]
        for _ in range(bm25.WORDS_AFTER):
            index.rank("weather", 1)
    assert index._words is not None


@pytest.mark.parametrize("dense_docs", [1024, 0])
def test_score_array_is_the_plain_sums_of_every_document(monkeypatch, dense_docs):
    """BM25.score_array (what the hybrid scorer fuses) holds exactly the scores() of every document, few
    postings or many, new words, repeated ones and non-ASCII text, with or without the word cache."""
    import tooldns.scoring.bm25 as bm25

    monkeypatch.setattr(bm25, "DENSE_DOCS", dense_docs)

    words = ["weather", "stock", "price", "city", "forecast", "map", "route", "news", "sport", "music"]
    docs = [" ".join(w for b, w in enumerate(words) if i >> b & 1 for _ in range(1 + (i + b) % 2)) or "empty"
            for i in range(300)] + ["天气 预报 weather", "getHistoricalWeather"]
    queries = ["weather price city", "weather weather forecast", "zzz unknown", "", "天气 weather",
               "historical weather", "music", "news sport music map route stock"]
    index = BM25(docs)
    for _ in range(2):  # the second time from the word cache
        for query in queries:
            got = index.score_array(query)
            assert got.dtype.kind == "f" and got.tolist() == index.scores(query), query
        for _ in range(bm25.WORDS_AFTER):
            index.rank("weather", 1)
    assert index._words is not None


def test_dense_rows_stay_within_their_budget_and_rank_alike(monkeypatch):
    """Indexes of up to DENSE_DOCS documents sum a query's dense rows (tooldns.scoring.bm25._Rows); all of
    them together hold rows within the ROWS budget: past it every index forgets its rows and makes them
    again as queries need them, the rankings those of the plain sums throughout."""
    import tooldns.scoring.bm25 as bm25

    monkeypatch.setattr(bm25, "best_sums", None)  # numpy's way (from source): compiled, rank() adds in C
    words = ["weather", "stock", "price", "city", "forecast", "map", "route", "news", "sport", "music"]
    docs = [" ".join(w for b, w in enumerate(words) if i >> b & 1) or "empty" for i in range(300)]
    queries = ["weather price city", "news sport music map route", "weather weather forecast", "stock map"]
    first, second = BM25(docs), BM25(docs)
    expected = {}
    for query in queries:
        scores = first.scores(query)
        expected[query] = [(i, scores[i]) for i in sorted(range(len(docs)), key=lambda i: (-scores[i], i))[:10]]
    row = 8 * len(docs)
    monkeypatch.setattr(bm25.ROWS, "limit", 4 * row)
    monkeypatch.setattr(bm25.ROWS, "spent", 0)
    held = []
    for _ in range(3):
        for index in (first, second):
            for query in queries:
                assert index.rank(query, 10) == expected[query], query
                given = [p for ix in (first, second) if ix._rows for p in ix._rows.given]
                assert all(p.row >= 0 for p in given) and bm25.ROWS.spent < 4 * row + 5 * row
                held.append(len(given))
    assert max(held) <= 4 + 5 and min(held) < max(held)  # one query's rows over the limit at most; forgotten
    assert second._rows.matrix is not None  # the index asked last holds the rows it needed


@pytest.mark.parametrize("way", ["numpy", "c"])
def test_dense_rows_rank_alike_from_many_threads(monkeypatch, way):
    """Zones whose scorer may block rank in a pool of threads, and spending the ROWS budget in one
    thread empties every index's rows: threads ranking over two indexes with a budget of a few rows,
    switching as often as the interpreter lets them, all get the plain sums' rankings. The same with
    the C loops of tooldns.scoring.sums, which packs each posting list on first use."""
    import sys
    import threading

    import tooldns.scoring.bm25 as bm25

    if way == "numpy":
        monkeypatch.setattr(bm25, "best_sums", None)
    elif bm25.best_sums is None:
        pytest.skip("tooldns.scoring.sums runs compiled only (installed without TOOLDNS_COMPILE=1, or TOOLDNS_PURE set)")

    words = ["weather", "stock", "price", "city", "forecast", "map", "route", "news", "sport", "music"]
    docs = [" ".join(w for b, w in enumerate(words) if i >> b & 1) or "empty" for i in range(300)]
    queries = ["weather price city", "news sport music map route", "weather weather forecast", "stock map"]
    indexes = [BM25(docs), BM25(docs)]
    expected = {}
    for query in queries:
        scores = indexes[0].scores(query)
        expected[query] = [(i, scores[i]) for i in sorted(range(len(docs)), key=lambda i: (-scores[i], i))[:10]]
    monkeypatch.setattr(bm25.ROWS, "limit", 3 * 8 * len(docs))
    monkeypatch.setattr(bm25.ROWS, "spent", 0)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    wrong: list = []

    def ask(seed: int) -> None:
        for n in range(300):
            query = queries[(seed + n) % len(queries)]
            got = indexes[(seed * 7 + n) % 2].rank(query, 10)
            if got != expected[query]:
                wrong.append((query, got))

    try:
        threads = [threading.Thread(target=ask, args=(seed,)) for seed in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert not wrong, wrong[:2]


def _faceted_docs(n_docs: int, seed: int, common: int = 0):
    """*n_docs* documents, each with 1 to 5 facets of words from a small vocabulary (and the word
    "common" in *common* of every facet, so that a query of it touches many postings)."""
    import random

    from tooldns.scoring.tokenize import Tokenized

    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(40)]
    docs = []
    for _ in range(n_docs):
        facets = []
        for _ in range(rng.randint(1, 5)):
            counts = {w: rng.randint(1, 3) for w in rng.sample(vocab, rng.randint(1, 6))}
            if common:
                counts["common"] = common
            facets.append(counts)
        total: dict[str, int] = {}
        for f in facets:
            for w, c in f.items():
                total[w] = total.get(w, 0) + c
        docs.append(Tokenized(" ".join(total), total, tuple(facets)))
    return docs


@pytest.mark.parametrize("common", [0, 2])  # 2: "common" touches every facet, through numpy's path
def test_bm25_ranks_documents_with_facets_by_their_best_facet(common):
    """Every document with facets: each ranks by its best facet's BM25 (over the facets, with
    ``facet_k1``), ties in document order, then documents that score 0 in order."""
    from tooldns.scoring.bm25 import MANY_POSTINGS
    from tooldns.scoring.tokenize import Tokenized

    docs = _faceted_docs(60, seed=common, common=common)
    scorer = make_scorer("bm25", docs, k1=10.0, facet_k1=1.2)
    facets = BM25([Tokenized(" ", f) for d in docs for f in d.facets], k1=1.2)
    owners = [i for i, d in enumerate(docs) for _ in d.facets]
    if common:
        assert len(facets._lists("common w1")[0]) > MANY_POSTINGS
    for query in ("w1", "w2 w3 w4", "common w5", "w7 w7 w8", "nothing here", "common"):
        scores = facets.scores(query)
        best = [0.0] * len(docs)
        for i, s in enumerate(scores):
            best[owners[i]] = max(best[owners[i]], s)
        expected = sorted(range(len(docs)), key=lambda i: (-best[i], i))[:7]
        got = scorer.rank(query, 7).items
        assert [i for i, _ in got] == expected, query
        assert [s for _, s in got] == pytest.approx([best[i] for i in expected])
    assert scorer.rank("w1", 7).items != make_scorer("bm25", [str(d) for d in docs], k1=10.0).rank("w1", 7).items


def test_bm25_uses_facets_only_when_every_document_has_them():
    """One document without facets (a learned summary, a delegation written by hand): the zone ranks
    every child by its whole document, as before facets."""
    docs = _faceted_docs(20, seed=3)
    mixed = [*docs[:-1], str(docs[-1])]
    assert make_scorer("bm25", mixed, k1=10.0).facets is None and make_scorer("hybrid", mixed).facets is None
    for query in ("w1", "w2 w3"):
        assert make_scorer("bm25", mixed, k1=10.0).rank(query, 5).items == BM25(mixed, k1=10.0).rank(query, 5)


def test_facets_of_groups_tools_in_order_within_bounds():
    from tooldns.scoring.bm25 import FACET_SIZE, MAX_FACETS, facets_of

    tools = [[f"t{i}", "shared"] for i in range(10)]
    groups = facets_of(tools)
    assert [sorted(g) for g in groups] == [sorted({f"t{i}" for i in range(a, min(a + FACET_SIZE, 10))} | {"shared"})
                                           for a in range(0, 10, FACET_SIZE)]
    assert sum(groups, Counter()) == Counter(t for tokens in tools for t in tokens)
    most = facets_of([[f"t{i}"] for i in range(FACET_SIZE * MAX_FACETS)])
    assert len(most) == MAX_FACETS and sum(map(len, most)) == FACET_SIZE * MAX_FACETS
    assert facets_of([[f"t{i}"] for i in range(FACET_SIZE * MAX_FACETS + 1)]) == ()  # a large child: none
    assert facets_of([]) == ()


def test_hybrid_ranks_an_intent_without_a_vector_by_facets_as_bm25_does():
    """A zone's hybrid scorer, asked without a usable vector (an intent in a language its model does
    not cover, a client without a model), answers as the bm25 scorer would: by facets."""
    docs = _faceted_docs(30, seed=5)
    for query in ("w1", "w2 w3 w4", "w9 w9", "nothing"):
        assert make_scorer("hybrid", docs).rank(query, 6).items == make_scorer("bm25", docs).rank(query, 6).items


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.5, 3.0]) | st.floats(-5, 5), max_size=60), st.integers(0, 70))
def test_best_k_is_a_stable_sort_of_every_score(scores, k):
    """best_k (numpy sums' ranking, the hybrid scorer's) partitions before it sorts: the same (index,
    score) pairs as sorting every score, best first, ties in index order, many ties or none."""
    import numpy as np

    from tooldns.scoring.bm25 import best_k

    array = np.asarray(scores, dtype=np.float64)
    expected = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]
    assert best_k(array, k) == [(i, scores[i]) for i in expected]
