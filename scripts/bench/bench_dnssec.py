#!/usr/bin/env python3
"""What DNSSEC costs: signing per reply, reply sizes with DO, validation per resolution.

Signs a copy of --zones (the shipped tree by default; keep to small trees) in a temporary directory
with ``tooldns dnssec keygen``'s library function, then prints:

1. microseconds per ``DNSServer.handle`` call, in-process (as ``scripts/bench/bench_handle.py``), for the
   root zone's referral and a leaf's answer, distinct intents (no packet-cache hit): unsigned (the
   fast path), signed without DO (the same path) and signed with DO (dnslib path and RRSIGs; new
   intents mean new TTL-0 RRsets to sign each time), and a repeated DO query (packet cache);
2. reply sizes with DO at K (default 3): the root's referral and a leaf's answer, and whether each
   fits one 1232-byte UDP datagram;
3. milliseconds per resolution on a served tree (loopback), with and without validation, each
   resolution with its own resolver (no reply cache), median of --resolutions.

    python scripts/bench/bench_dnssec.py
    python scripts/bench/bench_dnssec.py --k 5 --resolutions 20
    python scripts/bench/bench_dnssec.py --algorithm p256
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from dnslib import EDNS0, DNSRecord, EDNSOption  # noqa: E402

from resolver_client import Resolver  # noqa: E402
from resolver_client.validate import read_anchor  # noqa: E402
from tooldns.dnssec.keys import load_keys  # noqa: E402
from tooldns.dnssec.manage import keygen_tree  # noqa: E402
from tooldns.dnssec.signer import Signing  # noqa: E402
from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent  # noqa: E402
from tooldns.protocol.names import Cursor  # noqa: E402
from tooldns.serving.resolver import ZoneResolver  # noqa: E402
from tooldns.serving.server import DNSServer  # noqa: E402
from tooldns.protocol.brief import BRIEF_OPTION_CODE  # noqa: E402
from tooldns.serving.store import ZoneStore  # noqa: E402
from tooldns.serving.tree import TreeThread  # noqa: E402

UDP = 1232


def query(zone: str, intent: str, k: int, do: bool, expanded: bool = False, brief: bool = False) -> bytes:
    """A search query; *brief*: with the brief option, as resolver_client sends it by default."""
    q = DNSRecord.question(Cursor("any", "tcp", zone, expanded=expanded).to_text(), "SRV")
    q.header.rd = 0
    opts = [EDNSOption(INTENT_OPTION_CODE, encode_intent(intent, k))] + ([EDNSOption(BRIEF_OPTION_CODE, b"")] if brief else [])
    q.add_ar(EDNS0(udp_len=UDP, flags="do" if do else "", opts=opts))
    return bytes(q.pack())


def per_call(server: DNSServer, packets: list[bytes]) -> float:
    t0 = time.perf_counter()
    for p in packets:
        server.handle(p, True)
    return (time.perf_counter() - t0) / len(packets) * 1e6


def handle_costs(zdir: Path, zone: str, expanded: bool, k: int, calls: int, intent: str) -> None:
    path = zdir / f"{zone.rstrip('.')}.yaml" if zone != "tools." else zdir / "tools.yaml"
    servers = {"unsigned": DNSServer(ZoneResolver(ZoneStore(path, signing=Signing(None))), cache_size=0),
               "signed": DNSServer(ZoneResolver(ZoneStore(path)), cache_size=0)}
    rows = []
    for label, server, do in [("unsigned", servers["unsigned"], False), ("signed, no DO", servers["signed"], False),
                              ("signed, DO", servers["signed"], True)]:
        packets = [query(zone, f"{intent} {i}", k, do, expanded) for i in range(calls)]
        per_call(server, packets[: max(1, calls // 10)])  # warm up (the fast path's pieces, caches)
        rows.append((label, statistics.median(per_call(server, packets) for _ in range(3))))
    cached = DNSServer(ZoneResolver(ZoneStore(path)), cache_size=4096)
    one = [query(zone, intent, k, True, expanded)] * calls
    rows.append(("signed, DO, packet cache", per_call(cached, one)))
    what = "answer" if expanded else "referral"
    for label, us in rows:
        print(f"  {zone:24} {what:8} {label:26} {us:8.1f} us/reply")


def sizes(zdir: Path, k: int, intent: str) -> None:
    for zone, expanded in [("tools.", False), ("weather.tools.", False), ("hko.weather.tools.", True)]:
        path = zdir / ("tools.yaml" if zone == "tools." else f"{zone.rstrip('.')}.yaml")
        server = DNSServer(ZoneResolver(ZoneStore(path)), cache_size=0)
        for brief in ((False, True) if expanded else (False,)):
            plain = server.handle(query(zone, intent, k, False, expanded, brief), False)
            signed = server.handle(query(zone, intent, k, True, expanded, brief), False)
            fits = "fits" if len(signed) <= UDP else "does NOT fit (TCP)"
            what = ("answer, brief" if brief else "answer") if expanded else "referral"
            print(f"  {zone:24} {what:14} K={k}: {len(plain):5d} bytes unsigned, "
                  f"{len(signed):5d} bytes with DO: {fits} one {UDP}-byte datagram")


def resolutions(zdir: Path, k: int, n: int, intents: list[str]) -> None:
    anchor = read_anchor("\n".join(key.dnskey_text() for key in load_keys(zdir / "keys", "tools.")))
    with TreeThread(zdir, 0, rate_limit=0) as tree:
        for validate in (False, True):
            times, queries, tools = [], [], []
            for i in range(n):
                intent = intents[i % len(intents)]
                r = Resolver(root=tree.root(), cache=False, validate=validate,
                             trust_anchor=anchor if validate else None).resolve(intent, k=k)
                times.append(r.stats.ms)
                queries.append(r.stats.queries)
                tools.append(sum(t.dnssec == "secure" for t in r.tools) if validate else len(r.tools))
            what = "validated" if validate else "plain    "
            print(f"  {what}: median {statistics.median(times):6.1f} ms, {statistics.median(queries):4.1f} queries, "
                  f"{statistics.median(tools):.0f} {'secure ' if validate else ''}tools per resolution")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--zones", default=str(ROOT / "zones"))
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--calls", type=int, default=300, help="handle() calls per figure (default 300)")
    p.add_argument("--resolutions", type=int, default=10)
    p.add_argument("--algorithm", default="ed25519", choices=["ed25519", "p256"])
    p.add_argument("--intent", default="historical weather Hong Kong")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_dnssec."))
    try:
        zdir = tmp / "zones"
        shutil.copytree(args.zones, zdir, ignore=shutil.ignore_patterns("keys"))
        keygen_tree(zdir, algorithm=args.algorithm)
        print(f"1. microseconds per reply, in-process (DNSServer.handle, distinct intents, K={args.k}, {args.algorithm})")
        handle_costs(zdir, "tools.", False, args.k, args.calls, args.intent)
        handle_costs(zdir, "hko.weather.tools.", True, args.k, args.calls, args.intent)
        print(f"2. reply sizes with DO (one UDP datagram holds {UDP} bytes)")
        sizes(zdir, args.k, args.intent)
        print(f"3. resolutions on loopback, K={args.k}, {args.resolutions} each, no reply cache")
        resolutions(zdir, args.k, args.resolutions, ["historical weather Hong Kong", "send a slack message",
                                                      "typhoon warning", "bitcoin price"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
