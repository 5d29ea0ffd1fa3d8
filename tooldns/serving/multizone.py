"""Several zones on one server: each query goes to the zone it is about, whose resolver answers it.

Authoritative servers host many zones on one address; so does a :class:`DNSServer` given a
:class:`MultiZoneResolver` over the :class:`ZoneResolver` of each zone. The zone that answers is the
deepest zone served here that contains the name the query is *about*:

* a cursor name ``_svc._proto._<zone>.`` is about ``<zone>``, the zone whose children it searches,
  not about the zone its labels lie in (``_mcp._tcp._weather.tools.`` lies in ``tools.``). So
  ``weather.tools.`` answers it when served here (its search: ranked children or tools) and
  ``tools.`` otherwise (a plain referral to ``weather.tools.``), as each zone's own server would;
* every other name (expanded names, tool names, the apex, name-server names) is about itself.

Each zone therefore answers what a server of its own answers (``tests/test_multizone.py`` replays
the recorded golden replies through one socket serving every shipped zone), with one difference,
as on any server hosting a zone and its child: a name below a child hosted here is answered by the
child, not referred to it. A name that no zone here contains goes to the topmost zone, which
refuses it. The group itself answers
``stats.tooldns.`` (class CH: its zones' counters summed, ``zones=N``) and messages without exactly
one question. The choice costs one dictionary look-up per label of the name, whatever the number
of zones.

What the server reads of the group (:attr:`MultiZoneResolver.serving`, made anew whenever a zone
reloads): replies are cached only when every zone's are cacheable, and no longer than the
shortest-lived signatures; answered off the event loop when any zone's scorer may block; and rate
limited with the topmost zone's ``rate_limit`` setting (one account table per server, as BIND
keeps per server).

    >>> resolver = MultiZoneResolver([ZoneResolver(store) for store in stores])
    >>> server = DNSServer(resolver, "127.0.0.1", 5300)
"""

from __future__ import annotations

import logging

from dnslib import CLASS, OPCODE, QTYPE, DNSRecord

from ..exceptions import NameError_
from ..protocol import names
from .resolver import STATS_NAME, ZoneResolver
from .server import NotReady, Served, Serving

log = logging.getLogger(__name__)


def _depth(origin: str) -> int:
    return len(names.labels(origin))


def question_name(data: bytes) -> str | None:
    """The question name of query bytes *data*, lower-case and absolute, when it is written plainly
    (no compression pointer, ASCII labels without dots); None otherwise."""
    labels, pos, end = [], 12, len(data)
    while pos < end:
        length = data[pos]
        if length == 0:
            return ".".join(labels) + "." if labels else "."
        label = data[pos + 1:pos + 1 + length]
        if length > 63 or len(label) < length or b"." in label or not label.isascii():
            return None
        labels.append(label.decode("ascii").lower())
        pos += length + 1
    return None


class _Own(ZoneResolver):
    """What the group answers itself: ``stats.tooldns.`` (every zone's counters summed) and messages
    without exactly one question (FORMERR, NOTIMP ... as any zone's resolver would answer them)."""

    def __init__(self, group: "MultiZoneResolver") -> None:
        super().__init__(group.top.source, group.top.intent_code)  # its stats reply names the topmost zone
        self.group = group

    def counters(self) -> dict[str, int]:
        return self.group.counters()


class MultiZoneResolver(Served):
    """Answers queries for several zones, each through its own :class:`ZoneResolver` (and counters).

    ``members`` maps each origin to its zone's resolver; ``top`` is the topmost zone's. With *lazy*
    (:class:`~.lazy.LazyZones`), the zones of its directory are members too, each loaded when a
    query is first about it.
    """

    def __init__(self, resolvers: list[ZoneResolver], lazy=None) -> None:
        if not resolvers:
            raise ValueError("a MultiZoneResolver needs at least one zone")
        self.members: dict[str, ZoneResolver] = {}
        for resolver in resolvers:
            origin = resolver.source.index.origin
            if origin in self.members:
                raise ValueError(f"zone {origin} is given twice")
            self.members[origin] = resolver
        self.top = min(resolvers, key=lambda r: (_depth(r.source.index.origin), r.source.index.origin))
        self.lazy = lazy
        self._serving = self._made()
        self._own = _Own(self)
        for resolver in resolvers:
            self._hear(resolver, True)
        if lazy is not None:
            lazy.listeners.append(self._loaded)

    def _hear(self, resolver: ZoneResolver, on: bool) -> None:
        """Hear of *resolver*'s zone reloading (*on*), or stop."""
        listeners = resolver.source.listeners
        if on:
            listeners.append(self.renew)
        elif self.renew in listeners:
            listeners.remove(self.renew)

    def _loaded(self, resolver: ZoneResolver, loaded: bool, changed: bool = False) -> None:
        """A lazy zone was loaded or dropped: hear of its reloads, or stop. A new :attr:`serving` (which
        empties the server's answer cache) only when the group's answers may have changed: a zone loaded
        from a file that changed since it was dropped, or one that the group's flags must count (its
        replies not cacheable, a scorer that may block, a signer). Answers cached for a zone stay
        right while it is dropped and loaded again from the same file: a tree of many zones loads
        them all the time and would otherwise never keep a cached answer."""
        self._hear(resolver, loaded)
        index = resolver.source.index
        if changed or (loaded and (not index.cacheable or index.blocking or index.signer is not None)):
            self.renew()

    def _all(self):
        """Every member's resolver, the lazy zones loaded now among them."""
        if self.lazy is None:
            return list(self.members.values())
        return [*self.members.values(), *list(self.lazy.loaded.values())]

    @property
    def serving(self) -> Serving:
        """What the server reads of the group: cacheable when every zone is, blocking when any zone
        may, the topmost zone's rate limit, the shortest refresh of the zones' signatures."""
        return self._serving

    def _made(self) -> Serving:
        indexes = [r.source.index for r in self._all()]
        refresh = [ix.signer.refresh for ix in indexes if ix.signer is not None]
        return Serving(all(ix.cacheable for ix in indexes), any(ix.blocking for ix in indexes),
                       self.top.source.index.zone.settings.rate_limit, min(refresh) if refresh else None)

    def renew(self) -> None:
        """A new :attr:`serving`, so that the server's answer cache starts afresh: a zone reloaded, or
        a lazy zone's file changed while it was not loaded."""
        self._serving = self._made()

    def close(self) -> None:
        """Stop hearing of reloads."""
        for resolver in self._all():
            self._hear(resolver, False)
        if self.lazy is not None and self._loaded in self.lazy.listeners:
            self.lazy.listeners.remove(self._loaded)

    def member_for(self, name: str) -> ZoneResolver:
        """The resolver of the zone that answers for *name* (lower-case, absolute): the deepest zone
        here that contains the zone a cursor name searches, or the name itself; else the topmost.
        :class:`~.server.NotReady` when that zone is a lazy one not loaded yet (its load is queued)."""
        about = _searched(name)
        lazy = self.lazy
        while True:
            member = self.members.get(about)
            if member is None and lazy is not None:
                member = lazy.lookup(about)  # NotReady while it loads
            if member is not None:
                return member
            if about == ".":
                return self.top
            about = names.parent(about)

    def zone_for(self, name: str) -> str:
        """The origin of the zone :meth:`member_for` picks for *name*, found without loading a zone or
        opening a map: what the query log and the metrics name a query by."""
        about = _searched(name)
        while True:
            if about in self.members or (self.lazy is not None and about in self.lazy.paths):
                return about
            if about == ".":
                return self.top.source.index.origin
            about = names.parent(about)

    def _member(self, request: DNSRecord) -> ZoneResolver | None:
        """The zone resolver for *request*; None when the group answers itself."""
        if len(request.questions) != 1:
            return None
        q = request.q
        if q.qclass == CLASS.CH and q.qtype == QTYPE.TXT and str(q.qname).lower() == STATS_NAME:
            return None
        name, _ = names.wire_name(q.qname.label)  # a stand-in where an odd name lies: its zone denies it
        if request.header.opcode == OPCODE.NOTIFY:  # about a child: its parent zone hears it
            return next((m for m in self._all()
                         if any(c.name == name for c in m.source.index.zone.children)), self.top)
        member = self.member_for(name)
        if q.qtype == QTYPE.DS and member is not self.top and isinstance(member, ZoneResolver) \
                and member.source.index.origin == name:
            return self.member_for(names.parent(name))  # a DS lives at the parent's side of the cut
        return member

    def resolve(self, request: DNSRecord, handler) -> DNSRecord:
        try:
            member = self._member(request)
        except NotReady:  # the server answers once the zone is loaded
            raise
        except Exception:  # never let the choice cost the client its reply
            log.exception("choosing the zone for a query")
            member = self.top
        return (member or self._own).resolve(request, handler)

    def fast_answer(self, data: bytes, udp: bool) -> bytes | None:
        """The zone's fast path (:meth:`ZoneResolver.fast_answer`) for query bytes *data*, None when
        the name cannot be read plainly or the zone declines: :meth:`resolve` then answers."""
        name = question_name(data)
        if name is None:
            return None
        return self.member_for(name).fast_answer(data, udp)

    def counters(self) -> dict[str, int]:
        """Every zone's counters summed, plus the queries the group answered itself and ``zones``."""
        out = dict(self._own.stats)
        for resolver in self._all():
            for key, value in resolver.counters().items():
                out[key] = out.get(key, 0) + value
        if self.lazy is not None:  # zones dropped since: what they counted stays counted
            for key, value in [*dict(self.lazy.retired).items(), *dict(self.lazy.mapped_stats).items()]:
                out[key] = out.get(key, 0) + value
        out["zones"] = len(self.members) + (len(self.lazy.paths) if self.lazy is not None else 0)
        return out


def _searched(name: str) -> str:
    """The zone cursor name *name* searches, or *name* itself when it is no unexpanded cursor: where
    :meth:`MultiZoneResolver.member_for` starts looking."""
    try:
        cur = names.parse_cursor(name)
    except NameError_:
        return name
    return cur.zone if cur is not None and not cur.expanded else name
