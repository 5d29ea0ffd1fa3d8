"""Strict request parsing, truncation and cutting to one message, on bytes, without sockets."""

import struct

import dns.exception
import dns.flags
import dns.message
import pytest
from dnslib import EDNS0, NS, QTYPE, RCODE, RR, TXT, A, DNSRecord

from tooldns.serving.index import ZoneIndex
from tooldns.serving.resolver import StaticSource, ZoneResolver
from tooldns.serving.server import DNSServer
from tooldns.serving.wire import MAX_MESSAGE, MalformedRequest, pack_reply, parse_options, parse_request
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


def _referral_to(children: int) -> DNSRecord:
    """A referral to *children* zones, each with its name server's glue, as a root without an intent
    would send it: far over what one message holds."""
    q = DNSRecord.question("_any._tcp._tools.", "SRV")
    q.add_ar(EDNS0(udp_len=1232))
    reply = q.reply()
    for i in range(children):
        reply.add_auth(RR(f"child{i}.tools.", QTYPE.NS, rdata=NS(f"ns1.child{i}.tools."), ttl=3600))
        reply.add_ar(RR(f"ns1.child{i}.tools.", QTYPE.A, rdata=A(f"127.0.{i // 250}.{i % 250 + 1}"), ttl=3600))
    reply.add_ar(EDNS0(udp_len=1232))
    return reply


@pytest.mark.slow
def test_a_reply_longer_than_a_message_keeps_over_tcp_what_fits():
    """Over UDP a reply too long is sent empty with TC (the client retries over TCP); over TCP,
    where nothing is retried, its first records that fit 65,535 octets, each NS with its glue, TC
    set and an EDE text saying how many of how many."""
    reply = _referral_to(5000)
    assert len(pack_reply(reply, None)) > 3 * MAX_MESSAGE
    cut = pack_reply(reply, MAX_MESSAGE, tcp=True)
    message = dns.message.from_wire(cut)  # every compression pointer right (dnspython checks them)
    kept = [str(rr.name) for rr in message.authority]
    assert len(cut) <= MAX_MESSAGE and message.flags & dns.flags.TC
    assert 1000 < len(kept) < 5000 and kept == [f"child{i}.tools." for i in range(len(kept))]
    assert [str(rr.name) for rr in message.additional] == [f"ns1.{name}" for name in kept]
    assert message.options[0].text == (f"{len(kept)} of 5000 records fit a 65,535-octet message; ask with an "
                                       f"intent to have them ranked")
    assert len(pack_reply(_referral_to(5000), MAX_MESSAGE + 1 - 400, tcp=True)) <= MAX_MESSAGE - 399  # any bound
    udp = dns.message.from_wire(pack_reply(reply, 1232))
    assert udp.flags & dns.flags.TC and not udp.authority and not udp.additional


def test_names_past_the_reach_of_a_pointer_are_written_whole():
    """dnslib also points at names written past offset 16,383, which 14 bits cannot name; the
    replies this server packs never do (dnspython refuses such a message, or reads wrong names)."""
    reply = _referral_to(1000)  # its NS records end past 16 kB; their glue names names written there
    wire = pack_reply(reply, None)
    glue = [f"ns1.child{i}.tools." for i in range(1000)]
    assert [str(rr.name) for rr in dns.message.from_wire(wire).additional] == glue
    try:  # dnslib's own packing of the same reply: why pack_message exists
        wrong = [str(rr.name) for rr in dns.message.from_wire(bytes(reply.pack())).additional]
    except dns.exception.DNSException:
        wrong = None
    assert wrong != glue


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
