"""Learning from example intents: a linear map of the embedding space, baked into the tool vectors.

A catalog or a zone file may carry, for each tool, example intents it serves (``examples:``). From
them :func:`fit` learns a square matrix ``W`` such that an intent ``q`` lands nearer the tools that
serve it: the cosine of ``W q`` with a tool's vector ``d`` is trained, by softmax cross-entropy
over the catalog's tools (the intent's own tools against every other), to rank its tools first,
with ``W`` held near the identity. The map is then baked into the tools' side:
:meth:`VectorMap.apply` gives each tool the unit vector of ``Wᵀ d``, so that a client keeps sending
its plain intent vector and no server pays anything per query (``q · unit(Wᵀ d)`` is what a zone
computes, the cosine it always computed). ``q · Wᵀ d`` is ``(W q) · d``; the tool side's
normalisation drops the per-tool norm, which ranked as well in English and better in Chinese when
this was measured (docs/building.md, "Learning from example intents").

A map is kept beside the zone files as ``vector-map-<digest>.npz`` (:meth:`VectorMap.to_bytes`,
written by :mod:`tooldns.building.examples`); each zone whose tool vectors and centroids went through
it names its digest (``settings.vector_map``), so that ``tooldns embed`` and ``tooldns build
--update`` give new tools the same map.

numpy only; a ToolRet-sized catalog (1,839 tools, 430 examples) fits in a few seconds on one core.

    >>> vmap = fit(model="m", tools=[[1.0, 0.0], [0.0, 1.0]], intents=[[0.6, 0.8]], targets=[0])
    >>> float(vmap.apply([[1.0, 0.0]])[0] @ [0.6, 0.8]) > 0.6    # the tool moved towards its intent
    True
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..exceptions import EmbeddingError

#: the temperature of the softmax and the pull towards the identity: chosen by cross-validation on
#: ToolRet's dev queries in both languages (docs/building.md)
TEMPERATURE = 0.05
REGULARISATION = 0.01
LEARNING_RATE = 0.01
#: Adam steps when too few examples can be held out to choose (:func:`fit_held_out`), and at most
STEPS = 50
MAX_STEPS = 300
#: examples held out to choose the number of steps: a share, and the fewest worth choosing on
HELD_OUT_SHARE = 0.2
MIN_HELD_OUT = 20
#: examples (pairs of an intent and a tool it serves) in one step; with more, steps take batches of them
BATCH = 2048
#: tools an intent is ranked against in one step; with more, a random sample of them (and its own)
NEGATIVES = 16384


@dataclass(frozen=True)
class VectorMap:
    """A learned map of one model's embedding space (``matrix`` is ``W``, dim x dim, float32)."""

    model: str
    matrix: np.ndarray
    #: how many example intents and tools it was fitted on (a record, for ``tooldns check`` and reports)
    examples: int = 0
    tools: int = 0

    @property
    def digest(self) -> str:
        """Twelve hex digits naming this map: of its model and matrix, as zone files record it."""
        h = hashlib.sha256(self.model.encode("utf-8"))
        h.update(np.ascontiguousarray(self.matrix, dtype="<f4").tobytes())
        return h.hexdigest()[:12]

    def apply(self, vectors) -> np.ndarray:
        """Tool vectors (rows, unit) to what zones carry: each row ``unit(Wᵀ d)``."""
        x = np.asarray(vectors, dtype=np.float64) @ self.matrix.astype(np.float64)
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        return (x / np.maximum(norms, 1e-12)).astype(np.float32)

    def to_bytes(self) -> bytes:
        """The map as an ``.npz`` file's bytes (numpy arrays only: read back without pickle)."""
        buffer = io.BytesIO()
        np.savez(buffer, matrix=np.asarray(self.matrix, dtype="<f4"), model=np.array(self.model),
                 examples=np.array(self.examples), tools=np.array(self.tools))
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, digest: str | None = None) -> "VectorMap":
        """The map :meth:`to_bytes` wrote; EmbeddingError when *data* is not one (or not the map named *digest*)."""
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
                vmap = cls(str(arrays["model"]), np.asarray(arrays["matrix"], dtype=np.float32),
                           int(arrays["examples"]), int(arrays["tools"]))
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
            raise EmbeddingError(f"not a vector map ({exc})") from None
        if vmap.matrix.ndim != 2 or vmap.matrix.shape[0] != vmap.matrix.shape[1]:
            raise EmbeddingError(f"not a vector map: a matrix of shape {vmap.matrix.shape}")
        if digest is not None and vmap.digest != digest:
            raise EmbeddingError(f"its contents are not the map {digest} (damaged or edited)")
        return vmap


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def fit(model: str, tools, intents, targets: Sequence[int], *, temperature: float = TEMPERATURE,
        regularisation: float = REGULARISATION, steps: int = STEPS, learning_rate: float = LEARNING_RATE,
        batch: int = BATCH, negatives: int = NEGATIVES, seed: int = 0, each_step=None) -> VectorMap:
    """Fit ``W`` on example intents: *intents* (rows, unit vectors of the intents as a client embeds
    them), each serving the tool ``tools[targets[i]]`` (rows, the tools' unit vectors). An intent
    serving several tools comes once per tool. Deterministic for the same inputs and *seed*.

    Each of *steps* Adam steps takes the softmax cross-entropy of ``cos(W q, d) / temperature`` over
    the tools (all of them, or a sample of *negatives* with the batch's own), for a batch of at most
    *batch* examples, plus ``regularisation / 2 * |W - I|²``. *each_step(step, W)*, when given, is
    called after every step (W is the fit's own array: copy what is kept).
    """
    t = np.asarray(tools, dtype=np.float64)
    q = np.asarray(intents, dtype=np.float64)
    y = np.asarray(targets, dtype=np.int64)
    if t.ndim != 2 or q.ndim != 2 or t.shape[1] != q.shape[1] or len(y) != len(q):
        raise EmbeddingError(f"cannot fit a vector map on {q.shape} intents, {t.shape} tools and {len(y)} targets")
    if not len(y):
        raise EmbeddingError("no example intents to fit a vector map on")
    if y.min() < 0 or y.max() >= len(t):
        raise EmbeddingError("an example's tool is not among the tools")
    dim = t.shape[1]
    rng = np.random.default_rng(seed)
    eye = np.eye(dim)
    w, m, v = eye.copy(), np.zeros((dim, dim)), np.zeros((dim, dim))
    beta1, beta2 = 0.9, 0.999
    for step in range(1, steps + 1):
        rows = np.arange(len(y)) if len(y) <= batch else rng.choice(len(y), batch, replace=False)
        qb, yb = q[rows], y[rows]
        if len(t) <= negatives:
            pool, labels = t, yb
        else:  # the batch's own tools first, then a sample of the others
            own = np.unique(yb)
            others = np.setdiff1d(rng.choice(len(t), negatives, replace=False), own)
            pool = t[np.concatenate([own, others])]
            labels = np.searchsorted(own, yb)
        x = qb @ w.T
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        xn = x / np.maximum(norms, 1e-12)
        s = xn @ pool.T / temperature
        s -= s.max(axis=1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(len(labels)), labels] -= 1.0
        g = p / (len(labels) * temperature)          # d loss / d logits
        dxn = g @ pool                                # through the cosine's normalisation:
        dx = (dxn - xn * (dxn * xn).sum(axis=1, keepdims=True)) / np.maximum(norms, 1e-12)
        grad = dx.T @ qb + regularisation * (w - eye)
        m = beta1 * m + (1 - beta1) * grad
        v = beta2 * v + (1 - beta2) * grad * grad
        w -= learning_rate * (m / (1 - beta1 ** step)) / (np.sqrt(v / (1 - beta2 ** step)) + 1e-8)
        if each_step is not None:
            each_step(step, w)
    return VectorMap(model, w.astype(np.float32), examples=len(y), tools=len(t))


def _held_out(texts: Sequence[str], share: float) -> np.ndarray:
    """Which examples to hold out: those of a *share* of the distinct intents, by a hash of the text
    (an intent's examples stay together, and the same examples are held out on every run)."""
    cut = int(share * 2**32)
    return np.array([int.from_bytes(hashlib.sha256(t.encode("utf-8", "surrogatepass")).digest()[:4], "big") < cut
                     for t in texts])


def _hit_rate(tools: np.ndarray, w: np.ndarray, intents: np.ndarray, targets: np.ndarray, top: int = 10) -> float:
    """The share of *intents* whose tool is among the *top* tools by ``q · unit(Wᵀ d)``."""
    x = tools @ w
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    scores = intents @ x.T
    own = scores[np.arange(len(targets)), targets]
    return float(np.mean((scores > own[:, None]).sum(axis=1) < top))


def fit_held_out(model: str, tools, intents, targets: Sequence[int], texts: Sequence[str], *,
                 share: float = HELD_OUT_SHARE, max_steps: int = MAX_STEPS, every: int = 10, **options) -> VectorMap:
    """:func:`fit`, with the number of steps chosen on the examples themselves: the examples of a
    *share* of the intents (*texts*, one per example) are held out, a map fitted on the others is
    scored on them every *every* steps up to *max_steps* (the share of held-out intents whose tool
    its vectors rank in the top 10), and the map is fitted again on every example for the best number
    of steps (the fewest, on ties). With fewer than :data:`MIN_HELD_OUT` held out, :data:`STEPS`.

    A catalog's examples say how far they can be trusted: on ToolRet's dev queries the best number of
    steps ranged from 30 to 160 across languages and halves, and a fixed one lost up to 3 points."""
    t = np.asarray(tools, dtype=np.float64)
    q = np.asarray(intents, dtype=np.float64)
    y = np.asarray(targets, dtype=np.int64)
    held = _held_out(texts, share)
    if held.sum() < MIN_HELD_OUT or held.all():
        return fit(model, t, q, y, steps=STEPS, **options)
    curve: dict[int, float] = {}

    def score(step: int, w: np.ndarray) -> None:
        if step % every == 0:
            curve[step] = _hit_rate(t, w, q[held], y[held])

    fit(model, t, q[~held], y[~held], steps=max_steps, each_step=score, **options)
    best = max(curve, key=lambda step: (curve[step], -step))
    return fit(model, t, q, y, steps=best, **options)
