"""Zones loaded on first use: a tree too big to load whole before its first answer.

``tooldns serve DIR --lazy --listen ADDR`` reads one zone file at start, the top one: every other
file's origin is its name (``weather.tools.yaml`` holds ``weather.tools.``, as ``tooldns build``
and the shipped tree name them; ``root.yaml``, which a build writes for the root, is the top one).
A zone is read, checked and indexed the first time a query is about it, and at most *max_loaded*
zones stay loaded, holding at most *max_memory* bytes together (as Unbound bounds its caches: each
zone counted as what its objects hold, :mod:`.footprint`, as the loading process walked them, when
it is loaded and again when an edit of it is reloaded):
the least recently asked is dropped (its counters kept) and read again when asked again. A
million-tool tree (67,170 zones) thus answers as soon as its root is read, in the memory of the
zones its clients ask about; loading everything first took minutes and gigabytes.

What laziness gives up, and where to get it back:

* a broken file is found when first asked: its queries get SERVFAIL with an extended error naming
  the file (and the log says why) until the file is fixed; ``tooldns check DIR`` checks every file
  beforehand, as a start without ``--lazy`` does;
* a parent's glue is not compared with its child's file, and files named otherwise than their
  origin are not served (the log says which at start, and warns when the top zone's glue names
  addresses other than the ones served: a tree built without ``--address``);
* an edit of a zone that is not loaded is seen within a round of the file watcher's looks at the
  files of the zones not loaded (:data:`FILE_CHECKS` a round), against the stamps taken when the
  directory was listed at the start.

Loading happens off the event loop, which only answers: a query about a zone not loaded raises
:class:`~tooldns.serving.server.NotReady` (:meth:`LazyZones.lookup`), the server answers it once the
zone is loaded, and meanwhile answers every query about the zones loaded. At most *max_loading* zones
load at once (``--max-loading``, threads), the others wait in one first-come queue of at most
*load_queue* zones (``--load-queue``), each zone once however many queries wait for it; past that, a
query about yet another zone gets SERVFAIL at once (an extended error says the server is busy
loading), so that a flood of first-time zones costs its own queries, not those of the zones loaded.
The files themselves are read and indexed in a loading process (:mod:`.loader`), whose indexes the
loading threads only unpickle, and kept there as snapshots to be read back whole the next time.

Parents follow their children as parents served apart do (:mod:`.summaries`), without NOTIFY or
polling: every zone of the tree is in this process. A zone that changes (its file reloaded, a
summary learned of a child, a file changed while the zone was not loaded) tells its parent, loaded
for it if need be, its published summary, used under the same rules (``pin``, ``serial``); what a
zone learned and the serial it served outlive its being dropped (raised by one if its file changed
meanwhile). A zone never served has no serial of its own: changed, it serves its file's, so an
edit reaches its parent when it raised the serial (as ``tooldns build --update`` does). Zone files
added while serving (leaves split by ``tooldns build --update --split-leaves``) are served from the
watcher's next look at the directory (:meth:`LazyZones.new_files`: a stat of the directory each
round, a listing when it changed).

    >>> zones = LazyZones("built/", max_loaded=20_000)
    >>> resolver = MultiZoneResolver([ZoneResolver(zones.top)], lazy=zones)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial

from dnslib import RCODE, DNSRecord
from dnslib.server import BaseResolver

from ..dnssec.signer import Signing
from ..exceptions import NameError_, ZoneFileError
from ..protocol import names
from ..protocol.intent import INTENT_OPTION_CODE
from ..zone.limits import ZoneLimits
from ..zone.model import Summary
from ..zone.zonefile import stat_stamp
from .descriptors import room_for_maps
from .footprint import zone_footprint
from .reply import error_reply
from .resolver import ZoneResolver
from .loader import Loaded, ZoneLoader, map_path, open_trusted
from .mapped import LeafMap, MappedResolver
from .server import NotReady
from .store import ZoneStore, _stamp
from .summaries import learned_summary, publish

log = logging.getLogger(__name__)

#: zones kept loaded at most (about 0.2 MB each for a built leaf of 20 tools)
DEFAULT_MAX_LOADED = 10_000
#: bytes the zones kept loaded hold together at most, as counted (0: no bound but *max_loaded*); the
#: process's resident memory runs higher (the allocator's slack, the top zone, the names of the files):
#: 1,117 MiB for a million-tool tree's server after 10,000 distinct intents (docs/serving.md)
DEFAULT_MAX_MEMORY = 768 * 2**20
#: zones loaded at once at most (threads; ``--max-loading``), and waiting to be (``--load-queue``)
DEFAULT_MAX_LOADING = 1
DEFAULT_LOAD_QUEUE = 64
#: seconds the queries that waited for a zone's load may be answered by it though dropped since
FRESH = 1.0
#: the file a build writes for its root zone
ROOT_FILE = "root"
#: files of zones not loaded the watcher looks at in each round (a stat each)
FILE_CHECKS = 2000
#: zones whose files changed loaded in each round at most, so that their parents learn: an update of
#: thousands of zones is followed over many rounds rather than holding up answers for one long one
FOLLOW_LOADS = 25


def _dir_stamp(path: str):
    """The directory's modification time, changed by a file added, removed or renamed in it; None
    when it cannot be read, or when it is less than a second old: file times tick with a coarse
    clock, so a file added in the same tick as the last change leaves the time as it was, and a
    listing made in that second may miss it (None: list again next time)."""
    try:
        stamp = os.stat(path).st_mtime_ns
    except OSError:
        return None
    return stamp if time.time_ns() - stamp >= 1_000_000_000 else None


def _listing(zonedir: str) -> tuple[set[str], dict[str, str], dict[str, object]]:
    """The directory's entry names, its zone files by name without the extension, and each zone
    file's stamp (a stat each, as telling files from directories takes anyway); ZoneFileError as
    :func:`~tooldns.zone.zonefile.zone_files` raises it."""
    try:
        listed = set(os.listdir(zonedir))
    except OSError as exc:
        raise ZoneFileError(f"{zonedir}: not a directory of zone files ({exc.strerror})") from exc
    files, stamps = {}, {}
    for stem, path in _zone_names(zonedir, listed).items():
        try:
            st = os.stat(path)
        except OSError:  # gone since the listing, or a broken link
            continue
        if stat.S_ISREG(st.st_mode):
            files[stem] = path
            stamps[path] = stat_stamp(st)
    if not files:
        raise ZoneFileError(f"{zonedir}: no *.yaml zone files")
    return listed, files, stamps


def _zone_names(zonedir: str, names_: set[str]) -> dict[str, str]:
    """The zone files among the directory entries *names_*, by name without the extension (of a
    name and its ``.yml`` twin, the latter, as :func:`~tooldns.zone.zonefile.zone_files` sorts them)."""
    out = {}
    for name in sorted(names_):
        stem, ext = os.path.splitext(name)
        if ext in (".yaml", ".yml"):
            out[stem] = os.path.join(zonedir, name)
    return out


def _origins(by_name: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Zone files by name (without the extension) as (origin -> file, files named after no origin)."""
    paths: dict[str, str] = {}
    unnamed = []
    for stem, path in by_name.items():
        try:
            paths[names.normalize(stem + ".")] = path
        except NameError_:
            unnamed.append(path)
    return paths, unnamed


class Unloadable(BaseResolver):
    """Answers for a zone whose file cannot be loaded: SERVFAIL, with an extended error saying so."""

    #: the zone's store, as a :class:`ZoneResolver` has one: none, nothing is loaded
    source = None

    def __init__(self, origin: str, path: str) -> None:
        self.origin, self.path = origin, path  # why it cannot be loaded is in the server's log

    def why(self) -> str:
        return (f"zone {self.origin} cannot be loaded from its file {os.path.basename(self.path)}; "
                "see the server's log")

    def resolve(self, request: DNSRecord, handler) -> DNSRecord:
        """SERVFAIL, whatever was asked, with an extended error naming the file."""
        return error_reply(request, RCODE.SERVFAIL, self.why())

    def fast_answer(self, data: bytes, udp: bool) -> None:
        """No fast path: every query is answered by :meth:`resolve`."""
        return None

    def counters(self) -> dict[str, int]:
        """Nothing counted: the zone never answered."""
        return {}


class Busy(Unloadable):
    """Answers for a zone not loaded while the load queue is full: SERVFAIL, try again later."""

    def why(self) -> str:
        return f"zone {self.origin} is not loaded and too many zones wait to be; try again"


class LazyZones:
    """The zones of a directory, each loaded when first asked for; at most *max_loaded* at once, holding
    at most *max_memory* bytes as counted."""

    #: what each load, and each leaf map opened, runs in (``tooldns serve`` sets :class:`~.gcpolicy.QuietLoads`)
    load_guard = contextlib.nullcontext()

    def __init__(self, zonedir: str | os.PathLike, *, limits: ZoneLimits | None = None,
                 signing: Signing | None = None, max_loaded: int = DEFAULT_MAX_LOADED,
                 listen: list[str] | None = None, follow: bool = True, max_loading: int = DEFAULT_MAX_LOADING,
                 load_queue: int = DEFAULT_LOAD_QUEUE, loader: ZoneLoader | None = None,
                 max_memory: int = DEFAULT_MAX_MEMORY) -> None:
        if max_loaded < 1 or max_loading < 1 or load_queue < 1 or max_memory < 0:
            raise ValueError(f"max_loaded, max_loading and load_queue must be at least 1 and max_memory at least "
                             f"0, not {max_loaded}, {max_loading}, {load_queue}, {max_memory}")
        self.limits, self.signing, self.max_loaded, self.max_memory = limits, signing, max_loaded, max_memory
        self.held, self._held = 0, {}  # bytes loaded zones hold, counted at each load and reload (origin -> its)
        self._pinned: set[str] = set()  # zones loading their parents: not dropped meanwhile
        #: loader: reads and indexes zone files in processes of its own (None: the loading threads do)
        self.max_loading, self.load_queue, self.loader = max_loading, load_queue, loader
        #: origin -> the future of its load, queued or under way (first come, first loaded); the loading threads
        self._queue, self._pool = {}, None
        #: origin -> what its queued load gave and when, for the queries that waited for it (the zone
        #: may be dropped again before they are answered, when loading it loaded its parent and
        #: max_loaded is small), for FRESH seconds
        self._fresh: OrderedDict[str, tuple[BaseResolver, float]] = OrderedDict()
        #: busy: queries refused at once because the load queue was full
        self.busy, self.zonedir = 0, str(zonedir)
        self._dir_stamp = _dir_stamp(self.zonedir)  # before the listing: a file added during it is seen later
        #: the names in the directory when it was last listed
        self._names, by_name, stamps = _listing(self.zonedir)
        top_path = by_name.pop(ROOT_FILE, None)
        #: origin -> its file, for every zone but the top one
        self.paths, unnamed = _origins(by_name)
        if top_path is None:
            top_path = self.paths.pop(self._top_origin(zonedir))
        #: the top zone, loaded now and never dropped
        self.top = ZoneStore(top_path, limits=limits, signing=signing, loader=loader)
        self._warn(top_path, listen, unnamed)
        self.paths = self._served(self.paths)
        #: origin -> the resolver of a loaded zone, least recently asked first
        self.loaded: OrderedDict[str, ZoneResolver] = OrderedDict()
        #: origin -> (the file's stamp, why it could not be loaded): not tried again until it changes
        self.failed: dict[str, tuple[object, Unloadable]] = {}
        #: counters of zones dropped, summed, so that nothing counted is lost
        self.retired: dict[str, int] = {}
        self.loads = self.drops = 0
        #: origin -> its file's stamp when last seen while not loaded (at the start, when dropped):
        #: loaded from another, the zone changed
        self.stamps: dict[str, object] = {o: stamps[p] for o, p in self.paths.items()}
        #: what dropped zones served: origin -> its serial, and what it had learned of its children
        self.served: dict[str, int] = {}
        self.learned: dict[str, dict[str, Summary]] = {}
        #: parents follow their children: a zone that changes tells its parent its new summary
        self.follow = follow
        #: called with (resolver, loaded, changed) when a zone is loaded (True) or dropped (False);
        #: *changed*: loaded from a file that changed since the zone was dropped
        self.listeners: list[Callable[[ZoneResolver, bool, bool], None]] = []
        self._lock = threading.RLock()  # a load may load the zone's parent (_publish)
        self._round: list[str] = []
        #: zones whose files changed, to load so that their parents learn (FOLLOW_LOADS a round)
        self._to_follow: dict[str, object] = {}
        #: origin -> a leaf not loaded answered from its map (:mod:`.mapped`), least recently asked first: at
        #: most :attr:`max_maps` (a file descriptor each) of at most *max_memory* bytes (:attr:`mapped_bytes`)
        self.maps: OrderedDict[str, MappedResolver] = OrderedDict()
        self.max_maps, self.mapped_bytes, self._maps_lock = room_for_maps(max_loaded), 0, threading.Lock()
        self.mapped_stats = {"queries": 0, "trimmed": 0}  # what they all answered, counted together

    def _warn(self, top_path: str, listen: list[str] | None, unnamed: list[str]) -> None:
        """Say what will not be reached: glue naming addresses not served here, files named otherwise."""
        origin = self.top.index.origin
        elsewhere = sorted({ns.address for c in self.top.zone.children for ns in c.nameservers} - set(listen or []))
        if listen is not None and elsewhere:
            log.warning("%s: glue names %s, not the addresses served here (%s): clients that follow it will not "
                        "reach these zones; build the tree with --address", top_path, ", ".join(elsewhere[:3])
                        + (" ..." if len(elsewhere) > 3 else ""), ", ".join(listen))
        for path in [p for o, p in self.paths.items() if not names.is_subdomain(o, origin)] + unnamed:
            log.warning("%s: its name is no origin under %s; not served with --lazy", path, origin)

    def _top_origin(self, zonedir) -> str:
        """Without a ``root.yaml``: the origin every other file's origin lies under (the shipped tree's
        ``tools.yaml``); ZoneFileError when no file, or more than one, is such a top."""
        tops = [o for o in self.paths if all(names.is_subdomain(other, o) for other in self.paths)]
        if len(tops) != 1:
            raise ZoneFileError(f"{zonedir}: --lazy needs one top zone, root.yaml or a file named after an origin "
                                f"that every other file's origin lies under; found {len(tops)} "
                                f"among {len(self.paths)} files named after origins")
        return tops[0]

    def _served(self, paths: dict[str, str]) -> dict[str, str]:
        """The zones of *paths* this loader serves: those under the top zone, the top one aside."""
        top = self.top.index.origin
        return {o: p for o, p in paths.items() if o != top and names.is_subdomain(o, top)}

    def new_files(self) -> bool:
        """Whether zone files were added to the directory or taken from it since it was last listed
        (its modification time says so at the cost of one stat): added ones are served from now on,
        as if there at the start; a removed one that is not loaded is forgotten, so that its names
        are answered by its parent's file (a loaded one keeps its last good version, as every zone
        whose file goes missing)."""
        stamp = _dir_stamp(self.zonedir)
        if stamp is not None and stamp == self._dir_stamp:
            return False
        self._dir_stamp = stamp
        try:
            listed = set(os.listdir(self.zonedir))
        except OSError as exc:
            log.warning("%s: cannot list the zone files (%s); serving the ones known", self.zonedir, exc)
            return False
        # only the names that came or went are read: the directory of a big tree changes with every update
        came, went = _zone_names(self.zonedir, listed - self._names), _zone_names(self.zonedir, self._names - listed)
        self._names = listed
        added = self._served(_origins(came)[0])
        gone = _origins(went)[0]
        if not added and not gone:
            return False
        with self._lock:
            gone = [o for o in gone if o in self.paths and o not in self.loaded]
            self._forget(gone)
            for origin, path in added.items():
                log.info("%s: new zone file, zone %s served from now on", path, origin)
                self.stamps[origin] = _stamp(path)  # a change from now on is an edit its parent hears of
            if added:
                self.paths = {**self.paths, **added}  # a new dict, swapped in whole, as _forget swaps it
        return bool(added or gone)

    def _forget(self, origins: list[str]) -> None:
        """Zones whose files were taken away: no longer served from here (their names are answered by
        their parents' files), nothing kept of them (under the lock)."""
        for origin in origins:
            self._clear(origin)
        if origins:
            paths = dict(self.paths)  # a new dict, swapped in whole: get() reads it without the lock
            for origin in origins:
                paths.pop(origin, None)
            self.paths = paths

    def _clear(self, origin: str) -> None:
        """Forget what was kept of zone *origin* while it was not loaded (its map among them: loaded
        whole, or its file gone or changed, it is not answered from it any more)."""
        for held in (self.stamps, self.learned, self.served, self.failed):
            held.pop(origin, None)
        self._unmap(origin)

    def _unmap(self, origin: str | None = None) -> None:
        """Stop answering leaf *origin* from its map (None: the least recently asked); its mapping is let
        go with the last query that reads it. Under a lock of its own, held a few microseconds."""
        with self._maps_lock:
            if origin is None and not self.maps:
                return
            mapped = self.maps.pop(origin, None) if origin is not None else self.maps.popitem(last=False)[1]
            if mapped is not None:
                self.mapped_bytes -= mapped.size

    # -- the event loop's side: never loads, never waits --
    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Load zones in *max_loading* threads from now on (a :class:`~.tree.Tree` calls this at start)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.max_loading, thread_name_prefix="tooldns-load")

    async def stop(self) -> None:
        """Stop loading: queued loads are cancelled, those under way finish."""
        pool, self._pool = self._pool, None
        if pool is not None:
            for future in list(self._queue.values()):
                future.cancel()
            await asyncio.get_running_loop().run_in_executor(None, partial(pool.shutdown, cancel_futures=True))
        if self.loader is not None:
            self.loader.close()

    def lookup(self, origin: str) -> BaseResolver | None:
        """The resolver of zone *origin* when loaded (or known unloadable), None when no file here holds
        it; otherwise its load is queued and :class:`NotReady` raised, with a future done once loaded.
        Takes no lock and reads no file but a leaf's map (:meth:`_mapped`): the event loop calls it for
        every query. Without :meth:`start`, loads at once (:meth:`get`)."""
        resolver = self.loaded.get(origin)
        if resolver is not None:
            try:
                self.loaded.move_to_end(origin)
            except KeyError:  # dropped by a load in another thread just now: still answers this query
                pass
            return resolver
        mapped = self.maps.get(origin)
        if mapped is not None:
            try:
                self.maps.move_to_end(origin)
            except KeyError:  # loaded whole in another thread just now: still answers this query
                pass
            return mapped
        return self._not_held(origin, mapped=True)

    def whole(self, origin: str) -> BaseResolver | None:
        """The resolver of zone *origin* loaded whole (not from its map), as :meth:`lookup` gives it:
        what a mapped leaf asks when a query needs the zone itself."""
        resolver = self.loaded.get(origin)
        return resolver if resolver is not None else self._not_held(origin, mapped=False)

    def _not_held(self, origin: str, mapped: bool) -> BaseResolver | None:
        """:meth:`lookup` of a zone neither loaded nor answered from its map: None when no file here
        holds it; at once when there are no loading threads; what its last load gave, for a moment, or
        why it cannot be; its map (when *mapped*); else its load queued."""
        path = self.paths.get(origin)
        if path is None:
            return None
        if self._pool is None:
            return self.get(origin)
        fresh = self._fresh.get(origin)
        if fresh is not None and time.monotonic() - fresh[1] < FRESH:
            return fresh[0]
        failed = self.failed.get(origin)
        if failed is not None and origin not in self._queue and failed[0] == _stamp(path):
            return failed[1]
        return (self._mapped(origin, path) if mapped else None) or self._queued(origin, path)

    def _mapped(self, origin: str, path: str) -> MappedResolver | None:
        """Leaf *origin* answered from its map, when the loading process kept one for its file as it is
        now (unchanged since it was last seen: a changed one is loaded, so that its parent learns);
        None otherwise. A stat and, when there is a map, an open and a mapping: on the event loop (in the
        thread pool they cost more than they save, 2026-12-06: docs/serving.md)."""
        loader = self.loader
        if loader is None or loader.snapshots is None or self.signing is not None or not self.max_maps:
            return None
        stamp = _stamp(path)
        if stamp is None or stamp != self.stamps.get(origin):
            return None
        try:
            with self.load_guard:  # its objects out of the collector's way, as a zone loaded (tooldns serve)
                leaf = LeafMap.open(map_path(loader.snapshots, path, stamp, self.limits or ZoneLimits()), open_trusted)
        except Exception as exc:  # spoiled on the disk, say: the zone is loaded as before
            log.warning("%s: its leaf map cannot be read (%s); the zone is loaded", path, exc)
            return None
        if leaf is None or leaf.origin != origin:
            return None
        mapped = MappedResolver(leaf, INTENT_OPTION_CODE, self.mapped_stats, partial(self.whole, origin))
        with self._maps_lock:
            before = self.maps.pop(origin, None)
            self.maps[origin] = mapped
            self.mapped_bytes += mapped.size - (before.size if before is not None else 0)
        while len(self.maps) > max(1, self.max_maps) or 0 < self.max_memory < self.mapped_bytes and len(self.maps) > 1:
            self._unmap()
        return mapped

    def _queued(self, origin: str, path: str) -> BaseResolver:
        """Zone *origin*'s load queued (once however many queries wait for it): :class:`NotReady`
        raised, or :class:`Busy` when the queue is full."""
        future = self._queue.get(origin)
        if future is None:
            if len(self._queue) >= self.load_queue:
                self.busy += 1
                return Busy(origin, path)
            # queued before it is submitted: a load done before submit() returned would leave it queued
            future = self._queue[origin] = Future()
            self._pool.submit(self._load_queued, origin, future)
        raise NotReady(future)

    def _load_queued(self, origin: str, future: Future) -> None:
        """A queued load, in a loading thread; *future* done once it is out of the queue."""
        try:
            resolver = self.get(origin)
            if resolver is not None and resolver.source is not None:  # loaded, not unloadable
                self._fresh[origin] = (resolver, time.monotonic())
                while len(self._fresh) > self.load_queue:
                    self._fresh.popitem(last=False)
        finally:
            self._queue.pop(origin, None)
            if not future.done():  # cancelled: stop()
                future.set_result(None)

    # -- any thread's side --
    def get(self, origin: str) -> BaseResolver | None:
        """The resolver of zone *origin*, loading it if need be; None when no file here holds it.
        Reads and indexes its file: off the event loop (:meth:`lookup` is the loop's)."""
        resolver = self.loaded.get(origin)
        if resolver is not None:
            with self._lock:
                if origin in self.loaded:
                    self.loaded.move_to_end(origin)
            return resolver
        path = self.paths.get(origin)
        if path is None:
            return None
        with self.load_guard:
            return self._loaded(origin, path)

    def _loaded(self, origin: str, path: str) -> BaseResolver:
        loaded = self._read_elsewhere(origin, path)  # before the lock: other threads' loads go on meanwhile
        with self._lock:
            resolver = self.loaded.get(origin)
            if resolver is None:
                resolver = self._load(origin, path, loaded)
            return resolver

    def _read_elsewhere(self, origin: str, path: str) -> Loaded | ZoneFileError | None:
        """Zone *origin* read and indexed by the :attr:`loader`'s process, or why its file cannot be
        served; None when this thread is to load it (no loader, an index that cannot be pickled, a file known bad)."""
        failed = self.failed.get(origin)
        if self.loader is None or (failed is not None and failed[0] == _stamp(path)):
            return None
        try:
            return self.loader.load(path, self.limits)
        except ZoneFileError as exc:
            return exc
        except Exception:  # anything else: this thread loads it, and says what fails
            log.exception("%s: the loading process failed; loading it here", path)
            return None

    def _load(self, origin: str, path: str, loaded: Loaded | ZoneFileError | None = None) -> BaseResolver:
        """Load zone *origin* from *path* (under the lock), dropping the least recently asked past
        *max_loaded* or *max_memory* (never the zone just loaded); an :class:`Unloadable` when the file
        cannot be served, until it changes. A zone loaded from a file that changed since it was last
        seen tells its parent its summary
        (:meth:`_publish`), under a serial raised by one if it served one before."""
        stamp = _stamp(path)
        failed = self.failed.get(origin)
        if failed is not None and failed[0] == stamp:
            return failed[1]
        was = self.stamps.get(origin)
        changed = origin in self.failed or (was is not None and was != stamp)
        try:
            if isinstance(loaded, ZoneFileError):
                raise loaded
            store = ZoneStore(path, limits=self.limits, signing=self.signing, learned=self.learned.get(origin),
                              served=self.served.get(origin), changed=changed, loaded=loaded, loader=self.loader)
            if store.index.origin != origin:
                store.index.close()
                raise ZoneFileError(f"{path}:1: holds origin {store.index.origin}, not {origin} as its name says; "
                                    "with --lazy a zone file is named after its origin")
        except Exception as exc:  # a bad file, key or scorer: this zone answers SERVFAIL, the others answer
            log.error("%s\n%s: cannot load zone %s; it answers SERVFAIL until the file is fixed", exc, path, origin)
            unloadable = Unloadable(origin, path)
            self.failed[origin] = (stamp, unloadable)
            return unloadable
        self._clear(origin)
        resolver = ZoneResolver(store)
        resolver.prepare()  # the fast path's pieces made here, not by the loop's first query
        store.listeners.append(resolver.renewed)  # and after each reload or summary learned, if asked
        self._fresh.pop(origin, None)  # what an earlier load gave is stale once another is loaded
        self.loaded[origin] = resolver
        self._count(origin, store)
        self.loads += 1
        for listener in self.listeners:
            listener(resolver, True, changed)
        if self.follow:
            store.listeners.append(partial(self._publish, origin))  # each reload, each summary learned
        self._evict()
        if changed and self.follow:
            self._pinned.add(origin)  # its parent, loaded for it, must not drop it
            try:
                self._publish(origin)
            finally:
                self._pinned.discard(origin)
        return resolver

    def _count(self, origin: str, store: ZoneStore) -> None:
        """Count the bytes loaded zone *origin* holds, at its load and after each reload of its file:
        as the loading process counted them, else (read in this thread: the slow path already) by a walk
        of its objects (:func:`.zone_footprint`)."""
        size = store.size if store.size is not None else zone_footprint(store.file_zone, store.index)
        self.held += size - self._held.get(origin, 0)
        self._held[origin] = size

    def _evict(self) -> None:
        """Drop the least recently asked zones past *max_loaded* or *max_memory*, keeping the zone just
        loaded (the most recent) and a zone whose load is loading its parent."""
        while len(self.loaded) > self.max_loaded or (0 < self.max_memory < self.held and len(self.loaded) > 1):
            if next(iter(self.loaded)) in self._pinned:
                return
            self._drop(*self.loaded.popitem(last=False))

    def _drop(self, origin: str, resolver: ZoneResolver) -> None:
        """Forget a loaded zone: its count of bytes first; its counters into :attr:`retired`; its file's
        stamp, the serial it served and what it learned of its children remembered for when it is
        loaded again."""
        self.held -= self._held.pop(origin, 0)
        self.drops += 1
        for key, value in resolver.counters().items():
            if isinstance(value, int):
                self.retired[key] = self.retired.get(key, 0) + value
        store = resolver.source
        if _stamp(store.path) is None:  # its file was taken away while it was loaded: forgotten now
            self._forget([origin])
        else:
            self.stamps[origin] = store._stamp
            self.served[origin] = store.serial
            if store.learned:
                self.learned[origin] = dict(store.learned)
        for listener in self.listeners:
            listener(resolver, False, False)
        store.listeners.clear()  # the resolver's own among them: no cycle left for the collector
        store.index.close()

    def _publish(self, origin: str) -> None:
        """Zone *origin* serves something new (a reload, a summary learned of a child, a load from a
        changed file): its parent learns its summary, as a parent served apart learns it by NOTIFY
        and a fetch (:mod:`.summaries`), under the same rules (``pin``, ``serial``); the parent is
        loaded for it if need be, and a change there goes on up."""
        resolver = self.loaded.get(origin)
        parent = self._parent(origin)
        if resolver is None or parent is None:
            return
        try:
            summary = learned_summary(publish(resolver.source.index.zone))
            with self._lock:
                held = self.top if parent == self.top.index.origin else self.get(parent)
                upper = held if held is self.top else held.source if held is not None else None
                if upper is not None:
                    upper.learn({origin: summary})  # a change there calls _publish(parent)
        except Exception:  # the parent keeps its copy; answering goes on
            log.exception("%s: its parent %s could not learn its summary", origin, parent)

    def _parent(self, origin: str) -> str | None:
        """The zone above *origin* served here: the nearest origin above it with a file, or the top."""
        top = self.top.index.origin
        about = names.parent(origin)
        while about != "." and about != top and about not in self.paths:
            about = names.parent(about)
        return about if about != "." else None

    def files_changed(self) -> bool:
        """Whether the file of a zone that is not loaded changed: looks at the next :data:`FILE_CHECKS`
        of them (a round goes through all), against their stamps taken at the start or when dropped.
        A zone whose file changed is loaded when parents follow their children, so that its parent
        learns its summary (:data:`FOLLOW_LOADS` a round at most, the others in the next rounds);
        otherwise, or when the file cannot be loaded, its new stamp is noted, so that it is reported
        once, and it loads afresh when asked."""
        if not self._round:
            self._round = [o for o in self.paths if o not in self.loaded]
        batch, self._round = self._round[:FILE_CHECKS], self._round[FILE_CHECKS:]
        changed = []
        for origin in batch:
            path = self.paths.get(origin)
            if path is None or origin in self.loaded:
                continue
            stamp = _stamp(path)  # against the stamp every zone not loaded has (start, drop, new file)
            if stamp != self.stamps.get(origin, stamp) and self._to_follow.get(origin) != stamp:  # reported once
                changed.append((origin, stamp))
                self._unmap(origin)  # its map is of the file before
        if not self.follow:
            with self._lock:
                self.stamps.update(changed)  # reported once; loaded afresh when asked
            return bool(changed)
        self._to_follow.update(changed)
        for origin in list(self._to_follow)[:FOLLOW_LOADS]:
            stamp = self._to_follow.pop(origin)
            if origin in self.loaded or origin not in self.paths:
                continue
            self.get(origin)
            with self._lock:
                if origin not in self.loaded:  # a file that cannot be loaded: seen once
                    self.stamps[origin] = stamp
        return bool(changed)

    def check(self, store: ZoneStore) -> None:
        """Reload *store* if its file changed (:meth:`ZoneStore.check`), under the loader's lock, which
        a parent learning a summary takes too (:meth:`_publish`, from a query answered in the thread
        pool); nothing for a zone dropped since the watcher listed the stores."""
        with self._lock:
            origin = store.index.origin
            resolver = self.loaded.get(origin)
            if store is self.top:
                store.check()
            elif resolver is not None and resolver.source is store and store.check() == "reloaded":
                self._count(origin, store)  # counted anew, and the bounds kept
                self._evict()

    def stores(self) -> list[ZoneStore]:
        """The top zone's store and those of the zones loaded now."""
        return [self.top, *(r.source for r in list(self.loaded.values()))]
