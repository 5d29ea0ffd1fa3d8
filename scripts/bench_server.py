#!/usr/bin/env python3
"""Server throughput and latency under dnsperf, with the intent option on every query.

Starts ``tooldns serve ZONES`` in its own process (one server process, all zones), then runs
dnsperf (Debian package ``dnsperf``) against one zone's address:

1. at full speed for --seconds: queries per second;
2. at a fixed 1,000 queries per second: latency percentiles from dnsperf's per-query report;

once with the server's packet cache on (the default: repeated identical queries are answered
from packed bytes) and once with it off (``--answer-cache 0``: every query parsed, scored and
packed). dnsperf sends one fixed EDNS option (``-E CODE:HEX``), so every query carries the same
intent; the uncached run is what distinct intents cost.

    python scripts/bench_server.py                 # root zone, intent "historical weather Hong Kong"
    python scripts/bench_server.py --zone history.weather.tools. --seconds 10
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchlib import percentile, start_servers, stop_servers  # noqa: E402
from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent  # noqa: E402
from tooldns.protocol.names import Cursor  # noqa: E402
from tooldns.serving.tree import load_tree  # noqa: E402


def dnsperf(args: list[str]) -> str:
    out = subprocess.run(["dnsperf", *args], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"dnsperf failed: {out.stderr or out.stdout}")
    return out.stdout


def run(zones: str, zone: str, address: str, port: int, option: str, datafile: str, seconds: float,
        cache: int) -> dict:
    proc, _ = start_servers(zones, port, cache)
    try:
        full = dnsperf(["-s", address, "-p", str(port), "-d", datafile, "-l", str(seconds), "-q", "64",
                        "-E", option, "-t", "2"])
        qps = float(re.search(r"Queries per second:\s+([\d.]+)", full).group(1))
        lost = re.search(r"Queries lost:\s+(\d+)", full).group(1)
        paced = dnsperf(["-s", address, "-p", str(port), "-d", datafile, "-l", str(seconds), "-Q", "1000",
                         "-E", option, "-t", "2", "-v"])
        lat = [float(m.group(1)) * 1000 for m in re.finditer(r"^> \w+ .* ([\d.]+)$", paced, re.M)]
        rcodes = set(re.findall(r"^> (\w+) ", paced, re.M))
    finally:
        stop_servers(proc)
    return {"cache": cache, "qps": qps, "lost": int(lost), "n": len(lat), "rcodes": sorted(rcodes),
            "p50_ms": statistics.median(lat), "p90_ms": percentile(lat, 90), "p99_ms": percentile(lat, 99),
            "max_ms": max(lat)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--zones", default=str(ROOT / "zones"))
    p.add_argument("--zone", default="tools.", help="zone whose server is measured (default tools.)")
    p.add_argument("--intent", default="historical weather Hong Kong")
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--service", default="any")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--port", type=int, default=5353 + 1000)
    args = p.parse_args()
    if shutil.which("dnsperf") is None:
        raise SystemExit("dnsperf is not installed: apt-get install dnsperf")
    stores = {s.index.origin: s for s in load_tree(args.zones)}
    if args.zone not in stores:
        raise SystemExit(f"no zone {args.zone} in {args.zones}")
    address = stores[args.zone].zone.nameservers[0].address
    qname = Cursor(args.service, "tcp", args.zone).to_text()
    option = f"{INTENT_OPTION_CODE}:{encode_intent(args.intent, args.k).hex()}"
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
        fh.write(f"{qname} SRV\n")
        datafile = fh.name
    try:
        print(f"zone {args.zone} on {address}:{args.port}, query {qname} SRV, intent {args.intent!r}, K={args.k}")
        print(f"{'packet cache':>12} {'q/s':>9} {'lost':>5}   at 1000 q/s: {'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7} {'max ms':>7}  rcodes")
        rows = [run(args.zones, args.zone, address, args.port, option, datafile, args.seconds, c) for c in (4096, 0)]
        for r in rows:
            print(f"{'on' if r['cache'] else 'off':>12} {r['qps']:9.0f} {r['lost']:5d}   {'':12}{r['p50_ms']:7.3f} "
                  f"{r['p90_ms']:7.3f} {r['p99_ms']:7.3f} {r['max_ms']:7.3f}  {','.join(r['rcodes'])}")
    finally:
        os.unlink(datafile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
