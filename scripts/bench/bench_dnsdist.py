#!/usr/bin/env python3
"""Throughput through dnsdist (``deploy/dnsdist.conf``) against the tooldns server behind it, with dnsperf.

Starts ``tooldns serve ZONES --listen BACKEND`` (rate limiting off; ``--workers N`` passed on) and
dnsdist in front of it with the shipped configuration (its settings replaced: loopback addresses,
this backend, no UDP rate limit), then runs dnsperf for --seconds at full speed, asking the root
zone's cursor ``_any._tcp._tools.`` SRV:

1. one popular intent (``-E 65301:HEX``, as ``scripts/bench/bench_server.py`` passes it): from dnsdist's
   packet cache after the first query; directly, from the tooldns server's own packet cache;
2. a new intent every query (numbered), sent as whole messages (``-B``): every query misses every
   cache; through dnsdist it crosses both stages and reaches the backend.

Both directly against the backend and through dnsdist, in one run.

    python scripts/bench/bench_dnsdist.py                  # 5 s a row
    python scripts/bench/bench_dnsdist.py --workers 2 --seconds 10
"""

from __future__ import annotations

import argparse
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dns.edns
import dns.message
import dns.query

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))  # benchlib

from benchlib import start_servers, stop_servers  # noqa: E402
from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent  # noqa: E402

QNAME = "_any._tcp._tools."


def configure(public: str, internal: str, backend: str) -> str:
    text = (ROOT / "deploy" / "dnsdist.conf").read_text(encoding="utf-8")
    for pattern, value in [(r'local public = "[^"]*"', f'local public = "{public}"'),
                           (r'local internal = "[^"]*"', f'local internal = "{internal}"'),
                           (r"local backends = \{[^}]*\}", f'local backends = {{"{backend}"}}'),
                           (r"local udp_queries_per_second = \d+", "local udp_queries_per_second = 0")]:
        text = re.sub(pattern, value, text)
    return text


def dnsperf(address: str, port: int, args: list[str], seconds: float) -> tuple[float, int]:
    out = subprocess.run(["dnsperf", "-s", address, "-p", str(port), "-l", str(seconds), "-q", "64", "-t", "2", *args],
                         capture_output=True, text=True, timeout=seconds + 120)
    if out.returncode != 0:
        raise SystemExit(f"dnsperf failed: {out.stderr or out.stdout}")
    qps = float(re.search(r"Queries per second:\s+([\d.]+)", out.stdout).group(1))
    return qps, int(re.search(r"Queries lost:\s+(\d+)", out.stdout).group(1))


def distinct_file(directory: str, count: int, intent: str) -> str:
    """*count* queries with a new intent each, in dnsperf's binary format (``-B``)."""
    wires = []
    for n in range(count):
        option = dns.edns.GenericOption(INTENT_OPTION_CODE, encode_intent(f"{intent} {n}", 3))
        msg = dns.message.make_query(QNAME, "SRV", use_edns=0, payload=1232, options=[option], flags=0)
        msg.id = 0
        wire = msg.to_wire()
        wires.append(struct.pack("!H", len(wire)) + wire)
    path = Path(directory) / "distinct.bin"
    path.write_bytes(b"".join(wires))
    return str(path)


def wait_for(address: str, port: int, seconds: float = 30.0) -> None:
    """Until dnsdist answers (its health check has found the backend up)."""
    query = dns.message.make_query("tools.", "SOA", flags=0)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if dns.query.udp(query, address, port=port, timeout=0.5).answer:
                return
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.2)
    raise SystemExit("dnsdist did not answer")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--zones", default=str(ROOT / "zones"))
    p.add_argument("--intent", default="historical weather Hong Kong")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--workers", type=int, default=1, help="tooldns serve --workers (default 1)")
    p.add_argument("--subnet", default="127.0.77", help="three loopback addresses .1 (dnsdist), .2 (tooldns), .4")
    p.add_argument("--port", type=int, default=5453, help="ports PORT (dnsdist), PORT+1 (tooldns), PORT+2")
    args = p.parse_args()
    for tool in ("dnsperf", "dnsdist"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed: apt-get install {tool}")

    public, backend, internal = (f"{args.subnet}.1", args.port), (f"{args.subnet}.2", args.port + 1), \
        (f"{args.subnet}.4", args.port + 2)
    proc, _ = start_servers(args.zones, backend[1], extra=["--listen", backend[0], "--workers", str(args.workers)])
    with tempfile.TemporaryDirectory(prefix="tooldns-dnsdist-") as tmp:
        conf = Path(tmp) / "dnsdist.conf"
        conf.write_text(configure(f"{public[0]}:{public[1]}", f"{internal[0]}:{internal[1]}",
                                  f"{backend[0]}:{backend[1]}"), encoding="utf-8")
        dd = subprocess.Popen(["dnsdist", "--supervised", "--disable-syslog", "-C", str(conf)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for(*public)
            (Path(tmp) / "fixed.txt").write_text(f"{QNAME} SRV\n")
            fixed = ["-d", str(Path(tmp) / "fixed.txt"), "-E", f"{INTENT_OPTION_CODE}:{encode_intent(args.intent, 3).hex()}"]
            distinct = ["-B", "-d", distinct_file(tmp, max(50_000, int(args.seconds * 30_000)), args.intent)]
            print(f"{QNAME} SRV, K=3, {args.seconds:g} s a row, dnsperf -q 64; tooldns --workers {args.workers}; "
                  f"the one intent: {args.intent!r}")
            print(f"{'queries':28} {'direct q/s':>12} {'lost':>6} {'via dnsdist q/s':>16} {'lost':>6}")
            for label, flags in [("one intent", fixed), ("a new intent every query", distinct)]:
                straight, via = dnsperf(*backend, flags, args.seconds), dnsperf(*public, flags, args.seconds)
                print(f"{label[:28]:28} {straight[0]:12,.0f} {straight[1]:6d} {via[0]:16,.0f} {via[1]:6d}", flush=True)
        finally:
            dd.terminate()
            dd.wait(15)
            stop_servers(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
