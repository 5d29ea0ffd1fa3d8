#!/usr/bin/env python3
"""Attack: a child stalls its parent. Good queries at a root of many children, idle and while one child
NOTIFYs it and changes its summary as fast as the parent will fetch it.

Writes a root zone ``tools.`` of ``--children`` children (each delegation a summary of
``--summary-words`` words) and serves it with ``tooldns serve`` (``--only tools.``: the children are
not served, as on a root whose children are run by others; their summaries pinned, so that the
root asks none of them but the attacker). One child, ``evil.tools.``, is the
attacker's: a small server on its own address (127.0.0.2, the tree's port) whose SOA says refresh 0
and a new serial at every query, whose published summary (``_summary.evil.tools.``) says something
new at every fetch, and which sends NOTIFY to the root every ``--notify-every`` seconds. Before the
parent's rebuilds left the event loop and were floored and budgeted, each fetch rebuilt the root's
whole index on the loop. Prints good queries' p50, p99 and losses idle and under attack, the parent's
rebuilds (its serial) and the load average::

    python scripts/attacks/child_stall.py --children 700 --seconds 20
"""

from __future__ import annotations

import argparse
import random
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dns.flags  # noqa: E402
import dns.message  # noqa: E402
import dns.opcode  # noqa: E402
import dns.query  # noqa: E402
import dns.rcode  # noqa: E402
import dns.rdatatype  # noqa: E402
import dns.rrset  # noqa: E402

from loopattack import (attack_arguments, delegation_yaml, fresh_zonedir, good_stream, loadavg, phase,  # noqa: E402
                        start_servers, stop_servers, words, zone_yaml)
from tooldns.protocol.summary import PublishedSummary, encode_summary  # noqa: E402

EVIL = "evil.tools."
EVIL_ADDRESS = "127.0.0.2"


class HostileChild:
    """The attacker's name server for ``evil.tools.``: UDP and TCP on (*address*, *port*)."""

    def __init__(self, address: str, port: int, parent: tuple[str, int], notify_every: float, seed: int = 0) -> None:
        self.address, self.port, self.parent, self.notify_every = address, port, parent, notify_every
        self.rng = random.Random(seed)
        self.serial = 1
        self.fetches = self.notifies = 0
        self.running = threading.Event()
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind((address, port))
        self.udp.settimeout(0.2)
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.tcp.bind((address, port))
        self.tcp.listen(16)
        self.tcp.settimeout(0.2)
        self.attacking = threading.Event()
        for target in (self._serve_udp, self._serve_tcp, self._notify):
            threading.Thread(target=target, daemon=True).start()

    def _answer(self, wire: bytes) -> bytes | None:
        try:
            q = dns.message.from_wire(wire)
        except Exception:
            return None
        if q.flags & dns.flags.QR:
            return None
        reply = dns.message.make_response(q)
        reply.flags |= dns.flags.AA
        question = q.question[0]
        if not self.attacking.is_set():  # idle: the child is down
            reply.set_rcode(dns.rcode.REFUSED)
        elif question.rdtype == dns.rdatatype.SOA:
            self.serial += 1
            reply.answer.append(dns.rrset.from_text(EVIL, 0, "IN", "SOA",
                                                    f"ns1.{EVIL} hostmaster.{EVIL} {self.serial} 0 0 0 0"))
        elif question.rdtype == dns.rdatatype.TXT:
            self.fetches += 1
            summary = PublishedSummary(EVIL, self.serial, words(self.rng, 12), tuple(words(self.rng, 5).split()),
                                       3, tuple((w, 1 + self.rng.randrange(3)) for w in set(words(self.rng, 20).split())))
            text = " ".join('"' + s.decode().replace("\\", "\\\\").replace('"', '\\"') + '"'
                            for s in encode_summary(summary))
            reply.answer.append(dns.rrset.from_text(question.name, 0, "IN", "TXT", text))
        return reply.to_wire()

    def _serve_udp(self) -> None:
        while True:
            try:
                wire, client = self.udp.recvfrom(65535)
            except socket.timeout:
                continue
            except OSError:
                return
            out = self._answer(wire)
            if out is not None:
                self.udp.sendto(out, client)

    def _serve_tcp(self) -> None:
        while True:
            try:
                conn, _ = self.tcp.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    n = int.from_bytes(conn.recv(2), "big")
                    data = b""
                    while len(data) < n:
                        chunk = conn.recv(n - len(data))
                        if not chunk:
                            break
                        data += chunk
                    out = self._answer(data)
                    if out is not None:
                        conn.sendall(len(out).to_bytes(2, "big") + out)
                except OSError:
                    pass

    def _notify(self) -> None:
        while True:
            self.attacking.wait()
            message = dns.message.make_query(EVIL, dns.rdatatype.SOA)
            message.flags = dns.flags.AA
            message.set_opcode(dns.opcode.NOTIFY)
            try:
                self.udp.sendto(message.to_wire(), self.parent)
                self.notifies += 1
            except OSError:
                return
            time.sleep(self.notify_every)


def soa_serial(address: str, port: int, zone: str) -> int | None:
    q = dns.message.make_query(zone, dns.rdatatype.SOA)
    q.flags = 0
    try:
        reply = dns.query.udp(q, address, port=port, timeout=2)
        return reply.answer[0][0].serial
    except Exception:
        return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--children", type=int, default=700)
    p.add_argument("--summary-words", type=int, default=40, help="words in each child's summary in the root's file")
    attack_arguments(p, seconds=20.0, rate=50.0, port=5391, name="child-stall")
    p.add_argument("--notify-every", type=float, default=0.2)
    p.add_argument("--extra", default="", help="more tooldns serve arguments, e.g. '--summary-budget 6'")
    p.add_argument("--verbose", action="store_true", help="print the server's last log lines")
    args = p.parse_args()
    rng = random.Random(0)
    zonedir = fresh_zonedir(args.dir)
    children = "".join(delegation_yaml(f"c{i:05d}", "tools.", "127.0.0.3", rng, pinned=True).replace(
        "    description: ", f"    description: {words(rng, args.summary_words)} ", 1) for i in range(args.children))
    children += delegation_yaml("evil", "tools.", EVIL_ADDRESS, rng, serial=None)
    (zonedir / "tools.yaml").write_text(zone_yaml("tools.", "127.0.0.1", children=children))
    child = HostileChild(EVIL_ADDRESS, args.port, ("127.0.0.1", args.port), args.notify_every)
    proc, (address, port) = start_servers(str(zonedir), args.port,
                                          extra=["--only", "tools.", *args.extra.split()])
    try:
        time.sleep(2)  # the first polls of the children (refused or unreachable) are behind us
        serial0 = soa_serial(address, port, "tools.")
        idle = good_stream(address, port, args.seconds, args.rate, seed=1)
        print(phase("idle", *idle, loadavg()), flush=True)
        child.attacking.set()
        serial1 = soa_serial(address, port, "tools.")
        loud = good_stream(address, port, args.seconds, args.rate, seed=2)
        serial2 = soa_serial(address, port, "tools.")
        print(phase("under attack", *loud, loadavg()), flush=True)
        print(f"root serial {serial0} idle -> {serial1} -> {serial2} after the attack: "
              f"{(serial2 or 0) - (serial1 or 0)} rebuilds in {args.seconds:g} s; the child was fetched "
              f"{child.fetches} times, sent {child.notifies} NOTIFYs; {args.children + 1} children")
        ratio = (sorted(loud[0])[int(0.99 * (len(loud[0]) - 1))] if loud[0] else 0) / max(
            sorted(idle[0])[int(0.99 * (len(idle[0]) - 1))] if idle[0] else 1e-9, 1e-9)
        print(f"p99 under attack / idle: {ratio:.2f}")
        if args.verbose:
            print("".join(proc.log_tail))
    finally:
        child.attacking.clear()
        stop_servers(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
