"""The Extended DNS Error option (RFC 8914): why a server refused or failed; a pure codec.

Servers attach it to FORMERR (a malformed intent), SERVFAIL and REFUSED replies with a text a
client author can act on; the resolver library raises it as the error's message::

    info-code u16 | UTF-8 text

    >>> decode_ede(encode_ede("intent is empty"))
    (0, 'intent is empty')
"""

from __future__ import annotations

import struct

from ..exceptions import IntentError

#: Extended DNS Error option code (RFC 8914) and the info code used for ToolDNS's texts (0, Other).
EDE_OPTION_CODE = 15
EDE_OTHER = 0


def encode_ede(text: str, info_code: int = EDE_OTHER) -> bytes:
    """Return the data of an Extended DNS Error option (RFC 8914): info-code u16 | UTF-8 text."""
    return struct.pack("!H", info_code) + text.encode("utf-8")


def decode_ede(data: bytes) -> tuple[int, str]:
    """Parse an Extended DNS Error option's data into (info_code, text)."""
    if len(data) < 2:
        raise IntentError("EDE option shorter than its 2-byte info code")
    return struct.unpack_from("!H", data)[0], data[2:].decode("utf-8", "replace")
