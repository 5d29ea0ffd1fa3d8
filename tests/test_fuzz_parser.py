"""Property tests of the request path: hostile bytes in, a well-formed reply (or silence) out.

``parse_request`` on any bytes either returns a request or raises :class:`MalformedRequest`.
``DNSServer.handle`` over real zones' resolvers (``zones/weather.tools.yaml`` with its answer
cache, ``zones/tools.yaml`` without) never raises, logs no internal error and, for every message
whose 12-byte header is readable with QR clear, returns a reply that dnslib parses, with QR set, the
query's ID, at most one question (the query's own) and, over UDP, no more than 512 bytes (the
query had no OPT record) or than the size it advertised; everything else gets no reply at all.

Inputs: random bytes; queries built from Hypothesis' choices (names, types, classes, flags, OPT
records with intent, vector and arbitrary options) as they are and with edits (bytes flipped,
inserted, deleted, counts rewritten, truncations); and the hand-made hostile categories of
``tooldns/fuzzpackets.py`` (pointer loops and chains, long labels and names, many questions or
records, bad OPT records, bad intent and vector options), driven by a Random that Hypothesis draws.

Counts are small for CI; ``HYPOTHESIS_PROFILE=fuzz`` runs them long (see :mod:`fuzzing`).
"""

from __future__ import annotations

import logging
import random
import struct

import pytest
from dnslib import RCODE
from hypothesis import example, given, strategies as st

from conftest import ZONES
from fuzzing import examples
from tooldns.exceptions import IntentError
from tooldns.fuzzpackets import (CATEGORIES, Target, encode_name, header, make_packet, opt_record, option, question,
                                 reply_problem)
from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent
from tooldns.protocol.vector import VECTOR_OPTION_CODE, encode_vector
from tooldns.serving.resolver import ZoneResolver
from tooldns.serving.server import DNSServer
from tooldns.serving.store import ZoneStore
from tooldns.serving.wire import MalformedRequest, parse_request


class _Errors(logging.Handler):
    """Every record of level ERROR or above the server side logs: an internal error, a bug."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def errors():
    handler = _Errors()
    logger = logging.getLogger("tooldns")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


def _server(path, cache_size: int) -> tuple[DNSServer, Target]:
    store = ZoneStore(path)
    zone = store.zone
    names = tuple(c.name for c in zone.children) + tuple(t.owner(zone.origin) for t in zone.tools)
    return DNSServer(ZoneResolver(store), cache_size=cache_size), Target(zone.origin, names)


@pytest.fixture(scope="module")
def servers():
    """The weather zone's server with its answer cache, the root zone's without (bytes in, bytes out)."""
    return [_server(ZONES / "weather.tools.yaml", 4096), _server(ZONES / "tools.yaml", 0)]


# -- strategies --

NAMES = st.sampled_from([
    "_any._tcp._weather.tools.", "_mcp._tcp._weather.tools.", "_http._tcp.weather.tools.", "weather.tools.",
    "history.weather.tools.", "wttr-in._http._tcp.weather.tools.", "_any._tcp._tools.", "tools.", "stats.tooldns.",
    "_nope._tcp._weather.tools.", "_any._udp._history.weather.tools.", "example.com.", ".",
]) | st.lists(st.text("abz09-_", min_size=1, max_size=70), max_size=6).map(lambda ls: ".".join(ls) + ".")
QTYPES = st.sampled_from([33, 16, 2, 6, 1, 28, 255, 252, 251, 41, 5]) | st.integers(0, 65535)
QCLASSES = st.sampled_from([1, 3, 255, 254, 4]) | st.integers(0, 65535)


@st.composite
def edns_options(draw) -> bytes:
    out = b""
    if draw(st.booleans()):
        text = draw(st.text(min_size=1, max_size=60).filter(str.strip))
        try:
            out += option(INTENT_OPTION_CODE, encode_intent(text, draw(st.integers(1, 255))))
        except IntentError:  # an intent the codec refuses: sent as it is
            out += option(INTENT_OPTION_CODE, text.encode("utf-8", "replace"))
    if draw(st.integers(0, 4)) == 0:
        dim = draw(st.integers(1, 40))
        out += option(VECTOR_OPTION_CODE, encode_vector("m", [float(i % 7) - 3 for i in range(dim)]))
    for code, data in draw(st.lists(st.tuples(st.sampled_from([INTENT_OPTION_CODE, VECTOR_OPTION_CODE, 15, 10, 65302])
                                              | st.integers(0, 65535), st.binary(max_size=40)), max_size=3)):
        out += option(code, data)
    return out


@st.composite
def queries(draw) -> bytes:
    """A query built from Hypothesis' choices; well-formed, though not always one a server can answer."""
    flags = draw(st.integers(0, 0xFFFF)) & 0x7FFF if draw(st.integers(0, 3)) == 0 else draw(st.sampled_from([0, 0x100]))
    body = question(encode_name(draw(NAMES)), draw(QTYPES), draw(QCLASSES))
    if draw(st.integers(0, 4)) == 0:
        return header(draw(st.integers(0, 65535)), flags) + body
    payload = draw(st.sampled_from([1232, 512, 4096, 0, 65535]) | st.integers(0, 65535))
    opt = opt_record(draw(edns_options()), payload=payload,
                     version=draw(st.sampled_from([0, 0, 0, 1])), do=draw(st.booleans()))
    return header(draw(st.integers(0, 65535)), flags, ar=1) + body + opt


EDITS = st.lists(st.tuples(st.sampled_from(["flip", "set", "insert", "delete", "truncate", "count"]),
                           st.integers(0, 10_000), st.binary(min_size=1, max_size=8)), min_size=1, max_size=4)


def edit(packet: bytes, edits) -> bytes:
    data = bytearray(packet)
    for kind, at, blob in edits:
        at %= len(data) + 1
        if kind == "flip" and at < len(data):
            data[at] ^= blob[0] or 1
        elif kind == "set" and at < len(data):
            data[at] = blob[0]
        elif kind == "insert":
            data[at:at] = blob
        elif kind == "delete":
            del data[at:at + len(blob)]
        elif kind == "truncate":
            del data[at:]
        elif kind == "count" and len(data) >= 12:
            field = 4 + 2 * (at % 4)
            data[field:field + 2] = blob[:2].rjust(2, b"\x00")
    return bytes(data)


def hostile(target: Target) -> st.SearchStrategy[bytes]:
    return st.builds(make_packet, st.sampled_from(sorted(CATEGORIES)), st.randoms(use_true_random=False),
                     st.just(target))


PACKETS = st.one_of(
    st.binary(max_size=300),
    st.binary(min_size=12, max_size=300).map(lambda b: b[:2] + bytes([b[2] & 0x7F]) + b[3:]),
    queries(),
    st.builds(edit, queries(), EDITS).map(lambda b: b[:2] + bytes([b[2] & 0x7F]) + b[3:] if len(b) > 2 else b),
)

# hand-made regressions: loops, a chain, a 64-octet label, a 256-octet name, 200 labels, a forward pointer
POINTER_LOOP = header(1) + b"\x01a\xc0\x0c" + struct.pack("!HH", 33, 1)
SELF_POINTER = header(2) + b"\xc0\x0c" + struct.pack("!HH", 33, 1)
LONG_LABEL = header(3, ar=1) + question(b"\x40" + b"a" * 64 + b"\x05tools\x00") + opt_record()
LONG_NAME = header(4) + question((b"\x3f" + b"d" * 63) * 3 + b"\x3e" + b"e" * 62 + b"\x00")
MANY_LABELS = header(5) + question(b"\x01x" * 200 + b"\x00")
FORWARD = header(6) + b"\x01x\xc0\x20" + struct.pack("!HH", 33, 1) + b"\x00" * 20
OPT_ONLY_SIZE_0 = header(7, ar=1) + question(encode_name("weather.tools.")) + opt_record(payload=0)
NOT_UTF8 = header(8) + question(b"\x04\xdfany\x07weather\x05tools\x00")  # legal DNS; dnslib cannot read it back


# -- properties --

@examples(400)
@given(PACKETS)
@example(POINTER_LOOP).via("a pointer loop")
@example(SELF_POINTER).via("a pointer to itself")
@example(FORWARD).via("a forward pointer")
@example(MANY_LABELS).via("200 labels")
def test_parse_request_raises_only_malformed_request(packet):
    try:
        request = parse_request(packet)
    except MalformedRequest as exc:
        assert exc.header is None or len(packet) >= 12
        return
    assert len(packet) >= 12 and len(request.record.questions) <= 1


def _handle_and_check(servers, errors, which: int, packet: bytes, udp: bool) -> None:
    server, _ = servers[which]
    before = len(errors.records)
    wire = server.handle(packet, udp)
    assert reply_problem(packet, wire, udp) is None
    assert len(errors.records) == before, [r.getMessage() for r in errors.records[before:]]


@examples(400)
@given(which=st.integers(0, 1), packet=PACKETS, udp=st.booleans())
@example(which=0, packet=POINTER_LOOP, udp=True).via("a pointer loop")
@example(which=0, packet=LONG_LABEL, udp=True).via("a 64-octet label")
@example(which=1, packet=LONG_NAME, udp=False).via("a 256-octet name")
@example(which=0, packet=OPT_ONLY_SIZE_0, udp=True).via("payload size 0")
@example(which=0, packet=NOT_UTF8, udp=True).via("a label that is not UTF-8")
def test_handle_answers_every_readable_query_well(servers, errors, which, packet, udp):
    _handle_and_check(servers, errors, which, packet, udp)


@examples(400)
@given(which=st.integers(0, 1), data=st.data(), udp=st.booleans())
def test_handle_answers_the_hostile_categories_well(servers, errors, which, data, udp):
    packet = data.draw(hostile(servers[which][1]), label="packet")
    _handle_and_check(servers, errors, which, packet, udp)


@examples(100)
@given(which=st.integers(0, 1), data=st.data())
def test_hostile_packets_changed_again_are_answered_well(servers, errors, which, data):
    packet = data.draw(st.builds(edit, hostile(servers[which][1]), EDITS), label="packet")
    _handle_and_check(servers, errors, which, packet, True)


def test_the_categories_reach_every_outcome(servers):
    """The generators are worth running: between them they make replies of every kind and silence."""
    rng = random.Random(5)
    server, target = servers[0]
    rcodes, silent = set(), 0
    for category in CATEGORIES:
        for _ in range(200):
            wire = server.handle(make_packet(category, rng, target), True)
            if wire is None:
                silent += 1
            else:
                rcodes.add(wire[3] & 0x0F)
    assert {RCODE.NOERROR, RCODE.FORMERR, RCODE.NXDOMAIN, RCODE.REFUSED} <= rcodes and silent


def test_the_reply_oracle_catches_bad_replies(servers):
    """reply_problem, which the properties above and scripts/fuzz/fuzz_server.py trust, does see problems."""
    server, _ = servers[0]
    query = header(0x99, ar=1) + question(encode_name("_any._tcp._weather.tools.")) + opt_record(payload=512)
    good = server.handle(query, True)
    assert reply_problem(query, good, True) is None
    assert reply_problem(query, None, True) == "no reply"
    assert "QR clear" in reply_problem(query, b"\x00\x98" + good[2:], True)
    assert "QR clear" in reply_problem(query, good[:2] + bytes([good[2] & 0x7F]) + good[3:], True)
    assert "does not parse" in reply_problem(query, good[:-3], True)
    assert "must be dropped" in reply_problem(b"\x00\x99\x80" + query[3:], good, True)
    root, _ = servers[1]
    small = header(0x98, ar=1) + question(encode_name("_any._tcp._tools.")) + opt_record(payload=512)
    big = root.handle(small[:-8] + struct.pack("!H", 4096) + small[-6:], True)  # every child: over 512 bytes
    assert len(big) > 512 and "over 512" in reply_problem(small, big, True)
    assert "no bare FORMERR" in reply_problem(query + b"junk", good, True)
