"""Names beyond RFC 1035's limits cannot be packed back into a reply: they get FORMERR, never silence.

A label over 63 octets or a name over 255 used to make the reply (and its SERVFAIL fallback)
unpackable: no answer over UDP, and over TCP the connection closed with the queries behind it.
"""

from __future__ import annotations

import socket
import struct

import dns.edns
import dns.message
import dns.rcode

from conftest import REPLY_TIMEOUT


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
