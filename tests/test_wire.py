"""Strict request parsing and truncation, on bytes, without sockets."""

import struct

import pytest
from dnslib import EDNS0, QTYPE, RCODE, RR, TXT, DNSRecord

from tooldns.serving.index import ZoneIndex
from tooldns.serving.resolver import StaticSource, ZoneResolver
from tooldns.serving.server import DNSServer
from tooldns.serving.wire import MalformedRequest, pack_reply, parse_options, parse_request
from tooldns.zone.zonefile import load_zone

from conftest import ZONES


def query_with_opt_rdata(rdata: bytes) -> bytes:
    q = DNSRecord.question("_any._tcp._weather.tools.", "SRV")
    wire = bytes(q.pack())
    wire = wire[:10] + struct.pack("!H", 1) + wire[12:]  # ARCOUNT = 1
    return wire + b"\x00" + struct.pack("!HHIH", QTYPE.OPT, 1232, 0, len(rdata)) + rdata


def test_empty_last_option_is_seen():
    # dnslib's own parser drops a zero-length option at the end of the list
    req = parse_request(query_with_opt_rdata(struct.pack("!HH", 65301, 0)))
    assert req.options(65301) == [b""]


def test_stray_option_bytes_are_an_error():
    req = parse_request(query_with_opt_rdata(struct.pack("!HH", 10, 0) + b"\x01\x02"))
    assert "stray bytes" in req.opt_error
    with pytest.raises(ValueError, match="only 1 remain"):
        parse_options(struct.pack("!HH", 65301, 5) + b"x")


def test_trailing_garbage_and_short_messages():
    with pytest.raises(MalformedRequest, match="shorter than a DNS header"):
        parse_request(b"\x00\x01")
    good = bytes(DNSRecord.question("weather.tools.").pack())
    with pytest.raises(MalformedRequest, match="after the last record") as info:
        parse_request(good + b"junk")
    assert info.value.header is not None


def test_truncation_keeps_question_and_opt():
    q = DNSRecord.question("big.weather.tools.", "TXT")
    q.add_ar(EDNS0(udp_len=512))
    reply = q.reply()
    for i in range(10):
        reply.add_answer(RR("big.weather.tools.", QTYPE.TXT, rdata=TXT("x" * 200)))
    reply.add_ar(EDNS0(udp_len=1232))
    wire = pack_reply(reply, 512)
    t = DNSRecord.parse(wire)
    assert t.header.tc == 1 and len(wire) <= 512
    assert str(t.q.qname) == "big.weather.tools." and not t.rr
    assert [rr.rtype for rr in t.ar] == [QTYPE.OPT]
    assert pack_reply(reply, None) == bytes(reply.pack())


@pytest.fixture(scope="module")
def server():
    return DNSServer(ZoneResolver(StaticSource(ZoneIndex(load_zone(ZONES / "weather.tools.yaml")))), cache_size=0)


def test_server_handle_formerr_and_drops(server):
    # readable header, unreadable rest: FORMERR with the same ID
    wire = server.handle(b"\xab\xcd\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\xff\xff", udp=True)
    r = DNSRecord.parse(wire)
    assert r.header.id == 0xABCD and r.header.rcode == RCODE.FORMERR
    assert server.handle(b"\x01", udp=True) is None  # not even a header: dropped
    resp = DNSRecord.question("weather.tools.").reply()
    assert server.handle(bytes(resp.pack()), udp=True) is None  # a response: dropped
    # OPT with stray bytes: FORMERR with an EDE text
    r = DNSRecord.parse(server.handle(query_with_opt_rdata(b"\x00\x0a\x00"), udp=True))
    assert r.header.rcode == RCODE.FORMERR


def test_server_handle_empty_intent_option_formerr(server):
    r = DNSRecord.parse(server.handle(query_with_opt_rdata(struct.pack("!HH", 65301, 0)), udp=True))
    assert r.header.rcode == RCODE.FORMERR
    ede = [o for o in r.ar[0].rdata if o.code == 15][0]
    assert b"header alone" in ede.data


def test_server_truncates_to_advertised_size(server):
    q = DNSRecord.question("_any._tcp._weather.tools.", "SRV")  # no EDNS: 512 bytes at most
    wire = server.handle(bytes(q.pack()), udp=True)
    assert len(wire) <= 512
    full = server.handle(bytes(q.pack()), udp=False)
    assert DNSRecord.parse(wire).header.tc == (len(full) > 512)
    assert DNSRecord.parse(full).header.tc == 0
