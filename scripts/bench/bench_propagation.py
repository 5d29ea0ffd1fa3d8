#!/usr/bin/env python3
"""How long an organisation's edit takes to become findable from the root, with ``tooldns serve``.

Copies a zone directory (the shipped ``zones/`` by default) to a temporary one, starts
``tooldns serve`` on it in its own process, then --edits times: adds a tool with words no other
tool has to a leaf zone file (``routing.maps.tools.`` by default; the serial left as it was, as a
hurried editor would), and resolves its words from the root with K=1 every 20 ms until the walk
finds it; then removes it again and waits until the root no longer finds it. Prints, for each
edit, the seconds from the file write to the first resolution that found the tool (and to the
first that no longer did), then the median and the worst:

    python scripts/bench/bench_propagation.py
    python scripts/bench/bench_propagation.py --leaf history.weather.tools. --edits 10

The change travels by NOTIFY (RFC 1996) one level at a time (``docs/summaries.md``); the file
watcher's interval (0.5 s) is part of what is measured, as it is part of what an editor waits.
A tree too big to copy is edited where it is (``--in-place``: the leaf's file is put back as it
was at the end) and may be served lazily, where parents learn in-process:

    python scripts/bench/bench_propagation.py --zones /tmp/b1m --in-place --leaf LEAF. --raise-serial \
        --serve-args "--lazy --listen 127.0.0.1 --max-loaded 20000"

``--raise-serial`` raises the leaf's SOA serial with each edit, as a careful editor (and
``tooldns build --update``) does: a lazy server reloads a zone it never served under its file's
serial, so without it an edit of a leaf not loaded yet does not reach the parents
(docs/summaries.md, "Lazy trees").
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchlib import start_servers, stop_servers  # noqa: E402
from resolver_client import Resolver  # noqa: E402

TOOL = """\
- label: {label}
  name: {name}
  service: http
  target: airships.example.org.
  port: 443
  description: Plans routes for a {word} zeppelin, airship or dirigible between mooring masts.
"""


def wait_for(resolver: Resolver, intent: str, name: str, present: bool, limit: float) -> float | None:
    """Seconds until resolving *intent* from the root finds *name* (or, not *present*, no longer does)."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        try:
            found = any(t.name == name for t in resolver.resolve(intent, k=1).tools)
        except Exception:  # noqa: BLE001 - a resolution that fails mid-edit is retried like any other
            found = not present
        if found == present:
            return time.monotonic() - start
        time.sleep(0.02)
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zones", default=str(ROOT / "zones"))
    ap.add_argument("--leaf", default="routing.maps.tools.", help="the zone edited (default routing.maps.tools.)")
    ap.add_argument("--edits", type=int, default=5)
    ap.add_argument("--port", type=int, default=5391)
    ap.add_argument("--limit", type=float, default=30.0, help="seconds to wait for one edit to show")
    ap.add_argument("--in-place", action="store_true", help="edit --zones itself instead of a copy")
    ap.add_argument("--raise-serial", action="store_true", help="raise the leaf's SOA serial with each edit")
    ap.add_argument("--serve-args", default="", help="more arguments for tooldns serve (\"--lazy --listen ADDR\")")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tooldns-propagation-"))
    zones = Path(args.zones) if args.in_place else work / "zones"
    if not args.in_place:
        shutil.copytree(args.zones, zones)
    path = zones / f"{args.leaf.rstrip('.')}.yaml"
    original = path.read_text(encoding="utf-8")
    proc, root = start_servers(str(zones), args.port, extra=args.serve_args.split())
    added, removed = [], []
    try:
        with Resolver(root=root, cache=False, timeout=1.0) as resolver:
            for i in range(args.edits):
                word = f"skyship{i}"
                name = f"Zeppelin Route Planner {i}"
                intent = f"zeppelin {word} dirigible"
                edited = original.replace("tools:\n", "tools:\n" + TOOL.format(label=f"zeppelin-{i}", name=name,
                                                                                word=word), 1)
                if args.raise_serial:  # the first serial of a zone file is its SOA's
                    edited = re.sub(r"(?m)^(  serial: )(\d+)$", lambda m: f"{m[1]}{int(m[2]) + i + 1}", edited, count=1)
                path.write_text(edited, encoding="utf-8")
                seconds = wait_for(resolver, intent, name, True, args.limit)
                added.append(seconds)
                path.write_text(original, encoding="utf-8")
                gone = wait_for(resolver, intent, name, False, args.limit)
                removed.append(gone)
                print(f"edit {i + 1}: added, findable from the root after "
                      f"{'never' if seconds is None else f'{seconds:.2f} s'}; removed, gone after "
                      f"{'never' if gone is None else f'{gone:.2f} s'}", flush=True)
    finally:
        stop_servers(proc)
        restored = path.with_name(f".{path.name}.restore")  # the file as it was, put back whole
        restored.write_text(original, encoding="utf-8")
        os.replace(restored, path)
        shutil.rmtree(work, ignore_errors=True)
    ok = [s for s in added if s is not None]
    gone = [s for s in removed if s is not None]
    print(f"\n{args.leaf} -> root, {args.edits} edits: findable after median {statistics.median(ok):.2f} s, "
          f"worst {max(ok):.2f} s ({len(added) - len(ok)} never); gone after median "
          f"{statistics.median(gone):.2f} s, worst {max(gone):.2f} s" if ok and gone else "no edit became findable")
    return 0 if len(ok) == len(added) else 1


if __name__ == "__main__":
    sys.exit(main())
