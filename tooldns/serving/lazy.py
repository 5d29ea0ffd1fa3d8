"""Zones loaded on first use: a tree too big to load whole before its first answer.

``tooldns serve DIR --lazy --listen ADDR`` reads one zone file at start, the top one: every other
file's origin is its name (``weather.tools.yaml`` holds ``weather.tools.``, as ``tooldns build``
and the shipped tree name them; ``root.yaml``, which a build writes for the root, is the top one).
A zone is read, checked and indexed the first time a query is about it, and at most *max_loaded*
zones stay loaded: the least recently asked is dropped (its counters kept) and read again when
asked again. A million-tool tree (67,170 zones) thus answers as soon as its root is read, in the
memory of the zones its clients ask about; loading everything first took minutes and gigabytes.

What laziness gives up, and where to get it back:

* a broken file is found when first asked: its queries get SERVFAIL with an extended error naming
  the file (and the log says why) until the file is fixed; ``tooldns check DIR`` checks every file
  beforehand, as a start without ``--lazy`` does;
* a parent's glue is not compared with its child's file, and files named otherwise than their
  origin are not served (the log says which at start, and warns when the top zone's glue names
  addresses other than the ones served: a tree built without ``--address``);
* an edit of a zone that is not loaded reaches the answers the server cached within a round of the
  file watcher's checks of the dropped zones' files (:data:`DROPPED_CHECKS` a round);
* parents do not follow their children's published summaries (:mod:`.summaries`): the copies in
  their files stand, which ``tooldns build --update`` keeps current. Loaded zones reload on edits.

    >>> zones = LazyZones("built/", max_loaded=20_000)
    >>> resolver = MultiZoneResolver([ZoneResolver(zones.top)], lazy=zones)
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable

from dnslib import RCODE, DNSRecord
from dnslib.server import BaseResolver

from ..dnssec.signer import Signing
from ..exceptions import NameError_, ZoneFileError
from ..protocol import names
from ..zone.limits import ZoneLimits
from ..zone.zonefile import zone_files
from .reply import error_reply
from .resolver import ZoneResolver
from .store import ZoneStore, _stamp

log = logging.getLogger(__name__)

#: zones kept loaded at most (about 0.2 MB each for a built leaf of 20 tools)
DEFAULT_MAX_LOADED = 10_000
#: the file a build writes for its root zone
ROOT_FILE = "root"
#: files of dropped zones the watcher looks at in each round (a stat each)
DROPPED_CHECKS = 2000


class Unloadable(BaseResolver):
    """Answers for a zone whose file cannot be loaded: SERVFAIL, with an extended error saying so."""

    def __init__(self, origin: str, path: str) -> None:
        self.origin, self.path = origin, path  # why it cannot be loaded is in the server's log

    def resolve(self, request: DNSRecord, handler) -> DNSRecord:
        """SERVFAIL, whatever was asked, with an extended error naming the file."""
        return error_reply(request, RCODE.SERVFAIL, f"zone {self.origin} cannot be loaded from its file "
                                                    f"{os.path.basename(self.path)}; see the server's log")

    def counters(self) -> dict[str, int]:
        """Nothing counted: the zone never answered."""
        return {}


class LazyZones:
    """The zones of a directory, each loaded when first asked for; at most *max_loaded* at once."""

    def __init__(self, zonedir: str | os.PathLike, *, limits: ZoneLimits | None = None,
                 signing: Signing | None = None, max_loaded: int = DEFAULT_MAX_LOADED,
                 listen: list[str] | None = None) -> None:
        if max_loaded < 1:
            raise ValueError(f"max_loaded must be at least 1, not {max_loaded}")
        self.limits, self.signing, self.max_loaded = limits, signing, max_loaded
        files = zone_files(zonedir)
        by_name = {p.stem: str(p) for p in files}
        top_path = by_name.pop(ROOT_FILE, None)
        #: origin -> its file, for every zone but the top one
        self.paths: dict[str, str] = {}
        unnamed = []
        for stem, path in by_name.items():
            try:
                self.paths[names.normalize(stem + ".")] = path
            except NameError_:
                unnamed.append(path)
        if top_path is None:
            top_path = self.paths.pop(self._top_origin(zonedir))
        #: the top zone, loaded now and never dropped
        self.top = ZoneStore(top_path, limits=limits, signing=signing)
        origin = self.top.index.origin
        elsewhere = sorted({ns.address for c in self.top.zone.children for ns in c.nameservers} - set(listen or []))
        if listen is not None and elsewhere:
            log.warning("%s: glue names %s, not the addresses served here (%s): clients that follow it will not "
                        "reach these zones; build the tree with --address", top_path, ", ".join(elsewhere[:3])
                        + (" ..." if len(elsewhere) > 3 else ""), ", ".join(listen))
        outside = [p for o, p in self.paths.items() if not names.is_subdomain(o, origin)] + unnamed
        for path in outside:
            log.warning("%s: its name is no origin under %s; not served with --lazy", path, origin)
        self.paths = {o: p for o, p in self.paths.items() if names.is_subdomain(o, origin) and o != origin}
        #: origin -> the resolver of a loaded zone, least recently asked first
        self.loaded: OrderedDict[str, ZoneResolver] = OrderedDict()
        #: origin -> (the file's stamp, why it could not be loaded): not tried again until it changes
        self.failed: dict[str, tuple[object, Unloadable]] = {}
        #: counters of zones dropped, summed, so that nothing counted is lost
        self.retired: dict[str, int] = {}
        self.loads = self.drops = 0
        #: origin -> the file's stamp when the zone was dropped: loaded again from another, it changed
        self.dropped: dict[str, object] = {}
        #: called with (resolver, loaded, changed) when a zone is loaded (True) or dropped (False);
        #: *changed*: loaded from a file that changed since the zone was dropped
        self.listeners: list[Callable[[ZoneResolver, bool, bool], None]] = []
        self._lock = threading.Lock()
        self._dropped_round: list[str] = []

    def _top_origin(self, zonedir) -> str:
        """Without a ``root.yaml``: the origin every other file's origin lies under (the shipped tree's
        ``tools.yaml``); ZoneFileError when no file, or more than one, is such a top."""
        tops = [o for o in self.paths if all(names.is_subdomain(other, o) for other in self.paths)]
        if len(tops) != 1:
            raise ZoneFileError(f"{zonedir}: --lazy needs one top zone, root.yaml or a file named after an origin "
                                f"that every other file's origin lies under; found {len(tops)} "
                                f"among {len(self.paths)} files named after origins")
        return tops[0]

    def get(self, origin: str) -> BaseResolver | None:
        """The resolver of zone *origin*, loading it if need be; None when no file here holds it."""
        resolver = self.loaded.get(origin)
        if resolver is not None:
            with self._lock:
                if origin in self.loaded:
                    self.loaded.move_to_end(origin)
            return resolver
        path = self.paths.get(origin)
        if path is None:
            return None
        with self._lock:
            resolver = self.loaded.get(origin)
            if resolver is None:
                resolver = self._load(origin, path)
            return resolver

    def _load(self, origin: str, path: str) -> BaseResolver:
        """Load zone *origin* from *path* (under the lock), dropping the least recently asked past
        *max_loaded*; an :class:`Unloadable` when the file cannot be served, until it changes."""
        stamp = _stamp(path)
        failed = self.failed.get(origin)
        if failed is not None and failed[0] == stamp:
            return failed[1]
        try:
            store = ZoneStore(path, limits=self.limits, signing=self.signing)
            if store.index.origin != origin:
                store.index.close()
                raise ZoneFileError(f"{path}:1: holds origin {store.index.origin}, not {origin} as its name says; "
                                    "with --lazy a zone file is named after its origin")
        except Exception as exc:  # a bad file, key or scorer: this zone answers SERVFAIL, the others answer
            log.error("%s\n%s: cannot load zone %s; it answers SERVFAIL until the file is fixed", exc, path, origin)
            unloadable = Unloadable(origin, path)
            self.failed[origin] = (stamp, unloadable)
            return unloadable
        was = self.dropped.pop(origin, None)
        changed = origin in self.failed or (was is not None and was != stamp)
        self.failed.pop(origin, None)
        resolver = ZoneResolver(store)
        self.loaded[origin] = resolver
        self.loads += 1
        for listener in self.listeners:
            listener(resolver, True, changed)
        while len(self.loaded) > self.max_loaded:
            self._drop(*self.loaded.popitem(last=False))
        return resolver

    def _drop(self, origin: str, resolver: ZoneResolver) -> None:
        """Forget a loaded zone: its counters into :attr:`retired`, its file's stamp remembered."""
        for key, value in resolver.counters().items():
            if isinstance(value, int):
                self.retired[key] = self.retired.get(key, 0) + value
        self.drops += 1
        self.dropped[origin] = resolver.source._stamp
        for listener in self.listeners:
            listener(resolver, False, False)
        resolver.source.index.close()

    def dropped_changed(self) -> bool:
        """Whether a file of a dropped zone changed: checks the next :data:`DROPPED_CHECKS` of them (a
        round goes through all); a changed one is forgotten as dropped, so it loads afresh."""
        if not self._dropped_round:
            self._dropped_round = list(self.dropped)
        batch, self._dropped_round = self._dropped_round[:DROPPED_CHECKS], self._dropped_round[DROPPED_CHECKS:]
        changed = False
        for origin in batch:
            stamp = self.dropped.get(origin)
            if stamp is not None and origin in self.paths and _stamp(self.paths[origin]) != stamp:
                with self._lock:
                    self.dropped.pop(origin, None)
                changed = True
        return changed

    def stores(self) -> list[ZoneStore]:
        """The top zone's store and those of the zones loaded now."""
        return [self.top, *(r.source for r in list(self.loaded.values()))]
