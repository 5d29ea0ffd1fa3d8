"""The brief option: a client asks for ranked tool answers without the tools' descriptions.

A leaf's answer carries, per tool, its SRV record and a ranking TXT record (rank, score, name,
service, endpoint, id and the description cut to 120 bytes). The description is most of those
bytes, and a client that shows or calls a tool fetches the tool's own TXT record for the whole of
it anyway (``describe_tool``, the MCP server). A query that carries this option, EDNS0 option code
**65304** with no data, gets ranking TXT records without ``desc``: on the ToolRet tree, about half
the bytes of a resolution, and twice as many tools in one UDP datagram. A query without it gets
descriptions, as before (dig users, older clients). Anything else in the option is FORMERR.

    >>> decode_brief(b"")
    True
"""

from __future__ import annotations

from ..exceptions import IntentError

#: EDNS0 option code of the brief option (local/experimental range, next to intent, meta and vector)
BRIEF_OPTION_CODE = 65304


def encode_brief() -> bytes:
    """The option data: none."""
    return b""


def decode_brief(data: bytes) -> bool:
    """True for a well-formed brief option; :class:`IntentError` otherwise (answered with FORMERR)."""
    if data:
        raise IntentError(f"brief option must carry no data, got {len(data)} bytes")
    return True
