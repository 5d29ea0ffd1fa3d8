"""The walk down the `.tools` tree as an I/O-free state machine (after dnspython's ``_Resolution``).

A :class:`Walk` never touches a socket. A driver asks it for queries, sends them however it
likes (the sync and async resolvers in :mod:`resolver_client.resolver`) and hands back what came
of each; the walk decides what to ask next::

    walk = Walk(intent="historical weather Hong Kong", k=3, root=[("127.0.0.1", 5300)])
    pending = walk.start()
    while pending:
        query = pending.pop()
        wire = send(query.wire, query.server, query.tcp)          # the driver's only job
        pending += walk.take(query, wire, error=None, ms=0.4)
    resolution = walk.result()

Rules it follows (``docs/protocol.md``):

* every query goes out with RD=0, the intent option, and the cursor name of the zone asked;
* a referral's children are followed best first, through their glue, each one zone deeper, in
  parallel (all at once: the driver sends them concurrently); a referral back to the zone itself
  (kind ``self``) asks for the zone's tools by the expanded name;
* organisation children are followed only when trusted (``trust``) and not excluded;
* a timeout, refusal or server failure moves on to the zone's next name server; a timeout on the
  last (or only) one asks it once more; TC moves to TCP;
* a response that does not match its query (ID, question) is treated like a lost one;
* FORMERR ends the walk with :class:`IntentRejected`, carrying the server's EDE text;
* depth and total queries are bounded; with a ``beam``, so are the zones asked at each depth: the
  children of a depth wait until every zone of the depth above has answered, and only the best
  ``beam`` of them, by the ranks on their paths, are asked;
* with a relevance ``floor`` (search mode ``get_all``, :mod:`.modes`), only tools scoring at least
  ``floor`` x the best score found are returned, and those a narrower walk would have found
  (``floor_spares``);
* with a ``validator`` (:mod:`.validate`), queries set DO, each zone visited is also asked for its
  DNSKEY RRset (its search replies wait for it), and the chain of trust is checked from the anchor
  down to every tool: each tool says ``dnssec`` secure or insecure; bogus data is dropped, counted
  (``stats.bogus``) and explained in ``errors``; with ``require_secure``, insecure tools are dropped too.

How wide the walk is (K per depth, ``leaf_k``, the floor) is the search mode's choice, made by the
drivers (:mod:`resolver_client.modes`); the walk only carries it out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import dns.edns
import dns.exception
import dns.flags
import dns.rcode
import dns.rdatatype

from tooldns.protocol import names
from tooldns.protocol import IntentError, NameError_
from tooldns.protocol.ede import EDE_OPTION_CODE, decode_ede
from tooldns.protocol.hygiene import neutralise, printable
from tooldns.protocol.fusion import DEFAULT_WEIGHT, fuse
from tooldns.protocol.intent import INTENT_OPTION_CODE, MAX_INTENT_BYTES, encode_intent, shorten_intent
from tooldns.protocol.meta import META_OPTION_CODE, Meta, decode_meta
from tooldns.protocol.txt import decode_pairs
from tooldns.protocol.brief import BRIEF_OPTION_CODE, encode_brief
from tooldns.protocol.fit import FIT_OPTION_CODE, encode_fit
from tooldns.protocol.page import MAX_SKIP, PAGE_OPTION_CODE, encode_page
from tooldns.protocol.vector import VECTOR_OPTION_CODE

from .exceptions import BadResponse, IntentRejected, LimitExceeded, NoServersReachable, ResolverError, ValidationFailed
from .message import Reply, is_reply_to, make_query, opt_record, parse_reply
from .results import Hop, Referral, Resolution, Stats, Tool
from .validate import BOGUS, INSECURE, SECURE, Bogus, Validator

UDP_PAYLOAD = 1232
#: tools whose SRV and metadata fit one UDP reply, about (descriptions are cut to 120 bytes)
TOOLS_PER_DATAGRAM = 4
#: the same without descriptions (the brief option); a reply that does not fit comes back truncated
#: and is asked again over TCP
BRIEF_TOOLS_PER_DATAGRAM = 6


#: the longest name a walk's queries are expected to ask, in octets: a cursor name five zones deep
#: with labels of 20 characters (the million-tool tree's are under 60); a query whose name is
#: longer still goes over TCP when its intent does not fit
DATAGRAM_NAME = 128


def _datagram_intent(extra: list[dns.edns.Option]) -> int:
    """The longest intent (UTF-8 bytes) whose query fits one datagram with options *extra* for any
    name up to :data:`DATAGRAM_NAME` octets: header, name, type and class, the OPT record, the
    intent option's header and its own (version, length, K)."""
    options = sum(4 + len(o.to_wire()) for o in extra)
    return min(MAX_INTENT_BYTES, UDP_PAYLOAD - (12 + DATAGRAM_NAME + 4) - 11 - options - 4 - 4)


def _rank(pairs: dict[str, str], position: int) -> int:
    """A referral's ``rank=``: its *position* in the referral when missing, not a number or below 1 (a
    zone's own values must not put its children ahead of every other zone's in a beam)."""
    try:
        rank = int(pairs.get("rank", position))
    except ValueError:
        return position
    return rank if rank >= 1 else position


#: a resolver's beam unless told otherwise (:func:`auto_beam`): chosen on the replays of the
#: 100,000- and 1,000,000-tool trees (docs/building.md, "A beam"), where 6 lay on a better curve of hit
#: rate against DNS queries than narrower K schedules
DEFAULT_BEAM = 6
#: ``Resolver(beam=AUTO_BEAM)``, the default: the beam :func:`auto_beam` gives the walk's K
AUTO_BEAM = "auto"


def auto_beam(k: int | tuple[int, ...]) -> int:
    """The beam a resolver walks with by default for K *k* (one K, or one per depth): :data:`DEFAULT_BEAM`,
    or the root's K when that is larger. A referral of the root is thus always followed whole, as K
    asks, and a tree of two levels (ToolRet's, or the builder's default up to 1,250,000 tools) is
    walked exactly as without a beam; only deeper depths, where the referrals of several zones meet,
    are bounded.

        >>> auto_beam(3), auto_beam((5, 3, 2)), auto_beam((10, 5))
        (6, 6, 10)
    """
    return max(DEFAULT_BEAM, k if isinstance(k, int) else k[0])


def beam_order(zone: str, ranks: tuple[int, ...]) -> tuple:
    """How a beam (:attr:`Walk.beam`) orders the zones of one depth, best first: by the product of the
    ranks on their paths, then by those ranks from the root down, then by name."""
    return math.prod(ranks), ranks, zone


def _number(pairs: dict[str, str], key: str) -> float | None:
    """A score of a ranking record, None when missing or not a finite number (``inf`` and ``nan``
    would put a zone's tools above every other zone's, or every other's under a floor, and are no JSON)."""
    try:
        value = float(pairs[key]) if pairs.get(key) else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


#: name servers of one zone tried in turn at most (each distinct address once): a referral may name
#: thousands, and each unanswered one costs a whole timeout
MAX_SERVERS_TRIED = 8


def _owner_service(owner: str) -> str:
    """The service of a tool's own name ``<label>._<service>._<transport>.<zone>`` (brief answers
    leave ``service=`` out of the TXT record: the name says it)."""
    parts = owner.split(".", 3)
    return parts[1][1:] if len(parts) > 2 and parts[1].startswith("_") and parts[2].startswith("_") else ""


def _server_text(q: "Query") -> str:
    return f"{q.server[0]}:{q.server[1]}"


def _transport(q: "Query") -> str:
    return "tcp" if q.tcp else "udp"


@dataclass
class Query:
    """One question to one zone's name servers, and where the walk stands while asking it."""

    qname: str
    zone: str  # the zone whose servers are asked
    servers: list[tuple[str, int]]
    path: tuple[str, ...]
    depth: int
    opt: bytes = b""  # the OPT record with the intent option, shared by the whole walk
    server_index: int = 0
    tcp: bool = False
    attempts: int = 0
    #: asked again after a timeout already (a query is asked again once: :meth:`Walk._receive`)
    timeout_retried: bool = False
    k: int = 3  # K carried by this query's intent option
    #: on the walk's best path: the root, and each child ranked first by a zone on it
    first: bool = True
    #: the rank of each zone of the path below the root in its parent's referral (() at the root):
    #: how a beam (:attr:`Walk.beam`) orders the zones of one depth
    ranks: tuple[int, ...] = ()
    #: a leaf's tools ranked before the ones asked (the page option): what this answer's ranks count after
    skip: int = 0
    cache_key: tuple = ()
    qtype: int = dns.rdatatype.SRV  # DNSKEY for the key queries of a validating walk
    #: set by Walk.take: how long the reply to this query may be cached (0: not at all)
    cache_ttl: float = 0.0
    #: set by Walk.take: the parsed reply (what a cache keeps)
    response: Reply | None = None
    _wire: bytes | None = None

    @property
    def wire(self) -> bytes:
        """The query message; built when a driver first sends it, so a cache hit never pays for it."""
        if self._wire is None:
            self._wire = make_query(self.qname, self.opt, self.qtype)
        return self._wire

    @wire.setter
    def wire(self, value: bytes) -> None:
        self._wire = value

    def retry(self, **changes) -> "Query":
        """The same question again, to another server or over TCP (a new message ID)."""
        fields = dict(qname=self.qname, zone=self.zone, servers=self.servers, path=self.path, depth=self.depth,
                      opt=self.opt, k=self.k, server_index=self.server_index, tcp=self.tcp,
                      attempts=self.attempts + 1, cache_key=self.cache_key, qtype=self.qtype, first=self.first,
                      ranks=self.ranks, timeout_retried=self.timeout_retried, skip=self.skip)
        fields.update(changes)
        return Query(**fields)

    @property
    def server(self) -> tuple[str, int]:
        return self.servers[self.server_index]

    @property
    def hedge(self) -> tuple[str, int] | None:
        """The zone's next server, which a driver asks as well when the first wait for :attr:`server`
        is over (a hedge: before that server times out); None over TCP, or with no server left to try."""
        if self.tcp or self.server_index + 1 >= min(len(self.servers), MAX_SERVERS_TRIED):
            return None
        return self.servers[self.server_index + 1]

    def hedged(self) -> None:
        """Both :attr:`server` and :attr:`hedge` were asked, and the reply (or the lack of one) is the
        hedge's to answer for: the query stands at that server from now on (a retry goes past both)."""
        self.server_index += 1


@dataclass
class Walk:
    intent: str
    #: children asked for at each step: one K, or one per depth (the last repeats): (5, 3, 2)
    k: int | tuple[int, ...] = 3
    root: list[tuple[str, int]] = field(default_factory=lambda: [("127.0.0.1", 5300)])
    service: str = names.ANY_SERVICE
    transport: str = "tcp"
    root_zone: str = "tools."
    trust: list[str] | None = None
    exclude: list[str] | None = None
    max_depth: int = 8
    max_queries: int = 256
    intent_code: int = INTENT_OPTION_CODE
    #: tools asked of each leaf (None: K); branching stays K
    leaf_k: int | None = None
    #: tools asked of the leaf on the walk's best path (each zone's first-ranked child from the root
    #: down), which may fill the whole result while the others only share it (None: *leaf_k*)
    best_leaf_k: int | None = None
    #: at most this many zones asked at each depth below the root, the best by their path's ranks
    #: (the product of each zone's rank in its parent's referral, then the ranks from the root down):
    #: a walk that widens where one parent's children rank close and stays narrow elsewhere, so
    #: that a deep tree costs about ``beam`` queries a level rather than the product of the Ks.
    #: The children of a depth wait until every zone of the depth above has answered. None: every
    #: child a referral ranks is asked
    beam: int | None = None
    #: the intent's vector option data (:func:`tooldns.protocol.vector.encode_vector`), sent with
    #: every query so that hybrid zones compare vectors without running a model; None: no vector
    vector: bytes | None = None
    #: ask leaves for their tools without descriptions (the brief option, :mod:`tooldns.protocol.brief`)
    brief: bool = False
    #: with *brief*: a leaf whose answer does not fit one datagram answers with the best tools that
    #: fit rather than a truncated reply to ask again over TCP (the fit option, :mod:`tooldns.protocol.fit`);
    #: leaves asked for more tools than :data:`BRIEF_TOOLS_PER_DATAGRAM` are still asked over TCP
    fit: bool = False
    #: share of BM25 when tools of hybrid zones are fused over every leaf's answer
    fusion: float = DEFAULT_WEIGHT
    #: relevance floor: only tools scoring at least ``floor`` x the best score are returned (tools
    #: without a score are kept); None: every tool found (search modes, :mod:`.modes`)
    floor: float | None = None
    #: under the floor, a leaf's best ``floor_spares`` tools are kept when every zone on its path was
    #: among the best ``floor_spares`` of its parent's referral: what a walk of that K finds (get_all
    #: keeps what get_important finds by its built-in K of 3); 0: the floor spares nothing
    floor_spares: int = 0
    #: DNSSEC: the chain of trust to check every reply against (None: no validation, no DO bit)
    validator: Validator | None = None
    #: with a validator: return only secure tools (insecure ones are dropped and counted)
    require_secure: bool = False
    #: follow-up pages (the page option, :mod:`tooldns.protocol.page`): once every zone asked has
    #: answered, a leaf whose tools all made the best *top* of the merged result (the last it gave
    #: among them) may rank more that would; it is asked for the tools after those, in one more
    #: datagram, until no leaf's last tool makes the result or this many such queries were asked. A
    #: leaf that gave fewer than asked (pruned, or out of tools) is not asked again. 0: none
    pages: int = 0
    #: the tools the result keeps (the resolver's ``top``): what follow-up pages fill
    top: int = 10

    def __post_init__(self) -> None:
        self._ks = tuple(self.k) if isinstance(self.k, (tuple, list)) else (self.k,)
        if not self._ks:
            raise ResolverError("K needs at least one value")
        self.leaf_k = self.leaf_k or self._ks[0]
        self.best_leaf_k = max(self.best_leaf_k or 0, self.leaf_k)
        self.stats = Stats()
        extra = [dns.edns.GenericOption(VECTOR_OPTION_CODE, self.vector)] if self.vector else []
        if self.brief:
            extra.append(dns.edns.GenericOption(BRIEF_OPTION_CODE, encode_brief()))
        self.fit = self.fit and self.brief  # with descriptions a caller wants all K: over TCP when they need it
        if self.fit:
            extra.append(dns.edns.GenericOption(FIT_OPTION_CODE, encode_fit()))
        # a long task description is cut, not refused; with fit, to what one datagram carries
        sent = shorten_intent(self.intent, _datagram_intent(extra) if self.fit else MAX_INTENT_BYTES)
        if sent != self.intent:
            self.stats.intent_shortened = len(self.intent.encode("utf-8", "surrogatepass"))
        self._extra, self._intent_sent = extra, sent
        try:
            self._opts = {k: self._opt_record(k) for k in {*self._ks, self.leaf_k, self.best_leaf_k}}
            self._cursor = names.cursor(self.service, self.root_zone, self.transport)
        except (IntentError, NameError_) as exc:
            raise ResolverError(str(exc)) from exc
        # a query that cannot fit one datagram (header, its name, OPT) goes over TCP from the start
        self._tcp_only = 12 + 255 + 4 + max(map(len, self._opts.values())) > UDP_PAYLOAD
        self.trace: list[Hop] = []
        self.errors: list[str] = []
        self._vector_ignored = False  # a zone said it did not use the vector (said once in errors)
        self._tools: dict[str, Tool] = {}
        self._spared: set[str] = set()  # keys of the tools the floor keeps (floor_spares)
        self._asked: set[tuple[str, str]] = set()
        self._zones: set[str] = set()
        self.fatal: ResolverError | None = None
        #: a depth or query limit stopped part of the walk
        self.limited = False
        #: zones none of whose name servers answered: their tools may be the ones missing
        self.unreachable: list[str] = []
        #: validating: replies waiting for their zone's keys, and the zones whose keys were asked for
        self._parked: dict[str, list] = {}
        self._keys_asked: set[str] = set()
        self._keys_opt = opt_record([], UDP_PAYLOAD, dnssec=True)
        if self.beam is not None and self.beam < 1:
            raise ResolverError("a beam needs at least 1 zone a depth")
        #: queries out (sent, not yet taken, or replies parked for their zone's keys) by depth, and the
        #: children a beam holds until every zone of the depth above has answered
        self._open: dict[int, int] = {}
        self._held: dict[int, list[tuple[Query, Referral]]] = {}
        #: each leaf that answered with tools: the query to ask its next page with, the tools ranked so
        #: far, the key of its last, whether it may hold more (:meth:`_pages`)
        self._leaves: dict[str, tuple[Query, int, str, bool]] = {}

    # -- building queries --
    def k_at(self, depth: int) -> int:
        """K for a cursor query at *depth* (0 = the root zone)."""
        return self._ks[min(depth, len(self._ks) - 1)]

    def _wants_tcp(self, qname: str, k: int) -> bool:
        """TCP from the start: an intent too long for a datagram, or a leaf asked for more tools than
        fit one (about 4 with their metadata, 6 without), rather than a truncated UDP reply first."""
        if self._tcp_only and 12 + len(qname) + 1 + 4 + len(self._opts[k]) > UDP_PAYLOAD:
            return True  # the name as sent: a long intent with a short name still fits a datagram
        cur = names.parse_cursor(qname)
        return k > (BRIEF_TOOLS_PER_DATAGRAM if self.brief else TOOLS_PER_DATAGRAM) and cur is not None and cur.expanded

    def _opt_record(self, k: int, skip: int = 0) -> bytes:
        """The OPT record of a query asking for *k*: the intent option and the walk's others; with *skip*,
        the page option (the tools after a leaf's *skip* best)."""
        options = [dns.edns.GenericOption(self.intent_code, encode_intent(self._intent_sent, k)), *self._extra]
        if skip:
            options.append(dns.edns.GenericOption(PAGE_OPTION_CODE, encode_page(skip)))
        return opt_record(options, UDP_PAYLOAD, dnssec=self.validator is not None)

    def _query(self, qname: str, zone: str, servers, path, depth, k: int | None = None, first: bool = True,
               ranks: tuple[int, ...] = (), skip: int = 0) -> Query:
        k = k or self.k_at(depth)
        return Query(qname=qname, zone=zone, servers=list(servers), path=tuple(path), depth=depth,
                     opt=self._opt_record(k, skip) if skip else self._opts[k], tcp=self._wants_tcp(qname, k), k=k,
                     first=first, ranks=ranks, skip=skip,
                     cache_key=(qname, dns.rdatatype.SRV, self.intent, k, self.vector, self.brief, self.fit, skip))

    def _leaf_k(self, first: bool) -> int:
        """Tools asked of a leaf: :attr:`best_leaf_k` on the best path, :attr:`leaf_k` elsewhere."""
        return self.best_leaf_k if first else self.leaf_k

    def start(self) -> list[Query]:
        if not self.root:
            raise NoServersReachable("no root name server given")
        return self._sent(self._with_keys([self._query(self._cursor.to_text(), self.root_zone, self.root,
                                                       (self.root_zone,), 0)]))

    # -- taking results --
    def take(self, q: Query, wire: bytes | None, error: Exception | None = None, ms: float = 0.0,
             cached: Reply | None = None) -> list[Query]:
        """Account for the outcome of *q*: reply bytes, or the error that came instead; return the
        queries to send next.

        *cached* is a reply taken from a cache (already parsed and checked when it was received).
        """
        self._open[q.depth] = self._open.get(q.depth, 0) - 1
        out = self._sent(self._take(q, wire, error, ms, cached))
        out += self._sent(self._released())
        if self.pages and not out:
            out = self._sent(self._pages())
        return out

    def _sent(self, queries: list[Query]) -> list[Query]:
        for q in queries:
            self._open[q.depth] = self._open.get(q.depth, 0) + 1
        return queries

    def _released(self) -> list[Query]:
        """The beam's best held children of a depth, once no zone above it has a query out."""
        if not self._held or self.fatal is not None:
            return []
        depth = min(self._held)
        if any(n > 0 for d, n in self._open.items() if d < depth):
            return []
        held = sorted(self._held.pop(depth), key=lambda h: beam_order(h[0].zone, h[0].ranks))
        room = min(self.beam, max(0, self.max_queries - self.stats.queries))
        if room < min(self.beam, len(held)):
            self._hit_limit(f"query limit {self.max_queries} reached")
        for i, (_, ref) in enumerate(held[room:], room):
            why = "query limit" if i < self.beam else f"beyond the beam of {self.beam} a depth"
            ref.followed, ref.why_not = False, why
        return self._with_keys([child for child, _ in held[:room]])

    def _take(self, q: Query, wire: bytes | None, error: Exception | None, ms: float,
              cached: Reply | None) -> list[Query]:
        if self.fatal is not None:
            return []
        if cached is None:
            self.stats.queries += 1
            self.stats.bytes_sent += len(q.wire)
            self.stats.packets += 1
        else:
            self.stats.cache_hits += 1
        self._zones.add(q.zone)
        resp = cached
        if resp is None:
            resp, retries = self._receive(q, wire, error, ms)
            if resp is None:  # retries, or a failed DNSKEY query's parked replies followed: new zones among them
                return self._with_keys(retries)
        q.response = resp
        hop = Hop(_server_text(q), q.qname, _transport(q), dns.rcode.to_text(resp.rcode), ms, q.zone,
                  cached=cached is not None, k=q.k)
        self.trace.append(hop)
        meta = self._meta(resp)
        if meta is not None:  # what the picture of the walk (:mod:`.walkpage`) shows of the server's ranking
            hop.pruned, hop.scorer = meta.pruned, printable(meta.scorer)
        if meta is not None and meta.fallback:
            hop.fallback = True
            self.stats.fallbacks += 1
        if meta is not None and meta.trimmed:
            hop.note = hop.note or "fewer tools than asked: no more fit one datagram"
            self.stats.trimmed += 1
        if meta is not None and meta.embedded:
            self.stats.zone_embedded += 1
        if meta is not None and meta.vector_ignored and self.vector and not self._vector_ignored:
            self._vector_ignored = True  # said once: every zone of a BM25 tree would say it
            self.errors.append(f"{q.zone}: the intent's vector was not used (the zone scores no vectors, or "
                               f"vectors of another model); it ranked by its words alone")
        if self.validator is not None:
            if q.qtype == dns.rdatatype.DNSKEY:
                return self._with_keys(self._take_keys(q, resp))
            if not self.validator.status(q.zone):  # its keys are on their way
                self._parked.setdefault(q.zone, []).append((q, resp, hop, meta))
                self._open[q.depth] += 1  # still to be followed
                return []
        return self._with_keys(self._follow(q, resp, hop, meta))

    # -- DNSSEC (with a validator) --
    def _with_keys(self, queries: list[Query]) -> list[Query]:
        """*queries*, and a DNSKEY query for each zone among them whose keys were not asked for yet."""
        if self.validator is None:
            return queries
        out = list(queries)
        for q in queries:
            if q.zone not in self._keys_asked and q.qtype != dns.rdatatype.DNSKEY:
                self._keys_asked.add(q.zone)
                out.append(Query(qname=q.zone, zone=q.zone, servers=q.servers, path=q.path, depth=q.depth,
                                 opt=self._keys_opt, qtype=dns.rdatatype.DNSKEY, k=0,
                                 cache_key=(q.zone, dns.rdatatype.DNSKEY)))
        return out

    def _take_keys(self, q: Query, resp: Reply) -> list[Query]:
        """A zone's DNSKEY reply: the zone's keys validated, then its replies that waited for them."""
        if resp.flags & dns.flags.TC and not q.tcp:
            return [q.retry(tcp=True)]
        if resp.rcode != dns.rcode.NOERROR or resp.flags & dns.flags.TC:
            return self._next_server(q, f"{_server_text(q)}: {dns.rcode.to_text(resp.rcode)} to DNSKEY")
        q.cache_ttl = self._ttl(resp, None)
        if self.validator.take_dnskey(q.zone, resp.answer) == BOGUS:
            self._bogus(q.zone, self.validator.reason(q.zone))
        return self._release(q.zone)

    def _release(self, zone: str) -> list[Query]:
        out = []
        for q, resp, hop, meta in self._parked.pop(zone, []):
            self._open[q.depth] -= 1
            out.extend(self._follow(q, resp, hop, meta))
        return out

    def _bogus(self, zone: str, why: str) -> None:
        self.stats.bogus += 1
        if f"{zone}: bogus: {why}" not in self.errors:  # one zone's keys fail every reply of it alike
            self.errors.append(f"{zone}: bogus: {why}")

    def _check(self, q: Query, section, wanted: list[tuple[str, int]]) -> str:
        """Validate *wanted* RRsets of *section* with the keys of the zone asked: SECURE or INSECURE
        (or "" without a validator); BOGUS after counting it."""
        if self.validator is None:
            return ""
        try:
            self.validator.check(q.zone, section, wanted)
        except Bogus as exc:
            self._bogus(q.zone, str(exc))
            return BOGUS
        return self.validator.status(q.zone)

    def _receive(self, q: Query, wire: bytes | None, error: Exception | None,
                 ms: float) -> tuple[Reply | None, list[Query]]:
        """The checked reply to *q*, or None and the queries that try elsewhere."""
        server, transport = _server_text(q), _transport(q)
        if error is not None or wire is None:
            timed_out = isinstance(error, (TimeoutError, dns.exception.Timeout))
            if timed_out:
                self.stats.timeouts += 1
            reason = type(error).__name__ if error is not None else "no reply"
            hop = Hop(server, q.qname, transport, reason, ms, q.zone, note=str(error or ""))
            self.trace.append(hop)
            last = q.server_index + 1 >= min(len(q.servers), MAX_SERVERS_TRIED)
            if timed_out and last and not q.timeout_retried and self.stats.queries < self.max_queries:
                # a lost datagram, or a server process gone from under a shared port (--workers): asked
                # once more, from a new socket, before the zone is given up (a zone with several servers
                # has had the others asked already)
                self.stats.timeout_retries += 1
                hop.note = "timed out; asking again"
                return None, [q.retry(timeout_retried=True)]
            return None, self._next_server(q, f"{server}: {reason}")
        self.stats.bytes_received += len(wire)
        self.stats.packets += 1
        try:
            resp = parse_reply(wire)
        except dns.exception.DNSException as exc:
            self.trace.append(Hop(server, q.qname, transport, "MALFORMED", ms, q.zone, note=str(exc)))
            return None, self._next_server(q, f"{server}: malformed reply ({exc})", bad=True)
        if not is_reply_to(q.wire, resp):
            self.trace.append(Hop(server, q.qname, transport, "MISMATCH", ms, q.zone))
            return None, self._next_server(q, f"{server}: reply does not match the query (ID or question)", bad=True)
        return resp, []

    def _follow(self, q: Query, resp: Reply, hop: Hop, meta: Meta | None) -> list[Query]:
        """What a reply means for the walk: retry over TCP, give up, take tools, follow a referral."""
        server, rcode = _server_text(q), resp.rcode
        if resp.flags & dns.flags.TC:
            if q.tcp:  # truncated over TCP: nothing more to try on this server
                return self._next_server(q, f"{server}: truncated over TCP")
            self.stats.tcp_retries += 1
            hop.note = "truncated; retrying over TCP"
            return [q.retry(tcp=True)]
        if rcode == dns.rcode.FORMERR:
            text = self._ede(resp) or "the server answered FORMERR"
            hop.note = text
            self.fatal = IntentRejected(f"{server} rejected the query: {text}")
            return []
        if rcode in (dns.rcode.SERVFAIL, dns.rcode.REFUSED, dns.rcode.NOTIMP):
            hop.note = self._ede(resp) or ""
            return self._next_server(q, f"{server}: {dns.rcode.to_text(rcode)}")
        if rcode not in (dns.rcode.NOERROR, dns.rcode.NXDOMAIN):
            return self._next_server(q, f"{server}: {dns.rcode.to_text(rcode)}")
        q.cache_ttl = self._ttl(resp, meta)
        if rcode == dns.rcode.NXDOMAIN:
            return []
        if any(r.rdtype == dns.rdatatype.SRV for r in resp.answer):
            return self._take_answer(q, resp, hop, meta)
        if not (resp.flags & dns.flags.AA) and any(r.rdtype == dns.rdatatype.NS for r in resp.authority):
            return self._take_referral(q, resp, hop)
        return []  # NODATA

    def _take_answer(self, q: Query, resp: Reply, hop: Hop, meta: Meta | None) -> list[Query]:
        wanted = list(dict.fromkeys((r.name, r.rdtype) for r in resp.answer
                                    if r.rdtype in (dns.rdatatype.SRV, dns.rdatatype.CNAME)))
        status = self._check(q, resp.answer, wanted)
        if status == BOGUS:
            hop.note = "bogus answer: its tools are dropped"
            return []
        hop.tools = self._take_tools(q, resp, status)
        self._note_leaf(q, hop, meta)
        cur = names.parse_cursor(q.qname)
        if cur is None or cur.expanded:
            return []
        # a leaf we did not know was one: ask it again for leaf_k tools, when it has more to give than
        # it gave (more than asked at first, or what did not fit a datagram: the expanded name's ask
        # of more than a datagram holds goes over TCP)
        leaf_k = self._leaf_k(q.first)
        trimmed = meta is not None and meta.trimmed and leaf_k > BRIEF_TOOLS_PER_DATAGRAM
        if trimmed or (leaf_k > q.k and len(hop.tools) >= q.k and not (meta is not None and meta.pruned)):
            hop.note = f"leaf: asking again for {leaf_k} tools"
            return [self._query(cur.expand().to_text(), q.zone, q.servers, q.path, q.depth, leaf_k, q.first, q.ranks)]
        return []

    # -- follow-up pages --
    def _note_leaf(self, q: Query, hop: Hop, meta: Meta | None) -> None:
        """Keep what a follow-up page of *q*'s leaf needs (:meth:`_pages`): whether the leaf may rank
        more tools (it gave all it was asked, or all that fit a datagram, and pruned none)."""
        if not self.pages or not hop.tools:
            return
        held = q.skip + len(hop.tools)
        full = len(hop.tools) >= q.k or (meta is not None and meta.trimmed)
        more = full and not (meta is not None and meta.pruned) and held <= MAX_SKIP
        self._leaves[q.zone] = (q, held, hop.tools[-1].key, more)

    def _pages(self) -> list[Query]:
        """Once no query is out: a page query for each leaf whose last tool made the best :attr:`top`
        of the merged result (every leaf that may rank more, while the result holds fewer), best
        placed first, within :attr:`pages` and the query limit."""
        room = min(self.pages - self.stats.pages, self.max_queries - self.stats.queries)
        if (room <= 0 or self.fatal is not None or self._held or self._parked
                or any(n > 0 for n in self._open.values())):
            return []
        best = [tool.key for _, tool in self._ranked()[:self.top]]
        place = {key: i for i, key in enumerate(best)}
        short = len(best) < self.top
        due = sorted((place.get(last, len(best)), zone) for zone, (_, _, last, more) in self._leaves.items()
                     if more and (short or last in place))
        out = []
        for _, zone in due[:room]:
            q, held, last, _ = self._leaves[zone]
            self._leaves[zone] = (q, held, last, False)  # until its page answers
            self.stats.pages += 1
            out.append(self._page(q, held))
        return out

    def _page(self, q: Query, skip: int) -> Query:
        """The query for the tools *q*'s leaf ranks after its *skip* best (the page option)."""
        cur = names.parse_cursor(q.qname)
        qname = cur.expand().to_text() if cur is not None and not cur.expanded else q.qname
        return self._query(qname, q.zone, q.servers, q.path, q.depth, q.k, q.first, q.ranks, skip)

    def _next_server(self, q: Query, why: str, bad: bool = False) -> list[Query]:
        if q.server_index + 1 < min(len(q.servers), MAX_SERVERS_TRIED):
            if self.stats.queries < self.max_queries:  # a retry is a query like any other
                return [q.retry(server_index=q.server_index + 1, tcp=q.tcp if q.qtype == dns.rdatatype.DNSKEY
                                else self._wants_tcp(q.qname, q.k))]
            self._hit_limit(f"query limit {self.max_queries} reached")
        if q.qtype == dns.rdatatype.DNSKEY:  # no keys: the zone's replies cannot be validated
            self.validator.fail_keys(q.zone, why)
            return self._release(q.zone)
        self.errors.append(f"{q.zone}: no name server answered ({why})")
        self.unreachable.append(q.zone)
        if q.depth == 0:
            error = BadResponse if bad else NoServersReachable
            self.fatal = error(f"no usable reply from a root name server: {why}")
        return []

    @staticmethod
    def _ttl(resp: Reply, meta) -> float:
        """How long this reply may be cached under (name, type, intent, K)."""
        if meta is not None:
            return float(meta.cache_ttl)
        ttls = [r.ttl for section in (resp.answer, resp.authority) for r in section]
        return float(min(ttls)) if ttls else 0.0

    @staticmethod
    def _opt(resp: Reply, code: int) -> bytes | None:
        for opt in resp.options:
            if opt.otype == code:
                return opt.data
        return None

    def _meta(self, resp):
        data = self._opt(resp, META_OPTION_CODE)
        if data is None:
            return None
        try:
            return decode_meta(data)
        except IntentError:
            return None

    def _ede(self, resp) -> str | None:
        for opt in resp.options:
            if opt.otype == EDE_OPTION_CODE:
                try:
                    # a NUL some servers end it with; the text is the server's, printed as errors are
                    return printable(decode_ede(opt.data)[1].removesuffix("\0"))
                except IntentError:
                    return None
        return None

    def _txt_by_owner(self, resp: Reply) -> dict[str, dict[str, str]]:
        out = {}
        for r in resp.additional:
            if r.rdtype == dns.rdatatype.TXT:
                pairs = decode_pairs(r.value)
                if pairs.get("tooldns"):
                    out[r.name] = pairs
        return out

    def _take_tools(self, q: Query, resp, status: str = "") -> list[Tool]:
        meta = self._txt_by_owner(resp)
        by_rank = {}
        for owner, pairs in meta.items():
            try:
                by_rank[int(pairs.get("rank", "0"))] = (owner, pairs)
            except ValueError:
                continue
        found = []
        srv = sorted((r.value for r in resp.answer if r.rdtype == dns.rdatatype.SRV and r.value), key=lambda rd: rd.priority)
        del srv[q.k:]  # the K asked for, the best first: a leaf that sends more gets no more room
        for rd in srv:
            owner, pairs = by_rank.get(rd.priority, ("", {}))
            if status and self._check(q, resp.additional, [(owner, dns.rdatatype.TXT)]) == BOGUS:
                continue  # its endpoint and name cannot be trusted
            if self.require_secure and status == INSECURE:
                self.errors.append(f"{q.zone}: insecure: tool {rd.target} dropped (secure tools required)")
                continue
            label = owner.split(".", 1)[0] if owner else ""
            tool = Tool(
                name=printable(pairs.get("name", label or rd.target)),
                service=printable(pairs.get("service") or _owner_service(owner) or self.service),
                target=rd.target, port=rd.port, weight=rd.weight,
                zone=q.zone, score=_number(pairs, "score"), rank=rd.priority + q.skip, label=label,
                endpoint=printable(pairs.get("endpoint", "")),
                description=neutralise(pairs.get("desc", ""), limit=None),  # zone text, shown to agents' models
                id=printable(pairs.get("id", "")), path=list(q.path), bm25=_number(pairs, "bm25"), cosine=_number(pairs, "cos"),
                dnssec=status,
            )
            found.append(tool)
            if tool.rank <= self.floor_spares and all(r <= self.floor_spares for r in q.ranks):
                self._spared.add(tool.key)
            old = self._tools.get(tool.key)
            if old is None or (tool.score or 0) > (old.score or 0):
                self._tools[tool.key] = tool
        return found

    def _allowed(self, zone: str, kind: str, parent: str) -> tuple[bool, str]:
        """Whether the walk may follow a referral from *parent* to *zone*: an entry of ``exclude`` or
        ``trust`` names a label or a whole name, matched against *zone* and every zone between it and
        *parent* (a referral may skip a level: ``api.noaa.tools.`` straight from ``tools.``)."""
        between = []  # (label, name) from the child up, not the parent
        name = zone
        while name not in (parent, ".") and names.is_subdomain(name, parent):
            between.append((name.split(".", 1)[0], name.rstrip(".")))
            name = names.parent(name)
        between = between or [(zone.split(".", 1)[0], zone.rstrip("."))]

        def matches(entries):
            wanted = {e.lower().rstrip(".") for e in entries}
            return any(label in wanted or full in wanted for label, full in between)
        if self.exclude and matches(self.exclude):
            return False, "excluded"
        if kind == "organisation" and self.trust is not None and not matches(self.trust):
            return False, "organisation not trusted"
        return True, ""

    def _take_referral(self, q: Query, resp: Reply, hop: Hop) -> list[Query]:
        meta = self._txt_by_owner(resp)
        glue: dict[str, list[str]] = {}
        for r in resp.additional:
            if r.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA) and r.value is not None:  # class IN
                glue.setdefault(r.name, []).append(r.value)
        children: dict[str, list[str]] = {}  # zone -> its name servers, in the order they came
        for r in resp.authority:
            if r.rdtype == dns.rdatatype.NS:
                children.setdefault(r.name, []).append(r.value.lower())
        out = []
        for zone, ns_names in children.items():
            pairs = meta.get(zone, {})
            # its ranking record's text is the server's (the zone's name, as read, is what the walk asks)
            ref = Referral(zone, _rank(pairs, len(hop.referrals) + 1), _number(pairs, "score"),
                           printable(pairs.get("kind", "functional")), printable(pairs.get("summary", "")))
            hop.referrals.append(ref)
            servers = list(dict.fromkeys((addr, q.server[1]) for n in ns_names for addr in glue.get(n, [])))
            why = self._check_referral(q, resp, zone)
            if why:
                ref.followed, ref.why_not = False, why
                continue
            child, why = self._child_query(q, ref, pairs.get("leaf") == "1", servers, len(out),
                                           q.first and ref.rank == 1)
            if child is None:
                ref.followed, ref.why_not = False, why
                continue
            if self.beam is not None and child.zone != q.zone:  # asked once its depth's best are known
                self._held.setdefault(child.depth, []).append((child, ref))
            else:
                out.append(child)
        return out

    def _check_referral(self, q: Query, resp: Reply, zone: str) -> str:
        """Validating: why the referral to *zone* is not followed ("" when it is): its ranking TXT (the
        parent signs it) or its DS proof is bogus."""
        if self.validator is None or not names.is_subdomain(zone, q.zone):
            return ""
        if self._check(q, resp.additional, [(zone, dns.rdatatype.TXT)]) == BOGUS:
            return "bogus ranking record"
        if zone != q.zone and self.validator.delegate(q.zone, zone, resp.authority) == BOGUS:
            self._bogus(zone, self.validator.zones[zone].delegation[1])
            return "bogus delegation"
        return ""

    def _child_query(self, q: Query, ref: Referral, leaf: bool, servers: list[tuple[str, int]],
                     pending: int, first: bool = False) -> tuple[Query | None, str]:
        """The query that follows referral *ref* from *q* (*first*: on the walk's best path), or None
        and why it is not followed."""
        zone = ref.zone
        if not names.is_subdomain(zone, q.zone):
            return None, f"outside {q.zone}"
        k = None  # the K of the child's depth
        try:  # a name DNS allows but no zone of the tree may have (a space, 63 octets): no search there
            if zone == q.zone:  # kind "self": this zone's own tools
                qname = names.Cursor(self.service, self.transport, zone, expanded=True).to_text()
                depth, k = q.depth, self._leaf_k(first)
            elif leaf:  # a leaf: ask for its tools directly
                qname = names.Cursor(self.service, self.transport, zone, expanded=True).to_text()
                depth, k = q.depth + 1, self._leaf_k(first)
            else:
                qname = names.Cursor(self.service, self.transport, zone).to_text()
                depth = q.depth + 1
        except NameError_ as exc:
            return None, f"bad name ({printable(str(exc))})"
        ok, why = self._allowed(zone, ref.kind, q.zone)
        if not ok:
            return None, why
        if not servers:
            return None, "no glue"
        if depth > self.max_depth:
            self._hit_limit(f"depth limit {self.max_depth} reached at {zone}")
            return None, "depth limit"
        if (qname, zone) in self._asked:
            return None, "already asked"
        if self.stats.queries + pending >= self.max_queries:
            self._hit_limit(f"query limit {self.max_queries} reached")
            return None, "query limit"
        self._asked.add((qname, zone))
        path, ranks = (q.path, q.ranks) if zone == q.zone else ((*q.path, zone), (*q.ranks, ref.rank))
        return self._query(qname, zone, servers, path, depth, k, first, ranks), ""

    def _hit_limit(self, why: str) -> None:
        self.errors.append(why)
        self.limited = True

    def expire(self, why: str) -> None:
        """The driver's deadline passed: the walk ends with what it found (the queries out are dropped)."""
        self._hit_limit(why)

    # -- the end --
    def _ranked(self) -> list[tuple[float | None, Tool]]:
        """The tools found, best first, each with the score it ranks by: hybrid leaves' parts fused over
        every leaf's tools, as a flat hybrid search would; tools that matched nothing left out when
        some did (they only pad the list)."""
        tools = list(self._tools.values())
        if any((t.score or 0) > 0 for t in tools):
            tools = [t for t in tools if t.score is None or t.score > 0]
        scores = [t.score for t in tools]
        if tools and all(t.bm25 is not None for t in tools) and any(t.cosine is not None for t in tools):
            scores = fuse([t.bm25 for t in tools], [t.cosine for t in tools], self.fusion)
        return sorted(zip(scores, tools), key=lambda p: (-(p[0] or 0.0), p[1].rank, p[1].zone, p[1].name))

    def result(self, top: int | None = None) -> Resolution:
        if self.fatal is not None:
            raise self.fatal
        ranked = self._ranked()
        for score, tool in ranked:
            tool.score = score
        tools = [tool for _, tool in ranked]
        if self.floor is not None and tools and (tools[0].score or 0) > 0:
            least = self.floor * tools[0].score
            tools = [t for t in tools if t.score is None or t.score >= least or t.key in self._spared]
        if top is not None:
            tools = tools[:top]
        self.stats.nodes_visited = len(self._zones)
        self.stats.embedded_by = "client" if self.vector else "zones" if self.stats.zone_embedded else "none"
        if self.limited and not tools:
            raise LimitExceeded("; ".join(self.errors))
        if self.unreachable and not tools:  # not "nothing matches": the answer may be behind a dead zone
            raise NoServersReachable("; ".join(self.errors))
        if self.stats.bogus and not tools:  # nor here: behind data that failed validation (a wrong anchor)
            raise ValidationFailed("DNSSEC validation failed: " + "; ".join(e for e in self.errors if ": bogus: " in e))
        return Resolution(self.intent, self.k, self.service, tools, self.stats, self.trace, list(self.errors))

