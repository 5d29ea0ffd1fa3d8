"""Strict request parsing and size-aware reply packing: pure functions over bytes, no sockets.

dnslib parses messages, but it silently drops an empty EDNS option that ends the option list and
ignores trailing bytes in OPT data; a server that must answer malformed intents with FORMERR
needs to see them. :func:`parse_request` therefore walks the message with dnslib's own parsers
and reads OPT options itself, strictly.

:func:`pack_reply` packs a reply and, when it exceeds the size the client can take over UDP,
returns the truncated form: header with TC set, the question and the OPT record kept
(RFC 6891 7, RFC 2181 9), so that the client retries over TCP; over TCP, a reply longer than one
message keeps the records that fit, TC set, with an EDE text saying how many. Names are written
with compression pointers only to where 14 bits reach (:func:`pack_message`), which dnslib's own
packing does not heed.

:func:`read_plain_query` reads the common query (one question of class IN, an OPT record of
version 0 and no other record) from the bytes alone, for the fast path; it gives up (None) on
anything else, which :func:`parse_request` then reads and answers.

    >>> req = parse_request(query_bytes)
    >>> wire = pack_reply(reply, max_size=req.udp_size)
    >>> read_plain_query(query_bytes).qtype
    33
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from dnslib import QTYPE, RR, DNSBuffer, DNSError, DNSHeader, DNSLabel, DNSQuestion, DNSRecord, EDNSOption
from dnslib.buffer import BufferError as DNSBufferError
from dnslib.label import DNSLabelError

from ..protocol.ede import EDE_OPTION_CODE, encode_ede
from ..protocol.edns import split_options
from ..protocol.names import MAX_LABEL, MAX_NAME

#: Largest UDP reply this server sends, whatever the client advertises (DNS Flag Day 2020).
SERVER_UDP_SIZE = 1232
#: Size assumed for clients without EDNS (RFC 1035).
CLASSIC_UDP_SIZE = 512


class MalformedRequest(Exception):
    """The request cannot be parsed; *header* is set when at least the header could be read."""

    def __init__(self, message: str, header: DNSHeader | None = None, questions=None) -> None:
        super().__init__(message)
        self.header = header
        self.questions = questions or []


@dataclass
class Request:
    record: DNSRecord
    #: the OPT RR, or None for a query without EDNS
    opt: RR | None
    #: problem found in the OPT record (options malformed), to be answered with FORMERR
    opt_error: str | None = None
    #: a question name that breaks RFC 1035's limits (it cannot be packed back into a reply), to
    #: be answered with FORMERR without echoing it
    name_error: str | None = None

    @property
    def udp_size(self) -> int:
        if self.opt is None:
            return CLASSIC_UDP_SIZE
        return min(max(self.opt.rclass, CLASSIC_UDP_SIZE), SERVER_UDP_SIZE)

    def options(self, code: int) -> list[bytes]:
        if self.opt is None:
            return []
        return [o.data for o in self.opt.rdata if o.code == code]


class PlainQuery:
    """A query read by :func:`read_plain_query`: where its question ends, what it asks, its EDNS options."""

    __slots__ = ("question_end", "qtype", "rd", "udp_size", "options")

    def __init__(self, question_end: int, qtype: int, rd: bool, udp_size: int, options: dict[int, list[bytes]]):
        #: the question is ``data[12:question_end]``; its name ``data[12:question_end - 4]``
        self.question_end = question_end
        self.qtype = qtype
        self.rd = rd
        #: the largest UDP reply the client takes (as :attr:`Request.udp_size`)
        self.udp_size = udp_size
        #: the data of each EDNS option by code, in order
        self.options = options

    def option_data(self, code: int) -> list[bytes]:
        """The data of every option *code*, in order."""
        return self.options.get(code, [])


#: a plain query's counts: one question, no answer or authority record, one additional (its OPT record)
_PLAIN_COUNTS = b"\0\1\0\0\0\0\0\1"
_OPT_FIXED = struct.Struct("!HHBBHH")  # after the OPT owner: type, size, extended rcode, version, flags, rdlength
_QTYPE_CLASS = struct.Struct("!HH")
_OPTION = struct.Struct("!HH")
#: zone transfers are refused by the resolver, never answered from the fast path
_TRANSFERS = (QTYPE.AXFR, QTYPE.IXFR)
_OPT = QTYPE.OPT  # read once: dnslib's QTYPE answers attributes through a raised AttributeError


def skip_name(wire: bytes, pos: int) -> int:
    """The offset just past the (possibly compressed) name at *pos* of *wire*; ValueError when it runs
    off the end of the message or past 128 labels (no name has that many)."""
    end = len(wire)
    for _ in range(128):
        if pos >= end:
            raise ValueError("name runs past the end of the message")
        length = wire[pos]
        if length >= 0xC0:
            return pos + 2
        if length == 0:
            return pos + 1
        pos += 1 + length
    raise ValueError("name too long")


def read_plain_query(data: bytes) -> PlainQuery | None:
    """Read a plain query from *data* without dnslib: a QUERY with one question of class IN (not a
    zone transfer), an uncompressed name within RFC 1035's limits and no record but an OPT record
    of EDNS version 0 whose options are well formed. None for anything else, including
    every message :func:`parse_request` would refuse: those take the full path.

    One function, read front to back: every query a server answers from its fast path passes here.
    """
    size = len(data)
    # header, root name, type and class, OPT record; QR and opcode 0; one question and the OPT record
    if size < 28 or data[2] & 0xF8 or data[4:12] != _PLAIN_COUNTS:
        return None
    pos = 12  # the question's name: uncompressed labels, at most MAX_NAME octets
    length = data[12]
    while length:
        if length > MAX_LABEL:  # a pointer, an extended label type or too long a label
            return None
        pos += length + 1
        if pos >= size:
            return None
        length = data[pos]
    end = pos + 5  # past the root label, the type and the class
    if end - 16 > MAX_NAME or end + 11 > size:
        return None
    qtype, qclass = _QTYPE_CLASS.unpack_from(data, end - 4)
    if qclass != 1 or qtype in _TRANSFERS or data[end]:  # the OPT record's owner: the root
        return None
    rtype, udp_size, _, version, _, rdlength = _OPT_FIXED.unpack_from(data, end + 1)
    pos = end + 11
    if rtype != _OPT or version != 0 or pos + rdlength != size:  # the OPT record ends the message
        return None
    options: dict[int, list[bytes]] = {}
    while pos < size:  # split_options' rule, inline: every query of the fast path passes here
        if size - pos < 4:
            return None
        code, length = _OPTION.unpack_from(data, pos)
        pos += 4
        if pos + length > size:
            return None
        options.setdefault(code, []).append(data[pos:pos + length])
        pos += length
    return PlainQuery(end, qtype, bool(data[2] & 0x01), min(max(udp_size, CLASSIC_UDP_SIZE), SERVER_UDP_SIZE),
                      options)


def parse_options(rdata: bytes) -> list[EDNSOption]:
    """Parse OPT RDATA into options; raise ValueError if it is not a whole number of options."""
    return [EDNSOption(code, data) for code, data in split_options(rdata, 0, len(rdata))]


def _parse_rr(buffer: DNSBuffer) -> tuple[RR, str | None]:
    start = buffer.offset
    owner = buffer.decode_name()
    rtype, rclass, ttl, rdlength = buffer.unpack("!HHIH")
    if rtype != QTYPE.OPT:
        buffer.offset = start
        return RR.parse(buffer), None
    raw = buffer.get(rdlength)
    error = None if not owner.label else "OPT record owner is not the root name"
    try:
        options = parse_options(raw)
    except ValueError as exc:
        options, error = [], str(exc)
    return RR(".", QTYPE.OPT, rclass, ttl, options), error


#: a query asks one question and carries an OPT record, perhaps a cookie or a signature: more
#: records than this are not a query this server answers, and are not worth parsing
MAX_RECORDS = 4
#: labels and compression pointers read while decoding the names of one message: a name has at
#: most 127 labels, a query one name or a few (pointer chains would otherwise cost quadratic time)
MAX_NAME_STEPS = 512


class _BoundedBuffer(DNSBuffer):
    """dnslib's buffer, decoding names with a bound on the work (labels and pointers followed).

    Errors are dnslib's ``BufferError``, which :func:`parse_request` turns into a FORMERR with the
    header that was read.
    """

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.steps = 0

    def decode_name(self, last: int = -1) -> DNSLabel:
        labels: list[bytes] = []
        while True:
            self.steps += 1
            # a name of over 127 labels is too long (255 octets), but is read to its end within the
            # bound, so that the rest of the query (its OPT record) is read and the FORMERR explains it
            if self.steps > MAX_NAME_STEPS:
                raise DNSBufferError(f"names take more than {MAX_NAME_STEPS} steps to read; a query needs few")
            (length,) = self.unpack("!B")
            if length >= 0xC0:  # a compression pointer: only backwards, as dnslib checks
                pointer = ((length & 0x3F) << 8) | self.unpack("!B")[0]
                save = self.offset
                if pointer >= save - 2:
                    raise DNSBufferError(f"compression pointer {pointer} does not point backwards")
                self.offset = pointer
                labels.extend(self.decode_name(save).label)
                self.offset = save
                return DNSLabel(labels)
            if length == 0:
                return DNSLabel(labels)
            labels.append(self.get(length))


def parse_request(packet: bytes) -> Request:
    """Parse a query strictly; raise :class:`MalformedRequest` if it cannot be read."""
    if len(packet) < 12:
        raise MalformedRequest(f"message is {len(packet)} bytes, shorter than a DNS header")
    buffer = _BoundedBuffer(packet)
    header = None
    questions = []
    try:
        header = DNSHeader.parse(buffer)
        if header.q > 1:  # answered without reading on: a query asks one question (RFC 9619)
            raise MalformedRequest(f"a query must have exactly one question, not {header.q}", header)
        if header.a + header.auth + header.ar > MAX_RECORDS:
            raise MalformedRequest(f"a query carries at most {MAX_RECORDS} records, not "
                                   f"{header.a + header.auth + header.ar}", header)
        for _ in range(header.q):
            questions.append(DNSQuestion.parse(buffer))
        sections: list[list[RR]] = [[], [], []]
        opt, opt_error = None, None
        for section, count in zip(sections, (header.a, header.auth, header.ar)):
            for _ in range(count):
                rr, error = _parse_rr(buffer)
                if rr.rtype == QTYPE.OPT:
                    if section is not sections[2]:
                        opt_error = opt_error or "OPT record outside the additional section"
                    elif opt is not None:
                        opt_error = opt_error or "more than one OPT record"  # RFC 6891 6.1.1: FORMERR
                    else:
                        opt = rr
                    opt_error = opt_error or error
                section.append(rr)
        if buffer.remaining():
            raise MalformedRequest(f"{buffer.remaining()} bytes after the last record", header, questions)
    except MalformedRequest:
        raise
    except (DNSError, Exception) as exc:  # dnslib raises BufferError and friends too
        raise MalformedRequest(f"cannot parse message: {exc}", header, questions) from None
    record = DNSRecord(header, questions, sections[0], auth=sections[1], ar=sections[2])
    record.header = header  # DNSRecord() recomputes counts; keep what came on the wire
    return Request(record, opt, opt_error, _name_error(questions))


def _name_error(questions) -> str | None:
    """What breaks RFC 1035's limits in the question names (63-octet labels, 255-octet names)."""
    for q in questions:
        labels = q.qname.label
        longest = max((len(label) for label in labels), default=0)
        if longest > MAX_LABEL:
            return f"a label of the question name is {longest} octets; at most {MAX_LABEL} are allowed"
        octets = sum(len(label) + 1 for label in labels) + 1
        if octets > MAX_NAME:
            return f"the question name is {octets} octets; at most {MAX_NAME} are allowed"
    return None


#: The largest DNS message: what TCP's two-octet length prefix can say (RFC 1035 4.2.2)
MAX_MESSAGE = 65535
#: The farthest offset a compression pointer can name (14 bits, RFC 1035 4.1.4)
MAX_POINTER = 0x3FFF


class _PackBuffer(DNSBuffer):
    """dnslib's buffer, writing names so that every compression pointer can be written: dnslib
    also remembers names written past offset 16,383, which 14 bits cannot name, and later points at
    them with a wrong offset (the glue of a referral to a thousand children over TCP)."""

    def encode_name(self, name) -> None:
        labels = list((name if isinstance(name, DNSLabel) else DNSLabel(name)).label)
        if sum(len(label) + 1 for label in labels) > 254:
            raise DNSLabelError(f"name too long: {DNSLabel(labels)}")
        while labels:
            pointer = self.names.get(tuple(labels))
            if pointer is not None:
                self.pack("!H", 0xC000 | pointer)
                return
            if self.offset <= MAX_POINTER:
                self.names[tuple(labels)] = self.offset
            label = labels.pop(0)
            if len(label) > MAX_LABEL:
                raise DNSLabelError(f"label too long: {label!r}")
            self.pack("!B", len(label))
            self.append(label)
        self.append(b"\x00")


def pack_message(message: DNSRecord) -> bytes:
    """*message* on the wire, as ``DNSRecord.pack`` writes it but with pointers only to where 14 bits
    reach (:class:`_PackBuffer`)."""
    message.set_header_qa()
    buffer = _PackBuffer()
    message.header.pack(buffer)
    for section in (message.questions, message.rr, message.auth, message.ar):
        for item in section:
            item.pack(buffer)
    return bytes(buffer.data)


def pack_reply(reply: DNSRecord, max_size: int | None, tcp: bool = False) -> bytes:
    """Pack *reply*; if *max_size* is given and exceeded, pack the truncated form instead: over UDP
    the header, question and OPT record (the client retries over TCP), over TCP (*tcp*), where
    nothing is retried, the most of its leading records that fit (:func:`_cut`)."""
    wire = pack_message(reply)
    if max_size is None or len(wire) <= max_size:
        return wire
    if tcp:
        cut = _cut(reply, max_size, len(wire))
        if cut is not None:
            return cut
    truncated = DNSRecord(DNSHeader(id=reply.header.id, bitmap=reply.header.bitmap), questions=list(reply.questions))
    truncated.header.tc = 1
    truncated.header.rcode = reply.header.rcode
    for rr in reply.ar:
        if rr.rtype == QTYPE.OPT:
            # keep the OPT (extended rcode, size) but drop bulky options except EDE
            truncated.add_ar(RR(".", QTYPE.OPT, rr.rclass, rr.ttl, [o for o in rr.rdata if o.code == EDE_OPTION_CODE]))
    return pack_message(truncated)


def _names_of(rr: RR) -> set:
    """The owner of *rr* and the name its data points at (an NS's server, an SRV's target)."""
    target = getattr(rr.rdata, "label", None) if rr.rtype == QTYPE.NS else getattr(rr.rdata, "target", None)
    return {rr.rname} if target is None else {rr.rname, DNSLabel(target)}


def _cut(reply: DNSRecord, max_size: int, size: int) -> bytes | None:
    """A reply too long for one message (a leaf of 10,000 tools asked for all of them, a root of
    a thousand children without an intent), cut: the first records of its answer (or, in a
    referral, of its authority section) that fit with the additional records about them (glue,
    descriptions), TC set and an EDE text saying how many were kept (perhaps none)."""
    primary = reply.rr if reply.rr else reply.auth
    opt = next((rr for rr in reply.ar if rr.rtype == QTYPE.OPT), None)
    extra = [rr for rr in reply.ar if rr.rtype != QTYPE.OPT]

    def packed(n: int) -> bytes | None:
        kept = primary[:n]
        names = set().union(*map(_names_of, kept)) if kept else set()
        out = DNSRecord(DNSHeader(id=reply.header.id, bitmap=reply.header.bitmap), questions=list(reply.questions),
                        rr=kept if reply.rr else [], auth=list(reply.auth) if reply.rr else kept,
                        ar=[rr for rr in extra if rr.rname in names])
        out.header.tc = 1
        if opt is not None:
            text = (f"{n} of {len(primary)} records fit a {MAX_MESSAGE:,}-octet message; ask with an intent "
                    f"to have them ranked")
            out.add_ar(RR(".", QTYPE.OPT, opt.rclass, opt.ttl,
                          [o for o in opt.rdata if o.code != EDE_OPTION_CODE] + [EDNSOption(EDE_OPTION_CODE,
                                                                                          encode_ede(text))]))
        wire = pack_message(out)
        return wire if len(wire) <= max_size else None

    # records of one zone are alike in size: the share that fits is within a few records of the most
    best = most_that_fit(len(primary), packed, guess=len(primary) * max_size // size)
    return best if best is not None else packed(0)


def most_that_fit(count: int, fitting, guess: int | None = None):
    """*fitting(n)* for the largest n below *count* (all *count* did not fit) for which it is not
    None, or None when not even n = 1 fits. A reply's size grows with n, so a search: binary, from
    a *guess* near the answer first galloping either way (a few packings, or signings for a signed
    zone, not log2 of thousands); the same n whatever the path that packs the replies."""
    low, high, best = 0, count - 1, None  # the answer lies in [low, high]; low fits, or is 0
    if guess is not None and high >= 1:
        n, step = min(max(guess, 1), high), 1
        reply = fitting(n)
        if reply is not None:  # up from the guess until one does not fit
            low, best = n, reply
            while low < high:
                n = min(low + step, high)
                reply = fitting(n)
                if reply is None:
                    high = n - 1
                    break
                low, best, step = n, reply, step * 2
        else:  # down from the guess until one fits
            high = n - 1
            while high >= 1:
                n = max(high + 1 - step, 1)
                reply = fitting(n)
                if reply is not None:
                    low, best = n, reply
                    break
                high, step = n - 1, step * 2
    while low < high:
        mid = (low + high + 1) // 2
        reply = fitting(mid)
        if reply is not None:
            low, best = mid, reply
        else:
            high = mid - 1
    return best
