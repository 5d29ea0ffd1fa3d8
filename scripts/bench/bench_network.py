#!/usr/bin/env python3
"""How long a resolution takes across a network, against one HTTP call to a central search endpoint.

Serves a tree (``--zones``, the shipped ``zones/`` by default, its 127.0.0.x addresses moved to
127.88.0.x) with ``tooldns serve`` in a child process, and beside it, in another, an HTTP search
endpoint over the same tools with the same scorer (BM25 over every tool of the tree, as a central
registry searches: one POST of the intent, the top tools back as JSON). Both sit behind
:class:`tooldns.netsim.NetSim`, which holds every datagram and TCP segment for half the round trip
each way (jitter 10 % of it) and drops the set share.
For each round trip (``--rtts``, ms) and loss (``--losses``) it times ``--count`` resolutions of
distinct intents (the tools' own descriptions, cut to their first words) with one long-lived
``Resolver`` (the default mode, the walk the tree publishes, and ``get_one``), and as many HTTP
searches with httpx, over one kept-alive connection and over a new connection each.

It prints, for each, p50 and p99 in ms, the round trips on the critical path (a resolution's
sequential steps: the depths of the zones it asked; HTTP: one, plus the handshake on a new
connection) and the failures, and with ``--json`` writes the figures and a plot (PNG) beside them.

    python scripts/bench/bench_network.py                          # 1, 10, 50, 100 ms; 0, 1, 5 % loss
    python scripts/bench/bench_network.py --rtts 50 --losses 0 --count 100
    python scripts/bench/bench_network.py --zones built/ --json out/network.json
    python scripts/bench/bench_network.py --rtts 1,10 --losses 0.05 --min-rto 0.005   # a resolver for a LAN

The resolver runs in this process; the servers, the endpoint and the simulator's thread as described.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import shutil
import socket
import statistics
import sys
import tempfile
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchlib import copy_zones, percentile, start_servers, stop_servers  # noqa: E402
from resolver_client import Resolver, ResolverError  # noqa: E402
from tooldns.netsim import NetSim  # noqa: E402
from tooldns.scoring.bm25 import BM25  # noqa: E402
from tooldns.building.embed import read_tree  # noqa: E402

SUBNET = "127.88.0"
HTTP_ADDRESS = f"{SUBNET}.250"


def copy_tree(src: Path, dst: Path) -> list[str]:
    """The zone files of *src* (and its keys) in *dst*, every 127.0.0.N address moved to SUBNET.N; the
    addresses the zones' name servers then have."""
    copy_zones(src, dst, SUBNET)
    if (src / "keys").is_dir():
        shutil.copytree(src / "keys", dst / "keys")
    return sorted({a for f in dst.glob("*.yaml")
                   for a in re.findall(r"address: '?(127\.\d+\.\d+\.\d+)", f.read_text(encoding="utf-8"))})


def tools_of(zones: Path) -> list:
    return [t for f in read_tree(zones) for t in f.zone.tools]


def intents(tools, count: int) -> list[str]:
    """Distinct intents: each tool's description, its first eight words."""
    seen: dict[str, None] = {}
    for t in tools:
        words = " ".join((t.description or t.label).split()[:8])
        if words:
            seen.setdefault(words, None)
    out = list(seen)
    return (out * (count // max(1, len(out)) + 1))[:count]


def serve_http(zones: str, address: str, port_out, ready) -> None:
    """The central registry: POST /search {"intent", "k"} -> {"tools": [{"name", "target", "score"}]}."""
    tools = tools_of(Path(zones))
    index = BM25([t.text() for t in tools], k1=1.5, b=0.75)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            ranked = index.rank(str(body.get("intent", "")), int(body.get("k", 10)))
            data = json.dumps({"tools": [{"name": tools[i].label, "target": tools[i].target, "score": s}
                                         for i, s in ranked if s > 0]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self._headers_buffer.append(b"\r\n")  # headers and body in one write, as a production server sends
            self.wfile.write(b"".join(self._headers_buffer) + data)
            self._headers_buffer = []

        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle wait on replies

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer((address, 0), Handler)
    port_out.value = server.server_address[1]
    ready.set()
    server.serve_forever()


def run_sim(upstreams, commands) -> None:
    """The simulator in a process of its own (no GIL shared with the resolver timed): told its settings
    through *commands*, it answers each with its port and how far from due its timers ran since the
    last settings, on average (microseconds)."""
    with NetSim(upstreams) as sim:
        commands.send((sim.port, 0))
        while (settings := commands.recv()) is not None:
            c = sim.counters
            error = c.timer_error_us / c.timers if c.timers else 0
            c.timers = c.timer_error_us = 0
            sim.set(**settings)
            commands.send((sim.port, error))


def rounds(res) -> int:
    """Sequential steps of a resolution: the distinct depths of the zones its queries asked."""
    return len({h.zone.count(".") for h in res.trace if not h.cached})


def time_resolutions(resolver: Resolver, texts: list[str], mode: str) -> dict:
    times, steps, failed, queries = [], [], 0, []
    for text in texts:
        t0 = time.perf_counter()
        try:
            res = resolver.resolve(text, mode=mode)
        except ResolverError:
            failed += 1
            continue
        times.append((time.perf_counter() - t0) * 1000)
        if not res.tools:
            failed += 1
        steps.append(rounds(res))
        queries.append(res.stats.queries)
    return summary(times, failed, steps, queries)


def time_http(url: str, texts: list[str], keep_alive: bool) -> dict:
    try:  # the openai client's HTTP library: httpx2 in its newest releases, httpx before
        import httpx2 as httpx
    except ImportError:
        import httpx

    times, failed = [], 0
    # one client either way (making one costs more than a request); without keep-alive each request opens
    # a new TCP connection (plain HTTP: no TLS, whose handshake would add a round trip more)
    client = httpx.Client(timeout=10.0, limits=httpx.Limits(max_keepalive_connections=None if keep_alive else 0))
    try:
        client.post(url, json={"intent": texts[0], "k": 10})  # warm: the first request's imports and setup
        for text in texts:
            t0 = time.perf_counter()
            try:
                reply = client.post(url, json={"intent": text, "k": 10})
                reply.raise_for_status()
                if not reply.json()["tools"]:
                    failed += 1
            except httpx.HTTPError:
                failed += 1
                continue
            times.append((time.perf_counter() - t0) * 1000)
    finally:
        client.close()
    return summary(times, failed, [1 if keep_alive else 2] * len(times), [])


def summary(times: list[float], failed: int, steps: list[int], queries: list[int]) -> dict:
    return {"p50": percentile(times, 50) if times else None, "p99": percentile(times, 99) if times else None,
            "n": len(times), "failed": failed, "rounds": statistics.median(steps) if steps else None,
            "queries": statistics.mean(queries) if queries else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zones", default=str(ROOT / "zones"), help="the tree's zone files (default: the shipped zones/)")
    ap.add_argument("--rtts", default="1,10,50,100", help="round trips, ms, comma-separated")
    ap.add_argument("--losses", default="0,0.01,0.05", help="shares of datagrams and segments lost, comma-separated")
    ap.add_argument("--count", type=int, default=60, help="resolutions (and HTTP searches) timed for each setting")
    ap.add_argument("--min-rto", type=float, default=None,
                    help="the resolver's least retransmission timeout, seconds (default: the resolver's, 0.05)")
    ap.add_argument("--json", help="write the figures here, and a plot (.png) beside it")
    args = ap.parse_args(argv)
    rtts = [float(x) for x in args.rtts.split(",")]
    losses = [float(x) for x in args.losses.split(",")]

    work = Path(tempfile.mkdtemp(prefix="tooldns-network-"))
    zones = work / "zones"
    zones.mkdir()
    addresses = copy_tree(Path(args.zones), zones)
    texts = intents(tools_of(zones), args.count + 1)
    ctx = multiprocessing.get_context("spawn")
    port_out, ready = ctx.Value("i", 0), ctx.Event()
    http = ctx.Process(target=serve_http, args=(str(zones), HTTP_ADDRESS, port_out, ready), daemon=True)
    http.start()
    proc, (root_address, port) = start_servers(str(zones), 0)
    rows = []
    try:
        if not ready.wait(60):
            raise SystemExit("the HTTP endpoint did not start")
        upstreams = [(a, port) for a in addresses] + [(HTTP_ADDRESS, port_out.value)]
        commands, theirs = ctx.Pipe()
        sim = ctx.Process(target=run_sim, args=(upstreams, theirs), daemon=True)
        sim.start()
        try:
            sim_port, _ = commands.recv()
            url = f"http://{HTTP_ADDRESS}:{sim_port}/search"
            for rtt in rtts:
                for loss in losses:
                    commands.send({"one_way": rtt * 0.9 / 2000, "jitter": rtt * 0.1 / 1000, "loss": loss})
                    commands.recv()
                    timeout = max(0.2, 4 * rtt / 1000)
                    resolver = Resolver(root=(root_address, sim_port), timeout=timeout, cache=False,
                                        **({} if args.min_rto is None else {"min_rto": args.min_rto}))
                    resolver.resolve(texts[0])  # the published walk, learned once as a long-lived resolver does
                    row = {"rtt_ms": rtt, "loss": loss,
                           "default": time_resolutions(resolver, texts[1:], "get_important"),
                           "get_one": time_resolutions(resolver, texts[1:], "get_one"),
                           "http_keepalive": time_http(url, texts[1:], True),
                           "http_new_connection": time_http(url, texts[1:], False)}
                    commands.send({})
                    row["timer_error_us"] = commands.recv()[1]
                    rows.append(row)
                    print(line(row), flush=True)
        finally:
            commands.send(None)
            sim.join(10)
    finally:
        stop_servers(proc)
        http.terminate()
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(table(rows))
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"zones": args.zones, "count": args.count, "min_rto": args.min_rto,
                                   "rows": rows}, indent=1))
        plot(rows, out.with_suffix(".png"))
        print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


def _fmt(cell: dict) -> str:
    if cell["p50"] is None:
        return "all failed"
    fails = f", {cell['failed']} failed" if cell["failed"] else ""
    return f"{cell['p50']:.1f} / {cell['p99']:.1f} ({cell['rounds']:g} rt{fails})"


def line(row: dict) -> str:
    return (f"rtt {row['rtt_ms']:g} ms loss {row['loss']:.0%}: default {_fmt(row['default'])}; get_one "
            f"{_fmt(row['get_one'])}; HTTP kept-alive {_fmt(row['http_keepalive'])}; new connection "
            f"{_fmt(row['http_new_connection'])}; the simulator's timers off by "
            f"{row['timer_error_us']:.0f} us on average")


def table(rows: list[dict]) -> str:
    head = ["| RTT | loss | default walk p50 / p99 ms (round trips) | get_one | HTTP, kept-alive | HTTP, new connection |",
            "| --- | --- | --- | --- | --- | --- |"]
    return "\n".join(head + [f"| {r['rtt_ms']:g} ms | {r['loss']:.0%} | {_fmt(r['default'])} | {_fmt(r['get_one'])} | "
                             f"{_fmt(r['http_keepalive'])} | {_fmt(r['http_new_connection'])} |" for r in rows])


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, stat in zip(axes, ("p50", "p99")):
        for loss in sorted({r["loss"] for r in rows}):
            sel = [r for r in rows if r["loss"] == loss]
            for key, style in (("default", "-o"), ("get_one", "-s"), ("http_keepalive", "--^"), ("http_new_connection", ":v")):
                ys = [r[key][stat] for r in sel]
                if any(y is not None for y in ys):
                    ax.plot([r["rtt_ms"] for r in sel], ys, style, label=f"{key}, loss {loss:.0%}")
        ax.set_xlabel("round trip (ms)")
        ax.set_ylabel(f"{stat} (ms)")
        ax.set_title(f"resolution time, {stat}")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
