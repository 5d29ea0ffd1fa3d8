#!/usr/bin/env python3
"""Would a narrower walk find the same tools for fewer queries? Replays of recorded walks.

Resolves --count queries of a queries file against ``tooldns serve ZONES`` at a wide K (--k,
default 8,4,3; client cache off; --leaf-k tools asked of each leaf) and records what every zone
answered: its ranked children, or its tools with their scores. It then replays narrower walks over
the record, without the network:

* K schedules (--schedules): each zone's referral cut to the K of its depth;
* beams (--beams): at each depth only the B best zones are asked, best by the product of the
  ranks on their path (``rank``, the resolver's ``beam``: ties to the better ranks from the root
  down) or by the product along the path of each referral's score over the best score of its
  referral (``ratio``): a walk that widens where a parent's children rank close and narrows
  where one stands out;
* follow-up pages (--pages): the resolver's ``pages``, a zone whose tools all made the merged best 10
  asked for its next ones (:func:`_paged`).

--record FILE keeps the recorded walks in FILE, and a later run given the same FILE replays them
without serving anything (the same zones, queries, --count, --k and --leaf-k). The replay is exact for every walk that asks only zones the recorded one asked: a server's ranking
does not depend on K (it keeps the best K, then drops those under ``prune_ratio`` x the best), so a
narrower referral is a prefix of the recorded one, and leaves are asked for --leaf-k tools either
way. The first line checks this: the replay of the recorded walk itself, against what the resolver
returned. Tools are merged as the resolver merges BM25 leaves (best score first; hybrid leaves,
whose parts the resolver fuses again, are replayed by their leaves' scores only). Prints per walk
the DNS queries a resolution, the hit rate@10 and, with the build's ``catalog-map.json`` beside the
zones, route recall: the share of queries with a correct tool among the tools of a zone the walk
got tools from (as ``bench_retrieval.py`` counts it), and where each miss was lost (:func:`lost_at`): no
zone reached holds a correct tool (route), a zone reached holds one but did not answer it among its
--leaf-k best (leaf), or it was answered and the merge left it out of the top 10 (merge). With
--catalog, flat BM25 over the whole catalog answers the same queries, and only the misses it found
count, each where the walk lost the correct tools flat search found: what puts the walk under it.

    python scripts/research/replay_walks.py /tmp/b100k-one --queries /tmp/synth100k.queries.json \\
        --serve-args "--lazy --listen 127.0.0.1 --answer-cache 0"
"""

from __future__ import annotations

import argparse
import json
import pickle
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchlib import start_servers, stop_servers  # noqa: E402
from resolver_client import Resolver  # noqa: E402
from resolver_client.walk import beam_order  # noqa: E402


@dataclass
class Recorded:
    """One resolution's record: each zone's referral (child, rank, score) and tools (id, score, rank, name)."""

    correct: set[str]
    hit: bool
    queries: int
    referrals: dict[str, list[tuple[str, int, float]]] = field(default_factory=dict)
    tools: dict[str, list[tuple[str, float, int, str]]] = field(default_factory=dict)


def record(resolution, correct: set[str]) -> Recorded:
    rec = Recorded(correct, bool(correct & {t.id for t in resolution.tools}), resolution.stats.queries)
    for hop in resolution.trace:
        followed = [(r.zone, r.rank, r.score or 0.0) for r in hop.referrals if r.followed]
        if followed:
            rec.referrals[hop.zone] = followed
        if hop.tools:
            rec.tools.setdefault(hop.zone, []).extend((t.id, t.score or 0.0, t.rank, t.name) for t in hop.tools)
    return rec


def collect(args) -> list[Recorded]:
    proc, root = start_servers(args.zones, args.port, extra=shlex.split(args.serve_args))
    try:
        out = []
        # unbounded, and the settings given alone: a tree's published walk (best leaf K, say) would make
        # a walk the replays below do not model, and its query is none of the walk's
        with Resolver(root=root, cache=False, timeout=10, max_queries=4096, beam=None,
                      published_walk=False) as resolver:
            for q in queries_of(args):
                res = resolver.resolve(q["query"], k=args.k, leaf_k=args.leaf_k, top=10)
                out.append(record(res, {str(c["id"]) for c in q.get("correct_tools", [])}))
        return out
    finally:
        stop_servers(proc)


def recorded(args) -> list[Recorded]:
    """The walks recorded: read from --record when it names a file, else collected (and kept there)."""
    if args.record and Path(args.record).exists():
        with open(args.record, "rb") as f:
            return pickle.load(f)
    records = collect(args)
    if args.record:
        with open(args.record, "wb") as f:
            pickle.dump(records, f)
    return records


def queries_of(args) -> list[dict]:
    """The first --count queries of the queries file."""
    return json.load(open(args.queries, encoding="utf-8"))[:args.count]


def _order(child: tuple[str, tuple[int, ...], float], by: str) -> tuple:
    """How a beam orders a depth's zones: as the resolver does (``rank``: the product of the path's
    ranks, then the ranks from the root down, then the name), or by the product of relative scores."""
    zone, ranks, relative = child
    return beam_order(zone, ranks) if by == "rank" else (-relative, ranks, zone)


def replay(rec: Recorded, ks: tuple[int, ...], beam: int | None, by: str, leaf_k: int,
           root: str, pages: int = 0) -> tuple[bool, int, list[tuple[str, str]]]:
    """Whether the walk (*ks*, *beam* ranked *by*, *pages* follow-up pages) finds a correct tool in its
    top 10, its queries, and the tools it got from zones, each with its zone (id, zone)."""
    found: list[tuple[str, float, int, str, str]] = []
    level, depth, queries = [(root, (), 1.0)], 0, 0
    while level:
        below = []
        for zone, ranks, relative in level:
            queries += 1
            children = [c for c in rec.referrals.get(zone, []) if c[1] <= ks[min(depth, len(ks) - 1)]]
            if not children:
                found += [(*t, zone) for t in rec.tools.get(zone, [])[:leaf_k]]
            best = max((c[2] for c in children), default=0.0)
            for child, rank, score in children:
                if child == zone:  # this zone's own tools: one more query
                    queries += 1
                    found += [(*t, zone) for t in rec.tools.get(zone, [])[:leaf_k]]
                else:
                    below.append((child, (*ranks, rank), relative * (score / best if best > 0 else 1.0 / rank)))
        depth += 1
        below.sort(key=lambda c: _order(c, by))
        level = below[:beam] if beam else below
    queries += _paged(rec, found, leaf_k, pages)
    tools = _merged(found)
    return bool({t[0] for t in tools[:10]} & rec.correct), queries, [(t[0], t[4]) for t in found]


def _merged(found: list[tuple]) -> list[tuple]:
    """The tools *found* merged as the resolver merges BM25 leaves: each once, best score first."""
    merged: dict[str, tuple] = {}
    for tool in found:
        if tool[0] not in merged or tool[1] > merged[tool[0]][1]:
            merged[tool[0]] = tool
    tools = [t for t in merged.values() if t[1] > 0] or list(merged.values())
    tools.sort(key=lambda t: (-t[1], t[2], t[4], t[3]))
    return tools


def _paged(rec: Recorded, found: list[tuple], leaf_k: int, pages: int) -> int:
    """Add to *found* the follow-up pages the resolver's walk asks (``Walk.pages``): while a zone that gave
    a full page has its last tool among the merged best 10 (any such zone while fewer than 10), the best
    placed first, its next *leaf_k* tools, at most *pages* times; the queries they cost. Exact while the
    pages stay within the --leaf-k tools recorded of each zone (a zone recorded with no more asks none)."""
    given: dict[str, int] = {}
    for tool in found:
        given[tool[4]] = given.get(tool[4], 0) + 1
    asked = 0
    while asked < pages:
        place = {t[0]: i for i, t in enumerate(_merged(found)[:10])}
        due = sorted((place.get(rec.tools[z][n - 1][0], 10), z) for z, n in given.items()
                     if n % leaf_k == 0 and len(rec.tools[z]) > n and (len(place) < 10 or rec.tools[z][n - 1][0] in place))
        if not due:
            break
        for _, zone in due[:pages - asked]:
            n = given[zone]
            found += [(*t, zone) for t in rec.tools[zone][n:n + leaf_k]]
            given[zone], asked = n + len(rec.tools[zone][n:n + leaf_k]), asked + 1
    return asked


#: where a walk lost the correct tools it did not find (:func:`lost_at`)
LOSSES = ("route", "leaf", "merge")


def routed(found: list[tuple[str, str]], sought: set[str], owned: dict[str, set[str]]) -> bool:
    """Whether a zone the walk got tools from (*found*: (id, zone)) holds one of the *sought* tools (*owned*:
    zone -> the correct tools it holds)."""
    return any(owned.get(zone, set()) & sought for _, zone in found)


def lost_at(found: list[tuple[str, str]], sought: set[str], owned: dict[str, set[str]]) -> str:
    """Where a walk that did not find the *sought* tools in its top 10 lost them: ``route``, no zone it
    got tools from (*found*) holds one (a referral above chose other children; a tool in no zone of the
    tree counts here too); ``leaf``, such a zone holds one but did not answer it among its best;
    ``merge``, a zone answered one, but the tools merged from all zones left it out of the top 10."""
    if {tool for tool, _ in found} & sought:
        return "merge"
    return "leaf" if routed(found, sought, owned) else "route"


def figures(records: list[Recorded], *walk, owned: dict[str, set[str]],
            flat: list[set[str]] | None = None) -> tuple[float, float, float, str, str]:
    """A walk's queries a resolution, hit rate@10 and route recall over *records*, where its misses
    were lost, in shares of all resolutions, and its hit rate on the even and odd records (the halves a
    setting is chosen on and reported on). With *flat* (the correct tools flat search put in its top
    10, per record), only the misses flat search found count, each lost where the walk lost the tools
    flat search found."""
    runs = [replay(r, *walk) for r in records]
    lost = []
    for i, (rec, (hit, _, found)) in enumerate(zip(records, runs)):
        sought = rec.correct if flat is None else flat[i]
        if not hit and sought:
            lost.append(lost_at(found, sought, owned))
    reached = sum(routed(found, rec.correct, owned) for rec, (_, _, found) in zip(records, runs))
    shares = " ".join(f"{lost.count(where) / len(runs):.3f}" for where in LOSSES)
    return (sum(q for _, q, _ in runs) / len(runs), sum(hit for hit, _, _ in runs) / len(runs),
            reached / len(runs), shares, halves([hit for hit, _, _ in runs]))


def halves(hits: list[bool]) -> str:
    """The hit rates of the even and odd entries of *hits*: ``0.533/0.513``."""
    return "/".join(f"{sum(part) / max(1, len(part)):.3f}" for part in (hits[0::2], hits[1::2]))


def flat_found(catalog: str, records: list[Recorded], queries: list[dict]) -> list[set[str]]:
    """The correct tools flat BM25 over the whole *catalog* (every tool scored, ``bench_retrieval``'s)
    puts in its top 10, for each of *queries* (those of *records*)."""
    sys.path.insert(0, str(ROOT / "scripts" / "bench"))
    from bench_retrieval import flat_index, flat_ranked
    from tooldns.building.catalog import load_catalogs

    _, index, ids = flat_index(load_catalogs([catalog]))
    return [set(flat_ranked(index, ids, q["query"], 10)) & rec.correct for rec, q in zip(records, queries)]


def owners(zones: str, records: list[Recorded]) -> dict[str, set[str]] | None:
    """Zone -> the correct tools of *records* it holds, from the build's ``catalog-map.json`` (None when
    there is none)."""
    path = Path(zones) / "catalog-map.json"
    if not path.exists():
        return None
    correct = set().union(*(r.correct for r in records))
    out: dict[str, set[str]] = {}
    for tool_id, names in json.loads(path.read_text(encoding="utf-8")).items():
        if tool_id in correct:
            for name in names:  # <label>._<service>._<transport>.<zone>
                out.setdefault(name.lower().split(".", 3)[3], set()).add(tool_id)
    return out


def arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("zones")
    p.add_argument("--queries", required=True, help="queries JSON with correct_tools")
    p.add_argument("--count", type=int, default=200)
    p.add_argument("--k", default="8,4,3", help="the recorded walk's K at each depth (default 8,4,3)")
    p.add_argument("--leaf-k", type=int, default=6, help="tools asked of each leaf (default 6)")
    p.add_argument("--leaf-ks", default="", help="tools a leaf to replay, at most --leaf-k, comma-separated "
                                                 "(default --leaf-k)")
    p.add_argument("--schedules", default="8,4,3 5,3,2 3,2,1", help="K schedules to replay, space-separated")
    p.add_argument("--beams", default="4,6,8,12", help="beam widths to replay on each schedule")
    p.add_argument("--pages", default="0", help="follow-up pages to replay on each schedule, comma-separated "
                                                "(the resolver's pages; exact while pages x tools a leaf stay "
                                                "within the --leaf-k recorded)")
    p.add_argument("--serve-args", default="", help="more arguments for tooldns serve, in one string")
    p.add_argument("--port", type=int, default=5393)
    p.add_argument("--record", help="a file keeping the recorded walks: read when it exists (nothing served), "
                                    "else written")
    p.add_argument("--root-zone", default="tools.")
    p.add_argument("--catalog", help="the catalog the tree was built from: flat BM25 over it (every tool scored) "
                                     "for the same queries, and the misses it finds counted apart")
    args = p.parse_args()
    args.k = tuple(int(x) for x in args.k.split(","))
    args.leaf_ks = [int(x) for x in args.leaf_ks.split(",") if x] or [args.leaf_k]
    args.pages = [int(x) for x in args.pages.split(",") if x] or [0]
    if max(args.leaf_ks) > args.leaf_k:
        p.error("--leaf-ks: at most --leaf-k tools a leaf were recorded")
    return args


def main() -> int:
    args = arguments()
    records = recorded(args)
    print(f"{len(records)} resolutions recorded at K = {','.join(map(str, args.k))}: "
          f"{sum(r.queries for r in records) / len(records):.1f} queries, "
          f"hit rate@10 {sum(r.hit for r in records) / len(records):.3f}")
    flat = flat_found(args.catalog, records, queries_of(args)) if args.catalog else None
    if flat is not None:
        print(f"flat BM25 over {args.catalog}: hit rate@10 {sum(map(bool, flat)) / len(flat):.3f} "
              f"(even/odd {halves([bool(f) for f in flat])})")
    owned = owners(args.zones, records)
    print(f"{'walk':32} {'queries':>8} {'hit rate@10':>12}" + (f" {'route recall':>13}" if owned is not None else "")
          + f"  {'flat found, walk lost at' if flat is not None else 'lost at'}: {', '.join(LOSSES)}")
    for text in args.schedules.split():
        ks = tuple(int(x) for x in text.split(","))
        if any(a > b for a, b in zip(ks + ks[-1:] * 8, args.k + args.k[-1:] * 8)):
            print(f"K = {text}: wider than the recorded walk somewhere, not replayed")
            continue
        walks = [(n, None, pages) for n in args.leaf_ks for pages in args.pages] + [
            (args.leaf_k, int(b), 0) for b in args.beams.split(",") if b]
        for leaf_k, beam, pages in walks:
            for by in (("ratio", "rank") if beam else ("ratio",)):
                q, hr, rr, lost, split = figures(records, ks, beam, by, leaf_k, args.root_zone, pages,
                                                 owned=owned or {}, flat=flat)
                name = f"K = {text}" + (f", leaf k {leaf_k}" if leaf_k != args.leaf_k else "") + (
                    f", beam {beam} by {by}" if beam else "") + (f", {pages} pages" if pages else "")
                print(f"{name:32} {q:8.1f} {hr:12.3f}" + (f" {rr:13.3f}" if owned is not None else "")
                      + f"  {lost}  (even/odd {split})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
