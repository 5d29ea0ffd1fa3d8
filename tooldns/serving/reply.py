"""Building the reply message from a lookup result: the one place flags, rcodes and OPT are set.

* AA is set on answers, NXDOMAIN and NODATA from this zone; clear on referrals and REFUSED.
* RA is always clear (authoritative only, no recursion); RD and CD are copied from the query.
* Every reply to a query that had an OPT record carries an OPT record (dnslib's ``reply()``
  does not copy it), with the intent meta option for intent-ranked results and an Extended DNS
  Error (RFC 8914) where there is something to explain.

Both paths take them from here: the full path as dnslib records (:func:`reply_for`,
:func:`error_reply`), the fast path (:mod:`tooldns.serving.fast`) as numbers and bytes
(:func:`header_flags`, :func:`opt_wire`). Truncation (TC, and the OPT record a truncated reply
keeps) is the framing's: :func:`tooldns.serving.wire.pack_reply`, and the fast path's twin of it.

    >>> reply = reply_for(request, lookup(ix, qname, qtype, intent))
    >>> header_flags(0x0100, Kind.ANSWER)   # RD copied, QR and AA set
    34048
"""

from __future__ import annotations

import struct

from dnslib import QTYPE, RCODE, RR, DNSHeader, DNSRecord, EDNSOption

from ..protocol.ede import EDE_OPTION_CODE, encode_ede
from ..protocol.meta import META_OPTION_CODE, encode_meta
from .lookup import Kind, Result
from .wire import SERVER_UDP_SIZE

BADVERS = 16  # extended rcode (RFC 6891): 12-bit value, upper 8 bits live in the OPT TTL

_RCODE = {
    Kind.ANSWER: RCODE.NOERROR,
    Kind.REFERRAL: RCODE.NOERROR,
    Kind.NODATA: RCODE.NOERROR,
    Kind.NXDOMAIN: RCODE.NXDOMAIN,
    Kind.REFUSED: RCODE.REFUSED,
}
#: the kinds of result this zone answers with authority (AA); not a referral, REFUSED or an error.
#: A tuple: ``in`` compares by identity, where a dict would hash the enum in Python on every reply
_AUTHORITATIVE = (Kind.ANSWER, Kind.NODATA, Kind.NXDOMAIN)

#: the header's flag bits (RFC 1035 4.1.1; CD: RFC 4035 3.1.6), in its 16-bit flags word
QR, AA, TC, RD, CD = 0x8000, 0x0400, 0x0200, 0x0100, 0x0010
_OPCODE = 0x7800
_OPT_HEAD = struct.Struct("!BHHIH")  # root owner, type OPT, UDP size, TTL, RDATA length


def header_flags(query_flags: int, kind: Kind | None = None) -> int:
    """The flags word (rcode 0) of the reply to a query whose flags word is *query_flags*, carrying a
    result of *kind* (None: no result, an error): QR set; the opcode, RD and CD copied; AA as the
    kind says; RA, TC, AD and Z clear."""
    return QR | query_flags & (_OPCODE | RD | CD) | (AA if kind in _AUTHORITATIVE else 0)


def opt_ttl(rcode: int, dnssec: bool = False) -> int:
    """The OPT record's TTL: extended rcode (upper 8 bits) | version 0 | flags: DO copied from a
    query a signed zone answers (*dnssec*)."""
    return ((rcode >> 4) & 0xFF) << 24 | (0x8000 if dnssec else 0)


def _options(meta: tuple[int, int, str] | None, ede: str | None) -> list[tuple[int, bytes]]:
    """The OPT record's options: the intent meta option of a ranked result, then the EDE text."""
    options = []
    if meta is not None:
        options.append((META_OPTION_CODE, encode_meta(*meta)))
    if ede:
        options.append((EDE_OPTION_CODE, encode_ede(ede)))
    return options


def opt_wire(meta: tuple[int, int, str] | None = None) -> bytes:
    """The OPT record of a ranked reply (NOERROR, DO clear) on the wire, with the meta option of
    *meta* (none: a truncated reply's), as :func:`reply_for` adds it."""
    data = b"".join(struct.pack("!HH", code, len(value)) + value for code, value in _options(meta, None))
    return _OPT_HEAD.pack(0, QTYPE.OPT, SERVER_UDP_SIZE, opt_ttl(0), len(data)) + data


def request_opt(request: DNSRecord) -> RR | None:
    return next((rr for rr in request.ar if rr.rtype == QTYPE.OPT), None)


def _skeleton(request: DNSRecord | None, header: DNSHeader | None = None, kind: Kind | None = None, answer=None,
              authority=None, additional=None) -> DNSRecord:
    h = request.header if request is not None else header
    # sections passed at construction: dnslib recounts the header once, not once per record
    return DNSRecord(DNSHeader(id=h.id if h else 0, bitmap=header_flags(h.bitmap if h else 0, kind)),
                     questions=list(request.questions) if request is not None else [],
                     rr=answer, auth=authority, ar=additional)


def _opt(rcode: int, options: list[EDNSOption], dnssec: bool = False) -> RR:
    return RR(".", QTYPE.OPT, rclass=SERVER_UDP_SIZE, ttl=opt_ttl(rcode, dnssec), rdata=options)


def _finish(reply: DNSRecord, rcode: int, edns: bool, options: list[EDNSOption], dnssec: bool = False) -> DNSRecord:
    reply.header.rcode = rcode & 0xF
    if edns:
        reply.add_ar(_opt(rcode, options, dnssec))
    return reply


def reply_for(request: DNSRecord, result: Result, dnssec: bool = False) -> DNSRecord:
    """The reply to *request* carrying *result*; *dnssec*: the DO bit is set in its OPT record (RFC 3225)."""
    reply = _skeleton(request, kind=result.kind, answer=list(result.answer), authority=list(result.authority),
                      additional=list(result.additional))
    options = [EDNSOption(code, data) for code, data in _options(result.meta, result.ede)]
    return _finish(reply, _RCODE[result.kind], request_opt(request) is not None, options, dnssec)


def error_reply(request: DNSRecord | None, rcode: int, ede: str | None = None,
                header: DNSHeader | None = None, edns: bool | None = None) -> DNSRecord:
    """A reply with no records: FORMERR, SERVFAIL, NOTIMP, REFUSED or BADVERS, with optional EDE text.

    *request* may be None when only the *header* of a malformed message could be read.
    """
    reply = _skeleton(request, header)
    if edns is None:
        edns = request is not None and request_opt(request) is not None
    options = [EDNSOption(code, data) for code, data in _options(None, ede)] if edns else []
    return _finish(reply, rcode, edns, options)


def notify_reply(request: DNSRecord) -> DNSRecord:
    """The acknowledgement of a NOTIFY (RFC 1996): NOERROR, the opcode NOTIFY and AA set, RA clear and
    the OPT record kept, as every reply of this server."""
    reply = error_reply(request, RCODE.NOERROR)
    reply.header.aa = 1
    return reply
