"""Intents that ask for several tools at once, walked as one walk per part (opt-in, I/O-free).

"Find ski resorts in Switzerland, get details of a hotel, search for flights" names three tools;
one walk down the tree follows the words of all three and can miss each. :func:`split_intent` cuts
such an intent at sentence ends, semicolons and commas or "and" that start a new request, without
a model. A :class:`WalkGroup` walks the whole intent and every part together (the drivers of
:mod:`resolver_client.resolver` send all their queries at once, as for one walk) and merges the
rankings with a fair share for each: round robin over the whole intent's ranking and each part's.

Measured on ToolRet's dev queries (``docs/building.md``), splitting did not raise recall on the
held-out half, so it is off by default: ``Resolver.resolve(..., split=True)`` or
``tooldns-resolve --split``.

    >>> split_intent("Find ski resorts in Switzerland, get details of a hotel and search for flights")
    ['Find ski resorts in Switzerland', 'get details of a hotel', 'search for flights']
"""

from __future__ import annotations

import re
from dataclasses import fields

from .exceptions import ResolverError
from .results import Resolution, Stats, Tool
from .walk import Query, Walk

#: verbs that start a new request after "and" (so "salt and pepper" stays whole)
_VERBS = ("find|get|search|show|tell|list|give|check|book|send|look|fetch|provide|calculate|translate|convert|"
          "recommend|retrieve|create|play|what|how|which|can|could|i")
_CUT = re.compile(rf"(?<=[.?!;])\s+|,\s*(?:and\s+)?(?:then\s+|also\s+)?(?=[a-z])"
                  rf"|\s+and\s+(?:then\s+|also\s+)?(?=(?:{_VERBS})\b)", re.IGNORECASE)
MAX_PARTS = 4
MIN_WORDS = 3


def split_intent(text: str) -> list[str]:
    """The parts of an intent that asks for several things; [] when it asks for one."""
    parts = [p.strip(" ,.;") for p in _CUT.split(text) if p and len(p.split()) >= MIN_WORDS]
    return parts[:MAX_PARTS] if len(parts) > 1 else []


def merge_fair(rankings: list[list[Tool]], top: int | None) -> list[Tool]:
    """Round robin over *rankings* (each best first), each tool once, at most *top*."""
    out: list[Tool] = []
    seen: set[str] = set()
    for rank in range(max((len(r) for r in rankings), default=0)):
        for ranking in rankings:
            if rank < len(ranking) and ranking[rank].key not in seen:
                seen.add(ranking[rank].key)
                out.append(ranking[rank])
    return out[:top] if top is not None else out


class WalkGroup:
    """Several walks driven as one: what a driver needs of a :class:`Walk` (start, take, stats, result)."""

    def __init__(self, walks: list[Walk]) -> None:
        self.walks = walks
        self.stats = Stats()  # the driver sets ``ms``; the rest is summed from the walks
        self._owner: dict[int, Walk] = {}

    def _own(self, walk: Walk, queries: list[Query]) -> list[Query]:
        for q in queries:
            self._owner[id(q)] = walk
        return queries

    def start(self) -> list[Query]:
        return [q for walk in self.walks for q in self._own(walk, walk.start())]

    def take(self, q: Query, wire: bytes | None, error: Exception | None = None, ms: float = 0.0,
             cached=None) -> list[Query]:
        walk = self._owner.pop(id(q))
        return self._own(walk, walk.take(q, wire, error, ms, cached=cached))

    def expire(self, why: str) -> None:
        for walk in self.walks:
            walk.expire(why)

    def result(self, top: int | None = None) -> Resolution:
        whole = self.walks[0].result()  # the whole intent's failure is the resolution's
        results, part_errors = [whole], []
        for walk in self.walks[1:]:
            try:
                results.append(walk.result())
            except ResolverError as exc:  # a part that found nothing behind a dead zone: the others stand
                part_errors.append(f"part {walk.intent!r}: {exc}")
        for f in fields(Stats):
            value = getattr(whole.stats, f.name)
            if f.name in ("ms", "queued_ms"):  # the driver's
                continue
            if f.name == "intent_shortened" or not isinstance(value, (int, float)):
                setattr(self.stats, f.name, value)  # the whole intent's: what the parts were walked by
            else:
                setattr(self.stats, f.name, sum(getattr(r.stats, f.name) for r in results))
        if self.stats.embedded_by == "none" and self.stats.zone_embedded:
            self.stats.embedded_by = "zones"
        return Resolution(whole.intent, whole.k, whole.service, merge_fair([r.tools for r in results], top),
                          self.stats, [h for r in results for h in r.trace],
                          [e for r in results for e in r.errors] + part_errors)
