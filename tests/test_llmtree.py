"""The LLM-built tree (A2X Algorithm 1) against the local model: end to end, and resumed."""

import json

import pytest
from openai import OpenAI

from fake_openai import FakeLLM
from test_build import synthetic_catalog
from tooldns.building.build import build
from tooldns.building.catalog import load_catalogs
from tooldns.building.llmtree import LLMTreeBuilder
from tooldns.serving.tree import load_tree

pytestmark = pytest.mark.integration  # a fake OpenAI server on loopback


@pytest.fixture
def fake(integration):
    server = FakeLLM()
    yield server
    server.close()


@pytest.fixture
def catalog_file(tmp_path):
    path = tmp_path / "services.json"
    path.write_text(json.dumps(synthetic_catalog(15)))
    return path


def builder(fake, cache_dir, client=None, **kw):
    client = client or OpenAI(base_url=fake.base_url, api_key="t", max_retries=0)
    options = dict(model="fake", cache_dir=cache_dir, workers=4, max_leaf=10, assign_batch=7, client=client)
    options.update(kw)
    return LLMTreeBuilder(**options)


def tree_shape(zonedir):
    return sorted((s.zone.origin, len(s.zone.children), len(s.zone.tools)) for s in load_tree(zonedir))


def test_llm_build_end_to_end_into_servable_zones(fake, catalog_file, tmp_path):
    b = builder(fake, tmp_path / "cache")
    messages = []
    report = build([catalog_file], tmp_path / "z", builder=b, progress=messages.append)
    zones = {s.zone.origin: s.zone for s in load_tree(tmp_path / "z")}
    root = zones["tools."]
    assert {c.label for c in root.children} == {"weather", "finance", "music", "maps"}
    assert report.tools_in_catalog == 60 and report.placements >= 60
    assert report.llm_cost["calls"] == len(fake.requests) > 0 and report.llm_cost["prompt_tokens"] > 0
    tasks = [r["messages"][0]["content"].split("TASK: ")[1] for r in fake.requests]
    assert tasks[:2] == ["design", "validate"] and "assign" in tasks
    assert any("LLM tree done" in m for m in messages)
    mapping = json.loads((tmp_path / "z" / "catalog-map.json").read_text())
    assert all(v for v in mapping.values())
    assert all(owner.endswith("weather.tools.") for owner in mapping["weather_3"])


def test_keyword_path_for_big_nodes(fake, catalog_file, tmp_path):
    b = builder(fake, None, keyword_threshold=20, keyword_batch=25)
    root = b.build(load_catalogs([catalog_file]))
    tasks = [r["messages"][0]["content"].split("TASK: ")[1] for r in fake.requests]
    assert tasks.count("keywords") == 3  # 60 tools in batches of 25
    assert len(root.children) == 4


class InterruptingClient:
    """The real client, interrupted (as by Ctrl-C) at the n-th call."""

    def __init__(self, client, n):
        self.inner, self.n, self.count = client, n, 0
        self.chat = self
        self.completions = self

    def create(self, **kw):
        self.count += 1
        if self.count >= self.n:
            raise KeyboardInterrupt
        return self.inner.chat.completions.create(**kw)


def test_interrupted_build_resumes_without_paying_again(fake, catalog_file, tmp_path):
    full = builder(fake, tmp_path / "cache-full")
    build([catalog_file], tmp_path / "full", builder=full)
    total = full.cost.calls + full.cost.cached_calls  # calls the build asks for

    client = OpenAI(base_url=fake.base_url, api_key="t", max_retries=0)
    first = builder(fake, tmp_path / "cache", client=InterruptingClient(client, 4), workers=1)
    with pytest.raises(KeyboardInterrupt):
        build([catalog_file], tmp_path / "z", builder=first)
    assert first.cost.calls == 3 and len(list((tmp_path / "cache").glob("*.json"))) == 3

    resumed = builder(fake, tmp_path / "cache")
    report = build([catalog_file], tmp_path / "z", builder=resumed)
    assert resumed.cost.cached_calls + resumed.cost.calls == total
    assert resumed.cost.calls == full.cost.calls - 3  # the 3 paid for before the interruption are not paid again
    assert report.llm_cost["cached_calls"] == 3
    assert tree_shape(tmp_path / "z") == tree_shape(tmp_path / "full")


def test_cli_llm_build(fake, catalog_file, tmp_path, capsys, monkeypatch):
    from tooldns.cli import main

    monkeypatch.setenv("OPENAI_API_KEY", "t")
    assert main(["build", str(catalog_file), "--out", str(tmp_path / "z"), "--llm", "--llm-model", "fake",
                 "--llm-base-url", fake.base_url, "--max-leaf", "10", "--scorer", "llm",
                 "--scorer-option", f"base_url={fake.base_url}", "--scorer-option", "budget_ms=500"]) == 0
    out = capsys.readouterr()
    assert "LLM:" in out.out and "calls" in out.out
    assert (tmp_path / "z" / ".llm-cache").is_dir()
    zones = load_tree(tmp_path / "z")
    assert all(s.zone.settings.scorer == "llm" for s in zones)
    assert zones[0].zone.settings.scorer_options["budget_ms"] == 500
    for s in zones:
        s.index.close()
