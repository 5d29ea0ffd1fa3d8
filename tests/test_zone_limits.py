"""Zone files cannot exhaust a server: YAML that would expand is refused, every limit is a
``file:line`` error, whatever loads can be answered over DNS, and reloads free what they replace."""

from __future__ import annotations

import dataclasses
import gc
import os
import socket
import struct
import textwrap
import tracemalloc
from pathlib import Path

import pytest
from dnslib import EDNS0, QTYPE, RCODE, DNSRecord, EDNSOption

from tooldns.cli import main as tooldns_main
from tooldns.exceptions import ZoneFileError
from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent
from tooldns.protocol.txt import decode_pairs
from tooldns.serving.store import ZoneStore
from tooldns.zone.limits import ZoneLimits
from tooldns.zone.model import SOA, NameServer, Parameter, Summary, Tool, Zone
from tooldns.zone.zonefile import dump_zone, load_zone, parse_zone

from conftest import REPLY_TIMEOUT, ZONES, fresh_subnet, start_tree

HEAD = textwrap.dedent("""\
    origin: a.tools.
    soa: {contact: hostmaster@a.tools, serial: 1}
    nameservers: [{name: ns1.a.tools., address: 127.0.0.1}]
""")

#: a billion-laughs file: nine levels of nine aliases, 525 bytes that expand to 9**9 strings
LAUGHS = HEAD + 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))


def errors_of(text: str, limits: ZoneLimits | None = None) -> list[str]:
    with pytest.raises(ZoneFileError) as info:
        parse_zone(text, "z.yaml", limits)
    return info.value.errors


# -- YAML that would cost more than it weighs --

def test_aliases_are_refused_before_anything_expands():
    tracemalloc.start()
    try:
        errs = errors_of(LAUGHS)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert errs[0] == "z.yaml:4: an anchor (&a); anchors and aliases are not allowed in zone files"
    assert "z.yaml:5: an alias (*a); aliases and anchors are not allowed in zone files: write the value out" in errs
    assert all(e.startswith("z.yaml:") for e in errs)
    assert peak < 4 * 2**20, peak  # expanded, the aliases are a billion strings


def test_a_single_anchor_or_alias_is_refused_with_its_line():
    text = HEAD + "summary: &s {description: Weather}\n"
    assert errors_of(text) == ["z.yaml:4: an anchor (&s); anchors and aliases are not allowed in zone files"]
    aliased = HEAD + "summary: {description: *s}\n"
    assert errors_of(aliased)[0].startswith("z.yaml:4: an alias (*s)")


def test_merge_keys_are_refused():
    text = HEAD + "summary:\n  <<: {description: Weather}\n"
    assert errors_of(text) == ["z.yaml:5: a merge key ('<<'); merge keys are not allowed in zone files"]


@pytest.mark.parametrize("value, tag", [("!!python/name:os.system", "python/name:os.system"),
                                        ("!!binary aGVsbG8=", "binary"), ("!local 1", "!local"),
                                        ("!!set {a, b}", "set")])
def test_tags_other_than_the_core_schemas_are_refused(value, tag):
    errs = errors_of(HEAD + f"ttl: {value}\n")
    assert len(errs) == 1 and errs[0].startswith("z.yaml:4: the tag ") and tag in errs[0], errs


def test_core_tags_and_odd_scalars_still_read():
    zone = parse_zone(HEAD + "ttl: !!int 60\nsummary: {description: =, keywords: [!!str 0123]}\n")
    assert zone.ttl == 60 and zone.summary == Summary("=", ("0123",))


def test_a_number_too_long_to_read_is_an_error_not_a_crash():
    errs = errors_of(HEAD + "ttl: " + "9" * 5000 + "\n")
    assert len(errs) == 1 and errs[0].startswith("z.yaml:4: cannot read '999") and " as int" in errs[0], errs


def test_deep_nesting_is_refused_at_its_line():
    limit = "mappings and lists nested more than 32 deep; at most 32 are allowed (ZoneLimits.max_depth)"
    errs = errors_of(HEAD + "x:\n" + "".join("  " * i + f"- k{i}:\n" for i in range(40)) + "  " * 40 + "- 1\n")
    assert errs == [f"z.yaml:20: {limit}"]
    assert errors_of(HEAD + "x: " + "[" * 40 + "]" * 40 + "\n") == [f"z.yaml:4: {limit}"]
    # Far deeper than any YAML parser goes: refused at its line, without recursion in our code or the
    # parser's, by our limit or by the parser's own (libyaml's, which PyYAML 6.0.4's wheels bring, looks
    # a thousand brackets ahead and stops there first, in its own words)
    (error,) = errors_of(HEAD + "x: " + "[" * 200_000 + "]" * 200_000 + "\n")
    assert error.startswith("z.yaml:4: ")


def test_the_number_of_yaml_values_is_bounded():
    text = HEAD + "corpus_stats: {n_docs: 1, avgdl: 1, df: {" + ", ".join(f"t{i}: 1" for i in range(600)) + "}}\n"
    errs = errors_of(text, ZoneLimits(max_nodes=1000))
    assert errs == ["z.yaml:4: more than 1000 YAML values; at most that many are allowed (ZoneLimits.max_nodes)"]
    assert parse_zone(text, "z.yaml", ZoneLimits(max_nodes=2000)).corpus_stats.n_docs == 1


def test_a_second_document_is_refused():
    assert errors_of(HEAD + "---\n" + HEAD) == ["z.yaml:4: a second YAML document ('---'); a zone file holds one zone"]


def test_errors_past_max_errors_are_counted_not_listed():
    errs = errors_of(HEAD + "".join(f"k{i}: 1\n" for i in range(500)))
    assert len(errs) == 101
    assert errs[99].startswith("z.yaml:103: unknown key 'k99'")
    assert errs[100] == ("z.yaml:104: 400 more problems from here on are not listed (the first 100 are; "
                         "ZoneLimits.max_errors)")


def test_a_lone_surrogate_is_refused():  # it could be read but never encoded into a TXT record
    errs = errors_of(HEAD + 'summary: {description: "rain \\ud800"}\n')
    assert len(errs) == 1 and errs[0].startswith("z.yaml:4: "), errs


def test_long_values_are_cut_short_in_messages():
    errs = errors_of(HEAD + "ttl: " + "x" * 100_000 + "\n")
    assert len(errs) == 1 and len(errs[0]) < 200, errs


# -- the file's size --

def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "big.yaml"
    with open(path, "wb") as fh:
        fh.truncate(65 * 2**20)  # sparse: 65 MiB that take no disk and would take seconds to parse
    with pytest.raises(ZoneFileError) as info:
        load_zone(path)
    assert info.value.errors == [f"{path}:1: the file is {65 * 2**20} bytes; at most {64 * 2**20} bytes are allowed "
                                 "(ZoneLimits.max_file_bytes)"]


def test_the_size_limit_is_the_operators_to_set(tmp_path):
    path = tmp_path / "z.yaml"
    path.write_text(HEAD + "summary: {description: " + "weather " * 200 + "}\n", encoding="utf-8")
    assert load_zone(path).origin == "a.tools."
    with pytest.raises(ZoneFileError) as info:
        load_zone(path, limits=ZoneLimits(max_file_bytes=1000))
    assert info.value.errors[0].startswith(f"{path}:1: the file is {path.stat().st_size} bytes; at most 1000 bytes")
    assert errors_of(path.read_text(encoding="utf-8"), ZoneLimits(max_file_bytes=1000))[0].startswith("z.yaml:1: ")


# -- counts and text lengths --

ZONE = textwrap.dedent("""\
    origin: a.tools.
    soa: {contact: h@a.tools, serial: 1}
    nameservers:
      - {name: ns1.a.tools., address: 127.0.0.1}
    summary:
      description: Weather
      keywords: [rain, wind]
      corpus: rain wind sun
    children:
      - label: b
        summary: {description: B tools}
        nameservers: [{name: ns1.b.a.tools., address: 127.0.0.2}]
    tools:
      - label: t
        name: T
        service: http
        target: t.example.
        port: 443
        description: Today's weather
        endpoint: https://t.example/
        id: t-1
        parameters:
          - {name: city, type: string, description: A city}
""")

SMALL = ZoneLimits(max_tools=1, max_children=1, max_nameservers=1, max_parameters=1, max_keywords=2,
                   max_description_bytes=15, max_name_bytes=1, max_endpoint_bytes=18, max_parameter_bytes=6,
                   max_summary_bytes=7, max_keyword_bytes=4, max_corpus_bytes=13, max_text_bytes=9)


def test_a_zone_at_every_limit_loads():
    zone = parse_zone(ZONE, "z.yaml", SMALL)
    assert zone.tools[0].description == "Today's weather" and zone.summary.keywords == ("rain", "wind")


@pytest.mark.parametrize("old, new, line, message", [
    ("name: T\n", "name: Tt\n", 15, "tool 't' 'name' is 2 bytes long; at most 1 are allowed (ZoneLimits.max_name_bytes)"),
    ("description: Today's weather\n", "description: Today's weather!\n", 19,
     "tool 't' 'description' is 16 bytes long; at most 15 are allowed (ZoneLimits.max_description_bytes)"),
    ("endpoint: https://t.example/\n", "endpoint: https://t.example/x\n", 20,
     "tool 't' 'endpoint' is 19 bytes long; at most 18 are allowed (ZoneLimits.max_endpoint_bytes)"),
    ("id: t-1\n", "id: t-12345678\n", 21,
     "tool 't' 'id' is 10 bytes long; at most 9 are allowed (ZoneLimits.max_text_bytes)"),
    ("description: A city", "description: A city!", 23,
     "parameter 'description' is 7 bytes long; at most 6 are allowed (ZoneLimits.max_parameter_bytes)"),
    ("type: string", "type: stringssss", 23,
     "parameter 'type' is 10 bytes long; at most 9 are allowed (ZoneLimits.max_text_bytes)"),
    ("  description: Weather\n", "  description: Weather!\n", 6,
     "summary 'description' is 8 bytes long; at most 7 are allowed (ZoneLimits.max_summary_bytes)"),
    ("corpus: rain wind sun", "corpus: rain wind suns", 8,
     "summary 'corpus' is 14 bytes long; at most 13 are allowed (ZoneLimits.max_corpus_bytes)"),
    ("[rain, wind]", "[rain, winds]", 7, "keyword in summary is 5 bytes long; at most 4 are allowed (ZoneLimits.max_keyword_bytes)"),
    ("[rain, wind]", "[rain, wind, sun]", 7, "'keywords' in summary has 3 items; at most 2 are allowed (ZoneLimits.max_keywords)"),
    ("      - {name: city, type: string, description: A city}\n",
     "      - {name: city, type: string, description: A city}\n      - {name: day}\n", 22,
     "'parameters' in tool 't' has 2 items; at most 1 are allowed (ZoneLimits.max_parameters)"),
    ("  - {name: ns1.a.tools., address: 127.0.0.1}\n",
     "  - {name: ns1.a.tools., address: 127.0.0.1}\n  - {name: ns2.a.tools., address: 127.0.0.3}\n", 3,
     "'nameservers' in the zone has 2 items; at most 1 are allowed (ZoneLimits.max_nameservers)"),
])
def test_each_limit_is_a_file_line_error(old, new, line, message):
    assert ZONE.count(old) == 1
    assert errors_of(ZONE.replace(old, new), SMALL) == [f"z.yaml:{line}: {message}"]


def test_too_many_tools_and_children():
    text = ZONE.replace("children:\n", "children:\n  - {label: c, summary: {description: C}, nameservers: "
                                       "[{name: ns1.c.a.tools., address: 127.0.0.4}]}\n")
    text = text.replace("tools:\n", "tools:\n  - {label: u, name: U, service: http, target: u.example., port: 1, "
                                    "description: U}\n")
    assert errors_of(text, SMALL) == [
        "z.yaml:9: 'children' in the zone has 2 items; at most 1 are allowed (ZoneLimits.max_children)",
        "z.yaml:14: 'tools' in the zone has 2 items; at most 1 are allowed (ZoneLimits.max_tools)"]


def test_lengths_are_utf8_bytes():
    assert parse_zone(ZONE.replace("name: T\n", "name: 香\n"), "z.yaml", dataclasses.replace(SMALL, max_name_bytes=3))
    errs = errors_of(ZONE.replace("name: T\n", "name: 香\n"), dataclasses.replace(SMALL, max_name_bytes=2))
    assert errs == ["z.yaml:15: tool 't' 'name' is 3 bytes long; at most 2 are allowed (ZoneLimits.max_name_bytes)"]


def test_an_soa_contact_that_cannot_be_a_name_is_refused():
    text = ZONE.replace("h@a.tools", "x" * 70 + "@a.tools")
    errs = errors_of(text)
    assert len(errs) == 1 and errs[0].startswith("z.yaml:2: soa contact 'xxx") and "part of 70 octets" in errs[0]
    assert parse_zone(ZONE.replace("h@", "first.last@")).soa.rname == "first\\.last.a.tools."


def test_tooldns_check_reports_the_limits(tmp_path, capsys):
    path = tmp_path / "a.tools.yaml"
    path.write_text(ZONE.replace("description: Today's weather", "description: " + "x" * 100_000), encoding="utf-8")
    assert tooldns_main(["check", str(path)]) == 1
    assert capsys.readouterr().err.strip() == (f"{path}:19: tool 't' 'description' is 100000 bytes long; at most 8192 "
                                               "are allowed (ZoneLimits.max_description_bytes)")


def test_every_shipped_zone_loads_under_the_default_limits():
    assert len([load_zone(p) for p in sorted(ZONES.glob("*.yaml"))]) == 25


# -- whatever loads can be answered --

def _at(limit: int, char: str = "\U0001F600") -> str:
    """Text of *limit* UTF-8 bytes in four-byte characters: the most TXT strings per byte."""
    return char * (limit // 4) + "x" * (limit % 4)


def _largest_tool_zone(subnet: str) -> Zone:
    """A zone whose one tool has every text, and as many parameters, as the default limits allow,
    under names as long as DNS allows."""
    lim = ZoneLimits()
    origin = f"{'o' * 60}.{'r' * 60}.{'g' * 50}.tools."  # 180 octets: the tool's own name is 255
    params = tuple(Parameter(_at(lim.max_text_bytes), _at(lim.max_text_bytes), _at(lim.max_parameter_bytes), True)
                   for _ in range(lim.max_parameters))
    tool = Tool(label="t" * 63, name=_at(lim.max_name_bytes), service="http", target=origin, port=443,
                description=_at(lim.max_description_bytes), endpoint=_at(lim.max_endpoint_bytes),
                id=_at(lim.max_text_bytes), parameters=params)
    return Zone(origin=origin, soa=SOA(f"ns1.{origin}", f"hostmaster.{origin}"),
                nameservers=(NameServer(f"ns1.{origin}", f"{subnet}.1"),),
                summary=Summary(_at(lim.max_summary_bytes), ("weather",)), tools=(tool,))


def _ask_tcp(address: tuple[str, int], qname: str, qtype: str, intent: str | None = None) -> DNSRecord:
    q = DNSRecord.question(qname, qtype)
    q.add_ar(EDNS0(udp_len=1232, opts=[EDNSOption(INTENT_OPTION_CODE, encode_intent(intent, 8))] if intent else []))
    wire = bytes(q.pack())
    with socket.create_connection(address, timeout=REPLY_TIMEOUT) as sock:
        sock.sendall(struct.pack("!H", len(wire)) + wire)
        length = struct.unpack("!H", sock.recv(2, socket.MSG_WAITALL))[0]
        return DNSRecord.parse(sock.recv(length, socket.MSG_WAITALL))


@pytest.mark.integration
def test_the_largest_tool_the_limits_allow_is_answered_over_dns(tmp_path):
    zonedir = tmp_path / "zones"
    zonedir.mkdir()
    zone = _largest_tool_zone(fresh_subnet())
    (zonedir / "big.yaml").write_text(dump_zone(zone), encoding="utf-8")
    assert load_zone(zonedir / "big.yaml") == zone  # at every limit, and loaded
    tool = zone.tools[0]
    tree = start_tree(zonedir)
    try:
        address = tree.root()
        txt = _ask_tcp(address, tool.owner(zone.origin), "TXT")
        anything = _ask_tcp(address, tool.owner(zone.origin), "ANY")
        ranked = _ask_tcp(address, f"_http._tcp.{zone.origin}", "SRV", intent="weather")
    finally:
        tree.stop()
    for reply in (txt, anything, ranked):
        assert RCODE[reply.header.rcode] == "NOERROR" and not reply.header.tc, reply.header
    pairs = decode_pairs(txt.rr[0].rdata.data)
    assert pairs["desc"] == tool.description and pairs["name"] == tool.name and pairs["id"] == tool.id
    assert pairs["endpoint"] == tool.endpoint
    # one string per parameter, cut at 240 bytes on a character boundary (never split into two)
    params = [s for s in txt.rr[0].rdata.data if s.startswith(b"param=")]
    assert len(params) == len(tool.parameters) and all(len(s) <= 255 for s in params)
    assert all(s.decode("utf-8") for s in params)
    assert len(txt.pack()) > 20_000  # the limits are not far below what a message can carry
    assert {QTYPE[rr.rtype] for rr in anything.rr} == {"SRV", "TXT"}
    assert [QTYPE[rr.rtype] for rr in ranked.rr] == ["SRV"] and ranked.ar[0].rtype == QTYPE.TXT


# -- reloads free what they replace --

def _generated(n_tools: int, serial: int) -> str:
    tools = "".join(f"  - {{label: t{i}, name: Tool {i}, service: http, target: t.example., port: 443, "
                    f"description: 'tool {i} reads rain, wind and sun {i * 7}', "
                    f"parameters: [{{name: q, description: what {i}}}]}}\n" for i in range(n_tools))
    return HEAD.replace("serial: 1", f"serial: {serial}") + "tools:\n" + tools


@pytest.mark.slow
def test_reloads_do_not_keep_what_they_replace(tmp_path):
    path = tmp_path / "a.tools.yaml"
    path.write_text(_generated(200, 1), encoding="utf-8")
    store = ZoneStore(path)

    def reload(i: int) -> None:
        path.write_text(_generated(200, i), encoding="utf-8")
        os.utime(path, ns=(i * 10**9, i * 10**9))  # a new stamp even within the clock's tick
        assert store.check() == "reloaded", store.last_error

    tracemalloc.start()
    try:
        for i in range(2, 5):
            reload(i)
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for i in range(5, 25):
            reload(i)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert store.zone.soa.serial == 24
    assert grown < 2**20, grown  # before the fix: about 1 MB a reload for this zone
