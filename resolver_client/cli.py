"""``tooldns-resolve``: find tools for an intent from the command line (a thin shell over Resolver).

    tooldns-resolve "historical weather Hong Kong"
    tooldns-resolve "send a slack message" --service mcp --k 2 --json
    tooldns-resolve "typhoon warning" --trust hko --trace --root 127.0.0.1:5300
    tooldns-resolve "plan a trip: flights, hotels, weather" --mode get_all
    tooldns-resolve "historical weather Hong Kong" --html walk.html   # a picture of the walk
    tooldns-resolve "historical weather Hong Kong" --no-published-walk  # the built-in settings, not the tree's

Where --k, --leaf-k, --best-leaf-k, --beam, --pages and --embed are not given, the walk the tree publishes
(``_walk.tools.``, docs/protocol.md section 6b) decides them in the default mode; --trace and --json
say where each setting came from.

Exit status: 0 tools found, 1 none found, 2 bad usage (an empty intent, or the --html file cannot be
written), 3 resolution failed (DNSSEC validation that left no tool included).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from tooldns.protocol import names
from tooldns.protocol.hygiene import printable
from tooldns.protocol.plan import MAX_PAGES

from .exceptions import NoServersReachable, ResolverError
from .modes import GET_IMPORTANT, MODES
from .resolver import Resolver, seconds, parse_server
from .rtt import MIN_RTO
from .results import Resolution
from .walk import AUTO_BEAM
from .walkpage import write_walk_page


def _split(values: list[str] | None) -> list[str] | None:
    if values is None:
        return None
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


#: a table's column is at most this wide; a longer cell ends in "..."
CELL = 48
#: an intent said back ("no tools found for ...") is at most this long
ECHO = 200


def clipped(text: str, width: int) -> str:
    """*text*, or its first *width* characters ending in "..." when it is longer."""
    return text if len(text) <= width else text[:width - 3] + "..."


def _cell(text: str, width: int) -> str:
    return clipped(text, width).ljust(width)


def format_table(res: Resolution, details: bool = False) -> str:
    """The tools as a table, one a line (with *details*, each tool's description on the line below)."""
    if not res.tools:
        return f"no tools found for {clipped(printable(res.intent), ECHO)!r}"
    rows = [("#", "score", "name", "service", "target", "zone", "endpoint")]
    for i, t in enumerate(res.tools, 1):
        score = f"{t.score:.3f}" if t.score is not None else "-"
        rows.append((str(i), score, t.name, t.service, f"{t.target.rstrip('.')}:{t.port}", t.zone, t.endpoint))
    widths = [min(max(len(r[c]) for r in rows), CELL) for c in range(len(rows[0]))]
    lines = []
    for n, r in enumerate(rows):
        lines.append("  ".join(_cell(printable(cell), w) for cell, w in zip(r, widths)).rstrip())
        if details and n and res.tools[n - 1].description:
            lines.append("     " + printable(res.tools[n - 1].description))
    s = res.stats
    lines.append(f";; {s.queries} queries, {s.nodes_visited} zones, {s.bytes_sent + s.bytes_received} bytes, "
                 f"{s.packets} packets, {s.ms:.1f} ms")
    if any(t.dnssec for t in res.tools) or s.bogus:
        states = [t.dnssec for t in res.tools]
        lines.append(f";; DNSSEC: {states.count('secure')} secure, {states.count('insecure')} insecure, "
                     f"{s.bogus} bogus dropped")
    return "\n".join(lines)


def _setting(name: str, value) -> str:
    if isinstance(value, (list, tuple)):
        value = ",".join(map(str, value))
    return f"{name.replace('_', '-')}={value if value not in (None, '') else 'none'}"


def format_settings(res: Resolution) -> str:
    """What the walk went by and where each setting came from (caller, published, built-in), and
    who embedded the intent: the first lines of ``--trace``."""
    s = res.stats
    parts = [f"{_setting(name, s.settings.get(name))} ({s.sources.get(name, '?')})" for name in s.sources]
    asked = f"; {s.plan_queries} queries for it" if s.plan_queries else ""
    out = [f";; walk settings from {s.settings_from}{asked}: {' '.join(parts)}; intent embedded by {s.embedded_by}"]
    if s.embed_note:
        out.append(f";;   {s.embed_note}")
    return "\n".join(map(printable, out))


def format_trace(res: Resolution) -> str:
    out = [format_settings(res)] if res.stats.sources else []
    for n, hop in enumerate(res.trace, 1):
        flags = " (cached)" if hop.cached else ""
        flags += " (fallback scorer)" if hop.fallback else ""
        out.append(f";; hop {n}: {hop.server} {hop.transport} {hop.qname} SRV -> {hop.rcode} in {hop.ms:.2f} ms{flags}")
        if hop.note:
            out.append(f";;   {hop.note}")
        for r in hop.referrals:
            score = f"{r.score:.3f}" if r.score is not None else "-"
            state = "followed" if r.followed else f"not followed: {r.why_not}"
            out.append(f";;   referral {r.rank}. {r.zone:34} score {score:>7}  {r.kind:12} {state}")
        for t in hop.tools:
            score = f"{t.score:.3f}" if t.score is not None else "-"
            out.append(f";;   tool {t.rank}. {t.name:40} score {score:>7}  {t.target.rstrip('.')}:{t.port}")
    return "\n".join(map(printable, out))  # zone names, notes and EDE texts are the servers': no escapes


def _embedder(spec: str | None):
    """The embedder named *spec*, or None; ResolverError when it cannot be had."""
    if not spec:
        return None
    from tooldns.embedding import EmbeddingError, make_embedder  # only agents that ask for vectors pay for it

    try:
        return make_embedder(spec)
    except EmbeddingError as exc:
        raise ResolverError(str(exc)) from exc


class _Version(argparse.Action):
    """``--version``: the version is looked up when asked for, not at every start."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show the version and exit")

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        import tooldns

        print(f"{parser.prog} {tooldns.__version__}")
        parser.exit()


def timeout_arg(text: str, what: str = "timeout") -> float:
    """``--timeout``: a number of seconds above 0 (a usage error otherwise, as the library's ResolverError)."""
    try:
        return seconds(text, what)
    except ResolverError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def min_rto_arg(text: str) -> float:
    """``--min-rto``: a number of seconds above 0."""
    return timeout_arg(text, "min-rto")


def port_arg(text: str) -> int:
    """``--port``: a port number from 0 to 65535 (0: one the system picks)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 0 to 65535, not {text!r}")
    return value


def at_least_one(text: str) -> int:
    """``--top``, ``tooldns mcp --max-walks``: a whole number of at least 1 (-1 would drop the last tool,
    as a slice does)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tooldns-resolve", description="Find tools for an intent by walking a .tools tree over DNS.")
    p.add_argument("--version", action=_Version)
    return p


def parse_ks(args, p: argparse.ArgumentParser) -> tuple[int, ...] | None:
    """``--k`` as K per depth (None: the mode's own), ``--leaf-k`` checked; a usage error otherwise."""
    try:
        ks = tuple(int(x) for x in str(args.k).split(",")) if args.k is not None else None
    except ValueError:
        p.error("--k takes whole numbers: 3 or 5,3,2")
    if not all(1 <= k <= 255 for k in ks or ()) or (args.leaf_k is not None and not 1 <= args.leaf_k <= 255):
        p.error("--k and --leaf-k must be from 1 to 255")
    return ks


def _print(res, args, unmatched: int = 0) -> None:
    """The resolution on standard output (a table or JSON, with the trace if asked), warnings and notes
    (*unmatched* tools left out, an intent shortened) on standard error."""
    if args.json:
        data = res.to_dict()
        if args.trace:
            from dataclasses import asdict
            data["trace"] = [{**asdict(h), "tools": [t.to_dict() for t in h.tools]} for h in res.trace]
        print(json.dumps(data, ensure_ascii=False, indent=2))
    else:
        if args.trace:
            print(format_trace(res))
        print(format_table(res, details=args.details))
    for err in res.errors:
        print(f";; warning: {printable(err)}", file=sys.stderr)
    for entry in unmet_trust(res, _split(args.trust)):
        print(f";; warning: --trust {printable(entry)}: {printable(unmet_text(res))}", file=sys.stderr)
    if unmatched:
        print(f";; {unmatched} tool(s) the zones answered with left out: no word of the intent matched them "
              f"(score 0)", file=sys.stderr)
    if res.stats.intent_shortened:
        print(f";; the intent ({res.stats.intent_shortened} bytes) was cut at a word boundary to fit one query "
              f"(docs/protocol.md)", file=sys.stderr)


def unmet_trust(res: Resolution, trust: list[str] | None) -> list[str]:
    """The entries of *trust* that name no zone the walk met (a label or a whole name, as the walk matches
    them): most likely a misspelt organisation, which the walk cannot tell from one off its path."""
    met = {hop.zone for hop in res.trace} | {r.zone for hop in res.trace for r in hop.referrals}
    names_met = {z.lower().rstrip(".") for z in met} | {z.split(".", 1)[0].lower() for z in met}
    return [e for e in trust or [] if e.lower().rstrip(".") not in names_met]


def unmet_text(res: Resolution) -> str:
    orgs = sorted({r.zone.split(".", 1)[0] for hop in res.trace for r in hop.referrals if r.kind == "organisation"})
    return ("no zone of that name was met on the walk (organisations met: " + (", ".join(orgs) or "none") + ")")


def _add_dnssec_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--validate", action="store_true", help="check every answer with DNSSEC from the trust anchor "
                   "down; bogus tools are dropped, the others show secure or insecure (docs/dnssec.md)")
    p.add_argument("--anchor", metavar="FILE", help="the trust anchor for --validate: the root zone's DNSKEY or DS "
                   "lines, as 'tooldns dnssec show ZONEDIR --anchor' or 'dig DNSKEY tools. +norec' print them")
    p.add_argument("--require-secure", action="store_true", help="with --validate: return only secure tools "
                   "(insecure ones, below delegations without DS, are dropped and named in the warnings)")


def check_walk_args(args, p: argparse.ArgumentParser) -> None:
    """--best-leaf-k and --beam in range (``tooldns-resolve`` and ``tooldns mcp``)."""
    if args.best_leaf_k is not None and not 1 <= args.best_leaf_k <= 255:
        p.error("--best-leaf-k must be from 1 to 255")
    if args.beam is not None and args.beam < 1:
        p.error("--beam must be at least 1")
    if args.beam is not None and args.no_beam:
        p.error("--beam and --no-beam do not go together")
    if args.pages is not None and not 0 <= args.pages <= MAX_PAGES:
        p.error(f"--pages must be from 0 to {MAX_PAGES}")


def add_beam_flags(p: argparse.ArgumentParser) -> None:
    """--beam, --no-beam and --pages (``tooldns-resolve`` and ``tooldns mcp``)."""
    p.add_argument("--pages", type=int, default=None,
                   help="follow-up queries a resolution may ask of leaves whose tools all made the result, each for "
                        "the tools ranked after those (default: the tree's published pages, else none; 0: none)")
    p.add_argument("--beam", type=int, default=None,
                   help="ask at most this many zones at each depth below the root, the best by their path's ranks: "
                        "bounds the walk of a deep tree (default: the tree's published beam, else 6, or the root's K "
                        "when larger, so a tree of two levels is walked whole)")
    p.add_argument("--no-beam", action="store_true", help="no beam: every child each referral ranks is asked")


def add_published_walk_flag(p: argparse.ArgumentParser) -> None:
    """--no-published-walk (``tooldns-resolve`` and ``tooldns mcp``)."""
    p.add_argument("--no-published-walk", action="store_true",
                   help="do not ask the tree for the walk it publishes (_walk.<root zone>): what the flags leave "
                        "out is the search mode's built-in setting (by default, the tree's published K, leaf K, "
                        "best leaf K, beam and model stand there)")


def walk_beam(args) -> int | str | None:
    """The resolver's beam from --beam and --no-beam: the number given, None (no beam) or the default."""
    return None if args.no_beam else (AUTO_BEAM if args.beam is None else args.beam)


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    p.add_argument("intent", help="what the agent wants to do, in natural language")
    p.add_argument("--root", default="127.0.0.1:5300", help="root name server HOST:PORT (default: what 'tooldns serve zones/' starts)")
    p.add_argument("--root-zone", default="tools.", help="zone the walk starts at (default tools.)")
    p.add_argument("--mode", default=GET_IMPORTANT, choices=MODES,
                   help="search mode: get_one (the single best tool, fewest queries), get_important (the best few, "
                   "the default) or get_all (wider walks, every relevant tool); --k, --leaf-k and --top override it")
    p.add_argument("--k", default=None, help="children asked for at each step, 1-255, or one per depth: 5,3,2 "
                   "(the last repeats; default: the tree's published K, else the mode's: 3 for get_important)")
    p.add_argument("--leaf-k", type=int, default=None, help="tools asked of each leaf (default: the tree's published "
                   "leaf K, else the mode's, else the first K)")
    p.add_argument("--best-leaf-k", type=int, default=None,
                   help="tools asked of the leaf on the best path (each zone's first-ranked child), which may fill "
                        "the whole result; the others are asked for --leaf-k (default: the tree's published one, "
                        "else --leaf-k)")
    add_beam_flags(p)
    add_published_walk_flag(p)
    p.add_argument("--service", default=names.ANY_SERVICE,
                   help=f"service to find: {', '.join(sorted(names.SERVICES))} (default any)")
    p.add_argument("--trust", action="append", help="organisations to trust (comma-separated labels); others are skipped")
    p.add_argument("--exclude", action="append", help="zones or organisations to skip (comma-separated)")
    p.add_argument("--top", type=at_least_one, default=None, help="print at most this many tools")
    p.add_argument("--timeout", type=timeout_arg, default=1.0, help="seconds to wait for each reply (default 1)")
    p.add_argument("--min-rto", type=min_rto_arg, default=MIN_RTO,
                   help=f"least seconds before a lost datagram is sent again (default {MIN_RTO:g}, as Unbound; "
                        "less where round trips are a few milliseconds)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--details", action="store_true", help="tools with their descriptions (leaves answer without "
                                                          "them unless asked; --html asks)")
    p.add_argument("--trace", action="store_true", help="show every hop, like dig +trace")
    p.add_argument("--embed", metavar="MODEL", help="embed the intent and send its vector (e5, minilm, "
                   "minilm-static, static:PATH, local:PATH, openai:MODEL, hash), for trees built with tooldns "
                   "build --embed (default: the model the tree's published walk names, when it is installed here)")
    p.add_argument("--split", action="store_true", help="also walk each part of an intent that asks for several "
                   "things, and share the results fairly")
    p.add_argument("--html", metavar="FILE", help="also write a picture of the walk to FILE: one self-contained "
                   "HTML page (the zones asked, scores and ranks, branches not followed, tools, timings)")
    _add_dnssec_flags(p)
    args = p.parse_args(argv)
    _check_args(args, p)
    ks = parse_ks(args, p)
    check_walk_args(args, p)
    try:
        with Resolver(root=parse_server(args.root), root_zone=args.root_zone, timeout=args.timeout,
                      min_rto=args.min_rto, embedder=_embedder(args.embed),
                      details=args.details or bool(args.html), validate=args.validate or args.require_secure,
                      trust_anchor=args.anchor, require_secure=args.require_secure,
                      best_leaf_k=args.best_leaf_k, beam=walk_beam(args), pages=args.pages,
                      published_walk=not args.no_published_walk) as resolver:
            res = resolver.resolve(args.intent, k=ks if ks is None or len(ks) > 1 else ks[0],
                                   service=args.service.lower(), trust=_split(args.trust), exclude=_split(args.exclude),
                                   top=args.top, leaf_k=args.leaf_k, split=args.split, mode=args.mode)
    except ResolverError as exc:
        print(f"tooldns-resolve: {printable(str(exc))}", file=sys.stderr)  # may hold a server's EDE text
        if isinstance(exc, NoServersReachable) and "root name server" in str(exc):
            print(f"tooldns-resolve: is a tree served at {args.root}? ('tooldns serve zones/' serves the shipped one "
                  f"at 127.0.0.1:5300; --root HOST:PORT names another)", file=sys.stderr)
        return 3
    return _finish(res, args)


def _check_args(args, p: argparse.ArgumentParser) -> None:
    """A usage error for an empty intent, and for --validate or --require-secure without --anchor."""
    if not args.intent.strip():
        p.error("the intent is empty: say in words what the agent wants to do, e.g. "
                "tooldns-resolve \"historical weather Hong Kong\"")
    if (args.validate or args.require_secure) and not args.anchor:
        p.error("--validate and --require-secure need --anchor FILE (the root zone's DNSKEY or DS)")


def _finish(res: Resolution, args) -> int:
    """Print *res* (less the tools no word of the intent matched, which are not found ones), write
    the --html page; the exit status."""
    shown = res.matched()
    try:
        _print(shown, args, unmatched=len(res.tools) - len(shown.tools))
        sys.stdout.flush()
    except BrokenPipeError:  # `tooldns-resolve ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0 if shown.tools else 1
    if args.html:
        try:
            write_walk_page(res, args.html)
        except OSError as exc:
            print(f"tooldns-resolve: cannot write {args.html}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        print(f";; the walk's picture written to {os.path.abspath(args.html)}", file=sys.stderr)
    return 0 if shown.tools else 1


if __name__ == "__main__":
    sys.exit(main())
