#!/usr/bin/env python3
"""A flood of MCP sessions from one address against ``tooldns mcp --transport streamable-http``, then a new client.

Starts the MCP server of ``--checkout`` (default this one; give an older checkout to see it before the
per-client bound) on 127.0.0.1, sends ``--sessions`` ``initialize`` requests from 127.0.0.1 over
``--connections`` keep-alive connections (each opens a session the flooder never uses or closes), then
one ``initialize`` from another address (127.0.0.2) as a new client would. It prints the flood's HTTP
statuses, its rate, whether the new client was served, and the server's resident memory before and
after (``/proc/PID/status``). No DNS tree is needed: ``initialize`` asks none.

    python scripts/attacks/mcp_sessions.py                                  # 10,000 initialize
    python scripts/attacks/mcp_sessions.py --checkout /path/to/older/checkout
    python scripts/attacks/mcp_sessions.py --mcp-arg=--max-sessions-per-client=64

Exit status 0 when the new client was served, 1 otherwise.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "flood", "version": "0"}}}).encode()
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def initialize(conn: http.client.HTTPConnection, path: str) -> int:
    """One ``initialize`` POST on *conn*; its HTTP status (the body is read and dropped)."""
    conn.request("POST", path, body=INITIALIZE, headers=HEADERS)
    response = conn.getresponse()
    response.read()
    return response.status


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=10000, help="initialize requests of the flood (default 10,000)")
    p.add_argument("--connections", type=int, default=16, help="keep-alive connections they go over (default 16)")
    p.add_argument("--checkout", default=str(ROOT), help="run the MCP server of this checkout (default: this one)")
    p.add_argument("--mcp-arg", action="append", default=[], help="an argument for tooldns mcp (repeatable)")
    args = p.parse_args()

    port = free_port()
    env = {**os.environ, "PYTHONPATH": args.checkout}
    with tempfile.TemporaryFile("w+") as log:
        mcp = subprocess.Popen([sys.executable, "-m", "resolver_client.mcp_server", "--root", "127.0.0.1:9",
                                "--transport", "streamable-http", "--port", str(port), *args.mcp_arg],
                               cwd=args.checkout, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if mcp.poll() is not None or time.monotonic() > deadline:
                        log.seek(0)
                        raise SystemExit(f"the MCP server did not start:\n{log.read()[-2000:]}")
                    time.sleep(0.1)
            rss_before = rss_mb(mcp.pid)
            statuses: Counter = Counter()
            lock = threading.Lock()
            share = [args.sessions // args.connections + (i < args.sessions % args.connections)
                     for i in range(args.connections)]

            def flood(n: int) -> None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                for _ in range(n):
                    try:
                        status = initialize(conn, "/mcp")
                    except (OSError, http.client.HTTPException) as exc:
                        status = type(exc).__name__
                        conn.close()
                        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                    with lock:
                        statuses[status] += 1
                conn.close()

            t0 = time.perf_counter()
            threads = [threading.Thread(target=flood, args=(n,)) for n in share]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            seconds = time.perf_counter() - t0
            rss_after = rss_mb(mcp.pid)
            newcomer = http.client.HTTPConnection("127.0.0.1", port, timeout=60, source_address=("127.0.0.2", 0))
            served = initialize(newcomer, "/mcp")
            newcomer.close()
        finally:
            mcp.terminate()
            mcp.wait(30)

    print(f"{args.sessions} initialize from 127.0.0.1 over {args.connections} connections in {seconds:.1f} s "
          f"({args.sessions / seconds:.0f}/s): " + ", ".join(f"HTTP {s} x{n}" for s, n in sorted(statuses.items(),
                                                                                              key=str)))
    print(f"  then a new client (127.0.0.2): HTTP {served} ({'served' if served == 200 else 'locked out'})")
    print(f"  MCP server RSS: {rss_before:.0f} MB before, {rss_after:.0f} MB after the flood")
    load = os.getloadavg()
    print(f"  load: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (1, 5, 15 min)")
    return 0 if served == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
