"""ToolDNS resolver library: find tools for an intent by walking a `.tools` tree over DNS.

    >>> from resolver_client import Resolver
    >>> for tool in Resolver(root="127.0.0.1:5300").resolve("historical weather Hong Kong").tools:
    ...     print(tool.score, tool.name, tool.endpoint)

Public API: :class:`Resolver`, :class:`AsyncResolver`, :class:`Walk` (the I/O-free state
machine they drive), result types and the exception hierarchy rooted at :class:`ResolverError`.
"""

from .cache import ReplyCache
from .exceptions import BadResponse, IntentRejected, LimitExceeded, NoServersReachable, ResolverError, ValidationFailed
from .resolver import AsyncResolver, Resolver, parse_server
from .results import Hop, Referral, Resolution, Stats, Tool
from .walk import Query, Walk

__all__ = [
    "AsyncResolver", "BadResponse", "Hop", "IntentRejected", "LimitExceeded", "NoServersReachable", "Query",
    "Referral", "ReplyCache", "Resolution", "Resolver", "ResolverError", "Stats", "Tool", "ValidationFailed", "Walk",
    "parse_server",
]
