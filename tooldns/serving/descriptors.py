"""The open-file budget of a serving process, checked against RLIMIT_NOFILE before anything is bound.

A server holds two sockets per address it serves (UDP and TCP) for as long as it runs, one more
per TCP client while connected, and the process a few of its own (standard streams, the event
loop, zone files being read). Before, a tree of 514 zones on 514 addresses needed 1,028 sockets
and, under the common limit of 1,024 open files, failed midway with "Too many open files".

:func:`ensure_descriptors` runs first: when the soft limit is below what the servers want, it
raises it to the hard limit (which an unprivileged process may do); when even the hard limit
cannot hold the sockets, it raises :class:`~tooldns.exceptions.ServeError` saying how many are
needed and what to do.

A lazy server keeps a descriptor open for each leaf map it answers from (:mod:`.mapped`):
:func:`room_for_maps` raises the soft limit for them too, as BIND raises it to the hard limit, and
gives them at most half of it.

    >>> budget = ensure_descriptors(addresses=25, max_tcp=256)   # soft limit 1024, hard 4096
    >>> budget.needed, budget.wanted, budget.limit
    (114, 370, 1024)
"""

from __future__ import annotations

import resource
import sys
from dataclasses import dataclass

from ..exceptions import ServeError

#: descriptors kept for the process itself: standard streams, the event loop, zone files, logging
RESERVE = 64


@dataclass(frozen=True)
class Budget:
    """Descriptors a process serving *addresses* addresses needs (its sockets and :data:`RESERVE`),
    wants (room for *max_tcp* TCP connections too) and may open (*limit*, the soft limit now)."""

    addresses: int
    max_tcp: int
    limit: int
    raised_from: int | None = None  # the soft limit before it was raised

    @property
    def sockets(self) -> int:
        return 2 * self.addresses

    @property
    def needed(self) -> int:
        return self.sockets + RESERVE

    @property
    def wanted(self) -> int:
        return self.needed + self.max_tcp

    def note(self) -> str | None:
        """A line for the operator, None when there is nothing to say."""
        if self.limit < self.wanted:
            return (f"note: {self.sockets} sockets for {self.addresses} addresses leave room for "
                    f"{self.limit - self.needed} TCP connections at once under the limit of {self.limit} open files "
                    f"(a server accepts up to {self.max_tcp}); raise the limit (ulimit -n) for more")
        if self.raised_from is not None:
            return f"raised the limit on open files from {self.raised_from} to {self.limit}"
        return None


def _advice(budget: Budget, hard: int) -> str:
    return (f"serving {budget.addresses} addresses needs {budget.needed} open files ({budget.sockets} sockets: a UDP "
            f"and a TCP one per address, plus {RESERVE} for the process) and {budget.wanted} with room for "
            f"{budget.max_tcp} TCP connections, but this process may open at most {hard} (ulimit -Hn). "
            f"Raise the limit (as root: ulimit -Hn {budget.wanted} before starting, LimitNOFILE={budget.wanted} in a "
            f"systemd unit, or nofile in /etc/security/limits.conf); or put zones on fewer addresses (zones whose name "
            f"servers share an address share one server and two sockets); or serve part of the tree in each of "
            f"several processes (tooldns serve --only ORIGINS --listen ADDRESS)")


def _finite(limit: int) -> int:
    return sys.maxsize if limit == resource.RLIM_INFINITY else limit


def ensure_descriptors(addresses: int, max_tcp: int) -> Budget:
    """Make room for serving *addresses* addresses, raising the soft limit when it is too low.

    Raises :class:`ServeError` when the hard limit cannot hold the sockets and :data:`RESERVE`.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    budget = Budget(addresses, max_tcp, _finite(soft))
    if budget.limit < budget.wanted:
        target = _finite(hard) if hard != resource.RLIM_INFINITY else budget.wanted
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            target = budget.limit
        budget = Budget(addresses, max_tcp, target, raised_from=soft if target != soft else None)
    if budget.limit < budget.needed:
        raise ServeError(_advice(budget, _finite(hard)))
    return budget


#: descriptors a lazy server keeps beyond its leaf maps (:func:`room_for_maps`), for its sockets and files
MAPS_RESERVE = 256


def room_for_maps(wanted: int) -> int:
    """How many leaf maps (a descriptor each) a lazy server may keep open, at most *wanted*: the soft
    limit raised toward the hard one to make room for them, and half of it, less :data:`MAPS_RESERVE`,
    given to them (the other half to sockets, TCP clients and files)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft, target = _finite(soft), min(_finite(hard), 2 * (wanted + MAPS_RESERVE))
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return max(0, min(wanted, soft // 2 - MAPS_RESERVE))
