"""Edits that travel up the tree: published summaries, NOTIFY, polling, and what a parent refuses.

Real servers on loopback throughout: a copy of the shipped tree, and, for a child that lies, a
small DNS server written here with dnspython that answers what an honest server would not.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
import time
from collections import Counter
from pathlib import Path

import dns.flags
import dns.message
import dns.opcode
import dns.query
import dns.rcode
import dns.rdatatype
import dns.rrset
import pytest

from conftest import REPLY_TIMEOUT, ZONES, copy_tree, fresh_subnet, free_port, start_tree, wait_until
from resolver_client import Resolver
from resolver_client.exceptions import NoServersReachable
from tooldns.exceptions import SummaryError
from tooldns.protocol.summary import (MAX_SUMMARY_BYTES, MAX_TERMS, MAX_VECTORS, PublishedSummary, decode_summary, encode_summary,
                                      fit_summary, summary_name)
from tooldns.serving.store import ZoneStore
from tooldns.serving.summaries import learned_summary, publish
from tooldns.zone.zonefile import load_zone

AIRSHIP = """\
- label: zeppelin-routes
  name: Zeppelin Airship Route Planner
  service: http
  target: airships.example.org.
  port: 443
  description: Plans routes for a zeppelin, airship or dirigible between mooring masts, with winds aloft.
"""
AIRSHIP_INTENT = "zeppelin airship dirigible"


def _add_tool(path: Path, text: str = AIRSHIP) -> None:
    """Add a tool to a zone file as an organisation would: an edit, the serial left as it was."""
    path.write_text(path.read_text(encoding="utf-8").replace("tools:\n", "tools:\n" + text, 1), encoding="utf-8")


def _found(tree, intent: str, name: str, k: int = 1) -> bool:
    with Resolver(root=tree.root(), cache=False, timeout=REPLY_TIMEOUT) as r:
        return any(t.name == name for t in r.resolve(intent, k=k).tools)


def _ask(address: str, port: int, name: str, rdtype: str, tcp: bool = True) -> dns.message.Message:
    query = dns.message.make_query(name, rdtype)
    query.flags &= ~dns.flags.RD
    send = dns.query.tcp if tcp else dns.query.udp
    return send(query, address, port=port, timeout=REPLY_TIMEOUT)


# -- the codec --------------------------------------------------------------------------------------

def test_a_summary_survives_its_txt_strings_and_says_whose_it_is():
    counts = Counter({"weather": 9, "forecast": 4, "天气": 2, "mp3": 1})
    summary = fit_summary("weather.tools.", 42, "Weather: forecasts and history", ("weather", "climate"), counts, 3)
    strings = encode_summary(summary)
    assert all(len(s) <= 255 for s in strings)
    assert decode_summary(strings, "weather.tools.") == summary
    assert summary.terms[0] == ("weather", 9)  # most frequent first
    with pytest.raises(SummaryError, match="says it is 'weather.tools.'"):
        decode_summary(strings, "maps.tools.")  # a child cannot speak for another zone
    grouped = fit_summary("weather.tools.", 42, "Weather", (), counts, 3,
                          facets=(Counter({"weather": 5, "forecast": 4}), Counter({"天气": 2, "Not A Term": 1})))
    assert grouped.facets == ((("weather", 5), ("forecast", 4)), (("天气", 2),))  # as terms are kept
    assert decode_summary(encode_summary(grouped), "weather.tools.") == grouped
    too_many = fit_summary("weather.tools.", 42, "Weather", (), counts, 3, facets=(Counter({"weather": 1}),) * 17)
    assert too_many.facets == ()  # a zone with more groups beneath it publishes none


@pytest.mark.parametrize("doc, why", [
    (b"not json", "not UTF-8 JSON"),
    (b"[1, 2]", "JSON object"),
    (b"[" * 50_000, "nests too deeply"),  # the decoder's recursion, not a child out of reach
    ({"format": "tooldns-summary/9"}, "format"),
    ({"extra": 1}, "unknown keys"),
    ({"serial": -1}, "serial"),
    ({"serial": True}, "serial"),
    ({"terms": {"Has Space": 1}}, "not an index term"),
    ({"terms": {"UPPER": 1}}, "not an index term"),
    ({"terms": {"x" * 65: 1}}, "not an index term"),
    ({"terms": {"weather": 0}}, "counted 0"),
    ({"terms": {"weather": 10**6}, "tools": 2}, "at most 9"),  # keyword stuffing, as zone files cap it
    ({"keywords": "weather"}, "keywords"),
    ({"description": "x" * 5000}, "description"),
    ({"facets": {"weather": 1}}, "facets must be a list"),
    ({"facets": [{}]}, "facets must be a list"),
    ({"facets": [{"weather": 1}] * 17}, "facets must be a list"),
    ({"facets": [{"Has Space": 1}]}, "not an index term"),
    ({"facets": [{"weather": 10**6}], "tools": 2}, "facet term 'weather' counted"),
    ({"facets": [{"weather": 1}], "tools": 5}, "a facet stands for at most 4 tools"),
    ({"terms": {f"w{i}": 1 for i in range(1025)}, "tools": 1}, "at most 1024 terms"),  # 512 a tool, plus 512
    ({"terms": {f"w{i}": 6 for i in range(600)}, "tools": 1}, "counted 3072 times are accepted"),
])
def test_a_parent_refuses_malformed_or_inflated_summaries(doc, why):
    if isinstance(doc, dict):
        base = {"format": "tooldns-summary/1", "zone": "maps.tools.", "serial": 1, "tools": 1, "terms": {}}
        doc = json.dumps({**base, **doc}).encode()
    with pytest.raises(SummaryError, match=why):
        decode_summary([doc[i:i + 255] for i in range(0, len(doc), 255)], "maps.tools.")


@pytest.mark.slow
def test_a_summary_too_large_is_refused_and_a_large_zone_publishes_what_fits():
    huge = [b"x" * 255] * (MAX_SUMMARY_BYTES // 255 + 2)
    with pytest.raises(SummaryError, match="octets"):
        decode_summary(huge, "maps.tools.")
    counts = Counter({f"term{i}": 1 + i % 7 for i in range(3 * MAX_TERMS)})
    fitted = fit_summary("big.tools.", 1, "big", (), counts, tools=10_000)
    assert len(fitted.terms) <= MAX_TERMS
    assert len(b"".join(encode_summary(fitted))) <= MAX_SUMMARY_BYTES
    assert min(n for _, n in fitted.terms) >= max(n for t, n in counts.items() if t not in dict(fitted.terms))
    assert decode_summary(encode_summary(fitted), "big.tools.") == fitted


# -- what a zone publishes and how a parent uses it ------------------------------------------------

def test_a_zone_publishes_the_words_of_its_tools_and_of_its_children(tmp_path):
    zonedir = copy_tree(ZONES, tmp_path / "zones", fresh_subnet())
    _add_tool(zonedir / "routing.maps.tools.yaml")
    routing = publish(load_zone(zonedir / "routing.maps.tools.yaml"))
    terms = dict(routing.terms)
    assert terms["zeppelin"] >= 1 and terms["dirigible"] >= 1 and terms["route"] >= 2
    assert routing.zone == "routing.maps.tools." and routing.tools == len(load_zone(zonedir / "routing.maps.tools.yaml").tools)
    maps = load_zone(zonedir / "maps.tools.yaml")
    assert "zeppelin" not in dict(publish(maps).terms)  # maps' copy of routing is the hand-written one


@pytest.mark.integration
def test_a_built_leaf_publishes_its_facets_and_its_parent_goes_on_ranking_by_them(tmp_path):
    """A leaf of a built tree publishes the facets ``tooldns build`` wrote in its parent's delegation;
    after an organisation adds a tool to the leaf, the running root learns the leaf's summary with the
    tool in one of its facets, still ranks every child by its best facet, and sends a resolution for
    the new tool to that leaf (before, one learned summary made a parent rank whole summaries)."""
    from test_build import synthetic_catalog
    from tooldns.building.build import build
    from tooldns.building.trees import AutoTreeBuilder

    (tmp_path / "c.json").write_text(json.dumps(synthetic_catalog()))
    zones = tmp_path / "z"
    build([tmp_path / "c.json"], zones, builder=AutoTreeBuilder(max_children=8, max_leaf=20),
          subnet=".".join(fresh_subnet().split(".")[:2]))
    files = {load_zone(p).origin: p for p in zones.glob("*.yaml")}
    root = load_zone(files["tools."])
    leaves = [d for d in root.children if not load_zone(files[d.name]).children]
    assert leaves and all(d.summary.facets for d in root.children)
    for d in leaves:  # what the parent has is what the leaf says
        assert [dict(f) for f in publish(load_zone(files[d.name])).facets] == [dict(f) for f in d.summary.facets]
    leaf = leaves[-1].name
    assert root.children[0].name != leaf  # an intent matching no child goes to the first: not this one
    tree = start_tree(zones)
    served = next(s for s in tree.tree.stores if s.index.origin == "tools.")

    def learned():  # the root's copy of the leaf's summary, once it is the one the leaf published
        child = next(c for c in served.index.zone.children if c.name == leaf)
        return child.summary if child.summary.terms else None

    try:
        assert not _found(tree, AIRSHIP_INTENT, "Zeppelin Airship Route Planner")
        _add_tool(files[leaf])
        assert wait_until(lambda: learned() is not None and _found(tree, AIRSHIP_INTENT,
                                                                   "Zeppelin Airship Route Planner")), \
            "the root never learned the leaf's summary, or the new tool never became findable from it"
        assert any("zeppelin" in dict(f) for f in learned().facets)
        scorer = served.index.child_candidates.scorer
        assert scorer.facets is not None  # every child still ranked by its best facet
        best = scorer.rank(AIRSHIP_INTENT, 1).items[0][0]
        assert served.index.child_candidates.entries[best].name == leaf
    finally:
        tree.stop()


def test_a_zone_publishes_facets_only_when_they_cover_every_tool_beneath_it():
    import dataclasses

    from tooldns.scoring.bm25 import FACET_SIZE, MAX_FACET_TOOLS
    from tooldns.serving.summaries import published_facets

    maps = load_zone(ZONES / "maps.tools.yaml")
    assert maps.children and publish(maps).facets == ()  # children written by hand, without facets
    faceted = dataclasses.replace(maps, children=tuple(
        dataclasses.replace(c, summary=dataclasses.replace(c.summary, facets=(((c.label, 1),),))) for c in maps.children))
    own = [["airship", "zeppelin"]] * (FACET_SIZE + 1)  # two groups of the zone's own tools, then each child's
    assert [dict(f) for f in published_facets(faceted, own)] == (
        [{"airship": FACET_SIZE, "zeppelin": FACET_SIZE}, {"airship": 1, "zeppelin": 1}]
        + [{c.label: 1} for c in maps.children])
    assert published_facets(faceted, [["airship"]] * (MAX_FACET_TOOLS + 1)) == ()  # its own tools too many to group
    assert published_facets(dataclasses.replace(faceted, children=faceted.children * 20), []) == ()  # over 16 in all


def test_which_copy_wins_pinned_then_serial_then_learned(tmp_path):
    zonedir = copy_tree(ZONES, tmp_path / "zones", fresh_subnet())
    path = zonedir / "maps.tools.yaml"
    store = ZoneStore(path)
    routing = next(c for c in store.zone.children if c.label == "routing")
    assert routing.summary.serial == 2026113001  # the shipped copy stands for the child's serial
    first = store.serial
    same = learned_summary(PublishedSummary("routing.maps.tools.", 2026113001, "routing", terms=(("route", 3),)))
    assert store.learn({"routing.maps.tools.": same}) is False  # the file's copy stands for that serial
    newer = learned_summary(PublishedSummary("routing.maps.tools.", 2026113002, "routing", terms=(("zeppelin", 3),)))
    assert store.learn({"routing.maps.tools.": newer}) is True
    assert store.serial == first + 1 and store.zone.soa.serial == first + 1
    assert next(c for c in store.zone.children if c.label == "routing").summary.terms == (("zeppelin", 3),)
    assert store.learn({"nothere.maps.tools.": newer}) is False  # not a child: ignored
    # the operator pins the copy: it wins again after the reload, and the serial moves on
    text = path.read_text(encoding="utf-8").replace("    serial: 2026113001\n    description: 'Routing",
                                                    "    pin: true\n    description: 'Routing", 1)
    path.write_text(text, encoding="utf-8")
    assert wait_until(lambda: store.check() == "reloaded", timeout=5)
    routing = next(c for c in store.zone.children if c.label == "routing")
    assert routing.summary.pinned and not routing.summary.terms and store.serial == first + 2


def test_the_summary_is_served_at_its_name_over_tcp(demo_tree):
    address, port = demo_tree.root()
    weather = demo_tree.tree.addresses["weather.tools."][0]
    reply = _ask(weather, port, summary_name("weather.tools."), "TXT")
    assert reply.rcode() == dns.rcode.NOERROR and reply.flags & dns.flags.AA
    (rrset,) = reply.answer
    summary = decode_summary(list(rrset[0].strings), "weather.tools.")
    assert summary.serial == 2026113001 and summary.tools >= 4  # own tools; a copy counts at least one
    assert {"weather", "forecast", "typhoon"} <= set(dict(summary.terms))
    soa = _ask(weather, port, "weather.tools.", "SOA", tcp=False)
    assert soa.answer[0][0].serial == summary.serial


# -- live, on a running tree ------------------------------------------------------------------------

@pytest.mark.integration
def test_a_leaf_edit_is_findable_from_the_root_while_resolutions_run(demo_dir):
    """The issue's example: a tool about airships added to routing.maps.tools., asked of the root with
    K=1. Meanwhile another thread resolves in a loop (rate limiting off: it asks hundreds of times a
    second from one address): every resolution succeeds."""
    tree = start_tree(demo_dir, rate_limit=0)
    errors, done, loops = [], threading.Event(), Counter()

    def resolve_forever():
        with Resolver(root=tree.root(), cache=False, timeout=REPLY_TIMEOUT) as r:
            while not done.is_set():
                try:
                    tools = r.resolve("driving directions to the airport", k=2).tools
                    loops["ok" if tools else "empty"] += 1
                except Exception as exc:  # noqa: BLE001 - any failure is the test's finding
                    errors.append(repr(exc))

    worker = threading.Thread(target=resolve_forever)
    worker.start()
    try:
        assert not _found(tree, AIRSHIP_INTENT, "Zeppelin Airship Route Planner")
        _add_tool(demo_dir / "routing.maps.tools.yaml")
        assert wait_until(lambda: _found(tree, AIRSHIP_INTENT, "Zeppelin Airship Route Planner")), \
            "the new tool never became findable from the root"
        stores = {s.index.origin: s for s in tree.tree.stores}
        for origin in ("routing.maps.tools.", "maps.tools.", "tools."):
            assert stores[origin].serial > 2026113001, origin  # each level serves a new serial
        assert stores["weather.tools."].serial == 2026113001  # no other branch changed
        counters = tree.tree.summaries.counters()
        assert counters["notifies_sent"] >= 2 and counters["notifies_received"] >= 2
        assert counters["summaries_learned"] >= 2 and counters["notifies_refused"] == 0
        assert wait_until(lambda: tree.tree.summaries.counters()["notifies_acked"] >= 2)  # acks still match
    finally:
        done.set()
        worker.join(REPLY_TIMEOUT * 3)
        tree.stop()
    assert not errors, errors[:3]
    assert loops["ok"] > 0 and loops["empty"] == 0


@pytest.mark.integration
def test_zones_served_on_another_address_keep_each_other_fresh(demo_dir, caplog):
    """``tooldns serve DIR --listen ADDR``: every zone on an address its glue does not name. A parent
    asks a child served here where it is served, and hears of its edits without a NOTIFY (which
    would leave from the child's own addresses): no refresh fails, and the edit reaches the root."""
    listen = re.search(r"address: (127\.\d+\.\d+)\.\d+", (demo_dir / "tools.yaml").read_text()).group(1) + ".250"
    tree = start_tree(demo_dir, listen=[listen], summary_refresh=30)  # polls far apart: a change is heard, not polled
    try:
        stores = {s.index.origin: s for s in tree.tree.stores}
        assert tree.root()[0] == listen
        _add_tool(demo_dir / "routing.maps.tools.yaml")
        assert wait_until(lambda: stores["tools."].serial > 2026113001), "the edit never reached the root"
        assert stores["maps.tools."].serial > 2026113001 and stores["weather.tools."].serial == 2026113001
        counters = tree.tree.summaries.counters()
        assert counters["summary_refresh_failures"] == 0 and counters["summaries_learned"] >= 2
        assert "cannot refresh the summary" not in caplog.text
    finally:
        tree.stop()


@pytest.mark.integration
def test_a_child_that_is_down_keeps_its_last_good_summary(demo_dir, caplog):
    tree = start_tree(demo_dir, summary_refresh=0.2)
    try:
        _add_tool(demo_dir / "routing.maps.tools.yaml")
        assert wait_until(lambda: _found(tree, AIRSHIP_INTENT, "Zeppelin Airship Route Planner"))
        routing_address = tree.tree.addresses["routing.maps.tools."][0]
        tree.call(tree.tree.stop_server("routing.maps.tools.", routing_address))
        failures = tree.tree.summaries.counters()["summary_refresh_failures"]
        assert wait_until(lambda: tree.tree.summaries.counters()["summary_refresh_failures"] > failures + 2)
        maps = next(s for s in tree.tree.stores if s.index.origin == "maps.tools.")
        routing = next(c for c in maps.zone.children if c.label == "routing")
        assert "zeppelin" in dict(routing.summary.terms)  # the last good summary, still used
        assert "cannot refresh the summary of routing.maps.tools." in caplog.text
        # the root and maps still route there; the leaf itself is down, and the resolver says so.
        # One timeout serves every query of the walk: 2 s (not 0.5 s), so that a loaded machine's late
        # root or maps reply is not taken for a dead server (the error must name routing, not them).
        with Resolver(root=tree.root(), cache=False, timeout=2.0) as r:
            with pytest.raises(NoServersReachable, match="routing.maps.tools.: no name server answered"):
                r.resolve(AIRSHIP_INTENT, k=1)
    finally:
        tree.stop()


def test_notify_from_an_address_that_is_not_the_childs_name_server_is_refused(demo_tree):
    address, port = demo_tree.root()
    weather = demo_tree.tree.addresses["weather.tools."][0]
    notify = dns.message.make_query("weather.tools.", "SOA", use_edns=0)  # EDNS: room for the EDE text
    notify.flags = dns.flags.AA
    notify.set_opcode(dns.opcode.NOTIFY)
    stranger = dns.query.udp(notify, address, port=port, timeout=REPLY_TIMEOUT)  # from 127.0.0.1
    assert stranger.rcode() == dns.rcode.REFUSED and stranger.opcode() == dns.opcode.NOTIFY
    assert "not one of its name servers" in stranger.options[0].text
    # from the child's own address (another port, as a name server's NOTIFY may come): acknowledged
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((weather, 0))
        sock.settimeout(REPLY_TIMEOUT)
        sock.sendto(notify.to_wire(), (address, port))
        ack = dns.message.from_wire(sock.recv(4096))
    assert ack.rcode() == dns.rcode.NOERROR and ack.opcode() == dns.opcode.NOTIFY and ack.flags & dns.flags.AA
    # as every reply of an authoritative server: no recursion offered, and EDNS answered with EDNS
    assert not ack.flags & dns.flags.RA and ack.edns == 0
    again = dns.query.udp(notify, address, port=port, timeout=REPLY_TIMEOUT)
    assert again.rcode() == dns.rcode.REFUSED  # never answered from the packet cache
    notauth = dns.message.make_query("weather.tools.", "SOA")
    notauth.set_opcode(dns.opcode.NOTIFY)
    reply = dns.query.udp(notauth, weather, port=port, timeout=REPLY_TIMEOUT)  # weather has no such child
    assert reply.rcode() == dns.rcode.NOTAUTH
    counters = demo_tree.tree.summaries.counters()
    assert counters["notifies_refused"] >= 2 and counters["notifies_received"] >= 3


def test_a_burst_of_refused_notifies_is_counted_and_logged_once_a_minute(demo_tree, caplog, monkeypatch):
    """NOTIFYs from an address that is not the child's name server (one datagram each, from any source)
    are refused and counted, every one; the log gets one line per zone a minute, the next saying how
    many went unlogged, so that a flood of them does not flood the log."""
    import tooldns.serving.summaries as summaries

    address, port = demo_tree.root()
    notify = dns.message.make_query("weather.tools.", "SOA")
    notify.set_opcode(dns.opcode.NOTIFY)
    before = demo_tree.tree.summaries.counters()["notifies_refused"]
    with caplog.at_level(logging.WARNING, logger="tooldns.serving.summaries"):
        for i in range(50):
            notify.id = i
            assert dns.query.udp(notify, address, port=port, timeout=REPLY_TIMEOUT).rcode() == dns.rcode.REFUSED
        assert demo_tree.tree.summaries.counters()["notifies_refused"] == before + 50
        lines = [r.getMessage() for r in caplog.records if "NOTIFY for weather.tools." in r.getMessage()]
        assert len(lines) == 1 and "more refused" not in lines[0]
        monkeypatch.setattr(summaries, "REFUSED_LOG_INTERVAL", 0.0)  # a minute later
        assert dns.query.udp(notify, address, port=port, timeout=REPLY_TIMEOUT).rcode() == dns.rcode.REFUSED
    lines = [r.getMessage() for r in caplog.records if "NOTIFY for weather.tools." in r.getMessage()]
    assert len(lines) == 2 and re.search(r"\(49 more refused since the last such line\)$", lines[-1]), lines


# -- a child that lies ------------------------------------------------------------------------------

class LyingChild:
    """A name server for liar.tools. on (address, port), answering SOA with a new serial each time and
    ``_summary.liar.tools.`` TXT with whatever strings it is told to send."""

    def __init__(self, address: str, port: int, strings: list[bytes]) -> None:
        self.address, self.port, self.strings = address, port, strings
        self.serial, self.asked = 100, Counter()
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind((address, port))
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.tcp.bind((address, port))
        self.tcp.listen()
        self.udp.settimeout(0.1)
        self.tcp.settimeout(0.1)
        self.running = True
        self.threads = [threading.Thread(target=self._serve_udp), threading.Thread(target=self._serve_tcp)]
        for t in self.threads:
            t.start()

    def _answer(self, query: dns.message.Message) -> dns.message.Message:
        reply = dns.message.make_response(query)
        reply.flags |= dns.flags.AA
        q = query.question[0]
        self.asked[dns.rdatatype.to_text(q.rdtype)] += 1
        if q.rdtype == dns.rdatatype.SOA:
            self.serial += 1
            reply.answer.append(dns.rrset.from_text(q.name, 0, "IN", "SOA",
                                                    f"ns1.liar.tools. h.liar.tools. {self.serial} 1 1 60 60"))
        elif q.rdtype == dns.rdatatype.TXT:
            text = " ".join('"' + "".join(f"\\{b:03d}" for b in s) + '"' for s in self.strings)
            reply.answer.append(dns.rrset.from_text(q.name, 0, "IN", "TXT", text))
        return reply

    def _serve_udp(self):
        while self.running:
            try:
                data, addr = self.udp.recvfrom(65535)
            except OSError:
                continue
            self.udp.sendto(self._answer(dns.message.from_wire(data)).to_wire(), addr)

    def _serve_tcp(self):
        while self.running:
            try:
                conn, _ = self.tcp.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(REPLY_TIMEOUT)
                try:
                    query, _ = dns.query.receive_tcp(conn)
                    dns.query.send_tcp(conn, self._answer(query))
                except Exception:  # noqa: BLE001 - the parent hung up: fine
                    pass

    def close(self):
        self.running = False
        for t in self.threads:
            t.join()
        self.udp.close()
        self.tcp.close()


def _liar_tree(tmp_path: Path) -> tuple[Path, str]:
    subnet = fresh_subnet()
    zonedir = tmp_path / "zones"
    zonedir.mkdir()
    (zonedir / "tools.yaml").write_text(f"""\
origin: tools.
soa: {{contact: hostmaster@tools, serial: 1}}
nameservers: [{{name: ns1.tools., address: {subnet}.1}}]
children:
- label: liar
  summary: {{description: what the parent's operator wrote about it}}
  nameservers: [{{name: ns1.liar.tools., address: {subnet}.2}}]
- label: honest
  summary: {{description: weather forecasts}}
  nameservers: [{{name: ns1.honest.tools., address: {subnet}.3}}]
""", encoding="utf-8")
    return zonedir, subnet


@pytest.mark.integration
@pytest.mark.parametrize("strings, why", [
    ([b"x" * 255] * (MAX_SUMMARY_BYTES // 255 + 2), "octets"),  # oversized
    (encode_summary(PublishedSummary("honest.tools.", 101, "I am the honest one", terms=(("weather", 1),))),
     "says it is 'honest.tools.'"),  # forged: another zone's
    (encode_summary(PublishedSummary("liar.tools.", 101, "stuffed", tools=1, terms=(("weather", 5000),))),
     "counted 5000"),  # stuffed
    ([b"[" * 255] * 200, "nests too deeply"),  # counted as refused, not as a child out of reach
])
def test_a_parent_refuses_an_oversized_forged_or_stuffed_summary(tmp_path, caplog, strings, why):
    zonedir, subnet = _liar_tree(tmp_path)
    port = free_port(f"{subnet}.1")
    liar = LyingChild(f"{subnet}.2", port, strings)
    try:
        from tooldns.serving.tree import TreeThread

        with TreeThread(zonedir, port, summary_refresh=0.2) as tree:
            keeper = tree.tree.summaries
            assert wait_until(lambda: keeper.counters()["summaries_refused"] >= 2)
            assert liar.asked["TXT"] >= 2
            root = tree.tree.stores[0]
            child = next(c for c in root.zone.children if c.label == "liar")
            assert child.summary.description == "what the parent's operator wrote about it" and not child.summary.terms
            assert root.serial == 1
            assert why in caplog.text
    finally:
        liar.close()


# -- vectors: what a hybrid parent scores a child with ---------------------------------------------

def _hash_vector(text: str) -> bytes:
    from tooldns.embedding.registry import make_embedder
    from tooldns.protocol.vector import encode_vector

    embedder = make_embedder("hash")
    return encode_vector(embedder.model, embedder.embed_one(text))


def test_a_zone_publishes_centroids_of_its_vectors_and_a_parent_uses_them(tmp_path):
    import dataclasses

    from tooldns.protocol.vector import decode_vector

    zonedir = copy_tree(ZONES, tmp_path / "zones", fresh_subnet())
    routing = load_zone(zonedir / "routing.maps.tools.yaml")
    tools = tuple(dataclasses.replace(t, vector=_hash_vector(t.embedding_text())) for t in routing.tools)
    published = publish(dataclasses.replace(routing, tools=tools))
    assert 1 <= len(published.vectors) <= 4 and len(tools) >= 4
    models = {decode_vector(v).model for v in published.vectors}
    assert models == {decode_vector(tools[0].vector).model}
    assert decode_summary(encode_summary(published), "routing.maps.tools.") == published  # survives the wire
    store = ZoneStore(zonedir / "maps.tools.yaml")
    learned = learned_summary(dataclasses.replace(published, serial=2026113002))
    assert store.learn({"routing.maps.tools.": learned})
    child = next(c for c in store.zone.children if c.label == "routing")
    assert child.vectors == published.vectors  # the hybrid scorer's centroids of the child
    assert publish(store.zone).vectors  # and maps publishes centroids of them in turn


@pytest.mark.parametrize("vectors, why", [
    (["not base64!"], "not a valid vector"),
    (["AAAA"] * (MAX_VECTORS + 1), f"at most {MAX_VECTORS}"),
    ("AAAA", "list"),
])
def test_a_parent_refuses_malformed_vectors(vectors, why):
    doc = json.dumps({"format": "tooldns-summary/1", "zone": "maps.tools.", "serial": 1, "vectors": vectors}).encode()
    with pytest.raises(SummaryError, match=why):
        decode_summary([doc[i:i + 255] for i in range(0, len(doc), 255)], "maps.tools.")


def test_vectors_of_two_models_are_refused():
    import base64

    from tooldns.protocol.vector import encode_vector

    two = [base64.b64encode(encode_vector(m, [0.1, 0.2, 0.3])).decode() for m in ("model-a", "model-b")]
    doc = json.dumps({"format": "tooldns-summary/1", "zone": "maps.tools.", "serial": 1, "vectors": two}).encode()
    with pytest.raises(SummaryError, match="several models"):
        decode_summary([doc], "maps.tools.")


@pytest.mark.integration
def test_a_notify_is_acknowledged_only_by_its_target_with_its_question(tmp_path):
    """Before, any datagram with the NOTIFY's message ID counted as its acknowledgement: one of 65,536
    guesses, from anyone. Now it must come from an address the NOTIFY went to, with its opcode and
    question; the others are dropped (and counted)."""
    import asyncio

    from tooldns.serving.index import ZoneIndex
    from tooldns.serving.resolver import StaticSource, ZoneResolver
    from tooldns.serving.server import DNSServer

    subnet = fresh_subnet()
    loop = asyncio.new_event_loop()
    worker = threading.Thread(target=loop.run_forever, daemon=True)
    worker.start()
    server = DNSServer(ZoneResolver(StaticSource(ZoneIndex(load_zone(ZONES / "weather.tools.yaml")))),
                       f"{subnet}.1", 0)
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(REPLY_TIMEOUT)
    parent, stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM), socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        parent.bind((f"{subnet}.2", 0))
        stranger.bind((f"{subnet}.3", 0))
        notify = dns.message.make_query("weather.tools.", "SOA")
        notify.flags = dns.flags.AA
        notify.set_opcode(dns.opcode.NOTIFY)

        async def expect():
            return server.expect_reply(notify.to_wire(), [parent.getsockname()])

        acked = asyncio.run_coroutine_threadsafe(expect(), loop).result(REPLY_TIMEOUT)
        ack = dns.message.make_response(notify)
        other = dns.message.make_query("maps.tools.", "SOA", id=notify.id)
        other.flags = dns.flags.AA
        other.set_opcode(dns.opcode.NOTIFY)
        for n, (sock, reply) in enumerate([(stranger, ack), (parent, dns.message.make_response(other))], 1):
            sock.sendto(reply.to_wire(), (server.address, server.port))
            assert wait_until(lambda: server.stats["dropped"] == n), n
            assert not acked.done()
        parent.sendto(ack.to_wire(), (server.address, server.port))
        assert wait_until(acked.done) and server.stats["dropped"] == 2
    finally:
        parent.close()
        stranger.close()
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(REPLY_TIMEOUT)
        loop.call_soon_threadsafe(loop.stop)
        worker.join(REPLY_TIMEOUT)


def test_fit_keeps_a_summary_within_what_its_tools_could_hold():
    """A zone of one tool with a long description of its own publishes at most 1,024 terms counted at
    most 3,072 times: what a parent accepts, never a refused summary."""
    counts = Counter({f"w{i}": 1 + i % 3 for i in range(5000)})
    fitted = fit_summary("one.tools.", 1, "one", (), counts, tools=1)
    assert len(fitted.terms) <= 1024 and sum(n for _, n in fitted.terms) <= 3072
    assert decode_summary(encode_summary(fitted), "one.tools.") == fitted
    faceted = fit_summary("f.tools.", 1, "f", (), Counter({"route": 40}), tools=50,
                          facets=(Counter({"route": 20}), Counter({"route": 20})))
    assert faceted.tools == 8 and dict(faceted.facets[0]) == {"route": 20}  # 2 facets of 4 tools at most
    assert dict(faceted.terms) == {"route": 27}  # counted at most 3 times a tool, plus 3
    assert decode_summary(encode_summary(faceted), "f.tools.") == faceted


STUFFING_INTENTS = ["historical weather Hong Kong", "will it rain in London tomorrow", "hourly temperature forecast",
                    "driving directions to the airport", "convert an address to coordinates", "stock price of Tesla",
                    "exchange rate euro to dollar", "search Wikipedia for the French revolution",
                    "send a slack message to the team", "read my unread emails", "add an event to my calendar",
                    "severe weather alerts in Texas"]


def _root_with(zonedir: Path, child: str, published: PublishedSummary) -> ZoneStore:
    """The shipped root after learning every child's published summary, *published* for *child*."""
    import dataclasses

    store = ZoneStore(zonedir / "tools.yaml")
    for delegation in store.file_zone.children:
        summary = published if delegation.name == child else publish(load_zone(zonedir / f"{delegation.name}yaml"))
        summary = dataclasses.replace(summary, serial=summary.serial + 1)
        store.learn({delegation.name: learned_summary(decode_summary(encode_summary(summary), delegation.name))})
    return store


def _firsts(store: ZoneStore, child: str) -> int:
    candidates = store.index.child_candidates
    return sum(candidates.entries[candidates.scorer.rank(intent, 1).items[0][0]].name == child
               for intent in STUFFING_INTENTS)


def test_claiming_ten_million_tools_buys_a_stuffed_summary_nothing(tmp_path):
    """A child of the root publishes its terms and 70 words common in the tree's tools, each counted as
    often as the parent accepts. Before, claiming 10,000,000 tools (each word counted 30 million
    times) made it first for 3 of these 12 intents, none of them about it: BM25's term frequency
    saturates, and the mean length it is compared with grew with it, so that every stuffed word
    weighed in full. Now a child's length counts at most 4 times the median in that mean: the
    claim buys nothing over the child's real count of tools."""
    from tooldns.protocol.summary import MAX_TOOLS
    from tooldns.scoring.tokenize import tokenize

    child = "code.tools."
    honest = publish(load_zone(ZONES / "code.tools.yaml"))
    common = Counter(t for path in ZONES.glob("*.yaml") for tool in load_zone(path).tools for t in tokenize(tool.text()))
    words = [t for t, _ in common.most_common(70)]

    def stuffed(tools: int) -> PublishedSummary:
        terms = {**dict(honest.terms), **{w: 3 * tools + 3 for w in words}}
        return PublishedSummary(child, honest.serial, honest.description, honest.keywords, tools,
                                tuple(sorted(terms.items(), key=lambda tn: (-tn[1], tn[0]))))

    assert _firsts(_root_with(ZONES, child, honest), child) == 0
    claimed, real = (_firsts(_root_with(ZONES, child, stuffed(n)), child) for n in (MAX_TOOLS, honest.tools))
    assert claimed <= real <= 1, (claimed, real)
