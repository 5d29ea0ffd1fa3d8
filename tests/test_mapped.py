"""Leaf maps (:mod:`tooldns.serving.mapped`): a lazy leaf met again answers intent searches from a file
mapped into memory, byte for byte as the zone loaded whole would, without loading it; anything else
loads the zone; a map that is spoiled, foreign or of an older version of the file is not used."""

from __future__ import annotations

import json
import os
from pathlib import Path

import dns.edns
import pytest
from dnslib import QTYPE, RCODE, DNSRecord

from resolver_client import Resolver
from resolver_client.message import make_query, opt_record
from tooldns.protocol.brief import BRIEF_OPTION_CODE
from tooldns.protocol.fit import FIT_OPTION_CODE
from tooldns.protocol.page import PAGE_OPTION_CODE, encode_page
from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent
from tooldns.protocol.vector import VECTOR_OPTION_CODE, encode_vector
from tooldns.serving.fast.path import FastPath
from tooldns.serving.loader import _read_snapshot, _snapshot_name, keep_map, map_path, open_trusted, prepare, \
    unpickle_pieces
from tooldns.serving.mapped import LeafMap, MappedFastPath, mappable
from tooldns.serving.observe import ZoneOf, question_end
from tooldns.serving.offloop import on_the_loop
from tooldns.serving.resolver import StaticSource
from tooldns.serving.tree import TreeThread
from tooldns.zone.limits import ZoneLimits
from tooldns.zone.zonefile import load_zone, read_zone_file, stat_stamp, zone_files

from conftest import REPLY_TIMEOUT, free_port, wait_until
from test_lazy import INTENTS, built_on_one_address
from test_summaries import AIRSHIP


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A BM25 tree of 120 tools: a root over leaves of up to 12 tools, on one address."""
    return built_on_one_address(tmp_path_factory.mktemp("mapped"), max_leaf=12, max_children=16)


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    """The same tools in a hybrid tree (vectors of the ``hash`` embedder, which its zones embed intents
    with), on one address."""
    return built_on_one_address(tmp_path_factory.mktemp("mapped-hybrid"), embed="hash", max_leaf=12,
                                max_children=16)


def _copied(built, tmp_path) -> Path:
    """A copy of the built tree's zone files, with a snapshot directory of its own and no maps yet (new
    files: the build's maps are of the originals)."""
    copy = tmp_path / "zones"
    (copy / ".snapshots").mkdir(parents=True, mode=0o700)
    for f in built[0].glob("*.yaml"):
        (copy / f.name).write_bytes(f.read_bytes())
    return copy


def _leaves(zones: Path) -> list[Path]:
    return [f for f in zone_files(zones) if not load_zone(f).children]


def _indexed(path: Path, snapshots: Path):
    """Zone file *path* as the loading process indexes it (its snapshot and map kept in *snapshots*),
    read back: the zone, its index and the map's path."""
    limits = ZoneLimits()
    prepare(str(path), limits, str(snapshots), str(snapshots))
    data, st = read_zone_file(path, limits)
    zone, index = unpickle_pieces(_read_snapshot(snapshots / _snapshot_name(data, limits)))
    return zone, index, map_path(snapshots, str(path), stat_stamp(st), limits)


def _queries(origin: str, embedder=None) -> list[bytes]:
    """Intent searches of *origin* by every service, expanded and not, several K, brief, fit and page
    options, and queries the fast path leaves to the full path (another type, a tool's own name);
    with *embedder*, each intent's vector beside it (the vector option)."""
    out = []
    cursor = origin.split(".", 1)
    for intent in INTENTS:
        vector = [] if embedder is None else \
            [dns.edns.GenericOption(VECTOR_OPTION_CODE, encode_vector(embedder.model, embedder.embed_query(intent)))]
        for name in (f"_any._tcp.{origin}", f"_http._tcp.{origin}", f"_mcp._tcp.{origin}",
                     f"_any._tcp._{cursor[0]}.{cursor[1]}"):
            for k in (1, 3, 10):
                option = dns.edns.GenericOption(INTENT_OPTION_CODE, encode_intent(intent, k))
                out.append(make_query(name, opt_record([*vector, option]), msg_id=k))
                out.append(make_query(name, opt_record([*vector, option, dns.edns.GenericOption(BRIEF_OPTION_CODE, b"")]),
                                      msg_id=k))
                out.append(make_query(name, opt_record([*vector, option, dns.edns.GenericOption(FIT_OPTION_CODE, b"")],
                                                       payload=512), msg_id=k))
                for skip in (k, 2 * k):  # the page option: the tools after the best
                    out.append(make_query(name, opt_record([*vector, option, dns.edns.GenericOption(PAGE_OPTION_CODE,
                                                                                           encode_page(skip))]), msg_id=k))
        option = dns.edns.GenericOption(INTENT_OPTION_CODE, encode_intent(intent, 3))
        out.append(make_query(f"_any._tcp.{origin}", opt_record([*vector, option]), qtype=QTYPE.TXT, msg_id=1))
    out.append(make_query(origin, opt_record([]), qtype=QTYPE.SOA, msg_id=2))
    return out


def test_a_leaf_map_answers_byte_for_byte_as_the_zone_it_maps(built, tmp_path):
    """Every leaf's map, kept by the loading process with its snapshot, answers every query its fast path
    answers with the same bytes, brief and fit options and cursor names among them, and declines
    what the fast path declines; no tool is made until it is answered."""
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir(mode=0o700)
    answered = declined = 0
    for path in _leaves(built[0]):
        zone, index, where = _indexed(path, snapshots)
        assert mappable(index) and where.is_file(), path
        leaf = LeafMap.open(where, open_trusted)
        assert leaf.origin == zone.origin and not leaf.pieces._made
        whole = FastPath(StaticSource(index), INTENT_OPTION_CODE, {"queries": 0, "trimmed": 0})
        mapped = MappedFastPath(leaf, INTENT_OPTION_CODE, {"queries": 0, "trimmed": 0})
        for query in _queries(zone.origin):
            expected = whole.answer(query, True)
            assert mapped.answer(query, True) == expected, (path, query)
            answered += expected is not None
            declined += expected is None
        assert len(leaf.pieces._made) <= len(zone.tools)
    assert answered > 500 and declined > 20


def test_a_hybrid_leafs_map_answers_intents_with_or_without_vectors_as_the_zone(hybrid, tmp_path):
    """A hybrid leaf's map holds its vectors as well as its terms: a query that brings the intent's
    vector is answered byte for byte as by the zone (the fused scores and their parts), and so is one
    without (dig's), the intent embedded as the zone embeds it; on the event loop, an intent not
    embedded yet is left to the server's pool (WouldWait), one embedded already answered there."""
    from tooldns.embedding.registry import make_embedder
    from tooldns.serving.offloop import WouldWait, on_the_loop

    embedder = make_embedder("hash")
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir(mode=0o700)
    answered = embedded = 0
    for path in _leaves(hybrid[0]):
        zone, index, where = _indexed(path, snapshots)
        assert zone.settings.scorer == "hybrid" and mappable(index) and where.is_file(), path
        leaf = LeafMap.open(where, open_trusted)
        assert (leaf.model, leaf.dim, leaf.embeds) == (index.model, index.dim, zone.settings.embed_intents) != \
            (None, 0, "")
        whole = FastPath(StaticSource(index), INTENT_OPTION_CODE, {"queries": 0, "trimmed": 0})
        mapped = MappedFastPath(leaf, INTENT_OPTION_CODE, {"queries": 0, "trimmed": 0})
        for query in _queries(zone.origin, embedder):
            expected = whole.answer(query, True)
            assert mapped.answer(query, True) == expected, (path, query)
            answered += expected is not None and b"cos=" in expected
        unseen = [make_query(f"_any._tcp.{zone.origin}", opt_record([dns.edns.GenericOption(
            INTENT_OPTION_CODE, encode_intent(f"{zone.origin} never asked {n}", 3))])) for n in range(2)]
        with on_the_loop(), pytest.raises(WouldWait):  # the embedder is not made yet
            mapped.answer(unseen[0], True)
        assert mapped.answer(unseen[0], True) == whole.answer(unseen[0], True) is not None  # off the loop
        with on_the_loop(), pytest.raises(WouldWait):  # made, but this intent is not embedded yet
            mapped.answer(unseen[1], True)
        for query in _queries(zone.origin)[:-2]:  # intents without their vector
            expected = whole.answer(query, True)
            with on_the_loop():  # the zone embedded it a moment ago: answered where the loop asks
                assert mapped.answer(query, True) == expected, (path, query)
            embedded += expected is not None and b"cos=" in expected
    assert answered > 300 and embedded > 300


def test_a_zone_with_children_has_no_map(built, tmp_path):
    """A zone with children has no map (nor has a leaf whose scorer is an LLM's: its index is not even
    pickled)."""
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir(mode=0o700)
    root = built[0] / "root.yaml"
    _, index, where = _indexed(root, snapshots)
    assert not mappable(index) and not where.exists()
    assert keep_map(snapshots, str(root), (0, 0, 0), ZoneLimits(), index) is False


@pytest.mark.parametrize("tree", ["built", "hybrid"])
def test_a_map_let_go_is_freed_without_the_cycle_collector(tree, request, tmp_path):
    """A mapped leaf that answered, once nothing refers to it, is freed by its count of references (its
    mapping with it, and a hybrid leaf's rows read where they lie): a lazy server lets maps go all the
    time, and cycles would wait for the collector."""
    import gc
    import weakref

    from tooldns.embedding.registry import make_embedder
    from tooldns.serving.mapped import MappedResolver

    snapshots = tmp_path / "snapshots"
    snapshots.mkdir(mode=0o700)
    zone, _, where = _indexed(_leaves(request.getfixturevalue(tree)[0])[0], snapshots)
    embedder = make_embedder("hash") if tree == "hybrid" else None
    enabled = gc.isenabled()
    gc.disable()
    try:
        leaf = LeafMap.open(where, open_trusted)
        resolver = MappedResolver(leaf, INTENT_OPTION_CODE, {"queries": 0, "trimmed": 0}, lambda: None)
        queries = _queries(zone.origin, embedder)[:30]
        assert sum(resolver.fast_answer(query, True) is not None for query in queries) >= 10
        gone = weakref.ref(leaf)
        del leaf, resolver
        assert gone() is None
    finally:
        if enabled:
            gc.enable()


def test_a_spoiled_or_foreign_map_is_not_read(built, tmp_path):
    """A map cut short is refused with ValueError; one that others may write is not opened at all."""
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir(mode=0o700)
    _, _, where = _indexed(_leaves(built[0])[0], snapshots)
    data = where.read_bytes()
    where.write_bytes(data[:len(data) // 3])
    with pytest.raises(Exception):
        LeafMap.open(where, open_trusted)
    where.write_bytes(b"not a map at all")
    with pytest.raises(ValueError):
        LeafMap.open(where, open_trusted)
    where.write_bytes(data)
    os.chmod(where, 0o666)
    assert LeafMap.open(where, open_trusted) is None
    os.chmod(where, 0o600)
    assert LeafMap.open(where, open_trusted) is not None


def _tools(root, intent):
    with Resolver(root=root, cache=False, timeout=REPLY_TIMEOUT) as resolver:
        res = resolver.resolve(intent, k=3, leaf_k=6)
    return [(t.name, t.score) for t in res.tools]


@pytest.mark.integration
def test_a_built_tree_answers_its_first_walks_from_leaf_maps_written_at_build(built):
    """``tooldns build`` of a BM25 tree keeps a map of every leaf: served lazily, its first walks
    reach leaves never loaded, answered from their maps (nothing loaded), as the tree loaded whole."""
    zones_dir, address = built
    assert len(list((zones_dir / ".snapshots").glob("*.map"))) == len(_leaves(zones_dir))
    with TreeThread(zones_dir, free_port(address), listen=[address]) as whole, \
            TreeThread(zones_dir, free_port(address), listen=[address], lazy=True) as lazy:
        for intent in INTENTS:
            assert _tools(lazy.root(), intent) == _tools(whole.root(), intent)
        zones = lazy.tree.lazy
        assert zones.loads == 0 and len(zones.maps) >= 3 and zones.mapped_stats["queries"] >= len(INTENTS)


@pytest.mark.integration
def test_a_hybrid_trees_first_walks_are_answered_from_leaf_maps_written_at_build(hybrid):
    """``tooldns build`` of a hybrid tree keeps a map of every leaf, its vectors in it: served lazily, the
    first walks of a resolver that sends its intents' vectors reach leaves never loaded, answered from
    their maps as by the tree loaded whole; so is a query without a vector (dig's), its intent embedded
    in the server's pool, and the leaf is still not loaded."""
    zones_dir, address = hybrid
    leaves = _leaves(zones_dir)
    assert leaves and len(list((zones_dir / ".snapshots").glob("*.map"))) == len(leaves)
    assert not list((zones_dir / ".snapshots").glob("*.pickle"))
    with TreeThread(zones_dir, free_port(address), listen=[address]) as whole, \
            TreeThread(zones_dir, free_port(address), listen=[address], lazy=True) as lazy:
        for intent in INTENTS:
            assert _tools(lazy.root(), intent) == _tools(whole.root(), intent)
        zones = lazy.tree.lazy
        assert zones.loads == 0 and len(zones.maps) >= 3 and zones.mapped_stats["queries"] >= len(INTENTS)
        origin = next(iter(zones.maps))
        query = make_query(f"_any._tcp.{origin}", opt_record([dns.edns.GenericOption(
            INTENT_OPTION_CODE, encode_intent(INTENTS[0], 3))]))
        host, port = lazy.root()

        counted = zones.mapped_stats["queries"]
        reply = DNSRecord.parse(DNSRecord.parse(query).send(host, port, timeout=REPLY_TIMEOUT))
        assert reply.header.rcode == RCODE.NOERROR and reply.rr and b"cos=" in bytes(reply.pack())
        assert zones.mapped_stats["queries"] == counted + 1 and zones.loads == 0 and origin not in zones.loaded


@pytest.mark.integration
def test_the_query_log_and_metrics_name_a_zone_without_opening_its_map(built, tmp_path, monkeypatch, caplog):
    """A lazy server's query log and metrics name each query's zone without opening a leaf's map or
    loading a zone, on the event loop too (a query whose leaf's map was let go, its answer cached); the
    walks answered as by the tree loaded whole, and no observer fails."""
    opened, original = [], LeafMap.open.__func__

    def open_noting(cls, path, opener):
        opened.append(path)
        return original(cls, path, opener)

    monkeypatch.setattr(LeafMap, "open", classmethod(open_noting))
    zones_dir, address = built
    log = tmp_path / "queries.jsonl"
    with TreeThread(zones_dir, free_port(address), listen=[address]) as whole, \
            TreeThread(zones_dir, free_port(address), listen=[address], lazy=True, query_log=str(log),
                       metrics=(address, 0)) as lazy:
        for intent in INTENTS:
            assert _tools(lazy.root(), intent) == _tools(whole.root(), intent)
        zones = lazy.tree.lazy
        assert zones.loads == 0 and len(zones.maps) >= 3 and len(opened) >= len(zones.maps)
        maps, served = set(zones.maps), set(zones.paths) | {s.index.origin for s in lazy.tree.stores}
        zone_of, leaf = ZoneOf(next(iter(lazy.tree.sockets.values())).resolver), next(iter(maps))
        while zones.maps:
            zones._unmap()
        data = make_query(f"_any._tcp.{leaf}", opt_record([dns.edns.GenericOption(
            INTENT_OPTION_CODE, encode_intent(INTENTS[0], 3))]))
        count = len(opened)
        with on_the_loop():
            assert zone_of(data, question_end(data)) == leaf
        assert len(opened) == count and not zones.maps and zones.loads == 0
    logged = {json.loads(line)["zone"] for line in log.read_text(encoding="utf-8").splitlines()}
    assert maps <= logged <= served
    assert not [r for r in caplog.records if "observer" in r.getMessage()]


@pytest.mark.integration
def test_a_lazy_leaf_met_again_answers_from_its_map_without_loading(built, tmp_path, monkeypatch):
    """Leaves loaded once and dropped answer the same walks again from their maps: nothing loaded, the
    same tools and scores as the tree loaded whole, the answers counted."""
    monkeypatch.setattr("tooldns.serving.lazy.FRESH", 0.0)  # a zone dropped just now is not answered by its old load
    copy = _copied(built, tmp_path)
    _, address = built
    with TreeThread(copy, free_port(address), listen=[address]) as whole, \
            TreeThread(copy, free_port(address), listen=[address], lazy=True, max_loaded=2) as lazy:
        zones = lazy.tree.lazy
        again = [f"{intent} now" for intent in INTENTS]  # not answered from the server's answer cache
        expected = {intent: _tools(whole.root(), intent) for intent in INTENTS + again}
        for intent in INTENTS:  # loaded whole, their maps kept, dropped past two
            assert _tools(lazy.root(), intent) == expected[intent] and expected[intent]
        loads, counted = zones.loads, zones.mapped_stats["queries"]
        for intent in again:
            assert _tools(lazy.root(), intent) == expected[intent] and expected[intent]
        assert zones.maps and zones.mapped_stats["queries"] > counted
        assert zones.loads - loads <= 2, "leaves met again were loaded, not answered from their maps"


@pytest.mark.integration
def test_a_query_a_map_does_not_answer_loads_the_zone(built, tmp_path, monkeypatch):
    """The SOA of a leaf answered from its map: the zone is loaded whole and answers it."""
    monkeypatch.setattr("tooldns.serving.lazy.FRESH", 0.0)
    copy = _copied(built, tmp_path)
    _, address = built
    with TreeThread(copy, free_port(address), listen=[address], lazy=True, max_loaded=1) as lazy:
        zones = lazy.tree.lazy
        for intent in INTENTS:
            _tools(lazy.root(), intent)
        for intent in INTENTS:
            _tools(lazy.root(), f"{intent} now")
        origin = next(iter(zones.maps))
        assert origin not in zones.loaded
        host, port = lazy.root()
        q = DNSRecord.question(origin, "SOA")
        reply = DNSRecord.parse(q.send(host, port, timeout=REPLY_TIMEOUT))
        assert reply.header.rcode == RCODE.NOERROR and reply.rr and reply.rr[0].rtype == QTYPE.SOA
        assert str(reply.rr[0].rname).lower() == origin
        assert origin in zones.loaded and origin not in zones.maps


@pytest.mark.integration
def test_an_edit_of_a_mapped_leaf_is_answered_not_its_map(built, tmp_path, monkeypatch):
    """A tool added to a leaf that answers from its map is found once the watcher sees the file change."""
    monkeypatch.setattr("tooldns.serving.lazy.FRESH", 0.0)
    copy = _copied(built, tmp_path)
    _, address = built
    with TreeThread(copy, free_port(address), listen=[address], lazy=True, max_loaded=1,
                    watch_interval=0.05) as lazy:
        zones, root = lazy.tree.lazy, lazy.root()
        for intent in INTENTS + [f"{intent} now" for intent in INTENTS]:
            _tools(root, intent)
        origin = next(iter(zones.maps))
        path = copy / f"{origin[:-1]}.yaml"
        path.write_text(path.read_text().replace("tools:\n", "tools:\n" + AIRSHIP, 1)
                        .replace("  serial: 1\n", "  serial: 2\n", 1))

        def found() -> bool:
            with Resolver(root=root, cache=False, timeout=REPLY_TIMEOUT) as resolver:
                return any(t.name == "Zeppelin Airship Route Planner"
                           for t in resolver.resolve("zeppelin airship dirigible", k=1).tools)

        assert wait_until(found), "the edited leaf kept answering from its old map"


@pytest.mark.parametrize("soft, hard, wanted, room", [(600, 600, 10_000, 44), (600, 4096, 10_000, 1792),
                                                     (600, 20_000, 10_000, 9_744), (600, 20_000, 50, 50)])
def test_leaf_maps_get_half_the_open_files_raised_toward_the_hard_limit(soft, hard, wanted, room):
    """Each open map holds a descriptor: the soft limit is raised toward the hard one to make room for
    *wanted*, and maps get half of it less a reserve, never more than wanted."""
    import resource
    import subprocess
    import sys

    here = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if here != resource.RLIM_INFINITY and here < hard:
        pytest.skip(f"the hard limit here ({here}) is lower than the case needs")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    code = ("import resource; from tooldns.serving.descriptors import room_for_maps; "
            f"print(room_for_maps({wanted}), resource.getrlimit(resource.RLIMIT_NOFILE)[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, preexec_fn=limit, check=True)
    got, limit_after = map(int, out.stdout.split())
    assert got == room
    assert limit_after == max(soft, min(hard, 2 * (wanted + 256)))


def test_open_maps_are_bounded_in_bytes_and_in_number(built, tmp_path):
    """Maps open at once stay within the memory bound (counted by their size, apart from the zones
    loaded) and the count bound; the least recently asked is let go first, and asked again it is
    mapped again, answering as before."""
    from tooldns.serving.lazy import LazyZones
    from tooldns.serving.loader import ZoneLoader

    zones_dir, _ = built
    sizes = sorted(p.stat().st_size for p in (zones_dir / ".snapshots").glob("*.map"))
    loader = ZoneLoader(processes=1, snapshots=zones_dir / ".snapshots")
    try:
        zones = LazyZones(zones_dir, loader=loader, max_memory=sizes[-1] + sizes[-2] - 1)
        zones.start()  # lookups from now on: maps opened, never a load (a load would raise NotReady)
        leaves = [load_zone(p).origin for p in _leaves(zones_dir)]
        for origin in leaves + leaves[:1]:
            assert zones.lookup(origin) is zones.maps[origin]
            assert len(zones.maps) == 1 or zones.mapped_bytes < sizes[-1] + sizes[-2]
            assert zones.mapped_bytes == sum(m.size for m in zones.maps.values())
        assert list(zones.maps)[-1] == leaves[0] and zones.loads == 0
        zones.max_maps, zones.max_memory = 2, 0
        for origin in leaves:
            zones.lookup(origin)
        assert list(zones.maps) == leaves[-2:]
    finally:
        loader.close()
