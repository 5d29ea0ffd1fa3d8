#!/usr/bin/env python3
"""How much larger than its query a reply is: the amplification a spoofed UDP query buys an attacker.

Serves a zone directory (the shipped ``zones/`` by default) with a :class:`TreeThread` on loopback,
rate limiting off so that the sweep itself is not limited, sends real queries over UDP and prints,
for each, the DNS message sizes (no IP or UDP headers) and their ratio:

* a typical referral (the root zone ranking its children for an intent, K=3, EDNS 1232);
* a typical leaf answer (a leaf zone ranking its tools, K=3);
* the leaf with the most tools asked for K at its maximum (the zone's ``max_k``), over UDP
  (truncated when too big);
* the worst case found by a sweep over every zone: intents of one word from the zone's text, K
  from 1 to 255, queries without intent (SOA, NS, ANY, tool SRV and TXT), with and without EDNS.

    python scripts/bench/amplification.py
    python scripts/bench/amplification.py --zones built/ --port 5399
"""

from __future__ import annotations

import argparse
import re
import socket
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from dnslib import EDNS0, DNSRecord, EDNSOption  # noqa: E402

from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent  # noqa: E402
from tooldns.protocol.names import Cursor  # noqa: E402
from tooldns.serving.tree import TreeThread  # noqa: E402

KS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 255)
#: an intent that matches many tools of the largest leaf
BIG_INTENT = "edit documents pdf docx notes files"


def query(name: str, qtype: str = "SRV", intent: str | None = None, k: int = 3, edns: bool = True) -> bytes:
    q = DNSRecord.question(name, qtype)
    q.header.rd = 0
    if edns:
        q.add_ar(EDNS0(udp_len=1232, opts=[EDNSOption(INTENT_OPTION_CODE, encode_intent(intent, k))] if intent else []))
    return bytes(q.pack())


def ask(sock: socket.socket, address: str, port: int, wire: bytes) -> bytes:
    sock.sendto(wire, (address, port))
    return sock.recv(65535)


def cases(store) -> list[tuple[str, bytes]]:
    """(what, query) for one zone: intent queries of one word with every K, and queries without intent."""
    zone = store.zone
    cursor = Cursor("any", "tcp", zone.origin).to_text()
    text = " ".join([zone.summary.display(), *(c.summary.display() for c in zone.children),
                     *(t.name for t in zone.tools)])
    words = sorted({w for w in re.findall(r"[a-z]{3,}", text.lower())}, key=len)[:12]
    out = [(f"{cursor} intent {w!r} K={k}", query(cursor, intent=w, k=k)) for w in words for k in KS]
    for qtype in ("SOA", "NS", "ANY", "TXT"):
        out += [(f"{zone.origin} {qtype}{'' if edns else ' no EDNS'}", query(zone.origin, qtype, edns=edns))
                for edns in (True, False)]
    out += [(f"{cursor} no intent{'' if edns else ' no EDNS'}", query(cursor, edns=edns)) for edns in (True, False)]
    for tool in zone.tools:
        out += [(f"{tool.owner(zone.origin)} {qtype}", query(tool.owner(zone.origin), qtype)) for qtype in ("SRV", "TXT")]
    return out


def row(what: str, q: bytes, reply: bytes) -> str:
    tc = " TC" if reply[2] & 0x02 else ""
    return f"{what:72} {len(q):5d} {len(reply):6d} {len(reply) / len(q):6.1f}{tc}"


def measure(tree: TreeThread, leaf: str, intent: str) -> list[str]:
    servers = {store.index.origin: (store, server.address) for store, server in tree.tree.servers}
    root_store, root_address = servers[min(servers, key=lambda o: o.count("."))]
    leaf_store, leaf_address = servers[leaf]
    big, big_address = max(servers.values(), key=lambda pair: len(pair[0].zone.tools))
    port = tree.tree.port
    lines = [f"{'query':72} {'query':>5} {'reply':>6} {'factor':>6}"]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(5)
        root_cursor = Cursor("any", "tcp", root_store.index.origin).to_text()
        leaf_cursor = Cursor("any", "tcp", leaf).to_text()
        big_cursor = Cursor("any", "tcp", big.index.origin).to_text()
        max_k = big.zone.settings.max_k
        for what, address, q in [
            (f"typical referral: {root_cursor} {intent!r} K=3", root_address, query(root_cursor, intent=intent)),
            (f"typical leaf answer: {leaf_cursor} {intent!r} K=3", leaf_address, query(leaf_cursor, intent=intent)),
            (f"largest leaf, K at max ({max_k}): {big_cursor} {BIG_INTENT!r}", big_address,
             query(big_cursor, intent=BIG_INTENT, k=max_k))]:
            lines.append(row(what, q, ask(sock, address, port, q)))
        worst = {True: (0.0, "", b"", b""), False: (0.0, "", b"", b"")}  # with EDNS, without
        for origin, (store, address) in sorted(servers.items()):
            for what, q in cases(store):
                reply = ask(sock, address, port, q)
                edns = "no EDNS" not in what
                worst[edns] = max(worst[edns], (len(reply) / len(q), what, q, reply))
        for edns, (_, what, q, reply) in worst.items():
            lines.append(row(f"worst of the sweep{'' if edns else ' without EDNS'}: {what}", q, reply))
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--zones", default=str(ROOT / "zones"))
    p.add_argument("--port", type=int, default=0, help="port of every zone server (default 0: a free one)")
    p.add_argument("--leaf", default="history.weather.tools.", help="the leaf zone of the typical answer")
    p.add_argument("--intent", default="historical weather Hong Kong")
    args = p.parse_args()
    with TreeThread(args.zones, args.port, rate_limit=0) as tree:
        for line in measure(tree, args.leaf, args.intent):
            print(line)
    print("sizes are DNS messages in bytes (add 28 for IPv4 and UDP headers); factor = reply / query")
    return 0


if __name__ == "__main__":
    sys.exit(main())
