"""Writing a walk's queries and reading its replies on dnspython's wire primitives.

``dns.message.from_wire`` assembles RRsets, hashing every rdata to merge duplicates, and on a
walk that costs more than the network and the servers together. A walk needs only the records
in order, so :func:`parse_reply` reads the header, question, records (rdata decoded by
dnspython's own rdata classes) and EDNS options with ``dns.wire.Parser``, strictly: trailing
bytes, bad lengths or bad names raise :class:`dns.exception.FormError`.

    >>> wire = make_query("_any._tcp._tools.", opt_record([dns.edns.GenericOption(65301, data)]))
    >>> reply = parse_reply(reply_bytes)
    >>> is_reply_to(wire, reply), [r.name for r in reply.authority]
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass, field

import dns.edns
import dns.exception
import dns.flags
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.wire

_ids = random.SystemRandom()
_IN = dns.rdataclass.IN
_SRV = dns.rdatatype.SRV
_OPT = dns.rdatatype.OPT


@dataclass
class Record:
    name: str  # lower-case, absolute text
    rdtype: int
    ttl: int
    rdata: dns.rdata.Rdata


@dataclass
class Reply:
    id: int
    flags: int
    rcode: int  # with the EDNS extended bits
    question: tuple[bytes, int, int] | None  # (lower-cased name wire, type, class)
    answer: list[Record] = field(default_factory=list)
    authority: list[Record] = field(default_factory=list)
    additional: list[Record] = field(default_factory=list)
    options: list[dns.edns.Option] = field(default_factory=list)
    edns: bool = False


def opt_record(options: list[dns.edns.Option], payload: int = 1232, dnssec: bool = False) -> bytes:
    """The OPT pseudo-record (EDNS version 0) carrying *options*, as wire bytes; *dnssec* sets DO."""
    data = b"".join(struct.pack("!HH", int(o.otype), len(w)) + w for o in options for w in [o.to_wire()])
    return b"\x00" + struct.pack("!HHIH", _OPT, payload, 0x8000 if dnssec else 0, len(data)) + data


def make_query(qname: str, opt: bytes, qtype: int = _SRV, msg_id: int | None = None) -> bytes:
    """An iterative query (RD=0) for *qname* with the OPT record *opt*."""
    name = dns.name.Name([label.encode("ascii") for label in qname.split(".")])
    msg_id = _ids.randrange(65536) if msg_id is None else msg_id
    return struct.pack("!HHHHHH", msg_id, 0, 1, 0, 0, 1) + name.to_wire() + struct.pack("!HH", qtype, _IN) + opt


def read_name(wire: bytes, pos: int) -> tuple[str, int]:
    """The owner name at *pos* as lower-cased absolute text, and the offset after it.

    Owner names are only compared, never re-encoded, so they skip dnspython's Name objects (the
    larger part of reading a reply). Compression pointers must point backwards (no loops).
    """
    labels, end, start = [], None, pos
    while True:
        if pos >= len(wire):
            raise dns.exception.FormError("name runs past the end of the message")
        n = wire[pos]
        if n == 0:
            pos += 1
            break
        if n & 0xC0 == 0xC0:
            if pos + 1 >= len(wire):
                raise dns.exception.FormError("truncated compression pointer")
            target = ((n & 0x3F) << 8) | wire[pos + 1]
            if target >= start:
                raise dns.exception.FormError("compression pointer does not point backwards")
            if end is None:
                end = pos + 2
            pos = start = target
            continue
        if n & 0xC0:
            raise dns.exception.FormError(f"unknown label type {n >> 6}")
        labels.append(wire[pos + 1:pos + 1 + n])
        pos += 1 + n
    text = b".".join(labels).decode("ascii", "backslashreplace").lower()
    return (text + "." if text else "."), (end if end is not None else pos)


def _question_key(parser: dns.wire.Parser) -> tuple[bytes, int, int]:
    name = parser.get_name(None, True)
    qtype, qclass = parser.get_struct("!HH")
    return name.canonicalize().to_wire(), qtype, qclass


def parse_reply(wire: bytes) -> Reply:
    """Read a reply; raise :class:`dns.exception.FormError` if it is malformed."""
    if len(wire) < 12:
        raise dns.exception.FormError(f"reply is {len(wire)} bytes, shorter than a DNS header")
    parser = dns.wire.Parser(wire)
    with dns.exception.ExceptionWrapper(dns.exception.FormError):
        msg_id, flags, qd, an, ns, ar = parser.get_struct("!HHHHHH")
        if qd > 1:
            raise dns.exception.FormError(f"reply has {qd} questions")
        question = _question_key(parser) if qd else None
        reply = Reply(msg_id, flags, flags & 0xF, question)
        for section, count in ((reply.answer, an), (reply.authority, ns), (reply.additional, ar)):
            for _ in range(count):
                name, after = read_name(wire, parser.current)
                parser.seek(after)
                rdtype, rdclass, ttl, rdlen = parser.get_struct("!HHIH")
                if rdtype == _OPT:
                    reply.edns = True
                    reply.rcode |= (ttl >> 24) << 4
                    with parser.restrict_to(rdlen):
                        while parser.remaining():
                            otype, olen = parser.get_struct("!HH")
                            with parser.restrict_to(olen):
                                reply.options.append(dns.edns.option_from_wire_parser(otype, parser))
                    continue
                with parser.restrict_to(rdlen):
                    rdata = dns.rdata.from_wire_parser(rdclass, rdtype, parser)
                section.append(Record(name, rdtype, ttl, rdata))
        if parser.remaining():
            raise dns.exception.FormError(f"{parser.remaining()} bytes after the last record")
    return reply


def is_reply_to(query: bytes, reply: Reply) -> bool:
    """True if *reply* answers *query*: same ID, QR set, same question (case-insensitive)."""
    if reply.id != struct.unpack_from("!H", query)[0] or not reply.flags & dns.flags.QR:
        return False
    parser = dns.wire.Parser(query)
    parser.seek(12)
    return reply.question == _question_key(parser)
