"""Tokenization shared by every lexical scorer, the catalog builder and the benchmarks.

English (and other space-separated scripts): lower-cased alphanumeric words, camelCase and
snake_case split (`getWeatherForecast` -> get weather forecast), a short stop-word list removed,
and a light plural/suffix folding so that "forecasts" meets "forecast".
Chinese, Japanese and Korean: every character and every overlapping character bigram, which
needs no dictionary (flat BM25 hit rate@10 on ToolRet's Chinese catalog: 72.8 %; bigrams alone
70.2 %; whitespace splitting 1.6 %). Runs of CJK and of other letters are split apart
("MP3文件" is "mp3" + "文件"). Both scripts may appear in one text.

    >>> tokenize("getHistoricalWeather for Hong Kong")
    ['get', 'historical', 'weather', 'hong', 'kong']
    >>> tokenize("天气预报")
    ['天', '气', '预', '报', '天气', '气预', '预报']
"""

from __future__ import annotations

import re
from functools import lru_cache

STOPWORDS = frozenset("""
a an and are as at be but by can do for from has have how i if in into is it its me my of on or
our please should so some that the their them then there these this those to us want was we what
when where which who will with would you your
""".split())

_CJK = (r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff")
# A run of CJK characters, or a run of other letters and digits: "MP3文件" is "mp3" + "文件".
_TOKEN_RE = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+", re.UNICODE)
_CJK_RE = re.compile(rf"[{_CJK}]")
#: a character outside ASCII that no word holds (typographic quotes and dashes, ellipses, non-breaking
#: spaces...): what ``_TOKEN_RE`` splits on there, checked over every code point in the tests
_NON_ASCII_SEPARATOR = re.compile(rf"[^\x00-\x7f\w{_CJK}]")
_CAMEL_RE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def _fold(word: str) -> str:
    """Fold a few English inflections; deliberately conservative (no dictionary)."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


@lru_cache(maxsize=65536)
def _word_tokens(word: str) -> tuple[str, ...]:
    if _CJK_RE.match(word):
        return tuple(word) + tuple(word[i:i + 2] for i in range(len(word) - 1))
    out = []
    for part in _CAMEL_RE.sub(" ", word).split():
        term = _term(part.lower())
        if term:
            out.append(term)
    return tuple(out)


def _term(word: str) -> str:
    """The term of a lower-case word, folded; "" for a stop word."""
    return "" if word in STOPWORDS else _fold(word)


#: ASCII text splits into words without the regular expression: every octet but a letter or digit
#: becomes a space (the same words as ``_TOKEN_RE``, which matches runs of letters and digits there)
_NOT_ALNUM = bytes(c for c in range(256) if not (c < 128 and chr(c).isalnum()))
_ASCII_SPACES = bytes.maketrans(_NOT_ALNUM, b" " * len(_NOT_ALNUM))
class _WordTerms(dict):
    """ASCII word -> its terms joined by spaces; a word not seen yet is worked out on lookup and kept
    (up to 65,536 words, then all are forgotten), so that a text's words are looked up all at once,
    in C, and joined and split again in C."""

    def __missing__(self, word: bytes) -> str:
        if len(self) >= 65536:
            self.clear()
        text = word.decode("ascii")
        if word.lower() == word:  # no capital, so nothing to split: one term, or none (most words never seen)
            terms = _term(text)
        else:
            terms = " ".join(_word_tokens(text))
        self[word] = terms
        return terms


_ASCII_WORDS = _WordTerms()
#: an ASCII word (bytes, from :func:`ascii_words`) -> its index terms joined by spaces ("" for a stop word)
word_terms = _ASCII_WORDS.__getitem__


def ascii_words(text: str) -> list[bytes]:
    """The words of ASCII *text*, as bytes: what :func:`tokenize` makes terms of, one word at a time
    (a scorer may keep what it works out per word: :class:`tooldns.scoring.bm25.BM25`)."""
    return text.encode("ascii").translate(_ASCII_SPACES).split()


def as_ascii(text: str) -> str | None:
    """*text* with each character outside ASCII that separates words (a typographic apostrophe or
    quote, a dash, an ellipsis, a non-breaking space) as a space, when that leaves it ASCII; None
    when a letter or digit outside ASCII remains. Its words are *text*'s, found the ASCII way: an
    intent written by a model ("I’d like…") is split as cheaply as one in plain ASCII.

        >>> as_ascii("Here’s “September”")
        'Here s  September '
    """
    if text.isascii():
        return text
    spaced = _NON_ASCII_SEPARATOR.sub(" ", text)
    return spaced if spaced.isascii() else None


def tokenize(text: str) -> list[str]:
    """Split *text* into index terms."""
    plain = as_ascii(text)
    if plain is not None:  # most intents: a server tokenizes every one it is sent
        return " ".join(map(word_terms, ascii_words(plain))).split()
    tokens: list[str] = []
    for word in _TOKEN_RE.findall(text):
        tokens += _word_tokens(word)
    return tokens


class Tokenized(str):
    """Text whose index terms are known already, counted (a child's published summary, or a zone
    file's ``corpus_terms``, carries its terms and their counts, not its text): scorers that
    tokenize use :attr:`counts`; others read the text. :attr:`facets`, when a delegation carries
    them, are the same terms in a few groups of tools (``facets`` in zone files), which the ``bm25``
    scorer ranks a child by, its best group (:class:`tooldns.scoring.bm25.BM25Scorer`)."""

    counts: dict[str, int]
    facets: tuple[dict[str, int], ...]

    def __new__(cls, text: str, counts: dict[str, int], facets: tuple[dict[str, int], ...] = ()) -> "Tokenized":
        obj = super().__new__(cls, text)
        obj.counts = counts
        obj.facets = facets
        return obj
