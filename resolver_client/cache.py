"""A reply cache keyed on (name, type, intent, K) that honours TTLs; it keeps parsed replies.

Intent-ranked records travel with TTL 0, so that no cache unaware of intents keeps them; the
server says in the reply's meta option how long an intent-aware cache like this one may keep
the answer (``cache_ttl``). Replies without that option live for their smallest record TTL.
Bounded: the oldest entries go first.

    >>> cache = ReplyCache(max_entries=1000)
    >>> cache.put(key, reply, ttl=30); cache.get(key)
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Callable


class ReplyCache:
    def __init__(self, max_entries: int = 4096, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries = max_entries
        self.clock = clock
        self._data: OrderedDict[tuple, tuple[float, object]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple):
        with self._lock:
            item = self._data.get(key)
            if item is None:
                return None
            expires, reply = item
            if self.clock() >= expires:
                del self._data[key]
                return None
            self._data.move_to_end(key)
            return reply

    def put(self, key: tuple, reply, ttl: float) -> None:
        if ttl <= 0 or self.max_entries <= 0:
            return
        with self._lock:
            self._data[key] = (self.clock() + ttl, reply)
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)
