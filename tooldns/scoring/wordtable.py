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
    raise ImportError("tooldns.scoring.wordtable runs compiled only (TOOLDNS_COMPILE=1 pip install -e .)")

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


@cython.cfunc
@cython.returns(cython.int)
@cython.exceptval(-1)
@cython.locals(slots=cython.p_void, hashes=cython.p_void)
def _both(slots, hashes):
    """MemoryError, both freed, unless both arrays were allocated."""
    if slots == cython.NULL or hashes == cython.NULL:
        free(slots)
        free(hashes)
        raise MemoryError()
    return 0


@cython.cclass
class WordTable:
    """ASCII word -> the tuple of posting lists of its terms (empty for a word the index holds none
    of), filled on lookup by a Python function; :meth:`clear` forgets every word.

    Python code may run inside any allocation of a Python object (a garbage collection, and the
    finalizers and weakref callbacks it calls), and so may another thread given the interpreter
    there: it may look words up, keep one, or empty this table. So a new entry's tuple is made
    before the table is read, then appended and given its slot with nothing allocated in between,
    and a new table's list is made before any field of the table changes."""

    slots = cython.declare(cython.p_int)  # an entry's number, -1 for an empty slot
    hashes = cython.declare(cython.p_ulonglong)  # each slot's word's hash
    mask = cython.declare(cython.Py_ssize_t)  # slots - 1 (a power of two)
    entries = cython.declare(list)  # entry -> (the word as bytes, its posting lists as a tuple)

    def __cinit__(self):
        self.slots = cython.NULL
        self.hashes = cython.NULL
        self._allocate(FIRST_SLOTS)

    def __dealloc__(self):
        free(self.slots)
        free(self.hashes)

    def __reduce__(self):
        return (WordTable, ())  # a copy starts empty: what it keeps is worked out again on lookup

    @cython.cfunc
    @cython.returns(cython.int)
    @cython.exceptval(-1)
    @cython.locals(size=cython.Py_ssize_t, i=cython.Py_ssize_t, slots=cython.p_int, hashes=cython.p_ulonglong,
                   fresh=list)
    def _allocate(self, size):
        """An empty table of *size* slots in place of this one."""
        fresh = []  # first: Python code may run here, and finds the table as it was
        slots = cython.cast(cython.p_int, malloc(size * cython.sizeof(cython.int)))
        hashes = cython.cast(cython.p_ulonglong, malloc(size * cython.sizeof(cython.ulonglong)))
        _both(slots, hashes)
        for i in range(size):
            slots[i] = -1
        free(self.slots)
        free(self.hashes)
        self.slots, self.hashes, self.mask, self.entries = slots, hashes, size - 1, fresh
        return 0

    def clear(self) -> None:
        """Forget every word (what the shared word budget asks when spent)."""
        self._allocate(FIRST_SLOTS)

    def __len__(self) -> int:
        return len(self.entries)

    @cython.cfunc
    @cython.returns(cython.int)
    @cython.exceptval(-1)
    @cython.locals(h=cython.ulonglong, pair=tuple)
    def _insert(self, h, word, value):
        """Keep *word* (hashed *h*) -> *value*, doubling the table when half full; nothing if kept already."""
        pair = (word, value)  # first: Python code may run here
        if 2 * (len(self.entries) + 1) > self.mask + 1:
            self._grow()
        self.entries.append(pair)  # a list's growth runs no Python code
        return self._set(h, len(self.entries) - 1)

    @cython.cfunc
    @cython.returns(cython.int)
    @cython.exceptval(-1)
    @cython.locals(size=cython.Py_ssize_t, slot=cython.Py_ssize_t, count=cython.Py_ssize_t, i=cython.Py_ssize_t,
                   old=list, kept=cython.p_int, kept_hashes=cython.p_ulonglong)
    def _grow(self):
        """The table at twice its slots, its entries in their new places."""
        size = self.mask + 1
        old = self.entries
        kept = cython.cast(cython.p_int, malloc(size * cython.sizeof(cython.int)))
        kept_hashes = cython.cast(cython.p_ulonglong, malloc(size * cython.sizeof(cython.ulonglong)))
        _both(kept, kept_hashes)
        count = 0
        for slot in range(size):  # the entries and their hashes as they are now, in C
            if self.slots[slot] >= 0:
                kept[count] = self.slots[slot]
                kept_hashes[count] = self.hashes[slot]
                count += 1
        try:
            self._allocate(2 * size)  # Python code may run in there, on the table as it was
            for i in range(count):
                if kept[i] < len(old):
                    self.entries.append(old[kept[i]])
                    self._set(kept_hashes[i], len(self.entries) - 1)
        finally:
            free(kept)
            free(kept_hashes)
        return 0

    @cython.cfunc
    @cython.returns(cython.int)
    @cython.exceptval(-1)
    @cython.locals(h=cython.ulonglong, entry=cython.Py_ssize_t, slot=cython.Py_ssize_t, other=cython.int,
                   word=bytes)
    def _set(self, h, entry):
        """Give entry *entry* (hashed *h*) a slot, unless its word has one already (kept meanwhile)."""
        word = self.entries[entry][0]
        slot = h & self.mask
        while True:
            other = self.slots[slot]
            if other < 0:
                break
            if self.hashes[slot] == h and other < len(self.entries) and self.entries[other][0] == word:
                return 0
            slot = (slot + 1) & self.mask
        self.slots[slot] = entry
        self.hashes[slot] = h
        return 0

    @cython.boundscheck(False)
    @cython.wraparound(False)
    @cython.locals(text=bytes, p=cython.p_uchar, n=cython.Py_ssize_t, i=cython.Py_ssize_t, start=cython.Py_ssize_t,
                   length=cython.Py_ssize_t, h=cython.ulonglong, slot=cython.Py_ssize_t, entry=cython.int,
                   kept=bytes, value=tuple, out=list, pair=tuple)
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
                if self.hashes[slot] == h and entry < len(self.entries):
                    pair = self.entries[entry]
                    kept = pair[0]
                    if len(kept) == length and memcmp(cython.cast(cython.p_char, kept), p + start, length) == 0:
                        value = pair[1]
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
