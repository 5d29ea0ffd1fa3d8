"""What a server's observers (:mod:`.metrics`, :mod:`.querylog`) read of a query and its reply, from bytes.

A :class:`tooldns.serving.server.DNSServer` given observers (``server.observe(...)``) calls each
with the query bytes, the reply bytes, the transport, the client, the seconds ``handle`` took and
whether the packet cache answered. Observers read what they report from those bytes with these
pure functions, without dnslib, so that watching a query costs a small fraction of answering it:

* :func:`question_end`: where the question's name ends (its type follows), 0 when unreadable;
* :func:`qtype_of` and :func:`rcode_of`: the question's type and the reply's rcode (BADVERS, an
  extended rcode, read from the reply's OPT record);
* :func:`results_of`: how many results a reply carries (children referred to, or answer records
  other than CNAME);
* :class:`ZoneOf`: the zone that answered, on a server hosting one zone or several
  (:mod:`.multizone`), remembered per question name.

    >>> end = question_end(query)
    >>> type_name(qtype_of(query, end)), rcode_name(rcode_of(reply)), zone_of(query, end)
    ('SRV', 'NOERROR', 'weather.tools.')
"""

from __future__ import annotations

import struct

from .multizone import MultiZoneResolver, question_name
from .wire import skip_name

#: names of the types a metric label shows; every other type is counted as ``other`` there, so
#: that odd queries cannot make series without bound (CoreDNS's ``monitor`` types, plus SRV)
TYPE_NAMES = {1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 12: "PTR", 15: "MX", 16: "TXT", 28: "AAAA", 33: "SRV",
              35: "NAPTR", 43: "DS", 48: "DNSKEY", 52: "TLSA", 64: "SVCB", 65: "HTTPS", 99: "SPF", 251: "IXFR",
              252: "AXFR", 255: "ANY"}
#: names of the rcodes a server sends (BADVERS: 16, extended, RFC 6891)
RCODE_NAMES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED", 9: "NOTAUTH",
               16: "BADVERS"}
#: question names :class:`ZoneOf` remembers per server before it starts afresh
MEMO_SIZE = 4096

_COUNTS = struct.Struct("!HHHH")
_RR = struct.Struct("!HHIH")
_CNAME, _NS, _OPT = 5, 2, 41


def question_end(data: bytes) -> int:
    """Where the first question's name ends in *data*, just past its root label (its type and class
    follow); 0 when there is no question or its name is compressed, malformed or cut short."""
    if len(data) < 17 or not (data[4] or data[5]):  # header, root name, type and class; QDCOUNT 0
        return 0
    pos, end = 12, len(data) - 4
    while pos < end:
        length = data[pos]
        if length == 0:
            return pos + 1
        if length > 63:  # a pointer or an extended label type: not in a query a server answers
            return 0
        pos += length + 1
    return 0


def qtype_of(data: bytes, end: int) -> int | None:
    """The type of the question whose name ends at *end* (:func:`question_end`); None without one."""
    return (data[end] << 8 | data[end + 1]) if end else None


def type_name(qtype: int | None, other: str = "other") -> str:
    """The type's name for a metric label; *other* for types not in :data:`TYPE_NAMES` (and None)."""
    return TYPE_NAMES.get(qtype, other) if qtype is not None else other


def rcode_name(rcode: int) -> str:
    return RCODE_NAMES.get(rcode) or f"RCODE{rcode}"


def _records(wire: bytes):
    """(section, owner bytes, type, class, ttl) of each record of *wire* (0 answer, 1 authority,
    2 additional); stops quietly where the message stops making sense."""
    if len(wire) < 12:
        return
    qd, an, ns, ar = _COUNTS.unpack_from(wire, 4)
    try:
        pos = 12
        for _ in range(qd):
            pos = skip_name(wire, pos) + 4
        for section, count in enumerate((an, ns, ar)):
            for _ in range(count):
                start = pos
                pos = skip_name(wire, pos)
                rtype, rclass, ttl, rdlength = _RR.unpack_from(wire, pos)
                yield section, wire[start:pos], rtype, rclass, ttl
                pos += 10 + rdlength
    except (ValueError, struct.error):
        return


def rcode_of(wire: bytes) -> int:
    """The reply's rcode: the header's four bits, with the OPT record's upper bits when the header
    says NOERROR and the reply carries an OPT record (BADVERS); SERVFAIL for a reply too short."""
    if len(wire) < 4:
        return 2
    rcode = wire[3] & 0x0F
    # only replies without records in answer or authority can carry an extended rcode; they are rare
    if rcode == 0 and len(wire) >= 12 and wire[11] and not any(wire[6:10]):
        for section, _, rtype, _, ttl in _records(wire):
            if section == 2 and rtype == _OPT:
                return (ttl >> 24) << 4
    return rcode


def results_of(wire: bytes) -> int:
    """How many results a reply carries: the answer's records other than CNAME (the tools of an
    intent search, the records of any other query); for a referral, the children referred to (one
    per distinct name of the authority's NS records)."""
    if len(wire) < 12:
        return 0
    answers, children = 0, set()
    for section, owner, rtype, _, _ in _records(wire):
        if section == 0 and rtype != _CNAME:
            answers += 1
        elif section == 1 and rtype == _NS:
            children.add(owner.lower())
        elif section == 2:
            break
    return answers or len(children)


class ZoneOf:
    """Which zone of a server answers a query: the server's only zone, or on a server hosting several
    (:class:`tooldns.serving.multizone.MultiZoneResolver`) the zone its ``member_for`` picks for the
    question's name, remembered per name (a server sees a few cursor names over and over); found
    without loading a zone (:meth:`~tooldns.serving.multizone.MultiZoneResolver.zone_for`). Queries
    without a readable question name are the topmost zone's, which answers them (``zone_of.top``).

    Call it with the query bytes and :func:`question_end`."""

    def __init__(self, resolver) -> None:
        several = isinstance(resolver, MultiZoneResolver)
        self._zone_for = resolver.zone_for if several else None
        top = resolver.top if several else resolver
        #: the zone that answers queries without a readable name (the only zone, or the topmost)
        self.top: str = top.source.index.origin  # a reload never changes a zone's origin
        self._memo: dict[bytes, str] = {}

    def __call__(self, data: bytes, end: int) -> str:
        if self._zone_for is None or not end:
            return self.top
        raw = data[12:end]
        zone = self._memo.get(raw)
        if zone is None:
            name = question_name(data)
            zone = self._zone_for(name) if name else self.top
            if len(self._memo) >= MEMO_SIZE:
                self._memo.clear()
            self._memo[raw] = zone
        return zone
