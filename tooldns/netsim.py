"""A network simulator on loopback: proxies that delay and drop what passes, for benchmarks.

A kernel with ``netem`` can delay a loopback interface; one without (a container, this project's CI)
cannot. :class:`NetSim` stands in front of servers instead: for each upstream ``(address, port)`` it
listens on the same address at another port, and what it forwards it holds for a one-way delay (with
jitter) in each direction, dropping a share of it.

* **UDP**: each datagram, either way, is held ``one_way`` seconds plus up to ``jitter`` (uniform), or
  dropped with probability ``loss``; a client's datagrams go upstream from a socket of its own, so
  replies find their way back.
* **TCP**: the connection costs one round trip before its first octet arrives (the handshake); each
  chunk read, either way, is held the one-way delay (jitter never reorders a stream); a chunk "lost"
  (probability ``loss``) arrives one retransmission timeout later, as the kernel's retransmission
  would deliver it (``max(0.2, 3 * round trip)`` seconds: Linux's minimum RTO is 200 ms).
* **Timers**: an event loop's timers run late (epoll's timeout is rounded up to a whole millisecond,
  and the thread wakes after it), about 0.6 ms each on a quiet machine: six delayed datagrams a
  resolution added 4 ms to every one. Each timer is set early by what the last ones were seen late,
  so that the delays are those asked for on average; ``counters.timer_error_us`` says how far off
  they still ran.

Every server of a tree listens on one port (:mod:`tooldns.serving.tree`), and the resolver asks each
glue address at the port of the server that referred it, so a simulator on port P of every address a
tree names, the resolver's root at ``(root address, P)``, puts every query of a walk behind the
simulated network. Used by ``scripts/bench/bench_network.py``. :class:`SilentServer` is the other
extreme: a name server whose host is gone or whose firewall drops everything (``bench_hedge.py``).

    >>> with NetSim([("127.0.0.1", 5300)], one_way=0.025, loss=0.01) as sim:
    ...     root = sim.address_of(("127.0.0.1", 5300))    # ("127.0.0.1", <the proxy's port>)
"""

from __future__ import annotations

import asyncio
import random
import socket
import threading
from dataclasses import dataclass

#: Linux's minimum retransmission timeout (seconds): the least a lost TCP segment costs
MIN_RTO = 0.2


@dataclass
class Counters:
    """What the simulator passed and dropped (UDP datagrams, TCP connections and chunks, both ways)."""

    udp_forwarded: int = 0
    udp_dropped: int = 0
    tcp_connections: int = 0
    tcp_chunks: int = 0
    tcp_retransmitted: int = 0
    #: delays served by a timer, and how far from their due time they ran, summed (microseconds)
    timers: int = 0
    timer_error_us: int = 0


class _UdpRelay(asyncio.DatagramProtocol):
    """The listening side of one upstream's UDP relay: a datagram from a client goes upstream through
    that client's own socket (:class:`_UdpUpstream`), after the delay."""

    def __init__(self, sim: "NetSim", upstream: tuple[str, int]) -> None:
        self.sim, self.upstream = sim, upstream
        self.transport: asyncio.DatagramTransport | None = None
        self.clients: dict[tuple, asyncio.DatagramTransport] = {}
        self.opening: dict[tuple, asyncio.Future] = {}

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:
        self.sim._later(lambda: asyncio.ensure_future(self._upstream_send(data, addr)))

    async def _upstream_send(self, data: bytes, client) -> None:
        transport = self.clients.get(client)
        if transport is None:
            if client not in self.opening:
                loop = asyncio.get_running_loop()
                self.opening[client] = asyncio.ensure_future(loop.create_datagram_endpoint(
                    lambda: _UdpUpstream(self, client), remote_addr=self.upstream))
            transport, _ = await asyncio.shield(self.opening[client])
            self.clients[client] = transport
        transport.sendto(data)

    def reply(self, data: bytes, client) -> None:
        if self.transport is not None:
            self.sim._later(lambda: self.transport.sendto(data, client))

    def close(self) -> None:
        for transport in self.clients.values():
            transport.close()
        if self.transport is not None:
            self.transport.close()


class _UdpUpstream(asyncio.DatagramProtocol):
    def __init__(self, relay: _UdpRelay, client) -> None:
        self.relay, self.client = relay, client

    def datagram_received(self, data: bytes, addr) -> None:
        self.relay.reply(data, self.client)


class NetSim:
    """Proxies in front of *upstreams* (``(address, port)`` pairs), each on its upstream's address at
    one port shared by all (*port*; 0: the first free on every address), run in a thread of their own.

    *one_way* and *jitter* are seconds, *loss* a probability; *seed* makes the drops and the jitter
    repeat. :meth:`set` changes them while running."""

    def __init__(self, upstreams, *, one_way: float = 0.0, jitter: float = 0.0, loss: float = 0.0,
                 port: int = 0, seed: int | None = 0) -> None:
        self.upstreams = [(str(a), int(p)) for a, p in upstreams]
        if not self.upstreams:
            raise ValueError("a network simulator needs at least one upstream server")
        self.port = port
        self.counters = Counters()
        self._random = random.Random(seed)
        self.set(one_way=one_way, jitter=jitter, loss=loss)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._relays: list = []
        self._servers: list[asyncio.AbstractServer] = []
        self._ready = threading.Event()
        self._error: BaseException | None = None
        #: how much earlier than due a timer is set: the event loop's timers run late (epoll's timeout
        #: is rounded up to a millisecond, the thread wakes after), about 0.6 ms each here, which six
        #: delayed datagrams a resolution made 4 ms; learned from the lateness seen (:meth:`_fired`)
        self._early = 0.0

    def set(self, *, one_way: float | None = None, jitter: float | None = None, loss: float | None = None) -> None:
        """Change the network's delay, jitter or loss (from any thread)."""
        for name, value in (("one_way", one_way), ("jitter", jitter), ("loss", loss)):
            if value is None:
                continue
            if value < 0 or (name == "loss" and value >= 1):
                raise ValueError(f"{name} must be at least 0{' and below 1' if name == 'loss' else ''}, not {value}")
            setattr(self, name, float(value))

    @property
    def rtt(self) -> float:
        """The round trip's mean, seconds."""
        return 2 * (self.one_way + self.jitter / 2)

    def address_of(self, upstream: tuple[str, int]) -> tuple[str, int]:
        """Where the simulator listens for *upstream*."""
        return (upstream[0], self.port)

    # -- delays ------------------------------------------------------------------------------------

    def _delay(self) -> float:
        return self.one_way + (self._random.uniform(0, self.jitter) if self.jitter else 0.0)

    def _later(self, action) -> None:
        """Pass a UDP datagram on: run *action* after one one-way delay, or never (the datagram lost)."""
        if self.loss and self._random.random() < self.loss:
            self.counters.udp_dropped += 1
            return
        self.counters.udp_forwarded += 1
        delay = self._delay()
        if delay <= 0:
            action()
        else:
            due = self._loop.time() + delay
            self._loop.call_at(due - self._early, self._fired, due, action)

    def _fired(self, due: float, action) -> None:
        """Run *action*, due at *due*, and learn from how late (or early) its timer ran."""
        self._learn(self._loop.time() - due)
        action()

    def _learn(self, late: float) -> None:
        """Move the timers' head start a tenth of the way towards making *late* zero (at most 2 ms)."""
        self._early = min(max(self._early + late / 10, 0.0), 0.002)
        self.counters.timers += 1
        self.counters.timer_error_us += round(abs(late) * 1e6)

    # -- TCP ---------------------------------------------------------------------------------------

    async def _tcp_client(self, upstream: tuple[str, int], reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        self.counters.tcp_connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*upstream)
        except OSError:
            writer.close()
            return
        handshake = 2 * self._delay()  # SYN, SYN-ACK: the first octet waits a round trip
        await asyncio.gather(self._pump(reader, up_writer, handshake), self._pump(up_reader, writer, 0.0),
                             return_exceptions=True)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, first: float) -> None:
        """Copy *reader* to *writer*, each chunk held its delay, in order (a stream is never reordered)."""
        loop = asyncio.get_running_loop()
        due, extra = 0.0, first  # the first chunk waits the handshake too
        queue: asyncio.Queue = asyncio.Queue()

        async def deliver() -> None:
            while True:
                when, chunk = await queue.get()
                wait = when - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait - self._early)
                    self._learn(loop.time() - when)
                if chunk is None:
                    break
                writer.write(chunk)
                await writer.drain()
            writer.close()

        sender = asyncio.ensure_future(deliver())
        try:
            while chunk := await reader.read(65536):
                delay = self._delay()
                if self.loss and self._random.random() < self.loss:
                    delay += max(MIN_RTO, 3 * self.rtt)
                    self.counters.tcp_retransmitted += 1
                self.counters.tcp_chunks += 1
                due, extra = max(due, loop.time() + extra + delay), 0.0
                queue.put_nowait((due, chunk))
        except (ConnectionError, OSError):
            pass
        queue.put_nowait((due, None))
        try:
            await sender
        except (ConnectionError, OSError):
            pass

    # -- running -----------------------------------------------------------------------------------

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        addresses = list(dict.fromkeys(a for a, _ in self.upstreams))
        if self.port == 0:
            self.port = _free_port(addresses)
        for upstream in self.upstreams:
            relay = _UdpRelay(self, upstream)
            await loop.create_datagram_endpoint(lambda relay=relay: relay, local_addr=(upstream[0], self.port))
            self._relays.append(relay)
            server = await asyncio.start_server(
                lambda r, w, upstream=upstream: self._tcp_client(upstream, r, w), upstream[0], self.port,
                reuse_address=True)
            self._servers.append(server)

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._start())
        except BaseException as exc:  # told to the thread that started us
            self._error = exc
            self._ready.set()
            self._loop.close()
            return
        self._ready.set()
        self._loop.run_forever()
        for relay in self._relays:
            relay.close()
        for server in self._servers:
            server.close()
        pending = asyncio.all_tasks(self._loop)  # connections still pumping: ended before the loop closes
        for task in pending:
            task.cancel()
        if pending:
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    def start(self) -> "NetSim":
        self._thread = threading.Thread(target=self._run, name="netsim", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> "NetSim":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class SilentServer:
    """A UDP socket on *address* (port *port*, 0: any) that reads every datagram and answers none, in a
    thread of its own until :meth:`close`; :attr:`swallowed` counts what it read."""

    def __init__(self, address: str = "127.0.0.1", port: int = 0) -> None:
        self.sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((address, port))
        self.sock.settimeout(0.05)
        self.swallowed = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="tooldns-silent", daemon=True)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        return self.sock.getsockname()[:2]

    def _serve(self) -> None:
        while not self._done.is_set():
            try:
                self.sock.recvfrom(65535)
                self.swallowed += 1
            except (socket.timeout, OSError):
                continue

    def close(self) -> None:
        self._done.set()
        self._thread.join()
        self.sock.close()


def _free_port(addresses: list[str], attempts: int = 50) -> int:
    """A port free for UDP and TCP on every one of *addresses*."""
    for _ in range(attempts):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.bind((addresses[0], 0))
            port = probe.getsockname()[1]
        held = []
        try:
            for address in addresses:
                for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
                    s = socket.socket(socket.AF_INET, kind)
                    held.append(s)
                    s.bind((address, port))
            return port
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise OSError(f"no port free on all of {len(addresses)} addresses")
