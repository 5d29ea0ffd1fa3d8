"""Serving zones over DNS: decide, build the reply, put it on the wire.

:mod:`.index` (a zone indexed once), :mod:`.lookup` (the result: answer, referral, NXDOMAIN,
NODATA, refused), :mod:`.reply` (the message built from a result), :mod:`.wire` (strict request
parsing, truncation), :mod:`.resolver` (dnslib's one-method contract, the safety net),
:mod:`.server` (asyncio UDP and TCP, with per-client TCP limits), :mod:`.ratelimit` (BIND-style
response rate limiting of UDP replies), :mod:`.store` (live reload) and :mod:`.tree` (every zone of
a directory, as ``tooldns serve`` runs them).

    >>> from tooldns.serving import TreeThread
    >>> with TreeThread("zones", port=5300) as tree:
    ...     print(tree.table())
"""

from .index import ZoneIndex
from .resolver import StaticSource, ZoneResolver
from .server import DNSServer
from .store import ZoneStore
from .tree import Tree, TreeThread, load_tree

__all__ = ["DNSServer", "StaticSource", "Tree", "TreeThread", "ZoneIndex", "ZoneResolver", "ZoneStore", "load_tree"]
