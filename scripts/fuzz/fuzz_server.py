#!/usr/bin/env python3
"""Fuzz a running ToolDNS tree over real sockets: N hostile packets, every one accounted for.

Starts ``tooldns serve ZONES --port 0`` in its own process (its output, tracebacks included, goes to
a log file), or aims at a tree already running (``--root HOST:PORT``), and sends ``--packets``
messages (default 1,000,000) of the categories of ``tooldns/fuzzpackets.py`` (random bytes, valid
and mutated queries, pointer loops and chains, long labels and names, many questions or records,
bad OPT records, bad intent and vector options, responses, short headers) to every server of the
tree, over UDP (several non-blocking sockets, a window of queries in flight that grows while
replies come and halves when one times out, replies matched by socket and ID) and a share over TCP
(pipelined batches of 1 to 20 messages, some frames empty or cut short).

It prints, per category: messages sent, answered, unanswered though a reply was due (a readable
header with QR clear), dropped as expected (no readable header, or QR set), replies to messages
that must be dropped, bad replies (see ``tooldns.fuzzpackets.describe_reply``: not parseable, QR clear,
another ID, several questions, not FORMERR for a malformed query, over the UDP size), TC replies
and the count of each RCODE. Then the "Traceback" lines in the server's log, the server's RSS at
start, middle and end (when it started the server), the servers' own counters (CHAOS TXT
``stats.tooldns.``, asked over TCP before and after), and whether a resolution with the resolver
library answers correctly afterwards.

Floors (exit status 1 if one fails): no unanswered query that was due a reply (unless rate
limiting is on: see below), no reply to a message that must be dropped, no bad reply, no reply
that matches no query, no traceback in the log, no SERVFAIL counted by the servers as an internal
error, the server still running, and the resolution afterwards correct.

With rate limiting on (``tooldns serve``'s default: its ``--no-rate-limit`` turns it off), replies
over the rate are dropped or sent truncated (slipped, TC set). Replies that slipped count as
answered (and TC); queries left without a reply are counted as "limited or lost": the servers'
counters do not say which. The fuzzing sockets are bound to ``--source`` (on loopback
127.0.99.1), so that the resolution afterwards, from 127.0.0.1, is not limited for their sake.

    python scripts/fuzz/fuzz_server.py --packets 20000 --serve-arg=--no-rate-limit
    python scripts/fuzz/fuzz_server.py --root 127.0.0.1:5300 --packets 100000 --seed 7
"""

from __future__ import annotations

import argparse
import ipaddress
import random
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tooldns.fuzzpackets import (CATEGORIES, RCODES, WEIGHTS, Report, Tally, Target, expects_reply,  # noqa: E402
                                 floors, make_packet)

#: seconds between a query and when its reply counts as missing
TIMEOUT = 1.0


@dataclass
class Pending:
    category: str
    packet: bytes
    deadline: float


class UdpSender:
    """Queries in flight on several non-blocking sockets; replies matched by (socket, ID).

    At most ``window`` queries due a reply are in flight; the window grows by one for every
    window's worth of replies and halves (at most once a timeout) when a query times out, so the
    servers' socket buffers never overflow for the fuzzer's sake. When the servers rate limit
    (*limited*), a missing reply is their policy, not congestion: the window stays, and a query
    gives up its place after 0.3 s. Replies that come after a query gave up its place (up to 30 s)
    still count as answered ("late").
    """

    def __init__(self, report: Report, sockets: int, source: str | None, timeout: float, window: int,
                 max_window: int, limited: bool = False) -> None:
        self.report, self.timeout, self.limited = report, timeout, limited
        self.release = min(timeout, 0.3) if limited else timeout
        self.window, self.max_window = float(window), max_window
        self.socks = []
        for _ in range(sockets):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
            if source:
                sock.bind((source, 0))
            sock.setblocking(False)
            self.socks.append(sock)
        self.due: dict[tuple[int, int], Pending] = {}  # a reply is due; in send order
        self.silent: dict[tuple[int, int], Pending] = {}  # no reply may come
        self.expired: dict[tuple[int, int], Pending] = {}  # timed out; a late reply still counts
        self.ids = [random.randrange(65536) for _ in self.socks]
        self.turn = 0
        self.last_halving = 0.0
        self.halvings = 0

    def _key(self) -> tuple[int, int]:
        self.turn = (self.turn + 1) % len(self.socks)
        while True:
            self.ids[self.turn] = (self.ids[self.turn] + 1) & 0xFFFF
            key = (self.turn, self.ids[self.turn])
            if key not in self.due and key not in self.silent and key not in self.expired:
                return key

    def send(self, category: str, packet: bytes, dest: tuple[str, int]) -> None:
        while len(self.due) >= int(self.window):
            self.pump(0.05)
        key = self._key()
        if len(packet) >= 2:
            packet = struct.pack("!H", key[1]) + packet[2:]
        self.report.tally(category).sent += 1
        for _ in range(1000):
            try:
                self.socks[key[0]].sendto(packet, dest)
                break
            except (BlockingIOError, InterruptedError):
                self.pump(0.01)
            except OSError:  # EMSGSIZE and the like: the message never left
                self.report.tally(category).sent -= 1
                return
        pending = Pending(category, packet, time.monotonic() + self.release)
        (self.due if expects_reply(packet) else self.silent)[key] = pending

    def pump(self, wait: float) -> None:
        """Take the replies that arrive within *wait* seconds, and time out the queries overdue."""
        readable, _, _ = select.select(self.socks, [], [], wait)
        for sock in readable:
            index = self.socks.index(sock)
            while True:
                try:
                    wire = sock.recv(65535)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:  # ICMP errors surface here on Linux
                    continue
                self._take(index, wire)
        self._expire(time.monotonic())

    def _take(self, index: int, wire: bytes) -> None:
        key = (index, struct.unpack_from("!H", wire)[0] if len(wire) >= 2 else -1)
        for table in (self.due, self.silent, self.expired):
            pending = table.pop(key, None)
            if pending is not None:
                break
        else:
            self.report.unmatched += 1
            return
        t = self.report.tally(pending.category)
        if table is self.expired:  # it was counted as silence: undo that
            if expects_reply(pending.packet):
                t.unanswered -= 1
                t.late += 1
            else:
                t.dropped -= 1
        elif table is self.due:
            self.window = min(self.max_window, self.window + 1 / self.window)
        self.report.reply(pending.category, pending.packet, wire, True)

    def _expire(self, now: float) -> None:
        for table in (self.due, self.silent):
            while table:
                key, pending = next(iter(table.items()))
                if pending.deadline > now:
                    break
                del table[key]
                self.expired[key] = pending
                self.report.silence(pending.category, pending.packet, True)
                if table is self.due and not self.limited and now - self.last_halving > self.timeout:
                    self.window, self.last_halving = max(4.0, self.window / 2), now
                    self.halvings += 1
        while self.expired:  # late replies are taken for another 30 s
            key, pending = next(iter(self.expired.items()))
            if pending.deadline > now - 30:
                break
            del self.expired[key]

    def finish(self) -> None:
        """Wait for the replies still due (until they time out), then a moment for stragglers."""
        end = time.monotonic() + self.timeout + 0.2
        while (self.due or self.silent) and time.monotonic() < end:
            self.pump(0.05)
        self.pump(0.2)
        self._expire(float("inf"))
        for sock in self.socks:
            sock.close()


def _frames(messages: list[tuple[str, bytes]], rng: random.Random) -> tuple[bytes, list[bytes], bool]:
    """The bytes to send for a pipelined batch: each message with its length; sometimes a last frame
    cut short (no reply can come for it). Returns the stream, the messages as sent (IDs set) and
    whether the last frame was cut."""
    sent, stream = [], b""
    for i, (_, packet) in enumerate(messages):
        packet = struct.pack("!H", i) + packet[2:] if len(packet) >= 2 else packet
        sent.append(packet)
        stream += struct.pack("!H", len(packet)) + packet
    cut = rng.random() < 0.1 and len(sent[-1]) > 0
    if cut:
        stream = stream[:-rng.randint(1, len(sent[-1]))]
    return stream, sent, cut


def _read_frames(sock: socket.socket, want: int, deadline: float) -> list[bytes]:
    """Replies read off a TCP connection until *want* have come, the server closes or *deadline* passes."""
    buffer, replies = b"", []
    while len(replies) < want and time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except (socket.timeout, OSError):
            break
        if not chunk:
            break
        buffer += chunk
        while len(buffer) >= 2 and len(buffer) >= 2 + struct.unpack_from("!H", buffer)[0]:
            length = struct.unpack_from("!H", buffer)[0]
            replies.append(buffer[2:2 + length])
            buffer = buffer[2 + length:]
    return replies


def tcp_batch(report: Report, dest: tuple[str, int], messages: list[tuple[str, bytes]], rng: random.Random,
              source: str | None, timeout: float) -> None:
    """Send *messages* pipelined on one TCP connection and account for each (row ``tcp``)."""
    stream, sent, cut = _frames(messages, rng)
    due = [p for p in (sent[:-1] if cut else sent) if expects_reply(p)]
    t = report.tally("tcp")
    t.sent += len(sent)
    replies: list[bytes] = []
    try:
        with socket.create_connection(dest, timeout=timeout, source_address=(source, 0) if source else None) as sock:
            sock.sendall(stream)
            if cut or rng.random() < 0.5:
                sock.shutdown(socket.SHUT_WR)  # the server sees the end of the stream after the last frame
            replies = _read_frames(sock, len(due), time.monotonic() + timeout + 0.05 * len(sent))
    except OSError as exc:
        report.sample("tcp", f"connection failed: {exc}", stream[:60], False)
    by_id = {struct.unpack_from("!H", w)[0]: w for w in replies if len(w) >= 2}
    report.unmatched += len(replies) - len(by_id)
    for i, packet in enumerate(sent):
        wire = by_id.pop(i, None) if len(packet) >= 2 and not (cut and i == len(sent) - 1) else None
        if wire is None:
            if cut and i == len(sent) - 1:
                t.dropped += 1  # never delivered whole
            else:
                report.silence("tcp", packet, False)
        else:
            report.reply("tcp", packet, wire, False)
    report.unmatched += len(by_id)


# -- the server under test --

def serve_help() -> str:
    out = subprocess.run([sys.executable, "-m", "tooldns.cli", "serve", "--help"], capture_output=True, text=True,
                         cwd=ROOT)
    return out.stdout


def start_server(zones: str, port: int, extra: list[str], log_path: str) -> tuple[subprocess.Popen, list[str]]:
    """``tooldns serve`` in its own process, output to *log_path*; returns it and the lines of its table."""
    log = open(log_path, "w", encoding="utf-8")
    proc = subprocess.Popen([sys.executable, "-m", "tooldns.cli", "serve", zones, "--port", str(port), *extra],
                            stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, text=True)
    log.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = Path(log_path).read_text(encoding="utf-8", errors="replace")
        if re.search(r"root zone on \S+:\d+;", text):
            return proc, text.splitlines()
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    stop_server(proc)
    raise SystemExit(f"the servers did not start; their output ({log_path}):\n{Path(log_path).read_text()[-3000:]}")


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def targets_from_table(lines: list[str]) -> tuple[list[tuple[tuple[str, int], Target]], tuple[str, int]]:
    """Every server of the tree (address and port, the zone it serves and names in it), and the root's."""
    from tooldns.zone.zonefile import load_zone

    root = re.search(r"root zone on (\S+):(\d+);", "\n".join(lines))
    port = int(root.group(2))
    out = []
    for line in lines:
        row = re.match(r"^(\S+\.)\s+(\d+\.\d+\.\d+\.\d+|[0-9a-f:]+)\s+(\d+)\s+(\d+)\s+(\S.*)$", line.strip())
        if not row:
            continue
        zone = load_zone(row.group(5))
        names = [c.name for c in zone.children] + [t.owner(zone.origin) for t in zone.tools[:20]]
        out.append(((row.group(2), port), Target(zone.origin, tuple(names))))
    return out, (root.group(1), port)


def rss_kb(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"VmRSS:\s+(\d+) kB", text)
    return int(match.group(1)) if match else None


def chaos_stats(dest: tuple[str, int], timeout: float = 3.0) -> dict[str, int]:
    """A server's counters: ``dig CH TXT stats.tooldns.`` over TCP (never rate limited); {} if it does not say."""
    from tooldns.fuzzpackets import encode_name, header, question

    query = header(0x5151) + question(encode_name("stats.tooldns."), 16, 3)
    try:
        with socket.create_connection(dest, timeout=timeout) as sock:
            sock.sendall(struct.pack("!H", len(query)) + query)
            replies = _read_frames(sock, 1, time.monotonic() + timeout)
    except OSError:
        return {}
    if not replies:
        return {}
    from dnslib import DNSRecord

    out = {}
    for rr in DNSRecord.parse(replies[0]).rr:
        for raw in rr.rdata.data:
            key, _, value = raw.decode("utf-8", "replace").partition("=")
            if value.lstrip("-").isdigit():
                out[key] = int(value)
    return out


def sum_stats(dests: list[tuple[str, int]]) -> Counter:
    total: Counter = Counter()
    for dest in dests:
        total.update(chaos_stats(dest))
    return total


def post_check(root: tuple[str, int], intent: str, zones: list[str]) -> tuple[bool, str]:
    """Resolve *intent* with the resolver library: is its best tool in one of *zones*?"""
    from resolver_client import Resolver, ResolverError

    try:
        with Resolver(root=root, timeout=2.0, cache=False) as resolver:
            res = resolver.resolve(intent, k=3)
    except ResolverError as exc:
        return False, f"the resolution failed: {exc}"
    if not res.tools:
        return False, "no tools found"
    top = res.tools[0]
    ok = not zones or top.zone in zones
    return ok, f"best tool {top.name!r} in {top.zone} ({res.stats.queries} queries)"


# -- the run --

def table(report: Report) -> list[str]:
    """One row per category: what became of its messages, and the RCODEs of its replies."""
    names = sorted({name for t in report.tallies.values() for name in t.rcodes},
                   key=lambda n: list(RCODES.values()).index(n) if n in RCODES.values() else 99)
    head = (f"{'category':10} {'sent':>8} {'answered':>8} {'no reply':>8} {'dropped':>8} {'stray':>6} {'bad':>5} "
            f"{'TC':>6}")
    rows = [head + "".join(f" {n:>9}" for n in names)]
    total = Tally()
    for category in [*CATEGORIES, "tcp"]:
        t = report.tallies.get(category)
        if t is None:
            continue
        for attr in ("sent", "answered", "unanswered", "dropped", "stray", "bad", "tc", "late"):
            setattr(total, attr, getattr(total, attr) + getattr(t, attr))
        total.rcodes.update(t.rcodes)
    for category, t in [*((c, report.tallies[c]) for c in [*CATEGORIES, "tcp"] if c in report.tallies),
                        ("total", total)]:
        rows.append(f"{category:10} {t.sent:8d} {t.answered:8d} {t.unanswered:8d} {t.dropped:8d} {t.stray:6d} "
                    f"{t.bad:5d} {t.tc:6d}" + "".join(f" {t.rcodes.get(n, 0):9d}" for n in names))
    return rows


def plan(args) -> list[str]:
    """The category of each message to send, drawn by weight (TCP batches draw from the same)."""
    chosen = args.categories.split(",") if args.categories else list(CATEGORIES)
    unknown = [c for c in chosen if c not in CATEGORIES]
    if unknown:
        raise SystemExit(f"unknown categories {unknown}; known: {', '.join(CATEGORIES)}")
    rng = random.Random(args.seed)
    return rng.choices(chosen, weights=[WEIGHTS[c] for c in chosen], k=args.packets)


def send_all(args, report: Report, targets, source: str | None, pid: int | None, limited: bool) -> dict:
    """Send every message; returns what was measured on the way (RSS in the middle, time taken, window)."""
    rng = random.Random(args.seed + 1)
    udp = UdpSender(report, args.sockets, source, args.timeout, args.window, args.max_window, limited)
    categories = plan(args)
    batch: list[tuple[str, bytes]] = []
    batch_size, batch_dest = rng.randint(1, 20), rng.choice(targets)[0]
    middle, t0 = None, time.monotonic()
    for i, category in enumerate(categories):
        dest, target = rng.choice(targets)
        packet = make_packet(category, rng, target)
        if rng.random() < args.tcp_share:
            batch.append((category, packet))
            if len(batch) >= batch_size:
                tcp_batch(report, batch_dest, batch, rng, source, args.timeout)
                batch, batch_size, batch_dest = [], rng.randint(1, 20), rng.choice(targets)[0]
        else:
            udp.send(category, packet, dest)
        if i == len(categories) // 2:
            middle = rss_kb(pid)
        if args.progress and i and i % args.progress == 0:
            print(f"  {i} sent, {i / (time.monotonic() - t0):.0f}/s, window {udp.window:.0f}", flush=True)
    if batch:
        tcp_batch(report, batch_dest, batch, rng, source, args.timeout)
    udp.finish()
    return {"middle": middle, "seconds": time.monotonic() - t0, "window": udp.window, "halvings": udp.halvings}


def rate_limited(args, help_text: str) -> bool:
    """Whether the servers limit UDP replies: --rate-limited for a tree running elsewhere; for the one
    started here, unless its serve arguments turn limiting off (or it has none)."""
    if args.root:
        return args.rate_limited
    if "--no-rate-limit" not in help_text:
        return False
    joined = " ".join(args.serve_arg)
    return not re.search(r"--no-rate-limit\b|--rate-limit[= ]0\b", joined)


def pick_source(args, address: str) -> str | None:
    if args.source != "auto":
        return args.source or None
    try:
        loopback = ipaddress.ip_address(address).is_loopback and ":" not in address
    except ValueError:
        loopback = False
    return "127.0.99.1" if loopback else None


def parse_args(argv: list[str] | None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--packets", type=int, default=1_000_000, help="messages to send (default 1,000,000)")
    p.add_argument("--root", metavar="HOST:PORT", help="fuzz this running tree's root server instead of starting one")
    p.add_argument("--zones", default=str(ROOT / "zones"), help="zone directory to serve (default zones/)")
    p.add_argument("--port", type=int, default=0, help="port for the tree started here (default 0: a free one)")
    p.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                   help="passed on to tooldns serve (repeatable), e.g. --serve-arg=--no-rate-limit")
    p.add_argument("--log", help="file for the server's output (default: a new file in the temp directory)")
    p.add_argument("--root-zone", default="tools.", help="with --root: the zone its server serves (default tools.)")
    p.add_argument("--rate-limited", action="store_true", help="with --root: the tree limits UDP replies")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--categories", help=f"comma-separated subset of {','.join(CATEGORIES)}")
    p.add_argument("--tcp-share", type=float, default=0.05, help="share of messages sent over TCP (default 0.05)")
    p.add_argument("--sockets", type=int, default=8, help="UDP sockets (default 8)")
    p.add_argument("--window", type=int, default=32, help="UDP queries in flight at first (default 32)")
    p.add_argument("--max-window", type=int, default=128, help="UDP queries in flight at most (default 128)")
    p.add_argument("--timeout", type=float, default=TIMEOUT, help=f"seconds to wait for a reply (default {TIMEOUT:g})")
    p.add_argument("--source", default="auto", help="address the fuzzing sockets are bound to (default on "
                   "loopback: 127.0.99.1, elsewhere none)")
    p.add_argument("--check-intent", default="historical weather Hong Kong", help="resolved afterwards")
    p.add_argument("--check-zone", action="append", default=None,
                   help="a zone the best tool must come from (repeatable; default hko.weather.tools. and "
                        "history.weather.tools.; give '' to accept any)")
    p.add_argument("--progress", type=int, default=0, metavar="N", help="print progress every N messages")
    return p.parse_args(argv)


def print_summary(report: Report, measured: dict, rss: tuple, stats: tuple[Counter, Counter], log_text: str | None,
                  limited: bool) -> Counter:
    """Print the figures; returns the servers' counters' changes."""
    for row in table(report):
        print(row)
    late = sum(t.late for t in report.tallies.values())
    print(f"replies that matched no query: {report.unmatched}; late replies (after their query gave up its place "
          f"in the window, counted as answered): {late}")
    if limited:
        print("rate limiting is on: 'no reply' counts queries whose replies were rate limited or lost; "
              "TC counts the replies that slipped among the truncated ones")
    print(f"UDP window at the end: {measured['window']:.0f} queries in flight, halved {measured['halvings']} times; "
          f"{measured['seconds']:.1f} s, {sum(t.sent for t in report.tallies.values()) / measured['seconds']:.0f} "
          "messages/s")
    if log_text is not None:
        print(f"server log: {log_text.count('Traceback')} 'Traceback' lines")
    if rss[0] is not None:
        print(f"server RSS: start {rss[0]} kB, middle {rss[1]} kB, end {rss[2]} kB")
    before, after = stats
    delta = Counter({k: after[k] - before.get(k, 0) for k in after})
    keys = [k for k in ("queries", "formerr", "servfail", "rate_limited", "slipped") if k in delta]
    print("servers' counters (CHAOS stats.tooldns., all zones), change: "
          + (", ".join(f"{k} +{delta[k]}" for k in keys) if keys else "not available"))
    for line in report.samples:
        print(f"  sample: {line}")
    return delta


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    proc, log_text, log_path = None, None, args.log
    if args.root:
        host, _, port = args.root.rpartition(":")
        root = (host, int(port))
        targets = [(root, Target(args.root_zone))]
        limited = rate_limited(args, "")
    else:
        log_path = log_path or tempfile.mkstemp(prefix="fuzz-server-", suffix=".log")[1]
        limited = rate_limited(args, serve_help())
        proc, lines = start_server(args.zones, args.port, args.serve_arg, log_path)
        targets, root = targets_from_table(lines)
        if not targets:  # a table this script cannot read: the root server alone
            targets = [(root, Target("tools."))]
    source = pick_source(args, root[0])
    print(f"fuzz_server: {args.packets} messages to {len(targets)} servers of the tree at {root[0]}:{root[1]} "
          f"({'started here, log ' + log_path if proc else 'running already'}), seed {args.seed}, "
          f"rate limiting {'on' if limited else 'off'}, from {source or 'any address'}", flush=True)
    try:
        dests = sorted({dest for dest, _ in targets})
        before = sum_stats(dests)
        start_rss = rss_kb(proc.pid if proc else None)
        report = Report(limited)
        measured = send_all(args, report, targets, source, proc.pid if proc else None, limited)
        end_rss = rss_kb(proc.pid if proc else None)
        after = sum_stats(dests)
        zones = [z for z in (args.check_zone or ["hko.weather.tools.", "history.weather.tools."]) if z]
        check = post_check(root, args.check_intent, zones)
        if log_path and proc:
            log_text = Path(log_path).read_text(encoding="utf-8", errors="replace")
        delta = print_summary(report, measured, (start_rss, measured["middle"], end_rss), (before, after), log_text,
                              limited)
        print(f"resolution of {args.check_intent!r} afterwards: {'ok' if check[0] else 'WRONG'}: {check[1]}")
        failed = floors(report, log_text, delta, proc, limited, check)
    finally:
        if proc is not None:
            stop_server(proc)
    print("floors: " + ("all held" if not failed else "FAILED: " + "; ".join(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
