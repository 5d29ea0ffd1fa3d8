"""Search modes (get_one, get_important, get_all): the walk's settings by hand-made messages, then
the shipped demo tree over real loopback servers, sync and async, and ``tooldns-resolve --mode``."""

import asyncio
import json
import subprocess
import sys

import pytest

from resolver_client import AsyncResolver, Resolver, ResolverError, Walk
from resolver_client.cli import main as resolve_main
from resolver_client.modes import ALL_FLOOR, GET_ALL, GET_IMPORTANT, GET_ONE, MODES, check_mode, settings_for

from conftest import REPLY_TIMEOUT, ROOT as REPO
from test_bench import run_bench
from test_build import synthetic_catalog
from test_walk import ROOT, answer, msg

#: intents of the demo tree, one per domain and a few that ask for several things
INTENTS = ["historical weather Hong Kong", "send a slack message", "typhoon warning signal",
           "search arxiv papers on transformers", "schedule a meeting and email the team",
           "plan a trip: weather forecast, flights route and currency exchange", "python package versions"]


# -- pure: names, settings, the floor --

def test_mode_names_and_errors():
    assert MODES == (GET_ONE, GET_IMPORTANT, GET_ALL) == ("get_one", "get_important", "get_all")
    assert all(check_mode(m) == m for m in MODES)
    for bad in ("get_some", "GET_ONE", "", None, 3):
        with pytest.raises(ResolverError, match="unknown search mode .*get_one, get_important, get_all"):
            check_mode(bad)
    one, important, every = (settings_for(m) for m in MODES)
    assert (one.k, one.leaf_k, one.top) == (1, 1, 1)
    assert (important.k, important.leaf_k, important.top, important.floor) == (3, None, None, None)
    assert min(every.k) > 3 and every.leaf_k > 3 and every.top is None and 0 < every.floor < 1


def test_floor_keeps_tools_near_the_best():
    tools = [("a", "a.example.", 443, 1, 2.0, "A"), ("b", "b.example.", 443, 2, 0.9, "B"),
             ("c", "c.example.", 443, 3, 0.5, "C"), ("d", "d.example.", 443, 4, 0.1, "D")]
    names = {}
    for floor in (None, 0.3, 0.5):
        walk = Walk("anything", k=4, root=ROOT, floor=floor)
        [q] = walk.start()
        walk.take(q, answer(q, tools))
        names[floor] = [t.name for t in walk.result().tools]
    assert names == {None: ["A", "B", "C", "D"], 0.3: ["A", "B"], 0.5: ["A"]}


def test_floor_spares_what_a_walk_of_that_k_finds():
    """get_all's floor keeps a leaf's best floor_spares tools on a path of best floor_spares: get_important's."""
    tools = [("a", "a.example.", 443, 1, 2.0, "A"), ("b", "b.example.", 443, 2, 0.9, "B"),
             ("c", "c.example.", 443, 3, 0.5, "C"), ("d", "d.example.", 443, 4, 0.1, "D")]
    walk = Walk("anything", k=4, root=ROOT, floor=0.3, floor_spares=3)
    [q] = walk.start()
    walk.take(q, answer(q, tools))
    assert [t.name for t in walk.result().tools] == ["A", "B", "C"]


def test_floor_leaves_unscored_tools_alone():
    walk = Walk("anything", k=2, root=ROOT, floor=0.9)
    [q] = walk.start()
    walk.take(q, answer(q, [("a", "a.example.", 443, 1, 0, "A"), ("b", "b.example.", 443, 2, 0, "B")]))
    assert [t.name for t in walk.result().tools] == ["A", "B"]  # nothing scored: no best to measure against


# -- the demo tree over loopback --

def searches(res) -> int:
    """The queries of the walk itself: a resolver's first resolution also asks whether the tree
    publishes a walk (the demo tree does not; tests/test_published_walk.py)."""
    return res.stats.queries - res.stats.plan_queries


@pytest.fixture
def resolver(demo_tree):
    with Resolver(root=demo_tree.root(), timeout=REPLY_TIMEOUT, cache=False) as r:
        yield r


def test_get_important_is_the_default(resolver):
    for intent in INTENTS[:3]:
        default, important, k3 = (resolver.resolve(intent), resolver.resolve(intent, mode=GET_IMPORTANT),
                                  resolver.resolve(intent, k=3))
        assert [t.key for t in default.tools] == [t.key for t in important.tools] == [t.key for t in k3.tools]
        assert searches(default) == searches(important) == searches(k3)


def test_get_one_returns_one_tool_with_no_more_queries(resolver):
    for intent in INTENTS:
        one = resolver.resolve(intent, mode=GET_ONE)
        important = resolver.resolve(intent, mode=GET_IMPORTANT)
        assert len(one.tools) == 1, intent
        assert one.stats.queries <= important.stats.queries, intent
        # K = 1 walks one path of K = 3's walk and takes the best tool of its leaf: one of K = 3's tools
        assert one.tools[0].key in {t.key for t in important.tools}, intent
        assert all(h.tools == [] or len(h.tools) == 1 for h in one.trace)  # every leaf asked for one tool
    # one path down the tree: the root, a domain, a leaf
    assert resolver.resolve("historical weather Hong Kong", mode=GET_ONE).stats.queries == 3


def test_get_all_walks_wider_and_returns_more(resolver):
    """get_all returns every tool the default mode does (the README's "plan a trip: flights, hotel, weather"
    lost one to the floor: 5 tools against 6), and more."""
    wider = 0
    for intent in [*INTENTS, "plan a trip: flights, hotel, weather"]:
        every = resolver.resolve(intent, mode=GET_ALL)
        important = resolver.resolve(intent, mode=GET_IMPORTANT)
        assert every.stats.queries >= important.stats.queries, intent
        best = every.tools[0].score
        # under the floor only a leaf's best three (on a path of best threes): what the default walk finds
        assert all(t.score >= ALL_FLOOR * best or t.rank <= 3 for t in every.tools), intent
        keys, important_keys = {t.key for t in every.tools}, {t.key for t in important.tools}
        assert keys >= important_keys, (intent, important_keys - keys)
        if keys > important_keys:
            wider += 1
    assert wider >= 2  # the wider walk finds relevant tools the default leaves out
    res = resolver.resolve("historical weather Hong Kong", mode=GET_ALL)
    assert {"HKO Historical Climate Data", "Open-Meteo Historical Weather API",
            "HKO Weather Warning Summary"} <= {t.name for t in res.tools}


def test_get_all_asks_larger_k_than_the_default(resolver):
    intent = "plan a trip: weather forecast, flights route and currency exchange"
    every, important = resolver.resolve(intent, mode=GET_ALL), resolver.resolve(intent)
    named = lambda r: sum(len(h.referrals) for h in r.trace)  # noqa: E731
    followed = lambda r: sum(ref.followed for h in r.trace for ref in h.referrals)  # noqa: E731
    assert named(every) > named(important) and followed(every) > followed(important)
    zones = lambda r: {h.zone for h in r.trace}  # noqa: E731
    assert zones(every) > zones(important)  # every zone the default visits, and more


def test_explicit_settings_override_the_mode(resolver):
    intent = "historical weather Hong Kong"
    important = resolver.resolve(intent)
    wide_one = resolver.resolve(intent, mode=GET_ONE, k=3)  # K = 3 walk, still one tool of each leaf and back
    assert searches(wide_one) == searches(important) and len(wide_one.tools) == 1
    assert len(resolver.resolve(intent, mode=GET_ONE, top=3, leaf_k=3).tools) == 3
    assert len(resolver.resolve(intent, mode=GET_ALL, top=2).tools) == 2


def test_async_agrees_with_sync(demo_tree, resolver):
    async def run_all():
        r = AsyncResolver(root=demo_tree.root(), timeout=REPLY_TIMEOUT, cache=False)
        return [await r.resolve(intent, mode=mode) for mode in MODES for intent in INTENTS[:4]]

    sync = [resolver.resolve(intent, mode=mode) for mode in MODES for intent in INTENTS[:4]]
    for a, s in zip(asyncio.run(run_all()), sync):
        assert [t.key for t in a.tools] == [t.key for t in s.tools]
        assert a.stats.queries == s.stats.queries


def test_bad_mode_is_a_resolver_error_before_any_query():
    # a root that would time out: the mode is refused before anything is sent
    with Resolver(root="127.0.0.1:9", timeout=REPLY_TIMEOUT) as r:
        with pytest.raises(ResolverError, match="unknown search mode 'everything'"):
            r.resolve("weather", mode="everything")
    with pytest.raises(ResolverError, match="unknown search mode 'one'"):
        asyncio.run(AsyncResolver(root="127.0.0.1:9", timeout=REPLY_TIMEOUT).resolve("weather", mode="one"))


def test_cli_mode(demo_tree, capsys):
    at = ["--root", "%s:%d" % demo_tree.root(), "--timeout", str(REPLY_TIMEOUT), "--json"]
    runs = {}
    for mode in MODES:
        assert resolve_main(["search arxiv papers on transformers", *at, "--mode", mode]) == 0
        runs[mode] = json.loads(capsys.readouterr().out)
    assert len(runs[GET_ONE]["tools"]) == 1
    assert runs[GET_ONE]["stats"]["queries"] <= runs[GET_IMPORTANT]["stats"]["queries"] <= runs[GET_ALL]["stats"]["queries"]
    assert len(runs[GET_ALL]["tools"]) > len(runs[GET_IMPORTANT]["tools"])
    assert resolve_main(["search arxiv papers", *at, "--mode", GET_ONE, "--top", "2", "--leaf-k", "2"]) == 0
    assert len(json.loads(capsys.readouterr().out)["tools"]) == 2
    with pytest.raises(SystemExit) as exc:
        resolve_main(["weather", *at, "--mode", "get_most"])
    assert exc.value.code == 2 and "get_one" in capsys.readouterr().err


# -- the benchmark, on a tiny catalog (as tests/test_bench.py runs it) --

@pytest.mark.integration
def test_bench_reports_every_mode_in_one_run(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps(synthetic_catalog(12)))
    queries = [{"id": "q1", "query": "song lyrics of an artist", "correct_tools": [{"id": "music_3"}, {"id": "music_4"}]},
               {"id": "q2", "query": "stock dividend and quote", "correct_tools": [{"id": "finance_0"}]},
               {"id": "q3", "query": "rain and wind forecast",
                "correct_tools": [{"id": "weather_0"}, {"id": "weather_1"}, {"id": "weather_3"}]}]
    (tmp_path / "q.json").write_text(json.dumps(queries))
    result = run_bench(tmp_path, "r.json", "--k", "2", "--ks", "2", "--modes", ",".join(MODES))
    modes = result["modes"]
    assert list(modes) == list(MODES)
    for mode, s in modes.items():
        assert s["mode"] == mode and s["failures"] == 0 and s["queries"] == 3
        for key in ("hr@1", "hr@10", "recall@10", "recall@all", "returned", "queries_per_resolution",
                    "bytes_per_resolution", "p50_ms", "mean_ms"):
            assert s[key] >= 0, (mode, key)
        assert s["recall@10"] <= s["recall@all"] <= 1
    one, important, every = (modes[m] for m in MODES)
    assert one["returned"] == 1 and one["hr@1"] == one["hr@10"]
    # get_important's follow-up page (the published walk's) comes on top of its narrower walk
    assert one["queries_per_resolution"] <= important["queries_per_resolution"] - important["pages_per_resolution"] \
        <= every["queries_per_resolution"] - every["pages_per_resolution"]
    assert one["pages_per_resolution"] == every["pages_per_resolution"] == 0  # the other modes keep their own walk
    assert every["returned"] > important["returned"] and every["recall@all"] >= important["recall@all"] > 0
    report = (tmp_path / "r.md").read_text()
    assert "## Search modes" in report and "| get_all |" in report


@pytest.mark.integration
def test_bench_refuses_an_unknown_mode(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "bench" / "bench_retrieval.py"), "--services", "s.json",
                           "--queries", "q.json", "--modes", "get_one,get_many"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and "unknown search mode 'get_many'" in proc.stderr
