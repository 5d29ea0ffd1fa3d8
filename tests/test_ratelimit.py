"""Response rate limiting: the pure limiter with an injected clock, the zone-file setting, and real UDP on loopback.

Loopback clients bind to addresses of their own: 127.0.0.1 and 127.1.0.1 are in different /24
prefixes, so one can be limited while the other is not.
"""

from __future__ import annotations

import signal
import socket
import struct
import subprocess
import sys

import pytest
import yaml
from dnslib import EDNS0, NS, QTYPE, RCODE, RR, SRV, DNSRecord, EDNSOption

from tooldns.exceptions import ZoneFileError
from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent
from tooldns.serving.index import ZoneIndex
from tooldns.serving.ratelimit import DROP, ERROR, NXDOMAIN, RESPONSE, SEND, SLIP, RateLimiter, kind_of, slip_reply
from tooldns.serving.resolver import StaticSource, ZoneResolver
from tooldns.serving.server import DNSServer
from tooldns.zone.model import RateLimit, Settings
from tooldns.zone.zonefile import dump_zone, load_zone, parse_zone

from conftest import REPLY_TIMEOUT, ROOT, WAIT_TIMEOUT, ZONES, copy_tree, fresh_subnet, start_tree, wait_until

LIMITED = "127.0.0.1"  # the client that floods
OTHER = "127.1.0.1"  # another /24


# -- the pure limiter --

def verdicts(limiter: RateLimiter, n: int, now: float, host: str = "192.0.2.1", kind: int = RESPONSE) -> list[str]:
    return [limiter.check(host, kind, now) for _ in range(n)]


def test_a_burst_of_one_seconds_credit_goes_out_then_every_other_reply_slips():
    limiter = RateLimiter(RateLimit(responses_per_second=10, window=15, slip=2))
    assert verdicts(limiter, 10, now=0.0) == [SEND] * 10
    assert verdicts(limiter, 6, now=0.0) == [DROP, SLIP] * 3


@pytest.mark.parametrize("slip, expected", [(0, [DROP] * 4), (1, [SLIP] * 4), (3, [DROP, DROP, SLIP, DROP])])
def test_slip_setting(slip, expected):
    limiter = RateLimiter(RateLimit(responses_per_second=1, slip=slip))
    assert verdicts(limiter, 1, now=0.0) == [SEND]
    assert verdicts(limiter, 4, now=0.0) == expected


def test_credit_comes_back_at_the_rate():
    limiter = RateLimiter(RateLimit(responses_per_second=10, slip=0))
    verdicts(limiter, 10, now=100.0)
    assert verdicts(limiter, 1, now=100.0) == [DROP]  # one credit of debt
    assert verdicts(limiter, 5, now=100.65) == [SEND] * 5  # 6.5 credits earned, 1 paid back
    assert verdicts(limiter, 1, now=100.65) == [DROP]
    assert verdicts(limiter, 10, now=1000.0) == [SEND] * 10  # credit never exceeds one second's worth
    assert verdicts(limiter, 1, now=1000.0) == [DROP]


def test_a_flood_is_answered_again_within_the_window_after_it_stops():
    limiter = RateLimiter(RateLimit(responses_per_second=10, window=4, slip=0))
    for tick in range(100):  # 1000 queries a second for 10 s: the debt stops at 4 s of credit
        verdicts(limiter, 100, now=tick / 10)
    stopped = 9.9
    assert verdicts(limiter, 1, now=stopped + 3.5) == [DROP]
    assert verdicts(limiter, 1, now=stopped + 4.5) == [SEND]  # 4 s of debt, and a little more for the query at 3.5 s


def test_accounts_are_per_prefix():
    limiter = RateLimiter(RateLimit(responses_per_second=1, slip=0))
    assert verdicts(limiter, 2, now=0.0, host="192.0.2.1") == [SEND, DROP]
    assert verdicts(limiter, 1, now=0.0, host="192.0.2.254") == [DROP]  # the same /24
    assert verdicts(limiter, 1, now=0.0, host="::ffff:192.0.2.9") == [DROP]  # IPv4-mapped: IPv4
    assert verdicts(limiter, 1, now=0.0, host="192.0.3.1") == [SEND]
    assert verdicts(limiter, 2, now=0.0, host="2001:db8:0:1::1") == [SEND, DROP]
    assert verdicts(limiter, 1, now=0.0, host="2001:db8:0:ff::2%eth0") == [DROP]  # the same /56
    assert verdicts(limiter, 1, now=0.0, host="2001:db8:0:100::1") == [SEND]
    host24 = RateLimiter(RateLimit(responses_per_second=1, ipv4_prefix_length=32, slip=0))
    assert verdicts(host24, 2, now=0.0, host="192.0.2.1") == [SEND, DROP]
    assert verdicts(host24, 1, now=0.0, host="192.0.2.2") == [SEND]


def test_kinds_of_reply_have_their_own_accounts_and_rates():
    limiter = RateLimiter(RateLimit(responses_per_second=2, nxdomains_per_second=1, errors_per_second=0, slip=0))
    assert verdicts(limiter, 2, now=0.0, kind=NXDOMAIN) == [SEND, DROP]
    assert verdicts(limiter, 3, now=0.0, kind=RESPONSE) == [SEND, SEND, DROP]
    assert verdicts(limiter, 50, now=0.0, kind=ERROR) == [SEND] * 50  # 0: errors not limited
    header = bytes(12)
    assert kind_of(header[:3] + b"\x00" + header[4:]) == RESPONSE
    assert kind_of(header[:3] + b"\x03" + header[4:]) == NXDOMAIN
    assert [kind_of(header[:3] + bytes([rcode]) + header[4:]) for rcode in (1, 2, 4, 5)] == [ERROR] * 4


def test_exempt_networks_and_off():
    limiter = RateLimiter(RateLimit(responses_per_second=1, slip=0, exempt=("192.0.2.0/25", "2001:db8::/32")))
    assert verdicts(limiter, 5, now=0.0, host="192.0.2.100") == [SEND] * 5
    assert verdicts(limiter, 5, now=0.0, host="2001:db8:1::1") == [SEND] * 5
    assert verdicts(limiter, 2, now=0.0, host="192.0.2.200") == [SEND, DROP]
    off = RateLimiter(RateLimit(responses_per_second=0))
    assert not off.enabled and verdicts(off, 1000, now=0.0) == [SEND] * 1000 and len(off) == 0
    assert verdicts(limiter, 3, now=0.0, host="not an address") == [SEND] * 3


def test_the_table_is_bounded_and_forgets_the_least_recently_seen():
    limiter = RateLimiter(RateLimit(responses_per_second=1, slip=0), max_entries=100)
    verdicts(limiter, 2, now=0.0, host="10.0.0.1")  # in debt
    for i in range(1000):
        limiter.check(f"10.{i // 250 + 1}.{i % 250}.1", RESPONSE, 0.0)
        if i % 50 == 0:
            assert limiter.check("10.0.0.1", RESPONSE, 0.0) == DROP  # seen often: kept, still in debt
    assert len(limiter) == 100
    verdicts(limiter, 100, now=0.0, host="10.200.0.1")  # 100 more of one prefix: one account
    assert len(limiter) == 100
    for i in range(100):
        limiter.check(f"172.16.{i}.1", RESPONSE, 0.0)
    assert limiter.check("10.0.0.1", RESPONSE, 0.0) == SEND  # forgotten: a fresh account


# -- the slip: what goes out instead of a dropped reply --

def _big_reply(edns: bool) -> DNSRecord:
    q = DNSRecord.question("_any._tcp._tools.", "SRV")
    if edns:
        q.add_ar(EDNS0(udp_len=1232, opts=[EDNSOption(INTENT_OPTION_CODE, encode_intent("weather", 3))]))
    reply = q.reply()
    for i in range(3):
        reply.add_answer(RR(f"t{i}._http._tcp.weather.tools.", QTYPE.SRV, rdata=SRV(10, 100, 443, "api.example.")))
    reply.add_auth(RR("weather.tools.", QTYPE.NS, rdata=NS("ns1.weather.tools.")))
    if edns:
        reply.add_ar(RR(".", QTYPE.OPT, rclass=1232, ttl=0, rdata=[EDNSOption(65000, b"x" * 40)]))
    return reply


@pytest.mark.parametrize("edns", [True, False])
def test_a_slip_is_the_header_with_tc_the_question_and_a_bare_opt(edns):
    reply = _big_reply(edns)
    wire = bytes(reply.pack())
    slipped = slip_reply(wire)
    parsed = DNSRecord.parse(slipped)
    assert len(slipped) < len(wire) and parsed.header.id == reply.header.id and parsed.header.tc == 1
    assert parsed.header.qr == 1 and parsed.header.rcode == RCODE.NOERROR
    assert parsed.questions == reply.questions and not parsed.rr and not parsed.auth
    opts = [rr for rr in parsed.ar if rr.rtype == QTYPE.OPT]
    assert len(parsed.ar) == len(opts) == (1 if edns else 0)
    if edns:
        assert opts[0].rclass == 1232 and opts[0].rdata == []


# -- the server's policy: the zone's setting, the server's override --

def _server(settings_yaml: str = "", **kwargs) -> DNSServer:
    text = (ZONES / "weather.tools.yaml").read_text(encoding="utf-8") + settings_yaml
    return DNSServer(ZoneResolver(StaticSource(ZoneIndex(parse_zone(text)))), cache_size=0, **kwargs)


def _soa_query() -> bytes:
    return bytes(DNSRecord.question("weather.tools.", "SOA").pack())


def _outcomes(server: DNSServer, n: int, client=(LIMITED, 5353), now: float = 0.0) -> list[str]:
    out = []
    for _ in range(n):
        wire = server.limit(server.handle(_soa_query(), True, client), client, now=now)
        out.append("none" if wire is None else "tc" if wire[2] & 0x02 else "full")
    return out


def test_the_server_follows_the_zone_setting_and_its_own_override():
    zone_says_2 = "settings:\n  rate_limit: {responses_per_second: 2, slip: 1}\n"
    assert _outcomes(_server(zone_says_2), 4) == ["full", "full", "tc", "tc"]
    assert _outcomes(_server(zone_says_2, rate_limit=3), 5) == ["full"] * 3 + ["tc"] * 2
    assert _outcomes(_server(zone_says_2, rate_limit=0), 50) == ["full"] * 50
    assert _outcomes(_server(zone_says_2, rate_limit_exempt=["127.0.0.0/8"]), 50) == ["full"] * 50
    server = _server()  # the defaults: 100 a second, slip 2
    assert _outcomes(server, 100) == ["full"] * 100
    assert _outcomes(server, 4) == ["none", "tc", "none", "tc"]
    assert server.stats["rate_limited"] == 4 and server.stats["slipped"] == 2
    with pytest.raises(ValueError):
        DNSServer(None, rate_limit=-1)


def test_rate_limit_setting_in_zone_files_round_trips_and_is_checked():
    text = (ZONES / "weather.tools.yaml").read_text(encoding="utf-8")
    zone = parse_zone(text + "settings:\n  rate_limit:\n    responses_per_second: 20\n    window: 5\n"
                             "    exempt: [192.0.2.7, 2001:db8::/32]\n")
    assert zone.settings.rate_limit == RateLimit(responses_per_second=20, window=5,
                                                 exempt=("192.0.2.7/32", "2001:db8::/32"))
    dumped = dump_zone(zone)
    assert "rate_limit:" in dumped and "slip" not in dumped  # defaults are left out
    assert parse_zone(dumped) == zone
    assert Settings().rate_limit == RateLimit() and "rate_limit" not in dump_zone(load_zone(ZONES / "tools.yaml"))
    with pytest.raises(ZoneFileError) as err:
        parse_zone(text + "settings:\n  rate_limit: {window: 0, slip: 11, exempt: [nowhere], burst: 3}\n")
    message = str(err.value)
    for part in ("'window' must be a whole number from 1 to 3600", "'slip' must be a whole number from 0 to 10",
                 "exempt 'nowhere' is not an address", "unknown key 'burst' in rate_limit"):
        assert part in message, message


# -- over real UDP on loopback --

def _udp_client(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((address, 0))
    sock.settimeout(REPLY_TIMEOUT)
    return sock


def _referral_query(qid: int) -> bytes:
    q = DNSRecord.question("_any._tcp._tools.", "SRV")
    q.header.id = qid
    q.add_ar(EDNS0(udp_len=1232, opts=[EDNSOption(INTENT_OPTION_CODE, encode_intent("weather forecast", 3))]))
    return bytes(q.pack())


def _root_server(tree) -> DNSServer:
    return next(server for store, server in tree.tree.servers if store.index.origin == "tools.")


def _burst(tree, sock: socket.socket, n: int) -> list[DNSRecord]:
    """Send *n* queries at once; the replies that came, once the server has dealt with them all."""
    address, port = tree.root()
    server = _root_server(tree)
    before = dict(server.stats)
    for i in range(n):
        sock.sendto(_referral_query(i + 1), (address, port))
    replies: list[bytes] = []
    sock.setblocking(False)

    def all_in() -> bool:
        while True:
            try:
                replies.append(sock.recv(4096))
            except BlockingIOError:
                break
        dropped = (server.stats["rate_limited"] - before["rate_limited"]) - (server.stats["slipped"] - before["slipped"])
        return server.stats["udp"] - before["udp"] == n and len(replies) == n - dropped

    try:
        assert wait_until(all_in), (len(replies), server.stats)
    finally:
        sock.settimeout(REPLY_TIMEOUT)
    return [DNSRecord.parse(r) for r in replies]


def _tree_with_limit(tmp_path, per_second: int, **kwargs):
    """The demo tree, its root zone limited to *per_second* replies a second per /24 (window 2 s, slip 2)."""
    d = copy_tree(ZONES, tmp_path / "zones", fresh_subnet())
    root = yaml.safe_load((d / "tools.yaml").read_text(encoding="utf-8"))
    root["settings"] = {"rate_limit": {"responses_per_second": per_second, "window": 2}}
    (d / "tools.yaml").write_text(yaml.safe_dump(root, allow_unicode=True), encoding="utf-8")
    return start_tree(d, **kwargs)


@pytest.mark.integration
def test_a_burst_from_one_prefix_is_limited_and_nobody_else_is(tmp_path):
    tree = _tree_with_limit(tmp_path, 5)
    try:
        with _udp_client(LIMITED) as flood, _udp_client(OTHER) as other:
            replies = _burst(tree, flood, 60)
            full = [r for r in replies if not r.header.tc]
            slips = [r for r in replies if r.header.tc]
            assert 5 <= len(full) < 60 and slips and len(replies) < 60  # some answered, some slipped, some dropped
            assert all(not r.rr and not r.auth and r.header.rcode == RCODE.NOERROR for r in slips)
            assert all(r.auth and str(r.auth[0].rname) == "weather.tools." for r in full)
            stats = _root_server(tree).stats
            assert stats["rate_limited"] == 60 - len(full) and stats["slipped"] == len(slips)
            assert tree.counters()["tools."]["rate_limited"] == stats["rate_limited"]

            address, port = tree.root()
            other.sendto(_referral_query(4242), (address, port))  # another /24: untouched
            reply = DNSRecord.parse(other.recv(4096))
            assert reply.header.id == 4242 and not reply.header.tc and reply.auth

        # the limited client over TCP: never limited
        query = _referral_query(777)
        with socket.create_connection(tree.root(), timeout=REPLY_TIMEOUT, source_address=(LIMITED, 0)) as tcp:
            tcp.sendall(struct.pack("!H", len(query)) + query)
            length = struct.unpack("!H", tcp.recv(2, socket.MSG_WAITALL))[0]
            reply = DNSRecord.parse(tcp.recv(length, socket.MSG_WAITALL))
        assert reply.header.id == 777 and not reply.header.tc and reply.auth
    finally:
        tree.stop()


@pytest.mark.integration
def test_with_rate_limiting_off_nothing_is_limited(tmp_path):
    tree = _tree_with_limit(tmp_path, 5, rate_limit=0)
    try:
        with _udp_client(LIMITED) as flood:
            replies = _burst(tree, flood, 60)
        assert len(replies) == 60 and not any(r.header.tc for r in replies)
        assert _root_server(tree).stats["rate_limited"] == 0
    finally:
        tree.stop()


@pytest.mark.integration
def test_tooldns_serve_no_rate_limit(tmp_path):
    """The command line's switch, as load tests and the fuzzer use it: a zone limited to 1 a second is not."""
    d = copy_tree(ZONES, tmp_path / "zones", fresh_subnet())
    root = yaml.safe_load((d / "tools.yaml").read_text(encoding="utf-8"))
    root["settings"] = {"rate_limit": {"responses_per_second": 1}}
    (d / "tools.yaml").write_text(yaml.safe_dump(root, allow_unicode=True), encoding="utf-8")
    address = root["nameservers"][0]["address"]
    proc = subprocess.Popen([sys.executable, "-m", "tooldns.cli", "serve", str(d), "--port", "0", "--no-rate-limit"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        line = ""
        while "root zone on" not in line:
            line = proc.stdout.readline()
            assert line, "the server did not start"
        port = int(line.split("root zone on ", 1)[1].split(";")[0].rsplit(":", 1)[1])
        with _udp_client(LIMITED) as sock:
            for i in range(20):
                sock.sendto(_referral_query(i + 1), (address, port))
            replies = [DNSRecord.parse(sock.recv(4096)) for _ in range(20)]
        assert not any(r.header.tc for r in replies)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(WAIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
        proc.stdout.close()
