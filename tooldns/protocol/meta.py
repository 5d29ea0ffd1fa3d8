"""The meta EDNS0 option: what a server says about an intent-ranked reply; a pure codec.

Replies to an intent query carry this response-only option::

    version u8 (0) | flags u8 | cache_ttl u32 | scorer name (ASCII, rest of the data)

flags: bit 0 FALLBACK (the zone's configured scorer failed and BM25 answered), bit 1 PRUNED
(fewer than K results were returned because the rest scored far below the best), bit 2
VECTOR_IGNORED (the query's vector, :mod:`tooldns.protocol.vector`, was of a model this zone does
not know, or the zone scores no vectors: the zone ranked without it), bit 3 TRIMMED (fewer than K
tools were returned because no more fit the client's UDP payload; the query asked for that with
the fit option, :mod:`tooldns.protocol.fit`), bit 4 EMBEDDED (the query carried no vector the zone
could use, and the zone embedded the intent text itself and ranked with that vector: a client
without the model still gets the hybrid ranking).
cache_ttl is how long a cache keyed on (name, type, intent, K) may keep the answer; the records
themselves go out with TTL 0 so that no cache unaware of the intent keeps them.

    >>> decode_meta(encode_meta(FLAG_PRUNED, 30, "bm25"))
    Meta(flags=2, cache_ttl=30, scorer='bm25', version=0)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..exceptions import IntentError

#: EDNS0 option code of the response-only meta option.
META_OPTION_CODE = 65302
VERSION = 0

FLAG_FALLBACK = 0x01
FLAG_PRUNED = 0x02
#: The query's vector was of a model this zone does not know, or the zone scores no vectors:
#: the zone ranked without it.
FLAG_VECTOR_IGNORED = 0x04
#: Fewer than K tools came back because no more fit the client's UDP payload (the fit option).
FLAG_TRIMMED = 0x08
#: The zone embedded the intent text itself (the query carried no usable vector) and ranked with it.
FLAG_EMBEDDED = 0x10

_META = struct.Struct("!BBI")


@dataclass(frozen=True)
class Meta:
    """A decoded meta option from a reply."""

    flags: int = 0
    cache_ttl: int = 0
    scorer: str = ""
    version: int = VERSION

    @property
    def fallback(self) -> bool:
        return bool(self.flags & FLAG_FALLBACK)

    @property
    def pruned(self) -> bool:
        return bool(self.flags & FLAG_PRUNED)

    @property
    def vector_ignored(self) -> bool:
        return bool(self.flags & FLAG_VECTOR_IGNORED)

    @property
    def trimmed(self) -> bool:
        return bool(self.flags & FLAG_TRIMMED)

    @property
    def embedded(self) -> bool:
        return bool(self.flags & FLAG_EMBEDDED)


def encode_meta(flags: int = 0, cache_ttl: int = 0, scorer: str = "") -> bytes:
    """Return the data of a reply's meta option."""
    return _META.pack(VERSION, flags & 0xFF, max(0, int(cache_ttl))) + scorer.encode("ascii", "replace")


def decode_meta(data: bytes) -> Meta:
    """Parse a meta option's data; raise :class:`IntentError` if it is malformed."""
    if len(data) < _META.size:
        raise IntentError(f"meta option is {len(data)} bytes; the header alone is {_META.size}")
    version, flags, ttl = _META.unpack_from(data)
    if version != VERSION:
        raise IntentError(f"unsupported meta option version {version}")
    return Meta(flags=flags, cache_ttl=ttl, scorer=data[_META.size:].decode("ascii", "replace"), version=version)
