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
* a timeout, refusal or server failure moves on to the zone's next name server; TC moves to TCP;
* a response that does not match its query (ID, question) is treated like a lost one;
* FORMERR ends the walk with :class:`IntentRejected`, carrying the server's EDE text;
* depth and total queries are bounded.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import dns.edns
import dns.exception
import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype

from tooldns import names
from tooldns.exceptions import IntentError, NameError_
from tooldns.intent import EDE_OPTION_CODE, INTENT_OPTION_CODE, META_OPTION_CODE, decode_ede, decode_meta, encode_intent
from tooldns.metadata import decode_pairs

from .exceptions import BadResponse, IntentRejected, LimitExceeded, NoServersReachable, ResolverError
from .results import Hop, Referral, Resolution, Stats, Tool

UDP_PAYLOAD = 1232
_ids = random.SystemRandom()


@dataclass
class Query:
    """One question to one zone's name servers, and where the walk stands while asking it."""

    qname: str
    zone: str  # the zone whose servers are asked
    servers: list[tuple[str, int]]
    path: tuple[str, ...]
    depth: int
    wire: bytes = b""
    message: dns.message.Message | None = None
    server_index: int = 0
    tcp: bool = False
    attempts: int = 0
    cache_key: tuple = ()
    #: set by Walk.take: how long the reply to this query may be cached (0: not at all)
    cache_ttl: float = 0.0

    @property
    def server(self) -> tuple[str, int]:
        return self.servers[self.server_index]


@dataclass
class Walk:
    intent: str
    k: int = 3
    root: list[tuple[str, int]] = field(default_factory=lambda: [("127.0.0.1", 5300)])
    service: str = names.ANY_SERVICE
    transport: str = "tcp"
    root_zone: str = "tools."
    trust: list[str] | None = None
    exclude: list[str] | None = None
    max_depth: int = 8
    max_queries: int = 256
    intent_code: int = INTENT_OPTION_CODE

    def __post_init__(self) -> None:
        try:
            self._option = dns.edns.GenericOption(self.intent_code, encode_intent(self.intent, self.k))
            self._cursor = names.cursor(self.service, self.root_zone, self.transport)
        except (IntentError, NameError_) as exc:
            raise ResolverError(str(exc)) from exc
        self.stats = Stats()
        self.trace: list[Hop] = []
        self.errors: list[str] = []
        self._tools: dict[str, Tool] = {}
        self._asked: set[tuple[str, str]] = set()
        self._zones: set[str] = set()
        self.fatal: ResolverError | None = None

    # -- building queries --
    def _query(self, qname: str, zone: str, servers, path, depth) -> Query:
        q = Query(qname=qname, zone=zone, servers=list(servers), path=tuple(path), depth=depth)
        q.cache_key = (qname, dns.rdatatype.SRV, self.intent, self.k)
        return self._build(q)

    def _build(self, q: Query) -> Query:
        msg = dns.message.make_query(q.qname, dns.rdatatype.SRV, use_edns=0, payload=UDP_PAYLOAD,
                                     options=[self._option], flags=0, id=_ids.randrange(65536))
        q.message, q.wire = msg, msg.to_wire()
        return q

    def start(self) -> list[Query]:
        if not self.root:
            raise NoServersReachable("no root name server given")
        return [self._query(self._cursor.to_text(), self.root_zone, self.root, (self.root_zone,), 0)]

    # -- taking results --
    def take(self, q: Query, wire: bytes | None, error: Exception | None = None, ms: float = 0.0,
             cached: bool = False) -> list[Query]:
        """Account for the outcome of *q* (reply bytes, or the error that came instead)."""
        server = f"{q.server[0]}:{q.server[1]}"
        transport = "tcp" if q.tcp else "udp"
        if self.fatal is not None:
            return []
        if not cached:
            self.stats.queries += 1
            self.stats.bytes_sent += len(q.wire)
            self.stats.packets += 1
        else:
            self.stats.cache_hits += 1
        self._zones.add(q.zone)
        if error is not None or wire is None:
            if isinstance(error, (TimeoutError, dns.exception.Timeout)):
                self.stats.timeouts += 1
            reason = type(error).__name__ if error is not None else "no reply"
            self.trace.append(Hop(server, q.qname, transport, reason, ms, q.zone, note=str(error or "")))
            return self._next_server(q, f"{server}: {reason}")
        if not cached:
            self.stats.bytes_received += len(wire)
            self.stats.packets += 1
        try:
            resp = dns.message.from_wire(wire, ignore_trailing=False)
        except dns.exception.DNSException as exc:
            self.trace.append(Hop(server, q.qname, transport, "MALFORMED", ms, q.zone, note=str(exc)))
            return self._next_server(q, f"{server}: malformed reply ({exc})")
        if not q.message.is_response(resp):
            self.trace.append(Hop(server, q.qname, transport, "MISMATCH", ms, q.zone))
            return self._next_server(q, f"{server}: reply does not match the query (ID or question)")
        rcode = resp.rcode()
        hop = Hop(server, q.qname, transport, dns.rcode.to_text(rcode), ms, q.zone, cached=cached)
        self.trace.append(hop)
        meta = self._meta(resp)
        if meta is not None and meta.fallback:
            hop.fallback = True
            self.stats.fallbacks += 1
        if resp.flags & dns.flags.TC:
            if q.tcp:  # truncated over TCP: nothing more to try on this server
                return self._next_server(q, f"{server}: truncated over TCP")
            self.stats.tcp_retries += 1
            hop.note = "truncated; retrying over TCP"
            retry = Query(q.qname, q.zone, q.servers, q.path, q.depth, server_index=q.server_index, tcp=True,
                          attempts=q.attempts, cache_key=q.cache_key)
            return [self._build(retry)]
        if rcode == dns.rcode.FORMERR:
            text = self._ede(resp) or "the server answered FORMERR"
            hop.note = text
            self.fatal = IntentRejected(f"{server} rejected the query: {text}")
            return []
        if rcode in (dns.rcode.SERVFAIL, dns.rcode.REFUSED, dns.rcode.NOTIMP):
            hop.note = self._ede(resp) or ""
            return self._next_server(q, f"{server}: {dns.rcode.to_text(rcode)}")
        if rcode == dns.rcode.NXDOMAIN:
            q.cache_ttl = self._ttl(resp, meta)
            return []
        if rcode != dns.rcode.NOERROR:
            return self._next_server(q, f"{server}: {dns.rcode.to_text(rcode)}")
        q.cache_ttl = self._ttl(resp, meta)
        srv = [rrset for rrset in resp.answer if rrset.rdtype == dns.rdatatype.SRV]
        if srv:
            hop.tools = self._take_tools(q, resp)
            return []
        if not (resp.flags & dns.flags.AA) and any(r.rdtype == dns.rdatatype.NS for r in resp.authority):
            return self._take_referral(q, resp, hop)
        return []  # NODATA

    def _next_server(self, q: Query, why: str) -> list[Query]:
        if q.server_index + 1 < len(q.servers):
            nxt = Query(q.qname, q.zone, q.servers, q.path, q.depth, server_index=q.server_index + 1,
                        attempts=q.attempts + 1, cache_key=q.cache_key)
            return [self._build(nxt)]
        self.errors.append(f"{q.zone}: no name server answered ({why})")
        if q.depth == 0:
            self.fatal = NoServersReachable(f"no root name server answered: {why}")
        return []

    @staticmethod
    def _ttl(resp: dns.message.Message, meta) -> float:
        """How long this reply may be cached under (name, type, intent, K)."""
        if meta is not None:
            return float(meta.cache_ttl)
        ttls = [rrset.ttl for section in (resp.answer, resp.authority) for rrset in section]
        return float(min(ttls)) if ttls else 0.0

    @staticmethod
    def _opt(resp: dns.message.Message, code: int) -> bytes | None:
        for opt in resp.options:
            if opt.otype == code:
                return opt.to_wire() if hasattr(opt, "to_wire") else getattr(opt, "data", b"")
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
                text = getattr(opt, "text", None)
                if text is None:
                    try:
                        text = decode_ede(opt.to_wire())[1]
                    except IntentError:
                        text = None
                return text
        return None

    def _txt_by_owner(self, resp) -> dict[str, dict[str, str]]:
        out = {}
        for rrset in resp.additional:
            if rrset.rdtype == dns.rdatatype.TXT:
                for rd in rrset:
                    pairs = decode_pairs(rd.strings)
                    if pairs.get("tooldns"):
                        out[rrset.name.to_text().lower()] = pairs
        return out

    def _take_tools(self, q: Query, resp) -> list[Tool]:
        meta = self._txt_by_owner(resp)
        by_rank = {}
        for owner, pairs in meta.items():
            try:
                by_rank[int(pairs.get("rank", "0"))] = (owner, pairs)
            except ValueError:
                continue
        found = []
        for rrset in resp.answer:
            if rrset.rdtype != dns.rdatatype.SRV:
                continue
            for rd in sorted(rrset, key=lambda r: r.priority):
                owner, pairs = by_rank.get(rd.priority, ("", {}))
                label = owner.split(".", 1)[0] if owner else ""
                score = pairs.get("score")
                tool = Tool(
                    name=pairs.get("name", label or rd.target.to_text()),
                    service=pairs.get("service", self.service),
                    target=rd.target.to_text(), port=rd.port, weight=rd.weight,
                    zone=q.zone, score=float(score) if score else None, rank=rd.priority, label=label,
                    endpoint=pairs.get("endpoint", ""), description=pairs.get("desc", ""),
                    id=pairs.get("id", ""), path=list(q.path),
                )
                found.append(tool)
                old = self._tools.get(tool.key)
                if old is None or (tool.score or 0) > (old.score or 0):
                    self._tools[tool.key] = tool
        return found

    def _allowed(self, zone: str, kind: str) -> tuple[bool, str]:
        label = zone.split(".", 1)[0]
        def matches(entries):
            return any(e.lower().rstrip(".") in (label, zone.rstrip(".")) for e in entries)
        if self.exclude and matches(self.exclude):
            return False, "excluded"
        if kind == "organisation" and self.trust is not None and not matches(self.trust):
            return False, "organisation not trusted"
        return True, ""

    def _take_referral(self, q: Query, resp, hop: Hop) -> list[Query]:
        meta = self._txt_by_owner(resp)
        glue: dict[str, list[str]] = {}
        for rrset in resp.additional:
            if rrset.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA):
                glue.setdefault(rrset.name.to_text().lower(), []).extend(rd.address for rd in rrset)
        children: list[tuple[str, list[str]]] = []
        for rrset in resp.authority:
            if rrset.rdtype == dns.rdatatype.NS:
                children.append((rrset.name.to_text().lower(), [rd.target.to_text().lower() for rd in rrset]))
        port = q.server[1]
        out = []
        for zone, ns_names in children:
            pairs = meta.get(zone, {})
            score = pairs.get("score")
            kind = pairs.get("kind", "functional")
            ref = Referral(zone, int(pairs.get("rank", len(hop.referrals) + 1)), float(score) if score else None,
                           kind, pairs.get("summary", ""))
            hop.referrals.append(ref)
            if not names.is_subdomain(zone, q.zone):
                ref.followed, ref.why_not = False, f"outside {q.zone}"
                continue
            ok, why = self._allowed(zone, kind)
            if not ok:
                ref.followed, ref.why_not = False, why
                continue
            servers = [(addr, port) for n in ns_names for addr in glue.get(n, [])]
            if not servers:
                ref.followed, ref.why_not = False, "no glue"
                continue
            if zone == q.zone:  # kind "self": this zone's own tools
                qname = names.Cursor(self.service, self.transport, zone, expanded=True).to_text()
                depth = q.depth
            else:
                qname = names.Cursor(self.service, self.transport, zone).to_text()
                depth = q.depth + 1
            if depth > self.max_depth:
                ref.followed, ref.why_not = False, "depth limit"
                self.errors.append(f"depth limit {self.max_depth} reached at {zone}")
                continue
            if (qname, zone) in self._asked:
                ref.followed, ref.why_not = False, "already asked"
                continue
            if self.stats.queries + len(out) >= self.max_queries:
                ref.followed, ref.why_not = False, "query limit"
                self.errors.append(f"query limit {self.max_queries} reached")
                continue
            self._asked.add((qname, zone))
            path = q.path if zone == q.zone else (*q.path, zone)
            out.append(self._query(qname, zone, servers, path, depth))
        return out

    # -- the end --
    def result(self, top: int | None = None) -> Resolution:
        if self.fatal is not None:
            raise self.fatal
        tools = sorted(self._tools.values(), key=lambda t: (-(t.score or 0.0), t.rank, t.zone, t.name))
        if any((t.score or 0) > 0 for t in tools):  # tools that matched nothing only pad the list
            tools = [t for t in tools if t.score is None or t.score > 0]
        if top is not None:
            tools = tools[:top]
        self.stats.nodes_visited = len(self._zones)
        if any("limit" in e for e in self.errors) and not tools:
            raise LimitExceeded("; ".join(self.errors))
        return Resolution(self.intent, self.k, self.service, tools, self.stats, self.trace, list(self.errors))


__all__ = ["Walk", "Query", "BadResponse"]
