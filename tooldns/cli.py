"""``tooldns``: the server-side command line, a thin shell over the library (``build`` and
``dnssec`` in rooms of their own, :mod:`tooldns.commands`; the library below parses no arguments).

    tooldns serve zones/                 one server per name-server address (127.0.0.x:5300), live reload
    tooldns serve zones/ --no-rate-limit    the same without UDP rate limiting (load tests, fuzzing)
    tooldns serve zones/ --workers 4     four processes on the same addresses (SO_REUSEPORT)
    tooldns serve zones/ --only weather.tools. --listen 10.0.0.2   one zone, on this machine's address
    tooldns serve zones/ --metrics --query-log queries.jsonl   Prometheus on 127.0.0.1:9153, a JSON line per query
    tooldns check zones/                 validate zone files, print file:line errors
    tooldns demo "historical weather Hong Kong"   serve zones/, resolve one intent, stop
    tooldns build services.json --out built/       a catalog of tools to a tree of zone files
    tooldns build --update services.json --out built/   the built tree changed in place to the catalog as it is
    tooldns embed built/                 fill in missing or stale tool vectors and centroids, in place
    tooldns mcp --root 127.0.0.1:5300    tool discovery for agents as an MCP server (docs/mcp.md)
    tooldns dnssec keygen zones/         DNSSEC keys for every zone, DS into parents; serve then signs (docs/dnssec.md)

Exit status: 0 ok, 1 invalid zone files, 2 bad usage, 3 cannot bind or serve (or the server
extra, ``pip install 'tooldns[server]'``, is not installed).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

from . import __version__
from .commands.argtypes import bounded, port as _port, size as _size
from .exceptions import ToolDNSError, ZoneFileError

#: what the server side needs beyond the resolver library (the ``server`` extra)
SERVER_PACKAGES = ("dnslib", "yaml", "openai", "numpy", "sklearn", "prometheus_client")
try:
    from .building.build import Embedded
    from .commands.build import add_build_command
    from .commands.dnssec import add_dnssec_command, add_serve_flags, signing_from_args
    from .building.embed import ZoneFile, default_spec, embed_tree, read_tree, tree_warnings, uses_vectors
    from .embedding.registry import make_embedder
    from .scoring.hybrid import one_blas_thread
    from .serving.server import MAX_TCP, MAX_TCP_PER_CLIENT, TCP_IDLE, TCP_IDLE_BUSY
    from .serving.sockbuf import DEFAULT_RCVBUF
    from .serving.descriptors import ensure_descriptors
    from .serving.gcpolicy import freeze_tree
    from .serving.metrics import parse_address
    from .serving.lazy import DEFAULT_LOAD_QUEUE, DEFAULT_MAX_LOADED, DEFAULT_MAX_LOADING, DEFAULT_MAX_MEMORY
    from .serving.summaries import SUMMARY_BUDGET, SUMMARY_FLOOR
    from .serving.tree import DEFAULT_LOAD_PROCESSES, DEFAULT_PORT, Tree, TreeThread, load_tree
    from .serving.workers import Workers
    from .zone.hygiene import content_warnings
    from .zone.zonefile import load_zone
except ModuleNotFoundError as exc:
    if exc.name not in SERVER_PACKAGES:
        raise
    _MISSING: str | None = exc.name  # said by main(), instead of a traceback
    DEFAULT_PORT, DEFAULT_LOAD_PROCESSES = 5300, 1
    DEFAULT_MAX_LOADED, DEFAULT_MAX_LOADING, DEFAULT_LOAD_QUEUE, DEFAULT_MAX_MEMORY = 10_000, 1, 64, 768 * 2**20
    DEFAULT_RCVBUF = 16 * 2**20
    SUMMARY_FLOOR, SUMMARY_BUDGET = 10.0, 60
else:
    _MISSING = None


def _server_options(args) -> dict:
    """The ``serve`` flags given, as :class:`DNSServer` keyword arguments (the ones left out keep its defaults)."""
    options = {key: getattr(args, key) for key in ("rate_limit", "max_tcp", "max_tcp_per_client", "tcp_idle",
                                                    "tcp_idle_busy", "rcvbuf") if getattr(args, key) is not None}
    if args.rate_limit_exempt:
        options["rate_limit_exempt"] = tuple(args.rate_limit_exempt)
    return options


def _print_counters(counters: dict[str, dict[str, int]]) -> None:
    for origin, c in counters.items():
        if c.get("rate_limited") or c.get("tcp_refused"):
            print(f"{origin}: {c['rate_limited']} UDP replies rate limited ({c['slipped']} sent truncated), "
                  f"{c['tcp_refused']} TCP connections refused, {c['tcp_evicted']} idle ones closed to make room",
                  flush=True)
        if c.get("scorer_calls") or c.get("scorer_fallbacks"):
            print(f"{origin}: LLM {c.get('scorer_calls', 0)} calls, {c.get('scorer_prompt_tokens', 0)} prompt + "
                  f"{c.get('scorer_completion_tokens', 0)} completion tokens, {c.get('scorer_cache_hits', 0)} "
                  f"cache hits, {c.get('scorer_fallbacks', 0)} BM25 fallbacks", flush=True)


def _report_options(args) -> dict:
    """The ``serve`` flags for metrics and the query log, as :class:`Tree` keyword arguments."""
    return {"metrics": args.metrics, "query_log": args.query_log, "log_intents": args.log_intents}


def _print_reports(args, workers: int = 1) -> None:
    if args.metrics is not None:
        address, port = args.metrics
        host = f"[{address}]" if ":" in address else address
        last = "" if workers == 1 else f" to http://{host}:{port + workers - 1}/metrics (worker i on port {port}+i)"
        print(f"metrics on http://{host}:{port}/metrics{last}", flush=True)
    if args.query_log is not None:
        print(f"query log: {'standard error' if args.query_log == '-' else args.query_log}"
              f"{', with intents' if args.log_intents else ''}", flush=True)


def _memory_bound(max_memory: int) -> str:
    if not max_memory:
        return ""
    return f" holding {max_memory / 2**20:,.0f} MiB" if max_memory >= 2**20 else f" holding {max_memory:,} bytes"


def _print_started(tree, note: str = "") -> None:
    print(tree.table(), flush=True)
    address, port = tree.root()
    zones = (f"{len(tree.stores)} zones" if tree.lazy is None else
             f"{1 + len(tree.lazy.paths)} zones (the others loaded when first asked for, "
             f"at most {tree.lazy.max_loaded} at once{_memory_bound(tree.lazy.max_memory)})")
    print(f"{zones} on {len(tree.plan)} addresses{note}; root zone on {address}:{port}; try: "
          f"tooldns-resolve \"historical weather Hong Kong\" --root {address}:{port}\nCtrl-C stops all servers.",
          flush=True)


def _print_rcvbuf(tree) -> None:
    """The UDP receive buffers the kernel gave (it caps what was asked at net.core.rmem_max unless the
    process may force it; it reports twice what it grants, its bookkeeping included)."""
    sizes = sorted({server.rcvbuf_effective for server in tree.sockets.values() if server.rcvbuf_effective})
    if sizes:
        print(f"UDP receive buffer: {' to '.join(str(n) for n in sizes[::max(1, len(sizes) - 1)])} bytes "
              f"(as the kernel reports it)", flush=True)


async def _run_tree(tree, args) -> None:
    await tree.start()
    if tree.metrics_address is not None:
        args.metrics = tree.metrics_address  # the port chosen, when 0
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, tree.look_soon)  # before "started": a SIGHUP then must not stop it
    _print_reports(args)
    _print_rcvbuf(tree)
    _print_started(tree)
    await stop.wait()
    _print_counters(tree.counters())
    await tree.stop()


#: with --workers, each worker polls its children at least this often (seconds), unless told otherwise
WORKER_SUMMARY_REFRESH = 5.0


def _serve_workers(args, tree) -> int:
    """``--workers N``: N processes serving the same addresses (SO_REUSEPORT); this one supervises."""
    workers = Workers(args.zonedir, args.port, args.workers, log_level=logging.getLogger().level,
                      answer_cache=args.answer_cache, only=args.only, listen=args.listen, **_report_options(args),
                      signing=signing_from_args(args), summaries=args.summaries,
                      **_lazy_options(args),
                      # a NOTIFY reaches one worker of the parent's address: the others learn by polling
                      summary_refresh=args.summary_refresh or WORKER_SUMMARY_REFRESH, **_server_options(args))
    workers.start()
    _print_reports(args, args.workers)
    _print_started(tree, f", each served by {args.workers} worker processes (pids "
                         f"{' '.join(map(str, workers.pids()))})")
    workers.wait()
    _print_counters(workers.stop())
    return 0


def _lazy_options(args) -> dict:
    """The ``serve`` flags for lazy loading, watching the files and following children's summaries, as
    :class:`Tree` keyword arguments."""
    lazy = ({"lazy": True, "max_loaded": args.max_loaded, "max_memory": args.max_loaded_memory,
             "max_loading": args.max_loading,
             "load_queue": args.load_queue, "load_processes": args.load_processes,
             "snapshots": False if args.no_snapshots else args.snapshots or True} if args.lazy else {})
    return {**lazy, "watch_interval": args.watch_interval, "summary_floor": args.summary_floor,
            "summary_budget": args.summary_budget}


def _serve(args) -> int:
    try:
        tree = Tree(args.zonedir, args.port, answer_cache=args.answer_cache, only=args.only, listen=args.listen,
                    signing=signing_from_args(args), **_lazy_options(args),
                    summaries=args.summaries, summary_refresh=args.summary_refresh,
                    **_report_options(args), **_server_options(args))
        if args.workers > 1 and args.port == 0:
            raise ValueError("--workers needs a fixed --port: with port 0 each worker would pick its own")
        if args.workers > 1 and args.metrics is not None and args.metrics[1] == 0:
            raise ValueError("--workers needs a fixed --metrics port: worker i serves its metrics on PORT+i")
        if args.log_intents and args.query_log is None:
            raise ValueError("--log-intents needs --query-log FILE")
    except ValueError as exc:
        print(f"tooldns serve: {exc}", file=sys.stderr)
        return 2
    note = ensure_descriptors(len(tree.plan), args.max_tcp or MAX_TCP).note()
    if note:
        print(note, file=sys.stderr, flush=True)
    if args.workers > 1:
        tree.close()  # checked; each worker loads the tree itself
        code = _serve_workers(args, tree)
    else:
        one_blas_thread()
        freeze_tree(tree)  # the loaded zones out of the collector's full collections (gcpolicy)
        asyncio.run(_run_tree(tree, args))
        code = 0
    print("stopped", flush=True)
    return code


def _check(args) -> int:
    """Errors exit 1; tool vectors missing or stale (fixed by ``tooldns embed``) and stuffed, injected,
    oversized or unprintable text are warnings (exit 0)."""
    path = Path(args.path)
    if not path.exists():
        raise ZoneFileError(f"{path}: no such file or directory")
    if path.is_dir():
        warnings: list[str] = []
        stores = load_tree(path, warn=warnings.append)  # printed below with the others, not logged
        placed = sum(len(s.zone.tools) for s in stores)
        print(f"{len(stores)} zones, {placed} tools placed: ok")
        warnings += tree_warnings([ZoneFile(Path(s.path), s.zone) for s in stores], path)
        warnings += [w for s in stores for w in content_warnings(s.zone, s.path)]
    else:
        zone = load_zone(path)
        print(f"{zone.origin}: {len(zone.children)} children, {len(zone.tools)} tools: ok")
        warnings = tree_warnings([ZoneFile(path, zone)], path.parent) + content_warnings(zone, str(path))
    for line in warnings:
        print(line)
    return 0


def _embed(args) -> int:
    # read here to know whether a model is needed, and read again by embed_tree once it is loaded (seconds
    # later): an edit made meanwhile is then what it embeds, not what it overwrites
    files = read_tree(args.zonedir)
    if args.scorer is None and not any(uses_vectors(f.zone) for f in files):  # no model to load (seconds) for nothing
        print(f"{args.zonedir}: 0 of {len(files)} zones changed: none scores vectors "
              f"(--scorer hybrid switches them to the hybrid scorer and embeds them all)")
        return 0
    spec = args.model
    if spec is None:
        spec, note = default_spec(files)
        if note:
            print(f"note: {note}", file=sys.stderr)
    embedder = make_embedder(spec)

    def progress(msg: str) -> None:
        print(f"[embed] {msg}", file=sys.stderr, flush=True)

    report = embed_tree(args.zonedir, embedder, centroids=args.centroids, scorer=args.scorer, progress=progress)
    for w in report.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(report.text())
    return 0


def _network(text: str) -> str:
    try:
        return str(ipaddress.ip_network(text, strict=False))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an address or a network such as 192.0.2.0/24: {text!r}") from None


_seconds = bounded(float, 0, above=True, what="a number of seconds above 0")
_interval = bounded(float, 0, what="a number of seconds, 0 or more")
_whole = bounded(int, 0, what="a whole number of at least 0")
_positive = bounded(int, 1, what="a whole number of at least 1")


def _demo(args) -> int:
    """Serve the tree, resolve each intent with the resolver library's own CLI in a process of its
    own (as an agent would, and so the server side never imports the client), stop."""
    worst = 0
    with TreeThread(args.zones, args.port) as tree:
        print(tree.table(), end="\n\n", flush=True)
        address, port = tree.root()
        for intent in args.intent or ["historical weather Hong Kong"]:
            print(f"intent: {intent}", flush=True)
            command = [sys.executable, "-m", "resolver_client", intent, "--root", f"{address}:{port}", "--k", str(args.k),
                       "--timeout", str(args.timeout)]
            code = subprocess.run(command + (["--trace"] if args.trace else []), check=False).returncode
            worst = max(worst, 3 if code not in (0, 1) else 0)
            print(flush=True)
    return worst


def _names(text: str) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, not {text!r}")
    return items


def _add_scale_flags(s: argparse.ArgumentParser) -> None:
    """``serve``'s flags for serving a tree from several processes or machines."""
    s.add_argument("--workers", type=_positive, default=1, metavar="N",
                   help="processes serving the same addresses and port (SO_REUSEPORT), so that queries spread over "
                        "N cores (default 1)")
    s.add_argument("--only", type=_names, metavar="ORIGIN[,ORIGIN...]",
                   help="serve only these zones of the directory (every file is still checked)")
    s.add_argument("--listen", type=_names, metavar="ADDR[,ADDR...]",
                   help="serve the zones on these addresses instead of their name servers' (this machine's own "
                        "address; a backend behind dnsdist, whose address the zone files name)")
    s.add_argument("--lazy", action="store_true",
                   help="serve every zone on the --listen addresses, each loaded when first asked for: a tree "
                        "too big to load before answering (a million tools; zone files named after their "
                        "origins, as tooldns build names them; docs/performance.md)")
    s.add_argument("--max-loaded", type=_positive, default=DEFAULT_MAX_LOADED, metavar="N",
                   help=f"with --lazy, zones kept loaded at most; the least recently asked goes first "
                        f"(default {DEFAULT_MAX_LOADED})")
    s.add_argument("--max-loaded-memory", type=_size, default=DEFAULT_MAX_MEMORY, metavar="SIZE",
                   help=f"with --lazy, bytes the zones kept loaded hold together at most, as counted (768M, 2G; "
                        f"0: no bound but --max-loaded); the least recently asked goes first; a zone is counted when "
                        f"loaded, an edit of it when it is loaded again; the process's resident memory runs about "
                        f"twice that (default {DEFAULT_MAX_MEMORY // 2**20}M; "
                        f"docs/serving.md)")
    s.add_argument("--max-loading", type=_positive, default=DEFAULT_MAX_LOADING, metavar="N",
                   help=f"with --lazy, zones loaded at once at most, off the event loop (default {DEFAULT_MAX_LOADING})")
    s.add_argument("--load-queue", type=_positive, default=DEFAULT_LOAD_QUEUE, metavar="N",
                   help=f"with --lazy, zones waiting to be loaded at most; a query about yet another zone gets "
                        f"SERVFAIL at once (default {DEFAULT_LOAD_QUEUE})")
    s.add_argument("--load-processes", type=int, choices=range(0, 65), default=DEFAULT_LOAD_PROCESSES, metavar="N",
                   help=f"processes that read and index zone files (edited ones, and with --lazy those first "
                        f"asked for), so that the serving process only takes the result (0: its own threads do "
                        f"it; default {DEFAULT_LOAD_PROCESSES})")
    s.add_argument("--snapshots", metavar="DIR",
                   help="keep each zone's index in DIR, to be read back whole when the zone is "
                        "loaded again, even after a restart (default: the tree's .snapshots, which tooldns "
                        "build makes; docs/serving.md)")
    s.add_argument("--no-snapshots", action="store_true", help="keep no index on disk")
    s.add_argument("--summary-floor", type=_interval, default=SUMMARY_FLOOR, metavar="S",
                   help=f"poll a child no more often than every S seconds, whatever its SOA refresh says "
                        f"(default {SUMMARY_FLOOR:g}; --summary-refresh below it wins)")
    s.add_argument("--summary-budget", type=_positive, default=SUMMARY_BUDGET, metavar="N",
                   help=f"rebuilds of its parent a child's changed summaries may cause an hour (default "
                        f"{SUMMARY_BUDGET}); past it, its changes wait")
    s.add_argument("--summary-refresh", type=_seconds, metavar="S",
                   help="poll each child's serial at least every S seconds (default: the child's SOA refresh); "
                        "NOTIFY carries a change at once either way (docs/summaries.md)")
    s.add_argument("--no-summaries", dest="summaries", action="store_false",
                   help="parents keep the summaries their zone files hold: no polling, no NOTIFY")
    s.add_argument("--watch-interval", type=_interval, default=0.5, metavar="S",
                   help="look at the zone files for edits every S seconds (default 0.5; 0: never, only on "
                        "SIGHUP, as BIND and NSD reload)")


def _add_limit_flags(s: argparse.ArgumentParser) -> None:
    """``serve``'s flags for UDP rate limiting and TCP limits (docs/security.md)."""
    rl = s.add_mutually_exclusive_group()
    rl.add_argument("--rate-limit", type=_whole, metavar="N",
                    help="UDP responses per second per client prefix, every zone, over what the zone files say "
                         "(0: off; default: each zone's rate_limit setting, 100 unless it says otherwise)")
    rl.add_argument("--no-rate-limit", dest="rate_limit", action="store_const", const=0,
                    help="no UDP rate limiting at all (load tests, fuzzing)")
    s.add_argument("--rate-limit-exempt", action="append", type=_network, metavar="CIDR",
                   help="a network never rate limited, in every zone (repeatable)")
    s.add_argument("--max-tcp", type=_positive, metavar="N", help=f"TCP connections per server (default {MAX_TCP})")
    s.add_argument("--max-tcp-per-client", type=_positive, metavar="N",
                   help=f"TCP connections per server from one address (default {MAX_TCP_PER_CLIENT})")
    s.add_argument("--tcp-idle", type=_seconds, metavar="S",
                   help=f"seconds a TCP connection may wait idle for its next query (default {TCP_IDLE:g})")
    s.add_argument("--tcp-idle-busy", type=_seconds, metavar="S",
                   help=f"the same while more than half of --max-tcp are taken (default {TCP_IDLE_BUSY:g})")
    s.add_argument("--rcvbuf", type=bounded(int, 0, most=2**31 - 1, what="a number of bytes, 0 or more"),
                   metavar="BYTES", help=f"UDP receive buffer of each server, so that bursts wait instead of being "
                                         f"dropped (default {DEFAULT_RCVBUF}; the kernel caps it at "
                                         f"net.core.rmem_max unless allowed to force it; 0: the system's default)")


def _mcp(argv: list[str], replace: bool = False) -> int:
    """``tooldns mcp``: hand over to the resolver library's MCP server (:mod:`resolver_client.mcp_server`,
    a client of the tree: the server side never imports the client), which needs the ``mcp`` extra and
    not the server's. Run as a program on POSIX (*replace*), this process becomes it: the agent host
    keeps its stdio and signals; else it runs as a child."""
    command = [sys.executable, "-m", "resolver_client.mcp_server", *argv]
    if replace and os.name == "posix":
        sys.stdout.flush()
        os.execv(sys.executable, command)
    try:
        return subprocess.run(command, check=False).returncode
    except KeyboardInterrupt:
        return 0


def _add_report_flags(s: argparse.ArgumentParser) -> None:
    """``serve``'s flags for what operators read: Prometheus metrics and the query log (docs/operations.md)."""
    s.add_argument("--metrics", nargs="?", const="", type=_metrics_address, metavar="ADDR:PORT",
                   help="serve Prometheus metrics over HTTP at /metrics (alone: 127.0.0.1:9153, CoreDNS's port; "
                        "with --workers N, worker i serves them on PORT+i)")
    s.add_argument("--query-log", metavar="FILE",
                   help="append one JSON line per query answered to FILE (-: standard error); written off the "
                        "serving thread, lines dropped and counted rather than slowing answers")
    s.add_argument("--log-intents", action="store_true",
                   help="include each query's intent text in the query log (off by default: intents may be private)")


def _metrics_address(text: str) -> tuple[str, int]:
    try:
        return parse_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_mcp_command(sub) -> None:
    """``mcp`` in ``tooldns --help``; :func:`_without_server_extra` runs it before any parsing."""
    m = sub.add_parser("mcp", help="tool discovery for agents as an MCP server, over stdio or HTTP (tooldns mcp --help)")
    m.set_defaults(func=lambda args: _mcp([]))


def _without_server_extra(argv: list[str] | None) -> int | None:
    """What ``tooldns`` answers before, and without, the server extra: ``--version``, and ``mcp``
    (which has options of its own); None for everything else."""
    given = sys.argv[1:] if argv is None else argv
    if given[:1] == ["--version"]:
        print(f"tooldns {__version__}")
        return 0
    if given[:1] == ["mcp"]:
        return _mcp(given[1:], replace=argv is None)
    return None


def _add_check_and_demo(sub) -> None:
    """``tooldns check`` and ``tooldns demo``."""
    c = sub.add_parser("check", help="validate a zone file or a directory of them",
                       description="Validate a zone file or a directory of them as tooldns serve would load them: "
                                   "every error with its file and line (exit 1), then warnings (exit 0): delegations "
                                   "whose zone file is not there, tool vectors missing or stale (tooldns embed fills "
                                   "them in), and text that looks stuffed, injected, oversized or unprintable.")
    c.add_argument("path", help="a zone file, or a directory of them")
    c.set_defaults(func=_check)
    d = sub.add_parser("demo", help="serve a zone directory, resolve intents, print the results, stop")
    d.add_argument("intent", nargs="*", help="intents to resolve (default: historical weather Hong Kong)")
    d.add_argument("--zones", default="zones", help="the zone directory to serve (default zones, the shipped tree)")
    d.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"port to serve it on (default {DEFAULT_PORT})")
    d.add_argument("--k", type=int, default=3, help="children asked for at each step (default 3)")
    d.add_argument("--trace", action="store_true", help="print every hop of each resolution, like dig +trace")
    d.add_argument("--timeout", type=float, default=1.0, help="seconds the resolver waits for each reply (default 1)")
    d.set_defaults(func=_demo)


def main(argv: list[str] | None = None) -> int:
    if (early := _without_server_extra(argv)) is not None:
        return early
    if _MISSING is not None:
        print(f"tooldns: the server side needs {_MISSING!r}, which is not installed; install the server extra: "
              "pip install 'tooldns[server]'", file=sys.stderr)
        return 3
    p = argparse.ArgumentParser(prog="tooldns", description="ToolDNS: tool discovery on DNS.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log reloads and errors")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve every zone file of a directory, one server per name-server address")
    s.add_argument("zonedir", help="a directory of *.yaml zone files (zones/, or what tooldns build wrote)")
    s.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"port on every zone's address (default {DEFAULT_PORT})")
    s.add_argument("--answer-cache", type=int, default=4096, metavar="N",
                   help="replies kept per server for repeated identical queries (0: off; default 4096)")
    for add_flags in (_add_scale_flags, _add_limit_flags, _add_report_flags, add_serve_flags):
        add_flags(s)
    s.set_defaults(func=_serve)
    _add_check_and_demo(sub)
    add_build_command(sub)
    e = sub.add_parser("embed", help="fill in missing or stale tool vectors and centroids of a zone directory, "
                                     "in place")
    e.add_argument("zonedir")
    e.add_argument("--model", metavar="SPEC",
                   help="embedder: e5, minilm, minilm-static, static:PATH, local:PATH, openai:MODEL, hash, hash:DIM "
                        "(default: the model the zones' "
                        "vectors use, when it can be named so; else minilm)")
    e.add_argument("--centroids", type=_positive, default=Embedded.CENTROIDS, metavar="N",
                   help=f"centroids per delegation (default {Embedded.CENTROIDS})")
    e.add_argument("--scorer", choices=["hybrid"],
                   help="switch every zone to this scorer and embed them all (default: only zones that score "
                        "vectors or carry some are embedded; scorers stay)")
    e.set_defaults(func=_embed)
    _add_mcp_command(sub)
    add_dnssec_command(sub)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        code = args.func(args)
        sys.stdout.flush()  # here, where a closed pipe can be caught, not at the interpreter's exit
        return code
    except BrokenPipeError:
        # the reader went away (tooldns dnssec show | head): as Python's documentation of SIGPIPE advises,
        # what is left to write goes nowhere, and the exit is quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except ZoneFileError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"tooldns: {exc}", file=sys.stderr)
        return 3
    except ToolDNSError as exc:
        print(f"tooldns: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
