#!/usr/bin/env python3
"""What a lazy server spends on a leaf it meets for the first time: read back from its snapshot, or
answered from its map (:mod:`tooldns.serving.mapped`), step by step, against a second answer.

For --leaves leaves drawn from a built tree (BM25 or hybrid; a hybrid leaf is asked with each intent's
vector, made with the model its zone names, as a resolver sends it), each made once as a
loading process makes it (its snapshot and map kept in a scratch directory), then, in this process,
with the server's own functions: the zone file read and hashed to find its snapshot, the snapshot
read, unpickled, its first and second answers by the fast path; the map opened, its first answer, the
mean of three more. Every answer of the map is checked against the zone's own (the same bytes).
Prints the median and 90th percentile of each step::

    python scripts/bench/bench_leaf.py /tmp/b1m --queries /tmp/synth1m.queries.json --leaves 40
    python scripts/bench/bench_leaf.py /tmp/tr-bm25 --queries ../shared/data/toolret/queries.dev.en.json

The files are read from the page cache (the first pass over the leaves, making them, reads them all).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import dns.edns  # noqa: E402

from resolver_client.message import make_query, opt_record  # noqa: E402
from tooldns.embedding.registry import shared_embedder  # noqa: E402
from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent  # noqa: E402
from tooldns.protocol.vector import VECTOR_OPTION_CODE, encode_vector  # noqa: E402
from tooldns.serving.fast.path import FastPath  # noqa: E402
from tooldns.serving.loader import (_read_snapshot, _snapshot_name, map_path, open_trusted, prepare,  # noqa: E402
                                    unpickle_pieces)
from tooldns.serving.mapped import LeafMap, MappedFastPath  # noqa: E402
from tooldns.serving.resolver import StaticSource  # noqa: E402
from tooldns.zone.limits import ZoneLimits  # noqa: E402
from tooldns.zone.zonefile import read_zone_file, stat_stamp, zone_files  # noqa: E402

STEPS = ("read and hash the file", "read the snapshot", "unpickle it", "first answer", "second answer",
         "open the map", "its first answer", "its next answers")


def _queries(origin: str, intents: list[str], spec: str | None = None) -> list[bytes]:
    """Intent searches of *origin*; with the embedder *spec* (a hybrid leaf's), each with its intent's
    vector, as a resolver with the tree's model sends them (a map answers only those)."""
    def options(q: str) -> list:
        intent = dns.edns.GenericOption(INTENT_OPTION_CODE, encode_intent(q, 6))
        if spec is None:
            return [intent]
        embedder = shared_embedder(spec)
        return [dns.edns.GenericOption(VECTOR_OPTION_CODE, encode_vector(embedder.model, embedder.embed_query(q))),
                intent]

    return [make_query(f"_any._tcp.{origin}", opt_record(options(q)), msg_id=1) for q in intents]


def measure(path: Path, snapshots: Path, intents: list[str], times: dict[str, list[float]]) -> bool:
    """One leaf's steps timed into *times*; whether its map answered every query as the zone did."""
    limits, clock = ZoneLimits(), time.perf_counter
    t0 = clock()
    data, st = read_zone_file(path, limits)
    name = _snapshot_name(data, limits)
    t1 = clock()
    blob = _read_snapshot(snapshots / name)
    t2 = clock()
    zone, index = unpickle_pieces(blob)
    whole = FastPath(StaticSource(index), INTENT_OPTION_CODE, {"queries": 0, "trimmed": 0})
    queries = _queries(zone.origin, intents, zone.settings.embed_intents or None)
    t3 = clock()
    expected = [whole.answer(queries[0], True)]
    t4 = clock()
    expected.append(whole.answer(queries[1], True))
    t5 = clock()
    leaf = LeafMap.open(map_path(snapshots, str(path), stat_stamp(st), limits), open_trusted)
    mapped = MappedFastPath(leaf, INTENT_OPTION_CODE, {"queries": 0, "trimmed": 0})
    t6 = clock()
    got = [mapped.answer(queries[0], True)]
    t7 = clock()
    got += [mapped.answer(q, True) for q in queries[1:]]
    t8 = clock()
    expected += [whole.answer(q, True) for q in queries[2:]]
    for step, seconds in zip(STEPS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t7 - t6, (t8 - t7) / 3)):
        times[step].append(seconds * 1000)
    return got == expected


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tree", help="a built tree's directory")
    ap.add_argument("--queries", required=True, help="queries JSON: [{query: ...}, ...]")
    ap.add_argument("--leaves", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    intents = [q["query"] for q in json.loads(Path(args.queries).read_text())]
    leaves = [p for p in zone_files(args.tree) if p.name != "root.yaml"]
    leaves = rng.sample(leaves, min(args.leaves, len(leaves)))
    snapshots = Path(tempfile.mkdtemp(prefix="bench-leaf-"))
    os.chmod(snapshots, 0o700)
    times: dict[str, list[float]] = {step: [] for step in STEPS}
    same = 0
    for path in leaves:
        prepare(str(path), ZoneLimits(), str(snapshots), str(snapshots))
        same += measure(path, snapshots, rng.sample(intents, 4), times)
    sizes = sorted(p.stat().st_size for p in snapshots.glob("*.map"))
    print(f"{len(leaves)} leaves, maps of median {statistics.median(sizes) / 1000:.0f} kB; "
          f"the map answered as the zone for {same} of them")
    for step, values in times.items():
        values.sort()
        print(f"  {step:<24} median {statistics.median(values):7.3f} ms   p90 {values[int(len(values) * 0.9)]:7.3f} ms")


if __name__ == "__main__":
    main()
