"""Writing a walk's queries and reading its replies, on dnspython's wire primitives where they pay.

``dns.message.from_wire`` assembles RRsets, hashing every rdata to merge duplicates, and on a
walk that costs more than the network and the servers together. A walk needs only the records
in order, so :func:`parse_reply` reads the header, question, records and EDNS options itself,
strictly: trailing bytes, bad lengths or bad names raise :class:`dns.exception.FormError`.

The records a walk reads (NS, CNAME, A, AAAA, TXT, SRV) are decoded here into plain values
(:attr:`Record.value`), and EDNS options are kept as their code and data (:class:`Option`):
building dnspython's immutable objects for them was most of reading a reply, and reading replies
44 % of a resolution's time on ToolRet's tree (docs/performance.md, "The client's reading of
replies"). The checks are dnspython's (a TXT record holds at least one string, every string and
name lies within its RDATA, names point backwards and are at most 255 octets, SRV and NS end where
their RDATA ends, addresses are 4 or 16 octets), and ``tests/test_fuzz_codecs.py`` holds them to
dnspython's reading of the same bytes. Every other type is decoded by dnspython as the record is
read; :attr:`Record.rdata` is dnspython's object for any record (made on first use for the types
above: DNSSEC validation needs it).

    >>> wire = make_query("_any._tcp._tools.", opt_record([dns.edns.GenericOption(65301, data)]))
    >>> reply = parse_reply(reply_bytes)
    >>> is_reply_to(wire, reply), [(r.name, r.value) for r in reply.authority]
"""

from __future__ import annotations

import random
import re
import struct
from dataclasses import dataclass, field
from typing import NamedTuple

import dns.edns
import dns.exception
import dns.flags
import dns.ipv6
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.wire

from tooldns.protocol.edns import split_options

_ids = random.SystemRandom()
_IN = dns.rdataclass.IN
_SRV = dns.rdatatype.SRV
_OPT = dns.rdatatype.OPT
_A, _AAAA, _TXT, _NS, _CNAME = (dns.rdatatype.A, dns.rdatatype.AAAA, dns.rdatatype.TXT, dns.rdatatype.NS,
                                dns.rdatatype.CNAME)
_HEADER = struct.Struct("!HHHHHH")
_RR_HEAD = struct.Struct("!HHIH")  # type, class, TTL, RDATA length
_QUESTION_TAIL = struct.Struct("!HH")
_SRV_HEAD = struct.Struct("!HHH")
#: the root label, the type and class of a question
_QUERY_TAIL = struct.Struct("!BHH")
_LENGTH = [bytes((n,)) for n in range(64)]
#: a label dnspython writes as it is, so that its text needs no escaping
_PLAIN_LABEL = re.compile(rb"[A-Za-z0-9_-]+")


class Srv(NamedTuple):
    """An SRV record's RDATA: its target as dnspython's text (case kept, absolute)."""

    priority: int
    weight: int
    port: int
    target: str


class Option(NamedTuple):
    """An EDNS option of a reply, its data undecoded: the walk reads ToolDNS's own options (meta, EDE)
    with their codecs (:mod:`tooldns.protocol`) and no other (dnspython's decoding of them was half of
    reading a reply)."""

    otype: int
    data: bytes


class Record:
    """One resource record of a reply, in the order it came."""

    __slots__ = ("name", "rdtype", "ttl", "value", "rdclass", "_wire", "_start", "_end", "_rdata")

    def __init__(self, name: str, rdtype: int, ttl: int, value: object, rdclass: int = _IN, wire: bytes = b"",
                 start: int = 0, end: int = 0, rdata: dns.rdata.Rdata | None = None) -> None:
        self.name = name  # lower-case, absolute text
        self.rdtype = rdtype
        self.ttl = ttl
        #: NS and CNAME: the target's text; A and AAAA: the address; TXT: its strings (a tuple of bytes);
        #: SRV: a :class:`Srv`; any other type: None (read :attr:`rdata`)
        self.value = value
        self.rdclass = rdclass
        self._wire, self._start, self._end, self._rdata = wire, start, end, rdata

    @property
    def rdata(self) -> dns.rdata.Rdata:
        """dnspython's rdata of this record, decoded from the reply's bytes on first use."""
        if self._rdata is None:
            self._rdata = _other(self._wire, self.rdclass, self.rdtype, self._start, self._end)
        return self._rdata

    def __repr__(self) -> str:
        return f"Record({self.name!r}, {dns.rdatatype.to_text(self.rdtype)}, {self.ttl}, {self.value!r})"


@dataclass
class Reply:
    id: int
    flags: int
    rcode: int  # with the EDNS extended bits
    question: tuple[bytes, int, int] | None  # (lower-cased name wire, type, class)
    answer: list[Record] = field(default_factory=list)
    authority: list[Record] = field(default_factory=list)
    additional: list[Record] = field(default_factory=list)
    options: list[Option] = field(default_factory=list)
    edns: bool = False


def opt_record(options: list[dns.edns.Option], payload: int = 1232, dnssec: bool = False) -> bytes:
    """The OPT pseudo-record (EDNS version 0) carrying *options*, as wire bytes; *dnssec* sets DO."""
    data = b"".join(struct.pack("!HH", int(o.otype), len(w)) + w for o in options for w in [o.to_wire()])
    return b"\x00" + struct.pack("!HHIH", _OPT, payload, 0x8000 if dnssec else 0, len(data)) + data


def _wire(labels: list[bytes]) -> bytes:
    """Labels of at most 63 octets as a name on the wire, uncompressed, without the root's label."""
    return b"".join(_LENGTH[len(label)] + label for label in labels)


def make_query(qname: str, opt: bytes, qtype: int = _SRV, msg_id: int | None = None) -> bytes:
    """An iterative query (RD=0) for *qname* with the OPT record *opt*."""
    labels = [label.encode("ascii") for label in qname.split(".")]
    # what dnspython checks: absolute, no empty label but the root's, labels of at most 63 octets,
    # names of at most 255; the names a walk asks for pass, and anything else gets dnspython's error
    if labels[-1] or not all(labels[:-1]) or max(map(len, labels)) > 63 or len(qname) + 1 > 255:
        dns.name.Name(labels).to_wire()
    name = _wire(labels[:-1])
    msg_id = _ids.randrange(65536) if msg_id is None else msg_id
    return _HEADER.pack(msg_id, 0, 1, 0, 0, 1) + name + _QUERY_TAIL.pack(0, qtype, _IN) + opt


def _labels(wire: bytes, pos: int, limit: int) -> tuple[list[bytes], int]:
    """The labels of the name at *pos* (without the root's) and the offset after it, as dnspython
    reads a name: labels within *limit*, compression pointers pointing backwards (no loops), at most
    255 octets on the wire."""
    labels, end, start, size = [], None, pos, 1
    while True:
        if pos >= limit:
            raise dns.exception.FormError("name runs past the end of the message")
        n = wire[pos]
        if n == 0:
            pos += 1
            break
        if n & 0xC0 == 0xC0:
            if pos + 1 >= limit:
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
        if pos + 1 + n > limit:
            raise dns.exception.FormError("name runs past the end of the message")
        size += 1 + n
        if size > 255:
            raise dns.exception.FormError("name is longer than 255 octets")
        labels.append(wire[pos + 1:pos + 1 + n])
        pos += 1 + n
    return labels, (end if end is not None else pos)


def read_name(wire: bytes, pos: int) -> tuple[str, int]:
    """The owner name at *pos* as lower-cased absolute text, and the offset after it.

    Owner names are only compared, never re-encoded, so they skip dnspython's Name objects (the
    larger part of reading a reply). Compression pointers must point backwards (no loops).
    """
    labels, after = _labels(wire, pos, len(wire))
    if not labels:  # the root: every reply's OPT record
        return ".", after
    joined = b".".join(labels)
    if joined.isascii() and b"\\" not in joined and joined.count(b".") == len(labels) - 1:
        return joined.decode("ascii").lower() + ".", after
    # a dot or a backslash inside a label, octets outside ASCII: escaped as dnspython writes them, so
    # that the text names the labels that came (a.b.tools. is not a\.b.tools.) and reads back to them
    return _name_text(labels).lower(), after


def _name_text(labels: list[bytes]) -> str:
    """A name in RDATA as dnspython's ``to_text()`` writes it (case kept, absolute)."""
    if all(map(_PLAIN_LABEL.fullmatch, labels)):
        return ".".join(label.decode("ascii") for label in labels) + "."
    return dns.name.Name([*labels, b""]).to_text()


def _rdata_name(wire: bytes, start: int, end: int) -> str:
    labels, after = _labels(wire, start, end)
    if after != end:
        raise dns.exception.FormError("bytes after the name in RDATA")
    return _name_text(labels)


def _strings(wire: bytes, start: int, end: int) -> tuple[bytes, ...]:
    strings, pos = [], start
    while pos < end:
        after = pos + 1 + wire[pos]
        if after > end:
            raise dns.exception.FormError("TXT string runs past its RDATA")
        strings.append(wire[pos + 1:after])
        pos = after
    if not strings:
        raise dns.exception.FormError("TXT record without strings")
    return tuple(strings)


def _value(rdtype: int, wire: bytes, start: int, end: int) -> object:
    """:attr:`Record.value` of the RDATA between *start* and *end*; raises FormError where dnspython would."""
    if rdtype == _TXT:
        return _strings(wire, start, end)
    if rdtype == _SRV:
        if end - start < 7:
            raise dns.exception.FormError("SRV RDATA too short")
        return Srv(*_SRV_HEAD.unpack_from(wire, start), _rdata_name(wire, start + 6, end))
    if rdtype == _A:
        if end - start != 4:
            raise dns.exception.FormError("A RDATA is not 4 octets")
        return "%d.%d.%d.%d" % tuple(wire[start:end])
    if rdtype == _AAAA:
        if end - start != 16:
            raise dns.exception.FormError("AAAA RDATA is not 16 octets")
        return dns.ipv6.inet_ntoa(wire[start:end])
    return _rdata_name(wire, start, end)  # NS, CNAME


#: the types decoded here: in class IN, and in any class (dnspython's SRV, A and AAAA are IN's alone; a
#: CH A record is another format)
_FAST = frozenset((_TXT, _SRV, _A, _AAAA, _NS, _CNAME))
_FAST_ANY_CLASS = frozenset((_TXT, _NS, _CNAME))


def _question_key(wire: bytes, pos: int) -> tuple[tuple[bytes, int, int], int]:
    """The question at *pos* as (lower-cased name wire, type, class), and the offset after it."""
    labels, pos = _labels(wire, pos, len(wire))
    if pos + 4 > len(wire):
        raise dns.exception.FormError("question runs past the end of the message")
    qtype, qclass = _QUESTION_TAIL.unpack_from(wire, pos)
    name = _wire(labels).lower() + b"\0"
    return (name, qtype, qclass), pos + 4


def _options(wire: bytes, start: int, end: int, into: list) -> None:
    try:
        into.extend(map(Option._make, split_options(wire, start, end)))
    except ValueError as exc:
        raise dns.exception.FormError(str(exc)) from None


def _other(wire: bytes, rdclass: int, rdtype: int, start: int, end: int) -> dns.rdata.Rdata:
    """dnspython's rdata of the RDATA between *start* and *end*; FormError when it refuses it."""
    parser = dns.wire.Parser(wire)
    parser.seek(start)
    with dns.exception.ExceptionWrapper(dns.exception.FormError), parser.restrict_to(end - start):
        return dns.rdata.from_wire_parser(rdclass, rdtype, parser)


def parse_reply(wire: bytes) -> Reply:
    """Read a reply; raise :class:`dns.exception.FormError` if it is malformed."""
    if len(wire) < 12:
        raise dns.exception.FormError(f"reply is {len(wire)} bytes, shorter than a DNS header")
    msg_id, flags, qd, an, ns, ar = _HEADER.unpack_from(wire)
    if qd > 1:
        raise dns.exception.FormError(f"reply has {qd} questions")
    question, pos = _question_key(wire, 12) if qd else (None, 12)
    reply = Reply(msg_id, flags, flags & 0xF, question)
    size = len(wire)
    for section, count in ((reply.answer, an), (reply.authority, ns), (reply.additional, ar)):
        for _ in range(count):
            name, pos = read_name(wire, pos)
            if pos + 10 > size:
                raise dns.exception.FormError("record runs past the end of the message")
            rdtype, rdclass, ttl, rdlen = _RR_HEAD.unpack_from(wire, pos)
            start = pos + 10
            pos = start + rdlen
            if pos > size:
                raise dns.exception.FormError("RDATA runs past the end of the message")
            if rdtype == _OPT:
                reply.edns = True
                reply.rcode |= (ttl >> 24) << 4
                _options(wire, start, pos, reply.options)
            elif rdtype in (_FAST if rdclass == _IN else _FAST_ANY_CLASS):
                section.append(Record(name, rdtype, ttl, _value(rdtype, wire, start, pos), rdclass, wire, start, pos))
            else:
                section.append(Record(name, rdtype, ttl, None, rdclass, wire, start, pos,
                                      _other(wire, rdclass, rdtype, start, pos)))
    if pos != size:
        raise dns.exception.FormError(f"{size - pos} bytes after the last record")
    return reply


def is_reply_to(query: bytes, reply: Reply) -> bool:
    """True if *reply* answers *query*: same ID, QR set, same question (case-insensitive)."""
    if reply.id != struct.unpack_from("!H", query)[0] or not reply.flags & dns.flags.QR:
        return False
    return reply.question == _question_key(query, 12)[0]
