"""Scorers: BM25 agrees with bm25s (Lucene variant), ranks tiny corpora, registry by name."""

import pytest

from tooldns.scoring.bm25 import BM25, CorpusStats
from tooldns.exceptions import ScorerError
from tooldns.scoring.registry import make_scorer, scorer_names
from tooldns.scoring.tokenize import tokenize

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


def test_word_cache_ranks_as_the_tokenizer_does(monkeypatch):
    """An index asked often keeps each word's posting lists (tooldns.scoring.bm25._WordLists); its
    rankings stay those of tokenizing every query, and all caches together keep at most WORD_BUDGET words."""
    import tooldns.scoring.bm25 as bm25

    docs = ["getHistoricalWeather for Hong Kong", "stock quotes and prices", "weather forecasts by city",
            "convert currencies", "translate text between languages"]
    queries = ["historical weather in Hong Kong", "Stock prices, quotes!", "getWeather forecasts", "the of and",
               "currency convert translate languages text", "天气 weather", "zzz unknown words"]
    plain = BM25(docs)
    fresh = [plain.rank(q, 5) for q in queries]
    assert plain._words is None  # asked fewer than WORDS_AFTER times: no cache
    monkeypatch.setattr(bm25, "WORD_BUDGET", 6)
    cached = BM25(docs)
    for _ in range(bm25.WORDS_AFTER):
        cached.rank("weather", 1)
    assert cached._words is not None
    assert [cached.rank(q, 5) for q in queries] == fresh  # every word worked out afresh or from the cache
    assert [cached.rank(q, 5) for q in queries] == fresh  # and again, over a budget of 6 words spent many times
    assert bm25._WordLists.kept <= bm25.WORD_BUDGET
    assert len(cached._words) <= bm25.WORD_BUDGET
    other = BM25(["weather"], tokenizer=str.split)  # a tokenizer of its own: never cached
    for _ in range(bm25.WORDS_AFTER + 1):
        other.rank("weather", 1)
    assert other._words is None


def test_many_postings_rank_as_the_plain_sums():
    """Queries touching more than MANY_POSTINGS postings are added with numpy (BM25._rank_many): the
    same best documents, scores and ties as the plain sums of scores(), with or without the word cache."""
    import tooldns.scoring.bm25 as bm25

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
