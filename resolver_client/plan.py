"""The walk a tree publishes (``_walk.<root zone>`` TXT): fetched and applied without I/O, as the walk is.

A tree's builder knows how it is best walked; the resolver's built-in search modes know no tree. So
before its first resolution (and again once what it learned expires) a resolver asks the root
servers for the walk the tree recommends (docs/protocol.md, section 6b; the codec is
:mod:`tooldns.protocol.plan`):

* :class:`PlanFetch` is that exchange as a state machine with a walk's interface (``start``,
  ``take``, ``expire``, ``result``), so the sync and async shells drive it as they drive a
  :class:`~resolver_client.walk.Walk`: one TXT query with RD=0 over UDP (:func:`plan_query`); the
  next root server on a timeout, an error rcode or a reply that does not match; TCP on TC. With a
  :class:`~resolver_client.validate.Validator` it asks the root zone's DNSKEY RRset too, and the TXT
  RRset must validate, as must the NSEC that proves there is none; what does not is ignored.
* :class:`Published` is what came of it: the plan (None: none, or none usable), how long that may
  be kept (the record's TTL; for "there is none", the negative TTL of RFC 2308; 0 after a failure:
  asked again next time), and the error a resolution reports when the plan could not be used.
* :func:`choose` decides each setting of a walk: what the caller gave, else the published walk's
  (it says what the default search mode, ``get_important``, means on its tree; the other modes
  keep their own K and leaf K, and take only its model), else the built-in mode's.

    fetch = PlanFetch("tools.", [("127.0.0.1", 5300)])
    pending = fetch.start()
    while pending:
        q = pending.pop()
        pending += fetch.take(q, send(q.wire, q.server, q.tcp))   # the driver's only job
    fetch.result()      # Published(plan=WalkPlan(k=(6,), leaf_k=6, ...), ttl=3600.0, error='', dnssec='')
    choose(settings_for("get_important"), fetch.result().plan, k=None, leaf_k=None).sources["k"]
    'published'
"""

from __future__ import annotations

from dataclasses import dataclass, field

import dns.exception
import dns.flags
import dns.rcode
import dns.rdataclass
import dns.rdatatype

from tooldns.protocol import NameError_, PlanError, names
from tooldns.protocol.fusion import DEFAULT_WEIGHT
from tooldns.protocol.plan import WalkPlan, decode_plan_rrset, plan_name
from tooldns.protocol.hygiene import printable

from .exceptions import ResolverError
from .message import Reply, is_reply_to, opt_record, parse_reply
from .modes import DEFAULT_MODE, ModeSettings
from .results import Stats
from .validate import Bogus, Validator
from .walk import AUTO_BEAM, MAX_SERVERS_TRIED, UDP_PAYLOAD, Query

#: where a setting of a walk came from (:attr:`resolver_client.results.Stats.sources`)
CALLER, PUBLISHED, BUILT_IN = "caller", "published", "built-in"
#: the longest a published walk, or the word that there is none, is kept (a day)
MAX_KEEP = 86400.0
_TXT, _DNSKEY, _SOA = dns.rdatatype.TXT, dns.rdatatype.DNSKEY, dns.rdatatype.SOA


@dataclass(frozen=True)
class Published:
    """What the root servers said of the tree's walk."""

    #: the walk to follow; None: the tree publishes none, or none that can be used (see *error*)
    plan: WalkPlan | None
    #: seconds this may be kept: the record's TTL, or the negative TTL; 0: ask again next time
    ttl: float = 0.0
    #: why the published walk is not used ("" when it is, or when there is none)
    error: str = ""
    #: with validation: "secure" or "insecure" (the plan, or the proof that there is none)
    dnssec: str = ""


#: what a resolver that does not ask (``published_walk=False``) goes by
NOT_ASKED = Published(None)


def plan_query(root_zone: str, servers: list[tuple[str, int]], dnssec: bool = False) -> Query:
    """The query for the walk *root_zone* publishes, to the first of *servers*: TXT, RD=0, over UDP,
    an OPT record (with DO when validating) and no intent."""
    qname = plan_name(root_zone)
    return Query(qname=qname, zone=root_zone, servers=list(servers), path=(root_zone,), depth=0,
                 opt=opt_record([], UDP_PAYLOAD, dnssec=dnssec), qtype=_TXT, k=0, cache_key=(qname, _TXT, dnssec))


def negative_ttl(resp: Reply) -> float:
    """How long the word that there is no such record may be kept (RFC 2308): the SOA's TTL, at
    most its minimum field; 0 without a SOA."""
    soa = [r for r in resp.authority if r.rdtype == _SOA and r.rdclass == dns.rdataclass.IN]
    if not soa:
        return 0.0
    try:
        return float(min(soa[0].ttl, soa[0].rdata.minimum))
    except (dns.exception.DNSException, AttributeError):  # a SOA dnspython cannot read: nothing to go by
        return 0.0


def take_plan(qname: str, resp: Reply) -> Published:
    """What a checked reply *resp* to the query for *qname* says of the published walk (no DNSSEC)."""
    records = [r for r in resp.answer if r.rdtype == _TXT and r.rdclass == dns.rdataclass.IN and r.name == qname]
    if resp.rcode != dns.rcode.NOERROR or not records:  # NXDOMAIN, NODATA, or a server without the zone
        return Published(None, min(negative_ttl(resp), MAX_KEEP))
    ttl = min(min(r.ttl for r in records), MAX_KEEP)
    try:
        return Published(decode_plan_rrset([r.value for r in records]), ttl)
    except PlanError as exc:  # kept for its TTL all the same: asking again would get the same record
        why = printable(str(exc)).removeprefix("published walk: ")  # said once, first
        return Published(None, ttl, f"published walk at {qname} not used: {why}; built-in settings")


class PlanFetch:
    """Asking the root servers for the walk their zone publishes (see the module docstring)."""

    def __init__(self, root_zone: str, servers: list[tuple[str, int]], validator: Validator | None = None) -> None:
        try:
            self.zone = names.normalize(root_zone)
        except NameError_ as exc:
            raise ResolverError(str(exc)) from exc
        self.qname = plan_name(self.zone)
        self.servers = list(servers)
        self.validator = validator
        #: what the fetch cost (queries, bytes, packets, timeouts, TCP retries, cache hits)
        self.stats = Stats()
        self._reply: Reply | None = None  # the TXT reply, while it waits for the root's keys
        self._keys = validator is None  # the root's keys are known (or not needed)
        self._outcome: Published | None = None

    def start(self) -> list[Query]:
        if not self.servers:
            self._outcome = Published(None, error="published walk: no root name server given")
            return []
        out = [plan_query(self.zone, self.servers, self.validator is not None)]
        if self.validator is not None:  # the same query and cache key as a validating walk's
            out.append(Query(qname=self.zone, zone=self.zone, servers=self.servers, path=(self.zone,), depth=0,
                             opt=opt_record([], UDP_PAYLOAD, dnssec=True), qtype=_DNSKEY, k=0,
                             cache_key=(self.zone, _DNSKEY)))
        return out

    def expire(self, why: str) -> None:
        """The driver's deadline passed: the built-in settings, and why."""
        if self._outcome is None:
            self._outcome = Published(None, error=f"published walk: {why}; built-in settings")

    def result(self) -> Published:
        return self._outcome or Published(None, error="published walk: no reply; built-in settings")

    def take(self, q: Query, wire: bytes | None, error: Exception | None = None, ms: float = 0.0,
             cached: Reply | None = None) -> list[Query]:
        """Account for the outcome of *q* (reply bytes, the error that came instead, or a *cached*
        reply); the queries to send next."""
        if cached is None:
            self.stats.queries += 1
            self.stats.bytes_sent += len(q.wire)
            self.stats.packets += 1
        else:
            self.stats.cache_hits += 1
        resp = cached
        if resp is None:
            resp, why = self._receive(q, wire, error)
            if resp is None:
                last = q.server_index + 1 >= min(len(q.servers), MAX_SERVERS_TRIED)
                if isinstance(error, (TimeoutError, dns.exception.Timeout)) and last and not q.timeout_retried:
                    self.stats.timeout_retries += 1  # asked once more, as the walk does (walk.Walk._receive)
                    return [q.retry(timeout_retried=True)]
                return self._next_server(q, why)
        if resp.flags & dns.flags.TC:
            if q.tcp:
                return self._next_server(q, "truncated over TCP")
            self.stats.tcp_retries += 1
            return [q.retry(tcp=True)]
        wanted = (dns.rcode.NOERROR,) if q.qtype == _DNSKEY else (dns.rcode.NOERROR, dns.rcode.NXDOMAIN)
        if resp.rcode not in wanted:
            return self._next_server(q, dns.rcode.to_text(resp.rcode))
        if q.qtype == _DNSKEY:
            q.response, q.cache_ttl = resp, float(min((r.ttl for r in resp.answer), default=0))
            self.validator.take_dnskey(self.zone, resp.answer)
            self._keys = True
        else:
            self._reply = resp
        if self._keys and self._reply is not None and self._outcome is None:
            self._outcome = self._decide(self._reply)
        return []

    def _receive(self, q: Query, wire: bytes | None, error: Exception | None) -> tuple[Reply | None, str]:
        """The reply to *q*, checked, or None and what went wrong."""
        if error is not None or wire is None:
            if isinstance(error, (TimeoutError, dns.exception.Timeout)):
                self.stats.timeouts += 1
            return None, type(error).__name__ if error is not None else "no reply"
        self.stats.bytes_received += len(wire)
        self.stats.packets += 1
        try:
            resp = parse_reply(wire)
        except dns.exception.DNSException as exc:
            return None, f"malformed reply ({exc})"
        if not is_reply_to(q.wire, resp):
            return None, "reply does not match the query (ID or question)"
        return resp, ""

    def _next_server(self, q: Query, why: str) -> list[Query]:
        why = f"{q.server[0]}:{q.server[1]}: {why}"
        if q.server_index + 1 < min(len(q.servers), MAX_SERVERS_TRIED):
            return [q.retry(server_index=q.server_index + 1, tcp=False)]
        if q.qtype == _DNSKEY:  # no keys: the walk's record cannot be validated
            self.validator.fail_keys(self.zone, why)
            self._keys = True
            if self._reply is not None and self._outcome is None:
                self._outcome = self._decide(self._reply)
        elif self._outcome is None:
            self._outcome = Published(None, error=f"published walk: no root name server answered ({printable(why)}); "
                                                  "built-in settings")
        return []

    def _decide(self, resp: Reply) -> Published:
        """The outcome of the TXT reply, validated when there is a validator."""
        published = take_plan(self.qname, resp)
        if self.validator is None:
            return published
        try:
            if any(r.rdtype == _TXT and r.rdclass == dns.rdataclass.IN and r.name == self.qname for r in resp.answer):
                self.validator.check(self.zone, resp.answer, [(self.qname, _TXT)])
            else:
                self.validator.deny(self.zone, resp.authority, self.qname, _TXT)
        except Bogus as exc:  # not kept: a reply altered in flight says nothing of the next one
            what = "record" if published.plan is not None or published.error else "answer that there is none"
            return Published(None, error=f"published walk at {self.qname} not used: its {what} is bogus "
                                         f"({printable(str(exc))}); built-in settings")
        return Published(published.plan, published.ttl, published.error, self.validator.status(self.zone))


@dataclass(frozen=True)
class Chosen:
    """The settings of one walk and where each came from (:data:`CALLER`, :data:`PUBLISHED`,
    :data:`BUILT_IN`): K per depth, tools asked of each leaf and of the best path's leaf (None: the
    walk's own default), the beam (:data:`~resolver_client.walk.AUTO_BEAM`: the walk's default), and the
    published model to embed the intent with when the caller gave no embedder (None: none), the
    follow-up pages a resolution may ask (0: none), and BM25's share when hybrid leaves' tools are
    fused (:mod:`tooldns.protocol.fusion`)."""

    k: int | tuple[int, ...]
    leaf_k: int | None
    best_leaf_k: int | None
    beam: int | str | None
    model: str | None
    sources: dict[str, str] = field(default_factory=dict)
    pages: int = 0
    fusion: float = DEFAULT_WEIGHT

    @property
    def settings_from(self) -> str:
        """Where the walk's settings came from, taken together: "published" when the published walk
        set any of them, else "caller" when the caller set any, else "built-in"."""
        values = set(self.sources.values())
        return PUBLISHED if PUBLISHED in values else CALLER if CALLER in values else BUILT_IN


def choose(mode: ModeSettings, plan: WalkPlan | None, *, k=None, leaf_k: int | None = None,
           best_leaf_k: int | None = None, beam: int | str | None = AUTO_BEAM, embedder=None,
           pages: int | None = None, fusion: float | None = None) -> Chosen:
    """Each setting of a walk in search mode *mode*: the caller's (*k*, *leaf_k*, *best_leaf_k*, a
    *beam* other than AUTO_BEAM, an *embedder*, *pages*, *fusion*), else *plan*'s (the published walk:
    K, leaf K, best leaf K, beam and pages in the default mode only; its model and fusion, which are
    of the tree's vectors, in every mode), else the mode's own (no pages; the fusion
    :data:`~tooldns.protocol.fusion.DEFAULT_WEIGHT`)."""
    follows = plan is not None and mode.name == DEFAULT_MODE
    sources: dict[str, str] = {}

    def pick(name: str, given: bool, caller, published, built_in):
        if given:
            sources[name] = CALLER
            return caller
        if follows and published is not None:
            sources[name] = PUBLISHED
            return published
        sources[name] = BUILT_IN
        return built_in

    published_k = (plan.k[0] if len(plan.k) == 1 else plan.k) if plan is not None else None
    chosen_k = pick("k", k is not None, k, published_k, mode.k)
    chosen_leaf_k = pick("leaf_k", leaf_k is not None, leaf_k, plan and plan.leaf_k, mode.leaf_k)
    chosen_best = pick("best_leaf_k", best_leaf_k is not None, best_leaf_k, plan and plan.best_leaf_k, None)
    chosen_beam = pick("beam", beam != AUTO_BEAM, beam, plan and plan.beam, AUTO_BEAM)
    chosen_pages = pick("pages", pages is not None, pages, plan and plan.pages, 0)
    model = plan.model if plan is not None and embedder is None else None
    sources["model"] = CALLER if embedder is not None else PUBLISHED if model else BUILT_IN
    published_fusion = plan.fusion if plan is not None else None
    sources["fusion"] = CALLER if fusion is not None else PUBLISHED if published_fusion is not None else BUILT_IN
    chosen_fusion = next(f for f in (fusion, published_fusion, DEFAULT_WEIGHT) if f is not None)
    return Chosen(chosen_k, chosen_leaf_k, chosen_best, chosen_beam, model, sources, chosen_pages, chosen_fusion)
