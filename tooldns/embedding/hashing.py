"""A tiny deterministic embedder for tests and for machines without a model: not for quality.

Feature hashing of the tooldns tokenizer's tokens (:func:`tooldns.scoring.tokenize.tokenize`):
each token adds ±1 to one of ``dim`` buckets, bucket and sign both taken from a BLAKE2b digest
of the token (never Python's ``hash()``, which is salted per process), and the sum is normalised.
Texts sharing words get close vectors; synonyms do not ("weather" and "climate" are strangers),
which is what a real model (:mod:`.local`, :mod:`.remote`) is for. The same text gives the same
vector in every process and on every machine.

    >>> embedder = HashEmbedder(dim=8)
    >>> embedder.model, len(embedder.embed_one("weather forecast"))
    ('hash-8', 8)
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Sequence

from ..exceptions import EmbeddingError
from ..scoring.tokenize import tokenize
from .embedder import Embedder, unit_vector


@lru_cache(maxsize=65536)
def _slot(token: str, dim: int) -> tuple[int, float]:
    """The bucket a token falls in and the sign it adds there."""
    digest = int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "big")
    return (digest >> 1) % dim, (1.0 if digest & 1 else -1.0)


class HashEmbedder(Embedder):
    """Feature-hashed token counts in *dim* buckets (for tests, not for quality).

    *model* defaults to ``hash-DIM``. A text without tokens ("", "the of") is hashed as its
    stripped, lower-cased self, so it still gets a unit vector.
    """

    def __init__(self, dim: int = 64, model: str | None = None) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise EmbeddingError(f"HashEmbedder dim must be a positive integer, not {dim!r}")
        self.dim = dim
        self.model = model or f"hash-{dim}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._vector(text) for text in self._texts(texts)]

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        for token in tokenize(text) or [text.strip().lower()]:
            bucket, sign = _slot(token, self.dim)
            vector[bucket] += sign
        return unit_vector(vector)
