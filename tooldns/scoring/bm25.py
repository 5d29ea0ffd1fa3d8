"""BM25 over a small in-memory corpus, answering in microseconds, with optional global statistics.

Why not `bm25s` or `rank_bm25` at query time: a zone server scores a handful of documents per
query thousands of times a second, where their numpy set-up costs more than the scoring, and
neither takes corpus statistics from outside the corpus, which :mod:`tooldns.building.build` needs so that
leaves in different zones give scores comparable enough to merge. The formula is Lucene's
(as `bm25s` method "lucene"), checked against `bm25s` in the tests::

    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))        never 0 or negative, so a
                                                                   zone of one or two documents
                                                                   still ranks (BM25Okapi's idf
                                                                   is 0 there)
    score(d, q) = sum over t in q: idf(t) * tf / (tf + k1 * (1 - b + b * |d| / avgdl))

(Lucene 8+ drops the constant factor k1 + 1 of the classic numerator; rankings are the same.)

With :class:`CorpusStats` given, N, avgdl and df come from it (a term it lacks falls back to the
local df), so the same document scores the same in every zone that holds it.

:class:`BM25Scorer` is the ``bm25`` scorer zones use (the default).

    >>> s = BM25(["weather forecast", "stock quotes"])
    >>> s.rank("weather tomorrow", 2)[0][0]
    0
"""

from __future__ import annotations

import math
import operator
import threading
from collections import Counter
from dataclasses import dataclass, field
from itertools import chain, filterfalse
from typing import Callable, Iterable, Sequence

from ..compiled import TURN_EVERY, turn
from ..exceptions import ScorerError
from ..protocol.budget import Budget, Store
from ..protocol.summary import FACET_TOOLS, MAX_FACETS
from .scorer import Ranking, Scorer
from .tokenize import Tokenized, as_ascii, ascii_words, tokenize, word_terms

try:  # compiled: the scorer's twins in C, chosen here once: many postings summed and the best picked
    # in C loops (.sums), an index's words looked up from a query's octets (.wordtable)
    from .sums import all_sums, best_sums, owner_numbers
    from .wordtable import WordTable
except ImportError:  # from source: numpy adds the postings (the same sums, the same order, the same
    # ties), and a dict holds the words and a set the dead ones
    all_sums = best_sums = owner_numbers = WordTable = None


#: above this many postings for one query, :meth:`BM25.rank` adds them in C (:mod:`.sums`) or, running
#: from source, with numpy (cheaper from about a hundred: a query of ToolRet's with a built tree's root
#: of 92 children touches some 350)
MANY_POSTINGS = 128


#: compiled, an index of at most this many documents sums every query in C (:mod:`.sums`), whatever
#: its postings: zeroing and reading that many sums costs less than a dict of the documents touched
FEW_DOCS = 256

#: compiled, a :class:`FacetRanker` of at most this many facets ranks every query in C, whatever its
#: postings: at ToolRet's root (500 facets of 92 children) a query of at most 128 postings (one in
#: seven of the dev queries) took 42 us by the dict of facets touched and its documents' best, 7 us
#: in C; C's passes over every facet cost about 3 ns a facet (6 us at 2,048)
FEW_FACETS = 2048


#: an index keeps the posting lists of each ASCII word it is asked from its this-many-th query on
#: (zones asked rarely, such as the leaves of a large tree, keep none); all indexes together keep
#: at most 2^17 words (about 130 bytes each), and all forget theirs when that is reached
WORDS_AFTER = 64
WORDS = Budget(1 << 17)


#: the many-postings sums of an index of at most DENSE_DOCS documents add dense rows, one per term
#: (:class:`_Rows`); all indexes together make at most ROWS' limit in bytes of rows (their arrays
#: grow by doubling, so they hold up to twice that), and all forget theirs when that is reached
DENSE_DOCS = 1024
ROWS = Budget(1 << 25)


#: a delegation's facets (``facets`` in zone files): groups of FACET_SIZE of the tools beneath it,
#: in catalog order, for a child of at most MAX_FACETS groups (larger children have none; the limit
#: is also what a published summary may carry, :mod:`tooldns.protocol.summary`)
FACET_SIZE = FACET_TOOLS
#: children of more tools than this have no facets
MAX_FACET_TOOLS = FACET_SIZE * MAX_FACETS


def facets_of(token_lists: Sequence[Sequence[str]]) -> tuple[Counter, ...]:
    """The facets of the tools whose index terms are *token_lists* (in catalog order): consecutive
    groups of FACET_SIZE tools, each group's terms counted; none for more than
    :data:`MAX_FACET_TOOLS` tools.

    A child is ranked by its best facet (:class:`BM25Scorer`): a few tools that match an intent
    well are not drowned by the many others of a child, as they are in one document of all their
    terms. Tools of one service sit together in a catalog, so a group is mostly one service's.
    Larger groups were measured to route worse than whole summaries (the 100,000-tool tree, groups
    of 60 to 125 tools: docs/building.md), so a large child has no facets, and the zone holding it
    ranks whole summaries.
    """
    if len(token_lists) > MAX_FACET_TOOLS:
        return ()
    out = []
    for start in range(0, len(token_lists), FACET_SIZE):
        counts: Counter = Counter()
        for tokens in token_lists[start:start + FACET_SIZE]:
            counts.update(tokens)
        out.append(counts)
    return tuple(out)


def all_faceted(docs: Sequence[str]) -> bool:
    """Whether every one of *docs* (at least one) has facets: then :class:`FacetRanker` ranks them."""
    return bool(docs) and all(isinstance(d, Tokenized) and d.facets for d in docs)


def best_of(scored: dict[int, float], k: int, n: int) -> list[tuple[int, float]]:
    """The *k* best of *scored* (index -> score above 0), best first, ties in index order; then
    indexes below *n* scoring 0, in order, up to *k*."""
    # at most MANY_POSTINGS entries: sorting them all in C beats heapq.nsmallest's Python loop
    best = sorted([(-s, i) for i, s in scored.items()])[:k]
    out = [(i, -s) for s, i in best]
    if len(out) < k:  # scoring 0, in order
        for i in range(n):
            if i not in scored:
                out.append((i, 0.0))
                if len(out) == k:
                    break
    return out


def best_k(scores, k: int) -> list[tuple[int, float]]:
    """The *k* best of *scores* (a numpy array, one per document) as (index, score), best first, ties
    in index order: :func:`best_of` for scores numpy summed, and the hybrid scorer's ranking. Fewer
    than all are partitioned out first, not sorted whole (flat search of a million tools)."""
    import numpy as np  # only for large zones: the client's hashing embedder uses this module's tokenizer

    n = len(scores)
    if 0 < k < n:
        kept = np.flatnonzero(scores >= np.partition(scores, n - k)[n - k])  # the k-th best and above
        order = kept[np.lexsort((kept, -scores[kept]))][:k]
    else:
        order = np.argsort(-scores, kind="stable")[:k]
    return list(zip(order.tolist(), scores[order].tolist()))


class _WordLists(Store):
    """One index's ASCII word (bytes) -> the posting lists of its terms, in order: a query's lists in
    one lookup per word, its terms neither joined, split nor hashed again. A word none of whose terms
    the index holds (most words of an intent, at most zones) goes to :attr:`dead` instead, which a
    query's words are sifted through first, in C. Worked out on lookup, within :data:`WORDS` over
    all indexes. Compiled, the words are kept in :attr:`table` instead
    (:class:`~tooldns.scoring.wordtable.WordTable`), looked up from a query's octets."""

    __slots__ = ("postings", "dead", "table")

    def __init__(self, postings: dict[str, list]) -> None:
        super().__init__()
        self.postings = postings
        self.dead: set[bytes] = set()
        self.table = WordTable() if WordTable is not None else None
        WORDS.join(self)

    def clear(self) -> None:
        super().clear()
        self.dead.clear()
        if self.table is not None:
            self.table.clear()

    def found(self, word: bytes) -> tuple:
        """The posting lists of *word*'s terms that the index holds (a word not seen yet)."""
        WORDS.spend()
        return tuple(filter(None, map(self.postings.get, word_terms(word).split())))

    def __missing__(self, word: bytes) -> tuple:
        found = self.found(word)
        if found:
            self[word] = found
        else:
            self.dead.add(word)
        return found

    def of(self, words: list[bytes]) -> list[list[tuple[int, float]]]:
        """The posting lists of *words*' terms, in order."""
        return list(chain.from_iterable(map(self.__getitem__, filterfalse(self.dead.__contains__, words))))

    def of_text(self, plain: str) -> list[list[tuple[int, float]]]:
        """The posting lists of the terms of ASCII text *plain*'s words, in order."""
        if self.table is not None:
            return self.table.lists(plain.encode("ascii"), self.found)
        return self.of(ascii_words(plain))


class _Posting(list):
    """One term's postings, (document, weight) pairs by document. What many-postings sums read of it
    is kept on it once made, in slots (read on every query that holds the term: a slot is found in
    the type, where an instance attribute takes a dict lookup more): :attr:`row`, its row in its
    index's :class:`_Rows` (-1 before); :attr:`arrays`, the same pairs as numpy arrays (documents,
    weights), for an index of more than :data:`DENSE_DOCS` documents (:meth:`BM25._scores_many`);
    :attr:`packed`, its documents and weights as C ints and doubles (two bytes objects), made by
    the compiled :func:`~tooldns.scoring.sums.best_sums` when it first adds this list."""

    __slots__ = ("row", "arrays", "packed")

    def __init__(self, pairs=()) -> None:
        super().__init__(pairs)
        self.row = -1
        self.arrays: tuple | None = None
        self.packed: tuple | None = None

    def __reduce__(self):
        """Pickled as its documents and weights as C ints and doubles (:attr:`packed`, two bytes
        objects): read back, its pairs are made in two C calls rather than three pickle operations
        each (a zone's postings were four tenths of what it took to read back), and the compiled sums
        find it packed. What else queries made of it (:attr:`row`, :attr:`arrays`) belongs to the
        process that made it. Pairs that are not (int, float) are pickled as they are."""
        packed = posting_bytes(self)
        if packed is None:
            return _Posting, (list(self),)
        return packed_posting, packed

    def make_arrays(self) -> tuple:
        import numpy as np

        self.arrays = (np.array([i for i, _ in self], dtype=np.intp), np.array([w for _, w in self], dtype=np.float64))
        return self.arrays


class _Packed:
    """One term's postings read back (:meth:`_Posting.__reduce__`): kept as its documents and weights
    packed (:attr:`packed`, C ints and doubles), which the compiled sums read as they are; its
    (document, weight) pairs are made only when first iterated (a query summed by a dict, dense rows)
    and kept. Made at each load, a leaf's pairs were some 40 % of what reading it back took and of the
    objects it held (a leaf of about 650 tools: 7.9 ms and 3.4 MB, 4.9 ms and 2.0 MB packed), for the
    few terms its queries hold. Otherwise what a :class:`_Posting` is to its readers: sized, iterated,
    :attr:`row` and :attr:`arrays` kept on it."""

    __slots__ = ("packed", "row", "arrays", "_pairs")

    def __init__(self, documents: bytes, weights: bytes) -> None:
        self.packed = (documents, weights)
        self.row = -1
        self.arrays: tuple | None = None
        self._pairs: list | None = None

    def __len__(self) -> int:
        return len(self.packed[1]) // 8  # C doubles

    def __iter__(self):
        pairs = self._pairs
        if pairs is None:
            from array import array

            documents, weights = self.packed
            pairs = self._pairs = list(zip(array("i", documents).tolist(), array("d", weights).tolist()))
        return iter(pairs)

    def __eq__(self, other) -> bool:
        return isinstance(other, (list, _Packed)) and list(self) == list(other)

    __hash__ = None

    def __reduce__(self):
        return packed_posting, self.packed

    def make_arrays(self) -> tuple:
        import numpy as np

        documents, weights = self.packed
        self.arrays = (np.frombuffer(documents, dtype=np.intc).astype(np.intp), np.frombuffer(weights, dtype=np.float64))
        return self.arrays


def packed_posting(documents: bytes, weights: bytes) -> _Packed:
    """A posting list from its documents and weights as C ints and doubles (:func:`posting_bytes`),
    read where they were kept: a pickle (:meth:`_Posting.__reduce__`), a leaf's map
    (:mod:`tooldns.serving.mapped`)."""
    return _Packed(documents, weights)


def posting_bytes(posting) -> tuple[bytes, bytes] | None:
    """A posting list's documents and weights as C ints and doubles, what the compiled sums read;
    None when its pairs are not (int, float)."""
    held = getattr(posting, "packed", None)
    if held is not None:
        return held
    from array import array

    try:
        return array("i", [d for d, _ in posting]).tobytes(), array("d", [w for _, w in posting]).tobytes()
    except (TypeError, ValueError, OverflowError):
        return None


_ROW = operator.attrgetter("row")
#: held while an index makes its :class:`_Rows` (once per index)
_MAKING_ROWS = threading.Lock()


class _Rows:
    """An index's terms' weights as dense rows of all its documents, made for a term when a query
    with many postings first holds it (:meth:`BM25._scores_many`), within :data:`ROWS` over all
    indexes. A query's scores are then its rows summed in one numpy call, where adding its posting
    lists by document first joined them, two calls a list; the same sums in the same order, since
    numpy adds the rows of a column one after the other and adding 0.0 leaves a sum as it is."""

    __slots__ = ("n", "matrix", "given", "lock", "__weakref__")

    def __init__(self, n: int) -> None:
        self.n = n
        self.matrix = None  # the rows, and room for more
        self.given: list[_Posting] = []  # the postings with a row, in row order
        #: held while rows are read or made: zones whose scorer may block rank in a pool of threads,
        #: and spending the budget in one thread empties every index's rows
        self.lock = threading.Lock()
        ROWS.join(self)

    def clear(self) -> None:
        with self.lock:
            for posting in self.given:
                posting.row = -1
            self.given = []
            self.matrix = None

    def sums(self, lists: list[_Posting]):
        """The sum of *lists*' rows, in their order (a posting list twice, twice)."""
        import numpy as np

        with self.lock:
            rows = list(map(_ROW, lists))
            if -1 not in rows:
                return np.add.reduce(self.matrix.take(rows, axis=0))
        # spent outside the lock, since spending may empty every index's rows (this one's too) under theirs
        ROWS.spend(8 * self.n * rows.count(-1))
        with self.lock:
            rows = self._give(lists)
            return np.add.reduce(self.matrix.take(rows, axis=0))

    def _give(self, lists: list[_Posting]) -> list[int]:
        """Rows for *lists*' postings that have none (under :attr:`lock`); their rows."""
        import numpy as np

        for posting in lists:
            if posting.row < 0:
                at = len(self.given)
                if self.matrix is None or at == len(self.matrix):  # room for twice as many rows
                    grown = np.zeros((max(16, 2 * at), self.n))
                    if at:
                        grown[:at] = self.matrix
                    self.matrix = grown
                self.matrix[at, [i for i, _ in posting]] = [w for _, w in posting]
                posting.row = at
                self.given.append(posting)
        return list(map(_ROW, lists))


@dataclass
class CorpusStats:
    """Statistics of a whole corpus: document count, mean document length, document frequencies."""

    n_docs: int
    avgdl: float
    df: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_tokens(cls, docs: Sequence[Sequence[str]]) -> "CorpusStats":
        return cls.from_counts(Counter(toks) for toks in docs)  # one document counted at a time

    @classmethod
    def from_counts(cls, docs: Iterable[dict[str, int]]) -> "CorpusStats":
        """The statistics of documents given as term counts (read once, in one pass)."""
        df: Counter[str] = Counter()
        n = total = 0
        for counts in docs:
            df.update(counts.keys())
            total += sum(counts.values())
            n += 1
        return cls(n, (total / n) if n else 0.0, dict(df))

    def restricted(self, terms: set[str]) -> "CorpusStats":
        """The same statistics, keeping df only for *terms* (what a zone file needs to carry)."""
        return CorpusStats(self.n_docs, self.avgdl, {t: self.df[t] for t in terms if t in self.df})


#: in the mean length of counted documents (the summaries of children, as parents rank them whole; not
#: tools' texts, nor facets), a document counts at most this many times the median length: one child
#: whose published summary counts its terms thousands of times (a summary stuffed with common words,
#: docs/security.md) is then long beside the others, and its terms weigh less, instead of making every
#: other document look short and its own terms weigh as much as any
LENGTH_OUTLIER = 4


def robust_avgdl(doc_counts: Sequence[dict[str, int]]) -> float:
    """The mean length of documents given as term counts, each length capped at :data:`LENGTH_OUTLIER`
    times the median."""
    lengths = sorted(sum(c.values()) for c in doc_counts)
    if not lengths:
        return 0.0
    middle = len(lengths) // 2
    median = lengths[middle] if len(lengths) % 2 else (lengths[middle - 1] + lengths[middle]) / 2
    most = LENGTH_OUTLIER * median if median > 0 else math.inf  # half of them empty: no median to go by
    return sum(min(n, most) for n in lengths) / len(lengths)


class BM25:
    """An inverted index with precomputed per-posting weights."""

    def __init__(self, docs: Sequence[str] | None = None, *, k1: float = 1.5, b: float = 0.75,
                 stats: CorpusStats | None = None, tokenizer: Callable[[str], list[str]] = tokenize,
                 tokens: Sequence[Sequence[str]] | None = None, robust_length: bool = True) -> None:
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        self.tokenizer = tokenizer
        # each document as term counts: a Tokenized document (a summary's counted terms) is counted already
        doc_counts = ([Counter(t) for t in tokens] if tokens is not None
                      else [d.counts if isinstance(d, Tokenized) else Counter(tokenizer(d)) for d in (docs or [])])
        self.n = len(doc_counts)
        local = CorpusStats.from_counts(doc_counts)
        n_docs = stats.n_docs if stats else local.n_docs
        # counted documents (summaries of children, facets) are what a child publishes: one inflated
        # count must not set the length every other document is measured against
        counted = robust_length and docs is not None and any(isinstance(d, Tokenized) for d in docs)
        avgdl = (stats.avgdl if stats else robust_avgdl(doc_counts) if counted else local.avgdl) or 1.0
        postings: dict[str, _Posting] = {}
        get = postings.get
        for i, counts in enumerate(doc_counts):
            if i % TURN_EVERY == TURN_EVERY - 1:
                turn()  # a waiting event loop's turn (compiled, this loop would hold the lock throughout)
            dl = sum(counts.values())
            norm = k1 * (1 - b + b * dl / avgdl)
            for term, tf in counts.items():
                df = (stats.df.get(term) if stats else None) or local.df[term]
                # max(): a df carried from outside may exceed a stale N; idf must stay positive.
                idf = math.log(1 + (max(n_docs, df) - df + 0.5) / (df + 0.5))
                posting = get(term)
                if posting is None:
                    posting = postings[term] = _Posting()
                posting.append((i, idf * tf / (tf + norm)))
        self._postings = postings
        self._rows: _Rows | None = None  # for many postings, up to DENSE_DOCS documents (made when first needed)
        self._asked = 0  # queries ranked, up to WORDS_AFTER
        self._words: _WordLists | None = None  # made at the WORDS_AFTER-th query

    @classmethod
    def over(cls, postings, n: int) -> "BM25":
        """An index of *n* documents whose postings were weighed elsewhere: *postings* maps a term to
        its posting list (anything with ``get``; a leaf's map, :mod:`tooldns.serving.mapped`, reads
        them where they lie). It ranks as the index they were taken from ranked."""
        index = cls.__new__(cls)
        index.tokenizer, index.n, index._postings = tokenize, n, postings
        index._rows, index._asked, index._words = None, 0, None
        return index

    def __getstate__(self) -> dict:
        """The index as built, without what queries made of it (rows, a word table, a lock in them):
        an index read back in another process makes them again as it is asked."""
        state = self.__dict__.copy()
        state.update(_rows=None, _asked=0, _words=None)
        return state

    def scores_tokens(self, query_tokens: Sequence[str]) -> list[float]:
        scores = [0.0] * self.n
        get = self._postings.get
        for term in query_tokens:
            for i, w in get(term, ()):
                scores[i] += w
        return scores

    def scores(self, query: str) -> list[float]:
        """Score of every document for *query*, in document order."""
        return self.scores_tokens(self.tokenizer(query))

    def score_array(self, query: str):
        """:meth:`scores` as a numpy array, the same sums added in the same order, from the posting
        lists :meth:`rank` reads (the word cache's, when the index is asked often), added in C when
        compiled (:func:`~tooldns.scoring.sums.all_sums`), else by numpy when there are many: what the
        ``hybrid`` scorer fuses with cosines."""
        import numpy as np

        lists = self._lists(query)
        if all_sums is not None:  # compiled: C adds them, however many
            return all_sums(lists, np.zeros(self.n))
        if sum(map(len, lists)) > MANY_POSTINGS:
            return self._scores_many(lists)
        out = np.zeros(self.n)
        touched = self._touched(lists)
        if touched:
            out[list(touched)] = list(touched.values())
        return out

    def rank(self, query: str, k: int) -> list[tuple[int, float]]:
        """The *k* best (index, score) pairs, best first; ties keep document order.

        Only the documents a query term occurs in are summed and sorted (every posting weighs more
        than 0, so they are exactly those that score above 0, with the sums of :meth:`scores`, added
        in the same order); documents scoring 0 follow in document order. When the query's terms
        have many postings (common words in a large zone), C loops add them
        (:func:`~tooldns.scoring.sums.best_sums`), or numpy from source (:meth:`_rank_many`);
        compiled, C loops add them too in a zone of at most :data:`FEW_DOCS` documents.
        """
        lists = self._lists(query)
        if best_sums is not None and self.n <= FEW_DOCS:  # compiled, a small zone: C whatever the postings
            return best_sums(lists, self.n, k)
        if sum(map(len, lists)) > MANY_POSTINGS:
            if best_sums is not None:
                return best_sums(lists, self.n, k)
            return self._rank_many(lists, k)
        return best_of(self._touched(lists), k, self.n)

    @staticmethod
    def _touched(lists: list[list[tuple[int, float]]]) -> dict[int, float]:
        """Document -> its score, for the documents the posting *lists* touch, added in their order."""
        touched: dict[int, float] = {}
        add = touched.get
        for posting in lists:
            for i, w in posting:
                touched[i] = add(i, 0.0) + w
        return touched

    def _lists(self, query: str) -> list[list[tuple[int, float]]]:
        """The posting lists of *query*'s terms that the index holds, in the terms' order; from the
        word cache (:class:`_WordLists`) when the index is asked often and the query is ASCII but for
        separators (:func:`~tooldns.scoring.tokenize.as_ascii`)."""
        words = self._words
        if words is not None:
            plain = as_ascii(query)
            if plain is not None:
                return words.of_text(plain)
        if words is None and self.tokenizer is tokenize:
            self._asked += 1
            if self._asked >= WORDS_AFTER:
                self._words = _WordLists(self._postings)
        return list(filter(None, map(self._postings.get, self.tokenizer(query))))

    def _rank_many(self, lists: list[list[tuple[int, float]]], k: int) -> list[tuple[int, float]]:
        """:meth:`rank` over posting *lists* summed by numpy (:meth:`_scores_many`): the same sums, added
        in the same order, the same ties."""
        return best_k(self._scores_many(lists), k)

    def _scores_many(self, lists: list[list[tuple[int, float]]]):
        """Every document's score (a numpy array) from posting *lists*, added in their order: their
        dense rows summed (:class:`_Rows`) in an index of at most :data:`DENSE_DOCS` documents, else
        their postings' weights added by document (``bincount``)."""
        import numpy as np

        if self.n <= DENSE_DOCS:
            rows = self._rows
            if rows is None:
                rows = self._make_rows()
            return rows.sums(lists)
        indexes, weights = zip(*[posting.arrays or posting.make_arrays() for posting in lists])
        return np.bincount(np.concatenate(indexes), weights=np.concatenate(weights), minlength=self.n)

    def _make_rows(self) -> "_Rows":
        """This index's :class:`_Rows`, made once: two threads asking at once must not each make
        their own, or a posting given a row in one would be read in the other's matrix."""
        with _MAKING_ROWS:
            if self._rows is None:
                self._rows = _Rows(self.n)
            return self._rows


class BM25Scorer(Scorer):
    """The ``bm25`` scorer: lexical, deterministic, answers in microseconds (so cacheable)."""

    name = "bm25"

    def __init__(self, docs: Sequence[str], briefs: Sequence[str] | None = None, vectors=None, k1: float = 1.5,
                 b: float = 0.75, stats: CorpusStats | None = None, facet_k1: float = 1.5, centre: bytes = b"") -> None:
        del briefs, vectors, centre  # lexical scoring reads the full documents, and only them
        docs = list(docs)
        try:
            #: with facets on every document, what ranks them (:class:`FacetRanker`); otherwise the
            #: index of the whole documents (None with facets: a large tree's zones keep one index each)
            self.facets = FacetRanker.of(docs, k1=float(facet_k1), b=float(b))
            self.index = BM25(docs, k1=float(k1), b=float(b), stats=stats) if self.facets is None else None
        except (TypeError, ValueError) as exc:
            raise ScorerError(f"bm25: {exc}") from exc

    @classmethod
    def of_index(cls, index: BM25) -> "BM25Scorer":
        """The scorer ranking with *index* (no facets): a leaf's map (:mod:`tooldns.serving.mapped`)."""
        scorer = cls.__new__(cls)
        scorer.facets, scorer.index = None, index
        return scorer

    def postings(self) -> list[dict]:
        return [(self.facets.index if self.facets is not None else self.index)._postings]

    def rank(self, intent: str, k: int, vector=None) -> Ranking:
        if self.facets is not None:
            return Ranking(self.facets.rank(intent, k), scorer=self.name)
        return Ranking(self.index.rank(intent, k), scorer=self.name)


class FacetRanker:
    """Documents ranked by their best facet (:attr:`~tooldns.scoring.tokenize.Tokenized.facets`):
    one BM25 index over every document's facets, each facet's score its document's when it is that
    document's best. What the ``bm25`` scorer ranks a zone's children by when every child has facets
    (a zone built by ``tooldns build``, docs/building.md), and the ``hybrid`` one when an intent
    comes without a usable vector."""

    def __init__(self, docs: Sequence[Tokenized], k1: float, b: float) -> None:
        self.n = len(docs)
        # facets stand for 4 tools at most, their counts capped so (tooldns.protocol.summary): their
        # mean length is the plain mean, as tooldns build measured them with
        self.index = BM25([Tokenized(" ", facet) for d in docs for facet in d.facets], k1=k1, b=b, robust_length=False)
        #: the document each facet is of
        self.owners = [i for i, d in enumerate(docs) for _ in d.facets]
        self._numbers = owner_numbers(self.owners) if owner_numbers is not None else None  # as best_sums reads them
        self._starts = None

    @classmethod
    def of(cls, docs: Sequence[str], k1: float = 1.5, b: float = 0.75) -> "FacetRanker | None":
        """The ranker of *docs* when every one has facets; None otherwise (a delegation written without
        them, or a learned summary of a zone with too many tools beneath it to publish any: the zone
        then ranks whole documents)."""
        return cls(docs, k1, b) if all_faceted(docs) else None

    def score_array(self, intent: str):
        """Every document's best facet score, in document order (a numpy array): what the ``hybrid``
        scorer fuses with cosines."""
        import numpy as np

        if all_sums is not None:  # compiled: C adds the facets' postings and takes each document's best
            return all_sums(self.index._lists(intent), np.zeros(self.n), self._numbers)
        scores = np.zeros(self.n)
        for i, score in self.rank(intent, self.n):
            scores[i] = score
        return scores

    def rank(self, intent: str, k: int) -> list[tuple[int, float]]:
        """The *k* best documents by their best facet's score, ties and documents scoring 0 in
        document order (as :meth:`BM25.rank`)."""
        index, owners = self.index, self.owners
        lists = index._lists(intent)
        if best_sums is not None and index.n <= FEW_FACETS:  # compiled: C, however many the postings
            return best_sums(lists, index.n, k, self._numbers)
        many = sum(map(len, lists)) > MANY_POSTINGS
        if best_sums is not None and many:
            return best_sums(lists, index.n, k, self._numbers)
        if many:
            import numpy as np

            if self._starts is None:  # where each document's facets start: they come document by document
                self._starts = np.array([i for i, o in enumerate(owners) if i == 0 or owners[i - 1] != o], dtype=np.intp)
            return best_k(np.maximum.reduceat(index._scores_many(lists), self._starts), k)
        top: dict[int, float] = {}
        for i, score in index._touched(lists).items():
            owner = owners[i]
            if score > top.get(owner, 0.0):
                top[owner] = score
        return best_of(top, k, self.n)
