"""A zone indexed once for answering: records by name, scorers built, nothing parsed per query.

Built from a :class:`tooldns.zone.model.Zone` when a zone file is (re)loaded; immutable afterwards, so
a reload swaps the whole index at once and a query always sees one consistent version.

    >>> ix = ZoneIndex(load_zone("zones/tools.yaml"))
    >>> ix.child_for("_mcp._tcp.history.weather.tools.").name
    'weather.tools.'
"""

from __future__ import annotations

import ipaddress
import logging
from collections import Counter
from dataclasses import dataclass, field

from dnslib import AAAA, NS, QTYPE, RR, SOA, SRV, TXT, A, DNSLabel

from ..compiled import TURN_EVERY, turn
from ..embedding.registry import IntentEmbeddings, Paused, shared_intent_embeddings
from ..protocol import names
from ..protocol.plan import encode_plan, plan_name
from ..protocol.summary import encode_summary, summary_name
from ..protocol.txt import MAX_RANKED_TEXT, encode_pairs
from ..protocol.vector import Vector, quantize
from ..scoring.bm25 import all_faceted, facets_of
from ..scoring.registry import make_scorer
from ..scoring.scorer import Scorer
from ..scoring.tokenize import Tokenized, tokenize
from ..zone.model import Delegation, Tool, Zone
from .offloop import WouldWait, may_wait
from .summaries import publish

log = logging.getLogger(__name__)


def address_rr(name: str, address: str, ttl: int) -> RR:
    ip = ipaddress.ip_address(address)
    if ip.version == 4:
        return RR(name, QTYPE.A, ttl=ttl, rdata=A(address))
    return RR(name, QTYPE.AAAA, ttl=ttl, rdata=AAAA(address))


#: items an index's :meth:`ZoneIndex.release` frees, or an index read back keys by tool
#: (:func:`_by_id`), between two turns for other threads
RELEASE_STEP = 1000


class _Self:
    """What stands for a zone's own tools among its children's candidates (kind "self"): one object,
    compared by identity, and the same object again in an index read back by :mod:`pickle`."""

    def __reduce__(self) -> str:
        return "SELF"

    def __repr__(self) -> str:
        return "SELF"


SELF = _Self()


def embedded_intent(origin: str, own: IntentEmbeddings | None, text: str,
                    ignored: bool) -> tuple[Vector | None, bool, bool]:
    """:meth:`ZoneIndex.intent_vector` of zone *origin* for an intent that came without a usable vector
    (*ignored*: one came, of another model): *text* embedded with *own* (None: the zone embeds none),
    if its model covers the intent's language; on the event loop only an intent embedded already, else
    :class:`~.offloop.WouldWait`. A failure: BM25 alone, flagged."""
    if own is None or not own.embedder.covers(text):
        return None, ignored, False
    values = own.cached(text)
    if values is None and not may_wait():  # on the event loop: the server asks again in its pool
        raise WouldWait(f"{origin}: an intent to embed")
    try:
        return quantize(own.embedder.model, values if values is not None else own.vector(text)), ignored, False
    except Paused:  # said when it failed: BM25 alone until the pause ends, one log line for them all
        return None, ignored, True
    except Exception as exc:  # EmbeddingError, or a vector quantize refuses: BM25 alone, flagged
        log.warning("%s: cannot embed an intent (%s); BM25 alone answers", origin, exc)
        return None, ignored, True


@dataclass
class Candidates:
    """What one scorer ranks: the entries it indexes, in document order."""

    entries: list  # Delegation or SELF (children), or Tool (tools)
    scorer: Scorer
    #: whether SELF is among the entries (the zone's own tools compete with its children)
    has_self: bool = field(init=False)

    def __post_init__(self) -> None:
        self.has_self = any(e is SELF for e in self.entries)


def _empty(postings) -> int:
    """Empty a term's postings list (:class:`~tooldns.scoring.bm25.BM25`'s, a list of its own) in steps
    with a turn between; the pairs freed. Anything else (a plain list among them) is left alone: 0."""
    if not isinstance(postings, list) or type(postings) is list:
        return 0
    freed = len(postings)
    while len(postings) > RELEASE_STEP:
        del postings[-RELEASE_STEP:]
        turn()
    postings.clear()
    return freed


def _by_id(objects, values) -> dict:
    """*values* by the ``id()`` of *objects*, a few thousand at a time with a turn for other threads
    between (an index read back in the serving process, :mod:`.loader`)."""
    out = {}
    for start in range(0, len(objects), RELEASE_STEP):
        out.update(zip(map(id, objects[start:start + RELEASE_STEP]), values[start:start + RELEASE_STEP]))
        turn()
    return out


def tool_metadata(tool: Tool, full: bool, brief: bool = False) -> list[tuple[str, object]]:
    """The ``key=value`` pairs of a tool's TXT record: *full* adds the parameters (the tool's own
    name); *brief* leaves out the description and the service (which the record's owner name says)."""
    pairs: list[tuple[str, object]] = [("name", tool.name)] + ([] if brief else [("service", tool.service)])
    if tool.endpoint:
        pairs.append(("endpoint", tool.endpoint))
    if tool.id:
        pairs.append(("id", tool.id))
    if not brief:
        pairs.append(("desc", tool.description))
    if full:
        for p in tool.parameters:
            text = f"{p.name}:{p.type}:{'required' if p.required else 'optional'}:{p.description}"
            # cut by bytes, at a character boundary: one "param=" string of at most 255 octets
            pairs.append(("param", text.encode("utf-8")[:240].decode("utf-8", "ignore")))
    return pairs


def own_tools_terms(tools) -> tuple[Counter, list[Counter]]:
    """A zone's own tools ("self" among its children) as the ``bm25`` scorer reads them when every
    child has facets: their terms counted, and their facets; each tool tokenized once. What
    ``tooldns build --update`` routes new tools by, too (:class:`tooldns.building.state.ChildTerms`)."""
    tokens = [tokenize(t.text()) for t in tools]
    counts: Counter = Counter()
    for terms in tokens:
        counts.update(terms)
    return counts, list(facets_of(tokens))


def _own_tools_document(tools, faceted: bool) -> str:
    """What the zone's own tools are scored as among its children ("self"); in facets as theirs are
    when every child has them (:attr:`tooldns.zone.model.Summary.facets`)."""
    text = " ".join(t.text() for t in tools)
    if not faceted:
        return text
    counts, facets = own_tools_terms(tools)
    return Tokenized(text, dict(counts), tuple(map(dict, facets)))


class ZoneIndex:
    """Everything :func:`tooldns.serving.lookup.lookup` needs about one zone."""

    #: the zone's online signer (:class:`tooldns.dnssec.signer.ZoneSigner`), set by its store when the
    #: zone has keys; None: the zone is not signed
    signer = None

    def __init__(self, zone: Zone) -> None:
        self.zone = zone
        self.origin = zone.origin
        self.origin_label = DNSLabel(zone.origin)
        self.ttl = zone.ttl
        settings = zone.settings
        #: what every intent search here reads of the zone's settings: (max_k, prune_ratio, intent_ttl)
        self.search_settings = (settings.max_k, settings.prune_ratio, settings.intent_ttl)
        self.records: dict[str, dict[int, list[RR]]] = {}
        self.ents: set[str] = set()
        #: the owner of the summary this zone publishes (:meth:`published_rr`)
        self.summary_name = summary_name(zone.origin)
        self._published: RR | None = None
        self._index_apex()
        self._index_children()
        self._index_tools()
        self._build_scorers()
        # Precomputed metadata strings for ranked answers (rank/score are prepended per query).
        # Referrals carry no summaries: a client routes by rank and score, and a referral to ten
        # children then fits one datagram instead of being retried over TCP.
        self.ranked_tool_txt: dict[int, list[bytes]] = {}
        #: the same without descriptions, for queries with the brief option (:mod:`tooldns.protocol.brief`)
        self.brief_tool_txt: dict[int, list[bytes]] = {}
        for i, t in enumerate(zone.tools):
            if i % TURN_EVERY == TURN_EVERY - 1:
                turn()  # a waiting event loop's turn (a work thread indexes a large zone)
            self.ranked_tool_txt[id(t)] = encode_pairs(tool_metadata(t, full=False), clip=MAX_RANKED_TEXT)[1:]
            self.brief_tool_txt[id(t)] = encode_pairs(tool_metadata(t, full=False, brief=True), clip=MAX_RANKED_TEXT)[1:]
        self.child_txt = {
            id(c): encode_pairs([("kind", c.kind), *([("leaf", 1)] if c.leaf else [])])[1:]
            for c in zone.children
        }
        self.self_txt = encode_pairs([("kind", "self")])[1:]
        #: the fast path's pieces of each tool, in the zone's order, when made before the index is
        #: served (by the loading process, :func:`tooldns.serving.fast.pack.tool_pieces`); None: made
        #: by the fast path when first asked
        self.packed_tools: list | None = None
        #: the same of the names that ask this zone to search (:func:`tooldns.serving.fast.pack.routes_of`)
        self.packed_routes: dict | None = None
        scorers = self.scorers()
        #: the embedding model of this zone's vectors (None: it has none)
        self.model, self.dim = next(((s.model, s.dim) for s in scorers if s.model is not None), (None, 0))
        #: intents that arrive without a usable vector are embedded here when the zone says so
        self.intent_embeddings = (shared_intent_embeddings(zone.settings.embed_intents)
                                  if zone.settings.embed_intents else None)
        #: replies depend only on the query bytes and this index (so the server may cache them)
        self.cacheable = all(s.cacheable for s in scorers)
        #: a scorer may take a while on every query: the server answers this zone off its event loop
        #: (an intent to embed is moved off it query by query, :meth:`intent_vector`)
        self.blocking = any(s.blocking for s in scorers)

    def __getstate__(self) -> dict:
        """What :mod:`pickle` keeps of an index (a zone loaded in another process, :mod:`.loader`): the
        texts kept by tool and child in their zone's order rather than by ``id()``, which another
        process gives other numbers; neither the signer nor the process's shared intent embedder."""
        state = self.__dict__.copy()
        state["ranked_tool_txt"] = [self.ranked_tool_txt[id(t)] for t in self.zone.tools]
        state["brief_tool_txt"] = [self.brief_tool_txt[id(t)] for t in self.zone.tools]
        state["child_txt"] = [self.child_txt[id(c)] for c in self.zone.children]
        state.pop("signer", None)
        state.pop("intent_embeddings", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        tools, children = self.zone.tools, self.zone.children
        self.ranked_tool_txt = _by_id(tools, state["ranked_tool_txt"])
        self.brief_tool_txt = _by_id(tools, state["brief_tool_txt"])
        self.child_txt = _by_id(children, state["child_txt"])
        embed = self.zone.settings.embed_intents
        self.intent_embeddings = shared_intent_embeddings(embed) if embed else None

    def _add(self, rr: RR) -> None:
        owner = str(rr.rname).lower()
        self.records.setdefault(owner, {}).setdefault(rr.rtype, []).append(rr)
        self._add_ents(owner)

    def _add_ents(self, owner: str) -> None:
        """Every name between *owner* and the origin exists (empty non-terminals)."""
        n = names.parent(owner)
        while n != self.origin and names.is_subdomain(n, self.origin) and n not in self.ents:
            self.ents.add(n)
            n = names.parent(n)

    def _index_apex(self) -> None:
        """SOA, NS, the addresses of in-zone name servers, and the walk the zone publishes."""
        zone, ttl, soa = self.zone, self.ttl, self.zone.soa
        self.soa_rr = RR(zone.origin, QTYPE.SOA, ttl=ttl,
                         rdata=SOA(soa.mname, soa.rname, (soa.serial, soa.refresh, soa.retry, soa.expire, soa.minimum)))
        # Negative answers are cached for min(SOA TTL, SOA minimum) (RFC 2308).
        self.negative_soa_rr = RR(zone.origin, QTYPE.SOA, ttl=min(ttl, soa.minimum), rdata=self.soa_rr.rdata)
        self._add(self.soa_rr)
        self.apex_ns = [RR(zone.origin, QTYPE.NS, ttl=ttl, rdata=NS(ns.name)) for ns in zone.nameservers]
        for rr in self.apex_ns:
            self._add(rr)
        for ns in zone.nameservers:
            if names.is_subdomain(ns.name, zone.origin) and not self._below_child(ns.name):
                self._add(address_rr(ns.name, ns.address, ttl))
        # the same for every intent, so it keeps the zone's TTL; a record among the zone's names like
        # the SOA (answered to TXT and ANY, NODATA to other types, signed, in NSEC bitmaps); a zone
        # without a walk has no such name (NXDOMAIN)
        if zone.walk is not None:
            self._add(RR(plan_name(zone.origin), QTYPE.TXT, ttl=ttl, rdata=TXT(encode_plan(zone.walk))))

    def _index_children(self) -> None:
        """Delegations: NS and glue, intent-independent, so they keep the zone's TTL."""
        ttl = self.ttl
        self.children = list(self.zone.children)
        self.child_label = {c.name: DNSLabel(c.name) for c in self.children}  # parsed once, not per query
        self.child_ns: dict[str, list[RR]] = {}
        self.child_glue: dict[str, list[RR]] = {}
        for child in self.children:
            self.child_ns[child.name] = [RR(child.name, QTYPE.NS, ttl=ttl, rdata=NS(ns.name)) for ns in child.nameservers]
            self.child_glue[child.name] = [address_rr(ns.name, ns.address, ttl) for ns in child.nameservers]

    def _index_tools(self) -> None:
        """Tools by (service, transport), each with its own SRV and TXT; the wildcard service too."""
        self.tools: dict[tuple[str, str], list[Tool]] = {}
        for tool in self.zone.tools:
            self.tools.setdefault((tool.service, tool.transport), []).append(tool)
        # a tool's own records (SRV and full TXT) are made when its name is asked for (rrsets()): a
        # leaf's tools are asked for by intent nearly always, and dnslib records cost time and memory
        self.tool_owners: dict[str, Tool] = {}
        for tool in self.zone.tools:
            owner = tool.owner(self.origin).lower()
            self.tool_owners[owner] = tool
            self._add_ents(owner)  # _svc._tcp.<origin> and _tcp.<origin>
        for tool in self.zone.tools:
            self.tools.setdefault((names.ANY_SERVICE, tool.transport), []).append(tool)

    def _build_scorers(self) -> None:
        """Scorers, built once. The zone's own tools take part in the referral ranking as one extra
        candidate ("self") so that a zone with both children and tools hides no tool."""
        zone, settings = self.zone, self.zone.settings
        child_options = {**settings.scorer_options, **settings.child_scorer_options}
        tool_options = dict(settings.scorer_options)
        # corpus statistics make tool scores comparable across zones; children need no such thing
        if zone.corpus_stats is not None:
            tool_options.setdefault("stats", zone.corpus_stats)
        # the catalog's mean tool vector: cosines less the intent's with it, for children and tools alike
        if zone.vector_centre:
            tool_options.setdefault("centre", zone.vector_centre)
            child_options.setdefault("centre", zone.vector_centre)
        child_entries: list = list(zone.children)
        child_docs = [c.summary.document() or c.label for c in zone.children]
        child_briefs = [f"{c.label}: {c.summary.display()}" for c in zone.children]
        child_vectors = [c.vectors for c in zone.children]
        if zone.children and zone.tools:
            child_entries.append(SELF)
            # only the tools themselves: the zone's summary speaks for its children too
            child_docs.append(_own_tools_document(zone.tools, faceted=all_faceted(child_docs)))
            child_briefs.append("tools of this zone itself: " + "; ".join(t.name for t in zone.tools[:20]))
            child_vectors.append(tuple(t.vector for t in zone.tools if t.vector))
        self.child_candidates = (Candidates(child_entries, make_scorer(settings.scorer, child_docs, child_briefs,
                                                                       child_vectors, **child_options))
                                 if zone.children else None)
        # one scorer per distinct tool list: a zone whose tools are all of one service has the same list
        # under that service and under the wildcard "any" (most leaves: half their indexing time and memory)
        shared: dict[tuple[int, ...], Candidates] = {}
        self.tool_candidates = {}
        for key, tools in self.tools.items():
            same = tuple(map(id, tools))
            if same not in shared:
                shared[same] = Candidates(tools, make_scorer(
                    settings.scorer, [t.text() for t in tools], [f"{t.name}: {t.description}" for t in tools],
                    [(t.vector,) if t.vector else () for t in tools], **tool_options))
            self.tool_candidates[key] = shared[same]

    def intent_vector(self, text: str, sent: Vector | None) -> tuple[Vector | None, bool, bool]:
        """The vector to rank *text* with; whether the one the query *sent* was left unused; and
        whether embedding the intent here failed (BM25 alone then answers, flagged FALLBACK).

        A sent vector of this zone's model and size is used as it is; otherwise the zone embeds the
        intent itself when its settings say so (with the one model and cache its process shares),
        if the model covers the intent's language: on the event loop only an intent embedded already,
        else :class:`~.offloop.WouldWait`.
        """
        if sent is not None and (sent.model, sent.dim) == (self.model, self.dim):
            return sent, False, False
        return embedded_intent(self.origin, self.intent_embeddings, text, sent is not None)

    def rrsets(self, name: str) -> dict[int, list[RR]] | None:
        """The records of *name* (lower-case, absolute) by type, None when it holds none; a tool's
        own SRV and TXT records, and the summary the zone publishes, are made here, on demand."""
        found = self.records.get(name)
        if found is not None:
            return found
        if name == self.summary_name:
            return {QTYPE.TXT: [self.published_rr()]}
        tool = self.tool_owners.get(name)
        if tool is None:
            return None
        return {QTYPE.SRV: [RR(name, QTYPE.SRV, ttl=self.ttl, rdata=SRV(tool.priority, tool.weight, tool.port,
                                                                        tool.target))],
                QTYPE.TXT: [RR(name, QTYPE.TXT, ttl=self.ttl, rdata=TXT(encode_pairs(tool_metadata(tool, full=True))))]}

    def published_rr(self) -> RR:
        """The TXT record of the summary this zone publishes for its parent (``_summary.<origin>``,
        :mod:`tooldns.serving.summaries`), made when first asked for."""
        if self._published is None:
            self._published = RR(self.summary_name, QTYPE.TXT, ttl=0,
                                 rdata=TXT(encode_summary(publish(self.zone))))
        return self._published

    def scorers(self) -> list[Scorer]:
        """Every scorer this index built (for counters and for closing)."""
        out = [self.child_candidates.scorer] if self.child_candidates else []
        return out + list({id(c.scorer): c.scorer for c in self.tool_candidates.values()}.values())  # each once

    def close(self) -> None:
        for scorer in self.scorers():
            scorer.close()

    def postings(self) -> list[dict]:
        """The postings dictionaries of this index's scorers (:meth:`~tooldns.scoring.scorer.Scorer.postings`)."""
        return [postings for scorer in self.scorers() for postings in scorer.postings()]

    def release(self) -> None:
        """Empty what this index holds, about :data:`RELEASE_STEP` items at a time with a turn for other
        threads between, a term's postings counted as the pairs in it (a common term's are emptied
        in steps too): freed at once, a 10,000-tool index held the interpreter's lock for 57 ms, and
        2,000 terms at a time still 42 ms. Only for an index nothing reads any more
        (:meth:`tooldns.serving.store.ZoneStore.check` makes sure)."""
        containers = [*self.postings(), self.ranked_tool_txt, self.brief_tool_txt, self.tool_owners,
                      *([self.packed_tools] if self.packed_tools else []),
                      *self.tools.values(), *(c.entries for c in self.tool_candidates.values())]
        done = 0
        for container in containers:
            if isinstance(container, dict):
                for key in list(container):
                    value = container.pop(key)
                    done += 1 + _empty(value)
                    if done >= RELEASE_STEP:
                        turn()
                        done = 0
            else:
                while container:
                    del container[-RELEASE_STEP:]
                    turn()

    def _below_child(self, name: str) -> bool:
        return any(names.is_subdomain(name, c.name) for c in self.zone.children)

    def child_for(self, name: str) -> Delegation | None:
        """The delegation at or above *name*, if *name* lies in a child zone."""
        for child in self.children:
            if names.is_subdomain(name, child.name):
                return child
        return None
