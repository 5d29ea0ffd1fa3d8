"""Learning from example intents: the vector map fitted on them (tooldns.embedding.vectormap), the
examples read and kept (tooldns.building.examples), a build that bakes the map into its vectors and
keeps it beside the zone files, and tooldns embed and tooldns check that use and check it."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from tooldns.building.build import build
from tooldns.building.catalog import load_catalogs
from tooldns.building.embed import embed_tree, read_tree, tree_warnings
from tooldns.building.examples import add_examples, load_map, map_path, read_examples
from tooldns.embedding import make_embedder
from tooldns.embedding import vectormap
from tooldns.embedding.vectormap import VectorMap, fit, fit_held_out
from tooldns.exceptions import BuildError, EmbeddingError
from tooldns.protocol.vector import decode_vector
from tooldns.scoring.hybrid import as_array
from tooldns.zone.zonefile import load_zone, write_zone


def unit_rows(x):
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def synthetic(seed=0, tools=40, dim=16, per_tool=3):
    """Tools as random unit vectors, and intents that say each tool's need in other words: the tool's
    vector turned by one rotation (the way intents are worded differs from tool descriptions the
    same way for every tool), plus noise: what a linear map can learn, and carry to tools it never
    saw an example of."""
    rng = np.random.default_rng(seed)
    t = unit_rows(rng.normal(size=(tools, dim)))
    rotation, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    hidden = unit_rows(0.5 * t + t @ rotation.T)
    intents = unit_rows(np.repeat(hidden, per_tool, axis=0) + 0.2 * rng.normal(size=(tools * per_tool, dim)))
    targets = np.repeat(np.arange(tools), per_tool)
    return t, intents, targets, hidden


def hit_rate(tools, intents, targets, top=3) -> float:
    ranked = np.argsort(-(intents @ tools.T), axis=1)[:, :top]
    return float(np.mean([t in row for t, row in zip(targets, ranked)]))


def test_the_map_brings_tools_to_the_intents_they_serve_and_generalises_to_tools_without_examples():
    tools, intents, targets, hidden = synthetic()
    seen = targets < 20  # examples for the first 20 tools only
    vmap = fit("m", tools, intents[seen], targets[seen], steps=200)
    baked = vmap.apply(tools)
    for which in (slice(0, 20), slice(20, 40)):  # tools with examples, and tools without
        asked = np.arange(40)[which]
        before = hit_rate(tools, hidden[which], asked)
        after = hit_rate(baked, hidden[which], asked)
        assert after > before + 0.2, (which, before, after)
    assert np.allclose(np.linalg.norm(baked, axis=1), 1.0, atol=1e-5)  # what zones carry is unit, as always


def test_a_fit_is_deterministic_and_a_map_round_trips_through_its_file():
    tools, intents, targets, _ = synthetic(seed=1)
    a = fit("m", tools, intents, targets, steps=20)
    b = fit("m", tools, intents, targets, steps=20)
    assert a.digest == b.digest and np.array_equal(a.matrix, b.matrix)
    back = VectorMap.from_bytes(a.to_bytes(), a.digest)
    assert back.digest == a.digest and back.model == "m" and back.examples == len(targets)
    with pytest.raises(EmbeddingError, match="not the map"):
        VectorMap.from_bytes(fit("m", tools, intents, targets, steps=5).to_bytes(), a.digest)
    with pytest.raises(EmbeddingError, match="not a vector map"):
        VectorMap.from_bytes(b"PK\x03\x04 not an npz")


def test_large_catalogs_fit_on_batches_and_samples_of_tools():
    tools, intents, targets, hidden = synthetic(seed=2, tools=60)
    vmap = fit("m", tools, intents, targets, steps=200, batch=32, negatives=20, seed=4)
    assert hit_rate(vmap.apply(tools), hidden, np.arange(60)) > hit_rate(tools, hidden, np.arange(60)) + 0.2


def test_the_number_of_steps_is_chosen_on_held_out_examples(monkeypatch):
    """A share of the intents is held out, the map fitted on the rest is scored on them as it learns,
    and the best number of steps is fitted again on every example; too few held out: the default."""
    tools, intents, targets, hidden = synthetic(seed=5, tools=60, per_tool=4)
    texts = [f"intent {i}" for i in range(len(targets))]
    chosen = []
    real_fit = vectormap.fit

    def spy(*args, **kwargs):
        chosen.append(kwargs.get("steps"))
        return real_fit(*args, **kwargs)

    monkeypatch.setattr(vectormap, "fit", spy)
    vmap = fit_held_out("m", tools, intents, targets, texts, max_steps=120, every=10)
    assert chosen[0] == 120 and chosen[1] in range(10, 121, 10)  # scored as it learnt; then the best, on all
    assert vmap.examples == len(targets)
    assert hit_rate(vmap.apply(tools), hidden, np.arange(60)) > hit_rate(tools, hidden, np.arange(60)) + 0.2
    chosen.clear()
    fit_held_out("m", tools, intents[:10], targets[:10], texts[:10])
    assert chosen == [vectormap.STEPS]  # two held out at most: not worth choosing on


@pytest.mark.parametrize("args, said", [
    (dict(tools=[[1.0, 0.0]], intents=[[1.0, 0.0, 0.0]], targets=[0]), "cannot fit"),
    (dict(tools=[[1.0, 0.0]], intents=np.zeros((0, 2)), targets=[]), "no example"),
    (dict(tools=[[1.0, 0.0]], intents=[[1.0, 0.0]], targets=[3]), "not among the tools"),
])
def test_bad_fits_say_what_is_wrong(args, said):
    with pytest.raises(EmbeddingError, match=said):
        fit("m", **args)


# -- examples read, given to the catalog --

def test_examples_are_read_in_either_form_and_unknown_tools_are_warned(tmp_path):
    toolret = tmp_path / "q.json"
    toolret.write_text(json.dumps([{"id": "q1", "query": "rain in Paris", "correct_tools": [{"id": "a"}, {"id": "b"}]},
                                   {"id": "q2", "query": "  ", "correct_tools": [{"id": "a"}]}]))
    by_id = tmp_path / "e.json"
    by_id.write_text(json.dumps({"a": ["forecast for Lyon"], "zz": ["nothing"]}))
    assert read_examples(toolret) == {"a": ["rain in Paris"], "b": ["rain in Paris"]}
    catalog_file = tmp_path / "c.json"
    catalog_file.write_text(json.dumps([{"id": "a", "name": "A", "description": "weather",
                                         "examples": ["will it rain"]},
                                        {"id": "b", "name": "B", "description": "stocks"}]))
    catalog = load_catalogs([catalog_file])
    assert add_examples(catalog, read_examples(toolret)) == []
    warnings = add_examples(catalog, read_examples(by_id))
    assert len(warnings) == 1 and "1 tools the catalog does not hold" in warnings[0] and "'zz'" in warnings[0]
    assert catalog.tools[0].examples == ["will it rain", "rain in Paris", "forecast for Lyon"]


@pytest.mark.parametrize("content, said", [("{", "not valid JSON"), ('"x"', "a list of"),
                                           ('[{"query": 3}]', r"'query' \(text\)"), ('{"a": "x"}', "not a list")])
def test_bad_examples_files_are_refused_with_what_is_wrong(tmp_path, content, said):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(BuildError, match=said):
        read_examples(path)


# -- a build with examples --

@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from test_build import synthetic_catalog

    tmp = tmp_path_factory.mktemp("examples")
    catalog = synthetic_catalog()
    (tmp / "services.json").write_text(json.dumps(catalog))
    examples = {t["id"]: [f"please help me with {t['name'].lower()} today"] for t in catalog[::3]}
    (tmp / "examples.json").write_text(json.dumps(examples))
    build([tmp / "services.json"], tmp / "z", embed="hash", examples=[tmp / "examples.json"],
          tree_options=dict(max_children=4, max_leaf=10))
    return tmp, examples


def test_a_build_keeps_the_examples_and_bakes_the_map_into_the_vectors(built):
    tmp, examples = built
    zones = [f.zone for f in read_tree(tmp / "z")]
    digests = {z.settings.vector_map for z in zones if z.settings.scorer == "hybrid"}
    assert len(digests) == 1 and map_path(tmp / "z", next(iter(digests))).exists()
    vmap = load_map(tmp / "z", next(iter(digests)))
    assert vmap.model == "hash-64" and vmap.examples == len(examples)
    tools = {t.id: t for z in zones for t in z.tools}
    assert {i: list(tools[i].examples) for i in examples} == examples  # kept in the zone files
    hashed = make_embedder("hash")
    tool = next(iter(tools.values()))
    plain = np.asarray(hashed.embed([tool.embedding_text()]))
    carried = as_array(decode_vector(tool.vector))
    assert np.allclose(carried, vmap.apply(plain)[0], atol=0.02)  # the map's vector, not the model's own
    assert not np.allclose(carried, plain[0], atol=0.02)
    assert tree_warnings(read_tree(tmp / "z"), tmp / "z") == []


def test_a_tree_with_examples_publishes_the_wider_walk_chosen_for_it(built, tmp_path):
    from tooldns.building.build import EXAMPLES_WALK, HYBRID_WALK
    from test_build import synthetic_catalog

    tmp, _ = built
    root = next(f.zone for f in read_tree(tmp / "z") if f.zone.origin == "tools.")
    assert root.walk is not None and root.walk.k == EXAMPLES_WALK["k"] and root.walk.model == "hash-64"
    assert root.walk.pages == 1  # the follow-up page, as other trees publish it
    (tmp_path / "services.json").write_text(json.dumps(synthetic_catalog()))
    build([tmp_path / "services.json"], tmp_path / "z", embed="hash", tree_options=dict(max_children=4, max_leaf=10))
    plain = next(f.zone for f in read_tree(tmp_path / "z") if f.zone.origin == "tools.")
    assert plain.walk.k == HYBRID_WALK["k"] != EXAMPLES_WALK["k"]  # without examples: the plain hybrid walk


@pytest.mark.slow
def test_embed_gives_a_new_tool_the_same_map_and_check_says_when_the_map_is_gone(built, tmp_path):
    import shutil

    tmp, _ = built
    tree = tmp_path / "z"
    shutil.copytree(tmp / "z", tree)
    leaf = next(f for f in read_tree(tree) if f.zone.tools and not f.zone.children)
    zone = leaf.zone
    new = dataclasses.replace(zone.tools[0], label="brand-new", id="new", name="Brand new tool",
                              description="converts currencies at today's rate", vector=b"", vector_of="")
    write_zone(dataclasses.replace(zone, tools=zone.tools + (new,)), leaf.path, leaf.header)
    report = embed_tree(tree, make_embedder("hash"))
    assert report.tools_missing == 1 and report.tools_remapped == 0
    vmap = load_map(tree, zone.settings.vector_map)
    added = next(t for t in load_zone(leaf.path).tools if t.id == "new")
    plain = np.asarray(make_embedder("hash").embed([added.embedding_text()]))
    assert np.allclose(as_array(decode_vector(added.vector)), vmap.apply(plain)[0], atol=0.02)
    map_path(tree, zone.settings.vector_map).unlink()
    assert any("is not here" in w for w in tree_warnings(read_tree(tree), tree))
    with pytest.raises(BuildError, match="is not there"):
        embed_tree(tree, make_embedder("hash"))
