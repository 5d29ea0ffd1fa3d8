"""DNSSEC validation of a walk's replies: pure computation, no I/O (``dns.dnssec.validate``).

The walk (:mod:`.walk`) asks each zone it visits for its DNSKEY RRset besides its search, and hands
every reply here. :class:`Validator` keeps the chain of trust from one anchor down:

* the root zone's DNSKEY RRset is secure when a key of it matches the trust anchor (a DNSKEY, or a
  DS) and that key signs the set;
* a child's DNSKEY RRset is secure when a key matches a DS RRset its parent served, signed by the
  parent's keys, in the referral to it, and that key signs the set. A referral that carries instead
  a signed NSEC at the child's name without the DS bit proves the delegation insecure: the child's
  data is ``insecure`` (neither trusted nor refused). Anything else below a secure parent (no DS
  and no proof, a signature that fails, a DS matching no key) is ``bogus``;
* a zone's answers (SRV, the CNAME of a leaf's cursor name, each tool's TXT) are secure when signed
  by its secure keys; so are the ranking TXT records of its referrals (the parent signs them: a
  ToolDNS extension, ``docs/dnssec.md``);
* that a name has no RRset of a type (the published walk, :mod:`.plan`, when a zone publishes none)
  is proven by an NSEC signed by the zone's secure keys: owned by the name without the type in its
  bitmap (the compact denial ToolDNS servers give, RFC 9824), or owned by a name before it whose
  next name comes after it (RFC 4035).

Anchors are read from text in zone-file form, as ``dig DNSKEY tools. +norec`` or ``tooldns dnssec
show`` print them: ``tools. 3600 IN DNSKEY 257 3 15 <key>`` or ``tools. IN DS 12345 15 2 <digest>``
(``;`` and ``#`` start comments).

    >>> anchor = read_anchor(open("root.key").read())
    >>> v = Validator(anchor)
    >>> v.take_dnskey("tools.", reply)      # 'secure'
    >>> v.check(reply, "tools.", [(name, dns.rdatatype.SRV)])   # raises Bogus
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import dns.exception
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from .exceptions import ResolverError

# cryptography deprecates DSA (from 51.0) and dnspython's DNSSEC algorithms name its DSA classes when
# imported: a warning on stderr at the first validation, whatever the zones are signed with
warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"dns\.dnssecalgs\.dsa")

SECURE, INSECURE, BOGUS = "secure", "insecure", "bogus"
_DNSKEY, _DS, _NSEC, _RRSIG, _NS = (dns.rdatatype.DNSKEY, dns.rdatatype.DS, dns.rdatatype.NSEC, dns.rdatatype.RRSIG,
                                    dns.rdatatype.NS)


class Bogus(Exception):
    """Data that should validate does not; the message says why."""


@dataclass
class TrustAnchor:
    """The root zone's key(s): DNSKEY and/or DS RDATA."""

    zone: str
    dnskeys: list = field(default_factory=list)
    ds: list = field(default_factory=list)


def read_anchor(text: str) -> TrustAnchor:
    """A trust anchor from zone-file lines of one zone (DNSKEY and/or DS); ResolverError when none is there."""
    zone, dnskeys, ds = None, [], []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(";", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        tokens = line.split()
        kinds = [i for i, t in enumerate(tokens) if t.upper() in ("DNSKEY", "DS")]
        if not kinds or kinds[0] == 0:
            raise ResolverError(f"trust anchor line {number}: expected 'NAME [TTL] [IN] DNSKEY ...' or '... DS ...'")
        i = kinds[0]
        owner = tokens[0].lower().rstrip(".") + "."
        if zone not in (None, owner):
            raise ResolverError(f"trust anchor line {number}: {owner} is another zone than {zone}")
        zone = owner
        try:
            rdata = dns.rdata.from_text("IN", tokens[i].upper(), " ".join(tokens[i + 1:]))
        except (dns.exception.DNSException, ValueError) as exc:
            raise ResolverError(f"trust anchor line {number}: {exc}") from None
        (dnskeys if rdata.rdtype == _DNSKEY else ds).append(rdata)
    if zone is None:
        raise ResolverError("the trust anchor holds no DNSKEY or DS record")
    return TrustAnchor(zone, dnskeys, ds)


def load_anchor(path: str) -> TrustAnchor:
    try:
        with open(path, encoding="utf-8") as fh:
            return read_anchor(fh.read())
    except OSError as exc:
        raise ResolverError(f"cannot read the trust anchor {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ResolverError(f"the trust anchor {path} is not text (byte {exc.start} is no UTF-8)") from exc


def rrsets(records) -> tuple[dict, dict]:
    """A section's records (:class:`resolver_client.message.Record`) as RRsets by (name, type), and
    their RRSIGs by (name, covered type)."""
    data: dict[tuple[str, int], dns.rrset.RRset] = {}
    sigs: dict[tuple[str, int], dns.rrset.RRset] = {}
    for r in records:
        if r.rdclass != dns.rdataclass.IN:  # no zone's data: a server's stray CH record proves nothing
            continue
        if r.rdtype == _RRSIG:
            key, into = (r.name, int(r.rdata.type_covered)), sigs
        else:
            key, into = (r.name, r.rdtype), data
        rrset = into.get(key)
        if rrset is None:
            rrset = into[key] = dns.rrset.RRset(dns.name.from_text(r.name), dns.rdataclass.IN, r.rdtype,
                                                r.rdata.covers() if r.rdtype == _RRSIG else dns.rdatatype.NONE)
        rrset.add(r.rdata, r.ttl)
    return data, sigs


#: what dnspython raises on records it cannot make RRsets of (a name too long once its escapes are read,
#: records of one name and type that do not agree): such a reply is bogus, never a crash
_UNREADABLE = (dns.exception.DNSException, ValueError)


@dataclass
class _Zone:
    status: str = ""  # "" until its DNSKEY RRset is taken
    keys: dns.rrset.RRset | None = None
    reason: str = ""
    #: from the parent's referral: (SECURE, DS RRset), (INSECURE, None) or (BOGUS, reason)
    delegation: tuple | None = None


class Validator:
    """The chain of trust of one walk (see the module docstring); *now* fixes the clock (tests)."""

    def __init__(self, anchor: TrustAnchor, now: float | None = None) -> None:
        self.anchor = anchor
        self.now = now
        self.zones: dict[str, _Zone] = {}

    def _zone(self, name: str) -> _Zone:
        return self.zones.setdefault(name, _Zone())

    def status(self, zone: str) -> str:
        """SECURE, INSECURE, BOGUS, or "" while its keys are not known."""
        return self.zones.get(zone, _Zone()).status

    def reason(self, zone: str) -> str:
        return self.zones.get(zone, _Zone()).reason

    def _validate(self, rrset, sigs, keys, what: str) -> None:
        if sigs is None:
            raise Bogus(f"{what} is not signed")
        import dns.dnssec  # with cryptography, a third of the client's import time: loaded when validating

        now = self.now if self.now is not None else time.time()
        try:
            dns.dnssec.validate(rrset, sigs, {keys.name: keys}, now=now)
        except dns.dnssec.ValidationFailure as exc:
            if all(sig.expiration < now for sig in sigs):
                raise Bogus(f"{what}: the signature expired") from None
            if all(sig.inception > now for sig in sigs):
                raise Bogus(f"{what}: the signature is not valid yet") from None
            raise Bogus(f"{what}: {exc}") from None

    # -- keys --
    def take_dnskey(self, zone: str, records) -> str:
        """Take *zone*'s DNSKEY reply (its answer section); the zone's status after."""
        z = self._zone(zone)
        try:
            z.status, z.keys = self._keys(zone, z, records)
        except Bogus as exc:
            z.status, z.keys, z.reason = BOGUS, None, str(exc)
        except _UNREADABLE as exc:
            z.status, z.keys, z.reason = BOGUS, None, f"records dnspython cannot take ({exc})"
        return z.status

    def fail_keys(self, zone: str, why: str) -> None:
        """No DNSKEY reply came for *zone*: its data cannot be validated."""
        z = self._zone(zone)
        if z.delegation is not None and z.delegation[0] == INSECURE:
            z.status = INSECURE
        else:
            z.status, z.reason = BOGUS, f"no DNSKEY RRset ({why})"

    def _keys(self, zone: str, z: _Zone, records) -> tuple[str, dns.rrset.RRset | None]:
        if zone == self.anchor.zone:
            trusted = self.anchor
        elif z.delegation is None:
            raise Bogus(f"no referral to {zone} was validated")
        elif z.delegation[0] == INSECURE:
            return INSECURE, None
        elif z.delegation[0] == BOGUS:
            raise Bogus(z.delegation[1])
        else:
            trusted = TrustAnchor(zone, [], list(z.delegation[1]))
        data, sigs = rrsets(records)
        keys = data.get((zone, _DNSKEY))
        if keys is None:
            raise Bogus(f"{zone} served no DNSKEY RRset")
        entry = [k for k in keys if k in trusted.dnskeys or any(_matches(zone, k, ds) for ds in trusted.ds)]
        if not entry:
            raise Bogus(f"no DNSKEY of {zone} matches {'the trust anchor' if zone == self.anchor.zone else 'its DS'}")
        rrsig = sigs.get((zone, _DNSKEY))
        entry_set = dns.rrset.from_rdata_list(keys.name, keys.ttl, entry)
        self._validate(keys, rrsig, entry_set, f"the DNSKEY RRset of {zone}")
        return SECURE, keys

    # -- data --
    def check(self, zone: str, section, wanted: list[tuple[str, int]]) -> None:
        """Validate the RRsets *wanted* ((name, type) in *section*, a list of records) with *zone*'s
        keys; nothing to do for an insecure zone; Bogus otherwise."""
        z = self.zones.get(zone)
        if z is None or z.status == INSECURE:
            return
        if z.status != SECURE:
            raise Bogus(z.reason or f"the keys of {zone} are not known")
        try:
            data, sigs = rrsets(section)
            for key in wanted:
                rrset = data.get(key)
                if rrset is not None:
                    self._validate(rrset, sigs.get(key), z.keys, f"{key[0]} {dns.rdatatype.to_text(key[1])}")
        except _UNREADABLE as exc:  # fail closed: what cannot be checked is not secure
            raise Bogus(f"records dnspython cannot take ({exc})") from None

    def deny(self, zone: str, section, name: str, rdtype: int) -> None:
        """Check that *section* (a negative reply's authority) proves that *name* has no *rdtype* RRset,
        with *zone*'s keys (see the module docstring); nothing to do for an insecure zone; Bogus otherwise."""
        z = self.zones.get(zone)
        if z is None or z.status == INSECURE:
            return
        if z.status != SECURE:
            raise Bogus(z.reason or f"the keys of {zone} are not known")
        try:
            data, sigs = rrsets(section)
            target = dns.name.from_text(name)
            for (owner, rtype), rrset in data.items():
                if rtype == _NSEC and _proves(rrset, target, rdtype):
                    self._validate(rrset, sigs.get((owner, _NSEC)), z.keys, f"the NSEC of {owner}")
                    return
        except _UNREADABLE as exc:  # fail closed, as check() does
            raise Bogus(f"records dnspython cannot take ({exc})") from None
        raise Bogus(f"no NSEC proves that {name} has no {dns.rdatatype.to_text(rdtype)} record")

    def delegate(self, parent: str, child: str, authority) -> str:
        """The referral from *parent* to *child* (its authority section): what it proves of the child's
        DS; remembered for the child's keys, and returned (SECURE, INSECURE or BOGUS)."""
        c = self._zone(child)
        p = self.zones.get(parent)
        if p is None or p.status == INSECURE:
            c.delegation = (INSECURE, None)
            return INSECURE
        try:
            if p.status != SECURE:
                raise Bogus(p.reason or f"the keys of {parent} are not known")
            data, sigs = rrsets(authority)
            ds = data.get((child, _DS))
            if ds is not None:
                self._validate(ds, sigs.get((child, _DS)), p.keys, f"the DS of {child}")
                c.delegation = (SECURE, ds)
                return SECURE
            nsec = data.get((child, _NSEC))
            if nsec is None:
                raise Bogus(f"the referral to {child} has neither a DS nor a proof that there is none")
            self._validate(nsec, sigs.get((child, _NSEC)), p.keys, f"the NSEC of {child}")
            bits = nsec[0].windows
            if _has(bits, _DS) or not _has(bits, _NS):
                raise Bogus(f"the NSEC of {child} does not prove an insecure delegation")
            c.delegation = (INSECURE, None)
            return INSECURE
        except Bogus as exc:
            c.delegation = (BOGUS, str(exc))
            return BOGUS
        except _UNREADABLE as exc:
            c.delegation = (BOGUS, f"records dnspython cannot take ({exc})")
            return BOGUS


def _matches(zone: str, key, ds) -> bool:
    import dns.dnssec

    try:
        return dns.dnssec.make_ds(zone, key, ds.digest_type) == ds
    except (dns.dnssec.UnsupportedAlgorithm, dns.exception.DNSException, ValueError):
        return False


def _proves(nsec, name: dns.name.Name, rdtype: int) -> bool:
    """Whether NSEC RRset *nsec* says that *name* has no *rdtype*: owned by *name* without the type in
    its bitmap, or owned by a name before *name* whose next name is after it (dnspython compares
    names in DNSSEC's canonical order; the zone's last NSEC wraps round to its apex)."""
    owner, following = nsec.name, nsec[0].next
    if owner == name:
        return not _has(nsec[0].windows, rdtype)
    if owner < following:
        return owner < name < following
    return name > owner or name < following


def _has(windows, rdtype: int) -> bool:
    """Whether an NSEC type bitmap (dnspython's windows) has *rdtype*."""
    window, offset = divmod(int(rdtype), 256)
    for number, bitmap in windows:
        if number == window:
            byte, bit = divmod(offset, 8)
            return byte < len(bitmap) and bool(bitmap[byte] & (0x80 >> bit))
    return False
