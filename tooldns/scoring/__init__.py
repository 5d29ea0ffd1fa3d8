"""Scoring: how a zone ranks its children or tools against an intent.

:mod:`.tokenize` (English words, CJK bigrams), :mod:`.bm25` (the index and the ``bm25`` scorer),
:mod:`.scorer` (the interface every scorer implements), :mod:`.hybrid` (the ``hybrid`` scorer:
BM25 and vectors), :mod:`.llm` (the ``llm`` scorer, BM25 standing by) and :mod:`.registry`
(scorers by name). This package's face exports only what needs no numpy or model client, so that
the tokenizer stays light for the embedders that use it; scorers by name come from the registry:

    >>> from tooldns.scoring.registry import make_scorer
    >>> make_scorer("bm25", ["weather forecast", "stock quotes"]).rank("rain tomorrow forecast", 1).items
    [(0, 0.5...)]
"""

from .bm25 import BM25, BM25Scorer, CorpusStats
from .scorer import Ranking, Scorer
from .tokenize import tokenize

__all__ = ["BM25", "BM25Scorer", "CorpusStats", "Ranking", "Scorer", "tokenize"]
