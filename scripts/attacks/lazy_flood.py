#!/usr/bin/env python3
"""Attack: a flood of queries for zones not loaded, on a lazy server. Good queries at the root of a
tree served with ``--lazy``, idle and while an attacker asks about a new zone at every query.

Writes a tree of ``--zones`` leaves of ``--leaf-tools`` tools each under one root (``tools.``), serves
it with ``tooldns serve --lazy --max-loaded 50``, and measures good queries at the root (always
loaded), idle, then while the attacker sends ``--attack-rate`` queries a second, each about a leaf
not asked about recently (so each needs a load: 25-40 ms of reading and indexing). Before loads left
the event loop, every good query waited behind them; now they wait in a bounded queue
(``--max-loading``, ``--load-queue``) and only the attacker's own queries wait::

    python scripts/attacks/lazy_flood.py --attack-rate 60 --seconds 20
"""

from __future__ import annotations

import argparse
import random
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loopattack import (attack_arguments, delegation_yaml, fresh_zonedir, good_stream, intent_query, loadavg, phase, start_servers,  # noqa: E402
                        stop_servers, tool_yaml, zone_yaml)


def write_tree(zonedir: Path, zones: int, leaf_tools: int) -> list[str]:
    rng = random.Random(0)
    fresh_zonedir(zonedir)
    labels = [f"z{i:05d}" for i in range(zones)]
    (zonedir / "tools.yaml").write_text(zone_yaml("tools.", "127.0.0.1", children="".join(
        delegation_yaml(label, "tools.", "127.0.0.1", rng, pinned=True) for label in labels)))
    for label in labels:
        tools = "".join(tool_yaml(f"{label}-t{j}", rng, 30) for j in range(leaf_tools))
        (zonedir / f"{label}.tools.yaml").write_text(zone_yaml(f"{label}.tools.", "127.0.0.1", tools=tools))
    return [f"{label}.tools." for label in labels]


def flood(address: str, port: int, origins: list[str], rate: float, stop: threading.Event, sent: list) -> None:
    """Ask about each zone of *origins* in turn, *rate* a second, replies unread."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    start, i = time.perf_counter(), 0
    while not stop.is_set():
        wait = start + i / rate - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        sock.sendto(intent_query(i % 65536, origins[i % len(origins)], "anything at all"), (address, port))
        i += 1
    sent.append(i)
    sock.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--zones", type=int, default=1000, help="leaves under the root (at most 1,000)")
    p.add_argument("--leaf-tools", type=int, default=60)
    attack_arguments(p, seconds=20.0, rate=30.0, port=5392, name="lazy-flood")
    p.add_argument("--attack-rate", type=float, default=60.0, help="queries about zones not loaded a second")
    p.add_argument("--extra", default="", help="more tooldns serve arguments, e.g. '--max-loading 2'")
    p.add_argument("--verbose", action="store_true", help="print the server's last log lines")
    args = p.parse_args()
    origins = write_tree(Path(args.dir), args.zones, args.leaf_tools)
    proc, (address, port) = start_servers(args.dir, args.port, extra=["--lazy", "--listen", "127.0.0.1",
                                                                      "--max-loaded", "50", *args.extra.split()])
    try:
        idle = good_stream(address, port, args.seconds, args.rate, seed=1)
        print(phase("idle", *idle, loadavg()), flush=True)
        stop, sent = threading.Event(), []
        attacker = threading.Thread(target=flood, args=(address, port, origins, args.attack_rate, stop, sent))
        attacker.start()
        loud = good_stream(address, port, args.seconds, args.rate, seed=2)
        stop.set()
        attacker.join()
        print(phase("under attack", *loud, loadavg()), flush=True)
        print(f"attacker: {sent[0]} queries about {min(sent[0], len(origins))} zones not loaded, "
              f"{args.attack_rate:g} a second; --max-loaded 50 {args.extra}")
        if args.verbose:
            print("".join(proc.log_tail))
    finally:
        stop_servers(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
