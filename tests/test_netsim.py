"""The network simulator of the benchmarks (:mod:`tooldns.netsim`) in front of a real tree: a whole
walk passes through it, held at least the set delay each way, over UDP and TCP; a share of datagrams is
dropped and counted; a TCP exchange arrives whole and in order."""

from __future__ import annotations

import socket
import time

import dns.message
import dns.query
import dns.rcode
import pytest

from resolver_client import Resolver
from tooldns.netsim import NetSim

from conftest import WAIT_TIMEOUT, start_tree

ONE_WAY = 0.02


@pytest.fixture
def tree_behind_sim(demo_dir, integration):
    tree = start_tree(demo_dir)
    port = tree.root()[1]
    addresses = sorted({a for listed in tree.tree.addresses.values() for a in listed})
    sim = NetSim([(a, port) for a in addresses], one_way=ONE_WAY).start()
    yield tree, sim
    sim.stop()
    tree.stop()


def test_a_walk_passes_through_the_simulator_and_waits_its_round_trips(tree_behind_sim):
    tree, sim = tree_behind_sim
    root = sim.address_of(tree.root())
    assert root != tree.root()
    res = Resolver(root=root, timeout=WAIT_TIMEOUT, cache=False).resolve("typhoon warning hong kong")
    assert res.tools and res.stats.queries >= 3
    assert sim.counters.udp_forwarded >= 2 * res.stats.queries  # each query and its reply
    answered = [h for h in res.trace if h.rcode == "NOERROR"]
    assert answered and all(h.ms >= 2 * ONE_WAY * 1000 * 0.95 for h in answered)  # a round trip at least, each
    assert {h.server.rsplit(":", 1)[1] for h in res.trace} == {str(sim.port)}  # glue followed at the sim's port


def test_datagrams_are_dropped_as_set_and_counted(tree_behind_sim):
    tree, sim = tree_behind_sim
    sim.set(one_way=0.0, loss=0.5)
    root = sim.address_of(tree.root())
    answered = 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.2)
        for i in range(60):
            s.sendto(dns.message.make_query(f"q{i}.tools.", "A").to_wire(), root)
            try:
                s.recvfrom(4096)
                answered += 1
            except socket.timeout:
                pass
    assert sim.counters.udp_dropped > 0 and 0 < answered < 60
    # both ways are dropped: about a quarter of the queries come back (60 x 0.5 x 0.5)
    assert sim.counters.udp_dropped + sim.counters.udp_forwarded >= 60 + answered


def test_tcp_passes_whole_and_in_order(tree_behind_sim):
    tree, sim = tree_behind_sim
    sim.set(one_way=0.005, jitter=0.01, loss=0.1)
    address, port = sim.address_of(tree.root())
    with socket.create_connection((address, port), timeout=WAIT_TIMEOUT) as conn:
        for i in range(5):  # pipelined on one connection: the replies in order
            dns.query.send_tcp(conn, dns.message.make_query(f"n{i}.tools.", "SOA"))
        replies = [dns.query.receive_tcp(conn, expiration=time.time() + WAIT_TIMEOUT)[0] for _ in range(5)]
    assert [r.question[0].name.to_text() for r in replies] == [f"n{i}.tools." for i in range(5)]
    assert all(r.rcode() in (dns.rcode.NOERROR, dns.rcode.NXDOMAIN) for r in replies)
    assert sim.counters.tcp_connections == 1 and sim.counters.tcp_chunks >= 2


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        NetSim([("127.0.0.1", 53)], loss=1.0)
    with pytest.raises(ValueError):
        NetSim([], one_way=0.01)


def test_a_resolver_gets_past_a_lossy_network_by_sending_again_after_each_servers_rto(tree_behind_sim):
    """A lost datagram costs the resolver its server's retransmission timeout (rtt.py), not the whole
    timeout: it sends the same query again on the same socket; the smoothed round trip it learns is at
    least the network's."""
    import asyncio

    from resolver_client import AsyncResolver

    tree, sim = tree_behind_sim
    sim.set(one_way=0.005, loss=0.2)
    root = sim.address_of(tree.root())
    sync, asyn = (Resolver(root=root, timeout=3.0, cache=False), AsyncResolver(root=root, timeout=3.0, cache=False))
    found, resent = 0, 0
    for i in range(8):
        for res in (sync.resolve(f"weather forecast {i}"), asyncio.run(asyn.resolve(f"typhoon warning {i}"))):
            found += bool(res.tools)
            resent += res.stats.retransmits
    assert sim.counters.udp_dropped > 0 and resent > 0
    assert found == 16  # every resolution got past the loss
    for resolver in (sync, asyn):
        srtt = resolver.rtt.srtt(root)
        assert srtt is not None and srtt >= 2 * 0.005 * 0.95
        assert resolver.rtt.rto(root, resolver.timeout) < resolver.timeout  # learned, not the whole timeout


def test_the_simulators_timers_learn_a_head_start_from_their_lateness_and_keep_it_bounded():
    """Timers of an event loop run late (epoll rounds its timeout up to a millisecond): the simulator
    sets them early by what it has seen, so the delays it imposes are the delays asked for on average."""
    sim = NetSim([("127.0.0.1", 53)])
    for _ in range(200):  # every timer 0.6 ms late: the head start grows towards it
        sim._learn(0.0006 - sim._early)
    assert 0.0005 < sim._early <= 0.0006
    for _ in range(200):  # timers now early: it shrinks again, never below nothing
        sim._learn(-0.001)
    assert sim._early == 0.0
    for _ in range(200):  # however late the timers, at most 2 ms early
        sim._learn(0.05)
    assert sim._early == 0.002
    assert sim.counters.timers == 600 and sim.counters.timer_error_us > 0
