"""The resolver library: sync and async shells around the I/O-free :class:`Walk`.

Both share one base (configuration, cache, the walk) and differ only in how they send a query
(after httpx's clients). The sync resolver keeps the queries a referral fans out to in flight
together on non-blocking sockets, the async one as asyncio tasks; both take each reply as it
arrives.

    >>> from resolver_client import Resolver
    >>> res = Resolver(root="127.0.0.1:5300").resolve("historical weather Hong Kong", k=3)
    >>> [(t.name, t.zone, round(t.score, 2)) for t in res.tools[:2]]

    >>> res = await AsyncResolver().resolve("send a slack message", service="mcp", trust=["hko"])

    >>> Resolver(validate=True, trust_anchor="root.key").resolve("typhoon warning").tools[0].dnssec
    'secure'
"""

from __future__ import annotations

import ipaddress
import math
import socket
import time
from collections import deque
import selectors

from tooldns.protocol.fusion import DEFAULT_WEIGHT
from tooldns.protocol.intent import INTENT_OPTION_CODE
from tooldns.protocol.vector import encode_vector
from tooldns.protocol.names import ANY_SERVICE

from . import transport
from .cache import ReplyCache
from .exceptions import ResolverError
from .modes import GET_IMPORTANT, settings_for
from .results import Resolution
from .split import WalkGroup, split_intent
from .validate import TrustAnchor, Validator, load_anchor
from .walk import AUTO_BEAM, Query, Walk, auto_beam

DEFAULT_ROOT = ("127.0.0.1", 5300)
#: the longest wait a resolver takes, for one reply or a whole resolution (a day: select() refuses far larger)
MAX_SECONDS = 86400.0


def seconds(value, what: str) -> float:
    """*value* as a number of seconds above 0 and at most :data:`MAX_SECONDS`; ResolverError otherwise
    (``nan`` never times out: a walk would spin on its next wait of nothing)."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not 0 < seconds <= MAX_SECONDS:
        raise ResolverError(f"{what} must be a number of seconds above 0 and at most {MAX_SECONDS:g}, not {value!r}")
    return seconds


def _port(text: str, whole: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        raise ResolverError(f"bad port in {whole!r}: a port is a whole number from 1 to 65535")
    return port


def _host(host: str, whole: str) -> str:
    """*host* as an IP address: itself when it is one, else what this machine resolves the name to."""
    if not host:
        raise ResolverError(f"bad server {whole!r}: no host; 'HOST:PORT', '[ADDRESS]:PORT' or 'HOST'")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_DGRAM)
    except (OSError, UnicodeError) as exc:
        raise ResolverError(f"bad server {whole!r}: {host!r} is not an IP address, nor a host name this "
                            f"machine can resolve ({exc})") from None
    return found[0][4][0]


def parse_server(text: str | tuple[str, int], default_port: int = 5300) -> tuple[str, int]:
    """'HOST:PORT', '[v6]:PORT', 'HOST', a bare IPv6 address or (host, port) -> (address, port), a
    host name resolved once to its first address; :class:`ResolverError` for anything else."""
    if isinstance(text, tuple):
        port = _port(str(text[1]), str(text))
        return _host(text[0], str(text)), port
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise ResolverError(f"bad server {text!r}: '[ADDRESS]:PORT' or '[ADDRESS]'")
        if ":" not in host:
            raise ResolverError(f"bad server {text!r}: brackets hold an IPv6 address")
        port = _port(rest[1:], text) if rest else default_port  # checked first: a host name costs a lookup
        return _host(host, text), port
    if text.count(":") == 1:
        host, port = text.split(":")
        port = _port(port, text)
        return _host(host, text), port
    if ":" in text:
        try:
            return str(ipaddress.IPv6Address(text)), default_port
        except ValueError:
            raise ResolverError(f"bad server {text!r}: not an IPv6 address; with a port, an IPv6 address is "
                                f"written '[ADDRESS]:PORT'") from None
    return _host(text, text), default_port


class _BaseResolver:
    def __init__(self, root=DEFAULT_ROOT, *, root_zone: str = "tools.", timeout: float = 1.0,
                 cache: ReplyCache | bool = True, max_depth: int = 8, max_queries: int = 256,
                 intent_code: int = INTENT_OPTION_CODE, embedder=None, fusion: float = DEFAULT_WEIGHT,
                 validate: bool = False, trust_anchor: TrustAnchor | str | None = None, require_secure: bool = False,
                 details: bool = False, fit: bool = True, best_leaf_k: int | None = None,
                 beam: int | str | None = AUTO_BEAM, lifetime: float | None = None) -> None:
        roots = root if isinstance(root, list) else [root]
        self.root = [parse_server(r) for r in roots]
        self.root_zone = root_zone
        #: seconds to wait for each reply before asking the zone's next name server
        self.timeout = seconds(timeout, "timeout")
        #: seconds a whole resolution may take (None: 30, or ten timeouts when that is longer); past it
        #: the tools found so far are returned, or LimitExceeded raised when there are none
        self.lifetime = seconds(lifetime, "lifetime") if lifetime is not None else max(30.0, 10 * self.timeout)
        self.cache = cache if isinstance(cache, ReplyCache) else (ReplyCache() if cache else None)
        self.max_depth = max_depth
        self.max_queries = max_queries
        self.intent_code = intent_code
        #: an embedder (:mod:`tooldns.embedding`): the intent is embedded once per resolution and its
        #: vector sent with every query, for zones that score vectors; None: no vector is sent
        self.embedder = embedder
        self.fusion = fusion
        #: DNSSEC (docs/dnssec.md): validate every reply from *trust_anchor* (a TrustAnchor or the path of
        #: a file of the root zone's DNSKEY or DS lines) down; *require_secure*: return secure tools only
        if validate and trust_anchor is None:
            raise ResolverError("validation needs a trust anchor: the root zone's DNSKEY or DS (trust_anchor=...)")
        anchor = load_anchor(trust_anchor) if isinstance(trust_anchor, str) else trust_anchor
        self.trust_anchor = anchor if validate else None
        self.require_secure = require_secure
        #: tools come back with their descriptions (cut to 120 bytes); by default leaves answer without
        #: them (the brief option: half the bytes, twice the tools per datagram), and a caller that shows
        #: or calls a tool reads its own TXT record for the whole text (:mod:`.describe`)
        self.details = details
        #: without details, a leaf whose answer does not fit one datagram answers with the best tools
        #: that fit (the fit option) instead of a truncated reply asked again over TCP; False: all of
        #: them, over TCP (leaves asked for more than 6 tools are asked over TCP either way)
        self.fit = fit
        #: tools asked of the leaf on the walk's best path (each zone's first-ranked child): it may fill
        #: the whole result while the others only share it, so it alone may be asked for more than
        #: fit a datagram (None: as many as of the others)
        self.best_leaf_k = best_leaf_k
        #: at most this many zones asked at each depth below the root, the best by their path's ranks
        #: (:attr:`.walk.Walk.beam`): what bounds a walk of a deep tree; None: every ranked child;
        #: AUTO_BEAM (the default): 6, or the root's K when larger (:func:`.walk.auto_beam`)
        if beam is not None and beam != AUTO_BEAM and (isinstance(beam, bool) or not isinstance(beam, int) or beam < 1):
            raise ResolverError(f"beam must be a whole number of at least 1, {AUTO_BEAM!r} or None, not {beam!r}")
        self.beam = beam

    def _embed(self, intent: str) -> tuple[bytes | None, float]:
        """The intent's vector option data and the milliseconds embedding it took."""
        if self.embedder is None or not self.embedder.covers(intent):
            return None, 0.0  # no model, or one that knows nothing of the intent's language: BM25 alone
        t0 = time.perf_counter()
        try:
            values = self.embedder.embed_query(intent)
        except Exception as exc:  # any backend's failure (a dead endpoint, say) is the resolution's
            raise ResolverError(f"cannot embed the intent with {self.embedder.model}: {exc}") from exc
        return encode_vector(self.embedder.model, values), (time.perf_counter() - t0) * 1000

    def _beam(self, k) -> int | None:
        """The beam of a walk at K *k*: the one given, or for AUTO_BEAM :func:`.walk.auto_beam`'s."""
        return auto_beam(k) if self.beam == AUTO_BEAM else self.beam

    def _walk(self, intent: str, k: int, service: str, trust, exclude, leaf_k=None) -> Walk:
        vector, ms = self._embed(intent)
        walk = Walk(intent=intent, k=k, leaf_k=leaf_k, best_leaf_k=self.best_leaf_k, beam=self._beam(k), root=self.root,
                    service=service,
                    root_zone=self.root_zone,
                    trust=list(trust) if trust is not None else None,
                    exclude=list(exclude) if exclude else None,
                    max_depth=self.max_depth, max_queries=self.max_queries, intent_code=self.intent_code,
                    vector=vector, fusion=self.fusion, brief=not self.details, fit=self.fit,
                    require_secure=self.require_secure,
                    validator=Validator(self.trust_anchor) if self.trust_anchor is not None else None)
        walk.stats.embed_ms = ms
        return walk

    def _plan(self, intent: str, k, service: str, trust, exclude, leaf_k, split: bool) -> Walk | WalkGroup:
        """The walk for *intent*; with *split*, a walk of the whole and one (K = 1) of each part it asks for."""
        whole = self._walk(intent, k, service, trust, exclude, leaf_k)
        parts = split_intent(intent) if split else []
        if not parts:
            return whole
        return WalkGroup([whole, *(self._walk(p, 1, service, trust, exclude, leaf_k or whole.leaf_k) for p in parts)])

    def _plan_mode(self, intent: str, k, service: str, trust, exclude, top, leaf_k, split: bool,
                   mode: str) -> tuple[Walk | WalkGroup, int | None]:
        """The walk for *intent* in search mode *mode*, and how many tools to return; what the
        caller gave explicitly (*k*, *leaf_k*, *top*) wins over the mode's settings."""
        settings = settings_for(mode)
        walk = self._plan(intent, settings.k if k is None else k, service, trust, exclude,
                          settings.leaf_k if leaf_k is None else leaf_k, split)
        for one in getattr(walk, "walks", [walk]):  # a split intent's parts keep the floor too
            one.floor = settings.floor
        return walk, settings.top if top is None else top

    def _cached(self, q: Query):
        """A parsed reply for *q* from the cache, or None."""
        if self.cache is None or q.tcp:
            return None
        return self.cache.get(q.cache_key)

    def _remember(self, q: Query) -> None:
        if self.cache is not None and q.response is not None and q.cache_ttl > 0:
            self.cache.put(q.cache_key, q.response, q.cache_ttl)


class Resolver(_BaseResolver):
    """Blocking resolver; one thread, the queries a referral fans out to in flight together.

    Queries go out at once on non-blocking sockets, UDP and TCP alike, and replies are taken as
    they arrive (a selector, no threads). Safe to share between threads: each call has its own
    sockets.
    """

    def resolve(self, intent: str, k: int | tuple[int, ...] | None = None, service: str = ANY_SERVICE, *, trust=None,
                exclude=None, top: int | None = None, leaf_k: int | None = None, split: bool = False,
                mode: str = GET_IMPORTANT) -> Resolution:
        """Walk the tree for *intent*: the best *k* children at each step, *leaf_k* tools (default
        *k*) from each leaf; the merged tools back, best first (at most *top*). With *split*, an
        intent that asks for several things is also walked part by part (:mod:`.split`).

        *mode* (:mod:`.modes`) picks *k*, *leaf_k*, *top* and a relevance floor together:
        ``get_one`` (the best tool, K = 1), ``get_important`` (K = 3, the default) or ``get_all``
        (wider walks, every tool above the floor). A *k*, *leaf_k* or *top* given explicitly
        overrides the mode's own; an unknown mode raises :class:`ResolverError`."""
        t0 = time.perf_counter()
        walk, top = self._plan_mode(intent, k, service, trust, exclude, top, leaf_k, split, mode)
        ready: deque[Query] = deque(walk.start())
        inflight: dict = {}  # socket -> (query, start time)
        deadline = t0 + self.lifetime
        with selectors.DefaultSelector() as selector:
            try:
                while ready or inflight:
                    if time.perf_counter() >= deadline:  # what is in flight is dropped (its sockets closed)
                        walk.expire(f"lifetime of {self.lifetime:g} s reached")
                        break
                    while ready:
                        q = ready.popleft()
                        hit = self._cached(q)
                        if hit is not None:
                            ready.extend(walk.take(q, None, cached=hit))
                        else:
                            sent = time.perf_counter()  # before sending: the reply may be back before send() returns
                            try:
                                if q.tcp:
                                    exchange = transport.TCPExchange(q.wire, *q.server)
                                    sock, events = exchange.sock, exchange.events
                                else:
                                    exchange = None
                                    sock, events = transport.udp_send(q.wire, *q.server), selectors.EVENT_READ
                            except OSError as exc:
                                ready.extend(walk.take(q, None, exc, 0.0))
                                continue
                            selector.register(sock, events, exchange)
                            inflight[sock] = (q, sent)
                    if inflight:
                        ready.extend(self._collect(walk, selector, inflight, deadline))
            finally:
                for sock in inflight:
                    sock.close()
        walk.stats.ms = (time.perf_counter() - t0) * 1000
        return walk.result(top)

    def _collect(self, walk: Walk, selector, inflight: dict, deadline: float) -> list[Query]:
        """Wait for the next replies (or the next timeout, or the *deadline*); hand each outcome to the walk."""
        now = time.perf_counter()
        wait_for = max(0.0, min(min(started for _, started in inflight.values()) + self.timeout, deadline) - now)
        out: list[Query] = []
        for key, _ in selector.select(wait_for):
            sock, exchange = key.fileobj, key.data
            q, started = inflight[sock]
            ms = (time.perf_counter() - started) * 1000
            try:
                if exchange is not None:  # TCP: connect, send, read, as the socket allows
                    wire = exchange.step()
                    if wire is None:
                        selector.modify(sock, exchange.events, exchange)
                        continue
                else:
                    wire = transport.udp_recv(sock, q.wire)
                    if wire is None:
                        continue  # a stray datagram: keep waiting for the real reply
                err = None
            except OSError as exc:  # refused, reset, ICMP port unreachable: the server is down
                wire, err = None, exc
            selector.unregister(sock)
            sock.close()
            del inflight[sock]
            out.extend(walk.take(q, wire, err, ms))
            self._remember(q)
        now = time.perf_counter()
        for sock, (q, started) in list(inflight.items()):
            if now - started >= self.timeout:
                selector.unregister(sock)
                sock.close()
                del inflight[sock]
                out.extend(walk.take(q, None, TimeoutError(f"no reply from {q.server[0]}:{q.server[1]} "
                                                           f"within {self.timeout:g} s"), (now - started) * 1000))
        return out

    def close(self) -> None:
        """Nothing to release (kept so that ``with Resolver() as r:`` reads naturally)."""

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

    async def resolve(self, intent: str, k: int | tuple[int, ...] | None = None, service: str = ANY_SERVICE, *,
                      trust=None, exclude=None, top: int | None = None, leaf_k: int | None = None, split: bool = False,
                      mode: str = GET_IMPORTANT) -> Resolution:
        """As :meth:`Resolver.resolve` (*mode*, and explicit *k*, *leaf_k*, *top* overriding it, alike)."""
        import asyncio  # loaded by the async shell alone: the sync one and the CLI start without it

        t0 = time.perf_counter()
        walk, top = self._plan_mode(intent, k, service, trust, exclude, top, leaf_k, split, mode)
        ready: deque[Query] = deque(walk.start())
        inflight: dict = {}
        deadline = t0 + self.lifetime
        while ready or inflight:
            if time.perf_counter() >= deadline:  # the lifetime is over: what is in flight is dropped
                for task in inflight:
                    task.cancel()
                await asyncio.gather(*inflight, return_exceptions=True)  # their sockets closed now
                walk.expire(f"lifetime of {self.lifetime:g} s reached")
                break
            while ready:
                q = ready.popleft()
                hit = self._cached(q)
                if hit is not None:
                    ready.extend(walk.take(q, None, cached=hit))
                else:
                    inflight[asyncio.ensure_future(self._exchange(q))] = q
            if inflight:
                done, _ = await asyncio.wait(inflight, timeout=max(0.0, deadline - time.perf_counter()),
                                             return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    q = inflight.pop(task)
                    wire, err, ms = task.result()
                    ready.extend(walk.take(q, wire, err, ms))
                    self._remember(q)
        walk.stats.ms = (time.perf_counter() - t0) * 1000
        return walk.result(top)
