#!/usr/bin/env python3
"""Attack: a big reload. Good queries at the root of a tree, idle and while one leaf's zone file is
rewritten with a large zone: ``--kind leaf`` a valid leaf of ``--tools`` tools (10,000: about 8 MB),
``--kind refused`` a file of about ``--megabytes`` MB that is read and parsed and then refused (one
tool more than ``ZoneLimits.max_tools`` allows).

The leaf's file is rewritten ``--writes`` times during the phase (each with a new serial, so each is
a reload). Before reloads left the event loop, each one stalled every zone of the process for the
seconds it took to read, check and index the file::

    python scripts/attacks/big_reload.py --kind leaf --seconds 15
    python scripts/attacks/big_reload.py --kind refused --seconds 15
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loopattack import (attack_arguments, fresh_zonedir, good_stream, loadavg, phase,  # noqa: E402
                        root_with_children, start_servers, stop_servers, tool_yaml, zone_yaml)


def big_zone(origin: str, tools: int, description_words: int, serial: int) -> str:
    rng = random.Random(serial)
    return zone_yaml(origin, "127.0.0.1", serial=serial, tools="".join(
        tool_yaml(f"t{j:06d}", rng, description_words) for j in range(tools)))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kind", choices=["leaf", "refused"], default="leaf")
    p.add_argument("--tools", type=int, default=10_000, help="tools of the valid leaf")
    p.add_argument("--megabytes", type=float, default=60.0, help="size of the refused file")
    p.add_argument("--writes", type=int, default=3, help="rewrites of the file during the attack")
    p.add_argument("--children", type=int, default=20)
    attack_arguments(p, seconds=15.0, rate=50.0, port=5394, name="big-reload")
    args = p.parse_args()
    zonedir = fresh_zonedir(args.dir)
    origins = root_with_children(zonedir, args.children, "127.0.0.1", "127.0.0.1")
    victim = zonedir / f"{origins[0].rstrip('.')}.yaml"
    if args.kind == "leaf":
        texts = [big_zone(origins[0], args.tools, 80, 10 + i) for i in range(args.writes)]
    else:  # one tool more than allowed, each description long enough to make the file its size
        per_tool = int(args.megabytes * 2**20 / 10_001)
        texts = [big_zone(origins[0], 10_001, max(10, per_tool // 7), 10 + i) for i in range(args.writes)]
    print(f"{args.kind}: {len(texts[0]) / 2**20:.1f} MB written {args.writes} times", flush=True)
    proc, (address, port) = start_servers(args.dir, args.port)
    try:
        idle = good_stream(address, port, args.seconds, args.rate, seed=1)
        print(phase("idle", *idle, loadavg()), flush=True)

        def rewrite():
            for i, text in enumerate(texts):
                tmp = victim.with_suffix(".tmp")
                tmp.write_text(text)
                tmp.replace(victim)
                time.sleep(args.seconds / (args.writes + 1))

        writer = threading.Thread(target=rewrite)
        writer.start()
        loud = good_stream(address, port, args.seconds, args.rate, seed=2)
        writer.join()
        print(phase(f"{args.kind} reloads", *loud, loadavg()), flush=True)
    finally:
        stop_servers(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
