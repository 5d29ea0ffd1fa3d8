"""Sending one DNS message and getting the reply bytes: UDP and TCP, sync and async, nothing else.

The walk (:mod:`resolver_client.walk`) decides; these functions only move bytes. UDP sockets are
connected, so a dead server on loopback is reported at once (ICMP port unreachable) instead of
after a timeout. Errors: :class:`TimeoutError` and :class:`OSError` (ConnectionRefusedError ...).
"""

from __future__ import annotations

import asyncio
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


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed mid-message")
        buf += chunk
    return buf


def tcp(wire: bytes, address: str, port: int, timeout: float) -> bytes:
    try:
        with socket.create_connection((address, port), timeout=timeout) as sock:
            sock.sendall(struct.pack("!H", len(wire)) + wire)
            (length,) = struct.unpack("!H", _recv_exact(sock, 2))
            return _recv_exact(sock, length)
    except socket.timeout:
        raise TimeoutError(f"no TCP reply from {address}:{port} within {timeout:g} s") from None


class _UDPProtocol(asyncio.DatagramProtocol):
    def __init__(self, wire: bytes, future: asyncio.Future) -> None:
        self.wire, self.future = wire, future

    def connection_made(self, transport) -> None:
        transport.sendto(self.wire)

    def datagram_received(self, data: bytes, addr) -> None:
        if data[:2] == self.wire[:2] and not self.future.done():
            self.future.set_result(data)

    def error_received(self, exc: Exception) -> None:
        if not self.future.done():
            self.future.set_exception(exc)


async def audp(wire: bytes, address: str, port: int, timeout: float) -> bytes:
    loop = asyncio.get_running_loop()
    future: asyncio.Future = loop.create_future()
    transport, _ = await loop.create_datagram_endpoint(lambda: _UDPProtocol(wire, future),
                                                       remote_addr=(address, port))
    try:
        return await asyncio.wait_for(future, timeout)
    except asyncio.TimeoutError:
        raise TimeoutError(f"no UDP reply from {address}:{port} within {timeout:g} s") from None
    finally:
        transport.close()


async def atcp(wire: bytes, address: str, port: int, timeout: float) -> bytes:
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
        return await asyncio.wait_for(exchange(), timeout)
    except asyncio.TimeoutError:
        raise TimeoutError(f"no TCP reply from {address}:{port} within {timeout:g} s") from None
    except asyncio.IncompleteReadError as exc:
        raise ConnectionError("connection closed mid-message") from exc
