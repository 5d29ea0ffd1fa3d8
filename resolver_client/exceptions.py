"""Client-side exception hierarchy: everything the resolver library raises derives from one root.

    ResolverError
    ├── IntentRejected      a server answered FORMERR: the intent (or query) is malformed;
    │                       carries the server's Extended DNS Error text
    ├── NoServersReachable  no name server of the root zone answered (timeouts, refused)
    ├── BadResponse         a response did not match its query or could not be parsed
    ├── ValidationFailed    DNSSEC: what the walk met was bogus (a wrong trust anchor, forged or
    │                       broken signatures) and no tool was left
    └── LimitExceeded       the walk hit its depth or query limit before finishing

Each class's docstring is its default message. Library errors (dnspython, sockets) are mapped
onto these with ``raise ... from``.
"""

from __future__ import annotations


class ResolverError(Exception):
    """The ToolDNS resolution failed."""

    def __init__(self, *args: object) -> None:
        if not args:
            args = (self.__doc__.strip(),)  # type: ignore[union-attr]
        super().__init__(*args)


class IntentRejected(ResolverError):
    """A server rejected the query as malformed."""


class NoServersReachable(ResolverError):
    """No name server of a zone answered, and the walk found no tools elsewhere."""


class BadResponse(ResolverError):
    """A response did not match its query."""


class ValidationFailed(ResolverError):
    """DNSSEC validation failed: the answers were bogus, and no tool was left."""


class LimitExceeded(ResolverError):
    """The walk hit its depth or query limit."""
