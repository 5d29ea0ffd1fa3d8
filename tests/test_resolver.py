"""Resolver level: call the zone resolver's resolve() with built requests, check the replies."""

import pytest
from dnslib import EDNS0, QTYPE, RCODE, DNSRecord, EDNSOption

from tooldns.serving.index import ZoneIndex
from tooldns.protocol.ede import EDE_OPTION_CODE, decode_ede
from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent
from tooldns.protocol.meta import META_OPTION_CODE, decode_meta
from tooldns.protocol.txt import decode_pairs
from tooldns.serving.resolver import StaticSource, ZoneResolver
from tooldns.zone.zonefile import load_zone

from conftest import ZONES


@pytest.fixture(scope="module")
def weather():
    return ZoneResolver(StaticSource(ZoneIndex(load_zone(ZONES / "weather.tools.yaml"))))


@pytest.fixture(scope="module")
def history():
    return ZoneResolver(StaticSource(ZoneIndex(load_zone(ZONES / "history.weather.tools.yaml"))))


def ask(resolver, name, qtype="SRV", intent=None, k=3, edns=True, option=None):
    q = DNSRecord.question(name, qtype)
    q.header.rd = 0
    if edns:
        opts = []
        if intent is not None:
            opts.append(EDNSOption(INTENT_OPTION_CODE, encode_intent(intent, k)))
        if option is not None:
            opts.append(EDNSOption(INTENT_OPTION_CODE, option))
        q.add_ar(EDNS0(udp_len=1232, opts=opts))
    reply = resolver.resolve(q, None)
    assert reply.header.id == q.header.id and reply.header.qr == 1
    return DNSRecord.parse(reply.pack())


def opt_of(reply):
    return next((rr for rr in reply.ar if rr.rtype == QTYPE.OPT), None)


def option(reply, code):
    opt = opt_of(reply)
    return next((o.data for o in opt.rdata if o.code == code), None) if opt else None


def txt_by_owner(reply):
    return {str(rr.rname): decode_pairs(rr.rdata.data) for rr in reply.ar if rr.rtype == QTYPE.TXT}


def test_referral_top_k_ranked(weather):
    r = ask(weather, "_any._tcp._weather.tools.", intent="historical weather archive for past dates", k=2)
    assert r.header.rcode == RCODE.NOERROR and r.header.aa == 0 and r.header.ra == 0
    assert not r.rr
    ns_owners = [str(rr.rname) for rr in r.auth if rr.rtype == QTYPE.NS]
    assert ns_owners[0] == "history.weather.tools."
    assert len(ns_owners) <= 2
    txt = txt_by_owner(r)
    assert txt["history.weather.tools."]["rank"] == "1"
    scores = [float(txt[o]["score"]) for o in ns_owners]
    assert scores == sorted(scores, reverse=True)
    # glue for every referred name server, with the zone's TTL; ranking data with TTL 0
    glue = {str(rr.rname) for rr in r.ar if rr.rtype == QTYPE.A}
    assert "ns1.history.weather.tools." in glue
    assert all(rr.ttl == 0 for rr in r.ar if rr.rtype == QTYPE.TXT)
    assert all(rr.ttl == 3600 for rr in r.auth)
    meta = decode_meta(option(r, META_OPTION_CODE))
    assert meta.scorer == "bm25" and meta.cache_ttl == 30


def test_organisation_kind_in_referral(weather):
    r = ask(weather, "_any._tcp._weather.tools.", intent="Hong Kong Observatory typhoon warning", k=1)
    txt = txt_by_owner(r)
    assert txt["hko.weather.tools."]["kind"] == "organisation"


def test_without_intent_all_children_and_self(weather):
    r = ask(weather, "_any._tcp._weather.tools.")
    owners = [str(rr.rname) for rr in r.auth]
    assert set(owners) >= {"forecast.weather.tools.", "history.weather.tools.", "hko.weather.tools.", "noaa.weather.tools."}
    # the zone's own tool (wttr.in) stays reachable: a "self" entry
    assert "weather.tools." in owners
    assert txt_by_owner(r)["weather.tools."]["kind"] == "self"
    assert option(r, META_OPTION_CODE) is None


def test_self_only_offered_for_the_asked_service(weather):
    owners = [str(rr.rname) for rr in ask(weather, "_mcp._tcp._weather.tools.").auth]
    assert "weather.tools." not in owners  # wttr.in is http, not mcp


def test_leaf_cursor_answers_tools_through_cname(history):
    r = ask(history, "_any._tcp._history.weather.tools.", intent="hourly temperature back to 1940", k=2)
    assert r.header.aa == 1 and r.header.rcode == RCODE.NOERROR
    cname = [rr for rr in r.rr if rr.rtype == QTYPE.CNAME]
    assert str(cname[0].rdata.label) == "_any._tcp.history.weather.tools."
    srv = [rr for rr in r.rr if rr.rtype == QTYPE.SRV]
    assert 1 <= len(srv) <= 2
    assert [rr.rdata.priority for rr in srv] == list(range(1, len(srv) + 1))  # priority = rank
    assert all(rr.ttl == 0 for rr in srv)
    txt = txt_by_owner(r)
    best = [v for v in txt.values() if v["rank"] == "1"][0]
    assert best["name"] == "Open-Meteo Historical Weather API"
    assert best["endpoint"].startswith("https://archive-api.open-meteo.com")


def test_expanded_name_plain_srv_client(history):
    r = ask(history, "_http._tcp.history.weather.tools.", edns=False)
    assert r.header.aa == 1
    srv = [rr for rr in r.rr if rr.rtype == QTYPE.SRV]
    assert len(srv) == 4 and all(rr.ttl == 3600 for rr in srv)
    assert opt_of(r) is None  # no OPT in the query, none in the reply


def test_tool_own_name_has_full_metadata(history):
    r = ask(history, "open-meteo-archive._http._tcp.history.weather.tools.", "TXT")
    pairs = decode_pairs(r.rr[0].rdata.data)
    assert "start_date" in pairs["param"] and pairs["desc"].startswith("Historical weather from 1940")


def test_apex_soa_ns_and_addresses(weather):
    r = ask(weather, "weather.tools.", "SOA")
    assert r.header.aa == 1 and r.rr[0].rtype == QTYPE.SOA
    r = ask(weather, "weather.tools.", "NS")
    assert str(r.rr[0].rdata.label) == "ns1.weather.tools."
    assert str(r.ar[0].rdata) == "127.0.0.2"
    r = ask(weather, "ns1.weather.tools.", "A")
    assert str(r.rr[0].rdata) == "127.0.0.2"


def test_nxdomain_nodata_refused(weather):
    r = ask(weather, "nope.weather.tools.", "A")
    assert r.header.rcode == RCODE.NXDOMAIN and r.header.aa == 1 and r.auth[0].rtype == QTYPE.SOA
    assert r.auth[0].ttl == 300  # negative TTL: min(SOA TTL, minimum)
    r = ask(weather, "weather.tools.", "MX")
    assert r.header.rcode == RCODE.NOERROR and not r.rr and r.auth[0].rtype == QTYPE.SOA
    r = ask(weather, "_tcp.weather.tools.", "A")  # empty non-terminal
    assert r.header.rcode == RCODE.NOERROR and r.auth[0].rtype == QTYPE.SOA
    r = ask(weather, "example.com.", "A")
    assert r.header.rcode == RCODE.REFUSED and r.header.aa == 0


def test_names_below_a_child_are_referred(weather):
    r = ask(weather, "_mcp._tcp.history.weather.tools.")
    assert r.header.aa == 0 and str(r.auth[0].rname) == "history.weather.tools."
    r = ask(weather, "_mcp._tcp._history.weather.tools.")
    assert str(r.auth[0].rname) == "history.weather.tools."


def test_case_insensitive_qname(weather):
    a = ask(weather, "_ANY._TCP._Weather.TOOLS.", intent="past weather", k=1)
    b = ask(weather, "_any._tcp._weather.tools.", intent="past weather", k=1)
    assert [str(rr.rname) for rr in a.auth] == [str(rr.rname) for rr in b.auth]


@pytest.mark.parametrize("data, text", [
    (bytes.fromhex("00000503") + b"abc", "says 5 bytes but 3 follow"),
    (bytes.fromhex("00000300") + b"abc", "K is 0"),
    (bytes.fromhex("07000303") + b"abc", "version 7"),
    (bytes.fromhex("00000203") + b"\xc3\x28", "not valid UTF-8"),
])
def test_malformed_intent_formerr_with_ede(weather, data, text):
    r = ask(weather, "_any._tcp._weather.tools.", option=data)
    assert r.header.rcode == RCODE.FORMERR
    code, message = decode_ede(option(r, EDE_OPTION_CODE))
    assert text in message


def test_two_intent_options_formerr(weather):
    r = ask(weather, "_any._tcp._weather.tools.", intent="a", option=encode_intent("b", 1))
    assert r.header.rcode == RCODE.FORMERR


def test_badvers(weather):
    q = DNSRecord.question("weather.tools.", "SOA")
    q.add_ar(EDNS0(udp_len=1232, version=1))
    r = DNSRecord.parse(weather.resolve(q, None).pack())
    opt = opt_of(r)
    assert ((opt.ttl >> 24) << 4) | r.header.rcode == 16


def test_internal_error_becomes_servfail():
    class Broken:
        @property
        def index(self):
            raise RuntimeError("boom")

    r = ZoneResolver(Broken()).resolve(DNSRecord.question("weather.tools.", "SOA"), None)
    assert r.header.rcode == RCODE.SERVFAIL


def test_k_capped_and_pruning(history):
    r = ask(history, "_any._tcp._history.weather.tools.", intent="open meteo", k=200)
    srv = [rr for rr in r.rr if rr.rtype == QTYPE.SRV]
    assert len(srv) <= 4  # only 4 tools, K=200 is capped without error
    meta = decode_meta(option(r, META_OPTION_CODE))
    # tools that do not mention "open meteo" at all score 0 and are pruned
    assert len(srv) < 4 and meta.pruned
