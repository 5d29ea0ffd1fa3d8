"""The fast path answers intent searches with the bytes dnslib's full path packs, and declines the rest.

The reference is the full path: :func:`tooldns.serving.wire.parse_request`, ``ZoneResolver.resolve``
(lookup and reply on dnslib records) and :func:`tooldns.serving.wire.pack_reply`. For every zone of
the shipped tree, of two small built trees (BM25 with corpus statistics; hybrid with hash vectors,
asked with and without the intent's vector) and of a zone made to test name compression (two name
servers per child, IPv6 glue, a child served by a host inside another child, a name server of
the zone outside it, the zone's own tools competing as "self"), many queries (services, transports, names in mixed case, intents, K, query
types, EDNS sizes that force truncation, UDP and TCP) are answered both ways: each fast reply must
read, with dnslib and with dnspython, as the same records, flags and options as the reference, and
be the same bytes; and the fast path must answer exactly the queries whose reference is a ranked
result (it carries the meta option). A loopback server answers the same over real sockets.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import struct
import threading
from contextlib import contextmanager
from pathlib import Path

import dns.edns
import dns.flags
import dns.message
import dns.rdatatype
import pytest
from dnslib import DNSRecord

from tooldns.building.build import build
from tooldns.building.trees import AutoTreeBuilder
from tooldns.embedding.registry import make_embedder
from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent
from tooldns.protocol.meta import META_OPTION_CODE, decode_meta
from tooldns.protocol.brief import BRIEF_OPTION_CODE
from tooldns.protocol.fit import FIT_OPTION_CODE
from tooldns.protocol.vector import VECTOR_OPTION_CODE, encode_vector
from tooldns.serving.index import ZoneIndex
from tooldns.serving.resolver import StaticSource, ZoneResolver
from tooldns.serving.server import DNSServer, Served, _Handler
from tooldns.serving.tree import load_tree
from tooldns.serving.wire import pack_reply, parse_request
from tooldns.zone.zonefile import load_zone

from conftest import ZONES, free_port
from test_build import synthetic_catalog

INTENTS = ["historical weather Hong Kong", "send a slack message", "typhoon warning", "bitcoin price",
           "find papers about transformers", "天气预报", "song lyrics for an artist album", "stock dividend and quote",
           "zzzz qqqq nothing matches this", "create and edit documents: pdf, docx, xlsx, pptx, notes and files",
           "maps weather and stock rain forecast " * 12]
SERVICES = ["any", "mcp", "http", "a2a", "skill"]
KS = [1, 2, 3, 5, 10, 32, 255]
QTYPES = ["SRV", "SRV", "SRV", "ANY", "TXT", "A"]
PAYLOADS = [512, 600, 1232, 4096]
HASH = make_embedder("hash")

ODD_ZONE = """\
origin: odd.tools.
ttl: 600
soa: {contact: hostmaster@odd.tools, serial: 1, minimum: 60}
nameservers:
- {name: ns1.odd.tools., address: 127.0.0.9}
- {name: ns2.odd.tools., address: '::9'}
- {name: ns.example.net., address: 192.0.2.1}
summary: {description: odd things}
children:
- label: alpha
  kind: functional
  summary: {description: alpha weather forecast rain}
  nameservers:
  - {name: ns1.alpha.odd.tools., address: 127.0.0.10}
  - {name: ns2.alpha.odd.tools., address: '::a'}
- label: beta
  kind: organisation
  leaf: true
  summary: {description: beta stock prices and quotes}
  nameservers:
  - {name: ns.beta.odd.tools., address: 127.0.0.11}
- label: gamma
  kind: functional
  summary: {description: gamma maps and routes weather}
  nameservers:
  - {name: ns.gamma.odd.tools., address: 127.0.0.12}
  - {name: ns.beta.odd.tools., address: 127.0.0.11}
tools:
- {label: one, name: One, service: http, target: api.example.com., port: 443, description: weather and rain right here}
- {label: two, name: Two, service: mcp, target: api.example.com., port: 8443, weight: 7,
   description: stock prices from the odd zone itself}
- {label: three, name: Three, service: skill, transport: udp, target: three.odd.tools., port: 53,
   description: maps weather and stock}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Two small built trees of 40 tools: BM25 with corpus statistics, and hybrid with hash vectors."""
    tmp = tmp_path_factory.mktemp("fast")
    catalog = tmp / "services.json"
    catalog.write_text(json.dumps(synthetic_catalog(10)))
    build([catalog], tmp / "bm25", builder=AutoTreeBuilder(max_children=3, max_leaf=6))
    build([catalog], tmp / "hybrid", embed="hash", tree_options=dict(max_children=3, max_leaf=6))
    (tmp / "odd").mkdir()
    (tmp / "odd" / "odd.tools.yaml").write_text(ODD_ZONE)
    return tmp


def _indexes(zonedir: Path) -> list[ZoneIndex]:
    return [store.index for store in load_tree(zonedir)]


def _query(name: str, rdtype: str, intent: str | None, k: int, payload: int, rd: bool,
           vector: bytes | None = None, brief: bool = False, fit: bool = False, cd: bool = False) -> bytes:
    options = [dns.edns.GenericOption(BRIEF_OPTION_CODE, b"")] if brief else []
    if fit:
        options.append(dns.edns.GenericOption(FIT_OPTION_CODE, b""))
    if intent is not None:
        options.append(dns.edns.GenericOption(INTENT_OPTION_CODE, encode_intent(intent, k)))
    if vector is not None:
        options.append(dns.edns.GenericOption(VECTOR_OPTION_CODE, vector))
    msg = dns.message.make_query(name, rdtype, use_edns=0, payload=payload, options=options,
                                 flags=(dns.flags.RD if rd else 0) | (dns.flags.CD if cd else 0))
    msg.id = 0x4242
    return msg.to_wire(max_size=65535)


def _cased(name: str, rng: random.Random, how: int) -> str:
    if how == 0:
        return name
    if how == 1:
        return name.upper()
    return "".join(c.upper() if rng.random() < 0.5 else c for c in name)


def _names(ix: ZoneIndex) -> list[str]:
    """Cursor and expanded names of the zone for every service, and two transports."""
    first, _, rest = ix.origin.partition(".")
    out = []
    for service in SERVICES:
        out += [f"_{service}._tcp._{first}.{rest}", f"_{service}._tcp.{ix.origin}"]
    return out + [f"_skill._udp._{first}.{rest}", f"_skill._udp.{ix.origin}", f"_any._udp.{ix.origin}"]


def _queries(ix: ZoneIndex, n: int, seed: int, vectors: bool) -> list[tuple[bytes, bool]]:
    """*n* (query, over UDP) pairs for zone *ix*, drawn from every dimension; each name at least once."""
    rng = random.Random(seed)
    names = _names(ix)
    out = []
    for i in range(n):
        name = _cased(names[i] if i < len(names) else rng.choice(names), rng, rng.choice([0, 0, 1, 2]))
        intent = None if rng.random() < 0.08 else rng.choice(INTENTS)
        vector = None
        if vectors and intent is not None and rng.random() < 0.6:
            vector = encode_vector(HASH.model, HASH.embed_one(intent))
        out.append((_query(name, rng.choice(QTYPES), intent, rng.choice(KS), rng.choice(PAYLOADS),
                           rng.random() < 0.3, vector, brief=rng.random() < 0.4, fit=rng.random() < 0.4,
                           cd=rng.random() < 0.2),
                    rng.random() < 0.7))
    return out


def _reference(resolver: ZoneResolver, data: bytes, udp: bool) -> bytes:
    request = parse_request(data)
    handler = _Handler("udp" if udp else "tcp", ("127.0.0.1", 53))  # the fit option trims over UDP only
    return pack_reply(resolver.resolve(request.record, handler), request.udp_size if udp else 65535, tcp=not udp)


def _dnspython(wire: bytes) -> tuple:
    msg = dns.message.from_wire(wire)
    sections = tuple(tuple(rrset.to_text() for rrset in section) for section in (msg.question, msg.answer,
                                                                                 msg.authority, msg.additional))
    options = tuple((int(o.otype), o.to_wire()) for o in msg.options)
    return msg.id, msg.flags, msg.rcode(), msg.edns, msg.payload, options, sections


def _dnslib(wire: bytes) -> tuple:
    record = DNSRecord.parse(wire)
    sections = []
    for section in (record.rr, record.auth, record.ar):
        rows = []
        for rr in section:
            rdata = [(o.code, o.data) for o in rr.rdata] if rr.rtype == 41 else rr.rdata.toZone()
            rows.append((str(rr.rname), rr.rtype, rr.rclass, rr.ttl, rdata))
        sections.append(rows)
    h = record.header
    return h.id, h.bitmap, [(str(q.qname), q.qtype, q.qclass) for q in record.questions], sections


def _meta(wire: bytes) -> bool:
    return any(int(o.otype) == META_OPTION_CODE for o in dns.message.from_wire(wire).options)


def _check_zone(ix: ZoneIndex, n: int, seed: int, vectors: bool = False) -> list[bytes]:
    """Every query of :func:`_queries` both ways; returns the replies the fast path gave."""
    resolver = ZoneResolver(StaticSource(ix))
    answered = []
    for data, udp in _queries(ix, n, seed, vectors):
        reference = _reference(resolver, data, udp)
        fast = resolver.fast_answer(data, udp)
        ranked = _meta(_reference(resolver, data, False))  # a ranked result, before any truncation
        assert (fast is not None) == ranked, (ix.origin, DNSRecord.parse(data).q, reference.hex())
        if fast is None:
            continue
        answered.append(fast)
        assert _dnspython(fast) == _dnspython(reference)
        assert _dnslib(fast) == _dnslib(reference)
        assert fast == reference
    return answered


def _trimmed(wire: bytes) -> bool:
    return any(int(o.otype) == META_OPTION_CODE and decode_meta(o.to_wire()).trimmed
               for o in dns.message.from_wire(wire).options)


@pytest.mark.slow
def test_shipped_tree_fast_replies_are_the_reference_bytes():
    answered = [r for seed, ix in enumerate(_indexes(ZONES)) for r in _check_zone(ix, 160, seed)]
    assert len(answered) > 1000
    assert any(b"kind=self" in r for r in answered) and any(r[2] & 0x02 for r in answered)  # TC
    assert any(_trimmed(r) for r in answered)  # the fit option: the best tools that fit, on both paths
    assert any(r[3] & 0x10 for r in answered)  # CD copied from the query, on both paths (RFC 4035 3.1.6)


@pytest.mark.slow
def test_built_trees_fast_replies_are_the_reference_bytes(built):
    answered = [r for seed, ix in enumerate(_indexes(built / "bm25")) for r in _check_zone(ix, 120, seed)]
    hybrid = _indexes(built / "hybrid")
    assert any(ix.model for ix in hybrid)
    with_parts = [r for seed, ix in enumerate(hybrid) for r in _check_zone(ix, 120, seed, vectors=True)]
    assert len(answered) > 250 and len(with_parts) > 250
    assert any(b"cos=" in r for r in with_parts) and any(b"score=" in r and b"bm25=" not in r for r in with_parts)


@pytest.mark.slow
def test_compression_corner_cases_are_the_reference_bytes(built):
    (ix,) = _indexes(built / "odd")
    answered = _check_zone(ix, 1500, 7)
    assert len(answered) > 500 and any(b"kind=self" in r for r in answered)


def test_truncation_and_large_tcp_answers_match():
    """A leaf answer too large for the client's size is truncated (TC, question, bare OPT), as pack_reply does."""
    ix = next(ix for ix in _indexes(ZONES) if ix.origin == "docs.productivity.tools.")
    resolver = ZoneResolver(StaticSource(ix))
    for payload in (512, 600, 1232):
        data = _query("_any._tcp._docs.productivity.tools.", "SRV", INTENTS[9], 32, payload, False)
        fast = resolver.fast_answer(data, True)
        assert fast == _reference(resolver, data, True)
        msg = dns.message.from_wire(fast)
        assert msg.flags & dns.flags.TC and not msg.answer and not msg.options and len(fast) <= payload
        whole = resolver.fast_answer(data, False)
        assert whole == _reference(resolver, data, False) and len(whole) > 1232
        assert not dns.message.from_wire(whole).flags & dns.flags.TC


@pytest.mark.parametrize("data", [
    _query("_any._tcp._tools.", "AXFR", "weather", 3, 1232, False),  # REFUSED
    _query("_any._tcp._tools.", "SRV", None, 3, 1232, False),  # no intent
    _query("_ftp._tcp._tools.", "SRV", "weather", 3, 1232, False),  # unknown service
    _query("_any._tcp._nope.tools.", "SRV", "weather", 3, 1232, False),  # no such child
    _query("tools.", "SOA", "weather", 3, 1232, False),
    bytes.fromhex("424200000001000000000001") + b"\x04_any\x04_tcp\x06_tools\x00\x00\x21\x00\x03"  # class CH
    + b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x00",
    _query("_any._tcp._tools.", "SRV", None, 3, 1232, False,) [:-11] + b"\x00\x00\x29\x04\xd0\x00\x01\x00\x00\x00\x00",
])
def test_the_fast_path_declines_what_it_does_not_answer(data):
    ix = next(ix for ix in _indexes(ZONES) if ix.origin == "tools.")
    assert ZoneResolver(StaticSource(ix)).fast_answer(data, True) is None


class _FullPathOnly(Served):
    """The same resolver without its fast path: what DNSServer.handle answered before it had one."""

    def __init__(self, resolver: ZoneResolver) -> None:
        self.resolver = resolver

    def resolve(self, request, handler):
        return self.resolver.resolve(request, handler)

    def fast_answer(self, data: bytes, udp: bool) -> None:
        return None

    @property
    def serving(self):
        return self.resolver.serving


def _odd_messages() -> list[bytes]:
    """Queries near the fast path's edges: malformed, unusual flags, compressed names, options."""
    good = _query("_any._tcp._tools.", "SRV", "weather", 3, 1232, True)
    intent = struct.pack("!HH", INTENT_OPTION_CODE, len(encode_intent("weather", 3))) + encode_intent("weather", 3)
    bare = good[:good.index(b"\x00\x00\x29")]
    head = bytearray(good[:12])
    return [
        good, good[:-1], good + b"\x00", good[:11],
        bytes([0x42, 0x42, 0x80]) + good[3:],  # a response
        bytes([0x42, 0x42, 0x20]) + good[3:],  # opcode NOTIFY
        bytes([0x42, 0x42, 0x02]) + good[3:],  # TC set in a query: answered as any query
        bytes(head[:4]) + b"\x00\x02" + good[6:],  # two questions announced
        bytes(head[:10]) + b"\x00\x02" + good[12:] + good[good.index(b"\x00\x00\x29"):],  # two OPT records
        bare + b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00" + bytes([len(intent) * 2]) + intent + intent,
        bare + b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00" + bytes([len(intent) + 4]) + intent + b"\x00\x0a\x00\x00",
        bare + b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00" + bytes([len(intent) + 3]) + intent + b"\x00\x0a\x00",
        bare + b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x07\xff\x15\x00\x03\x00\x00\x05",  # bad intent
        # the question name as a pointer into the header: read by the full path only
        bytes(head) + b"\xc0\x00\x00\x21\x00\x01" + good[good.index(b"\x00\x00\x29"):],
        _query("_any._tcp._tools.", "SRV", "weather", 3, 1232, False, vector=b"\x00"),  # bad vector
        bare + b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00" + bytes([len(intent) + 5]) + intent
        + b"\xff\x18\x00\x01\x00",  # a brief option with data
        bytes(head) + b"\x04_any\x04_tcp\x40_" + b"x" * 63 + b"\x05tools\x00" + good[len(bare) - 4:],  # 64 octets
    ]


def test_server_handle_answers_as_before_the_fast_path():
    ix = next(ix for ix in _indexes(ZONES) if ix.origin == "tools.")
    fast_resolver, full_resolver = ZoneResolver(StaticSource(ix)), ZoneResolver(StaticSource(ix))
    with_fast = DNSServer(fast_resolver, cache_size=0)
    without = DNSServer(_FullPathOnly(full_resolver), cache_size=0)
    messages = _odd_messages() + [q for q, _ in _queries(ix, 200, 3, False)]
    for data in messages:
        for udp in (True, False):
            assert with_fast.handle(data, udp) == without.handle(data, udp), data.hex()
    assert fast_resolver.stats == full_resolver.stats and fast_resolver.stats["formerr"] >= 5
    assert with_fast.stats == without.stats and with_fast.stats["dropped"] >= 2


def test_a_query_as_a_bytearray_is_answered_as_its_bytes(caplog):
    """dnslib's ``DNSRecord.pack()`` gives a bytearray: the packet cache and the fast path take it as
    the bytes it holds (no traceback, no full path standing in)."""
    ix = next(ix for ix in _indexes(ZONES) if ix.origin == "tools.")
    for cache_size in (0, 16):
        server = DNSServer(ZoneResolver(StaticSource(ix)), cache_size=cache_size)
        for data, _ in _queries(ix, 20, 7, False):
            for udp in (True, False):
                assert server.handle(bytearray(data), udp) == server.handle(data, udp)
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]


def test_cached_fast_replies_keep_their_id():
    ix = next(ix for ix in _indexes(ZONES) if ix.origin == "tools.")
    server = DNSServer(ZoneResolver(StaticSource(ix)))
    data = _query("_any._tcp._tools.", "SRV", "weather", 3, 1232, False)
    first = server.handle(data, True)
    again = server.handle(b"\x01\x02" + data[2:], True)
    assert server.stats["cache_hits"] == 1 and again == b"\x01\x02" + first[2:]


@contextmanager
def _serving(resolver: ZoneResolver):
    loop = asyncio.new_event_loop()
    server = DNSServer(resolver, "127.0.0.1", free_port("127.0.0.1"), rate_limit=0)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
    try:
        yield server.port
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def _ask(port: int, data: bytes, udp: bool) -> bytes:
    if udp:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(10)
            sock.sendto(data, ("127.0.0.1", port))
            return sock.recv(65535)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(struct.pack("!H", len(data)) + data)
        length = struct.unpack("!H", sock.recv(2, socket.MSG_WAITALL))[0]
        return sock.recv(length, socket.MSG_WAITALL)


@pytest.mark.integration
def test_a_loopback_server_sends_the_reference_bytes_over_udp_and_tcp(built):
    (ix,) = _indexes(built / "odd")
    reference = ZoneResolver(StaticSource(ix))
    with _serving(ZoneResolver(StaticSource(ix))) as port:
        for data, udp in _queries(ix, 60, 11, False):
            assert _ask(port, data, udp) == _reference(reference, data, udp)


def test_answers_beyond_16_kilobytes_match(tmp_path):
    """A TCP answer of 150 tools (max_k 255) runs past the last offset a compression pointer can reach."""
    tools = "\n".join(f"- {{label: tool{i}, name: Tool {i}, service: http, target: host{i % 7}.example.com., port: 443,"
                      f" description: common words for every tool number {i} {'and more text ' * 8}}}"
                      for i in range(150))
    zone = ODD_ZONE.split("children:")[0].replace("odd.tools", "big.tools") + "settings: {max_k: 255}\ntools:\n" + tools
    (tmp_path / "big.tools.yaml").write_text(zone)
    ix = ZoneIndex(load_zone(tmp_path / "big.tools.yaml"))
    resolver = ZoneResolver(StaticSource(ix))
    for name in ("_http._tcp._big.tools.", "_HTTP._tcp.big.tools."):
        data = _query(name, "SRV", "common words", 255, 1232, False)
        fast = resolver.fast_answer(data, False)
        assert len(fast) > 0x4000 and fast == _reference(resolver, data, False)
        assert len(dns.message.from_wire(fast).additional) == 150 and len(DNSRecord.parse(fast).ar) == 151


def test_a_reloaded_zone_is_answered_from_its_own_pieces(built):
    """The pieces are the index's: a reload (a new index) is packed anew, and the old index is not kept."""
    import gc
    import weakref

    (odd,) = _indexes(built / "odd")
    shipped = next(ix for ix in _indexes(ZONES) if ix.origin == "tools.")
    source = StaticSource(odd)
    resolver = ZoneResolver(source)
    data = _query("_any._tcp._odd.tools.", "SRV", "weather", 3, 1232, False)
    assert resolver.fast_answer(data, True) == _reference(resolver, data, True)
    gone = weakref.ref(odd)
    source.index = shipped
    del odd
    assert resolver.fast_answer(data, True) is None  # not a name of tools.
    root = _query("_any._tcp._tools.", "SRV", "weather", 3, 1232, False)
    assert resolver.fast_answer(root, True) == _reference(resolver, root, True)
    gc.collect()
    assert gone() is None


def test_which_candidates_the_compiled_writer_places_anywhere(built):
    """A child can be written anywhere in a referral from pieces packed once (compiled) when its names
    share no suffix with another candidate's but the zone's (and lie in the zone): every child of the
    shipped root; in the odd zone, alpha only (beta and gamma share ns.beta.odd.tools., "self" has a
    name server outside the zone)."""
    from tooldns.serving.fast.pack import PackedZone

    root = next(ix for ix in _indexes(ZONES) if ix.origin == "tools.")
    assert all(c.alone for c in PackedZone(root).children.values())
    (odd,) = _indexes(built / "odd")
    packed = PackedZone(odd)
    alone = {c.owner[0][0] for c in packed.children.values() if c.alone}
    assert alone == {b"\x05alpha\x03odd\x05tools\x00"}


def test_a_block_moves_its_pointers_by_its_place_and_the_zone_names():
    """A candidate's block, its compression pointers to offsets in the block and to the zone's name
    written relative (fast.pack._moves), is the block as packed in place once the fields it lists
    move by the block's offset and by the zone name's: what the compiled writer adds."""
    from array import array

    from tooldns.serving.fast.pack import _U16, _moves

    block = bytes(range(1, 41))
    pointers = [(0, 6), (10, -1), (20, 0), (38, 30)]
    patched, relative, to_zone = _moves(block, pointers)
    for at, zone in ((0, 0), (45, 12), (700, 31), (0x3FFF - 40, 0x3FFF)):
        moved = bytearray(patched)
        for fields, by in ((relative, at), (to_zone, zone)):
            for where in array("H", fields):
                _U16.pack_into(moved, where, _U16.unpack_from(moved, where)[0] + by)
        expected = bytearray(block)
        for where, target in pointers:
            _U16.pack_into(expected, where, 0xC000 | (zone if target < 0 else at + target))
        assert moved == expected


def test_referrals_are_written_in_c_in_lower_case_and_record_by_record_otherwise(monkeypatch):
    """Compiled, a referral under a question in lower case is written whole in C; in mixed case, and
    always from source, record by record by the Python writer. Both are the reference bytes."""
    from tooldns.serving.fast import COMPILED
    from tooldns.serving.fast.pack import PackedZone

    ways = []
    real = PackedZone._packed_referral

    def spy(self, out, qname, *args):
        ways.append(qname.startswith(b"\x04_any"))
        return real(self, out, qname, *args)

    monkeypatch.setattr(PackedZone, "_packed_referral", spy)
    root = next(ix for ix in _indexes(ZONES) if ix.origin == "tools.")
    resolver = ZoneResolver(StaticSource(root))
    for n, intent in enumerate(INTENTS):
        for name in ("_any._tcp._tools.", "_ANY._tcp._Tools."):
            data = _query(name, "SRV", intent, 3 + n % 5, 1232, False)
            fast = resolver.fast_answer(data, True)
            assert fast is not None and fast == _reference(resolver, data, True)
    assert ways.count(False) == len(INTENTS)  # every mixed-case question, record by record
    assert ways.count(True) == (0 if COMPILED else len(INTENTS))
