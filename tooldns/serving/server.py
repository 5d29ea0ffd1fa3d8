"""The DNS server: UDP and TCP sockets around what it serves, on asyncio; no DNS logic of its own.

What it serves is a :class:`Served` (:class:`~tooldns.serving.resolver.ZoneResolver`: one zone;
:class:`~tooldns.serving.multizone.MultiZoneResolver`: several), and that class declares all the
server reads of it: dnslib's one method (``resolve``, the full path), the fast path's door
(``fast_answer``) and :class:`Serving`, how its replies may be cached, answered and limited.

Does what dnslib's ``DNSServer`` does (sockets, framing, truncation) in one event loop, which on
this class of machine answers about twice the queries of dnslib's threaded server:

* UDP: replies larger than the client's advertised EDNS size (at most 1232 bytes, 512 without
  EDNS) go out truncated, TC set, question and OPT kept; the client retries over TCP.
* UDP replies are rate limited per client prefix (:mod:`.ratelimit`, as BIND's RRL): over the
  zone's ``rate_limit`` setting, replies are dropped, every ``slip``-th sent truncated so that
  real clients retry over TCP. ``rate_limit=N`` overrides the zones' rate (0: off).
* TCP: several queries per connection (RFC 7766), each answered in order, never rate limited. At
  most ``max_tcp`` connections at once and ``max_tcp_per_client`` from one address (the one over
  the limit is closed at once; when all slots are taken, the connection idle longest makes room).
  A connection waiting for its client (for a query, or the rest of one) is closed after
  ``tcp_idle`` seconds, and after ``tcp_idle_busy`` seconds while more than half the slots are
  taken, those waiting already included (RFC 7766 6.2).
* Malformed packets get FORMERR when their header can be read and are dropped otherwise;
  responses (QR set) are dropped; an internal error becomes SERVFAIL, never silence.
* A small answer cache keyed on the query's bytes (less its ID) serves repeated identical
  queries from packed bytes when the zone's scorer is deterministic; it is emptied whenever what
  is served reloads (:class:`Serving`).
* Zones whose scorer may block (the LLM scorer waits up to its budget for a model) are answered
  from a small thread pool, so one slow model call never stalls the other queries; so is a query
  that would wait to be answered (an intent a hybrid zone must embed, :mod:`.offloop`), the others
  to that zone (a vector sent with the intent) on the event loop.
* What is served may not be ready for a query (a lazy zone not loaded yet): it raises
  :class:`NotReady` with a future, and the server answers that query once the future is done, in
  the meantime answering the others; nothing on the event loop waits.
* Observers (:meth:`DNSServer.observe`: :mod:`.metrics`, :mod:`.querylog`) see each query, its
  reply, the time taken and whether the cache answered; a server without them pays nothing.

    >>> server = DNSServer(resolver, "127.0.0.1", 0)
    >>> await server.start(); server.port
    53217
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import struct
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from dnslib import CLASS, RCODE, DNSRecord
from dnslib.server import BaseResolver

from ..compiled import unwatch, watch
from ..zone.model import RateLimit
from .offloop import WouldWait, on_the_loop
from .ratelimit import SEND, SLIP, RateLimiter, kind_of, slip_reply
from .reply import error_reply
from .sockbuf import DEFAULT_RCVBUF, raise_rcvbuf, udp_drops
from .wire import MAX_MESSAGE, MalformedRequest, pack_reply, parse_request, skip_name

log = logging.getLogger(__name__)

#: the TCP limits' defaults (``tooldns serve`` shows them): seconds a connection may stay idle,
#: and while more than half of the connection slots are taken; connections at once, and from one address
TCP_IDLE = 10.0
TCP_IDLE_BUSY = 1.0
MAX_TCP = 256
MAX_TCP_PER_CLIENT = 16
#: queries longer than this (padding, junk options) are answered but never cached: a cache keyed on
#: query bytes would otherwise hold up to 64 kB per entry
MAX_CACHED_QUERY = 1232
#: seconds stop() waits for the handlers of open TCP connections to end once cancelled
STOP_WAIT = 5.0
#: seconds a query waits for what it needs to be ready (:class:`NotReady`), and times it is tried
#: again after (what was made ready may be gone again: a lazy zone dropped to load others)
READY_WAIT = 30.0
READY_TRIES = 3


class NotReady(Exception):
    """What is served cannot answer this query yet (a lazy zone is being loaded); ``ready`` is a
    :class:`concurrent.futures.Future` done when it can. Raised from :meth:`Served.resolve` or
    :meth:`Served.fast_answer`: the server answers the query again once ready, off the event loop's
    path; no other query waits."""

    def __init__(self, ready) -> None:
        super().__init__("not ready")
        self.ready = ready


@dataclass(frozen=True, eq=False)
class Serving:
    """What a :class:`DNSServer` needs to know of what it serves, besides its answers. Made anew
    whenever what is served reloads: the packet cache starts afresh when the server sees another one
    (compared by identity)."""

    #: replies depend only on the query's bytes and what is served: the packet cache may keep them
    cacheable: bool
    #: answering may take a while on every query (a scorer waits for a model): queries are answered
    #: in a thread pool, off the event loop (one that would wait otherwise says so, :mod:`.offloop`)
    blocking: bool
    #: the response rate limiting setting (the zone file's ``rate_limit``), before the server's overrides
    rate_limit: RateLimit
    #: signed zones: seconds a reply may stay in the packet cache before its signatures are made
    #: afresh (the signers' refresh); None: unsigned
    refresh: float | None = None


class Served(BaseResolver, ABC):
    """What a :class:`DNSServer` serves, and all that it reads of it (dnslib's ``BaseResolver`` with
    the fast path and the serving flags declared)."""

    @abstractmethod
    def resolve(self, request: DNSRecord, handler) -> DNSRecord:
        """dnslib's contract, the full path: the reply to the parsed *request*; never raises but
        :class:`NotReady` (answer it when its future is done)."""

    @abstractmethod
    def fast_answer(self, data: bytes, udp: bool) -> bytes | None:
        """The fast path's door: the reply's bytes for query bytes *data*, or None to decline
        (:meth:`resolve` then answers)."""

    @property
    @abstractmethod
    def serving(self) -> Serving:
        """How replies may be cached, answered and rate limited now (:class:`Serving`)."""


class _Handler:
    """What dnslib resolvers receive as *handler*: the protocol, the client's address and the server."""

    __slots__ = ("protocol", "client_address", "server")

    def __init__(self, protocol: str, client_address, server=None) -> None:
        self.protocol = protocol
        self.client_address = client_address
        self.server = server


class _Connection:
    """One TCP connection: its writer, its client's address, since when it waits for a query (None:
    it is reading or answering one) and the timer that closes it when idle."""

    __slots__ = ("writer", "client", "idle_since", "timer", "open")

    def __init__(self, writer: asyncio.StreamWriter, client: str) -> None:
        self.writer = writer
        self.client = client
        self.idle_since: float | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.open = True


def _question(data: bytes) -> bytes | None:
    """The first question of message *data* (name, type and class; the name lower-cased), or None."""
    try:
        end = skip_name(data, 12) if len(data) > 12 and (data[4] or data[5]) else 0
    except ValueError:
        return None
    return data[12:end].lower() + data[end:end + 4] if end and len(data) >= end + 4 else None


def _endpoint(addr) -> tuple[str, int]:
    """(address, port) of a socket address, the address in its canonical text (``::1``, not ``0::1``)."""
    try:
        return str(ipaddress.ip_address(addr[0])), addr[1]
    except ValueError:
        return addr[0], addr[1]


class DNSServer:
    """Serve *resolver* (a :class:`Served`) on one address and port, over UDP and TCP.

    *rate_limit*: None follows the zone's ``rate_limit`` setting; N replaces its rate with N
    responses a second; 0 turns rate limiting off. *rate_limit_exempt*: networks never limited, on
    top of the zone's. *reuse_port*: bind with SO_REUSEPORT, so that several processes serve the
    same address and port and the kernel spreads queries (UDP) and connections (TCP) over them.
    *rcvbuf*: the UDP receive buffer asked for, in bytes (0: the system's default; :mod:`.sockbuf`).
    """

    def __init__(self, resolver: Served, address: str = "127.0.0.1", port: int = 53, *, tcp_idle: float = TCP_IDLE,
                 tcp_idle_busy: float = TCP_IDLE_BUSY, max_tcp: int = MAX_TCP,
                 max_tcp_per_client: int = MAX_TCP_PER_CLIENT, cache_size: int = 4096,
                 cache_bytes: int = 4 * 2**20,
                 rate_limit: int | None = None, rate_limit_exempt: Sequence[str] = (),
                 reuse_port: bool = False, rcvbuf: int = DEFAULT_RCVBUF) -> None:
        if rate_limit is not None and rate_limit < 0:
            raise ValueError(f"rate_limit must be None or a whole number of at least 0, not {rate_limit!r}")
        self.resolver = resolver
        self.address = address
        self.port = port
        self.tcp_idle = tcp_idle
        self.tcp_idle_busy = min(tcp_idle_busy, tcp_idle)
        self.max_tcp = max_tcp
        self.max_tcp_per_client = max_tcp_per_client
        self.cache_size = cache_size
        self.rate_limit = rate_limit
        self.rate_limit_exempt = tuple(str(ipaddress.ip_network(n, strict=False)) for n in rate_limit_exempt)
        self.reuse_port = reuse_port
        self.rcvbuf = rcvbuf
        #: the UDP socket's receive buffer as the kernel reports it once started (:mod:`.sockbuf`)
        self.rcvbuf_effective: int | None = None
        self._cache: OrderedDict[tuple[bytes, bool], bytes] = OrderedDict()
        self._cache_bytes = 0
        self.cache_bytes = cache_bytes
        self._cache_serving: Serving | None = None  # what the packet cache's replies were answered from
        #: signed zones: when cached replies (their RRSIGs) are to be made afresh (time.monotonic); None: never
        self._cache_until: float | None = None
        self._rrl: RateLimiter | None = None
        self._rrl_source: RateLimit | None = None  # the zone setting self._rrl was made from
        self._udp = None
        self._tcp = None
        self._watched: list[int] = []  # its sockets' descriptors, watched for turns (tooldns.compiled.watch)
        self._conns: dict[_Connection, None] = {}  # an ordered set
        self._per_client: dict[str, int] = {}
        self._pressed = False  # more than half of the TCP slots taken
        self._tcp_tasks: set[asyncio.Task] = set()
        self._pool: ThreadPoolExecutor | None = None
        #: message id -> the future of the reply to a message this server sent (NOTIFY), the addresses
        #: it went to, its question (lower-cased wire) and opcode (expect_reply)
        self._awaited: dict[int, tuple] = {}
        self.stats = {"udp": 0, "tcp": 0, "dropped": 0, "truncated": 0, "cache_hits": 0, "rate_limited": 0,
                      "slipped": 0, "tcp_refused": 0, "tcp_evicted": 0}
        self._observers: tuple = ()  # see observe()

    def _may_block(self) -> bool:
        return self.resolver.serving.blocking

    async def _handle_in_pool(self, data: bytes, udp: bool, client) -> bytes | None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="tooldns-scorer")
        return await asyncio.get_running_loop().run_in_executor(self._pool, self.handle, data, udp, client)

    def _handle_on_loop(self, data: bytes, udp: bool, client) -> bytes | None:
        """:meth:`handle` on the event loop, where nothing may wait: :class:`~.offloop.WouldWait` for
        a query that would (an intent to embed), which the pool then answers."""
        with on_the_loop():
            return self.handle(data, udp, client)

    async def _handle_async(self, data: bytes, udp: bool, client, waits: bool = False) -> bytes | None:
        """:meth:`handle`, in the thread pool when the zone's scorer may block or the query would wait
        (*waits*, or :class:`~.offloop.WouldWait` on the loop), and again once what it needs is ready
        (:class:`NotReady`)."""
        for _ in range(READY_TRIES):
            try:
                if waits or self._may_block():
                    return await self._handle_in_pool(data, udp, client)
                try:
                    return self._handle_on_loop(data, udp, client)
                except WouldWait:
                    waits = True
                    return await self._handle_in_pool(data, udp, client)
            except NotReady as wait:
                await self._ready(wait)
        return self._servfail(data, "the zone asked about could not be made ready; try again")

    async def _ready(self, wait: NotReady) -> None:
        """Wait (not on the loop's path: this query's task only) until *wait*'s future is done."""
        try:
            async with asyncio.timeout(READY_WAIT):
                await asyncio.wrap_future(wait.ready)
        except (TimeoutError, asyncio.CancelledError) as exc:
            if isinstance(exc, asyncio.CancelledError) and not wait.ready.cancelled():
                raise
        except Exception:  # the load failed: the next try answers for it (SERVFAIL naming the file)
            pass

    @staticmethod
    def _servfail(data: bytes, text: str) -> bytes | None:
        try:
            record = DNSRecord.parse(data)
        except Exception:
            return None
        return bytes(error_reply(record, RCODE.SERVFAIL, text).pack())

    # -- the part that turns bytes into bytes; no sockets, so tests and benchmarks can call it --
    def handle(self, data: bytes, udp: bool, client=None) -> bytes | None:
        """The reply bytes for query bytes *data*, or None to send nothing.

        Intent searches come from the resolver's fast path (``fast_answer``: the same bytes, packed
        from pieces encoded once per zone); every other query is parsed, resolved and packed with
        dnslib. A bytearray (dnslib's ``pack()``) is read as its bytes."""
        data = data if type(data) is bytes else bytes(data)
        serving = self.resolver.serving
        cacheable = self.cache_size > 0 and serving.cacheable
        if cacheable:
            if serving is not self._cache_serving or (self._cache_until is not None and time.monotonic() >= self._cache_until):
                self._cache.clear()
                self._cache_bytes = 0
                self._cache_serving = serving
                self._cache_until = None if serving.refresh is None else time.monotonic() + serving.refresh
            key = (data[2:], udp)
            hit = self._cache.get(key)
            if hit is not None:
                self.stats["cache_hits"] += 1
                return data[:2] + hit
        wire = self.resolver.fast_answer(data, udp)
        if wire is None:
            try:
                request = parse_request(data)
            except MalformedRequest as exc:
                if exc.header is None or exc.header.qr:
                    self.stats["dropped"] += 1
                    return None
                log.debug("FORMERR for malformed message: %s", exc)
                return bytes(error_reply(None, RCODE.FORMERR, header=exc.header, edns=False).pack())
            record = request.record
            if record.header.qr:
                self.stats["dropped"] += 1
                return None
            if request.name_error:  # a name that cannot be packed again: answered without echoing it
                reply = error_reply(None, RCODE.FORMERR, request.name_error, header=record.header,
                                    edns=request.opt is not None)
            elif request.opt_error:
                reply = error_reply(record, RCODE.FORMERR, f"malformed OPT record: {request.opt_error}")
            else:
                reply = self.resolver.resolve(record, _Handler("udp" if udp else "tcp", client, self))
            try:
                wire = pack_reply(reply, request.udp_size if udp else MAX_MESSAGE, tcp=not udp)
            except Exception:
                log.exception("cannot pack reply")
                # without the question too: it may be what could not be packed
                wire = bytes(error_reply(None, RCODE.SERVFAIL, "internal server error: reply cannot be packed",
                                         header=record.header, edns=request.opt is not None).pack())
            # class IN only: CHAOS queries (stats.tooldns.) must always be answered afresh
            cacheable = (cacheable and not request.opt_error and record.questions and record.q.qclass == CLASS.IN
                         and record.header.opcode == 0)  # a NOTIFY is acted on each time
        if len(wire) > 2 and wire[2] & 0x02:
            self.stats["truncated"] += 1
        rcode = wire[3] & 0x0F if len(wire) > 3 else RCODE.SERVFAIL
        # 0 and 3: NOERROR and NXDOMAIN (read as numbers: dnslib's RCODE answers through a raised AttributeError)
        if cacheable and rcode in (0, 3) and len(data) <= MAX_CACHED_QUERY:
            self._remember(key, wire[2:])  # fast answers: class IN, NOERROR
        return wire

    def _remember(self, key: tuple[bytes, bool], reply: bytes) -> None:
        """Keep *reply* in the packet cache, within ``cache_size`` entries and ``cache_bytes`` bytes."""
        self._cache[key] = reply
        self._cache_bytes += len(key[0]) + len(reply)
        while len(self._cache) > self.cache_size or self._cache_bytes > self.cache_bytes:
            (old, _), value = self._cache.popitem(last=False)
            self._cache_bytes -= len(old) + len(value)


    # -- observers: what metrics and the query log see of each query --
    def observe(self, *observers) -> None:
        """Call each of *observers* after every query handled, with ``(data, wire, udp, client, ns,
        cached)``: the query's bytes, the reply's (None: nothing sent), the nanoseconds :meth:`handle`
        took and whether the packet cache answered (:mod:`.metrics`, :mod:`.querylog`). They run where
        the query is answered and must be quick. A timed handle then stands in for :meth:`handle` on
        this server only, so that a server without observers pays nothing for them."""
        self._observers = tuple(observers)
        if self._observers:
            self.handle = self._observed_handle
        else:
            self.__dict__.pop("handle", None)

    def _observed_handle(self, data: bytes, udp: bool, client=None) -> bytes | None:
        stats = self.stats
        hits = stats["cache_hits"]
        start = time.perf_counter_ns()
        wire = DNSServer.handle(self, data, udp, client)
        ns = time.perf_counter_ns() - start
        # exact on the event loop; in the thread pool (zones whose scorer may block) a hit in another
        # thread at the same moment would count for this query too
        cached = stats["cache_hits"] != hits
        for observer in self._observers:
            try:
                observer(data, wire, udp, client, ns, cached)
            except Exception:  # what is reported never costs the client its reply
                log.exception("observer %r failed", observer)
        return wire

    # -- response rate limiting: a policy on what leaves the UDP socket --
    def _effective_rate_limit(self, zone: RateLimit) -> RateLimit:
        """The zone's setting with this server's overrides."""
        changes: dict = {}
        if self.rate_limit == 0:
            changes.update(responses_per_second=0, nxdomains_per_second=0, errors_per_second=0)
        elif self.rate_limit is not None:
            changes["responses_per_second"] = self.rate_limit
        if self.rate_limit_exempt:
            changes["exempt"] = zone.exempt + self.rate_limit_exempt
        return replace(zone, **changes) if changes else zone

    def _limiter(self) -> RateLimiter | None:
        """The rate limiter of the zone served now (a reload may change its setting), None when off."""
        source = self.resolver.serving.rate_limit
        if source is not self._rrl_source:
            self._rrl_source = source
            config = self._effective_rate_limit(source)
            if self._rrl is None or self._rrl.config != config:  # an unchanged setting keeps its accounts
                self._rrl = RateLimiter(config)
        return self._rrl if self._rrl is not None and self._rrl.enabled else None

    def limit(self, wire: bytes | None, client, now: float | None = None) -> bytes | None:
        """What goes out over UDP for reply *wire* to *client* (an address tuple): the reply, its slip or None."""
        limiter = self._limiter() if wire is not None else None
        if limiter is None:
            return wire
        verdict = limiter.check(client[0], kind_of(wire), time.monotonic() if now is None else now)
        if verdict == SEND:
            return wire
        self.stats["rate_limited"] += 1
        if verdict == SLIP:
            self.stats["slipped"] += 1
            return slip_reply(wire)
        return None

    # -- messages this server sends itself (NOTIFY to a parent): from its own address and port --
    def send(self, wire: bytes, address: tuple[str, int]) -> None:
        """Send *wire* over UDP from this server's socket (the receiver sees this server's address)."""
        if self._udp is not None and not self._udp.is_closing():
            self._udp.sendto(wire, address)

    def expect_reply(self, message: bytes, sources) -> asyncio.Future:
        """A future that gets the first reply to *message* (the wire of a query this server sent) that
        reaches its UDP socket from one of *sources* ((address, port) pairs) with the message's ID,
        opcode and question; a datagram that matches the ID alone (a guess, from anyone) is dropped."""
        message_id = int.from_bytes(message[:2], "big")
        held = self._awaited.get(message_id)
        if held is None or held[0].done():
            future = asyncio.get_running_loop().create_future()
            self._awaited[message_id] = (future, frozenset(_endpoint(a) for a in sources), _question(message),
                                         message[2] & 0x78)
            return future
        return held[0]

    def forget_reply(self, message_id: int) -> None:
        self._awaited.pop(message_id, None)

    def _replied(self, data: bytes, addr) -> None:
        message_id = int.from_bytes(data[:2], "big")
        held = self._awaited.get(message_id)
        if (held is not None and not held[0].done() and _endpoint(addr) in held[1]
                and data[2] & 0x78 == held[3] and _question(data) == held[2]):
            del self._awaited[message_id]
            held[0].set_result(data)
        else:
            self.stats["dropped"] += 1

    # -- sockets --
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        server = self

        class _UDP(asyncio.DatagramProtocol):
            def connection_made(self, transport):
                self.transport = transport

            def datagram_received(self, data, addr):
                if server._awaited and len(data) > 2 and data[2] & 0x80:  # a reply to what we sent
                    server._replied(data, addr)
                    return
                server.stats["udp"] += 1
                if server._may_block():
                    asyncio.ensure_future(self._answer_later(data, addr))
                    return
                try:
                    wire = server.limit(server._handle_on_loop(data, True, addr), addr)
                except NotReady:  # answered once ready; the loop goes on answering the others
                    asyncio.ensure_future(self._answer_later(data, addr))
                    return
                except WouldWait:  # answered in the pool
                    asyncio.ensure_future(self._answer_later(data, addr, waits=True))
                    return
                except Exception:  # never let one packet stop the socket
                    log.exception("error handling UDP packet from %s", addr)
                    return
                if wire is not None:
                    self.transport.sendto(wire, addr)

            async def _answer_later(self, data, addr, waits=False):
                try:
                    wire = server.limit(await server._handle_async(data, True, addr, waits), addr)
                except Exception:
                    log.exception("error handling UDP packet from %s", addr)
                    return
                if wire is not None and not self.transport.is_closing():
                    self.transport.sendto(wire, addr)

            def error_received(self, exc):
                log.debug("UDP error: %s", exc)

        self._udp, _ = await loop.create_datagram_endpoint(_UDP, local_addr=(self.address, self.port),
                                                           reuse_port=self.reuse_port)
        if self.port == 0:
            self.port = self._udp.get_extra_info("sockname")[1]
        self.rcvbuf_effective = raise_rcvbuf(self._udp.get_extra_info("socket"), self.rcvbuf)
        self._tcp = await asyncio.start_server(self._serve_tcp, self.address, self.port, reuse_address=True,
                                               reuse_port=self.reuse_port)
        self._watched = [self._udp.get_extra_info("socket").fileno(), *(s.fileno() for s in self._tcp.sockets)]
        for fd in self._watched:
            watch(fd)  # work in other threads gives this loop its turn when a query waits

    def udp_drops(self) -> int | None:
        """Datagrams the kernel dropped before this server read them (its receive buffer full)."""
        return udp_drops(self._udp.get_extra_info("socket")) if self._udp is not None else None

    # -- TCP connection slots and idle timeouts --
    def _busy(self) -> bool:
        return len(self._conns) > self.max_tcp // 2

    def _idle_timeout(self) -> float:
        return self.tcp_idle_busy if self._busy() else self.tcp_idle

    def _admit(self, writer: asyncio.StreamWriter, client: str) -> _Connection | None:
        """A slot for a new connection from *client*, or None: it is to be closed at once."""
        if self._per_client.get(client, 0) >= self.max_tcp_per_client or (
                len(self._conns) >= self.max_tcp and not self._evict()):
            self.stats["tcp_refused"] += 1
            return None
        conn = _Connection(writer, client)
        self._conns[conn] = None
        self._per_client[client] = self._per_client.get(client, 0) + 1
        if not self._pressed and self._busy():
            self._pressed = True
            self._squeeze()
        return conn

    def _evict(self) -> bool:
        """Close the connection idle longest to make room; False when none is idle."""
        idle = [c for c in self._conns if c.idle_since is not None]
        if not idle:
            return False
        self._close(min(idle, key=lambda c: c.idle_since))
        self.stats["tcp_evicted"] += 1
        return True

    def _squeeze(self) -> None:
        """Under pressure: connections idle already get the short timeout too, counted from when they went idle."""
        loop = asyncio.get_running_loop()
        for conn in list(self._conns):
            if conn.idle_since is None or conn.timer is None:
                continue
            deadline = conn.idle_since + self.tcp_idle_busy
            if conn.timer.when() > deadline:
                conn.timer.cancel()
                conn.timer = loop.call_at(deadline, self._close, conn)

    def _close(self, conn: _Connection) -> None:
        """Give up the connection's slot and close it (idempotent)."""
        if not conn.open:
            return
        conn.open = False
        if conn.timer is not None:
            conn.timer.cancel()
        self._conns.pop(conn, None)
        left = self._per_client.get(conn.client, 1) - 1
        if left > 0:
            self._per_client[conn.client] = left
        else:
            self._per_client.pop(conn.client, None)
        self._pressed = self._pressed and self._busy()
        conn.writer.close()

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tcp_tasks.add(task)
        peer = writer.get_extra_info("peername")
        conn = self._admit(writer, peer[0] if peer else "")
        try:
            if conn is not None:
                await self._tcp_queries(reader, writer, conn, peer)
        except asyncio.CancelledError:
            # stop(): the connection closes below, and the task ends as if the client had left, since
            # Python 3.11's streams ask a finished handler task for its exception, which raises for a
            # cancelled one: asyncio logged "Exception in callback ... CancelledError" for each
            # connection open when a server stopped
            pass
        except Exception:
            log.exception("error on TCP connection from %s", peer)
        finally:
            if conn is not None:
                self._close(conn)
            writer.close()
            if task is not None:
                self._tcp_tasks.discard(task)

    async def _tcp_queries(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: _Connection,
                           peer) -> None:
        """Answer the connection's queries in order until it closes, idles out or loses its slot.

        Idle is waiting for the client: from a reply until the next query has come whole, so a query
        sent a byte at a time holds its slot no longer than silence would."""
        loop = asyncio.get_running_loop()
        while conn.open:
            conn.idle_since = loop.time()
            conn.timer = loop.call_later(self._idle_timeout(), self._close, conn)
            try:
                (length,) = struct.unpack("!H", await reader.readexactly(2))
                data = await reader.readexactly(length)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            if not conn.open:
                return
            conn.timer.cancel()
            conn.idle_since = None
            self.stats["tcp"] += 1
            wire = await self._handle_async(data, False, peer)
            if wire is None:
                continue
            writer.write(struct.pack("!H", len(wire)) + wire)
            try:  # a client that does not read its replies keeps no slot for ever
                # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the drain's result when
                # the task is cancelled as the drain completes, and stop()'s cancel was lost that way
                # (the handler went back to reading, its connection open after the server stopped)
                async with asyncio.timeout(self._idle_timeout()):
                    await writer.drain()
            except (TimeoutError, ConnectionError):
                return

    async def stop(self) -> None:
        for fd in self._watched:
            unwatch(fd)
        self._watched = []
        if self._udp is not None:
            self._udp.close()
            self._udp = None
        if self._tcp is not None:
            self._tcp.close()
            handlers = list(self._tcp_tasks)
            for task in handlers:
                task.cancel()
            if handlers:  # their connections closed before stop() returns, not left to a loop that may stop first
                await asyncio.wait(handlers, timeout=STOP_WAIT)
            await self._tcp.wait_closed()
            self._tcp = None
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
