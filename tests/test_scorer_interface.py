"""The scorer interface is all the server knows of a scorer: a third one is served as it declares.

A scorer registered under a new name says whether its rankings may be cached and whether it may
block; the server's packet cache, its thread pool and its counters follow that, not the name.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import pytest
from dnslib import EDNS0, DNSRecord, EDNSOption

from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent
from tooldns.protocol.meta import META_OPTION_CODE, decode_meta
from tooldns.scoring import registry
from tooldns.scoring.scorer import Ranking, Scorer
from tooldns.serving.index import ZoneIndex
from tooldns.serving.resolver import StaticSource, ZoneResolver
from tooldns.serving.server import DNSServer
from tooldns.zone.model import Settings
from tooldns.zone.zonefile import load_zone

from conftest import ZONES


class Reverse(Scorer):
    """Ranks documents last first; counts its calls and the threads it ran on."""

    name = "reverse"

    def __init__(self, docs, briefs=None, cacheable=True, blocking=False):
        self.n, self.cacheable, self.blocking = len(docs), cacheable, blocking
        self.calls, self.threads, self.closed = 0, set(), False

    def rank(self, intent, k, vector=None):
        self.calls += 1
        self.threads.add(threading.get_ident())
        return Ranking([(i, float(i + 1)) for i in reversed(range(self.n))][:k], scorer=self.name)

    def counters(self):
        return {"calls": self.calls}

    def close(self):
        self.closed = True


@pytest.fixture
def reverse_zone(monkeypatch):
    def make(**options):
        monkeypatch.setitem(registry._REGISTRY, "reverse",
                            lambda docs, briefs=None, vectors=None: Reverse(docs, briefs, **options))
        zone = load_zone(ZONES / "weather.tools.yaml")
        return ZoneIndex(dataclasses.replace(zone, settings=Settings(scorer="reverse")))
    return make


def query(intent: str) -> bytes:
    q = DNSRecord.question("_any._tcp._weather.tools.", "SRV")
    q.add_ar(EDNS0(udp_len=1232, opts=[EDNSOption(INTENT_OPTION_CODE, encode_intent(intent, 2))]))
    return bytes(q.pack())


def test_a_new_cacheable_scorer_is_served_from_the_packet_cache(reverse_zone):
    index = reverse_zone(cacheable=True)
    assert index.cacheable and not index.blocking
    server = DNSServer(ZoneResolver(StaticSource(index)), cache_size=16)
    first, again = server.handle(query("anything"), True), server.handle(query("anything"), True)
    assert first[2:] == again[2:] and server.stats["cache_hits"] == 1
    assert index.child_candidates.scorer.calls == 1  # the second answer came from the cache
    meta = next(o for o in DNSRecord.parse(first).ar[-1].rdata if o.code == META_OPTION_CODE)
    assert decode_meta(meta.data).scorer == "reverse"


def test_a_scorer_that_may_not_be_cached_is_asked_every_time(reverse_zone):
    index = reverse_zone(cacheable=False)
    assert not index.cacheable
    server = DNSServer(ZoneResolver(StaticSource(index)), cache_size=16)
    server.handle(query("anything"), True)
    server.handle(query("anything"), True)
    assert server.stats["cache_hits"] == 0 and index.child_candidates.scorer.calls == 2


def test_a_blocking_scorer_is_answered_off_the_event_loop(reverse_zone):
    index = reverse_zone(blocking=True, cacheable=False)
    assert index.blocking
    server = DNSServer(ZoneResolver(StaticSource(index)), cache_size=16)

    async def ask() -> bytes | None:
        return await server._handle_async(query("anything"), False, None)

    try:
        assert asyncio.run(ask()) is not None
    finally:
        if server._pool is not None:
            server._pool.shutdown(wait=True)
    assert threading.get_ident() not in index.child_candidates.scorer.threads


def test_counters_and_close_reach_every_scorer(reverse_zone):
    index = reverse_zone()
    resolver = ZoneResolver(StaticSource(index))
    DNSServer(resolver, cache_size=0).handle(query("weather"), True)
    assert resolver.counters()["scorer_calls"] == sum(s.calls for s in index.scorers()) >= 1
    index.close()
    assert all(s.closed for s in index.scorers())
