#!/usr/bin/env python3
"""UDP bursts: how many datagrams the kernel drops before a server reads them, by receive buffer.

Serves the shipped ``zones/`` (on 127.0.0.x, a port the system picks) with ``tooldns serve
--no-rate-limit --rcvbuf BYTES`` for each size given, then against the root server:

* **burst**: ``--burst`` intent queries padded to ``--size`` octets (an EDNS padding option), sent
  back to back from one socket, as fast as it can;
* **pointer bombs**: ``--bombs`` queries whose record data is a chain of 120 to 700 compression
  pointers (each costs the server a walk of the chain before its FORMERR), ``--window`` in flight at
  once, the next sent as each reply comes.

For each it prints what was sent, answered, and what the kernel dropped: the server's
``tooldns_server_udp_kernel_drops`` metric (the ``drops`` column of ``/proc/net/udp`` for its socket),
scraped before and after. ``--rcvbuf 0`` keeps the system's default (net.core.rmem_default).

    python scripts/attacks/udp_burst.py                          # 0 (the system's default) and 16777216
    python scripts/attacks/udp_burst.py --rcvbuf 0 --rcvbuf 16777216 --burst 50000
"""

from __future__ import annotations

import argparse
import random
import re
import socket
import struct
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import dns.edns  # noqa: E402
import dns.message  # noqa: E402

from tooldns.fuzzpackets import encode_name, expects_reply, header, question  # noqa: E402
from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent  # noqa: E402
from tooldns.serving.spawn import start_servers, stop_servers  # noqa: E402

PADDING = 12  # the EDNS(0) padding option (RFC 7830)


def padded_query(size: int, qid: int) -> bytes:
    intent = dns.edns.GenericOption(INTENT_OPTION_CODE, encode_intent("historical weather Hong Kong", 3))
    bare = dns.message.make_query("_any._tcp._tools.", "SRV", use_edns=0, flags=0, options=[intent], id=qid)
    fill = max(0, size - len(bare.to_wire()) - 4)
    return dns.message.make_query("_any._tcp._tools.", "SRV", use_edns=0, flags=0, id=qid,
                                  options=[intent, dns.edns.GenericOption(PADDING, b"\0" * fill)]).to_wire()


def pointer_bomb(rng: random.Random, qid: int) -> bytes:
    """A query whose answer section's record data is a long chain of pointers, each to the one before."""
    cells = rng.randint(120, 700)
    first = 12 + len(question(encode_name("tools."))) + 2 + 10
    rdata = b"".join(struct.pack("!H", 0xC000 | (first + 2 * (i - 1) if i else 12)) for i in range(cells))
    answer = b"\xc0\x0c" + struct.pack("!HHIH", 0xFF00, 1, 0, len(rdata)) + rdata
    owner = struct.pack("!H", 0xC000 | min(first + 2 * (cells - 1), 0x3FFF))
    return (header(qid, an=1, ar=1) + question(encode_name("tools.")) + answer + owner
            + struct.pack("!HHIH", 1, 1, 0, 0))


def kernel_drops(metrics: str, server: str) -> int:
    with urllib.request.urlopen(metrics, timeout=10) as reply:
        text = reply.read().decode("utf-8")
    match = re.search(r'^tooldns_server_udp_kernel_drops_total\{server="%s"\} (\S+)$' % re.escape(server), text, re.M)
    return int(float(match.group(1))) if match else -1


def client_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:  # the client must not be what loses the replies
        sock.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), 64 * 2**20)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 2**20)
    sock.bind(("127.0.0.1", 0))
    return sock


def burst(root: tuple[str, int], n: int, size: int) -> tuple[float, int]:
    """Send *n* padded queries back to back; the seconds it took and the replies that came."""
    wires = [padded_query(size, i % 65536) for i in range(n)]
    with client_socket() as sock:
        start = time.perf_counter()
        for wire in wires:
            sock.sendto(wire, root)
        took = time.perf_counter() - start
        return took, _drain(sock, 2.0)


def bombs(root: tuple[str, int], n: int, window: int) -> tuple[int, int]:
    """*n* pointer bombs, *window* in flight; (replies due, replies that came)."""
    rng = random.Random(1)
    wires = [pointer_bomb(rng, i % 65536) for i in range(n)]
    due = sum(expects_reply(w) for w in wires)
    got = 0
    with client_socket() as sock:
        sock.settimeout(1.0)
        sent = 0
        while sent < min(window, n):
            sock.sendto(wires[sent], root)
            sent += 1
        while True:
            try:
                sock.recv(65535)
            except TimeoutError:  # lost: the window shrinks by one for each, as the fuzzer's would
                if sent >= n:
                    break
            else:
                got += 1
            if sent < n:
                sock.sendto(wires[sent], root)
                sent += 1
    return due, got


def _drain(sock: socket.socket, quiet: float) -> int:
    sock.settimeout(quiet)
    got = 0
    try:
        while True:
            sock.recv(65535)
            got += 1
    except TimeoutError:
        return got


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--zones", default=str(ROOT / "zones"))
    parser.add_argument("--rcvbuf", type=int, action="append", help="receive buffers to compare (repeatable; "
                        "default: 0, the system's, and 16777216, tooldns serve's default)")
    parser.add_argument("--burst", type=int, default=20_000, help="datagrams in the burst (default 20000)")
    parser.add_argument("--size", type=int, default=1000, help="octets a datagram (default 1000)")
    parser.add_argument("--bombs", type=int, default=2000, help="pointer bombs (default 2000)")
    parser.add_argument("--window", type=int, default=64, help="pointer bombs in flight (default 64)")
    args = parser.parse_args()
    print(f"{'rcvbuf asked':>12} {'reported':>9}  {'burst sent':>10} {'in s':>5} {'answered':>8} {'dropped':>8}"
          f"  {'bombs due':>9} {'answered':>8} {'lost %':>6} {'dropped':>8}")
    for size in args.rcvbuf or [0, 16 * 2**20]:
        proc, root = start_servers(args.zones, 0, extra=["--rcvbuf", str(size), "--metrics", "127.0.0.1:0"])
        try:
            log = "".join(proc.log_tail)
            metrics = re.search(r"metrics on (http://\S+/metrics)", log).group(1)
            reported = re.search(r"UDP receive buffer: (\d+)", log).group(1)
            server = f"dns://{root[0]}:{root[1]}"
            before = kernel_drops(metrics, server)
            took, answered = burst(root, args.burst, args.size)
            dropped = kernel_drops(metrics, server) - before
            before = kernel_drops(metrics, server)
            due, got = bombs(root, args.bombs, args.window)
            bomb_drops = kernel_drops(metrics, server) - before
        finally:
            stop_servers(proc)
        print(f"{size:>12} {reported:>9}  {args.burst:>10} {took:5.2f} {answered:>8} {dropped:>8}"
              f"  {due:>9} {got:>8} {100 * (due - got) / max(1, due):6.1f} {bomb_drops:>8}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
