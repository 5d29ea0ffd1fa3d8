"""``tooldns embed DIR`` fills in missing and stale vectors in place; ``tooldns check`` says what is missing.

A built tree (hash embedder, so no model is needed) is edited as an organisation would: vectors
removed from some tools (added by hand), one tool's description rewritten (its vector is stale).
"""

import dataclasses
import json
import re
import shutil

import pytest

from tooldns.protocol.summary import CENTROIDS
from tooldns.building.embed import centroids_of, default_spec, embed_tree, read_tree, subtree_tools, tree_warnings
from tooldns.cli import main as tooldns_main
from tooldns.embedding.registry import make_embedder, spec_for_model
from tooldns.protocol.vector import decode_vector, encode_vector
from tooldns.serving.tree import load_tree
from tooldns.zone.zonefile import header_of, load_zone, write_zone

from conftest import ZONES, copy_tree

pytestmark = pytest.mark.slow  # trees built and embedded in-process, a second or two each


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A hybrid tree built with the hash embedder, then embedded once (so its centroids are embed's own)."""
    from tooldns.building.build import build
    from test_build import synthetic_catalog

    tmp = tmp_path_factory.mktemp("built")
    (tmp / "services.json").write_text(json.dumps(synthetic_catalog()))
    build([tmp / "services.json"], tmp / "z", embed="hash", tree_options=dict(max_children=4, max_leaf=10))
    embed_tree(tmp / "z", make_embedder("hash"))
    return tmp / "z"


@pytest.fixture
def tree(built, tmp_path):
    d = tmp_path / "z"
    shutil.copytree(built, d)
    return d


def zones(d):
    return {f.zone.origin: f.zone for f in read_tree(d)}


def leaf_path(d):
    """A leaf zone file with at least three tools whose parent is not the root."""
    for f in read_tree(d):
        if not f.zone.children and len(f.zone.tools) >= 3 and f.zone.origin.count(".") >= 3:
            return f.path
    raise AssertionError("no deep leaf")


def edit(path, drop=(0, 1), rewrite=2):
    """Remove the vectors of tools *drop*, rewrite the description of tool *rewrite*; keep the header."""
    zone = load_zone(path)
    tools = list(zone.tools)
    for i in drop:
        tools[i] = dataclasses.replace(tools[i], vector=b"", vector_of="")
    tools[rewrite] = dataclasses.replace(tools[rewrite], description="Sends a text message to a chat channel.")
    write_zone(dataclasses.replace(zone, tools=tuple(tools)), path, header_of(path))
    return zone, tools


def parent_of(origin, all_zones):
    return next((z, d) for z in all_zones.values() for d in z.children if d.name == origin)


def test_check_counts_then_embed_fills_in_and_check_is_clean(tree, capsys):
    path = leaf_path(tree)
    before = zones(tree)
    zone, tools = edit(path)
    assert tooldns_main(["check", str(tree)]) == 0  # warnings, not errors
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith("tools placed: ok")
    assert f"{path}: 2 tools without a vector, 1 with a stale vector (run: tooldns embed {tree})" in out
    assert out.count("without a vector") == 1
    assert tooldns_main(["check", str(path)]) == 0
    assert f"{path}: 2 tools without a vector, 1 with a stale vector" in capsys.readouterr().out

    assert tooldns_main(["embed", str(tree), "--model", "hash"]) == 0
    out = capsys.readouterr().out
    assert "tools embedded: 3 (2 missing, 1 stale)" in out
    assert tooldns_main(["check", str(tree)]) == 0
    out = capsys.readouterr().out
    assert "without a vector" not in out and "stale" not in out and "centroids" not in out

    after = zones(tree)
    leaf = after[zone.origin]
    assert leaf.tools[0].vector == zone.tools[0].vector  # the same text: the same vector again
    assert leaf.tools[2].vector != zone.tools[2].vector and leaf.tools[2].vector_of == leaf.tools[2].text_digest()
    for origin, z in before.items():  # every tool not edited keeps its vector byte for byte
        for old, new in zip(z.tools, after[origin].tools):
            if not (origin == zone.origin and old.label in {tools[i].label for i in (0, 1, 2)}):
                assert new.vector == old.vector and new.vector_of == old.vector_of
    assert path.read_text().startswith("# Built by tooldns build from")


def test_centroids_above_the_edited_leaf_change_and_no_others(tree, capsys):
    path = leaf_path(tree)
    before = zones(tree)
    zone, tools = edit(path, drop=(), rewrite=2)
    edited_id = tools[2].id
    report = embed_tree(tree, make_embedder("hash"))
    assert (report.tools_missing, report.tools_stale) == (0, 1)
    after = zones(tree)
    parent, delegation = parent_of(zone.origin, before)
    new = next(d for d in after[parent.origin].children if d.name == zone.origin)
    assert new.vectors != delegation.vectors and 1 <= len(new.vectors) <= CENTROIDS
    assert new.vectors == centroids_of([t.vector for t in subtree_tools(zone.origin, after)], CENTROIDS)
    for z in before.values():  # delegations with no copy of the edited tool beneath them keep their centroids
        for d in z.children:
            if all(t.id != edited_id for t in subtree_tools(d.name, before)):
                assert next(c for c in after[z.origin].children if c.name == d.name).vectors == d.vectors
    assert report.delegations_updated >= 1 and str(path) in report.zones_changed


def test_embed_again_changes_nothing(tree, capsys):
    edit(leaf_path(tree))
    assert tooldns_main(["embed", str(tree), "--model", "hash"]) == 0
    stamps = {p: p.read_bytes() for p in tree.glob("*.yaml")}
    assert tooldns_main(["embed", str(tree)]) == 0  # the zones' own model (hash-64) by default
    out = capsys.readouterr().out
    assert re.search(r": 0 of \d+ zones changed \(model hash-64\)", out) and "tools embedded: 0 (0 missing" in out
    assert {p: p.read_bytes() for p in tree.glob("*.yaml")} == stamps


def test_a_delegation_without_centroids_is_warned_and_remade(tree, capsys):
    root = tree / "root.yaml"
    zone = load_zone(root)
    label = zone.children[0].label
    old = zone.children[0].vectors
    write_zone(dataclasses.replace(zone, children=(dataclasses.replace(zone.children[0], vectors=()),
                                                   *zone.children[1:])), root, header_of(root))
    assert tooldns_main(["check", str(tree)]) == 0
    assert f"{root}: 1 delegations without centroids ({label}) (run: tooldns embed {tree})" in capsys.readouterr().out
    report = embed_tree(tree, make_embedder("hash"), centroids=2)
    assert report.delegations_updated >= 1 and report.tools_embedded == 0
    new = load_zone(root).children[0].vectors
    assert new and len(new) <= 2 and new != old
    assert all(len(d.vectors) <= 2 for z in zones(tree).values() for d in z.children)


def test_scorer_hybrid_switches_and_embeds_a_bm25_tree(tmp_path, capsys):
    d = copy_tree(ZONES, tmp_path / "z", "127.0.0")
    assert tooldns_main(["embed", str(d), "--model", "hash"]) == 0  # bm25 zones without vectors: left alone
    assert "0 of 25 zones changed" in capsys.readouterr().out
    assert tooldns_main(["check", str(d)]) == 0
    assert capsys.readouterr().out.strip() == "25 zones, 75 tools placed: ok"  # today's output, nothing more
    assert tooldns_main(["embed", str(d), "--model", "hash:32", "--scorer", "hybrid", "--centroids", "3"]) == 0
    out = capsys.readouterr().out
    assert "25 of 25 zones changed" in out and "tools embedded: 75 (75 missing, 0 stale)" in out
    assert "zones switched to hybrid: 25" in out
    stores = load_tree(d)  # what tooldns serve loads
    assert all(s.zone.settings.scorer == "hybrid" for s in stores)
    assert all(t.vector and decode_vector(t.vector).model == "hash-32" for s in stores for t in s.zone.tools)
    assert all(0 < len(c.vectors) <= 3 for s in stores for c in s.zone.children)
    assert (d / "weather.tools.yaml").read_text().startswith("# Zone weather.tools. of the ToolDNS demo tree.")
    assert tree_warnings(read_tree(d), d) == []


def test_a_tool_added_by_hand_is_embedded(tree):
    path = leaf_path(tree)
    zone = load_zone(path)
    new = dataclasses.replace(zone.tools[0], label="by-hand", id="", name="Hand Written Tool",
                              description="Converts currencies at today's rate.", vector=b"", vector_of="")
    write_zone(dataclasses.replace(zone, tools=(*zone.tools, new)), path, header_of(path))
    assert tree_warnings(read_tree(tree), tree) == [
        f"{path}: 1 tools without a vector, 0 with a stale vector (run: tooldns embed {tree})"]
    report = embed_tree(tree, make_embedder("hash"))
    assert report.tools_missing == 1 and report.tools_embedded == 1
    tool = next(t for t in load_zone(path).tools if t.label == "by-hand")
    assert tool.vector and tool.vector_of == tool.text_digest()


def test_another_model_replaces_every_vector(tree, capsys):
    assert tooldns_main(["embed", str(tree), "--model", "hash:16"]) == 0
    out = capsys.readouterr().out
    assert "0 missing, 0 stale, " in out and "of another model" in out
    found = {decode_vector(v).model for z in zones(tree).values()
             for v in [*(t.vector for t in z.tools), *(v for d in z.children for v in d.vectors)]}
    assert found == {"hash-16"}


def test_the_fusion_follows_the_model_the_vectors_are_of(tree):
    """Embedded with a model whose cosines deserve less of the fused score, the hybrid zones rank tools
    with its share of BM25 and the root's walk names it; embedded again with the default model, the
    zones read as a build leaves them (no ``alpha``) and the walk names the default."""
    from tooldns.embedding.hashing import HashEmbedder
    from tooldns.protocol.fusion import DEFAULT_WEIGHT

    class LeaningOnWords(HashEmbedder):
        fusion = 0.7

    before = zones(tree)
    assert all("alpha" not in z.settings.scorer_options for z in before.values())
    embed_tree(tree, LeaningOnWords(64))
    after = zones(tree)
    assert after["tools."].walk.fusion == 0.7
    assert all(z.settings.scorer_options["alpha"] == 0.7 for z in after.values())
    assert [z.settings.child_scorer_options for z in after.values()] == \
        [z.settings.child_scorer_options for z in before.values()]
    embed_tree(tree, make_embedder("hash"))
    again = zones(tree)
    assert again["tools."].walk.fusion == DEFAULT_WEIGHT
    assert all("alpha" not in z.settings.scorer_options for z in again.values())


def test_bad_model_and_bad_tree_are_errors(tree, tmp_path, capsys):
    assert tooldns_main(["embed", str(tree), "--model", "nonsense"]) == 1
    assert "unknown embedder 'nonsense'" in capsys.readouterr().err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.yaml").write_text("origin: x.tools.\nsoa: {serial: 1}\nnameservers: []\n")
    assert tooldns_main(["embed", str(bad), "--model", "hash"]) == 1
    assert "no name servers" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tooldns_main(["embed", str(tree), "--centroids", "0"])


def test_default_model_is_the_zones_own_when_it_can_be_named():
    assert spec_for_model("all-MiniLM-L6-v2") == "minilm" and spec_for_model("hash-64") == "hash:64"
    assert spec_for_model("multilingual-e5-small") == "e5"
    assert spec_for_model("hash-x") is None and spec_for_model("bge-small-en-v1.5") is None
    assert default_spec(read_tree(ZONES)) == ("e5", None)  # no vectors yet: the default embedder


def test_a_tool_in_a_language_the_model_does_not_cover_gets_no_vector(tmp_path):
    """As tooldns build does: all-MiniLM-L6-v2 is English-only, so a Chinese tool is ranked by BM25 alone,
    and tooldns check, which runs no model, does not ask for its vector."""
    from tooldns.embedding.embedder import cjk_share
    from tooldns.embedding.hashing import HashEmbedder

    class EnglishOnly(HashEmbedder):  # stands for the bundled model, without loading it
        def __init__(self):
            super().__init__(16, model="all-MiniLM-L6-v2")

        def covers(self, text):
            return cjk_share(text) < 0.3

    d = copy_tree(ZONES, tmp_path / "z", "127.0.0")
    path = d / "history.weather.tools.yaml"
    zone = load_zone(path)
    chinese = dataclasses.replace(zone.tools[0], label="hko-archive", name="香港天文台历史天气",
                                  description="香港各气象站自一八八四年以来的每日气温和雨量记录")
    write_zone(dataclasses.replace(zone, tools=(*zone.tools, chinese)), path, header_of(path))
    report = embed_tree(d, EnglishOnly(), scorer="hybrid")
    assert report.tools_not_covered == 1 and report.tools_missing == 75
    assert "tools without a vector: 1" in report.text()
    tool = next(t for t in load_zone(path).tools if t.label == "hko-archive")
    assert not tool.vector and not tool.vector_of
    assert tree_warnings(read_tree(d), d) == []
    assert embed_tree(d, EnglishOnly()).zones_changed == []


def test_zones_of_two_models_are_warned_and_made_one(tree, capsys):
    path = leaf_path(tree)
    zone = load_zone(path)
    other = make_embedder("hash:16")
    tools = tuple(dataclasses.replace(t, vector=encode_vector(other.model, other.embed_one(t.embedding_text())))
                  for t in zone.tools)
    centre = encode_vector(other.model, other.embed_one("the zone's centre, of the same model"))
    write_zone(dataclasses.replace(zone, tools=tools, vector_centre=centre), path, header_of(path))
    warnings = tree_warnings(read_tree(tree), tree)
    assert len(warnings) == 1 and "vectors of 2 models (hash-16: 1 zones, hash-64: " in warnings[0]
    assert tooldns_main(["embed", str(tree)]) == 0  # the model most vectors are of: hash-64
    assert f"tools embedded: {len(tools)} (0 missing, 0 stale, {len(tools)} of another model)" in capsys.readouterr().out
    assert tree_warnings(read_tree(tree), tree) == []
    assert decode_vector(load_zone(path).vector_centre).model == "hash-64"  # the tree's centre again


def test_embed_right_after_build_changes_nothing(tmp_path):
    """The build makes centroids of the vectors its zone files carry, as embed makes them again from
    the files: the same bytes, so nothing is rewritten."""
    from tooldns.building.build import build
    from test_build import synthetic_catalog

    (tmp_path / "services.json").write_text(json.dumps(synthetic_catalog()))
    build([tmp_path / "services.json"], tmp_path / "z", embed="hash", tree_options=dict(max_children=4, max_leaf=10))
    stamps = {p: p.read_bytes() for p in (tmp_path / "z").glob("*.yaml")}
    report = embed_tree(tmp_path / "z", make_embedder("hash"))
    assert (report.delegations_updated, report.zones_changed) == (0, [])
    assert {p: p.read_bytes() for p in (tmp_path / "z").glob("*.yaml")} == stamps


def test_centroids_of_tools_that_share_vectors_are_of_the_distinct_ones():
    """Five tools, three of one text: three distinct vectors, fewer than the four centroids asked for."""
    from tooldns.building.build import Embedded

    rows = [[1.0, 0, 0, 0]] * 3 + [[0, 1.0, 0, 0], [0, 0, 1.0, 0]]
    built = Embedded("m", rows, [""] * 5).centroids(list(range(5)), 4)
    assert len(built) == 3 and built == centroids_of([encode_vector("m", r) for r in rows], 4)


def test_a_builds_leaf_centroids_made_beside_the_maps_are_those_it_would_make_itself(tmp_path, monkeypatch):
    """``tooldns build`` has the processes that make the leaves' maps make each leaf's centroids too (a
    million-tool root's took the writing process three minutes): every zone file is the same, byte for
    byte, as when the writing process makes them all."""
    from tooldns.building.build import build
    from tooldns.building.maps import LeafMaps
    from test_build import synthetic_catalog

    (tmp_path / "services.json").write_text(json.dumps(synthetic_catalog()))
    options = dict(embed="hash", tree_options=dict(max_children=4, max_leaf=10))
    asked = []
    made = LeafMaps.centroids
    monkeypatch.setattr(LeafMaps, "centroids", lambda self, path: asked.append(made(self, path)) or asked[-1])
    build([tmp_path / "services.json"], tmp_path / "beside", **options)
    monkeypatch.setattr(LeafMaps, "centroids", lambda self, path: None)  # the writing process makes them
    build([tmp_path / "services.json"], tmp_path / "here", **options)
    assert len(asked) >= 4 and all(asked)
    beside, here = sorted((tmp_path / "beside").glob("*.yaml")), sorted((tmp_path / "here").glob("*.yaml"))
    assert [p.name for p in beside] == [p.name for p in here]
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(beside, here))
