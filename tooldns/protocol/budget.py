"""A budget that caches of one kind share across a process: once it is spent, all of them are emptied at once.

Hot paths keep what they work out per zone in plain dicts and arrays, which cost nothing to read:
a word's posting lists (:mod:`tooldns.scoring.bm25`), a term's weights as a dense row, the pieces of
packed names (:mod:`tooldns.serving.fast.pack`). What every zone of a process keeps of one kind is bounded
by one :class:`Budget`: each store joins it, counts what it keeps, and when the budget is spent
every store is emptied, to fill again with what queries then need. Nothing is paid on a read, as
an LRU would (:class:`~tooldns.protocol.ttlcache.TTLCache`, with its lock and clock, is for replies
worth that).

    >>> budget = Budget(2)
    >>> a, b = budget.join(Store()), budget.join(Store())
    >>> a["x"] = 1; budget.spend()
    >>> b["y"] = 2; budget.spend()
    >>> budget.spend(); a["z"] = 3  # spent already: every store is emptied first
    >>> dict(a), dict(b), budget.spent
    ({'z': 3}, {}, 1)
"""

from __future__ import annotations

import threading
import weakref
from typing import Protocol, TypeVar


class Clearable(Protocol):
    def clear(self) -> None: ...


S = TypeVar("S", bound=Clearable)


class Store(dict):
    """A dict a :class:`Budget` can hold (by a weak reference, so by identity, whatever it holds)."""

    __slots__ = ("__weakref__",)
    __hash__ = object.__hash__
    __eq__ = object.__eq__


class Budget:
    """At most *limit* units (entries, bytes: the stores' choice) kept by all the stores that join it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        #: units counted since the stores were last emptied
        self.spent = 0
        self._stores: "weakref.WeakSet[Clearable]" = weakref.WeakSet()
        # zones join from the thread that loads them and spend from those that rank (a pool's, for
        # scorers that may block); a store's clear() must not spend from this budget
        self._lock = threading.Lock()

    def join(self, store: S) -> S:
        """Bound *store* (anything with ``clear()``, weakly referenced, hashed by identity); returns it."""
        with self._lock:
            self._stores.add(store)
        return store

    def spend(self, units: int = 1) -> None:
        """Count *units* about to be kept (a miss, not a read: what this costs is paid once per
        entry); when the budget is spent already, empty every store first."""
        if self.spent >= self.limit:
            with self._lock:  # one thread empties the stores; the others find them emptied
                if self.spent >= self.limit:
                    for store in list(self._stores):
                        store.clear()
                    self.spent = 0
        # no lock for the count (a miss on a hot path: the lock cost more than the rest): two threads
        # counting at once may count one unit once, which lets the stores keep a unit more before emptying
        self.spent += units
