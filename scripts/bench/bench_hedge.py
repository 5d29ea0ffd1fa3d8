#!/usr/bin/env python3
"""What a silent name server costs a resolution: the root's first server answers nothing.

Serves the shipped tree with ``tooldns serve zones/`` in its own process, binds a UDP socket that reads
every query and answers none (a host gone, a firewall dropping), and gives the resolver both as the
root's servers, the silent one first. Resolves the intents of ``bench_resolve.py`` (client cache off)
and prints p50 and p99 milliseconds, hedges and timeouts per resolution, for:

* a new resolver per resolution: every one meets the silent server first and waits for its
  retransmission timeout (400 ms for a server never heard from, resolver_client/rtt.py) before the
  zone's other server is asked as well (hedging);
* one resolver for all: the first resolution hedges, the silent server then counts as far and the
  others ask the live one first;
* for comparison, a resolver given only the live server.

    python scripts/bench/bench_hedge.py --timeout 2
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
sys.path.insert(0, str(ROOT / "scripts" / "bench"))  # bench_resolve's intents

from bench_resolve import INTENTS  # noqa: E402
from benchlib import percentile, start_servers, stop_servers  # noqa: E402
from resolver_client import Resolver  # noqa: E402
from tooldns.netsim import SilentServer  # noqa: E402


def run(name: str, make, intents: list[str]) -> None:
    ms, hedges, timeouts, found = [], [], [], 0
    shared = make() if name == "one resolver for all" else None
    for intent in intents:
        resolver = shared or make()
        t0 = time.perf_counter()
        res = resolver.resolve(intent)
        ms.append((time.perf_counter() - t0) * 1000)
        hedges.append(res.stats.hedges)
        timeouts.append(res.stats.timeouts)
        found += bool(res.tools)
        if shared is None:
            resolver.close()
    if shared is not None:
        shared.close()
    print(f"{name:32s} p50 {statistics.median(ms):7.1f} ms  p99 {percentile(ms, 99):7.1f} ms  "
          f"hedges {statistics.mean(hedges):.2f}  timeouts {statistics.mean(timeouts):.2f}  "
          f"found {found}/{len(intents)}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--zones", default=str(ROOT / "zones"))
    p.add_argument("--port", type=int, default=5386)
    p.add_argument("--timeout", type=float, default=2.0, help="the resolver's timeout a query (seconds)")
    args = p.parse_args()
    proc, (address, port) = start_servers(args.zones, args.port)
    silent = SilentServer()
    try:
        live = (address, port)
        both = [silent.address, live]
        run("a new resolver per resolution", lambda: Resolver(root=both, timeout=args.timeout, cache=False), INTENTS)
        run("one resolver for all", lambda: Resolver(root=both, timeout=args.timeout, cache=False), INTENTS)
        run("the live server alone", lambda: Resolver(root=[live], timeout=args.timeout, cache=False), INTENTS)
        print(f"the silent server read {silent.swallowed} datagrams; {len(INTENTS)} intents a line")
    finally:
        silent.close()
        stop_servers(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
