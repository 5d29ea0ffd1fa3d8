"""The README's main command, ``tooldns demo``, as a newcomer runs it: serve, resolve, print, stop."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT, ZONES, copy_tree, free_port, fresh_subnet

pytestmark = pytest.mark.integration  # tooldns demo: servers on loopback in a subprocess


def test_demo_command_serves_resolves_and_stops(tmp_path):
    """The README's main command, on a copy of the shipped tree on its own addresses."""
    subnet = fresh_subnet()
    zones = copy_tree(ZONES, tmp_path / "zones", subnet)
    port = free_port(f"{subnet}.1")
    out = subprocess.run([sys.executable, "-m", "tooldns.cli", "demo", "historical weather Hong Kong", "--zones",
                          str(zones), "--port", str(port), "--timeout", "10"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "intent: historical weather Hong Kong" in out.stdout
    assert "HKO Historical Climate Data" in out.stdout and "hko.weather.tools." in out.stdout
