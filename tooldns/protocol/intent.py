"""The intent EDNS0 option: a pure codec, no I/O.

An agent's natural-language intent travels in one EDNS0 option (RFC 6891) of the query's OPT
record. The option's data is::

    version u8 (0) | length u16 (byte length of payload, network order) | K u8 (1..255) | payload

where payload is the UTF-8 intent text. Decoding is strict: anything that disagrees with that
layout raises :class:`IntentError` with a message a client author can act on; servers answer it
with FORMERR and an Extended DNS Error (RFC 8914, :mod:`tooldns.protocol.ede`) carrying the same
text. Replies carry the response-only meta option (:mod:`tooldns.protocol.meta`).

Example::

    >>> encode_intent("weather in Hong Kong", 3).hex()
    '000014037765617468657220696e20486f6e67204b6f6e67'
    >>> decode_intent(encode_intent("天气", 2))
    Intent(text='天气', k=2, version=0)
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from ..exceptions import IntentError

#: EDNS0 option code of the intent option (local/experimental range 65001-65534, RFC 6891).
#: 65430 is avoided: another agent-discovery project experiments with it.
INTENT_OPTION_CODE = 65301

VERSION = 0
#: Longest accepted payload in bytes: a page of text (agents pass whole task descriptions and
#: dialogue turns). A query whose intent does not fit one 1232-byte UDP datagram goes over TCP.
MAX_INTENT_BYTES = 4096

_HEADER = struct.Struct("!BHB")
# C0 controls other than tab, newline and carriage return, and DEL, are refused in intents.
_FORBIDDEN = {c for c in range(0x20) if c not in (0x09, 0x0A, 0x0D)} | {0x7F}
_FORBIDDEN_RE = re.compile("[" + "".join(re.escape(chr(c)) for c in sorted(_FORBIDDEN)) + "]")
_FORBIDDEN_OCTETS = bytes(sorted(_FORBIDDEN))


@dataclass(frozen=True)
class Intent:
    """A decoded intent: the text and how many results (K) the client wants per step."""

    text: str
    k: int
    version: int = VERSION
    #: set by a server from the query's brief option (:mod:`.brief`), not part of this option: the
    #: ranked tool answers leave the descriptions out
    brief: bool = False
    #: set by a server from the query's fit option (:mod:`.fit`): a ranked tool answer too large for
    #: the client's UDP payload keeps the best tools that fit instead of being truncated
    fit: bool = False
    #: set by a server from the query's page option (:mod:`.page`): a ranked tool answer leaves out
    #: the zone's *skip* best tools and carries the K after them
    skip: int = 0


def _check_text(text: str) -> bytes:
    if not isinstance(text, str):
        raise IntentError(f"intent must be text, got {type(text).__name__}")
    if not text.strip():
        raise IntentError("intent is empty")
    bad = _FORBIDDEN_RE.search(text)  # one pass in C: a server checks every intent it is sent
    if bad is not None:
        raise IntentError(f"intent contains control character U+{ord(bad.group()):04X}")
    try:
        payload = text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: what `surrogateescape` makes of undecodable argv bytes
        bad = ord(text[exc.start])
        raise IntentError(f"intent is not valid UTF-8 text (U+{bad:04X} at position {exc.start})") from None
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
    # what _check_text checks, cheaper on the octets (a control character is one octet in UTF-8);
    # it says what is wrong when something is
    if text.isspace() or len(payload.translate(None, _FORBIDDEN_OCTETS)) != length:
        _check_text(text)
    # Intent(text, k), made as a frozen dataclass's own __init__ makes it (through object.__setattr__)
    # but in one step: a server decodes an intent per query
    intent = _new(Intent)
    _set(intent, "__dict__", {"text": text, "k": k, "version": VERSION, "brief": False, "fit": False})
    return intent


_new = object.__new__
_set = object.__setattr__


def shorten_intent(text: str, limit: int = MAX_INTENT_BYTES) -> str:
    """*text* cut to at most *limit* UTF-8 bytes, at a word boundary, keeping the start.

    An intent longer than the option allows is not an error for a client: the start of a long task
    description says what it is about. Text that fits is returned unchanged.

        >>> shorten_intent("find the weather in Hong Kong", 20)
        'find the weather in'
    """
    # surrogatepass: text UTF-8 cannot carry is cut like any other, and refused by encode_intent
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return text
    end = limit + 1  # one byte more: a word ending exactly at the limit stays
    while end < len(raw) and raw[end] & 0xC0 == 0x80:  # never inside a character
        end -= 1
    cut = raw[:end].decode("utf-8", "surrogatepass")
    space = max(cut.rfind(" "), cut.rfind("\n"), cut.rfind("\t"))
    head = cut[:space] if space > 0 else cut
    while len(head.encode("utf-8", "surrogatepass")) > limit:
        head = head[:-1]
    return head.rstrip()
