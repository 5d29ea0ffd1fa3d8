"""Hostile DNS queries for fuzzing a ToolDNS server: one generator per category, pure functions of a Random.

``scripts/fuzz/fuzz_server.py`` sends them over UDP and TCP to a running tree; ``tests/test_fuzz_parser.py``
feeds them to ``DNSServer.handle`` under Hypothesis (a ``random.Random`` it draws): one module both
import (it needs the ``server`` extra's dnslib, and the server's request parser). Each generator
takes the Random and a :class:`Target` (a zone origin and names in it, so that valid queries reach
real answers) and returns the bytes of one message. Categories:

* ``random``: random bytes, 0 to 600 of them;
* ``valid``: well-formed queries (cursor, expanded, zone and tool names; SRV, TXT, NS ...), most
  with the intent option, some with a vector option, as the resolver library sends them;
* ``mutated``: valid queries with bytes flipped, inserted, deleted, counts rewritten, truncated;
* ``pointers``: compression-pointer loops, long chains, forward and out-of-message pointers;
* ``names``: labels over 63 octets (and the reserved 0x40 and 0x80 label types), names over 255,
  127 and more labels, odd octets in labels;
* ``counts``: many questions, many records, counts that promise more than the message holds;
* ``opt``: huge OPT records, hundreds of options, lying option lengths, two OPTs, OPT outside the
  additional section or not owned by the root, EDNS versions above 0, tiny and huge payload sizes;
* ``intent``: bad intent and vector options (version, length, K, UTF-8, control characters, size,
  repeats), response-only options sent in a query;
* ``responses``: messages with QR set (a server must drop them: no reflection loops);
* ``short``: fewer than the 12 bytes of a header.

The server must answer every message of 12 bytes or more with QR clear (:func:`expects_reply`)
and drop the others; :func:`reply_problem` says what is wrong with a reply, if anything. A run's
:class:`Report` counts what became of every message, by category, and :func:`floors` says which of
the rules a run must hold it broke (none: it passed).

    >>> rng = random.Random(7)
    >>> packet = make_packet("pointers", rng, Target("weather.tools."))
    >>> expects_reply(packet)
    True
"""

from __future__ import annotations

import random
import struct
from collections import Counter
from dataclasses import dataclass, field

import dns.exception
import dns.message
from dnslib import RCODE, DNSError, DNSRecord

from .protocol.ede import EDE_OPTION_CODE
from .protocol.brief import BRIEF_OPTION_CODE
from .protocol.fit import FIT_OPTION_CODE
from .protocol.page import PAGE_OPTION_CODE, encode_page
from .protocol.intent import INTENT_OPTION_CODE, encode_intent
from .protocol.meta import META_OPTION_CODE, encode_meta
from .protocol.vector import VECTOR_OPTION_CODE, encode_vector
from .serving.wire import MalformedRequest, parse_request

QTYPES = (33, 33, 33, 16, 16, 2, 6, 1, 28, 5, 12, 15, 35, 255, 252, 251, 41, 0, 65535)
QCLASSES = (1, 1, 1, 1, 1, 1, 3, 4, 254, 255, 0, 65535)
WORDS = ("weather", "historical", "Hong Kong", "forecast", "typhoon", "warning", "send", "slack", "message",
         "email", "calendar", "meeting", "stock", "price", "bitcoin", "payment", "map", "route", "geocode",
         "paper", "arxiv", "wikipedia", "search", "web", "code", "repository", "package", "npm", "天气", "香港",
         "日历", "données", "météo", "x" * 40)
SERVICES = ("any", "mcp", "http", "a2a", "skill", "nope")


@dataclass(frozen=True)
class Target:
    """What a generator aims at: a zone's origin and some names in the zone (children, tools)."""

    origin: str
    names: tuple[str, ...] = ()


# -- building blocks --

def header(qid: int, flags: int = 0, qd: int = 1, an: int = 0, ns: int = 0, ar: int = 0) -> bytes:
    return struct.pack("!HHHHHH", qid & 0xFFFF, flags & 0xFFFF, qd & 0xFFFF, an & 0xFFFF, ns & 0xFFFF, ar & 0xFFFF)


def encode_name(name: str) -> bytes:
    """*name* in wire form, without any checks (labels of any length are written as asked)."""
    labels = [label.encode("utf-8") for label in name.rstrip(".").split(".") if label]
    return b"".join(bytes([len(label) & 0xFF]) + label for label in labels) + b"\x00"


def question(name_wire: bytes, qtype: int = 33, qclass: int = 1) -> bytes:
    return name_wire + struct.pack("!HH", qtype, qclass)


def option(code: int, data: bytes) -> bytes:
    return struct.pack("!HH", code, len(data) & 0xFFFF) + data


def opt_record(options: bytes = b"", payload: int = 1232, version: int = 0, ext_rcode: int = 0,
               do: bool = False, owner: bytes = b"\x00") -> bytes:
    ttl = (ext_rcode & 0xFF) << 24 | (version & 0xFF) << 16 | (0x8000 if do else 0)
    return owner + struct.pack("!HHIH", 41, payload & 0xFFFF, ttl, len(options) & 0xFFFF) + options


def random_intent(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))


def qname_for(rng: random.Random, target: Target) -> str:
    """A name a resolver would ask of *target*: a cursor, an expanded cursor, the zone or a name in it."""
    first, _, rest = target.origin.partition(".")
    service = rng.choice(SERVICES[:-1] if rng.random() < 0.9 else SERVICES)
    transport = "tcp" if rng.random() < 0.9 else rng.choice(("udp", "sctp"))
    inside = rng.choice(target.names) if target.names else target.origin
    return rng.choice((
        f"_{service}._{transport}._{first}.{rest}",
        f"_{service}._{transport}._{first}.{rest}",
        f"_{service}._{transport}.{target.origin}",
        target.origin,
        inside,
        f"_{service}._{transport}.{inside}",
        f"nothere.{target.origin}",
        "stats.tooldns.",
        "example.com.",
        ".",
    ))


def intent_options(rng: random.Random) -> bytes:
    """The options of a resolver's query: the intent, sometimes a vector too, sometimes nothing."""
    out = b""
    if rng.random() < 0.8:
        out += option(INTENT_OPTION_CODE, encode_intent(random_intent(rng), rng.choice((1, 3, 3, 5, 10, 255))))
    if rng.random() < 0.15:
        out += option(VECTOR_OPTION_CODE, rng.choice(_vectors()))
    if rng.random() < 0.3:  # as resolver_client sends them: brief answers, trimmed to fit a datagram
        out += option(BRIEF_OPTION_CODE, b"") + option(FIT_OPTION_CODE, b"")
        if rng.random() < 0.3:  # a follow-up page
            out += option(PAGE_OPTION_CODE, encode_page(rng.choice((1, 6, 12, 255))))
    return out


_VECTOR_POOL: list[bytes] = []


def _vectors() -> list[bytes]:
    """A few dozen valid vector options of several models and sizes, made once (quantising 384
    floats for every query would cost the fuzzer more than the server spends on it)."""
    if not _VECTOR_POOL:
        rng = random.Random(0)
        for model, dim in (("hash:64", 64), ("all-MiniLM-L6-v2", 384), ("m", 8)):
            _VECTOR_POOL.extend(encode_vector(model, [rng.randint(-127, 127) / 127 for _ in range(dim)])
                                for _ in range(8))
    return _VECTOR_POOL


def valid_query(rng: random.Random, target: Target, qid: int = 0) -> bytes:
    """A well-formed query as the resolver library (or dig) sends it."""
    name = qname_for(rng, target)
    qclass = 3 if name == "stats.tooldns." else rng.choice(QCLASSES[:6] if rng.random() < 0.9 else QCLASSES)
    qtype = 16 if name == "stats.tooldns." else rng.choice(QTYPES[:7] if rng.random() < 0.9 else QTYPES)
    flags = (0x0100 if rng.random() < 0.2 else 0) | (0x0010 if rng.random() < 0.1 else 0)
    body = question(encode_name(name), qtype, qclass)
    if rng.random() < 0.15:
        return header(qid, flags) + body
    opt = opt_record(intent_options(rng), payload=rng.choice((1232, 1232, 512, 4096, 1400)), do=rng.random() < 0.1)
    return header(qid, flags, ar=1) + body + opt


# -- the categories --

def random_packet(rng: random.Random, target: Target) -> bytes:
    size = rng.choice((rng.randint(0, 40), rng.randint(12, 120), rng.randint(0, 600)))
    data = bytearray(rng.randbytes(size))
    if size > 2 and rng.random() < 0.5:
        data[2] &= 0x7F  # a query, so that it reaches the parser and not only the QR check
    return bytes(data)


def mutate(rng: random.Random, packet: bytes, rounds: int | None = None) -> bytes:
    """*packet* with 1 to 4 random edits: bit flips, bytes set, inserted, deleted, duplicated; counts
    rewritten; a truncation."""
    data = bytearray(packet)
    for _ in range(rounds or rng.choice((1, 1, 1, 2, 3, 4))):
        kind = rng.randrange(8)
        at = rng.randrange(len(data) + 1)
        if kind == 0 and data:
            data[min(at, len(data) - 1)] ^= 1 << rng.randrange(8)
        elif kind == 1 and data:
            data[min(at, len(data) - 1)] = rng.choice((0, 0x3F, 0x40, 0x7F, 0x80, 0xC0, 0xFF, rng.randrange(256)))
        elif kind == 2:
            data[at:at] = rng.randbytes(rng.choice((1, 2, 4, rng.randint(1, 64))))
        elif kind == 3:
            del data[at:at + rng.randint(1, 8)]
        elif kind == 4:
            del data[at:]
        elif kind == 5 and len(data) >= 12:
            field = rng.choice((4, 6, 8, 10))
            data[field:field + 2] = struct.pack("!H", rng.choice((0, 1, 2, 3, 5, 255, 65535, rng.randrange(65536))))
        elif kind == 6 and data:
            start = rng.randrange(len(data))
            data[at:at] = data[start:start + rng.randint(1, 32)]
        elif kind == 7 and len(data) >= 4:
            data[2] = rng.randrange(256) & 0x7F
            data[3] = rng.randrange(256)
    return bytes(data)


def mutated_packet(rng: random.Random, target: Target) -> bytes:
    data = mutate(rng, valid_query(rng, target))
    if len(data) > 2 and rng.random() < 0.8:
        data = data[:2] + bytes([data[2] & 0x7F]) + data[3:]
    return data


def pointer_packet(rng: random.Random, target: Target) -> bytes:
    """Compression pointers that loop, chain, point forwards or out of the message."""
    tail = struct.pack("!HH", 33, 1)
    kind = rng.randrange(7)
    if kind == 0:  # a name that is a pointer to itself
        return header(0) + b"\xc0\x0c" + tail
    if kind == 1:  # a label, then a pointer back to that label: a loop through a backwards pointer
        return header(0) + b"\x01a\xc0\x0c" + tail
    if kind == 2:  # a forward pointer, and a pointer past the end of the message
        name = rng.choice((b"\x01x\xc0\x20", b"\xc0\x10", b"\xff\xff"))
        return header(0) + name + tail + b"\x00" * rng.randint(0, 30)
    if kind == 3:  # a pointer into the header
        return header(0) + bytes([0xC0, rng.randrange(12)]) + tail
    if kind == 4:  # two records whose owners point at each other's names
        rr = b"\xc0\x0c" + struct.pack("!HHIH", 16, 1, 0, 2) + b"\xc0" + bytes([rng.randrange(12, 40)])
        return header(0, ar=2) + question(encode_name(target.origin)) + rr * 2
    # a chain: record data (of a private type) full of pointers, each to the one before, the first to
    # the question's name; a record's owner enters it at the end. Short ones are legal, long ones not.
    cells = rng.randint(2, 120) if kind == 5 else rng.randint(120, 700)
    first = 12 + len(question(encode_name(target.origin))) + 2 + 10
    rdata = b"".join(struct.pack("!H", 0xC000 | (first + 2 * (i - 1) if i else 12)) for i in range(cells))
    answer = b"\xc0\x0c" + struct.pack("!HHIH", 0xFF00, 1, 0, len(rdata)) + rdata
    owner = struct.pack("!H", 0xC000 | min(first + 2 * (cells - 1), 0x3FFF))
    return header(0, an=1, ar=1) + question(encode_name(target.origin)) + answer + owner + struct.pack(
        "!HHIH", 1, 1, 0, 0)


def name_packet(rng: random.Random, target: Target) -> bytes:
    """Labels over 63 octets, reserved label types, names over 255 octets or 127 labels, odd octets."""
    kind = rng.randrange(7)
    if kind == 0:
        size = rng.choice((63, 64, 65, 127, 191))
        name = bytes([size]) + b"a" * size + encode_name(target.origin)
    elif kind == 1:  # 0x40 and 0x80: the extended and reserved label types of RFC 6891 and RFC 1035
        name = bytes([rng.choice((0x40, 0x41, 0x80, 0xBF))]) + b"b" * rng.randint(0, 70) + b"\x00"
    elif kind == 2:
        name = (b"\x3f" + b"c" * 63) * rng.randint(4, 5) + b"\x00"
    elif kind == 3:
        name = b"\x01x" * rng.randint(100, 300) + b"\x00"
    elif kind == 4:  # octets no host name has: dots, NUL, spaces, UTF-8, upper case
        label = rng.choice((b"a.b", b"\x00", b" ", "天气".encode(), b"\xff\xfe", b"WEATHER", b"_", b"-a-"))
        name = bytes([len(label)]) + label + encode_name(target.origin)
    elif kind == 5:  # 255 octets exactly, and one more
        extra = rng.choice((0, 1))
        name = (b"\x3f" + b"d" * 63) * 3 + bytes([61 + extra]) + b"e" * (61 + extra) + b"\x00"
    else:  # a name with no terminating zero: the message ends inside it
        name = b"\x07weather\x05tools"
    qtype = rng.choice(QTYPES[:6])
    if rng.random() < 0.5:
        return header(0, ar=1) + question(name, qtype) + opt_record()
    return header(0) + question(name, qtype)


def count_packet(rng: random.Random, target: Target) -> bytes:
    """Many questions, many records, counts that promise more (or less) than the message holds."""
    q = question(encode_name(target.origin))
    kind = rng.randrange(5)
    if kind == 0:
        n = rng.choice((2, 3, 16, 200))
        return header(0, qd=n) + q * n
    if kind == 1:
        return header(0, qd=rng.choice((2, 100, 65535))) + q
    if kind == 2:
        rr = b"\x00" + struct.pack("!HHIH", 16, 1, 0, 1) + b"\x00"
        n = rng.choice((3, 4, 5, 50, 400))
        return header(0, ar=n) + q + rr * n
    if kind == 3:  # counts larger than the records present
        return header(0, an=rng.randint(1, 3), ns=rng.randint(0, 3), ar=rng.randint(1, 65535)) + q + opt_record()
    return header(0, qd=0, ar=rng.choice((0, 1))) + (opt_record() if rng.random() < 0.5 else b"")


def opt_packet(rng: random.Random, target: Target) -> bytes:
    """OPT records every way wrong: huge, full of options, lying lengths, doubled, misplaced, odd versions."""
    q = question(encode_name(qname_for(rng, target)))
    kind = rng.randrange(8)
    if kind == 0:  # huge: one big option, or hundreds of small ones
        opts = option(65001, rng.randbytes(rng.randint(500, 1400))) if rng.random() < 0.5 else b"".join(
            option(rng.randrange(65536), rng.randbytes(rng.randint(0, 4))) for _ in range(rng.randint(100, 300)))
        return header(0, ar=1) + q + opt_record(opts)
    if kind == 1:  # an option whose length says more than there is, or stray bytes after the last
        opts = rng.choice((struct.pack("!HH", 65301, 50) + b"x", option(10, b"12345678") + b"\x00\x01"))
        return header(0, ar=1) + q + opt_record(opts)
    if kind == 2:  # RDLENGTH larger than the message
        return header(0, ar=1) + q + b"\x00" + struct.pack("!HHIH", 41, 1232, 0, rng.randint(1, 65535)) + b"\x00" * 4
    if kind == 3:
        return header(0, ar=2) + q + opt_record() + opt_record(intent_options(rng))
    if kind == 4:  # OPT in the answer or authority section, or owned by a name
        if rng.random() < 0.5:
            return header(0, an=1) + q + opt_record()
        return header(0, ar=1) + q + opt_record(owner=encode_name(target.origin))
    if kind == 5:  # EDNS versions above 0, extended RCODE and DO bits set in a query
        return header(0, ar=1) + q + opt_record(intent_options(rng), version=rng.choice((1, 2, 255)),
                                               ext_rcode=rng.randrange(256), do=True)
    if kind == 6:  # payload sizes below 512 and far above what the server sends
        return header(0, ar=1) + q + opt_record(intent_options(rng), payload=rng.choice((0, 1, 511, 512, 65535)))
    codes = (EDE_OPTION_CODE, META_OPTION_CODE, 10, 8, 12, 3)  # EDE, meta, cookie, ECS, padding, NSID
    code = rng.choice(codes)
    data = encode_meta(3, 30, "bm25") if code == META_OPTION_CODE else rng.randbytes(rng.choice((0, 1, 7, 8, 40)))
    return header(0, ar=1) + q + opt_record(option(code, data) + intent_options(rng))


def bad_intent(rng: random.Random) -> bytes:
    """The data of an intent option that breaks the layout in one way."""
    good = encode_intent(random_intent(rng), 3)
    return rng.choice((
        b"", b"\x00", b"\x00\x00", b"\x00\x00\x00",
        b"\x01" + good[1:],  # version 1
        good[:3] + b"\x00" + good[4:],  # K = 0
        good[:1] + struct.pack("!H", len(good) - 2) + good[3:],  # length field too large
        good[:1] + struct.pack("!H", 1) + good[3:],  # too small
        b"\x00\x00\x00\x03",  # empty intent
        b"\x00\x00\x03\x03\xff\xfe\xfd",  # not UTF-8
        b"\x00\x00\x03\x03a\x00b",  # a control character
        b"\x00\x00\x03\x03   ",  # only spaces
        b"\x00" + struct.pack("!H", 5000) + b"\x03" + b"w" * 5000,  # over 4096 bytes
        b"\x00" + struct.pack("!H", 65535) + b"\x03" + b"w" * 40,
    ))


def bad_vector(rng: random.Random) -> bytes:
    good = encode_vector("m", [rng.randint(-127, 127) / 127 for _ in range(8)])
    return rng.choice((
        b"", b"\x00", b"\x01" + good[1:], b"\x00\x00" + good[2:], b"\x00\x41" + good[2:],
        good[:3] + b"\x00\x00" + good[5:],  # dim 0
        good[:5] + b"\x7f\xc0\x00\x00" + good[9:],  # NaN scale
        good[:5] + b"\x00\x00\x00\x00" + good[9:],  # scale 0
        good[:5] + b"\xbf\x80\x00\x00" + good[9:],  # scale -1
        good[:-1], good + b"\x01", b"\x00\x01 " + good[3:],  # a short one, a long one, a space in the model
    ))


def intent_packet(rng: random.Random, target: Target) -> bytes:
    """Bad intent and vector options, repeated options, a vector without an intent, brief and fit
    options with data or twice."""
    q = question(encode_name(qname_for(rng, target)), rng.choice((33, 16)))
    kind = rng.randrange(5)
    if kind == 0:
        opts = option(INTENT_OPTION_CODE, bad_intent(rng))
    elif kind == 1:
        opts = option(INTENT_OPTION_CODE, encode_intent(random_intent(rng), 3)) + option(VECTOR_OPTION_CODE,
                                                                                          bad_vector(rng))
    elif kind == 2:  # the same option twice
        code = rng.choice((INTENT_OPTION_CODE, VECTOR_OPTION_CODE))
        data = encode_intent("weather", 3) if code == INTENT_OPTION_CODE else encode_vector("m", [0.5, -0.5])
        opts = option(code, data) * rng.choice((2, 3))
    elif kind == 3:
        opts = option(VECTOR_OPTION_CODE, encode_vector("m", [rng.randint(-127, 127) / 127 for _ in range(16)]))
    else:
        flag = rng.choice((BRIEF_OPTION_CODE, FIT_OPTION_CODE, PAGE_OPTION_CODE))
        data = rng.choice((b"", b"\x00", b"\x01\x02", bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))))
        opts = option(INTENT_OPTION_CODE, encode_intent(random_intent(rng), 10)) + rng.choice(
            (option(flag, data), option(flag, b"") * 2))
    return header(0, ar=1) + q + opt_record(opts)


def response_packet(rng: random.Random, target: Target) -> bytes:
    """A message with QR set: a valid query turned into a 'response', or random bytes with QR set."""
    data = bytearray(valid_query(rng, target) if rng.random() < 0.7 else rng.randbytes(rng.randint(12, 200)))
    data[2] |= 0x80
    return bytes(data)


def short_packet(rng: random.Random, target: Target) -> bytes:
    return valid_query(rng, target)[:rng.randrange(12)]


CATEGORIES = {
    "random": random_packet, "valid": lambda rng, target: valid_query(rng, target), "mutated": mutated_packet,
    "pointers": pointer_packet, "names": name_packet, "counts": count_packet, "opt": opt_packet,
    "intent": intent_packet, "responses": response_packet, "short": short_packet,
}
#: how often each category is drawn (valid and mutated queries most: they go deepest)
WEIGHTS = {"random": 10, "valid": 20, "mutated": 25, "pointers": 6, "names": 6, "counts": 6, "opt": 10,
           "intent": 10, "responses": 4, "short": 3}


def make_packet(category: str, rng: random.Random, target: Target) -> bytes:
    """One message of *category* aimed at *target*; its ID is random (the sender may set its own)."""
    data = CATEGORIES[category](rng, target)
    if len(data) >= 2:
        data = struct.pack("!H", rng.randrange(65536)) + data[2:]
    return data


def expects_reply(packet: bytes) -> bool:
    """A server must answer this message: its header can be read and it is a query (QR clear)."""
    return len(packet) >= 12 and not packet[2] & 0x80


@dataclass(frozen=True)
class ReplyInfo:
    """What the checks need of a reply: ID, QR, TC, RCODE (with the EDNS extended bits), questions."""

    id: int
    qr: int
    tc: int
    rcode: int
    names: list
    qtype: int


def read_reply(wire: bytes) -> ReplyInfo:
    """The :class:`ReplyInfo` of reply *wire*; raises dnslib's or dnspython's error if it does not parse.

    dnslib parses it; dnslib refuses labels that are not UTF-8, which DNS allows (RFC 2181 11), so
    such a reply is parsed by dnspython instead, its opcode cleared (dnspython reads UPDATE
    messages by RFC 2136's rules, which a NOTIMP reply to one need not follow).
    """
    try:
        reply = DNSRecord.parse(wire)
        ext = next(((rr.ttl >> 24) & 0xFF for rr in reply.ar if rr.rtype == 41), 0)
        return ReplyInfo(reply.header.id, reply.header.qr, reply.header.tc, ext << 4 | reply.header.rcode,
                         [q.qname.label for q in reply.questions], reply.questions[0].qtype if reply.questions else -1)
    except DNSError as exc:
        if "Invalid label" not in str(exc):
            raise
    message = dns.message.from_wire(wire[:2] + bytes([wire[2] & 0x87]) + wire[3:])
    names = [tuple(q.name.labels[:-1]) for q in message.question]
    return ReplyInfo(message.id, message.flags >> 15, (message.flags >> 9) & 1, message.rcode(), names,
                     message.question[0].rdtype if message.question else -1)


def describe_reply(packet: bytes, wire: bytes | None, udp: bool) -> tuple[str | None, ReplyInfo | None]:
    """(what is wrong with *wire* as the server's reply to *packet*, or None; the reply's details).

    *wire* None is no reply. A message with a readable header and QR clear gets a reply that
    parses, with QR set, the query's ID, at most one question (the query's own), FORMERR when the
    query cannot be parsed, and over UDP at most 512 bytes (no OPT record) or the size the query
    advertised. Other messages get none.
    """
    if not expects_reply(packet):
        return (None if wire is None else "a reply to a message that must be dropped"), None
    if wire is None:
        return "no reply", None
    try:
        info = read_reply(wire)
    except (DNSError, dns.exception.DNSException, ValueError) as exc:
        return f"the reply does not parse: {exc}", None
    if not info.qr or info.id != struct.unpack_from("!H", packet)[0]:
        return "the reply has QR clear or another ID", info
    if len(info.names) > 1:
        return f"the reply has {len(info.names)} questions", info
    try:
        request = parse_request(packet)
    except MalformedRequest:
        if info.rcode != RCODE.FORMERR or info.names:
            return "a malformed query got no bare FORMERR", info
        return ("a FORMERR over 512 bytes" if udp and len(wire) > 512 else None), info
    if info.names and (info.names[0] != request.record.q.qname.label or info.qtype != request.record.q.qtype):
        return "the reply's question is not the query's", info
    limit = max(512, request.opt.rclass) if request.opt is not None else 512
    return (f"a UDP reply of {len(wire)} bytes, over {limit}" if udp and len(wire) > limit else None), info


def reply_problem(packet: bytes, wire: bytes | None, udp: bool) -> str | None:
    """What is wrong with *wire* as the server's reply to *packet* (see :func:`describe_reply`), or None."""
    return describe_reply(packet, wire, udp)[0]


# -- a run's account: what became of every message, and the floors a run must hold --

RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED", 16: "BADVERS"}
@dataclass
class Tally:
    """What became of the messages of one category."""

    sent: int = 0
    answered: int = 0
    unanswered: int = 0  # a reply was due and none came
    dropped: int = 0  # none was due and none came
    stray: int = 0  # a reply to a message that must be dropped
    bad: int = 0  # a reply with a problem
    tc: int = 0
    late: int = 0  # answered after the query gave up its place in the window
    rcodes: Counter = field(default_factory=Counter)


class Report:
    """Tallies by category, and samples of what went wrong (the message's bytes, for a regression test)."""

    def __init__(self, limited: bool = False) -> None:
        self.tallies: dict[str, Tally] = {}
        self.samples: list[str] = []
        self.unmatched = 0  # replies for no query we sent (a changed ID, a duplicate)
        self.limited = limited  # missing replies may be the rate limit's: not worth a sample
        self._silent_samples = 0

    def tally(self, category: str) -> Tally:
        return self.tallies.setdefault(category, Tally())

    def sample(self, category: str, what: str, packet: bytes, udp: bool) -> None:
        if what == "no reply":  # a few of those at most: they leave room for the other problems
            if self.limited or self._silent_samples >= 4:
                return
            self._silent_samples += 1
        if len(self.samples) < 12:
            self.samples.append(f"{category} ({'udp' if udp else 'tcp'}): {what}: {packet[:120].hex()}"
                                + ("..." if len(packet) > 120 else ""))

    def reply(self, category: str, packet: bytes, wire: bytes, udp: bool) -> None:
        """Count *wire*, the reply to *packet*, and check it."""
        t = self.tally(category)
        problem, info = describe_reply(packet, wire, udp)
        if not expects_reply(packet):
            t.stray += 1
        else:
            t.answered += 1
        if info is not None:
            t.tc += info.tc
            t.rcodes[RCODES.get(info.rcode, str(info.rcode))] += 1
        if problem is not None:
            t.bad += problem != "a reply to a message that must be dropped"
            self.sample(category, problem, packet, udp)

    def silence(self, category: str, packet: bytes, udp: bool) -> None:
        t = self.tally(category)
        if expects_reply(packet):
            t.unanswered += 1
            self.sample(category, "no reply", packet, udp)
        else:
            t.dropped += 1


def floors(report: Report, log_text: str | None, stats: Counter, proc, limited: bool,
           check: tuple[bool, str]) -> list[str]:
    """The floors that failed (none: the run passed)."""
    t = Tally()
    for x in report.tallies.values():
        t.unanswered, t.stray, t.bad = t.unanswered + x.unanswered, t.stray + x.stray, t.bad + x.bad
    failed = []
    if t.unanswered and not limited:
        failed.append(f"{t.unanswered} queries due a reply got none")
    if limited and "rate_limited" in stats and t.unanswered > stats["rate_limited"] - stats.get("slipped", 0):
        failed.append(f"{t.unanswered} queries due a reply got none, but the servers dropped only "
                      f"{stats['rate_limited'] - stats.get('slipped', 0)} for the rate limit")
    if t.stray:
        failed.append(f"{t.stray} replies to messages that must be dropped")
    if t.bad:
        failed.append(f"{t.bad} bad replies")
    if report.unmatched:
        failed.append(f"{report.unmatched} replies matched no query")
    if log_text is not None and log_text.count("Traceback"):
        failed.append(f"{log_text.count('Traceback')} tracebacks in the server's log")
    if stats.get("servfail"):
        failed.append(f"the servers counted {stats['servfail']} internal errors (SERVFAIL)")
    if proc is not None and proc.poll() is not None:
        failed.append(f"the server exited with status {proc.returncode}")
    if not check[0]:
        failed.append(f"the resolution afterwards: {check[1]}")
    return failed
