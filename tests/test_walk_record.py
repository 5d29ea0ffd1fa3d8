"""Serving the published walk (``_walk.<origin>`` TXT, docs/protocol.md section 6b) from real servers on loopback.

The demo tree's root is given a ``walk:`` and served; dnspython asks over UDP and TCP, ``dig`` asks as
any DNS client would; a signed root answers it signed and denies other types (and, without a walk,
the name) with compact denials that validate; an edit of the walk is served live; the fast path
leaves the query to the full one.
"""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import dns.dnssec
import dns.edns
import dns.flags
import dns.message
import dns.name
import dns.query
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import pytest

from tooldns.dnssec.manage import keygen_tree
from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent
from tooldns.protocol.plan import WalkPlan, decode_plan
from tooldns.serving.index import ZoneIndex
from tooldns.serving.resolver import StaticSource, ZoneResolver
from tooldns.serving.server import DNSServer
from tooldns.zone.zonefile import load_zone, write_zone, zone_header

from conftest import REPLY_TIMEOUT, WAIT_TIMEOUT, ZONES, copy_tree, dig_path, fresh_subnet, start_tree, wait_until

WALK = WalkPlan(k=(6,), leaf_k=6, best_leaf_k=10, beam=6, model="multilingual-e5-small")
STRINGS = (b"tooldns-walk=1", b"k=6", b"leaf-k=6", b"best-leaf-k=10", b"beam=6", b"model=multilingual-e5-small")


def publish_walk(zdir: Path, walk: WalkPlan | None, origin: str = "tools.") -> None:
    """Write *walk* into the zone file of *origin* in *zdir* (None: take it out), its header kept."""
    path = next(p for p in zdir.glob("*.yaml") if load_zone(p).origin == origin)
    text = path.read_text(encoding="utf-8")
    zone = load_zone(path)
    soa = replace(zone.soa, serial=zone.soa.serial + 1)  # an edit: a new serial, as the file asks
    write_zone(replace(zone, walk=walk, soa=soa), path, header=zone_header(text))


def walk_tree(tmp_path: Path, walk: WalkPlan | None = WALK, sign: bool = False) -> Path:
    """A copy of the demo tree on its own addresses, its root publishing *walk*."""
    zdir = copy_tree(ZONES, tmp_path / "zones", fresh_subnet())
    if sign:
        keygen_tree(zdir, zones=["tools."])
    if walk is not None:
        publish_walk(zdir, walk)
    return zdir


def ask(tree, name: str, rdtype: str, tcp: bool = False, do: bool = False, **kwargs) -> dns.message.Message:
    address, port = tree.root()
    query = dns.message.make_query(name, rdtype, flags=0, use_edns=0, want_dnssec=do, **kwargs)
    send = dns.query.tcp if tcp else dns.query.udp
    return send(query, address, port=port, timeout=REPLY_TIMEOUT)


def _txt(msg: dns.message.Message):
    return [r for r in msg.answer if r.rdtype == dns.rdatatype.TXT]


@pytest.fixture
def served(tmp_path, integration):
    tree = start_tree(walk_tree(tmp_path))
    yield tree
    tree.stop()


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
def test_the_root_answers_its_walk_authoritatively_with_the_zones_ttl(served, tcp):
    reply = ask(served, "_walk.tools.", "TXT", tcp=tcp)
    assert reply.rcode() == dns.rcode.NOERROR and reply.flags & dns.flags.AA and not reply.flags & dns.flags.RA
    (rrset,) = _txt(reply)
    assert rrset.name == dns.name.from_text("_walk.tools.") and rrset.ttl == 3600
    assert [rd.strings for rd in rrset] == [STRINGS]
    assert decode_plan(rrset[0].strings) == WALK
    # ANY has it too; names compare case-insensitively (0x20)
    assert [rd.strings for r in _txt(ask(served, "_walk.tools.", "ANY", tcp=tcp)) for rd in r] == [STRINGS]
    assert [rd.strings for r in _txt(ask(served, "_WaLk.TooLs.", "TXT", tcp=tcp)) for rd in r] == [STRINGS]


def test_other_types_at_the_name_are_nodata_and_an_intent_changes_nothing(served):
    for rdtype in ("A", "SRV", "NS"):
        reply = ask(served, "_walk.tools.", rdtype)
        assert reply.rcode() == dns.rcode.NOERROR and not reply.answer and reply.flags & dns.flags.AA, rdtype
        assert [r.rdtype for r in reply.authority] == [dns.rdatatype.SOA], rdtype
    # an intent option is no reason to answer anything else: the walk does not depend on it
    with_intent = ask(served, "_walk.tools.", "TXT",
                      options=[dns.edns.GenericOption(INTENT_OPTION_CODE, encode_intent("weather", 3))])
    assert [rd.strings for r in _txt(with_intent) for rd in r] == [STRINGS] and _txt(with_intent)[0].ttl == 3600


@pytest.mark.integration
def test_a_tree_without_a_walk_has_no_such_name(tmp_path):
    tree = start_tree(walk_tree(tmp_path, walk=None))
    try:
        for rdtype in ("TXT", "ANY"):
            reply = ask(tree, "_walk.tools.", rdtype)
            assert reply.rcode() == dns.rcode.NXDOMAIN and reply.flags & dns.flags.AA, rdtype
            assert [r.rdtype for r in reply.authority] == [dns.rdatatype.SOA]
            assert reply.authority[0].ttl == 300  # the negative TTL: min(ttl, SOA minimum)
    finally:
        tree.stop()


@pytest.mark.integration
def test_an_edit_of_the_walk_is_served_live(tmp_path):
    zdir = walk_tree(tmp_path)
    tree = start_tree(zdir)
    try:
        publish_walk(zdir, WalkPlan(k=(5, 3, 2)))
        assert wait_until(lambda: [rd.strings for r in _txt(ask(tree, "_walk.tools.", "TXT")) for rd in r]
                          == [(b"tooldns-walk=1", b"k=5,3,2")])
        publish_walk(zdir, None)
        assert wait_until(lambda: ask(tree, "_walk.tools.", "TXT").rcode() == dns.rcode.NXDOMAIN)
    finally:
        tree.stop()


def test_the_fast_path_leaves_the_walk_to_the_full_path():
    zone = replace(load_zone(ZONES / "tools.yaml"), walk=WALK)
    resolver = ZoneResolver(StaticSource(ZoneIndex(zone)))
    for options in ([], [dns.edns.GenericOption(INTENT_OPTION_CODE, encode_intent("weather", 3))]):
        wire = dns.message.make_query("_walk.tools.", "TXT", flags=0, use_edns=0, options=options).to_wire()
        assert resolver.fast_answer(wire, True) is None
        reply = dns.message.from_wire(DNSServer(resolver, cache_size=0).handle(wire, True))
        assert [rd.strings for r in _txt(reply) for rd in r] == [STRINGS]


@pytest.mark.skipif(dig_path() is None, reason="dig is not installed (Debian package bind9-dnsutils)")
@pytest.mark.parametrize("transport", ["+notcp", "+tcp"])
def test_dig_reads_the_walk(served, transport):
    address, port = served.root()
    out = subprocess.run([dig_path(), f"@{address}", "-p", str(port), "+norec", f"+time={REPLY_TIMEOUT:.0f}",
                          "+tries=1", transport, "_walk.tools.", "TXT"],
                         capture_output=True, text=True, timeout=REPLY_TIMEOUT + WAIT_TIMEOUT)
    assert out.returncode == 0, out.stderr
    assert "status: NOERROR" in out.stdout and "flags: qr aa;" in out.stdout
    assert ('_walk.tools.\t\t3600\tIN\tTXT\t"tooldns-walk=1" "k=6" "leaf-k=6" "best-leaf-k=10" "beam=6" '
            '"model=multilingual-e5-small"') in out.stdout


def _root_keys(tree) -> dict:
    keys = ask(tree, "tools.", "DNSKEY", tcp=True, do=True)
    dnskey = keys.find_rrset(keys.answer, dns.name.from_text("tools."), dns.rdataclass.IN, dns.rdatatype.DNSKEY)
    return {dnskey.name: dnskey}


def _validated(msg: dns.message.Message, section, keys: dict, rdtype: int):
    """The RRset of *rdtype* in *section* of *msg*, after dnspython validated its RRSIG with *keys*."""
    rrset = next(r for r in section if r.rdtype == rdtype)
    sig = msg.find_rrset(section, rrset.name, rrset.rdclass, dns.rdatatype.RRSIG, rdtype)
    dns.dnssec.validate(rrset, sig, keys)
    return rrset


def _bits(nsec) -> set[str]:
    return set(nsec[0].to_text().split()[1:])


@pytest.mark.integration
@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
def test_a_signed_root_signs_its_walk_and_proves_what_is_not_there(tmp_path, tcp):
    tree = start_tree(walk_tree(tmp_path, sign=True))
    try:
        keys = _root_keys(tree)
        reply = ask(tree, "_walk.tools.", "TXT", tcp=tcp, do=True)
        txt = _validated(reply, reply.answer, keys, dns.rdatatype.TXT)
        assert [rd.strings for rd in txt] == [STRINGS] and reply.flags & dns.flags.AA
        # another type: NODATA, an NSEC at the name whose bitmap has TXT (and not A), signed
        nodata = ask(tree, "_walk.tools.", "A", tcp=tcp, do=True)
        nsec = _validated(nodata, nodata.authority, keys, dns.rdatatype.NSEC)
        assert nsec.name == dns.name.from_text("_walk.tools.") and _bits(nsec) == {"TXT", "RRSIG", "NSEC"}
        _validated(nodata, nodata.authority, keys, dns.rdatatype.SOA)
        # without DO: the record alone
        plain = ask(tree, "_walk.tools.", "TXT", tcp=tcp)
        assert not [r for r in plain.answer if r.rdtype == dns.rdatatype.RRSIG] and _txt(plain)
    finally:
        tree.stop()


@pytest.mark.integration
def test_a_signed_root_without_a_walk_denies_the_name(tmp_path):
    tree = start_tree(walk_tree(tmp_path, walk=None, sign=True))
    try:
        keys = _root_keys(tree)
        reply = ask(tree, "_walk.tools.", "TXT", do=True)
        assert reply.rcode() == dns.rcode.NOERROR and not reply.answer  # compact denial (RFC 9824)
        nsec = _validated(reply, reply.authority, keys, dns.rdatatype.NSEC)
        assert nsec.name == dns.name.from_text("_walk.tools.") and "NXNAME" in _bits(nsec) and "TXT" not in _bits(nsec)
    finally:
        tree.stop()
