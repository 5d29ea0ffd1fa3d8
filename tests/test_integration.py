"""Real servers on loopback, real DNS over UDP and TCP, the real resolver library."""

import asyncio
import logging
import re
import socket
import struct
import threading
import time

import dns.message
import pytest
from dnslib import EDNS0, RCODE, DNSRecord, EDNSOption

from resolver_client import AsyncResolver, Resolver, ResolverError
from resolver_client.walk import AUTO_BEAM, DEFAULT_BEAM
from tooldns.netsim import SilentServer
from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent

from conftest import REPLY_TIMEOUT, WAIT_TIMEOUT, copy_tree, fresh_subnet, start_tree, wait_until, ZONES


def resolver_for(tree, **kwargs) -> Resolver:
    return Resolver(root=tree.root(), timeout=REPLY_TIMEOUT, **kwargs)


def test_resolve_over_udp(demo_tree):
    with resolver_for(demo_tree, cache=False) as r:
        res = r.resolve("historical weather records for Hong Kong", k=3)
    assert res.tools, res.trace
    top = res.tools[0]
    assert top.zone in ("hko.weather.tools.", "history.weather.tools.")
    assert top.path[0] == "tools." and top.path[-1] == top.zone
    assert top.score and top.score > 0 and top.endpoint.startswith("https://")
    scores = [t.score for t in res.tools]
    assert scores == sorted(scores, reverse=True)
    s = res.stats
    assert s.queries >= 3 and s.bytes_sent > 0 and s.bytes_received > s.bytes_sent and s.packets >= 2 * s.queries
    assert all(h.rcode == "NOERROR" for h in res.trace)


def test_different_intents_reach_different_domains(demo_tree):
    with resolver_for(demo_tree) as r:
        slack = r.resolve("post a message to a Slack channel", k=2).tools[0]
        arxiv = r.resolve("search arXiv preprints", k=2).tools[0]
        mcp = r.resolve("GitHub pull requests", k=2, service="mcp").tools
    assert slack.zone == "chat.comms.tools." and "Slack" in slack.name
    assert arxiv.name == "arXiv API"
    assert mcp and all(t.service == "mcp" for t in mcp) and mcp[0].name == "GitHub MCP Server"


def test_chinese_intent_end_to_end(demo_tree):
    with resolver_for(demo_tree) as r:
        res = r.resolve("香港天文台历史气候数据", k=3)
    assert res.tools and res.tools[0].zone == "hko.weather.tools."
    assert res.tools[0].name == "HKO Historical Climate Data"


def test_async_resolver_same_answer(demo_tree):
    with resolver_for(demo_tree, cache=False) as r:
        sync = r.resolve("weather forecast for tomorrow", k=3)
    res = asyncio.run(AsyncResolver(root=demo_tree.root(), timeout=REPLY_TIMEOUT, cache=False)
                      .resolve("weather forecast for tomorrow", k=3))
    assert [t.key for t in res.tools] == [t.key for t in sync.tools]


def _zones_by_depth(res) -> dict[int, set[str]]:
    """The zones a resolution asked, by their depth below the root zone."""
    out: dict[int, set[str]] = {}
    for hop in res.trace:
        out.setdefault(hop.zone.count(".") - 1, set()).add(hop.zone)
    return out


def test_a_beam_bounds_the_zones_asked_a_depth_with_both_resolvers(demo_tree):
    """``beam``: real servers, UDP; at most that many zones asked at each depth, all of them among the
    zones the unbounded walk asks, the best path kept, and the same walk from the async resolver."""
    intent = "historical weather records for Hong Kong"
    with resolver_for(demo_tree, cache=False, beam=None) as full, resolver_for(demo_tree, cache=False, beam=1) as narrow:
        wide, one = full.resolve(intent, k=3), narrow.resolve(intent, k=3)
    by_depth, wide_depths = _zones_by_depth(one), _zones_by_depth(wide)
    assert all(len(zones) <= 1 for zones in by_depth.values()), by_depth
    assert set().union(*by_depth.values()) < set().union(*wide_depths.values())
    assert one.tools and one.stats.queries < wide.stats.queries
    assert one.tools[0].zone in ("hko.weather.tools.", "history.weather.tools.")
    dropped = [r for h in one.trace for r in h.referrals if not r.followed]
    assert dropped and all(r.why_not == "beyond the beam of 1 a depth" for r in dropped)
    res = asyncio.run(AsyncResolver(root=demo_tree.root(), timeout=REPLY_TIMEOUT, cache=False, beam=1)
                      .resolve(intent, k=3))
    assert [t.key for t in res.tools] == [t.key for t in one.tools]


def test_by_default_a_walk_follows_the_roots_referral_whole_and_bounds_the_depths_below(demo_tree):
    """The resolver's default beam (``AUTO_BEAM``: 6, or the root's K when larger): a vague intent at K
    = 5 reaches 13 zones two levels down in the demo tree without a beam, at most 6 with the default;
    the root's children are all asked either way, and a K of 7 at the root widens the beam to 7."""
    intent = "get information"
    with resolver_for(demo_tree, cache=False) as default, resolver_for(demo_tree, cache=False, beam=None) as whole:
        assert default.beam == AUTO_BEAM
        bounded, unbounded = default.resolve(intent, k=5), whole.resolve(intent, k=5)
        wider = default.resolve(intent, k=(7, 5))
        wider_whole = whole.resolve(intent, k=(7, 5))
    deep, deep_whole = _zones_by_depth(bounded), _zones_by_depth(unbounded)
    assert len(deep_whole[2]) > DEFAULT_BEAM, deep_whole  # the case the beam is for
    assert len(deep[2]) == DEFAULT_BEAM and deep[2] < deep_whole[2]
    assert deep[1] == deep_whole[1]  # the root's referral, whole
    assert bounded.stats.queries < unbounded.stats.queries and bounded.tools
    assert any(r.why_not == f"beyond the beam of {DEFAULT_BEAM} a depth" for h in bounded.trace for r in h.referrals)
    assert _zones_by_depth(wider)[1] == _zones_by_depth(wider_whole)[1]
    assert DEFAULT_BEAM < len(_zones_by_depth(wider)[2]) <= 7 < len(_zones_by_depth(wider_whole)[2])


def test_a_beam_that_is_not_a_whole_number_of_at_least_one_is_refused():
    for bad in (0, -1, 2.5, "wide", True):
        with pytest.raises(ResolverError, match="beam"):
            Resolver(beam=bad)


def test_truncation_then_tcp_retry(demo_tree):
    with resolver_for(demo_tree, cache=False, details=True) as r:  # descriptions: 8 tools need more than a datagram
        res = r.resolve("create and edit documents: pdf, docx, xlsx, pptx, notes and files", k=8)
    assert res.stats.tcp_retries >= 1
    assert any(h.transport == "tcp" for h in res.trace)
    assert len([t for t in res.tools if t.zone == "docs.productivity.tools."]) >= 5


def test_tcp_several_queries_per_connection(demo_tree):
    address, port = demo_tree.root()
    with socket.create_connection((address, port), timeout=REPLY_TIMEOUT) as sock:
        for i in range(3):
            q = DNSRecord.question("_any._tcp._tools.", "SRV")
            q.add_ar(EDNS0(udp_len=1232, opts=[EDNSOption(INTENT_OPTION_CODE, encode_intent(f"weather {i}", 2))]))
            wire = bytes(q.pack())
            sock.sendall(struct.pack("!H", len(wire)) + wire)
            length = struct.unpack("!H", sock.recv(2, socket.MSG_WAITALL))[0]
            reply = DNSRecord.parse(sock.recv(length, socket.MSG_WAITALL))
            assert reply.header.id == q.header.id and reply.header.rcode == RCODE.NOERROR
            assert str(reply.auth[0].rname) == "weather.tools."


def test_malformed_packets_do_not_stop_the_server(demo_tree):
    address, port = demo_tree.root()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(REPLY_TIMEOUT)
        sock.sendto(b"\x12\x34" + b"\x00" * 4 + b"\xff" * 20, (address, port))  # garbage after a header
        reply = DNSRecord.parse(sock.recv(4096))
        assert reply.header.id == 0x1234 and reply.header.rcode == RCODE.FORMERR
        sock.sendto(b"\x00", (address, port))  # not even a header: dropped, no reply
        q = DNSRecord.question("tools.", "SOA")
        sock.sendto(bytes(q.pack()), (address, port))
        assert DNSRecord.parse(sock.recv(4096)).header.rcode == RCODE.NOERROR


def _two_server_tree(tmp_path):
    """The demo tree with weather.tools. served by two name servers (.2 and .102)."""
    import yaml

    subnet = fresh_subnet()
    d = copy_tree(ZONES, tmp_path / "zones2", subnet)
    extra = {"name": "ns2.weather.tools.", "address": f"{subnet}.102"}
    weather = yaml.safe_load((d / "weather.tools.yaml").read_text())
    weather["nameservers"].append(extra)
    (d / "weather.tools.yaml").write_text(yaml.safe_dump(weather, allow_unicode=True))
    root = yaml.safe_load((d / "tools.yaml").read_text())
    next(c for c in root["children"] if c["label"] == "weather")["nameservers"].append(extra)
    (d / "tools.yaml").write_text(yaml.safe_dump(root, allow_unicode=True))
    return d, subnet


@pytest.mark.integration
def test_server_killed_mid_walk_uses_other_server(tmp_path):
    d, subnet = _two_server_tree(tmp_path)
    tree = start_tree(d)
    try:
        with resolver_for(tree, cache=False) as r:
            before = r.resolve("historical weather archive", k=2)
            tree.call(tree.tree.stop_server("weather.tools.", f"{subnet}.2"))
            after = r.resolve("historical weather archive", k=2)
    finally:
        tree.stop()
    assert [t.key for t in after.tools] == [t.key for t in before.tools]
    weather_hops = [h for h in after.trace if h.zone == "weather.tools."]
    assert weather_hops[0].server.startswith(f"{subnet}.2:") and weather_hops[0].rcode != "NOERROR"
    assert weather_hops[-1].server.startswith(f"{subnet}.102:") and weather_hops[-1].rcode == "NOERROR"


NEW_TOOL = """\
- label: knmi-archive
  name: KNMI Daily Weather Archive
  service: http
  target: www.daggegevens.knmi.nl.
  port: 443
  description: Daily weather observations of Dutch stations from the Royal Netherlands Meteorological Institute, zeppelin test marker.
  endpoint: https://www.daggegevens.knmi.nl/klimatologie/daggegevens
"""


@pytest.mark.integration
def test_live_edit_add_change_remove_and_broken(demo_dir, caplog):
    tree = start_tree(demo_dir)
    path = demo_dir / "history.weather.tools.yaml"
    original = path.read_text()
    # the edited zone's parents learn its new summary (docs/summaries.md); no other zone changes
    edited = ("history.weather.tools.yaml", "/weather.tools.yaml", "/tools.yaml")
    others = {s.path: s.index for s in tree.tree.stores if not s.path.endswith(edited)}
    try:
        with resolver_for(tree, cache=False) as r:
            def found(name):
                return any(t.name == name for t in r.resolve("historical weather zeppelin", k=3).tools)

            assert not found("KNMI Daily Weather Archive")
            path.write_text(original.replace("tools:\n", "tools:\n" + NEW_TOOL, 1))
            assert wait_until(lambda: found("KNMI Daily Weather Archive")), "added tool not served"
            path.write_text(original.replace("tools:\n", "tools:\n" + NEW_TOOL.replace("KNMI Daily", "KNMI Daily Renamed"), 1))
            assert wait_until(lambda: found("KNMI Daily Renamed Weather Archive")), "changed tool not served"
            # a broken edit is refused; the last good version keeps serving
            with caplog.at_level(logging.ERROR, logger="tooldns.serving.store"):
                path.write_text(original.replace("tools:\n", "tools:\n- label: broken\n  port: nope\n", 1))
                assert wait_until(lambda: "kept the last good version" in caplog.text)
            assert re.search(r"history\.weather\.tools\.yaml:\d+: ", caplog.text)
            assert found("KNMI Daily Renamed Weather Archive")
            path.write_text(original)
            assert wait_until(lambda: not found("KNMI Daily Renamed Weather Archive")), "removed tool still served"
        # no other zone was reloaded
        assert all(s.index is others[s.path] for s in tree.tree.stores if s.path in others)
    finally:
        tree.stop()


@pytest.mark.integration
@pytest.mark.parametrize("listen", [False, True])
def test_a_zone_file_added_while_serving_is_served_without_a_restart(demo_dir, caplog, listen):
    """A zone file added to the directory is checked and served from the next look: from a new server
    on its own address, or beside the zones served on one --listen address; a file whose origin is
    served already, or one that cannot be loaded, is logged and not served, and the others go on."""
    path = demo_dir / "history.weather.tools.yaml"
    text = path.read_text()
    path.unlink()
    address = re.search(r"address: (\S+)", text).group(1)
    kwargs = {"listen": [address.rsplit(".", 1)[0] + ".1"]} if listen else {}
    tree = start_tree(demo_dir, **kwargs)
    try:
        served = lambda: tree.tree.addresses.get("history.weather.tools.")  # noqa: E731
        assert not served()
        with caplog.at_level(logging.INFO, logger="tooldns.serving.tree"):
            path.write_text(text)
            assert wait_until(served), "the added zone file is not served"
        assert "new zone file: serving history.weather.tools." in caplog.text
        where = tree.tree.addresses["history.weather.tools."][0]
        assert where == (kwargs["listen"][0] if listen else address)
        reply = DNSRecord.parse(DNSRecord.question("history.weather.tools.", "SOA").send(
            where, tree.tree.port, timeout=REPLY_TIMEOUT))
        assert reply.header.rcode == RCODE.NOERROR and reply.header.aa
        assert [str(rr.rname) for rr in reply.rr] == ["history.weather.tools."]  # its own SOA, not a parent's
        if not listen:  # (on one --listen address, the glue's addresses are not served: a load balancer's are)
            with resolver_for(tree, cache=False) as r:  # walked to from the root, as any zone
                assert wait_until(lambda: any(t.name == "Open-Meteo Historical Weather API"
                                              for t in r.resolve("historical weather archive ERA5", k=3).tools))
        with caplog.at_level(logging.ERROR, logger="tooldns.serving.tree"):
            (demo_dir / "again.yaml").write_text(text)
            (demo_dir / "broken.yaml").write_text("origin: broken.weather.tools.\nbogus: 1\n")
            assert wait_until(lambda: "broken.yaml:2: unknown key 'bogus'" in caplog.text
                              and "history.weather.tools. is already served from" in caplog.text)
        assert len([s for s in tree.tree.stores if s.index.origin == "history.weather.tools."]) == 1
        assert "broken.weather.tools." not in tree.tree.addresses
    finally:
        tree.stop()


@pytest.mark.integration
def test_a_zone_whose_name_servers_move_is_served_where_it_was_and_the_log_says_so(demo_dir, caplog):
    """A reloaded zone whose name server names another address is served on, with the new data, where its
    socket was bound at start (as an authoritative server's listening addresses are its own), and the
    log says that a restart moves it."""
    tree = start_tree(demo_dir)
    path = demo_dir / "history.weather.tools.yaml"
    old = re.search(r"address: (\S+)", path.read_text()).group(1)
    new = old.rsplit(".", 1)[0] + ".250"
    try:
        with caplog.at_level(logging.WARNING, logger="tooldns.serving.tree"):
            path.write_text(path.read_text().replace(f"address: {old}", f"address: {new}"))
            assert wait_until(lambda: "restart it to serve the zone there" in caplog.text)
        assert f"history.weather.tools.: its name servers now name {new}, but this process serves it on {old}" \
            in caplog.text
        reply = DNSRecord.parse(DNSRecord.question("ns1.history.weather.tools.", "A").send(
            old, tree.tree.port, timeout=REPLY_TIMEOUT))
        assert [str(rr.rdata) for rr in reply.rr] == [new]  # the new data, on the old address
    finally:
        tree.stop()


def test_trust_filtering_end_to_end(demo_tree):
    with resolver_for(demo_tree, cache=False) as r:
        open_ = r.resolve("Hong Kong Observatory weather warnings", k=3)
        none = r.resolve("Hong Kong Observatory weather warnings", k=3, trust=[])
        hko = r.resolve("Hong Kong Observatory weather warnings", k=3, trust=["hko"])
        excl = r.resolve("Hong Kong Observatory weather warnings", k=3, exclude=["hko"])
    assert any(t.zone == "hko.weather.tools." for t in open_.tools)
    assert not any(t.zone.endswith(("hko.weather.tools.", "noaa.weather.tools.")) for t in none.tools)
    assert any(t.zone == "hko.weather.tools." for t in hko.tools)
    assert not any(t.zone == "hko.weather.tools." for t in excl.tools)


def test_client_cache_honours_ttl(demo_tree):
    from resolver_client import ReplyCache

    now = [0.0]
    cache = ReplyCache(clock=lambda: now[0])
    with resolver_for(demo_tree, cache=cache) as r:
        first = r.resolve("weather forecast for tomorrow", k=2)
        second = r.resolve("weather forecast for tomorrow", k=2)
        other_k = r.resolve("weather forecast for tomorrow", k=1)
        now[0] += 31  # past the 30 s the servers allow for intent-ranked answers
        third = r.resolve("weather forecast for tomorrow", k=2)
    searches = first.stats.queries - first.stats.plan_queries  # the first also asked for a published walk
    assert first.stats.queries > 0 and first.stats.cache_hits == 0 and first.stats.plan_queries == 1
    assert second.stats.queries == 0 and second.stats.cache_hits == searches  # what the tree said is kept too
    assert [t.key for t in second.tools] == [t.key for t in first.tools]
    assert other_k.stats.queries > 0  # K is part of the key
    assert third.stats.queries == searches


def test_rejected_intent_raises(demo_tree):
    """A malformed option reaches a real server; its FORMERR text reaches the caller."""
    from resolver_client import IntentRejected, transport
    from resolver_client.walk import Walk

    walk = Walk("weather", root=[demo_tree.root()])
    [q] = walk.start()
    q.wire = q.wire.replace(encode_intent("weather", 3), b"\x00\x00\x06\x03weather")
    walk.take(q, transport.udp(q.wire, *q.server, REPLY_TIMEOUT))
    with pytest.raises(IntentRejected, match="says 6 bytes but 7 follow"):
        walk.result()


def test_long_intent_is_shortened_to_one_datagram_or_sent_whole_over_tcp(demo_tree):
    """An intent too long for one UDP datagram (agents pass whole dialogues): the resolver cuts it to
    what one carries (its start, at a word boundary) and asks over UDP; told not to (``fit=False``),
    it sends it whole over TCP."""
    intent = "I need the historical weather records of Hong Kong for my report. " * 40  # ~2.7 kB
    with resolver_for(demo_tree, cache=False) as r, resolver_for(demo_tree, cache=False, fit=False) as whole:
        short, full = r.resolve(intent, k=2), whole.resolve(intent, k=2)
    for res in (short, full):
        assert res.tools and res.tools[0].zone in ("hko.weather.tools.", "history.weather.tools.")
    assert short.trace and all(h.transport == "udp" for h in short.trace)
    assert short.stats.intent_shortened == len(intent.encode()) and short.intent == intent
    assert full.trace and all(h.transport == "tcp" for h in full.trace) and full.stats.intent_shortened == 0


def test_intent_longer_than_the_option_allows_is_shortened_not_refused(demo_tree):
    intent = "Hong Kong Observatory historical weather records, please. " + "Some unrelated chatter here. " * 200
    with resolver_for(demo_tree, cache=False) as r:
        res = r.resolve(intent, k=2)
    assert len(intent.encode()) > 4096 and res.stats.intent_shortened == len(intent.encode())
    assert res.tools and res.tools[0].zone == "hko.weather.tools."
    assert res.intent == intent  # the result still speaks of what was asked


@pytest.mark.integration
def test_a_silent_server_is_hedged_with_the_zones_other_server(tmp_path):
    """A name server that swallows queries (no reply, no ICMP): once its retransmission timeout is over,
    well before the query's timeout, the zone's other server is asked as well and its reply taken."""
    # a long timeout: only a hedge, not a timeout, can end the wait for the silent server early
    timeout = 5.0
    d, subnet = _two_server_tree(tmp_path)
    tree = start_tree(d)
    blackhole = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        tree.call(tree.tree.stop_server("weather.tools.", f"{subnet}.2"))
        blackhole.bind((f"{subnet}.2", tree.root()[1]))  # reads nothing, answers nothing
        with Resolver(root=tree.root(), timeout=timeout, cache=False) as r:
            res = r.resolve("historical weather archive", k=2)
    finally:
        blackhole.close()
        tree.stop()
    assert res.tools
    weather_hops = [h for h in res.trace if h.zone == "weather.tools."]
    assert [h.rcode for h in weather_hops] == ["NOERROR"]  # one exchange: no timeout, no retry
    assert weather_hops[0].server.startswith(f"{subnet}.102:")  # answered by the other server
    assert res.stats.timeouts == 0 and res.stats.hedges >= 1


@pytest.mark.integration
def test_tcp_idle_connections_are_closed():
    import threading

    from tooldns.serving.index import ZoneIndex
    from tooldns.serving.resolver import StaticSource, ZoneResolver
    from tooldns.serving.server import DNSServer
    from tooldns.zone.zonefile import load_zone

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    resolver = ZoneResolver(StaticSource(ZoneIndex(load_zone(ZONES / "tools.yaml"))))
    server = DNSServer(resolver, f"{fresh_subnet()}.1", 0, tcp_idle=0.3)
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(WAIT_TIMEOUT)
    try:
        # read until EOF, however long the machine takes; a server that never closes fails on the timeout
        with socket.create_connection((server.address, server.port), timeout=WAIT_TIMEOUT) as sock:
            q = bytes(DNSRecord.question("tools.", "SOA").pack())
            t0 = time.monotonic()  # before the query: the server's idle clock starts after its reply
            sock.sendall(struct.pack("!H", len(q)) + q)
            length = struct.unpack("!H", sock.recv(2, socket.MSG_WAITALL))[0]
            assert DNSRecord.parse(sock.recv(length, socket.MSG_WAITALL)).header.rcode == RCODE.NOERROR
            assert sock.recv(1) == b""  # the server closed the idle connection
            elapsed = time.monotonic() - t0
            # kept open while idle for less than tcp_idle; closed well before the 10 s default would close it
            assert 0.25 < elapsed < 5.0
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(WAIT_TIMEOUT)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT_TIMEOUT)


def test_chaos_stats_query(demo_tree):
    """dig CH TXT stats.tooldns. reports a server's counters, fresh each time."""
    address, port = demo_tree.root()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(REPLY_TIMEOUT)
        counts = []
        for _ in range(2):
            sock.sendto(bytes(DNSRecord.question("stats.tooldns.", "TXT", "CH").pack()), (address, port))
            reply = DNSRecord.parse(sock.recv(4096))
            pairs = dict(s.decode().split("=", 1) for s in reply.rr[0].rdata.data)
            assert pairs["zone"] == "tools." and reply.rr[0].ttl == 0
            counts.append(int(pairs["queries"]))
    assert counts[1] == counts[0] + 1


class _UdpThread:
    """A UDP socket on a fresh loopback address (at *port*; 0: any), served by :meth:`_serve` in a thread
    until :meth:`close`."""

    def __init__(self, port: int = 0) -> None:
        import threading

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((f"{fresh_subnet()}.1", port))
        self.sock.settimeout(0.05)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def address(self) -> tuple[str, int]:
        return self.sock.getsockname()

    def _serve(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.done.set()
        self.thread.join(WAIT_TIMEOUT)
        self.sock.close()


class _HoldingServer(_UdpThread):
    """A UDP name server that holds every query until *gate* are held, or *hold* seconds have passed since
    the first of them, then refuses them all; it counts the most queries it held at once (the walks a
    resolver had out together against it; a query sent again counts once)."""

    def __init__(self, gate: int, hold: float = 0.3) -> None:
        self.gate, self.hold, self.peak = gate, hold, 0
        super().__init__()

    def _refuse(self, wire: bytes, client) -> None:
        reply = bytearray(wire[:12])
        reply[2] |= 0x80  # QR
        reply[3] = (reply[3] & 0xF0) | RCODE.REFUSED
        self.sock.sendto(bytes(reply) + wire[12:], client)

    def _serve(self) -> None:
        held, first, answered = [], 0.0, set()
        while not self.done.is_set():
            try:
                wire, client = self.sock.recvfrom(65535)
                if (client, wire) in answered:
                    # a resend that crossed its answer (a loaded machine): answered again, not a new walk's
                    self._refuse(wire, client)
                    continue
                held.append((wire, client))
                first = first or time.monotonic()
                # queries, not datagrams: a query resent after its retransmission timeout (a loaded
                # machine releasing the held ones late) is still one walk's
                self.peak = max(self.peak, len({(client, wire[:2]) for wire, client in held}))
            except socket.timeout:
                pass
            if held and (len(held) >= self.gate or time.monotonic() - first >= self.hold):
                for wire, client in held:
                    self._refuse(wire, client)
                    answered.add((client, wire))  # the whole query: another walk's, the same ID by chance, is held
                held, first = [], 0.0


@pytest.mark.integration
def test_a_resolver_bounds_the_walks_it_has_out_at_once_and_the_others_wait_their_turn():
    """A gateway asking for many resolutions at once (issue 42, item 7): by default at most MAX_WALKS of them
    walk together, each with its own fan-out of sockets, the published walk's query included; the others
    queue, and every one of them is answered (here: refused, as the server answers everything)."""
    from concurrent.futures import ThreadPoolExecutor

    from resolver_client.resolver import MAX_WALKS

    calls = 3 * MAX_WALKS
    server = _HoldingServer(gate=calls)
    try:
        resolver = AsyncResolver(root=server.address, timeout=REPLY_TIMEOUT)

        async def many():
            return await asyncio.gather(*(resolver.resolve(f"weather {i}") for i in range(calls)),
                                        return_exceptions=True)

        outcomes = asyncio.run(many())
        assert all(isinstance(o, ResolverError) and "REFUSED" in str(o) for o in outcomes), outcomes[:3]
        assert server.peak == MAX_WALKS
        server.peak = 0
        with Resolver(root=server.address, timeout=REPLY_TIMEOUT) as sync, ThreadPoolExecutor(calls) as pool:
            futures = [pool.submit(sync.resolve, f"weather {i}") for i in range(calls)]
            assert all(isinstance(f.exception(WAIT_TIMEOUT), ResolverError) for f in futures)
        assert server.peak == MAX_WALKS
        server.peak = 0
        bounded = AsyncResolver(root=server.address, timeout=REPLY_TIMEOUT, max_walks=2)

        async def six():
            return await asyncio.gather(*(bounded.resolve(f"w {i}") for i in range(6)), return_exceptions=True)

        asyncio.run(six())
        assert server.peak == 2
    finally:
        server.close()


class _DroppingRelay(_UdpThread):
    """A UDP relay in front of a real name server that loses every datagram from the first socket that
    writes to it (a worker of ``tooldns serve --workers`` killed with the query in its socket: the query
    and each of its resends lost) and relays the others, and their replies."""

    def __init__(self, server: tuple[str, int]) -> None:
        self.server, self.lost_from, self.dropped, self.relayed = server, None, 0, 0
        super().__init__(server[1])  # the tree's port: the one its referrals are followed on

    def _serve(self) -> None:
        while not self.done.is_set():
            try:
                wire, client = self.sock.recvfrom(65535)
            except socket.timeout:
                continue
            self.lost_from = self.lost_from or client
            if client == self.lost_from:
                self.dropped += 1
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as up:
                up.settimeout(WAIT_TIMEOUT)
                up.sendto(wire, self.server)
                self.sock.sendto(up.recv(65535), client)
                self.relayed += 1


def test_a_zone_whose_first_server_is_silent_is_answered_by_its_next_before_the_first_times_out(demo_tree):
    """Hedging (issue 44): the root's first server answers nothing; when the first wait for it is over
    (its retransmission timeout, well inside the query's timeout), the resolver asks the root's second
    server as well and takes its reply: no timeout, no retry after one, the tools found; sync and async.
    The silent server then counts as far: the same resolver's next resolution asks the other first."""
    async def twice(resolver):
        return [await resolver.resolve(intent) for intent in ("historical weather Hong Kong", "rain forecast")]

    for drive in ("sync", "async"):
        hole = SilentServer(f"{fresh_subnet()}.1")
        try:
            kwargs = dict(root=[hole.address, demo_tree.root()], timeout=10.0, cache=False)
            if drive == "sync":
                with Resolver(**kwargs) as r:
                    res = r.resolve("historical weather Hong Kong")
                    swallowed = hole.swallowed
                    again = r.resolve("rain forecast")
            else:
                res, again = asyncio.run(twice(AsyncResolver(**kwargs)))
                swallowed = None
        finally:
            hole.close()
        assert hole.swallowed >= 1, drive
        assert res.stats.hedges >= 1 and res.stats.timeouts == 0 and res.stats.timeout_retries == 0, (drive, res.stats)
        assert res.tools and res.tools[0].zone == "hko.weather.tools.", (drive, res.errors)
        assert not res.errors, (drive, res.errors)
        assert again.tools and again.stats.hedges == 0 and again.stats.timeouts == 0, (drive, again.stats)
        assert swallowed in (None, hole.swallowed), drive  # the silent server not asked again


def test_a_query_lost_once_is_asked_again_and_the_resolution_succeeds(demo_tree):
    """The root's only server loses the first query and its resends (issue 42, item 10): the resolver asks it once more
    instead of failing the resolution after one timeout (or, when it was the question for the published
    walk, going by the built-in settings); sync and async alike."""
    for drive, published in (("sync", False), ("async", False), ("sync", True)):  # True: the lost one is its query
        relay = _DroppingRelay(demo_tree.root())
        try:
            kwargs = dict(root=relay.address, timeout=1.0, cache=False, published_walk=published)
            if drive == "sync":
                with Resolver(**kwargs) as r:
                    res = r.resolve("historical weather Hong Kong")
            else:
                res = asyncio.run(AsyncResolver(**kwargs).resolve("historical weather Hong Kong"))
        finally:
            relay.close()
        assert relay.dropped >= 1 and relay.relayed >= 1, drive
        assert res.stats.retransmits == relay.dropped - 1, drive  # resent on the same socket, all lost
        assert res.stats.timeouts == 1 and res.stats.timeout_retries == 1, drive
        assert res.tools and res.tools[0].zone == "hko.weather.tools.", (drive, res.errors)
        assert not any("no root name server answered" in e for e in res.errors), res.errors


def test_a_hedged_query_waits_for_the_other_server_when_the_first_refuses(tmp_path):
    """Once hedged, a refusal (ICMP port unreachable) from one of the two servers leaves the exchange
    waiting for the other, in the async transport as in the sync driver: the first server reads the
    query and its first resend and then goes away (its port refuses the next resend); the zone's other
    server, asked at the first resend, answers after that refusal."""
    from resolver_client.transport import audp

    first = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    first.bind(("127.0.0.1", 0))
    other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    other.bind(("127.0.0.1", 0))
    wire = dns.message.make_query("tools.", "SOA").to_wire()
    gone, answered = threading.Event(), []

    def first_server():
        first.settimeout(WAIT_TIMEOUT)
        for _ in range(2):  # the query, and its resend (when the other server is asked too)
            first.recvfrom(4096)
        first.close()
        gone.set()

    def other_server():
        other.settimeout(WAIT_TIMEOUT)
        data, client = other.recvfrom(4096)
        gone.wait(WAIT_TIMEOUT)
        time.sleep(0.6)  # past the first server's next resend (at 0.3 s), refused
        reply = dns.message.make_response(dns.message.from_wire(data)).to_wire()
        other.sendto(reply, client)
        answered.append(reply)

    threads = [threading.Thread(target=first_server), threading.Thread(target=other_server)]
    for t in threads:
        t.start()
    sent: list = []
    try:
        reply = asyncio.run(audp(wire, *first.getsockname(), timeout=WAIT_TIMEOUT, resend_after=(0.1, 0.3, 0.7),
                                 sent=sent, hedge=other.getsockname()))
    finally:
        for t in threads:
            t.join(WAIT_TIMEOUT)
        other.close()
    assert answered and reply == answered[0]  # the other server's reply, not the first's refusal
    assert len(sent) >= 4  # the query, the resend with its hedge, and the resend that was refused
