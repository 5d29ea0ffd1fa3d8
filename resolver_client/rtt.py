"""Round-trip times of the servers a resolver meets, and when to send a datagram again.

Each server's smoothed round trip and its variance, updated from every reply to a query sent once
(Karn's rule: a reply to a datagram sent twice says nothing of either), as RFC 6298 keeps them for TCP
and BIND and Unbound for name servers. The retransmission timeout (RTO) they give, ``srtt + 4 x
rttvar`` within [:data:`MIN_RTO` (or the resolver's ``min_rto``), the resolver's timeout], is how
long the resolver waits before it sends the same datagram again, on the same socket, so that a
reply to either send is taken; each further send waits twice as long, until the query's whole
timeout is spent. On a network that loses a datagram now and then this costs about one RTO instead
of the whole timeout; on loopback, nothing.

A zone's servers are asked in its order, except that one that gave no reply in time (a timeout, or
another server answered its hedge first, :meth:`RttTable.missed`) goes after the others until it
answers again (:meth:`RttTable.ordered`).

Pure computation, no I/O and no clock of its own: the drivers (:mod:`.resolver`) pass the times.
"""

from __future__ import annotations

import threading

#: the least a server is waited for before a datagram goes again (seconds), as Unbound's
#: ``infra-cache-min-rtt``: a server's own work varies (an intent embedded, a zone loaded the first time,
#: a model asked) more than a short round trip, and a resend is work for it too. Where round trips are
#: a few milliseconds and losses matter more than that work, a resolver may be given less (``min_rto``)
MIN_RTO = 0.05
#: the wait before the first resend to a server never heard from while no server has been (seconds;
#: Unbound starts at 0.376); once some have, twice what they give together, up to this
FIRST_RTO = 0.4
#: sends of one datagram at most (the first and its resends)
MAX_SENDS = 4
#: servers remembered (the least recently heard from are forgotten first)
MAX_SERVERS = 4096


class RttTable:
    """Smoothed round trip and variance per server, in seconds; safe to share between threads."""

    ALPHA, BETA = 1 / 8, 1 / 4  # RFC 6298's gains

    def __init__(self, max_servers: int = MAX_SERVERS, min_rto: float = MIN_RTO) -> None:
        if not min_rto > 0:
            raise ValueError(f"the least retransmission timeout must be above 0 seconds, not {min_rto!r}")
        self.min_rto = min_rto  #: the least wait before a datagram goes again (seconds)
        self._rtt: dict[tuple[str, int], tuple[float, float]] = {}
        self._all: tuple[float, float] | None = None  # every server's replies in one estimate
        self._missed: dict[tuple[str, int], float] = {}  # servers that gave no reply in time: how long they made us wait
        self._max = max_servers
        self._lock = threading.Lock()

    def observe(self, server: tuple[str, int], seconds: float) -> None:
        """A reply from *server* *seconds* after the query's only send."""
        with self._lock:
            self._rtt[server] = self._update(self._rtt.pop(server, None), seconds)  # the most recent last
            self._missed.pop(server, None)  # it answers again
            self._all = self._update(self._all, seconds)
            if len(self._rtt) > self._max:
                del self._rtt[next(iter(self._rtt))]

    def _update(self, old: tuple[float, float] | None, seconds: float) -> tuple[float, float]:
        if old is None:
            return seconds, seconds / 2
        srtt, rttvar = old
        rttvar = (1 - self.BETA) * rttvar + self.BETA * abs(srtt - seconds)
        return (1 - self.ALPHA) * srtt + self.ALPHA * seconds, rttvar

    def missed(self, server: tuple[str, int], seconds: float) -> None:
        """*server* gave no reply in *seconds* (its query timed out, or another server of its zone
        answered first): :meth:`ordered` puts it after the zone's other servers until it answers
        again (its retransmission timeout is not changed: a zone with one server is waited for as
        before)."""
        with self._lock:
            self._missed[server] = max(self._missed.pop(server, 0.0), seconds)
            if len(self._missed) > self._max:
                del self._missed[next(iter(self._missed))]

    def ordered(self, servers: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """*servers* (one zone's) in the zone's order, those that missed after the others, the longer
        they made the resolver wait the later."""
        with self._lock:
            missed = {server: self._missed[server] for server in servers if server in self._missed}
        if not missed:
            return servers
        return sorted(servers, key=lambda server: missed.get(server, 0.0))

    def srtt(self, server: tuple[str, int]) -> float | None:
        """The smoothed round trip to *server*, or None before its first reply."""
        with self._lock:
            entry = self._rtt.get(server)
        return None if entry is None else entry[0]

    def rto(self, server: tuple[str, int], timeout: float) -> float:
        """Seconds to wait for *server* before sending again, at most *timeout* (the query's whole wait)."""
        with self._lock:
            entry, every = self._rtt.get(server), self._all
        if entry is not None:
            wait = entry[0] + 4 * entry[1]
        else:  # a tree's servers are about as far as each other: twice what the others take, to begin with
            wait = FIRST_RTO if every is None else min(FIRST_RTO, 2 * (every[0] + 4 * every[1]))
        return min(max(wait, self.min_rto), timeout)


def resend_times(first: float, rto: float, timeout: float, max_sends: int = MAX_SENDS) -> list[float]:
    """When to send a datagram first sent at *first* again: after *rto*, then twice as long each time,
    while the query's *timeout* lasts; at most *max_sends* sends in all."""
    out, wait, at = [], rto, first + rto
    while len(out) < max_sends - 1 and at < first + timeout:
        out.append(at)
        wait *= 2
        at += wait
    return out
