"""The zone model: what one node of the `.tools` tree holds, independent of file format.

A zone has an origin, SOA data, its own name servers, a summary its parent scores, delegations
to child zones (functional domains such as ``history.weather.tools.`` or organisations such as
``hku.weather.tools.``), tools, and optionally the walk it recommends to resolvers
(:class:`~tooldns.protocol.plan.WalkPlan`, served at ``_walk.<origin>``). :mod:`tooldns.zone.zonefile` reads and writes these as YAML;
:mod:`tooldns.serving.index` indexes them for answering. The defaults here are the only ones: a
zone file that leaves a key out gets the default of the field it fills.

    >>> Tool(label="github", name="GitHub MCP", service="mcp", target="api.githubcopilot.com.",
    ...      port=443, description="Repositories, issues and pull requests").owner("code.tools.")
    'github._mcp._tcp.code.tools.'
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field

from ..protocol.hygiene import cap_repeats
from ..protocol.plan import WalkPlan
from ..scoring.bm25 import CorpusStats
from ..scoring.tokenize import Tokenized, tokenize

KINDS = ("functional", "organisation")


@dataclass(frozen=True)
class NameServer:
    name: str  # absolute, normalized
    address: str  # IPv4 or IPv6 literal


@dataclass(frozen=True)
class Summary:
    description: str = ""
    keywords: tuple[str, ...] = ()
    #: longer text that scorers index but answers do not show (``tooldns build`` puts the text of
    #: every tool beneath a child here)
    corpus: str = ""
    #: in a parent's delegation: the child's SOA serial this copy was written for (``tooldns build``
    #: writes it); while the child serves that serial the parent uses this copy, and learns the
    #: child's published summary once it serves another (``docs/summaries.md``)
    serial: int | None = None
    #: in a parent's delegation: the operator's copy always wins; the parent never asks the child
    pinned: bool = False
    #: the corpus counted: index terms (:func:`~tooldns.scoring.tokenize.tokenize`'s) and how often
    #: each occurs, most frequent first (``corpus_terms`` in zone files; ``tooldns build`` writes
    #: this instead of the text, which a large subtree would repeat at every level above it)
    corpus_terms: tuple[tuple[str, int], ...] = ()
    #: the same tools' terms in a few groups (``facets`` in zone files; ``tooldns build`` writes them,
    #: :func:`~tooldns.scoring.bm25.facets_of`): the ``bm25`` scorer ranks a child by its best group
    #: when every child of the zone has them; a learned summary has the child's published ones
    facets: tuple[tuple[tuple[str, int], ...], ...] = ()
    #: learned from the child's published summary (never read from a zone file): its index terms
    #: and their counts, standing for its description, keywords and everything beneath it
    terms: tuple[tuple[str, int], ...] = ()
    #: learned: how many tools the child says are in it and beneath it
    tools: int = 0
    #: learned: the child's centroids (the delegation's ``vectors`` while this summary is used)
    vectors: tuple[bytes, ...] = ()

    def display(self) -> str:
        """What referrals show: description and keywords."""
        return " ".join([self.description, *self.keywords]).strip()

    def text(self) -> str:
        """What scorers index."""
        return " ".join([self.description, *self.keywords, self.corpus]).strip()

    def counts(self) -> dict[str, int]:
        """The index terms of what scorers index, counted: a learned summary's terms; otherwise
        those of :meth:`text` plus :attr:`corpus_terms`."""
        if self.terms:
            return dict(self.terms)
        counts = Counter(tokenize(self.text()))
        for term, n in self.corpus_terms:
            counts[term] += n
        return counts

    def scored_facets(self) -> tuple[dict[str, int], ...]:
        """The :attr:`facets` scorers rank this summary by (a learned summary's are the child's)."""
        return tuple(map(dict, self.facets))

    def document(self) -> str:
        """What scorers index, as a scorer's document: :meth:`text`, or for a summary with counted
        terms (learned, or ``corpus_terms``) those terms as they were counted
        (:class:`~tooldns.scoring.tokenize.Tokenized`: lexical scorers read the counts, others the
        description, keywords and the most frequent terms), with its :attr:`facets`."""
        counted = self.terms or self.corpus_terms
        facets = self.scored_facets()
        if not counted and not facets:
            return self.text()
        shown = " ".join([self.text(), *(t for t, _ in counted[:200])]).strip()
        return Tokenized(shown, self.counts(), facets)


@dataclass(frozen=True)
class SOA:
    mname: str
    rname: str
    serial: int = 1
    refresh: int = 3600
    retry: int = 600
    expire: int = 604800
    minimum: int = 300


@dataclass(frozen=True)
class Parameter:
    name: str
    type: str = "string"
    description: str = ""
    required: bool = False


@dataclass(frozen=True)
class Delegation:
    label: str
    name: str  # label + "." + origin
    kind: str
    summary: Summary
    nameservers: tuple[NameServer, ...]
    #: the child is known to hold only tools (``tooldns build`` says so); referrals tell clients,
    #: which then ask it for tools directly, with as many as they want
    leaf: bool = False
    #: a few vectors standing for every tool beneath the child (centroids), each in the vector
    #: option's encoding (:mod:`tooldns.protocol.vector`); what the hybrid scorer compares intents with
    vectors: tuple[bytes, ...] = ()
    #: DNSSEC: the child's DS records (RDATA text, ``"12345 15 2 3f5a..."``), handed over by the child's
    #: operator (``tooldns dnssec keygen`` writes them for a tree signed here, ``docs/dnssec.md``); a
    #: signed parent serves them in referrals, signed. Empty: the delegation is insecure
    ds: tuple[str, ...] = ()


@dataclass(frozen=True)
class Tool:
    label: str
    name: str
    service: str
    target: str
    port: int
    description: str
    transport: str = "tcp"
    priority: int = 10
    weight: int = 100
    endpoint: str = ""
    parameters: tuple[Parameter, ...] = ()
    id: str = ""  # catalog id, when the zone was built from a catalog
    #: the embedding of :meth:`embedding_text`, in the vector option's encoding (empty: none yet,
    #: and the tool is scored by BM25 alone); ``vector_of`` is the digest of the text it was made from
    vector: bytes = b""
    vector_of: str = ""
    #: example intents this tool serves (written by its operator, or from a query log): never served,
    #: only read by ``tooldns build`` and ``tooldns embed``, which fit the vector map on them
    #: (:mod:`tooldns.embedding.vectormap`)
    examples: tuple[str, ...] = ()

    def owner(self, origin: str) -> str:
        """The tool's own DNS name: ``<label>._<service>._<transport>.<origin>``."""
        return f"{self.label}._{self.service}._{self.transport}.{origin}"

    def text(self) -> str:
        """What lexical scorers index: name, description and parameter names and descriptions.

        Each word counts at most :data:`~tooldns.protocol.hygiene.MAX_REPEATS` times, so a tool
        cannot climb by repeating the words of likely intents (keyword stuffing).
        """
        params = " ".join(f"{p.name} {p.description}" for p in self.parameters)
        return cap_repeats(f"{self.name} {self.description} {params}".strip())

    def embedding_text(self) -> str:
        """What dense scorers embed: name and description."""
        return f"{self.name}: {self.description}"

    def text_digest(self) -> str:
        """A short digest of :meth:`embedding_text`: a vector whose ``vector_of`` differs is stale."""
        return hashlib.sha256(self.embedding_text().encode("utf-8")).hexdigest()[:12]


@dataclass(frozen=True)
class RateLimit:
    """Response rate limiting of the zone's UDP replies, per client prefix, as BIND's ``rate-limit``.

    Each client prefix (a /24 or /56 by default) earns ``responses_per_second`` credits a second
    and spends one per reply; in debt, its replies are dropped, except every ``slip``-th, which goes
    out truncated (TC set, no records) so that a real client behind a spoofed address retries over
    TCP, which is never limited. The debt is capped at ``window`` seconds of credit: a prefix that
    stops flooding is answered again at most ``window`` seconds later. 100 a second is more than
    ten full resolutions a second from one prefix (a resolution asks a zone about 8 queries at
    most), while a sustained flood at one victim prefix gets one burst of 100 full replies, then
    only slips no larger than its queries (see ``docs/security.md``).
    """

    #: 0: no rate limiting for this zone
    responses_per_second: int = 100
    #: NXDOMAIN replies and error replies (FORMERR, SERVFAIL, REFUSED ...) are counted apart from
    #: other replies; None: the same rate as responses_per_second; 0: not limited
    nxdomains_per_second: int | None = None
    errors_per_second: int | None = None
    window: int = 15
    #: 0: drop every reply over the limit; 1: truncate every one; N: truncate every N-th
    slip: int = 2
    ipv4_prefix_length: int = 24
    ipv6_prefix_length: int = 56
    #: networks (``192.0.2.0/24``, ``2001:db8::/32``, single addresses) never limited
    exempt: tuple[str, ...] = ()


@dataclass(frozen=True)
class Settings:
    scorer: str = "bm25"
    scorer_options: dict = field(default_factory=dict)
    #: options for ranking children only, over the ones above (long aggregated summaries want a
    #: much larger BM25 k1 than tool descriptions do)
    child_scorer_options: dict = field(default_factory=dict)
    #: results scoring below prune_ratio * best are left out (fewer than K may come back)
    prune_ratio: float = 0.1
    #: K is capped here, whatever the client asks for
    max_k: int = 32
    #: seconds an intent-aware cache may keep an intent-ranked answer (wire TTL stays 0)
    intent_ttl: int = 30
    #: embedder spec (``minilm``, ``openai:MODEL`` ...) with which the zone embeds intents that
    #: arrive without a vector (dig users, clients without a model); empty: it does not
    embed_intents: str = ""
    #: the digest of the vector map the zone's tool vectors and centroids were made through
    #: (``vector-map-<digest>.npz`` beside the zone files, :mod:`tooldns.embedding.vectormap`); empty:
    #: the model's own vectors
    vector_map: str = ""
    #: response rate limiting of the zone's UDP replies (``tooldns serve --rate-limit`` overrides it)
    rate_limit: RateLimit = RateLimit()


@dataclass(frozen=True)
class Zone:
    origin: str
    soa: SOA
    nameservers: tuple[NameServer, ...]
    ttl: int = 3600
    summary: Summary = Summary()
    children: tuple[Delegation, ...] = ()
    tools: tuple[Tool, ...] = ()
    settings: Settings = Settings()
    corpus_stats: CorpusStats | None = None
    #: the mean of the catalog's tool vectors (the vector option's encoding; empty: none), which a zone
    #: that scores vectors subtracts the intent's cosine with from every cosine (:mod:`tooldns.scoring.hybrid`):
    #: every zone of a built tree carries the same, as it carries the catalog's BM25 statistics
    vector_centre: bytes = b""
    #: where the zone was read from (error messages, logs); not part of what the zone is
    source: str = field(default="", compare=False)
    #: the walk this zone recommends to resolvers (``walk:`` in zone files), served as TXT at
    #: ``_walk.<origin>`` (docs/protocol.md, section 6b); None: it publishes none. In practice the
    #: root's, written by ``tooldns build``
    walk: WalkPlan | None = None
