"""The brief option: leaves answer without descriptions unless asked, over real servers on loopback."""

from __future__ import annotations

import dns.edns
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

from conftest import REPLY_TIMEOUT
from resolver_client import Resolver
from tooldns.exceptions import IntentError
from tooldns.protocol.brief import BRIEF_OPTION_CODE, decode_brief, encode_brief
from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent
from tooldns.protocol.txt import decode_pairs

INTENT = "historical weather Hong Kong"


def test_the_option_carries_nothing():
    assert encode_brief() == b"" and decode_brief(b"") is True
    with pytest.raises(IntentError, match="no data"):
        decode_brief(b"\x01")


def _leaf(tree, brief: bytes | None):
    address = tree.tree.addresses["hko.weather.tools."][0]
    options = [dns.edns.GenericOption(INTENT_OPTION_CODE, encode_intent(INTENT, 5))]
    if brief is not None:
        options.append(dns.edns.GenericOption(BRIEF_OPTION_CODE, brief))
    query = dns.message.make_query("_any._tcp.hko.weather.tools.", "SRV", use_edns=0, options=options)
    query.flags = 0
    return dns.query.tcp(query, address, port=tree.tree.port, timeout=REPLY_TIMEOUT)


def test_a_leaf_answers_without_descriptions_when_asked_to(demo_tree):
    full, brief = _leaf(demo_tree, None), _leaf(demo_tree, b"")
    assert full.rcode() == brief.rcode() == dns.rcode.NOERROR
    texts = {True: [], False: []}
    for is_brief, reply in ((False, full), (True, brief)):
        for rrset in reply.additional:
            if rrset.rdtype == dns.rdatatype.TXT:
                texts[is_brief] += [decode_pairs(list(rd.strings)) for rd in rrset]
    assert texts[False] and len(texts[False]) == len(texts[True])
    assert all("desc" in p and "service" in p for p in texts[False])
    assert not any("desc" in p or "service" in p for p in texts[True])  # the owner name says the service
    # the same tools, ranks, scores, names and endpoints either way
    same = ("rank", "score", "name", "endpoint")
    assert [{k: p.get(k) for k in same} for p in texts[False]] == [{k: p.get(k) for k in same} for p in texts[True]]
    assert len(brief.to_wire()) < len(full.to_wire())
    bad = _leaf(demo_tree, b"\x01")
    assert bad.rcode() == dns.rcode.FORMERR
    assert "brief option must carry no data" in bad.options[-1].text


def test_the_resolver_asks_for_brief_answers_unless_told_otherwise(demo_tree):
    with Resolver(root=demo_tree.root(), cache=False, timeout=REPLY_TIMEOUT) as brief, \
            Resolver(root=demo_tree.root(), cache=False, timeout=REPLY_TIMEOUT, details=True) as detailed:
        lean, full = brief.resolve(INTENT, k=3, leaf_k=5), detailed.resolve(INTENT, k=3, leaf_k=5)
    assert [(t.name, t.service, t.endpoint) for t in lean.tools] == [(t.name, t.service, t.endpoint) for t in full.tools]
    assert [t.score for t in lean.tools] == [t.score for t in full.tools]
    assert all(t.description for t in full.tools) and not any(t.description for t in lean.tools)
    assert lean.stats.bytes_received < full.stats.bytes_received
    # five tools a leaf fit one datagram without descriptions: no TCP; with them, TCP from the start
    assert lean.stats.tcp_retries == 0 and all(h.transport == "udp" for h in lean.trace)
    assert any(h.transport == "tcp" for h in full.trace)
