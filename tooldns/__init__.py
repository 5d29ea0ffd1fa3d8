"""ToolDNS server side: zones of tools under `.tools`, served by intent-ranking DNS servers.

    from tooldns import TreeThread, load_zone, build
    zone = load_zone("zones/weather.tools.yaml")           # validated, file:line errors
    with TreeThread("zones/", port=5300) as tree: ...       # one server per zone name server

One subpackage per concern, dependencies running one way (each imports only those above it):

    exceptions.py   the server side's exception root (ToolDNSError)
    compiled.py     which modules a query runs through are compiled (Cython), and the import hook that
                    runs a module's source when its compiled twin was built from other source
    protocol/       the wire codecs both sides speak: intent, meta, vector and EDE options, cursor
                    names, TXT pairs, the client's fusion rule (standard library only; the resolver
                    library needs nothing else)
    chat.py         talking to an OpenAI-compatible chat model
    scoring/        tokenizer, BM25, hybrid, the scorer interface and registry, the LLM scorer
    embedding/      embedders: all-MiniLM-L6-v2, OpenAI-compatible endpoints, hashing (tests)
    zone/           the zone model and its YAML files (load, dump)
    serving/        zone index, lookup, reply, wire, dnslib resolver, asyncio server, live store, tree
    building/       catalogs, category trees (offline, A2X, LLM), catalog to zone files
    cli.py          ``tooldns serve | check | demo | build | embed``

Names below are imported when first used, so ``import tooldns.protocol`` (what the resolver library
does) loads none of dnslib, yaml, numpy, scikit-learn or openai.
"""

from __future__ import annotations

from importlib import import_module

from .compiled import install as _install_source_finder

_install_source_finder()  # before any module that may be compiled is imported (tooldns.compiled)

from .exceptions import (BuildError, EmbeddingError, IntentError, NameError_, ScorerError, ServeError, ToolDNSError,
                         VectorError, ZoneFileError)

_LAZY = {
    "INTENT_OPTION_CODE": "protocol.intent", "Intent": "protocol.intent", "decode_intent": "protocol.intent",
    "encode_intent": "protocol.intent", "META_OPTION_CODE": "protocol.meta",
    "Cursor": "protocol.names", "cursor": "protocol.names", "parse_cursor": "protocol.names",
    "VECTOR_OPTION_CODE": "protocol.vector", "encode_vector": "protocol.vector", "decode_vector": "protocol.vector",
    "Ranking": "scoring.scorer", "Scorer": "scoring.scorer", "make_embedder": "embedding.registry",
    "make_scorer": "scoring.registry", "register_scorer": "scoring.registry",
    "Zone": "zone.model", "load_zone": "zone.zonefile", "parse_zone": "zone.zonefile", "dump_zone": "zone.zonefile",
    "ZoneIndex": "serving.index", "StaticSource": "serving.resolver", "ZoneResolver": "serving.resolver",
    "MultiZoneResolver": "serving.multizone",
    "DNSServer": "serving.server", "ZoneStore": "serving.store",
    "Tree": "serving.tree", "TreeThread": "serving.tree", "load_tree": "serving.tree",
    "build": "building.build", "build_zones": "building.build",
}

__all__ = ["BuildError", "EmbeddingError", "IntentError", "NameError_", "ScorerError", "ServeError", "ToolDNSError",
           "VectorError", "ZoneFileError", *sorted(_LAZY)]


def _version() -> str:
    """The installed distribution's version (``tooldns --version``, ``tooldns-resolve --version``),
    looked up when first asked for rather than at every import (a few milliseconds)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tooldns")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


def __getattr__(name: str):
    if name == "__version__":
        value = globals()[name] = _version()
        return value
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tooldns' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value  # once imported, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | {"__version__"})
