"""TCP limits on loopback with real sockets: per-client connection caps, room for newcomers, idle timeouts
that shrink under pressure (RFC 7766 6.2).

The server listens on a fresh 127.x.y.1; "attackers" bind their sockets to 127.0.0.2 and 127.0.0.4,
the legitimate client to 127.0.0.3. Tests wait for events (a reply, the server closing a
connection) with generous timeouts and never assert how fast anything ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading

import pytest
from dnslib import RCODE, DNSRecord

from tooldns.serving.index import ZoneIndex
from tooldns.serving.resolver import StaticSource, ZoneResolver
from tooldns.serving.server import MAX_TCP_PER_CLIENT, DNSServer
from tooldns.zone.zonefile import load_zone

from conftest import REPLY_TIMEOUT, WAIT_TIMEOUT, ZONES, fresh_subnet, wait_until

pytestmark = pytest.mark.integration  # servers on loopback, held by many TCP connections

ATTACKER, ATTACKER_2, LEGIT = "127.0.0.2", "127.0.0.4", "127.0.0.3"
LONG = 3600.0  # an idle timeout no test waits for


@contextlib.contextmanager
def serving(**kwargs):
    """A DNSServer for tools. on a fresh loopback address, in a thread of its own."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    resolver = ZoneResolver(StaticSource(ZoneIndex(load_zone(ZONES / "tools.yaml"))))
    server = DNSServer(resolver, f"{fresh_subnet()}.1", 0, **kwargs)
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(WAIT_TIMEOUT)
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(WAIT_TIMEOUT)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT_TIMEOUT)
        loop.close()


def connect(server: DNSServer, source: str) -> socket.socket:
    return socket.create_connection((server.address, server.port), timeout=REPLY_TIMEOUT, source_address=(source, 0))


def ask(sock: socket.socket, qid: int = 1) -> DNSRecord | None:
    """Send one SOA query; the reply, or None when the server closed the connection instead."""
    q = DNSRecord.question("tools.", "SOA")
    q.header.id = qid
    wire = bytes(q.pack())
    try:
        sock.sendall(struct.pack("!H", len(wire)) + wire)
        head = sock.recv(2, socket.MSG_WAITALL)
        if len(head) < 2:
            return None
        return DNSRecord.parse(sock.recv(struct.unpack("!H", head)[0], socket.MSG_WAITALL))
    except (ConnectionResetError, BrokenPipeError):
        return None


def answered(reply: DNSRecord | None, qid: int = 1) -> bool:
    return reply is not None and reply.header.id == qid and reply.header.rcode == RCODE.NOERROR


def closed_by_server(sock: socket.socket, timeout: float = WAIT_TIMEOUT) -> bool:
    """True once the server has closed *sock* (EOF or reset); False if it is still open after *timeout*."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_one_address_keeping_many_connections_alive_does_not_lock_others_out():
    """The attack of the hardening issue: one address opens connection after connection and keeps each
    alive with a query now and then; past its share it is closed at once, and others are served."""
    with serving() as server, contextlib.ExitStack() as stack:
        socks = [stack.enter_context(connect(server, ATTACKER)) for _ in range(MAX_TCP_PER_CLIENT + 4)]
        alive = [s for s in socks if answered(ask(s))]
        assert len(alive) == MAX_TCP_PER_CLIENT
        assert all(closed_by_server(s) for s in socks if s not in alive)
        assert server.stats["tcp_refused"] == 4
        for round_ in range(2):  # the attacker keeps its connections alive; a newcomer is still served
            assert all(answered(ask(s, 10 + round_), 10 + round_) for s in alive)
            with connect(server, LEGIT) as legit:
                assert answered(ask(legit, 99), 99)
        with connect(server, ATTACKER_2) as other:  # another address has its own share
            assert answered(ask(other, 7), 7)


def test_when_every_slot_is_taken_the_connection_idle_longest_makes_room():
    with serving(max_tcp=8, max_tcp_per_client=4, tcp_idle=LONG, tcp_idle_busy=LONG) as server, \
            contextlib.ExitStack() as stack:
        socks = [stack.enter_context(connect(server, source)) for source in [ATTACKER] * 4 + [ATTACKER_2] * 4]
        for i, s in enumerate(socks):  # one after the other: the first is the one idle longest
            assert answered(ask(s, i), i)
        for s in socks[1:]:
            assert answered(ask(s, 50), 50)
        with connect(server, LEGIT) as legit:
            assert answered(ask(legit, 99), 99)
        assert closed_by_server(socks[0])
        assert server.stats["tcp_evicted"] == 1 and server.stats["tcp_refused"] == 0
        assert all(answered(ask(s, 60), 60) for s in socks[1:])


def test_idle_timeout_shrinks_under_pressure_for_connections_already_idle():
    """Idle for an hour while the server is quiet; closed soon after more than half the slots are taken."""
    with serving(max_tcp=4, tcp_idle=LONG, tcp_idle_busy=0.2) as server, contextlib.ExitStack() as stack:
        first = stack.enter_context(connect(server, ATTACKER))
        assert answered(ask(first))
        assert not closed_by_server(first, timeout=0.5)  # not closed while the server is quiet
        second = stack.enter_context(connect(server, ATTACKER_2))
        assert answered(ask(second))  # two of four: not yet more than half
        third = stack.enter_context(connect(server, LEGIT))
        assert answered(ask(third))  # three of four: pressure
        assert closed_by_server(first) and closed_by_server(second)  # long before the hour
        assert wait_until(lambda: len(server._conns) <= 2)


def test_a_query_sent_a_byte_at_a_time_holds_its_slot_no_longer_than_silence():
    with serving(tcp_idle=0.3) as server, connect(server, ATTACKER) as sock:
        wire = bytes(DNSRecord.question("tools.", "SOA").pack())
        sock.sendall(struct.pack("!H", len(wire)) + wire[:5])  # the rest never comes
        assert closed_by_server(sock)
        assert wait_until(lambda: not server._conns)


def test_a_server_stopped_with_connections_open_closes_them_without_an_error(caplog):
    """stop() ends the handlers of open connections: each connection is closed, and nothing is logged
    (Python 3.11's streams logged "Exception in callback ... CancelledError" for each cancelled handler)."""
    import logging

    with caplog.at_level(logging.ERROR):
        with serving(tcp_idle=LONG) as server:
            socks = [connect(server, LEGIT) for _ in range(3)]
            assert all(ask(s, i) is not None for i, s in enumerate(socks))  # each handler waits for more
        for s in socks:
            assert s.recv(2) == b""  # closed by the server
            s.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
