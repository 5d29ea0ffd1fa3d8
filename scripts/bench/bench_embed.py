#!/usr/bin/env python3
"""How fast an embedder makes the vectors of a catalog's tools: what a hybrid build of a large catalog costs.

Embeds the texts ``tooldns build`` embeds (each tool's name and description, as a zone holds it) of the
first --count tools of CATALOG with the embedder --embed names (``e5``, the build's default; ``minilm``;
``hash`` for a check), after a few texts to load it, in the build's own chunks, and prints the tools a
second and what a thousand, a hundred thousand and a million tools would take at that rate::

    python scripts/bench/bench_embed.py /tmp/synth1m.json --embed e5 --count 1000
    python scripts/bench/bench_embed.py ../shared/data/toolret/services.en.json --embed minilm --count 2000
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tooldns.building.build import duration_text, embed_in_chunks, zone_tool  # noqa: E402
from tooldns.building.catalog import load_catalogs  # noqa: E402
from tooldns.embedding.registry import make_embedder  # noqa: E402


def tool_texts(catalog: str, count: int) -> list[str]:
    """The embedding texts of the first *count* tools of the catalog file *catalog*."""
    entries = json.loads(Path(catalog).read_text(encoding="utf-8"))[:count]
    with tempfile.TemporaryDirectory() as tmp:
        part = Path(tmp) / "catalog.json"
        part.write_text(json.dumps(entries), encoding="utf-8")
        return [zone_tool(t, "x", "http").embedding_text() for t in load_catalogs([str(part)]).tools]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("catalog", help="a catalog file (JSON list of tools, as tooldns build reads)")
    p.add_argument("--embed", default="e5", help="the embedder's spec (default e5, the build's)")
    p.add_argument("--count", type=int, default=1000, help="tools embedded (default 1000)")
    args = p.parse_args()
    texts = tool_texts(args.catalog, args.count)
    embedder = make_embedder(args.embed)
    embedder.embed(texts[:8])  # loaded and warm
    t0 = time.perf_counter()
    vectors = embed_in_chunks(embedder, texts, lambda _: None)
    seconds = time.perf_counter() - t0
    rate = len(texts) / seconds
    print(f"{embedder.model}: {len(vectors)} tool texts (median {statistics.median(map(len, texts)):.0f} characters) "
          f"in {seconds:.1f} s, {rate:.0f} a second; at that rate 1,000 tools take {duration_text(1e3 / rate)}, "
          f"100,000 {duration_text(1e5 / rate)}, 1,000,000 {duration_text(1e6 / rate)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
