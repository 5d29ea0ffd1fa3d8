"""Referrals and answers written whole in C: the compiled twins of :class:`~.pack.PackedZone`'s writers.

A referral's candidates are packed once (:mod:`.pack`): each one's NS records, and what follows its
ranking TXT record's score string (the strings, the glue), as a block whose compression pointers
point at offsets within the block, or at the zone's name (:attr:`~.pack._Candidate.wire`). Written
at offset *at* of a reply whose zone name stands at *zone*, each pointer moves by *at* or by *zone*:
a copy and a few additions (:func:`_move`). :func:`referral` writes a whole referral so, and
:func:`answer` a leaf's answer: every candidate's NS records, then its ranking TXT record (rank and
score strings between its packed pieces) and glue, the scores formatted as ``b"score=%.4f"``
formats them: below 2^49 by exact integer arithmetic (:func:`_fixed4`, about a quarter of what
CPython's ``PyOS_double_to_string`` costs), above by that function. Each returns None, with
nothing written, for what it does not write (a score string that would not fit, a block beyond a
pointer's reach): the Python writer (:meth:`~.pack.PackedZone._packed_referral`,
:meth:`~.pack.PackedZone._packed_answer`), the reference both are held to byte for byte
(``tests/test_blocks.py``), then writes it.

This module runs compiled only (``setup.py`` compiles it with the others, :mod:`tooldns.compiled`);
imported from its source it raises ImportError, and :mod:`.path`, which alone chooses, gives
:class:`~.pack.PackedZone` no compiled writers.
"""

from __future__ import annotations

import cython

if not cython.compiled:
    raise ImportError("tooldns.serving.fast.cpack runs compiled only (TOOLDNS_COMPILE=1 pip install -e .)")

from cython.cimports.cpython.bytearray import PyByteArray_AS_STRING, PyByteArray_Resize  # noqa: E402
from cython.cimports.cpython.conversion import PyOS_double_to_string  # noqa: E402
from cython.cimports.cpython.mem import PyMem_Free  # noqa: E402
from cython.cimports.libc.string import memcpy, memset, strlen  # noqa: E402

#: the last offset a compression pointer can reach (14 bits)
MAX_POINTER = cython.declare(cython.Py_ssize_t, 0x3FFF)


@cython.cfunc
@cython.returns(cython.int)
@cython.exceptval(-1)
@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(base=cython.p_uchar, size=cython.Py_ssize_t, moves=bytes, by=cython.long, count=cython.Py_ssize_t,
               j=cython.Py_ssize_t, field=cython.Py_ssize_t, value=cython.long, fields=cython.p_ushort)
def _move(base, size, moves, by):
    """Add *by* to each 16-bit field (big-endian) of the block of *size* octets at *base* whose offset
    *moves* lists (:func:`~.pack._offsets`); ValueError for a field beyond the block or one that would carry."""
    count = len(moves) // 2
    fields = cython.cast(cython.p_ushort, cython.cast(cython.p_char, moves))
    for j in range(count):
        field = fields[j]
        if field + 2 > size:
            raise ValueError(f"a field at {field} of a block of {size} octets")
        value = (base[field] << 8 | base[field + 1]) + by
        if value > 0xFFFF:
            raise ValueError(f"a pointer moved by {by} carries out of its field at {field}")
        base[field] = value >> 8
        base[field + 1] = value & 0xFF
    return 0


#: scores below this (2^49) in magnitude are written by :func:`_fixed4`; larger ones, infinities and
#: NaN by CPython's ``PyOS_double_to_string``
FIXED4_BELOW = cython.declare(cython.double, 562949953421312.0)
#: a double's 52 fraction bits, and its mantissa's implicit leading one
_FRACTION = cython.declare(cython.ulonglong, (1 << 52) - 1)
_LEADING = cython.declare(cython.ulonglong, 1 << 52)


@cython.cfunc
@cython.returns(cython.Py_ssize_t)
@cython.exceptval(check=False)
@cython.locals(score=cython.double, out=cython.p_char, bits=cython.ulonglong, mantissa=cython.ulonglong,
               shift=cython.longlong, product=cython.ulonglong, q=cython.ulonglong, rest=cython.ulonglong,
               half=cython.ulonglong, whole=cython.ulonglong, n=cython.Py_ssize_t, i=cython.Py_ssize_t,
               digits=cython.char[24])
def _fixed4(score, out):
    """Write ``"%.4f" % score`` at *out* (room for 24 octets) and return its length, or -1 for a
    score of 2^49 or more in magnitude (or not finite), which CPython's formatter then writes.

    The score is exactly ``mantissa * 2**-shift``; its value times 10^4 rounded half to even, what a
    correctly rounded ``%.4f`` prints, is ``mantissa * 625`` (under 2^63) shifted right by
    ``shift - 4`` with the bits shifted out deciding the rounding: no floating-point step at all."""
    if not (score < FIXED4_BELOW and score > -FIXED4_BELOW):
        return -1
    memcpy(cython.address(bits), cython.address(score), 8)
    if (bits >> 52) & 0x7FF:
        mantissa = (bits & _FRACTION) | _LEADING
        shift = 1075 - cython.cast(cython.longlong, (bits >> 52) & 0x7FF) - 4  # >= 0 below 2^49
    else:  # zero or subnormal: far below 0.00005
        mantissa = bits & _FRACTION
        shift = 1074 - 4
    product = mantissa * 625
    if shift == 0:
        q = product
    elif shift >= 64:
        q = 0  # under 2^63 shifted by 64 or more: less than half
    else:
        q = product >> shift
        rest = product & ((cython.cast(cython.ulonglong, 1) << shift) - 1)
        half = cython.cast(cython.ulonglong, 1) << (shift - 1)
        if rest > half or (rest == half and (q & 1)):
            q += 1
    n = 0
    if bits >> 63:
        out[0] = 45  # "-", as %.4f writes for -0.0 and for a negative score that rounds to 0 too
        n = 1
    whole = q // 10000
    i = 0
    while True:
        digits[i] = 48 + cython.cast(cython.int, whole % 10)
        whole //= 10
        i += 1
        if whole == 0:
            break
    while i > 0:
        i -= 1
        out[n] = digits[i]
        n += 1
    out[n] = 46  # "."
    q %= 10000
    out[n + 1] = 48 + cython.cast(cython.int, q // 1000)
    out[n + 2] = 48 + cython.cast(cython.int, q // 100 % 10)
    out[n + 3] = 48 + cython.cast(cython.int, q // 10 % 10)
    out[n + 4] = 48 + cython.cast(cython.int, q % 10)
    return n + 5


def fixed4(score) -> bytes:
    """``b"%.4f" % score``, as a ranking's score strings are written (:func:`_score`); for tests."""
    return _score((None, score))


@cython.cfunc
@cython.locals(score=cython.double, text=cython.p_char, buffer=cython.char[24], n=cython.Py_ssize_t)
def _score(item) -> bytes:
    """``b"%.4f" % item[1]``: the number of a ranking's score string (its chosen pair's score)."""
    score = item[1]
    n = _fixed4(score, cython.address(buffer[0]))
    if n >= 0:
        return buffer[:n]
    text = PyOS_double_to_string(score, b'f', 4, 0, cython.NULL)
    try:
        return text[:strlen(text)]
    finally:
        PyMem_Free(text)


@cython.cfunc
def _scores(chosen: list) -> list:
    """The numbers of the score strings of *chosen* (:func:`_score`); None when one is not a number
    (no score: no intent) or its string would not fit a TXT string's 255 octets."""
    scores = []
    for item in chosen:
        if item[1] is None:
            return None
        number = _score(item)
        if len(number) + 6 > 255:
            return None
        scores.append(number)
    return scores


@cython.cfunc
@cython.returns(cython.Py_ssize_t)
@cython.exceptval(-1)
@cython.locals(base=cython.p_uchar, at=cython.Py_ssize_t, owner=cython.Py_ssize_t, head=bytes, number=bytes,
               rest=bytes, strings=cython.Py_ssize_t, rdlength=cython.Py_ssize_t)
def _txt(base, at, owner, head, number, rest, strings):
    """Write at *base* + *at* a ranking TXT record after its owner (a pointer to *owner*, or none when
    *owner* is -1: written already): type, class IN, TTL 0 (a ranking depends on the intent), RDATA
    length, then *head* (format and rank strings), the score string of *number*, then *rest*, whose
    first *strings* octets are the record's last strings (a referral's glue follows them); where it ends."""
    rdlength = len(head) + 7 + len(number) + strings
    if strings < 0 or strings > len(rest) or rdlength > 0xFFFF:
        raise ValueError(f"a ranking TXT record of {rdlength} octets, {strings} of {len(rest)} after its score")
    if owner >= 0:
        if owner > MAX_POINTER:
            raise ValueError(f"a TXT owner at {owner}: beyond a pointer's reach")
        base[at] = 0xC0 | owner >> 8
        base[at + 1] = owner & 0xFF
        at += 2
    base[at] = 0
    base[at + 1] = 16  # TXT
    base[at + 2] = 0
    base[at + 3] = 1  # IN
    memset(base + at + 4, 0, 4)
    base[at + 8] = rdlength >> 8
    base[at + 9] = rdlength & 0xFF
    at += 10
    memcpy(base + at, cython.cast(cython.p_char, head), len(head))
    at += len(head)
    base[at] = 6 + len(number)
    memcpy(base + at + 1, b"score=", 6)
    memcpy(base + at + 7, cython.cast(cython.p_char, number), len(number))
    at += 7 + len(number)
    memcpy(base + at, cython.cast(cython.p_char, rest), len(rest))
    return at + len(rest)


@cython.cfunc
def _checked(out, wires, chosen, heads, size: cython.Py_ssize_t) -> tuple:
    """*wires*, *chosen* and *heads* typed, once checked as a referral or answer reads them."""
    if type(out) is not bytearray or type(wires) is not list or type(chosen) is not list or type(heads) is not list:
        raise TypeError("a bytearray to write to, then lists of wires, chosen pairs and rank heads")
    n = len(wires)
    if n == 0 or n != len(chosen) or n >= len(heads) or n > 255:
        raise ValueError(f"{n} candidates, {len(chosen)} scores, {len(heads)} rank heads")
    for wire in wires:
        if type(wire) is not tuple or len(wire) < size:
            raise ValueError(f"a wire is a tuple of {size} items")
    return wires, chosen, heads


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(n=cython.Py_ssize_t, r=cython.Py_ssize_t, start=cython.Py_ssize_t, total=cython.Py_ssize_t,
               reach=cython.Py_ssize_t, at=cython.Py_ssize_t, zone=cython.Py_ssize_t, owner=cython.Py_ssize_t,
               base=cython.p_uchar, block=bytes, wire=tuple, first_=tuple, wires_=list, chosen_=list, heads_=list,
               places=cython.Py_ssize_t[256], scores=list)
def referral(out, first, wires, chosen, heads):
    """Append to the bytearray *out* (a reply up to its question) a referral's records: authority, the
    chosen candidates' NS records; additional, per candidate its ranking TXT record and glue. The bytes
    :meth:`~.pack.PackedZone._packed_referral` writes.

    *first*: the first candidate as packed after this question (:meth:`~.pack._Candidate.first`:
    block, the zone name's offset, the TXT owner's offset, what follows its score string); *wires*:
    every candidate's :attr:`~.pack._Candidate.wire`; *chosen*: the (entry, score) pairs in rank
    order; *heads*: the format and rank strings by rank. Returns the answer, authority and additional
    counts, or None, with nothing written, when a block would lie beyond a pointer's reach or a score
    string would not fit; ValueError, with *out* as it was, for pieces that do not hold together."""
    wires_, chosen_, heads_ = _checked(out, wires, chosen, heads, 10)
    first_ = first
    n, start, zone = len(wires_), len(out), first_[1]
    scores = _scores(chosen_)
    if scores is None:
        return None
    reach = start + len(first_[0])
    total = len(first_[0]) + len(first_[3])
    for r in range(n):
        wire = wires_[r]
        reach += len(wire[0])
        total += 12 + len(heads_[r + 1]) + 7 + len(scores[r])
        if r:
            total += len(wire[0]) + len(wire[5])
    if reach > MAX_POINTER:
        return None
    PyByteArray_Resize(out, start + total)
    base = cython.cast(cython.p_uchar, PyByteArray_AS_STRING(out))
    at = start
    try:
        for r in range(n):  # authority: each candidate's block, where it falls
            wire = wires_[r]
            block = first_[0] if r == 0 else wire[0]
            places[r] = at
            memcpy(base + at, cython.cast(cython.p_char, block), len(block))
            if r:
                _move(base + at, len(block), wire[1], at)
                _move(base + at, len(block), wire[2], zone)
            at += len(block)
        for r in range(n):  # additional: each one's ranking TXT record, then its glue
            wire = wires_[r]
            owner = first_[2] if r == 0 else zone if wire[3] < 0 else places[r] + wire[3]
            block = first_[3] if r == 0 else wire[5]
            at = _txt(base, at, owner, heads_[r + 1], scores[r], block, wire[4])
            if r:
                _move(base + at - len(block), len(block), wire[6], places[r])
                _move(base + at - len(block), len(block), wire[7], zone)
    except BaseException:
        del out[start:]
        raise
    return 0, _count(wires_, 8), _count(wires_, 9)


@cython.cfunc
@cython.locals(wires=list, which=cython.Py_ssize_t, r=cython.Py_ssize_t, total=cython.Py_ssize_t, wire=tuple)
def _count(wires, which):
    """The sum of item *which* of each of *wires* (a referral's NS or additional records' counts)."""
    total = 0
    for r in range(len(wires)):
        wire = wires[r]
        total += cython.cast(cython.Py_ssize_t, wire[which])
    return total


@cython.cfunc
@cython.returns(cython.Py_ssize_t)
@cython.exceptval(-1)
@cython.locals(base=cython.p_uchar, at=cython.Py_ssize_t, chain=tuple, tail=bytes, written=cython.p_Py_ssize_t,
               which=cython.Py_ssize_t, label=bytes, j=cython.Py_ssize_t)
def _shared(base, at, chain, tail, written):
    """Write at *base* + *at* the labels of a TXT owner that other tools' owners end with too (*chain*:
    numbered labels), a pointer to where an earlier one wrote the first it did (*written*: per number,
    where, or -1), else they and *tail*; where the name ends."""
    for j in range(len(chain)):
        which = chain[j][0]
        label = chain[j][1]
        if which < 0 or which > 255:
            raise ValueError(f"a shared suffix numbered {which}")
        if written[which] >= 0:
            base[at] = 0xC0 | written[which] >> 8
            base[at + 1] = written[which] & 0xFF
            return at + 2
        if at <= MAX_POINTER:
            written[which] = at
        memcpy(base + at, cython.cast(cython.p_char, label), len(label))
        at += len(label)
    memcpy(base + at, cython.cast(cython.p_char, tail), len(tail))
    return at + len(tail)


@cython.cfunc
@cython.returns(cython.Py_ssize_t)
@cython.exceptval(-1)
@cython.locals(chain=tuple, j=cython.Py_ssize_t, size=cython.Py_ssize_t, link=tuple, label=bytes)
def _labels(chain):
    """The octets of the numbered labels of *chain*, all written (:func:`_shared`)."""
    size = 0
    for j in range(len(chain)):
        link = chain[j]
        label = link[1]
        size += len(label)
    return size


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(n=cython.Py_ssize_t, r=cython.Py_ssize_t, j=cython.Py_ssize_t, start=cython.Py_ssize_t,
               total=cython.Py_ssize_t, at=cython.Py_ssize_t, base=cython.p_uchar, owner_=bytes, srv=bytes,
               srv_head=bytes, prefix=bytes, rest=bytes, wire=tuple, wires_=list, chosen_=list, heads_=list, short=cython.bint, scores=list,
               written=cython.Py_ssize_t[256])
def answer(out, owner, wires, chosen, heads, brief):
    """Append to the bytearray *out* (a reply up to its answer's head: the CNAME from a cursor name, if
    any, and the first SRV record's owner) an answer's records: the chosen tools' SRV records (each
    after the first after *owner*, the pointer to the first's owner; priority its rank), then each
    tool's ranking TXT record. The bytes :meth:`~.pack.PackedZone._packed_answer` writes.

    *wires*: the tools' (:meth:`~.pack.PackedZone._tool_wires`: SRV type, class,
    TTL and RDATA length; weight, port and target; the TXT owner's own labels, its labels shared with
    other tools' owners, numbered below 256, and its end; the TXT strings after the score string, whole
    and *brief*); *chosen*: the (tool, score) pairs in rank order; *heads*: the format and rank strings
    by rank. Returns None, with nothing written, when a score is no number or its string would not fit;
    ValueError, with *out* as it was, for pieces that do not hold together."""
    wires_, chosen_, heads_ = _checked(out, wires, chosen, heads, 7)
    owner_, short, n, start = owner, brief, len(wires_), len(out)
    scores = _scores(chosen_)
    if scores is None:
        return None
    if len(owner_) != 2:
        raise ValueError("the SRV records' owner is a pointer")
    total = 0  # at most: shared labels counted whole, though a pointer may stand for them
    for r in range(n):
        wire = wires_[r]
        if len(wire[0]) != 10:
            raise ValueError("an SRV record's head is its type, class, TTL and RDATA length")
        total += 24 + len(wire[1]) + len(wire[2]) + len(wire[4]) + len(heads_[r + 1]) + 7 + len(scores[r])
        total += len(wire[6] if short else wire[5]) + _labels(wire[3])
    PyByteArray_Resize(out, start + total)
    base = cython.cast(cython.p_uchar, PyByteArray_AS_STRING(out))
    at = start
    for j in range(256):
        written[j] = -1
    try:
        for r in range(n):  # the SRV records: priority = rank
            wire = wires_[r]
            if r:
                memcpy(base + at, cython.cast(cython.p_char, owner_), 2)
                at += 2
            srv_head = wire[0]
            memcpy(base + at, cython.cast(cython.p_char, srv_head), 10)
            base[at + 10] = 0
            base[at + 11] = r + 1
            srv = wire[1]
            memcpy(base + at + 12, cython.cast(cython.p_char, srv), len(srv))
            at += 12 + len(srv)
        for r in range(n):  # each tool's ranking TXT record
            wire = wires_[r]
            prefix = wire[2]
            memcpy(base + at, cython.cast(cython.p_char, prefix), len(prefix))
            at = _shared(base, at + len(prefix), wire[3], wire[4], cython.address(written[0]))
            rest = wire[6] if short else wire[5]
            at = _txt(base, at, -1, heads_[r + 1], scores[r], rest, len(rest))
    except BaseException:
        del out[start:]
        raise
    del out[at:]  # what pointers saved of the labels counted
    return 0
