"""The resolver library: sync and async shells around the I/O-free :class:`Walk`.

Both share one base (configuration, cache, the walk) and differ only in how they send a query
(after httpx's clients). The sync resolver keeps the queries a referral fans out to in flight
together on non-blocking sockets, the async one as asyncio tasks; both take each reply as it
arrives. Before its first resolution, and whenever what it learned expires, a resolver asks the
root servers for the walk the tree publishes (:class:`~resolver_client.plan.PlanFetch`, driven as a
walk is): its K, leaf K, best leaf K, beam and model then stand where the caller gave none, in the
default search mode (``published_walk=False``: the built-in settings alone).

    >>> from resolver_client import Resolver
    >>> res = Resolver(root="127.0.0.1:5300").resolve("historical weather Hong Kong", k=3)
    >>> [(t.name, t.zone, round(t.score, 2)) for t in res.tools[:2]]

    >>> res = await AsyncResolver().resolve("send a slack message", service="mcp", trust=["hko"])

    >>> Resolver(validate=True, trust_anchor="root.key").resolve("typhoon warning").tools[0].dnssec
    'secure'
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
import socket
import threading
import time
import weakref
from collections import deque
import selectors

from tooldns.protocol.intent import INTENT_OPTION_CODE
from tooldns.protocol.vector import encode_vector
from tooldns.protocol.names import ANY_SERVICE
from tooldns.protocol.plan import MAX_PAGES

from . import transport
from .cache import ReplyCache
from .exceptions import ResolverError
from .modes import GET_IMPORTANT, settings_for
from .plan import MAX_KEEP, NOT_ASKED, Chosen, PlanFetch, Published, choose
from .results import Resolution
from .rtt import MIN_RTO, RttTable, resend_times
from .split import WalkGroup, split_intent
from .validate import TrustAnchor, Validator, load_anchor
from .walk import AUTO_BEAM, Query, Walk, auto_beam

DEFAULT_ROOT = ("127.0.0.1", 5300)
#: resolutions one resolver runs at once (``max_walks``); the others wait for a turn. Each holds at most
#: its fan-out of sockets (the root's K, the beam: 10 in get_all) and one TCP connection per zone
#: server, so a gateway asking for hundreds at once neither runs out of files nor passes a server's 16
#: TCP connections from one address (docs/security.md, "TCP limits"): it queues where it used to fail
MAX_WALKS = 8
#: the longest wait a resolver takes, for one reply or a whole resolution (a day: select() refuses far larger)
MAX_SECONDS = 86400.0


def share(value: float | None) -> float | None:
    """*value* as BM25's share in the fusion of hybrid leaves' tools (None: the published walk's);
    ResolverError unless a number from 0 to 1."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not 0 <= value <= 1):
        raise ResolverError(f"fusion is BM25's share of the fused score: a number from 0 to 1, not {value!r}")
    return value


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


def _at_least_one(value, what: str, *also):
    """*value* when it is a whole number of at least 1, None or one of *also*; else a ResolverError."""
    if value is not None and value not in also and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        others = "".join(f", {a!r}" for a in also)
        raise ResolverError(f"{what} must be a whole number of at least 1{others} or None, not {value!r}")
    return value


def _pages(value) -> int | None:
    """*value* as follow-up pages: None, or a whole number from 0 (none) to the most a published walk may name."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_PAGES):
        raise ResolverError(f"pages must be a whole number from 0 to {MAX_PAGES}, not {value!r}")
    return value


def _timed(walk: Walk | WalkGroup, asked: float, t0: float) -> None:
    """Put in *walk*'s stats how long the resolution took from *t0* and waited for its turn before it."""
    now = time.perf_counter()
    walk.stats.ms = (now - t0) * 1000
    walk.stats.queued_ms = (t0 - asked) * 1000


class _InFlight:
    """A query the sync driver waits for: when it was first sent, when to send it again, how often it
    went; its sockets (the first; a second to the zone's next server once hedged)."""

    __slots__ = ("query", "started", "resends", "sends", "socks", "hedge_sock")

    def __init__(self, query: Query, started: float, resends: list[float], sock) -> None:
        self.query, self.started, self.resends, self.sends = query, started, resends, 1
        self.socks, self.hedge_sock = [sock], None

    def next_event(self, timeout: float) -> float:
        """The next time something is due: a resend, else the timeout."""
        return self.resends[0] if self.resends else self.started + timeout


class _BaseResolver:
    def __init__(self, root=DEFAULT_ROOT, *, root_zone: str = "tools.", timeout: float = 1.0,
                 cache: ReplyCache | bool = True, max_depth: int = 8, max_queries: int = 256,
                 intent_code: int = INTENT_OPTION_CODE, embedder=None, fusion: float | None = None,
                 validate: bool = False, trust_anchor: TrustAnchor | str | None = None, require_secure: bool = False,
                 details: bool = False, fit: bool = True, best_leaf_k: int | None = None,
                 beam: int | str | None = AUTO_BEAM, lifetime: float | None = None,
                 published_walk: bool = True, max_walks: int | None = MAX_WALKS,
                 min_rto: float = MIN_RTO, pages: int | None = None) -> None:
        self.root = [parse_server(r) for r in (root if isinstance(root, list) else [root])]
        self.root_zone = root_zone
        #: seconds to wait for each reply before asking the zone's next name server
        self.timeout = seconds(timeout, "timeout")
        #: each server's round trip: when a UDP query goes again (:mod:`.rtt`), never before *min_rto* s
        self.rtt = RttTable(min_rto=seconds(min_rto, "min_rto"))
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
        self.fusion = share(fusion)  #: BM25's share in the fusion of hybrid leaves' tools; None: the published walk's
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
        #: tools asked of the leaf on the walk's best path, which may fill the result alone (None: as many as
        #: of the others; more than fit a datagram over TCP); the follow-up pages a resolution may ask
        #: (:attr:`.walk.Walk.pages`; None: the published walk's, else none)
        self.best_leaf_k, self.pages = best_leaf_k, _pages(pages)
        #: at most this many zones asked at each depth below the root, the best by their path's ranks
        #: (:attr:`.walk.Walk.beam`): what bounds a walk of a deep tree; None: every ranked child;
        #: AUTO_BEAM (the default): the published walk's beam, else 6 or the root's K when larger
        #: (:func:`.walk.auto_beam`)
        self.beam = _at_least_one(beam, "beam", AUTO_BEAM)
        #: ask the root servers for the walk the tree publishes (``_walk.<root zone>``, docs/protocol.md
        #: section 6b) and go by it where the caller gave nothing: its K, leaf K, best leaf K and beam in
        #: the default search mode, its model (when no *embedder* is given) in every mode. Kept for the
        #: record's TTL (the negative TTL when there is none), whatever *cache* says; validated with
        #: *validate*. False: the built-in settings alone, and no such query
        self.published_walk = published_walk
        #: resolutions run at once at most (the published walk's query included); the others wait for a
        #: turn, and ``stats.queued_ms`` says how long. None: no bound
        self.max_walks = _at_least_one(max_walks, "max_walks")
        self._kept: tuple[float, Published] | None = None  # (monotonic expiry, what was learned)
        self._models: dict[str, tuple] = {}  # published model -> (embedder or None, why not)

    def _published(self) -> Published | None:
        """The published walk to go by now: NOT_ASKED when this resolver does not ask, what it learned
        while that is fresh, or None: the root servers are to be asked (:meth:`_plan_fetch`)."""
        if not self.published_walk:
            return NOT_ASKED
        kept = self._kept
        if kept is not None and time.monotonic() < kept[0]:
            return kept[1]
        return None

    def _plan_fetch(self) -> PlanFetch:
        """The exchange that asks the root servers for the published walk (validated as the walk is)."""
        return PlanFetch(self.root_zone, self.root, Validator(self.trust_anchor) if self.trust_anchor is not None else None)

    def _learned(self, fetch: PlanFetch) -> Published:
        """What *fetch* learned, kept for its TTL (at most a day; nothing after a failure: asked again)."""
        published = fetch.result()
        if published.ttl > 0:
            self._kept = (time.monotonic() + min(published.ttl, MAX_KEEP), published)
        return published

    def _model_embedder(self, model: str) -> tuple:
        """An embedder that makes vectors of the published *model* here, built once and lazily, or None
        and why not (no spec makes that model, its packages are not installed, it does not load)."""
        if model in self._models:
            return self._models[model]
        try:  # the embedding package, stdlib alone at import, is loaded only for a tree that names a model
            from tooldns.embedding.registry import installed, shared_embedder, spec_for_model
        except ImportError as exc:
            return self._models.setdefault(model, (None, f"{model}: tooldns.embedding cannot be imported ({exc})"))
        spec = spec_for_model(model)
        if spec is None:
            found = (None, f"{model}: no embedder here makes vectors of that model")
        elif not installed(spec):
            found = (None, f"{model}: the packages of embedder {spec!r} are not installed here")
        else:
            try:
                found = (shared_embedder(spec), "")
            except Exception as exc:  # EmbeddingError, or what a backend raises while loading
                found = (None, f"{model}: embedder {spec!r} cannot be loaded ({exc})")
        return self._models.setdefault(model, found)

    def _embed(self, intent: str, embedder, mine: bool) -> tuple[bytes | None, float, str]:
        """The intent's vector option data, the milliseconds embedding it took, and why there is none
        when embedding failed. The caller's own embedder (*mine*) failing fails the resolution; one of
        the published model only costs the vector."""
        if embedder is None or not embedder.covers(intent):
            return None, 0.0, ""  # no model, or one that knows nothing of the intent's language: BM25 alone
        t0 = time.perf_counter()
        try:
            values = embedder.embed_query(intent)
        except Exception as exc:  # any backend's failure (a dead endpoint, say) is the resolution's
            if mine:
                raise ResolverError(f"cannot embed the intent with {embedder.model}: {exc}") from exc
            return None, 0.0, f"cannot embed the intent with {embedder.model} ({exc}); no vector sent"
        return encode_vector(embedder.model, values), (time.perf_counter() - t0) * 1000, ""

    def _walk(self, intent: str, k, service: str, trust, exclude, leaf_k, chosen: Chosen, embedder) -> Walk:
        vector, ms, note = self._embed(intent, embedder, mine=embedder is self.embedder)
        beam = auto_beam(k) if chosen.beam == AUTO_BEAM else chosen.beam
        walk = Walk(intent=intent, k=k, leaf_k=leaf_k, best_leaf_k=chosen.best_leaf_k, beam=beam, root=self.root,
                    service=service,
                    root_zone=self.root_zone,
                    trust=list(trust) if trust is not None else None,
                    exclude=list(exclude) if exclude else None,
                    max_depth=self.max_depth, max_queries=self.max_queries, intent_code=self.intent_code,
                    vector=vector, fusion=chosen.fusion, brief=not self.details, fit=self.fit,
                    require_secure=self.require_secure,
                    validator=Validator(self.trust_anchor) if self.trust_anchor is not None else None)
        walk.stats.embed_ms = ms
        if note:
            walk.errors.append(note)
            walk.stats.embed_note = note
        return walk

    def _walks(self, intent: str, chosen: Chosen, service: str, trust, exclude, split: bool,
               embedder) -> Walk | WalkGroup:
        """The walk for *intent*; with *split*, a walk of the whole and one (K = 1) of each part it asks for."""
        whole = self._walk(intent, chosen.k, service, trust, exclude, chosen.leaf_k, chosen, embedder)
        parts = split_intent(intent) if split else []
        if not parts:
            return whole
        return WalkGroup([whole, *(self._walk(p, 1, service, trust, exclude, chosen.leaf_k or whole.leaf_k, chosen,
                                              embedder) for p in parts)])

    def _walk_for(self, intent: str, k, service: str, trust, exclude, top, leaf_k, split: bool, mode: str,
                  published: Published, fetch: PlanFetch | None) -> tuple[Walk | WalkGroup, int | None]:
        """The walk for *intent* in search mode *mode*, and how many tools to return: each setting the
        caller's (*k*, *leaf_k*, *top*, and the resolver's own options), else the *published* walk's,
        else the mode's (:func:`.plan.choose`); *fetch*: the exchange that learned it for this resolution."""
        settings = settings_for(mode)
        chosen = choose(settings, published.plan, k=k, leaf_k=leaf_k, best_leaf_k=self.best_leaf_k, beam=self.beam,
                        embedder=self.embedder, pages=self.pages, fusion=self.fusion)
        embedder, note = (self.embedder, "") if chosen.model is None else self._model_embedder(chosen.model)
        walk = self._walks(intent, chosen, service, trust, exclude, split, embedder)
        walks = getattr(walk, "walks", [walk])
        spares = settings_for(GET_IMPORTANT).k if settings.floor is not None else 0
        top = settings.top if top is None else top
        for one in walks:  # a split intent's parts keep the floor too
            one.floor, one.floor_spares = settings.floor, spares
            one.pages, one.top = chosen.pages, top or one.top
        self._account(walks[0], chosen, published, fetch, embedder, note)
        return walk, top

    @staticmethod
    def _account(whole: Walk, chosen: Chosen, published: Published, fetch: PlanFetch | None, embedder,
                 note: str) -> None:
        """Put in *whole*'s stats and errors what learning the published walk cost and said, and what
        the walk goes by and where each setting came from."""
        stats = whole.stats
        if fetch is not None:
            for name in ("queries", "cache_hits", "bytes_sent", "bytes_received", "packets", "tcp_retries", "timeouts",
                         "timeout_retries", "retransmits", "hedges"):
                setattr(stats, name, getattr(stats, name) + getattr(fetch.stats, name))
            stats.plan_queries = fetch.stats.queries
        if published.error:
            whole.errors.insert(0, published.error)
        stats.settings_from, stats.sources = chosen.settings_from, dict(chosen.sources)
        ks = tuple(whole.k) if isinstance(whole.k, (tuple, list)) else (whole.k,)
        stats.settings = {"k": list(ks), "leaf_k": whole.leaf_k, "best_leaf_k": whole.best_leaf_k, "beam": whole.beam,
                          "pages": whole.pages, "model": embedder.model if embedder is not None else chosen.model or "",
                          "fusion": whole.fusion}
        stats.embed_note = stats.embed_note or (f"published model {note}; no vector sent" if note else "")

    def _hedge_settled(self, q: Query, answered: bool, waited: float) -> None:
        """A hedged query ended: its hedge *answered* (the first server missed by *waited* seconds), or
        neither server did (the hedge missed the timeout). Either way the query now stands at the
        hedge, so that a retry goes past both (:meth:`Query.hedged`)."""
        if answered:
            self.rtt.missed(q.server, waited)
        q.hedged()
        if not answered:
            self.rtt.missed(q.server, self.timeout)

    def _order(self, q: Query) -> None:
        """A zone's servers, those that missed last, before its first question is sent (:meth:`RttTable.ordered`)."""
        if q.attempts == 0 and len(q.servers) > 1:
            q.servers = self.rtt.ordered(q.servers)

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
    sockets; at most ``max_walks`` calls walk at once, the others wait for a turn.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._turns = threading.BoundedSemaphore(self.max_walks) if self.max_walks else contextlib.nullcontext()

    def resolve(self, intent: str, k: int | tuple[int, ...] | None = None, service: str = ANY_SERVICE, *, trust=None,
                exclude=None, top: int | None = None, leaf_k: int | None = None, split: bool = False,
                mode: str = GET_IMPORTANT) -> Resolution:
        """Walk the tree for *intent*: the best *k* children at each step, *leaf_k* tools (default
        *k*) from each leaf; the merged tools back, best first (at most *top*). With *split*, an
        intent that asks for several things is also walked part by part (:mod:`.split`).

        *mode* (:mod:`.modes`) picks *k*, *leaf_k*, *top* and a relevance floor together:
        ``get_one`` (the best tool, K = 1), ``get_important`` (K = 3, the default) or ``get_all``
        (wider walks, every tool above the floor). A *k*, *leaf_k* or *top* given explicitly
        overrides the mode's own; an unknown mode raises :class:`ResolverError`. Where neither the
        caller nor the mode's name decides (K, leaf K, best leaf K and beam in the default mode, the
        model in every mode), the walk the tree publishes does, when the resolver asks for it
        (``published_walk``; :mod:`.plan`).

        At most ``max_walks`` resolutions run at once; a call past them waits for a turn."""
        settings_for(mode)  # an unknown mode is refused before anything is sent
        asked = time.perf_counter()
        with self._turns:
            t0 = time.perf_counter()
            deadline = t0 + self.lifetime
            published, fetch = self._published(), None
            if published is None:
                fetch = self._plan_fetch()
                self._drive(fetch, deadline)
                published = self._learned(fetch)
            walk, top = self._walk_for(intent, k, service, trust, exclude, top, leaf_k, split, mode, published, fetch)
            self._drive(walk, deadline)
            _timed(walk, asked, t0)
            return walk.result(top)

    def _drive(self, walk, deadline: float) -> None:
        """Send what *walk* (a :class:`Walk`, a :class:`WalkGroup` or a :class:`PlanFetch`) asks, all at
        once, and hand it each outcome as it arrives, until it asks nothing more or *deadline* passes."""
        ready: deque[Query] = deque(walk.start())
        inflight: dict = {}  # socket -> (query, start time)
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
                            self._order(q)
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
                            resends = [] if q.tcp else resend_times(sent, self.rtt.rto(q.server, self.timeout), self.timeout)
                            inflight[sock] = _InFlight(q, sent, resends, sock)
                    if inflight:
                        ready.extend(self._collect(walk, selector, inflight, deadline))
            finally:
                for sock in inflight:
                    sock.close()

    def _collect(self, walk: Walk, selector, inflight: dict, deadline: float) -> list[Query]:
        """Wait for the next replies (or the next timeout, or the *deadline*); hand each outcome to the walk."""
        now = time.perf_counter()
        wait_for = max(0.0, min(min(f.next_event(self.timeout) for f in inflight.values()), deadline) - now)
        out: list[Query] = []
        for key, _ in selector.select(wait_for):
            sock, exchange = key.fileobj, key.data
            flight = inflight.get(sock)
            if flight is None:  # its query was answered through the other socket of its hedge just now
                continue
            q, started = flight.query, flight.started
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
                if len(flight.socks) > 1:  # one server of a hedge down: the other may still answer
                    self._forget(selector, inflight, sock)
                    flight.socks.remove(sock)
                    continue
            for each in flight.socks:
                self._forget(selector, inflight, each)
            if sock is flight.hedge_sock:  # the zone's next server answered
                self._hedge_settled(q, True, time.perf_counter() - started)
            if wire is not None and not q.tcp and flight.sends == 1:  # Karn: a datagram sent twice times neither
                self.rtt.observe(q.server, ms / 1000)  # (a TCP exchange's connect is a round trip more)
            out.extend(walk.take(q, wire, err, ms))
            self._remember(q)
        now = time.perf_counter()
        for flight in {id(f): f for f in inflight.values()}.values():
            q, started = flight.query, flight.started
            if flight.resends and now >= flight.resends[0] and now - started < self.timeout:
                flight.resends.pop(0)
                self._send_again(walk, selector, inflight, flight)
            if now - started >= self.timeout:
                for each in flight.socks:
                    self._forget(selector, inflight, each)
                self.rtt.missed(q.server, self.timeout)
                if flight.hedge_sock is not None:
                    self._hedge_settled(q, False, self.timeout)
                out.extend(walk.take(q, None, TimeoutError(f"no reply from {q.server[0]}:{q.server[1]} "
                                                           f"within {self.timeout:g} s"), (now - started) * 1000))
        return out

    @staticmethod
    def _forget(selector, inflight: dict, sock) -> None:
        selector.unregister(sock)
        sock.close()
        del inflight[sock]

    def _send_again(self, walk: Walk, selector, inflight: dict, flight: _InFlight) -> None:
        """A resend of *flight*'s datagram on its first socket (a reply to either send is taken), and at
        the first, the same question to the zone's next server from a socket of its own (hedging)."""
        q = flight.query
        try:
            flight.socks[0].send(q.wire)
            flight.sends += 1
            walk.stats.retransmits += 1
        except OSError:
            pass
        hedge = q.hedge if flight.hedge_sock is None else None
        if hedge is not None:
            try:
                sock = transport.udp_send(q.wire, *hedge)
            except OSError:
                return
            selector.register(sock, selectors.EVENT_READ, None)
            inflight[sock] = flight
            flight.socks.append(sock)
            flight.hedge_sock = sock
            flight.sends += 1
            walk.stats.hedges += 1

    def close(self) -> None:
        """Nothing to release (kept so that ``with Resolver() as r:`` reads naturally)."""

    def __enter__(self) -> "Resolver":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AsyncResolver(_BaseResolver):
    """asyncio resolver with the same API, ``await resolver.resolve(...)``."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._loop_turns: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> its semaphore

    async def _exchange(self, q: Query, stats) -> tuple[bytes | None, Exception | None, float]:
        t0 = time.perf_counter()
        address, port = q.server
        sent: list = []  # one item a send of a UDP datagram
        via: list = []  # the server that answered
        hedge = None
        try:
            if q.tcp:
                wire = await transport.atcp(q.wire, address, port, self.timeout)
            else:
                resends = tuple(resend_times(0.0, self.rtt.rto(q.server, self.timeout), self.timeout))  # from now
                hedge = q.hedge if resends else None  # the zone's next server, asked at the first resend
                wire = await transport.audp(q.wire, address, port, self.timeout, resends, sent, hedge=hedge, via=via)
                if len(sent) == 1:  # Karn: a reply to a datagram sent twice times neither
                    self.rtt.observe(q.server, time.perf_counter() - t0)
            return wire, None, (time.perf_counter() - t0) * 1000
        except (OSError, TimeoutError) as exc:
            if isinstance(exc, TimeoutError):
                self.rtt.missed(q.server, self.timeout)
            return None, exc, (time.perf_counter() - t0) * 1000
        finally:
            hedged = hedge is not None and len(sent) > 1  # the hedge went with the first resend
            if hedged:
                stats.hedges += 1
                if not via or via[0] == hedge:  # the hedge answered, or neither did
                    self._hedge_settled(q, bool(via), time.perf_counter() - t0)
            stats.retransmits += max(0, len(sent) - 1 - hedged)

    async def resolve(self, intent: str, k: int | tuple[int, ...] | None = None, service: str = ANY_SERVICE, *,
                      trust=None, exclude=None, top: int | None = None, leaf_k: int | None = None, split: bool = False,
                      mode: str = GET_IMPORTANT) -> Resolution:
        """As :meth:`Resolver.resolve` (*mode*, explicit *k*, *leaf_k*, *top* overriding it, and the
        published walk, and the turns of ``max_walks``, alike)."""
        settings_for(mode)  # an unknown mode is refused before anything is sent
        asked = time.perf_counter()
        async with self._turns():
            t0 = time.perf_counter()
            deadline = t0 + self.lifetime
            published, fetch = self._published(), None
            if published is None:
                fetch = self._plan_fetch()
                await self._drive(fetch, deadline)
                published = self._learned(fetch)
            walk, top = self._walk_for(intent, k, service, trust, exclude, top, leaf_k, split, mode, published, fetch)
            await self._drive(walk, deadline)
            _timed(walk, asked, t0)
            return walk.result(top)

    def _turns(self):
        """The running event loop's semaphore of :attr:`max_walks` turns (an asyncio semaphore belongs to
        the loop that first waits on it, and a resolver may outlive one ``asyncio.run``)."""
        import asyncio

        if self.max_walks is None:
            return contextlib.nullcontext()
        loop = asyncio.get_running_loop()
        turns = self._loop_turns.get(loop)
        if turns is None:
            turns = self._loop_turns[loop] = asyncio.Semaphore(self.max_walks)
        return turns

    async def _drive(self, walk, deadline: float) -> None:
        """As :meth:`Resolver._drive`, each query an asyncio task."""
        import asyncio  # loaded by the async shell alone: the sync one and the CLI start without it

        ready: deque[Query] = deque(walk.start())
        inflight: dict = {}
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
                    self._order(q)
                    inflight[asyncio.ensure_future(self._exchange(q, walk.stats))] = q
            if inflight:
                done, _ = await asyncio.wait(inflight, timeout=max(0.0, deadline - time.perf_counter()),
                                             return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    q = inflight.pop(task)
                    wire, err, ms = task.result()
                    ready.extend(walk.take(q, wire, err, ms))
                    self._remember(q)
