#!/usr/bin/env python3
"""An MCP gateway's load on a tree: N concurrent ``find_tools`` calls from one host, every result accounted for.

Serves the shipped zones (copied onto ``--subnet``, so that a tree already on 127.0.0.x is left alone)
with ``tooldns serve`` as it starts by default (UDP rate limiting on, 16 TCP connections per client
address), starts ``tooldns mcp --transport streamable-http`` in front of it, and makes ``--calls``
``find_tools`` calls at once over one MCP session (the SDK's own client), each a different intent.
It prints how many came back whole, partial (their ``warnings`` name a zone that did not answer or a
tool whose details could not be had) or failed (an ``isError`` result), the warnings by kind, the
most files the MCP server held open at once (``/proc/PID/fd``, sampled), what the tree's servers
counted (replies rate limited, TCP connections refused) and the machine's load.

    python scripts/attacks/mcp_gateway.py                                    # 100 calls, get_important
    python scripts/attacks/mcp_gateway.py --calls 200 --mode get_all
    python scripts/attacks/mcp_gateway.py --serve-arg=--rate-limit-exempt=127.0.0.0/8   # the gateway exempt
    python scripts/attacks/mcp_gateway.py --mcp-arg=--max-walks=16
    python scripts/attacks/mcp_gateway.py --checkout /path/to/other/checkout  # its MCP server (before/after)

Exit status 0 when every call came back whole, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchlib import copy_zones, distinct_intents, start_servers, stop_servers  # noqa: E402

#: tasks the shipped tree has tools for; distinct_intents makes as many different ones as asked from them
INTENTS = [
    "historical weather Hong Kong", "typhoon warning", "weather forecast for tomorrow", "severe weather alerts",
    "send a slack message", "post to a chat channel", "send an email", "read my inbox",
    "schedule a meeting", "create a calendar event", "edit a document", "take notes",
    "bitcoin price", "stock quotes", "make a payment", "refund a card charge",
    "search encyclopedia articles", "find research papers", "search the web", "geocode an address",
    "driving directions", "find a python package", "open a pull request", "search code repositories",
    "plan a trip: flights, hotel, weather",
]


def free_port(address: str) -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def wait_listening(address: str, port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the MCP server stopped (status {proc.returncode})")
        try:
            with socket.create_connection((address, port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("the MCP server did not start listening")


class FdSampler(threading.Thread):
    """The most file descriptors process *pid* held at once, sampled every few milliseconds."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.peak = max(self.peak, len(os.listdir(f"/proc/{self.pid}/fd")))
            except OSError:
                pass
            time.sleep(0.002)


def warning_kind(text: str) -> str:
    """A warning without its zone, server and tool names: what kind of trouble it reports."""
    if text.startswith("details of "):
        return "details of a tool: " + text.split(": ", 1)[1].split(" (")[0].split(":")[0]
    if "no name server answered" in text:
        why = text.split("(", 1)[1] if "(" in text else ""
        return "a zone did not answer: " + re.sub(r"^[\d.:\[\]a-f]+: ", "", why).split(" ")[0].rstrip(")")
    return re.sub(r"[\w.-]+\.tools\.|\d+(\.\d+)?", "#", text)[:80]


async def gateway(url: str, intents: list[str], mode: str) -> tuple[Counter, Counter, Counter, float]:
    from mcp import Client

    outcomes, warnings, errors = Counter(), Counter(), Counter()
    async with Client(url, read_timeout_seconds=120) as client:
        t0 = time.perf_counter()

        async def one(intent: str) -> None:
            try:
                result = await client.call_tool("find_tools", {"intent": intent, "mode": mode})
            except Exception as exc:  # the call itself failed (HTTP, protocol)
                outcomes["exception"] += 1
                errors[f"{type(exc).__name__}: {str(exc)[:80]}"] += 1
                return
            if result.is_error:
                outcomes["error"] += 1
                text = " ".join(getattr(b, "text", "") for b in result.content)
                errors[re.sub(r"'[^']*'|\d+(\.\d+)?", "#", text)[:100]] += 1
                return
            found = result.structured_content or {}
            outcomes["partial" if found.get("warnings") else "whole"] += 1
            for w in found.get("warnings", []):
                warnings[warning_kind(w)] += 1

        await asyncio.gather(*(one(i) for i in intents))
        return outcomes, warnings, errors, time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=100, help="find_tools calls made at once (default 100)")
    p.add_argument("--mode", default="get_important", choices=["get_one", "get_important", "get_all"])
    p.add_argument("--zones", default=str(ROOT / "zones"), help="zone directory to serve (default zones/)")
    p.add_argument("--queries", help="a JSON list of {\"query\": ...} to draw the intents from (ToolRet's "
                   "queries.dev.en.json for a tree built of its catalog; default: tasks the shipped tree has tools for)")
    p.add_argument("--subnet", default="127.0.94", help="loopback /24 the tree is moved to (default 127.0.94)")
    p.add_argument("--serve-arg", action="append", default=[], help="an argument for tooldns serve (repeatable)")
    p.add_argument("--mcp-arg", action="append", default=[], help="an argument for tooldns mcp (repeatable)")
    p.add_argument("--checkout", default=str(ROOT), help="run the MCP server of this checkout (default: this one)")
    p.add_argument("--seed", type=int, default=0, help="seed of the intents drawn")
    args = p.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        zones = copy_zones(Path(args.zones), Path(tmp) / "zones", args.subnet)
        tree, (address, port) = start_servers(str(zones), free_port(f"{args.subnet}.1"), extra=args.serve_arg,
                                              rate_limit=True)
        http_port = free_port("127.0.0.1")
        env = {**os.environ, "PYTHONPATH": args.checkout}
        log = open(Path(tmp) / "mcp.log", "w+")
        mcp = subprocess.Popen([sys.executable, "-m", "resolver_client.mcp_server", "--root", f"{address}:{port}",
                                "--transport", "streamable-http", "--port", str(http_port), *args.mcp_arg],
                               cwd=args.checkout, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        try:
            wait_listening("127.0.0.1", http_port, mcp)
            sampler = FdSampler(mcp.pid)
            fds_idle = len(os.listdir(f"/proc/{mcp.pid}/fd"))
            sampler.start()
            base = [q["query"] for q in json.loads(Path(args.queries).read_text())] if args.queries else INTENTS
            intents = distinct_intents(base, args.calls, args.seed)
            outcomes, warnings, errors, seconds = asyncio.run(
                gateway(f"http://127.0.0.1:{http_port}/mcp", intents, args.mode))
            sampler.stop.set()
            sampler.join()
        finally:
            mcp.terminate()
            mcp.wait(30)
            stop_servers(tree)
        time.sleep(0.5)  # the tree's last lines (its counters) read
        counters = [line.rstrip() for line in tree.log_tail if "rate limited" in line or "refused" in line]
        log.seek(0)
        tracebacks = log.read().count("Traceback")

    print(f"{args.calls} find_tools calls at once (mode {args.mode}) through one MCP session, in {seconds:.1f} s:")
    print(f"  whole {outcomes['whole']}, partial {outcomes['partial']}, errors {outcomes['error']}, "
          f"failed calls {outcomes['exception']}")
    for kind, n in warnings.most_common():
        print(f"  warning x{n}: {kind}")
    for kind, n in errors.most_common():
        print(f"  error x{n}: {kind}")
    print(f"  MCP server: at most {sampler.peak} open files ({fds_idle} idle), {tracebacks} tracebacks in its log")
    for line in counters or ["  the tree's servers: nothing rate limited, no TCP connection refused"]:
        print(f"  tree: {line.strip()}")
    print(f"  load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1, 5, 15 min)")
    return 0 if outcomes["whole"] == args.calls else 1


if __name__ == "__main__":
    sys.exit(main())
