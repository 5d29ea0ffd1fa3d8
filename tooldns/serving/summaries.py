"""Edits that travel up the tree: each zone publishes its summary, parents keep their copies fresh.

A parent ranks its children by a summary of each. The copy in the parent's zone file is written
once (by hand, or by ``tooldns build``); the child's own zone changes whenever its organisation
edits it. So every zone publishes what its parent needs at ``_summary.<origin>``
(:mod:`tooldns.protocol.summary`: its description and keywords, and the index terms of its tools
and of its own children's summaries), versioned by its SOA serial, and parents keep their copies
fresh the way DNS secondaries keep zones fresh:

* **NOTIFY** (RFC 1996): when what a zone serves changes (its file was reloaded, or it learned a
  new summary of one of its own children), its server sends NOTIFY from its own address to the
  name servers of its parent zone (when this process loaded the parent's zone file; otherwise the
  parent learns by polling). A parent accepts a NOTIFY only from an address its delegation names
  (REFUSED otherwise) and then checks the child at once.
* **Polling**: a parent asks each child's SOA at the child's refresh interval, never more often than
  every ``--summary-floor`` seconds (:data:`SUMMARY_FLOOR`) whatever the child says (``--summary-refresh``
  caps it: the operator's choice), and :data:`RETRY` seconds after a failure (capped the same way).
* When the child's serial differs from the one the parent knows, the parent fetches the summary
  over TCP from the child's name servers (the delegation's addresses, nothing else), checks it
  (:func:`tooldns.protocol.summary.decode_summary`: size, shape, the zone's own name) and uses it
  in place of its file's copy (:meth:`tooldns.serving.store.ZoneStore.learn`). From a child its
  delegation holds a DS for (DNSSEC), the summary is asked with the DO bit and accepted only when
  its RRSIG validates with the child's DNSKEY RRset, itself validated by that DS
  (:mod:`tooldns.dnssec.verify`); unsigned or badly signed, it is refused. That changes what
  the parent itself publishes, and serves under a new serial, so the change goes on up, one level
  at a time, to the root.
* **Rebuilds off the loop, and budgeted**: what a parent learns is applied in the tree's work thread
  (the new index is built there, then replaces the old in one assignment), the summaries learned
  meanwhile in one rebuild. A new serial whose summary says what the parent has already costs no
  rebuild; a summary that does change costs one of the child's budget, ``--summary-budget``
  rebuilds an hour (:data:`SUMMARY_BUDGET`: a burst of :data:`SUMMARY_BURST`, then one every
  hour/budget): a
  child over it is fetched again only when it has budget again, so that one child, NOTIFYing and
  changing as fast as it can, rebuilds its parent a few times an hour, not ten times a second.

Which copy wins: a delegation's ``summary`` with ``pin: true`` is the operator's and is never
replaced; one with ``serial: N`` stands for the child as of serial N and is used while the child
serves N (a tree ``tooldns build`` wrote starts without fetching anything); otherwise the child's
published summary wins as soon as it is learned. A child that cannot be reached keeps its last good
summary; the failure is logged and counted (``summary_refresh_failures``), and so is a summary
refused (``summaries_refused``).

    keeper = SummaryKeeper(stores, known_zones, port, sockets)
    await keeper.start()          # inside the running event loop; Tree does this
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import partial

import dns.asyncquery
import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rcode
import dns.rdataclass
import dns.rdatatype

from ..dnssec.verify import trusted_keys, verify_rrset
from ..exceptions import DNSSECError, SummaryError
from ..protocol import names
from ..protocol.hygiene import MAX_REPEATS
from ..protocol.summary import CENTROIDS, MAX_FACETS, PublishedSummary, decode_summary, fit_summary, summary_name
from ..protocol.vector import decode_vector
from ..scoring.bm25 import facets_of
from ..scoring.tokenize import tokenize
from ..zone.model import Delegation, NameServer, Summary, Zone

log = logging.getLogger(__name__)

#: seconds to wait for one reply of a child's name server
QUERY_TIMEOUT = 2.0
#: learned summaries arriving within this many seconds are applied to a parent in one rebuild
BATCH_DELAY = 0.05
#: NOTIFY is sent again after 1, 2, 4 ... seconds until acknowledged, at most this many times
NOTIFY_TRIES = 4
#: seconds between two log lines about NOTIFYs a zone refused (the others are counted, not logged)
REFUSED_LOG_INTERVAL = 60.0
#: seconds until a child is asked again after a failure or a refused summary (--summary-refresh caps it)
RETRY = 600.0
#: seconds between two polls of a child at least, whatever its SOA refresh (``--summary-floor``)
SUMMARY_FLOOR = 10.0
#: rebuilds of its parent each child may cause in an hour (``--summary-budget``): a burst of
#: SUMMARY_BURST (at most the budget), then one every 3600/budget seconds
SUMMARY_BUDGET = 60
SUMMARY_BURST = 3
#: seconds between two checks of a child at least, however often it NOTIFYs
NOTIFY_GAP = 1.0
#: queries to children in flight at once (each holds a socket: a tree of thousands of zones polls
#: them all at start, within the open-file budget's reserve, ``descriptors.RESERVE``)
MAX_OUTSTANDING = 8


def publish(zone: Zone) -> PublishedSummary:
    """What *zone* tells its parent: its own description and keywords, and the terms of its own
    summary, its tools and its children's summaries (learned ones as learned), most frequent first;
    and its facets (:func:`published_facets`)."""
    counts = Counter(zone.summary.counts())
    tools = len(zone.tools)
    tokens = [tokenize(tool.text()) for tool in zone.tools]
    for terms in tokens:
        counts.update(terms)
    for child in zone.children:
        terms = child.summary.counts()  # learned or corpus_terms: counted already, not spelt out again
        counts.update(terms)
        # a copy from a zone file does not say how many tools it stands for: words count at most
        # MAX_REPEATS times per tool there, so its most frequent word bounds them from below
        tools += child.summary.tools or max(1, -(-max(terms.values(), default=0) // MAX_REPEATS))
    return fit_summary(zone.origin, zone.soa.serial, zone.summary.description, zone.summary.keywords,
                       counts, tools, centroids([t.vector for t in zone.tools if t.vector]
                                                + [v for c in zone.children for v in c.vectors]),
                       published_facets(zone, tokens))


def published_facets(zone: Zone, tokens: list[list[str]]) -> tuple[Counter, ...]:
    """The facets *zone* publishes: its own tools' (their index terms *tokens*, in groups, as ``tooldns
    build`` groups a child's tools) and then each child's, when they cover every tool (each child has
    facets, and the zone's own tools are few enough to group) and there are at most
    :data:`~tooldns.protocol.summary.MAX_FACETS` in all; none otherwise (its parent then ranks its
    whole summary, as it ranks a child of many tools)."""
    children = [c.summary.scored_facets() for c in zone.children]
    own = facets_of(tokens)
    if not all(children) or (tokens and not own):
        return ()
    out = [*own, *(Counter(f) for child in children for f in child)]
    return tuple(out) if len(out) <= MAX_FACETS else ()


def centroids(vectors: list[bytes], n: int = CENTROIDS) -> tuple[bytes, ...]:
    """At most *n* unit-length centroids of encoded *vectors* (its tools' and its children's), of the
    model most of them are of, clustered as ``tooldns build`` clusters a child's tools (k-means)."""
    if not vectors:
        return ()
    import numpy as np

    from ..scoring.hybrid import as_array, centroid_vectors

    decoded = [decode_vector(v) for v in vectors]
    model, dim = Counter((v.model, v.dim) for v in decoded).most_common(1)[0][0]
    return centroid_vectors(model, np.array([as_array(v) for v in decoded if (v.model, v.dim) == (model, dim)]), n)


def learned_summary(published: PublishedSummary) -> Summary:
    """A delegation's summary made of what the child published."""
    return Summary(published.description, published.keywords, serial=published.serial,
                   terms=published.terms, tools=published.tools, vectors=published.vectors,
                   facets=published.facets)


@dataclass
class _Child:
    """What a parent follows of one child."""

    parent: str
    delegation: Delegation
    #: the child's serial the parent's copy stands for (None: unknown, fetch it)
    known: int | None
    wake: asyncio.Event
    task: asyncio.Task | None = None
    failing: bool = False
    #: the rebuilds the child may still cause now (a token bucket), and when it was last filled
    tokens: float = 0.0
    filled: float = 0.0
    #: what the child's summary said last, less its serial (a new serial saying the same: no rebuild)
    said: Summary | None = None


class SummaryKeeper:
    """Keeps the summaries of the children of the zones served here fresh, and tells parents when
    a zone served here changes (NOTIFY). One per :class:`~tooldns.serving.tree.Tree`.

    *stores*: the zones served here; *zones*: every zone this process knows of (origin -> its name
    servers), to find a changed zone's parent; *port*: the port of every name server of the tree;
    *sockets*: address -> the :class:`~tooldns.serving.server.DNSServer` there (NOTIFY leaves from
    the changed zone's own address); *refresh*: the most seconds between two polls of a child;
    *local*: origin -> the addresses this process serves it on, where they are not its name
    servers' (``--listen``): a child served here is asked there first, and a parent served here is
    told of a change directly when no NOTIFY can leave from the child's own addresses. *work*: the
    executor rebuilds run in (the tree's work thread; one of its own when None); *floor*: the
    fewest seconds between two polls of a child whatever its SOA refresh; *budget*: the rebuilds of
    its parent each child may cause an hour.
    """

    def __init__(self, stores, zones: dict[str, tuple[NameServer, ...]], port: int, sockets: dict,
                 refresh: float | None = None, timeout: float = QUERY_TIMEOUT,
                 local: dict[str, list[str]] | None = None, work=None, floor: float = SUMMARY_FLOOR,
                 budget: int = SUMMARY_BUDGET) -> None:
        if floor < 0 or budget < 1:
            raise ValueError(f"the summary floor must be 0 or more and the budget at least 1, not {floor}, {budget}")
        self.stores = {s.index.origin: s for s in stores}
        self.local = local or {}
        self.zones = zones
        self.port = port
        self.sockets = sockets
        self.refresh = refresh
        self.timeout = timeout
        self.floor, self.budget = floor, budget
        self.work = work
        self._own_work = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: parents being rebuilt (their learned summaries applied in the work thread)
        self._applying: dict[str, asyncio.Future] = {}
        self.children: dict[tuple[str, str], _Child] = {}
        self.stats = Counter({"notifies_sent": 0, "notifies_acked": 0, "notifies_received": 0,
                              "notifies_refused": 0, "summary_polls": 0, "summaries_learned": 0,
                              "summaries_refused": 0, "summary_refresh_failures": 0, "summary_rebuilds": 0,
                              "summaries_unchanged": 0, "summaries_over_budget": 0})
        self._pending: dict[str, dict[str, Summary]] = {}
        #: zone -> when a refused NOTIFY to it was last logged, and how many since went unlogged
        self._refusals: dict[str, tuple[float | None, int]] = {}
        self._notifying: dict[str, asyncio.Task] = {}
        self._running = False
        self._slots = asyncio.Semaphore(MAX_OUTSTANDING)

    # -- life --
    async def start(self) -> None:
        self._running = True
        self._loop = asyncio.get_running_loop()
        if self.work is None:
            from concurrent.futures import ThreadPoolExecutor

            self.work = self._own_work = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tooldns-rebuild")
        for origin, store in self.stores.items():
            store.listeners.append(partial(self._changed_soon, origin))
            self._follow(origin)

    def _changed_soon(self, origin: str) -> None:
        """A store's listener: it changed, in whatever thread (the work thread rebuilds and reloads);
        heard on the event loop."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._changed, origin)

    def add(self, store) -> None:
        """A zone served from now on (a zone file added while running): follow its children, and
        tell its parent, which may have been asking for it in vain."""
        origin = store.index.origin
        self.stores[origin] = store
        store.listeners.append(partial(self._changed_soon, origin))
        self._changed(origin)

    async def stop(self) -> None:
        self._running = False
        tasks = [c.task for c in self.children.values() if c.task is not None] + list(self._notifying.values())
        tasks += list(self._applying.values())
        for child in self.children.values():
            child.wake.set()  # a watch whose cancellation a finishing wait swallowed ends on its own
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.children.clear()
        self._notifying.clear()
        self._applying.clear()
        if self._own_work is not None:
            self._own_work.shutdown(wait=False)
            self._own_work = None

    def counters(self) -> dict[str, int]:
        return dict(self.stats)

    # -- the parent's side --
    def _follow(self, origin: str) -> None:
        """Follow the children of zone *origin* as its zone file has them now (new ones start,
        removed ones stop, pinned ones are left alone)."""
        zone = self.stores[origin].file_zone
        wanted = {c.name: c for c in zone.children if not c.summary.pinned}
        for key in [k for k in self.children if k[0] == origin and k[1] not in wanted]:
            gone = self.children.pop(key)
            gone.wake.set()
            if gone.task is not None:
                gone.task.cancel()
        for name, delegation in wanted.items():
            held = self.children.get((origin, name))
            if held is not None and held.delegation.nameservers == delegation.nameservers:
                held.delegation = delegation
                continue
            if held is not None and held.task is not None:
                held.task.cancel()
                held.wake.set()
            learned = self.stores[origin].learned.get(name)
            known = learned.serial if learned is not None else delegation.summary.serial
            child = _Child(origin, delegation, known, asyncio.Event(), tokens=float(self._burst()),
                           filled=time.monotonic())
            child.task = asyncio.create_task(self._watch(child), name=f"summary {name}")
            self.children[(origin, name)] = child

    def notified(self, parent: str, child: str, address: str) -> int:
        """A NOTIFY for *child* reached zone *parent* from *address*: the rcode to answer with
        (NOERROR, and the child is checked at once; REFUSED from an address the delegation does
        not name; NOTAUTH for a name that is not a child of *parent*)."""
        self.stats["notifies_received"] += 1
        store = self.stores.get(parent)
        delegation = next((c for c in store.file_zone.children if c.name == child), None) if store else None
        if delegation is None:
            self.stats["notifies_refused"] += 1
            return dns.rcode.NOTAUTH
        if address not in {ns.address for ns in delegation.nameservers}:
            self.stats["notifies_refused"] += 1
            self._say_refused(parent, child, address)
            return dns.rcode.REFUSED
        held = self.children.get((parent, child))
        if held is not None:
            held.wake.set()
        return dns.rcode.NOERROR

    def _say_refused(self, parent: str, child: str, address: str) -> None:
        """Log a refused NOTIFY to zone *parent*: at most one line every :data:`REFUSED_LOG_INTERVAL`
        seconds per zone, the next saying how many went unlogged (a NOTIFY is one datagram from any
        source address; every one is counted in ``notifies_refused``)."""
        now = time.monotonic()
        last, unsaid = self._refusals.get(parent, (None, 0))
        if last is not None and now - last < REFUSED_LOG_INTERVAL:
            self._refusals[parent] = (last, unsaid + 1)
            return
        self._refusals[parent] = (now, 0)
        more = f" ({unsaid} more refused since the last such line)" if unsaid else ""
        log.warning("%s: NOTIFY for %s from %s refused: not one of its name servers%s", parent, child, address, more)

    async def _watch(self, child: _Child) -> None:
        """Poll the child's SOA at its refresh interval (or at once when woken by a NOTIFY); fetch
        and learn its summary whenever its serial is not the one known."""
        await asyncio.sleep(random.uniform(0, 0.05))  # thousands of children: not all at once
        while self._running and self.children.get((child.parent, child.delegation.name)) is child:
            checked = time.monotonic()
            wait = await self._check(child)
            if not self._running:
                return
            child.wake.clear()
            try:  # asyncio.timeout, not wait_for: Python 3.11's wait_for could swallow a cancel
                async with asyncio.timeout(wait):
                    await child.wake.wait()
            except TimeoutError:
                pass
            # woken by a NOTIFY: checked again, but not more often than every NOTIFY_GAP seconds
            await asyncio.sleep(max(0.0, checked + min(NOTIFY_GAP, wait) - time.monotonic()))

    async def _check(self, child: _Child) -> float:
        """One poll of *child*; the seconds until the next."""
        name = child.delegation.name
        self.stats["summary_polls"] += 1
        try:
            serial, refresh = await self._soa(child.delegation)
            if serial != child.known:
                refill = self._refill(child)
                if refill:  # over its budget: fetched when it has one rebuild again
                    self.stats["summaries_over_budget"] += 1
                    return refill
                published = await self._fetch(child.delegation)
                child.known = published.serial
                summary = learned_summary(published)
                said = replace(summary, serial=None)
                if said == child.said:  # a new serial saying the same: no rebuild
                    self.stats["summaries_unchanged"] += 1
                else:
                    child.said = said
                    child.tokens -= 1
                    self._learn(child.parent, name, summary)
        except SummaryError as exc:
            # logged before counted: whoever sees the count sees the reason already written
            log.warning("%s: summary of %s refused (%s); keeping the last good one", child.parent, name, exc)
            self.stats["summaries_refused"] += 1
            return self._cap(RETRY)
        except Exception as exc:  # unreachable, refused, malformed replies: keep the last good copy
            if not child.failing:
                log.warning("%s: cannot refresh the summary of %s (%s); keeping the last good one",
                            child.parent, name, exc or type(exc).__name__)
            self.stats["summary_refresh_failures"] += 1
            child.failing = True
            return self._cap(RETRY)
        if child.failing:
            log.info("%s: %s answers again", child.parent, name)
        child.failing = False
        return self._cap(refresh)

    def _refill(self, child: _Child) -> float:
        """Fill *child*'s budget for the time gone by; 0 when it may cause a rebuild now, else the
        seconds until it may."""
        now = time.monotonic()
        rate = self.budget / 3600.0
        child.tokens = min(float(self._burst()), child.tokens + (now - child.filled) * rate)
        child.filled = now
        return 0.0 if child.tokens >= 1 else (1 - child.tokens) / rate

    def _burst(self) -> int:
        return min(self.budget, SUMMARY_BURST)

    def _cap(self, seconds: float) -> float:
        """Seconds until the next poll: what the child asks (its SOA refresh, or RETRY), no fewer than
        the floor, no more than the operator's ``--summary-refresh`` (which may go below the floor)."""
        seconds = max(seconds, self.floor)
        return max(0.1, min(seconds, self.refresh) if self.refresh is not None else seconds)

    def _servers(self, delegation: Delegation) -> list[str]:
        glue = [ns.address for ns in delegation.nameservers]
        return [a for a in self.local.get(delegation.name, ()) if a not in glue] + glue

    async def _ask(self, delegation: Delegation, qname: str, rdtype, tcp: bool,
                   dnssec: bool = False) -> dns.message.Message:
        """An authoritative answer to (*qname*, *rdtype*) from the first of the delegation's name
        servers that gives one (with *dnssec*, asked with the DO bit)."""
        query = dns.message.make_query(qname, rdtype, want_dnssec=dnssec)
        query.flags &= ~dns.flags.RD
        problems = []
        for address in self._servers(delegation):
            try:
                send = dns.asyncquery.tcp if tcp else dns.asyncquery.udp
                async with self._slots:
                    reply = await send(query, address, timeout=self.timeout, port=self.port)
            except (OSError, dns.exception.DNSException, EOFError) as exc:
                problems.append(f"{address}: {exc or type(exc).__name__}")
                continue
            if reply.rcode() != dns.rcode.NOERROR or not reply.flags & dns.flags.AA:
                problems.append(f"{address}: {dns.rcode.to_text(reply.rcode())}"
                                f"{'' if reply.flags & dns.flags.AA else ', not authoritative'}")
                continue
            return reply
        raise ConnectionError("; ".join(problems) or "no name servers")

    async def _soa(self, delegation: Delegation) -> tuple[int, float]:
        """The child's serial and refresh interval, from the first of its name servers that answers."""
        reply = await self._ask(delegation, delegation.name, dns.rdatatype.SOA, tcp=False)
        rrset = reply.get_rrset(reply.answer, dns.name.from_text(delegation.name), dns.rdataclass.IN,
                                dns.rdatatype.SOA)
        if rrset is None or len(rrset) != 1:
            raise ConnectionError(f"no SOA record for {delegation.name}")
        soa = rrset[0]
        return soa.serial, float(soa.refresh)

    async def _fetch(self, delegation: Delegation) -> PublishedSummary:
        """The child's published summary; from a child the parent holds a DS for, only signed by a
        key that DS names (its DNSKEY RRset asked of the same name servers; SummaryError otherwise)."""
        owner = summary_name(delegation.name)
        if not delegation.ds:
            reply = await self._ask(delegation, owner, dns.rdatatype.TXT, tcp=True)
            rrset = reply.get_rrset(reply.answer, dns.name.from_text(owner), dns.rdataclass.IN, dns.rdatatype.TXT)
        else:
            reply, keys = await asyncio.gather(
                self._ask(delegation, owner, dns.rdatatype.TXT, tcp=True, dnssec=True),
                self._ask(delegation, delegation.name, dns.rdatatype.DNSKEY, tcp=True, dnssec=True))
            try:
                rrset = verify_rrset(reply, owner, dns.rdatatype.TXT,
                                     trusted_keys(delegation.name, delegation.ds, keys))
            except DNSSECError as exc:
                raise SummaryError(f"not signed by the key of its DS: {exc}") from None
        if rrset is None or len(rrset) != 1:
            raise SummaryError(f"{owner} must hold exactly one TXT record")
        return decode_summary(list(rrset[0].strings), delegation.name)

    def _learn(self, parent: str, child: str, summary: Summary) -> None:
        """Apply *summary* to *parent* soon, with whatever else arrives meanwhile (one rebuild; those
        arriving during a rebuild, in the next)."""
        pending = self._pending.setdefault(parent, {})
        first = not pending
        pending[child] = summary
        if first and parent not in self._applying:
            asyncio.get_running_loop().call_later(BATCH_DELAY, self._apply_soon, parent)

    def _apply_soon(self, parent: str) -> None:
        if self._running and parent not in self._applying and self._pending.get(parent):
            task = asyncio.ensure_future(self._apply(parent))
            self._applying[parent] = task

    async def _apply(self, parent: str) -> None:
        """Rebuild *parent* with the summaries learned of its children, in the work thread."""
        try:
            summaries = self._pending.pop(parent, {})
            store = self.stores.get(parent)
            if not summaries or store is None or not self._running:
                return
            try:
                changed = await asyncio.get_running_loop().run_in_executor(self.work, self._rebuild, store, summaries)
            except Exception:
                log.exception("%s: cannot apply learned summaries of %s", parent, ", ".join(sorted(summaries)))
                return
            if changed:
                log.info("%s: learned the summaries of %s (now serial %d)", parent, ", ".join(sorted(summaries)),
                         store.serial)
        finally:
            self._applying.pop(parent, None)
            if self._pending.get(parent):  # learned while rebuilding: the next rebuild
                asyncio.get_running_loop().call_later(BATCH_DELAY, self._apply_soon, parent)

    def _rebuild(self, store, summaries: dict[str, Summary]) -> bool:
        """In the work thread: *store* learns *summaries*; counted before what it serves changes, so
        that whoever sees the new serial sees them counted."""
        self.stats["summaries_learned"] += len(summaries)
        self.stats["summary_rebuilds"] += 1
        changed = store.learn(summaries)
        if not changed:
            self.stats["summary_rebuilds"] -= 1
        return changed

    # -- the child's side --
    def _changed(self, origin: str) -> None:
        """Zone *origin* serves something new (a reload, or a learned summary): follow its children
        as its file now has them, and NOTIFY its parent."""
        if not self._running:
            return
        self._follow(origin)
        parent = parent_zone(origin, self.zones)
        servers = self.zones.get(parent) if parent else None
        if not servers:
            return
        here = self.children.get((parent, origin))
        if here is not None and self._sender(origin) is None:  # served here, but not on its own addresses
            here.wake.set()
            return
        old = self._notifying.pop(origin, None)
        if old is not None:
            old.cancel()
        self._notifying[origin] = asyncio.create_task(self._notify(origin, servers), name=f"notify {origin}")

    def _sender(self, origin: str):
        """The server of one of *origin*'s own addresses (NOTIFY leaves from there)."""
        for ns in self.stores[origin].index.zone.nameservers:
            server = self.sockets.get(ns.address)
            if server is not None:
                return server
        return None

    async def _notify(self, origin: str, servers: Iterable[NameServer]) -> None:
        server = self._sender(origin)
        if server is None:
            return
        targets = [(ns.address, self.port) for ns in servers]
        for attempt in range(NOTIFY_TRIES):
            message = dns.message.make_query(origin, dns.rdatatype.SOA)
            message.flags = dns.flags.AA  # the opcode lives in the flags: set it after them
            message.set_opcode(dns.opcode.NOTIFY)
            wire = message.to_wire()
            acked = server.expect_reply(wire, targets)  # only from them, to this question
            for target in targets:
                server.send(wire, target)
                self.stats["notifies_sent"] += 1
            try:
                async with asyncio.timeout(2.0 ** attempt):
                    await acked
            except TimeoutError:
                continue
            finally:
                server.forget_reply(message.id)
            self.stats["notifies_acked"] += 1
            return
        log.info("%s: NOTIFY to %s not acknowledged; the parent will see the change when it polls",
                 origin, ", ".join(a for a, _ in targets))


def parent_zone(origin: str, zones: Iterable[str]) -> str | None:
    """The closest enclosing zone of *origin* among *zones* (its parent in the tree), if any."""
    known = set(zones)
    name = origin
    while name != ".":
        name = names.parent(name)
        if name in known:
            return name
    return None
