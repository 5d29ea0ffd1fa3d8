"""The packet cache stays within its bytes, and CHAOS stats report the server's own counters."""

from __future__ import annotations

import socket

import pytest
from dnslib import CLASS, EDNS0, QTYPE, DNSRecord, EDNSOption

from conftest import REPLY_TIMEOUT, ZONES
from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent
from tooldns.serving.index import ZoneIndex
from tooldns.serving.resolver import StaticSource, ZoneResolver
from tooldns.serving.server import MAX_CACHED_QUERY, DNSServer
from tooldns.serving.tree import TreeThread
from tooldns.zone.zonefile import load_zone


def _query(intent: str, pad: int = 0) -> bytes:
    q = DNSRecord.question("_any._tcp._weather.tools.", "SRV")
    q.header.rd = 0
    options = [EDNSOption(INTENT_OPTION_CODE, encode_intent(intent, 3))]
    if pad:
        options.append(EDNSOption(12, b"\0" * pad))  # EDNS padding (RFC 7830)
    q.add_ar(EDNS0(udp_len=1232, opts=options))
    return bytes(q.pack())


def test_the_packet_cache_stays_within_its_bytes_and_skips_long_queries():
    resolver = ZoneResolver(StaticSource(ZoneIndex(load_zone(ZONES / "weather.tools.yaml"))))
    server = DNSServer(resolver, cache_size=4096, cache_bytes=20_000)
    for n in range(300):
        assert server.handle(_query(f"weather station number {n}"), True) is not None
        assert server._cache_bytes <= 20_000
    assert 0 < len(server._cache) < 300
    assert server._cache_bytes == sum(len(k[0]) + len(v) for k, v in server._cache.items())
    kept = len(server._cache)
    long = _query("weather radar", pad=MAX_CACHED_QUERY)
    assert server.handle(long, False) is not None and len(server._cache) == kept  # answered, not cached
    hits = server.stats["cache_hits"]
    recent = _query("weather station number 299")
    assert server.handle(recent, True)[2:] == server.handle(recent, True)[2:]
    assert server.stats["cache_hits"] == hits + 2  # the newest entries are the ones kept


@pytest.mark.integration
def test_chaos_stats_carry_the_servers_counters(tmp_path):
    with TreeThread(ZONES, 0, rate_limit=0) as tree:
        address, port = tree.root()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(REPLY_TIMEOUT)
            s.sendto(_query("historical weather"), (address, port))
            s.recv(65535)
            q = DNSRecord.question("stats.tooldns.", "TXT", "CH")
            s.sendto(q.pack(), (address, port))
            reply = DNSRecord.parse(s.recv(65535))
    assert reply.rr[0].rclass == CLASS.CH and reply.rr[0].rtype == QTYPE.TXT
    pairs = dict(part.decode().split("=", 1) for part in reply.rr[0].rdata.data)
    assert pairs["zone"] == "tools." and int(pairs["udp"]) >= 2
    assert {"rate_limited", "slipped", "cache_hits", "queries"} <= set(pairs)


def test_a_budget_empties_every_store_it_bounds_once_spent():
    """tooldns.protocol.budget: stores count what they keep against one budget; the spending that finds
    it spent empties them all first (the word cache, dense rows and referral layouts are bounded so)."""
    import doctest
    import gc

    from tooldns.protocol import budget as budget_module
    from tooldns.protocol.budget import Budget, Store

    assert doctest.testmod(budget_module).failed == 0
    budget = Budget(3)
    stores = [budget.join(Store()) for _ in range(2)]
    for i in range(7):
        budget.spend()
        stores[i % 2][i] = i
        assert sum(map(len, stores)) <= 3 and budget.spent <= 3
    assert sum(map(len, stores)) == 1  # emptied at the 4th and 7th spending
    del stores[1]
    gc.collect()
    budget.spend(5)
    budget.spend()  # a store gone is no longer emptied, nor kept alive
    assert len(budget._stores) == 1 and not stores[0] and budget.spent == 1
