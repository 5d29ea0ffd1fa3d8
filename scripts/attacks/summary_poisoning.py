#!/usr/bin/env python3
"""Summary poisoning: how far up a parent's ranking a child climbs by publishing common words.

A child publishes its summary (``_summary.<origin>``) and its parent ranks it by those terms. Here
one child of the shipped tree's root (``--child``, default ``code.tools.``) publishes, besides its
honest terms, the ``--words`` (default 70) most frequent index terms of every tool text in the tree
(words an attacker would guess intents hold), each counted as often as the parent accepts, and says
it holds ``--tools`` tools (default: as many as a parent accepts). For 25 intents that have nothing
to do with the child, the script prints the child's rank at the root (1: first) as the root ranks
it after learning every child's published summary (the others' as their zone files make them) and,
for this child:

* ``honest``: what the child's zone file really makes it publish;
* ``stuffed, N tools``: the stuffed summary claiming as many tools as a parent accepts;
* ``stuffed, honest count``: the same words, with the child's real count of tools.

A summary the parent refuses leaves the child as its zone file's copy has it (``refused``). The
root is scored in process (:class:`tooldns.serving.store.ZoneStore`, its ``learn``, its scorer),
as a running server scores it after fetching the summary: nothing here depends on timing.

    python scripts/attacks/summary_poisoning.py
    python scripts/attacks/summary_poisoning.py --child finance.tools. --words 200
    python scripts/attacks/summary_poisoning.py --zones built/ --child weather-forecast.tools. \\
        --queries ../shared/data/toolret/queries.dev.en.json      # a tree tooldns build made of ToolRet
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tooldns.exceptions import SummaryError  # noqa: E402
from tooldns.protocol.summary import (MAX_TOOLS, PublishedSummary, decode_summary,  # noqa: E402
                                      encode_summary)
from tooldns.serving.store import ZoneStore  # noqa: E402
from tooldns.serving.summaries import learned_summary, publish  # noqa: E402
from tooldns.scoring.tokenize import tokenize  # noqa: E402
from tooldns.zone.zonefile import load_zone  # noqa: E402

#: intents about every branch of the shipped tree but code (the default child): weather, maps,
#: finance, knowledge, comms, productivity
INTENTS = [
    "historical weather Hong Kong", "will it rain in London tomorrow", "typhoon warning signal",
    "hourly temperature forecast for Paris", "severe weather alerts in Texas",
    "driving directions to the airport", "convert an address to coordinates", "find restaurants near me",
    "walking route between two points", "distance between Tokyo and Osaka",
    "stock price of Tesla", "exchange rate euro to dollar", "send a payment invoice",
    "company quarterly earnings report",
    "search Wikipedia for the French revolution", "find research papers about transformers",
    "search the web for news", "define the word serendipity",
    "send a slack message to the team", "send an email to my manager", "read my unread emails",
    "schedule a meeting next Tuesday", "create a shared document", "add an event to my calendar",
    "take notes from a meeting",
]


def root_file(zonedir: Path) -> Path:
    """The root's zone file: ``tools.yaml`` in the shipped tree, ``root.yaml`` in a built one."""
    return zonedir / "tools.yaml" if (zonedir / "tools.yaml").exists() else zonedir / "root.yaml"


def unrelated_queries(path: str, zonedir: Path, child: str, n: int) -> list[str]:
    """The first *n* queries of a ToolRet query file none of whose correct tools is in *child*'s zone."""
    import json

    own = {tool.id for tool in load_zone(zonedir / f"{child}yaml").tools}
    queries = json.loads(Path(path).read_text(encoding="utf-8"))
    return [q["query"] for q in queries if not own & {t["id"] for t in q["correct_tools"]}][:n]


def rank_of(store: ZoneStore, child: str, intent: str) -> int:
    candidates = store.index.child_candidates
    ranking = candidates.scorer.rank(intent, len(candidates.entries)).items
    order = [getattr(candidates.entries[i], "name", None) for i, _ in ranking]
    return order.index(child) + 1


def common_words(zonedir: Path, n: int) -> list[str]:
    counts = Counter()
    for path in sorted(zonedir.glob("*.yaml")):
        for tool in load_zone(path).tools:
            counts.update(tokenize(tool.text()))
    return [t for t, _ in counts.most_common(n)]


def stuffed(honest: PublishedSummary, words: list[str], tools: int) -> PublishedSummary:
    cap = 3 * max(1, tools) + 3  # the most a parent accepted of a term (3 a tool, plus 3)
    terms = dict(honest.terms)
    terms.update({w: cap for w in words})
    return PublishedSummary(honest.zone, honest.serial + 1, honest.description, honest.keywords, tools,
                            tuple(sorted(terms.items(), key=lambda tn: (-tn[1], tn[0]))))


def ranks(zonedir: Path, child: str, published: PublishedSummary, intents: list[str]) -> tuple[list[int], str]:
    """The child's rank for each intent once the root has learned every child's published summary
    (the others' as their zone files make them) and *published* for *child*."""
    store = ZoneStore(root_file(zonedir))
    learned, note = {}, ""
    for delegation in store.file_zone.children:
        if delegation.name != child:
            learned[delegation.name] = publish(load_zone(zonedir / f"{delegation.name}yaml"))
    learned[child] = published
    for name, summary in learned.items():
        summary = replace(summary, serial=summary.serial + 1)  # not the serial the root's copies stand for
        try:  # as a parent reads it off the wire
            store.learn({name: learned_summary(decode_summary(encode_summary(summary), name))})
        except SummaryError as exc:
            note = f"refused: {exc}"
    return [rank_of(store, child, intent) for intent in intents], note


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--zones", default=str(ROOT / "zones"))
    parser.add_argument("--child", default="code.tools.")
    parser.add_argument("--words", type=int, default=70)
    parser.add_argument("--queries", help="a ToolRet query file: its first 25 queries whose correct tools are "
                        "not in the child, in place of the 25 intents written for the shipped tree")
    parser.add_argument("--tools", type=int, default=MAX_TOOLS, help=f"tools the stuffed summary claims "
                        f"(default {MAX_TOOLS}: as many as a parent accepts)")
    args = parser.parse_args()
    zonedir = Path(args.zones)
    honest = publish(load_zone(zonedir / f"{args.child}yaml"))  # code.tools. -> code.tools.yaml
    words = common_words(zonedir, args.words)
    intents = unrelated_queries(args.queries, zonedir, args.child, len(INTENTS)) if args.queries else INTENTS
    cases = [("honest", honest), (f"stuffed, {args.tools} tools", stuffed(honest, words, args.tools)),
             (f"stuffed, honest count ({honest.tools})", stuffed(honest, words, honest.tools))]
    print(f"{args.child} among the root's {len(load_zone(root_file(zonedir)).children)} children, "
          f"{len(intents)} intents unrelated to it; {args.words} words stuffed: {' '.join(words[:12])} ...")
    print(f"{'summary':32} {'first':>5} {'top 3':>5} {'mean rank':>9}  ranks")
    for what, summary in cases:
        got, note = ranks(zonedir, args.child, summary, intents)
        print(f"{what:32} {sum(r == 1 for r in got):5d} {sum(r <= 3 for r in got):5d} {sum(got) / len(got):9.2f}  "
              f"{' '.join(map(str, got))}{'  (' + note + ')' if note else ''}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
