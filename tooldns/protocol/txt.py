"""Ranking metadata carried in TXT records: ``key=value`` strings (RFC 1464 style), pure functions.

A referral carries, per child, a TXT record owned by the child's zone name; a tool answer
carries, per tool, a TXT record owned by the tool's name. Values longer than one TXT string
(255 octets) continue in following strings with the same key; decoders join them in order.

    >>> encode_pairs([("rank", 1), ("score", "3.2100")])
    [b'tooldns=1', b'rank=1', b'score=3.2100']
    >>> decode_pairs([b'tooldns=1', b'desc=ab', b'desc=cd'])
    {'tooldns': '1', 'desc': 'abcd'}

Keys: ``tooldns`` (format version, always first), ``rank``, ``score``, ``bm25`` and ``cos`` (the
parts of a hybrid zone's score), ``kind``
(functional, organisation or self), ``summary``, ``name``, ``desc``, ``endpoint``, ``service``,
``id``, ``param`` (``name:type:required:description``, repeated per parameter, one string each).
"""

from __future__ import annotations

FORMAT = "1"
_CHUNK = 250
#: descriptions longer than this (bytes) are cut in ranked answers; a TXT query on the tool's
#: own name returns the whole text
MAX_RANKED_TEXT = 120


def _clip(value: str, limit: int) -> str:
    raw = value.encode("utf-8")
    if len(raw) <= limit:
        return value
    return raw[:limit - 3].decode("utf-8", "ignore") + "..."


def encode_pairs(pairs, clip: int | None = None) -> list[bytes]:
    """Encode (key, value) pairs as TXT strings; long values are split over several strings.

    ``tooldns`` is the format's key, written first: a pair may not use it (decoders would join its
    value to the format version's); ValueError if one does."""
    out = [b"tooldns=" + FORMAT.encode()]
    for key, value in pairs:
        if key == "tooldns":
            raise ValueError("'tooldns' is the format key, written first: no pair may use it")
        text = str(value)
        if clip is not None:
            text = _clip(text, clip)
        prefix = f"{key}=".encode()
        raw = text.encode("utf-8")
        room = 255 - len(prefix)
        if not raw:
            out.append(prefix)
            continue
        start = 0
        while start < len(raw):
            end = min(start + min(room, _CHUNK), len(raw))
            # never split inside a UTF-8 sequence
            while end < len(raw) and (raw[end] & 0xC0) == 0x80:
                end -= 1
            out.append(prefix + raw[start:end])
            start = end
    return out


def decode_pairs(strings) -> dict[str, str]:
    """Decode TXT strings into a dict; repeated keys are joined (``param`` keys are kept apart)."""
    out: dict[str, str] = {}
    for s in strings:
        raw = s if isinstance(s, bytes) else str(s).encode()
        key, sep, value = raw.partition(b"=")
        if not sep:
            continue
        k = key.decode("ascii", "replace")
        v = value.decode("utf-8", "replace")
        if k == "param":
            out[k] = out[k] + "\n" + v if k in out else v
        else:
            out[k] = out.get(k, "") + v
    return out
