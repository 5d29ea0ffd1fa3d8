"""A tool's full metadata: the TXT (and SRV) records at the tool's own DNS name.

A ranked answer carries each tool's description cut to 120 bytes and no parameters; the TXT
record owned by the tool's name carries all of it (``name``, ``service``, ``endpoint``, ``desc``,
``id`` and one ``param=name:type:required|optional:description`` per parameter), its SRV record
the target and port (``docs/protocol.md``, section 4). A tool's name is
``<label>._<service>._<transport>.<zone>``, as :func:`tool_name` writes it for a tool a walk found.

:class:`Lookup` finds them as a walk finds tools, an I/O-free state machine: ask the name
servers of a zone (the root's, or those of the tool's own zone when a walk already met them), follow
referrals down through their glue (RD=0) until the tool's zone answers, then ask that server for
the SRV record. :func:`adescribe` drives it with asyncio, :func:`describe` blocking: UDP on a
connected socket as in a walk (:mod:`.transport`), dnspython's TCP query when a reply is
truncated. Text from zone files is made safe to show a model (:mod:`tooldns.protocol.hygiene`),
as the walk does.

    >>> info = describe("hko-climate._http._tcp.hko.weather.tools.", root=("127.0.0.1", 5300))
    >>> info.title, [p.name for p in info.parameters], info.target
    ('HKO Historical Climate Data', ['station', 'year'], 'data.weather.gov.hk.')

Errors are :class:`ResolverError` and its subclasses: not a tool's name, no such tool
(NXDOMAIN), no metadata there, no name server answering (:class:`NoServersReachable`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace

import dns.asyncquery
import dns.exception
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype

from tooldns.protocol import NameError_, names
from tooldns.protocol.hygiene import neutralise, printable
from tooldns.protocol.txt import decode_pairs

from . import transport
from .exceptions import BadResponse, IntentRejected, LimitExceeded, NoServersReachable, ResolverError
from .results import Tool

UDP_PAYLOAD = 1232
#: referrals followed from the zone first asked down to the tool's zone
MAX_STEPS = 16
_TXT, _SRV = dns.rdatatype.TXT, dns.rdatatype.SRV


@dataclass
class Parameter:
    """One parameter of a tool, from a ``param=name:type:required|optional:description`` string."""

    name: str
    type: str = "string"
    required: bool = False
    description: str = ""


@dataclass
class ToolInfo:
    """Everything the tree says about one tool."""

    name: str  # its DNS name: <label>._<service>._<transport>.<zone>
    title: str  # its human name (``name=`` of the TXT record)
    service: str
    zone: str
    endpoint: str = ""
    description: str = ""
    parameters: list[Parameter] = field(default_factory=list)
    id: str = ""
    target: str = ""  # SRV target host ("" when the SRV record could not be had)
    port: int = 0
    #: every key of the TXT record, as sent (``param`` values one per line)
    metadata: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def tool_name(tool: Tool) -> str:
    """The DNS name of a tool a walk found: ``<label>._<service>._tcp.<zone>`` (walks ask for TCP
    tools, so every tool they return is one)."""
    return tool.dns_name


def parse_param(text: str) -> Parameter:
    """``name:type:required|optional:description`` -> :class:`Parameter` (missing parts: defaults)."""
    name, kind, required, description = (text.split(":", 3) + ["", "", "", ""])[:4]
    return Parameter(printable(name.strip()), printable(kind.strip()) or "string",
                     required.strip().lower() == "required", neutralise(description.strip(), limit=None))


def check_tool_name(name: object, root_zone: str = "tools.") -> str:
    """*name* normalized when it can be a tool's name under *root_zone*; ResolverError saying why not."""
    hint = ("a tool's DNS name is <label>._<service>._<transport>.<zone>, as find_tools returns it "
            "(like hko-climate._http._tcp.hko.weather.tools.)")
    try:
        norm = names.normalize(name)  # type: ignore[arg-type]
    except NameError_ as exc:
        raise ResolverError(f"{str(name)[:80]!r} is not a DNS name ({exc}); {hint}") from None
    parts = names.labels(norm)
    if len(parts) < 4 or not parts[1].startswith("_") or parts[2] not in ("_tcp", "_udp"):
        raise ResolverError(f"{norm} is not a tool's name: {hint}")
    if not names.is_subdomain(norm, names.normalize(root_zone)):
        raise ResolverError(f"{norm} is not in the tree under {root_zone}")
    return norm


@dataclass
class Ask:
    """One question (the tool's name, TXT or SRV) to the name servers of one zone."""

    qtype: int
    zone: str
    servers: list[tuple[str, int]]
    server_index: int = 0
    from_hint: bool = False
    timeout_retried: bool = False  # asked again after a timeout already (once: as the walk does)

    @property
    def server(self) -> tuple[str, int]:
        return self.servers[self.server_index]

    def message(self, name: str) -> dns.message.Message:
        return dns.message.make_query(name, self.qtype, use_edns=0, payload=UDP_PAYLOAD, flags=0)


class Lookup:
    """The lookup of one tool's metadata, without I/O: ``ask = start()``, then
    ``ask = take(ask, reply_or_None, error)`` until it is None, then :meth:`result`."""

    def __init__(self, name: str, root: list[tuple[str, int]], root_zone: str = "tools.",
                 hints: Mapping[str, list[tuple[str, int]]] | None = None) -> None:
        self.name = check_tool_name(name, root_zone)
        self.zone = ".".join(names.labels(self.name)[3:]) + "."
        self.root, self.root_zone = list(root), names.normalize(root_zone)
        self.hint = list((hints or {}).get(self.zone, ()))
        self.steps = 0
        self.errors: list[str] = []
        self.pairs: dict[str, str] | None = None
        self.srv: tuple[str, int] | None = None
        self.fatal: ResolverError | None = None

    def start(self) -> Ask:
        """The first question: to the tool's zone when its servers are known, else to the root."""
        if self.hint:
            return Ask(_TXT, self.zone, self.hint, from_hint=True)
        if not self.root:
            raise NoServersReachable("no root name server given")
        return Ask(_TXT, self.root_zone, self.root)

    def take(self, ask: Ask, reply: dns.message.Message | None, error: Exception | None = None) -> Ask | None:
        """Account for the reply to *ask* (or the error instead); the next question, or None: done."""
        where = f"{ask.server[0]}:{ask.server[1]}"
        if reply is None:
            timed_out = isinstance(error, (TimeoutError, dns.exception.Timeout))
            if timed_out and ask.server_index + 1 >= len(ask.servers) and not ask.timeout_retried:
                self.errors.append(f"{where}: {error}; asked again")
                return replace(ask, timeout_retried=True)  # a lost datagram: the last server once more
            return self._next_server(ask, f"{where}: {error or 'no reply'}")
        rcode = reply.rcode()
        if rcode == dns.rcode.FORMERR:
            self.fatal = IntentRejected(f"{where} rejected the query for {self.name} (FORMERR)")
            return None
        if rcode == dns.rcode.NXDOMAIN:
            if ask.qtype == _TXT:
                self.fatal = ResolverError(f"no tool named {self.name}: the zone {ask.zone} says the name "
                                           "does not exist")
            return None
        if rcode != dns.rcode.NOERROR:
            return self._next_server(ask, f"{where}: {dns.rcode.to_text(rcode)}")
        answer = self._answer(reply, ask.qtype)
        if answer is not None:
            return self._take_answer(ask, answer)
        if not reply.flags & dns.flags.AA and any(r.rdtype == dns.rdatatype.NS for r in reply.authority):
            return self._take_referral(ask, reply, where)
        if ask.qtype == _TXT:  # NODATA: a name of the tree, but not a tool's
            self.fatal = ResolverError(f"{self.name} exists but holds no tool metadata (no TXT record)")
        return None

    def _answer(self, reply: dns.message.Message, qtype: int):
        for rrset in reply.answer:
            if rrset.rdtype == qtype and rrset.name.to_text().lower() == self.name:
                return rrset
        return None

    def _take_answer(self, ask: Ask, rrset) -> Ask | None:
        if ask.qtype == _SRV:
            rd = min(rrset, key=lambda r: r.priority)
            self.srv = (rd.target.to_text(), rd.port)
            return None
        pairs = decode_pairs([s for rd in rrset for s in rd.strings])
        if "tooldns" not in pairs:
            self.fatal = ResolverError(f"the TXT record of {self.name} is not ToolDNS metadata (no tooldns= key)")
            return None
        self.pairs = pairs
        return Ask(_SRV, ask.zone, ask.servers, ask.server_index)  # the same server holds the SRV record

    def _take_referral(self, ask: Ask, reply: dns.message.Message, where: str) -> Ask | None:
        ns = [rrset for rrset in reply.authority if rrset.rdtype == dns.rdatatype.NS]
        child = ns[0].name.to_text().lower()
        if not (names.is_subdomain(self.name, child) and child != ask.zone and names.is_subdomain(child, ask.zone)):
            self.fatal = BadResponse(f"{where} referred {self.name} to {child}, which does not lead to it")
            return None
        hosts = {rd.target.to_text().lower() for rrset in ns for rd in rrset}
        servers = [(rd.address, ask.server[1]) for rrset in reply.additional if rrset.name.to_text().lower() in hosts
                   and rrset.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA) for rd in rrset]
        self.steps += 1
        if self.steps > MAX_STEPS:
            self.fatal = LimitExceeded(f"more than {MAX_STEPS} referrals looking up {self.name}")
            return None
        if not servers:
            self.fatal = NoServersReachable(f"{where} referred {self.name} to {child} without glue addresses")
            return None
        return Ask(_TXT, child, servers)

    def _next_server(self, ask: Ask, why: str) -> Ask | None:
        self.errors.append(why)
        if ask.server_index + 1 < len(ask.servers):
            return Ask(ask.qtype, ask.zone, ask.servers, ask.server_index + 1, ask.from_hint)
        if ask.qtype == _SRV:
            return None  # the metadata is in hand; the target and port stay unknown
        if ask.from_hint and self.root:  # the zone's servers met in an earlier walk: walk down again
            return Ask(_TXT, self.root_zone, self.root)
        self.fatal = NoServersReachable(f"no name server of {ask.zone} answered looking up {self.name}: "
                                        + "; ".join(self.errors[-3:]))
        return None

    def result(self) -> ToolInfo:
        if self.fatal is not None:
            raise self.fatal
        if self.pairs is None:
            raise ResolverError(f"the lookup of {self.name} ended without an answer")
        p, parts = self.pairs, names.labels(self.name)
        target, port = self.srv or ("", 0)
        return ToolInfo(
            name=self.name, title=printable(p.get("name", parts[0])), service=printable(p.get("service", parts[1][1:])),
            zone=self.zone, endpoint=printable(p.get("endpoint", "")),
            description=neutralise(p.get("desc", ""), limit=None),
            parameters=[parse_param(line) for line in p.get("param", "").split("\n") if line.strip()],
            id=printable(p.get("id", "")), target=target, port=port,
            metadata={printable(k): _safe(k, v) for k, v in p.items()})


def _safe(key: str, value: str) -> str:
    """A TXT value fit to show a model: free text neutralised, the rest printable, params one per line."""
    if key == "param":
        return "\n".join(neutralise(line, limit=None) for line in value.split("\n"))
    return neutralise(value, limit=None) if key in ("desc", "summary", "name") else printable(value)


_ERRORS = (OSError, EOFError, dns.exception.DNSException)


def _checked(query: dns.message.Message, wire: bytes) -> dns.message.Message:
    reply = dns.message.from_wire(wire)
    if not query.is_response(reply):
        raise dns.exception.FormError("the reply does not match the query (ID or question)")
    return reply


async def _aexchange(query: dns.message.Message, server: tuple[str, int], timeout: float) -> dns.message.Message:
    """UDP on a connected socket (a dead server is reported at once, as in a walk), TCP when truncated."""
    reply = _checked(query, await transport.audp(query.to_wire(), *server, timeout))
    if reply.flags & dns.flags.TC:
        reply = await dns.asyncquery.tcp(query, server[0], timeout, server[1])
    return reply


def _exchange(query: dns.message.Message, server: tuple[str, int], timeout: float) -> dns.message.Message:
    reply = _checked(query, transport.udp(query.to_wire(), *server, timeout))
    if reply.flags & dns.flags.TC:
        reply = dns.query.tcp(query, server[0], timeout, server[1])
    return reply


async def adescribe(name: str, root: list[tuple[str, int]], *, root_zone: str = "tools.", timeout: float = 1.0,
                    hints: Mapping[str, list[tuple[str, int]]] | None = None) -> ToolInfo:
    """The full metadata of tool *name*, looked up from the *root* servers, or from the tool's zone's
    own when *hints* (zone -> name servers, as walks met them) knows them; asyncio."""
    lookup = Lookup(name, root, root_zone, hints)
    ask = lookup.start()
    while ask is not None:
        try:
            reply = await _aexchange(ask.message(lookup.name), ask.server, timeout)
            error = None
        except _ERRORS as exc:
            reply, error = None, exc
        ask = lookup.take(ask, reply, error)
    return lookup.result()


def describe(name: str, root: list[tuple[str, int]] | tuple[str, int], *, root_zone: str = "tools.",
             timeout: float = 1.0, hints: Mapping[str, list[tuple[str, int]]] | None = None) -> ToolInfo:
    """As :func:`adescribe`, blocking."""
    lookup = Lookup(name, root if isinstance(root, list) else [root], root_zone, hints)
    ask = lookup.start()
    while ask is not None:
        try:
            reply = _exchange(ask.message(lookup.name), ask.server, timeout)
            error = None
        except _ERRORS as exc:
            reply, error = None, exc
        ask = lookup.take(ask, reply, error)
    return lookup.result()
