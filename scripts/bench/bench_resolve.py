#!/usr/bin/env python3
"""Whole-resolution latency on the shipped demo tree over loopback, as an agent sees it.

Starts ``tooldns serve zones/`` in its own process, then resolves a fixed set of intents with the
sync resolver library (K=3 by default), several rounds, and prints median and p99 latency of a
whole walk, with queries, bytes and packets per resolution, for three client set-ups:

* cold: client cache off, every walk goes to the servers (servers' packet caches warm after the
  first round, as for popular intents);
* cold, servers' packet caches off: every query parsed, scored and packed;
* warm: client cache on, the same intents again within their cache lifetime.

    python scripts/bench/bench_resolve.py --rounds 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))  # benchlib

from benchlib import percentile, start_servers, stop_servers  # noqa: E402
from resolver_client import Resolver  # noqa: E402

INTENTS = [
    "historical weather Hong Kong", "weather forecast for tomorrow in Paris", "typhoon warning signal",
    "US severe weather alerts", "tide predictions for a coastal station", "geocode a street address",
    "driving directions between two cities", "convert euros to US dollars", "bitcoin price",
    "create an invoice for a customer", "expense reimbursement request", "open a pull request on GitHub",
    "latest version of a Python package", "known vulnerabilities of an npm package", "search arXiv papers",
    "citations of a paper by DOI", "Wikipedia summary of a city", "fetch a web page as markdown",
    "post a message to a Slack channel", "send a transactional email", "schedule a meeting in my calendar",
    "public holidays in Germany", "current time in Tokyo", "fill in a PDF form", "edit an Excel spreadsheet",
    "香港天文台历史气候数据", "find an Airbnb for my trip", "search the web for recent news",
    "debug production errors in Sentry", "read files in a local folder",
]


def measure(resolver: Resolver, rounds: int, k: int, warmup: bool) -> dict:
    if warmup:
        for intent in INTENTS:
            resolver.resolve(intent, k=k)
    ms, queries, nbytes, packets, found = [], [], [], [], 0
    for _ in range(rounds):
        for intent in INTENTS:
            t0 = time.perf_counter()
            res = resolver.resolve(intent, k=k)
            ms.append((time.perf_counter() - t0) * 1000)
            queries.append(res.stats.queries)
            nbytes.append(res.stats.bytes_sent + res.stats.bytes_received)
            packets.append(res.stats.packets)
            found += bool(res.tools)
    return {"n": len(ms), "p50": statistics.median(ms), "p99": percentile(ms, 99), "queries": statistics.mean(queries),
            "bytes": statistics.mean(nbytes), "packets": statistics.mean(packets), "found": found / len(ms)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--zones", default=str(ROOT / "zones"))
    p.add_argument("--port", type=int, default=6354)
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--rounds", type=int, default=10)
    args = p.parse_args()
    print(f"{len(INTENTS)} intents x {args.rounds} rounds, K={args.k}, demo tree {args.zones}")
    print(f"{'set-up':44} {'n':>5} {'p50 ms':>7} {'p99 ms':>7} {'queries':>8} {'bytes':>7} {'packets':>8} {'found':>6}")
    for label, server_cache, client_cache in [("cold (client cache off, server packet cache on)", 4096, False),
                                              ("cold (client cache off, server packet cache off)", 0, False),
                                              ("warm (client cache on)", 4096, True)]:
        proc, root = start_servers(args.zones, args.port, server_cache)
        try:
            with Resolver(root=root, cache=client_cache, timeout=2.0) as r:
                m = measure(r, args.rounds, args.k, warmup=True)
        finally:
            stop_servers(proc)
        print(f"{label:44} {m['n']:5d} {m['p50']:7.2f} {m['p99']:7.2f} {m['queries']:8.1f} {m['bytes']:7.0f} "
              f"{m['packets']:8.1f} {m['found']:6.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
