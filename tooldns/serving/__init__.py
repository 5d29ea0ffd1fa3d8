"""Serving zones over DNS: decide, build the reply, put it on the wire.

:mod:`.index` (a zone indexed once), :mod:`.lookup` (the result: answer, referral, NXDOMAIN,
NODATA, refused), :mod:`.reply` (the message built from a result), :mod:`.fast` (the fast path: intent
searches answered from the datagram's bytes, packed from bytes encoded once per zone),
:mod:`.options` (a query's EDNS options, read alike on both paths), :mod:`.wire` (strict request
parsing, truncation), :mod:`.resolver` (dnslib's one-method contract, the safety net), :mod:`.multizone`
(several zones behind one server), :mod:`.server` (asyncio UDP and TCP, with per-client TCP
limits), :mod:`.ratelimit` (BIND-style response rate limiting of UDP replies), :mod:`.store` (live
reload), :mod:`.tree` (every zone of a directory, one server per address, as ``tooldns serve``
runs them), :mod:`.descriptors` (the open-file budget), :mod:`.workers` (several processes on
the same addresses), and what operators read: :mod:`.metrics` (Prometheus), :mod:`.querylog`
(JSON lines), both reading each query through :mod:`.observe`.

    >>> from tooldns.serving import TreeThread
    >>> with TreeThread("zones", port=5300) as tree:
    ...     print(tree.table())
"""

from .index import ZoneIndex
from .multizone import MultiZoneResolver
from .resolver import StaticSource, ZoneResolver
from .server import DNSServer
from .store import ZoneStore
from .tree import Tree, TreeThread, load_tree

__all__ = ["DNSServer", "MultiZoneResolver", "StaticSource", "Tree", "TreeThread", "ZoneIndex", "ZoneResolver", "ZoneStore",
           "load_tree"]
