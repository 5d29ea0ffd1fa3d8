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

With ``--rtt MS`` the live tree sits behind the network simulator of ``bench_network.py``
(:class:`tooldns.netsim.NetSim`, in a process of its own: that round trip, 10 % of it jitter): what
hedging costs an agent that far from the servers.

    python scripts/bench/bench_hedge.py --timeout 2
    python scripts/bench/bench_hedge.py --timeout 2 --rtt 50
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))  # benchlib
sys.path.insert(0, str(ROOT / "scripts" / "bench"))  # bench_resolve's intents

from bench_network import run_sim  # noqa: E402
from bench_resolve import INTENTS  # noqa: E402
from benchlib import percentile, start_servers, stop_servers  # noqa: E402
from resolver_client import Resolver  # noqa: E402
from tooldns.netsim import SilentServer  # noqa: E402
from tooldns.zone.zonefile import load_zone, zone_files  # noqa: E402


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
    p.add_argument("--rtt", type=float, default=0.0, help="put the live tree this many ms of round trip away")
    args = p.parse_args()
    proc, (address, port) = start_servers(args.zones, args.port)
    silent = SilentServer()
    sim = commands = None
    try:
        live = (address, port)
        if args.rtt > 0:  # every address the tree's glue names, behind the simulator, at its port
            addresses = sorted({ns.address for f in zone_files(args.zones) for ns in load_zone(f).nameservers})
            ctx = multiprocessing.get_context("spawn")
            commands, theirs = ctx.Pipe()
            sim = ctx.Process(target=run_sim, args=([(a, port) for a in addresses], theirs), daemon=True)
            sim.start()
            sim_port, _ = commands.recv()
            commands.send({"one_way": args.rtt * 0.9 / 2000, "jitter": args.rtt * 0.1 / 1000})
            commands.recv()
            live = (address, sim_port)
            print(f"the live tree {args.rtt:g} ms of round trip away (simulated)")
        both = [silent.address, live]
        run("a new resolver per resolution", lambda: Resolver(root=both, timeout=args.timeout, cache=False), INTENTS)
        run("one resolver for all", lambda: Resolver(root=both, timeout=args.timeout, cache=False), INTENTS)
        run("the live server alone", lambda: Resolver(root=[live], timeout=args.timeout, cache=False), INTENTS)
        print(f"the silent server read {silent.swallowed} datagrams; {len(INTENTS)} intents a line")
    finally:
        if sim is not None:
            commands.send(None)
            sim.join(10)
        silent.close()
        stop_servers(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
