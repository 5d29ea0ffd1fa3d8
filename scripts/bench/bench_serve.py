#!/usr/bin/env python3
"""What serving a tree costs: ``tooldns serve`` start time and memory, then resolutions against it.

Starts ``tooldns serve ZONES`` in its own process (rate limiting off) and prints the seconds until
it answers (the "root zone on ..." line) and its resident memory (VmRSS), then resolves --count
queries of a queries file with the resolver library (client cache off, --k from the root, 5,3,2
unless told, --leaf-k tools asked of each leaf, the defaults of ``scripts/bench/bench_retrieval.py``) and
prints the p50 and p99 milliseconds, DNS queries, bytes and TCP queries per resolution, the memory
after, and the hit rate@10 when the queries name their correct tools (``correct_tools``), with the
route recall of a built tree (its ``catalog-map.json``: the share of those queries for which a correct
tool was in a zone the walk had tools from, so that the rest were lost by ranking, not routing).
--settle waits before resolving, so that a large tree's parents finish their first polls of their
children's serials (docs/summaries.md) before the clock runs. --serve-args passes more arguments
to ``tooldns serve`` (a tree served lazily, docs/performance.md); --passes resolves that many
batches of --count different queries (--same: the same ones), each with its figures (the first
batch of a lazy tree loads the zones it reaches; --distinct makes up the queries a file lacks, as
intents spliced from two of its own). --beam bounds the zones asked at each depth (the
resolver's ``beam``; by default the resolver's own, 6 or the root's K when larger; --no-beam: none);
--pages the follow-up pages a resolution may ask (the resolver's ``pages``; by default the published
walk's), each resolution's share of its DNS queries printed beside them.
--reference DIR serves a second tree (on --port + 1; ToolRet's built tree, say) and resolves its
queries in turn with ZONES's, one each (walked at --reference-k, 5,3,2, with the resolver's default
beam, which a tree of two levels never meets; the same --leaf-k), and prints the ratio of the two p50s per pass: the machine's speed, which drifts during a run on a
shared virtual machine, then weighs on both alike::

    python scripts/bench/bench_serve.py /tmp/b100k --queries /tmp/synth100k.queries.json --settle 25
    python scripts/bench/bench_serve.py built-en --queries ../shared/data/toolret/queries.dev.en.json
    python scripts/bench/bench_serve.py /tmp/b1m --queries /tmp/synth1m.queries.json \\
        --serve-args "--lazy --listen 127.0.0.1 --max-loaded 20000 --answer-cache 0" --passes 2 --same \\
        --beam 6 --reference built-en
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))  # benchlib

from benchlib import DATA, distinct_intents, start_servers, stop_servers  # noqa: E402
from resolver_client import Resolver  # noqa: E402
from resolver_client.cli import walk_beam  # noqa: E402
from resolver_client.walk import AUTO_BEAM  # noqa: E402
from tooldns.building.update import _owner_parts  # noqa: E402


def rss_mib(pid: int) -> int:
    return _status_mib(pid, "VmRSS:")


def _status_mib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        return int(next(line for line in fh if line.startswith(field)).split()[1]) // 1024


def rss_text(pid: int) -> str:
    """The resident memory of process *pid*, and how much of it are pages of files it mapped (leaf maps,
    and the interpreter's libraries: the kernel's page cache, dropped under pressure, shared by workers)."""
    return f"RSS {rss_mib(pid)} MiB ({_status_mib(pid, 'RssFile:')} of files mapped)"


def tool_zones(zones: str) -> dict[str, set[str]]:
    """The zones holding each catalog tool of the tree built in *zones* (its ``catalog-map.json``: a tool's
    owner names, read as ``tooldns build --update`` reads them); empty for a tree without one."""
    path = Path(zones) / "catalog-map.json"
    if not path.is_file():
        return {}
    return {tool: {_owner_parts(owner)[0].lower() for owner in owners}
            for tool, owners in json.loads(path.read_text(encoding="utf-8")).items()}


class Figures:
    """One tree's resolutions of one pass; with *owners* (:func:`tool_zones`), route recall as well."""

    def __init__(self, owners: dict[str, set[str]] | None = None) -> None:
        self.ms, self.queries, self.size, self.tcp, self.hits, self.pages = [], [], [], [], [], []
        self.owners, self.reached = owners or {}, []

    def resolve(self, resolver: Resolver, q: dict, k: tuple[int, ...] | None, leaf_k: int) -> None:
        res = resolver.resolve(q["query"], k=k, leaf_k=leaf_k if k is not None else None, top=10)
        correct = {str(c["id"]) for c in q.get("correct_tools", [])}
        if correct:
            self.hits.append(bool(correct & {t.id for t in res.tools}))
        if correct and self.owners:  # a correct tool in a zone the walk had tools from: the route did not lose it
            answered = {hop.zone.lower() for hop in res.trace if hop.tools}
            self.reached.append(any(self.owners.get(c, set()) & answered for c in correct))
        self.ms.append(res.stats.ms)
        self.queries.append(res.stats.queries)
        self.size.append(res.stats.bytes_sent + res.stats.bytes_received)
        self.tcp.append(sum(1 for hop in res.trace if hop.transport == "tcp"))
        self.pages.append(res.stats.pages)

    def line(self, count: int, rss: str) -> str:
        ms = sorted(self.ms)
        hit_rate = f"; hit rate@10 {sum(self.hits) / len(self.hits):.3f} over {len(self.hits)}" if self.hits else ""
        if self.reached:
            hit_rate += (f", route recall {sum(self.reached) / len(self.reached):.3f} (a correct tool in a zone "
                         f"the walk had tools from)")
        return (f"{count} resolutions: p50 {statistics.median(ms):.1f} ms, p99 {ms[int(len(ms) * 0.99)]:.1f} ms; "
                f"per resolution {statistics.mean(self.queries):.2f} DNS queries ({statistics.mean(self.pages):.2f} of "
                f"them follow-up pages), {statistics.mean(self.size):.0f} bytes, {statistics.mean(self.tcp):.2f} over "
                f"TCP; {rss} after{hit_rate}")


def batches(path: str, args) -> list[list[dict]]:
    every = json.load(open(path, encoding="utf-8"))
    if args.distinct:  # the file's queries, then intents spliced from two of them up to what the passes take
        known = {q["query"]: q for q in every}
        wanted = args.count * (1 if args.same else args.passes)
        every = [known.get(text, {"query": text}) for text in distinct_intents(list(known), wanted)]
    return [every[:args.count] if args.same else every[n * args.count:(n + 1) * args.count]
            for n in range(args.passes)]


@dataclass
class Served:
    """A tree being measured: its server process, its batches of queries and how it is walked."""

    name: str
    proc: subprocess.Popen
    batches: list[list[dict]]
    resolver: Resolver
    k: tuple[int, ...] | None  # None: the walk the tree publishes
    owners: dict[str, set[str]]  # the zones of each tool (tool_zones): route recall


def run_pass(n: int, args, trees: list[Served]) -> None:
    """Pass *n*: each query of the batch resolved on every tree in turn (the reference's first), so
    that a change of the machine's speed during the pass weighs on both trees alike."""
    figures = [Figures(t.owners) for t in trees]
    for i in range(max(len(t.batches[n]) for t in trees)):
        for tree, fig in zip(trees, figures):
            if i < len(tree.batches[n]):
                fig.resolve(tree.resolver, tree.batches[n][i], tree.k, args.leaf_k)
    prefix = "" if args.passes == 1 else f"pass {n + 1}: "
    for tree, fig in zip(trees, figures):
        label = f"[{tree.name}] " if len(trees) > 1 else ""
        text = fig.line(len(tree.batches[n]), rss_text(tree.proc.pid)) if fig.ms else "no queries left for this pass"
        print(f"{prefix}{label}{text}", flush=True)
    if len(trees) > 1 and all(fig.ms for fig in figures):
        mine, ref = statistics.median(figures[-1].ms), statistics.median(figures[0].ms)
        print(f"{prefix}p50 {mine:.1f} ms against the reference's {ref:.1f} ms: {mine / ref:.2f}x", flush=True)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("zones")
    ap.add_argument("--queries", required=True, help="queries JSON: [{query: ...}, ...]")
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--port", type=int, default=5390)
    ap.add_argument("--leaf-k", type=int, default=6)
    ap.add_argument("--k", default="5,3,2", help="K at each step from the root (default 5,3,2; 'published': the walk "
                    "the tree publishes, K and tools a leaf, as a resolver told nothing walks it)")
    ap.add_argument("--beam", type=int, default=None, help="at most this many zones asked a depth (the resolver's beam; "
                    "default the resolver's: 6, or the root's K when larger)")
    ap.add_argument("--pages", type=int, default=None, help="follow-up pages a resolution may ask of leaves "
                    "whose tools all made its result (the resolver's pages; default the published walk's, else none)")
    ap.add_argument("--no-beam", action="store_true", help="no beam: every child each referral ranks is asked")
    ap.add_argument("--settle", type=float, default=0.0, help="seconds to wait after start before resolving")
    ap.add_argument("--serve-args", default="", help="more arguments for tooldns serve, in one string")
    ap.add_argument("--distinct", action="store_true", help="the queries file's different intents (repeats and "
                    "intents over 700 octets left out), then, up to what the passes take, intents new to the server "
                    "spliced from two of them (no correct tools known: timed, not in the hit rate)")
    ap.add_argument("--passes", type=int, default=1, help="batches of --count different queries (default 1)")
    ap.add_argument("--same", action="store_true", help="every pass resolves the same queries (zones loaded by the "
                                                        "first; with --answer-cache 0, intents new to the scorer)")
    ap.add_argument("--reference", metavar="DIR", help="also serve this tree (on --port + 1) and resolve its queries "
                    "in turn with ZONES's, query by query: the ratio of p50s")
    ap.add_argument("--reference-queries", help="the reference's queries (default ToolRet's English dev queries)",
                    default=str(DATA / "queries.dev.en.json"))
    ap.add_argument("--reference-serve-args", default="--answer-cache 0")
    ap.add_argument("--reference-k", default="5,3,2", help="the reference's K at each step (default 5,3,2; the "
                    "resolver's default beam, which leaves a tree of two levels such as ToolRet's unbounded)")
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    trees, procs = [], []
    try:
        wanted = [("reference", args.reference, args.port + 1, args.reference_serve_args, args.reference_queries,
                   args.reference_k, AUTO_BEAM, None)] if args.reference else []
        for name, zones, port, serve_args, queries, k, beam, pages in [
                *wanted, ("tree", args.zones, args.port, args.serve_args, args.queries, args.k, walk_beam(args), args.pages)]:
            t0 = time.monotonic()
            proc, root = start_servers(zones, port, extra=shlex.split(serve_args))
            seconds = time.monotonic() - t0
            procs.append(proc)
            print(f"{'[' + name + '] ' if wanted else ''}serving after {seconds:.1f} s, {rss_text(proc.pid)}",
                  flush=True)
            trees.append(Served(name, proc, batches(queries, args), Resolver(root=root, cache=False, timeout=5, beam=beam,
                                                                               pages=pages),
                                None if k == "published" else tuple(int(x) for x in k.split(",")), tool_zones(zones)))
        time.sleep(args.settle)
        for n in range(args.passes):
            run_pass(n, args, trees)
    finally:
        for proc in procs:
            stop_servers(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
