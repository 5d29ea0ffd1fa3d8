"""Deciding a query's result for one zone: answer, referral, name error, no data or refused.

Pure decision, no message building (that is :mod:`tooldns.serving.reply`), in the manner of CoreDNS's
``file`` plugin: :func:`lookup` returns a :class:`Result` whose *kind* fixes the rcode and flags
and whose record lists are copied into the reply as they are.

Rules (``docs/protocol.md`` is the normative text):

* cursor name at this zone (``_mcp._tcp._weather.tools.`` at ``weather.tools.``):
  with children, a referral to the best K of them (the zone's own tools compete as one more
  candidate, kind ``self``); without children, the tools themselves, through a CNAME from the
  cursor name to the expanded name;
* cursor name or any name at or below a child: a plain referral to that child;
* expanded name (``_mcp._tcp.weather.tools.``): the zone's tools of that service as SRV;
* other names: SOA, NS, name-server addresses and each tool's own SRV and TXT, as any
  authoritative server; NXDOMAIN or NODATA with the SOA; REFUSED outside the zone.

Anything whose presence, order or content depends on the intent is sent with TTL 0.

An intent search (a cursor or expanded name of this zone, with an intent) is decided in two steps:
:func:`ranked` chooses the children or tools (a :class:`Ranked`: indexes, scores, meta) and
:func:`lookup` turns that into records; the fast path (:mod:`tooldns.serving.fast`) packs the
same :class:`Ranked` from bytes encoded once per zone, so both paths answer from one decision.

    >>> lookup(ix, "_mcp._tcp._weather.tools.", QTYPE.SRV, Intent("rain history", 2)).kind
    <Kind.REFERRAL: 'referral'>
    >>> ranked(ix, search_at(ix, "_mcp._tcp._weather.tools."), QTYPE.SRV, Intent("rain history", 2)).kind
    <Kind.REFERRAL: 'referral'>
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

from dnslib import CNAME, QTYPE, RR, SRV, TXT, DNSLabel

from ..protocol import names
from ..exceptions import NameError_
from .index import SELF, ZoneIndex
from ..protocol.intent import Intent
from ..protocol.meta import FLAG_EMBEDDED, FLAG_FALLBACK, FLAG_PRUNED, FLAG_TRIMMED, FLAG_VECTOR_IGNORED
from ..protocol.vector import Vector
from ..protocol.txt import FORMAT
from ..scoring.scorer import Ranking


class Kind(Enum):
    ANSWER = "answer"
    REFERRAL = "referral"
    NXDOMAIN = "nxdomain"
    NODATA = "nodata"
    REFUSED = "refused"


@dataclass
class Result:
    kind: Kind
    answer: list = field(default_factory=list)
    authority: list = field(default_factory=list)
    additional: list = field(default_factory=list)
    #: for intent queries: meta option content (flags, cache TTL, scorer); None otherwise
    meta: tuple[int, int, str] | None = None
    #: text of an Extended DNS Error to attach, if any
    ede: str | None = None


@dataclass(slots=True, init=False)
class Ranked:
    """An intent search decided but not built: which children (a referral) or tools (an answer), best first."""

    kind: Kind  # REFERRAL or ANSWER
    #: what the indexes of *chosen* point into: Delegation or SELF (children), or Tool (tools)
    entries: list
    #: (index into *entries*, score) best first; score None when there was no intent to score
    chosen: list[tuple[int, float | None]]
    #: per chosen tool index, the parts of a hybrid score (BM25, cosine or None)
    parts: dict[int, tuple[float, float | None]]
    #: the meta option's content (flags, cache TTL, scorer); None without an intent
    meta: tuple[int, int, str] | None
    #: tools' ranking TXT records without their descriptions (the query's brief option)
    brief: bool = False

    def __init__(self, kind, entries, chosen, parts, meta, brief=False) -> None:
        # written here rather than by dataclass (whose __init__ runs interpreted): every search makes one
        self.kind = kind
        self.entries = entries
        self.chosen = chosen
        self.parts = parts
        self.meta = meta
        self.brief = brief

    def trimmed(self, n: int) -> "Ranked":
        """The same answer keeping its best *n* tools, its meta saying so (the fit option)."""
        flags, ttl, scorer = self.meta
        return replace(self, chosen=self.chosen[:n], meta=(flags | FLAG_TRIMMED, ttl, scorer))


def fits_trimmed(result: Result) -> int:
    """How many tools *result* holds when it is a ranked answer of tools that the fit option may
    trim (SRV records, one ranking TXT record each, a meta option), else 0."""
    if result.kind is not Kind.ANSWER or result.meta is None:
        return 0
    tools = sum(1 for rr in result.answer if rr.rtype == QTYPE.SRV)
    return tools if tools == len(result.additional) else 0


def trimmed(result: Result, n: int) -> Result:
    """*result*, a ranked answer of tools (:func:`fits_trimmed`), keeping its best *n*: the same
    records as :meth:`Ranked.trimmed` packs."""
    lead = len(result.answer) - len(result.additional)  # the CNAME from a cursor name, if any
    flags, ttl, scorer = result.meta
    return replace(result, answer=result.answer[:lead + n], additional=result.additional[:n],
                   meta=(flags | FLAG_TRIMMED, ttl, scorer))


_TXT_HEAD = [b"tooldns=" + FORMAT.encode()]
#: the types a zone's tools are answered for (read once: dnslib's QTYPE is slow to read)
_TOOL_TYPES = (QTYPE.SRV, QTYPE.ANY)


def select(ranking: Ranking, k: int, prune_ratio: float) -> tuple[list[tuple[int, float]], bool]:
    """Keep at most *k* items; drop those scoring below ``prune_ratio * best`` (when best > 0).

    Returns (kept, pruned). If nothing scores above 0 there is no signal to prune on and the
    first *k* are kept as ranked.
    """
    items = ranking.items[:k]
    if not items or items[0][1] <= 0:
        return items, False
    floor = max(prune_ratio * items[0][1], 1e-12)
    if items[-1][1] >= floor:  # nothing to drop (scores come best first): the items themselves
        return items, False
    kept = [(i, s) for i, s in items if s >= floor]
    return kept, len(kept) < len(items)


def rank_strings(rank: int, score: float | None, parts: tuple[float, float | None] | None = None) -> list[bytes]:
    """The first strings of a ranking TXT record: format and rank, then :func:`score_strings`."""
    return _TXT_HEAD + [f"rank={rank}".encode(), *score_strings(score, parts)]


def score_strings(score: float | None, parts: tuple[float, float | None] | None = None) -> list[bytes]:
    """The score strings of a ranking TXT record: none without an intent; with a hybrid score, its parts."""
    if score is None:
        return []
    out = [f"score={score:.4f}".encode()]
    if parts is not None:  # what a hybrid score was made of, so that clients can fuse leaves again
        out.append(f"bm25={parts[0]:.4f}".encode())
        if parts[1] is not None:
            out.append(f"cos={parts[1]:.4f}".encode())
    return out


def _rank_txt(owner, rank: int, score: float | None, rest: list[bytes],
              parts: tuple[float, float | None] | None = None) -> RR:
    return RR(owner, QTYPE.TXT, ttl=0, rdata=TXT(rank_strings(rank, score, parts) + rest))


def lookup(ix: ZoneIndex, qname: str, qtype: int, intent: Intent | None, vector: Vector | None = None) -> Result:
    """Decide the result of (*qname*, *qtype*) with *intent* (and its *vector*) against zone index *ix*.

    *qname* must be lower-case and absolute; names that break RFC 1035 get NXDOMAIN inside the
    zone (a referral below a child) and REFUSED outside it.
    """
    origin = ix.origin
    try:
        qname = names.normalize(qname)
        cur = names.parse_cursor(qname)
    except NameError_ as exc:
        low = qname.lower()
        if names.is_subdomain(low, origin):
            child = ix.child_for(low)  # a child's name, however malformed, is the child's to deny
            return _delegation(ix, child) if child is not None else \
                Result(Kind.NXDOMAIN, authority=[ix.negative_soa_rr], ede=str(exc))
        return Result(Kind.REFUSED, ede=str(exc))

    if _searches(ix, qname, cur):
        asked = _Asked.of(ix, intent, vector)
        return _tools(ix, qname, cur, qtype, asked, answer=[]) if cur.expanded else _search(ix, cur, qtype, asked)
    if cur is not None and not cur.expanded and names.is_subdomain(cur.zone, origin):
        child = ix.child_for(cur.zone)
        if child is not None:
            return _delegation(ix, child)
        return Result(Kind.NXDOMAIN, authority=[ix.negative_soa_rr])

    if not names.is_subdomain(qname, origin):
        return Result(Kind.REFUSED)
    child = ix.child_for(qname)
    if child is not None:
        return _delegation(ix, child)
    rrsets = ix.rrsets(qname)
    if rrsets is not None:
        if qtype == QTYPE.ANY:
            return Result(Kind.ANSWER, answer=[rr for rrs in rrsets.values() for rr in rrs])
        if qtype in rrsets:
            result = Result(Kind.ANSWER, answer=list(rrsets[qtype]))
            if qtype == QTYPE.NS and qname == origin:
                result.additional = _addresses(ix, [rr.rdata.label for rr in rrsets[qtype]])
            return result
        return Result(Kind.NODATA, authority=[ix.negative_soa_rr])
    if qname in ix.ents:
        return Result(Kind.NODATA, authority=[ix.negative_soa_rr])
    return Result(Kind.NXDOMAIN, authority=[ix.negative_soa_rr])


def _searches(ix: ZoneIndex, qname: str, cur: names.Cursor | None) -> bool:
    """Whether *qname* (normalized, parsed as *cur*) asks this zone to search: its cursor name, or
    its expanded name when that does not lie in a child zone (a child's names are referred)."""
    return cur is not None and cur.zone == ix.origin and not (cur.expanded and ix.child_for(qname) is not None)


def search_at(ix: ZoneIndex, qname: str) -> names.Cursor | None:
    """The cursor of *qname* when it asks zone *ix* to search its children or tools, else None.

    Raises :class:`NameError_` for names that break RFC 1035 or name an unknown service.
    """
    qname = names.normalize(qname)
    cur = names.parse_cursor(qname)
    return cur if _searches(ix, qname, cur) else None


def ranked(ix: ZoneIndex, cur: names.Cursor, qtype: int, intent: Intent | None,
           vector: Vector | None = None) -> Ranked | None:
    """The ranked referral or answer of an intent search *cur* of this zone (see :func:`search_at`),
    decided but not built; None for any other outcome (no intent; no tools of the service; a type
    other than SRV or ANY where tools are answered), which only :func:`lookup` answers.

    Whenever it returns a :class:`Ranked`, :func:`lookup` answers the same query from it.
    """
    if intent is None:
        return None
    if not cur.expanded and ix.child_candidates is not None:
        asked = _Asked(intent, None, False, False) if vector is None and ix.intent_embeddings is None else \
            _Asked.of(ix, intent, vector)  # most zones: nothing to embed or compare
        return _rank_children(ix, cur, asked)
    candidates = ix.tool_candidates.get((cur.service, cur.transport))
    if candidates is None or qtype not in _TOOL_TYPES:
        return None
    return _rank_tools(ix, candidates, _Asked.of(ix, intent, vector))


def _addresses(ix: ZoneIndex, ns_names) -> list:
    out = []
    for n in ns_names:
        rrsets = ix.rrsets(str(n).lower()) or {}
        out.extend(rrsets.get(QTYPE.A, []) + rrsets.get(QTYPE.AAAA, []))
    return out


def _delegation(ix: ZoneIndex, child) -> Result:
    return Result(Kind.REFERRAL, authority=list(ix.child_ns[child.name]), additional=list(ix.child_glue[child.name]))


@dataclass(slots=True, init=False)
class _Asked:
    """An intent with the vector this zone ranks it with, whether the query's own went unused, whether
    embedding the intent here failed, and whether the vector was embedded here (the query sent none usable)."""

    intent: Intent
    vector: Vector | None
    vector_ignored: bool
    embed_failed: bool
    embedded: bool

    def __init__(self, intent, vector, vector_ignored, embed_failed, embedded=False) -> None:
        # written here rather than by dataclass (whose __init__ runs interpreted): every search makes one
        self.intent = intent
        self.vector = vector
        self.vector_ignored = vector_ignored
        self.embed_failed = embed_failed
        self.embedded = embedded

    @classmethod
    def of(cls, ix: ZoneIndex, intent: Intent | None, sent: Vector | None) -> "_Asked | None":
        if intent is None:
            return None
        if sent is None and ix.intent_embeddings is None:  # most zones: nothing to embed or compare
            return cls(intent, None, False, False)
        vector, ignored, failed = ix.intent_vector(intent.text, sent)
        return cls(intent, vector, ignored, failed, vector is not None and vector is not sent)


def _meta(ttl: int, ranking: Ranking, pruned: bool, asked: _Asked) -> tuple[int, int, str]:
    """The meta option's content for *ranking* of *asked*, cached for *ttl* (the zone's intent_ttl)."""
    flags = ((FLAG_FALLBACK if ranking.fallback or asked.embed_failed else 0) | (FLAG_PRUNED if pruned else 0)
             | (FLAG_VECTOR_IGNORED if asked.vector_ignored else 0) | (FLAG_EMBEDDED if asked.embedded else 0))
    return flags, ttl, ranking.scorer


def _search(ix: ZoneIndex, cur: names.Cursor, qtype: int, asked: _Asked | None) -> Result:
    """A cursor query at this zone: refer to the best children, or answer with the tools."""
    if ix.child_candidates is None:
        if (cur.service, cur.transport) not in ix.tools:
            return Result(Kind.NODATA, authority=[ix.negative_soa_rr])
        expanded = cur.expand().to_text()
        cname = RR(cur.to_text(), QTYPE.CNAME, ttl=ix.ttl, rdata=CNAME(expanded))
        return _tools(ix, expanded, cur, qtype, asked, answer=[cname])
    return _referral(ix, _rank_children(ix, cur, asked))


def _rank_children(ix: ZoneIndex, cur: names.Cursor, asked: _Asked | None) -> Ranked:
    """The best children for *asked* (all of them, in zone-file order, without an intent)."""
    candidates = ix.child_candidates
    entries = candidates.entries
    # "self" stands for this zone's tools; useless when it has none of the asked service.
    if asked is None:
        has_service = (cur.service, cur.transport) in ix.tools
        chosen = [(i, None) for i, e in enumerate(entries) if has_service or e is not SELF]
        return Ranked(Kind.REFERRAL, entries, chosen, {}, None)
    max_k, prune_ratio, ttl = ix.search_settings
    intent = asked.intent
    k = intent.k if intent.k < max_k else max_k
    ranking = candidates.scorer.rank(intent.text, k + 1, asked.vector)
    if candidates.has_self and (cur.service, cur.transport) not in ix.tools:
        ranking.items = [(i, s) for i, s in ranking.items if entries[i] is not SELF]
    chosen, pruned = select(ranking, k, prune_ratio)
    return Ranked(Kind.REFERRAL, entries, chosen, {}, _meta(ttl, ranking, pruned, asked))


def candidate_records(ix: ZoneIndex, entry) -> tuple[list, DNSLabel, list[bytes], list]:
    """What a referral carries for one chosen candidate (a Delegation, or SELF) besides the ranks and
    scores: its NS records (authority), the owner of its ranking TXT record and the strings after
    ``rank=`` and ``score=``, and its name servers' addresses (additional)."""
    if entry is SELF:
        return ix.apex_ns, ix.origin_label, ix.self_txt, _addresses(ix, [rr.rdata.label for rr in ix.apex_ns])
    return ix.child_ns[entry.name], ix.child_label[entry.name], ix.child_txt[id(entry)], ix.child_glue[entry.name]


def _referral(ix: ZoneIndex, ranked: Ranked) -> Result:
    authority, additional = [], []
    for rank, (i, score) in enumerate(ranked.chosen, 1):
        ns, owner, strings, glue = candidate_records(ix, ranked.entries[i])
        authority.extend(ns)
        additional.append(_rank_txt(owner, rank, score, strings))
        additional.extend(glue)
    return Result(Kind.REFERRAL, authority=authority, additional=additional, meta=ranked.meta)


def _tools(ix: ZoneIndex, owner: str, cur: names.Cursor, qtype: int, asked: _Asked | None, answer: list) -> Result:
    """The zone's tools of one service as SRV records (best first when there is an intent)."""
    candidates = ix.tool_candidates.get((cur.service, cur.transport))
    if candidates is None:  # no tools of this service here (a cursor query checked before the CNAME)
        return Result(Kind.NXDOMAIN, authority=[ix.negative_soa_rr])
    if qtype not in (QTYPE.SRV, QTYPE.ANY):
        kind = Kind.ANSWER if answer else Kind.NODATA
        return Result(kind, answer=answer, authority=[ix.negative_soa_rr])
    tools = candidates.entries
    additional = []
    if asked is None:
        for tool in tools:
            answer.append(RR(owner, QTYPE.SRV, ttl=ix.ttl, rdata=SRV(tool.priority, tool.weight, tool.port, tool.target)))
            additional.append(_rank_txt(tool.owner(ix.origin), len(additional) + 1, None, ix.ranked_tool_txt[id(tool)]))
        return Result(Kind.ANSWER, answer=answer, additional=additional)
    return _answer(ix, owner, _rank_tools(ix, candidates, asked), answer)


def _rank_tools(ix: ZoneIndex, candidates, asked: _Asked) -> Ranked:
    """The best tools of *candidates* for *asked*: with a page option, the best after its *skip*
    (:mod:`tooldns.protocol.page`), ranked and pruned as the whole ranking is."""
    max_k, prune_ratio, ttl = ix.search_settings
    intent = asked.intent
    k = intent.k if intent.k < max_k else max_k
    skip = intent.skip
    ranking = candidates.scorer.rank(intent.text, skip + k, asked.vector)
    chosen, pruned = select(ranking, skip + k, prune_ratio)
    if skip:
        chosen = chosen[skip:]
    return Ranked(Kind.ANSWER, candidates.entries, chosen, ranking.parts or {}, _meta(ttl, ranking, pruned, asked),
                  intent.brief)


def _answer(ix: ZoneIndex, owner: str, ranked: Ranked, answer: list) -> Result:
    additional = []
    texts = ix.brief_tool_txt if ranked.brief else ix.ranked_tool_txt
    for rank, (i, score) in enumerate(ranked.chosen, 1):
        tool = ranked.entries[i]
        # priority = rank, so an ordinary SRV client takes the best first; TTL 0: intent-specific
        answer.append(RR(owner, QTYPE.SRV, ttl=0, rdata=SRV(rank, tool.weight, tool.port, tool.target)))
        additional.append(_rank_txt(tool.owner(ix.origin), rank, score, texts[id(tool)], ranked.parts.get(i)))
    return Result(Kind.ANSWER, answer=answer, additional=additional, meta=ranked.meta)
