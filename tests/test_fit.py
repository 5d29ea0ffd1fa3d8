"""The fit option: a leaf asked for more tools than fit one datagram answers with the best that fit
(TRIMMED in the meta option) instead of a truncated reply; over real servers on loopback, UDP and TCP,
signed and unsigned."""

from __future__ import annotations

import dns.edns
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

from conftest import REPLY_TIMEOUT, ZONES, copy_tree, fresh_subnet, start_tree
from resolver_client import Resolver
from tooldns.dnssec.manage import keygen_tree
from tooldns.dnssec.keys import load_keys
from tooldns.exceptions import IntentError
from tooldns.protocol.brief import BRIEF_OPTION_CODE
from tooldns.protocol.fit import FIT_OPTION_CODE, decode_fit, encode_fit
from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent
from tooldns.protocol.meta import META_OPTION_CODE, decode_meta
from tooldns.protocol.txt import decode_pairs
from resolver_client.validate import read_anchor

LEAF = "docs.productivity.tools."  # seven tools with long descriptions: more than one datagram holds
INTENT = "create and edit files, pages and documents"


def test_the_option_carries_nothing():
    assert encode_fit() == b"" and decode_fit(b"") is True
    with pytest.raises(IntentError, match="no data"):
        decode_fit(b"\x01")


def _ask(tree, *, fit: bytes | None, tcp: bool = False, k: int = 32, brief: bool = False, do: bool = False,
         payload: int = 1232) -> dns.message.Message:
    options = [dns.edns.GenericOption(INTENT_OPTION_CODE, encode_intent(INTENT, k))]
    if fit is not None:
        options.append(dns.edns.GenericOption(FIT_OPTION_CODE, fit))
    if brief:
        options.append(dns.edns.GenericOption(BRIEF_OPTION_CODE, b""))
    query = dns.message.make_query(f"_any._tcp.{LEAF}", "SRV", use_edns=0, payload=payload, options=options,
                                   want_dnssec=do)
    query.flags = 0
    address = tree.tree.addresses[LEAF][0]
    if tcp:
        return dns.query.tcp(query, address, port=tree.tree.port, timeout=REPLY_TIMEOUT)
    return dns.query.udp(query, address, port=tree.tree.port, timeout=REPLY_TIMEOUT)


def _meta(msg: dns.message.Message):
    return next(decode_meta(o.to_wire()) for o in msg.options if o.otype == META_OPTION_CODE)


def _names(msg: dns.message.Message) -> list[str]:
    pairs = [decode_pairs(list(rd.strings)) for rrset in msg.additional if rrset.rdtype == dns.rdatatype.TXT
             for rd in rrset]
    return [p["name"] for p in sorted(pairs, key=lambda p: int(p["rank"]))]


def _counter(tree, name: str) -> int:
    query = dns.message.make_query("stats.tooldns.", "TXT", "CH")
    reply = dns.query.udp(query, tree.tree.addresses[LEAF][0], port=tree.tree.port, timeout=REPLY_TIMEOUT)
    pairs = dict(s.decode().split("=", 1) for rrset in reply.answer for rd in rrset for s in rd.strings)
    return int(pairs[name])


def test_a_leaf_answers_the_best_tools_that_fit_instead_of_truncating(demo_tree):
    whole = _ask(demo_tree, fit=None, tcp=True)
    assert len(whole.to_wire()) > 1232 and not _meta(whole).trimmed
    truncated = _ask(demo_tree, fit=None)
    assert truncated.flags & dns.flags.TC and not truncated.answer  # as before, without the option
    for payload in (1232, 900, 600):
        fitted = _ask(demo_tree, fit=b"", payload=payload)
        assert fitted.rcode() == dns.rcode.NOERROR and not fitted.flags & dns.flags.TC
        assert len(fitted.to_wire()) <= payload and _meta(fitted).trimmed
        names = _names(fitted)
        assert 0 < len(names) < len(_names(whole)) and names == _names(whole)[:len(names)]  # the best, in order
        assert len(fitted.answer[0]) == len(names)  # one SRV record per tool kept
    assert _counter(demo_tree, "trimmed") == 3  # what the zone's counters say (dig CH TXT stats.tooldns.)
    assert len(_names(_ask(demo_tree, fit=b"", brief=True))) > len(_names(_ask(demo_tree, fit=b"")))
    over_tcp = _ask(demo_tree, fit=b"", tcp=True)  # TCP holds them all: nothing trimmed
    assert _names(over_tcp) == _names(whole) and not _meta(over_tcp).trimmed
    small = _ask(demo_tree, fit=b"", k=1)  # what fits anyway is answered as it is
    assert len(_names(small)) == 1 and not _meta(small).trimmed
    bad = _ask(demo_tree, fit=b"\x00")
    assert bad.rcode() == dns.rcode.FORMERR and "fit option must carry no data" in bad.options[-1].text


@pytest.mark.integration
def test_the_resolver_takes_the_tools_that_fit_instead_of_asking_again_over_tcp(tmp_path):
    """Tools with long names: six of them, brief, no longer fit a datagram. The resolver's leaf answer
    comes back trimmed over UDP; without the fit option, truncated and asked again over TCP."""
    zdir = copy_tree(ZONES, tmp_path / "zones", fresh_subnet())
    leaf = zdir / f"{LEAF[:-1]}.yaml"
    text = leaf.read_text()
    leaf.write_text(text.replace("  name: ", "  name: " + "Document and file toolkit " * 6, ))
    tree = start_tree(zdir)
    try:
        with Resolver(root=tree.root(), cache=False, timeout=REPLY_TIMEOUT) as fit, \
                Resolver(root=tree.root(), cache=False, timeout=REPLY_TIMEOUT, fit=False) as whole:
            lean, full = fit.resolve(INTENT, k=3, leaf_k=6), whole.resolve(INTENT, k=3, leaf_k=6)
            many = fit.resolve(INTENT, k=3, leaf_k=10)  # more than a datagram holds: TCP at once, all of them
            # K = 10 reaches the leaf by its cursor name (the shipped tree marks no leaf): trimmed to fit,
            # then asked again by its expanded name over TCP, as a truncated reply was
            ten, ten_whole = fit.resolve(INTENT, k=10), whole.resolve(INTENT, k=10)
    finally:
        tree.stop()
    assert any(h.zone == LEAF for h in lean.trace) and lean.stats.trimmed >= 1
    assert all(h.transport == "udp" for h in lean.trace) and lean.stats.tcp_retries == 0
    assert full.stats.tcp_retries >= 1 and full.stats.trimmed == 0
    assert any(h.transport == "tcp" for h in many.trace) and many.stats.trimmed == 0
    assert ten.stats.trimmed >= 1 and any(h.transport == "tcp" for h in ten.trace)
    assert {t.name for t in ten.tools if t.zone == LEAF} == {t.name for t in ten_whole.tools if t.zone == LEAF}
    from_leaf = [t.name for t in lean.tools if t.zone == LEAF]
    assert from_leaf and from_leaf == [t.name for t in full.tools if t.zone == LEAF][:len(from_leaf)]


@pytest.mark.integration
def test_a_signed_leaf_trims_before_signing(tmp_path):
    """With DO the full path answers: the tools kept are those that fit with their signatures, and
    the resolver validates them."""
    zdir = copy_tree(ZONES, tmp_path / "zones", fresh_subnet())
    keygen_tree(zdir)
    tree = start_tree(zdir)
    try:
        signed = _ask(tree, fit=b"", do=True, brief=True)
        assert not signed.flags & dns.flags.TC and _meta(signed).trimmed and len(signed.to_wire()) <= 1232
        assert any(rrset.rdtype == dns.rdatatype.RRSIG for rrset in signed.answer)
        assert len(_names(signed)) < len(_names(_ask(tree, fit=b"", brief=True)))  # the signatures take room
        anchor = read_anchor("\n".join(k.dnskey_text() for k in load_keys(zdir / "keys", "tools.")))
        with Resolver(root=tree.root(), validate=True, trust_anchor=anchor, cache=False,
                      timeout=REPLY_TIMEOUT) as r:
            res = r.resolve(INTENT, k=3, leaf_k=6)  # six tools with their signatures: more than a datagram
        assert res.tools and {t.dnssec for t in res.tools} == {"secure"} and res.stats.bogus == 0
        assert res.stats.trimmed > 0
    finally:
        tree.stop()


def test_the_leaf_on_the_best_path_is_asked_for_more(demo_tree):
    """``best_leaf_k``: the leaf reached through each zone's first-ranked child is asked for that many
    tools (over TCP when more than a datagram holds); every other leaf for ``leaf_k``. The shipped
    tree marks no leaf, so each is asked by its cursor name first (K = 2) and, on the best path,
    again by its expanded name for 8."""
    intent = "historical weather Hong Kong"
    with Resolver(root=demo_tree.root(), cache=False, timeout=REPLY_TIMEOUT, best_leaf_k=8) as best, \
            Resolver(root=demo_tree.root(), cache=False, timeout=REPLY_TIMEOUT) as plain:
        res, base = best.resolve(intent, k=2, leaf_k=2), plain.resolve(intent, k=2, leaf_k=2)
    answered = [h for h in res.trace if h.tools]
    assert [h.k for h in answered].count(8) == 1 and all(h.k in (2, 8) for h in answered)
    assert all(h.k == 2 for h in base.trace if h.tools)
    by_zone = {h.zone: h for h in res.trace if h.referrals}
    zone = "tools."
    while zone in by_zone:  # follow the first-ranked referral down from the root
        nxt = next(r.zone for r in by_zone[zone].referrals if r.rank == 1)
        if nxt == zone:  # "self": the zone's own tools
            break
        zone = nxt
    best_hop = next(h for h in answered if h.k == 8)
    assert best_hop.zone == zone and best_hop.transport == "tcp" and len(best_hop.tools) > 2
    assert {t.name for t in base.tools} <= {t.name for t in res.tools}


def test_the_search_for_what_fits_tries_each_count_once_and_finds_the_largest():
    from tooldns.serving.wire import most_that_fit

    for tools in range(1, 34):
        for most in range(tools):  # the largest count that fits; 0: none does
            tried = []

            def fitting(n: int):
                tried.append(n)
                return f"reply of {n}" if n <= most else None

            assert most_that_fit(tools, fitting) == (f"reply of {most}" if most else None)
            assert len(tried) == len(set(tried)) <= tools.bit_length()
            for guess in (0, 1, most, most + 1, tools // 2, tools):  # from a guess: the same count, each tried once
                tried.clear()
                assert most_that_fit(tools, fitting, guess=guess) == (f"reply of {most}" if most else None)
                assert len(tried) == len(set(tried))
    tried = []
    assert most_that_fit(5000, lambda n: tried.append(n) or (n if n <= 1206 else None), guess=1213) == 1206
    assert len(tried) <= 6  # a guess a few records off costs a few packings, not log2(5000)
