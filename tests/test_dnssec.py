"""DNSSEC: keys, online signing, validation in the resolver, BIND's delv, and what an attacker cannot do.

Every test signs a copy of the shipped tree (``tooldns dnssec keygen``'s library function), serves it
on loopback and speaks real DNS: replies to DO queries parse and validate with dnspython; a query
without DO gets the bytes an unsigned zone sends; the resolver returns secure tools and drops what a
proxy alters in flight, what an expired signature or a wrong anchor covers, and tells insecure
delegations (no DS at the parent) from bogus ones (a DS that matches no key); a child signed while
served becomes secure; a key rollover (pre-publish, DS swapped, old key retired) validates at every
step; ``delv`` validates a signed answer with the root zone's key as its only anchor; a parent
refuses the summary of a signed child that a proxy alters or strips in flight, or that is signed
with a key its DS does not name; ``tooldns build --sign`` makes a tree that validates.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

import dns.dnssec
import dns.flags
import dns.message
import dns.name
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

from tooldns.dnssec.keys import generate, key_files, load_keys, write_key
from tooldns.dnssec.manage import keygen_tree, retire, roll, write_ds
from tooldns.dnssec.signer import Signing
from tooldns.exceptions import DNSSECError
from tooldns.serving.resolver import StaticSource, ZoneResolver
from tooldns.serving.server import DNSServer
from tooldns.serving.store import ZoneStore
from tooldns.serving.tree import TreeThread
from tooldns.zone.zonefile import header_of, load_zone, write_zone

from resolver_client import AsyncResolver, Resolver, ValidationFailed
from resolver_client.validate import read_anchor

from conftest import REPLY_TIMEOUT, ZONES, copy_tree, free_port, fresh_subnet, start_tree, wait_until

HKO = "hko.weather.tools."
INTENT = "typhoon warning"  # answered by hko.weather.tools.


def _signed_copy(tmp_path: Path, zones: list[str] | None = None) -> Path:
    zdir = copy_tree(ZONES, tmp_path / "zones", fresh_subnet())
    keygen_tree(zdir, zones=zones)
    return zdir


def _anchor(zdir: Path):
    return read_anchor("\n".join(k.dnskey_text() for k in load_keys(zdir / "keys", "tools.")))


def _resolve(tree, zdir: Path, **kwargs):
    kwargs.setdefault("trust_anchor", _anchor(zdir))
    kwargs.setdefault("timeout", REPLY_TIMEOUT)
    return Resolver(root=tree.root(), validate=True, cache=False, **kwargs).resolve(INTENT)


def _outcome(resolve) -> tuple[list, list[str], int]:
    """The tools, errors and bogus count of *resolve()*; a resolution that failed validation (no tool left:
    :class:`ValidationFailed`) as no tools, its message and at least one bogus."""
    try:
        res = resolve()
    except ValidationFailed as exc:
        return [], [str(exc)], 1
    return res.tools, res.errors, res.stats.bogus


def _ask(address: str, port: int, name: str, rdtype: str, do: bool = True) -> dns.message.Message:
    query = dns.message.make_query(name, rdtype, want_dnssec=do, flags=0)
    return dns.query.tcp(query, address, port=port, timeout=10)


def _validate_all(msg: dns.message.Message, keys: dict) -> int:
    """Validate every signed RRset of *msg* with *keys*; how many."""
    n = 0
    for section in (msg.answer, msg.authority):
        for rrset in section:
            if rrset.rdtype == dns.rdatatype.RRSIG:
                continue
            sig = msg.find_rrset(section, rrset.name, rrset.rdclass, dns.rdatatype.RRSIG, rrset.rdtype)
            dns.dnssec.validate(rrset, sig, keys)
            n += 1
    return n


def _zone_address(zdir: Path, origin: str) -> str:
    return next(s for s in [load_zone(p) for p in zdir.glob("*.yaml")] if s.origin == origin).nameservers[0].address


@pytest.mark.integration
def test_signed_replies_validate_with_dnspython(tmp_path):
    zdir = _signed_copy(tmp_path)
    tree = start_tree(zdir)
    try:
        port, root, hko = tree.tree.port, _zone_address(zdir, "tools."), _zone_address(zdir, HKO)
        keys = _ask(root, port, "tools.", "DNSKEY")
        dnskey = keys.find_rrset(keys.answer, dns.name.from_text("tools."), 1, dns.rdatatype.DNSKEY)
        assert _validate_all(keys, {dnskey.name: dnskey}) == 1 and keys.ednsflags & dns.flags.DO
        assert _validate_all(_ask(root, port, "tools.", "SOA"), {dnskey.name: dnskey}) == 1
        denied = _ask(root, port, "no-such-name.tools.", "A")  # compact denial: NSEC + SOA, both signed
        assert _validate_all(denied, {dnskey.name: dnskey}) == 2
        assert any(r.rdtype == dns.rdatatype.NSEC for r in denied.authority)
        # a leaf's tool, validated with the leaf's keys
        leaf = _ask(hko, port, HKO, "DNSKEY")
        leaf_keys = leaf.find_rrset(leaf.answer, dns.name.from_text(HKO), 1, dns.rdatatype.DNSKEY)
        srv = _ask(hko, port, f"hko-climate._http._tcp.{HKO}", "SRV")
        assert _validate_all(srv, {leaf_keys.name: leaf_keys}) == 1
        # without DO: no DNSSEC record at all
        plain = _ask(hko, port, f"hko-climate._http._tcp.{HKO}", "SRV", do=False)
        assert not any(r.rdtype == dns.rdatatype.RRSIG for r in plain.answer)
    finally:
        tree.stop()


def test_queries_without_do_get_the_bytes_of_an_unsigned_zone(tmp_path):
    zdir = _signed_copy(tmp_path)
    path = zdir / "weather.tools.yaml"
    signed = DNSServer(ZoneResolver(ZoneStore(path)), cache_size=0)
    plain = DNSServer(ZoneResolver(ZoneStore(path, signing=Signing(None))), cache_size=0)
    assert signed.resolver.source.index.signer is not None and plain.resolver.source.index.signer is None
    for name, rdtype in [("weather.tools.", "SOA"), ("_any._tcp._weather.tools.", "SRV"), ("nothing.weather.tools.", "A"),
                         ("_any._tcp._hko.weather.tools.", "SRV"), ("weather.tools.", "NS")]:
        wire = dns.message.make_query(name, rdtype, use_edns=0, flags=0).to_wire()
        assert signed.handle(wire, True) == plain.handle(wire, True), (name, rdtype)
        do = dns.message.make_query(name, rdtype, want_dnssec=True, flags=0).to_wire()
        assert b"\x00\x2e" in signed.handle(do, False)  # RRSIG's type code somewhere in the signed reply


def test_a_private_key_others_may_read_is_refused(tmp_path):
    zdir = _signed_copy(tmp_path, zones=["tools."])
    pem = next((zdir / "keys").glob("*.pem"))
    assert pem.stat().st_mode & 0o777 == 0o600
    os.chmod(pem, 0o644)
    with pytest.raises(DNSSECError, match="chmod 600"):
        ZoneStore(zdir / "tools.yaml")


@pytest.mark.integration
def test_the_resolver_validates_the_chain_down_to_every_tool(tmp_path):
    zdir = _signed_copy(tmp_path)
    tree = start_tree(zdir)
    try:
        res = _resolve(tree, zdir)
        assert res.tools and {t.dnssec for t in res.tools} == {"secure"} and res.stats.bogus == 0
        assert any(t.zone == HKO for t in res.tools)
        import asyncio
        ares = asyncio.run(AsyncResolver(root=tree.root(), validate=True, trust_anchor=_anchor(zdir),
                                         timeout=REPLY_TIMEOUT).resolve(INTENT))
        assert [t.name for t in ares.tools] == [t.name for t in res.tools] and ares.tools[0].dnssec == "secure"
        # without validation: same tools, no status
        plain = Resolver(root=tree.root(), timeout=REPLY_TIMEOUT).resolve(INTENT)
        assert [t.name for t in plain.tools] == [t.name for t in res.tools] and plain.tools[0].dnssec == ""
    finally:
        tree.stop()


@pytest.mark.integration
def test_an_expired_signature_or_a_wrong_anchor_is_bogus(tmp_path):
    zdir = _signed_copy(tmp_path)
    past = Signing(zdir / "keys", validity=14 * 86400, clock=lambda: time.time() - 30 * 86400)
    tree = start_tree(zdir, signing=past)
    try:
        with pytest.raises(ValidationFailed, match="expired"):  # no tool left: the resolution failed
            _resolve(tree, zdir)
    finally:
        tree.stop()
    tree = start_tree(zdir)
    try:
        other = generate("tools.")
        with pytest.raises(ValidationFailed, match="matches the trust anchor"):
            _resolve(tree, zdir, trust_anchor=read_anchor(other.dnskey_text()))
        assert _resolve(tree, zdir).tools  # the right anchor
    finally:
        tree.stop()


def _set_ds(zdir: Path, child: str, ds: tuple[str, ...]) -> None:
    path = zdir / "weather.tools.yaml"
    zone = load_zone(path)
    write_zone(replace(zone, children=tuple(replace(c, ds=ds) if c.name == child else c for c in zone.children)), path)


@pytest.mark.integration
def test_a_missing_ds_is_insecure_and_a_wrong_one_bogus(tmp_path):
    zdir = _signed_copy(tmp_path)
    _set_ds(zdir, HKO, ())  # the child is signed, but its parent holds no DS: an insecure delegation
    tree = start_tree(zdir)
    try:
        res = _resolve(tree, zdir)
        hko = [t for t in res.tools if t.zone == HKO]
        assert hko and {t.dnssec for t in hko} == {"insecure"} and res.stats.bogus == 0
        assert {t.dnssec for t in res.tools if t.zone != HKO} <= {"secure"}
        strict = _resolve(tree, zdir, require_secure=True)
        assert not [t for t in strict.tools if t.zone == HKO] and any("insecure" in e for e in strict.errors)
        _set_ds(zdir, HKO, (generate(HKO).ds_text(),))  # a DS that matches none of the child's keys
        assert wait_until(lambda: any("bogus" in e and HKO in e for e in _outcome(lambda: _resolve(tree, zdir))[1]))
        tools, _, bogus = _outcome(lambda: _resolve(tree, zdir))
        assert not [t for t in tools if t.zone == HKO] and bogus >= 1
    finally:
        tree.stop()


def test_a_ds_written_into_a_parent_keeps_the_header_lines_of_its_file(tmp_path):
    """The parent's file is rewritten through the zone-file schema: its ``#`` header lines stay (docs/zonefiles.md)."""
    zdir = copy_tree(ZONES, tmp_path / "zones", fresh_subnet())
    parent = next(p for p in zdir.glob("*.yaml") if load_zone(p).origin == "weather.tools.")
    header = header_of(parent)
    assert header and not any(c.ds for c in load_zone(parent).children)
    keygen_tree(zdir, zones=[HKO])
    assert any(c.ds for c in load_zone(parent).children) and header_of(parent) == header


@pytest.mark.integration
def test_a_child_signed_while_served_becomes_secure(tmp_path):
    zdir = copy_tree(ZONES, tmp_path / "zones", fresh_subnet())
    others = [load_zone(p).origin for p in zdir.glob("*.yaml") if load_zone(p).origin != HKO]
    keygen_tree(zdir, zones=others)
    tree = start_tree(zdir)
    try:
        res = _resolve(tree, zdir)
        assert {t.dnssec for t in res.tools if t.zone == HKO} == {"insecure"}
        keygen_tree(zdir, zones=[HKO])  # keys for the child, its DS into weather.tools.yaml
        assert wait_until(lambda: {t.dnssec for t in _resolve(tree, zdir).tools if t.zone == HKO} == {"secure"})
    finally:
        tree.stop()


@pytest.mark.integration
def test_a_key_rollover_validates_at_every_step(tmp_path):
    zdir = _signed_copy(tmp_path)
    tree = start_tree(zdir)
    port, hko = tree.tree.port, _zone_address(zdir, HKO)

    def keys_served() -> int:
        msg = _ask(hko, port, HKO, "DNSKEY")
        return sum(len(r) for r in msg.answer if r.rdtype == dns.rdatatype.DNSKEY)

    def secure() -> bool:
        res = _resolve(tree, zdir)
        return bool([t for t in res.tools if t.zone == HKO]) and {t.dnssec for t in res.tools} == {"secure"}

    try:
        old = load_keys(zdir / "keys", HKO)[0].key_tag
        assert secure()
        new = roll(zdir, HKO)  # 1: the new key published beside the old one
        assert wait_until(lambda: keys_served() == 2) and secure()
        assert write_ds(zdir, [HKO], tags=[new.key_tag])  # 2: the parent's DS swapped to the new key
        weather = _zone_address(zdir, "weather.tools.")

        def ds_served() -> set[int]:
            msg = _ask(weather, port, HKO, "DS")
            return {rd.key_tag for r in msg.answer if r.rdtype == dns.rdatatype.DS for rd in r}

        assert wait_until(lambda: ds_served() == {new.key_tag}) and secure()
        retire(zdir, HKO, old)  # 3: the old key retired, the new one signs alone
        assert wait_until(lambda: keys_served() == 1) and secure()
    finally:
        tree.stop()


class _Tamper:
    """A UDP forwarder on loopback in front of one zone's server that may alter replies in flight."""

    def __init__(self, address: str, port: int, upstream: tuple[str, int]) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((address, port))
        self.sock.settimeout(0.2)
        self.upstream, self.alter, self.running = upstream, None, True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while self.running:
            try:
                data, client = self.sock.recvfrom(65535)
            except OSError:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as up:
                up.settimeout(5)
                up.sendto(data, self.upstream)
                try:
                    reply = up.recv(65535)
                except OSError:
                    continue
            if self.alter is not None:
                reply = self.alter(reply)
            self.sock.sendto(reply, client)

    def close(self) -> None:
        self.running = False
        self.thread.join(5)
        self.sock.close()


def _endpoint_to_evil(wire: bytes) -> bytes:
    msg = dns.message.from_wire(wire)
    for rrset in msg.additional:
        if rrset.rdtype == dns.rdatatype.TXT:
            for rd in list(rrset):
                if any(s.startswith(b"endpoint=") for s in rd.strings):
                    rrset.remove(rd)
                    rrset.add(rd.replace(strings=[b"endpoint=https://evil.example/" if s.startswith(b"endpoint=")
                                                  else s for s in rd.strings]))
    return msg.to_wire()


def _target_to_evil(wire: bytes) -> bytes:
    msg = dns.message.from_wire(wire)
    for rrset in msg.answer:
        if rrset.rdtype == dns.rdatatype.SRV:
            for rd in list(rrset):
                rrset.remove(rd)
                rrset.add(rd.replace(target=dns.name.from_text("evil.example.")))
    return msg.to_wire()


@pytest.mark.integration
def test_a_proxy_that_alters_an_answer_in_flight_is_caught(tmp_path):
    zdir = _signed_copy(tmp_path)
    hko = _zone_address(zdir, HKO)
    others = [load_zone(p).origin for p in zdir.glob("*.yaml") if load_zone(p).origin != HKO]
    port = free_port(hko)
    real = hko.rsplit(".", 1)[0] + ".250"  # the leaf's real server; the proxy takes its published address
    trees = [TreeThread(zdir, port, only=others, watch_interval=0.2).start(),
             TreeThread(zdir, port, only=[HKO], listen=[real], watch_interval=0.2).start()]
    proxy = _Tamper(hko, port, (real, port))
    try:
        ask = {"k": 3, "leaf_k": 1}
        assert {t.dnssec for t in _resolve(trees[0], zdir, **{}).tools if t.zone == HKO} == {"secure"}
        for alter, field in [(_endpoint_to_evil, "endpoint"), (_target_to_evil, "target")]:
            proxy.alter = alter
            plain = Resolver(root=trees[0].root(), cache=False, timeout=REPLY_TIMEOUT).resolve(INTENT, **ask)
            assert any("evil.example" in getattr(t, field) for t in plain.tools)  # the alteration works
            tools, errors, bogus = _outcome(lambda: Resolver(root=trees[0].root(), cache=False, validate=True,
                                                             trust_anchor=_anchor(zdir), timeout=REPLY_TIMEOUT)
                                            .resolve(INTENT, **ask))
            assert not any("evil.example" in getattr(t, field) for t in tools)
            assert not [t for t in tools if t.zone == HKO] and bogus >= 1
            assert any(f"{HKO}: bogus" in e for e in errors), errors
            proxy.alter = None
    finally:
        proxy.close()
        for tree in trees:
            tree.stop()


# -- parents accept only signed summaries from signed children ----------------------------------------

AIRSHIP = """\
- label: zeppelin-weather
  name: Zeppelin Winds Aloft
  service: http
  target: airships.example.org.
  port: 443
  description: Winds aloft for zeppelin and dirigible crossings over Hong Kong.
"""


def _add_airship(zdir: Path) -> None:
    path = zdir / f"{HKO}yaml"
    path.write_text(path.read_text(encoding="utf-8").replace("tools:\n", "tools:\n" + AIRSHIP, 1), encoding="utf-8")


def _hko_copy(tree: TreeThread):
    """weather.tools.'s summary of hko.weather.tools., as it serves it."""
    weather = next(s for s in tree.tree.stores if s.index.origin == "weather.tools.")
    return next(c for c in weather.zone.children if c.name == HKO).summary


@pytest.mark.integration
def test_a_parent_refuses_the_summary_of_a_signed_child_whose_key_does_not_match_its_ds(tmp_path, caplog):
    zdir = _signed_copy(tmp_path)
    tree = start_tree(zdir, summary_refresh=0.2)
    try:
        keeper = tree.tree.summaries
        weather = next(s for s in tree.tree.stores if s.index.origin == "weather.tools.")
        wrong = (generate(HKO).ds_text(),)
        _set_ds(zdir, HKO, wrong)  # the parent holds a DS naming a key the child does not have
        assert wait_until(lambda: next(c for c in weather.file_zone.children if c.name == HKO).ds == wrong)
        refused = keeper.counters()["summaries_refused"]
        _add_airship(zdir)  # the child publishes a new summary, signed with its own (other) key
        assert wait_until(lambda: keeper.counters()["summaries_refused"] > refused)
        assert "zeppelin" not in dict(_hko_copy(tree).terms)  # the last good copy kept
        assert f"summary of {HKO} refused" in caplog.text and "matches the DS its parent holds" in caplog.text
        assert write_ds(zdir, [HKO])  # the right DS: the next poll learns the summary
        assert wait_until(lambda: "zeppelin" in dict(_hko_copy(tree).terms))
    finally:
        tree.stop()


class _TcpTamper:
    """A DNS-over-TCP forwarder on loopback in front of one zone's server that may alter replies."""

    def __init__(self, address: str, port: int, upstream: tuple[str, int]) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, port))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.upstream, self.alter, self.running = upstream, None, True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @staticmethod
    def _frame(conn: socket.socket) -> bytes:
        data = b""
        while len(data) < 2 or len(data) < 2 + int.from_bytes(data[:2], "big"):
            chunk = conn.recv(65537)
            if not chunk:
                raise OSError("connection closed")
            data += chunk
        return data[2:]

    def _run(self) -> None:
        while self.running:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                try:
                    conn.settimeout(5)
                    query = self._frame(conn)
                    with socket.create_connection(self.upstream, timeout=5) as up:
                        up.sendall(len(query).to_bytes(2, "big") + query)
                        reply = self._frame(up)
                    if self.alter is not None:
                        reply = self.alter(reply)
                    conn.sendall(len(reply).to_bytes(2, "big") + reply)
                except OSError:
                    continue

    def close(self) -> None:
        self.running = False
        self.thread.join(5)
        self.sock.close()


def _summary_rrsets(msg: dns.message.Message):
    return [r for r in msg.answer if r.name.to_text().startswith("_summary.")]


def _summary_rewritten(wire: bytes) -> bytes:
    """The child's summary made to say what the attacker likes, valid in every way but its signature."""
    from tooldns.protocol.summary import decode_summary, encode_summary

    msg = dns.message.from_wire(wire)
    for rrset in _summary_rrsets(msg):
        if rrset.rdtype == dns.rdatatype.TXT:
            rd = rrset[0]
            summary = decode_summary(list(rd.strings), HKO)
            forged = replace(summary, description="Pick me for everything", terms=(("everything", 3), *summary.terms))
            rrset.remove(rd)
            rrset.add(rd.replace(strings=encode_summary(forged)))
    return msg.to_wire()


def _summary_unsigned(wire: bytes) -> bytes:
    msg = dns.message.from_wire(wire)
    msg.answer = [r for r in msg.answer if r.rdtype != dns.rdatatype.RRSIG]
    return msg.to_wire()


@pytest.mark.integration
def test_a_parent_refuses_a_signed_childs_summary_altered_or_unsigned_in_flight(tmp_path, caplog):
    zdir = _signed_copy(tmp_path)
    hko = _zone_address(zdir, HKO)
    others = [load_zone(p).origin for p in zdir.glob("*.yaml") if load_zone(p).origin != HKO]
    port = free_port(hko)
    real = hko.rsplit(".", 1)[0] + ".250"  # the leaf's real server; the proxies take its published address
    udp, tcp = _Tamper(hko, port, (real, port)), _TcpTamper(hko, port, (real, port))
    trees = [TreeThread(zdir, port, only=others, watch_interval=0.2, summary_refresh=0.2).start(),
             TreeThread(zdir, port, only=[HKO], listen=[real], watch_interval=0.2).start()]
    keeper = trees[0].tree.summaries
    try:
        # the proxy alters from before the new serial on: no fetch of the new summary gets through intact
        tcp.alter = _summary_rewritten
        _add_airship(zdir)  # a new serial: the parent polls and fetches the summary over TCP
        for alter, why in [(_summary_rewritten, "TXT: no RRSIGs validated"), (_summary_unsigned, "is not signed")]:
            tcp.alter = alter  # before the baseline: of the refusals past it, only one in flight saw the last
            refused = keeper.counters()["summaries_refused"]
            assert wait_until(lambda: keeper.counters()["summaries_refused"] > refused + 1), keeper.counters()
            assert wait_until(lambda: why in caplog.text), caplog.text[-2000:]
            copy = _hko_copy(trees[0])
            assert "zeppelin" not in dict(copy.terms) and "everything" not in dict(copy.terms)
            assert "Pick me" not in copy.description
        tcp.alter = None  # the same summary, as signed: learned
        assert wait_until(lambda: "zeppelin" in dict(_hko_copy(trees[0]).terms))
    finally:
        udp.close()
        tcp.close()
        for tree in trees:
            tree.stop()


@pytest.mark.integration
def test_build_sign_makes_a_signed_tree_that_validates(tmp_path, capsys):
    import json

    from test_build import synthetic_catalog
    from tooldns.cli import main as tooldns_main

    catalog, out = tmp_path / "services.json", tmp_path / "built"
    catalog.write_text(json.dumps(synthetic_catalog()))
    build = ["build", str(catalog), "--out", str(out), "--max-leaf", "10", "--max-children", "4",
             "--subnet", ".".join(fresh_subnet().split(".")[:2])]
    assert tooldns_main([*build, "--sign"]) == 0
    printed = capsys.readouterr().out
    zones = [load_zone(p) for p in out.glob("*.yaml")]
    children = sum(len(z.children) for z in zones)
    assert "120 tools (120 catalog entries read)" in printed  # the build's own report, as without --sign
    assert f"signed: {len(zones)} new keys (algorithm 15), 0 kept" in printed, printed
    assert f"the DS of {children} children written" in printed
    for zone in zones:
        (key,) = load_keys(out / "keys", zone.origin)
        assert all(c.ds == (load_keys(out / "keys", c.name)[0].ds_text(),) for c in zone.children)
    tree = start_tree(out)
    try:
        res = Resolver(root=tree.root(), validate=True, trust_anchor=_anchor(out), cache=False,
                       timeout=REPLY_TIMEOUT).resolve("song lyrics for an artist album", k=2)
        assert res.tools and {t.dnssec for t in res.tools} == {"secure"} and res.stats.bogus == 0
    finally:
        tree.stop()
    assert tooldns_main([*build, "--sign"]) == 0  # built again: the keys are kept, the DS written again
    printed = capsys.readouterr().out
    assert f"signed: 0 new keys, {len(zones)} kept" in printed and f"the DS of {children} children" in printed


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("delv") is None, reason="BIND's delv is not installed (bind9-dnsutils)")
def test_delv_validates_a_signed_answer_with_the_root_key_as_anchor(tmp_path):
    zdir = _signed_copy(tmp_path)
    key = load_keys(zdir / "keys", "tools.")[0]
    flags, protocol, algorithm, public = key.dnskey.to_text().split(" ", 3)
    anchor = tmp_path / "anchor.conf"
    anchor.write_text(f'trust-anchors {{ tools. static-key {flags} {protocol} {algorithm} "{public.replace(" ", "")}"; }};\n')
    address = _zone_address(zdir, "tools.").rsplit(".", 1)[0] + ".200"  # every zone on one address: delv asks one server
    port = free_port(address)
    tree = TreeThread(zdir, port, listen=[address]).start()
    try:
        for name, rdtype, expect in [("tools.", "SOA", "fully validated"),
                                     (f"hko-climate._http._tcp.{HKO}", "SRV", "fully validated"),
                                     (f"no-such-tool._http._tcp.{HKO}", "SRV", "negative response, fully validated")]:
            out = subprocess.run(["delv", "-a", str(anchor), f"@{address}", "-p", str(port), "+root=tools.", name, rdtype],
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 0 and f"; {expect}" in out.stdout, (name, out.stdout, out.stderr)
        dig = shutil.which("dig")
        if dig:  # dig +dnssec shows the records
            out = subprocess.run([dig, f"@{address}", "-p", str(port), "+dnssec", "+norec", "tools.", "DNSKEY"],
                                 capture_output=True, text=True, timeout=30).stdout
            assert "DNSKEY\t257 3 15" in out and "RRSIG\tDNSKEY 15" in out
    finally:
        tree.stop()


@pytest.mark.integration
def test_the_commands_make_keys_print_the_anchor_and_validate(tmp_path, capsys):
    from resolver_client.cli import main as resolve_main
    from tooldns.cli import main as tooldns_main

    zdir = copy_tree(ZONES, tmp_path / "zones", fresh_subnet())
    assert tooldns_main(["dnssec", "keygen", str(zdir)]) == 0
    assert "DS of hko.weather.tools. written into" in capsys.readouterr().out
    assert tooldns_main(["dnssec", "show", str(zdir), "--anchor"]) == 0
    anchor = tmp_path / "root.key"
    anchor.write_text(capsys.readouterr().out)
    assert "IN DNSKEY 257 3 15" in anchor.read_text()
    tree = start_tree(zdir)
    try:
        address, port = tree.root()
        code = resolve_main([INTENT, "--root", f"{address}:{port}", "--validate", "--anchor", str(anchor)])
        out = capsys.readouterr().out
        assert code == 0 and ";; DNSSEC:" in out and "0 bogus" in out, out
        # a wrong anchor: a validation failure (exit 3, as the CLI documents), said once, not "no tools found"
        (tmp_path / "wrong.key").write_text(generate("tools.").dnskey_text() + "\n")
        code = resolve_main([INTENT, "--root", f"{address}:{port}", "--validate", "--anchor", str(tmp_path / "wrong.key")])
        out, err = capsys.readouterr()
        assert code == 3 and "no tools found" not in out + err, (out, err)
        assert "DNSSEC validation failed" in err and err.count("matches the trust anchor") == 1, err
    finally:
        tree.stop()


def test_the_key_directory_is_listed_once_until_it_changes(tmp_path, monkeypatch):
    """A server looks at every zone's keys twice a second: one listing of the directory serves every
    zone until the directory changes; a directory changed within the last seconds is listed at each
    look, so that a key added in the same tick of the file system's clock is not missed."""
    from tooldns.dnssec import keys as keymod

    keydir = tmp_path / "keys"
    write_key(keydir, generate("weather.tools."))
    listed = []
    real = keymod.os.listdir
    monkeypatch.setattr(keymod.os, "listdir", lambda p: listed.append(p) or real(p))
    monkeypatch.setattr(keymod, "_RACY", 600.0)  # "recently": the last ten minutes, however slow the machine
    stamp = keydir.stat().st_mtime_ns
    # just written: racy, listed at every look, and a key added in the same tick is seen
    assert [p.name for p in key_files(keydir, "weather.tools.")] and key_files(keydir, "maps.tools.") == []
    write_key(keydir, generate("maps.tools."))
    os.utime(keydir, ns=(stamp, stamp))
    assert len(key_files(keydir, "MAPS.tools.")) == 1 and len(listed) == 3
    # two hours old: listed once for every zone and look, then again once it changes
    old = stamp - 7200 * 10**9
    os.utime(keydir, ns=(old, old))
    assert [len(key_files(keydir, z)) for z in ("weather.tools.", "maps.tools.", "code.tools.")] == [1, 1, 0]
    assert len(listed) == 4
    write_key(keydir, generate("code.tools."))
    assert len(key_files(keydir, "code.tools.")) == 1 and len(listed) == 5
    assert len(key_files(tmp_path / "nowhere", "code.tools.")) == 0


@pytest.mark.integration
def test_odd_and_longest_names_are_denied_with_proofs_that_validate(tmp_path):
    """``a\\.b.tools.`` (one label with a dot), ``\\255x.tools.``, and names of 254 and 255 octets (no
    room for ``\\000.<name>``) are names the signed root does not hold: a compact denial whose NSEC is
    owned by the name asked, as written on the wire, names a next name after it, and validates."""
    zdir = _signed_copy(tmp_path, zones=["tools."])
    tree = start_tree(zdir)
    try:
        port, root = tree.tree.port, _zone_address(zdir, "tools.")
        keys = _ask(root, port, "tools.", "DNSKEY")
        dnskey = keys.find_rrset(keys.answer, dns.name.from_text("tools."), 1, dns.rdatatype.DNSKEY)
        longest = "a." * 124 + "tools."  # 255 octets on the wire
        for name in ("a\\.b.tools.", "\\255x.tools.", "a\\\\b.tools.", "bb." + longest[4:], longest,
                     "Z." + longest[2:]):
            denied = _ask(root, port, name, "A")
            nsec = [r for r in denied.authority if r.rdtype == dns.rdatatype.NSEC]
            assert denied.rcode() == dns.rcode.NOERROR and not denied.answer, name
            assert [r.name for r in nsec] == [dns.name.from_text(name)], name
            assert nsec[0][0].next > nsec[0].name, name
            assert _validate_all(denied, {dnskey.name: dnskey}) == 2, name
    finally:
        tree.stop()


def test_keygen_changes_only_the_ds_of_the_zone_files_it_writes(tmp_path):
    """Before, a parent's file was dumped anew through the schema: ``minimum: 300`` (a default)
    dropped, ``serial`` moved after ``description``, long descriptions re-wrapped. Now only ``ds:``
    lines are added; files without a child to hand a DS to are not written at all."""
    zdir = copy_tree(ZONES, tmp_path / "zones", fresh_subnet())
    before = {p.name: (p.read_text(encoding="utf-8"), p.stat().st_mtime_ns) for p in zdir.glob("*.yaml")}
    report = keygen_tree(zdir)
    parents = {Path(path).name for _, path in report.ds_written}
    assert "tools.yaml" in parents and "weather.tools.yaml" in parents
    for path in zdir.glob("*.yaml"):
        text, stamp = before[path.name]
        if path.name not in parents:
            assert path.stat().st_mtime_ns == stamp, path.name  # not rewritten
            continue
        new = path.read_text(encoding="utf-8").splitlines()
        added = [line for line in new if line not in text.splitlines()]
        assert [line for line in new if line not in added] == text.splitlines(), path.name  # every line, in order
        assert added and all(line.lstrip().startswith(("ds:", "- '")) for line in added), added
        assert all(c.ds for c in load_zone(path).children)
    again = {p.name: p.stat().st_mtime_ns for p in zdir.glob("*.yaml")}
    assert keygen_tree(zdir).ds_written == [] and {p.name: p.stat().st_mtime_ns for p in zdir.glob("*.yaml")} == again


def test_a_ds_swapped_at_a_rollover_replaces_the_old_lines(tmp_path):
    zdir = copy_tree(ZONES, tmp_path / "zones", fresh_subnet())
    keygen_tree(zdir, zones=[HKO])
    parent = next(p for p in zdir.glob("*.yaml") if load_zone(p).origin == "weather.tools.")
    first = parent.read_text(encoding="utf-8")
    new = roll(zdir, HKO)
    write_ds(zdir, [HKO], tags=[new.key_tag])
    child = next(c for c in load_zone(parent).children if c.name == HKO)
    assert child.ds == (new.ds_text(),)
    lines = parent.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(first.splitlines()) and sum(a != b for a, b in zip(lines, first.splitlines())) == 1


def test_a_key_state_that_cannot_be_written_leaves_the_old_file_and_no_temporary_one(tmp_path):
    """Written in a child process whose files may not grow past 1 byte (RLIMIT_FSIZE): the write fails
    (EFBIG), the old JSON is whole and no temporary file is left beside it (before: a stray
    ``.json.tmp``)."""
    import sys

    keys = tmp_path / "keys"
    key = generate(HKO)
    write_key(keys, key)
    before = {p.name: p.read_bytes() for p in keys.iterdir()}
    code = "\n".join(["import resource, sys",
                      "from tooldns.dnssec.keys import load_keys, set_state",
                      f"key = load_keys(sys.argv[1], {HKO!r})[0]",
                      "resource.setrlimit(resource.RLIMIT_FSIZE, (1, 1))",
                      "try:",
                      "    set_state(sys.argv[1], key, 'retired')",
                      "except OSError:",
                      "    sys.exit(7)"])
    proc = subprocess.run([sys.executable, "-c", code, str(keys)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 7, proc.stderr
    assert {p.name: p.read_bytes() for p in keys.iterdir()} == before
