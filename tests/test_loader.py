"""Zone files read and indexed in a loading process, and indexes kept on disk as snapshots
(:mod:`tooldns.serving.loader`): what a lazy server answers from them is what it answers from the
files; an edited file is never answered from an old snapshot; a snapshot directory others may
write to is not used; a spoiled snapshot or a killed loading process costs only the time to load
the zone in the server. Real servers and resolutions where answers are compared."""

from __future__ import annotations

import logging
import os
import pickle
import signal
from pathlib import Path

import pytest

from resolver_client import Resolver
from tooldns.protocol import names
from tooldns.protocol.intent import Intent
from tooldns.serving.index import SELF, ZoneIndex
from tooldns.serving.lazy import LazyZones, Unloadable
from tooldns.serving.loader import SNAPSHOT_DIR, ZoneLoader, piece_kinds, unsafe_directory
from tooldns.serving.lookup import lookup
from tooldns.serving.tree import TreeThread
from tooldns.zone.zonefile import load_zone, zone_files

from conftest import REPLY_TIMEOUT, free_port
from test_lazy import INTENTS, built  # noqa: F401  (the fixture: a built tree of about 20 zones on one address)


def _copied(built, tmp_path) -> Path:
    copy = tmp_path / "zones"
    copy.mkdir()
    for f in built[0].glob("*.yaml"):
        (copy / f.name).write_bytes(f.read_bytes())
    (copy / SNAPSHOT_DIR).mkdir(mode=0o700)
    return copy


def _decided(ix: ZoneIndex, intent: str) -> list[str]:
    """What the zone decides for *intent* at its own cursor: the records of the result, as text."""
    cursor = names.Cursor("mcp", "tcp", ix.origin).to_text() if ix.children else f"_any._tcp.{ix.origin}"
    result = lookup(ix, cursor.lower(), 2 if ix.children else 33, Intent(intent, 3))
    return [result.kind.name] + [str(rr) for rr in result.answer + result.authority + result.additional]


def _resolved(root, intent):
    with Resolver(root=root, cache=False, timeout=REPLY_TIMEOUT) as resolver:
        res = resolver.resolve(intent, k=2, leaf_k=6)
    return [(t.name, t.score) for t in res.tools]


def test_a_build_makes_a_snapshot_directory_only_its_user_may_write_to(built):
    snapshots = built[0] / SNAPSHOT_DIR
    assert snapshots.is_dir() and unsafe_directory(snapshots) is None
    assert os.stat(snapshots).st_mode & 0o077 == 0


def test_an_index_read_back_by_pickle_decides_as_the_one_built(built):
    """Every zone of the tree (children with the zone's own tools among them, leaves): the same
    referrals and answers, SELF still itself, texts found by the tools read back."""
    checked = 0
    for path in zone_files(built[0]):
        built_ix = ZoneIndex(load_zone(path))
        for intent in INTENTS[:3]:
            _decided(built_ix, intent)  # what a served index has made by then (rows, word lists) is not kept
        read = pickle.loads(pickle.dumps(built_ix, protocol=pickle.HIGHEST_PROTOCOL))
        if read.child_candidates is not None and read.child_candidates.has_self:
            assert read.child_candidates.entries[-1] is SELF
        for intent in INTENTS:
            assert _decided(read, intent) == _decided(built_ix, intent), (path.name, intent)
            checked += 1
    assert checked >= 8 * len(INTENTS)


def test_the_loading_process_hands_back_each_tools_fast_path_pieces(built, tmp_path):
    """What the fast path answers with of each tool, and its routes, are made in the loading process
    and come back with the index (8 us a tool and 0.3 ms a zone the server does not spend when the zone
    is first asked): the same as the fast path makes itself, and the ones it then answers with."""
    from tooldns.serving.fast.pack import PackedZone, routes_of, tool_pieces
    from tooldns.zone.limits import ZoneLimits

    copy = _copied(built, tmp_path)
    loader = ZoneLoader(1, copy / SNAPSHOT_DIR)
    try:
        leaves = 0
        for path in zone_files(copy):
            loaded = loader.load(str(path), ZoneLimits())
            if not loaded.zone.tools:
                continue
            leaves += 1
            made_here = ZoneIndex(load_zone(path))
            assert loaded.index.packed_tools == tool_pieces(made_here), path.name
            packed = PackedZone(loaded.index)
            assert [packed.tools[id(tool)] for tool in loaded.zone.tools] == loaded.index.packed_tools
            assert all(packed.tools[id(tool)] is piece
                       for tool, piece in zip(loaded.zone.tools, loaded.index.packed_tools))
            made_routes = routes_of(made_here)  # and the names that ask it to search, with their routes
            assert packed.routes is loaded.index.packed_routes and set(packed.routes) == set(made_routes)
            for key, route in made_routes.items():
                assert all(getattr(route, slot) == getattr(packed.routes[key], slot) for slot in route.__slots__), key
        assert leaves >= 4
    finally:
        loader.close()


@pytest.mark.integration
def test_a_lazy_tree_answers_from_its_loading_process_and_its_snapshots_as_from_its_files(built, tmp_path):
    zones, address = built
    copy = _copied(built, tmp_path)
    expected = {}
    with TreeThread(zones, free_port(address), listen=[address], lazy=True, load_processes=0) as plain:
        for intent in INTENTS:
            expected[intent] = _resolved(plain.root(), intent)
            assert expected[intent], intent
    for run in ("files", "snapshots"):  # the second start reads back what the first kept
        with TreeThread(copy, free_port(address), listen=[address], lazy=True, max_loaded=3) as lazy:
            for intent in INTENTS:
                assert _resolved(lazy.root(), intent) == expected[intent], (run, intent)
            loader = lazy.tree.lazy.loader
            assert loader.loaded >= 4 and loader.declined == 0
            if run == "files":
                kept = sorted((copy / SNAPSHOT_DIR).glob("*.pickle"))
                assert len(kept) == loader.loaded - loader.from_snapshots > 0
                assert all(f.stat().st_mode & 0o077 == 0 for f in kept)
            else:
                assert loader.from_snapshots == loader.loaded
    assert sorted((copy / SNAPSHOT_DIR).glob("*.pickle")) == kept  # nothing new: every zone was read back


@pytest.mark.integration
def test_an_edited_file_is_never_answered_from_its_old_snapshot(built, tmp_path):
    zones, address = built
    copy = _copied(built, tmp_path)
    loader = ZoneLoader(1, copy / SNAPSHOT_DIR)
    try:
        leaf = next(p for p in zone_files(copy) if not load_zone(p).children and load_zone(p).tools)
        first = loader.load(str(leaf), None)
        assert loader.load(str(leaf), None).zone == first.zone and loader.from_snapshots == 1
        text = leaf.read_text()
        tool = first.zone.tools[0]
        leaf.write_text(text.replace(tool.description, "an edited description of a lighthouse keeper"))
        edited = loader.load(str(leaf), None)
        assert loader.from_snapshots == 1  # a new file: indexed again, not read back
        assert edited.zone.tools[0].description == "an edited description of a lighthouse keeper"
        assert edited.stamp != first.stamp
        assert len(list((copy / SNAPSHOT_DIR).glob("*.pickle"))) == 2
    finally:
        loader.close()


def test_a_snapshot_directory_others_may_write_to_is_not_used(built, tmp_path, caplog):
    copy = _copied(built, tmp_path)
    snapshots = copy / SNAPSHOT_DIR
    os.chmod(snapshots, 0o777)
    with caplog.at_level(logging.WARNING, logger="tooldns.serving.loader"):
        loader = ZoneLoader(1, snapshots)
    try:
        assert loader.snapshots is None
        assert "snapshots not used (writable by its group or by others)" in caplog.text
        leaf = next(p for p in zone_files(copy) if load_zone(p).tools)
        assert loader.load(str(leaf), None).zone == load_zone(leaf)  # loaded all the same, nothing kept
        assert not list(snapshots.iterdir())
    finally:
        loader.close()
    assert unsafe_directory(tmp_path / "nowhere").startswith("cannot use it")
    assert unsafe_directory(copy / "root.yaml") == "not a directory"


@pytest.mark.integration
def test_a_spoiled_snapshot_is_made_again_and_the_zone_served(built, tmp_path, caplog):
    """A snapshot cut short is read back in the serving process, found spoiled, removed and made again
    by the loading process: the zone is served from its file, and the next load reads the new one."""
    copy = _copied(built, tmp_path)
    loader = ZoneLoader(1, copy / SNAPSHOT_DIR)
    try:
        leaf = next(p for p in zone_files(copy) if load_zone(p).tools)
        loader.load(str(leaf), None)
        (kept,) = (copy / SNAPSHOT_DIR).glob("*.pickle")
        kept.write_bytes(kept.read_bytes()[:100])  # cut short, as a disk could spoil it
        with caplog.at_level(logging.WARNING, logger="tooldns.serving.loader"):
            again = loader.load(str(leaf), None)
        assert again is not None and again.zone.tools == load_zone(leaf).tools
        assert "its snapshot cannot be read" in caplog.text and loader.declined == 0
        assert len(kept.read_bytes()) > 100  # made again, whole
        read_back = loader.from_snapshots
        loader.load(str(leaf), None)
        assert loader.from_snapshots == read_back + 1
        zones = LazyZones(copy, loader=loader)
        origin = load_zone(leaf).origin
        resolver = zones.get(origin)
        assert not isinstance(resolver, Unloadable) and resolver.source.zone.tools == load_zone(leaf).tools
    finally:
        loader.close()


@pytest.mark.integration
def test_a_broken_file_read_in_the_loading_process_is_unloadable_with_its_reason(built, tmp_path, caplog):
    copy = _copied(built, tmp_path)
    zones = LazyZones(copy, loader=ZoneLoader(1))
    try:
        origin, path = next(iter(zones.paths.items()))
        Path(path).write_text(Path(path).read_text().replace("origin:", "origin: [", 1))
        with caplog.at_level(logging.ERROR):
            resolver = zones.get(origin)
        assert isinstance(resolver, Unloadable) and zones.loader.loaded == 0
        assert f"{path}:" in caplog.text and "cannot load zone" in caplog.text
    finally:
        zones.loader.close()


@pytest.mark.integration
def test_a_killed_loading_process_costs_one_load_in_the_server_and_is_started_again(built, tmp_path, caplog):
    copy = _copied(built, tmp_path)
    loader = ZoneLoader(1)
    zones = LazyZones(copy, loader=loader)
    try:
        origins = list(zones.paths)
        assert not isinstance(zones.get(origins[0]), Unloadable) and loader.loaded == 1
        for pid in list(loader._pool._processes):
            os.kill(pid, signal.SIGKILL)
        with caplog.at_level(logging.WARNING, logger="tooldns.serving.loader"):
            second = zones.get(origins[1])
        assert not isinstance(second, Unloadable) and second.source.zone == load_zone(zones.paths[origins[1]])
        assert "a loading process died" in caplog.text and loader.loaded == 1 and loader.declined == 1
        assert not isinstance(zones.get(origins[2]), Unloadable) and loader.loaded == 2  # a new process
    finally:
        loader.close()


TOOL = "- {{label: t{0}, name: tool {0}, service: mcp, target: t.example., port: 443, description: '{1}'}}\n"


def _zone_file(path: Path, tools: list[str], serial: int = 1) -> Path:
    origin = path.name.removesuffix("yaml")
    path.write_text(f"origin: {origin}\nsoa: {{serial: {serial}}}\nnameservers: [{{name: ns1.{origin}, address: 127.0.0.1}}]\n"
                    "tools:\n" + "".join(TOOL.format(i, text) for i, text in enumerate(tools)))
    return path


def test_a_large_file_is_loaded_in_pieces_none_of_them_large(tmp_path):
    """A leaf of 3,000 tools whose descriptions share their words (a posting list of every tool):
    loaded by the loading process like any other, its pieces each a small part of the whole, the
    dictionary of its postings lists among those split (each list pickled packed, counted with its
    pairs)."""
    from tooldns.serving.loader import ITEMS_A_PIECE, pickle_in_pieces

    path = _zone_file(tmp_path / "big.tools.yaml", [f"common words of tool number {i} " * 20 for i in range(3000)])
    loader = ZoneLoader(1)
    try:
        loaded = loader.load(str(path), None)
        assert loaded is not None and loader.loaded == 1 and loaded.zone == load_zone(path)
        spool = Path(loader._spool.name)
        assert spool.is_dir() and not any(spool.iterdir())  # handed over through a file, removed once read
        if hasattr(os, "SCHED_IDLE"):  # the loading process takes no processor time the server wants
            assert loader._executor()[0].submit(os.sched_getscheduler, 0).result() == os.SCHED_IDLE
    finally:
        loader.close()
    assert not spool.exists()
    blob = pickle_in_pieces(loaded.zone, loaded.index)
    kinds = piece_kinds(blob)
    largest = max(length for kind, length, _ in kinds if kind == "obj")
    assert len(blob) > 1_000_000 and largest < len(blob) / 50
    joins = [parts for kind, parts, _ in kinds if kind == "join"]
    assert len(joins) >= 3 and max(joins) >= 3000 * 2 / ITEMS_A_PIECE  # "common" and others: 3,000 pairs each
    for intent in ("tool number 17", "common words", "number 2999"):
        assert _decided(loaded.index, intent) == _decided(ZoneIndex(load_zone(path)), intent)


def test_a_reload_is_read_and_indexed_by_the_loading_process(tmp_path):
    """An edit that raises the serial: the index the loading process made is served as it is; an edit
    that does not: the loading process reads the file, the store makes the index of the serial it
    serves (one more than before). A file the loading process refuses is refused; the last good
    version keeps serving."""
    from tooldns.serving.store import ZoneStore

    path = _zone_file(tmp_path / "leaf.tools.yaml", ["weather forecast", "tide tables"])
    loader = ZoneLoader(1)
    store = ZoneStore(path, loader=loader)
    try:
        _zone_file(path, ["weather forecast", "tide tables", "typhoon warnings"], serial=5)
        os.utime(path, ns=(1, 1))
        assert store.check() == "reloaded" and loader.loaded == 1
        assert store.serial == 5 and len(store.zone.tools) == 3 and store.index.zone is store.file_zone
        assert _decided(store.index, "typhoon") == _decided(ZoneIndex(load_zone(path)), "typhoon")
        _zone_file(path, ["weather forecast", "earthquake reports"], serial=5)
        os.utime(path, ns=(2, 2))
        assert store.check() == "reloaded" and loader.loaded == 2
        assert store.serial == 6 and store.zone.soa.serial == 6 and store.file_zone.soa.serial == 5
        assert [t.description for t in store.zone.tools] == ["weather forecast", "earthquake reports"]
        path.write_text("origin: leaf.tools.\nsoa: {serial: 7}\ntools: [{label: x}]\n")
        assert store.check() == "kept" and store.serial == 6 and store.reload_errors == 1
    finally:
        loader.close()


def test_which_loader_a_lazy_tree_gets(built, tmp_path):
    """The tree's own .snapshots unless told another directory or none; no loader with no processes."""
    from tooldns.serving.tree import _loader

    zones = built[0]
    assert _loader(zones, 1, True).snapshots == str(zones / SNAPSHOT_DIR)
    assert _loader(zones, 1, False).snapshots is None
    other = tmp_path / "kept"
    other.mkdir(mode=0o700)
    assert _loader(zones, 2, other).snapshots == str(other) and _loader(zones, 2, other).processes == 2
    assert _loader(tmp_path, 1, True).snapshots is None  # a tree without .snapshots: none
    assert _loader(zones, 0, True) is None


def test_an_index_pickled_in_pieces_decides_as_the_one_built(tmp_path):
    """Pieces: tools a few at a time, postings some hundred items at a time (more terms here than one
    piece holds), each unpickled by a call of its own; the zone and the index whole again."""
    import random

    from tooldns.serving.loader import ITEMS_A_PIECE, TOOLS_A_PIECE, pickle_in_pieces, unpickle_pieces

    rng = random.Random(5)
    words = [f"w{i}" for i in range(3 * ITEMS_A_PIECE)]
    path = _zone_file(tmp_path / "many.tools.yaml", [" ".join(rng.sample(words, 12))
                                                                    for _ in range(max(3 * TOOLS_A_PIECE, ITEMS_A_PIECE // 6))])
    built_ix = ZoneIndex(load_zone(path))
    kinds = piece_kinds(pickle_in_pieces(built_ix.zone, built_ix))
    assert sum(kind == "join" for kind, _, _ in kinds) >= 1 and sum(kind == "obj" for kind, _, _ in kinds) > 6
    zone, read = unpickle_pieces(pickle_in_pieces(built_ix.zone, built_ix))
    assert zone == built_ix.zone and read.zone is zone and read.tool_candidates[("mcp", "tcp")].entries[0] is zone.tools[0]
    for intent in [" ".join(rng.sample(words, 3)) for _ in range(20)]:
        assert _decided(read, intent) == _decided(built_ix, intent), intent
    with pytest.raises(ValueError):
        unpickle_pieces(len(pickle.dumps([])).to_bytes(8, "little") + pickle.dumps([]))  # no pieces


def test_pieces_keep_every_tuple_apart_and_a_shared_list_one_object(tmp_path):
    """Two tuples pickled in parts (a zone's tools and its children, each longer than a piece's share)
    keep their own numbers; a list held by two dictionaries pickled in parts comes back one object,
    as plain pickle gives it back; a bound method of a dictionary is no class to name once."""
    from tooldns.serving.loader import SPLIT_ABOVE, pickle_in_pieces, unpickle_pieces

    n = SPLIT_ABOVE + 20
    child = ("- {{label: c{0}, summary: {{description: 'child {0}'}}, "
             "nameservers: [{{name: ns1.c{0}.wide.tools., address: 127.0.0.1}}]}}\n")
    path = tmp_path / "wide.tools.yaml"
    path.write_text("origin: wide.tools.\nsoa: {serial: 1}\nnameservers: [{name: ns1.wide.tools., address: 127.0.0.1}]\n"
                    "children:\n" + "".join(child.format(i) for i in range(n)) +
                    "tools:\n" + "".join(TOOL.format(i, f"tool number {i}") for i in range(n)))
    zone = load_zone(path)
    assert len(zone.children) == len(zone.tools) == n
    ix = ZoneIndex(zone)
    shared = list(range(3 * SPLIT_ABOVE))
    ix.extra_a = {i: (shared if i == 0 else i) for i in range(n)}
    ix.extra_b = {i: (shared if i == 0 else -i) for i in range(n)}
    ix.extra_get = ix.extra_a.get
    zone2, ix2 = unpickle_pieces(pickle_in_pieces(zone, ix))
    assert zone2 == zone and ix2.zone is zone2 and len(zone2.children) == n
    assert ix2.extra_a[0] == shared and ix2.extra_a[0] is ix2.extra_b[0]
    assert ix2.extra_get(5) == 5
    for intent in ("tool number 7", "child 12"):
        assert _decided(ix2, intent) == _decided(ix, intent)


def test_a_posting_list_pickles_packed_and_comes_back_packed():
    """A posting list is pickled as its documents and weights in two bytes objects, and read back as
    them (what the compiled sums read), its pairs made only when first iterated, then kept; it pickles
    again the same, and its arrays are the pairs'. Pairs that are not (document, weight) numbers are
    pickled as they are."""
    from array import array

    from tooldns.scoring.bm25 import _Posting

    pairs = [(0, 0.5), (7, 1.25), (300000, 2.0 / 3)]
    read = pickle.loads(pickle.dumps(_Posting(pairs), protocol=pickle.HIGHEST_PROTOCOL))
    documents, weights = read.packed
    assert array("i", documents).tolist() == [0, 7, 300000] and array("d", weights).tolist() == [w for _, w in pairs]
    assert len(read) == 3 and read and read.row == -1 and read._pairs is None  # nothing made at load
    assert list(read) == pairs and read == _Posting(pairs) and _Posting(pairs) == read
    assert read._pairs is not None and list(read) == pairs  # made once, kept
    again = pickle.loads(pickle.dumps(read, protocol=pickle.HIGHEST_PROTOCOL))
    assert again.packed == read.packed and list(again) == pairs
    docs, ws = again.make_arrays()
    assert docs.tolist() == [0, 7, 300000] and ws.tolist() == [w for _, w in pairs]
    assert not pickle.loads(pickle.dumps(_Posting([])))  # empty: false, as an empty list
    odd = pickle.loads(pickle.dumps(_Posting([(1, "x")])))
    assert list(odd) == [(1, "x")] and odd.packed is None


def test_what_a_zone_read_back_holds_is_walked_once_and_kept_in_its_header(tmp_path):
    """The bytes a zone and its index hold read back are walked when pickled and kept in the header: what a
    walk of the zone read back gives, postings packed (a term's pairs made only when a query sums them in
    Python), not counted as if it held them as pairs; a loader hands that count back, made or read back."""
    from tooldns.serving.fast.pack import routes_of, tool_pieces
    from tooldns.serving.footprint import zone_footprint
    from tooldns.serving.loader import held_bytes, pickle_in_pieces, unpickle_pieces

    path = _zone_file(tmp_path / "words.tools.yaml", [f"common words of tool number {i} " * 5 for i in range(600)])
    built_ix = ZoneIndex(load_zone(path))
    built_ix.packed_tools, built_ix.packed_routes = tool_pieces(built_ix), routes_of(built_ix)  # as a loader makes it
    built_ix.published_rr()
    blob = pickle_in_pieces(built_ix.zone, built_ix)
    zone, read = unpickle_pieces(blob)
    walked = zone_footprint(zone, read)
    assert abs(held_bytes(blob) - walked) <= walked / 50
    pairs = sum(len(posting) for postings in built_ix.postings() for posting in postings.values())
    assert zone_footprint(built_ix.zone, built_ix) - walked > 50 * pairs  # a pair as a tuple and a float: 80 bytes
    (tmp_path / "snapshots").mkdir(mode=0o700)
    loader = ZoneLoader(1, snapshots=tmp_path / "snapshots")
    try:
        loaded = loader.load(str(path), None)
        again = loader.load(str(path), None)  # read back from its snapshot
    finally:
        loader.close()
        assert loader.from_snapshots == 1
    for size in (loaded.size, again.size):
        assert abs(size - walked) <= walked / 50
