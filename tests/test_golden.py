"""Golden replies: a fixed set of queries against the shipped tree, replies compared byte for byte.

The queries and the replies (less the 2-byte ID) were recorded from real servers of the shipped
``zones/`` tree over UDP and TCP, and are kept in ``tests/golden/shipped_tree.json``. Any change
on the wire (a record, its order, a TTL, a flag, an option) fails this test; a deliberate change
is recorded again with::

    TOOLDNS_RECORD_GOLDEN=1 python3 -m pytest tests/test_golden.py

Each zone's queries go to that zone's own server. The tree runs on the shipped 127.0.0.x addresses
(the glue in the replies names them), on a free port; other tests use other 127.x.y.0/24 prefixes.
"""

from __future__ import annotations

import json
import os
import socket
import struct
from pathlib import Path

import dns.edns
import dns.flags
import dns.message
import dns.opcode
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import pytest
import yaml

from tooldns import TreeThread, encode_intent

from conftest import ZONES, free_port

GOLDEN = Path(__file__).parent / "golden" / "shipped_tree.json"
INTENT = 65301
INTENTS = ["historical weather Hong Kong", "send a slack message", "typhoon warning", "bitcoin price",
           "find papers about transformers", "天气预报", "directions to the airport by train",
           "create and edit documents: pdf, docx, xlsx, pptx, notes and files"]


def _query(name: str, rdtype: str = "SRV", *, intent: str | None = None, k: int = 3, edns: int | None = 0,
           payload: int = 1232, options=None, rdclass: str = "IN", opcode=None, qid: int = 4242) -> bytes:
    opts = list(options or [])
    if intent is not None:
        opts.append(dns.edns.GenericOption(INTENT, encode_intent(intent, k)))
    msg = dns.message.make_query(name, rdtype, rdclass, use_edns=edns if edns is not None else False,
                                 payload=payload, options=opts or None, flags=0)
    if opcode is not None:
        msg.set_opcode(opcode)
    msg.id = qid
    return msg.to_wire()


def _cases() -> list[tuple[str, bytes, bool, str]]:
    """(what, query bytes, over TCP, the address of the zone server asked) for the shipped tree."""
    zones = [yaml.safe_load(p.read_text(encoding="utf-8")) for p in sorted(ZONES.glob("*.yaml"))]
    address = {z["origin"]: z["nameservers"][0]["address"] for z in zones}
    cases: list[tuple[str, bytes, bool, str]] = []
    for z in zones:
        start = len(cases)
        origin = z["origin"]
        first, _, rest = origin.partition(".")
        cursor = f"_any._tcp._{first}.{rest}"
        for intent in INTENTS:
            cases.append((f"{cursor} {intent!r} K=3", _query(cursor, intent=intent), False))
        cases.append((f"{cursor} K=1 mcp", _query(f"_mcp._tcp._{first}.{rest}", intent=INTENTS[1], k=1), False))
        cases.append((f"{cursor} K=10 tcp", _query(cursor, intent=INTENTS[0], k=10), True))
        cases.append((f"{cursor} no intent", _query(cursor), False))
        cases.append((f"{origin} SOA", _query(origin, "SOA"), False))
        cases.append((f"{origin} NS", _query(origin, "NS"), False))
        cases.append((f"{origin} ANY tcp", _query(origin, "ANY"), True))
        cases.append((f"{origin} A (nodata)", _query(origin, "A"), False))
        cases.append((f"nope.{origin} (nxdomain)", _query(f"nope.{origin}", "A"), False))
        for tool in (z.get("tools") or [])[:3]:
            owner = f"{tool['label']}._{tool['service']}._tcp.{origin}"
            cases.append((f"{owner} SRV", _query(owner, "SRV"), False))
            cases.append((f"{owner} TXT tcp", _query(owner, "TXT"), True))
        if z.get("tools"):
            svc = z["tools"][0]["service"]
            expanded = f"_{svc}._tcp.{origin}"
            cases.append((f"{expanded} expanded, intent", _query(expanded, intent=INTENTS[0], k=2), False))
            cases.append((f"{expanded} expanded, no intent, tcp", _query(expanded), True))
        for child in z.get("children") or []:
            below = f"_any._tcp._x.{child['label']}.{origin}"
            cases.append((f"{below} below a child", _query(below, intent=INTENTS[0]), False))
            break
        cases[start:] = [(what, q, tcp, address[origin]) for what, q, tcp in cases[start:]]
    root = "_any._tcp._tools."
    leaf = address["docs.productivity.tools."]
    special = [
        ("no EDNS, 512-byte limit", _query(root, intent=None, edns=None), False),
        ("outside the zone", _query("example.com.", "A"), False),
        ("bad intent version", _query(root, options=[dns.edns.GenericOption(INTENT, b"\x01\x00\x01\x03a")]), False),
        ("bad intent length", _query(root, options=[dns.edns.GenericOption(INTENT, b"\x00\x00\x05\x03ab")]), False),
        ("intent K=0", _query(root, options=[dns.edns.GenericOption(INTENT, b"\x00\x00\x01\x00a")]), False),
        ("two intents", _query(root, options=[dns.edns.GenericOption(INTENT, encode_intent("a", 1)),
                                              dns.edns.GenericOption(INTENT, encode_intent("b", 1))]), False),
        ("EDNS version 1", _query(root, intent="weather", edns=1), False),
        ("NOTIFY opcode", _query("tools.", "SOA", opcode=dns.opcode.NOTIFY), False),
        ("NOTIFY for a child from a stranger", _query("weather.tools.", "SOA", opcode=dns.opcode.NOTIFY), False),
        ("UPDATE opcode", _query("tools.", "SOA", opcode=dns.opcode.UPDATE), False),
        ("AXFR", _query("tools.", "AXFR"), True),
        ("class CH A", _query("tools.", "A", rdclass="CH"), False),
        ("unknown service", _query("_ftp._tcp._tools.", intent="weather"), False),
        ("payload 600", _query(root, intent=INTENTS[0], k=10, payload=600), False),
        ("cursor label '_'", _query("_any._tcp._.tools.", intent="weather"), False),
    ]
    cases += [(what, q, tcp, address["tools."]) for what, q, tcp in special]
    big = "_any._tcp._docs.productivity.tools."
    cases += [(what, q, tcp, leaf) for what, q, tcp in [
        ("no EDNS leaf answer (truncates)", _query("_any._tcp.docs.productivity.tools.", edns=None), False),
        ("big leaf over UDP truncates", _query(big, intent=INTENTS[7], k=8), False),
        ("big leaf over TCP", _query(big, intent=INTENTS[7], k=8), True),
        ("payload 512, big leaf truncates", _query(big, intent=INTENTS[7], k=8, payload=512), False),
    ]]
    return cases


def _send(address: str, port: int, query: bytes, tcp: bool) -> bytes:
    if tcp:
        with socket.create_connection((address, port), timeout=5) as sock:
            sock.sendall(struct.pack("!H", len(query)) + query)
            head = sock.recv(2, socket.MSG_WAITALL)
            return sock.recv(struct.unpack("!H", head)[0], socket.MSG_WAITALL)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(5)
        sock.sendto(query, (address, port))
        return sock.recv(65535)


@pytest.fixture(scope="module")
def shipped_tree(integration):
    port = free_port("127.0.0.1")
    with TreeThread(ZONES, port) as tree:
        yield tree


def test_replies_match_recorded_bytes(shipped_tree):
    _, port = shipped_tree.root()
    if os.environ.get("TOOLDNS_RECORD_GOLDEN"):
        recorded = [{"what": what, "tcp": tcp, "server": address, "query": q.hex(),
                     "reply": _send(address, port, q, tcp)[2:].hex()} for what, q, tcp, address in _cases()]
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(recorded, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    recorded = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert len(recorded) > 300
    mismatches = []
    for case in recorded:
        reply = _send(case["server"], port, bytes.fromhex(case["query"]), case["tcp"])
        assert reply[:2] == bytes.fromhex(case["query"])[:2], case["what"]
        if reply[2:].hex() != case["reply"]:
            mismatches.append(case["what"])
    assert not mismatches, f"{len(mismatches)} replies changed, e.g. {mismatches[:5]}"


def test_recorded_replies_cover_every_outcome():
    """The recorded set exercises referrals, answers, truncation and every error this server sends."""
    rcodes, truncated, referrals = set(), 0, 0
    for case in json.loads(GOLDEN.read_text(encoding="utf-8")):
        msg = dns.message.from_wire(b"\0\0" + bytes.fromhex(case["reply"]))
        rcodes.add(dns.rcode.to_text(msg.rcode()))
        truncated += bool(msg.flags & dns.flags.TC)
        referrals += bool(not msg.answer and msg.authority and msg.authority[0].rdtype == dns.rdatatype.NS)
    assert {"NOERROR", "NXDOMAIN", "FORMERR", "REFUSED", "NOTIMP", "BADVERS", "NOTAUTH"} <= rcodes
    assert truncated >= 3 and referrals >= 50
