#!/usr/bin/env python3
"""Server throughput and latency under dnsperf: a repeated intent against intents never seen before.

Starts ``tooldns serve ZONES`` in its own process (one server process, all zones, packet cache on,
rate limiting off), then runs dnsperf (Debian package ``dnsperf``) against one zone's address, in
the same run against the same process:

1. **fixed intent**: every query the same message, so every reply after the first comes from the
   server's packet cache (a popular intent);
2. **distinct intents**: every query a different intent (ToolRet's dev queries, then queries spliced
   from two of them, the first half of one's words and the second half of another's, each with its
   number; ``--intents``), so every query is parsed, scored and packed, meets a word never seen
   before, and refers to lists of children a zone has seldom referred to before: what free-text
   intents cost;
3. when the zone scores vectors (a tree built with ``tooldns build --embed``), distinct intents
   with the intent's vector option (65303) too, as a resolver with an embedder sends them;

each at full speed for --seconds (queries per second), in --rounds rounds that take the cases in
turn (fixed, distinct, fixed, distinct ...), so that the machine's speed, which drifts on a shared
virtual machine, weighs on both alike; then each at a fixed 1,000 queries per second (latency
percentiles from dnsperf's per-query report). Every round sends intents the server has not been
sent before. The queries are the messages the resolver library sends (RD=0, its OPT record),
given to dnsperf in its binary input format (``-B``: one whole message per record, so each may
carry its own intent option, which ``-E`` cannot). Both rates come from the same generator
against the same process; the last lines give their ratio in each round and its median. Each row
gives the medians over the rounds of the rate, of the time per reply (1e6 / q/s) and of the
server process's CPU time per reply (user and system, from ``/proc``: the server's own cost,
whatever dnsperf takes of the machine).

``--instructions`` counts instead of timing: it runs ``tooldns serve`` under valgrind's callgrind and
sends --replies queries of each case at a paced --rate, after a warm-up, zeroing and reading the
process's instruction count around each (``callgrind_control``), less what the idle process spends
in the same time (next to nothing: it serves with ``--watch-interval 0 --no-summaries``, so no timer
runs). It prints the instructions per reply of each case and their ratio:
the same figures run after run, whatever the machine's speed, of the server's whole user-space work
(the event loop, the sockets' Python side, the packet cache, parsing, scoring, packing); the
kernel's part of receiving and sending is not counted, and adds the same to both cases.

The vector is the first intent's embedding with the zone's model: all-MiniLM-L6-v2 (``minilm``)
or the hashing embedder (``hash:DIM``); for another model, a hashing vector of its size under its
name stands in (the server's work does not depend on the values).

    python scripts/bench/bench_server.py                 # root zone, fixed intent "historical weather Hong Kong"
    python scripts/bench/bench_server.py --zone history.weather.tools. --seconds 10
    tooldns build services.en.json --embed minilm --out /tmp/hybrid
    python scripts/bench/bench_server.py --zones /tmp/hybrid   # adds the row "distinct, with vector"
    python scripts/bench/bench_server.py --instructions  # instructions per reply under callgrind (Debian's valgrind)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dns.edns
import dns.rcode

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))  # benchlib

from benchlib import DATA, distinct_intents, percentile, start_servers, stop_servers  # noqa: E402
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
TOOLRET_QUERIES = DATA / "queries.dev.en.json"


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
    """*count* distinct intents: the queries of *source* (a JSON list of {"query": ...}), then queries
    spliced from two of them (:func:`benchlib.distinct_intents`); *fallback* numbered when there is no source."""
    base: list[str] = []
    if source is not None and source.exists():
        base = [q["query"] for q in json.loads(source.read_text(encoding="utf-8")) if q.get("query")]
    return distinct_intents(base, count) or distinct_intents([fallback], count)


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
    meta = next((decode_meta(o.data) for o in reply.options if o.otype == META_OPTION_CODE), None)
    if meta is None:
        return f"{rcode}, no meta option"
    return f"{rcode}, scorer {meta.scorer}" + (", vector ignored" if meta.vector_ignored else "")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time process *pid* has used so far (Linux: ``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def full_speed(address: str, port: int, path: str, messages: int, seconds: float, pid: int) -> dict:
    """dnsperf at full speed over *path* (*messages* queries in it); the server process's (*pid*) CPU
    time per query meanwhile."""
    cpu = cpu_seconds(pid)
    out = dnsperf(["-s", address, "-p", str(port), "-d", path, "-B", "-l", str(seconds), "-q", "64", "-t", "2"])
    cpu = cpu_seconds(pid) - cpu
    qps = float(re.search(r"Queries per second:\s+([\d.]+)", out).group(1))
    lost = int(re.search(r"Queries lost:\s+(\d+)", out).group(1))
    sent = int(re.search(r"Queries sent:\s+(\d+)", out).group(1))
    return {"qps": qps, "us": 1e6 / qps if qps else 0.0, "cpu_us": cpu * 1e6 / sent if sent else 0.0,
            "lost": lost, "laps": sent / messages}


def paced(address: str, port: int, path: str, seconds: float) -> dict:
    """dnsperf at 1,000 q/s over *path*: latency percentiles and the rcodes seen."""
    out = dnsperf(["-s", address, "-p", str(port), "-d", path, "-B", "-l", str(seconds), "-Q", "1000", "-t", "2",
                   "-v"])
    lat = [float(m.group(1)) * 1000 for m in re.finditer(r"^> \w+ .* ([\d.]+)$", out, re.M)]
    rcodes = set(re.findall(r"^> (\w+) ", out, re.M))
    return {"n": len(lat), "rcodes": sorted(rcodes), "p50_ms": statistics.median(lat), "p90_ms": percentile(lat, 90),
            "p99_ms": percentile(lat, 99), "max_ms": max(lat)}


#: one case: its label, the messages sent at full speed in each round, and those sent at 1,000 q/s
Case = tuple[str, list[list[bytes]], list[bytes]]


def run(zones: str, address: str, port: int, cases: list[Case], seconds: float) -> list[tuple[str, list[dict], dict]]:
    """Every case against one server process: per case its label, its full-speed figures in each round
    (the cases taken in turn, round after round) and its paced figures."""
    proc, _ = start_servers(zones, port)
    rounds: dict[str, list[dict]] = {label: [] for label, _, _ in cases}
    out = []
    try:
        with tempfile.TemporaryDirectory(prefix="tooldns-perf-") as tmp:
            for r in range(max(len(full) for _, full, _ in cases)):
                for n, (label, full, _) in enumerate(cases):
                    wires = full[r % len(full)]
                    rounds[label].append(full_speed(address, port, query_file(wires, tmp, f"full{n}-{r}.bin"),
                                                    len(wires), seconds, proc.pid))
            for n, (label, _, slow) in enumerate(cases):
                checked = probe(address, port, slow[-1])
                out.append((label, rounds[label], {**paced(address, port, query_file(slow, tmp, f"paced{n}.bin"),
                                                          seconds), "checked": checked}))
    finally:
        stop_servers(proc)
    return out


#: seconds of each of the two windows the idle process's instructions are counted over
IDLE_WINDOW = 5.0


def _instructions_while(pid: int, out: Path, action) -> float:
    """The instructions process *pid* (under callgrind, dumping to *out*.N) runs while *action* runs."""
    subprocess.run(["callgrind_control", "-z", str(pid)], check=True, capture_output=True, timeout=120)
    action()
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True, timeout=120)
    dump = max(out.parent.glob(out.name + ".*"), key=lambda f: int(f.suffix[1:]) if f.suffix[1:].isdigit() else -1)
    return float(re.search(r"^summary:\s+(\d+)", dump.read_text(), re.M).group(1))


def paced_once(address: str, port: int, path: str, passes: int, rate: int) -> int:
    """dnsperf through the queries of *path* *passes* times at *rate* queries a second; how many were answered."""
    out = dnsperf(["-s", address, "-p", str(port), "-d", path, "-B", "-n", str(passes), "-Q", str(rate), "-t", "10"])
    return int(re.search(r"Queries completed:\s+(\d+)", out).group(1))


def instructions(zones: str, address: str, port: int, cases: list[tuple[str, list[bytes], int]], warm: list[bytes],
                 rate: int) -> dict[str, float]:
    """Per case (label, its messages, passes over them), the instructions per reply of ``tooldns serve``
    run under callgrind, after *warm* (sent once; every case's messages once or more) and less the idle
    process's instructions in the same time."""
    os.environ["PYTHONHASHSEED"] = "0"  # the same dict layouts, so the same counts, run after run
    with tempfile.TemporaryDirectory(prefix="tooldns-count-") as tmp:
        out = Path(tmp) / "callgrind.out"
        # nothing on a timer: no look at the files, no polls of children, so the idle process runs (nearly) nothing
        proc, _ = start_servers(zones, port, extra=["--watch-interval", "0", "--no-summaries"],
                                wrapper=["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"])
        try:
            paced_once(address, port, query_file(warm, tmp, "warm.bin"), 1, rate)
            # the smaller of two windows: on a loaded machine the warm-up's last replies, slow under
            # callgrind, may still run in the first, and counted as idle they would be taken off every case
            idle = min(_instructions_while(proc.pid, out, lambda: time.sleep(IDLE_WINDOW)) / IDLE_WINDOW
                       for _ in range(2))
            figures = {}
            for n, (label, wires, passes) in enumerate(cases):
                path, sent, answered = query_file(wires, tmp, f"case{n}.bin"), len(wires) * passes, []
                t0 = time.monotonic()
                total = _instructions_while(proc.pid, out, lambda: answered.append(paced_once(address, port, path,
                                                                                               passes, rate)))
                if answered[0] != sent:
                    raise SystemExit(f"{label}: {answered[0]} of {sent} queries answered under callgrind; lower --rate")
                figures[label] = (total - idle * (time.monotonic() - t0)) / sent
        finally:
            stop_servers(proc)
    return figures


def count_main(args: argparse.Namespace, qname: str) -> int:
    """``--instructions``: the fixed intent and never-seen intents, counted (see the module's docstring)."""
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed: apt-get install valgrind")
    stores = {s.index.origin: s for s in load_tree(args.zones)}
    address = stores[args.zone].zone.nameservers[0].address
    texts = intent_texts(Path(args.intents), 2 * args.replies, args.intent)
    fixed = queries(qname, [args.intent], args.k, None)
    distinct = queries(qname, texts[args.replies:], args.k, None)  # never sent before: the warm-up sends the others
    print(f"zone {args.zone} on {address}:{args.port}, query {qname} SRV, K={args.k}; under callgrind, "
          f"{args.replies} replies a case at {args.rate} q/s after {args.replies} distinct intents and the fixed one")
    figures = instructions(args.zones, address, args.port, [("fixed intent", fixed, args.replies),
                                                            ("distinct intents", distinct, 1)],
                           queries(qname, texts[:args.replies], args.k, None) + fixed, args.rate)
    for label, per_reply in figures.items():
        print(f"{label:21} {per_reply:12,.0f} instructions per reply")
    print(f"fixed / distinct intent: {figures['fixed intent'] / figures['distinct intents']:.3f} (the share of the "
          f"packet-cache rate distinct intents would be answered at, were the kernel's part of a reply nil)")
    return 0


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
    return encode_vector(embedder.model, embedder.embed_query(intent)), how


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--zones", default=str(ROOT / "zones"))
    p.add_argument("--zone", default="tools.", help="zone whose server is measured (default tools.)")
    p.add_argument("--intent", default="historical weather Hong Kong", help="the fixed intent")
    p.add_argument("--intents", default=str(TOOLRET_QUERIES),
                   help="JSON list of {\"query\": text}: where the distinct intents come from")
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--service", default="any")
    p.add_argument("--seconds", type=float, default=3.0, help="length of each dnsperf run (default 3)")
    p.add_argument("--rounds", type=int, default=3,
                   help="full-speed rounds, each taking the cases in turn (default 3; the ratio's median is quoted)")
    p.add_argument("--port", type=int, default=5353 + 1000)
    p.add_argument("--instructions", action="store_true",
                   help="count instructions per reply under callgrind instead of timing (see above)")
    p.add_argument("--replies", type=int, default=2000, help="with --instructions: replies counted a case (default 2000)")
    p.add_argument("--rate", type=int, default=200, help="with --instructions: queries a second (default 200)")
    args = p.parse_args()
    if shutil.which("dnsperf") is None:
        raise SystemExit("dnsperf is not installed: apt-get install dnsperf")
    stores = {s.index.origin: s for s in load_tree(args.zones)}
    if args.zone not in stores:
        raise SystemExit(f"no zone {args.zone} in {args.zones}")
    address = stores[args.zone].zone.nameservers[0].address
    qname = Cursor(args.service, "tcp", args.zone).to_text()
    if args.instructions:
        return count_main(args, qname)
    vector, how = intent_vector(stores[args.zone].index, args.intent)
    rounds = max(1, args.rounds)
    full_count, paced_count = max(50_000, int(args.seconds * 25_000)), int(args.seconds * 1000) + 1000
    texts = intent_texts(Path(args.intents), full_count * rounds + paced_count, args.intent)
    print(f"zone {args.zone} on {address}:{args.port}, query {qname} SRV, K={args.k}; fixed intent {args.intent!r}; "
          f"{len(texts)} distinct intents from {args.intents if Path(args.intents).exists() else args.intent!r}; "
          f"{rounds} rounds of {args.seconds:g} s a case")
    print(f"vector: {how}" + (f", {len(vector)} bytes" if vector else "; no row with a vector"))
    fixed = queries(qname, [args.intent], args.k, None)
    slices = [texts[r * full_count:(r + 1) * full_count] for r in range(rounds)]  # never sent before
    cases: list[Case] = [("fixed intent", [fixed], fixed),
                         ("distinct intents", [queries(qname, part, args.k, None) for part in slices],
                          queries(qname, texts[rounds * full_count:], args.k, None))]
    if vector:
        cases.append(("distinct, with vector", [queries(qname, part, args.k, vector) for part in slices],
                      queries(qname, texts[rounds * full_count:], args.k, vector)))
    print_rows(run(args.zones, address, args.port, cases, args.seconds))
    return 0


def print_rows(rows: list[tuple[str, list[dict], dict]]) -> None:
    def median(figures: list[dict], key: str) -> float:
        return statistics.median(f[key] for f in figures)

    print(f"{'':21} {'q/s':>9} {'us/reply':>8} {'cpu us':>6} {'lost':>5}   at 1000 q/s: {'p50 ms':>7} {'p90 ms':>7} "
          f"{'p99 ms':>7} {'max ms':>7}  rcodes")
    for label, full, r in rows:
        print(f"{label:21} {median(full, 'qps'):9.0f} {median(full, 'us'):8.1f} {median(full, 'cpu_us'):6.1f} "
              f"{sum(f['lost'] for f in full):5d}   {'':12}{r['p50_ms']:7.3f} {r['p90_ms']:7.3f} {r['p99_ms']:7.3f} "
              f"{r['max_ms']:7.3f}  {','.join(r['rcodes'])}  ({r['checked']})")
    by_label = {label: full for label, full, _ in rows}
    fixed, distinct = by_label["fixed intent"], by_label["distinct intents"]
    if any(f["laps"] > 1 for f in distinct):
        print("note: the distinct intents ran out in a round: some came from the packet cache")
    ratios = [d["qps"] / f["qps"] for f, d in zip(fixed, distinct)]
    for n, (f, d, ratio) in enumerate(zip(fixed, distinct, ratios), 1):
        print(f"round {n}: distinct / fixed intent {d['qps']:.0f} / {f['qps']:.0f} q/s = {ratio:.3f}; "
              f"server CPU per reply {d['cpu_us']:.1f} / {f['cpu_us']:.1f} us")
    print(f"distinct / fixed intent, median of {len(ratios)} rounds: {statistics.median(ratios):.3f} of the "
          f"packet-cache rate")
    if "distinct, with vector" in by_label:
        plain, vector = median(distinct, "us"), median(by_label["distinct, with vector"], "us")
        print(f"time per reply at full speed, distinct intents: {plain:.1f} us without the vector, {vector:.1f} us "
              f"with it ({vector - plain:+.1f} us)")


if __name__ == "__main__":
    sys.exit(main())
