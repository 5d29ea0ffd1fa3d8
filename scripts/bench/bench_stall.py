"""Does one expensive message delay other queries? Good-query latency with and without bombs.

Starts ``tooldns serve`` on a zone tree in its own process (rate limiting off, so that the
bombs reach the parser), then measures a steady stream of good queries to the root server,
each with an intent it has not seen (so every one is parsed, scored and packed), for
``--seconds`` with no attack, and again while attacker processes send the most expensive
messages a parser meets (``--attackers`` of them, as fast as they can):

* ``pointer-tcp``: 16 kB TCP messages whose records' names are chains of about 8,000
  compression pointers (the shape that stalled the tree 2.7 s per 8 kB before parsing was
  bounded);
* ``long-name``: a label of 64 octets and a name of 256 octets (once a query of death);
* ``big-opt``: a TCP query whose OPT record carries a 4,000-byte intent and 20 junk options;
* ``questions``: 1,000 questions over TCP.

It prints, per phase, the good queries' count, p50, p99 and max in milliseconds, the bombs
sent, and the ratio of p99 under attack to p99 without::

    python scripts/bench/bench_stall.py --zones zones --seconds 10
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import socket
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchlib
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import dns.edns  # noqa: E402
import dns.message  # noqa: E402

from benchlib import percentile, start_servers, stop_servers  # noqa: E402
from tooldns.protocol import INTENT_OPTION_CODE, encode_intent  # noqa: E402

WORDS = "weather stock price calendar map route slack message paper search translate music flight hotel".split()


def _pointer_chain(start: int, hops: int) -> tuple[bytes, int]:
    """A label, then *hops* pointers each pointing at the one before; returns bytes and the last pointer's offset."""
    out = b"\x01a\x00"  # a one-label name at *start*
    prev = start
    for _ in range(hops):
        here = start + len(out)
        out += struct.pack("!H", 0xC000 | prev)
        prev = here
    return out, prev


def pointer_message(size: int = 65535) -> bytes:
    """One question and four records whose names are pointer chains as long as *size* bytes allow.

    The chain sits in the first record's RDATA (bytes a parser skips), and the three other
    records' owner names point at its end: a parser that follows pointers without a bound walks
    the whole chain for each of them.
    """
    header = struct.pack("!HHHHHH", 0x1234, 0, 1, 0, 0, 4)
    question = b"\x01a\x00" + struct.pack("!HH", 33, 1)
    start = 12 + len(question) + 1 + 10  # the first record: root name, then type, class, TTL, RDLENGTH
    hops = (min(size, 16383) - start - 3 - 3 * 12) // 2
    chain, last = _pointer_chain(start, hops)
    first = b"\x00" + struct.pack("!HHIH", 65280, 1, 0, len(chain)) + chain  # a private type: opaque RDATA
    rest = struct.pack("!H", 0xC000 | last) + struct.pack("!HHIH", 16, 1, 0, 0)
    return header + question + first + rest * 3


def bombs() -> dict[str, tuple[bytes, bool]]:
    """Each bomb's bytes and whether it goes over TCP."""
    long_label = b"\x40" + b"a" * 64 + b"\x00"
    long_name = b"".join(b"\x3f" + b"b" * 63 for _ in range(4)) + b"\x05ccccc\x00"
    q1 = struct.pack("!HHHHHH", 7, 0, 1, 0, 0, 0)
    big = dns.message.make_query("_any._tcp._tools.", "SRV", use_edns=0, payload=1232, options=[
        dns.edns.GenericOption(INTENT_OPTION_CODE, encode_intent("x " * 2000, 3)),
        *[dns.edns.GenericOption(65000 + i, os.urandom(200)) for i in range(20)]]).to_wire(max_size=65535)
    many = struct.pack("!HHHHHH", 8, 0, 1000, 0, 0, 0) + (b"\x01a\x00" + struct.pack("!HH", 33, 1)) * 1000
    return {
        "pointer-tcp": (pointer_message(), True),
        "long-name": (q1 + long_label + struct.pack("!HH", 33, 1), False),
        "long-name-256": (q1 + long_name + struct.pack("!HH", 33, 1), False),
        "big-opt": (big, True),
        "questions": (many, True),
    }


def attack(address: str, port: int, stop_at: float, counter) -> None:
    """Send every bomb in turn until *stop_at*; counts what was sent."""
    kinds = list(bombs().items())
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.setblocking(False)
    n = 0
    while time.monotonic() < stop_at:
        name, (wire, tcp) = kinds[n % len(kinds)]
        n += 1
        try:
            if tcp:
                with socket.create_connection((address, port), timeout=2) as s:
                    s.sendall(struct.pack("!H", len(wire)) + wire)
                    s.settimeout(2)
                    s.recv(2)  # the FORMERR's length: the server has read and answered it
            else:
                udp.sendto(wire, (address, port))
        except OSError:
            pass
        with counter.get_lock():
            counter.value += 1


def good_stream(address: str, port: int, seconds: float, seed: int) -> list[float]:
    """Milliseconds of each good query (never-seen intents) sent one after another for *seconds*."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(2.0)
    times, i, end = [], seed, time.monotonic() + seconds
    while time.monotonic() < end:
        i += 1
        intent = f"{WORDS[i % len(WORDS)]} {WORDS[(i * 7) % len(WORDS)]} number {i}"
        q = dns.message.make_query("_any._tcp._tools.", "SRV", use_edns=0, payload=1232,
                                   options=[dns.edns.GenericOption(INTENT_OPTION_CODE, encode_intent(intent, 3))])
        q.flags = 0
        wire = q.to_wire()
        t0 = time.perf_counter()
        sock.sendto(wire, (address, port))
        try:
            while True:
                reply = sock.recv(65535)
                if reply[:2] == wire[:2]:
                    break
        except socket.timeout:
            times.append(2000.0)
            continue
        times.append((time.perf_counter() - t0) * 1000)
    return times


def _summary(name: str, times: list[float], sent: int) -> str:
    return (f"{name:14} good queries {len(times):6d}  p50 {percentile(times, 50):6.2f} ms  "
            f"p99 {percentile(times, 99):6.2f} ms  max {max(times, default=0):7.2f} ms  bombs sent {sent}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--zones", default="zones")
    p.add_argument("--port", type=int, default=5390)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--attackers", type=int, default=1)
    args = p.parse_args()
    proc, (address, port) = start_servers(args.zones, args.port)  # rate limiting off: the bombs must reach the parser
    try:
        good_stream(address, port, 1.0, 10**6)  # warm up
        quiet = good_stream(address, port, args.seconds, 0)
        print(_summary("no attack", quiet, 0), flush=True)
        counter = multiprocessing.Value("l", 0)
        stop_at = time.monotonic() + args.seconds + 1
        attackers = [multiprocessing.Process(target=attack, args=(address, port, stop_at, counter))
                     for _ in range(args.attackers)]
        for a in attackers:
            a.start()
        time.sleep(0.5)
        loud = good_stream(address, port, args.seconds, 10**7)
        for a in attackers:
            a.join()
        print(_summary("under attack", loud, counter.value))
        print(f"p99 under attack / p99 without: {percentile(loud, 99) / max(percentile(quiet, 99), 1e-9):.2f}; "
              f"p50 ratio {percentile(loud, 50) / max(percentile(quiet, 50), 1e-9):.2f}")
        alive = proc.poll() is None
        print(f"server still running: {alive}")
        return 0 if alive else 1
    finally:
        stop_servers(proc)


if __name__ == "__main__":
    sys.exit(main())
