#!/usr/bin/env python3
"""Server throughput and latency under dnsperf: a repeated intent against intents never seen before.

Starts ``tooldns serve ZONES`` in its own process (one server process, all zones, packet cache on,
rate limiting off), then runs dnsperf (Debian package ``dnsperf``) against one zone's address, in
the same run against the same process:

1. **fixed intent**: every query the same message, so every reply after the first comes from the
   server's packet cache (a popular intent);
2. **distinct intents**: every query a different intent (ToolRet's dev queries, numbered once the
   list is used up; ``--intents``), so every query is parsed, scored and packed: what free-text
   intents cost;
3. when the zone scores vectors (a tree built with ``tooldns build --embed``), distinct intents
   with the intent's vector option (65303) too, as a resolver with an embedder sends them;

each at full speed for --seconds (queries per second) and at a fixed 1,000 queries per second
(latency percentiles from dnsperf's per-query report). The queries are the messages the resolver
library sends (RD=0, its OPT record), given to dnsperf in its binary input format (``-B``: one
whole message per record, so each may carry its own intent option, which ``-E`` cannot). Both
rates come from the same generator against the same process; the last line gives their ratio.
Each row also gives the server's time per reply, 1e6 / q/s at full speed.

The vector is the first intent's embedding with the zone's model: all-MiniLM-L6-v2 (``minilm``)
or the hashing embedder (``hash:DIM``); for another model, a hashing vector of its size under its
name stands in (the server's work does not depend on the values).

    python scripts/bench_server.py                 # root zone, fixed intent "historical weather Hong Kong"
    python scripts/bench_server.py --zone history.weather.tools. --seconds 10
    tooldns build services.en.json --embed minilm --out /tmp/hybrid
    python scripts/bench_server.py --zones /tmp/hybrid   # adds the row "distinct, with vector"
"""

from __future__ import annotations

import argparse
import json
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
#: where the distinct intents come from by default (the "query" field of each entry)
TOOLRET_QUERIES = ROOT.parent / "shared" / "data" / "toolret" / "queries.dev.en.json"


def dnsperf(args: list[str]) -> str:
    out = subprocess.run(["dnsperf", *args], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"dnsperf failed: {out.stderr or out.stdout}")
    return out.stdout


def query_file(wires: list[bytes], directory: str, name: str) -> str:
    """Messages *wires* as dnsperf's binary input (``-B``: two-byte length, then the message, per query)."""
    path = Path(directory) / name
    path.write_bytes(b"".join(struct.pack("!H", len(w)) + w for w in wires))
    return str(path)


def intent_texts(source: Path | None, count: int, fallback: str) -> list[str]:
    """*count* distinct intents: the queries of *source* (a JSON list of {"query": ...}), then the same
    again numbered (" 1", " 2" ...) until there are enough; *fallback* numbered when there is no source."""
    base: list[str] = []
    if source is not None and source.exists():
        base = [q["query"] for q in json.loads(source.read_text(encoding="utf-8")) if q.get("query")]
        base = [t for t in base if len(t.encode("utf-8")) <= 700]  # one datagram, as the resolver would send
    base = list(dict.fromkeys(base)) or [fallback]
    texts = [t if i < len(base) else f"{t} {i // len(base)}" for i in range(count) for t in [base[i % len(base)]]]
    return list(dict.fromkeys(texts))


def queries(qname: str, texts: list[str], k: int, vector: bytes | None) -> list[bytes]:
    """The resolver's query for *qname* with each intent of *texts* (and the *vector* option)."""
    extra = [dns.edns.GenericOption(VECTOR_OPTION_CODE, vector)] if vector else []
    return [make_query(qname, opt_record([dns.edns.GenericOption(INTENT_OPTION_CODE, encode_intent(t, k)), *extra]),
                       msg_id=0) for t in texts]


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


def measure(address: str, port: int, full_file: str, paced_file: str, messages: int, seconds: float) -> dict:
    """dnsperf at full speed over *full_file* (*messages* queries in it), then at 1,000 q/s over *paced_file*."""
    full = dnsperf(["-s", address, "-p", str(port), "-d", full_file, "-B", "-l", str(seconds), "-q", "64",
                    "-t", "2"])
    qps = float(re.search(r"Queries per second:\s+([\d.]+)", full).group(1))
    lost = int(re.search(r"Queries lost:\s+(\d+)", full).group(1))
    sent = int(re.search(r"Queries sent:\s+(\d+)", full).group(1))
    paced = dnsperf(["-s", address, "-p", str(port), "-d", paced_file, "-B", "-l", str(seconds), "-Q", "1000",
                     "-t", "2", "-v"])
    lat = [float(m.group(1)) * 1000 for m in re.finditer(r"^> \w+ .* ([\d.]+)$", paced, re.M)]
    rcodes = set(re.findall(r"^> (\w+) ", paced, re.M))
    return {"qps": qps, "us": 1e6 / qps if qps else 0.0, "lost": lost, "laps": sent / messages, "n": len(lat),
            "rcodes": sorted(rcodes), "p50_ms": statistics.median(lat), "p90_ms": percentile(lat, 90),
            "p99_ms": percentile(lat, 99), "max_ms": max(lat)}


def run(zones: str, address: str, port: int, cases: list[tuple[str, list[bytes], list[bytes]]],
        seconds: float) -> list[tuple[str, dict]]:
    """Every case, (label, messages at full speed, messages at 1,000 q/s), against one server process."""
    proc, _ = start_servers(zones, port)
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="tooldns-perf-") as tmp:
            for n, (label, full, paced) in enumerate(cases):
                checked = probe(address, port, paced[-1])
                figures = measure(address, port, query_file(full, tmp, f"full{n}.bin"),
                                  query_file(paced, tmp, f"paced{n}.bin"), len(full), seconds)
                rows.append((label, {**figures, "checked": checked}))
    finally:
        stop_servers(proc)
    return rows


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
    p.add_argument("--intent", default="historical weather Hong Kong", help="the fixed intent")
    p.add_argument("--intents", default=str(TOOLRET_QUERIES),
                   help="JSON list of {\"query\": text}: where the distinct intents come from")
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
    vector, how = intent_vector(stores[args.zone].index, args.intent)
    full_count, paced_count = max(50_000, int(args.seconds * 25_000)), int(args.seconds * 1000) + 1000
    texts = intent_texts(Path(args.intents), full_count + paced_count, args.intent)
    print(f"zone {args.zone} on {address}:{args.port}, query {qname} SRV, K={args.k}; fixed intent {args.intent!r}; "
          f"{len(texts)} distinct intents from {args.intents if Path(args.intents).exists() else args.intent!r}")
    print(f"vector: {how}" + (f", {len(vector)} bytes" if vector else "; no row with a vector"))
    fixed = queries(qname, [args.intent], args.k, None)
    cases = [("fixed intent", fixed, fixed),
             ("distinct intents", queries(qname, texts[:full_count], args.k, None),
              queries(qname, texts[full_count:], args.k, None))]
    if vector:
        cases.append(("distinct, with vector", queries(qname, texts[:full_count], args.k, vector),
                      queries(qname, texts[full_count:], args.k, vector)))
    print_rows(run(args.zones, address, args.port, cases, args.seconds))
    return 0


def print_rows(rows: list[tuple[str, dict]]) -> None:
    print(f"{'':21} {'q/s':>9} {'us/reply':>8} {'lost':>5}   at 1000 q/s: {'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7} "
          f"{'max ms':>7}  rcodes")
    for label, r in rows:
        print(f"{label:21} {r['qps']:9.0f} {r['us']:8.1f} {r['lost']:5d}   {'':12}{r['p50_ms']:7.3f} "
              f"{r['p90_ms']:7.3f} {r['p99_ms']:7.3f} {r['max_ms']:7.3f}  {','.join(r['rcodes'])}  ({r['checked']})")
    by_label = dict(rows)
    fixed, distinct = by_label["fixed intent"], by_label["distinct intents"]
    if distinct["laps"] > 1:
        print(f"note: the distinct intents ran out ({distinct['laps']:.1f} laps): some came from the packet cache")
    print(f"distinct / fixed intent: {distinct['qps']:.0f} / {fixed['qps']:.0f} q/s = "
          f"{distinct['qps'] / fixed['qps']:.3f} of the packet-cache rate")
    if "distinct, with vector" in by_label:
        plain, vector = distinct["us"], by_label["distinct, with vector"]["us"]
        print(f"time per reply at full speed, distinct intents: {plain:.1f} us without the vector, {vector:.1f} us "
              f"with it ({vector - plain:+.1f} us)")


if __name__ == "__main__":
    sys.exit(main())
