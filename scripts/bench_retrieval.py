#!/usr/bin/env python3
"""Retrieval quality of resolution over the real protocol, against flat BM25, on any catalog.

Builds the zone tree from the catalog (``tooldns build``: the offline tree, or --taxonomy),
starts ``tooldns serve`` on loopback in its own process, resolves every query with the real
resolver library over UDP (client cache off; K children at each step, --top tools from each
leaf) and scores the merged ranking against the queries' correct tools. In the same run: a flat
BM25 baseline over the whole catalog with the same tokenizer, and a sweep over K for the plot.

    python scripts/bench_retrieval.py \\
        --services ../shared/data/toolret/services.en.json \\
        --queries ../shared/data/toolret/queries.dev.en.json --json out/en.json

Inputs: a catalog list of {id, name, description, metadata} (several --services are merged:
same id, one tool), and queries [{id, query, correct_tools: [{id}]}].
Outputs: a markdown report on stdout (progress on stderr); with --json, the JSON figures in that
file and, beside it, the report (.md) and a plot (.png) of hit rate@10 and documents scored
against K.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchlib import percentile, start_servers, stop_servers  # noqa: E402
from resolver_client import Resolver  # noqa: E402
from tooldns.building.build import DEFAULT_PRUNE_RATIO, AutoTreeBuilder, BuildReport, build, zone_tool  # noqa: E402
from tooldns.building.catalog import load_catalogs  # noqa: E402
from tooldns.scoring.bm25 import BM25  # noqa: E402
from tooldns.serving.tree import load_tree  # noqa: E402

HEADLINE_METRICS = ("hr@1", "hr@5", "hr@10", "recall@5", "recall@10", "mrr", "ndcg@10")
#: the LLM scorer's counters in a zone server's ``stats.tooldns.`` reply (prefixed ``scorer_``)
LLM_COUNTERS = ("calls", "prompt_tokens", "completion_tokens", "fallbacks")


@dataclass
class Run:
    """What one run measured: its settings, the tree it built and the figures of every K."""

    args: argparse.Namespace
    queries: list[dict]
    n_tools: int
    report: BuildReport
    missing: int
    head_k: int | tuple[int, ...]
    sweep: dict
    flat: dict
    seconds: float

    @property
    def head(self) -> dict:
        return self.sweep[self.head_k]


def k_text(k) -> str:
    return ",".join(map(str, k)) if isinstance(k, tuple) else str(k)


def metrics(ranked: list[str], correct: set[str]) -> dict:
    out = {}
    for n in (1, 5, 10):
        top = ranked[:n]
        hits = len(correct & set(top))
        out[f"hr@{n}"] = 1.0 if hits else 0.0
        out[f"recall@{n}"] = hits / len(correct)
    rr = next((1.0 / (i + 1) for i, t in enumerate(ranked) if t in correct), 0.0)
    out["mrr"] = rr
    dcg = sum(1.0 / math.log2(i + 2) for i, t in enumerate(ranked[:10]) if t in correct)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(correct), 10)))
    out["ndcg@10"] = dcg / ideal if ideal else 0.0
    return out


def mean_metrics(rows: list[dict]) -> dict:
    return {k: statistics.mean(r[k] for r in rows) for k in rows[0]} if rows else {}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--services", action="append", required=True, help="catalog JSON (repeat to merge)")
    p.add_argument("--queries", action="append", required=True, help="queries JSON (repeat to pool)")
    p.add_argument("--taxonomy", help="A2X taxonomy directory to use instead of the offline tree")
    p.add_argument("--k", default="5,3,2", help="K at each step for the headline figures: one value, or one per "
                   "depth, the last repeating (default 5,3,2)")
    p.add_argument("--ks", default="1,2,3,4,5", help="uniform K values for the sweep and plot (default 1,2,3,4,5)")
    p.add_argument("--top", type=int, default=10, help="tools kept from each resolution (default 10)")
    p.add_argument("--json", help="write the figures here (also .md report and .png plot beside it)")
    p.add_argument("--port", type=int, default=6355, help="port of every zone server (0: any free one)")
    p.add_argument("--subnet", default="127.0")
    p.add_argument("--overlap", type=float, default=0.9)
    p.add_argument("--child-k1", type=float, default=10.0)
    p.add_argument("--prune-ratio", type=float, default=DEFAULT_PRUNE_RATIO)
    p.add_argument("--limit", type=int, help="use only the first N queries (smoke runs)")
    p.add_argument("--scorer", default="bm25", help="scorer of every zone: bm25 (default) or llm")
    p.add_argument("--llm-model", help="with --scorer llm: the model (default $TOOLDNS_LLM_MODEL)")
    p.add_argument("--llm-base-url", help="with --scorer llm: OpenAI-compatible endpoint (default $OPENAI_BASE_URL)")
    p.add_argument("--timeout", type=float, default=2.0,
                   help="seconds the resolver waits for each reply (BM25 zones; default 2)")
    p.add_argument("--llm-budget-ms", type=float, default=5000,
                   help="with --scorer llm: per-query budget in the zones (default 5000 for benchmarking)")
    return p.parse_args()


def load_queries(paths: list[str], limit: int | None) -> list[dict]:
    """The queries of every file, pooled; a query without correct tools cannot be scored."""
    queries = [q for path in paths for q in json.loads(Path(path).read_text(encoding="utf-8"))]
    queries = [q for q in queries if q.get("correct_tools")]
    return queries[:limit] if limit else queries


def k_values(k: str, ks: str) -> tuple[int | tuple[int, ...], list]:
    """The headline K (an int, or a tuple of one K per depth) and every K to run, the headline first."""
    head_k = tuple(int(x) for x in k.split(","))
    head_k = head_k[0] if len(head_k) == 1 else head_k
    return head_k, [head_k] + [k for k in sorted({int(x) for x in ks.split(",") if x}) if k != head_k]


def build_tree(args: argparse.Namespace, zonedir: str) -> BuildReport:
    builder = None if args.taxonomy else AutoTreeBuilder(overlap=args.overlap)
    scorer_options = {}
    if args.scorer == "llm":
        scorer_options = {k: v for k, v in (("model", args.llm_model), ("base_url", args.llm_base_url),
                                            ("budget_ms", args.llm_budget_ms)) if v is not None}
    report = build(args.services, zonedir, taxonomy=args.taxonomy, builder=builder, subnet=args.subnet,
                   child_k1=args.child_k1, prune_ratio=args.prune_ratio, scorer=args.scorer,
                   scorer_options=scorer_options,
                   progress=lambda m: print(f"[build] {m}", file=sys.stderr))
    print(f"build: {report.text()}", file=sys.stderr)
    return report


def load_zones(zonedir: str) -> tuple[dict[str, int], list[str]]:
    """Documents each zone scores when visited, by origin, and the address of every zone server."""
    sizes, servers = {}, []
    for store in load_tree(zonedir):
        servers.append(store.zone.nameservers[0].address)
        z = store.zone
        # A zone with children ranks them, its own tools competing as one more candidate; a leaf ranks its tools.
        sizes[z.origin] = (len(z.children) + (1 if z.tools else 0)) if z.children else len(z.tools)
    return sizes, servers


def server_counters(servers: list[tuple[str, int]]) -> dict[str, int]:
    """Sum of every zone server's counters (``dig CH TXT stats.tooldns.``)."""
    import dns.message
    import dns.query

    total: dict[str, int] = {}
    for address, port in servers:
        reply = dns.query.udp(dns.message.make_query("stats.tooldns.", "TXT", rdclass="CH"), address, port=port,
                              timeout=10)
        for rrset in reply.answer:
            for rd in rrset:
                for item in rd.strings:
                    key, _, value = item.decode().partition("=")
                    if value.isdigit():
                        total[key] = total.get(key, 0) + int(value)
    return total


def run_queries(resolver: Resolver, queries, k, top: int, sizes: dict[str, int], n_tools: int) -> dict:
    rows, ms, qs, nbytes, packets, nodes, docs, failures = [], [], [], [], [], [], [], 0
    for q in queries:
        correct = {c["id"] for c in q["correct_tools"]}
        t0 = time.perf_counter()
        try:
            res = resolver.resolve(q["query"], k=k, service="any", top=top, leaf_k=top)
        except Exception as exc:  # counted, never hidden
            failures += 1
            print(f"  query {q['id']}: {exc}", file=sys.stderr)
            rows.append(metrics([], correct))
            continue
        ms.append((time.perf_counter() - t0) * 1000)
        ranked = []
        for t in res.tools:
            if t.id and t.id not in ranked:
                ranked.append(t.id)
        rows.append(metrics(ranked, correct))
        qs.append(res.stats.queries)
        nbytes.append(res.stats.bytes_sent + res.stats.bytes_received)
        packets.append(res.stats.packets)
        nodes.append(res.stats.nodes_visited)
        docs.append(sum(sizes.get(h.zone, 0) for h in res.trace if h.rcode == "NOERROR"))
    out = mean_metrics(rows)
    out.update({
        "k": k, "queries": len(queries), "failures": failures,
        "docs_scored_per_query": statistics.mean(docs) if docs else 0.0,
        "docs_scored_fraction": (statistics.mean(docs) / n_tools) if docs else 0.0,
        "p50_ms": statistics.median(ms) if ms else 0.0, "p99_ms": percentile(ms, 99),
        "queries_per_resolution": statistics.mean(qs) if qs else 0.0,
        "bytes_per_resolution": statistics.mean(nbytes) if nbytes else 0.0,
        "packets_per_resolution": statistics.mean(packets) if packets else 0.0,
        "nodes_per_resolution": statistics.mean(nodes) if nodes else 0.0,
    })
    return out


def measure_k(resolver: Resolver, endpoints: list[tuple[str, int]], queries, k, top: int, sizes: dict[str, int],
              n_tools: int) -> dict:
    """The figures of one K, with the LLM scorer's work per resolution read off the servers' counters."""
    before = server_counters(endpoints)
    s = run_queries(resolver, queries, k, top, sizes, n_tools)
    after = server_counters(endpoints)
    n = max(1, s["queries"])
    for key in LLM_COUNTERS:
        s[f"llm_{key}_per_resolution"] = (after.get(f"scorer_{key}", 0) - before.get(f"scorer_{key}", 0)) / n
    print(f"K={k_text(k)}: hr@10 {s['hr@10']:.3f} recall@10 {s['recall@10']:.3f} docs {s['docs_scored_fraction']:.3f} "
          f"p50 {s['p50_ms']:.1f} ms", file=sys.stderr)
    return s


def sweep_k(args: argparse.Namespace, zonedir: str, servers: list[str], ks: list, queries, sizes: dict[str, int],
            n_tools: int) -> dict:
    """Serve the tree and resolve every query once per K; the figures by K."""
    proc, root = start_servers(zonedir, args.port)
    try:
        # Glue carries addresses only, so every zone server listens on the root's port.
        endpoints = [(address, root[1]) for address in servers]
        # An LLM-scored zone may spend its whole budget before it answers.
        timeout = args.timeout if args.scorer == "bm25" else max(args.timeout, args.llm_budget_ms / 1000 * 3)
        with Resolver(root=root, cache=False, timeout=timeout) as resolver:
            resolver.resolve("warm up", k=1)  # so that no K pays for the first query's set-up
            return {k: measure_k(resolver, endpoints, queries, k, args.top, sizes, n_tools) for k in ks}
    finally:
        stop_servers(proc)


def flat_baseline(catalog, queries, top: int) -> dict:
    texts = [zone_tool(t, "x", "http").text() for t in catalog.tools]
    index = BM25(texts, k1=1.5, b=0.75)
    ids = [t.id for t in catalog.tools]
    rows = []
    for q in queries:
        ranked = [ids[i] for i, s in index.rank(q["query"], top) if s > 0]
        rows.append(metrics(ranked, {c["id"] for c in q["correct_tools"]}))
    return mean_metrics(rows)


def result_json(run: Run) -> dict:
    args, head = run.args, run.head
    copied = ("docs_scored_fraction", "docs_scored_per_query", "p50_ms", "p99_ms", "queries_per_resolution",
              "bytes_per_resolution", "packets_per_resolution", "nodes_per_resolution", "llm_calls_per_resolution",
              "llm_prompt_tokens_per_resolution", "llm_fallbacks_per_resolution")
    return {
        **{k: head[k] for k in HEADLINE_METRICS + copied},
        "scorer": args.scorer, "k": k_text(run.head_k), "top": args.top, "queries": len(run.queries),
        "failures": head["failures"], "correct_ids_not_in_catalog": run.missing,
        "flat_bm25": {k: run.flat[k] for k in HEADLINE_METRICS},
        "sweep": {k_text(k): {**v, "k": k_text(k)} for k, v in run.sweep.items()},
        "build": run.report.__dict__ | {"warnings": len(run.report.warnings)},
        "services": args.services, "query_files": args.queries, "taxonomy": args.taxonomy,
        "seconds": run.seconds,
    }


def markdown_headline(run: Run) -> list[str]:
    args, head, flat, report = run.args, run.head, run.flat, run.report
    tree = "A2X taxonomy " + args.taxonomy if args.taxonomy else "offline (tooldns build)"
    lines = [
        "# ToolDNS retrieval benchmark",
        "",
        f"Catalog: {', '.join(args.services)} ({run.n_tools} tools); queries: {', '.join(args.queries)} "
        f"({len(run.queries)}); tree: {tree}; "
        f"{report.zones} zones, depth {report.depth}. K = {k_text(run.head_k)} (per depth, from the root), "
        f"{args.top} tools asked of each leaf and kept.",
        "",
        "| metric | resolution over DNS | flat BM25 |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {key} | {head[key]:.3f} | {flat[key]:.3f} |" for key in HEADLINE_METRICS]
    lines += [
        f"| documents scored per query | {head['docs_scored_per_query']:.0f} "
        f"({head['docs_scored_fraction']:.1%} of the catalog) | {run.n_tools} (100%) |",
        f"| DNS queries / bytes / packets per resolution | {head['queries_per_resolution']:.1f} / "
        f"{head['bytes_per_resolution']:.0f} / {head['packets_per_resolution']:.1f} | |",
        f"| zones visited per resolution | {head['nodes_per_resolution']:.1f} | |",
        f"| resolution latency p50 / p99 | {head['p50_ms']:.1f} ms / {head['p99_ms']:.1f} ms | |",
    ]
    if args.scorer == "llm":
        lines.append(f"| LLM calls / prompt tokens / fallbacks per resolution | "
                     f"{head['llm_calls_per_resolution']:.1f} / {head['llm_prompt_tokens_per_resolution']:.0f} / "
                     f"{head['llm_fallbacks_per_resolution']:.2f} | |")
    return lines


def markdown_sweep(run: Run) -> list[str]:
    lines = [
        "## K sweep",
        "",
        "| K | hr@10 | recall@10 | mrr | docs scored | queries/resolution | p50 ms |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for k, s in run.sweep.items():
        lines.append(f"| {k_text(k)} | {s['hr@10']:.3f} | {s['recall@10']:.3f} | {s['mrr']:.3f} | "
                     f"{s['docs_scored_fraction']:.1%} | {s['queries_per_resolution']:.1f} | {s['p50_ms']:.1f} |")
    return lines


def markdown_report(run: Run) -> str:
    lines = markdown_headline(run) + [""] + markdown_sweep(run)
    lines += ["", f"Whole run (build included): {run.seconds:.0f} s."]
    return "\n".join(lines) + "\n"


def plot_sweep(run: Run, path: Path) -> None:
    """Hit rate@10 and the share of the catalog scored against uniform K, flat BM25 as a line."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweep, head = run.sweep, run.head
    fig, ax1 = plt.subplots(figsize=(6, 4))
    xs = [k for k in sweep if isinstance(k, int)]
    ax1.plot(xs, [sweep[k]["hr@10"] for k in xs], "o-", color="tab:blue", label="hit rate@10 (DNS)")
    ax1.axhline(run.flat["hr@10"], color="tab:blue", linestyle=":", label="hit rate@10 (flat BM25)")
    ax1.set_xlabel("K (children asked for at each step)")
    ax1.set_ylabel("hit rate@10")
    ax1.set_ylim(0, 1)
    ax2 = ax1.twinx()
    ax2.plot(xs, [sweep[k]["docs_scored_fraction"] for k in xs], "s--", color="tab:red",
             label="documents scored (share of catalog)")
    ax2.set_ylabel("documents scored per query / catalog size")
    ax2.set_ylim(0, 1)
    handles = ax1.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax1.legend(handles, [h.get_label() for h in handles], loc="center right", fontsize=8)
    ax1.set_xticks(xs)
    # A per-depth headline K is no point on the uniform-K axis: give its figures in the label instead.
    if not isinstance(run.head_k, int):
        ax1.set_xlabel(f"uniform K; headline K = {k_text(run.head_k)}: hit rate@10 {head['hr@10']:.3f}, "
                       f"{head['docs_scored_fraction']:.1%} scored")
    ax1.set_title(f"ToolDNS on {Path(run.args.services[0]).name}: {len(run.queries)} queries")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def write_reports(run: Run, result: dict, markdown: str, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, ensure_ascii=False), encoding="utf-8")
    out.with_suffix(".md").write_text(markdown, encoding="utf-8")
    try:
        plot_sweep(run, out.with_suffix(".png"))
    except ImportError:
        print("matplotlib is not installed: no plot (pip install -e '.[bench]')", file=sys.stderr)


def main() -> int:
    args = parse_args()
    t_start = time.perf_counter()
    queries = load_queries(args.queries, args.limit)
    head_k, ks = k_values(args.k, args.ks)
    with tempfile.TemporaryDirectory(prefix="tooldns-bench-") as tmp:
        zonedir = str(Path(tmp) / "zones")
        report = build_tree(args, zonedir)
        catalog = load_catalogs(args.services)
        sizes, servers = load_zones(zonedir)
        known = {t.id for t in catalog.tools}
        missing = sum(1 for q in queries for c in q["correct_tools"] if c["id"] not in known)
        sweep = sweep_k(args, zonedir, servers, ks, queries, sizes, len(catalog.tools))
    flat = flat_baseline(catalog, queries, args.top)
    run = Run(args, queries, len(catalog.tools), report, missing, head_k, sweep, flat,
              seconds=time.perf_counter() - t_start)
    markdown = markdown_report(run)
    print(markdown)
    if args.json:
        write_reports(run, result_json(run), markdown, Path(args.json))
    return 0


if __name__ == "__main__":
    sys.exit(main())
