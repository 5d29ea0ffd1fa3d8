"""Packed blocks moved in C (tooldns.serving.blocks): the same bytes as the sums of big numbers that a
server running from source writes (tooldns.serving.fastreply._template), and a clear error, with the
reply as it was, for what cannot be written.

The module exists only compiled (pip install with Cython and a C compiler, as CI installs); from source
fastreply keeps its sums, and these tests say so by skipping. Whole referrals written either way are
compared with dnslib's in tests/test_fast_reply.py and tests/test_compiled.py.
"""

import pytest
from hypothesis import given, settings, strategies as st

from tooldns.serving.fastreply import _moves, _template

blocks = pytest.importorskip("tooldns.serving.blocks", reason="tooldns.serving.blocks runs compiled only (TOOLDNS_PURE, or no Cython)",
                             exc_type=ImportError)


@st.composite
def templates(draw):
    """A block of 2 to 300 octets with pointer fields at distinct even offsets, each to an offset in
    the block (below 0x4000) or to the zone's name (-1)."""
    size = draw(st.integers(2, 300))
    block = draw(st.binary(min_size=size, max_size=size))
    wheres = draw(st.sets(st.integers(0, size // 2 - 1), max_size=8))
    pointers = [(2 * w, draw(st.one_of(st.just(-1), st.integers(0, size)))) for w in sorted(wheres)]
    return block, pointers


@settings(max_examples=500, deadline=None)
@given(templates(), st.binary(max_size=40), st.integers(0, 0x3FFF - 400), st.integers(0, 0x3FFF))
def test_put_writes_the_bytes_of_the_big_number_sum(template, before, at, zone):
    block, pointers = template
    number, relative, to_zone, length = _template(block, pointers)
    expected = before + (number + at * relative + zone * to_zone).to_bytes(length, "big")
    out = bytearray(before)
    blocks.put(out, *_moves(block, pointers), at, zone)
    assert bytes(out) == expected


@pytest.mark.parametrize("args, error", [
    ((b"", b"\0\0", b"", b"", 0, 0), TypeError),  # not a bytearray
    ((bytearray(), "text", b"", b"", 0, 0), TypeError),
    ((bytearray(), b"\xc0\0", blocks.offsets([1]), b"", 0, 0), ValueError),  # a field beyond the block
    ((bytearray(), b"\xc0\0", b"", blocks.offsets([2]), 0, 0), ValueError),
    ((bytearray(), b"\xc0\0", blocks.offsets([0]), b"", 0x4000, 0), ValueError),  # beyond a pointer's reach
    ((bytearray(), b"\xc0\0", b"", b"", 0, -1), ValueError),
    ((bytearray(b"xy"), b"\xff\xf0", blocks.offsets([0]), b"", 0x20, 0), ValueError),  # carries out of 16 bits
])
def test_put_refuses_what_it_cannot_write_and_leaves_the_reply_as_it_was(args, error):
    out = args[0]
    kept = bytes(out)
    with pytest.raises(error):
        blocks.put(*args)
    assert bytes(out) == kept
