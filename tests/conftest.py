"""Shared fixtures: real servers on loopback, each test tree on its own 127.x.y.0/24 addresses; and the
tiers the tests fall in (markers registered in pyproject.toml):

* ``integration``: a test that starts real servers on sockets or other processes (``tooldns serve``,
  the scripts, dig, delv, dnsperf, dnsdist, chromium, valgrind). Marked by hand, or, for a test that
  uses a fixture starting one, by that fixture asking for :func:`integration` (however indirectly).
* ``slow``: in-process, but a second or more each: Hypothesis properties (marked here, all of them),
  real embedding models, large catalogs and trees (marked by hand).
* the fast tier: everything else, pure and in-process, under a minute::

    python3 -m pytest -q -m "not integration and not slow"
"""

from __future__ import annotations

import itertools
import os
import random
import re
import shutil
import socket
import time
from pathlib import Path

import pytest

from tooldns.serving.tree import TreeThread

ROOT = Path(__file__).resolve().parent.parent
ZONES = ROOT / "zones"
# How long a test waits for something that normally takes milliseconds (a DNS reply from a server on
# loopback, a file change picked up, a probe that succeeds). Generous, so that a loaded machine does not
# fail a test; waits return as soon as the thing happens, so a passing run never pays for it.
REPLY_TIMEOUT = 10.0
WAIT_TIMEOUT = 30.0

_subnets = itertools.count(random.Random(os.getpid()).randrange(1, 200))


def fresh_subnet() -> str:
    """A 127.A.B prefix no other test in this run uses."""
    n = next(_subnets)
    return f"127.{(n // 250) % 250 + 1}.{n % 250 + 1}"


def wait_until(predicate, timeout: float = WAIT_TIMEOUT, interval: float = 0.05) -> bool:
    """Poll *predicate* until it holds (True at once) or *timeout* seconds pass (False).

    The predicate is asked once more at the deadline, so a slow last step still counts.
    """
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def free_port(address: str) -> int:
    """A port free for both UDP and TCP on *address*."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.bind((address, 0))
            port = u.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
                try:
                    t.bind((address, port))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free port")


def copy_tree(src: Path, dst: Path, subnet: str) -> Path:
    """Copy zone files, moving every 127.0.0.N address to subnet.N."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.glob("*.yaml"):
        text = re.sub(r"127\.0\.0\.(\d+)", lambda m: f"{subnet}.{m.group(1)}", f.read_text(encoding="utf-8"))
        (dst / f.name).write_text(text, encoding="utf-8")
    return dst


@pytest.fixture(scope="session")
def integration() -> None:
    """Asked for by every fixture that starts a server on a socket or another process: the tests using
    such a fixture are marked ``integration`` (:func:`pytest_collection_modifyitems`)."""


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the marks
def pytest_collection_modifyitems(items) -> None:
    for item in items:
        if "integration" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.integration)
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def demo_dir(tmp_path) -> Path:
    return copy_tree(ZONES, tmp_path / "zones", fresh_subnet())


def start_tree(zonedir: Path, **kwargs) -> TreeThread:
    first = next(iter(re.findall(r"address: (127\.\d+\.\d+)\.\d+", (zonedir / next(zonedir.glob('*.yaml')).name).read_text())))
    port = free_port(first + ".1")
    return TreeThread(zonedir, port, watch_interval=0.2, **kwargs).start()


@pytest.fixture
def demo_tree(demo_dir, integration):
    tree = start_tree(demo_dir)
    yield tree
    tree.stop()


def dig_path() -> str | None:
    return shutil.which("dig")
