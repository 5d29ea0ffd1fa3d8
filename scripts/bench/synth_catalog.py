#!/usr/bin/env python3
"""Synthetic tool catalogs of any size (and queries with known answers), written to files, for the
benchmarks at 100,000 or 1,000,000 tools: :mod:`tooldns.building.synth` makes them (how, there).

The same arguments give the same files (``--seed``); tools are written as they are made, so a
million tools need little memory.

    python scripts/bench/synth_catalog.py --source ../shared/data/toolret/services.en.json \\
        --dev-queries ../shared/data/toolret/queries.dev.en.json --n 100000 \\
        --out /tmp/synth100k.json --queries-out /tmp/synth100k.queries.json
    python scripts/bench/bench_retrieval.py --services /tmp/synth100k.json --queries /tmp/synth100k.queries.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tooldns.building.synth import own_sample, synth_queries, synth_tools  # noqa: E402


def write_catalog(entries: list[dict], n: int, seed: int, out: Path, n_queries: int) -> tuple[list[int], dict]:
    """Write *n* synthetic tools to *out* as they are made; their sources, and the tools sampled for queries."""
    chosen = own_sample(n, n_queries, seed)
    made, own = [], {}
    with out.open("w", encoding="utf-8") as fh:
        fh.write("[\n")
        for s, tool in synth_tools(entries, n, seed):
            made.append(s)
            number = len(made) - 1
            if number in chosen:
                own[number] = tool
            fh.write(("," if number else "") + json.dumps(tool, ensure_ascii=False) + "\n")
            if (number + 1) % 100_000 == 0:
                print(f"{number + 1} tools", file=sys.stderr, flush=True)
        fh.write("]\n")
    return made, own


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", required=True, help="the real catalog (JSON list of {id, name, description, metadata})")
    p.add_argument("--dev-queries", help="real queries about it ([{id, query, correct_tools: [{id}]}]) for 'dev' queries")
    p.add_argument("--n", type=int, default=100_000, help="synthetic tools to make (default 100,000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="where the synthetic catalog goes")
    p.add_argument("--queries-out", help="where the synthetic queries go")
    p.add_argument("--n-queries", type=int, default=1000, help="queries, half of each kind (default 1000)")
    args = p.parse_args()
    entries = json.loads(Path(args.source).read_text(encoding="utf-8"))
    n_queries = args.n_queries if args.queries_out else 0
    made, own = write_catalog(entries, args.n, args.seed, Path(args.out), n_queries)
    print(f"{args.n} synthetic tools from {len(entries)} -> {args.out}", file=sys.stderr)
    if args.queries_out:
        dev = json.loads(Path(args.dev_queries).read_text(encoding="utf-8")) if args.dev_queries else []
        queries = synth_queries(dev, entries, made, own, n_queries, args.seed)
        Path(args.queries_out).write_text(json.dumps(queries, ensure_ascii=False, indent=0), encoding="utf-8")
        kinds = {k: sum(q["kind"] == k for q in queries) for k in ("dev", "own")}
        print(f"{len(queries)} queries ({kinds['dev']} dev, {kinds['own']} own) -> {args.queries_out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
