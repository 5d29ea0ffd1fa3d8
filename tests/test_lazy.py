"""Zones loaded on first use (``tooldns serve --lazy``): a tree answers once its top zone is read,
each zone is loaded when a query is first about it and at most ``max_loaded`` stay loaded, and the
answers are those of the same tree loaded whole. Real servers, real resolutions over UDP and TCP."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from dnslib import EDNS0, RCODE, DNSRecord, EDNSOption

from resolver_client import Resolver
from tooldns.building.build import build
from tooldns.exceptions import ZoneFileError
from tooldns.protocol.ede import EDE_OPTION_CODE
from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent
from tooldns.serving.tree import Tree, TreeThread, load_tree
from tooldns.zone.zonefile import load_zone, zone_files

from conftest import REPLY_TIMEOUT, ROOT, fresh_subnet, free_port
from test_build import synthetic_catalog
from test_summaries import AIRSHIP

INTENTS = ["rain forecast for tomorrow", "stock dividend and currency exchange", "song lyrics by an artist",
           "directions to an address", "wind and humidity", "album chart", "portfolio quote"]


def built_on_one_address(tmp: Path, embed: str | None = None, **tree_options) -> tuple[Path, str]:
    """A BM25 tree of the 120 synthetic tools built in *tmp*/zones (with *embed*, a hybrid one of that
    embedder's vectors), every zone's name server on one address: the directory and the address."""
    catalog = tmp / "services.json"
    catalog.write_text(json.dumps(synthetic_catalog()))
    address = f"{fresh_subnet()}.1"
    build([str(catalog)], str(tmp / "zones"), subnet=address, embed=embed, tree_options=tree_options)
    return tmp / "zones", address


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A built tree of 120 tools in about 20 zones, every zone's name server on one address."""
    return built_on_one_address(tmp_path_factory.mktemp("lazy"), max_leaf=6, max_children=4)


def _tools(root, intent):
    with Resolver(root=root, cache=False, timeout=REPLY_TIMEOUT) as resolver:
        res = resolver.resolve(intent, k=2, leaf_k=6)
    return [(t.name, t.score) for t in res.tools], res.stats.queries


def _copied(built, tmp_path) -> Path:
    """A copy of the built tree's zone files, to edit."""
    copy = tmp_path / "zones"
    copy.mkdir()
    for f in built[0].glob("*.yaml"):
        (copy / f.name).write_bytes(f.read_bytes())
    return copy


def test_build_address_names_one_address_for_every_zone(built):
    zones, address = built
    files = zone_files(zones)
    assert len(files) > 8
    assert {ns.address for f in files for ns in load_zone(f).nameservers} == {address}


@pytest.mark.integration
def test_lazy_answers_as_the_tree_loaded_whole_within_max_loaded(built):
    zones, address = built
    with TreeThread(zones, free_port(address), listen=[address]) as whole, \
            TreeThread(zones, free_port(address), listen=[address], lazy=True, max_loaded=3) as lazy:
        zoned = lazy.tree.lazy
        assert not zoned.loaded and zoned.loads == 0  # the top zone only, until asked
        for intent in INTENTS:
            expected, queries = _tools(whole.root(), intent)
            got, _ = _tools(lazy.root(), intent)
            assert got == expected and expected, intent
            assert queries > 2  # the walk went below the root
            assert len(zoned.loaded) <= 3
        assert zoned.loads > 3 and zoned.drops == zoned.loads - len(zoned.loaded)
        stats = lazy.call(_stats(lazy.tree))
        assert stats["zones"] == len(zone_files(zones)) and stats["queries"] > len(INTENTS)
        assert set(lazy.counters()) >= set(zoned.loaded)


async def _stats(tree):
    server = next(iter(tree.sockets.values()))
    return server.resolver.counters()


def _ask(address, port, zone, intent, tcp=False):
    q = DNSRecord.question(f"_any._tcp._{zone}", "SRV")
    q.header.rd = 0
    q.add_ar(EDNS0(udp_len=1232, opts=[EDNSOption(INTENT_OPTION_CODE, encode_intent(intent, 3))]))
    return DNSRecord.parse(q.send(address, port, tcp=tcp, timeout=REPLY_TIMEOUT))


@pytest.mark.integration
def test_a_broken_zone_answers_servfail_until_fixed_and_the_others_keep_answering(built, tmp_path):
    _, address = built
    copy = _copied(built, tmp_path)
    top = load_zone(copy / "root.yaml")
    broken, healthy = top.children[0].name, top.children[1].name
    path = copy / f"{broken.rstrip('.')}.yaml"
    good = path.read_text()
    path.write_text(good.replace("origin:", "origin: [", 1))
    with pytest.raises(ZoneFileError):
        load_tree(copy)  # loaded whole, the tree refuses to start
    with TreeThread(copy, free_port(address), listen=[address], lazy=True) as lazy:
        port = lazy.root()[1]
        for tcp in (False, True):
            reply = _ask(address, port, broken, "rain", tcp)
            assert reply.header.rcode == RCODE.SERVFAIL
            ede = [o for rr in reply.ar if rr.rtype == 41 for o in rr.rdata if o.code == EDE_OPTION_CODE]
            assert ede and path.name.encode() in ede[0].data
            assert _ask(address, port, healthy, "rain", tcp).header.rcode == RCODE.NOERROR
        path.write_text(good + "\n")  # fixed: tried again, since the file changed
        assert _ask(address, port, broken, "rain").header.rcode == RCODE.NOERROR


@pytest.mark.integration
def test_lazy_needs_the_addresses_to_serve_every_zone_on(built):
    zones, _ = built
    with pytest.raises(ValueError, match="--listen"):
        Tree(zones, 0, lazy=True)
    out = subprocess.run([sys.executable, "-m", "tooldns.cli", "serve", str(zones), "--lazy"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 2 and "--listen" in out.stderr


@pytest.mark.integration
def test_tooldns_serve_lazy_says_what_it_serves_and_answers(built):
    zones, address = built
    port = free_port(address)
    proc = subprocess.Popen([sys.executable, "-m", "tooldns.cli", "serve", str(zones), "--lazy", "--listen", address,
                             "--port", str(port), "--max-loaded", "5", "--max-loaded-memory", "64M"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "root zone on" in line:
                break
        started = "".join(lines)
        assert f"{len(zone_files(zones))} zones (the others loaded when first asked for, at most 5 at once " \
               f"holding 64 MiB) " \
               f"on 1 addresses" in started, started
        got, _ = _tools((address, port), INTENTS[0])
        assert got
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


def test_the_top_zone_is_the_one_every_other_lies_under(tmp_path, caplog):
    from tooldns.serving.lazy import LazyZones

    from conftest import ZONES

    zones = LazyZones(ZONES, listen=["127.0.0.1"])
    assert zones.top.index.origin == "tools." and "weather.tools." in zones.paths
    assert "glue names 127.0.0." in caplog.text and "build the tree with --address" in caplog.text
    for f in ZONES.glob("*.yaml"):
        (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / "apps.yaml").write_text((ZONES / "code.tools.yaml").read_text().replace("code.tools.", "apps."))
    with pytest.raises(ZoneFileError, match="one top zone"):
        LazyZones(tmp_path)


def test_a_zone_that_fails_in_any_way_is_unloadable_once_until_its_file_changes(built, monkeypatch):
    from tooldns.serving import lazy

    zones_dir, _ = built
    zones = lazy.LazyZones(zones_dir)
    origin = next(iter(zones.paths))
    calls = []

    class Failing(lazy.ZoneStore):
        def __init__(self, path, **kwargs):
            calls.append(path)
            raise RuntimeError("a key that cannot be used")

    monkeypatch.setattr(lazy, "ZoneStore", Failing)
    first = zones.get(origin)
    assert isinstance(first, lazy.Unloadable) and zones.get(origin) is first and len(calls) == 1
    assert not zones.loaded and origin in zones.failed


@pytest.mark.integration
def test_an_edit_of_a_dropped_zone_reaches_answers_the_server_had_cached(built, tmp_path):
    """The server's answer cache outlives a zone dropped past max_loaded; the watcher's look at the
    dropped zones' files is what makes an edit of one reach the answers."""
    from conftest import wait_until

    _, address = built
    copy = _copied(built, tmp_path)
    leaf, other = [f for f in zone_files(copy) if not load_zone(f).children][:2]
    origin, other_origin = load_zone(leaf).origin, load_zone(other).origin
    with TreeThread(copy, free_port(address), listen=[address], lazy=True, max_loaded=1,
                    watch_interval=0.05) as lazy:
        port = lazy.root()[1]

        def ports():
            return {rr.rdata.port for rr in _ask(address, port, origin, "rain forecast").rr if rr.rtype == 33}

        assert ports() == {443} and ports() == {443}  # the second from the answer cache
        _ask(address, port, other_origin, "rain forecast")  # the leaf is dropped
        assert origin not in lazy.tree.lazy.loaded and origin in lazy.tree.lazy.stamps
        leaf.write_text(leaf.read_text().replace("port: 443", "port: 8443"))
        assert wait_until(lambda: origin not in lazy.tree.lazy.stamps)  # the watcher saw the edit
        assert ports() == {8443}


def test_a_dropped_zone_is_freed(built):
    """Nothing keeps a dropped zone's index: not the group of the server's zones, not the loader."""
    import gc
    import weakref

    from tooldns.serving.lazy import LazyZones
    from tooldns.serving.multizone import MultiZoneResolver
    from tooldns.serving.resolver import ZoneResolver

    zones_dir, _ = built
    zones = LazyZones(zones_dir, max_loaded=1)
    group = MultiZoneResolver([ZoneResolver(zones.top)], lazy=zones)
    first, second = list(zones.paths)[:2]
    index = weakref.ref(group.member_for(first).source.index)
    group.renew()  # a group made while the first zone is loaded
    group.member_for(second)  # drops the first
    gc.collect()
    assert index() is None and first not in zones.loaded


@pytest.mark.slow
def test_dropped_zones_are_freed_without_the_cycle_collector_and_loads_are_frozen_out_of_it(built):
    """Zones hold no reference cycles: with the collector off, every zone loaded, answered from (both
    paths) and dropped leaves nothing for it to find, which is what lets ``tooldns serve`` freeze
    loaded zones out of its full collections (:mod:`tooldns.serving.gcpolicy`); and a lazy tree
    loading under :class:`QuietLoads` freezes after each load and leaves the collector as it found it."""
    import gc
    import weakref

    from tooldns.protocol import names
    from tooldns.serving.gcpolicy import QuietLoads
    from tooldns.serving.lazy import LazyZones

    zones_dir, _ = built
    zones = LazyZones(zones_dir, max_loaded=1)
    zones.load_guard = freezer = QuietLoads()
    gc.collect()
    gc.disable()
    try:
        gc.unfreeze()  # what this test process froze before, if anything, back in collections
        indexes = []
        for origin in zones.paths:
            resolver = zones.get(origin)
            indexes.append(weakref.ref(resolver.source.index))
            for udp in (True, False):
                query = DNSRecord.question(names.Cursor("any", "tcp", origin).to_text(), "SRV")
                query.add_ar(EDNS0(udp_len=1232, opts=[EDNSOption(INTENT_OPTION_CODE, encode_intent("rain forecast", 2))]))
                assert resolver.fast_answer(bytes(query.pack()), udp) is not None  # the fast path's pieces made
                assert resolver.resolve(query, None).header.rcode == RCODE.NOERROR  # and dnslib's
            del resolver
        assert freezer.loads >= len(zones.paths) >= 6 and gc.get_freeze_count() > 0 and not gc.isenabled()
        gc.unfreeze()
        assert sum(ref() is not None for ref in indexes) == 1  # the one zone still loaded
        assert gc.collect() == 0  # no garbage cycle among the dropped zones
    finally:
        gc.unfreeze()
        gc.enable()


@pytest.mark.slow
def test_a_reloaded_zone_is_freed_without_the_cycle_collector(built, tmp_path):
    """The other half of what lets ``tooldns serve`` freeze loaded zones: an edit's reload leaves the
    old index to reference counting alone (emptied a piece at a time by the next look at the file)."""
    import gc
    import os
    import time
    import weakref

    from tooldns.serving.resolver import ZoneResolver
    from tooldns.serving.store import ZoneStore

    path = next(p for p in _copied(built, tmp_path).glob("*.yaml") if p.name != "tools.yaml")
    store = ZoneStore(str(path))
    ZoneResolver(store).fast_answer(b"", True)  # a resolver on it, as a server has
    gc.collect()
    gc.disable()
    try:
        old = weakref.ref(store.index)
        serial = store.serial
        path.write_text(path.read_text().replace(f"serial: {serial}", f"serial: {serial + 1}"))
        os.utime(path, (time.time() + 5, time.time() + 5))
        assert store.check() == "reloaded" and store.serial == serial + 1
        assert old() is not None  # kept for the next check, which frees it a piece at a time
        assert store.check() is None
        assert old() is None and gc.collect() == 0
    finally:
        gc.enable()


def test_files_added_and_taken_away_are_seen_when_the_directory_changes(built, tmp_path):
    """LazyZones.new_files: a new zone file under the top zone is served, a temporary file being
    written, a file of no origin under the top and a file taken away while loaded are not acted on."""
    from tooldns.serving.lazy import LazyZones

    zones_dir, _ = built
    copy = _copied(built, tmp_path)
    zones = LazyZones(copy, max_loaded=5)
    zones._dir_stamp = None  # as right after a change: file times tick too coarsely to trust a fresh one
    assert zones.new_files() is False  # listed again, nothing new
    leaf = next(o for o in zones.paths if not load_zone(zones.paths[o]).children)
    text = (copy / f"{leaf[:-1]}.yaml").read_text()
    new_origin = "zz-new." + zones.top.index.origin
    (copy / f"{new_origin[:-1]}.yaml").write_text(text.replace(f"origin: {leaf}", f"origin: {new_origin}")
                                                   .replace(leaf, new_origin))
    (copy / f".{new_origin}yaml.update-tmp").write_text("half written")
    (copy / "elsewhere.example.yaml").write_text("origin: elsewhere.example.\n")
    zones._dir_stamp = None
    assert zones.new_files() is True
    assert zones.paths[new_origin] == str(copy / f"{new_origin[:-1]}.yaml")
    assert "elsewhere.example." not in zones.paths and len(zones.paths) == len(zone_files(zones_dir))
    assert zones.get(new_origin).source.index.origin == new_origin  # loads and answers
    zones.get(leaf)
    (copy / f"{leaf[:-1]}.yaml").unlink()  # loaded: kept, in its last good version
    (copy / f"{new_origin[:-1]}.yaml").rename(copy / "renamed.txt")
    zones._dir_stamp = None
    assert zones.new_files() is False and leaf in zones.paths and new_origin in zones.paths  # both loaded
    zones._drop(leaf, zones.loaded.pop(leaf))
    assert leaf not in zones.paths and leaf not in zones.stamps  # its file gone: forgotten once dropped
    zones._drop(new_origin, zones.loaded.pop(new_origin))
    (copy / "renamed.txt").rename(copy / f"{new_origin[:-1]}.yaml")
    zones._dir_stamp = None
    assert zones.new_files() is True and new_origin in zones.paths


def _found_airship(root) -> bool:
    with Resolver(root=root, cache=False, timeout=REPLY_TIMEOUT) as resolver:
        return any(t.name == "Zeppelin Airship Route Planner"
                   for t in resolver.resolve("zeppelin airship dirigible", k=1).tools)


def _copy_with_a_deep_leaf(built, tmp_path):
    """A copy of the built tree, and the origin of a leaf two levels or more below the top."""
    copy = _copied(built, tmp_path)
    leaves = [load_zone(f).origin for f in zone_files(copy) if not load_zone(f).children]
    leaf = max(leaves, key=lambda o: o.count("."))
    assert leaf.count(".") >= 3, leaf  # a leaf below a zone below the top: the edit climbs two levels
    return copy, leaf


def _add_airship(copy, origin: str, serial: int | None = None) -> None:
    """An organisation's edit of its leaf: a tool added, the serial raised to *serial* or left as it was."""
    path = copy / f"{origin[:-1]}.yaml"
    text = path.read_text().replace("tools:\n", "tools:\n" + AIRSHIP, 1)
    path.write_text(text if serial is None else text.replace("  serial: 1\n", f"  serial: {serial}\n", 1))


@pytest.mark.integration
@pytest.mark.parametrize("loaded", [True, False], ids=["leaf loaded", "leaf never loaded"])
def test_a_leaf_edit_reaches_the_top_of_a_lazy_tree(built, tmp_path, loaded):
    """Parents of a lazy tree follow their children: a tool added to a leaf is findable from the top
    with K = 1, whether the leaf was loaded when edited (it reloads and serves a new serial, the
    file's left as it was) or not (the watcher sees its file change, whose serial the editor raised:
    the server has no serial of its own for a zone it never served); every zone above it serves a
    new serial, and what they learned outlives their being dropped (at most two zones loaded)."""
    from conftest import wait_until

    copy, leaf = _copy_with_a_deep_leaf(built, tmp_path)
    _, address = built
    with TreeThread(copy, free_port(address), listen=[address], lazy=True, max_loaded=2,
                    watch_interval=0.05) as served:
        zones, root = served.tree.lazy, served.root()
        assert not _found_airship(root)
        if loaded:
            zones.get(leaf)
        else:
            assert leaf not in zones.loaded and leaf in zones.stamps  # its file's stamp taken at the start
        _add_airship(copy, leaf, serial=None if loaded else 2)
        assert wait_until(lambda: _found_airship(root)), "the new tool never became findable from the top"
        # the edit goes up in a thread, a zone at a time: answers may find the tool before the top learns
        assert wait_until(lambda: zones.top.serial > 1)
        for intent in INTENTS:  # other zones loaded, the edited branch dropped
            _tools(root, intent)
        parent = zones._parent(leaf)
        assert leaf not in zones.loaded and parent not in zones.loaded and zones.served[leaf] == 2
        assert _found_airship(root)
        served_copy = next(c for c in zones.get(parent).source.zone.children if c.name == leaf)
        assert "zeppelin" in served_copy.summary.counts()  # loaded again with what it had learned


@pytest.mark.integration
def test_with_no_summaries_a_lazy_parent_keeps_its_files_copy(built, tmp_path):
    """``--no-summaries``: the edited leaf answers with its new tool, its parents keep their copies."""
    from conftest import wait_until

    copy, leaf = _copy_with_a_deep_leaf(built, tmp_path)
    _, address = built
    with TreeThread(copy, free_port(address), listen=[address], lazy=True, watch_interval=0.05,
                    summaries=False) as served:
        zones = served.tree.lazy
        store = zones.get(leaf).source
        _add_airship(copy, leaf)
        assert wait_until(lambda: zones.get(leaf).source.reloads == 1 and store.reloads == 1)
        assert any(t.name == "Zeppelin Airship Route Planner" for t in zones.get(leaf).source.zone.tools)
        assert zones.top.serial == 1 and not zones.top.learned and not zones.learned


def test_a_broken_edit_of_a_zone_not_loaded_is_reported_once(built, tmp_path):
    """The watcher reports a changed file once, not at every round, when it cannot be loaded: the
    server's answer cache is not emptied again and again."""
    copy, leaf = _copy_with_a_deep_leaf(built, tmp_path)
    from tooldns.serving.lazy import LazyZones

    zones = LazyZones(copy, max_loaded=2)
    (copy / f"{leaf[:-1]}.yaml").write_text("origin: [broken\n")
    rounds = [zones.files_changed() for _ in range(2 * (len(zones.paths) // 2000 + 1))]
    assert rounds.count(True) == 1 and leaf in zones.failed and leaf not in zones.loaded


def test_changed_files_are_followed_a_few_loads_a_round(built, tmp_path, monkeypatch):
    """An update that rewrites many zones not loaded is followed over several rounds, FOLLOW_LOADS
    zones loaded in each, so that no round holds up the answers for long."""
    from tooldns.serving import lazy
    from tooldns.serving.lazy import LazyZones

    copy, _ = _copy_with_a_deep_leaf(built, tmp_path)
    monkeypatch.setattr(lazy, "FOLLOW_LOADS", 2)
    zones = LazyZones(copy, max_loaded=50)
    leaves = [o for o, p in zones.paths.items() if not load_zone(p).children][:5]
    for origin in leaves:
        _add_airship(copy, origin, serial=2)
    loads, rounds = [], 1 + len(zones.paths) // lazy.FILE_CHECKS  # a round goes through every file
    for _ in range(rounds + 2):
        before = zones.loads
        zones.files_changed()
        loads.append(zones.loads - before)
    # each round loads two changed leaves at most, and their parents (for the leaves to tell them)
    assert all(n <= 2 * 3 for n in loads) and set(leaves) <= set(zones.loaded)
    assert sum(1 for n in loads if n) >= 3  # five leaves, two a round: over three rounds at least


def _sizes(zones_dir) -> dict[str, int]:
    """Every zone of the tree loaded with no bound: origin -> the bytes it was counted at."""
    from tooldns.serving.lazy import LazyZones

    zones = LazyZones(zones_dir, max_memory=0)
    for origin in zones.paths:
        zones.get(origin)
    assert zones.held == sum(zones._held.values()) and len(zones._held) == len(zones.loaded)
    return dict(zones._held)


@pytest.mark.integration
def test_a_lazy_tree_within_a_memory_bound_answers_as_the_tree_loaded_whole(built):
    """``max_memory`` (``--max-loaded-memory``): the zones kept loaded hold at most that many bytes as
    counted, the least recently asked dropped first, the zone just loaded never; answers unchanged."""
    zones, address = built
    sizes = sorted(_sizes(zones).values())
    bound = 3 * sizes[len(sizes) // 2]
    with TreeThread(zones, free_port(address), listen=[address]) as whole, \
            TreeThread(zones, free_port(address), listen=[address], lazy=True, max_memory=bound) as lazy:
        zoned = lazy.tree.lazy
        assert zoned.max_loaded >= len(zoned.paths)  # the count bound never bites here: only the bytes
        for intent in INTENTS:
            expected, _ = _tools(whole.root(), intent)
            got, _ = _tools(lazy.root(), intent)
            assert got == expected and expected, intent
            with zoned._lock:  # no load half done
                assert zoned.held <= bound or len(zoned.loaded) == 1
                assert zoned.held == sum(zoned._held.values()) > 0 and set(zoned._held) == set(zoned.loaded)
        assert zoned.drops > 0 and zoned.drops == zoned.loads - len(zoned.loaded)


def test_a_zone_larger_than_the_memory_bound_is_served_alone(built):
    from tooldns.serving.lazy import LazyZones

    zones_dir, _ = built
    zones = LazyZones(zones_dir, max_memory=1)
    for origin in list(zones.paths)[:4]:
        assert zones.get(origin).source.index.origin == origin
        assert list(zones.loaded) == [origin] and zones.held == zones._held[origin] > 1
    assert zones.drops == 3
    with pytest.raises(ValueError, match="max_memory"):
        LazyZones(zones_dir, max_memory=-1)


def test_a_zone_read_back_is_counted_near_what_its_objects_hold(built, tmp_path):
    """A zone loaded in a loading process is counted from what it was read back from (no walk of its
    objects in the serving process), a zone loaded in this thread by a walk: the first within 2x of a
    walk of the objects read back, made by the loading process and then read back from a snapshot."""
    from tooldns.serving.footprint import footprint
    from tooldns.serving.lazy import LazyZones
    from tooldns.serving.loader import ZoneLoader

    zones_dir, _ = built
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir(mode=0o700)
    loader = ZoneLoader(processes=1, snapshots=snapshots)
    try:
        for _ in range(2):
            zones = LazyZones(zones_dir, max_memory=0, loader=loader)
            for origin in zones.paths:
                store = zones.get(origin).source
                walked = footprint(store.file_zone, store.index)
                assert walked / 2 <= zones._held[origin] <= 2 * walked, origin
        assert loader.from_snapshots >= len(zones.paths) and loader.declined == 0
    finally:
        loader.close()


@pytest.mark.parametrize("processes", [1, 0], ids=["loading process", "in this thread"])
def test_a_reloaded_edit_is_counted_anew_and_the_bound_kept(built, tmp_path, processes):
    """A loaded zone whose file is edited to hold many more tools is counted again at its reload (the
    loading process's count, or a walk of what this thread read), and a bound it now passes drops the
    zones asked before it."""
    import os
    import time

    from tooldns.serving.footprint import zone_footprint
    from tooldns.serving.lazy import LazyZones
    from tooldns.serving.loader import ZoneLoader

    copy, leaf = _copy_with_a_deep_leaf(built, tmp_path)
    loader = ZoneLoader(processes=processes) if processes else None
    try:
        zones = LazyZones(copy, max_memory=0, loader=loader, follow=False)  # its parent left as it is
        others = [o for o in zones.paths if o != leaf][:3]
        for origin in [*others, leaf]:
            zones.get(origin)
        before, held = zones._held[leaf], zones.held
        path = copy / f"{leaf[:-1]}.yaml"
        more = "".join(AIRSHIP.replace("zeppelin-routes", f"zeppelin-routes-{i}")
                       .replace("Route Planner", f"Route Planner {i}") for i in range(200))
        path.write_text(path.read_text().replace("tools:\n", "tools:\n" + more, 1))
        os.utime(path, (time.time() + 5, time.time() + 5))
        store = zones.loaded[leaf].source
        zones.check(store)
        assert len(store.zone.tools) > 200
        after = zones._held[leaf]
        walked = zone_footprint(store.file_zone, store.index)
        assert after > 4 * before and walked / 2 <= after <= 2 * walked
        assert zones.held == held - before + after == sum(zones._held.values())
        zones.max_memory = after + 1024  # now past it with the others: they go, the edited zone stays
        path.write_text(path.read_text().replace("  serial: 1\n", "  serial: 2\n", 1))
        os.utime(path, (time.time() + 10, time.time() + 10))
        zones.check(store)
        assert list(zones.loaded) == [leaf] and zones.held == zones._held[leaf] <= zones.max_memory
    finally:
        if loader is not None:
            loader.close()


def test_a_zone_whose_load_loads_its_parent_is_not_dropped_by_it(built, tmp_path):
    """A leaf whose file changed since the directory was listed tells its parent its summary, loading the
    parent for it; the parent's load, past the memory bound with both, drops zones asked before, never
    that leaf, whose load is still under way (its resolver is the one asked for, and it stays loaded)."""
    from tooldns.serving.lazy import LazyZones

    copy, leaf = _copy_with_a_deep_leaf(built, tmp_path)
    zones = LazyZones(copy, max_memory=1)
    other = next(o for o in zones.paths if o != leaf and o != zones._parent(leaf))
    zones.get(other)
    _add_airship(copy, leaf, serial=5)  # changed since listed: loading it tells its parent
    resolver = zones.get(leaf)
    assert list(zones.loaded)[:2] == [leaf, zones._parent(leaf)] and zones.loaded[leaf] is resolver  # and above
    assert any(t.name == "Zeppelin Airship Route Planner" for t in resolver.source.zone.tools)
    zones.get(other)  # the next load drops both, as the bound says
    assert list(zones.loaded) == [other]
