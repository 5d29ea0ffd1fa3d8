"""The zone resolver: dnslib's one-method plugin contract, ``resolve(request, handler) -> reply``.

It checks the query (opcode, question count, EDNS version, the intent option), asks
:func:`tooldns.serving.lookup.lookup` for the result against the current zone index and has
:mod:`tooldns.serving.reply` build the message. It is the safety net at the edge: a malformed intent
becomes FORMERR with an Extended DNS Error text, any unexpected exception becomes SERVFAIL
(dnslib's own server would send nothing and leave the client to time out).

Beside that contract, :meth:`ZoneResolver.fast_answer` is the door to the fast path
(:mod:`tooldns.serving.fast`): the hot queries (intent searches: a ranked referral or a ranked
answer) from the query's bytes to the reply's bytes, with the same decision
(:func:`tooldns.serving.lookup.ranked`) and the same bytes as :meth:`resolve`; it declines (None)
everything else, which :meth:`resolve` then answers.

    >>> resolver = ZoneResolver(StaticSource(ZoneIndex(load_zone("zones/tools.yaml"))))
    >>> reply = resolver.resolve(DNSRecord.parse(query_bytes), None)
    >>> wire = resolver.fast_answer(query_bytes, udp=True)   # None: ask resolve()
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import replace
from functools import partial
from typing import Protocol

import dns.name
from dnslib import CLASS, OPCODE, QTYPE, RCODE, RR, TXT, DNSRecord

from ..exceptions import IntentError
from ..protocol import names
from .index import ZoneIndex
from ..protocol.intent import INTENT_OPTION_CODE, Intent, decode_intent
from ..protocol.vector import VECTOR_OPTION_CODE, decode_vector
from .fast import FastPath
from .lookup import Kind, Result, fits_trimmed, lookup, trimmed
from .offloop import WouldWait
from .options import decoded, option_data, with_flags
from .reply import BADVERS, error_reply, notify_reply, reply_for, request_opt
from .server import Served, Serving
from .wire import CLASSIC_UDP_SIZE, SERVER_UDP_SIZE, most_that_fit, pack_reply

log = logging.getLogger(__name__)


class IndexSource(Protocol):
    """Anything that holds the current index of a zone (a :class:`tooldns.serving.store.ZoneStore`),
    and calls its *listeners* (no arguments) after each reload that swapped it."""

    @property
    def index(self) -> ZoneIndex: ...

    listeners: list


class StaticSource:
    """A fixed index, for tests and embedding (swapped by hand: nothing to hear)."""

    def __init__(self, index: ZoneIndex) -> None:
        self.index = index
        self.listeners: list = []


#: class ANY (RFC 1035 QCLASS 255; dnslib names it '*')
CLASS_ANY = 255
#: CHAOS-class TXT name that reports a server's counters, like BIND's version.bind
STATS_NAME = "stats.tooldns."


def _said(result: Result, odd: str | None) -> Result:
    """*result*, decided for a stand-in of the question's name (:func:`~tooldns.protocol.names.wire_name`),
    saying what is wrong with the name when it is denied or refused."""
    return result if odd is None or result.kind not in (Kind.NXDOMAIN, Kind.REFUSED) else replace(result, ede=odd)


def _option(opt, code: int, decode, what: str):
    """The decoded option *code* of a query's OPT record, None without one; IntentError saying
    what is wrong with it (a FORMERR for the client)."""
    return decoded(option_data(opt, code), code, decode, what)


def _fitted(request: DNSRecord, handler, intent: Intent | None, result: Result, build) -> tuple[DNSRecord, bool]:
    """The full path's reply, *build(result)*, and whether it was trimmed: when the query's fit option
    asks it and that reply would not fit the client's UDP payload, *build* of the most of its best
    tools that fits (as the fast path trims: the same bytes, so the same count)."""
    reply = build(result)
    tools = fits_trimmed(result) if intent is not None and intent.fit and getattr(handler, "protocol", "") == "udp" else 0
    if tools < 2:
        return reply, False
    opt = request_opt(request)
    size = CLASSIC_UDP_SIZE if opt is None else min(max(opt.rclass, CLASSIC_UDP_SIZE), SERVER_UDP_SIZE)
    if len(pack_reply(reply, None)) <= size:
        return reply, False

    def fitting(n: int) -> DNSRecord | None:
        smaller = build(trimmed(result, n))
        return smaller if len(pack_reply(smaller, None)) <= size else None

    fitted = most_that_fit(tools, fitting)
    return (reply, False) if fitted is None else (fitted, True)


class ZoneResolver(Served):
    """Answers queries for one zone. Counters: ``stats`` (queries, by rcode, errors)."""

    def __init__(self, source: IndexSource, intent_code: int = INTENT_OPTION_CODE) -> None:
        self.source = source
        self.intent_code = intent_code
        #: *trimmed*: answers that kept the best tools fitting the client's datagram (the fit option)
        self.stats = {"queries": 0, "servfail": 0, "formerr": 0, "trimmed": 0}
        #: the fast path (:mod:`tooldns.serving.fast`), counting its replies in :attr:`stats`
        self.fast = FastPath(source, intent_code, self.stats)
        self._serving: tuple[weakref.ref, Serving] | None = None  # per index
        #: what hears a NOTIFY for one of this zone's children: (zone, child, client address) -> rcode
        #: (:meth:`tooldns.serving.summaries.SummaryKeeper.notified`); None: NOTIFY is not implemented
        self.on_notify = None

    def prepare(self) -> None:
        """Make now what the first query of the zone's current index would otherwise make on the
        event loop: the summary it publishes, what the server reads of it and the fast path's pieces
        (a leaf of 10,000 tools: 120 ms of work). For a thread off the loop: a tree's work thread at
        start and after a swap of the index (:meth:`renewed`), a lazy zone's loading thread.
        What fails is left to that first query to say."""
        index = self.source.index
        try:
            index.published_rr()
            self.serving
            self.fast.packed(index)
        except Exception:
            log.exception("%s: preparing its first answers", index.origin)

    def renewed(self) -> None:
        """The zone's index was replaced (a listener of its store, in the thread that swapped it): what
        its first query would make, made now (:meth:`prepare`) when queries come to this zone; a zone
        never asked is left to its first query (a 10,000-tool leaf's pieces take 120 ms of work)."""
        if self.fast.asked:
            self.prepare()

    def resolve(self, request: DNSRecord, handler) -> DNSRecord:
        self.stats["queries"] += 1
        try:
            return self._resolve(request, handler)
        except WouldWait:  # answered again off the event loop, and counted then
            self.stats["queries"] -= 1
            raise
        except Exception:  # the safety net: never leave a client waiting
            log.exception("internal error answering %s", request.q.qname if request.questions else "?")
            self.stats["servfail"] += 1
            return error_reply(request, RCODE.SERVFAIL, "internal server error")

    def fast_answer(self, data: bytes, udp: bool) -> bytes | None:
        """The fast path's reply to query bytes *data* (:meth:`tooldns.serving.fast.FastPath.answer`),
        or None: :meth:`resolve` answers it."""
        return self.fast.answer(data, udp)

    @property
    def serving(self) -> Serving:
        """What the server reads of the zone's current index (a reload makes a new one, and a new
        :class:`~tooldns.serving.server.Serving` with it)."""
        index = self.source.index
        held = self._serving
        if held is None or held[0]() is not index:
            signer = index.signer
            held = self._serving = (weakref.ref(index), Serving(
                index.cacheable, index.blocking, index.zone.settings.rate_limit,
                None if signer is None else signer.refresh))
        return held[1]

    def counters(self) -> dict[str, int]:
        """This server's counters plus those of its zone's scorers (LLM calls and tokens ...)."""
        out = dict(self.stats)
        for scorer in self.source.index.scorers():
            for key, value in scorer.counters().items():
                out[f"scorer_{key}"] = out.get(f"scorer_{key}", 0) + value
        return out

    def _stats_reply(self, request: DNSRecord, handler=None) -> DNSRecord:
        """``dig CH TXT stats.tooldns.``: the counters as key=value strings (not cached: TTL 0), with
        those of the server that received the query (sockets, packet cache, rate limiting) when the
        handler names it, as dnslib's handlers do (``handler.server``)."""
        counters = dict(getattr(getattr(handler, "server", None), "stats", None) or {})
        counters.update(self.counters())
        strings = [f"zone={self.source.index.origin}"] + [f"{k}={v}" for k, v in sorted(counters.items())]
        reply = reply_for(request, Result(Kind.ANSWER, answer=[RR(request.q.qname, QTYPE.TXT, CLASS.CH, 0, TXT(strings))]))
        return reply

    def _notify(self, request: DNSRecord, handler) -> DNSRecord:
        """NOTIFY (RFC 1996) that a child of this zone changed: acknowledged when it comes from one
        of the child's name servers, which the parent then asks for its serial and summary."""
        if len(request.questions) != 1 or request.q.qtype != QTYPE.SOA or request.q.qclass != CLASS.IN:
            return self._formerr(request, "a NOTIFY must ask one question: the changed zone's name, type SOA, class IN")
        child, _ = names.wire_name(request.q.qname.label)  # a label with a dot is no child's name
        client = getattr(handler, "client_address", None)
        address = client[0] if isinstance(client, tuple) else str(client)
        rcode = self.on_notify(self.source.index.origin, child, address)
        if rcode == RCODE.REFUSED:
            return error_reply(request, RCODE.REFUSED, f"NOTIFY for {child} from {address}, which is not one of its "
                                                       "name servers")
        if rcode != RCODE.NOERROR:
            return error_reply(request, rcode, f"{child} is not a child zone of {self.source.index.origin}")
        return notify_reply(request)

    def _fitted(self, request: DNSRecord, handler, intent: Intent | None, result: Result, build) -> DNSRecord:
        """*build(result)*, or its form trimmed to fit the client's datagram (:func:`_fitted`), counted."""
        reply, trimmed_ = _fitted(request, handler, intent, result, build)
        self.stats["trimmed"] += trimmed_
        return reply

    def _formerr(self, request: DNSRecord, why: str) -> DNSRecord:
        self.stats["formerr"] += 1
        return error_reply(request, RCODE.FORMERR, why)

    def _resolve(self, request: DNSRecord, handler=None) -> DNSRecord:
        header = request.header
        if header.opcode == OPCODE.NOTIFY and self.on_notify is not None:
            return self._notify(request, handler)
        if header.opcode != OPCODE.QUERY:
            return error_reply(request, RCODE.NOTIMP, f"opcode {OPCODE.get(header.opcode)} is not implemented")
        if len(request.questions) != 1:
            return self._formerr(request, f"a query must have exactly one question, not {len(request.questions)}")
        opt = request_opt(request)
        if opt is not None and opt.edns_ver != 0:
            return error_reply(request, BADVERS, f"EDNS version {opt.edns_ver} is not supported; use 0")
        try:
            intent = _option(opt, self.intent_code, decode_intent, "intent")
            vector = _option(opt, VECTOR_OPTION_CODE, decode_vector, "vector")
            if intent is not None:  # ranked tool answers without descriptions; trimmed to fit
                intent = with_flags(intent, partial(option_data, opt))
        except IntentError as exc:
            return self._formerr(request, str(exc))
        q = request.q
        if q.qclass == CLASS.CH and q.qtype == QTYPE.TXT and str(q.qname).lower() == STATS_NAME:
            return self._stats_reply(request, handler)
        if q.qclass not in (CLASS.IN, CLASS_ANY):
            return error_reply(request, RCODE.REFUSED, f"class {CLASS.get(q.qclass)} is not served")
        if q.qtype in (QTYPE.AXFR, QTYPE.IXFR):
            return error_reply(request, RCODE.REFUSED, "zone transfers are not offered")
        # a label with a dot or octets outside ASCII: a stand-in where the name lies (names.wire_name)
        qname, odd = names.wire_name(q.qname.label)
        index = self.source.index
        if index.signer is not None:  # a signed zone (tooldns.dnssec): DNSKEY, DS, and RRSIGs for DO queries
            from .signing import secure, signed_lookup

            do = opt is not None and bool(opt.ttl & 0x8000)
            result = _said(signed_lookup(index, qname, q.qtype, intent, vector, False), odd)  # secured once trimmed
            # the name a denial proves absent, as dnspython writes it when it needs escapes (signer.owner_label)
            denied = qname if odd is None and "\\" not in qname else dns.name.Name(q.qname.label + (b"",)).to_text()
            return self._fitted(request, handler, intent, result, lambda r: reply_for(
                request, secure(index, index.signer, denied, q.qtype, r) if do else r, dnssec=do))
        return self._fitted(request, handler, intent, _said(lookup(index, qname, q.qtype, intent, vector), odd),
                            lambda r: reply_for(request, r))
