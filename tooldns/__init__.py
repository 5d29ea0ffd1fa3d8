"""ToolDNS server side: zones of tools under `.tools`, served by intent-ranking DNS servers.

    from tooldns import Tree, load_zone, build
    zone = load_zone("zones/weather.tools.yaml")          # validated, file:line errors
    tree = Tree("zones/", port=5300); await tree.start()  # one server per zone name server

Modules: :mod:`intent` (the EDNS option codec), :mod:`names` (cursor names), :mod:`zonefile`
and :mod:`zone` (zone files and their model), :mod:`bm25`, :mod:`tokenize` and :mod:`scorers`
(ranking), :mod:`index` and :mod:`lookup` (deciding), :mod:`reply` and :mod:`wire` (the
message), :mod:`resolver` and :mod:`server` (serving), :mod:`zonestore` and :mod:`serve`
(live reload, a tree of servers), :mod:`catalog`, :mod:`taxonomy` and :mod:`build` (from a
catalog to zones). Errors derive from :class:`ToolDNSError`.
"""

from .build import build, build_zones
from .exceptions import BuildError, IntentError, NameError_, ScorerError, ToolDNSError, ZoneFileError
from .index import ZoneIndex
from .intent import INTENT_OPTION_CODE, META_OPTION_CODE, Intent, decode_intent, encode_intent
from .names import Cursor, cursor, parse_cursor
from .resolver import StaticSource, ZoneResolver
from .scorers import Ranking, make_scorer, register_scorer
from .serve import Tree, TreeThread, load_tree
from .server import DNSServer
from .zone import Zone
from .zonefile import load_zone, parse_zone
from .zonestore import ZoneStore

__all__ = [
    "BuildError", "Cursor", "DNSServer", "INTENT_OPTION_CODE", "Intent", "IntentError", "META_OPTION_CODE",
    "NameError_", "Ranking", "ScorerError", "StaticSource", "ToolDNSError", "Tree", "TreeThread", "Zone",
    "ZoneFileError", "ZoneIndex", "ZoneResolver", "ZoneStore", "build", "build_zones", "cursor", "decode_intent",
    "encode_intent", "load_tree", "load_zone", "make_scorer", "parse_cursor", "parse_zone", "register_scorer",
]
