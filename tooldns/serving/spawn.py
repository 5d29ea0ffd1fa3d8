"""``tooldns serve`` in a child process, as benchmarks and tools run it: started, its root's address read
from what it prints, its log drained so that it never blocks, and stopped.

    proc, (address, port) = start_servers("built/", 5300, extra=["--lazy"])
    ...
    stop_servers(proc)
"""

from __future__ import annotations

import collections
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

#: where the child runs (the checkout, so that ``-m tooldns.cli`` finds this copy of the package)
ROOT = Path(__file__).resolve().parents[2]


def start_servers(zones: str, port: int, answer_cache: int = 4096, extra: list[str] | tuple[str, ...] = (),
                  rate_limit: bool = False, wrapper: list[str] | tuple[str, ...] = ()) -> tuple[subprocess.Popen, tuple[str, int]]:
    """``tooldns serve ZONES`` (with *extra* arguments) in its own process; returns it and the root server's (address, port).

    Response rate limiting is off unless *rate_limit*: a benchmark is one client flooding on purpose.
    *wrapper* runs the process under another command (``valgrind --tool=callgrind ...``).
    """
    switch = [] if rate_limit else ["--no-rate-limit"]
    proc = subprocess.Popen([*wrapper, sys.executable, "-m", "tooldns.cli", "serve", str(zones), "--port", str(port),
                             "--answer-cache", str(answer_cache), *switch, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    lines = []
    while True:
        line = proc.stdout.readline()
        lines.append(line)
        match = re.search(r"root zone on (\S+):(\d+);", line)
        if match:
            # read what the servers log from now on: a pipe nobody reads fills (64 KiB) and then stops them at
            # their next log line (a zone of 703 children without their files logs that much at once)
            proc.log_tail = collections.deque(lines[-50:], maxlen=50)
            proc.log_reader = threading.Thread(target=_drain, args=(proc.stdout, proc.log_tail), daemon=True)
            proc.log_reader.start()
            return proc, (match.group(1), int(match.group(2)))
        if not line:
            proc.wait(10)
            raise RuntimeError("servers did not start:\n" + "".join(lines[-20:]))


def _drain(stream, tail: collections.deque) -> None:
    """Read *stream* to its end, keeping its last lines in *tail*."""
    for line in stream:
        tail.append(line)


def stop_servers(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
