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
                                  WalkPlan(k=1, model="123"), WalkPlan(k=(255,) * 8, beam=65535, model="true"),
                                  WalkPlan(k=6, model="minilm-static", pages=1, fusion=0.6), WalkPlan(k=6, fusion=1)])
def test_a_published_walk_round_trips_exactly(walk):
    from dataclasses import replace

    zone = replace(load_zone(ZONES / "tools.yaml"), walk=walk)
    text = assert_round_trip(zone)
    assert "\nwalk:\n" in text and text.index("walk:") < text.index("children:")  # after settings, before children
    assert dump_zone(replace(zone, walk=None)).count("walk:") == 0


def test_a_zone_file_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """``write_zone`` writes a temporary file beside the zone file, flushes it to the disk and renames it
    into place: a server polling the file, or whoever looks after a crash, reads one version whole."""
    import os

    from tooldns.zone.zonefile import header_of, write_zone

    zone = load_zone(ZONES / "tools.yaml")
    path = tmp_path / "tools.yaml"
    write_zone(zone, path, "first line\nsecond line")
    os.chmod(path, 0o640)
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    write_zone(replace_serial(zone, 8), path, header_of(path))
    assert synced and os.stat(path).st_mode & 0o777 == 0o640  # flushed, and the file keeps its mode
    assert load_zone(path).soa.serial == 8 and header_of(path) == "first line\nsecond line"
    assert [p.name for p in tmp_path.iterdir()] == ["tools.yaml"]  # no temporary file left

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError):
        write_zone(replace_serial(zone, 9), path)
    assert load_zone(path).soa.serial == 8  # the old version, whole
    assert [p.name for p in tmp_path.iterdir()] == ["tools.yaml"]


def replace_serial(zone: Zone, serial: int) -> Zone:
    from dataclasses import replace

    return replace(zone, soa=replace(zone.soa, serial=serial))
