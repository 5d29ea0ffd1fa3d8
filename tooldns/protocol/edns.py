"""An OPT record's RDATA as its EDNS options (RFC 6891 6.1.2): (code, data) pairs, strictly.

Each option's own codec (:mod:`.intent`, :mod:`.vector`, :mod:`.meta`, :mod:`.ede` ...) reads its
data; this splits the RDATA into options, refusing stray bytes and lengths that run past the end.
Servers read a request's options with it (:func:`tooldns.serving.wire.parse_options`), clients a
reply's (:func:`resolver_client.message.parse_reply`).

    >>> split_options(bytes.fromhex("ff15000201020008000100"), 0, 11)
    [(65301, b'\\x01\\x02'), (8, b'\\x00')]
"""

from __future__ import annotations

import struct

_OPTION_HEAD = struct.Struct("!HH")  # option code, length


def split_options(data: bytes, start: int, end: int) -> list[tuple[int, bytes]]:
    """The options of the OPT RDATA in *data* between *start* and *end*, in order; ValueError saying
    what is wrong when the RDATA is not a whole number of options."""
    out, pos = [], start
    while pos < end:
        if end - pos < 4:
            raise ValueError(f"{end - pos} stray bytes at the end of the OPT record")
        code, length = _OPTION_HEAD.unpack_from(data, pos)
        pos += 4
        if pos + length > end:
            raise ValueError(f"EDNS option {code} says {length} bytes but only {end - pos} remain")
        out.append((code, data[pos:pos + length]))
        pos += length
    return out
