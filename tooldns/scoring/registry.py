"""Scorers by name: ``make_scorer("bm25", docs)``, and a way to add more.

Built-in: ``bm25`` (:mod:`.bm25`, options ``k1``, ``b``, ``stats``), ``hybrid`` (:mod:`.hybrid`:
BM25 and cosine fused; ``alpha`` and ``centre`` besides BM25's options) and ``llm`` (:mod:`.llm`).
``stats`` (the catalog's BM25 statistics) and ``centre`` (the catalog's mean tool vector) come from
the zone, not its settings; every built-in scorer takes both.
A factory is called as ``factory(docs, briefs=..., vectors=..., **options)`` and returns a
:class:`~tooldns.scoring.scorer.Scorer`; unknown names and bad options raise
:class:`~tooldns.exceptions.ScorerError` listing what is valid.

    >>> s = make_scorer("bm25", ["historical weather archive", "stock market quotes"])
    >>> s.rank("weather last year", 1).items[0][0]
    0
"""

from __future__ import annotations

import inspect
import math
from typing import Callable, Sequence

from ..chat import url_problem
from ..exceptions import ScorerError
from .bm25 import BM25Scorer
from .hybrid import HybridScorer
from .llm import LLMScorer
from .scorer import Scorer

ScorerFactory = Callable[..., Scorer]
_REGISTRY: dict[str, ScorerFactory] = {"bm25": BM25Scorer, "hybrid": HybridScorer, "llm": LLMScorer}


def register_scorer(name: str, factory: ScorerFactory) -> None:
    """Make *factory(docs, briefs=..., **options)* available under *name*."""
    _REGISTRY[name] = factory


def scorer_names() -> list[str]:
    return sorted(_REGISTRY)


def make_scorer(name: str, docs: Sequence[str], briefs: Sequence[str] | None = None,
                vectors: Sequence[Sequence[bytes]] | None = None, **options) -> Scorer:
    """Build the scorer called *name* over *docs* (what is scored; *briefs*, if given, is a short
    form of each for scorers that show items to a model; *vectors*, if given, each document's
    vectors); raise :class:`ScorerError` for unknown names or options."""
    factory = _REGISTRY.get(name)
    if factory is None:
        raise ScorerError(f"unknown scorer {name!r}; valid names: {', '.join(scorer_names())}")
    try:
        return factory(docs, briefs=briefs, vectors=vectors, **options)
    except TypeError as exc:
        raise ScorerError(f"{name}: bad options {sorted(options)}: {exc}") from exc
    except ValueError as exc:  # an option's value (an endpoint's URL ...)
        raise ScorerError(f"{name}: {exc}") from exc


def option_problem(name: str, options: dict) -> str | None:
    """What is wrong with *options* for the scorer called *name* (a name it does not take, a value
    that is not a number, text or yes/no), or None; checked without building the scorer."""
    factory = _REGISTRY.get(name)
    if factory is None:
        return None  # the unknown name is reported on its own
    for key, value in options.items():
        if not isinstance(key, str) or isinstance(value, (list, dict)) or value is None:
            return f"option {key!r}: a value must be a number, text or true/false, not {type(value).__name__}"
    try:
        signature = inspect.signature(factory)
        signature.bind([], briefs=None, vectors=None, **options)
    except TypeError as exc:
        return f"{name} does not take these options ({exc})"
    problem = url_problem(options["base_url"]) if "base_url" in options else None
    if problem:  # found by tooldns check, not at start
        return problem
    for key, value in options.items():  # a number where the scorer takes one (budget_ms, k1 ...)
        default = getattr(signature.parameters.get(key), "default", None)
        if isinstance(default, (int, float)) and not isinstance(default, bool) and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)):
            return f"option {key!r}: must be a finite number, not {value!r}"
    return None
