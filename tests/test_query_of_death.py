"""Names beyond RFC 1035's limits cannot be packed back into a reply: they get FORMERR, never silence.

A label over 63 octets or a name over 255 used to make the reply (and its SERVFAIL fallback)
unpackable: no answer over UDP, and over TCP the connection closed with the queries behind it.
"""

from __future__ import annotations

import re
import socket
import struct

import dns.edns
import dns.flags
import dns.message
import dns.query
import dns.rcode

import pytest

from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent
from tooldns.serving.resolver import ZoneResolver
from tooldns.serving.server import DNSServer
from tooldns.serving.store import ZoneStore
from tooldns.serving.tree import TreeThread

from conftest import REPLY_TIMEOUT, ZONES, copy_tree, free_port, fresh_subnet


@pytest.fixture(scope="module")
def server_for_zone():
    """The root zone's server, called as bytes in, bytes out (no sockets)."""
    return DNSServer(ZoneResolver(ZoneStore(ZONES / "tools.yaml")), cache_size=0)


def raw_query(labels: list[bytes], qid: int = 0x1234, edns: bool = True) -> bytes:
    """A query built by hand: dnslib and dnspython refuse to build such names."""
    name = b"".join(bytes([len(label)]) + label for label in labels) + b"\0"
    opt = b"\0" + struct.pack("!HHIH", 41, 1232, 0, 0) if edns else b""
    return struct.pack("!HHHHHH", qid, 0, 1, 0, 0, 1 if edns else 0) + name + struct.pack("!HH", 33, 1) + opt


LONG_LABEL = [b"a" * 64, b"tools"]
LONG_NAME = [b"b" * 63] * 4 + [b"tools"]


def test_bad_names_get_formerr_with_an_ede_text_over_udp(demo_tree):
    address, port = demo_tree.root()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(REPLY_TIMEOUT)
        for labels, why in ((LONG_LABEL, "64 octets"), (LONG_NAME, "octets; at most 255")):
            sock.sendto(raw_query(labels), (address, port))
            reply = dns.message.from_wire(sock.recv(4096))
            assert reply.id == 0x1234 and reply.rcode() == dns.rcode.FORMERR and not reply.question
            assert any(isinstance(o, dns.edns.EDEOption) and why in o.text for o in reply.options)


def test_a_bad_name_does_not_cost_the_queries_pipelined_behind_it(demo_tree):
    address, port = demo_tree.root()
    good = dns.message.make_query("tools.", "SOA", flags=0)
    good.id = 7
    with socket.create_connection((address, port), timeout=REPLY_TIMEOUT) as sock:
        for wire in (raw_query(LONG_LABEL, qid=5, edns=False), good.to_wire()):
            sock.sendall(struct.pack("!H", len(wire)) + wire)
        replies = []
        for _ in range(2):
            length = struct.unpack("!H", sock.recv(2, socket.MSG_WAITALL))[0]
            replies.append(dns.message.from_wire(sock.recv(length, socket.MSG_WAITALL)))
    assert [r.id for r in replies] == [5, 7]
    assert replies[0].rcode() == dns.rcode.FORMERR and replies[1].rcode() == dns.rcode.NOERROR
    assert replies[1].answer


def test_names_are_read_with_bounded_work(server_for_zone):
    """A name of more labels than 255 octets can hold is refused with a text saying so (its OPT
    record is read: a name is read to its end, within 512 labels and pointers); a pointer that does
    not point backwards, or a name longer than that bound, is refused as soon as it is seen."""
    header = struct.pack("!HHHHHH", 0x4246, 0, 1, 0, 0, 1)
    opt = b"\x00" + struct.pack("!HHIH", 41, 1232, 0, 0)
    many_labels = header + b"\x01x" * 200 + b"\x00" + struct.pack("!HH", 33, 1) + opt
    reply = dns.message.from_wire(server_for_zone.handle(many_labels, udp=True))
    assert reply.id == 0x4246 and reply.rcode() == dns.rcode.FORMERR and not reply.question
    assert "401 octets; at most 255" in reply.options[0].text
    endless = header + b"\x01x" * 600 + b"\x00" + struct.pack("!HH", 33, 1) + opt
    forward = header + b"\x01x\xc0\x20" + struct.pack("!HH", 33, 1) + b"\x00" * 20
    for wire in (endless, forward):
        reply = dns.message.from_wire(server_for_zone.handle(wire, udp=True))
        assert reply.id == 0x4246 and reply.rcode() == dns.rcode.FORMERR


def test_several_questions_get_a_small_formerr_without_them(server_for_zone):
    question = b"\x07weather\x05tools\x00" + struct.pack("!HH", 33, 1)
    many = struct.pack("!HHHHHH", 0x55, 0, 60, 0, 0, 0) + question * 60
    wire = server_for_zone.handle(many, udp=True)
    reply = dns.message.from_wire(wire)
    assert reply.rcode() == dns.rcode.FORMERR and not reply.question and len(wire) <= 512


def test_a_query_with_many_records_is_formerr(server_for_zone):
    rr = b"\x00" + struct.pack("!HHIH", 16, 1, 0, 1) + b"\x00"  # an empty TXT at the root
    stuffed = struct.pack("!HHHHHH", 0x56, 0, 1, 0, 0, 50) + b"\x05tools\x00" + struct.pack("!HH", 6, 1) + rr * 50
    reply = dns.message.from_wire(server_for_zone.handle(stuffed, udp=True))
    assert reply.rcode() == dns.rcode.FORMERR


def _ask(address: str, port: int, labels: list[bytes], tcp: bool = False, qtype: int = 1) -> dns.message.Message:
    """A query for *labels* (A by default) over UDP or TCP; the reply as dnspython reads it."""
    wire = raw_query(labels)
    wire = wire[:-11 - 4] + struct.pack("!HH", qtype, 1) + wire[-11:]
    if tcp:
        with socket.create_connection((address, port), timeout=REPLY_TIMEOUT) as sock:
            sock.sendall(struct.pack("!H", len(wire)) + wire)
            size = struct.unpack("!H", sock.recv(2, socket.MSG_WAITALL))[0]
            return dns.message.from_wire(sock.recv(size, socket.MSG_WAITALL))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(REPLY_TIMEOUT)
        sock.sendto(wire, (address, port))
        return dns.message.from_wire(sock.recv(4096))


def _ede(reply: dns.message.Message) -> str:
    return " ".join(o.text or "" for o in reply.options if isinstance(o, dns.edns.EDEOption))


#: (zone asked, the name's labels, rcode, the owner of the reply's first authority record, text of its EDE)
ODD_NAMES = [
    ("tools.", [b"weather.tools"], dns.rcode.REFUSED, None, "label 'weather\\.tools' holds a dot"),
    ("weather.tools.", [b"ns1.weather", b"tools"], dns.rcode.REFUSED, None, "label 'ns1\\.weather' holds a dot"),
    ("weather.tools.", [b"a.b", b"weather", b"tools"], dns.rcode.NXDOMAIN, "weather.tools.", "holds a dot"),
    ("tools.", [b"\xffx", b"tools"], dns.rcode.NXDOMAIN, "tools.", "label '\\255x' holds octets outside ASCII"),
    ("tools.", [b"a.b", b"history", b"weather", b"tools"], dns.rcode.NOERROR, "weather.tools.", ""),  # a child's
    ("tools.", [b"a\x00b", b"weather", b"tools"], dns.rcode.NOERROR, "weather.tools.", ""),
]


@pytest.mark.parametrize("tcp", [False, True])
def test_a_label_with_a_dot_or_octets_outside_ascii_is_no_other_name(demo_tree, tcp):
    """A label holding a dot (``weather\\.tools.``: one label) was joined into another name and answered
    for it; one with octets outside ASCII was refused inside the zone. Each is now what it is: a name
    no zone holds, refused outside the zone, denied inside it, referred below a child, the EDE text
    naming the label."""
    port = demo_tree.tree.port
    for zone, labels, rcode, owner, ede in ODD_NAMES:
        reply = _ask(demo_tree.tree.addresses[zone][0], port, labels, tcp)
        assert reply.rcode() == rcode and not reply.answer, (zone, labels)
        assert (reply.authority[0].name.to_text() if reply.authority else None) == owner, (zone, labels)
        assert ede in _ede(reply), (zone, labels, _ede(reply))
    # and the server answers on
    assert _ask(demo_tree.tree.addresses["tools."][0], port, [b"tools"], tcp, qtype=6).answer


@pytest.mark.integration
def test_odd_labels_on_one_address_go_to_the_zone_they_lie_in(tmp_path):
    """The same names asked of one server for every zone (tooldns serve --listen): each goes to the zone
    it lies in, which answers as its own server does."""
    zdir = copy_tree(ZONES, tmp_path / "zones", fresh_subnet())
    for path in zdir.glob("*.yaml"):
        path.write_text(re.sub(r"address: \S+", "address: 127.0.0.1", path.read_text(encoding="utf-8")), encoding="utf-8")
    tree = TreeThread(zdir, free_port("127.0.0.1"), watch_interval=0).start()
    try:
        for labels, rcode, owner in [([b"weather.tools"], dns.rcode.REFUSED, None),
                                     ([b"ns1.weather", b"tools"], dns.rcode.NXDOMAIN, "tools."),
                                     ([b"a.b", b"weather", b"tools"], dns.rcode.NXDOMAIN, "weather.tools."),
                                     ([b"\xffx", b"tools"], dns.rcode.NXDOMAIN, "tools."),
                                     ([b"a.b", b"history", b"weather", b"tools"], dns.rcode.NXDOMAIN,
                                      "history.weather.tools."),
                                     ([b"a\x00b", b"weather", b"tools"], dns.rcode.NXDOMAIN, "weather.tools.")]:
            reply = _ask("127.0.0.1", tree.tree.port, labels)
            assert reply.rcode() == rcode and "label '" in _ede(reply), (labels, _ede(reply))
            assert (reply.authority[0].name.to_text() if reply.authority else None) == owner, labels
    finally:
        tree.stop()


@pytest.mark.integration
def test_a_leaf_too_big_for_one_message_answers_over_tcp_what_fits(tmp_path):
    """A leaf of 3,000 tools asked for all of them (no intent, as ``dig`` asks) over TCP: the first
    records that fit 65,535 octets, TC set and an EDE text saying how many, instead of an empty
    truncated reply a TCP client can do nothing with; asked with an intent, the ranked few, whole."""
    zonedir = copy_tree(ZONES, tmp_path / "zones", fresh_subnet())
    leaf = zonedir / "history.weather.tools.yaml"
    text = leaf.read_text(encoding="utf-8")
    leaf.write_text(text + "".join(f"- label: archive-{i}\n  name: Archive {i}\n  service: http\n"
                                   f"  target: h{i}.example.org.\n  port: 443\n"
                                   f"  description: historical weather archive number {i}\n" for i in range(3000)),
                    encoding="utf-8")
    assert text.rstrip().splitlines()[-1].startswith("  ")  # the tools list ends the file
    address = re.search(r"address: (127\.\d+\.\d+\.\d+)", leaf.read_text(encoding="utf-8")).group(1)
    tree = TreeThread(zonedir, free_port(address), watch_interval=0).start()
    try:
        query = dns.message.make_query("_http._tcp.history.weather.tools.", "SRV", use_edns=0)
        query.flags = 0
        reply = dns.query.tcp(query, address, port=tree.tree.port, timeout=REPLY_TIMEOUT)
        assert reply.rcode() == dns.rcode.NOERROR and reply.flags & dns.flags.TC
        kept = sum(len(rrset) for rrset in reply.answer)
        assert 500 < kept < 3000 and len(reply.to_wire()) <= 65535
        assert reply.options[0].text.startswith(f"{kept} of ")
        udp = dns.query.udp(query, address, port=tree.tree.port, timeout=REPLY_TIMEOUT)
        assert udp.flags & dns.flags.TC and not udp.answer  # over UDP: retry over TCP, as before
        ranked = dns.message.make_query("_http._tcp.history.weather.tools.", "SRV", use_edns=0, options=[
            dns.edns.GenericOption(INTENT_OPTION_CODE, encode_intent("historical weather archive", 5))])
        ranked.flags = 0
        few = dns.query.tcp(ranked, address, port=tree.tree.port, timeout=REPLY_TIMEOUT)
        assert not few.flags & dns.flags.TC and 0 < sum(len(rrset) for rrset in few.answer) <= 5
    finally:
        tree.stop()
