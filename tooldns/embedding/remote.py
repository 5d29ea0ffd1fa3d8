"""Embedding through an OpenAI-compatible ``/v1/embeddings`` endpoint: OpenAI, Ollama, vLLM, TEI.

The ``openai`` client is made by :func:`tooldns.chat.openai_client`, so the environment fallbacks
are the chat model's: ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``. The vectors' length is learned
from the first answer unless given, and every answer must keep to it. Vectors are asked for as
floats (``encoding_format="float"``, which every server speaks) and normalised here, since not
every model returns unit vectors.

    >>> embedder = OpenAIEmbedder("nomic-embed-text", base_url="http://localhost:11434/v1")
    >>> len(embedder.embed(["weather forecast", "stock quotes"])), embedder.dim
    (2, 768)
    >>> embedder.counters()
    {'calls': 1, 'texts': 2, 'prompt_tokens': 4, 'failed_calls': 0}
"""

from __future__ import annotations

import math

from typing import Sequence

from ..chat import Counters, openai_client
from ..exceptions import EmbeddingError
from .embedder import Embedder

BATCH_SIZE = 64  # texts per request; TEI refuses more than 32 by default: pass batch_size=32 there


class OpenAIEmbedder(Embedder):
    """One embedding model at one OpenAI-compatible endpoint, counting calls and tokens (thread-safe).

    Failures (timeouts, HTTP errors, answers of the wrong shape) raise EmbeddingError, the client's
    exception as its cause, after the client's own *max_retries*.
    """

    remote = True

    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None,
                 timeout: float = 10.0, max_retries: int = 2, client=None, *, dim: int | None = None,
                 batch_size: int = BATCH_SIZE) -> None:
        if not model:
            raise EmbeddingError("OpenAIEmbedder needs a model name")
        if client is None:
            try:
                client = openai_client(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries)
            except ImportError as exc:
                raise EmbeddingError("OpenAIEmbedder needs the openai package: pip install openai") from exc
        self.model = model
        self.client = client
        self.base_url = str(getattr(client, "base_url", base_url or ""))
        self.batch_size = max(1, int(batch_size))
        self._dim = dim
        self._counts = Counters("calls", "texts", "prompt_tokens", "failed_calls")

    @property
    def dim(self) -> int:
        """The vectors' length: given, or learned from the first answer (asking one now if need be)."""
        if self._dim is None:
            self.embed_one("dimension probe")
        return self._dim  # type: ignore[return-value]

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        texts = self._texts(texts)
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors.extend(self._request(texts[start:start + self.batch_size]))
        return self._unit(vectors)

    def _request(self, batch: list[str]) -> list[list[float]]:
        try:
            response = self.client.embeddings.create(model=self.model, input=batch, encoding_format="float")
        except Exception as exc:  # noqa: BLE001 - whatever the client raises: timeouts, HTTP errors
            self._counts.add(failed_calls=1)
            raise EmbeddingError(f"embedding with {self.model} at {self.base_url} failed: {exc}") from exc
        try:
            vectors = self._vectors(response, len(batch))
        except EmbeddingError:
            self._counts.add(failed_calls=1)
            raise
        usage = getattr(response, "usage", None)
        self._counts.add(calls=1, texts=len(batch), prompt_tokens=(getattr(usage, "prompt_tokens", 0) or 0) if usage else 0)
        return vectors

    def _vectors(self, response, expected: int) -> list[list[float]]:
        """The answer's vectors in input order, checked: one item per text, indexes 0 to n - 1 once each,
        vectors of finite floats of one length, none of length 0 (a unit vector must be made of each)."""
        where = f"{self.model} at {self.base_url}"
        data = list(getattr(response, "data", None) or [])
        indexes = [getattr(item, "index", None) for item in data]
        if len(data) != expected:
            raise EmbeddingError(f"{where} answered {len(data)} vectors for {expected} texts")
        if sorted(i for i in indexes if isinstance(i, int) and not isinstance(i, bool)) != list(range(expected)):
            raise EmbeddingError(f"{where} answered items whose indexes are not 0 to {expected - 1}, once each")
        try:
            vectors = [[float(x) for x in item.embedding] for _, item in sorted(zip(indexes, data), key=lambda p: p[0])]
        except (TypeError, ValueError, AttributeError) as exc:
            raise EmbeddingError(f"{where} answered something other than vectors of floats") from exc
        lengths = {len(v) for v in vectors}
        dim = self._dim or next(iter(lengths))
        if lengths != {dim} or dim < 1:
            raise EmbeddingError(f"{where} answered vectors of {sorted(lengths)} dimensions, expected {dim}")
        for v in vectors:
            norm = math.fsum(x * x for x in v)  # inf for components near 1e308, nan for a nan
            if not 0 < norm < math.inf:
                raise EmbeddingError(f"{where} answered a vector of length {norm ** 0.5:g}: not a direction")
        self._dim = dim
        return vectors

    def counters(self) -> dict[str, int]:
        return self._counts.snapshot()
