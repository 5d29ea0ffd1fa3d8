#!/usr/bin/env python3
"""One-off research (2026-12-04): flat search over a whole catalog, to choose how vectors are fused and
how example intents are learned from, before building trees. Kept in the history, not maintained.

For each language, each held-out half of the dev queries (the other half's queries are the examples):
flat hit rate@10 of

* BM25, dense and hybrid (min-max per query, BM25's weight 0.4: the benchmark's flat hybrid), for the
  model's own vectors, raw and centred on the catalog's mean tool vector, and the fusion the product
  uses (each part over its largest, floor 0) on centred cosines;
* example intents learned three ways: the vector map (tooldns.embedding.vectormap, its defaults),
  each tool's vector moved towards its examples' (Rocchio, beta 1), and the examples added to the
  tools' BM25 text; split into queries whose correct tool had examples (seen) and the others.

    python scripts/research/flat_examples.py --embed e5 --embed-cache /tmp/embcache
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # bench_retrieval
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchlib import DATA, CachedEmbedder  # noqa: E402
from bench_retrieval import in_half  # noqa: E402
from tooldns.building.build import zone_tool  # noqa: E402
from tooldns.building.catalog import load_catalogs  # noqa: E402
from tooldns.embedding import make_embedder  # noqa: E402
from tooldns.embedding.vectormap import fit  # noqa: E402
from tooldns.scoring.bm25 import BM25  # noqa: E402


def hits(scores: np.ndarray, correct: list[list[int]], top: int = 10) -> np.ndarray:
    ranked = np.argsort(-scores, axis=1, kind="stable")[:, :top]
    return np.array([bool(set(c) & set(r)) for c, r in zip(correct, ranked.tolist())])


def min_max(x: np.ndarray) -> np.ndarray:
    lo, hi = x.min(1, keepdims=True), x.max(1, keepdims=True)
    return (x - lo) / np.where(hi > lo, hi - lo, 1)


def flat_hybrid(bm25, cos, w=0.4):
    return w * min_max(bm25) + (1 - w) * min_max(cos)


def product_fusion(bm25, cos, w=0.4):
    scaled = lambda x: x / np.maximum(x.max(1, keepdims=True), 1e-12)  # noqa: E731
    return w * scaled(bm25) + (1 - w) * scaled(cos)


def centred(tools: np.ndarray, intents: np.ndarray) -> np.ndarray:
    """Cosines less each intent's cosine with the catalog's mean tool vector (what zones compute)."""
    return intents @ tools.T - (intents @ tools.mean(0))[:, None]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--embed", default="e5")
    p.add_argument("--embed-cache", required=True)
    p.add_argument("--langs", default="en,zh")
    args = p.parse_args()
    embedder = CachedEmbedder(make_embedder(args.embed), args.embed_cache)
    for lang in args.langs.split(","):
        catalog = load_catalogs([DATA / f"services.{lang}.json"])
        tools = [zone_tool(t, "x", "http") for t in catalog.tools]
        position = {t.id: i for i, t in enumerate(tools)}
        queries = json.loads((DATA / f"queries.dev.{lang}.json").read_text(encoding="utf-8"))
        correct = [[position[c["id"]] for c in q["correct_tools"] if c["id"] in position] for q in queries]
        texts = [q["query"] for q in queries]
        index = BM25([t.text() for t in tools], k1=1.5, b=0.75)
        bm25 = np.array([index.scores(x) for x in texts])
        d = np.asarray(embedder.embed([t.embedding_text() for t in tools]), dtype=np.float32)
        q = np.asarray(embedder.embed_queries(texts), dtype=np.float32)
        even = np.array([in_half(x["id"], "even") for x in queries])
        raw = q @ d.T
        print(f"{lang} {embedder.model}: all queries: BM25 {hits(bm25, correct).mean():.3f}, dense "
              f"{hits(raw, correct).mean():.3f}, flat hybrid {hits(flat_hybrid(bm25, raw), correct).mean():.3f}; the "
              f"product's fusion on raw cosines {hits(product_fusion(bm25, raw), correct).mean():.3f}, on centred "
              f"{hits(product_fusion(bm25, centred(d, q)), correct).mean():.3f}")
        for name, fitted in (("even", even), ("odd", ~even)):
            test = ~fitted
            pairs = [(i, t) for i in np.flatnonzero(fitted) for t in correct[i]]
            seen_tools = {t for _, t in pairs}
            seen = np.array([bool(set(c) & seen_tools) for c in correct])
            examples: dict[int, list[int]] = {}
            for i, t in pairs:
                examples.setdefault(t, []).append(i)
            mapped = fit(embedder.model, d, q[[i for i, _ in pairs]], [t for _, t in pairs]).apply(d)
            rocchio = d.copy()
            for t, rows in examples.items():
                v = d[t] + q[rows].mean(0)
                rocchio[t] = v / np.linalg.norm(v)
            with_examples = BM25([t.text() + " " + " ".join(texts[i] for i in examples.get(n, []))
                                  for n, t in enumerate(tools)], k1=1.5, b=0.75)
            as_text = np.array([with_examples.scores(x) for x in texts])
            rows = {"none": product_fusion(bm25, centred(d, q)),
                    "vector map": product_fusion(bm25, centred(mapped, q)),
                    "Rocchio": product_fusion(bm25, centred(rocchio, q)),
                    "as BM25 text": product_fusion(as_text, centred(d, q))}
            for label, scores in rows.items():
                h = hits(scores, correct)
                print(f"  {lang} examples of the {name} half, scored on the other: {label:12s} {h[test].mean():.3f} "
                      f"(seen {h[test & seen].mean():.3f} of {(test & seen).sum()}, unseen {h[test & ~seen].mean():.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
