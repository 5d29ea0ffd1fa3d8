#!/usr/bin/env python3
"""Attack: something that is no regular file where a zone file was. Good queries at the root of a tree,
idle and after one leaf's zone file is replaced by a FIFO (``--kind fifo``) or by a symbolic link to
``/dev/urandom`` (``--kind urandom``).

Writes a root of ``--children`` leaves (each served from its own file by the same ``tooldns serve``),
measures good queries at the root, then swaps one leaf's file for the FIFO or the link (an atomic
rename, as an editor saves) and measures again while the watcher finds it changed. Before zone files
were opened without blocking and refused unless regular, opening the FIFO waited for a writer on the
event loop (the whole process froze) and the link was read up to the size limit on the loop::

    python scripts/attacks/fifo_zone.py --kind fifo --seconds 8
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loopattack import (attack_arguments, fresh_zonedir, good_stream, loadavg, phase,  # noqa: E402
                        root_with_children, start_servers, stop_servers)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kind", choices=["fifo", "urandom"], default="fifo")
    p.add_argument("--children", type=int, default=20)
    attack_arguments(p, seconds=8.0, rate=50.0, port=5393, name="fifo-zone")
    args = p.parse_args()
    zonedir = fresh_zonedir(args.dir)
    origins = root_with_children(zonedir, args.children, "127.0.0.1", "127.0.0.1")
    proc, (address, port) = start_servers(args.dir, args.port)
    victim = zonedir / f"{origins[0].rstrip('.')}.yaml"
    swap = zonedir / "swap.tmp"
    try:
        idle = good_stream(address, port, args.seconds, args.rate, seed=1)
        print(phase("idle", *idle, loadavg()), flush=True)
        if args.kind == "fifo":
            os.mkfifo(swap)
        else:
            swap.symlink_to("/dev/urandom")
        os.replace(swap, victim)
        loud = good_stream(address, port, args.seconds, args.rate, seed=2)
        print(phase(f"{args.kind}", *loud, loadavg()), flush=True)
        refused = [line.strip() for line in proc.log_tail if "not a regular file" in line]
        print("server's log: " + (refused[0][refused[0].find("tooldns."):] if refused else "(no line refusing it)"))
    finally:
        if victim.is_fifo():  # a server waiting in open() (before the fix) is let go, so that it can stop
            try:
                os.close(os.open(victim, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        stop_servers(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
