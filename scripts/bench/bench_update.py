#!/usr/bin/env python3
"""``tooldns build --update`` measured: one update's cost, many updates' quality, statistics drift.

Three measurements (``docs/building.md`` has the figures):

* ``one``: the time of a one-tool update of a built tree and the zones it rewrites. A copy of the
  tree (``--in-place`` to skip copying) gets one tool added (a copy of a catalog tool under a new
  id and name), then changed, then removed again, each an update from the catalog file, timed as
  ``tooldns build --update`` runs it (reading the catalog included)::

      python scripts/bench/bench_update.py one --zones /tmp/built100k --services /tmp/synth100k.json

* ``many``: retrieval quality after N single-tool updates against a fresh build of the same final
  catalog. The catalog's tools are split with a seed: some held out and added one by one, some
  built with a shortened text (description cut to half its words, no parameters) and changed
  back, and synthetic decoys (``scripts/bench/synth_catalog.py`` variants) built in and removed; so
  after the N updates the tree holds exactly the catalog, which is then built afresh too. Both
  trees are served (``tooldns serve``, loopback) and every query resolved through the real
  resolver, as ``scripts/bench/bench_retrieval.py`` does::

      python scripts/bench/bench_update.py many --services ../shared/data/toolret/services.en.json \\
          --queries ../shared/data/toolret/queries.dev.en.json --updates 1000 --k 10

* ``drift``: how far stale global BM25 statistics may drift before rankings change: for catalogs
  that gained, lost or changed a share of their tools since the statistics were computed, flat
  BM25 over the current catalog with the stale statistics against the fresh ones: the share of
  queries whose top ten (as a set, and in order) changes, and hit rate@10 of both, against the
  drift measure :func:`tooldns.building.state.drift` (what ``DRIFT_THRESHOLD`` is compared with)::

      python scripts/bench/bench_update.py drift --services ../shared/data/toolret/services.en.json \\
          --queries ../shared/data/toolret/queries.dev.en.json

Figures go to stdout (progress to stderr); ``--json OUT`` writes them as JSON too.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_retrieval import load_queries, load_zones, metrics, run_queries  # noqa: E402
from benchlib import start_servers, stop_servers  # noqa: E402
from resolver_client import Resolver  # noqa: E402
from tooldns.building.build import DEFAULT_TOOL_K1, build, zone_tool  # noqa: E402
from tooldns.building.catalog import parse_catalog  # noqa: E402
from tooldns.building.state import BuildState, Totals, drift  # noqa: E402
from tooldns.building.synth import synth_catalog  # noqa: E402
from tooldns.building.update import DRIFT_THRESHOLD, update, update_tree  # noqa: E402
from tooldns.scoring.bm25 import BM25  # noqa: E402
from tooldns.scoring.tokenize import tokenize  # noqa: E402


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def shortened(entry: dict) -> dict:
    """*entry* as an older version of it: the first half of its description's words, no parameters."""
    words = str(entry.get("description") or "").split()
    meta = {k: v for k, v in (entry.get("metadata") or {}).items() if k != "inputSchema"}
    return {**entry, "description": " ".join(words[:max(3, len(words) // 2)]), "metadata": meta}


def decoys(entries: list[dict], n: int, seed: int) -> list[dict]:
    """*n* synthetic tools made of the catalog's (ids ``decoy_<n>``): tools that come and go."""
    if n <= 0:
        return []
    tools, _ = synth_catalog(entries, n, seed=seed)
    return [{**t, "id": f"decoy_{i}"} for i, t in enumerate(tools)]


# -- one: the cost of a one-tool update --

def bench_one(args: argparse.Namespace) -> dict:
    entries = json.loads(Path(args.services).read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="tooldns-update-") as tmp:
        zones = Path(args.zones)
        if not args.in_place:
            say(f"copying {zones} ...")
            zones = Path(shutil.copytree(args.zones, Path(tmp) / "zones"))
        state = BuildState.read(zones)
        depth = max(state.depth(o) for o in state.zones) + 1
        rng = random.Random(args.seed)
        source = rng.choice(entries)
        new = {**source, "id": "bench_update_new", "name": f"{source.get('name', '')} Plus"}
        steps = [("add", entries + [new]),
                 ("change", entries + [{**new, "description": f"{new.get('description', '')} Now with more."}]),
                 ("remove", entries)]
        out = {"zones_in_tree": len(state.zones), "depth": depth, "steps": {}}
        for name, catalog in steps:
            path = Path(tmp) / f"{name}.json"
            path.write_text(json.dumps(catalog), encoding="utf-8")
            t0 = time.perf_counter()
            report = update([str(path)], str(zones))
            seconds = time.perf_counter() - t0
            out["steps"][name] = {"seconds": seconds, "zones_rewritten": len(report.zones),
                                  "refreshed": report.refreshed, "zones": report.zones}
            print(f"{name}: {seconds:.2f} s, {len(report.zones)} zones rewritten (depth {depth}: at most "
                  f"{depth + 1}){'; statistics refreshed' if report.refreshed else ''}")
    return out


# -- many: quality after N updates --

def plan_updates(entries: list[dict], n: int, mix: tuple[float, float, float], seed: int):
    """The initial catalog, and N single-tool steps (kind, id) that turn it into *entries*."""
    rng = random.Random(seed)
    n_add = round(n * mix[0])
    n_change = round(n * mix[1])
    n_remove = n - n_add - n_change
    if n_add + n_change > len(entries):
        raise SystemExit(f"{n} updates need {n_add + n_change} catalog tools to hold out or change; "
                         f"the catalog has {len(entries)}")
    picked = rng.sample([e["id"] for e in entries], n_add + n_change)
    added, changed = set(picked[:n_add]), set(picked[n_add:])
    extra = decoys(entries, n_remove, seed)
    initial = [shortened(e) if e["id"] in changed else e for e in entries if e["id"] not in added] + extra
    steps = ([("add", i) for i in sorted(added)] + [("change", i) for i in sorted(changed)]
             + [("remove", e["id"]) for e in extra])
    rng.shuffle(steps)
    return initial, steps, extra


def serve_and_resolve(zonedir: str, queries: list[dict], k: int, top: int, port: int, n_tools: int) -> dict:
    tree = load_zones(zonedir)
    proc, root = start_servers(zonedir, port)
    try:
        with Resolver(root=root, cache=False, timeout=2.0) as resolver:
            resolver.resolve("warm up", k=1)
            out = run_queries(resolver, queries, k, top, tree, n_tools)
    finally:
        stop_servers(proc)
    out.pop("per_query", None)
    return out


def bench_many(args: argparse.Namespace) -> dict:
    entries = json.loads(Path(args.services).read_text(encoding="utf-8"))
    queries = load_queries([args.queries], args.limit)
    mix = tuple(float(x) for x in args.mix.split(","))
    initial, steps, extra = plan_updates(entries, args.updates, mix, args.seed)
    current = {e["id"]: e for e in initial}
    final_order = [e["id"] for e in entries]
    by_id = {e["id"]: e for e in entries}
    with tempfile.TemporaryDirectory(prefix="tooldns-update-") as tmp:
        updated, fresh = str(Path(tmp) / "updated"), str(Path(tmp) / "fresh")
        (Path(tmp) / "initial.json").write_text(json.dumps(initial), encoding="utf-8")
        say(f"building the initial tree: {len(initial)} tools")
        build([str(Path(tmp) / "initial.json")], updated, subnet=args.subnet)
        times, rewritten, refreshes, splits = [], [], 0, 0
        say(f"{len(steps)} single-tool updates")
        for n, (kind, tid) in enumerate(steps, 1):
            if kind == "remove":
                del current[tid]
            else:
                current[tid] = by_id[tid]
            order = [i for i in final_order if i in current] + [e["id"] for e in extra if e["id"] in current]
            catalog = parse_catalog([current[i] for i in order], "catalog")
            t0 = time.perf_counter()
            report = update_tree(catalog, updated, split_leaves=args.split_leaves)
            times.append(time.perf_counter() - t0)
            rewritten.append(len(report.zones))
            refreshes += report.refreshed
            splits += len(report.split)
            if n % 100 == 0 or n == len(steps):
                say(f"  {n}/{len(steps)} updates, {statistics.mean(times) * 1000:.0f} ms each, {refreshes} "
                    f"statistics refreshes, {splits} leaves split")
        assert set(current) == set(by_id)
        (Path(tmp) / "final.json").write_text(json.dumps(entries), encoding="utf-8")
        say("building the final catalog afresh")
        fresh_report = build([str(Path(tmp) / "final.json")], fresh, subnet=args.subnet)
        out = {"updates": len(steps), "kinds": {k: sum(1 for s in steps if s[0] == k) for k in ("add", "change", "remove")},
               "update_ms_mean": statistics.mean(times) * 1000, "update_ms_max": max(times) * 1000,
               "zones_rewritten_mean": statistics.mean(rewritten), "zones_rewritten_max": max(rewritten),
               "statistics_refreshes": refreshes, "leaves_split": splits,
               "zones_updated_tree": len(BuildState.read(updated).zones), "zones_fresh_tree": fresh_report.zones,
               "drift_left": drift(BuildState.read(updated).written, BuildState.read(updated).current)["drift"]}
        for name, zonedir in (("updated", updated), ("fresh", fresh)):
            say(f"resolving {len(queries)} queries over the {name} tree")
            out[name] = serve_and_resolve(zonedir, queries, args.k, args.top, args.port, len(entries))
    u, f = out["updated"], out["fresh"]
    print(f"{out['updates']} updates ({out['kinds']}): {out['update_ms_mean']:.0f} ms each (max "
          f"{out['update_ms_max']:.0f}), {out['zones_rewritten_mean']:.1f} zones rewritten each (max "
          f"{out['zones_rewritten_max']}), {refreshes} statistics refreshes, {splits} leaves split")
    print(f"| K = {args.k} | updated tree ({out['zones_updated_tree']} zones) | fresh build ({out['zones_fresh_tree']} zones) |")
    print("| --- | --- | --- |")
    for key in ("hr@1", "hr@5", "hr@10", "recall@10", "mrr", "route_recall", "queries_per_resolution",
                "docs_scored_fraction"):
        print(f"| {key} | {u[key]:.3f} | {f[key]:.3f} |")
    return out


# -- drift: how far statistics may drift --

def _rank(index: BM25, query: str, top: int) -> list[int]:
    return [i for i, s in index.rank(query, top) if s > 0]


def bench_drift(args: argparse.Namespace) -> dict:
    entries = json.loads(Path(args.services).read_text(encoding="utf-8"))
    queries = load_queries([args.queries], args.limit)
    catalog = parse_catalog(entries, "catalog")
    tokens = [tokenize(zone_tool(t, "x", "http").text()) for t in catalog.tools]
    ids = [t.id for t in catalog.tools]
    current = Totals.of(tokens)
    fresh_index = BM25(tokens=tokens, k1=DEFAULT_TOOL_K1, stats=current.stats())
    fresh = [_rank(fresh_index, q["query"], 10) for q in queries]
    correct = [{c["id"] for c in q["correct_tools"]} for q in queries]
    hr_fresh = statistics.mean(metrics([ids[i] for i in r], c)["hr@10"] for r, c in zip(fresh, correct))
    pool = decoys(entries, round(len(entries) * max(args.shares)) + 1, args.seed)
    pool_tokens = [tokenize(zone_tool(t, "x", "http").text()) for t in parse_catalog(pool, "decoys").tools]
    rows = []
    for kind in ("add", "remove", "change", "mix"):
        for share in args.shares:
            for seed in range(args.seeds):
                rng = random.Random(f"{kind}{share}{seed}")
                m = max(1, round(share * len(entries)))
                # the catalog the statistics were computed on, before the m tools changed
                counts = {"add": (m, 0, 0), "remove": (0, m, 0), "change": (0, 0, m),
                          "mix": (m - 2 * (m // 3), m // 3, m // 3)}[kind]
                gone = set(rng.sample(range(len(entries)), counts[0] + counts[2]))
                was = [t for i, t in enumerate(tokens) if i not in gone]
                changed = list(gone)[:counts[2]]
                was += [tokens[i][:max(3, len(tokens[i]) // 2)] for i in changed]
                was += rng.sample(pool_tokens, counts[1])
                written = Totals.of(was).stats()
                for term, df in current.df.items():  # as an update does: terms new to them get their current df
                    written.df.setdefault(term, df)
                d = drift(written, current)
                stale_index = BM25(tokens=tokens, k1=DEFAULT_TOOL_K1, stats=written)
                stale = [_rank(stale_index, q["query"], 10) for q in queries]
                hr = statistics.mean(metrics([ids[i] for i in r], c)["hr@10"] for r, c in zip(stale, correct))
                rows.append({"kind": kind, "share": share, "seed": seed, "tools": m, **d,
                             "top10_set_changed": sum(set(a) != set(b) for a, b in zip(stale, fresh)) / len(queries),
                             "top10_order_changed": sum(a != b for a, b in zip(stale, fresh)) / len(queries),
                             "hr@10_stale": hr, "hr@10_fresh": hr_fresh})
        say(f"{kind} done")
    print(f"{len(entries)} tools, {len(queries)} queries, flat BM25 (k1 = {DEFAULT_TOOL_K1}); mean over {args.seeds} "
          f"seeds; threshold now {DRIFT_THRESHOLD:.2%}")
    print("| kind | tools changed | drift | idf | avgdl | top 10 set changed | top 10 order changed | hr@10 stale / fresh |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for kind in ("add", "remove", "change", "mix"):
        for share in args.shares:
            group = [r for r in rows if r["kind"] == kind and r["share"] == share]

            def mean(key: str) -> float:
                return statistics.mean(r[key] for r in group)

            print(f"| {kind} | {group[0]['tools']} ({share:.1%}) | {mean('drift'):.2%} | {mean('idf'):.2%} | "
                  f"{mean('avgdl'):.2%} | {mean('top10_set_changed'):.1%} | {mean('top10_order_changed'):.1%} | "
                  f"{mean('hr@10_stale'):.3f} / {hr_fresh:.3f} |")
    by_drift = sorted(rows, key=lambda r: r["drift"])
    print("\nqueries whose top 10 set changed, by drift (all runs):")
    for lo, hi in ((0, 0.0025), (0.0025, 0.005), (0.005, 0.01), (0.01, 0.02), (0.02, 0.05), (0.05, 1.0)):
        group = [r for r in by_drift if lo <= r["drift"] < hi]
        if group:
            print(f"  drift {lo:.2%} to {hi:.2%}: {len(group)} runs, set changed mean "
                  f"{statistics.mean(r['top10_set_changed'] for r in group):.2%} max "
                  f"{max(r['top10_set_changed'] for r in group):.2%}; hr@10 change max "
                  f"{max(abs(r['hr@10_stale'] - r['hr@10_fresh']) for r in group):.3f}")
    return {"rows": rows, "hr@10_fresh": hr_fresh}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    one = sub.add_parser("one", help="time a one-tool update (add, change, remove) of a built tree")
    one.add_argument("--zones", required=True, help="a directory tooldns build wrote")
    one.add_argument("--services", required=True, help="the catalog it was built from (one JSON file)")
    one.add_argument("--in-place", action="store_true", help="update --zones itself (it ends as it began, serials "
                     "raised) rather than a copy")
    many = sub.add_parser("many", help="retrieval after N single-tool updates against a fresh build")
    many.add_argument("--updates", type=int, default=1000)
    many.add_argument("--mix", default="0.5,0.25,0.25", help="shares of adds, changes and removals (default 0.5,0.25,0.25)")
    many.add_argument("--k", type=int, default=10, help="K at every step (default 10)")
    many.add_argument("--top", type=int, default=10)
    many.add_argument("--port", type=int, default=6356)
    many.add_argument("--subnet", default="127.0")
    many.add_argument("--split-leaves", action="store_true", help="split leaves that grow past twice max-leaf")
    dr = sub.add_parser("drift", help="rank changes against the drift of stale statistics (flat BM25)")
    dr.add_argument("--shares", default="0.001,0.0025,0.005,0.01,0.02,0.05,0.1",
                    help="shares of the catalog changed since the statistics were computed")
    dr.add_argument("--seeds", type=int, default=3)
    for s in (many, dr):
        s.add_argument("--services", required=True, help="catalog JSON (one file)")
        s.add_argument("--queries", required=True, help="queries JSON: [{id, query, correct_tools: [{id}]}]")
        s.add_argument("--limit", type=int, help="only the first N queries")
    for s in (one, many, dr):
        s.add_argument("--seed", type=int, default=0)
        s.add_argument("--json", help="write the figures here as JSON")
    args = p.parse_args()
    if args.what == "drift":
        args.shares = [float(x) for x in args.shares.split(",")]
    return args


def main() -> int:
    args = parse_args()
    out = {"one": bench_one, "many": bench_many, "drift": bench_drift}[args.what](args)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
