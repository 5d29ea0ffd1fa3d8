"""Packed record blocks written anywhere in a reply, their compression pointers moved, in C.

A referral's candidates are packed once (:mod:`tooldns.serving.fastreply`): each one's NS records,
and what follows its ranking TXT record's score string (the strings, the glue), as a block whose
compression pointers point at offsets within the block, or at the zone's name. Written at offset
*at* of a reply whose zone name stands at *zone*, each pointer moves by *at* or by *zone*. From
source, :mod:`~tooldns.serving.fastreply` does that with one sum of big numbers a block
(:func:`~tooldns.serving.fastreply._template`), which costs about 5,000 instructions a block of a few
hundred octets (``int.to_bytes`` writes octet by octet); here it is a copy and a few additions.
:func:`referral` writes a whole first referral so, and :func:`answer` a leaf's answer: every candidate's NS records, then its ranking TXT
record (rank and score strings between its packed pieces) and glue, the scores formatted as
``b"score=%.4f"`` formats them, by the same function of CPython (``PyOS_double_to_string``).

This module runs compiled only (``setup.py`` compiles it with the others, :mod:`tooldns.compiled`);
imported from its source it raises ImportError, and :mod:`~tooldns.serving.fastreply` keeps its sums.
"""

from __future__ import annotations

import cython

if not cython.compiled:
    raise ImportError("tooldns.serving.blocks runs compiled only (pip install -e . with Cython and a C compiler)")

from cython.cimports.cpython.bytearray import PyByteArray_AS_STRING, PyByteArray_Resize  # noqa: E402
from cython.cimports.cpython.conversion import PyOS_double_to_string  # noqa: E402
from cython.cimports.cpython.mem import PyMem_Free  # noqa: E402
from cython.cimports.libc.string import memcpy, memset, strlen  # noqa: E402

#: the last offset a compression pointer can reach (14 bits)
MAX_POINTER = cython.declare(cython.Py_ssize_t, 0x3FFF)


def offsets(fields) -> bytes:
    """The offsets (in a block) of the 16-bit *fields* to move, as :func:`put` reads them."""
    from array import array

    return array("H", fields).tobytes()


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(start=cython.Py_ssize_t, size=cython.Py_ssize_t, count=cython.Py_ssize_t, j=cython.Py_ssize_t,
               field=cython.Py_ssize_t, base=cython.p_uchar, fields=cython.p_ushort, value=cython.long,
               by=cython.long, at=cython.long, zone=cython.long, which=cython.int, moves=bytes)
def put(out, block, relative, to_zone, at, zone) -> None:
    """Append *block* to the bytearray *out*, then add *at* (the offset the block's own pointers are
    relative to: where it, or the block it points into, was written) to each 16-bit field
    (big-endian) at the :func:`offsets` *relative*, and the offset *zone* of the zone's name to each
    at the offsets *to_zone*: what ``(number + at * relative + zone * to_zone).to_bytes(length,
    "big")`` of :func:`~tooldns.serving.fastreply._template` writes. An offset outside the block, a
    move beyond a pointer's reach or a field that would carry out of its 16 bits raise ValueError,
    with *out* as it was."""
    if type(out) is not bytearray or type(block) is not bytes or type(relative) is not bytes or type(to_zone) is not bytes:
        raise TypeError("put(bytearray, bytes, bytes, bytes, int, int)")
    start = len(out)
    size = len(block)
    if at < 0 or at > 0x3FFF or zone < 0 or zone > 0x3FFF:
        raise ValueError(f"pointers cannot move by {at} or {zone}: beyond a pointer's reach")
    for which in range(2):
        moves = relative if which == 0 else to_zone
        count = len(moves) // 2
        fields = cython.cast(cython.p_ushort, cython.cast(cython.p_char, moves))
        for j in range(count):
            if fields[j] + 2 > size:
                raise ValueError(f"a field at {fields[j]} of a block of {size} octets")
    out += block
    base = cython.cast(cython.p_uchar, PyByteArray_AS_STRING(out)) + start
    for which in range(2):
        moves = relative if which == 0 else to_zone
        by = at if which == 0 else zone
        count = len(moves) // 2
        fields = cython.cast(cython.p_ushort, cython.cast(cython.p_char, moves))
        for j in range(count):
            field = fields[j]
            value = (base[field] << 8 | base[field + 1]) + by
            if value > 0xFFFF:
                del out[start:]
                raise ValueError(f"a pointer moved by {by} carries out of its field at {field}")
            base[field] = value >> 8
            base[field + 1] = value & 0xFF


@cython.cfunc
@cython.returns(cython.int)
@cython.exceptval(-1)
@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(base=cython.p_uchar, size=cython.Py_ssize_t, moves=bytes, by=cython.long, count=cython.Py_ssize_t,
               j=cython.Py_ssize_t, field=cython.Py_ssize_t, value=cython.long, fields=cython.p_ushort)
def _move(base, size, moves, by):
    """Add *by* to each 16-bit field (big-endian) of the block of *size* octets at *base* whose offset
    :func:`offsets` lists in *moves*; ValueError for a field beyond the block or one that would carry."""
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


@cython.cfunc
@cython.locals(score=cython.double, text=cython.p_char)
def _score(item) -> bytes:
    """``b"%.4f" % item[1]``: the number of a referral's score string (its chosen pair's score)."""
    score = item[1]
    text = PyOS_double_to_string(score, b'f', 4, 0, cython.NULL)
    try:
        return text[:strlen(text)]
    finally:
        PyMem_Free(text)


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(n=cython.Py_ssize_t, r=cython.Py_ssize_t, start=cython.Py_ssize_t, total=cython.Py_ssize_t,
               size=cython.Py_ssize_t, reach=cython.Py_ssize_t, at=cython.Py_ssize_t, zone=cython.Py_ssize_t,
               owner=cython.Py_ssize_t, rdlength=cython.Py_ssize_t, authority=cython.Py_ssize_t,
               additional=cython.Py_ssize_t, base=cython.p_uchar, block=bytes, tail=bytes, head=bytes,
               number=bytes, places=cython.Py_ssize_t[256], wire=tuple, first_=tuple, wires_=list, chosen_=list,
               heads_=list, moves=bytes)
def referral(out, first, wires, chosen, heads):
    """Append to the bytearray *out* (a reply up to its question) a referral's records: authority, the
    chosen candidates' NS records; additional, per candidate its ranking TXT record and glue. What
    :meth:`tooldns.serving.fastreply.PackedZone._templated` writes from source, the same bytes.

    *first* is the first candidate's records as packed after this question
    (:meth:`~tooldns.serving.fastreply._Candidate.first`: block, the zone name's offset, the TXT
    owner's offset, ..., what follows its score string); *wires* every candidate's
    (:attr:`~tooldns.serving.fastreply._Candidate.wire`: its block and moves for any later place, its
    TXT owner in the block or -1 for the zone's name, its TXT strings' length, what follows the score
    string and its moves, its NS and additional records' counts); *chosen* the (entry, score) pairs in
    rank order; *heads* the TXT RDATA of the format and rank strings, by rank. Returns the reply's
    answer, authority and additional counts (the OPT record aside), or None, with nothing written,
    when a block would lie beyond a pointer's reach (as :meth:`~tooldns.serving.fastreply.PackedZone.
    _from_templates` decides) or a score string beyond a TXT string's 255 octets. ValueError, with
    *out* as it was, for pieces that do not hold together."""
    if type(out) is not bytearray or type(first) is not tuple or type(wires) is not list or type(chosen) is not list \
            or type(heads) is not list:
        raise TypeError("referral(bytearray, tuple, list, list, list)")
    first_, wires_, chosen_, heads_ = first, wires, chosen, heads  # typed: C reads their items
    n = len(wires_)
    if n == 0 or n != len(chosen_) or n >= len(heads_) or n > 255 or len(first_) < 6:
        raise ValueError(f"a referral to {n} candidates of {len(chosen_)} scores and {len(heads_)} rank heads")
    start = len(out)
    block = first_[0]
    tail = first_[5]
    zone = first_[1]
    reach = start + len(block)
    scores = []
    total = len(block)
    authority = 0
    additional = 0
    for r in range(n):
        wire = wires_[r]
        if len(wire) < 10:
            raise ValueError("a candidate's wire tuple holds 10 items")
        block = wire[0]
        reach += len(block)
        if r:
            total += len(block)
            tail = wire[5]
        number = _score(chosen_[r])
        if len(number) + 6 > 255:
            return None
        scores.append(number)
        head = heads_[r + 1]
        total += 12 + len(head) + 7 + len(number) + len(tail)
        authority += cython.cast(cython.Py_ssize_t, wire[8])
        additional += cython.cast(cython.Py_ssize_t, wire[9])
    if reach > MAX_POINTER:
        return None
    PyByteArray_Resize(out, start + total)
    try:
        base = cython.cast(cython.p_uchar, PyByteArray_AS_STRING(out))
        at = start
        for r in range(n):  # authority: each candidate's block, where it falls
            wire = wires_[r]
            block = first_[0] if r == 0 else wire[0]
            size = len(block)
            places[r] = at
            memcpy(base + at, cython.cast(cython.p_char, block), size)
            if r:
                moves = wire[1]
                _move(base + at, size, moves, at)
                moves = wire[2]
                _move(base + at, size, moves, zone)
            at += size
        for r in range(n):  # additional: each one's ranking TXT record, then its glue
            wire = wires_[r]
            if r == 0:
                owner = first_[2]
                tail = first_[5]
            else:
                owner = wire[3]
                owner = zone if owner < 0 else places[r] + owner
                tail = wire[5]
            if owner < 0 or owner > MAX_POINTER:
                raise ValueError(f"a TXT owner at {owner}: beyond a pointer's reach")
            head = heads_[r + 1]
            number = scores[r]
            rdlength = len(head) + 7 + len(number) + cython.cast(cython.Py_ssize_t, wire[4])
            if rdlength > 0xFFFF:
                raise ValueError(f"a ranking TXT record of {rdlength} octets")
            base[at] = 0xC0 | owner >> 8
            base[at + 1] = owner & 0xFF
            base[at + 2] = 0  # type TXT, class IN, TTL 0 (a ranking depends on the intent)
            base[at + 3] = 16
            base[at + 4] = 0
            base[at + 5] = 1
            memset(base + at + 6, 0, 4)
            base[at + 10] = rdlength >> 8
            base[at + 11] = rdlength & 0xFF
            at += 12
            memcpy(base + at, cython.cast(cython.p_char, head), len(head))
            at += len(head)
            base[at] = 6 + len(number)
            memcpy(base + at + 1, b"score=", 6)
            memcpy(base + at + 7, cython.cast(cython.p_char, number), len(number))
            at += 7 + len(number)
            memcpy(base + at, cython.cast(cython.p_char, tail), len(tail))
            if r:
                moves = wire[6]
                _move(base + at, len(tail), moves, places[r])
                moves = wire[7]
                _move(base + at, len(tail), moves, zone)
            at += len(tail)
    except BaseException:
        del out[start:]
        raise
    return 0, authority, additional


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(n=cython.Py_ssize_t, r=cython.Py_ssize_t, start=cython.Py_ssize_t, total=cython.Py_ssize_t,
               at=cython.Py_ssize_t, rdlength=cython.Py_ssize_t, base=cython.p_uchar, head=bytes, number=bytes,
               owner_=bytes, srv_head=bytes, srv=bytes, prefix=bytes, label=bytes, tail=bytes, rest=bytes,
               chain=tuple, link=tuple, wire=tuple, wires_=list, chosen_=list, heads_=list, short=cython.bint,
               which=cython.Py_ssize_t, j=cython.Py_ssize_t, pointed=cython.bint, written=cython.Py_ssize_t[256])
def answer(out, owner, wires, chosen, heads, brief):
    """Append to the bytearray *out* (a reply up to its answer's head: the CNAME from a cursor name,
    if any, and the first SRV record's owner) an answer's records: the chosen tools' SRV records, the
    first after the head, each later one after *owner* (the pointer to the first's owner), priority
    its rank; then each tool's ranking TXT record. What :meth:`tooldns.serving.fastreply.PackedZone.
    _written_answer` writes from source, the same bytes.

    *wires* are the tools' (:meth:`~tooldns.serving.fastreply.PackedZone._tool_wires`: SRV type, class,
    TTL and RDATA length; weight, port and target; the TXT owner's own labels, its labels shared with
    other tools' owners (numbered, below 256: the first time a number is written its place is noted,
    later ones point there) and its end (a pointer, or the root label); the TXT strings after the score
    string, whole and *brief*); *chosen* the (tool, score) pairs in rank order; *heads* the TXT RDATA of
    the format and rank strings, by rank. Returns None, with nothing written, when a score is not a
    number or its string would exceed a TXT string's 255 octets; ValueError, with *out* as it was, for
    pieces that do not hold together."""
    if type(out) is not bytearray or type(wires) is not list or type(chosen) is not list or type(heads) is not list:
        raise TypeError("answer(bytearray, bytes, list, list, list, bool)")
    owner_, wires_, chosen_, heads_, short = owner, wires, chosen, heads, brief
    n = len(wires_)
    if n == 0 or n != len(chosen_) or n >= len(heads_) or n > 255 or len(owner_) != 2:
        raise ValueError(f"an answer of {n} tools, {len(chosen_)} scores, {len(heads_)} rank heads")
    start = len(out)
    scores = []
    total = 0  # at most: shared labels counted whole, though a pointer may stand for them
    for r in range(n):
        wire = wires_[r]
        if len(wire) < 7:
            raise ValueError("a tool's wire tuple holds 7 items")
        if chosen_[r][1] is None:
            return None
        number = _score(chosen_[r])
        if len(number) + 6 > 255:
            return None
        scores.append(number)
        srv_head = wire[0]
        srv = wire[1]
        prefix = wire[2]
        chain = wire[3]
        tail = wire[4]
        rest = wire[6] if short else wire[5]
        head = heads_[r + 1]
        if len(srv_head) != 10:
            raise ValueError("an SRV record's head is its type, class, TTL and RDATA length")
        total += (2 if r else 0) + 12 + len(srv) + len(prefix) + len(tail) + 10 + len(head) + 7 + len(number) + len(rest)
        for j in range(len(chain)):
            link = chain[j]
            label = link[1]
            total += max(len(label), 2)
    for j in range(256):
        written[j] = -1
    PyByteArray_Resize(out, start + total)
    base = cython.cast(cython.p_uchar, PyByteArray_AS_STRING(out))
    at = start
    try:
        for r in range(n):  # the SRV records: priority = rank
            wire = wires_[r]
            srv_head = wire[0]
            srv = wire[1]
            if r:
                memcpy(base + at, cython.cast(cython.p_char, owner_), 2)
                at += 2
            memcpy(base + at, cython.cast(cython.p_char, srv_head), 10)
            base[at + 10] = 0
            base[at + 11] = r + 1
            memcpy(base + at + 12, cython.cast(cython.p_char, srv), len(srv))
            at += 12 + len(srv)
        for r in range(n):  # each tool's ranking TXT record
            wire = wires_[r]
            prefix = wire[2]
            chain = wire[3]
            tail = wire[4]
            rest = wire[6] if short else wire[5]
            memcpy(base + at, cython.cast(cython.p_char, prefix), len(prefix))
            at += len(prefix)
            pointed = False
            for j in range(len(chain)):  # the shared labels: a pointer to where an earlier tool wrote them
                link = chain[j]
                which = link[0]
                label = link[1]
                if which < 0 or which > 255:
                    raise ValueError(f"a shared suffix numbered {which}")
                if written[which] >= 0:
                    base[at] = 0xC0 | written[which] >> 8
                    base[at + 1] = written[which] & 0xFF
                    at += 2
                    pointed = True
                    break
                if at <= MAX_POINTER:
                    written[which] = at
                memcpy(base + at, cython.cast(cython.p_char, label), len(label))
                at += len(label)
            if not pointed:
                memcpy(base + at, cython.cast(cython.p_char, tail), len(tail))
                at += len(tail)
            head = heads_[r + 1]
            number = scores[r]
            rdlength = len(head) + 7 + len(number) + len(rest)
            if rdlength > 0xFFFF:
                raise ValueError(f"a ranking TXT record of {rdlength} octets")
            base[at] = 0  # type TXT, class IN, TTL 0 (a ranking depends on the intent)
            base[at + 1] = 16
            base[at + 2] = 0
            base[at + 3] = 1
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
            at += len(rest)
    except BaseException:
        del out[start:]
        raise
    del out[at:]  # what pointers saved of the labels counted
    return 0
