"""The fit option: a client asks for the best tools that fit one datagram rather than a truncated reply.

A leaf asked for K tools over UDP answers all K or, when they do not fit the client's UDP payload
size, a reply with TC set that the client asks again over TCP (a second query, a connection).
A query that carries this option, EDNS0 option code **65305** with no data, is answered instead
with the best tools that fit, in rank order, and the meta option's TRIMMED flag
(:data:`tooldns.protocol.meta.FLAG_TRIMMED`) saying that fewer than asked came back for want of
room. Referrals are never trimmed (a referral to ten children fits a datagram), nor answers over
TCP. Without the option a server truncates as before (``dig`` retries over TCP by itself). Anything
in the option is FORMERR.

    >>> decode_fit(b"")
    True
"""

from __future__ import annotations

from ..exceptions import IntentError

#: EDNS0 option code of the fit option (local/experimental range, next to intent, meta, vector, brief)
FIT_OPTION_CODE = 65305


def encode_fit() -> bytes:
    """The option data: none."""
    return b""


def decode_fit(data: bytes) -> bool:
    """True for a well-formed fit option; :class:`IntentError` otherwise (answered with FORMERR)."""
    if data:
        raise IntentError(f"fit option must carry no data, got {len(data)} bytes")
    return True
