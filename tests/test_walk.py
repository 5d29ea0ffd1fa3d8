"""The walk as a pure state machine, driven with hand-made dnspython messages (no sockets)."""

import dns.edns
import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset
import pytest

from resolver_client import IntentRejected, NoServersReachable, Walk
from resolver_client.walk import DEFAULT_BEAM, auto_beam
from tooldns.protocol.intent import INTENT_OPTION_CODE, decode_intent
from tooldns.protocol.meta import META_OPTION_CODE, encode_meta
from tooldns.protocol.txt import encode_pairs

ROOT = [("127.0.0.1", 5300), ("127.0.0.99", 5300)]


def msg(q):
    """The walk's query as a dnspython message, to build hand-made replies from."""
    return dns.message.from_wire(q.wire)


def txt(owner, pairs):
    strings = " ".join('"%s"' % s.decode() for s in encode_pairs(pairs))
    return dns.rrset.from_text(owner, 0, "IN", "TXT", strings)


def referral(q, children, rcode=dns.rcode.NOERROR):
    """children: (zone, address, rank, score, kind)"""
    r = dns.message.make_response(msg(q))
    r.flags &= ~dns.flags.AA
    r.set_rcode(rcode)
    for zone, address, rank, score, kind in children:
        r.authority.append(dns.rrset.from_text(zone, 3600, "IN", "NS", f"ns1.{zone}"))
        r.additional.append(txt(zone, [("rank", rank), ("score", score), ("kind", kind)]))
        r.additional.append(dns.rrset.from_text(f"ns1.{zone}", 3600, "IN", "A", address))
    r.use_edns(0, 0, 1232, options=[dns.edns.GenericOption(META_OPTION_CODE, encode_meta(0, 30, "bm25"))])
    return r.to_wire()


def answer(q, tools):
    """tools: (label, target, port, rank, score, name)"""
    r = dns.message.make_response(msg(q))
    r.flags |= dns.flags.AA
    owner = q.qname
    for label, target, port, rank, score, name in tools:
        r.answer.append(dns.rrset.from_text(owner, 0, "IN", "SRV", f"{rank} 100 {port} {target}"))
        r.additional.append(txt(f"{label}._http._tcp.{q.zone}", [("rank", rank), ("score", score), ("name", name),
                                                                   ("service", "http"), ("desc", name + " tool")]))
    return r.to_wire()


def test_start_query_is_iterative_with_intent():
    walk = Walk("historical weather 香港", k=4, root=ROOT)
    [q] = walk.start()
    assert q.qname == "_any._tcp._tools." and q.server == ROOT[0]
    assert not (msg(q).flags & dns.flags.RD)
    opt = [o for o in msg(q).options if o.otype == INTENT_OPTION_CODE][0]
    intent = decode_intent(opt.to_wire())
    assert intent.text == "historical weather 香港" and intent.k == 4


def test_referral_moves_cursor_down_through_glue():
    walk = Walk("weather", k=2, root=ROOT)
    [q] = walk.start()
    nxt = walk.take(q, referral(q, [("weather.tools.", "127.0.0.2", 1, 3.5, "functional"),
                                    ("maps.tools.", "127.0.0.7", 2, 1.0, "functional")]))
    assert [(n.qname, n.servers, n.depth) for n in nxt] == [
        ("_any._tcp._weather.tools.", [("127.0.0.2", 5300)], 1),
        ("_any._tcp._maps.tools.", [("127.0.0.7", 5300)], 1),
    ]
    assert nxt[0].path == ("tools.", "weather.tools.")
    hop = walk.trace[0]
    assert [(r.zone, r.rank, r.score) for r in hop.referrals] == [("weather.tools.", 1, 3.5), ("maps.tools.", 2, 1.0)]


def test_self_entry_asks_expanded_name_of_same_zone():
    walk = Walk("weather", root=ROOT)
    [q] = walk.start()
    [w] = walk.take(q, referral(q, [("weather.tools.", "127.0.0.2", 1, 2.0, "functional")]))
    [s] = walk.take(w, referral(w, [("weather.tools.", "127.0.0.2", 1, 2.0, "self")]))
    assert s.qname == "_any._tcp.weather.tools." and s.depth == 1


def test_answers_merge_best_first():
    walk = Walk("weather", root=ROOT)
    [q] = walk.start()
    a, b = walk.take(q, referral(q, [("history.tools.", "127.0.0.4", 1, 2.0, "functional"),
                                     ("forecast.tools.", "127.0.0.3", 2, 1.0, "functional")]))
    assert walk.take(b, answer(b, [("f1", "f1.example.", 443, 1, 0.5, "F1"), ("f2", "f2.example.", 80, 2, 0.2, "F2")])) == []
    assert walk.take(a, answer(a, [("h1", "h1.example.", 443, 1, 0.9, "H1")])) == []
    res = walk.result()
    assert [(t.name, t.score, t.zone) for t in res.tools] == [
        ("H1", 0.9, "history.tools."), ("F1", 0.5, "forecast.tools."), ("F2", 0.2, "forecast.tools.")]
    assert res.tools[2].port == 80 and res.tools[2].target == "f2.example."
    assert res.stats.queries == 3 and res.stats.nodes_visited == 3


def test_trust_and_exclude():
    children = [("hko.weather.tools.", "127.0.0.5", 1, 3.0, "organisation"),
                ("noaa.weather.tools.", "127.0.0.6", 2, 2.0, "organisation"),
                ("history.weather.tools.", "127.0.0.4", 3, 1.0, "functional")]
    for trust, exclude, expected in [
        (None, None, {"hko", "noaa", "history"}),
        (["hko"], None, {"hko", "history"}),
        ([], None, {"history"}),
        (None, ["noaa"], {"hko", "history"}),
        (["hko.weather.tools"], ["history"], {"hko"}),
    ]:
        walk = Walk("weather", root=ROOT, root_zone="weather.tools.", trust=trust, exclude=exclude)
        [q] = walk.start()
        nxt = walk.take(q, referral(q, children))
        assert {n.zone.split(".")[0] for n in nxt} == expected, (trust, exclude)
        why = {r.zone.split(".")[0]: r.why_not for r in walk.trace[0].referrals if not r.followed}
        assert all(w in ("organisation not trusted", "excluded") for w in why.values())


def test_out_of_bailiwick_referral_ignored():
    walk = Walk("weather", root=ROOT, root_zone="weather.tools.")
    [q] = walk.start()
    assert walk.take(q, referral(q, [("evil.example.", "127.0.0.66", 1, 9.0, "functional")])) == []
    assert walk.trace[0].referrals[0].why_not == "outside weather.tools."


def test_truncated_reply_retries_over_tcp_same_server():
    walk = Walk("weather", root=ROOT)
    [q] = walk.start()
    r = dns.message.make_response(msg(q))
    r.flags |= dns.flags.TC
    [retry] = walk.take(q, r.to_wire())
    assert retry.tcp and retry.server == q.server and walk.stats.tcp_retries == 1


def test_timeout_and_mismatch_move_to_next_server():
    walk = Walk("weather", root=ROOT)
    [q] = walk.start()
    [second] = walk.take(q, None, TimeoutError("no reply"))
    assert second.server == ROOT[1] and walk.stats.timeouts == 1
    other = dns.message.make_query("_any._tcp._tools.", "SRV")
    bad = dns.message.make_response(other).to_wire()  # another ID
    assert walk.take(second, bad) == []
    from resolver_client import BadResponse
    with pytest.raises(BadResponse, match="does not match the query"):
        walk.result()


def test_a_timeout_on_a_zones_last_server_asks_it_once_more():
    """A lost datagram, or a worker of `tooldns serve --workers` killed with the query in its socket, costs
    one timeout, not the zone (issue 42, item 10): the last server is asked again, once, then given up."""
    walk = Walk("weather", root=ROOT[:1])
    [q] = walk.start()
    [again] = walk.take(q, None, TimeoutError("no reply"))
    assert again.server == q.server and again.qname == q.qname and again.wire != q.wire  # a new message ID
    assert walk.stats.timeouts == 1 and walk.stats.timeout_retries == 1
    assert walk.take(again, None, TimeoutError("no reply")) == []
    with pytest.raises(NoServersReachable):
        walk.result()
    assert walk.stats.timeouts == 2 and walk.stats.timeout_retries == 1
    walk = Walk("weather", root=ROOT)  # two servers: the second, then the second once more
    [q] = walk.start()
    [second] = walk.take(q, None, TimeoutError("no reply"))
    [again] = walk.take(second, None, TimeoutError("no reply"))
    assert (second.server, again.server) == (ROOT[1], ROOT[1]) and walk.take(again, None, TimeoutError("x")) == []
    walk = Walk("weather", root=ROOT[:1])  # a refusal is an answer: not asked again
    [q] = walk.start()
    assert walk.take(q, None, ConnectionRefusedError("refused")) == []


def test_all_root_servers_silent():
    walk = Walk("weather", root=ROOT)
    [q] = walk.start()
    [second] = walk.take(q, None, TimeoutError("no reply"))
    assert walk.take(second, None, ConnectionRefusedError("refused")) == []
    with pytest.raises(NoServersReachable, match="ConnectionRefusedError"):
        walk.result()


def test_servfail_refused_next_server_then_error_recorded():
    walk = Walk("weather", root=ROOT)
    [q] = walk.start()
    [w] = walk.take(q, referral(q, [("weather.tools.", "127.0.0.2", 1, 2.0, "functional")]))
    r = dns.message.make_response(msg(w))
    r.set_rcode(dns.rcode.SERVFAIL)
    assert walk.take(w, r.to_wire()) == []  # one server only
    assert walk.unreachable == ["weather.tools."] and "weather.tools." in walk.errors[0]
    with pytest.raises(NoServersReachable, match="weather.tools.: no name server answered"):
        walk.result()  # nothing found, and the answer may be behind the dead zone: a failure, not "no tools"


def test_formerr_raises_intent_rejected_with_ede_text():
    walk = Walk("weather", root=ROOT)
    [q] = walk.start()
    r = dns.message.make_response(msg(q))
    r.set_rcode(dns.rcode.FORMERR)
    r.use_edns(0, 0, 1232, options=[dns.edns.EDEOption(dns.edns.EDECode.OTHER, "bad intent option: K is 0")])
    assert walk.take(q, r.to_wire()) == []
    with pytest.raises(IntentRejected, match="K is 0"):
        walk.result()


def test_depth_limit():
    walk = Walk("weather", root=ROOT, max_depth=1)
    [q] = walk.start()
    [w] = walk.take(q, referral(q, [("weather.tools.", "127.0.0.2", 1, 2.0, "functional")]))
    assert walk.take(w, referral(w, [("history.weather.tools.", "127.0.0.4", 1, 2.0, "functional")])) == []
    assert walk.trace[-1].referrals[0].why_not == "depth limit"


def test_bad_intent_rejected_before_sending():
    from resolver_client import ResolverError
    with pytest.raises(ResolverError, match="empty"):
        Walk("   ", root=ROOT)
    with pytest.raises(ResolverError, match="unknown service"):
        Walk("x", root=ROOT, service="gopher")


def referral_with_leaf(q, zone, address):
    r = dns.message.make_response(msg(q))
    r.flags &= ~dns.flags.AA
    r.authority.append(dns.rrset.from_text(zone, 3600, "IN", "NS", f"ns1.{zone}"))
    r.additional.append(txt(zone, [("rank", 1), ("score", 1.0), ("kind", "functional"), ("leaf", 1)]))
    r.additional.append(dns.rrset.from_text(f"ns1.{zone}", 3600, "IN", "A", address))
    return r.to_wire()


def k_of(q):
    opt = [o for o in msg(q).options if o.otype == INTENT_OPTION_CODE][0]
    return decode_intent(opt.to_wire()).k


def test_k_schedule_per_depth_and_leaf_k():
    walk = Walk("weather", k=(5, 2), leaf_k=10, root=ROOT)
    [q] = walk.start()
    assert k_of(q) == 5
    [w] = walk.take(q, referral(q, [("weather.tools.", "127.0.0.2", 1, 2.0, "functional")]))
    assert k_of(w) == 2 and not w.tcp  # depth 1: the second K
    [leaf] = walk.take(w, referral_with_leaf(w, "history.weather.tools.", "127.0.0.4"))
    # a child marked leaf=1 is asked for its tools directly, with leaf_k, over TCP (10 tools do not fit a datagram)
    assert leaf.qname == "_any._tcp.history.weather.tools." and k_of(leaf) == 10 and leaf.tcp


def test_unknown_leaf_asked_again_for_leaf_k():
    walk = Walk("weather", k=2, leaf_k=6, root=ROOT)
    [q] = walk.start()
    [w] = walk.take(q, referral(q, [("history.tools.", "127.0.0.4", 1, 2.0, "functional")]))
    tools = [("a", "a.example.", 443, 1, 0.9, "A"), ("b", "b.example.", 443, 2, 0.5, "B")]
    [again] = walk.take(w, answer(w, tools))  # K=2 tools came back: there may be more
    assert again.qname == "_any._tcp.history.tools." and k_of(again) == 6
    assert walk.take(again, answer(again, tools + [("c", "c.example.", 443, 3, 0.1, "C")])) == []
    assert [t.name for t in walk.result().tools] == ["A", "B", "C"]


def test_failover_keeps_tcp_for_a_big_leaf_answer():
    walk = Walk("weather", k=2, leaf_k=10, root=ROOT)
    [q] = walk.start()
    ref = dns.message.make_response(msg(q))
    ref.authority.append(dns.rrset.from_text("history.tools.", 3600, "IN", "NS", "ns1.history.tools.", "ns2.history.tools."))
    ref.additional.append(txt("history.tools.", [("rank", 1), ("score", 1.0), ("kind", "functional"), ("leaf", 1)]))
    ref.additional.append(dns.rrset.from_text("ns1.history.tools.", 3600, "IN", "A", "127.0.0.4"))
    ref.additional.append(dns.rrset.from_text("ns2.history.tools.", 3600, "IN", "A", "127.0.0.5"))
    [leaf] = walk.take(q, ref.to_wire())
    assert leaf.tcp and set(leaf.servers) == {("127.0.0.4", 5300), ("127.0.0.5", 5300)}  # NS order is the set's
    [other] = walk.take(leaf, None, TimeoutError("no reply"))
    assert other.server != leaf.server and other.tcp  # not UDP first, then truncated, then TCP


def test_a_long_intent_with_a_lone_surrogate_is_a_resolver_error_not_a_crash():
    from resolver_client import ResolverError

    with pytest.raises(ResolverError, match="not valid UTF-8"):
        Walk("a\udcff " * 3000, root=ROOT)


def test_a_query_goes_over_tcp_only_when_it_cannot_fit_a_datagram():
    """The query as sent decides: a long intent with a short cursor name still fits one datagram
    (ToolRet has task descriptions of 900 to 1,100 bytes); a longer one goes over TCP from the start."""
    fits = Walk(intent="x " * 520, k=3, root=[("127.0.0.1", 5300)])
    (q,) = fits.start()
    assert not q.tcp and len(q.wire) <= 1232
    too_long = Walk(intent="x " * 620, k=3, root=[("127.0.0.1", 5300)])
    (q,) = too_long.start()
    assert q.tcp and len(q.wire) > 1232


def _beam_walk(first_parent: str):
    """A walk with beam 2 down a root of three children, two of which refer to two children each;
    *first_parent* ("a" or "b") answers first."""
    walk = Walk("weather", k=3, root=ROOT, beam=2)
    [q] = walk.start()
    level1 = walk.take(q, referral(q, [("a.tools.", "127.0.0.2", 1, 3.0, "functional"),
                                       ("b.tools.", "127.0.0.3", 2, 2.9, "functional"),
                                       ("c.tools.", "127.0.0.4", 3, 2.8, "functional")]))
    by_zone = {n.zone: n for n in level1}
    replies = {"a": [("a1.a.tools.", "127.0.0.5", 1, 5.0, "functional"), ("a2.a.tools.", "127.0.0.6", 2, 1.0, "functional")],
               "b": [("b1.b.tools.", "127.0.0.7", 1, 9.0, "functional"), ("b2.b.tools.", "127.0.0.8", 2, 8.0, "functional")]}
    order = [first_parent, "b" if first_parent == "a" else "a"]
    first = walk.take(by_zone[f"{order[0]}.tools."], referral(by_zone[f"{order[0]}.tools."], replies[order[0]]))
    second = walk.take(by_zone[f"{order[1]}.tools."], referral(by_zone[f"{order[1]}.tools."], replies[order[1]]))
    return walk, level1, first, second


@pytest.mark.parametrize("first_parent", ["a", "b"])
def test_a_beam_asks_the_best_zones_of_a_depth_once_the_depth_above_has_answered(first_parent):
    """At most ``beam`` zones a depth, ordered by the product of the ranks on their path (then the
    ranks from the root down), whichever parent answered first; the rest are recorded as not
    followed, and the children of a depth wait for every parent of it."""
    walk, level1, first, second = _beam_walk(first_parent)
    assert [n.zone for n in level1] == ["a.tools.", "b.tools."]  # c.tools. (rank 3) is beyond the beam
    assert first == []  # its sibling has not answered: its children wait
    # a1 (1 x 1) first; a2 (1 x 2) and b1 (2 x 1) tie, and the better parent's child goes first
    assert [(n.zone, n.depth, n.ranks) for n in second] == [("a1.a.tools.", 2, (1, 1)), ("a2.a.tools.", 2, (1, 2))]
    followed = {r.zone: (r.followed, r.why_not) for h in walk.trace for r in h.referrals}
    assert followed["c.tools."] == (False, "beyond the beam of 2 a depth")
    assert followed["b1.b.tools."] == followed["b2.b.tools."] == (False, "beyond the beam of 2 a depth")
    assert followed["a1.a.tools."] == (True, "")


def test_a_beam_waits_for_a_silent_parent_only_until_it_is_given_up():
    walk = Walk("weather", k=2, root=ROOT, beam=1)
    [q] = walk.start()
    [a] = walk.take(q, referral(q, [("a.tools.", "127.0.0.2", 1, 3.0, "functional"),
                                    ("b.tools.", "127.0.0.3", 2, 2.9, "functional")]))
    [leaf] = walk.take(a, referral(a, [("a1.a.tools.", "127.0.0.5", 1, 5.0, "functional")]))
    assert leaf.zone == "a1.a.tools."
    walk = Walk("weather", k=2, root=ROOT, beam=2)
    [q] = walk.start()
    a, b = walk.take(q, referral(q, [("a.tools.", "127.0.0.2", 1, 3.0, "functional"),
                                     ("b.tools.", "127.0.0.3", 2, 2.9, "functional")]))
    assert walk.take(a, referral(a, [("a1.a.tools.", "127.0.0.5", 1, 5.0, "functional")])) == []
    [again] = walk.take(b, None, TimeoutError("no reply"))  # b's only server: asked once more
    assert again.server == b.server and again.timeout_retried
    [leaf] = walk.take(again, None, TimeoutError("no reply"))  # then given up, and a's child goes
    assert leaf.zone == "a1.a.tools." and walk.unreachable == ["b.tools."]


def test_the_default_beam_never_cuts_the_roots_referral():
    """6 zones a depth, or the root's K when larger: at depth 1 every child the root refers is asked."""
    assert auto_beam(3) == auto_beam((5, 3, 2)) == auto_beam(6) == DEFAULT_BEAM == 6
    assert auto_beam(7) == 7 and auto_beam((10, 5)) == 10 and auto_beam((1,)) == 6


def test_a_beam_below_one_is_refused():
    from resolver_client import ResolverError

    with pytest.raises(ResolverError, match="beam"):
        Walk("weather", root=ROOT, beam=0)


def _formerr(q):
    r = dns.message.make_response(msg(q))
    r.set_rcode(dns.rcode.FORMERR)
    return r.to_wire()


def test_a_beam_asks_nothing_more_once_the_walk_has_failed():
    walk = Walk("weather", k=3, root=ROOT, beam=2)
    [q] = walk.start()
    a, b = walk.take(q, referral(q, [("a.tools.", "127.0.0.2", 1, 3.0, "functional"),
                                     ("b.tools.", "127.0.0.3", 2, 2.9, "functional")]))
    assert walk.take(a, referral(a, [("a1.a.tools.", "127.0.0.5", 1, 5.0, "functional")])) == []
    assert walk.take(b, _formerr(b)) == []  # a1 is not asked: the walk ends with IntentRejected
    with pytest.raises(IntentRejected):
        walk.result()


def test_a_zone_cannot_rank_its_children_ahead_of_everyone_elses():
    """Ranks below 1 or not numbers are read as the child's place in the referral: a zone's own values
    must not win every place of a beam below it, nor stop the walk."""
    walk = Walk("weather", k=3, root=ROOT, beam=2)
    [q] = walk.start()
    a, b = walk.take(q, referral(q, [("a.tools.", "127.0.0.2", 1, 3.0, "functional"),
                                     ("b.tools.", "127.0.0.3", 2, 2.9, "functional")]))
    assert walk.take(a, referral(a, [("a1.a.tools.", "127.0.0.5", 1, 5.0, "functional"),
                                     ("a2.a.tools.", "127.0.0.6", 2, 1.0, "functional")])) == []
    second = walk.take(b, referral(b, [("b1.b.tools.", "127.0.0.7", 0, 9.0, "functional"),
                                       ("b2.b.tools.", "127.0.0.8", -1, 8.0, "functional"),
                                       ("b3.b.tools.", "127.0.0.9", "first", 7.0, "functional")]))
    assert [n.zone for n in second] == ["a1.a.tools.", "a2.a.tools."]
    ranks = {r.zone: r.rank for h in walk.trace for r in h.referrals}
    assert (ranks["b1.b.tools."], ranks["b2.b.tools."], ranks["b3.b.tools."]) == (1, 2, 3)


class _KeysOnTheirWay:
    """A validator whose zones are insecure once their keys were asked for (the walk's side of it only)."""

    def __init__(self):
        self.zones = {}

    def status(self, zone):
        return self.zones.get(zone, "")

    def fail_keys(self, zone, why):
        self.zones[zone] = "insecure"

    def check(self, zone, section, wanted):
        pass

    def delegate(self, parent, child, authority):
        return "insecure"


def test_zones_reached_after_a_failed_key_query_have_their_keys_asked_for():
    """A zone whose DNSKEY query gets no answer is followed unvalidated; the zones its parked referral
    leads to still get their own DNSKEY queries (else their replies would wait for keys forever)."""
    for beam in (None, 2):
        walk = Walk("weather", k=2, root=ROOT[:1], validator=_KeysOnTheirWay(), beam=beam)
        search, keys = walk.start()
        assert keys.qtype == dns.rdatatype.DNSKEY
        assert walk.take(search, referral(search, [("a.tools.", "127.0.0.2", 1, 3.0, "functional"),
                                                   ("b.tools.", "127.0.0.3", 2, 2.9, "functional")])) == []
        [keys] = walk.take(keys, None, TimeoutError("no reply"))  # asked once more, then given up
        out = walk.take(keys, None, TimeoutError("no reply"))
        assert sorted((q.zone, q.qtype) for q in out) == [
            ("a.tools.", dns.rdatatype.SRV), ("a.tools.", dns.rdatatype.DNSKEY),
            ("b.tools.", dns.rdatatype.SRV), ("b.tools.", dns.rdatatype.DNSKEY)], beam
