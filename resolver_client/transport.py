"""Sending one DNS message and getting the reply bytes: UDP and TCP, sync and async, nothing else.

The walk (:mod:`resolver_client.walk`) decides; these functions only move bytes. UDP sockets are
connected, so a dead server on loopback is reported at once (ICMP port unreachable) instead of
after a timeout. Errors: :class:`TimeoutError` and :class:`OSError` (ConnectionRefusedError ...).
"""

from __future__ import annotations

import errno
import functools
import selectors
import socket
import struct


def _family(address: str) -> int:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def udp_send(wire: bytes, address: str, port: int) -> socket.socket:
    """Send *wire* from a new connected, non-blocking UDP socket; read the reply with :func:`udp_recv`."""
    sock = socket.socket(_family(address), socket.SOCK_DGRAM)
    try:
        sock.setblocking(False)
        sock.connect((address, port))
        sock.send(wire)
    except OSError:
        sock.close()
        raise
    return sock


def udp_recv(sock: socket.socket, wire: bytes) -> bytes | None:
    """The reply to *wire* if one is waiting on *sock*; None for a datagram with another ID."""
    data = sock.recv(65535)
    return data if data[:2] == wire[:2] else None


def udp(wire: bytes, address: str, port: int, timeout: float) -> bytes:
    with socket.socket(_family(address), socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.connect((address, port))
        sock.send(wire)
        try:
            while True:
                data = sock.recv(65535)
                if data[:2] == wire[:2]:  # a stray datagram with another ID is skipped, not taken
                    return data
        except socket.timeout:
            raise TimeoutError(f"no UDP reply from {address}:{port} within {timeout:g} s") from None


def _one_fewer(asking: list, future, exc: BaseException) -> None:
    """One server of an exchange will not answer (*exc*): the exchange fails with it once no server is
    left to wait for (one server of a hedge refused: the other may still answer)."""
    asking[0] -= 1
    if asking[0] <= 0 and not future.done():
        future.set_exception(exc)


@functools.cache
def _udp_protocol() -> type:
    """The asyncio protocol of one UDP exchange, made on first use: asyncio is imported by the async
    functions alone, so that the sync resolver and the CLI start without it (a fifth of their import time)."""
    import asyncio

    class UDPProtocol(asyncio.DatagramProtocol):
        def __init__(self, wire: bytes, future: asyncio.Future, server=None, via: list | None = None,
                     asking: list | None = None) -> None:
            self.wire, self.future, self.server, self.via = wire, future, server, via
            #: how many servers the exchange still waits for (one, two once hedged), shared by their sockets
            self.asking = asking if asking is not None else [1]
            self.refused = False

        def connection_made(self, transport) -> None:
            transport.sendto(self.wire)

        def datagram_received(self, data: bytes, addr) -> None:
            if data[:2] == self.wire[:2] and not self.future.done():
                self.future.set_result(data)
                if self.via is not None:
                    self.via.append(self.server)

        def error_received(self, exc: Exception) -> None:
            if self.refused:  # its later resends refused again: counted once
                return
            self.refused = True
            _one_fewer(self.asking, self.future, exc)

    return UDPProtocol


async def audp(wire: bytes, address: str, port: int, timeout: float, resend_after: tuple[float, ...] = (),
               sent: list | None = None, hedge: tuple[str, int] | None = None, via: list | None = None) -> bytes:
    """The reply to *wire* from *address*:*port* within *timeout* seconds; the datagram goes again from
    the same socket *resend_after* seconds after the first send (a reply to either is taken), and
    *sent*, when given, gets one item a send. *hedge*: another server of the same zone, sent the
    datagram too at the first resend, from a socket of its own (a reply from either is taken); *via*,
    when given, gets the server that answered."""
    import asyncio

    loop = asyncio.get_running_loop()
    future: asyncio.Future = loop.create_future()
    protocol, asking = _udp_protocol(), [1]
    transport, _ = await loop.create_datagram_endpoint(lambda: protocol(wire, future, (address, port), via, asking),
                                                       remote_addr=(address, port))
    endpoints = [transport]
    if sent is not None:
        sent.append(0.0)
    resends = [loop.call_later(after, _resend, transport, wire, future, sent) for after in resend_after]
    if hedge is not None and resend_after:
        resends.append(loop.call_later(resend_after[0], _hedge, loop, wire, future, hedge, via, sent, endpoints, asking))
    try:  # asyncio.timeout, not wait_for: Python 3.11's wait_for could swallow the caller's cancel
        async with asyncio.timeout(timeout):
            return await future
    except TimeoutError:
        raise TimeoutError(f"no UDP reply from {address}:{port} within {timeout:g} s") from None
    finally:
        for handle in resends:
            handle.cancel()
        if not future.done():
            future.cancel()  # so that a hedge's endpoint opened after this closes itself
        for each in endpoints:
            each.close()


def _resend(transport, wire: bytes, future, sent: list | None) -> None:
    if not future.done() and not transport.is_closing():
        transport.sendto(wire)
        if sent is not None:
            sent.append(0.0)


def _hedge(loop, wire: bytes, future, server: tuple[str, int], via: list | None, sent: list | None,
           endpoints: list, asking: list) -> None:
    """Send *wire* to *server* from a new socket whose reply settles *future* too (hedging); a refusal
    from either server then leaves the exchange waiting for the other (*asking*: the servers it waits for)."""
    if future.done():
        return
    if sent is not None:
        sent.append(0.0)
    asking[0] += 1
    opening = loop.create_task(loop.create_datagram_endpoint(
        lambda: _udp_protocol()(wire, future, server, via, asking), remote_addr=server))

    def opened(task) -> None:
        if task.cancelled():
            return
        if task.exception() is not None:  # no socket for the hedge: the first server alone, as before
            _one_fewer(asking, future, task.exception())
            return
        transport = task.result()[0]
        if future.done():
            transport.close()
        else:
            endpoints.append(transport)

    opening.add_done_callback(opened)


async def atcp(wire: bytes, address: str, port: int, timeout: float) -> bytes:
    import asyncio

    async def exchange() -> bytes:
        reader, writer = await asyncio.open_connection(address, port)
        try:
            writer.write(struct.pack("!H", len(wire)) + wire)
            await writer.drain()
            (length,) = struct.unpack("!H", await reader.readexactly(2))
            return await reader.readexactly(length)
        finally:
            writer.close()

    try:
        async with asyncio.timeout(timeout):
            return await exchange()
    except TimeoutError:
        raise TimeoutError(f"no TCP reply from {address}:{port} within {timeout:g} s") from None
    except asyncio.IncompleteReadError as exc:
        raise ConnectionError("connection closed mid-message") from exc


class TCPExchange:
    """One query over TCP on a non-blocking socket, driven by a selector (no threads, no waits).

    >>> ex = TCPExchange(wire, "127.0.0.1", 5300); selector.register(ex.sock, ex.events)
    >>> # on each event: reply = ex.step(); re-register with ex.events until reply is not None
    """

    def __init__(self, wire: bytes, address: str, port: int) -> None:
        self.sock = socket.socket(_family(address), socket.SOCK_STREAM)
        self.sock.setblocking(False)
        self._out = struct.pack("!H", len(wire)) + wire
        self._in = b""
        err = self.sock.connect_ex((address, port))
        if err not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
            self.sock.close()
            raise ConnectionRefusedError(err, f"cannot connect to {address}:{port}")

    @property
    def events(self) -> int:
        return selectors.EVENT_WRITE if self._out else selectors.EVENT_READ

    def step(self) -> bytes | None:
        """Advance on a ready socket; the reply once complete. Raises OSError on failure."""
        if self._out:
            err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                raise ConnectionRefusedError(err, "connection failed")
            sent = self.sock.send(self._out)
            self._out = self._out[sent:]
            return None
        chunk = self.sock.recv(65537)
        if not chunk:
            raise ConnectionError("connection closed mid-message")
        self._in += chunk
        if len(self._in) >= 2:
            (length,) = struct.unpack_from("!H", self._in)
            if len(self._in) >= 2 + length:
                return self._in[2:2 + length]
        return None

    def close(self) -> None:
        self.sock.close()
