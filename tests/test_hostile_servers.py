"""What a malicious or broken server may send a resolver, and what the resolver makes of it.

Found by probing the client with hostile fake servers (2026-12-02). The walk is driven with hand-made
replies (it is I/O-free); the drivers and the CLI face a real UDP socket that never answers.
"""

from __future__ import annotations

import socket
import subprocess
import sys

import dns.edns
import dns.flags
import dns.message
import dns.rcode
import dns.rrset
import pytest

from resolver_client import AsyncResolver, LimitExceeded, Resolver, ResolverError, Walk
from resolver_client.cli import format_trace
from resolver_client.message import Record, read_name
from resolver_client.resolver import parse_server
from resolver_client.validate import Bogus, TrustAnchor, Validator, load_anchor
from resolver_client.walk import MAX_SERVERS_TRIED

from conftest import ROOT as REPO, WAIT_TIMEOUT
from test_walk import ROOT, answer, msg, referral, txt


def _referral_to(q, zone: str, addresses: list[str], pairs=(("rank", 1), ("score", 1.0))) -> bytes:
    """A referral to *zone* whose name servers are *addresses* (one name server name each)."""
    r = dns.message.make_response(msg(q))
    r.flags &= ~dns.flags.AA
    for i, address in enumerate(addresses):
        r.authority.append(dns.rrset.from_text(zone, 3600, "IN", "NS", f"ns{i}.{zone}"))
        r.additional.append(dns.rrset.from_text(f"ns{i}.{zone}", 3600, "IN", "A", address))
    r.additional.append(txt(zone, list(pairs)))
    return r.to_wire(max_size=65535)


@pytest.mark.parametrize("child", ["x\\032y.tools.", "x\\027y.tools.", "x-.tools.", "a" * 63 + ".tools."])
def test_a_child_name_no_tree_zone_may_have_is_skipped_not_a_crash(child):
    """DNS allows a space, ESC or a 63-octet label; a cursor name cannot hold them (``_`` makes 64)."""
    walk = Walk("weather", root=ROOT)
    [q] = walk.start()
    r = dns.message.make_response(msg(q))
    r.flags &= ~dns.flags.AA
    r.authority.append(dns.rrset.from_text(child, 3600, "IN", "NS", "ns1.tools."))
    r.additional.append(dns.rrset.from_text("ns1.tools.", 3600, "IN", "A", "127.0.0.2"))
    assert walk.take(q, r.to_wire()) == []
    [ref] = walk.trace[0].referrals
    assert not ref.followed and ref.why_not.startswith("bad name (")
    assert walk.result().tools == []


def test_name_servers_tried_in_turn_are_distinct_capped_and_counted_as_queries():
    """A referral naming thousands of dead name servers cost a timeout each, past max_queries."""
    walk = Walk("weather", root=ROOT, max_queries=50)
    [q] = walk.start()
    addresses = [f"127.0.1.{i % 200}" for i in range(400)]  # 200 distinct, each twice
    [child] = walk.take(q, _referral_to(q, "weather.tools.", addresses))
    assert len(child.servers) == 200
    asked = [child.server]
    nxt = [child]
    while nxt:
        [c] = nxt
        nxt = walk.take(c, None, TimeoutError("no reply"))
        asked += [n.server for n in nxt]
    assert len(set(asked)) == MAX_SERVERS_TRIED and len(asked) == MAX_SERVERS_TRIED + 1  # the last asked twice
    assert walk.unreachable == ["weather.tools."]
    # and max_queries bounds retries too
    walk = Walk("weather", root=ROOT, max_queries=3)
    [q] = walk.start()
    [child] = walk.take(q, _referral_to(q, "weather.tools.", addresses))
    tries = 1
    while (nxt := walk.take(child, None, TimeoutError("no reply"))):
        [child] = nxt
        tries += 1
    assert walk.stats.queries == 3 and tries == 2 and walk.limited


@pytest.mark.parametrize("bad", ["inf", "-inf", "nan", "1e999"])
def test_scores_that_are_no_finite_number_are_missing(bad):
    """An infinite score put a zone's tool above all and, in get_all, every other tool under the floor."""
    walk = Walk("weather", root=ROOT, floor=0.3)
    [q] = walk.start()
    honest, evil = walk.take(q, referral(q, [("history.tools.", "127.0.0.4", 1, 2.0, "functional"),
                                             ("evil.tools.", "127.0.0.5", 2, 1.0, "functional")]))
    walk.take(honest, answer(honest, [("h1", "h1.example.", 443, 1, 0.9, "H1"), ("h2", "h2.example.", 443, 2, 0.5, "H2")]))
    walk.take(evil, answer(evil, [("e1", "e1.example.", 443, 1, bad, "Evil")]))
    res = walk.result()
    assert [t.name for t in res.tools][:2] == ["H1", "H2"]
    assert [t.score for t in res.tools if t.name == "Evil"] in ([], [None])


def test_a_leaf_gives_at_most_the_tools_asked_and_exclude_holds_across_skipped_levels():
    walk = Walk("weather", k=3, root=ROOT, exclude=["noaa"])
    [q] = walk.start()
    nxt = walk.take(q, referral(q, [("api.noaa.tools.", "127.0.0.6", 1, 3.0, "functional"),
                                    ("forecast.tools.", "127.0.0.3", 2, 1.0, "functional")]))
    assert [n.zone for n in nxt] == ["forecast.tools."]
    assert walk.trace[0].referrals[0].why_not == "excluded"
    [leaf] = nxt
    flood = [(f"t{i}", f"t{i}.example.", 443, i + 1, 1.0 / (i + 1), f"T{i}") for i in range(10)]
    walk.take(leaf, answer(leaf, flood))
    assert [t.name for t in walk.result().tools] == ["T0", "T1", "T2"]


def test_texts_from_servers_print_without_terminal_escapes():
    """EDE texts, zone names, kinds and notes in --trace and in errors: escape sequences dropped."""
    walk = Walk("weather", root=ROOT)
    [q] = walk.start()
    esc = "\x1b]0;PWNED\x07\x1b[2J"
    r = dns.message.make_response(msg(q))
    r.flags &= ~dns.flags.AA
    r.authority.append(dns.rrset.from_text("x\\027y.tools.", 3600, "IN", "NS", "ns1.tools."))
    r.additional.append(txt("x\\027y.tools.", [("rank", 1), ("score", 1.0), ("kind", esc)]))
    walk.take(q, r.to_wire())
    trace = format_trace(walk.result())
    assert "\x1b" not in trace and "\x07" not in trace and "PWNED" in trace
    walk = Walk("weather", root=ROOT)
    [q] = walk.start()
    r = dns.message.make_response(msg(q))
    r.set_rcode(dns.rcode.FORMERR)
    r.use_edns(0, 0, 1232, options=[dns.edns.EDEOption(dns.edns.EDECode.OTHER, f"bad {esc} intent")])
    walk.take(q, r.to_wire())
    with pytest.raises(ResolverError) as rejected:
        walk.result()
    assert "\x1b" not in str(rejected.value) and "bad ]0;PWNED[2J intent" in str(rejected.value)


def test_names_with_dots_or_octets_outside_ascii_in_labels_read_as_they_came():
    assert read_name(b"\x03a.b\x05tools\x00", 0) == ("a\\.b.tools.", 11)  # one label, not a.b.tools.
    assert read_name(b"\x02\xffx\x05Tools\x00", 0) == ("\\255x.tools.", 10)
    assert read_name(b"\x05tools\x00", 0) == ("tools.", 7)
    assert read_name(b"\x00", 0) == (".", 1)


def test_the_validator_fails_closed_on_records_dnspython_cannot_take():
    """A record of class CH beside an RRset is not the zone's data; a name dnspython refuses makes the
    reply bogus, never an exception out of resolve()."""
    keys = dns.rrset.from_text("tools.", 300, "IN", "DNSKEY", "257 3 15 " + "A" * 44)
    validator = Validator(TrustAnchor("tools.", list(keys), []))
    validator.zones["tools."] = type(validator._zone("tools."))(status="secure", keys=keys)
    stray = Record("tools.", 16, 0, (b"x",), rdclass=3, wire=b"\x01x", start=0, end=2)
    validator.check("tools.", [stray], [("tools.", 16)])  # nothing of class IN to check: no error
    odd = Record("\\255" * 64 + ".tools.", 16, 0, (b"x",), wire=b"\x01x", start=0, end=2)
    with pytest.raises(Bogus, match="dnspython cannot take"):
        validator.check("tools.", [odd], [(odd.name, 16)])


@pytest.mark.integration
def test_bad_servers_timeouts_and_anchors_are_resolver_errors(tmp_path):
    for text in ("127.0.0.1:99999", "127.0.0.1:-1", "127.0.0.1:0", "[::1]x", "[::1]:port", "", " ", ":5300",
                 "127.0.0.1:5354:1", "[127.0.0.1]:53", "[]:53"):
        with pytest.raises(ResolverError, match="bad port|bad server"):
            parse_server(text)
    assert parse_server("[::1]:53") == ("::1", 53) and parse_server("[::1]") == ("::1", 5300)
    assert parse_server("::1") == ("::1", 5300) and parse_server(("127.0.0.1", 53)) == ("127.0.0.1", 53)
    assert parse_server("localhost:53")[0] in ("127.0.0.1", "::1")  # a host name: its address, found once
    for bad in ("nan", float("nan"), float("inf"), 1e308, 0, -1, "soon"):
        with pytest.raises(ResolverError, match="a number of seconds above 0"):
            Resolver(timeout=bad)
    with pytest.raises(ResolverError, match="lifetime must be"):
        Resolver(lifetime=float("nan"))
    anchor = tmp_path / "root.key"
    anchor.write_bytes(b"tools. DNSKEY \xff\xfe")
    with pytest.raises(ResolverError, match="is not text"):
        load_anchor(str(anchor))
    for args, code, said in ((["--timeout", "nan"], 2, "timeout must be"), (["--timeout", "1e308"], 2, "timeout must be"),
                             (["--root", "127.0.0.1:99999"], 3, "bad port"),
                             (["--root", ""], 3, "no host"), (["--root", "127.0.0.1:5354:1"], 3, "not an IPv6 address"), (["--top", "-1"], 2, "at least 1")):
        proc = subprocess.run([sys.executable, "-m", "resolver_client.cli", "weather", *args], capture_output=True,
                              text=True, cwd=REPO, timeout=WAIT_TIMEOUT)
        assert proc.returncode == code and said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.integration
@pytest.mark.parametrize("run", ["sync", "async"])
def test_a_resolution_ends_at_its_lifetime_whatever_the_servers_do(run):
    """Root name servers that never answer: the walk gives up at its lifetime (LimitExceeded), not
    after a timeout for every name server named."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind(("127.0.0.1", 0))
        roots = [("127.0.0.1", silent.getsockname()[1])] * 20
        resolver = Resolver(root=roots, timeout=0.3, lifetime=0.5, cache=False)
        if run == "sync":
            with pytest.raises(LimitExceeded, match="lifetime of 0.5 s reached"):
                resolver.resolve("weather")
        else:
            import asyncio

            from resolver_client import AsyncResolver

            aresolver = AsyncResolver(root=roots, timeout=0.3, lifetime=0.5, cache=False)
            with pytest.raises(LimitExceeded, match="lifetime of 0.5 s reached"):
                asyncio.run(aresolver.resolve("weather"))


def test_max_walks_is_a_whole_number_of_at_least_one_or_none():
    from resolver_client.resolver import MAX_WALKS

    assert Resolver().max_walks == AsyncResolver().max_walks == MAX_WALKS
    assert Resolver(max_walks=None).max_walks is None and AsyncResolver(max_walks=1).max_walks == 1
    for bad in (0, -1, 2.5, True, "8"):
        with pytest.raises(ResolverError, match="max_walks must be a whole number"):
            Resolver(max_walks=bad)
