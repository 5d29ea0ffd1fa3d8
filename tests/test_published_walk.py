"""The resolver goes by the walk the tree publishes (``_walk.tools.``) where the caller gave nothing.

First the fetch as a pure state machine (hand-made dnspython replies, no sockets) and the precedence
rule (:func:`resolver_client.plan.choose`); then real trees on loopback: the published walk is what
the servers are asked (the K of each hop), explicit options win, a tree without the record is walked
as before, a malformed record (a proxy rewrites it in flight) falls back with an error, a published
model is run here or not, and a signed tree's record must validate.
"""

from __future__ import annotations

import asyncio
import json
import socket
from contextlib import contextmanager
from pathlib import Path

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset
import dns.rdata
import dns.rdataclass
import pytest
from hypothesis import given, strategies as st

from tooldns.dnssec.keys import load_keys
from tooldns.dnssec.manage import keygen_tree
from tooldns.embedding.hashing import HashEmbedder
from tooldns.protocol.fusion import DEFAULT_WEIGHT
from tooldns.protocol.intent import INTENT_OPTION_CODE
from tooldns.protocol.plan import WalkPlan
from tooldns.serving.tree import TreeThread
from tooldns.zone.zonefile import load_zone

from resolver_client import AsyncResolver, Resolver
from resolver_client.cli import main as resolve_main
from resolver_client.modes import GET_ALL, GET_IMPORTANT, GET_ONE, settings_for
from resolver_client.plan import BUILT_IN, CALLER, PUBLISHED, PlanFetch, Published, choose, plan_query
from resolver_client.validate import read_anchor
from resolver_client.walk import AUTO_BEAM

from conftest import REPLY_TIMEOUT, free_port, start_tree, wait_until
from fuzzing import examples
from test_dnssec import _Tamper
from test_walk_record import publish_walk, walk_tree

ROOT = [("127.0.0.1", 5300), ("127.0.0.99", 5300)]
INTENT = "historical weather Hong Kong"
#: K 2 then 1, few tools but more of the best leaf, a narrow beam: nothing like the built-in K = 3
NARROW = WalkPlan(k=(2, 1), leaf_k=2, best_leaf_k=5, beam=3)


# -- the fetch, without sockets --

def _reply(q, rcode=dns.rcode.NOERROR, answer=(), authority=(), flags=dns.flags.AA) -> bytes:
    r = dns.message.make_response(dns.message.from_wire(q.wire))
    r.flags |= flags
    r.set_rcode(rcode)
    r.answer.extend(answer)
    r.authority.extend(authority)
    return r.to_wire()


def _txt(*strings: str, ttl: int = 3600):
    return dns.rrset.from_text("_walk.tools.", ttl, "IN", "TXT", " ".join(f'"{s}"' for s in strings))


SOA = dns.rrset.from_text("tools.", 3600, "IN", "SOA", "ns1.tools. hostmaster.tools. 1 3600 600 604800 300")


def test_the_plan_query_is_an_iterative_txt_query_without_intent():
    q = plan_query("tools.", ROOT)
    m = dns.message.from_wire(q.wire)
    assert (q.qname, q.qtype, q.server, q.tcp) == ("_walk.tools.", dns.rdatatype.TXT, ROOT[0], False)
    assert not m.flags & dns.flags.RD and m.edns == 0 and not m.ednsflags & dns.flags.DO
    assert not [o for o in m.options if o.otype == INTENT_OPTION_CODE]
    assert dns.message.from_wire(plan_query("tools.", ROOT, dnssec=True).wire).ednsflags & dns.flags.DO


def test_a_published_walk_is_taken_for_its_ttl():
    fetch = PlanFetch("tools.", ROOT)
    [q] = fetch.start()
    assert fetch.take(q, _reply(q, answer=[_txt("tooldns-walk=1", "k=5,3,2", "leaf-k=6", "model=m", ttl=600)])) == []
    assert fetch.result() == Published(WalkPlan(k=(5, 3, 2), leaf_k=6, model="m"), 600.0)
    assert fetch.stats.queries == 1 and fetch.stats.bytes_received > 0


@pytest.mark.parametrize("rcode", [dns.rcode.NXDOMAIN, dns.rcode.NOERROR], ids=["nxdomain", "nodata"])
def test_none_published_is_kept_for_the_negative_ttl(rcode):
    fetch = PlanFetch("tools.", ROOT)
    [q] = fetch.start()
    fetch.take(q, _reply(q, rcode, authority=[SOA]))
    assert fetch.result() == Published(None, 300.0)  # min(SOA TTL, SOA minimum), RFC 2308


def test_a_malformed_record_is_kept_but_not_used_and_says_why():
    fetch = PlanFetch("tools.", ROOT)
    [q] = fetch.start()
    fetch.take(q, _reply(q, answer=[_txt("tooldns-walk=1", "k=0")]))
    result = fetch.result()
    assert result.plan is None and result.ttl == 3600.0  # asking again would get the same record
    assert "published walk at _walk.tools. not used" in result.error and "k='0'" in result.error


def _stranger(q) -> bytes:
    """A reply to *q* but for its ID, which differs whatever ID the query drew."""
    wire = _reply(q)
    return bytes([wire[0] ^ 0xFF]) + wire[1:]


def test_timeouts_errors_and_strangers_move_on_and_tc_moves_to_tcp():
    fetch = PlanFetch("tools.", ROOT)
    [q] = fetch.start()
    [again] = fetch.take(q, None, TimeoutError("no reply"))
    assert again.server == ROOT[1] and not again.tcp and fetch.stats.timeouts == 1
    [tcp] = fetch.take(again, _reply(again, flags=dns.flags.AA | dns.flags.TC))
    assert tcp.tcp and tcp.server == ROOT[1] and fetch.stats.tcp_retries == 1
    fetch.take(tcp, _reply(tcp, answer=[_txt("tooldns-walk=1", "k=4")]))
    assert fetch.result().plan == WalkPlan(k=4) and fetch.stats.queries == 3
    fetch = PlanFetch("tools.", ROOT[:1])  # a timeout on the only server: asked once more, then given up
    [q] = fetch.start()
    [again] = fetch.take(q, None, TimeoutError("no reply"))
    assert again.server == q.server and fetch.stats.timeout_retries == 1
    assert fetch.take(again, None, TimeoutError("no reply")) == []
    assert "no root name server answered" in fetch.result().error and fetch.stats.timeouts == 2
    for bad in (lambda q: _reply(q, dns.rcode.SERVFAIL), lambda q: _reply(q, dns.rcode.REFUSED),
                _stranger, lambda q: b"not dns"):
        fetch = PlanFetch("tools.", ROOT)
        [q] = fetch.start()
        [again] = fetch.take(q, bad(q))
        assert again.server == ROOT[1] and fetch.result().error  # nothing decided yet: built-in if asked now
        assert fetch.take(again, None, ConnectionRefusedError("refused")) == []
        assert fetch.result().plan is None and fetch.result().ttl == 0  # asked again next time
        assert "no root name server answered" in fetch.result().error


@examples(300)
@given(st.binary(max_size=200), st.lists(st.binary(max_size=60), min_size=1, max_size=6), st.integers(0, 2**31 - 1))
def test_whatever_a_root_server_sends_the_fetch_decides_without_raising(noise, strings, ttl):
    for wire in (noise, lambda q: _reply(q)[:12] + noise):  # anything, and a header that matches before it
        fetch = PlanFetch("tools.", ROOT[:1])
        [q] = fetch.start()
        assert fetch.take(q, wire(q) if callable(wire) else wire) == []  # one server: nothing else to ask
        assert fetch.result().plan is None
    fetch = PlanFetch("tools.", ROOT[:1])
    [q] = fetch.start()
    answer = dns.rrset.from_rdata("_walk.tools.", ttl, dns.rdata.from_wire(
        dns.rdataclass.IN, dns.rdatatype.TXT, b"".join(bytes([len(s)]) + s for s in strings), 0,
        sum(1 + len(s) for s in strings)))
    fetch.take(q, _reply(q, answer=[answer]))
    result = fetch.result()
    assert (result.plan is None) == bool(result.error) and 0 <= result.ttl <= 86400


def test_a_fetch_past_its_lifetime_says_so():
    fetch = PlanFetch("tools.", ROOT)
    fetch.start()
    fetch.expire("lifetime of 1 s reached")
    assert fetch.result() == Published(None, 0.0, "published walk: lifetime of 1 s reached; built-in settings")


# -- precedence --

FULL = WalkPlan(k=(6,), leaf_k=6, best_leaf_k=10, beam=6, model="multilingual-e5-small", pages=2, fusion=0.7)


def test_the_published_walk_stands_where_the_caller_gave_nothing():
    mode = settings_for(GET_IMPORTANT)
    chosen = choose(mode, FULL)
    assert (chosen.k, chosen.leaf_k, chosen.best_leaf_k, chosen.beam, chosen.model, chosen.pages, chosen.fusion) == \
        (6, 6, 10, 6, FULL.model, 2, 0.7)
    assert set(chosen.sources.values()) == {PUBLISHED} and chosen.settings_from == PUBLISHED
    assert choose(mode, WalkPlan(k=(5, 3, 2))).k == (5, 3, 2)
    none = choose(mode, None)
    assert (none.k, none.leaf_k, none.best_leaf_k, none.beam, none.model, none.fusion) == \
        (3, None, None, AUTO_BEAM, None, DEFAULT_WEIGHT)
    assert set(none.sources.values()) == {BUILT_IN} and none.settings_from == BUILT_IN
    # what the published walk leaves out is the mode's
    partial = choose(mode, WalkPlan(k=4))
    assert (partial.leaf_k, partial.beam, partial.sources["leaf_k"], partial.sources["beam"]) == (
        None, AUTO_BEAM, BUILT_IN, BUILT_IN)


@pytest.mark.parametrize("weight", [1.5, -0.1, "0.6", True, float("nan")])
def test_a_fusion_weight_out_of_range_is_refused(weight):
    from resolver_client import ResolverError

    with pytest.raises(ResolverError, match="fusion is BM25's share"):
        Resolver(root="127.0.0.1:53", fusion=weight)


def test_what_the_caller_gives_wins():
    mode = settings_for(GET_IMPORTANT)
    chosen = choose(mode, FULL, k=(5, 2), leaf_k=3, best_leaf_k=4, beam=None, embedder=HashEmbedder(), pages=0,
                    fusion=0.2)
    assert (chosen.k, chosen.leaf_k, chosen.best_leaf_k, chosen.beam, chosen.model, chosen.pages, chosen.fusion) == \
        ((5, 2), 3, 4, None, None, 0, 0.2)
    assert set(chosen.sources.values()) == {CALLER} and chosen.settings_from == CALLER
    some = choose(mode, FULL, k=2)
    assert some.k == 2 and some.leaf_k == 6 and some.sources["k"] == CALLER and some.settings_from == PUBLISHED


@pytest.mark.parametrize("name", [GET_ONE, GET_ALL])
def test_other_modes_keep_their_own_walk_and_take_only_the_model_and_fusion(name):
    mode = settings_for(name)
    chosen = choose(mode, FULL)
    assert (chosen.k, chosen.leaf_k, chosen.best_leaf_k, chosen.beam, chosen.pages) == \
        (mode.k, mode.leaf_k, None, AUTO_BEAM, 0)
    assert chosen.model == FULL.model and chosen.sources["model"] == PUBLISHED and chosen.sources["k"] == BUILT_IN
    assert chosen.fusion == FULL.fusion and chosen.sources["fusion"] == PUBLISHED


# -- real trees on loopback --

def _ks(res) -> list[tuple[str, int]]:
    """The names asked and the K each was asked for, in order (replies to the queries of one depth
    come in any order)."""
    return sorted((h.qname, h.k) for h in res.trace)


def _root_k(res) -> int:
    """The K the root was asked for (a hop that timed out or came from the cache, such as the root's
    keys a validating fetch left there, is not that)."""
    return next(h.k for h in res.trace if h.qname == "_any._tcp._tools." and h.rcode == "NOERROR")


@pytest.fixture
def narrow(tmp_path, integration):
    tree = start_tree(walk_tree(tmp_path, NARROW))
    yield tree
    tree.stop()


def test_the_published_walk_is_what_the_servers_are_asked(narrow):
    with Resolver(root=narrow.root(), timeout=REPLY_TIMEOUT, cache=False) as r:
        first, second = r.resolve(INTENT), r.resolve(INTENT)
    # K 2 at the root, 1 below; the best path's leaf asked again for its 5 tools
    assert _ks(first) == sorted([("_any._tcp._tools.", 2), ("_any._tcp._weather.tools.", 1),
                                 ("_any._tcp._hko.weather.tools.", 1), ("_any._tcp.hko.weather.tools.", 5)])
    assert len(first.trace[0].referrals) <= 2 and first.tools
    s = first.stats
    assert s.settings_from == PUBLISHED and set(s.sources.values()) == {PUBLISHED, BUILT_IN}
    assert s.settings == {"k": [2, 1], "leaf_k": 2, "best_leaf_k": 5, "beam": 3, "pages": 0, "model": "",
                          "fusion": DEFAULT_WEIGHT}
    assert s.sources["model"] == BUILT_IN and s.embedded_by == "none" and not first.errors
    assert s.plan_queries == 1 and s.queries == 1 + len(first.trace)  # the plan query is counted
    assert second.stats.plan_queries == 0 and _ks(second) == _ks(first)  # kept for the record's TTL
    ares = asyncio.run(AsyncResolver(root=narrow.root(), timeout=REPLY_TIMEOUT, cache=False).resolve(INTENT))
    assert _ks(ares) == _ks(first) and ares.stats.plan_queries == 1 and ares.stats.settings_from == PUBLISHED


def test_explicit_options_win_and_other_modes_keep_their_own(narrow):
    with Resolver(root=narrow.root(), timeout=REPLY_TIMEOUT, cache=False, best_leaf_k=4, beam=None, pages=0) as r:
        res = r.resolve(INTENT, k=3, leaf_k=1)
    with Resolver(root=narrow.root(), timeout=REPLY_TIMEOUT, cache=False) as r:
        one = r.resolve(INTENT, mode=GET_ONE)  # not the published best leaf K of 5: get_one's own
    assert _root_k(res) == 3 and all(h.k in (3, 1, 4) for h in res.trace)
    assert res.stats.sources == {"k": CALLER, "leaf_k": CALLER, "best_leaf_k": CALLER, "beam": CALLER,
                                 "pages": CALLER, "model": BUILT_IN, "fusion": BUILT_IN}
    assert res.stats.settings_from == CALLER and res.stats.settings["beam"] is None
    assert {h.k for h in one.trace} == {1} and len(one.tools) == 1 and one.stats.sources["k"] == BUILT_IN
    with Resolver(root=narrow.root(), timeout=REPLY_TIMEOUT, cache=False, published_walk=False) as off:
        builtin = off.resolve(INTENT)
    assert _root_k(builtin) == 3 and builtin.stats.plan_queries == 0 and builtin.stats.settings_from == BUILT_IN


@pytest.mark.integration
def test_a_tree_without_the_record_is_walked_as_before(tmp_path):
    tree = start_tree(walk_tree(tmp_path, walk=None))
    try:
        with Resolver(root=tree.root(), timeout=REPLY_TIMEOUT, cache=False) as asks, \
                Resolver(root=tree.root(), timeout=REPLY_TIMEOUT, cache=False, published_walk=False) as not_asked:
            for intent in (INTENT, "send a slack message", "typhoon warning"):
                a, b = asks.resolve(intent), not_asked.resolve(intent)
                assert [t.key for t in a.tools] == [t.key for t in b.tools] and _ks(a) == _ks(b)
                assert a.stats.queries - a.stats.plan_queries == b.stats.queries and not a.errors
                assert a.stats.settings_from == b.stats.settings_from == BUILT_IN
                assert a.stats.settings == b.stats.settings
            # NXDOMAIN, kept for the negative TTL: asked once for all three
            assert a.stats.plan_queries == 0
    finally:
        tree.stop()


def test_a_root_server_that_does_not_answer_is_passed_over(narrow):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind(("127.0.0.1", 0))
        res = Resolver(root=[silent.getsockname(), narrow.root()], timeout=5.0, cache=False).resolve(INTENT)
    # the other root server asked once the silent one's first wait is over (hedging), not after the timeout
    assert _root_k(res) == 2 and res.stats.settings_from == PUBLISHED
    assert res.stats.hedges >= 1 and res.stats.timeouts == 0


# -- a proxy in front of the root: what a server, or someone in between, may send --

def _zone_address(zdir: Path, origin: str) -> str:
    return next(z for z in map(load_zone, zdir.glob("*.yaml")) if z.origin == origin).nameservers[0].address


@contextmanager
def _proxied_root(zdir: Path):
    """The tree of *zdir* served, its root behind a proxy on the root's published address; yields the
    root (address, port) and the proxy, whose ``alter`` may rewrite replies."""
    root = _zone_address(zdir, "tools.")
    port = free_port(root)
    real = root.rsplit(".", 1)[0] + ".250"
    others = [z.origin for z in map(load_zone, zdir.glob("*.yaml")) if z.origin != "tools."]
    trees = [TreeThread(zdir, port, only=others, watch_interval=0.2).start(),
             TreeThread(zdir, port, only=["tools."], listen=[real], watch_interval=0.2).start()]
    proxy = _Tamper(root, port, (real, port))
    try:
        yield (root, port), proxy
    finally:
        proxy.close()
        for tree in trees:
            tree.stop()


def _rewrite_walk(*strings: bytes):
    """A proxy's alteration: the published walk's TXT strings become *strings* (signatures kept)."""
    def alter(wire: bytes) -> bytes:
        msg = dns.message.from_wire(wire)
        for rrset in msg.answer:
            if rrset.rdtype == dns.rdatatype.TXT and rrset.name.to_text() == "_walk.tools.":
                rd = rrset[0]
                rrset.remove(rd)
                rrset.add(rd.replace(strings=strings))
        return msg.to_wire()
    return alter


def _unsigned(wire: bytes) -> bytes:
    """The published walk's signature taken out."""
    msg = dns.message.from_wire(wire)
    if msg.question[0].name.to_text() == "_walk.tools.":
        msg.answer = [r for r in msg.answer if r.rdtype != dns.rdatatype.RRSIG]
    return msg.to_wire()


def _denied(wire: bytes) -> bytes:
    """The record taken out, as if there were none: no proof comes with that."""
    msg = dns.message.from_wire(wire)
    if msg.question[0].name.to_text() == "_walk.tools.":
        msg.answer = []
    return msg.to_wire()


@pytest.mark.integration
def test_a_malformed_record_falls_back_to_built_in_settings_with_an_error(tmp_path):
    with _proxied_root(walk_tree(tmp_path, NARROW)) as (root, proxy):
        proxy.alter = _rewrite_walk(b"tooldns-walk=1", b"k=2,0")
        with Resolver(root=root, timeout=REPLY_TIMEOUT, cache=False) as r:
            res, again = r.resolve(INTENT), r.resolve(INTENT)
        proxy.alter = _rewrite_walk(b"tooldns-walk=2", b"k=1")
        later = Resolver(root=root, timeout=REPLY_TIMEOUT, cache=False).resolve(INTENT)
    assert _root_k(res) == 3 and res.tools and res.stats.settings_from == BUILT_IN
    assert res.errors[0] == ("published walk at _walk.tools. not used: k='0' is not a whole number from 1 to 255; "
                             "built-in settings")
    assert again.stats.plan_queries == 0 and again.errors == res.errors  # the record is kept, and said again
    assert _root_k(later) == 3 and "format '2' is not '1'" in later.errors[0]


def test_the_cli_and_its_trace_and_json_say_where_the_settings_came_from(narrow, capsys):
    at = ["--root", "%s:%d" % narrow.root(), "--timeout", str(REPLY_TIMEOUT)]
    assert resolve_main([INTENT, *at, "--trace"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(";; walk settings from published; 1 queries for it: k=2,1 (published) leaf-k=2 "
                          "(published) best-leaf-k=5 (published) beam=3 (published) pages=0 (built-in) "
                          "model=none (built-in) fusion=0.4 (built-in); "
                          "intent embedded by none\n"), out
    assert resolve_main([INTENT, *at, "--json", "--k", "3"]) == 0
    stats = json.loads(capsys.readouterr().out)["stats"]
    assert stats["settings_from"] == PUBLISHED and stats["sources"]["k"] == CALLER and stats["settings"]["k"] == [3]
    assert resolve_main([INTENT, *at, "--json", "--no-published-walk"]) == 0
    stats = json.loads(capsys.readouterr().out)["stats"]
    assert stats["settings_from"] == BUILT_IN and stats["plan_queries"] == 0 and stats["settings"]["k"] == [3]


def test_the_mcp_server_goes_by_the_published_walk_unless_told_not_to(narrow):
    pytest.importorskip("mcp")
    from resolver_client.mcp_server import _finder, _parser

    at = ["--root", "%s:%d" % narrow.root(), "--timeout", str(REPLY_TIMEOUT)]
    for argv, k in ((at, 2), ([*at, "--no-published-walk"], 3)):
        p = _parser()
        finder = _finder(p.parse_args(argv), p)
        found = asyncio.run(finder.find(INTENT))
        assert found.tools and finder.resolver.published_walk is (k == 2)
        res = asyncio.run(finder.resolver.resolve(INTENT))
        assert _root_k(res) == k


# -- the model the walk names --

@pytest.mark.integration
def test_a_published_model_is_run_here_when_it_can_be(tmp_path):
    zdir = walk_tree(tmp_path, WalkPlan(k=3, model="hash-64"))
    tree = start_tree(zdir)
    try:
        res = Resolver(root=tree.root(), timeout=REPLY_TIMEOUT, cache=False).resolve(INTENT)
        assert res.stats.embedded_by == "client" and res.stats.settings["model"] == "hash-64"
        assert res.stats.sources["model"] == PUBLISHED and res.stats.embed_ms >= 0
        # the demo zones score no vectors: they say so, which shows the vector went out
        assert any("vector was not used" in e for e in res.errors)
        mine = Resolver(root=tree.root(), timeout=REPLY_TIMEOUT, cache=False, embedder=HashEmbedder(32)).resolve(INTENT)
        assert mine.stats.settings["model"] == "hash-32" and mine.stats.sources["model"] == CALLER
        # get_one keeps its K but uses the tree's model
        one = Resolver(root=tree.root(), timeout=REPLY_TIMEOUT, cache=False).resolve(INTENT, mode=GET_ONE)
        assert one.stats.embedded_by == "client" and {h.k for h in one.trace} == {1}
        publish_walk(zdir, WalkPlan(k=3, model="no-such-model"))
        assert _model_served(tree, "no-such-model")
        res = Resolver(root=tree.root(), timeout=REPLY_TIMEOUT, cache=False).resolve(INTENT)
        assert res.stats.embedded_by == "none" and res.stats.settings["model"] == "no-such-model"
        assert "no embedder here makes vectors of that model" in res.stats.embed_note and not res.errors
    finally:
        tree.stop()


def _model_served(tree, model: str) -> bool:
    """Whether the tree comes to publish *model* (an edit is served live)."""
    def served() -> bool:
        r = Resolver(root=tree.root(), timeout=REPLY_TIMEOUT, cache=False).resolve(INTENT)
        return r.stats.settings["model"] == model
    return wait_until(served)


@pytest.mark.integration
def test_without_the_model_zones_that_embed_intents_do_it(tmp_path):
    zdir = walk_tree(tmp_path, WalkPlan(k=3, model="no-such-model"))
    path = zdir / "tools.yaml"
    path.write_text(path.read_text(encoding="utf-8").replace("\nsummary:", "\nsettings:\n  embed_intents: hash:64\n"
                                                             "summary:", 1), encoding="utf-8")
    assert load_zone(path).settings.embed_intents == "hash:64"
    tree = start_tree(zdir)
    try:
        res = Resolver(root=tree.root(), timeout=REPLY_TIMEOUT, cache=False).resolve(INTENT)
        assert res.stats.embedded_by == "zones" and res.stats.zone_embedded >= 1
    finally:
        tree.stop()


# -- DNSSEC --

def _anchor(zdir: Path):
    return read_anchor("\n".join(k.dnskey_text() for k in load_keys(zdir / "keys", "tools.")))


def _signed(tmp_path: Path, walk: WalkPlan | None) -> Path:
    zdir = walk_tree(tmp_path, walk=None)
    keygen_tree(zdir)
    if walk is not None:
        publish_walk(zdir, walk)
    return zdir


def _validating(root, zdir: Path) -> Resolver:
    return Resolver(root=root, validate=True, trust_anchor=_anchor(zdir), timeout=REPLY_TIMEOUT, cache=False)


@pytest.mark.integration
def test_a_signed_tree_s_walk_validates_and_is_used(tmp_path):
    zdir = _signed(tmp_path, NARROW)
    tree = start_tree(zdir)
    try:
        res = _validating(tree.root(), zdir).resolve(INTENT)
        assert _root_k(res) == 2 and res.stats.settings_from == PUBLISHED and not res.errors
        assert res.tools and {t.dnssec for t in res.tools} == {"secure"} and res.stats.bogus == 0
        ares = asyncio.run(AsyncResolver(root=tree.root(), validate=True, trust_anchor=_anchor(zdir),
                                         timeout=REPLY_TIMEOUT).resolve(INTENT))
        assert _root_k(ares) == 2 and not ares.errors
    finally:
        tree.stop()


@pytest.mark.integration
def test_a_signed_tree_without_a_walk_proves_it_and_the_proof_is_kept(tmp_path):
    zdir = _signed(tmp_path, None)
    tree = start_tree(zdir)
    try:
        with _validating(tree.root(), zdir) as r:
            first, second = r.resolve(INTENT), r.resolve(INTENT)
        assert _root_k(first) == 3 and not first.errors and first.stats.plan_queries == 2  # TXT and DNSKEY
        assert second.stats.plan_queries == 0 and not second.errors
    finally:
        tree.stop()


@pytest.mark.integration
@pytest.mark.parametrize("alter, said", [
    (_rewrite_walk(b"tooldns-walk=1", b"k=1"), "its record is bogus"),  # valid, but not what was signed
    (_unsigned, "is not signed"),
    (_denied, "its answer that there is none is bogus (no NSEC proves that _walk.tools. has no TXT record)"),
])
def test_a_signed_tree_s_walk_altered_in_flight_is_not_used(tmp_path, alter, said):
    zdir = _signed(tmp_path, NARROW)
    with _proxied_root(zdir) as (root, proxy):
        proxy.alter = alter
        plain = Resolver(root=root, timeout=REPLY_TIMEOUT, cache=False).resolve(INTENT)
        with _validating(root, zdir) as r:
            res, again = r.resolve(INTENT), r.resolve(INTENT)
    if alter is not _denied and alter is not _unsigned:
        assert _root_k(plain) == 1  # without validation the alteration works
    assert _root_k(res) == 3 and res.stats.settings_from == BUILT_IN  # with it: built-in settings
    assert said in res.errors[0] and res.errors[0].startswith("published walk at _walk.tools. not used")
    assert res.tools and {t.dnssec for t in res.tools} == {"secure"}  # the rest of the walk validates
    assert again.stats.plan_queries == 2  # not kept: asked again
