"""Checking a signed child's data against the DS its parent holds: pure, no I/O (``dns.dnssec.validate``).

A parent that holds a DS for a child (the ``ds:`` of its delegation) believes what the child
publishes for it (its ``_summary.`` record, :mod:`tooldns.serving.summaries`) only when it is
signed: the child's DNSKEY RRset must hold a key matching one of those DS records and be signed by
it (:func:`trusted_keys`), and the data must be signed by that DNSKEY RRset (:func:`verify_rrset`).
Anything else (no DNSKEY RRset, no key matching the DS, a missing, wrong, expired or not yet valid
signature) raises :class:`~tooldns.exceptions.DNSSECError` saying what. The messages are replies
as dnspython parses them, asked with the DO bit.

    >>> keys = trusted_keys("hko.weather.tools.", ("40158 15 2 0699...",), dnskey_reply)
    >>> verify_rrset(txt_reply, "_summary.hko.weather.tools.", dns.rdatatype.TXT, keys)   # the TXT RRset
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import dns.dnssec
import dns.exception
import dns.message
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from ..exceptions import DNSSECError

_IN = dns.rdataclass.IN


def _ds_records(zone: str, ds_texts: Sequence[str]) -> list:
    try:
        return [dns.rdata.from_text(_IN, dns.rdatatype.DS, text) for text in ds_texts]
    except (dns.exception.DNSException, ValueError) as exc:
        raise DNSSECError(f"the DS of {zone} held by its parent cannot be read ({exc})") from None


def _matches(name: dns.name.Name, key, ds) -> bool:
    try:
        return dns.dnssec.make_ds(name, key, ds.digest_type) == ds
    except (dns.dnssec.UnsupportedAlgorithm, dns.exception.DNSException, ValueError):
        return False


def _validate(rrset: dns.rrset.RRset, sigs, keys: dns.rrset.RRset, what: str, now: float | None) -> None:
    if sigs is None:
        raise DNSSECError(f"{what} is not signed")
    now = time.time() if now is None else now
    try:
        dns.dnssec.validate(rrset, sigs, {keys.name: keys}, now=now)
    except dns.dnssec.ValidationFailure as exc:
        if all(sig.expiration < now for sig in sigs):
            raise DNSSECError(f"{what}: the signature expired") from None
        if all(sig.inception > now for sig in sigs):
            raise DNSSECError(f"{what}: the signature is not valid yet") from None
        raise DNSSECError(f"{what}: {exc}") from None


def trusted_keys(zone: str, ds_texts: Sequence[str], reply: dns.message.Message,
                 now: float | None = None) -> dns.rrset.RRset:
    """*zone*'s DNSKEY RRset from *reply* (its answer to a DNSKEY query with DO), once a key matching
    one of *ds_texts* (DS RDATA, as the parent's zone file holds them) is found in it and signs it."""
    name = dns.name.from_text(zone)
    ds = _ds_records(zone, ds_texts)
    keys = reply.get_rrset(reply.answer, name, _IN, dns.rdatatype.DNSKEY)
    if keys is None:
        raise DNSSECError(f"{zone} serves no DNSKEY RRset, but its parent holds a DS for it")
    entry = [k for k in keys if any(_matches(name, k, d) for d in ds)]
    if not entry:
        raise DNSSECError(f"no DNSKEY of {zone} matches the DS its parent holds")
    sigs = reply.get_rrset(reply.answer, name, _IN, dns.rdatatype.RRSIG, dns.rdatatype.DNSKEY)
    _validate(keys, sigs, dns.rrset.from_rdata_list(name, keys.ttl, entry), f"the DNSKEY RRset of {zone}", now)
    return keys


def verify_rrset(reply: dns.message.Message, owner: str, rdtype: int, keys: dns.rrset.RRset,
                 now: float | None = None) -> dns.rrset.RRset:
    """The (*owner*, *rdtype*) RRset of *reply*'s answer, once its RRSIG validates with *keys*."""
    name = dns.name.from_text(owner)
    what = f"{owner} {dns.rdatatype.to_text(rdtype)}"
    rrset = reply.get_rrset(reply.answer, name, _IN, rdtype)
    if rrset is None:
        raise DNSSECError(f"{what}: no such RRset in the reply")
    _validate(rrset, reply.get_rrset(reply.answer, name, _IN, dns.rdatatype.RRSIG, rdtype), keys, what, now)
    return rrset
