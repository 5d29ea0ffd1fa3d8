"""Zone signing keys on disk: made, written, read and checked; no crypto of our own (``cryptography``).

One combined signing key (CSK: DNSKEY flags 257, protocol 3) per zone, Ed25519 (algorithm 15) by
default or ECDSA P-256 (13). Keys live in a key directory beside the zone files, never in them
(``ZONEDIR/keys`` by convention), two files per key::

    keys/weather.tools.40123.pem    the private key, PKCS#8 PEM, mode 0600 (refused if group or others may read it)
    keys/weather.tools.40123.json   {"zone": "weather.tools.", "algorithm": 15, "key_tag": 40123,
                                     "created": "2026-12-01T10:00:00Z", "state": "active"}

States (``docs/dnssec.md``, rollover): ``active`` keys are published in the DNSKEY RRset and sign
everything; ``published`` keys are in the DNSKEY RRset and sign only it (a new key before its DS is
at the parent); ``retired`` keys are kept on disk for the record and neither published nor used.

    >>> key = generate("weather.tools.")            # Ed25519
    >>> write_key("zones/keys", key)
    >>> load_keys("zones/keys", "weather.tools.")[0].ds_text()
    '40123 15 2 3f5a...'
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import dns.dnssec
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype

from ..exceptions import DNSSECError
from ..zone.zonefile import write_atomically

#: algorithm names as ``tooldns dnssec keygen --algorithm`` takes them -> DNSSEC algorithm numbers
ALGORITHMS = {"ed25519": 15, "p256": 13}
DEFAULT_ALGORITHM = "ed25519"
STATES = ("active", "published", "retired")
#: DNSKEY flags of a combined signing key: zone key + secure entry point
CSK_FLAGS = 257
#: the digest type of the DS records written to parents (SHA-256, RFC 4509)
DS_DIGEST = "SHA256"


@dataclass(frozen=True)
class ZoneKey:
    """One signing key of one zone, with its public DNSKEY."""

    zone: str
    algorithm: int
    key_tag: int
    created: str
    state: str
    private_key: object  # a cryptography private key
    dnskey: dns.rdata.Rdata

    @property
    def stem(self) -> str:
        """The key's file name without suffix: ``<zone><key tag>`` (``weather.tools.40123``)."""
        return f"{self.zone}{self.key_tag}"

    def ds(self) -> dns.rdata.Rdata:
        """The DS record the parent publishes for this key (SHA-256)."""
        return dns.dnssec.make_ds(dns.name.from_text(self.zone), self.dnskey, DS_DIGEST)

    def ds_text(self) -> str:
        """The DS RDATA as a parent's zone file holds it: ``key-tag algorithm 2 digest``."""
        return self.ds().to_text()

    def dnskey_text(self) -> str:
        """The DNSKEY as a zone-file line (what ``dig DNSKEY`` prints; a trust anchor file takes it)."""
        return f"{self.zone} 3600 IN DNSKEY {self.dnskey.to_text()}"


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def algorithm_number(name: str | int) -> int:
    """``ed25519`` -> 15, ``p256`` -> 13 (numbers pass); ValueError listing the names otherwise."""
    if isinstance(name, int) and name in ALGORITHMS.values():
        return name
    number = ALGORITHMS.get(str(name).lower())
    if number is None:
        raise ValueError(f"unknown DNSSEC algorithm {name!r}; choose one of {', '.join(ALGORITHMS)}")
    return number


def generate(zone: str, algorithm: str | int = DEFAULT_ALGORITHM, state: str = "active") -> ZoneKey:
    """A new key for *zone* (``cryptography`` makes it; dnspython makes the DNSKEY)."""
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    number = algorithm_number(algorithm)
    private = ed25519.Ed25519PrivateKey.generate() if number == 15 else ec.generate_private_key(ec.SECP256R1())
    return _key(zone, number, private, _now(), state)


def _key(zone: str, algorithm: int, private, created: str, state: str) -> ZoneKey:
    dnskey = dns.dnssec.make_dnskey(private.public_key(), algorithm, flags=CSK_FLAGS)
    return ZoneKey(zone, algorithm, dns.dnssec.key_id(dnskey), created, state, private, dnskey)


def _pem(private) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())


def write_key(keydir: str | os.PathLike, key: ZoneKey) -> Path:
    """Write *key* to *keydir* (made 0700 when new): the PEM with mode 0600, then its JSON; the PEM's path."""
    d = Path(keydir)
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    pem = d / f"{key.stem}.pem"
    write_atomically(pem, _pem(key.private_key), mode=0o600)  # never half a key, never readable by others
    write_state(keydir, key)
    return pem


def write_state(keydir: str | os.PathLike, key: ZoneKey) -> None:
    """Write the JSON file of *key* (its state changed, say)."""
    meta = {"zone": key.zone, "algorithm": key.algorithm, "key_tag": key.key_tag, "created": key.created,
            "state": key.state}
    write_atomically(Path(keydir) / f"{key.stem}.json", json.dumps(meta, indent=1) + "\n")


def set_state(keydir: str | os.PathLike, key: ZoneKey, state: str) -> ZoneKey:
    """*key* in *state*, written."""
    if state not in STATES:
        raise ValueError(f"unknown key state {state!r}; choose one of {', '.join(STATES)}")
    key = replace(key, state=state)
    write_state(keydir, key)
    return key


_FILE = re.compile(r"^(?P<zone>.+\.)(?P<tag>\d{1,5})\.json$")


#: key directory -> (what tells one state of it from another, zone in lower case -> the names of its
#: key files, sorted): a server looks at every zone's keys twice a second (:func:`keys_stamp`), and
#: one listing serves every zone of a tree until the directory changes
_LISTINGS: dict[str, tuple[tuple[int, int, int], dict[str, list[str]]]] = {}
#: a directory modified this recently (seconds) is listed again at every look, as git treats "racy"
#: entries: a file added within the same tick of the file system's clock leaves its stamp as it was
_RACY = 2.0


def _listing(keydir: str | os.PathLike) -> dict[str, list[str]]:
    """Zone (lower case) -> the names of its key files in *keydir*, sorted; {} without the directory."""
    path = os.fspath(keydir)
    if not os.access(path, os.F_OK):  # the common case, no keys: no exception made per zone and look
        return {}
    try:
        st = os.stat(path)
    except OSError:
        return {}
    if not stat.S_ISDIR(st.st_mode):
        return {}
    stamp = (st.st_mtime_ns, st.st_ino, st.st_dev)
    held = _LISTINGS.get(path)
    if held is not None and held[0] == stamp:
        return held[1]
    zones: dict[str, list[str]] = {}
    for name in sorted(os.listdir(path)):
        m = _FILE.match(name)
        if m:
            zones.setdefault(m.group("zone").lower(), []).append(name)
    if time.time() - st.st_mtime_ns / 1e9 > _RACY:
        if len(_LISTINGS) >= 64:
            _LISTINGS.clear()
        _LISTINGS[path] = (stamp, zones)
    return zones


def key_files(keydir: str | os.PathLike, zone: str | None = None) -> list[Path]:
    """The JSON files of the keys in *keydir* (of *zone* only, when given), sorted."""
    zones = _listing(keydir)
    names = zones.get(zone.lower(), []) if zone is not None else sorted(n for ns in zones.values() for n in ns)
    return [Path(keydir) / name for name in names]


def _check_private(pem: Path) -> None:
    """Refuse a private key file that group or others may read or write (as ssh does)."""
    try:
        mode = pem.stat().st_mode
    except OSError as exc:
        raise DNSSECError(f"{pem}: cannot read the private key ({exc.strerror}); it belongs beside its .json") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise DNSSECError(f"{pem}: the private key may be read by others (mode {stat.S_IMODE(mode):04o}); "
                          f"run chmod 600 {pem}")


def read_key(meta_path: str | os.PathLike) -> ZoneKey:
    """The key described by *meta_path* (its JSON), with its PEM beside it; DNSSECError saying what is wrong."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    meta_path = Path(meta_path)
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DNSSECError(f"{meta_path}: not a key description ({exc})") from None
    if not isinstance(meta, dict):
        raise DNSSECError(f"{meta_path}: not a key description (a JSON object with zone, algorithm, key_tag, state)")
    zone, algorithm, state = meta.get("zone"), meta.get("algorithm"), meta.get("state", "active")
    if not isinstance(zone, str) or not zone.endswith(".") or algorithm not in ALGORITHMS.values():
        raise DNSSECError(f"{meta_path}: needs 'zone' (an absolute name) and 'algorithm' "
                          f"({' or '.join(map(str, ALGORITHMS.values()))})")
    if state not in STATES:
        raise DNSSECError(f"{meta_path}: state {state!r} is unknown; allowed: {', '.join(STATES)}")
    pem = meta_path.with_suffix(".pem")
    _check_private(pem)
    try:
        private = serialization.load_pem_private_key(pem.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise DNSSECError(f"{pem}: not an unencrypted PEM private key ({exc})") from None
    wanted = ed25519.Ed25519PrivateKey if algorithm == 15 else ec.EllipticCurvePrivateKey
    if not isinstance(private, wanted) or (algorithm == 13 and private.curve.name != "secp256r1"):
        raise DNSSECError(f"{pem}: the key is not of algorithm {algorithm} as {meta_path.name} says")
    key = _key(zone.lower(), algorithm, private, str(meta.get("created", "")), state)
    if meta.get("key_tag") not in (None, key.key_tag):
        raise DNSSECError(f"{meta_path}: key_tag {meta.get('key_tag')} does not match the key's ({key.key_tag})")
    return key


def load_keys(keydir: str | os.PathLike, zone: str, retired: bool = False) -> list[ZoneKey]:
    """The keys of *zone* in *keydir* (without retired ones unless asked), active first, then by key tag."""
    keys = [read_key(p) for p in key_files(keydir, zone)]
    keys = [k for k in keys if retired or k.state != "retired"]
    return sorted(keys, key=lambda k: (k.state != "active", k.key_tag))


def keys_stamp(keydir: str | os.PathLike, zone: str) -> tuple:
    """What changes when the keys of *zone* change (files added, removed or rewritten): for reloads."""
    out = []
    for p in key_files(keydir, zone):
        for f in (p, p.with_suffix(".pem")):
            try:
                st = f.stat()
                out.append((f.name, st.st_mtime_ns, st.st_size, st.st_mode))
            except OSError:
                out.append((f.name, None))
    return tuple(out)
