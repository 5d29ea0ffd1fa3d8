"""The resolver library: sync and async shells around the I/O-free :class:`Walk`.

Both share one base (configuration, cache, the walk) and differ only in how they send a query
(after httpx's clients). The sync resolver sends the queries a referral fans out to from a thread
pool, the async one with asyncio tasks; both process each reply as it arrives.

    >>> from resolver_client import Resolver
    >>> res = Resolver(root="127.0.0.1:5300").resolve("historical weather Hong Kong", k=3)
    >>> [(t.name, t.zone, round(t.score, 2)) for t in res.tools[:2]]

    >>> res = await AsyncResolver().resolve("send a slack message", service="mcp", trust=["hko"])
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from tooldns.intent import INTENT_OPTION_CODE
from tooldns.names import ANY_SERVICE

from . import transport
from .cache import ReplyCache
from .exceptions import ResolverError
from .results import Resolution
from .walk import Query, Walk

DEFAULT_ROOT = ("127.0.0.1", 5300)


def parse_server(text: str | tuple[str, int], default_port: int = 5300) -> tuple[str, int]:
    """'HOST:PORT', '[v6]:PORT', 'HOST' or (host, port) -> (host, port)."""
    if isinstance(text, tuple):
        return text[0], int(text[1])
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, int(rest.lstrip(":") or default_port)
    if text.count(":") == 1:
        host, port = text.split(":")
        try:
            return host, int(port)
        except ValueError:
            raise ResolverError(f"bad port in {text!r}") from None
    return text, default_port


class _BaseResolver:
    def __init__(self, root=DEFAULT_ROOT, *, root_zone: str = "tools.", timeout: float = 1.0,
                 cache: ReplyCache | bool = True, max_depth: int = 8, max_queries: int = 256,
                 intent_code: int = INTENT_OPTION_CODE) -> None:
        roots = root if isinstance(root, list) else [root]
        self.root = [parse_server(r) for r in roots]
        self.root_zone = root_zone
        self.timeout = timeout
        self.cache = cache if isinstance(cache, ReplyCache) else (ReplyCache() if cache else None)
        self.max_depth = max_depth
        self.max_queries = max_queries
        self.intent_code = intent_code

    def _walk(self, intent: str, k: int, service: str, trust, exclude) -> Walk:
        return Walk(intent=intent, k=k, root=self.root, service=service, root_zone=self.root_zone,
                    trust=list(trust) if trust is not None else None,
                    exclude=list(exclude) if exclude else None,
                    max_depth=self.max_depth, max_queries=self.max_queries, intent_code=self.intent_code)

    def _cached(self, q: Query) -> bytes | None:
        if self.cache is None or q.tcp:
            return None
        wire = self.cache.get(q.cache_key)
        return q.wire[:2] + wire[2:] if wire is not None else None

    def _remember(self, q: Query, wire: bytes | None) -> None:
        if self.cache is not None and wire is not None and q.cache_ttl > 0:
            self.cache.put(q.cache_key, wire, q.cache_ttl)


class Resolver(_BaseResolver):
    """Blocking resolver; safe to share between threads."""

    def __init__(self, root=DEFAULT_ROOT, *, workers: int = 16, **kwargs) -> None:
        super().__init__(root, **kwargs)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tooldns-resolve")

    def _exchange(self, q: Query) -> tuple[bytes | None, Exception | None, float]:
        t0 = time.perf_counter()
        address, port = q.server
        try:
            send = transport.tcp if q.tcp else transport.udp
            return send(q.wire, address, port, self.timeout), None, (time.perf_counter() - t0) * 1000
        except (OSError, TimeoutError) as exc:
            return None, exc, (time.perf_counter() - t0) * 1000

    def resolve(self, intent: str, k: int = 3, service: str = ANY_SERVICE, *, trust=None, exclude=None,
                top: int | None = None) -> Resolution:
        """Walk the tree for *intent*, asking for the top *k* at each step; ranked tools back."""
        t0 = time.perf_counter()
        walk = self._walk(intent, k, service, trust, exclude)
        ready: deque[Query] = deque(walk.start())
        inflight: dict = {}
        while ready or inflight:
            while ready:
                q = ready.popleft()
                hit = self._cached(q)
                if hit is not None:
                    ready.extend(walk.take(q, hit, cached=True))
                elif not inflight and not ready:
                    wire, err, ms = self._exchange(q)  # a lone query: no thread hop
                    ready.extend(walk.take(q, wire, err, ms))
                    self._remember(q, wire)
                else:
                    inflight[self._pool.submit(self._exchange, q)] = q
            if inflight:
                done, _ = wait(inflight, return_when=FIRST_COMPLETED)
                for future in done:
                    q = inflight.pop(future)
                    wire, err, ms = future.result()
                    ready.extend(walk.take(q, wire, err, ms))
                    self._remember(q, wire)
        walk.stats.ms = (time.perf_counter() - t0) * 1000
        return walk.result(top)

    def close(self) -> None:
        self._pool.shutdown(wait=False)

    def __enter__(self) -> "Resolver":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AsyncResolver(_BaseResolver):
    """asyncio resolver with the same API, ``await resolver.resolve(...)``."""

    async def _exchange(self, q: Query) -> tuple[bytes | None, Exception | None, float]:
        t0 = time.perf_counter()
        address, port = q.server
        try:
            send = transport.atcp if q.tcp else transport.audp
            return await send(q.wire, address, port, self.timeout), None, (time.perf_counter() - t0) * 1000
        except (OSError, TimeoutError) as exc:
            return None, exc, (time.perf_counter() - t0) * 1000

    async def resolve(self, intent: str, k: int = 3, service: str = ANY_SERVICE, *, trust=None, exclude=None,
                      top: int | None = None) -> Resolution:
        t0 = time.perf_counter()
        walk = self._walk(intent, k, service, trust, exclude)
        ready: deque[Query] = deque(walk.start())
        inflight: dict = {}
        while ready or inflight:
            while ready:
                q = ready.popleft()
                hit = self._cached(q)
                if hit is not None:
                    ready.extend(walk.take(q, hit, cached=True))
                else:
                    inflight[asyncio.ensure_future(self._exchange(q))] = q
            if inflight:
                done, _ = await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    q = inflight.pop(task)
                    wire, err, ms = task.result()
                    ready.extend(walk.take(q, wire, err, ms))
                    self._remember(q, wire)
        walk.stats.ms = (time.perf_counter() - t0) * 1000
        return walk.result(top)
