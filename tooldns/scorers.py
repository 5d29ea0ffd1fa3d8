"""The scorer interface: how a zone ranks its children or its tools against an intent.

A scorer is built once per zone (per document set) and then asked ``rank(intent, k)``, which
returns a :class:`Ranking`: at most *k* (document index, score) pairs, best first. Scorers are
picked by name from a registry; the resolver never branches on which one is in use.

    >>> s = make_scorer("bm25", ["historical weather archive", "stock market quotes"])
    >>> s.rank("weather last year", 1).items[0][0]
    0

Built-in: ``bm25`` (options ``k1``, ``b``, ``stats``) and ``llm`` (:mod:`tooldns.llm`).
A factory is called as ``factory(docs, briefs=..., **options)``.
Every scorer must rank sensibly on a corpus of one or two documents.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

from .bm25 import BM25
from .exceptions import ScorerError


@dataclass
class Ranking:
    """What a scorer returns: (index, score) pairs best first, and how it got them."""

    items: list[tuple[int, float]]
    scorer: str = "bm25"
    fallback: bool = False  # the configured scorer failed and a fallback answered
    info: dict = field(default_factory=dict)


class Scorer(Protocol):
    name: str

    def rank(self, intent: str, k: int) -> Ranking: ...


class BM25Scorer:
    """Lexical BM25 scorer (see :mod:`tooldns.bm25`)."""

    name = "bm25"

    def __init__(self, docs: Sequence[str], briefs: Sequence[str] | None = None, k1: float = 1.5, b: float = 0.75,
                 stats=None) -> None:
        del briefs  # lexical scoring reads the full documents
        try:
            self.index = BM25(list(docs), k1=float(k1), b=float(b), stats=stats)
        except (TypeError, ValueError) as exc:
            raise ScorerError(f"bm25: {exc}") from exc

    def rank(self, intent: str, k: int) -> Ranking:
        return Ranking(self.index.rank(intent, k), scorer=self.name)


ScorerFactory = Callable[..., Scorer]
_REGISTRY: dict[str, ScorerFactory] = {"bm25": BM25Scorer}


def register_scorer(name: str, factory: ScorerFactory) -> None:
    """Make *factory(docs, **options)* available under *name*."""
    _REGISTRY[name] = factory


def scorer_names() -> list[str]:
    return sorted(_REGISTRY)


def make_scorer(name: str, docs: Sequence[str], briefs: Sequence[str] | None = None, **options) -> Scorer:
    """Build the scorer called *name* over *docs* (what is scored; *briefs*, if given, is a short
    form of each for scorers that show items to a model); raise :class:`ScorerError` for unknown
    names or options."""
    factory = _REGISTRY.get(name)
    if factory is None:
        raise ScorerError(f"unknown scorer {name!r}; valid names: {', '.join(scorer_names())}")
    try:
        return factory(docs, briefs=briefs, **options)
    except TypeError as exc:
        raise ScorerError(f"{name}: bad options {sorted(options)}: {exc}") from exc


from . import llm as _llm  # noqa: E402,F401  registers the "llm" scorer
