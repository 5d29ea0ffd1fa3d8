"""One zone-file schema: what ``dump_zone`` writes, ``load_zone`` reads back as the same zone."""

from __future__ import annotations

import json

import pytest

from tooldns.building.build import build
from tooldns.zone import dump_zone, load_zone, parse_zone
from tooldns.zone.model import SOA, NameServer, Parameter, Settings, Summary, Tool, WalkPlan, Zone

from conftest import ZONES
from test_build import synthetic_catalog


def assert_round_trip(zone: Zone) -> str:
    text = dump_zone(zone)
    again = parse_zone(text, "<dumped>")
    assert again == zone
    assert dump_zone(again) == text  # a fixed point: dumping what was read changes nothing
    return text


@pytest.mark.parametrize("path", sorted(ZONES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_zone_round_trips(path):
    assert_round_trip(load_zone(path))


def test_a_built_tree_round_trips(tmp_path):
    catalog = tmp_path / "services.json"
    catalog.write_text(json.dumps(synthetic_catalog()))
    report = build([str(catalog)], str(tmp_path / "built"))
    files = sorted((tmp_path / "built").glob("*.yaml"))
    assert len(files) == report.zones > 1
    for path in files:
        zone = load_zone(path)
        text = assert_round_trip(zone)
        assert path.read_text(encoding="utf-8").endswith(text)  # the builder wrote it through dump_zone
    assert any(load_zone(p).corpus_stats is not None for p in files)


def test_everything_the_model_can_hold_round_trips():
    origin = "hku.weather.tools."
    zone = Zone(
        origin=origin, soa=SOA("ns2.hku.weather.tools.", "first\\.last.hku.example.", 7, refresh=60, retry=30,
                               expire=1000, minimum=5),
        nameservers=(NameServer(f"ns1.{origin}", "127.0.0.9"), NameServer(f"ns2.{origin}", "::1")), ttl=120,
        summary=Summary("HKU tools", ("campus", "香港大学"), "long corpus text",
                        corpus_terms=(("rain", 3), ("radar", 1), ("香港", 1))),
        tools=(Tool("t1", "Tool One", "mcp", "t1.example.", 8443, "Does one thing", transport="udp", priority=3,
                    weight=7, endpoint="https://t1.example/mcp", id="x-1",
                    parameters=(Parameter("q", "integer", "", True), Parameter("lang"))),),
        settings=Settings(scorer="llm", scorer_options={"budget_ms": 500}, child_scorer_options={"k1": 9.0},
                          prune_ratio=0.5, max_k=8, intent_ttl=0))
    text = assert_round_trip(zone)
    assert "contact: first.last@hku.example" in text


def test_defaults_are_left_out_so_a_dump_reads_like_a_hand_written_file():
    zone = load_zone(ZONES / "history.weather.tools.yaml")
    text = dump_zone(zone)
    for key in ("refresh:", "transport:", "priority:", "prune_ratio:", "settings:"):
        assert key not in text


@pytest.mark.parametrize("walk", [WalkPlan(k=(6,)), WalkPlan(k=(5, 3, 2), leaf_k=6, best_leaf_k=10, beam=6,
                                                           model="multilingual-e5-small"),
                                  WalkPlan(k=1, model="123"), WalkPlan(k=(255,) * 8, beam=65535, model="true")])
def test_a_published_walk_round_trips_exactly(walk):
    from dataclasses import replace

    zone = replace(load_zone(ZONES / "tools.yaml"), walk=walk)
    text = assert_round_trip(zone)
    assert "\nwalk:\n" in text and text.index("walk:") < text.index("children:")  # after settings, before children
    assert dump_zone(replace(zone, walk=None)).count("walk:") == 0
