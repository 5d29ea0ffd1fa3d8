"""Many zones on one address: one server answers each query from the zone it is about, with the
replies each zone's own server gives; a tree needs two sockets per address, and says so when the
limit on open files cannot hold them."""

from __future__ import annotations

import json
import re
import resource
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from dnslib import EDNS0, DNSRecord, EDNSOption

from resolver_client import Resolver
from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent
from tooldns.serving.index import ZoneIndex
from tooldns.serving.multizone import MultiZoneResolver, question_name
from tooldns.serving.resolver import StaticSource, ZoneResolver
from tooldns.serving.server import DNSServer, Served
from tooldns.serving.store import ZoneStore
from tooldns.serving.tree import TreeThread
from tooldns.zone.zonefile import load_zone

from conftest import REPLY_TIMEOUT, ROOT, WAIT_TIMEOUT, ZONES, copy_tree, free_port, fresh_subnet
from test_golden import GOLDEN, _send

INTENTS = ["historical weather Hong Kong", "send a slack message", "typhoon warning", "bitcoin price",
           "find papers about transformers", "天气预报", "directions to the airport by train"]


def _resolver(origin: str) -> ZoneResolver:
    path = ZONES / ("tools.yaml" if origin == "tools." else f"{origin}yaml")
    return ZoneResolver(StaticSource(ZoneIndex(load_zone(path))))


def _query(name: str, qtype: str = "SRV", intent: str | None = None, qclass: str = "IN") -> bytes:
    q = DNSRecord.question(name, qtype, qclass)
    q.header.rd = 0
    q.add_ar(EDNS0(udp_len=1232, opts=[EDNSOption(INTENT_OPTION_CODE, encode_intent(intent, 3))] if intent else []))
    return bytes(q.pack())


@pytest.fixture(scope="module")
def group() -> MultiZoneResolver:
    """tools., weather.tools. and hko.weather.tools. on one server; history.weather.tools. elsewhere."""
    return MultiZoneResolver([_resolver(o) for o in ("hko.weather.tools.", "tools.", "weather.tools.")])


@pytest.mark.parametrize("name, origin", [
    ("_any._tcp._weather.tools.", "weather.tools."),  # a cursor is about the zone it searches
    ("_any._tcp._tools.", "tools."),
    ("_any._tcp._hko.weather.tools.", "hko.weather.tools."),
    ("_any._tcp._history.weather.tools.", "weather.tools."),  # not here: its parent refers to it
    ("_any._tcp.history.weather.tools.", "weather.tools."),
    ("_http._tcp.hko.weather.tools.", "hko.weather.tools."),  # expanded names and tools: about themselves
    ("hko-current._http._tcp.hko.weather.tools.", "hko.weather.tools."),
    ("ns1.weather.tools.", "weather.tools."),
    ("weather.tools.", "weather.tools."),
    ("_any._tcp._x.hko.weather.tools.", "hko.weather.tools."),
    ("example.com.", "tools."),  # no zone here: the topmost, which refuses
    (".", "tools."),
])
def test_each_name_goes_to_the_deepest_zone_it_is_about(group, name, origin):
    assert group.member_for(name).source.index.origin == origin


def test_group_answers_byte_for_byte_what_each_zone_server_answers(group):
    """Through DNSServer.handle (packet cache, fast path and full path): the same bytes as a server of
    the zone alone."""
    multi = DNSServer(group, "127.0.0.1", 0)
    cases = [("_any._tcp._weather.tools.", "SRV", "historical weather Hong Kong", "weather.tools."),
             ("_any._tcp._tools.", "SRV", "typhoon warning", "tools."),
             ("_any._tcp._hko.weather.tools.", "SRV", "typhoon warning", "hko.weather.tools."),
             ("_http._tcp.hko.weather.tools.", "SRV", "typhoon warning", "hko.weather.tools."),
             ("_any._tcp._history.weather.tools.", "SRV", "rain", "weather.tools."),
             ("_any._tcp._weather.tools.", "SRV", None, "weather.tools."),
             ("weather.tools.", "NS", None, "weather.tools."), ("tools.", "SOA", None, "tools."),
             ("hko-current._http._tcp.hko.weather.tools.", "TXT", None, "hko.weather.tools."),
             ("nope.weather.tools.", "A", None, "weather.tools."), ("example.com.", "A", None, "tools.")]
    for name, qtype, intent, origin in cases:
        alone = DNSServer(group.members[origin], "127.0.0.1", 0)
        data = _query(name, qtype, intent)
        for _ in range(2):  # the second from the packet cache
            assert multi.handle(data, True) == alone.handle(data, True), (name, intent)


def test_group_answers_stats_and_malformed_itself(group):
    reply = DNSRecord.parse(DNSServer(group, "127.0.0.1", 0).handle(_query("stats.tooldns.", "TXT", qclass="CH"), True))
    pairs = dict(s.decode().split("=", 1) for s in reply.rr[0].rdata.data)
    assert pairs["zone"] == "tools." and pairs["zones"] == "3" and int(pairs["queries"]) >= 1
    two = DNSRecord.question("tools.", "SOA")
    two.add_question(*DNSRecord.question("weather.tools.", "SOA").questions)
    assert DNSRecord.parse(DNSServer(group, "127.0.0.1", 0).handle(bytes(two.pack()), True)).header.rcode == 1  # FORMERR


def test_the_server_reads_the_group_through_its_contract(group):
    serving = group.serving
    assert isinstance(group, Served) and serving.cacheable and not serving.blocking and serving.refresh is None
    assert serving.rate_limit is group.top.source.index.zone.settings.rate_limit  # the topmost zone's


def test_question_name_reads_plain_names_only():
    assert question_name(_query("_Any._TCP._Weather.Tools.")) == "_any._tcp._weather.tools."
    assert question_name(b"\0" * 12 + b"\0\0\x01\0\x01") == "."
    assert question_name(b"\0" * 12 + b"\xc0\x0c") is None
    assert question_name(b"\0" * 12 + b"\x03a.b\0") is None
    assert question_name(b"\0" * 12 + b"\x05ab") is None


def test_a_reload_renews_the_group_and_empties_the_answer_cache(tmp_path):
    for name in ("tools.yaml", "weather.tools.yaml"):
        (tmp_path / name).write_text((ZONES / name).read_text(encoding="utf-8"), encoding="utf-8")
    stores = [ZoneStore(tmp_path / "tools.yaml"), ZoneStore(tmp_path / "weather.tools.yaml")]
    group = MultiZoneResolver([ZoneResolver(s) for s in stores])
    server = DNSServer(group, "127.0.0.1", 0)
    query = _query("_any._tcp._weather.tools.", intent="historical weather records")
    before = server.handle(query, True)
    assert server.handle(query, True) == before and server.stats["cache_hits"] == 1
    first = group.serving
    path = tmp_path / "weather.tools.yaml"
    path.write_text(path.read_text(encoding="utf-8").replace("label: history", "label: past"), encoding="utf-8")
    assert stores[1].check() == "reloaded"
    assert group.serving is not first
    after = server.handle(query, True)
    assert b"\x04past" in after and b"\x04past" not in before
    group.close()
    assert stores[1].listeners == []


@pytest.mark.integration
def test_one_socket_serves_every_shipped_zone_with_the_recorded_bytes():
    """The golden replies, every zone's queries sent to one address that serves all 25 zones. The one
    difference by design: a name below a child zone, which the parent's server alone refers to the
    child, is answered by the child itself when the same server hosts it (NXDOMAIN here)."""
    import dns.flags
    import dns.message
    import dns.rcode

    address = f"{fresh_subnet()}.1"
    with TreeThread(ZONES, free_port(address), listen=[address], rate_limit=0) as tree:
        assert list(tree.tree.sockets) == [address] and len(tree.tree.servers) == 25
        port = tree.tree.port
        mismatches, below = [], 0
        for case in json.loads(GOLDEN.read_text(encoding="utf-8")):
            reply = _send(address, port, bytes.fromhex(case["query"]), case["tcp"])
            if case["what"].endswith(" below a child"):  # _any._tcp._x.<child>. asked of the parent
                below += 1
                msg = dns.message.from_wire(reply)
                child = case["what"].split()[0].split("._x.", 1)[1]
                assert msg.rcode() == dns.rcode.NXDOMAIN and msg.flags & dns.flags.AA, case["what"]
                assert msg.authority[0].name.to_text() == child, case["what"]
            elif reply[2:].hex() != case["reply"]:
                mismatches.append(case["what"])
    assert below >= 5
    assert not mismatches, f"{len(mismatches)} replies differ, e.g. {mismatches[:5]}"


def _shared_addresses(dst: Path, subnet: str) -> Path:
    """The shipped tree with its 25 name-server addresses folded onto three (parents and children
    together and apart), glue and all."""
    copy_tree(ZONES, dst, "127.0.0")
    for f in dst.glob("*.yaml"):
        text = re.sub(r"127\.0\.0\.(\d+)", lambda m: f"{subnet}.{int(m.group(1)) % 3 + 1}", f.read_text(encoding="utf-8"))
        f.write_text(text, encoding="utf-8")
    return dst


def _found(tree, intent: str) -> tuple:
    with Resolver(root=tree.root(), timeout=REPLY_TIMEOUT, cache=False) as r:
        res = r.resolve(intent, k=3)
    return res.stats.queries, [(t.name, t.zone, t.rank, round(t.score or 0, 4), t.path) for t in res.tools]


@pytest.mark.integration
def test_zones_sharing_addresses_resolve_as_zones_on_their_own(tmp_path):
    shared_dir = _shared_addresses(tmp_path / "shared", subnet := fresh_subnet())
    alone_dir = copy_tree(ZONES, tmp_path / "alone", alone := fresh_subnet())
    with TreeThread(shared_dir, free_port(f"{subnet}.1"), rate_limit=0) as shared, \
            TreeThread(alone_dir, free_port(f"{alone}.1"), rate_limit=0) as reference:
        assert sorted(shared.tree.sockets) == [f"{subnet}.{n}" for n in (1, 2, 3)]
        assert shared.tree.sockets_needed() == 6 and reference.tree.sockets_needed() == 50
        # a client may hold the TCP connections it could across the zones' own servers (16 each), up to max_tcp
        for address, server in shared.tree.sockets.items():
            assert server.max_tcp_per_client == min(256, 16 * len(shared.tree.plan[address])) > 16
        assert {s.max_tcp_per_client for s in reference.tree.sockets.values()} == {16}
        for intent in INTENTS:
            queries, tools = _found(shared, intent)
            assert tools and (queries, tools) == _found(reference, intent), intent
        counters = shared.counters()
    assert set(counters) == {s.index.origin for s in shared.tree.stores}
    assert counters["tools."]["queries"] >= len(INTENTS)


# -- the descriptor budget, with `tooldns serve` under a low limit on open files --

def _flat_tree(dst: Path, n: int, address_of) -> Path:
    """A root zone tools. with *n* leaf children c0 ... (one tool each); address_of(i) is the address of
    child i's name server (i = -1: the root's)."""
    dst.mkdir(parents=True, exist_ok=True)
    children = []
    for i in range(n):
        ns = f"nameservers:\n- name: ns1.c{i}.tools.\n  address: {address_of(i)}\n"
        children.append(f"- label: c{i}\n  kind: functional\n  summary:\n    description: topic{i}\n"
                        + "".join(f"  {line}\n" for line in ns.splitlines()))
        (dst / f"c{i}.tools.yaml").write_text(
            f"origin: c{i}.tools.\nsoa:\n  contact: hostmaster@c{i}.tools\n  serial: 1\n{ns}"
            f"tools:\n- label: t{i}\n  name: Tool {i}\n  service: http\n  target: t{i}.example.\n  port: 443\n"
            f"  description: tool number {i} about topic{i}\n  endpoint: https://t{i}.example/\n", encoding="utf-8")
    (dst / "tools.yaml").write_text(
        f"origin: tools.\nsoa:\n  contact: hostmaster@tools\n  serial: 1\nnameservers:\n- name: ns1.tools.\n"
        f"  address: {address_of(-1)}\nchildren:\n" + "".join(children), encoding="utf-8")
    return dst


def _serve_limited(zonedir: Path, port: int, soft: int, hard: int) -> subprocess.Popen:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return subprocess.Popen([sys.executable, "-m", "tooldns.cli", "serve", str(zonedir), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, preexec_fn=limit)


def _answers(address: str, port: int, origin: str) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(REPLY_TIMEOUT)
        sock.sendto(_query(origin, "SOA"), (address, port))
        reply = DNSRecord.parse(sock.recv(4096))
    return reply.header.rcode == 0 and reply.header.aa and str(reply.rr[0].rname) == origin


def _wait_started(proc: subprocess.Popen) -> str:
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "Ctrl-C" in line:
            return "".join(lines)
    proc.wait(WAIT_TIMEOUT)
    raise AssertionError("tooldns serve did not start:\n" + "".join(lines) + proc.stderr.read())


@pytest.mark.integration
def test_a_hundred_zones_on_one_address_fit_where_one_address_each_cannot(tmp_path):
    one = fresh_subnet()
    shared = _flat_tree(tmp_path / "shared", 100, lambda i: f"{one}.1")
    port = free_port(f"{one}.1")
    proc = _serve_limited(shared, port, 100, 100)
    try:
        out = _wait_started(proc)
        assert "101 zones on 1 addresses" in out
        assert all(_answers(f"{one}.1", port, origin) for origin in ("tools.", "c0.tools.", "c99.tools."))
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(WAIT_TIMEOUT) == 0
    spread = _flat_tree(tmp_path / "spread", 100, lambda i: f"{one}.{i + 2}")
    proc = _serve_limited(spread, port, 100, 100)
    assert proc.wait(WAIT_TIMEOUT) == 3
    err = proc.stderr.read()
    assert "serving 101 addresses needs 266 open files (202 sockets" in err and "at most 100" in err
    assert "ulimit" in err and "Traceback" not in err


@pytest.mark.integration
def test_the_soft_limit_is_raised_when_the_hard_limit_allows(tmp_path):
    subnet = fresh_subnet()
    spread = _flat_tree(tmp_path / "spread", 100, lambda i: f"{subnet}.{i + 2}")
    port = free_port(f"{subnet}.1")
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 600:
        pytest.skip(f"the hard limit here ({hard}) is too low to raise to")
    proc = _serve_limited(spread, port, 100, hard)
    try:
        out = _wait_started(proc)
        assert "101 zones on 101 addresses" in out
        assert _answers(f"{subnet}.101", port, "c99.tools.")
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(WAIT_TIMEOUT) == 0
    assert "raised the limit on open files from 100" in proc.stderr.read()


@pytest.mark.integration
def test_a_tree_on_port_0_picks_another_port_when_one_of_its_addresses_has_it_taken(monkeypatch):
    """Port 0: the first server picks a free port and the others share it. When another address has
    that port taken already (here a socket bound there just before), the tree tries another port
    instead of failing, and answers on it."""
    from conftest import REPLY_TIMEOUT, ZONES

    real_start = DNSServer.start
    taken: list[socket.socket] = []

    async def start(self):
        if self.port != 0 and not taken:  # the second address: its port was picked by the first
            blocker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            blocker.bind((self.address, self.port))
            taken.append(blocker)
        return await real_start(self)

    monkeypatch.setattr(DNSServer, "start", start)
    try:
        with TreeThread(ZONES, 0, rate_limit=0) as tree:
            address, port = tree.root()
            assert taken and port != taken[0].getsockname()[1]
            with Resolver(root=(address, port), timeout=REPLY_TIMEOUT, cache=False) as r:
                assert r.resolve("historical weather Hong Kong", k=1).tools
    finally:
        for blocker in taken:
            blocker.close()
