"""A bounded, thread-safe cache whose entries expire: the one both sides use.

The LLM scorer keeps model answers per (zone, intent, K) in it; the resolver library keeps
replies per (name, type, intent, K) (:class:`resolver_client.cache.ReplyCache`). Entries live
for the TTL given when they are put; the least recently used go first when it is full.

    >>> cache = TTLCache(max_entries=2)
    >>> cache.put("a", 1, ttl=30); cache.get("a")
    1
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Callable, Hashable


class TTLCache:
    def __init__(self, max_entries: int = 4096, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries = max_entries
        self.clock = clock
        self._data: OrderedDict[Hashable, tuple[float, object]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable):
        """The value under *key*, or None when absent or expired."""
        with self._lock:
            item = self._data.get(key)
            if item is None:
                return None
            expires, value = item
            if self.clock() >= expires:
                del self._data[key]
                return None
            self._data.move_to_end(key)
            return value

    def put(self, key: Hashable, value, ttl: float) -> None:
        """Keep *value* for *ttl* seconds (nothing is kept for ttl <= 0 or a cache of size 0)."""
        if ttl <= 0 or self.max_entries <= 0:
            return
        with self._lock:
            self._data[key] = (self.clock() + ttl, value)
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)
