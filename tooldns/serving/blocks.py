"""Packed record blocks written anywhere in a reply, their compression pointers moved, in C.

A referral's candidates are packed once (:mod:`tooldns.serving.fastreply`): each one's NS records,
and what follows its ranking TXT record's score string (the strings, the glue), as a block whose
compression pointers point at offsets within the block, or at the zone's name. Written at offset
*at* of a reply whose zone name stands at *zone*, each pointer moves by *at* or by *zone*. From
source, :mod:`~tooldns.serving.fastreply` does that with one sum of big numbers a block
(:func:`~tooldns.serving.fastreply._template`), which costs about 5,000 instructions a block of a few
hundred octets (``int.to_bytes`` writes octet by octet); here it is a copy and a few additions.

This module runs compiled only (``setup.py`` compiles it with the others, :mod:`tooldns.compiled`);
imported from its source it raises ImportError, and :mod:`~tooldns.serving.fastreply` keeps its sums.
"""

from __future__ import annotations

import cython

if not cython.compiled:
    raise ImportError("tooldns.serving.blocks runs compiled only (pip install -e . with Cython and a C compiler)")

from cython.cimports.cpython.bytearray import PyByteArray_AS_STRING  # noqa: E402


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
