"""The page option and follow-up pages: a leaf asked for the tools it ranks after its best ones, and a
walk that asks for them when every tool a leaf gave made its result; over real servers on loopback,
UDP and TCP, fast path and full path, and a lazy leaf answered from its map."""

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
from resolver_client.exceptions import ResolverError
from tooldns.exceptions import IntentError, PlanError
from tooldns.protocol.brief import BRIEF_OPTION_CODE
from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent
from tooldns.protocol.meta import META_OPTION_CODE, decode_meta
from tooldns.protocol.page import PAGE_OPTION_CODE, decode_page, encode_page
from tooldns.protocol.plan import WalkPlan, decode_plan, encode_plan
from tooldns.protocol.txt import decode_pairs
from tooldns.zone.zonefile import dump_zone, parse_zone

LEAF = "docs.productivity.tools."  # seven tools
INTENT = "create and edit files, pages and documents"


def test_the_option_carries_the_tools_to_skip_in_one_octet():
    assert encode_page(6) == b"\x06" and decode_page(b"\x06") == 6 and decode_page(b"\x00") == 0
    for bad in (b"", b"\x01\x02"):
        with pytest.raises(IntentError, match="one octet"):
            decode_page(bad)
    for bad in (-1, 256, True, "3"):
        with pytest.raises(IntentError, match="0 to 255"):
            encode_page(bad)


def _ask(tree, *, k: int, page: bytes | None, tcp: bool = False, brief: bool = True,
         name: str = f"_any._tcp.{LEAF}") -> dns.message.Message:
    options = [dns.edns.GenericOption(INTENT_OPTION_CODE, encode_intent(INTENT, k))]
    if brief:
        options.append(dns.edns.GenericOption(BRIEF_OPTION_CODE, b""))
    if page is not None:
        options.append(dns.edns.GenericOption(PAGE_OPTION_CODE, page))
    query = dns.message.make_query(name, "SRV", use_edns=0, payload=1232, options=options)
    query.flags = 0
    address = tree.tree.addresses[LEAF][0]
    ask = dns.query.tcp if tcp else dns.query.udp
    return ask(query, address, port=tree.tree.port, timeout=REPLY_TIMEOUT)


def _ranked(msg: dns.message.Message) -> list[tuple[int, str, float]]:
    """(rank, name, score) of each ranked tool of an answer, by rank; each SRV priority checked against it."""
    pairs = [decode_pairs(list(rd.strings)) for rrset in msg.additional if rrset.rdtype == dns.rdatatype.TXT
             for rd in rrset]
    out = sorted((int(p["rank"]), p["name"], float(p["score"])) for p in pairs if "rank" in p)
    priorities = sorted(rd.priority for rrset in msg.answer if rrset.rdtype == dns.rdatatype.SRV for rd in rrset)
    assert priorities == [rank for rank, _, _ in out]
    return out


def _meta(msg: dns.message.Message):
    return next(decode_meta(o.to_wire()) for o in msg.options if o.otype == META_OPTION_CODE)


@pytest.mark.parametrize("tcp", [False, True], ids=["udp-fast-path", "tcp-full-path"])
def test_a_page_is_the_ranking_after_the_tools_skipped(demo_tree, tcp):
    """Seven tools: the best 7 in one answer, then pages of 3 after 0, 3 and 6 tools skipped carry the
    same tools in the same order, each page's ranks counting from 1, and a page past the end none."""
    whole = [(name, score) for _, name, score in _ranked(_ask(demo_tree, k=7, page=None, tcp=True))]
    assert len(whole) == 7
    pages = []
    for skip in (0, 3, 6):
        reply = _ask(demo_tree, k=3, page=encode_page(skip), tcp=tcp)
        assert reply.rcode() == dns.rcode.NOERROR and not reply.flags & dns.flags.TC
        ranked = _ranked(reply)
        assert [rank for rank, _, _ in ranked] == list(range(1, len(ranked) + 1))
        pages += [(name, score) for _, name, score in ranked]
    assert pages == whole
    past = _ask(demo_tree, k=3, page=encode_page(7), tcp=tcp)
    assert past.rcode() == dns.rcode.NOERROR and not _ranked(past)
    assert _ranked(_ask(demo_tree, k=3, page=encode_page(0), tcp=tcp)) == \
        _ranked(_ask(demo_tree, k=3, page=None, tcp=tcp))  # skipping none is no page at all


def test_a_malformed_page_option_is_formerr_and_the_server_goes_on(demo_tree):
    for bad in (b"", b"\x01\x02"):
        for tcp in (False, True):
            reply = _ask(demo_tree, k=3, page=bad, tcp=tcp)
            assert reply.rcode() == dns.rcode.FORMERR
    assert len(_ranked(_ask(demo_tree, k=3, page=encode_page(3)))) == 3


def test_a_referral_ignores_the_page_option(demo_tree):
    """Pages are of tools: a zone with children refers to the same best children with or without one."""
    def referral(page):
        options = [dns.edns.GenericOption(INTENT_OPTION_CODE, encode_intent(INTENT, 3))]
        if page is not None:
            options.append(dns.edns.GenericOption(PAGE_OPTION_CODE, page))
        query = dns.message.make_query("_any._tcp._tools.", "SRV", use_edns=0, payload=1232, options=options)
        query.flags = 0
        reply = dns.query.udp(query, demo_tree.tree.addresses["tools."][0], port=demo_tree.tree.port,
                              timeout=REPLY_TIMEOUT)
        return sorted(rrset.name.to_text() for rrset in reply.authority if rrset.rdtype == dns.rdatatype.NS)

    assert referral(encode_page(2)) == referral(None) and referral(None)


def test_the_walk_asks_the_next_page_of_a_leaf_whose_tools_all_made_the_result(demo_tree):
    """Two tools a leaf and a result of ten: the docs leaf's two both make the result, so with one
    follow-up page it is asked for the two after them (over UDP, by its expanded name, ranks 3 and 4
    as the whole ranking numbers them); without pages it is not."""
    with Resolver(root=demo_tree.root(), cache=False, timeout=REPLY_TIMEOUT, pages=1) as paged, \
            Resolver(root=demo_tree.root(), cache=False, timeout=REPLY_TIMEOUT, pages=0) as plain:
        res, base = paged.resolve(INTENT, k=2, leaf_k=2, top=10), plain.resolve(INTENT, k=2, leaf_k=2, top=10)
        many = paged.resolve(INTENT, k=2, leaf_k=2, top=10, mode="get_all")  # another mode: pages as asked too
    assert base.stats.pages == 0 and res.stats.pages == 1 and res.stats.queries == base.stats.queries + 1
    page = res.trace[-1]
    assert page.transport == "udp" and page.qname.startswith("_any._tcp.") and not page.qname.startswith("_any._tcp._")
    assert [t.rank for t in page.tools] == [3, 4]
    assert {t.name for t in base.tools} < {t.name for t in res.tools}
    assert len(res.tools) == len(base.tools) + 2 and res.stats.settings["pages"] == 1
    assert many.stats.pages <= 1


def test_the_async_resolver_asks_the_same_pages(demo_tree):
    import asyncio

    from resolver_client import AsyncResolver

    res = asyncio.run(AsyncResolver(root=demo_tree.root(), cache=False, timeout=REPLY_TIMEOUT, pages=1)
                      .resolve(INTENT, k=2, leaf_k=2, top=10))
    with Resolver(root=demo_tree.root(), cache=False, timeout=REPLY_TIMEOUT, pages=1) as r:
        sync = r.resolve(INTENT, k=2, leaf_k=2, top=10)
    assert res.stats.pages == sync.stats.pages == 1
    assert [(t.name, t.rank) for t in res.tools] == [(t.name, t.rank) for t in sync.tools]


def test_pages_are_bounded_and_stop_at_a_leaf_with_no_more(demo_tree):
    """A leaf that gave fewer than asked has no more: three pages of 3 from a leaf of seven ask twice
    (3 + 3, then the 1 left), and a bound of one page asks once."""
    with Resolver(root=demo_tree.root(), cache=False, timeout=REPLY_TIMEOUT, pages=5) as many, \
            Resolver(root=demo_tree.root(), cache=False, timeout=REPLY_TIMEOUT, pages=1) as one:
        # K = 1: the walk reaches one leaf, whose tools are all the result ever holds
        res, single = many.resolve(INTENT, k=1, leaf_k=3, top=20), one.resolve(INTENT, k=1, leaf_k=3, top=20)
    # the shipped tree marks no leaf: the leaf is met by its cursor name (K = 1), asked again by its
    # expanded name for 3, then paged
    leaf = [h for h in res.trace if h.tools and not h.qname.startswith("_any._tcp._")]
    assert len(leaf) >= 2 and res.stats.pages == len(leaf) - 1 <= 5
    ranks = [t.rank for h in leaf for t in h.tools]
    assert ranks == list(range(1, len(ranks) + 1)) and len(leaf[-1].tools) < 3  # the last page ran out
    assert single.stats.pages == 1 and len(single.tools) == 6
    with pytest.raises(ResolverError, match="pages"):
        Resolver(pages=-1)


def test_a_published_walk_carries_its_pages():
    plan = WalkPlan(k=(7,), leaf_k=6, pages=1)
    assert encode_plan(plan)[-1] == b"pages=1" and decode_plan(encode_plan(plan)) == plan
    with pytest.raises(PlanError, match="pages"):
        WalkPlan(k=(7,), pages=0)
    with pytest.raises(PlanError, match="pages"):
        decode_plan([b"tooldns-walk=1", b"k=7", b"pages=x"])
    text = ("origin: tools.\nsoa:\n  contact: hostmaster@tools\n  serial: 1\nnameservers:\n- name: ns1.tools.\n"
            "  address: 127.0.0.1\nwalk:\n  k: 7\n  pages: 2\n")
    zone = parse_zone(text)
    assert zone.walk.pages == 2 and parse_zone(dump_zone(zone)).walk == zone.walk
    with pytest.raises(Exception, match="pages"):
        parse_zone(text.replace("pages: 2", "pages: 0"))


def test_a_resolver_told_nothing_follows_the_published_pages(tmp_path):
    """The root's ``walk: {pages: 1}``: a resolver with no option asks the page; ``pages=0`` does not."""
    zdir = copy_tree(ZONES, tmp_path / "zones", fresh_subnet())
    root = zdir / "tools.yaml"
    text = root.read_text()
    assert "\nwalk:" not in text
    root.write_text(text.replace("\nchildren:", "\nwalk:\n  k: 2\n  leaf_k: 2\n  pages: 1\nchildren:", 1))
    tree = start_tree(zdir)
    try:
        with Resolver(root=tree.root(), cache=False, timeout=REPLY_TIMEOUT) as told_nothing, \
                Resolver(root=tree.root(), cache=False, timeout=REPLY_TIMEOUT, pages=0) as none:
            res, base = told_nothing.resolve(INTENT), none.resolve(INTENT)
    finally:
        tree.stop()
    assert res.stats.sources["pages"] == "published" and res.stats.pages == 1
    assert base.stats.sources["pages"] == "caller" and base.stats.pages == 0
