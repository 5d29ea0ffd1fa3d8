"""The DNS server: UDP and TCP sockets around a resolver, on asyncio; no DNS logic of its own.

Does what dnslib's ``DNSServer`` does (sockets, framing, truncation) in one event loop, which on
this class of machine answers about twice the queries of dnslib's threaded server:

* UDP: replies larger than the client's advertised EDNS size (at most 1232 bytes, 512 without
  EDNS) go out truncated, TC set, question and OPT kept; the client retries over TCP.
* TCP: several queries per connection (RFC 7766), each answered in order; idle connections are
  closed after ``tcp_idle`` seconds; at most ``max_tcp`` connections at once.
* Malformed packets get FORMERR when their header can be read and are dropped otherwise;
  responses (QR set) are dropped; an internal error becomes SERVFAIL, never silence.
* A small answer cache keyed on the query's bytes (less its ID) serves repeated identical
  queries from packed bytes when the zone's scorer is deterministic; it is emptied whenever the
  zone index changes.
* Zones whose scorer may block (the LLM scorer waits up to its budget for a model) are answered
  from a small thread pool, so one slow model call never stalls the other queries.

    >>> server = DNSServer(resolver, "127.0.0.1", 0)
    >>> await server.start(); server.port
    53217
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

from dnslib import CLASS, RCODE

from .reply import error_reply
from .wire import MalformedRequest, pack_reply, parse_request

log = logging.getLogger(__name__)


class _Handler:
    """What dnslib resolvers receive as *handler*: the protocol and the client's address."""

    __slots__ = ("protocol", "client_address")

    def __init__(self, protocol: str, client_address) -> None:
        self.protocol = protocol
        self.client_address = client_address


class DNSServer:
    """Serve one resolver on one address and port, over UDP and TCP."""

    def __init__(self, resolver, address: str = "127.0.0.1", port: int = 53, *, tcp_idle: float = 10.0,
                 max_tcp: int = 256, cache_size: int = 4096) -> None:
        self.resolver = resolver
        self.address = address
        self.port = port
        self.tcp_idle = tcp_idle
        self.max_tcp = max_tcp
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple[bytes, bool], bytes] = OrderedDict()
        self._cache_index = None
        self._udp = None
        self._tcp = None
        self._tcp_count = 0
        self._tcp_tasks: set[asyncio.Task] = set()
        self._pool: ThreadPoolExecutor | None = None
        self.stats = {"udp": 0, "tcp": 0, "dropped": 0, "truncated": 0, "cache_hits": 0}

    def _index(self):
        """The zone index the resolver answers from now, if it has one (it may be swapped by a reload)."""
        return getattr(getattr(self.resolver, "source", None), "index", None)

    def _may_block(self) -> bool:
        index = self._index()
        return index is not None and index.blocking

    async def _handle_in_pool(self, data: bytes, udp: bool, client) -> bytes | None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="tooldns-scorer")
        return await asyncio.get_running_loop().run_in_executor(self._pool, self.handle, data, udp, client)

    async def _handle_async(self, data: bytes, udp: bool, client) -> bytes | None:
        """:meth:`handle`, in the thread pool when the zone's scorer may block."""
        if self._may_block():
            return await self._handle_in_pool(data, udp, client)
        return self.handle(data, udp, client)

    # -- the part that turns bytes into bytes; no sockets, so tests and benchmarks can call it --
    def handle(self, data: bytes, udp: bool, client=None) -> bytes | None:
        """The reply bytes for query bytes *data*, or None to send nothing."""
        index = self._index()
        cacheable = self.cache_size > 0 and index is not None and index.cacheable
        if cacheable:
            if index is not self._cache_index:
                self._cache.clear()
                self._cache_index = index
            key = (data[2:], udp)
            hit = self._cache.get(key)
            if hit is not None:
                self.stats["cache_hits"] += 1
                return data[:2] + hit
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
            reply = self.resolver.resolve(record, _Handler("udp" if udp else "tcp", client))
        try:
            wire = pack_reply(reply, request.udp_size if udp else 65535)
        except Exception:
            log.exception("cannot pack reply")
            # without the question too: it may be what could not be packed
            wire = bytes(error_reply(None, RCODE.SERVFAIL, "internal server error: reply cannot be packed",
                                     header=record.header, edns=request.opt is not None).pack())
        if len(wire) > 2 and wire[2] & 0x02:
            self.stats["truncated"] += 1
        rcode = wire[3] & 0x0F if len(wire) > 3 else RCODE.SERVFAIL
        # class IN only: CHAOS queries (stats.tooldns.) must always be answered afresh
        if (cacheable and rcode in (RCODE.NOERROR, RCODE.NXDOMAIN) and not request.opt_error
                and record.questions and record.q.qclass == CLASS.IN):
            self._cache[key] = wire[2:]
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return wire

    # -- sockets --
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        server = self

        class _UDP(asyncio.DatagramProtocol):
            def connection_made(self, transport):
                self.transport = transport

            def datagram_received(self, data, addr):
                server.stats["udp"] += 1
                if server._may_block():
                    asyncio.ensure_future(self._answer_later(data, addr))
                    return
                try:
                    wire = server.handle(data, True, addr)
                except Exception:  # never let one packet stop the socket
                    log.exception("error handling UDP packet from %s", addr)
                    return
                if wire is not None:
                    self.transport.sendto(wire, addr)

            async def _answer_later(self, data, addr):
                try:
                    wire = await server._handle_in_pool(data, True, addr)
                except Exception:
                    log.exception("error handling UDP packet from %s", addr)
                    return
                if wire is not None and not self.transport.is_closing():
                    self.transport.sendto(wire, addr)

            def error_received(self, exc):
                log.debug("UDP error: %s", exc)

        self._udp, _ = await loop.create_datagram_endpoint(_UDP, local_addr=(self.address, self.port),
                                                           reuse_port=False)
        if self.port == 0:
            self.port = self._udp.get_extra_info("sockname")[1]
        self._tcp = await asyncio.start_server(self._serve_tcp, self.address, self.port, reuse_address=True)

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tcp_tasks.add(task)
        if self._tcp_count >= self.max_tcp:
            writer.close()
            if task is not None:
                self._tcp_tasks.discard(task)
            return
        self._tcp_count += 1
        peer = writer.get_extra_info("peername")
        try:
            while True:
                try:
                    head = await asyncio.wait_for(reader.readexactly(2), self.tcp_idle)
                    (length,) = struct.unpack("!H", head)
                    data = await asyncio.wait_for(reader.readexactly(length), self.tcp_idle)
                except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                    break
                self.stats["tcp"] += 1
                wire = await self._handle_async(data, False, peer)
                if wire is None:
                    continue
                writer.write(struct.pack("!H", len(wire)) + wire)
                await writer.drain()
        except Exception:
            log.exception("error on TCP connection from %s", peer)
        finally:
            self._tcp_count -= 1
            writer.close()
            if task is not None:
                self._tcp_tasks.discard(task)

    async def stop(self) -> None:
        if self._udp is not None:
            self._udp.close()
            self._udp = None
        if self._tcp is not None:
            self._tcp.close()
            for task in list(self._tcp_tasks):
                task.cancel()
            await self._tcp.wait_closed()
            self._tcp = None
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
