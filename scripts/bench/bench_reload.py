#!/usr/bin/env python3
"""Whether reloading a zone frees what it replaces: memory after N reloads of one zone file.

Loads a :class:`tooldns.serving.store.ZoneStore` for one zone file (a generated zone of --tools
tools by default, or --zone FILE, say a leaf of a built ToolRet tree), then N times rewrites the
file (the SOA serial bumped, so that every reload is a real change) and calls
``ZoneStore.check()``, which reloads it. Prints the process's resident memory (VmRSS) and the
memory tracemalloc sees allocated, at the start, after 100 reloads and at the end; a server that
frees what each reload replaces stays flat::

    python scripts/bench/bench_reload.py                          # 500 generated tools, 1,000 reloads
    python scripts/bench/bench_reload.py --zone /tmp/built/customer-analysis.tools.yaml --reloads 300
    python scripts/bench/bench_reload.py --tools 500 --reloads 150 --no-tracemalloc   # RSS alone, faster

A reload of 500 tools takes about 0.2 s (0.8 s for 2,000), so the default run takes minutes.
tracemalloc slows allocation; its figure counts Python objects only, RSS everything. Figures
before and after the reload leak was fixed are in ``docs/security.md`` (Zone files).
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tooldns.serving.store import ZoneStore  # noqa: E402

WORDS = ("weather rain forecast history archive stock price quote map route geocode search paper "
         "repository issue email calendar payment invoice translate summarize").split()


def generated_zone(n_tools: int) -> str:
    """A leaf zone of *n_tools* tools with varied text (so that BM25 has a real vocabulary)."""
    lines = ["origin: bench.tools.", "ttl: 3600", "soa: {contact: hostmaster@bench.tools, serial: 1}",
             "nameservers: [{name: ns1.bench.tools., address: 127.0.0.1}]",
             "summary: {description: Generated tools for the reload benchmark}", "tools:"]
    for i in range(n_tools):
        words = " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(12))
        lines += [f"  - label: tool-{i}", f"    name: Tool {i} {WORDS[i % len(WORDS)]}", "    service: http",
                  "    target: api.example.com.", "    port: 443", f"    description: Tool {i} does {words} t{i}",
                  f"    endpoint: https://api.example.com/v1/tool/{i}",
                  "    parameters:", f"      - {{name: q, type: string, required: true, description: what {words}}}"]
    return "\n".join(lines) + "\n"


def rss_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        return int(next(line for line in fh if line.startswith("VmRSS:")).split()[1])


def report(what: str, reloads: int, started: float) -> None:
    gc.collect()
    current = tracemalloc.get_traced_memory()[0] / 2**20 if tracemalloc.is_tracing() else float("nan")
    print(f"{what:<12} reloads {reloads:>5}  RSS {rss_kib() / 1024:8.1f} MiB  tracemalloc current "
          f"{current:8.1f} MiB  ({time.monotonic() - started:5.1f} s)", flush=True)


def bump_serial(text: str, serial: int) -> str:
    new, n = re.subn(r"(serial:\s*)\d+", lambda m: f"{m.group(1)}{serial}", text, count=1)
    if not n:
        raise SystemExit("the zone file has no 'serial:' to bump")
    return new


def run(path: Path, reloads: int, trace: bool) -> None:
    text = path.read_text(encoding="utf-8")
    if trace:
        tracemalloc.start()
    started = time.monotonic()
    store = ZoneStore(path)
    store.check()
    report("start", 0, started)
    for i in range(1, reloads + 1):
        path.write_text(bump_serial(text, 1_000_000 + i), encoding="utf-8")
        # the stamp is (mtime_ns, size, inode): a same-size rewrite within the clock's tick looks unchanged
        os.utime(path, ns=(i * 1_000_000_000, i * 1_000_000_000))
        if store.check() != "reloaded":
            raise SystemExit(f"reload {i} did not happen: {store.last_error}")
        if i == 100 or i == reloads:
            report("after" if i == 100 else "end", i, started)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zone", type=Path, help="a zone file to reload (copied; the original is not touched)")
    ap.add_argument("--tools", type=int, default=500, help="tools of the generated zone (default 500)")
    ap.add_argument("--reloads", type=int, default=1000, help="reloads (default 1000)")
    ap.add_argument("--no-tracemalloc", action="store_true", help="measure RSS only (faster)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_reload_") as tmp:
        path = Path(tmp) / "zone.yaml"
        path.write_text(args.zone.read_text(encoding="utf-8") if args.zone else generated_zone(args.tools),
                        encoding="utf-8")
        print(f"{args.zone or f'generated zone of {args.tools} tools'}: {path.stat().st_size / 1024:.0f} KiB, "
              f"{args.reloads} reloads")
        run(path, args.reloads, not args.no_tracemalloc)


if __name__ == "__main__":
    main()
