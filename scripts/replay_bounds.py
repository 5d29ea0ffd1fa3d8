#!/usr/bin/env python3
"""Could a root that bounds its children's best tools route a BM25 tree as well as flat BM25?

A replay, without the network, of two-level trees built by ``tooldns build`` (a root whose children
are leaves): each leaf's tools scored in-process by the leaf's own scorer (the catalog's global
statistics, so every score is the tool's flat BM25 score), and the root's children ranked by an
upper bound of their best tool's score, as block-max indexes bound a block of documents: for each
word of the intent, the largest weight any tool of a group gives it, summed; a child's bound is the
largest of its groups' (groups of --groups consecutive tools in the leaf's order; 0 is the whole
child as one group, 1 each tool alone, which makes the root a flat index).

Two walks are replayed on each tree:

* rank-safe: children visited in the order of their bounds until the tenth best tool found scores
  at least the next child's bound; the ten tools are then flat BM25's (tools tied at the tenth place
  aside: the line says on how many queries the ten scores are flat BM25's). Printed: leaves visited a query (mean, most), the share of the catalog scored as
  ``bench_retrieval.py`` counts it (the root's children and the visited leaves' tools), and the
  groups the root compares;
* with ``--cross-validate``: fixed K with a prune ratio (``K``), and the same visit that stops once
  the tenth tool scores F times the next bound after at most M children (``stop``), every setting
  chosen on one half of the queries by the mean hit rate@10 over the trees given (within
  ``--max-queries`` DNS queries and ``--max-scored`` of the catalog) and reported on the other;
  the root's own ranking by its best facet (``facet``, today's) is replayed beside them.

    for s in 0 1 2 3; do tooldns build ../shared/data/toolret/services.en.json --out /tmp/trs$s --seed $s; done
    python scripts/replay_bounds.py /tmp/trs0 /tmp/trs1 /tmp/trs2 /tmp/trs3 \\
        --queries ../shared/data/toolret/queries.dev.en.json --cross-validate
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_retrieval import in_half, load_queries  # noqa: E402
from tooldns.scoring.tokenize import tokenize  # noqa: E402
from tooldns.serving.tree import load_tree  # noqa: E402

TOP = 10


@dataclass
class Replayed:
    """One tree's replay material: per query, each leaf's ten best tools and each grouping's bounds."""

    sizes: list[int]  # tools of each leaf, in the root's order of children
    n_tools: int  # distinct catalog tools
    tops: list[list[list[tuple[str, float]]]]  # query -> leaf -> (catalog id, score), best first
    bounds: dict[int, np.ndarray]  # group size -> (queries x leaves) bounds
    facet: np.ndarray  # (queries x leaves): the root's own score of each child (its best facet)
    groups: dict[int, int]  # group size -> groups the root would compare
    correct: list[set[str]]
    even: list[bool]


def tool_lists(index) -> dict:
    """Each candidate set of a leaf, the largest one (what a resolver asking for any service reads)."""
    return max(index.tool_candidates.values(), key=lambda c: len(c.entries))


def prepare(tree: str, queries: list[dict], sizes: list[int]) -> Replayed:
    by = {store.index.origin: store for store in load_tree(tree)}
    root = min(by, key=lambda o: len(o.rstrip(".").split(".")))
    children = by[root].index.child_candidates
    if children.scorer.__class__.__name__ != "BM25Scorer" or any(by[c.name].zone.children for c in children.entries):
        raise SystemExit(f"{tree}: a two-level BM25 tree is needed (a root whose children are all leaves)")
    mapping = json.loads((Path(tree) / "catalog-map.json").read_text(encoding="utf-8"))
    owners = {o.lower(): tid for tid, os_ in mapping.items() for o in os_}
    leaves = [(by[c.name].index, tool_lists(by[c.name].index)) for c in children.entries]
    n_leaves = len(leaves)
    bounds = {g: np.zeros((len(queries), n_leaves)) for g in sizes}
    facet = np.zeros((len(queries), n_leaves))
    tops = []
    facets = children.scorer.facets
    for qi, q in enumerate(queries):
        text = q["query"]
        if facets is not None:
            np.maximum.at(facet[qi], np.asarray(facets.owners), np.asarray(facets.index.scores(text), dtype=float))
        else:
            for i, s in children.scorer.rank(text, n_leaves).items:
                facet[qi, i] = s
        words = tokenize(text)
        row = []
        for li, (ix, cands) in enumerate(leaves):
            ranked = cands.scorer.rank(text, TOP).items
            row.append([(owners[cands.entries[i].owner(ix.origin).lower()], s) for i, s in ranked if s > 0])
            index = cands.scorer.index
            n = len(cands.entries)
            weights = np.array([index.scores_tokens([w]) for w in words]).reshape(len(words), n)
            for g in sizes:
                size = n if g == 0 else g
                padded = np.pad(weights, ((0, 0), (0, (-n) % size)))
                bounds[g][qi, li] = padded.reshape(len(words), -1, size).max(axis=2).sum(axis=0).max(initial=0.0)
        tops.append(row)
    leaf_sizes = [len(c.entries) for _, c in leaves]
    groups = {g: sum(-(-n // (n if g == 0 else g)) for n in leaf_sizes) for g in sizes}
    return Replayed(leaf_sizes, len(mapping), tops, bounds, facet, groups,
                    [{str(c["id"]) for c in q["correct_tools"]} for q in queries],
                    [in_half(q["id"], "even") for q in queries])


def merged(r: Replayed, qi: int, leaves) -> dict[str, float]:
    """The tools of *leaves*, each once at its best score."""
    out: dict[str, float] = {}
    for li in leaves:
        for tid, s in r.tops[qi][li]:
            out[tid] = max(s, out.get(tid, 0.0))
    return out


def ten(r: Replayed, qi: int, leaves) -> list[str]:
    """The ten best tools of *leaves*, merged by score (ties by id)."""
    tools = merged(r, qi, leaves)
    return sorted(tools, key=lambda t: (-tools[t], t))[:TOP]


def ten_scores(r: Replayed, qi: int, leaves) -> list[float]:
    """The scores of :func:`ten`: the same for two sets of leaves that differ only in tools tied at the tenth."""
    return sorted(merged(r, qi, leaves).values(), reverse=True)[:TOP]


def found(r: Replayed, qi: int, leaves: list[int]) -> bool:
    """Whether the ten best tools of *leaves* hold a correct one."""
    return bool(r.correct[qi] & set(ten(r, qi, leaves)))


def order(scores: np.ndarray) -> list[int]:
    return [i for i in sorted(range(len(scores)), key=lambda i: (-scores[i], i)) if scores[i] > 0]


def fixed_k(r: Replayed, qi: int, scores: np.ndarray, k: int, prune: float) -> list[int]:
    ranked = order(scores)[:k]
    return [i for i in ranked if scores[i] >= prune * scores[ranked[0]]] if ranked else []


def stopping(r: Replayed, qi: int, scores: np.ndarray, stop: float, most: int, least: int = 0) -> list[int]:
    """Children visited in the order of their bounds until the tenth best tool found scores at least
    *stop* x the next bound (1: rank-safe), at least *least* and at most *most* of them."""
    visited: list[int] = []
    best: dict[str, float] = {}
    for i in order(scores)[:most]:
        tenth = sorted(best.values(), reverse=True)[TOP - 1] if len(best) >= TOP else None
        if len(visited) >= least and tenth is not None and tenth >= stop * scores[i]:
            break
        visited.append(i)
        for tid, s in r.tops[qi][i]:
            best[tid] = max(s, best.get(tid, 0.0))
    return visited


def figures(r: Replayed, walk, half: str = "all") -> tuple[float, float, float]:
    """Hit rate@10, share of the catalog scored (children and visited tools) and DNS queries."""
    hits, scored, asked = [], [], []
    for qi in range(len(r.tops)):
        if half != "all" and r.even[qi] != (half == "even"):
            continue
        leaves = walk(qi)
        hits.append(found(r, qi, leaves))
        scored.append(len(r.sizes) + sum(r.sizes[i] for i in leaves))
        asked.append(1 + len(leaves))
    return float(np.mean(hits)), float(np.mean(scored)) / r.n_tools, float(np.mean(asked))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trees", nargs="+", help="directories of two-level trees built by tooldns build")
    p.add_argument("--queries", required=True, help="queries JSON with correct_tools")
    p.add_argument("--groups", default="1,2,4,6,8,16,0", help="group sizes (0: the whole child)")
    p.add_argument("--cross-validate", action="store_true", help="choose settings on one half, report the other")
    p.add_argument("--max-queries", type=float, default=12.0)
    p.add_argument("--max-scored", type=float, default=0.15)
    args = p.parse_args()
    queries = load_queries([args.queries], None)
    sizes = [int(g) for g in args.groups.split(",")]
    trees = [prepare(t, queries, sizes) for t in args.trees]
    for name, r in zip(args.trees, trees):
        flat = figures(r, lambda qi: list(range(len(r.sizes))))[0]
        print(f"{name}: {len(r.sizes)} leaves, {r.n_tools} tools; flat BM25 hit rate@10 {flat:.4f}")
        for g in sizes:
            walks = [stopping(r, qi, r.bounds[g][qi], 1.0, len(r.sizes)) for qi in range(len(r.tops))]
            visits = [len(w) for w in walks]
            same = sum(ten_scores(r, qi, w) == ten_scores(r, qi, range(len(r.sizes))) for qi, w in enumerate(walks))
            hit, scored, _ = figures(r, lambda qi: walks[qi])
            print(f"  rank-safe, groups of {g or 'a whole child'}: hit rate@10 {hit:.4f}, {np.mean(visits):.2f} leaves "
                  f"a query ({max(visits)} at most), {scored:.1%} of the catalog scored, "
                  f"the root comparing {r.groups[g]} groups; flat BM25's ten scores on {same} of {len(walks)} queries")
    if not args.cross_validate:
        return 0
    settings = [("facet", None, ("K", k, prune)) for k in range(5, 11) for prune in (0.1, 0.25, 0.4, 0.5)]
    settings += [("bound", g, ("K", k, prune)) for g in sizes for k in range(5, 11) for prune in (0.1, 0.25, 0.4, 0.5)]
    settings += [("bound", g, ("stop", stop, most)) for g in sizes for stop in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
                 for most in (6, 8, 10, 12, 15, 20)]
    # the root's best facet is no bound, but an estimate on another scale: K children at least, then more
    # while the next one's facet times F outscores the tenth tool found
    settings += [("facet", None, ("stop", stop, most, least)) for stop in (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
                 for most in (8, 10, 12) for least in (4, 5, 6, 7)]

    def walk_of(r: Replayed, kind, g, how):
        def walk(qi):
            scores = r.facet[qi] if kind == "facet" else r.bounds[g][qi]
            return fixed_k(r, qi, scores, how[1], how[2]) if how[0] == "K" else stopping(r, qi, scores, *how[1:])
        return walk

    results = {}
    for (kind, g, how), half in itertools.product(settings, ("even", "odd")):
        per = [figures(r, walk_of(r, kind, g, how), half) for r in trees]
        results[kind, g, how, half] = [float(np.mean([x[j] for x in per])) for j in range(3)] + [[x[0] for x in per]]
    for choose, report in (("even", "odd"), ("odd", "even")):
        flat = np.mean([figures(r, lambda qi, r=r: list(range(len(r.sizes))), report)[0] for r in trees])
        allowed = [(key, v) for key, v in results.items()
                   if key[3] == choose and v[1] <= args.max_scored and v[2] <= args.max_queries]
        allowed.sort(key=lambda kv: (-kv[1][0], kv[1][1]))
        print(f"chosen on the {choose} half, reported on the {report} (flat BM25 there {flat:.4f}):")
        shown = set()
        for (kind, g, how, _), v in allowed:
            family = (kind, how[0])
            if family in shown:
                continue
            shown.add(family)
            held = results[kind, g, how, report]
            what = "best facet" if kind == "facet" else f"bounds of groups of {g or 'a whole child'}"
            least = f" at least {how[3]}" if len(how) > 3 else ""
            print(f"  {what}, {how[0]} {how[1]} {'prune' if how[0] == 'K' else 'at most'} {how[2]}{least}: "
                  f"{v[0]:.4f} chosen -> {held[0]:.4f} held out ({', '.join(f'{h:.4f}' for h in held[3])}), "
                  f"{held[1]:.1%} scored, {held[2]:.1f} queries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
