"""One zone file, its current index, and live reloading that never serves a broken version.

:class:`ZoneStore` loads a zone file once (refusing to start on errors) and, each time
:meth:`ZoneStore.check` is called, reloads it if the file changed. A reload that fails
validation is logged with its ``file:line`` messages and the last good index keeps serving;
a deleted file keeps serving its last version too. Swapping the index is one assignment, so
a query sees either the old zone or the new one, never a mix; the replaced index is closed and
nothing else keeps it (``scripts/bench/bench_reload.py`` checks that memory stays flat over reloads).
The zone served is the file's with what was learned from the children put in
(:meth:`ZoneStore.learn`, :mod:`.summaries`), under a serial of its own: the file's, raised by one
at each change served since the start (a reload, a learned summary), so that parents see the change.
Each callable in ``listeners`` is called after a swap: a server hosting several zones
(:mod:`.multizone`) then renews what it holds of them.
Zones with DNSSEC keys are signed (*signing*, :class:`tooldns.dnssec.signer.Signing`: the key directory,
``keys/`` beside the zone file unless told); keys added, removed or changed there are picked up like
an edit of the file (a key that cannot be used is logged and the last good signer kept).
Loading, :meth:`ZoneStore.check` and :meth:`ZoneStore.learn` read files and build indexes (a leaf of
10,000 tools: seconds): servers call them off the event loop (a :class:`~.tree.Tree` in its work
thread), one at a time per store (a lock), and listeners may be called in that thread.
Every load is bounded by *limits* (:class:`tooldns.zone.limits.ZoneLimits`, the defaults unless
given): a file over them is refused like any invalid file.

    >>> store = ZoneStore("zones/weather.tools.yaml")
    >>> store.check()   # after an edit
    'reloaded'
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable

from dataclasses import replace

from ..dnssec.signer import Signing
from ..exceptions import DNSSECError, ZoneFileError
from .index import ZoneIndex
from .loader import Loaded, ZoneLoader
from ..zone.limits import ZoneLimits
from ..zone.model import Summary, Zone
from ..zone.zonefile import load_zone, stat_stamp

log = logging.getLogger(__name__)

#: checks a replaced index still read waits for before it is left to be freed whole (at 0.5 s a check: 30 s)
RETIRED_CHECKS = 60
#: replaced indexes kept for the next check at most (swaps without checks: summaries learned, keys)
RETIRED_KEPT = 4


def _stamp(path: str):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return stat_stamp(st)


class ZoneStore:
    #: what each reload runs in (``tooldns serve`` sets :class:`~.gcpolicy.QuietLoads`: no cycle
    #: collections while the new index's objects are made, frozen after)
    load_guard = contextlib.nullcontext()

    def __init__(self, path: str | os.PathLike, limits: ZoneLimits | None = None, signing: Signing | None = None,
                 *, learned: dict[str, Summary] | None = None, served: int | None = None,
                 changed: bool = False, loaded: Loaded | None = None, loader: ZoneLoader | None = None) -> None:
        """Load the zone file at *path*. A zone served before in this process and loaded again (a lazy
        server's, :mod:`.lazy`) gets back what it had learned (*learned*) and the serial it served
        (*served*), raised by one when its file *changed* since, as a reload raises it (at least the
        file's serial either way). *loaded*: the file read and indexed already, in a loading process
        (:mod:`.loader`); its index is served as it is when nothing learned or served changes it.
        *loader*: what reads and indexes the file again at each reload, in a process of its own (None:
        the thread that calls :meth:`check` does; a tree sets it on the zones it serves)."""
        self.loader = loader
        self.path = os.fspath(path)
        self.limits = limits
        self._lock = threading.RLock()  # one reload or rebuild at a time
        self._stamp = loaded.stamp if loaded is not None else _stamp(self.path)
        #: the zone as its file says; what is served (:attr:`zone`) has learned summaries in it
        self.file_zone = loaded.zone if loaded is not None else load_zone(self.path, limits)
        #: about how many bytes the zone and its index hold, as the loading process counted them when it
        #: last read the file (:attr:`.Loaded.size`; None: read in this thread, not counted)
        self.size: int | None = loaded.size if loaded is not None else None
        #: where the zone's keys are and how it signs; its signer (None: the zone has no keys)
        self.signing = signing if signing is not None else Signing.beside(self.path)
        self._keys_stamp = self.signing.stamp(self.file_zone.origin)
        self.signer = self.signing.signer_for(self.file_zone.origin)
        #: child name -> the summary learned from the child (:mod:`.summaries`)
        children = {c.name for c in self.file_zone.children}
        self.learned: dict[str, Summary] = {n: s for n, s in (learned or {}).items() if n in children}
        #: the SOA serial served: the file's, raised by one at each change served since the start
        self.serial = self.file_zone.soa.serial
        if served is not None:  # served before (a lazy server's zone loaded again): its serials go on
            self.serial = max(self.serial, served + 1) % 2**32 if changed else max(self.serial, served)
        if loaded is not None and self._as_filed():
            self.index = loaded.index
            self.index.signer = self.signer
        else:
            self.index = self._new_index(self._served(self.file_zone))
        self.last_error: str | None = None
        self.reloads = 0
        #: reloads refused (a bad edit, a scorer that cannot be built): the last good version kept serving
        self.reload_errors = 0
        #: called with no arguments after each reload that swapped the index
        self.listeners: list[Callable[[], None]] = []
        #: indexes replaced, to be freed a piece at a time: [index, checks it was found still read]
        self._retired: list[list] = []

    @property
    def zone(self):
        return self.index.zone

    def _new_index(self, zone: Zone) -> ZoneIndex:
        index = ZoneIndex(zone)
        index.signer = self.signer
        return index

    def _replacing(self, zone: Zone) -> ZoneIndex:
        """The index that is to replace the one served (a reload, a summary learned, new keys): with the
        summary it publishes made now, off the event loop, rather than when its parent first asks for it
        (a leaf of 10,000 tools: hundreds of milliseconds)."""
        index = self._new_index(zone)
        index.published_rr()
        return index

    def _check_keys(self) -> str | None:
        """Take the zone's keys again if they changed: 'reloaded', 'kept' (a key that cannot be used) or None."""
        stamp = self.signing.stamp(self.index.origin)
        if stamp == self._keys_stamp:
            return None
        self._keys_stamp = stamp
        try:
            signer = self.signing.signer_for(self.index.origin)
        except DNSSECError as exc:
            self.last_error = str(exc)
            log.error("%s: %s; kept the last good keys", self.path, exc)
            self.reload_errors += 1  # logged before counted: whoever sees the count sees the reason already written
            return "kept"
        self.signer = signer
        self.serial = self._next_serial(self.file_zone)
        self._swap(self._replacing(self._served(self.file_zone)))
        log.info("%s: %s", self.path, f"signing with keys {[k.key_tag for k in signer.keys]}" if signer else "unsigned")
        return "reloaded"

    def _served(self, zone: Zone) -> Zone:
        """*zone* as served: each child's learned summary where it wins over the file's copy (the copy
        is not pinned, and stands for no serial or for another serial than the learned one), and the
        served serial."""
        children = []
        for child in zone.children:
            learned = self._winning(child)
            if learned is not None:
                child = replace(child, summary=learned, vectors=learned.vectors or child.vectors)
            children.append(child)
        return replace(zone, children=tuple(children), soa=replace(zone.soa, serial=self.serial))

    def _winning(self, child) -> Summary | None:
        """The summary learned of *child* when it wins over the file's copy: the copy is not pinned,
        and stands for no serial or for another serial than the learned one."""
        learned = self.learned.get(child.name)
        if learned is not None and not child.summary.pinned and child.summary.serial != learned.serial:
            return learned
        return None

    def _as_filed(self, zone: Zone | None = None) -> bool:
        """Whether the zone served is its file's (*zone*, the file as read last unless given) as it
        is: the file's serial, and no learned summary that wins over the file's copy (:meth:`_served`)."""
        zone = zone if zone is not None else self.file_zone
        if self.serial != zone.soa.serial:
            return False
        return not any(self._winning(child) is not None for child in zone.children)

    def _reloaded(self) -> tuple[Zone, ZoneIndex, int | None]:
        """The file read again, the index that is to replace the one served and its :attr:`size`, with
        the serial it is to serve (what was learned of children the file no longer has forgotten; both
        restored if the index cannot be built). With a :attr:`loader`, the file is read and indexed in
        its process and that index is served when the zone is served as filed (an edit that raised the
        serial); either way the process's count is the new index's size."""
        loaded = self.loader.load(self.path, self.limits) if self.loader is not None else None
        zone = loaded.zone if loaded is not None else load_zone(self.path, self.limits)
        if zone.origin != self.index.origin:
            raise ZoneFileError(f"{self.path}:1: origin changed from {self.index.origin} to {zone.origin}; "
                                "a running server keeps its origin: restart to move it")
        children = {c.name for c in zone.children}
        learned = {name: s for name, s in self.learned.items() if name in children}
        serial, self.serial = self.serial, self._next_serial(zone)
        self.learned, before = learned, self.learned
        try:
            size = loaded.size if loaded is not None else None
            if loaded is not None and self._as_filed(zone):
                loaded.index.signer = self.signer
                return zone, loaded.index, size
            return zone, self._replacing(self._served(zone)), size
        except Exception:
            self.serial, self.learned = serial, before
            raise

    def _next_serial(self, zone: Zone) -> int:
        return max(zone.soa.serial, self.serial + 1) % 2**32

    def learn(self, summaries: dict[str, Summary]) -> bool:
        """Use *summaries* (child name -> what the child published) for this zone's children; True
        when what the zone serves changed (then it serves under a new serial, and listeners hear)."""
        with self._lock:
            return self._learn(summaries)

    def _learn(self, summaries: dict[str, Summary]) -> bool:
        known = {c.name for c in self.file_zone.children}
        updates = {name: s for name, s in summaries.items() if name in known and self.learned.get(name) != s}
        if not updates:
            return False
        self.learned.update(updates)
        served = self._served(self.file_zone)
        if served.children == self.index.zone.children:
            return False
        serial = self._next_serial(self.file_zone)
        index = self._replacing(replace(served, soa=replace(served.soa, serial=serial)))
        self.serial = serial  # with the index it names, once built
        self._swap(index)
        return True

    def _swap(self, index: ZoneIndex) -> None:
        old, self.index = self.index, index
        old.close()  # stops a replaced LLM scorer's probe
        self._retired.append([old, 0])  # freed a piece at a time by a later check(), once nothing reads it
        del self._retired[:-RETIRED_KEPT]  # no check for a while (--watch-interval 0): the oldest freed whole
        for listener in self.listeners:
            listener()

    def _release_retired(self) -> None:
        """Free the indexes replaced since the last check that nothing reads any more, a piece at a time
        (:meth:`ZoneIndex.release`); one still read (a query in flight) waits for the next check, and
        after :data:`RETIRED_CHECKS` of them is left to be freed whole when its last reader lets go."""
        kept = []
        for entry in self._retired:
            # held by the entry and by getrefcount's argument alone: nobody reads it
            if sys.getrefcount(entry[0]) <= 2:
                entry[0].release()
            elif entry[1] < RETIRED_CHECKS:
                entry[1] += 1
                kept.append(entry)
        self._retired = kept

    def check(self) -> str | None:
        """Reload if the file changed. Returns 'reloaded', 'kept' (bad edit), 'missing' or None."""
        with self._lock:
            if self._retired:
                self._release_retired()
            return self._check()

    def _check(self) -> str | None:
        stamp = _stamp(self.path)
        if stamp == self._stamp:
            return self._check_keys()
        self._stamp = stamp
        if stamp is None:
            log.warning("%s: file is gone; still serving its last version", self.path)
            return "missing"
        try:
            with self.load_guard:
                zone, index, size = self._reloaded()
        except ZoneFileError as exc:
            self.last_error = str(exc)
            log.error("%s\n%s: kept the last good version (serial %d)", exc, self.path, self.index.zone.soa.serial)
            self.reload_errors += 1  # logged before counted
            return "kept"
        except Exception as exc:  # a scorer that cannot be built, say: keep serving
            self.last_error = f"{self.path}: {exc}"
            log.exception("%s: reload failed; kept the last good version", self.path)
            self.reload_errors += 1  # logged before counted
            return "kept"
        self.file_zone, self.size = zone, size
        self.last_error = None
        self._swap(index)
        log.info("%s: reloaded %s (serial %d, %d children, %d tools)", self.path, zone.origin,
                 zone.soa.serial, len(zone.children), len(zone.tools))
        self.reloads += 1  # counted once served and logged: whoever sees the count finds the new version served
        return "reloaded"
