"""Building the reply message from a lookup result: the one place flags, rcodes and OPT are set.

* AA is set on answers, NXDOMAIN and NODATA from this zone; clear on referrals and REFUSED.
* RA is always clear (authoritative only, no recursion); RD and CD are copied from the query.
* Every reply to a query that had an OPT record carries an OPT record (dnslib's ``reply()``
  does not copy it), with the intent meta option for intent-ranked results and an Extended DNS
  Error (RFC 8914) where there is something to explain.

    >>> reply = reply_for(request, lookup(ix, qname, qtype, intent))
"""

from __future__ import annotations

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
_AA = {Kind.ANSWER: 1, Kind.NODATA: 1, Kind.NXDOMAIN: 1, Kind.REFERRAL: 0, Kind.REFUSED: 0}


def request_opt(request: DNSRecord) -> RR | None:
    return next((rr for rr in request.ar if rr.rtype == QTYPE.OPT), None)


def _skeleton(request: DNSRecord | None, header: DNSHeader | None = None, answer=None, authority=None,
              additional=None) -> DNSRecord:
    h = request.header if request is not None else header
    # sections passed at construction: dnslib recounts the header once, not once per record
    return DNSRecord(DNSHeader(id=h.id if h else 0, qr=1, opcode=h.opcode if h else 0,
                               rd=h.rd if h else 0, cd=h.cd if h else 0, ra=0, aa=0),
                     questions=list(request.questions) if request is not None else [],
                     rr=answer, auth=authority, ar=additional)


def _opt(rcode: int, options: list[EDNSOption], dnssec: bool = False) -> RR:
    # OPT TTL: extended rcode (upper 8 bits) | version 0 | flags: DO copied from a query a signed zone answers
    return RR(".", QTYPE.OPT, rclass=SERVER_UDP_SIZE, ttl=((rcode >> 4) & 0xFF) << 24 | (0x8000 if dnssec else 0),
              rdata=options)


def _finish(reply: DNSRecord, rcode: int, edns: bool, options: list[EDNSOption], dnssec: bool = False) -> DNSRecord:
    reply.header.rcode = rcode & 0xF
    if edns:
        reply.add_ar(_opt(rcode, options, dnssec))
    return reply


def reply_for(request: DNSRecord, result: Result, dnssec: bool = False) -> DNSRecord:
    """The reply to *request* carrying *result*; *dnssec*: the DO bit is set in its OPT record (RFC 3225)."""
    reply = _skeleton(request, answer=list(result.answer), authority=list(result.authority),
                      additional=list(result.additional))
    reply.header.aa = _AA[result.kind]
    options = []
    if result.meta is not None:
        flags, ttl, scorer = result.meta
        options.append(EDNSOption(META_OPTION_CODE, encode_meta(flags, ttl, scorer)))
    if result.ede:
        options.append(EDNSOption(EDE_OPTION_CODE, encode_ede(result.ede)))
    return _finish(reply, _RCODE[result.kind], request_opt(request) is not None, options, dnssec)


def error_reply(request: DNSRecord | None, rcode: int, ede: str | None = None,
                header: DNSHeader | None = None, edns: bool | None = None) -> DNSRecord:
    """A reply with no records: FORMERR, SERVFAIL, NOTIMP, REFUSED or BADVERS, with optional EDE text.

    *request* may be None when only the *header* of a malformed message could be read.
    """
    reply = _skeleton(request, header)
    if edns is None:
        edns = request is not None and request_opt(request) is not None
    options = [EDNSOption(EDE_OPTION_CODE, encode_ede(ede))] if ede and edns else []
    return _finish(reply, rcode, edns, options)
