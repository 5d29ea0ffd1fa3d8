"""The retrieval benchmark script runs on any catalog of the right shape; the real data builds."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, fresh_subnet
from test_build import synthetic_catalog

DATA = Path(os.environ.get("TOOLDNS_DATA", ROOT.parent / "shared" / "data" / "toolret"))


def test_bench_retrieval_on_a_small_catalog(tmp_path):
    tools = synthetic_catalog(12)
    (tmp_path / "s.json").write_text(json.dumps(tools))
    queries = [{"id": "q1", "query": "song lyrics of an artist", "correct_tools": [{"id": "music_3"}, {"id": "music_4"}]},
               {"id": "q2", "query": "stock dividend and quote", "correct_tools": [{"id": "finance_0"}]},
               {"id": "q3", "query": "nothing related at all", "correct_tools": [{"id": "maps_1"}]}]
    (tmp_path / "q.json").write_text(json.dumps(queries))
    subnet = fresh_subnet()
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_retrieval.py"), "--services", str(tmp_path / "s.json"),
                          "--queries", str(tmp_path / "q.json"), "--k", "2", "--ks", "1,2", "--json", str(tmp_path / "r.json"),
                          "--subnet", ".".join(subnet.split(".")[:2]), "--port", "0", "--timeout", "10"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads((tmp_path / "r.json").read_text())
    for key in ("hr@1", "hr@5", "hr@10", "recall@10", "mrr", "docs_scored_fraction", "p50_ms", "p99_ms",
                "queries_per_resolution", "bytes_per_resolution"):
        assert key in result, key
    assert set(result["flat_bm25"]) >= {"hr@10", "recall@10"}
    assert 0 < result["hr@10"] <= 1 and 0 < result["docs_scored_fraction"] <= 1
    assert result["queries_per_resolution"] >= 1 and result["failures"] == 0
    assert (tmp_path / "r.md").read_text().startswith("# ToolDNS retrieval benchmark")
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.skipif(not (DATA / "services.en.json").exists(), reason=f"benchmark data not found at {DATA}")
def test_real_catalog_builds_completely(tmp_path):
    from tooldns.building.build import build
    from tooldns.serving.tree import load_tree

    report = build([DATA / "services.en.json"], tmp_path / "z")
    assert report.tools_in_catalog == 1839 and report.placements >= 1839
    assert report.depth <= 4 and report.warnings == []
    mapping = json.loads((tmp_path / "z" / "catalog-map.json").read_text())
    assert len(mapping) == 1839 and all(mapping.values())
    root = next(s.zone for s in load_tree(tmp_path / "z") if s.zone.origin == "tools.")
    assert 2 <= len(root.children) <= 100  # wide and shallow: one level of leaves of about 20 tools
    assert report.depth == 2 and 10 <= report.leaf_sizes["median"] <= 40


def test_bench_retrieval_with_the_llm_scorer(tmp_path):
    """The benchmark accepts the LLM scorer and reports LLM calls and prompt tokens per resolution."""
    from fake_openai import FakeLLM

    fake = FakeLLM()
    try:
        (tmp_path / "s.json").write_text(json.dumps(synthetic_catalog(12)))
        queries = [{"id": "q1", "query": "song lyrics of an artist album", "correct_tools": [{"id": "music_3"}]},
                   {"id": "q2", "query": "stock dividend quote", "correct_tools": [{"id": "finance_0"}]}]
        (tmp_path / "q.json").write_text(json.dumps(queries))
        subnet = fresh_subnet()
        out = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_retrieval.py"),
                              "--services", str(tmp_path / "s.json"), "--queries", str(tmp_path / "q.json"),
                              "--k", "2", "--ks", "2", "--json", str(tmp_path / "r.json"), "--port", "0",
                              "--subnet", ".".join(subnet.split(".")[:2]), "--scorer", "llm",
                              "--llm-model", "fake", "--llm-base-url", fake.base_url,
                              # generous (the bench waits 3x the budget for a reply): a loaded machine
                              # must not turn the fake's answers into fallbacks
                              "--llm-budget-ms", "30000"],
                             capture_output=True, text=True, timeout=300, env={**os.environ, "OPENAI_API_KEY": "t"})
        assert out.returncode == 0, out.stderr[-3000:]
        result = json.loads((tmp_path / "r.json").read_text())
        assert result["scorer"] == "llm"
        assert result["llm_calls_per_resolution"] > 0 and result["llm_prompt_tokens_per_resolution"] > 0
        assert result["llm_fallbacks_per_resolution"] == 0
        assert result["hr@10"] > 0
        assert "LLM calls / prompt tokens" in (tmp_path / "r.md").read_text()
    finally:
        fake.close()
