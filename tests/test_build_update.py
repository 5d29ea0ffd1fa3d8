"""``tooldns build --update``: a built tree changed in place, only along the changed tools' paths.

Small trees (the 120-tool catalog of ``test_build.py``, leaves of about 10) built in seconds; the
invariants of every updated tree are checked against the zone files themselves (each parent's copy
of a child's summary is the text of every tool beneath it, under the child's serial, and the terms
an update routes by are those of that text); new tools are resolved over real DNS from loopback
servers, one of them running while the update is made. No timing assertions.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from conftest import REPLY_TIMEOUT, fresh_subnet, start_tree, wait_until
from resolver_client import Resolver
from test_build import synthetic_catalog
from tooldns.building.build import build, build_zones, facet_terms, zone_tool
from tooldns.building.catalog import load_catalogs, parse_catalog
from tooldns.building.state import SELF, BuildState, ChildTerms, Totals, drift
from tooldns.building.trees import AutoTreeBuilder, Category
from tooldns.building.update import DRIFT_THRESHOLD, dump_mapping, update, update_tree
from tooldns.exceptions import BuildError
from tooldns.scoring.bm25 import BM25, BM25Scorer, CorpusStats, facets_of
from tooldns.scoring.tokenize import tokenize
from tooldns.serving.loader import SNAPSHOT_DIR, map_path
from tooldns.serving.store import _stamp
from tooldns.serving.tree import load_tree
from tooldns.zone.limits import ZoneLimits
from tooldns.zone.zonefile import dump_zone, header_of, load_zone, parse_zone, write_zone, zone_header

ZEPPELIN = {"id": "zeppelin_1", "name": "getZeppelinAirshipRoute",
            "description": "Zeppelin airship dirigible flight routes between hangars.",
            "metadata": {"inputSchema": {"hangar": {"type": "string", "description": "the hangar to leave from"}}}}


def _builder() -> AutoTreeBuilder:
    return AutoTreeBuilder(max_children=4, max_leaf=10)


def _build(tmp: Path, catalog: list[dict], name: str = "z", subnet: str = "127.0") -> Path:
    (tmp / "c0.json").write_text(json.dumps(catalog))
    build([tmp / "c0.json"], tmp / name, builder=_builder(), subnet=subnet)
    return tmp / name


def _update(tmp: Path, zones: Path, catalog: list[dict], threshold: float = 0.02, **kwargs):
    """An update from *catalog*. One tool moves the statistics of a 120-tool catalog by about 0.6 %,
    past the default threshold (measured on 1,839 tools); tests that are not about the statistics
    use a threshold such a change stays under."""
    path = tmp / "catalog.json"
    path.write_text(json.dumps(catalog))
    return update([path], zones, threshold=threshold, **kwargs)


def _files(zones: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in zones.glob("*.yaml")}


def _check(zones: Path, catalog: list[dict]) -> dict[str, object]:
    """Every invariant an updated tree keeps; the zones by origin."""
    cat = parse_catalog(catalog, "catalog")
    index = {t.id: i for i, t in enumerate(cat.tools)}
    state = BuildState.read(zones)
    loaded = {origin: load_zone(zones / entry.file) for origin, entry in state.zones.items()}
    load_tree(zones)  # what tooldns serve loads: every file valid

    def beneath(origin: str) -> set[str]:
        out = {t.id for t in loaded[origin].tools}
        for child in loaded[origin].children:
            out |= beneath(child.name)
        return out

    for origin, zone in loaded.items():
        assert state.zones[origin].parent == (None if origin == state.origin else origin.split(".", 1)[1])
        if not zone.children:
            continue
        terms = state.read_terms(zones, origin)
        for child in zone.children:
            ids = sorted(beneath(child.name), key=index.__getitem__)
            text = " ".join(zone_tool(cat.tools[index[i]], "x", "http").text() for i in ids)
            assert not child.summary.corpus and dict(child.summary.corpus_terms) == Counter(tokenize(text))
            # the tools beneath in groups, in catalog order, as the build makes them (the bm25 scorer's facets)
            facets = facet_terms([tokenize(zone_tool(cat.tools[index[i]], "x", "http").text()) for i in ids])
            assert list(map(dict, child.summary.facets)) == list(map(dict, facets)), (origin, child.label)
            assert child.summary.serial == loaded[child.name].soa.serial, (origin, child.label)
            assert terms.children[child.label] == child.summary.counts(), (origin, child.label)
            # what the updater routes new tools by: the facets as written
            assert terms.facets.get(child.label, []) == [Counter(dict(f)) for f in facets], (origin, child.label)
            assert child.leaf == (not loaded[child.name].children)
        if zone.tools:
            assert terms.children[SELF] == Counter(t for tool in zone.tools for t in tokenize(tool.text()))
            assert terms.facets.get(SELF, []) == list(facets_of([tokenize(tool.text()) for tool in zone.tools]))
    assert beneath(state.origin) == set(index)
    mapping = json.loads((zones / "catalog-map.json").read_text())
    placed = {}
    for origin, zone in loaded.items():
        for tool in zone.tools:
            placed.setdefault(tool.id, []).append(tool.owner(origin))
    assert {k: sorted(v) for k, v in mapping.items()} == {k: sorted(v) for k, v in placed.items()}
    tokens = [tokenize(zone_tool(t, "x", "http").text()) for t in cat.tools]
    assert dataclasses.asdict(state.current) == dataclasses.asdict(Totals.of(tokens))
    return loaded


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("built")
    return _build(tmp, synthetic_catalog())


@pytest.fixture
def tree(built, tmp_path) -> Path:
    """A copy of the module's built tree to change."""
    return Path(shutil.copytree(built, tmp_path / "z"))


def test_an_unchanged_catalog_rewrites_nothing(tree, tmp_path):
    before = {p.relative_to(tree): p.read_bytes() for p in tree.rglob("*") if p.is_file()}
    report = _update(tmp_path, tree, synthetic_catalog())
    assert report.zones == [] and not (report.added or report.changed or report.removed) and not report.refreshed
    assert {p.relative_to(tree): p.read_bytes() for p in tree.rglob("*") if p.is_file()} == before
    assert "0 added, 0 changed, 0 removed; 0 of 15 zones rewritten" in report.text()


def test_a_new_tool_goes_to_one_leaf_and_only_its_path_is_rewritten(tree, tmp_path):
    catalog = synthetic_catalog() + [ZEPPELIN]
    before = _files(tree)
    state = BuildState.read(tree)
    report = _update(tmp_path, tree, catalog)
    loaded = _check(tree, catalog)
    owners = json.loads((tree / "catalog-map.json").read_text())["zeppelin_1"]
    assert len(owners) == 1 and report.added == ["zeppelin_1"]
    leaf = owners[0].split(".", 3)[3]
    path = state.path(leaf)
    assert sorted(report.zones) == sorted(path) and len(path) <= max(state.depth(o) for o in state.zones) + 1
    after = _files(tree)
    rewritten = {state.zones[o].file for o in path}
    assert {name for name in after if after[name] != before[name]} == rewritten
    for origin in path:
        assert loaded[origin].soa.serial > 1
    # the rewritten leaf's map, of the file as rewritten: a lazy server answers it without loading it
    leaf_file = str(tree / state.zones[leaf].file)
    assert map_path(tree / SNAPSHOT_DIR, leaf_file, _stamp(leaf_file), ZoneLimits()).is_file()
    # routed as a query of its own words would be: the leaf's summary ranks first at every step
    for child, parent in zip(path, path[1:]):
        ranked = state.read_terms(tree, parent).rank(tokenize("zeppelin airship dirigible flight route"))
        assert ranked[0][0] == child.split(".", 1)[0]


def test_a_changed_tool_is_rewritten_in_every_zone_that_holds_it(tmp_path):
    catalog = synthetic_catalog()
    (tmp_path / "c0.json").write_text(json.dumps(catalog))
    cat = load_catalogs([tmp_path / "c0.json"])
    placed = {0, 1, 2, 40, 80, 100}  # tool 0 in two leaves; the root keeps tools too
    root = Category("", "root", tools=[i for i in range(len(cat.tools)) if i not in placed],
                    children=[Category("left", "left", tools=[0, 1, 2]),
                              Category("right", "right", tools=[0, 40, 80, 100])])
    build_zones(cat, root, tmp_path / "z")
    before = _files(tmp_path / "z")
    catalog[0] = {**catalog[0], "description": "Rewritten: a barometer reading for a weather request.",
                  "metadata": {"url": "https://api.weather.example/v2/barometer"}}
    report = _update(tmp_path, tmp_path / "z", catalog)
    assert report.changed == [catalog[0]["id"]] and sorted(report.zones) == ["left.tools.", "right.tools.", "tools."]
    assert _files(tmp_path / "z").keys() == before.keys()
    loaded = _check(tmp_path / "z", catalog)
    for origin in ("left.tools.", "right.tools."):
        tool = next(t for t in loaded[origin].tools if t.id == catalog[0]["id"])
        assert tool.description.startswith("Rewritten: a barometer") and not tool.parameters
        assert tool.endpoint == "https://api.weather.example/v2/barometer" and tool.target == "api.weather.example."
        old = next(t for t in parse_zone((before[origin.rstrip('.') + '.yaml']).decode()).tools
                   if t.id == catalog[0]["id"])
        assert tool.label == old.label  # its DNS name stays
    assert "barometer" in dict(loaded["tools."].children[0].summary.corpus_terms)


def test_a_removed_tool_is_gone(tree, tmp_path):
    catalog = synthetic_catalog()
    gone = catalog.pop(47)
    owner = json.loads((tree / "catalog-map.json").read_text())[gone["id"]][0]
    report = _update(tmp_path, tree, catalog)
    assert report.removed == [gone["id"]]
    loaded = _check(tree, catalog)
    assert gone["id"] not in json.loads((tree / "catalog-map.json").read_text())
    assert all(t.id != gone["id"] for zone in loaded.values() for t in zone.tools)
    assert owner.split(".", 3)[3] in report.zones


@pytest.mark.integration
def test_the_new_tool_resolves_through_its_path_over_dns(tmp_path):
    subnet = ".".join(fresh_subnet().split(".")[:2])
    zones = _build(tmp_path, synthetic_catalog(), subnet=subnet)
    catalog = synthetic_catalog() + [ZEPPELIN]
    _update(tmp_path, zones, catalog)
    owner = json.loads((zones / "catalog-map.json").read_text())["zeppelin_1"][0]
    path = BuildState.read(zones).path(owner.split(".", 3)[3])
    gone = synthetic_catalog()[3]
    _update(tmp_path, zones, [t for t in catalog if t["id"] != gone["id"]])
    tree = start_tree(zones)
    try:
        with Resolver(root=tree.root(), timeout=REPLY_TIMEOUT, cache=False) as r:
            res = r.resolve("zeppelin airship dirigible", k=1)
            removed = r.resolve(gone["description"], k=4, top=50)
    finally:
        tree.stop()
    assert res.tools and res.tools[0].id == "zeppelin_1"
    assert [z.lower() for z in res.tools[0].path] == list(reversed(path))
    assert removed.tools and gone["id"] not in {t.id for t in removed.tools}


@pytest.mark.integration
def test_a_running_tree_picks_the_update_up_live(tmp_path):
    subnet = ".".join(fresh_subnet().split(".")[:2])
    zones = _build(tmp_path, synthetic_catalog(), subnet=subnet)
    tree = start_tree(zones)
    try:
        with Resolver(root=tree.root(), timeout=REPLY_TIMEOUT, cache=False) as r:
            def first() -> str:
                res = r.resolve("zeppelin airship dirigible", k=1)
                return res.tools[0].id if res.tools else ""

            assert first() != "zeppelin_1"
            report = _update(tmp_path, zones, synthetic_catalog() + [ZEPPELIN])
            assert wait_until(lambda: first() == "zeppelin_1")
        stores = {s.index.origin: s for s in tree.tree.stores}

        def settled() -> bool:  # every rewritten zone serves its file's serial; parents use their file's copies
            return all(stores[o].serial == stores[o].file_zone.soa.serial
                       and stores[o].zone.children == stores[o].file_zone.children for o in report.zones)

        assert wait_until(settled)
    finally:
        tree.stop()


def test_statistics_are_kept_while_close_and_refreshed_past_the_threshold(tree, tmp_path):
    catalog = synthetic_catalog() + [ZEPPELIN]
    report = _update(tmp_path, tree, catalog)
    assert not report.refreshed and 0 < report.drift["drift"] < 0.02
    leaf = next(o for o in report.zones if not BuildState.read(tree).children_of()[o])
    stats = load_zone(tree / BuildState.read(tree).zones[leaf].file).corpus_stats
    assert stats.n_docs == 120 and stats.df["zeppelin"] == 1  # written ones, with the new terms
    untouched = {name: data for name, data in _files(tree).items()}

    more = catalog + [{**ZEPPELIN, "id": f"zeppelin_{i}", "name": f"getAirshipRoute{i}"} for i in range(2, 10)]
    report = _update(tmp_path, tree, more)  # eight more: a drift of about 5 %
    assert report.refreshed and len(report.zones) == 15
    assert "statistics refreshed: all 15 zones rewritten" in report.text()
    assert all(untouched[name] != data for name, data in _files(tree).items())
    loaded = _check(tree, more)
    fresh = CorpusStats.from_tokens([tokenize(zone_tool(t, "x", "http").text())
                                     for t in parse_catalog(more, "c").tools])
    for zone in loaded.values():
        if zone.tools:
            assert zone.corpus_stats.n_docs == 129 and zone.corpus_stats.avgdl == round(fresh.avgdl, 6)
            assert all(zone.corpus_stats.df[t] == fresh.df[t] for t in zone.corpus_stats.df)
    assert drift(BuildState.read(tree).written, BuildState.read(tree).current)["drift"] == 0
    assert DRIFT_THRESHOLD < 0.02


def test_forced_refresh_rewrites_every_zone(tree, tmp_path):
    report = _update(tmp_path, tree, synthetic_catalog(), refresh_stats=True)
    assert report.refreshed and len(report.zones) == 15
    _check(tree, synthetic_catalog())


def _storms() -> list[dict]:
    """30 tools of one kind, enough to push one leaf past twice max_leaf."""
    return [{"id": f"storm_{i}", "name": f"getStormWarning{i}",
             "description": f"Storm warning {i}: hurricane and storm alerts, storm tracking.", "metadata": {}}
            for i in range(30)]


@pytest.mark.integration
def test_a_leaf_grown_past_twice_max_leaf_is_reported_or_split(tree, tmp_path):
    catalog = synthetic_catalog() + _storms()
    report = _update(tmp_path, tree, catalog)
    assert report.oversize and not report.split and "--split-leaves" in report.text()
    (leaf, size), = report.oversize.items()
    assert size > 20
    report = _update(tmp_path, tree, catalog, split_leaves=True)  # the same catalog: only the split
    assert report.split == [leaf] and len(report.new_zones) >= 2 and not report.oversize
    loaded = _check(tree, catalog)
    assert not loaded[leaf].tools and {c.name for c in loaded[leaf].children} == set(report.new_zones)
    assert all(len(loaded[o].tools) <= 20 for o in report.new_zones)
    subnet_tree = start_tree(tree)
    try:
        with Resolver(root=subnet_tree.root(), timeout=REPLY_TIMEOUT, cache=False) as r:
            res = r.resolve("hurricane storm warning alerts", k=2)
    finally:
        subnet_tree.stop()
    assert res.tools and res.tools[0].id.startswith("storm_")


def test_zones_are_changed_through_the_schema_keeping_their_header_comment_lines(tree, tmp_path):
    """What docs/zonefiles.md promises of an update: each zone it rewrites is what the schema writes of
    the changed zone (``dump_zone``), with the ``#`` lines at the top of its file kept; a comment
    anywhere else in the file is not kept."""
    root = tree / "root.yaml"
    text = root.read_text()
    header = zone_header(text)
    body = text[text.index("\norigin:") + 1:]
    root.write_text(f"# {header}\n#   kept: an operator's note\n#\n"
                    + body.replace("\nchildren:\n", "\nchildren:  # not kept\n# nor this\n", 1))
    report = _update(tmp_path, tree, synthetic_catalog() + [ZEPPELIN])
    assert "tools." in report.zones
    written = root.read_text()
    assert zone_header(written) == f"{header}\n  kept: an operator's note\n"
    assert written == dump_zone(load_zone(root), zone_header(written))
    assert "not kept" not in written and "nor this" not in written
    mapping = json.loads((tree / "catalog-map.json").read_text())
    assert dump_mapping({**mapping, "é\"": []}) == json.dumps({**mapping, "é\"": []}, ensure_ascii=False, indent=0)


def test_a_pinned_copy_of_a_summary_is_the_operators_and_an_update_leaves_it(tree, tmp_path):
    root = load_zone(tree / "root.yaml")
    pinned = tuple(dataclasses.replace(c, summary=dataclasses.replace(c.summary, pinned=True)) for c in root.children)
    write_zone(dataclasses.replace(root, children=pinned), tree / "root.yaml", header_of(tree / "root.yaml"))
    report = _update(tmp_path, tree, synthetic_catalog() + [ZEPPELIN])
    after = load_zone(tree / "root.yaml")
    assert "tools." in report.zones and after.soa.serial > root.soa.serial
    assert [c.summary for c in after.children] == [c.summary for c in pinned]


def test_routing_scores_are_the_zone_scorers(built):
    state = BuildState.read(built)
    root = load_zone(built / "root.yaml")
    terms = state.read_terms(built, state.origin)
    options = root.settings.child_scorer_options
    docs = [c.summary.document() for c in root.children]
    labels = [c.label for c in root.children]
    index = BM25(docs, k1=options["k1"], b=options["b"])
    # the built root's children have facets: the updater ranks them by their best facet, as its server does
    scorer = BM25Scorer(docs, k1=options["k1"], b=options["b"], facet_k1=options.get("facet_k1", 1.5))
    assert scorer.facets is not None and terms.faceted()
    whole = ChildTerms(terms.k1, terms.b, terms.children)  # a delegation without facets: whole summaries
    for query in ("song lyrics album", "stock dividend currency", "weather storm"):
        served = {labels[i]: score for i, score in scorer.rank(query, len(labels)).items}
        assert dict(terms.rank(tokenize(query))) == pytest.approx(served)
        assert [label for label, _ in terms.rank(tokenize(query))] == list(served)  # the same order, ties too
        assert dict(whole.rank(tokenize(query))) == pytest.approx(dict(zip(labels, index.scores(query))))
    assert dict(terms.rank(tokenize("song lyrics album"))) != pytest.approx(dict(whole.rank(tokenize("song lyrics album"))))


def test_drift_grows_with_the_catalog_changed():
    docs = [tokenize(t["description"]) for t in synthetic_catalog()]
    current = Totals.of(docs)
    assert drift(current.stats(), current)["drift"] == 0
    small = drift(Totals.of(docs[:-2]).stats(), current)["drift"]
    large = drift(Totals.of(docs[:-30]).stats(), current)["drift"]
    assert 0 < small < large
    again = Totals.of(docs)
    again.remove(docs[0])
    again.add(docs[0])
    assert again == current


def test_bad_input_is_refused(tmp_path, built):
    with pytest.raises(BuildError, match="no build-state"):
        update_tree(parse_catalog(synthetic_catalog(), "c"), tmp_path)
    with pytest.raises(BuildError, match="no tools"):
        update_tree(parse_catalog([], "c"), built)


def test_build_update_cli(tree, tmp_path, capsys):
    from tooldns.cli import main

    (tmp_path / "new.json").write_text(json.dumps(synthetic_catalog() + [ZEPPELIN]))
    assert main(["build", "--update", str(tmp_path / "new.json"), "--out", str(tree)]) == 0
    out = capsys.readouterr().out
    assert "1 added, 0 changed, 0 removed" in out
    assert "statistics refreshed: all 15 zones rewritten" in out  # one tool of 121 passes the default threshold
    assert json.loads((tree / "update-report.json").read_text())["added"] == ["zeppelin_1"]
    assert main(["build", "--update", str(tmp_path / "new.json"), "--out", str(tree), "--embed", "minilm"]) != 0
    assert "cannot be given with it" in capsys.readouterr().err


@pytest.mark.integration
def test_a_lazy_server_serves_the_zones_an_update_splits_off_without_a_restart(tmp_path):
    """``tooldns serve --lazy`` already running while ``build --update --split-leaves`` writes new
    zone files: the watcher lists the directory again, and the new leaves answer without a restart."""
    from tooldns.serving.tree import TreeThread

    from conftest import free_port

    address = f"{fresh_subnet()}.1"
    tree = _build(tmp_path, synthetic_catalog(), subnet=address)
    catalog = synthetic_catalog() + _storms()

    def storms(served) -> list[str]:
        with Resolver(root=served.root(), timeout=REPLY_TIMEOUT, cache=False) as r:
            return [t.id for t in r.resolve("hurricane storm warning alerts", k=2).tools if t.id.startswith("storm_")]

    with TreeThread(tree, free_port(address), listen=[address], lazy=True, watch_interval=0.05) as served:
        zones = served.tree.lazy
        before = set(zones.paths)
        assert not storms(served)
        report = _update(tmp_path, tree, catalog, split_leaves=True)
        assert report.split and len(report.new_zones) >= 2
        assert wait_until(lambda: set(report.new_zones) <= set(zones.paths))  # no restart
        assert set(zones.paths) == before | set(report.new_zones)
        assert wait_until(lambda: bool(storms(served)))
        # answered by the new zones themselves (the leaves from the maps the update made of them)
        assert {*zones.loaded, *zones.maps} & set(report.new_zones)
        # the update's copies (exact, under the serials it raised) win over summaries learned meanwhile
        assert wait_until(lambda: zones.top.index.zone.children == zones.top.file_zone.children)
        # a zone file taken away (not loaded) is forgotten: its parent's file answers for its names
        extra = tree / f"zz-extra.{zones.top.index.origin[:-1]}.yaml"
        extra.write_text(f"origin: zz-extra.{zones.top.index.origin}\n")
        assert wait_until(lambda: f"zz-extra.{zones.top.index.origin}" in zones.paths)
        extra.unlink()
        assert wait_until(lambda: f"zz-extra.{zones.top.index.origin}" not in zones.paths)


@pytest.mark.integration
def test_a_tree_on_one_address_splits_its_leaves_onto_that_address_and_serves_lazily(tmp_path):
    """``tooldns build --address``: every zone, the ones an update splits off included, on one
    address, where one lazy server answers for them all."""
    from tooldns.serving.tree import TreeThread

    from conftest import free_port, fresh_subnet

    address = f"{fresh_subnet()}.1"
    tree = _build(tmp_path, synthetic_catalog(), subnet=address)
    catalog = synthetic_catalog() + _storms()
    report = _update(tmp_path, tree, catalog, split_leaves=True)
    assert report.split and len(report.new_zones) >= 2
    loaded = _check(tree, catalog)
    assert {ns.address for z in loaded.values() for ns in z.nameservers} == {address}
    with TreeThread(tree, free_port(address), listen=[address], lazy=True) as served:
        with Resolver(root=served.root(), timeout=REPLY_TIMEOUT, cache=False) as r:
            res = r.resolve("hurricane storm warning alerts", k=2)
        lazy = served.tree.lazy
        assert {*lazy.loaded, *lazy.maps} & set(report.new_zones)  # reached through the split (leaves: their maps)
    assert res.tools and res.tools[0].id.startswith("storm_")


@pytest.mark.integration
def test_a_served_root_ranks_its_children_by_their_best_facet_over_dns(built):
    """Every delegation of a built zone carries facets, so the root's referral, over DNS, ranks the
    children as a BM25 over the facets does (each child by its best), not as one over their whole
    summaries would."""
    from tooldns.scoring.tokenize import Tokenized

    root = load_zone(built / "root.yaml")
    owners = [i for i, c in enumerate(root.children) for _ in c.summary.facets]
    facets = BM25([Tokenized(" ", dict(f)) for c in root.children for f in c.summary.facets], k1=1.5)
    options = root.settings.child_scorer_options
    whole = BM25([c.summary.document() for c in root.children], k1=options["k1"], b=options["b"])

    def ranked(scores: list[float]) -> list[str]:
        return [root.children[i].name for i in sorted(range(len(scores)), key=lambda i: (-scores[i], i)) if scores[i] > 0]

    def by_facets(query: str) -> list[str]:
        best = [0.0] * len(root.children)
        for owner, score in zip(owners, facets.scores(query)):
            best[owner] = max(best[owner], score)
        return ranked(best)

    queries = ("song lyrics album", "stock dividend currency", "weather storm", "forecast map", "tool 26", "tool 29")
    assert any(by_facets(q)[:3] != ranked(whole.scores(q))[:3] for q in queries)  # facets change the referrals
    served = start_tree(built)
    try:
        with Resolver(root=served.root(), timeout=REPLY_TIMEOUT, cache=False) as r:
            for query in queries:
                hop = r.resolve(query, k=len(root.children)).trace[0]
                got = [str(ref.zone).lower() for ref in hop.referrals]
                assert got and got == by_facets(query)[:len(got)], query
    finally:
        served.stop()


def test_a_zone_with_a_learned_summary_among_its_children_ranks_whole_summaries(built):
    """A learned summary carries no facets: while a parent uses one, it ranks every child by its
    whole summary (docs/summaries.md); with its copies from the build, by facets."""
    from tooldns.serving.index import ZoneIndex
    from tooldns.zone.model import Summary

    root = load_zone(built / "root.yaml")
    assert ZoneIndex(root).child_candidates.scorer.facets is not None
    first = root.children[0]
    learned = Summary(first.summary.description, serial=9, terms=first.summary.corpus_terms, tools=3)
    zone = dataclasses.replace(root, children=(dataclasses.replace(first, summary=learned), *root.children[1:]))
    scorer = ZoneIndex(zone).child_candidates.scorer
    assert scorer.facets is None
    whole = BM25([c.summary.document() for c in zone.children], k1=root.settings.child_scorer_options["k1"],
                 b=root.settings.child_scorer_options["b"])
    assert scorer.rank("weather storm", 3).items == whole.rank("weather storm", 3)


def test_a_zones_own_tools_compete_with_its_children_in_facets(built):
    """A zone with tools of its own and children with facets ranks its own tools ("self") among them
    in facets as well: a query for one of them ranks self first."""
    from tooldns.serving.index import SELF, ZoneIndex
    from tooldns.zone.model import Tool

    root = load_zone(built / "root.yaml")
    own = Tool("zeppelin", "Zeppelin tours", "http", "example.com.", 443, "Book zeppelin airship sightseeing flights")
    index = ZoneIndex(dataclasses.replace(root, tools=(own,)))
    scorer = index.child_candidates.scorer
    assert scorer.facets is not None and index.child_candidates.entries[-1] is SELF
    best, score = scorer.rank("zeppelin airship flights", 1).items[0]
    assert index.child_candidates.entries[best] is SELF and score > 0


def test_an_update_that_cannot_write_leaves_every_file_whole_and_no_temporary_one(tree, tmp_path):
    """``tooldns build --update`` in a child process whose files may not grow past 1 byte
    (RLIMIT_FSIZE): its first write fails (EFBIG, a clear error, exit 3), every file of the tree is as
    it was and no temporary file is left in it."""
    import subprocess
    import sys

    before = {p.relative_to(tree): p.read_bytes() for p in tree.rglob("*") if p.is_file()}
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps(synthetic_catalog() + [ZEPPELIN]))
    code = "\n".join(["import resource, sys",
                      "from tooldns.cli import main",
                      "resource.setrlimit(resource.RLIMIT_FSIZE, (1, 1))",
                      "sys.exit(main(sys.argv[1:]))"])
    proc = subprocess.run([sys.executable, "-c", code, "build", "--update", str(catalog), "--out", str(tree)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3 and "File too large" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert {p.relative_to(tree): p.read_bytes() for p in tree.rglob("*") if p.is_file()} == before
