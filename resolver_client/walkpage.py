"""A picture of one resolution: a self-contained HTML page of the walk (``tooldns-resolve --html``).

:func:`walk_page` is a pure function from a :class:`~.results.Resolution` to one HTML document:
the part of the tree the walk touched (each zone with the rank and score its parent gave it, the
branches followed and those not followed, and why), the tools each leaf answered with those
returned marked, the hops with their timings, and the resolution's totals. The tree is read
back from the trace alone: a hop names the zone asked, its referrals the children proposed.

The page is one file, readable from disk without a server: inline CSS, no script, no fonts or
images fetched, and a Content-Security-Policy that forbids both should anything slip through.
Everything that came from a server (zone names, tool names, descriptions, summaries, notes) is
untrusted and escaped; a ``<script>`` in a tool description is shown as text.

    >>> res = Resolver(root="127.0.0.1:5300").resolve("historical weather Hong Kong")
    >>> write_walk_page(res, "walk.html")    # or: html_text = walk_page(res)
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass, field

from tooldns.protocol.hygiene import printable

from .results import Hop, Referral, Resolution, Tool
from .split import split_intent

#: longest tool description shown in full (the rest is cut at a word, with an ellipsis)
DESCRIPTION_CHARS = 280
_FAILED = {"NOERROR", "NXDOMAIN"}  # rcodes of a reply the walk could use (the rest moved on)


@dataclass
class Node:
    """One zone of the walk: how its parent proposed it and what was asked of it."""

    zone: str
    referral: Referral | None = None  # None: the zone the walk started at, or one no hop proposed
    proposed_by: int = 0  # number of the hop whose reply proposed it (1-based, as in --trace)
    hops: list[tuple[int, Hop]] = field(default_factory=list)
    children: list["Node"] = field(default_factory=list)
    own: Referral | None = None  # a referral of the zone to itself (kind "self": its own tools)

    @property
    def tools(self) -> list[Tool]:
        """The tools its answers carried, each once (a leaf asked again answers with more), by rank."""
        by_key: dict[str, Tool] = {}
        for _, hop in self.hops:
            for tool in hop.tools:
                by_key[tool.key] = tool
        return sorted(by_key.values(), key=lambda t: (t.rank, t.name))

    @property
    def state(self) -> str:
        """root, followed, not-followed, unreachable or unasked."""
        if self.referral is not None and not self.referral.followed:
            return "not-followed"
        if not self.hops:
            return "unasked" if self.referral is not None else "root"
        if all(h.rcode not in _FAILED for _, h in self.hops):
            return "unreachable"
        return "root" if self.referral is None else "followed"


def walks(trace: list[Hop]) -> list[list[tuple[int, Hop]]]:
    """The trace cut into walks, each hop numbered as ``--trace`` numbers it.

    One walk's trace opens with its question to the root (and retries of it); a split intent's
    resolution (:mod:`.split`) holds the whole intent's walk, then each part's.
    """
    out: list[list[tuple[int, Hop]]] = []
    first = trace[0].qname if trace else ""
    for n, hop in enumerate(trace, 1):
        if not out or (hop.qname == first and out[-1][-1][1].qname != first):
            out.append([])
        out[-1].append((n, hop))
    return out


def tree(hops: list[tuple[int, Hop]]) -> Node:
    """The zones one walk touched, as a tree rooted at the zone it started at."""
    root = Node(hops[0][1].zone)
    nodes = {root.zone: root}
    for n, hop in hops:
        node = nodes.setdefault(hop.zone, Node(hop.zone))
        node.hops.append((n, hop))
        for ref in hop.referrals:
            if ref.zone == hop.zone:
                node.own = ref
                continue
            child = nodes.get(ref.zone)
            if child is None:
                child = nodes[ref.zone] = Node(ref.zone, ref, n)
                node.children.append(child)
            elif child.referral is None and child is not root:
                child.referral, child.proposed_by = ref, n
                node.children.append(child)
    for zone, node in nodes.items():  # a zone no reply proposed: under its nearest ancestor walked
        if node is root or node.referral is not None:
            continue
        parents = [z for z in nodes if z != zone and zone.endswith("." + z) and z in _reachable(root)]
        (nodes[max(parents, key=len)] if parents else root).children.append(node)
    for node in nodes.values():
        node.children.sort(key=lambda c: (c.referral.rank if c.referral else 1 << 30, c.zone))
    return root


def _reachable(root: Node) -> set[str]:
    out, todo = set(), [root]
    while todo:
        node = todo.pop()
        out.add(node.zone)
        todo.extend(node.children)
    return out


# -- formatting --
def _t(text) -> str:
    """Untrusted text as HTML: printable, escaped (quotes too, so it is safe in attributes)."""
    return html.escape(printable(str(text)), quote=True)


def _score(score: float | None) -> str:
    return "–" if score is None else f"{score:.3f}"


def _ms(ms: float) -> str:
    return f"{ms:.2f} ms" if ms < 10 else f"{ms:.1f} ms"


def _bar(value: float | None, best: float, cls: str = "") -> str:
    share = 0.0 if value is None or best <= 0 else max(0.0, min(1.0, value / best))
    return f'<span class="bar {cls}"><span style="width:{share * 100:.1f}%"></span></span>'


def _cut(text: str, limit: int = DESCRIPTION_CHARS) -> str:
    text = printable(text)
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0].rstrip(" ,.;:") + "…"


def _answered(hop: Hop) -> str:
    """'3 tools', '1 child': what a hop's reply carried."""
    if hop.tools:
        n, one, many = len(hop.tools), "tool", "tools"
    else:
        n, one, many = len([r for r in hop.referrals if r.zone != hop.zone]), "child", "children"
    return f"{n} {one if n == 1 else many}"


def _host(tool: Tool) -> str:
    return f"{tool.target.rstrip('.')}:{tool.port}"


class _Page:
    def __init__(self, res: Resolution) -> None:
        self.res = res
        #: tool key -> its place in the list returned (1 = best)
        self.returned = {t.key: i for i, t in enumerate(res.tools, 1)}
        scores = [t.score for h in res.trace for t in h.tools if t.score is not None]
        scores += [t.score for t in res.tools if t.score is not None]
        self.best_tool = max(scores, default=0.0)
        self.slowest = max((h.ms for h in res.trace), default=0.0)

    def render(self) -> str:
        res = self.res
        segments = walks(res.trace)
        parts = split_intent(res.intent) if len(segments) > 1 else []
        labels = ["the whole intent"] + [
            f"part {i}: “{_t(parts[i - 1])}”" if len(parts) == len(segments) - 1 else f"part {i}"
            for i in range(1, len(segments))]
        body = [self._header(), '<section><h2>The walk</h2>' + self._legend()]
        if not segments:
            body.append('<p class="muted">No hop was recorded.</p>')
        for label, segment in zip(labels, segments):
            if len(segments) > 1:
                body.append(f'<h3 class="walk-title">Walk of {label}</h3>')
            body.append(f'<ul class="tree top">{self._node(tree(segment))}</ul>')
        body.append('</section>')
        body.append(self._returned())
        body.append(self._hops(segments, len(segments) > 1))
        return _DOCUMENT.format(title=_t(res.intent), css=_CSS, body="\n".join(body))

    def _header(self) -> str:
        res, s = self.res, self.res.stats
        k = ",".join(map(str, res.k)) if isinstance(res.k, (tuple, list)) else str(res.k)
        facts = [("tools returned", str(len(res.tools))), ("service", _t(res.service)), ("K", _t(k)),
                 ("queries", str(s.queries)), ("zones", str(s.nodes_visited)), ("total", _ms(s.ms)),
                 ("bytes", f"{s.bytes_sent + s.bytes_received:,}"), ("packets", str(s.packets))]
        facts += [(name, str(value)) for name, value in (("cache hits", s.cache_hits), ("timeouts", s.timeouts),
                  ("TCP retries", s.tcp_retries), ("fallbacks", s.fallbacks),
                  ("answers trimmed to fit a datagram", s.trimmed)) if value]
        if s.embed_ms:
            facts.append(("embedding", _ms(s.embed_ms)))
        if s.sources:  # the tree's published walk, the caller's options, or the search mode's own
            facts.append(("walk settings", _t(s.settings_from)))
        chips = "".join(f'<span class="fact"><b>{v}</b> {name}</span>' for name, v in facts)
        out = [f'<header><p class="kicker">ToolDNS resolution</p><h1 class="intent">“{_t(res.intent)}”</h1>'
               f'<div class="facts">{chips}</div>']
        if s.intent_shortened:
            out.append(f'<p class="warn">The intent ({s.intent_shortened} bytes) was cut to fit the intent option.</p>')
        if res.errors:
            items = "".join(f"<li>{_t(e)}</li>" for e in res.errors)
            out.append(f'<div class="warn"><b>Warnings</b><ul>{items}</ul></div>')
        out.append("</header>")
        return "".join(out)

    def _returned(self) -> str:
        if not self.res.tools:
            return '<section><h2>Tools returned</h2><p class="muted">No tool was found.</p></section>'
        rows = []
        for i, t in enumerate(self.res.tools, 1):
            parts = "".join(f' <span class="muted">{name} {_score(v)}</span>'
                            for name, v in (("bm25", t.bm25), ("cos", t.cosine)) if v is not None)
            where = " › ".join(_t(z) for z in (t.path or [t.zone]))
            desc = f'<div class="desc">{_t(_cut(t.description))}</div>' if t.description else ""
            endpoint = f'<code>{_t(t.endpoint)}</code>' if t.endpoint else ""
            rows.append(
                f'<tr><td class="num">{i}</td>'
                f'<td class="score">{_score(t.score)}{_bar(t.score, self.best_tool, "tool")}{parts}</td>'
                f'<td><div class="tname">{_t(t.name)}</div>{desc}</td>'
                f'<td><span class="svc">{_t(t.service)}</span></td>'
                f'<td><code>{_t(_host(t))}</code><br>{endpoint}</td>'
                f'<td class="path">{where}</td></tr>')
        return ('<section><h2>Tools returned</h2><table class="tools"><thead><tr><th>#</th><th>score</th>'
                '<th>tool</th><th>service</th><th>target, endpoint</th><th>found in</th></tr></thead>'
                f'<tbody>{"".join(rows)}</tbody></table></section>')

    @staticmethod
    def _legend() -> str:
        return ('<p class="legend"><span class="key followed"></span> followed '
                '<span class="key leaf"></span> answered with tools '
                '<span class="key not-followed"></span> not followed '
                '<span class="key unreachable"></span> no server answered '
                '<span class="ret">#1</span> returned, at this place · '
                'rank and score: as the parent zone ranked the child for this intent</p>')

    def _node(self, node: Node, best_sibling: float = 0.0) -> str:
        state = node.state
        tools = node.tools
        cls = f"node {state}" + (" leaf" if tools else "")
        head = [f'<span class="zone">{_t(node.zone)}</span>']
        ref = node.referral
        if ref is not None:
            head.append(f'<span class="kind">{_t(ref.kind)}</span>')
            head.append(f'<span class="rank">rank {ref.rank}</span>'
                        f'<span class="score">score {_score(ref.score)}</span>{_bar(ref.score, best_sibling)}')
        status = {"root": "start of the walk", "followed": f"followed from hop {node.proposed_by}",
                  "unreachable": "no name server answered", "unasked": "followed; no reply recorded",
                  "not-followed": f"not followed: {_t(ref.why_not) if ref else ''}"}[state]
        head.append(f'<span class="status">{status}</span>')
        out = [f'<li class="{state}"><div class="{cls}"><div class="head">{"".join(head)}</div>']
        if ref is not None and ref.summary:
            out.append(f'<div class="summary">{_t(_cut(ref.summary, 200))}</div>')
        for n, hop in node.hops:
            out.append(self._hop_line(n, hop, node))
        if node.own is not None:
            out.append(f'<div class="note">its own tools asked too (self referral, rank {node.own.rank}, '
                       f'score {_score(node.own.score)})</div>')
        if tools:
            out.append(self._tool_list(tools))
        out.append("</div>")
        if node.children:
            best = max((c.referral.score or 0.0 for c in node.children if c.referral), default=0.0)
            out.append('<ul class="tree">' + "".join(self._node(c, best) for c in node.children) + "</ul>")
        out.append("</li>")
        return "".join(out)

    def _hop_line(self, n: int, hop: Hop, node: Node) -> str:
        bits = [f'<span class="hopno">hop {n}</span>', _t(hop.server), _t(hop.transport.upper()),
                f'<span class="rcode {"ok" if hop.rcode in _FAILED else "bad"}">{_t(hop.rcode)}</span>',
                f'<b>{_ms(hop.ms)}</b>' + (" (from cache)" if hop.cached else "")]
        if hop.k:
            bits.append(f"K={hop.k}")
        if hop.scorer:
            bits.append(f"scorer {_t(hop.scorer)}")
        if hop.fallback:
            bits.append('<span class="flag">fallback scorer</span>')
        if hop.pruned:
            bits.append(f'<span class="flag">pruned: {_answered(hop)} of K={hop.k}, '
                        'the others scored far below the best</span>')
        line = f'<div class="hop">{" · ".join(bits)}</div>'
        if hop.note:
            line += f'<div class="note">{_t(hop.note)}</div>'
        return line

    def _tool_list(self, tools: list[Tool]) -> str:
        rows = []
        for t in tools:
            place = self.returned.get(t.key)
            mark = f'<span class="ret">#{place}</span>' if place else '<span class="muted">not returned</span>'
            rows.append(f'<tr class="{"returned" if place else ""}"><td class="num">{t.rank}</td>'
                        f'<td class="score">{_score(t.score)}{_bar(t.score, self.best_tool, "tool")}</td>'
                        f'<td>{_t(t.name)}</td><td class="mark">{mark}</td></tr>')
        return f'<table class="leaf-tools"><tbody>{"".join(rows)}</tbody></table>'

    def _hops(self, segments, several: bool) -> str:
        rows = []
        for w, segment in enumerate(segments):
            for n, hop in segment:
                result = _answered(hop) if hop.tools or hop.referrals else ""
                rows.append(f'<tr><td class="num">{n}</td>' + (f'<td class="num">{w + 1}</td>' if several else "")
                            + f'<td>{_t(hop.zone)}</td><td><code>{_t(hop.qname)}</code></td>'
                            f'<td>{_t(hop.server)} {_t(hop.transport)}</td><td>{_t(hop.rcode)}</td><td>{result}</td>'
                            f'<td class="ms">{_ms(hop.ms)}{" (cache)" if hop.cached else ""}'
                            f'{_bar(hop.ms, self.slowest, "time")}</td></tr>')
        walk_th = "<th>walk</th>" if several else ""
        return ('<section><h2>Hops and timings</h2><table class="hops"><thead><tr><th>hop</th>'
                f'{walk_th}<th>zone</th><th>question (SRV)</th><th>server</th><th>rcode</th><th>result</th>'
                f'<th>time</th></tr></thead><tbody>{"".join(rows)}</tbody></table></section>')


def walk_page(res: Resolution) -> str:
    """The HTML page picturing *res* (a whole document, UTF-8 text)."""
    return _Page(res).render()


def write_walk_page(res: Resolution, path: str | os.PathLike) -> None:
    """Write :func:`walk_page` of *res* to *path*; OSError when it cannot be written."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(walk_page(res))


_DOCUMENT = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="tooldns-resolve --html">
<title>ToolDNS walk: {title}</title>
<style>{css}</style>
</head>
<body>
{body}
</body>
</html>
"""

_CSS = """
:root { --bg: #f6f7f9; --card: #fff; --ink: #1d2330; --muted: #6b7280; --line: #c9ced8;
  --blue: #2f6fdf; --green: #17803d; --green-bg: #e8f6ec; --grey: #9aa1ad; --red: #c0392b; --amber: #a15c00; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #14171d; --card: #1e232c; --ink: #e6e9ef; --muted: #9aa3b2; --line: #3a4150;
    --blue: #6ea0ff; --green: #4cc27a; --green-bg: #1d3326; --grey: #6b7280; --red: #ff7b6b; --amber: #f0b35a; }
}
* { box-sizing: border-box; }
body { margin: 0; padding: 24px 32px 48px; background: var(--bg); color: var(--ink);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
h1 { font-size: 24px; margin: 2px 0 12px; word-break: break-word; }
h2 { font-size: 17px; margin: 28px 0 10px; }
h3 { font-size: 15px; margin: 18px 0 8px; color: var(--muted); }
code { font: 12.5px/1.3 ui-monospace, "DejaVu Sans Mono", monospace; word-break: break-all; }
.kicker { margin: 0; color: var(--muted); text-transform: uppercase; letter-spacing: .08em; font-size: 12px; }
.facts { display: flex; flex-wrap: wrap; gap: 8px; }
.fact { background: var(--card); border: 1px solid var(--line); border-radius: 14px; padding: 3px 11px; color: var(--muted); }
.fact b { color: var(--ink); }
.warn { margin-top: 12px; padding: 8px 12px; border-left: 4px solid var(--amber); background: var(--card); }
.warn ul { margin: 4px 0 0; padding-left: 20px; }
.muted { color: var(--muted); }
table { border-collapse: collapse; background: var(--card); }
table.tools, table.hops { width: 100%; border: 1px solid var(--line); border-radius: 8px; }
th { text-align: left; font-weight: 600; color: var(--muted); font-size: 12px; padding: 7px 10px;
  border-bottom: 1px solid var(--line); }
td { padding: 7px 10px; vertical-align: top; border-bottom: 1px solid var(--line); }
tr:last-child td { border-bottom: none; }
td.num { text-align: right; color: var(--muted); width: 1%; }
td.score, td.ms { white-space: nowrap; font-variant-numeric: tabular-nums; width: 1%; }
td.path { color: var(--muted); font-size: 12.5px; }
.tname { font-weight: 600; }
.desc { color: var(--muted); font-size: 12.5px; margin-top: 2px; max-width: 60ch; }
.svc { font-size: 12px; border: 1px solid var(--line); border-radius: 4px; padding: 0 5px; }
.bar { display: inline-block; vertical-align: middle; width: 64px; height: 7px; margin-left: 7px;
  border-radius: 4px; background: color-mix(in srgb, var(--line) 55%, transparent); overflow: hidden; }
.bar > span { display: block; height: 100%; background: var(--blue); border-radius: 4px; }
.bar.tool > span { background: var(--green); }
.bar.time > span { background: var(--amber); }
.legend { color: var(--muted); font-size: 12.5px; }
.key { display: inline-block; width: 12px; height: 12px; border-radius: 3px; border: 2px solid var(--blue);
  vertical-align: -2px; margin-left: 8px; }
.key.leaf { border-color: var(--green); background: var(--green-bg); }
.key.not-followed { border: 2px dashed var(--grey); }
.key.unreachable { border-color: var(--red); }
ul.tree { list-style: none; margin: 0; padding: 0; }
ul.tree ul.tree { margin-left: 14px; }
ul.tree ul.tree > li { position: relative; padding: 8px 0 0 26px; }
ul.tree ul.tree > li::before { content: ""; position: absolute; left: 0; top: 0; bottom: 0;
  border-left: 2px solid var(--line); }
ul.tree ul.tree > li:last-child::before { bottom: auto; height: 27px; }
ul.tree ul.tree > li::after { content: ""; position: absolute; left: 0; top: 26px; width: 24px;
  border-top: 2px solid var(--line); }
ul.tree ul.tree > li.followed::before, ul.tree ul.tree > li.followed::after { border-color: var(--blue); }
ul.tree ul.tree > li.not-followed::after { border-top-style: dashed; }
.node { max-width: 940px; background: var(--card);
  border: 2px solid var(--blue); border-radius: 8px; padding: 8px 12px; }
.node.root { border-color: var(--ink); }
.node.leaf { border-color: var(--green); }
.node.not-followed { border: 2px dashed var(--grey); opacity: .75; padding: 5px 12px; }
.node.not-followed .zone { color: var(--muted); }
.node.unreachable, .node.unasked { border-color: var(--red); }
.head { display: flex; flex-wrap: wrap; align-items: center; gap: 4px 10px; }
.zone { font: 600 14.5px/1.3 ui-monospace, "DejaVu Sans Mono", monospace; }
.kind { font-size: 11.5px; text-transform: uppercase; letter-spacing: .04em; color: var(--muted);
  border: 1px solid var(--line); border-radius: 4px; padding: 0 5px; }
.rank, .score { font-variant-numeric: tabular-nums; }
.rank { color: var(--muted); }
.status { color: var(--muted); font-size: 12.5px; margin-left: auto; }
.not-followed .status { color: var(--amber); font-weight: 600; }
.unreachable .status { color: var(--red); font-weight: 600; }
.summary { color: var(--muted); font-size: 12.5px; margin-top: 2px; max-width: 80ch; }
.hop { font-size: 12.5px; color: var(--muted); margin-top: 4px; }
.hop b { color: var(--ink); font-weight: 600; }
.hopno { color: var(--ink); font-weight: 600; }
.rcode.bad { color: var(--red); font-weight: 600; }
.flag { color: var(--amber); }
.note { font-size: 12.5px; color: var(--amber); margin-top: 2px; }
table.leaf-tools { margin-top: 6px; width: 100%; background: var(--green-bg); border-radius: 6px; }
table.leaf-tools td { padding: 3px 8px; border-bottom: none; font-size: 13px; }
table.leaf-tools tr.returned td { font-weight: 600; }
table.leaf-tools td.mark { width: 1%; white-space: nowrap; text-align: right; }
table.leaf-tools tr:not(.returned) td { color: var(--muted); }
.ret { display: inline-block; background: var(--green); color: #fff; border-radius: 9px; padding: 0 7px;
  font-size: 11.5px; font-weight: 700; }
table.leaf-tools .ret { margin-left: 4px; }
.legend .ret { margin-left: 8px; }
@media print { body { background: #fff; } }
"""
