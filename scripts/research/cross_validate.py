#!/usr/bin/env python3
"""Choose retrieval parameters on one half of the queries, report them on the other.

Runs ``scripts/bench/bench_retrieval.py`` (the real builder, servers and resolver) for every setting of
a small grid on one half of the queries (``--half even`` or ``odd``: a query's half is fixed by
its id), keeps the setting with the best hit rate@10 among those within the cost limits (DNS
queries per resolution, share of the catalog scored), and runs that setting on the other half.
Both ways round, so every query is reported once, by a setting chosen without it.

    python scripts/research/cross_validate.py --services ../shared/data/toolret/services.en.json \\
        --queries ../shared/data/toolret/queries.dev.en.json --scorer hybrid \\
        --grid "--k 5" --grid "--k 6" --grid "--k 6 --max-children 120 --max-leaf 16"

Prints one line per run and, per direction, the chosen setting with its tuned and held-out
figures, next to the flat baselines of the held-out half, and the held-out queries the tree and
each flat search split (found by one only) with McNemar's exact p-value.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ("hr@10", "recall@10", "queries_per_resolution", "docs_scored_fraction", "compared_fraction", "route_recall")


def run(args: argparse.Namespace, setting: str, half: str, out: Path) -> dict:
    """One benchmark run of *setting* on *half*; its JSON figures."""
    command = [sys.executable, str(ROOT / "scripts" / "bench" / "bench_retrieval.py"), "--scorer", args.scorer,
               "--half", half, "--json", str(out), "--ks", "", *shlex.split(setting)]
    for flag, values in (("--services", args.services), ("--queries", args.queries)):
        for value in values:
            command += [flag, value]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench_retrieval failed for {setting!r} on {half}:\n{done.stderr[-2000:]}")
    return json.loads(out.read_text(encoding="utf-8"))


def line(figures: dict) -> str:
    return " ".join(f"{k} {figures.get(k, 0):.3f}" for k in FIGURES)


def choose(results: dict[str, dict], max_queries: float, max_scored: float) -> str:
    fits = {s: r for s, r in results.items()
            if r["queries_per_resolution"] <= max_queries and r["docs_scored_fraction"] <= max_scored}
    if not fits:
        raise SystemExit("no setting of the grid is within the cost limits")
    return max(fits, key=lambda s: (fits[s]["hr@10"], fits[s]["recall@10"]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--services", action="append", required=True)
    p.add_argument("--queries", action="append", required=True)
    p.add_argument("--scorer", default="bm25")
    p.add_argument("--grid", action="append", required=True, help="bench_retrieval options of one setting")
    p.add_argument("--max-queries", type=float, default=12.0, help="DNS queries per resolution at most (12)")
    p.add_argument("--max-scored", type=float, default=0.15, help="share of the catalog scored at most (0.15)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for tune, report in (("even", "odd"), ("odd", "even")):
            results = {}
            for n, setting in enumerate(args.grid):
                results[setting] = run(args, setting, tune, Path(tmp) / f"{tune}-{n}.json")
                print(f"tune on {tune}: {setting!r}: {line(results[setting])}", flush=True)
            chosen = choose(results, args.max_queries, args.max_scored)
            held = run(args, chosen, report, Path(tmp) / f"{report}-held.json")
            flats = {k: held[k]["hr@10"] for k in ("flat_bm25", "flat_dense", "flat_hybrid") if k in held}
            print(f"chosen on {tune}: {chosen!r}; tuned: {line(results[chosen])}")
            print(f"held out ({report}): {line(held)}; flat hr@10 {flats}", flush=True)
            for name, c in held.get("versus_flat", {}).items():  # the queries the two split, and whether by chance
                print(f"  held out against {name}: tree only {c['dns_only']}, flat only {c['flat_only']}, "
                      f"McNemar p {held['versus_flat_p'][name]:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
