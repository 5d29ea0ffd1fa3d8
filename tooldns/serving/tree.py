"""Running a `.tools` tree: one authoritative server per name-server address, one event loop.

:class:`Tree` loads every ``*.yaml`` zone file of a directory, starts a :class:`DNSServer` (a UDP
and a TCP socket) on each address the zones' name servers name, all on one port (so glue A records
are all a client needs), and polls the files for live edits and the directory for new files (each
served from the next look, on new sockets where its addresses have none). Zones whose name servers share an
address share its server, which answers each query from the zone it is about
(:mod:`.multizone`): a tree needs two sockets per address, not per zone. Each zone reloads on its
own; an edit touches no other zone. A directory with any broken file is refused whole at start,
with every message.

*only* serves a subset of the directory's zones (a tree spread over machines: each serves its own
zones, the glue naming the machines); *listen* serves them on the given addresses instead of their
name servers' (a machine's own address; a backend behind a load balancer such as dnsdist, whose
address the zone files name). Every file is still loaded and checked.

    >>> with TreeThread("zones", port=5300) as tree:
    ...     print(tree.table())
    >>> Tree("zones", 5300, only=["weather.tools."], listen=["10.0.0.2"])   # one zone, on this machine

Keywords past the tree's own go to every server: ``TreeThread("zones", 5300, rate_limit=0,
max_tcp=64)`` (see :class:`DNSServer`; ``reuse_port=True`` lets several processes serve the same
tree, :mod:`.workers`). ``tooldns serve zones/`` is the command-line shell over this.

*lazy* serves every zone of the directory on the *listen* addresses, each zone loaded when first
asked for and at most *max_loaded* at once, holding at most *max_memory* bytes (:mod:`.lazy`: trees too big to
load before answering).

Nothing but answering runs on the event loop: each look at the files (reloads, files added, lazy
zones followed) runs in one work thread (:attr:`Tree.work`), as do the rebuilds of parents that learned
a child's summary (:mod:`.summaries`); what they build replaces what is served in one assignment.

*metrics* (an address and port) serves Prometheus metrics of every server (:mod:`.metrics`);
*query_log* (a path, ``-`` for standard error) writes a JSON line per query (:mod:`.querylog`),
with the intents' text only when *log_intents* is set.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..dnssec.signer import Signing
from ..exceptions import ZoneFileError
from ..protocol import names
from ..zone.limits import ZoneLimits
from ..zone.zonefile import zone_files
from .lazy import DEFAULT_LOAD_QUEUE, DEFAULT_MAX_LOADED, DEFAULT_MAX_LOADING, DEFAULT_MAX_MEMORY, LazyZones
from .loader import SNAPSHOT_DIR, ZoneLoader
from .multizone import MultiZoneResolver
from .resolver import ZoneResolver
from .server import MAX_TCP, MAX_TCP_PER_CLIENT, DNSServer
from .store import ZoneStore
from .summaries import SUMMARY_BUDGET, SUMMARY_FLOOR, SummaryKeeper

log = logging.getLogger(__name__)

DEFAULT_PORT = 5300
#: with port 0, how many ports are tried before giving up on one free on every address
PORT_ATTEMPTS = 20
#: processes a lazy tree reads and indexes its zone files in (``--load-processes``; 0: its loading threads)
DEFAULT_LOAD_PROCESSES = 1
#: what a Tree passes on to each of its servers
_SERVER_OPTIONS = {"rate_limit", "rate_limit_exempt", "max_tcp", "max_tcp_per_client", "tcp_idle", "tcp_idle_busy",
                   "reuse_port", "rcvbuf"}
_POLICY_COUNTERS = ("rate_limited", "slipped", "tcp_refused", "tcp_evicted")


def load_tree(zonedir: str | os.PathLike, limits: ZoneLimits | None = None, signing: Signing | None = None,
              warn=None) -> list[ZoneStore]:
    """Load and check every zone file (within *limits*, the defaults when None); raise one
    :class:`ZoneFileError` listing all problems. Zones with keys are signed (*signing*: the key
    directory, ``keys/`` beside the files unless told; :mod:`tooldns.dnssec`). What is no error
    but worth saying (a delegation whose zone file is not there) goes to *warn* (a callable taking
    the message; logged as a warning when None)."""
    warn = warn if warn is not None else log.warning
    stores, errors = [], []
    for path in zone_files(zonedir):
        try:
            stores.append(ZoneStore(path, limits=limits, signing=signing))
        except ZoneFileError as exc:
            errors.extend(exc.errors)
    by_origin: dict[str, ZoneStore] = {}
    for s in stores:
        if s.index.origin in by_origin:
            errors.append(f"{s.path}:1: origin {s.index.origin} is already served by {by_origin[s.index.origin].path}")
        by_origin[s.index.origin] = s
    unread = bool(errors)  # a file that failed to load may be the child's: the errors say so, not a warning
    for s in stores:  # glue in the parent must match what the child says of itself
        for child in s.zone.children:
            cs = by_origin.get(child.name)
            if cs is None:
                if not unread:  # a child served elsewhere (an organisation's own server) is not an error
                    warn(f"{s.path}: delegation to {child.name} has no zone file here: served elsewhere, "
                         f"or it will not answer")
                continue
            glue, own = _servers(child.nameservers), _servers(cs.zone.nameservers)
            if glue != own:
                errors.append(f"{s.path}:1: glue for {child.name} {sorted(glue)} disagrees with the name servers "
                              f"in {cs.path} {sorted(own)}")
    if errors:
        raise ZoneFileError(errors)
    return stores


def _servers(nameservers) -> set[tuple[str, str]]:
    """Name servers as a parent's glue and the child's own records must agree on: (name, address)."""
    return {(ns.name, ns.address) for ns in nameservers}


def select_zones(stores: list[ZoneStore], only: Sequence[str] | None) -> list[ZoneStore]:
    """The stores whose origins *only* names (all when None); ValueError naming origins not here."""
    if only is None:
        return list(stores)
    wanted = {names.normalize(origin) for origin in only}
    have = [s.index.origin for s in stores]
    missing = sorted(wanted - set(have))
    if missing:
        shown = ", ".join(sorted(have)[:8]) + (", ..." if len(have) > 8 else "")
        raise ValueError(f"no zone file here has origin {', '.join(missing)} (origins here: {shown})")
    return [s for s in stores if s.index.origin in wanted]


def _loader(zonedir: Path, processes: int, snapshots: str | os.PathLike | bool) -> ZoneLoader | None:
    """The loader of a lazy tree's zones (:mod:`.loader`): None with no loading *processes* (the loading
    threads read the files themselves); *snapshots*: a directory, True for the tree's own ``.snapshots``
    when it has one, False for none."""
    if processes == 0:
        return None
    if snapshots is True:
        own = zonedir / SNAPSHOT_DIR
        snapshots = own if own.is_dir() else False
    return ZoneLoader(processes, snapshots or None)


def _listen_addresses(listen: Sequence[str] | None) -> list[str] | None:
    if listen is None:
        return None
    out: list[str] = []
    for text in listen:
        try:
            address = str(ipaddress.ip_address(text.strip()))
        except ValueError:
            raise ValueError(f"not an IP address: {text!r}") from None
        if address not in out:
            out.append(address)
    if not out:
        raise ValueError("no address to listen on")
    return out


def plan(stores: list[ZoneStore], listen: list[str] | None = None) -> dict[str, list[ZoneStore]]:
    """Which zones each address serves: the addresses of their name servers, or every zone on each of
    *listen*. In order of the stores, then of their name servers (the first is the root's, usually)."""
    out: dict[str, list[ZoneStore]] = {}
    for store in stores:
        for address in zone_addresses(store, listen):
            out.setdefault(address, []).append(store)
    return out


def zone_addresses(store: ZoneStore, listen: list[str] | None = None) -> list[str]:
    """Where a zone is served: *listen*, or its name servers' addresses in their order (each once)."""
    return list(listen) if listen is not None else list(dict.fromkeys(ns.address for ns in store.zone.nameservers))


def _check_lazy(listen, only, stores) -> None:
    if listen is None or only is not None or stores is not None:
        raise ValueError("lazy loading serves every zone of the directory on the --listen addresses: "
                         "give --listen, and neither --only nor stores")


def _check_options(watch_interval: float, server_options: dict) -> None:
    if watch_interval < 0:
        raise ValueError(f"watch_interval must be 0 (never look) or more, not {watch_interval}")
    unknown = set(server_options) - _SERVER_OPTIONS
    if unknown:
        raise TypeError(f"unknown server options {sorted(unknown)}; allowed: {', '.join(sorted(_SERVER_OPTIONS))}")


class Tree:
    """All servers of a zone directory in the running event loop."""

    def __init__(self, zonedir: str | os.PathLike, port: int = DEFAULT_PORT, *, watch_interval: float = 0.5,
                 stores: list[ZoneStore] | None = None, answer_cache: int = 4096, only: Sequence[str] | None = None,
                 listen: Sequence[str] | None = None, metrics: tuple[str, int] | None = None,
                 query_log: str | None = None, log_intents: bool = False, summaries: bool = True,
                 summary_refresh: float | None = None, signing: Signing | None = None, lazy: bool = False,
                 max_loaded: int = DEFAULT_MAX_LOADED, max_loading: int = DEFAULT_MAX_LOADING,
                 load_queue: int = DEFAULT_LOAD_QUEUE, load_processes: int = DEFAULT_LOAD_PROCESSES,
                 snapshots: str | os.PathLike | bool = True, summary_floor: float = SUMMARY_FLOOR,
                 summary_budget: int = SUMMARY_BUDGET, max_memory: int = DEFAULT_MAX_MEMORY, **server_options) -> None:
        """*server_options* go to every :class:`DNSServer`: ``rate_limit``, ``rate_limit_exempt``,
        ``max_tcp``, ``max_tcp_per_client``, ``tcp_idle``, ``tcp_idle_busy``, ``reuse_port``, ``rcvbuf``.

        The files are looked at every *watch_interval* seconds for edits (0: never; :meth:`look` looks
        once, as ``tooldns serve`` does on SIGHUP). *max_loading*, *load_queue*: :mod:`.lazy`;
        *load_processes*, *snapshots*: :func:`_loader`; *summary_floor*, *summary_budget*: :mod:`.summaries`."""
        _check_options(watch_interval, server_options)
        self.zonedir = Path(zonedir)
        self.port, self.answer_cache, self.server_options, self.watch_interval = (port, answer_cache, server_options,
                                                                                  watch_interval)
        self.listen = _listen_addresses(listen)
        #: the zones loaded on first use (lazy): every one is served on the listen addresses
        self.lazy: LazyZones | None = None
        #: reads and indexes zone files in processes of its own: a lazy tree's loads, every tree's reloads
        self.loader = _loader(self.zonedir, load_processes, snapshots)
        if lazy:
            _check_lazy(self.listen, only, stores)
            self.lazy = LazyZones(zonedir, signing=signing, max_loaded=max_loaded, listen=self.listen,
                                  follow=summaries, max_loading=max_loading, load_queue=load_queue,
                                  loader=self.loader, max_memory=max_memory)
            stores, summaries = [self.lazy.top], False
        loaded = stores if stores is not None else load_tree(zonedir, signing=signing)
        self._watch_new_files(loaded if stores is None and self.lazy is None else None, signing, only)
        #: every zone of the directory (served here or not) -> its name servers: where NOTIFY goes
        self.known_zones = {store.index.origin: store.file_zone.nameservers for store in loaded}
        self.stores = select_zones(loaded, only)
        #: parents keep their children's summaries fresh (:mod:`.summaries`), polling each child at most
        #: every *summary_refresh* seconds (None: its SOA refresh), with the SummaryKeeper's floor and budget
        self.sync_summaries, self.summary_refresh = summaries, summary_refresh
        self.summary_options = {"floor": summary_floor, "budget": summary_budget}
        self.summaries: SummaryKeeper | None = None
        #: address -> the zones served there
        self.plan = plan(self.stores, self.listen)
        #: origin -> the addresses it is served on
        self.addresses = {store.index.origin: zone_addresses(store, self.listen) for store in self.stores}
        #: (zone, server) for each address of each zone, a server appearing once per zone it serves
        self.servers: list[tuple[ZoneStore, DNSServer]] = []
        #: address -> its server
        self.sockets: dict[str, DNSServer] = {}
        self.resolvers: dict[str, ZoneResolver] = {}
        self._watch: asyncio.Task | None = None
        #: where metrics are served ((address, port); the port chosen once started, when 0), the
        #: query log's path and whether it holds intents; the collector and the log while running
        self.metrics_address = metrics
        self.query_log_path, self.log_intents = query_log, log_intents
        self.metrics = None
        self.query_log = None
        #: the one thread that reads files and builds indexes (looks, reloads, rebuilds), off the event loop
        self.work: ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._looking: asyncio.Future | None = None

    def sockets_needed(self) -> int:
        """Sockets the servers hold while running: a UDP and a TCP socket per address."""
        return 2 * len(self.plan)

    def _options(self, zones: int) -> dict:
        """The server options for a server hosting *zones* zones: a client may hold as many TCP connections
        as it could across the zones' own servers (``max_tcp_per_client`` each), up to ``max_tcp``,
        unless ``max_tcp_per_client`` was given. A resolver asks a tree's leaves in parallel, over TCP
        when it wants more tools than fit a datagram."""
        options = dict(self.server_options)
        if zones > 1 and "max_tcp_per_client" not in options:
            options["max_tcp_per_client"] = min(options.get("max_tcp", MAX_TCP), MAX_TCP_PER_CLIENT * zones)
        return options

    def _resolver(self, stores: list[ZoneStore]) -> ZoneResolver:
        members = [self.resolvers[s.index.origin] for s in stores]
        if self.lazy is not None:
            return MultiZoneResolver(members, lazy=self.lazy)
        return members[0] if len(members) == 1 else MultiZoneResolver(members)

    async def start(self) -> None:
        """Start every server. Port 0: the first server picks a free port and the others share it
        (another is picked when one of the other addresses has it taken already)."""
        self.resolvers = {s.index.origin: ZoneResolver(s) for s in self.stores}
        for resolver in self.resolvers.values():
            resolver.source.loader = self.loader  # reloads read and indexed in the loading process
            resolver.source.listeners.append(resolver.renewed)  # after each swap, in the thread that swapped
        self._loop = asyncio.get_running_loop()
        if self.work is None:
            self.work = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tooldns-work")
        self.work.submit(self._warm, list(self.resolvers.values()))
        if self.lazy is not None:
            self.lazy.start(self._loop)
        self._start_reports()
        any_port = self.port == 0
        for attempt in range(PORT_ATTEMPTS if any_port else 1):
            try:
                await self._bind()
                break
            except OSError as exc:
                for server in self.sockets.values():
                    await self._stop(server)
                self.sockets = {}
                if any_port and exc.errno == errno.EADDRINUSE and attempt + 1 < PORT_ATTEMPTS:
                    log.info("%s; trying another port", exc)
                    self.port = 0
                    continue
                await self.stop()
                raise
        self.servers = [(s, self.sockets[a]) for s in self.stores for a in self.addresses[s.index.origin]]
        if self.sync_summaries:
            self.summaries = SummaryKeeper(self.stores, self.known_zones, self.port, self.sockets,
                                           refresh=self.summary_refresh, local=self.addresses, work=self.work,
                                           **self.summary_options)
            for resolver in self.resolvers.values():
                resolver.on_notify = self.summaries.notified
            await self.summaries.start()
        if self.metrics is not None:
            try:
                self.metrics_address = self.metrics.serve(*self.metrics_address)
            except OSError:
                await self.stop()
                raise
        if self.watch_interval > 0:
            self._watch = asyncio.create_task(self._watcher())

    @staticmethod
    def _warm(resolvers: list[ZoneResolver]) -> None:
        """What each zone would make at its first query, on the event loop, made in the work thread
        at start instead (:meth:`ZoneResolver.prepare`). A query that comes first makes them itself."""
        for resolver in resolvers:
            resolver.prepare()

    async def _bind(self) -> None:
        """A server on every address of the plan, all on one port (glue carries addresses only)."""
        for address, stores in self.plan.items():
            server = self._server(address, stores)
            try:
                await server.start()
            except OSError as exc:
                what = stores[0].index.origin if len(stores) == 1 else f"{len(stores)} zones ({stores[0].index.origin} ...)"
                hint = (" (another server holds it, perhaps a tooldns serve still running: stop it, or choose "
                        "another --port)" if exc.errno == errno.EADDRINUSE else "")
                raise OSError(exc.errno, f"cannot serve {what} on {address}:{self.port}: {exc.strerror}{hint}") from exc
            self.port = server.port
            self.sockets[address] = server

    def _server(self, address: str, stores: list[ZoneStore]) -> DNSServer:
        """The server (not started) of the zones *stores* on *address*, reporting to the metrics and
        the query log."""
        server = DNSServer(self._resolver(stores), address, self.port, cache_size=self.answer_cache,
                           **self._options(len(stores)))
        server.observe(*(report.recorder(server) for report in (self.metrics, self.query_log) if report))
        return server

    def _start_reports(self) -> None:
        """The query log and the metrics collector asked for, before any server answers (imported only
        then: prometheus_client is needed only for metrics)."""
        try:
            if self.query_log_path is not None and self.query_log is None:
                from .querylog import QueryLog

                self.query_log = QueryLog(self.query_log_path, intents=self.log_intents)
            if self.metrics_address is not None and self.metrics is None:
                from .metrics import TreeMetrics

                self.metrics = TreeMetrics(self, query_log=self.query_log)
        except BaseException:
            self._stop_reports()
            raise

    def _stop_reports(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None
        if self.query_log is not None:
            self.query_log.close()  # after the servers: every reply sent is written
            self.query_log = None

    async def _watcher(self) -> None:
        while True:
            await asyncio.sleep(self.watch_interval)
            await self.look_soon()

    def look_soon(self) -> asyncio.Future:
        """One look at the files (:meth:`look`) in the work thread, unless one is under way (from the
        event loop: the watcher, SIGHUP); the future of the look."""
        if self._looking is None or self._looking.done():
            self._looking = asyncio.ensure_future(self._loop.run_in_executor(self.work, self.look))
        return self._looking

    def look(self) -> None:
        """One look at the files: reload the zones whose files changed, and take in files added since
        the last look (lazily: files changed too). Reads files and builds indexes: the watcher runs it in
        the work thread (:meth:`look_soon`), never on the event loop."""
        if self._paths is not None and (self._refused or self._dir_stamp() != self._listing):
            try:
                self._take_in_new_files()
            except Exception:  # keep watching
                log.exception("looking for new zone files in %s", self.zonedir)
        for store in self._loaded_stores():
            try:
                if self.lazy is not None:
                    self.lazy.check(store)
                elif store.check() == "reloaded":
                    self._note_moved(store)
            except Exception:  # keep watching the others
                log.exception("watching %s", store.path)
        if self.lazy is not None:
            try:  # `|`, not `or`: both look each round
                changed = self.lazy.new_files() | self.lazy.files_changed()
            except Exception:  # keep watching
                log.exception("watching %s", self.lazy.zonedir)
                changed = False
            if changed:
                for server in self.sockets.values():  # answers cached for the zones changed may be stale
                    if isinstance(server.resolver, MultiZoneResolver):
                        server.resolver.renew()

    def _watch_new_files(self, loaded: list[ZoneStore] | None, signing: Signing | None,
                         only: Sequence[str] | None) -> None:
        """What :meth:`look` needs to take in files added to the directory: the files *loaded* from it
        (None: stores given, or lazy, which lists the directory itself), and what was said of files
        added since, by their modification time (said once until they change)."""
        self._paths = {os.fspath(s.path) for s in loaded} if loaded is not None else None
        self._refused: dict[str, int] = {}
        self._adding: set[asyncio.Task] = set()
        self._listing: int | None = self._dir_stamp() if self._paths is not None else None
        self.signing = signing
        self.only = None if only is None else {names.normalize(origin) for origin in only}

    def _dir_stamp(self) -> int | None:
        """When the directory's list of files last changed (a file added, removed or renamed)."""
        try:
            return os.stat(self.zonedir).st_mtime_ns
        except OSError:
            return None

    def _take_in_new_files(self) -> None:
        """Serve the zone files added to the directory since the last look, each checked as at start:
        one that cannot be loaded, names an origin served already, or whose name servers disagree with
        its parent's glue is logged (once, until the file changes) and not served."""
        self._listing = self._dir_stamp()
        files = list(map(os.fspath, zone_files(self.zonedir)))
        self._refused = {path: stamp for path, stamp in self._refused.items() if path in files}
        for path in files:
            if path in self._paths:
                continue
            try:
                stamp = os.stat(path).st_mtime_ns
            except OSError:
                continue
            if self._refused.get(path) == stamp:
                continue
            self._refused[path] = stamp  # until served: a file half written is looked at again once changed
            try:
                store = ZoneStore(path, signing=self.signing, loader=self.loader)
            except ZoneFileError as exc:
                log.error("%s: new zone file not served:\n%s", path, "\n".join(exc.errors))
                continue
            problem = self._new_zone_problem(store)
            if problem is not None:
                log.error("%s: new zone file not served: %s", path, problem)
                store.index.close()
                continue
            del self._refused[path]
            self._paths.add(path)
            origin = store.index.origin
            self.known_zones[origin] = store.file_zone.nameservers
            if self.only is not None and origin not in self.only:
                store.index.close()  # checked, and known as a zone of the tree: NOTIFY finds its servers
                continue
            self._loop.call_soon_threadsafe(self._start_serving, store)

    def _start_serving(self, store: ZoneStore) -> None:
        """Serve a zone file added while running, from the event loop (its file was read in the work thread)."""
        task = self._loop.create_task(self._serve_new(store), name=f"serve {store.index.origin}")
        self._adding.add(task)  # held until done: the loop keeps only a weak reference
        task.add_done_callback(self._adding.discard)

    def _new_zone_problem(self, store: ZoneStore) -> str | None:
        """Why a zone file added while serving cannot be served, or None."""
        origin = store.index.origin
        if origin in self.known_zones:
            other = next((s.path for s in self.stores if s.index.origin == origin), "another file")
            return f"origin {origin} is already served from {other}"
        own = _servers(store.zone.nameservers)
        for parent in self.stores:
            delegation = next((c for c in parent.zone.children if c.name == origin), None)
            if delegation is not None and _servers(delegation.nameservers) != own:
                return (f"its name servers {sorted(own)} disagree with the glue for {origin} in {parent.path} "
                        f"{sorted(_servers(delegation.nameservers))}")
        return None

    async def _serve_new(self, store: ZoneStore) -> None:
        """Serve a zone added while running: on each address its name servers name, beside the zones
        served there already, or from a new server (a UDP and a TCP socket) on the tree's port."""
        origin = store.index.origin
        resolver = ZoneResolver(store)
        store.listeners.append(resolver.renewed)  # as the zones served from the start
        if self.summaries is not None:
            resolver.on_notify = self.summaries.notified
        self.resolvers[origin] = resolver
        self.stores.append(store)
        self.addresses[origin] = []
        for address in zone_addresses(store, self.listen):
            zones = self.plan.setdefault(address, [])
            zones.append(store)
            server = self.sockets.get(address)
            if server is None:
                server = self._server(address, zones)
                try:
                    await server.start()
                except OSError as exc:
                    log.error("%s: cannot serve it on %s:%d: %s", origin, address, self.port, exc.strerror)
                    zones.remove(store)
                    continue
                self.sockets[address] = server
            else:
                old = server.resolver
                server.resolver = self._resolver(zones)
                if isinstance(old, MultiZoneResolver):
                    old.close()
            self.addresses[origin].append(address)
            self.servers.append((store, server))
        if self.summaries is not None:
            self.summaries.add(store)
        log.info("%s: new zone file: serving %s (serial %d) on %s", store.path, origin, store.index.zone.soa.serial,
                 ", ".join(self.addresses[origin]) or "no address")

    def _note_moved(self, store: ZoneStore) -> None:
        """Warn when a reloaded zone's name servers name other addresses than those it is served on: the
        sockets are bound at start (as an authoritative server's listening addresses are its own
        configuration, not its zones'), so it goes on being served where it was until a restart."""
        named, served = zone_addresses(store, self.listen), self.addresses[store.index.origin]
        if named != served:
            log.warning("%s: its name servers now name %s, but this process serves it on %s: restart it "
                        "to serve the zone there", store.index.origin, ", ".join(named), ", ".join(served))

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        if self._looking is not None:  # a look under way ends before what it looks at is closed
            await asyncio.gather(self._looking, return_exceptions=True)
            self._looking = None
        if self.lazy is not None:
            await self.lazy.stop()
        adding = list(self._adding)
        for task in adding:
            task.cancel()
        await asyncio.gather(*adding, return_exceptions=True)
        if self.summaries is not None:
            await self.summaries.stop()
            self.summaries = None
        if self.work is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.work.shutdown)
            self.work = None
        if self.loader is not None:
            self.loader.close()
        for resolver in self.resolvers.values():
            if resolver.renewed in resolver.source.listeners:
                resolver.source.listeners.remove(resolver.renewed)
        for server in self.sockets.values():
            await self._stop(server)
        self.sockets = {}
        self.servers = []
        self._stop_reports()
        self.close()

    @staticmethod
    async def _stop(server: DNSServer) -> None:
        await server.stop()
        if isinstance(server.resolver, MultiZoneResolver):
            server.resolver.close()

    def close(self) -> None:
        """Release the zones' indexes (their scorers); for a tree that is stopped or was never started."""
        for store in self._loaded_stores():
            store.index.close()

    def _loaded_stores(self) -> list[ZoneStore]:
        """The zones loaded now: every one served, or the lazy ones in memory."""
        return self.stores if self.lazy is None else self.lazy.stores()

    async def stop_server(self, origin: str, address: str) -> None:
        """Stop the server of zone *origin* on *address* (to simulate a dead name server); it stops
        answering for every zone it serves."""
        origin = names.normalize(origin)
        server = self.sockets.get(address)
        if server is None or not any(s.index.origin == origin and srv is server for s, srv in self.servers):
            return
        await self._stop(server)
        del self.sockets[address]
        self.servers = [pair for pair in self.servers if pair[1] is not server]

    def counters(self) -> dict[str, dict[str, int]]:
        """Per zone: its resolver's and scorers' counters (LLM calls and tokens among them), and the
        socket policies' counters (``rate_limited``, ``slipped``, ``tcp_refused``, ``tcp_evicted``) of
        its servers, summed; those of a server hosting several zones count for the topmost of them."""
        out: dict[str, dict[str, int]] = {}
        for store, _ in self.servers:
            origin = store.index.origin
            if origin not in out:
                out[origin] = self.resolvers[origin].counters()
                out[origin].update({key: 0 for key in _POLICY_COUNTERS})
        if self.lazy is not None:  # the zones loaded now (those dropped count in stats.tooldns.)
            for origin, resolver in list(self.lazy.loaded.items()):
                out[origin] = {**resolver.counters(), **{key: 0 for key in _POLICY_COUNTERS}}
        for server in self.sockets.values():
            resolver = server.resolver
            owner = (resolver.top if isinstance(resolver, MultiZoneResolver) else resolver).source.index.origin
            for key in _POLICY_COUNTERS:
                out[owner][key] += server.stats[key]
        return out

    def server_stats(self) -> dict[str, dict[str, int]]:
        """Per address: its server's socket counters (``udp``, ``tcp``, ``cache_hits``, ...)."""
        return {address: dict(server.stats) for address, server in self.sockets.items()}

    def root(self) -> tuple[str, int]:
        """Address and port of a server of the topmost zone served (fewest labels)."""
        store = min(self.stores, key=lambda s: len(names.labels(s.index.origin)))
        return self.addresses[store.index.origin][0], self.port

    def table(self) -> str:
        rows = [f"{'zone':32} {'address':16} {'children':>8} {'tools':>6}  file"]
        for store in self.stores:
            z = store.zone
            for address in self.addresses[z.origin]:
                rows.append(f"{z.origin:32} {address:16} {len(z.children):8d} {len(z.tools):6d}  {store.path}")
        return "\n".join(rows)


class TreeThread:
    """A :class:`Tree` running in a background thread with its own event loop (tests, demos)."""

    def __init__(self, zonedir: str | os.PathLike, port: int = DEFAULT_PORT, **kwargs) -> None:
        self.tree = Tree(zonedir, port, **kwargs)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="tooldns-tree", daemon=True)

    def start(self) -> "TreeThread":
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.tree.start(), self.loop).result(30)
        return self

    def call(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self._thread.is_alive():
            self.call(self.tree.stop())
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()

    def __enter__(self) -> "TreeThread":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def counters(self) -> dict[str, dict[str, int]]:
        return self.tree.counters()

    def root(self) -> tuple[str, int]:
        return self.tree.root()

    def table(self) -> str:
        return self.tree.table()
