"""What the benchmark scripts share: where the ToolRet data is, a ``tooldns serve`` process to measure
(:mod:`tooldns.serving.spawn`), streams of never-seen intents (:mod:`tooldns.building.synth`), a cache of
vectors, percentiles, and a tree's zone files copied onto other loopback addresses."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tooldns.building.synth import MAX_INTENT, distinct_intents  # noqa: E402,F401  (the scripts' names for them)
from tooldns.protocol.fusion import DEFAULT_WEIGHT  # noqa: E402
from tooldns.serving.spawn import start_servers, stop_servers  # noqa: E402,F401
#: the ToolRet benchmark's folder (README there), as the tests find it: TOOLDNS_DATA, or ../shared/data/toolret
DATA = Path(os.environ.get("TOOLDNS_DATA", ROOT.parent / "shared" / "data" / "toolret"))


class CachedEmbedder:
    """An embedder whose vectors are kept on disk (*directory*, one ``.npy`` per text and side, named by
    the SHA-256 of the model, the side and the text): a benchmark that builds the same catalog many
    times (cross-validation, sweeps) embeds each text once. The vectors are the embedder's own, so
    every figure is what the embedder alone gives; only the time to make them is saved."""

    def __init__(self, embedder, directory) -> None:
        self.inner, self.directory = embedder, Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.model, self.dim, self.remote = embedder.model, embedder.dim, getattr(embedder, "remote", False)
        # how a build uses the model: clustered on its vectors or not, and its share in the fusion
        self.clusters_tree = getattr(embedder, "clusters_tree", True)
        self.fusion = getattr(embedder, "fusion", DEFAULT_WEIGHT)

    def _path(self, side: str, text: str) -> Path:
        import hashlib

        key = hashlib.sha256(f"{self.model}\0{side}\0{text}".encode("utf-8", "surrogatepass")).hexdigest()
        return self.directory / key[:2] / f"{key}.npy"

    def _cached(self, side: str, texts, embed) -> list[list[float]]:
        import numpy as np

        texts = list(texts)
        out: dict[int, list[float]] = {}
        todo = []
        for i, text in enumerate(texts):
            path = self._path(side, text)
            if path.exists():
                out[i] = np.load(path).tolist()
            else:
                todo.append(i)
        if todo:
            for i, vector in zip(todo, embed([texts[i] for i in todo])):
                path = self._path(side, texts[i])
                path.parent.mkdir(exist_ok=True)
                np.save(path, np.asarray(vector, dtype=np.float64))
                out[i] = list(vector)
        return [out[i] for i in range(len(texts))]

    def embed(self, texts):
        return self._cached("passage", texts, self.inner.embed)

    def embed_queries(self, texts):
        return self._cached("query", texts, self.inner.embed_queries)

    def embed_one(self, text):
        return self.embed([text])[0]

    def embed_query(self, text):
        return self.embed_queries([text])[0]

    def covers(self, text) -> bool:
        return self.inner.covers(text)

    def counters(self):
        return self.inner.counters()


def copy_zones(src: Path, dst: Path, subnet: str) -> Path:
    """The zone files of *src* in *dst* (made if need be), every 127.0.0.N address moved to *subnet*.N: a
    tree served beside another one on loopback (the tests' ``copy_tree`` alike)."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in Path(src).glob("*.yaml"):
        text = re.sub(r"127\.0\.0\.(\d+)", lambda m: f"{subnet}.{m.group(1)}", f.read_text(encoding="utf-8"))
        (dst / f.name).write_text(text, encoding="utf-8")
    return dst


def percentile(values, p: float) -> float:
    """The nearest-rank *p*-th percentile of *values* (0 for none)."""
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))] if values else 0.0
