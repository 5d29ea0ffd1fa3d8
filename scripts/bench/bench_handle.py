#!/usr/bin/env python3
"""What one query costs a zone server in-process: bytes in, bytes out, no sockets, no load generator.

Calls ``DNSServer.handle`` of one zone (the root of --zones by default) with the resolver's kind of
query, and prints the median microseconds per call over several repeats for:

* a repeated query (served from the packet cache);
* distinct intents (every query parsed, scored and packed: the fast path of
  :mod:`tooldns.serving.fast` for these intent searches), by default --intent numbered
  ("historical weather Hong Kong 17"), with --intents the texts of a JSON list of {"query": ...}
  (ToolRet's dev queries are longer: about 230 characters, 40 words);
* distinct intents with a vector option, when the zone scores vectors (hybrid zones).

    python scripts/bench/bench_handle.py                      # the shipped tree's root
    python scripts/bench/bench_handle.py --zones built/ --zone tools.
    python scripts/bench/bench_handle.py --intents ../shared/data/toolret/queries.dev.en.json

Being one process with no network, its figures are steadier than dnsperf's. To count instructions
instead of time (the same count run after run, whatever the machine's load), ``--count ROW`` makes
as many calls of other packets of that row (warming the caches a server warms), then --rounds calls
inside ``functools.reduce``, each with a packet not sent before, which callgrind can be told to count
alone; divide by --rounds:

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null --collect-atstart=no \
        --toggle-collect=functools_reduce python scripts/bench/bench_handle.py --count distinct \
        --intents ../shared/data/toolret/queries.dev.en.json --rounds 4000

How much the machine's own speed moves, with nothing else changing: ``--drift SECONDS`` sends the
same --rounds distinct intents again and again for that long and prints each pass's microseconds
per call (on this project's virtual machine they move by half as much again within a minute,
which is why code changes are compared by instructions, docs/performance.md).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchlib import distinct_intents  # noqa: E402
from dnslib import EDNS0, DNSRecord, EDNSOption  # noqa: E402

from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent  # noqa: E402
from tooldns.protocol.names import Cursor  # noqa: E402
from tooldns.protocol.vector import VECTOR_OPTION_CODE, encode_vector  # noqa: E402
from tooldns.scoring.hybrid import one_blas_thread  # noqa: E402
from tooldns.serving.resolver import ZoneResolver  # noqa: E402
from tooldns.serving.server import DNSServer  # noqa: E402
from tooldns.serving.tree import load_tree  # noqa: E402


def query(zone: str, intent: str, k: int, vector: bytes | None = None) -> bytes:
    q = DNSRecord.question(Cursor("any", "tcp", zone).to_text(), "SRV")
    q.header.rd = 0
    options = [EDNSOption(INTENT_OPTION_CODE, encode_intent(intent, k))]
    if vector:
        options.append(EDNSOption(VECTOR_OPTION_CODE, vector))
    q.add_ar(EDNS0(udp_len=1232, opts=options))
    return bytes(q.pack())


def distinct_texts(intent: str, source: str | None, count: int) -> list[str]:
    """*count* different intents: *intent* numbered, or the queries of *source*, then queries spliced
    from two of them (:func:`benchlib.distinct_intents`)."""
    if not source:
        return [f"{intent} {i}" for i in range(count)]
    return distinct_intents([q["query"] for q in json.loads(Path(source).read_text(encoding="utf-8")) if q.get("query")],
                            count)


def per_call(server: DNSServer, packets: list[bytes], calls: int, repeats: int) -> float:
    """Median microseconds per ``handle`` call over *repeats* runs of *calls* calls (each run its own
    packets when there are enough, so that distinct intents stay distinct)."""
    runs = []
    for r in range(repeats):
        start = r * calls if len(packets) >= (r + 1) * calls else 0
        t0 = time.perf_counter()
        for i in range(start, start + calls):
            server.handle(packets[i % len(packets)], True)
        runs.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(runs)


def count(server: DNSServer, packets: list[bytes], calls: int) -> None:
    """*calls* calls of *packets* after as many of others (warming what a server warms: its word
    caches, its tables), the calls inside ``functools.reduce`` (what callgrind counts with
    ``--toggle-collect=functools_reduce``), each its own packet, never sent before, when there are
    enough (a packet sent twice is answered from what its first answer left: a referral's layout)."""
    warm = packets[calls:2 * calls] if len(packets) >= 2 * calls else packets[:calls]
    for packet in warm:
        server.handle(packet, True)
    functools.reduce(lambda _, i: server.handle(packets[i % len(packets)], True), range(calls), None)


def drift(server: DNSServer, packets: list[bytes], seconds: float) -> list[float]:
    """Microseconds per ``handle`` call of each pass over *packets*, passes made for *seconds*."""
    passes = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        for packet in packets:
            server.handle(packet, True)
        passes.append((time.perf_counter() - t0) / len(packets) * 1e6)
    return passes


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--zones", default=str(ROOT / "zones"))
    p.add_argument("--zone", default="tools.")
    p.add_argument("--intent", default="historical weather Hong Kong")
    p.add_argument("--intents", help="JSON list of {\"query\": text}: the distinct intents (default: --intent numbered)")
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2000, help="calls per repeat of the uncached rows (0: set-up only)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--count", choices=["cached", "distinct", "vector"],
                   help="for callgrind: --rounds calls of this row inside functools.reduce, no timing (see above)")
    p.add_argument("--drift", type=float, metavar="SECONDS",
                   help="pass over --rounds distinct intents again and again for SECONDS; print each pass's us per call")
    args = p.parse_args()
    one_blas_thread()  # as tooldns serve does
    store = next((s for s in load_tree(args.zones) if s.index.origin == args.zone), None)
    if store is None:
        raise SystemExit(f"no zone {args.zone} in {args.zones}")
    texts = distinct_texts(args.intent, args.intents, max(args.rounds, 1) * args.repeats)
    distinct = [query(args.zone, text, args.k) for text in texts]
    rows = [("repeated query (packet cache)", DNSServer(ZoneResolver(store), cache_size=4096),
             [query(args.zone, args.intent, args.k)], args.rounds * 10),
            ("distinct intents", DNSServer(ZoneResolver(store), cache_size=0), distinct, args.rounds)]
    model, dim = store.index.model, store.index.dim
    if model:
        vector = encode_vector(model, [((i * 7919) % 13 - 6) / 6 for i in range(dim)])
        rows.append(("distinct intents with a vector", DNSServer(ZoneResolver(store), cache_size=0),
                     [query(args.zone, text, args.k, vector) for text in texts],
                     args.rounds))
    if args.drift:
        passes = drift(rows[1][1], distinct[:max(args.rounds, 1)], args.drift)
        print(f"distinct intents, {len(passes)} passes of {max(args.rounds, 1)} calls: us per call "
              + " ".join(f"{us:.1f}" for us in passes))
        print(f"median {statistics.median(passes):.1f}, min {min(passes):.1f}, max {max(passes):.1f}")
        return 0
    if args.count:
        which = ["cached", "distinct", "vector"].index(args.count)
        if which >= len(rows):
            raise SystemExit(f"zone {args.zone} has no vectors: no row {args.count}")
        name, server, packets, _ = rows[which]
        count(server, packets, args.rounds)
        print(f"{name}: {args.rounds} calls inside functools.reduce")
        return 0
    print(f"zone {args.zone} of {args.zones}, K={args.k}, {'vectors of ' + model if model else 'no vectors'}; "
          f"distinct intents {'from ' + args.intents if args.intents else repr(args.intent) + ' numbered'}")
    for name, server, packets, calls in rows:
        if calls:
            print(f"{name:34} {per_call(server, packets, calls, args.repeats):9.1f} us per query")
    return 0


if __name__ == "__main__":
    sys.exit(main())
