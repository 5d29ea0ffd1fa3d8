#!/usr/bin/env python3
"""What serving a tree costs: ``tooldns serve`` start time and memory, then resolutions against it.

Starts ``tooldns serve ZONES`` in its own process (rate limiting off) and prints the seconds until
it answers (the "root zone on ..." line) and its resident memory (VmRSS), then resolves --count
queries of a queries file with the resolver library (client cache off, --k from the root, 5,3,2
unless told, --leaf-k tools asked of each leaf, the defaults of ``scripts/bench_retrieval.py``) and
prints the p50 and p99 milliseconds, DNS queries, bytes and TCP queries per resolution, the memory
after, and the hit rate@10 when the queries name their correct tools (``correct_tools``).
--settle waits before resolving, so that a large tree's parents finish their first polls of their
children's serials (docs/summaries.md) before the clock runs. --serve-args passes more arguments
to ``tooldns serve`` (a tree served lazily, docs/performance.md); --passes resolves that many
batches of --count different queries (--same: the same ones), each with its figures (the first
batch of a lazy tree loads the zones it reaches)::

    python scripts/bench_serve.py /tmp/b100k --queries /tmp/synth100k.queries.json --settle 25
    python scripts/bench_serve.py built-en --queries ../shared/data/toolret/queries.dev.en.json
    python scripts/bench_serve.py /tmp/b1m --queries /tmp/synth1m.queries.json \
        --serve-args "--lazy --listen 127.0.0.1 --max-loaded 20000 --answer-cache 0" --passes 2 --same
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from resolver_client import Resolver  # noqa: E402


def rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        return int(next(line for line in fh if line.startswith("VmRSS:")).split()[1]) // 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("zones")
    ap.add_argument("--queries", required=True, help="queries JSON: [{query: ...}, ...]")
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--port", type=int, default=5390)
    ap.add_argument("--leaf-k", type=int, default=6)
    ap.add_argument("--k", default="5,3,2", help="K at each step from the root (default 5,3,2)")
    ap.add_argument("--settle", type=float, default=0.0, help="seconds to wait after start before resolving")
    ap.add_argument("--serve-args", default="", help="more arguments for tooldns serve, in one string")
    ap.add_argument("--passes", type=int, default=1, help="batches of --count different queries (default 1)")
    ap.add_argument("--same", action="store_true", help="every pass resolves the same queries (zones loaded by the "
                                                        "first; with --answer-cache 0, intents new to the scorer)")
    args = ap.parse_args()
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "tooldns.cli", "serve", args.zones, "--port", str(args.port),
                             "--no-rate-limit", *shlex.split(args.serve_args)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        root = None
        for line in proc.stdout:
            match = re.search(r"root zone on (\S+):(\d+);", line)
            if match:
                root = (match.group(1), int(match.group(2)))
                break
        if root is None:
            raise SystemExit("tooldns serve did not start")
        print(f"serving after {time.monotonic() - t0:.1f} s, RSS {rss_mib(proc.pid)} MiB", flush=True)
        time.sleep(args.settle)
        every = json.load(open(args.queries, encoding="utf-8"))
        k = tuple(int(x) for x in args.k.split(","))
        for n in range(args.passes):
            batch = every[:args.count] if args.same else every[n * args.count:(n + 1) * args.count]
            ms, queries, size, tcp, hits = [], [], [], [], []
            with Resolver(root=root, cache=False, timeout=5) as resolver:
                for q in batch:
                    res = resolver.resolve(q["query"], k=k, leaf_k=args.leaf_k, top=10)
                    correct = {str(c["id"]) for c in q.get("correct_tools", [])}
                    if correct:
                        hits.append(bool(correct & {t.id for t in res.tools}))
                    ms.append(res.stats.ms)
                    queries.append(res.stats.queries)
                    size.append(res.stats.bytes_sent + res.stats.bytes_received)
                    tcp.append(sum(1 for hop in res.trace if hop.transport == "tcp"))
            ms.sort()
            hit_rate = f"; hit rate@10 {sum(hits) / len(hits):.3f} over {len(hits)}" if hits else ""
            print(f"{'' if args.passes == 1 else f'pass {n + 1}: '}{len(batch)} resolutions: p50 "
                  f"{statistics.median(ms):.1f} ms, p99 {ms[int(len(ms) * 0.99)]:.1f} ms; per resolution "
                  f"{statistics.mean(queries):.2f} DNS queries, {statistics.mean(size):.0f} bytes, "
                  f"{statistics.mean(tcp):.2f} over TCP; RSS {rss_mib(proc.pid)} MiB after{hit_rate}", flush=True)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
