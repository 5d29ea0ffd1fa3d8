"""The intent EDNS0 option: a pure codec, no I/O.

An agent's natural-language intent travels in one EDNS0 option (RFC 6891) of the query's OPT
record. The option's data is::

    version u8 (0) | length u16 (byte length of payload, network order) | K u8 (1..255) | payload

where payload is the UTF-8 intent text. Decoding is strict: anything that disagrees with that
layout raises :class:`IntentError` with a message a client author can act on; servers answer it
with FORMERR and an Extended DNS Error (RFC 8914) carrying the same text.

Replies to an intent query carry a second, response-only option, the *meta* option::

    version u8 (0) | flags u8 | cache_ttl u32 | scorer name (ASCII, rest of the data)

flags: bit 0 FALLBACK (the zone's configured scorer failed and BM25 answered), bit 1 PRUNED
(fewer than K results were returned because the rest scored far below the best).
cache_ttl is how long a cache keyed on (name, type, intent, K) may keep the answer; the records
themselves go out with TTL 0 so that no cache unaware of the intent keeps them.

Example::

    >>> encode_intent("weather in Hong Kong", 3).hex()
    '000014037765617468657220696e20486f6e67204b6f6e67'
    >>> decode_intent(encode_intent("天气", 2))
    Intent(text='天气', k=2, version=0)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .exceptions import IntentError

#: EDNS0 option code of the intent option (local/experimental range 65001-65534, RFC 6891).
#: 65430 is avoided: another agent-discovery project experiments with it.
INTENT_OPTION_CODE = 65301
#: EDNS0 option code of the response-only meta option.
META_OPTION_CODE = 65302
#: Extended DNS Error option code (RFC 8914) and the info code used for intent errors (0, Other).
EDE_OPTION_CODE = 15
EDE_OTHER = 0

VERSION = 0
#: Longest accepted payload in bytes: a page of text (agents pass whole task descriptions and
#: dialogue turns). A query whose intent does not fit one 1232-byte UDP datagram goes over TCP.
MAX_INTENT_BYTES = 4096

FLAG_FALLBACK = 0x01
FLAG_PRUNED = 0x02

_HEADER = struct.Struct("!BHB")
_META = struct.Struct("!BBI")
# C0 controls other than tab, newline and carriage return, and DEL, are refused in intents.
_FORBIDDEN = {c for c in range(0x20) if c not in (0x09, 0x0A, 0x0D)} | {0x7F}


@dataclass(frozen=True)
class Intent:
    """A decoded intent: the text and how many results (K) the client wants per step."""

    text: str
    k: int
    version: int = VERSION


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


def _check_text(text: str) -> bytes:
    if not isinstance(text, str):
        raise IntentError(f"intent must be text, got {type(text).__name__}")
    if not text.strip():
        raise IntentError("intent is empty")
    bad = next((ch for ch in text if ord(ch) in _FORBIDDEN), None)
    if bad is not None:
        raise IntentError(f"intent contains control character U+{ord(bad):04X}")
    payload = text.encode("utf-8")
    if len(payload) > MAX_INTENT_BYTES:
        raise IntentError(f"intent is {len(payload)} bytes; at most {MAX_INTENT_BYTES} are allowed")
    return payload


def encode_intent(text: str, k: int, version: int = VERSION) -> bytes:
    """Return the option data for *text* asking for *k* results per step."""
    if version != VERSION:
        raise IntentError(f"unsupported intent option version {version}; this codec speaks {VERSION}")
    if not isinstance(k, int) or not 1 <= k <= 255:
        raise IntentError(f"K must be an integer from 1 to 255, got {k!r}")
    payload = _check_text(text)
    return _HEADER.pack(version, len(payload), k) + payload


def decode_intent(data: bytes) -> Intent:
    """Parse option data strictly; raise :class:`IntentError` saying what is wrong."""
    if len(data) < _HEADER.size:
        raise IntentError(f"intent option is {len(data)} bytes; the header alone is {_HEADER.size}")
    version, length, k = _HEADER.unpack_from(data)
    if version != VERSION:
        raise IntentError(f"unsupported intent option version {version}; this server speaks {VERSION}")
    payload = data[_HEADER.size:]
    if length != len(payload):
        raise IntentError(f"intent length field says {length} bytes but {len(payload)} follow")
    if k == 0:
        raise IntentError("K is 0; ask for at least 1 result")
    if length == 0:
        raise IntentError("intent is empty")
    if length > MAX_INTENT_BYTES:
        raise IntentError(f"intent is {length} bytes; at most {MAX_INTENT_BYTES} are allowed")
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise IntentError(f"intent is not valid UTF-8 (byte {exc.start})") from exc
    _check_text(text)
    return Intent(text=text, k=k, version=version)


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


def encode_ede(text: str, info_code: int = EDE_OTHER) -> bytes:
    """Return the data of an Extended DNS Error option (RFC 8914): info-code u16 | UTF-8 text."""
    return struct.pack("!H", info_code) + text.encode("utf-8")


def decode_ede(data: bytes) -> tuple[int, str]:
    """Parse an Extended DNS Error option's data into (info_code, text)."""
    if len(data) < 2:
        raise IntentError("EDE option shorter than its 2-byte info code")
    return struct.unpack_from("!H", data)[0], data[2:].decode("utf-8", "replace")
