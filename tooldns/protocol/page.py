"""The page option: a client asks a leaf for the tools it ranks after the ones it already has.

A leaf asked for K tools answers its best K. A walk that merges several leaves' answers may find
that every tool one leaf gave made its result: that leaf may hold more that would, ranked just
below them, which a larger K asked at first would have cost every leaf a datagram's room, or TCP.
A query that carries this option, EDNS0 option code **65306** with one octet of data, *skip*
(0 to 255), is answered with the zone's K best tools after its *skip* best, as one more datagram:
the same ranking, the same pruning (tools far below the zone's best stay out, and the meta option
says PRUNED), the same fit. Ranks in the reply count from its first tool (SRV priority and
``rank=`` 1 for the tool ranked *skip* + 1); the client, which sent *skip*, adds it. A referral
ignores the option (it pages tools, not children). Anything but one octet is FORMERR.

    >>> decode_page(encode_page(6))
    6
"""

from __future__ import annotations

from ..exceptions import IntentError

#: EDNS0 option code of the page option (local/experimental range, next to intent, meta, vector,
#: brief and fit)
PAGE_OPTION_CODE = 65306
#: the most tools a page option can skip (one octet)
MAX_SKIP = 255


def encode_page(skip: int) -> bytes:
    """The option data: *skip*, the tools ranked before the page, as one octet."""
    if isinstance(skip, bool) or not isinstance(skip, int) or not 0 <= skip <= MAX_SKIP:
        raise IntentError(f"a page skips 0 to {MAX_SKIP} tools, got {skip!r}")
    return bytes((skip,))


def decode_page(data: bytes) -> int:
    """The tools a well-formed page option skips; :class:`IntentError` otherwise (answered with FORMERR)."""
    if len(data) != 1:
        raise IntentError(f"page option must carry one octet (the tools to skip), got {len(data)}")
    return data[0]
