#!/usr/bin/env python3
"""Resolutions against ``tooldns serve --workers 2`` while its workers are killed, one at a time, with queries in them.

Serves the shipped zones (moved onto ``--subnet``, so that a tree on 127.0.0.x is left alone) with two
workers on one port, runs ``--threads`` resolvers in a loop (no cache, so that every resolution asks
every zone), and ``--kills`` times stops a worker (SIGSTOP: the queries the kernel hands it wait in its
socket), kills it 0.3 s later (SIGKILL: they are lost) and waits while the server starts another. It
prints the resolutions that succeeded and failed, and the queries the resolvers asked again after a
timeout (``stats.timeout_retries``). ``PYTHONPATH`` picks the resolver library measured (and the servers).

    python scripts/attacks/kill_worker.py
    PYTHONPATH=/path/to/older/checkout python scripts/attacks/kill_worker.py   # its resolver, before

Exit status 0 when no resolution failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import resolver_client
from resolver_client import Resolver, ResolverError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from benchlib import copy_zones  # noqa: E402


def workers(pid: int) -> list[int]:
    """The worker processes of server *pid* (not multiprocessing's resource tracker)."""
    out = subprocess.run(["pgrep", "-P", str(pid), "-f", "spawn_main"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=10, help="workers killed, one at a time, each once its "
                   "predecessor's replacement is up (default 10)")
    p.add_argument("--threads", type=int, default=4, help="resolvers resolving in a loop (default 4)")
    p.add_argument("--subnet", default="127.0.95", help="loopback /24 the tree is moved to (default 127.0.95)")
    args = p.parse_args()

    with tempfile.TemporaryDirectory() as tmp, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind((f"{args.subnet}.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        copy_zones(ROOT / "zones", Path(tmp), args.subnet)
        server = subprocess.Popen([sys.executable, "-m", "tooldns.cli", "serve", tmp, "--port", str(port),
                                   "--workers", "2", "--no-rate-limit"], cwd=ROOT,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while len(workers(server.pid)) < 2 and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(2)  # the workers' sockets bound
            done, lock = threading.Event(), threading.Lock()
            counts = {"ok": 0, "failed": 0, "asked again": 0}
            why: Counter = Counter()

            def loop() -> None:
                with Resolver(root=f"{args.subnet}.1:{port}", cache=False, published_walk=False) as r:
                    while not done.is_set():
                        try:
                            res = r.resolve("historical weather Hong Kong")
                        except ResolverError as exc:
                            with lock:
                                counts["failed"] += 1
                                why[re.sub(r"[\d.]+:\d+", "ADDR", str(exc))[:120]] += 1
                            continue
                        with lock:
                            counts["ok"] += 1
                            counts["asked again"] += getattr(res.stats, "timeout_retries", 0)

            threads = [threading.Thread(target=loop) for _ in range(args.threads)]
            for t in threads:
                t.start()
            killed = 0
            for _ in range(args.kills):
                time.sleep(0.5)
                alive = workers(server.pid)
                if alive:
                    os.kill(alive[0], signal.SIGSTOP)
                    time.sleep(0.3)
                    os.kill(alive[0], signal.SIGKILL)
                    killed += 1
                # the replacement up before the next kill (else both could be down: refusals, not this attack)
                deadline = time.monotonic() + 30
                while len(workers(server.pid)) < 2 and time.monotonic() < deadline:
                    time.sleep(0.1)
                time.sleep(1.5)
            done.set()
            for t in threads:
                t.join()
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(30)
    load = os.getloadavg()
    print(f"resolver library {Path(resolver_client.__file__).parent}: {killed} workers killed with queries in them; "
          f"resolutions {counts['ok']} ok, {counts['failed']} failed; queries asked again after a timeout "
          f"{counts['asked again']}; load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    for text, n in why.most_common(5):
        print(f"  failed x{n}: {text}")
    return 0 if counts["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
