"""Catalog to zone tree: checks, the offline and A2X tree builders, and serving what they write."""

import json

import pytest
from hypothesis import given, strategies as st

from tooldns.building.build import build, build_zones
from tooldns.building.catalog import load_catalogs, parse_catalog
from tooldns.exceptions import BuildError
from tooldns.protocol.names import check_label
from tooldns.serving.tree import load_tree
from tooldns.building.trees import AutoTreeBuilder
from fuzzing import examples

THEMES = {
    "weather": ["forecast", "rain", "temperature", "wind", "humidity", "storm"],
    "finance": ["stock", "quote", "dividend", "exchange", "currency", "portfolio"],
    "music": ["song", "album", "artist", "playlist", "lyrics", "chart"],
    "maps": ["route", "geocode", "address", "distance", "directions", "place"],
}


def synthetic_catalog(n_per_theme: int = 30) -> list[dict]:
    tools = []
    for theme, words in THEMES.items():
        for i in range(n_per_theme):
            a, b = words[i % len(words)], words[(i * 5 + 1) % len(words)]
            tools.append({"id": f"{theme}_{i}", "name": f"get{a.title()}{b.title()}{i}",
                          "description": f"{theme.title()} tool {i}: returns the {a} and {b} for a {theme} request.",
                          "metadata": {"inputSchema": {"query": {"type": "string", "description": f"the {a}",
                                                                 "required": True}},
                                       "url": f"https://api.{theme}.example/v1/{a}"}})
    return tools


@pytest.fixture
def catalog_file(tmp_path):
    path = tmp_path / "services.json"
    path.write_text(json.dumps(synthetic_catalog()))
    return path


def test_bad_catalogs_listed_at_once():
    data = [{"id": "a", "name": "A", "description": "x"}, {"id": "a", "name": "again", "description": "y"},
            {"name": "no id", "description": "z"}, "not an object", {"id": "b"}]
    with pytest.raises(BuildError) as info:
        parse_catalog(data, "cat.json")
    text = str(info.value)
    assert "cat.json[1] (id a): duplicate id, first at index 0" in text
    assert "cat.json[2]: missing or empty 'id'" in text
    assert "cat.json[3]: each tool is a JSON object" in text
    assert "cat.json[4] (id b): neither 'name' nor 'description'" in text
    with pytest.raises(BuildError, match="JSON list"):
        parse_catalog({"id": "a"}, "cat.json")


def test_warnings_are_counted_not_dropped():
    cat = parse_catalog([{"id": "a", "name": "Only a name"}, {"id": "b", "description": "only text"},
                         {"id": "c", "name": "C", "description": "d", "metadata": {"inputSchema": 5}}], "c.json")
    assert len(cat.tools) == 3 and len(cat.warnings) == 3
    assert cat.tools[0].description == "Only a name" and cat.tools[1].name == "b"


def test_catalog_files_are_read_entry_by_entry_with_the_same_result(tmp_path):
    """A catalog file is decoded one entry at a time (ijson): the same tools, warnings and errors as the
    whole list decoded at once, and invalid JSON still names its file and line."""
    import tooldns.building.catalog as catalog_module

    assert catalog_module._ijson is not None, "ijson comes with the server extra"
    entries = [{"id": f"t{i}", "name": f"Tool {i}", "description": f"does thing {i} \u00e9t\u00e9 \u2603",
                "metadata": {"inputSchema": {"city": {"type": "string", "description": "a city", "score": 0.5}}}}
               for i in range(300)] + [{"id": "empty", "name": "Only a name"}]
    path = tmp_path / "cat.json"
    path.write_text(json.dumps(entries, indent=1, ensure_ascii=False), encoding="utf-8")
    streamed, whole = load_catalogs([path]), parse_catalog(entries, str(path))
    assert streamed.tools == whole.tools and streamed.warnings == whole.warnings
    assert streamed.entries_read == 301 and streamed.tools[5].parameters == [("city", "string", "a city", False)]
    # a duplicate id late in the file is found as in a list decoded whole
    path.write_text(json.dumps(entries + [{"id": "t7", "name": "again"}]), encoding="utf-8")
    with pytest.raises(BuildError, match=r"\[301\] \(id t7\): duplicate id, first at index 7"):
        load_catalogs([path])
    # broken JSON after many good entries: the file and the line of the fault
    lines = json.dumps(entries, indent=1).splitlines()
    lines.insert(40, "  {oops},")
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(BuildError, match=r"cat\.json:41: not valid JSON"):
        load_catalogs([path])
    # what the streaming parser meets late (bad UTF-8, data after the list) is refused as decoded whole
    good = json.dumps(entries[:50], indent=1).encode()
    for data in (good[:-1] + b',\n{"id": "x", "name": "caf\xe9"}]', good + b"\n[]"):
        path.write_bytes(data)
        with pytest.raises(BuildError, match=r"cat\.json:\d+: not valid JSON"):
            load_catalogs([path])
    path.write_text(json.dumps({"tools": entries}))  # not a list: decoded whole, refused as before
    with pytest.raises(BuildError, match="JSON list of tools, got dict"):
        load_catalogs([path])
    path.write_text("[]")
    assert load_catalogs([path]).tools == []


def test_reading_a_catalog_never_holds_its_whole_decoded_json(tmp_path):
    """Memory, not time: decoded whole, a catalog's JSON takes some 15 times the file's size as Python
    objects; read entry by entry, what is kept is the tools (about twice the file here)."""
    import tracemalloc

    entries = [{"id": f"tool_{i}", "name": f"tool_{i % 97}", "description": " ".join(f"word{(i * j) % 500}"
                for j in range(30)), "metadata": {"inputSchema": {}, "extra": {"peers": [f"p{i}", f"q{i}"]}}}
               for i in range(5000)]
    path = tmp_path / "big.json"
    path.write_text(json.dumps(entries))
    del entries
    tracemalloc.start()
    try:
        catalog = load_catalogs([path])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(catalog.tools) == 5000
    assert peak < 5 * path.stat().st_size, (peak, path.stat().st_size)


def test_catalogs_merge_by_id(tmp_path):
    (tmp_path / "en.json").write_text(json.dumps([{"id": "t1", "name": "Weather", "description": "Weather today"}]))
    (tmp_path / "zh.json").write_text(json.dumps([{"id": "t1", "name": "天气", "description": "今天的天气"}]),
                                      encoding="utf-8")
    cat = load_catalogs([tmp_path / "en.json", tmp_path / "zh.json"])
    assert len(cat.tools) == 1 and cat.tools[0].names == ["Weather", "天气"]
    assert "今天的天气" in cat.tools[0].text() and "Weather today" in cat.tools[0].text()


def test_auto_tree_deterministic_complete_and_dns_safe(catalog_file, tmp_path):
    builder = AutoTreeBuilder(max_children=4, max_leaf=10, max_depth=3)
    r1 = build([catalog_file], tmp_path / "a", builder=builder)
    r2 = build([catalog_file], tmp_path / "b", builder=AutoTreeBuilder(max_children=4, max_leaf=10, max_depth=3))
    files_a = sorted(p.name for p in (tmp_path / "a").glob("*.yaml"))
    assert files_a == sorted(p.name for p in (tmp_path / "b").glob("*.yaml"))
    for name in files_a:
        assert (tmp_path / "a" / name).read_text() == (tmp_path / "b" / name).read_text()
    assert r1.tools_in_catalog == 120 and r1.placements >= 120 and r1.zones > 5
    assert r1.depth <= 4 and r1.leaf_sizes["max"] <= 40
    stores = load_tree(tmp_path / "a")  # what tooldns serve would load
    for s in stores:
        assert len(s.zone.children) <= 4
        for c in s.zone.children:
            check_label(c.label)
    mapping = json.loads((tmp_path / "a" / "catalog-map.json").read_text())
    assert len(mapping) == 120 and all(mapping.values())
    assert r1.__dict__ == {**r2.__dict__, "seconds": r1.seconds, "out": r1.out}


@pytest.mark.integration
def test_built_tree_resolves_over_dns(catalog_file, tmp_path):
    from conftest import REPLY_TIMEOUT, fresh_subnet, start_tree
    from resolver_client import Resolver

    subnet = fresh_subnet()
    build([catalog_file], tmp_path / "z", builder=AutoTreeBuilder(max_children=4, max_leaf=10),
          subnet=".".join(subnet.split(".")[:2]))
    tree = start_tree(tmp_path / "z")
    try:
        with Resolver(root=tree.root(), timeout=REPLY_TIMEOUT, cache=False) as r:
            res = r.resolve("song lyrics for an artist album", k=2)
    finally:
        tree.stop()
    assert res.tools and res.tools[0].id.startswith("music_")
    assert all(t.id for t in res.tools)


def test_global_statistics_make_scores_equal_across_zones(catalog_file, tmp_path):
    from tooldns.building.catalog import load_catalogs
    from tooldns.building.trees import Category

    cat = load_catalogs([catalog_file])
    # the same tool (index 0) in two leaves with different neighbours
    placed = {0, 1, 2, 40, 80, 100}
    root = Category("", "root", tools=[i for i in range(len(cat.tools)) if i not in placed],
                    children=[Category("left", "left", tools=[0, 1, 2]),
                              Category("right", "right", tools=[0, 40, 80, 100])])
    build_zones(cat, root, tmp_path / "z")
    from tooldns.serving.index import ZoneIndex
    from tooldns.zone.zonefile import load_zone

    q = cat.tools[0].description
    scores = []
    for zone in ("left.tools", "right.tools"):
        ix = ZoneIndex(load_zone(tmp_path / "z" / f"{zone}.yaml"))
        candidates = ix.tool_candidates[("http", "tcp")]
        ranking = candidates.scorer.rank(q, 10).items
        scores.append(next(s for i, s in ranking if candidates.entries[i].id == cat.tools[0].id))
    assert scores[0] == pytest.approx(scores[1])


def test_a2x_taxonomy_builder(catalog_file, tmp_path):
    tax = tmp_path / "tax"
    tax.mkdir()
    (tax / "taxonomy.json").write_text(json.dumps({"root": "root", "categories": {
        "root": {"children": ["c1", "c2"], "services": []},
        "c1": {"children": [], "services": [f"weather_{i}" for i in range(30)] + ["ghost_tool"]},
        "c2": {"children": [], "services": [f"music_{i}" for i in range(30)] + ["weather_0"]},
    }}))
    (tax / "class.json").write_text(json.dumps({"c1": {"name": "Weather & Climate", "description": "Weather data"},
                                                "c2": {"name": "Music", "description": "Songs"}}))
    report = build([catalog_file], tmp_path / "z", taxonomy=str(tax))
    assert report.tools_unplaced_by_tree == 60  # finance and maps tools go to the root zone
    assert report.tools_placed_more_than_once == 1  # weather_0
    origins = {s.zone.origin for s in load_tree(tmp_path / "z")}
    assert {"weather-climate.tools.", "music.tools."} <= origins
    root = next(s.zone for s in load_tree(tmp_path / "z") if s.zone.origin == "tools.")
    assert len(root.tools) == 60 and len(root.children) == 2


def test_chinese_catalog_labels_are_dns_safe(tmp_path):
    data = [{"id": f"zh_{i}", "name": f"天气查询{i}" if i < 20 else f"股票行情{i}",
             "description": ("查询城市天气预报和气温" if i < 20 else "查询股票价格和行情走势") + f"，编号{i}"} for i in range(40)]
    (tmp_path / "zh.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    report = build([tmp_path / "zh.json"], tmp_path / "z", builder=AutoTreeBuilder(max_children=2, max_leaf=10))
    assert len(report.warnings) == 40 and "gives no DNS-safe label; labelled from its id (zh-0)" in report.warnings[0]
    stores = load_tree(tmp_path / "z")
    labels = [c.label for s in stores for c in s.zone.children] + [t.label for s in stores for t in s.zone.tools]
    for label in labels:
        check_label(label)
    assert any(label.startswith("xn--") for label in labels)


@pytest.mark.slow
def test_build_cli(catalog_file, tmp_path, capsys):
    from tooldns.cli import main

    assert main(["build", str(catalog_file), "--out", str(tmp_path / "z"), "--max-leaf", "10",
                 "--max-children", "4"]) == 0
    out = capsys.readouterr()
    assert "120 tools (120 catalog entries read)" in out.out and "[build] splitting" in out.err
    # --seed: the same seed makes the same tree; another one every tool still placed (this catalog's
    # categories are so distinct that every seed finds them)
    for seed, name in (("1", "s1"), ("1", "s1b"), ("7", "s7")):
        assert main(["build", str(catalog_file), "--out", str(tmp_path / name), "--max-leaf", "10",
                     "--max-children", "4", "--seed", seed]) == 0
    capsys.readouterr()
    maps = {name: json.loads((tmp_path / name / "catalog-map.json").read_text()) for name in ("s1", "s1b", "s7")}
    assert maps["s1"] == maps["s1b"]
    assert all(maps["s7"][tid] for tid in maps["s7"]) and len(maps["s7"]) == 120
    bad = tmp_path / "bad.json"
    bad.write_text("[{]")
    assert main(["build", str(bad), "--out", str(tmp_path / "y")]) == 1
    assert "bad.json:1: not valid JSON" in capsys.readouterr().err


@pytest.mark.slow
def test_a_catalog_of_one_zone_builds_checks_updates_and_serves(tmp_path, capsys):
    """A catalog small enough for one zone (a leaf root, no children): it failed to build, its
    build-state/ folder never made (only zones with children wrote into it first)."""
    from tooldns.cli import main

    catalog = tmp_path / "few.json"
    tools = [{"id": f"t{i}", "name": f"Tool {i}", "description": f"does thing {i} weather stock"} for i in range(5)]
    catalog.write_text(json.dumps(tools))
    assert main(["build", str(catalog), "--out", str(tmp_path / "z")]) == 0
    assert (tmp_path / "z" / "build-state" / "state.json").is_file() and (tmp_path / "z" / "build-report.json").is_file()
    assert main(["check", str(tmp_path / "z")]) == 0
    catalog.write_text(json.dumps(tools[:4] + [{"id": "t9", "name": "Tool 9", "description": "rain history"}]))
    assert main(["build", str(catalog), "--out", str(tmp_path / "z"), "--update"]) == 0
    [store] = load_tree(tmp_path / "z")
    assert sorted(t.name for t in store.zone.tools) == ["Tool 0", "Tool 1", "Tool 2", "Tool 3", "Tool 9"]
    capsys.readouterr()


@pytest.mark.parametrize("flag, value", [("--subnet", "127"), ("--subnet", "abc"), ("--seed", "-5"), ("--origin", "."),
                                         ("--tool-k1", "-1"), ("--child-b", "2"), ("--prune-ratio", "nan"),
                                         ("--max-leaf", "0"), ("--max-children", "0"), ("--overlap", "inf")])
def test_build_options_out_of_range_are_usage_errors(flag, value, tmp_path, capsys):
    """They made a traceback (--subnet 127, --seed -5), a tree tooldns serve refuses (--origin ., --tool-k1 -1,
    --prune-ratio nan) or were taken as the default (--max-leaf 0)."""
    from tooldns.cli import main

    catalog = tmp_path / "few.json"
    catalog.write_text(json.dumps([{"id": "t0", "name": "Tool", "description": "weather"}]))
    with pytest.raises(SystemExit) as exit_:
        main(["build", str(catalog), "--out", str(tmp_path / "z"), flag, value])
    assert exit_.value.code == 2 and f"argument {flag}: must be" in capsys.readouterr().err
    assert not (tmp_path / "z").exists()


def test_scorer_options_a_zone_would_refuse_are_refused_by_build(tmp_path, capsys):
    from tooldns.cli import main

    catalog = tmp_path / "few.json"
    catalog.write_text(json.dumps([{"id": "t0", "name": "Tool", "description": "weather"}]))
    for options, said in ((["--no-embed", "--scorer-option", "budget_ms=abc"], "bm25 does not take"),
                          (["--embed", "hash", "--scorer-option", "budget_ms=abc"], "hybrid does not take"),
                          (["--scorer", "llm", "--scorer-option", "budget_ms=NaN"], "must be a finite number")):
        assert main(["build", str(catalog), "--out", str(tmp_path / "z"), *options]) != 0
        assert said in capsys.readouterr().err


@pytest.mark.slow
def test_catalog_texts_beyond_what_a_zone_file_holds_are_cut_with_a_warning(tmp_path, capsys):
    """A description of more than 8,192 bytes, a name of more than 256 (cut, said), an id of more than
    1,024 (refused): the built tree is one tooldns check and tooldns serve take."""
    from tooldns.cli import main

    catalog = tmp_path / "big.json"
    catalog.write_text(json.dumps([{"id": "big", "name": "N" * 300, "description": "weather é" * 2000},
                                   {"id": "small", "name": "Small", "description": "stock quotes"}]))
    assert main(["build", str(catalog), "--out", str(tmp_path / "z")]) == 0
    err = capsys.readouterr().err
    assert "description cut to 8192 bytes" in err and "name cut to 256 bytes" in err
    assert main(["check", str(tmp_path / "z")]) == 0
    [store] = load_tree(tmp_path / "z")
    big = next(t for t in store.zone.tools if t.id == "big")
    assert len(big.description.encode()) <= 8192 and big.description.startswith("weather é")
    catalog.write_text(json.dumps([{"id": "x" * 1025, "name": "Long", "description": "weather"}]))
    with pytest.raises(BuildError, match="an id of 1025 bytes; at most 1024"):
        load_catalogs([catalog])


@pytest.mark.parametrize("embed", [None, "hash"])
def test_the_zone_a_leafs_map_is_made_from_is_the_zone_its_file_reads_back(embed, tmp_path, monkeypatch):
    """The processes making leaf maps are handed the zone the build wrote, not its file: that zone must
    be the one a server reads back from the file, whatever the catalog's texts hold (white space a
    zone file's reader strips, line breaks, Unicode separators, CJK)."""
    from tooldns.building.maps import LeafMaps
    from tooldns.zone.limits import ZoneLimits
    from tooldns.zone.zonefile import parse_zone, read_zone_file

    tools = synthetic_catalog(12)
    for i, tool in enumerate(tools):
        schema = tool["metadata"]["inputSchema"]
        schema[" spaced name "] = {"type": " integer ", "description": ["ends in a break\n", " both ends \t",
                                                                       "a\u2028separator", "多行\n描述\n\n"][i % 4]}
        tool["metadata"]["url"] = [" https://api.example/x ", "\thttps://api.example/y\n", "", "ftp://x"][i % 4]
        tool["examples"] = [f"  intent {i}  ", "第二个\n"]
        tool["description"] += ["\n", " \u3000", "\r\n trailing", ""][i % 4]
    (tmp_path / "services.json").write_text(json.dumps(tools, ensure_ascii=False))
    handed, add = [], LeafMaps.add
    monkeypatch.setattr(LeafMaps, "add", lambda self, path, centroids=0, zone=None:
                        handed.append((path, zone)) or add(self, path, centroids, zone))
    build([tmp_path / "services.json"], tmp_path / "z", embed=embed, tree_options=dict(max_children=4, max_leaf=10))
    assert len(handed) >= 4 and all(zone is not None and zone.tools for _, zone in handed)
    for path, zone in handed:
        read = parse_zone(read_zone_file(str(path), ZoneLimits())[0], str(path))
        assert read == zone, path
        assert [t.parameters for t in read.tools] == [t.parameters for t in zone.tools]
    assert len(list((tmp_path / "z" / ".snapshots").glob("*.map"))) == len(handed)


_WORDS = st.sampled_from(["weather", "Weather", "WEATHER", "getWeather", "get_weather", "the", "id", "ID", "x1",
                          "Straße", "STRASSE", "é", "天气", "天气预报", "MP3文件", "forecasts", " ", "  ", "\t", "\n",
                          "\u2028", "\u3000", "-", ",", "", "'s"])
_TEXTS = st.lists(_WORDS, max_size=12).map(" ".join)


@examples(300)
@given(names=st.lists(_TEXTS.filter(str.strip), min_size=1, max_size=3), description=_TEXTS,
       parameters=st.lists(st.tuples(_TEXTS, st.sampled_from(["string", " integer "]), _TEXTS, st.booleans()),
                           max_size=4))
def test_the_terms_read_once_are_those_the_zones_index(names, description, parameters):
    """A build reads each tool's terms once, for the tree and for the zones' statistics: they must be the
    terms a zone indexes of the tool it writes (its text with repeated words capped, tokenized), whatever
    the names, case, white space and scripts."""
    from tooldns.building.build import zone_tool
    from tooldns.building.catalog import CatalogTool, catalog_terms
    from tooldns.scoring.tokenize import tokenize

    tool = CatalogTool(id="t", name=names[0], description=description, parameters=parameters, names=names)
    assert catalog_terms([tool]) == [tuple(tokenize(zone_tool(tool, "x", "http").text()))]


def test_the_terms_of_a_large_catalog_are_read_in_processes_the_same(monkeypatch):
    """From PARALLEL_TERMS tools on, the terms are read in processes of their own, a chunk at a time: the
    same terms in the tools' order as read in one process, each term one string however many tools hold it."""
    from tooldns.building import catalog as catalog_module

    tools = parse_catalog(synthetic_catalog(60)).tools
    monkeypatch.setattr(catalog_module, "PARALLEL_TERMS", 10)
    monkeypatch.setattr(catalog_module, "TERMS_CHUNK", 7)
    told: list[str] = []
    together = catalog_module.catalog_terms(tools, told.append, every=0.0, processes=2)
    alone = catalog_module.catalog_terms(tools, processes=1)
    assert together == alone == [tuple(t.terms()) for t in tools]
    assert told[-1] == f"reading the tools' text: {len(tools)}/{len(tools)}"
    first = {}
    for terms in together + alone:  # read there or here
        for term in terms:
            assert first.setdefault(term, term) is term
    assert len(first) < sum(map(len, together))  # terms shared between tools


def test_the_terms_are_read_in_this_process_when_its_processes_cannot_run(tmp_path):
    """A script without a main guard cannot start processes the forkserver way (each would run the script
    again): the terms are then read in the script's own process, and the build goes on."""
    import subprocess
    import sys

    script = tmp_path / "unguarded.py"
    script.write_text(
        "from tooldns.building import catalog\n"
        "catalog.PARALLEL_TERMS = 10\n"
        "tools = catalog.parse_catalog([{'id': f't{i}', 'name': f'tool{i}', 'description': 'rain rain rain rain'}\n"
        "                               for i in range(40)]).tools\n"
        "terms = catalog.catalog_terms(tools, processes=2)\n"
        "print(len(terms), terms == [tuple(t.terms()) for t in tools], terms[0])\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "40 True ('tool0', 'rain', 'rain', 'rain')"
