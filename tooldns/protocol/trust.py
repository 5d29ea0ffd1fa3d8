"""The two checks of a DNSSEC chain of trust, pure (``dns.dnssec``, no I/O), for both sides:

* :func:`ds_matches`: a DNSKEY matches a DS record (the parent's word for the child's key);
* :func:`signature_problem`: what is wrong with an RRset's signatures under a DNSKEY RRset, or
  None when one validates.

A validating resolver (:mod:`resolver_client.validate`) and a parent checking a signed child's
published summary (:mod:`tooldns.dnssec.verify`) make them alike and raise their own errors.
``dns.dnssec.validate`` needs ``cryptography`` when it runs (the ``dnssec`` extra).
"""

from __future__ import annotations

import time

import dns.dnssec
import dns.exception


def ds_matches(name, key, ds) -> bool:
    """Whether DNSKEY *key* of zone *name* (text or a dnspython name) has the digest of DS *ds*; a key
    of an algorithm or a digest type dnspython cannot compute matches nothing."""
    try:
        return dns.dnssec.make_ds(name, key, ds.digest_type) == ds
    except (dns.dnssec.UnsupportedAlgorithm, dns.exception.DNSException, ValueError):
        return False


def signature_problem(rrset, sigs, keys, what: str, now: float | None = None) -> str | None:
    """None when an RRSIG of *sigs* over *rrset* validates with the DNSKEY RRset *keys* at *now*
    (the time when None); otherwise why not, about *what*: not signed, expired, not valid yet, or
    dnspython's reason."""
    if sigs is None:
        return f"{what} is not signed"
    now = time.time() if now is None else now
    try:
        dns.dnssec.validate(rrset, sigs, {keys.name: keys}, now=now)
    except dns.dnssec.ValidationFailure as exc:
        if all(sig.expiration < now for sig in sigs):
            return f"{what}: the signature expired"
        if all(sig.inception > now for sig in sigs):
            return f"{what}: the signature is not valid yet"
        return f"{what}: {exc}"
    return None
