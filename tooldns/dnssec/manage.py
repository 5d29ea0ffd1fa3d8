"""Managing a tree's keys: make them, hand each child's DS to its parent, roll a key over.

What ``tooldns dnssec`` runs (``docs/dnssec.md``). Keys live in the key directory (``ZONEDIR/keys``
unless told); DS records go into the parent's zone file, in the delegation (``ds:``), as a real
parent's operator publishes the DS its child hands over. A parent's file is edited in place
(:func:`tooldns.zone.zonefile.with_ds`: only its ``ds:`` lines change, its keys' order, defaults and
comments stay) and written atomically, and only when its DS change.

    >>> report = keygen_tree("zones")        # keys for zones without one, DS written into parents
    >>> roll("zones", "hko.weather.tools.")   # rollover step 1: a new key published beside the old
    >>> write_ds("zones", ["hko.weather.tools."], tags=[new_tag])   # step 2: the parent's DS swapped
    >>> retire("zones", "hko.weather.tools.", old_tag)              # step 3: the new key signs alone
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..exceptions import DNSSECError
from ..protocol import names
from ..zone.zonefile import load_zone, parse_zone, with_ds, write_atomically, zone_files
from .keys import DEFAULT_ALGORITHM, ZoneKey, generate, load_keys, set_state, write_key


def key_dir(zonedir: str | os.PathLike, keydir: str | os.PathLike | None = None) -> Path:
    """The key directory of a tree: *keydir*, or ``keys/`` inside the zone directory."""
    return Path(keydir) if keydir is not None else Path(zonedir) / "keys"


@dataclass
class KeygenReport:
    made: list[ZoneKey] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # zones that had a key already
    ds_written: list[tuple[str, str]] = field(default_factory=list)  # (child, parent file)

    def text(self) -> str:
        lines = [f"new key {k.key_tag} (algorithm {k.algorithm}) for {k.zone}" for k in self.made]
        lines += [f"{zone}: has a key already" for zone in self.kept]
        lines += [f"DS of {child} written into {path}" for child, path in self.ds_written]
        return "\n".join(lines) or "nothing to do"


def _origins(zonedir) -> dict[str, Path]:
    return {load_zone(p).origin: p for p in zone_files(zonedir)}


def keygen_tree(zonedir: str | os.PathLike, keydir: str | os.PathLike | None = None,
                algorithm: str | int = DEFAULT_ALGORITHM, zones: list[str] | None = None,
                ds: bool = True) -> KeygenReport:
    """A key for every zone of *zonedir* (or of *zones*) that has none; then, with *ds*, each child's
    DS written into its parent's file (for every child with keys whose parent is in the directory)."""
    keys = key_dir(zonedir, keydir)
    origins = _origins(zonedir)
    wanted = [names.normalize(z) for z in zones] if zones else list(origins)
    unknown = [z for z in wanted if z not in origins]
    if unknown:
        raise DNSSECError(f"no zone file in {zonedir} has origin {', '.join(unknown)}")
    report = KeygenReport()
    for origin in wanted:
        if load_keys(keys, origin):
            report.kept.append(origin)
            continue
        key = generate(origin, algorithm)
        write_key(keys, key)
        report.made.append(key)
    if ds:
        report.ds_written = write_ds(zonedir, None, keydir=keydir)
    return report


def write_ds(zonedir: str | os.PathLike, zones: list[str] | None = None, tags: list[int] | None = None,
             keydir: str | os.PathLike | None = None) -> list[tuple[str, str]]:
    """Write into each parent's zone file the DS of its children that have keys (of *zones* only, when
    given): the DS of their active keys, or of the keys *tags* names. A parent's file is rewritten only
    when its DS change. Returns (child, parent file) for each DS set written."""
    keys = key_dir(zonedir, keydir)
    wanted = {names.normalize(z) for z in zones} if zones else None
    written = []
    for path in zone_files(zonedir):
        zone = load_zone(path)
        text = original = Path(path).read_text(encoding="utf-8")
        children = []
        for child in zone.children:
            if wanted is None or child.name in wanted:
                ds = tuple(k.ds_text() for k in load_keys(keys, child.name)
                           if (k.key_tag in tags if tags else k.state == "active"))
                if ds and ds != child.ds:
                    # the file as its operator wrote it, but for this delegation's ds (not dumped anew:
                    # that would drop its defaults and reorder its keys)
                    text = with_ds(text, child.label, ds)
                    child = replace(child, ds=ds)
                    written.append((child.name, str(path)))
            children.append(child)
        if text != original:
            if parse_zone(text, str(path)) != replace(zone, children=tuple(children)):
                raise DNSSECError(f"{path}: writing the DS would change more than the DS; add them by hand")
            write_atomically(path, text)
    return written


def roll(zonedir: str | os.PathLike, zone: str, algorithm: str | int = DEFAULT_ALGORITHM,
         keydir: str | os.PathLike | None = None) -> ZoneKey:
    """Rollover step 1 (pre-publish): a new key for *zone*, published beside its active key (it signs
    the DNSKEY RRset only) until its DS is at the parent."""
    keys = key_dir(zonedir, keydir)
    zone = names.normalize(zone)
    if not any(k.state == "active" for k in load_keys(keys, zone)):
        raise DNSSECError(f"{zone} has no active key to roll from; make one with tooldns dnssec keygen")
    key = generate(zone, algorithm, state="published")
    write_key(keys, key)
    return key


def retire(zonedir: str | os.PathLike, zone: str, tag: int, keydir: str | os.PathLike | None = None) -> list[ZoneKey]:
    """Rollover step 3: key *tag* of *zone* retired, the published keys made active; the zone's keys after."""
    keys = key_dir(zonedir, keydir)
    zone = names.normalize(zone)
    current = load_keys(keys, zone)
    old = [k for k in current if k.key_tag == tag]
    if not old:
        raise DNSSECError(f"{zone} has no key {tag} (its keys: {', '.join(str(k.key_tag) for k in current)})")
    if not any(k.key_tag != tag for k in current):
        raise DNSSECError(f"key {tag} is the only key of {zone}; roll a new one in first (tooldns dnssec roll)")
    for k in current:
        if k.key_tag != tag and k.state == "published":
            set_state(keys, k, "active")
    set_state(keys, old[0], "retired")
    return load_keys(keys, zone)
