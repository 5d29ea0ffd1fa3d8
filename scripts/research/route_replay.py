#!/usr/bin/env python3
"""One-off research (2026-12-04): how a hybrid root should rank its children, replayed in-process.

Builds ToolRet's tree with the default embedder (vectors cached in --embed-cache), then, for each half
of the dev queries, the root route recall at K (the share of queries with a correct tool under one of
the root's K best children), ranking children as the root's own hybrid scorer does, with BM25's share
for children (``alpha``) from 0.3 to 0.6, by their best facet (as zones rank them since 2026-12-04)
or by whole summaries (before). Kept in the history, not maintained.

    python scripts/research/route_replay.py --embed-cache /tmp/embcache --lang en
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # bench_retrieval
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchlib import DATA, CachedEmbedder  # noqa: E402
from bench_retrieval import in_half  # noqa: E402
from tooldns.building.build import build  # noqa: E402
from tooldns.embedding import make_embedder  # noqa: E402
from tooldns.protocol.vector import decode_vector, encode_vector  # noqa: E402
from tooldns.scoring import hybrid  # noqa: E402
from tooldns.serving.index import ZoneIndex  # noqa: E402
from tooldns.zone.zonefile import load_zone  # noqa: E402


def route_recall(root, queries, vectors, leaves_of, ks) -> dict[int, float]:
    index = ZoneIndex(root)
    children = index.child_candidates
    found = dict.fromkeys(ks, 0)
    for q, v in zip(queries, vectors):
        ranking = children.scorer.rank(q["query"], max(ks), decode_vector(encode_vector(index.model, v)))
        chosen = [children.entries[i].name.lower() for i, _ in ranking.items]
        wanted = set().union(*(leaves_of.get(c["id"], set()) for c in q["correct_tools"]))
        for k in ks:
            found[k] += bool(wanted & set(chosen[:k]))
    return {k: round(n / len(queries), 3) for k, n in found.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--embed-cache", required=True)
    p.add_argument("--lang", default="en")
    p.add_argument("--ks", default="5,6,7,8")
    args = p.parse_args()
    embedder = CachedEmbedder(make_embedder("e5"), args.embed_cache)
    ks = [int(k) for k in args.ks.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        build([DATA / f"services.{args.lang}.json"], tmp, embed=embedder)
        root = load_zone(Path(tmp) / "root.yaml")
        mapping = json.loads((Path(tmp) / "catalog-map.json").read_text(encoding="utf-8"))
    leaves_of = {tid: {o.lower().split(".", 3)[3] for o in owners} for tid, owners in mapping.items()}
    queries = json.loads((DATA / f"queries.dev.{args.lang}.json").read_text(encoding="utf-8"))
    whole_rank = hybrid.HybridScorer.rank

    def by_whole_summaries(self, intent, k, vector=None):
        facets, self.facets = self.facets, None
        try:
            return whole_rank(self, intent, k, vector)
        finally:
            self.facets = facets

    for half in ("even", "odd"):
        kept = [q for q in queries if in_half(q["id"], half)]
        vectors = embedder.embed_queries([q["query"] for q in kept])
        for how, rank in (("best facet", whole_rank), ("whole summaries", by_whole_summaries)):
            hybrid.HybridScorer.rank = rank
            for alpha in (0.3, 0.4, 0.5, 0.6):
                options = {**root.settings.child_scorer_options, "alpha": alpha}
                zone = dataclasses.replace(root, settings=dataclasses.replace(root.settings, child_scorer_options=options))
                print(f"{args.lang} {half} half, children by {how}, alpha {alpha}: route recall at K "
                      f"{route_recall(zone, kept, vectors, leaves_of, ks)}", flush=True)
        hybrid.HybridScorer.rank = whole_rank
    return 0


if __name__ == "__main__":
    sys.exit(main())
