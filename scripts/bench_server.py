#!/usr/bin/env python3
"""Server throughput and latency under dnsperf, with the intent option on every query.

Starts ``tooldns serve ZONES`` in its own process (one server process, all zones), then runs
dnsperf (Debian package ``dnsperf``) against one zone's address:

1. at full speed for --seconds: queries per second;
2. at a fixed 1,000 queries per second: latency percentiles from dnsperf's per-query report;

once with the server's packet cache on (the default: repeated identical queries are answered
from packed bytes), once with it off (``--answer-cache 0``: every query parsed, scored and
packed) and, when the zone scores vectors (a tree built with ``tooldns build --embed``), once
more uncached with the intent's vector option (65303) too, as a resolver with an embedder sends
it. Every query is the one message the resolver library sends (RD=0, its OPT record), given to
dnsperf in its binary input format (``-B``: dnsperf's ``-E`` carries a single option), so every
query carries the same intent; the uncached runs are what distinct intents cost. Each row also
gives the server's time per reply (a referral at an inner zone) in microseconds, 1e6 / q/s at
full speed, with and without the vector.

The vector is the intent's embedding with the zone's model: all-MiniLM-L6-v2 (``minilm``) or
the hashing embedder (``hash:DIM``); for another model, a hashing vector of its size under its
name stands in (the server's work does not depend on the values).

    python scripts/bench_server.py                 # root zone, intent "historical weather Hong Kong"
    python scripts/bench_server.py --zone history.weather.tools. --seconds 10
    tooldns build services.en.json --embed minilm --out /tmp/hybrid
    python scripts/bench_server.py --zones /tmp/hybrid   # adds the row "uncached, with vector"
"""

from __future__ import annotations

import argparse
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import dns.edns
import dns.rcode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchlib import percentile, start_servers, stop_servers  # noqa: E402
from resolver_client.message import make_query, opt_record, parse_reply  # noqa: E402
from tooldns.embedding.registry import make_embedder  # noqa: E402
from tooldns.exceptions import EmbeddingError  # noqa: E402
from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent  # noqa: E402
from tooldns.protocol.meta import META_OPTION_CODE, decode_meta  # noqa: E402
from tooldns.protocol.names import Cursor  # noqa: E402
from tooldns.protocol.vector import VECTOR_OPTION_CODE, encode_vector  # noqa: E402
from tooldns.serving.index import ZoneIndex  # noqa: E402
from tooldns.serving.tree import load_tree  # noqa: E402

MINILM = "all-MiniLM-L6-v2"


def dnsperf(args: list[str]) -> str:
    out = subprocess.run(["dnsperf", *args], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"dnsperf failed: {out.stderr or out.stdout}")
    return out.stdout


def query_file(qname: str, options: list[dns.edns.Option], directory: str, name: str) -> tuple[str, bytes]:
    """The resolver's query for *qname* with *options*, as dnsperf's binary input (``-B``: length, message)."""
    wire = make_query(qname, opt_record(options))
    path = str(Path(directory) / name)
    Path(path).write_bytes(struct.pack("!H", len(wire)) + wire)
    return path, wire


def probe(address: str, port: int, wire: bytes) -> str:
    """One query by hand before the run: the reply's rcode and what its meta option says of the scorer."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(10)
        sock.sendto(wire, (address, port))
        reply = parse_reply(sock.recv(65535))
    rcode = dns.rcode.to_text(reply.rcode)
    meta = next((decode_meta(o.to_wire()) for o in reply.options if o.otype == META_OPTION_CODE), None)
    if meta is None:
        return f"{rcode}, no meta option"
    return f"{rcode}, scorer {meta.scorer}" + (", vector ignored" if meta.vector_ignored else "")


def run(zones: str, address: str, port: int, datafile: str, wire: bytes, seconds: float, cache: int) -> dict:
    proc, _ = start_servers(zones, port, cache)
    try:
        checked = probe(address, port, wire)
        full = dnsperf(["-s", address, "-p", str(port), "-d", datafile, "-B", "-l", str(seconds), "-q", "64",
                        "-t", "2"])
        qps = float(re.search(r"Queries per second:\s+([\d.]+)", full).group(1))
        lost = re.search(r"Queries lost:\s+(\d+)", full).group(1)
        paced = dnsperf(["-s", address, "-p", str(port), "-d", datafile, "-B", "-l", str(seconds), "-Q", "1000",
                         "-t", "2", "-v"])
        lat = [float(m.group(1)) * 1000 for m in re.finditer(r"^> \w+ .* ([\d.]+)$", paced, re.M)]
        rcodes = set(re.findall(r"^> (\w+) ", paced, re.M))
    finally:
        stop_servers(proc)
    return {"cache": cache, "qps": qps, "us": 1e6 / qps if qps else 0.0, "lost": int(lost), "n": len(lat),
            "rcodes": sorted(rcodes), "p50_ms": statistics.median(lat), "p90_ms": percentile(lat, 90),
            "p99_ms": percentile(lat, 99), "max_ms": max(lat), "checked": checked}


def intent_vector(index: ZoneIndex, intent: str) -> tuple[bytes | None, str]:
    """The vector option data for *intent* in the zone's model, and how it was made; None when the zone has
    no vectors."""
    model = index.model
    if model is None:
        return None, "the zone has no vectors (build a tree with tooldns build --embed to measure them)"
    try:
        if model == MINILM:
            embedder, how = make_embedder("minilm"), "minilm"
        else:
            dim = next(getattr(s, "dim", 0) for s in index.scorers() if s.model == model)
            embedder, how = make_embedder(f"hash:{dim}"), f"hash:{dim}"
            if embedder.model != model:  # a stand-in of the right size: the server's work is the same
                embedder.model, how = model, f"hash:{dim} standing in for {model}"
    except EmbeddingError as exc:
        raise SystemExit(f"cannot embed the intent for the zone's model {model}: {exc}") from exc
    return encode_vector(embedder.model, embedder.embed_one(intent)), how


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
    intent = dns.edns.GenericOption(INTENT_OPTION_CODE, encode_intent(args.intent, args.k))
    vector, how = intent_vector(stores[args.zone].index, args.intent)
    print(f"zone {args.zone} on {address}:{args.port}, query {qname} SRV, intent {args.intent!r}, K={args.k}")
    print(f"vector: {how}" + (f", {len(vector)} bytes" if vector else "; no row with a vector"))
    with tempfile.TemporaryDirectory(prefix="tooldns-perf-") as tmp:
        plain = query_file(qname, [intent], tmp, "intent.bin")
        cases = [("cached", plain, 4096), ("uncached", plain, 0)]
        if vector:
            with_vector = query_file(qname, [intent, dns.edns.GenericOption(VECTOR_OPTION_CODE, vector)], tmp,
                                     "vector.bin")
            cases.append(("uncached, with vector", with_vector, 0))
        rows = [(label, run(args.zones, address, args.port, datafile, wire, args.seconds, cache))
                for label, (datafile, wire), cache in cases]
    print_rows(rows)
    return 0


def print_rows(rows: list[tuple[str, dict]]) -> None:
    print(f"{'':21} {'q/s':>9} {'us/reply':>8} {'lost':>5}   at 1000 q/s: {'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7} "
          f"{'max ms':>7}  rcodes")
    for label, r in rows:
        print(f"{label:21} {r['qps']:9.0f} {r['us']:8.1f} {r['lost']:5d}   {'':12}{r['p50_ms']:7.3f} "
              f"{r['p90_ms']:7.3f} {r['p99_ms']:7.3f} {r['max_ms']:7.3f}  {','.join(r['rcodes'])}  ({r['checked']})")
    by_label = dict(rows)
    if "uncached, with vector" in by_label:
        plain, vector = by_label["uncached"]["us"], by_label["uncached, with vector"]["us"]
        print(f"time per reply at full speed, uncached: {plain:.1f} us without the vector, {vector:.1f} us with it "
              f"({vector - plain:+.1f} us)")


if __name__ == "__main__":
    sys.exit(main())
