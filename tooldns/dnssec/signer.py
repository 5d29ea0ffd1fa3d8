"""Online signing of one zone's RRsets: RRSIGs made on demand with dnspython, the repeated ones cached.

:class:`ZoneSigner` holds a zone's keys (:mod:`.keys`) and signs an RRset given as dnslib records
(the reply path's own): their RDATA is packed, read by dnspython and signed by ``dns.dnssec.sign``;
the RRSIGs come back as dnslib records carrying the RDATA dnspython wrote (``dnslib.RD``), so the
reply path stays dnslib's. Signatures are cached in an LRU keyed on the RRset's wire form (owner,
type, TTL, RDATA): what repeats (an SOA, a DNSKEY RRset, a tool's SRV for a frequent intent) is
signed once per refresh interval; intent-dependent RRsets are signed per reply when they are new.

Validity: inception an hour before now (clocks differ), expiration *validity* seconds after now
(14 days unless told). A cached signature is made afresh once it is *refresh* old (a quarter of the
validity, at least an hour), so none served is ever near its end; :meth:`ZoneSigner.cache_deadline`
tells the server when its packet cache, which holds signed replies, must be emptied for the same
reason.

Which keys sign: every ``active`` key signs every RRset; the DNSKEY RRset is also signed by the
``published`` keys (a key being rolled in), so that a parent's DS for either key validates it.

    >>> signer = ZoneSigner("weather.tools.", load_keys("zones/keys", "weather.tools."))
    >>> signer.rrsigs("weather.tools.", QTYPE.SOA, 3600, [soa_rr])     # [RR(..., RRSIG, ...)]
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import dns.dnssec
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset
from dnslib import RD, RR, DNSBuffer, DNSLabel

from ..exceptions import DNSSECError
from .keys import ZoneKey, keys_stamp, load_keys

#: how long signatures are valid after they are made (seconds): 14 days, as many signers do
DEFAULT_VALIDITY = 14 * 86400
#: how far before now a signature's inception is put, for validators whose clocks run behind
INCEPTION_SLACK = 3600
RRSIG = 46
DNSKEY = 48
_IN = dns.rdataclass.IN


def rdata_wire(rr: RR) -> bytes:
    """The RDATA of dnslib record *rr* as bytes (names in it uncompressed unless repeated within it)."""
    buffer = DNSBuffer()
    rr.rdata.pack(buffer)
    return bytes(buffer.data)


def owner_label(name: str) -> DNSLabel | str:
    """*name* (presentation form) as a dnslib record's owner. dnslib reads no escapes, so a name with
    one (``a\\.b.tools.``, ``\\255x.tools.``: a denied question's name) is read by dnspython."""
    if "\\" not in name:
        return name
    return DNSLabel(list(dns.name.from_text(name).labels[:-1]))


class ZoneSigner:
    """Signs RRsets of one zone with its keys; see the module docstring."""

    def __init__(self, origin: str, keys: Sequence[ZoneKey], validity: float = DEFAULT_VALIDITY,
                 clock: Callable[[], float] = time.time, cache_size: int = 8192) -> None:
        self.origin = origin.lower()
        self.name = dns.name.from_text(self.origin)
        self.keys = [k for k in keys if k.state != "retired"]
        self.active = [k for k in self.keys if k.state == "active"]
        if not self.active:
            raise DNSSECError(f"{self.origin}: no active key among {len(self.keys)}; a signed zone needs one "
                              "(tooldns dnssec keygen)")
        self.validity = float(validity)
        self.clock = clock
        #: cached signatures older than this (seconds) are made afresh
        self.refresh = max(3600.0, self.validity / 4) if self.validity > 0 else 3600.0
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple, tuple[float, list[RR]]] = OrderedDict()
        self._signing = {k.key_tag: _private(k) for k in self.keys}
        self.stats = {"signatures": 0, "signature_cache_hits": 0}

    def dnskey_records(self, ttl: int) -> list[RR]:
        """The zone's DNSKEY RRset (active and published keys) as dnslib records."""
        return [RR(self.origin, DNSKEY, ttl=ttl, rdata=RD(k.dnskey.to_wire())) for k in self.keys]

    def cache_deadline(self) -> float:
        """When (``clock`` time) replies signed from now on should no longer be served from a cache."""
        return self.clock() + self.refresh

    def rrsigs(self, owner: str, rtype: int, ttl: int, records: Sequence[RR]) -> list[RR]:
        """The RRSIG records over the RRset (*owner*, *rtype*, *ttl*) made of dnslib *records*."""
        wires = tuple(sorted(rdata_wire(rr) for rr in records))
        key = (owner.lower(), rtype, ttl, wires)
        now = self.clock()
        hit = self._cache.get(key)
        if hit is not None and now - hit[0] < self.refresh:
            self._cache.move_to_end(key)
            self.stats["signature_cache_hits"] += 1
            return hit[1]
        out = self._sign(owner, rtype, ttl, wires, now)
        self._cache[key] = (now, out)
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return out

    def _sign(self, owner: str, rtype: int, ttl: int, wires: tuple[bytes, ...], now: float) -> list[RR]:
        name = dns.name.from_text(owner)
        rdatas = [dns.rdata.from_wire(_IN, rtype, w, 0, len(w)) for w in wires]
        rrset = dns.rrset.from_rdata_list(name, ttl, rdatas)
        keys = self.keys if rtype == DNSKEY else self.active
        out = []
        for k in keys:
            sig = dns.dnssec.sign(rrset, self._signing[k.key_tag], self.name, k.dnskey,
                                  inception=int(now - INCEPTION_SLACK), expiration=int(now + self.validity))
            out.append(RR(owner_label(owner), RRSIG, ttl=ttl, rdata=RD(sig.to_wire())))
            self.stats["signatures"] += 1
        return out


@dataclass(frozen=True)
class Signing:
    """How the zones of a tree are signed: where their keys are, how long signatures last, the clock.

    ``Signing.beside("zones/tools.yaml")`` looks in ``zones/keys``; a zone without keys there is
    served unsigned. *clock* is for tests (signatures made in the past, expired ones)."""

    keydir: Path | None = None
    validity: float = DEFAULT_VALIDITY
    clock: Callable[[], float] = time.time

    @classmethod
    def beside(cls, zone_path: str | os.PathLike) -> "Signing":
        return cls(Path(zone_path).parent / "keys")

    def stamp(self, origin: str) -> tuple:
        return keys_stamp(self.keydir, origin) if self.keydir is not None else ()

    def signer_for(self, origin: str) -> ZoneSigner | None:
        """The signer of zone *origin*, None when it has no keys; DNSSECError for keys that cannot be used."""
        if self.keydir is None:
            return None
        keys = load_keys(self.keydir, origin)
        return ZoneSigner(origin, keys, self.validity, self.clock) if keys else None


def _private(key: ZoneKey):
    """dnspython's wrapper of *key*'s private key, made once (``dns.dnssec.sign`` would wrap it per call)."""
    from dns.dnssecalgs import get_algorithm_cls_from_dnskey

    return get_algorithm_cls_from_dnskey(key.dnskey)(key=key.private_key)
