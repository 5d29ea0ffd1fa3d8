"""DNSSEC at answer time: a lookup result made secure for a query with the DO bit (online signing).

The keys and the signing itself are :mod:`tooldns.dnssec`'s; this module decides what a reply of a
signed zone carries.

:func:`signed_lookup` stands in for :func:`tooldns.serving.lookup.lookup` in a zone that has keys.
It answers what only a signed zone holds (DNSKEY at the apex, with or without DO; the DS of a
child, at the parent's side of the cut), then, for a query with DO, :func:`secure` adds to the
decided :class:`~tooldns.serving.lookup.Result`:

* an RRSIG after every RRset of the zone's own data, in every section: SRV, TXT, CNAME, SOA, NS
  at the apex, A/AAAA of in-zone name servers, DNSKEY. Intent-dependent RRsets (TTL 0) are signed
  as they are, with RRSIG TTL 0;
* in a referral, after each child's NS RRset, the child's DS RRset and its RRSIG, or for a child
  without DS a signed NSEC at the child's name whose type bitmap has NS and no DS (an insecure
  delegation). The ranking TXT records of a referral, owned by each child's name (below the cut),
  are signed by the parent too: a ToolDNS extension (a validator would read them as glue), so
  that a resolver can trust the rank and ``kind`` it routes by (``docs/dnssec.md``). Glue
  addresses are not signed, as in any DNS zone;
* negative answers: compact denial of existence (RFC 9824, "black lies" as online signers do): one
  NSEC at the query name whose next name is ``\\000.<name>``, covering nothing else, signed, with
  the signed SOA. A name that does not exist is answered NOERROR with the bitmap ``RRSIG NSEC
  NXNAME``; a name without the asked type gets its own types in the bitmap. Nothing about the rest
  of the zone is revealed (no zone walking).

    >>> result = signed_lookup(index, "hko-climate._http._tcp.hko.weather.tools.", QTYPE.SRV, None, None, do=True)
    >>> [QTYPE[rr.rtype] for rr in result.answer]
    ['SRV', 'RRSIG']
"""

from __future__ import annotations

from functools import lru_cache

import dns.exception
import dns.name
import dns.rdata
from dnslib import QTYPE, RD, RR

from ..dnssec.signer import RRSIG, ZoneSigner, owner_label
from ..protocol import names
from .lookup import Kind, Result, lookup

DS = 43
NSEC = 47
DNSKEY = 48
NXNAME = 128
_SRV, _TXT, _CNAME, _SOA, _NS, _A, _AAAA = (QTYPE.SRV, QTYPE.TXT, QTYPE.CNAME, QTYPE.SOA, QTYPE.NS, QTYPE.A,
                                           QTYPE.AAAA)


@lru_cache(maxsize=4096)
def ds_records(child: str, ds: tuple[str, ...], ttl: int) -> tuple[RR, ...]:
    """A child's DS RRset as dnslib records, from the RDATA texts of the parent's zone file."""
    return tuple(RR(child, DS, ttl=ttl, rdata=RD(dns.rdata.from_text("IN", "DS", text).to_wire())) for text in ds)


def successor(name: dns.name.Name) -> dns.name.Name | None:
    """The name right after *name* in DNSSEC's canonical order (RFC 4471, 3.1.2): ``\\000.<name>``
    when there is room; else its first label one octet longer (a ``\\000`` appended); else, for a
    name of 255 octets, its first label's last octet raised (octets 0xFF dropped first; A to Z sort
    as a to z, so they are stepped over). None only when the first label is all 0xFF octets."""
    labels = name.labels
    for make in (lambda: (b"\x00", *labels), lambda: (labels[0] + b"\x00", *labels[1:])):
        try:
            return dns.name.Name(make())
        except (dns.name.NameTooLong, dns.name.LabelTooLong):
            pass
    first = labels[0].lower().rstrip(b"\xff")
    if not first:
        return None
    raised = first[-1] + 1
    return dns.name.Name((first[:-1] + bytes([0x5B if 0x41 <= raised <= 0x5A else raised]), *labels[1:]))


@lru_cache(maxsize=4096)
def _nsec_rdata(owner: str, types: tuple[int, ...]) -> RD | None:
    """The RDATA of a compact NSEC at *owner*: next name its :func:`successor` (``\\000.<owner>`` but
    for the longest names), bitmap *types*; None when there is none."""
    try:
        following = successor(dns.name.from_text(owner))
    except dns.exception.DNSException:  # a name dnspython refuses: no proof, as for no successor
        return None
    if following is None:
        return None
    text = " ".join(QTYPE.get(t) if t not in (NXNAME,) else "NXNAME" for t in sorted(types))
    return RD(dns.rdata.from_text("IN", "NSEC", f"{following.to_text()} {text}").to_wire())


def signed_lookup(ix, qname: str, qtype: int, intent, vector, do: bool) -> Result:
    """The result of (*qname*, *qtype*) in signed zone *ix* (its ``signer`` set), secured when *do*."""
    signer: ZoneSigner = ix.signer
    result = _dnssec_data(ix, signer, qname, qtype)
    if result is None:
        result = lookup(ix, qname, qtype, intent, vector)
    return secure(ix, signer, qname, qtype, result) if do else result


def _dnssec_data(ix, signer: ZoneSigner, qname: str, qtype: int) -> Result | None:
    """DNSKEY at the apex; DS (or its absence) at a child's name, answered by the parent."""
    if qtype == DNSKEY and qname == ix.origin:
        return Result(Kind.ANSWER, answer=signer.dnskey_records(ix.ttl))
    if qtype == DS:
        child = ix.child_for(qname)
        if child is not None and child.name == qname:
            if child.ds:
                return Result(Kind.ANSWER, answer=list(ds_records(child.name, child.ds, ix.ttl)))
            return Result(Kind.NODATA, authority=[ix.negative_soa_rr])
    return None


def types_at(ix, name: str) -> set[int]:
    """The types a name of zone *ix* holds, for an NSEC bitmap (RRSIG and NSEC included)."""
    out = {RRSIG, NSEC}
    child = ix.child_for(name)
    if child is not None:  # the cut itself (below it, nothing is this zone's)
        return out | {_NS} | ({DS} if child.ds else set()) if child.name == name else out
    out.update(ix.rrsets(name) or {})
    if name == ix.origin:
        out.add(DNSKEY)
    try:
        cur = names.parse_cursor(name)
    except Exception:
        cur = None
    if cur is not None and cur.zone == ix.origin and (cur.service, cur.transport) in ix.tools:
        out.add(_SRV if cur.expanded else _CNAME)
    return out


def _groups(records: list) -> list[tuple[str, int, int, list[RR]]]:
    """*records* as RRsets (owner, type, TTL, records), in order of first appearance."""
    groups: dict[tuple[str, int], list[RR]] = {}
    for rr in records:
        groups.setdefault((str(rr.rname).lower(), rr.rtype), []).append(rr)
    return [(owner, rtype, rrs[0].ttl, rrs) for (owner, rtype), rrs in groups.items()]


def _signed(signer: ZoneSigner, records: list, keep=lambda owner, rtype: True) -> list:
    """*records* with an RRSIG after each RRset that *keep* says is signed."""
    out: list = []
    for owner, rtype, ttl, rrs in _groups(records):
        out.extend(rrs)
        if rtype not in (RRSIG,) and keep(owner, rtype):
            out.extend(signer.rrsigs(owner, rtype, ttl, rrs))
    return out


def _nsec(ix, signer: ZoneSigner, owner: str, types: set[int]) -> list:
    rdata = _nsec_rdata(owner, tuple(sorted(types)))
    if rdata is None:
        return []
    rr = RR(owner_label(owner), NSEC, ttl=ix.negative_soa_rr.ttl, rdata=rdata)
    return [rr, *signer.rrsigs(owner, NSEC, rr.ttl, [rr])]


def secure(ix, signer: ZoneSigner, qname: str, qtype: int, result: Result) -> Result:
    """*result* with the RRSIGs, DS and NSEC records a DO query gets (see the module docstring)."""
    kind = result.kind
    if kind == Kind.REFUSED:
        return result
    origin = ix.origin

    def in_zone(owner: str, rtype: int) -> bool:
        child = ix.child_for(owner)
        return child is None or (rtype in (DS, NSEC) and owner == child.name)

    answer = _signed(signer, result.answer, in_zone)
    if kind == Kind.REFERRAL:
        authority = []
        for owner, rtype, ttl, rrs in _groups(result.authority):
            authority.extend(rrs)
            if owner == origin:  # the zone's own NS ("self": its own tools are asked next)
                authority.extend(signer.rrsigs(owner, rtype, ttl, rrs))
                continue
            child = ix.child_for(owner)
            if rtype != _NS or child is None or child.name != owner:
                continue
            if child.ds:
                ds = list(ds_records(child.name, child.ds, ix.ttl))
                authority.extend(ds + signer.rrsigs(owner, DS, ix.ttl, ds))
            else:
                authority.extend(_nsec(ix, signer, owner, {_NS, RRSIG, NSEC}))
        additional = _signed(signer, result.additional,
                             lambda owner, rtype: rtype == _TXT or ix.child_for(owner) is None)
        return Result(kind, answer=answer, authority=authority, additional=additional, meta=result.meta, ede=result.ede)
    authority = _signed(signer, result.authority, in_zone)
    nodata_after_cname = kind == Kind.ANSWER and any(rr.rtype == _SOA for rr in result.authority)
    if kind in (Kind.NXDOMAIN, Kind.NODATA) or nodata_after_cname:
        # the name denied: the query's, or the end of its CNAME chain
        denied = qname
        for rr in result.answer:
            if rr.rtype == _CNAME:
                denied = str(rr.rdata.label).lower()
        if kind == Kind.NXDOMAIN:
            authority.extend(_nsec(ix, signer, denied, {RRSIG, NSEC, NXNAME}))
            kind = Kind.NODATA  # compact denial: NOERROR (RFC 9824)
        elif names.is_subdomain(denied, origin):
            authority.extend(_nsec(ix, signer, denied, types_at(ix, denied) - {qtype}))
    additional = _signed(signer, result.additional, in_zone)
    return Result(kind, answer=answer, authority=authority, additional=additional, meta=result.meta, ede=result.ede)

