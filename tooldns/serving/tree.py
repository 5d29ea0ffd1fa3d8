"""Running a `.tools` tree locally: one authoritative server per zone name server, one event loop.

:class:`Tree` loads every ``*.yaml`` zone file of a directory, starts a :class:`DNSServer` on
each name-server address the zone lists (all on one port, so glue A records are all a client
needs), and polls the files for live edits. Each zone reloads on its own; an edit touches no
other server. A directory with any broken file is refused whole at start, with every message.

    >>> with TreeThread("zones", port=5300) as tree:
    ...     print(tree.table())

Keywords past the tree's own go to every server: ``TreeThread("zones", 5300, rate_limit=0,
max_tcp=64)`` (see :class:`DNSServer`). ``tooldns serve zones/`` is the command-line shell over this.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from pathlib import Path

from ..exceptions import ZoneFileError
from ..protocol import names
from ..zone.limits import ZoneLimits
from ..zone.zonefile import zone_files
from .resolver import ZoneResolver
from .server import DNSServer
from .store import ZoneStore

log = logging.getLogger(__name__)

DEFAULT_PORT = 5300
#: what a Tree passes on to each of its servers
_SERVER_OPTIONS = {"rate_limit", "rate_limit_exempt", "max_tcp", "max_tcp_per_client", "tcp_idle", "tcp_idle_busy"}
_POLICY_COUNTERS = ("rate_limited", "slipped", "tcp_refused", "tcp_evicted")


def load_tree(zonedir: str | os.PathLike, limits: ZoneLimits | None = None) -> list[ZoneStore]:
    """Load and check every zone file (within *limits*, the defaults when None); raise one
    :class:`ZoneFileError` listing all problems."""
    stores, errors = [], []
    for path in zone_files(zonedir):
        try:
            stores.append(ZoneStore(path, limits=limits))
        except ZoneFileError as exc:
            errors.extend(exc.errors)
    by_origin: dict[str, ZoneStore] = {}
    for s in stores:
        if s.index.origin in by_origin:
            errors.append(f"{s.path}:1: origin {s.index.origin} is already served by {by_origin[s.index.origin].path}")
        by_origin[s.index.origin] = s
    for s in stores:  # glue in the parent must match what the child says of itself
        for child in s.zone.children:
            cs = by_origin.get(child.name)
            if cs is None:
                log.warning("%s: delegation to %s has no zone file here; it will not answer", s.path, child.name)
                continue
            glue = {(ns.name, ns.address) for ns in child.nameservers}
            own = {(ns.name, ns.address) for ns in cs.zone.nameservers}
            if glue != own:
                errors.append(f"{s.path}:1: glue for {child.name} {sorted(glue)} disagrees with the name servers "
                              f"in {cs.path} {sorted(own)}")
    if errors:
        raise ZoneFileError(errors)
    return stores


class Tree:
    """All servers of a zone directory in the running event loop."""

    def __init__(self, zonedir: str | os.PathLike, port: int = DEFAULT_PORT, *, watch_interval: float = 0.5,
                 stores: list[ZoneStore] | None = None, answer_cache: int = 4096, **server_options) -> None:
        """*server_options* go to every :class:`DNSServer`: ``rate_limit``, ``rate_limit_exempt``,
        ``max_tcp``, ``max_tcp_per_client``, ``tcp_idle``, ``tcp_idle_busy``."""
        unknown = set(server_options) - _SERVER_OPTIONS
        if unknown:
            raise TypeError(f"unknown server options {sorted(unknown)}; allowed: {', '.join(sorted(_SERVER_OPTIONS))}")
        self.zonedir = Path(zonedir)
        self.port = port
        self.answer_cache = answer_cache
        self.server_options = server_options
        self.watch_interval = watch_interval
        self.stores = stores if stores is not None else load_tree(zonedir)
        self.servers: list[tuple[ZoneStore, DNSServer]] = []
        self._watch: asyncio.Task | None = None

    async def start(self) -> None:
        """Start every server. Port 0: the first server picks a free port and the others share it."""
        for store in self.stores:
            resolver = ZoneResolver(store)
            for ns in store.zone.nameservers:
                server = DNSServer(resolver, ns.address, self.port, cache_size=self.answer_cache,
                                   **self.server_options)
                try:
                    await server.start()
                except OSError as exc:
                    await self.stop()
                    raise OSError(exc.errno, f"cannot serve {store.index.origin} on {ns.address}:{self.port}: "
                                  f"{exc.strerror}") from exc
                self.port = server.port  # glue carries addresses only: one port for the whole tree
                self.servers.append((store, server))
        self._watch = asyncio.create_task(self._watcher())

    async def _watcher(self) -> None:
        while True:
            await asyncio.sleep(self.watch_interval)
            for store in self.stores:
                try:
                    store.check()
                except Exception:  # keep watching the others
                    log.exception("watching %s", store.path)

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        for _, server in self.servers:
            await server.stop()
        self.servers = []
        for store in self.stores:
            store.index.close()

    async def stop_server(self, origin: str, address: str) -> None:
        """Stop one server (to simulate a dead name server)."""
        origin = names.normalize(origin)
        for pair in list(self.servers):
            store, server = pair
            if store.index.origin == origin and server.address == address:
                await server.stop()
                self.servers.remove(pair)

    def counters(self) -> dict[str, dict[str, int]]:
        """Per zone: its resolver's and scorers' counters (LLM calls and tokens among them), and the
        socket policies' counters summed over its servers (``rate_limited``, ``slipped``, ``tcp_refused``,
        ``tcp_evicted``)."""
        out: dict[str, dict[str, int]] = {}
        for store, server in self.servers:
            origin = store.index.origin
            if origin not in out:
                out[origin] = server.resolver.counters()
            for key in _POLICY_COUNTERS:
                out[origin][key] = out[origin].get(key, 0) + server.stats[key]
        return out

    def root(self) -> tuple[str, int]:
        """Address and port of the server of the topmost zone (fewest labels)."""
        store = min(self.stores, key=lambda s: len(names.labels(s.index.origin)))
        return store.zone.nameservers[0].address, self.port

    def table(self) -> str:
        rows = [f"{'zone':32} {'address':16} {'children':>8} {'tools':>6}  file"]
        for store, server in self.servers:
            z = store.zone
            rows.append(f"{z.origin:32} {server.address:16} {len(z.children):8d} {len(z.tools):6d}  {store.path}")
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
