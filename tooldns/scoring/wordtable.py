"""An index's words and their posting lists, looked up from an intent's octets in C.

:class:`tooldns.scoring.bm25.BM25` keeps, per index asked often, each ASCII word of the intents it
was asked and the posting lists of that word's terms (none for most words: a zone's vocabulary is
small). From source that is a dict and a set, and an intent is first split into words (new bytes
objects, each hashed): at ToolRet's root some 35 words a query, 56,000 instructions, more than the
sums. Here the words are found in the intent's octets, hashed (FNV-1a) and looked up in an open-
addressing table in C: only a word never seen becomes a Python object, given to a Python function
(the index's rule: its terms' posting lists, within the shared word budget) and kept.

This module runs compiled only (``setup.py`` compiles it with the others, :mod:`tooldns.compiled`);
imported from its source it raises ImportError, and :mod:`tooldns.scoring.bm25` keeps its dict.
"""

from __future__ import annotations

import cython

if not cython.compiled:
    raise ImportError("tooldns.scoring.wordtable runs compiled only (pip install -e . with Cython and a C compiler)")

from cython.cimports.libc.stdlib import free, malloc  # noqa: E402
from cython.cimports.libc.string import memcmp  # noqa: E402

#: slots of a new table; it doubles when half full
FIRST_SLOTS = 64
#: FNV-1a, 64 bits: a word's hash, octet by octet (wrapping C arithmetic)
_FNV_OFFSET = cython.declare(cython.ulonglong, 0xCBF29CE484222325)
_FNV_PRIME = cython.declare(cython.ulonglong, 0x100000001B3)


# C types by decorators, not annotations: setup.py blanks annotations before compiling (tooldns.compiled)
@cython.cfunc
@cython.inline
@cython.returns(cython.bint)
@cython.locals(c=cython.uchar)
def _word_octet(c):
    """Whether octet *c* is part of a word: an ASCII letter or digit (as tokenize.ascii_words splits)."""
    return (48 <= c <= 57) or (65 <= c <= 90) or (97 <= c <= 122)


@cython.cclass
class WordTable:
    """ASCII word -> the tuple of posting lists of its terms (empty for a word the index holds none
    of), filled on lookup by a Python function; :meth:`clear` forgets every word."""

    slots = cython.declare(cython.p_int)  # an entry's number, -1 for an empty slot
    hashes = cython.declare(cython.p_ulonglong)  # each slot's word's hash
    mask = cython.declare(cython.Py_ssize_t)  # slots - 1 (a power of two)
    words = cython.declare(list)  # entry -> the word (bytes)
    values = cython.declare(list)  # entry -> its posting lists (a tuple)

    def __cinit__(self):
        self.slots = cython.NULL
        self.hashes = cython.NULL
        self._allocate(FIRST_SLOTS)

    def __dealloc__(self):
        free(self.slots)
        free(self.hashes)

    @cython.cfunc
    @cython.returns(cython.int)
    @cython.locals(size=cython.Py_ssize_t, i=cython.Py_ssize_t, slots=cython.p_int, hashes=cython.p_ulonglong)
    def _allocate(self, size):
        slots = cython.cast(cython.p_int, malloc(size * cython.sizeof(cython.int)))
        hashes = cython.cast(cython.p_ulonglong, malloc(size * cython.sizeof(cython.ulonglong)))
        if slots == cython.NULL or hashes == cython.NULL:
            free(slots)
            free(hashes)
            raise MemoryError()
        for i in range(size):
            slots[i] = -1
        free(self.slots)
        free(self.hashes)
        self.slots, self.hashes, self.mask = slots, hashes, size - 1
        self.words, self.values = [], []
        return 0

    def clear(self) -> None:
        """Forget every word (what the shared word budget asks when spent)."""
        self._allocate(FIRST_SLOTS)

    def __len__(self) -> int:
        return len(self.words)

    @cython.cfunc
    @cython.returns(cython.int)
    @cython.locals(h=cython.ulonglong, slot=cython.Py_ssize_t, entry=cython.int, i=cython.Py_ssize_t,
                   old=list, hashes=list, word=bytes, value=tuple)
    def _insert(self, h, word, value):
        """Keep *word* (hashed *h*) -> *value*, doubling the table when half full; nothing if kept already."""
        if 2 * (len(self.words) + 1) > self.mask + 1:
            old = self.words
            olds = self.values
            hashes = [self.hashes[slot] for slot in range(self.mask + 1) if self.slots[slot] >= 0]
            entries = [self.slots[slot] for slot in range(self.mask + 1) if self.slots[slot] >= 0]
            self._allocate(2 * (self.mask + 1))
            for i in range(len(entries)):
                self._place(hashes[i], old[entries[i]], olds[entries[i]])
        return self._place(h, word, value)

    @cython.cfunc
    @cython.returns(cython.int)
    @cython.locals(h=cython.ulonglong, slot=cython.Py_ssize_t, entry=cython.int, kept=bytes, word=bytes, value=tuple)
    def _place(self, h, word, value):
        slot = h & self.mask
        while True:
            entry = self.slots[slot]
            if entry < 0:
                break
            if self.hashes[slot] == h:
                kept = self.words[entry]
                if kept == word:
                    return 0
            slot = (slot + 1) & self.mask
        self.slots[slot] = len(self.words)
        self.hashes[slot] = h
        self.words.append(word)
        self.values.append(value)
        return 0

    @cython.boundscheck(False)
    @cython.wraparound(False)
    @cython.locals(text=bytes, p=cython.p_uchar, n=cython.Py_ssize_t, i=cython.Py_ssize_t, start=cython.Py_ssize_t,
                   length=cython.Py_ssize_t, h=cython.ulonglong, slot=cython.Py_ssize_t, entry=cython.int,
                   kept=bytes, value=tuple, out=list)
    def lists(self, text, found) -> list:
        """The posting lists of the words of ASCII *text* (bytes), in order, each word's in its
        terms' order: what ``[lists for word in ascii_words(text) for lists in table[word]]`` would
        be, with a word not kept yet worked out by ``found(word)`` (a tuple of posting lists) and kept."""
        if type(text) is not bytes:
            raise TypeError("lists() reads bytes")
        out = []
        p = cython.cast(cython.p_uchar, cython.cast(cython.p_char, text))
        n = len(text)
        i = 0
        while i < n:
            while i < n and not _word_octet(p[i]):
                i += 1
            if i == n:
                break
            start = i
            h = _FNV_OFFSET
            while i < n and _word_octet(p[i]):
                h = (h ^ p[i]) * _FNV_PRIME
                i += 1
            length = i - start
            value = None
            slot = h & self.mask
            while True:
                entry = self.slots[slot]
                if entry < 0:
                    break
                if self.hashes[slot] == h:
                    kept = self.words[entry]
                    if len(kept) == length and memcmp(cython.cast(cython.p_char, kept), p + start, length) == 0:
                        value = self.values[entry]
                        break
                slot = (slot + 1) & self.mask
            if value is None:  # a word never seen: Python works it out (it may run other threads, or clear this table)
                word = text[start:i]
                value = found(word)
                if type(value) is not tuple:
                    raise TypeError("found(word) must give a tuple of posting lists")
                self._insert(h, word, value)
            if value:
                out.extend(value)
        return out
