"""A reply cache keyed on (name, type, intent, K) that honours TTLs; it keeps parsed replies.

Intent-ranked records travel with TTL 0, so that no cache unaware of intents keeps them; the
server says in the reply's meta option how long an intent-aware cache like this one may keep
the answer (``cache_ttl``). Replies without that option live for their smallest record TTL.
Bounded: the oldest entries go first.

    >>> cache = ReplyCache(max_entries=1000)
    >>> cache.put(key, reply, ttl=30); cache.get(key)
"""

from __future__ import annotations

from tooldns.protocol.ttlcache import TTLCache


class ReplyCache(TTLCache):
    """Replies keyed on (name, type, intent, K); see the module docstring for their lifetimes."""
