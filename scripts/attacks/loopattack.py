"""What the event-loop attacks share (``child_stall.py``, ``lazy_flood.py``, ``fifo_zone.py``,
``big_reload.py``): their common arguments and a scratch directory of zone files, zone files written for
an attack, a steady stream of good queries measured while
idle and under attack, and the line each phase prints.

Good queries are intent searches with intents never seen before (so none is answered from the packet
cache), sent over UDP at a fixed rate from one socket, each given two seconds to be answered: one
not answered by then is lost. The stream is open-loop (sent on a clock, not after the last reply), so
a stalled server shows as latency and losses, not as fewer queries sent::

    times, lost = good_stream("127.0.0.1", 5300, seconds=10, rate=50)
    print(phase("idle", times, lost))
"""

from __future__ import annotations

import argparse
import random
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchlib
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchlib import percentile, start_servers, stop_servers  # noqa: E402,F401  (the attacks' names for them)
from tooldns.protocol import INTENT_OPTION_CODE, encode_intent  # noqa: E402

WORDS = ("weather rain forecast history archive stock price quote map route geocode search paper repository "
         "issue email calendar payment invoice translate summarize music flight hotel lyrics chart").split()
#: seconds a good query may take before it counts as lost
LOST_AFTER = 2.0


def attack_arguments(p: argparse.ArgumentParser, *, seconds: float, rate: float, port: int, name: str) -> None:
    """The arguments every attack takes: each phase's length, the good queries' rate, the servers' port
    and the scratch directory (``/tmp/tooldns-attack-NAME`` by default)."""
    p.add_argument("--seconds", type=float, default=seconds, help="of each phase")
    p.add_argument("--rate", type=float, default=rate, help="good queries a second")
    p.add_argument("--port", type=int, default=port)
    p.add_argument("--dir", default=f"/tmp/tooldns-attack-{name}")


def fresh_zonedir(path: str | Path) -> Path:
    """*path* made if need be and emptied of what an earlier run of an attack left there (zone files,
    and the temporary files written before a rename)."""
    zonedir = Path(path)
    zonedir.mkdir(parents=True, exist_ok=True)
    for pattern in ("*.yaml", "*.tmp"):
        for old in zonedir.glob(pattern):
            old.unlink()
    return zonedir


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def intent_query(qid: int, zone: str, intent: str) -> bytes:
    """An intent search for the children (or tools) of *zone*, RD clear, EDNS with the intent option."""
    header = qid.to_bytes(2, "big") + b"\x00\x00\x00\x01\x00\x00\x00\x00\x00\x01"
    qname = b"".join(len(label).to_bytes(1, "big") + label.encode()
                     for label in ["_any", "_tcp", "_" + zone.split(".")[0], *zone.split(".")[1:]] if label) + b"\x00"
    option = encode_intent(intent, 3)
    opt = (b"\x00" + (41).to_bytes(2, "big") + (1232).to_bytes(2, "big") + b"\x00\x00\x00\x00"
           + (len(option) + 4).to_bytes(2, "big") + INTENT_OPTION_CODE.to_bytes(2, "big")
           + len(option).to_bytes(2, "big") + option)
    return header + qname + (33).to_bytes(2, "big") + b"\x00\x01" + opt


def good_stream(address: str, port: int, seconds: float, rate: float, zone: str = "tools.",
                seed: int = 0) -> tuple[list[float], int]:
    """Send good queries about *zone* at *rate* a second for *seconds*; the milliseconds of each one
    answered, and how many were lost (no reply within :data:`LOST_AFTER` seconds)."""
    rng = random.Random(seed)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(0.2)
    sent: dict[int, float] = {}
    times: list[float] = []
    done = threading.Event()

    def receive():
        while not done.is_set():
            try:
                reply = sock.recv(65535)
            except socket.timeout:
                continue
            t0 = sent.pop(int.from_bytes(reply[:2], "big"), None)
            if t0 is not None:
                ms = (time.perf_counter() - t0) * 1000
                if ms <= LOST_AFTER * 1000:
                    times.append(ms)

    receiver = threading.Thread(target=receive, daemon=True)
    receiver.start()
    start = time.perf_counter()
    n = int(seconds * rate)
    for i in range(n):
        wait = start + i / rate - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        qid = (seed * 7919 + i) % 65536
        wire = intent_query(qid, zone, f"{words(rng, 3)} {seed} {i}")
        sent[qid] = time.perf_counter()
        sock.sendto(wire, (address, port))
    time.sleep(LOST_AFTER)
    done.set()
    receiver.join()
    sock.close()
    return times, n - len(times)


def phase(name: str, times: list[float], lost: int, load: str = "") -> str:
    """One phase's line: good queries answered, lost, p50 and p99 in milliseconds."""
    return (f"{name:12} good {len(times) + lost:5d}  lost {lost:4d}  p50 {percentile(times, 50):7.2f} ms  "
            f"p99 {percentile(times, 99):7.2f} ms  max {max(times, default=0):7.1f} ms"
            + (f"  loadavg {load}" if load else ""))


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def tool_yaml(label: str, rng: random.Random, description_words: int = 12) -> str:
    return (f"- label: {label}\n  name: {label.replace('-', ' ').title()}\n  service: http\n"
            f"  target: api.{label}.example.\n  port: 443\n  description: {words(rng, description_words)}\n")


def zone_yaml(origin: str, address: str, serial: int = 1, refresh: int = 3600, children: str = "",
              tools: str = "", description: str = "") -> str:
    """A zone file's text: *children* and *tools* are YAML list items (:func:`delegation_yaml`,
    :func:`tool_yaml`)."""
    label = origin.split(".")[0]
    return (f"origin: {origin}\nsoa:\n  contact: hostmaster@{origin.rstrip('.')}\n  serial: {serial}\n"
            f"  refresh: {refresh}\nnameservers:\n- name: ns1.{origin}\n  address: {address}\n"
            f"summary:\n  description: {description or label + ' tools'}\n"
            + (f"children:\n{children}" if children else "") + (f"tools:\n{tools}" if tools else ""))


def delegation_yaml(label: str, origin: str, address: str, rng: random.Random, serial: int | None = 1,
                    pinned: bool = False) -> str:
    """A delegation's list item: its summary stands for the child's *serial* (None: for none, the
    child's is learned at once), or is the operator's for good (*pinned*: the child is never asked)."""
    pin = "    pin: true\n" if pinned else f"    serial: {serial}\n" if serial is not None else ""
    return (f"- label: {label}\n  kind: functional\n  summary:\n{pin}    description: {words(rng, 10)}\n"
            f"    keywords: [{', '.join(rng.sample(WORDS, 5))}]\n  nameservers:\n  - name: ns1.{label}.{origin}\n"
            f"    address: {address}\n")


def root_with_children(zonedir: Path, children: int, root_address: str, child_address: str, seed: int = 0,
                       leaf_tools: int = 3, child_files: bool = True) -> list[str]:
    """A root zone ``tools.`` of *children* children, each a leaf of *leaf_tools* tools served on
    *child_address* (their files written when *child_files*); the children's origins."""
    rng = random.Random(seed)
    zonedir.mkdir(parents=True, exist_ok=True)
    labels = [f"c{i:05d}" for i in range(children)]
    delegations = "".join(delegation_yaml(label, "tools.", child_address, rng) for label in labels)
    (zonedir / "tools.yaml").write_text(zone_yaml("tools.", root_address, children=delegations))
    if child_files:
        for label in labels:
            tools = "".join(tool_yaml(f"{label}-t{j}", rng) for j in range(leaf_tools))
            (zonedir / f"{label}.tools.yaml").write_text(zone_yaml(f"{label}.tools.", child_address, tools=tools))
    return [f"{label}.tools." for label in labels]
