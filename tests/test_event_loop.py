"""Nothing on the event loop but answering: reloads, rebuilds and lazy loads run in threads, and what
they build replaces what is served in one step; a child cannot rebuild its parent at will; only regular
files are read as zone files; an intent to embed is embedded in the thread pool, the queries that bring
a vector answered on the loop meanwhile.

Each test holds the slow work in progress (a threading.Event the test releases) and checks, on real
sockets, that a query about another zone is answered meanwhile: no timed assertion, only events,
counters and generous reply timeouts. Before these changes the held work ran on the event loop and the
query went unanswered.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from pathlib import Path

import pytest
from dnslib import EDNS0, QTYPE, RCODE, DNSRecord, EDNSOption

from conftest import REPLY_TIMEOUT, WAIT_TIMEOUT, free_port, start_tree, wait_until
from test_lazy import built  # noqa: F401  (the fixture: a built tree of about 20 zones on one address)
from tooldns.embedding.hashing import HashEmbedder
from tooldns.exceptions import ZoneFileError
from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent
from tooldns.protocol.vector import VECTOR_OPTION_CODE
from tooldns.serving import lazy as lazy_module
from tooldns.serving import store as store_module
from tooldns.serving.lazy import Unloadable
from tooldns.serving.offloop import WouldWait, may_wait, on_the_loop
from tooldns.serving.server import DNSServer
from tooldns.serving.summaries import SummaryKeeper
from tooldns.serving.tree import TreeThread
from tooldns.zone.zonefile import load_zone


def _ask(address: str, port: int, zone: str, intent: str = "rain forecast", tcp: bool = False) -> DNSRecord:
    q = DNSRecord.question(f"_any._tcp._{zone}", "SRV")
    q.header.rd = 0
    q.add_ar(EDNS0(udp_len=1232, opts=[EDNSOption(INTENT_OPTION_CODE, encode_intent(intent, 3))]))
    return DNSRecord.parse(q.send(address, port, tcp=tcp, timeout=REPLY_TIMEOUT))


def _soa(address: str, port: int, zone: str) -> DNSRecord:
    q = DNSRecord.question(zone, "SOA")
    q.header.rd = 0
    return DNSRecord.parse(q.send(address, port, timeout=REPLY_TIMEOUT))


class _Hold:
    """Holds the calls of a function whose first argument *matches* until released: ``entered`` is set
    when one is held."""

    def __init__(self, real, matches) -> None:
        self.real, self.matches = real, matches
        self.entered, self.release = threading.Event(), threading.Event()
        self.armed = False

    def __call__(self, *args, **kwargs):
        if self.armed and self.matches(*args):
            self.entered.set()
            self.release.wait(WAIT_TIMEOUT)
        return self.real(*args, **kwargs)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


# -- item 3: regular files only --

@pytest.mark.parametrize("kind", ["fifo", "device", "link to a fifo", "link to a device"])
def test_a_zone_file_that_is_no_regular_file_is_refused_without_waiting_on_it(tmp_path, kind):
    path = tmp_path / "a.tools.yaml"
    target = tmp_path / "pipe"
    if "fifo" in kind:
        os.mkfifo(target)
    else:
        target = Path("/dev/zero")
    if kind.startswith("link"):
        path.symlink_to(target)
    else:
        path = target
    outcome: list = []

    def load():
        try:
            load_zone(path)
        except ZoneFileError as exc:
            outcome.append(str(exc))

    reader = threading.Thread(target=load, daemon=True)
    reader.start()
    reader.join(WAIT_TIMEOUT)
    try:
        assert not reader.is_alive(), "load_zone waited on a file that is no regular file"
        assert outcome and "not a regular file" in outcome[0]
        assert ("a FIFO" if "fifo" in kind else "a character device") in outcome[0]
    finally:
        if reader.is_alive() and "fifo" in kind:  # let the blocked open (before the fix) go
            fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)


@pytest.mark.integration
def test_a_fifo_put_where_a_zone_file_was_is_refused_and_the_tree_answers(demo_dir, caplog):
    tree = start_tree(demo_dir)
    address, port = tree.root()
    path = demo_dir / "weather.tools.yaml"
    store = next(s for s in tree.tree.stores if s.path == str(path))
    fifo = demo_dir / "fifo.tmp"
    os.mkfifo(fifo)
    try:
        with caplog.at_level(logging.ERROR, logger="tooldns.serving.store"):
            os.replace(fifo, path)
            assert wait_until(lambda: store.reload_errors >= 1)
            assert _ask(address, port, "tools.").header.rcode == RCODE.NOERROR
            assert _ask(address, port, "weather.tools.").header.rcode == RCODE.NOERROR  # its last good version
        assert any("not a regular file (a FIFO)" in r.getMessage() for r in caplog.records)
    finally:
        if path.is_fifo():  # before the fix the watcher waits in open(): a writer lets it go
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        tree.stop()


# -- item 4: reloads off the loop --

@pytest.mark.integration
def test_while_a_reload_is_held_other_zones_are_answered(demo_dir, monkeypatch):
    path = demo_dir / "weather.tools.yaml"
    from tooldns.serving.loader import ZoneLoader

    held = _Hold(ZoneLoader.load, lambda self, p, *rest: os.fspath(p) == str(path))
    monkeypatch.setattr(ZoneLoader, "load", lambda self, p, limits: held(self, p, limits))  # the loading process's
    hold = _Hold(store_module.load_zone, lambda p, *rest: os.fspath(p) == str(path))
    monkeypatch.setattr(store_module, "load_zone", hold)  # or this thread's, without one
    tree = start_tree(demo_dir)
    try:
        address, port = tree.root()
        store = next(s for s in tree.tree.stores if s.path == str(path))
        assert store.loader is not None  # a tree's reloads go to its loading process
        hold.armed = held.armed = True
        _edit(path, "serial: 2026113001", "serial: 2026113002")
        assert held.entered.wait(WAIT_TIMEOUT)  # the reload is in progress, and held
        assert _ask(address, port, "tools.").header.rcode == RCODE.NOERROR
        assert _ask(address, port, "finance.tools.", "stock price", tcp=True).header.rcode == RCODE.NOERROR
        assert store.reloads == 0
    finally:
        hold.release.set()
        held.release.set()
    try:
        assert wait_until(lambda: store.reloads == 1)
        assert store.index.zone.soa.serial >= 2026113002
    finally:
        tree.stop()


# -- item 1: rebuilds off the loop, floored and budgeted --

@pytest.mark.integration
def test_while_a_parent_rebuild_is_held_its_queries_are_answered(demo_dir, monkeypatch):
    hold = _Hold(store_module.ZoneStore._new_index, lambda self, zone: zone.origin == "weather.tools.")
    monkeypatch.setattr(store_module.ZoneStore, "_new_index", lambda self, zone: hold(self, zone))
    tree = start_tree(demo_dir)
    try:
        address, port = tree.root()
        parent = next(s for s in tree.tree.stores if s.index.origin == "weather.tools.")
        serial = parent.index.zone.soa.serial
        hold.armed = True  # the child's reload goes through; the parent's rebuild on learning it is held
        _edit(demo_dir / "history.weather.tools.yaml", "description: '", "description: 'Airship and zeppelin logs. ")
        _edit(demo_dir / "history.weather.tools.yaml", "serial: 2026113001", "serial: 2026113002")
        assert hold.entered.wait(WAIT_TIMEOUT)
        assert _ask(address, port, "weather.tools.", "historical weather").header.rcode == RCODE.NOERROR
        assert _ask(address, port, "tools.").header.rcode == RCODE.NOERROR
        assert parent.index.zone.soa.serial == serial  # the old index serves until the new one replaces it
    finally:
        hold.release.set()
    try:
        assert wait_until(lambda: parent.index.zone.soa.serial != serial)
        assert wait_until(lambda: tree.tree.summaries.counters()["summary_rebuilds"] >= 1)
    finally:
        tree.stop()


def test_a_childs_refresh_is_floored_unless_the_operator_asks_for_less():
    keeper = SummaryKeeper([], {}, 53, {}, floor=10.0)
    assert keeper._cap(0.0) == 10.0 and keeper._cap(0.1) == 10.0 and keeper._cap(3600) == 3600
    operator = SummaryKeeper([], {}, 53, {}, refresh=0.2, floor=10.0)
    assert operator._cap(0.0) == 0.2 and operator._cap(3600) == 0.2
    with pytest.raises(ValueError):
        SummaryKeeper([], {}, 53, {}, budget=0)


@pytest.mark.integration
def test_a_new_serial_saying_the_same_costs_no_rebuild_and_changes_past_the_budget_wait(demo_dir):
    tree = start_tree(demo_dir, summary_budget=2)
    child = demo_dir / "history.weather.tools.yaml"
    try:
        keeper = tree.tree.summaries
        counters = keeper.counters
        watched = keeper.children[("weather.tools.", "history.weather.tools.")]
        # the first look at a child's new serial learns what it says (one of its budget of 2)
        _edit(child, "serial: 2026113001", "serial: 2026113002")
        assert wait_until(lambda: watched.known == 2026113002 and watched.said is not None)
        assert watched.tokens < 1.5
        # a new serial, the same summary: fetched, no rebuild, no budget spent
        _edit(child, "serial: 2026113002", "serial: 2026113003")
        assert wait_until(lambda: counters()["summaries_unchanged"] == 1)
        assert watched.known == 2026113003 and 0.9 <= watched.tokens < 1.5
        rebuilds = counters()["summary_rebuilds"]
        # a change: the last rebuild of the budget; the next change waits for budget, unfetched
        _edit(child, "description: '", "description: 'Airship logs. ")
        _edit(child, "serial: 2026113003", "serial: 2026113004")
        assert wait_until(lambda: watched.known == 2026113004 and counters()["summary_rebuilds"] > rebuilds)
        assert watched.tokens < 0.5
        _edit(child, "description: '", "description: 'Zeppelin logs. ")
        _edit(child, "serial: 2026113004", "serial: 2026113005")
        assert wait_until(lambda: counters()["summaries_over_budget"] >= 1)
        assert watched.known == 2026113004
    finally:
        tree.stop()


# -- item 2: lazy loads off the loop, bounded, in a fair queue --

@pytest.mark.integration
def test_while_a_lazy_load_is_held_loaded_zones_are_answered_and_the_queue_is_bounded(built, monkeypatch):
    zones, address = built
    top = load_zone(zones / "root.yaml")
    held, queued, refused = (c.name for c in top.children[:3])
    hold = _Hold(lazy_module.ZoneStore, lambda path, *rest, **kw: os.path.basename(path) == f"{held.rstrip('.')}.yaml")
    monkeypatch.setattr(lazy_module, "ZoneStore", hold)
    with TreeThread(zones, free_port(address), listen=[address], lazy=True, max_loading=1, load_queue=2,
                    watch_interval=0) as tree:
        port = tree.root()[1]
        top_origin = tree.tree.lazy.top.index.origin
        hold.armed = True
        answers: dict[str, DNSRecord] = {}
        waiting = [threading.Thread(target=lambda z=z: answers.__setitem__(z, _ask(address, port, z)), daemon=True)
                   for z in (held, queued)]
        try:
            waiting[0].start()
            assert hold.entered.wait(WAIT_TIMEOUT)  # the load of `held` is in progress, and held
            waiting[1].start()
            assert wait_until(lambda: len(tree.tree.lazy._queue) == 2)
            assert _ask(address, port, top_origin).header.rcode == RCODE.NOERROR  # loaded: answered meanwhile
            busy = _ask(address, port, refused)  # a third zone while two wait: refused at once, not queued
            assert busy.header.rcode == RCODE.SERVFAIL and tree.tree.lazy.busy >= 1
            assert not answers
        finally:
            hold.release.set()
        for thread in waiting:
            thread.join(WAIT_TIMEOUT)
        assert {z: r.header.rcode for z, r in answers.items()} == {held: RCODE.NOERROR, queued: RCODE.NOERROR}
        assert _ask(address, port, refused).header.rcode == RCODE.NOERROR  # asked again: loaded


def test_turns_are_given_once_enough_work_has_gone_by(monkeypatch):
    """Between the small steps of reading an index back, a turn only once the steps since the last one
    took the set time: none when they are quick, one a step when the time is nothing."""
    import tooldns.compiled as compiled

    given = []
    monkeypatch.setattr(compiled, "turn", lambda: given.append(1))
    rare, every = compiled.Turns(3600.0), compiled.Turns(0.0)
    for _ in range(50):
        rare()
        every()
    assert len(given) == 50  # every one of ``every``'s, none of ``rare``'s


def test_a_turn_is_given_when_a_served_socket_has_a_query_waiting(monkeypatch):
    """``tooldns.compiled.turn`` costs the kernel's timer slack (50 to 80 us) each time it lets go of the
    lock: with a server's socket watched it lets go only when that socket has something to read (its
    event loop about to want the lock) or once ``TURN_AT_LEAST`` has gone by since the last turn; with
    nothing watched (no server in the process), every time."""
    import socket

    import tooldns.compiled as compiled

    slept = []
    monkeypatch.setattr(compiled, "_watched", compiled._Watched())  # no other test's server in the way
    monkeypatch.setattr(compiled.time, "sleep", lambda seconds: slept.append(seconds))
    monkeypatch.setattr(compiled, "TURN_AT_LEAST", 3600.0)
    served = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    served.bind(("127.0.0.1", 0))
    client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        compiled.turn()  # nothing watched: given
        assert len(slept) == 1
        compiled.watch(served.fileno())
        for _ in range(20):
            compiled.turn()  # nothing waits, and a turn was given just now
        assert len(slept) == 1
        client.sendto(b"a query", served.getsockname())
        deadline = time.monotonic() + WAIT_TIMEOUT
        while len(slept) == 1 and time.monotonic() < deadline:
            compiled.turn()
        assert len(slept) == 2  # the datagram waits: given
        served.recv(100)  # read by its loop: quiet again
        compiled.turn()
        assert len(slept) == 2
        monkeypatch.setattr(compiled, "TURN_AT_LEAST", 0.0)
        compiled.turn()  # quiet, but long enough since the last
        assert len(slept) == 3
    finally:
        compiled.unwatch(served.fileno())
        served.close()
        client.close()
    compiled.turn()
    assert len(slept) == 4  # unwatched: nothing watched again


def test_a_running_server_has_its_sockets_watched_for_turns(tmp_path):
    """A server's UDP and TCP sockets are watched while it runs (a thread's work gives its loop a turn
    when a query waits), and no more once it stops."""
    import tooldns.compiled as compiled

    before = dict(compiled._watched.fds)
    server = DNSServer(Unloadable("x.tools.", "x.tools.yaml"), address="127.0.0.1", port=0)

    async def run() -> dict:
        await server.start()
        try:
            return dict(compiled._watched.fds)
        finally:
            await server.stop()

    during = asyncio.run(run())
    assert len(during) == len(before) + 2
    assert dict(compiled._watched.fds) == before


def test_indexing_a_large_zone_gives_a_waiting_thread_turns():
    """Compiled code never gives the interpreter's lock back by itself: the loops that index a zone call
    ``tooldns.compiled.turn`` every few dozen tools, so that the event loop answers while a work thread
    indexes a large zone. With the switch interval made too long to matter, the only way another thread
    runs during the indexing is those turns: count how often it did."""
    import sys

    from tooldns.serving.index import ZoneIndex
    from tooldns.zone.zonefile import parse_zone

    tool = "- {{label: t{0}, name: tool {0}, service: mcp, target: t.example., port: 443, description: '{1}'}}\n"
    zone = parse_zone("origin: big.tools.\nsoa: {serial: 1}\nnameservers: [{name: ns1.big.tools., address: 127.0.0.1}]\n"
                      "tools:\n" + "".join(tool.format(i, f"word{i} forecast rain {i % 7}") for i in range(640)))
    ticks, building, done, started = [0], threading.Event(), threading.Event(), threading.Event()

    def other() -> None:  # a thread that runs whenever it gets the lock, and gives it back at once
        started.set()
        while not done.is_set():
            if building.is_set():
                ticks[0] += 1
            time.sleep(0)

    before = sys.getswitchinterval()
    thread = threading.Thread(target=other, daemon=True)
    sys.setswitchinterval(100.0)
    try:
        thread.start()
        started.wait(WAIT_TIMEOUT)
        building.set()
        ZoneIndex(zone)
        building.clear()
    finally:
        done.set()
        sys.setswitchinterval(before)
        thread.join(WAIT_TIMEOUT)
    assert ticks[0] >= 10  # 640 tools: a turn every 64 of them in each of two loops at least


def test_a_replaced_index_is_freed_by_the_next_check_once_nothing_reads_it(tmp_path):
    """A reload's old index is emptied a piece at a time (freed at once, a 10,000-tool index held the
    lock for 57 ms) by the store's next check, not while a query still reads it."""
    import weakref

    from tooldns.serving.store import ZoneStore

    path = tmp_path / "leaf.tools.yaml"
    path.write_text((Path(__file__).resolve().parents[1] / "zones" / "history.weather.tools.yaml").read_text())
    store = ZoneStore(str(path))
    reader = store.index  # a query in flight holds the index it started with
    old = weakref.ref(reader)
    tools_before = len(reader.tool_owners)
    path.write_text(path.read_text().replace("serial: 2026113001", "serial: 2026113002"))
    os.utime(path, (os.stat(path).st_atime + 5, os.stat(path).st_mtime + 5))
    assert store.check() == "reloaded" and store.index is not reader
    assert store.check() is None and len(reader.tool_owners) == tools_before > 0  # still read: left whole
    owners = reader.tool_owners  # (a piece of it, which does not keep it)
    del reader
    assert store.check() is None and old() is None  # nothing reads it: emptied and freed
    assert owners == {}  # emptied in place, a piece at a time


@pytest.mark.integration
def test_what_a_zone_makes_at_its_first_query_is_made_in_the_work_thread_at_start(tmp_path):
    """The summary each zone publishes for its parent, and the fast path's pieces, were made by the
    first query that needed them, on the event loop; now the work thread makes them once the tree
    starts, before any query."""
    import shutil

    zones = tmp_path / "zones"
    shutil.copytree(Path(__file__).resolve().parents[1] / "zones", zones)
    tree = start_tree(zones, summaries=False)
    try:
        resolvers = list(tree.tree.resolvers.values())
        assert len(resolvers) > 5
        assert wait_until(lambda: all(r.source.index._published is not None and r.fast._packed is not None
                                      for r in resolvers), WAIT_TIMEOUT)
        assert all(r.stats["queries"] == 0 for r in resolvers)  # no query asked for them
        # after a reload too, for a zone that queries come to: the work thread that swapped the index
        # makes them for the new one; a zone never asked is left to its first query
        by_origin = {r.source.index.origin: r for r in resolvers}
        leaf, other = by_origin["history.weather.tools."], by_origin["forecast.weather.tools."]
        q = DNSRecord.question("_any._tcp.history.weather.tools.", "SRV")
        q.add_ar(EDNS0(udp_len=1232, opts=[EDNSOption(INTENT_OPTION_CODE, encode_intent("rain in 1990", 3))]))
        address = tree.tree.addresses["history.weather.tools."][0]
        assert DNSRecord.parse(q.send(address, tree.root()[1], timeout=REPLY_TIMEOUT)).header.rcode == RCODE.NOERROR
        asked = leaf.stats["queries"]
        assert asked == 1 and leaf.fast.asked and not other.fast.asked
        before = {r: r.source.index for r in (leaf, other)}
        for name in ("history.weather.tools.yaml", "forecast.weather.tools.yaml"):
            _edit(zones / name, "serial: 2026113001", "serial: 2026113002")
        assert wait_until(lambda: all(r.source.index is not before[r] for r in before), WAIT_TIMEOUT)
        assert wait_until(lambda: leaf.fast._packed[0]() is leaf.source.index, WAIT_TIMEOUT)
        assert leaf.stats["queries"] == asked  # made ahead of any query
        assert other.fast._packed[0]() is not other.source.index  # not asked: not made
    finally:
        tree.stop()


def test_replaced_indexes_waiting_for_a_check_are_bounded():
    """Swaps with no check between (summaries learned, keys changed, a server watching no files) keep at
    most RETIRED_KEPT replaced indexes for the next check; older ones are freed whole."""
    import weakref

    from tooldns.serving.store import RETIRED_KEPT, ZoneStore

    store = ZoneStore(str(Path(__file__).resolve().parents[1] / "zones" / "history.weather.tools.yaml"))
    first = weakref.ref(store.index)
    for _ in range(RETIRED_KEPT + 2):
        store._swap(store._new_index(store.file_zone))
    assert len(store._retired) == RETIRED_KEPT and first() is None


class _HeldEmbedder(HashEmbedder):
    """The hash model, whose intents wait until the test releases them; it counts the calls held and
    names the threads they ran in."""

    def __init__(self) -> None:
        super().__init__(64)
        self.release, self.held, self.threads = threading.Event(), 0, set()
        self._lock = threading.Lock()

    def embed_queries(self, texts):
        with self._lock:
            self.held += 1
            self.threads.add(threading.current_thread().name)
        self.release.wait(WAIT_TIMEOUT)
        return super().embed_queries(texts)


def _hybrid_query(intent: str, vector: bytes | None = None) -> bytes:
    q = DNSRecord.question("_any._tcp._history.weather.tools.", "SRV")
    q.header.rd = 0
    opts = [EDNSOption(INTENT_OPTION_CODE, encode_intent(intent, 3))]
    q.add_ar(EDNS0(udp_len=1232, opts=opts + ([EDNSOption(VECTOR_OPTION_CODE, vector)] if vector else [])))
    return bytes(q.pack())


@pytest.mark.integration
def test_while_intents_wait_to_be_embedded_a_query_with_a_vector_is_answered(tmp_path, monkeypatch):
    """A hybrid zone that embeds the intents coming without a vector: while its model holds as many of
    them as the server has threads, a query bringing its own vector is answered, on the event loop.
    Before, every query to such a zone went through the thread pool and waited behind them."""
    from test_fast_reply import _ask, _serving
    from test_hybrid import hybrid_history, intent_vector
    from tooldns.embedding import registry

    held = _HeldEmbedder()
    monkeypatch.setitem(registry._shared, "hash:64", held)
    resolver = hybrid_history(tmp_path, embed_intents="hash:64")
    intents = [f"rain gauge readings of station {n}" for n in range(8)]  # as many as the pool's threads
    with _serving(resolver) as port:
        waiting = [threading.Thread(target=lambda i=i: replies.append(_ask(port, _hybrid_query(i), True)))
                   for i in intents]
        replies: list[bytes] = []
        for thread in waiting:
            thread.start()
        try:
            assert wait_until(lambda: held.held == len(intents))
            brought = DNSRecord.parse(_ask(port, _hybrid_query(intents[0], intent_vector(intents[0])), True))
            assert brought.header.rcode == RCODE.NOERROR and brought.ar and not replies
            assert held.held == len(intents)  # the vector was used: nothing more was embedded
        finally:
            held.release.set()
            for thread in waiting:
                thread.join(WAIT_TIMEOUT)
    assert len(replies) == len(intents) and all(DNSRecord.parse(r).header.rcode == RCODE.NOERROR for r in replies)
    assert held.threads and all(name.startswith("tooldns-scorer") for name in held.threads)


def test_on_the_loop_an_intent_to_embed_is_left_to_the_pool_and_one_embedded_already_is_used(tmp_path):
    from test_hybrid import hybrid_history

    index = hybrid_history(tmp_path, embed_intents="hash:64").source.index
    with on_the_loop():
        assert not may_wait()
        with pytest.raises(WouldWait):
            index.intent_vector("rain gauge readings", None)
    assert may_wait()
    vector, ignored, failed = index.intent_vector("rain gauge readings", None)  # off the loop: embedded
    assert vector is not None and not ignored and not failed
    with on_the_loop():
        assert index.intent_vector("rain gauge readings", None)[0] == vector  # embedded already: no wait
