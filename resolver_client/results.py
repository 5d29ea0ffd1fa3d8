"""What a resolution returns: ranked tools, the hops that found them and what it cost.

    >>> res = Resolver().resolve("historical weather Hong Kong")
    >>> res.tools[0].name, res.tools[0].zone, res.stats.queries
    ('HKO Historical Climate Data', 'hko.weather.tools.', 6)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace


@dataclass
class Tool:
    name: str
    service: str
    target: str
    port: int
    zone: str
    score: float | None
    rank: int  # rank within its leaf's answer (1 = best there)
    label: str = ""
    endpoint: str = ""
    description: str = ""
    id: str = ""
    path: list[str] = field(default_factory=list)  # zones walked from the root to the leaf
    weight: int = 0
    #: the parts of a hybrid zone's score (BM25, cosine); ``score`` is then their fusion over
    #: every leaf's tools (:mod:`tooldns.protocol.fusion`)
    bm25: float | None = None
    cosine: float | None = None
    #: DNSSEC status when the resolution validated (``Resolver(validate=True)``): "secure" (chained to
    #: the trust anchor) or "insecure" (below a delegation proven unsigned); "" when not validated.
    #: Bogus tools are never returned
    dnssec: str = ""

    @property
    def dns_name(self) -> str:
        """The tool's DNS name, ``<label>._<service>._tcp.<zone>`` (walks ask for TCP tools), its handle for
        ``describe_tool``; "" when its leaf named no owner for it. ``name`` is its human name, its title."""
        return f"{self.label}._{self.service}._tcp.{self.zone}" if self.label else ""

    def to_dict(self) -> dict:
        """The tool as JSON has it, as ``tooldns mcp`` does: ``name`` its DNS name, ``title`` its human name."""
        data = asdict(self)
        title = data.pop("name")
        return {"name": self.dns_name, "title": title, **data}

    @property
    def key(self) -> str:
        """Identity for merging: the catalog id when known, else the tool's own DNS name."""
        return self.id or f"{self.label}.{self.zone}"


@dataclass
class Referral:
    """One child a server proposed, as seen in its reply."""

    zone: str
    rank: int
    score: float | None
    kind: str
    summary: str = ""
    followed: bool = True
    why_not: str = ""


@dataclass
class Hop:
    """One DNS exchange of the walk (like one step of ``dig +trace``)."""

    server: str
    qname: str
    transport: str
    rcode: str
    ms: float
    zone: str
    referrals: list[Referral] = field(default_factory=list)
    tools: list[Tool] = field(default_factory=list)
    note: str = ""
    cached: bool = False
    fallback: bool = False
    k: int = 0  # K asked of the zone (0: no reply)
    #: the server returned fewer than K: the rest scored far below the best (its meta option's PRUNED)
    pruned: bool = False
    scorer: str = ""  # the scorer the server named in its meta option


@dataclass
class Stats:
    queries: int = 0  # DNS messages sent (retries included), cache hits excluded
    cache_hits: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    packets: int = 0  # datagrams or TCP messages, both ways
    tcp_retries: int = 0
    timeouts: int = 0
    retransmits: int = 0  # UDP datagrams sent again after their server's retransmission timeout (rtt.py)
    timeout_retries: int = 0  # queries asked again (once each) after a timeout on the zone's last server
    hedges: int = 0  # UDP queries sent to the zone's next server too, when the first wait was over (hedging)
    nodes_visited: int = 0  # distinct zones asked
    ms: float = 0.0  # from the resolution's turn to its end (the wait for a turn is ``queued_ms``)
    #: milliseconds the resolution waited for a turn, the resolver's ``max_walks`` being out (a gateway's queue)
    queued_ms: float = 0.0
    fallbacks: int = 0  # answers flagged as produced by a fallback scorer
    embed_ms: float = 0.0  # time spent embedding the intent (once per resolution)
    intent_shortened: int = 0  # the intent's length in bytes, when it was cut to fit the option
    trimmed: int = 0  # answers with fewer tools than asked because no more fit one datagram (the fit option)
    #: follow-up queries for a leaf's next tools, its tools having all made the result (the page option)
    pages: int = 0
    #: answers ranked with a vector the zone made of the intent itself (the query carried none it
    #: could use): a client without the model still gets hybrid ranking
    zone_embedded: int = 0
    bogus: int = 0  # DNSSEC: RRsets, delegations or zone keys that failed validation (their data dropped)
    #: messages sent to learn the walk the tree publishes (``_walk.<root zone>``, :mod:`.plan`), counted in
    #: ``queries`` too; 0 when what the resolver learned before was still fresh, or it did not ask
    plan_queries: int = 0
    #: where the walk's settings came from, taken together: "published" (the tree's published walk set
    #: any of them), "caller" (the caller set some, the tree none), "built-in" (the search mode's own)
    settings_from: str = "built-in"
    #: each setting the walk went by (k, leaf_k, best_leaf_k, beam, model: "" for none) ...
    settings: dict = field(default_factory=dict)
    #: ... and where it came from: "caller", "published" or "built-in"
    sources: dict = field(default_factory=dict)
    #: who embedded the intent: "client" (this resolver sent a vector), "zones" (zones embedded the text
    #: themselves, ``zone_embedded``), "none" (every zone ranked by words alone)
    embedded_by: str = "none"
    #: why the model the settings name was not run here ("" when it was, or none was named)
    embed_note: str = ""


@dataclass
class Resolution:
    intent: str
    k: int
    service: str
    tools: list[Tool]
    stats: Stats
    trace: list[Hop]
    errors: list[str] = field(default_factory=list)

    def matched(self) -> "Resolution":
        """This resolution less the tools that scored 0: a zone asked for K tools answers K, those
        that no word of the intent matched (BM25 0) last, and when none matched, all at 0."""
        return replace(self, tools=[t for t in self.tools if t.score is None or t.score > 0])

    def to_dict(self) -> dict:
        return {
            "intent": self.intent, "k": self.k, "service": self.service,
            "tools": [t.to_dict() for t in self.tools],
            "stats": asdict(self.stats),
            "errors": list(self.errors),
        }
