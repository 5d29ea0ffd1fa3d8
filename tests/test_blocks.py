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


def _zone(file: str, name: bytes):
    """The shipped zone of *file* packed, the route of its question *name*, and its tools (any, TCP)."""
    from tooldns.serving.fastreply import PackedZone
    from tooldns.serving.index import ZoneIndex
    from tooldns.zone.zonefile import load_zone

    from conftest import ZONES

    index = ZoneIndex(load_zone(ZONES / file))
    packed = PackedZone(index)
    tools = index.tool_candidates.get(("any", "tcp"))
    return packed, packed.routes[next(key for key in packed.routes if key.startswith(name))], tools and tools.entries


ROOT = _zone("tools.yaml", b"\x04_any\x04_tcp\x06_tools")[:2]
#: scores of any size a TXT string holds ("score=" and 201 digits and more at 1e200; 1e300 does not fit)
SCORES = st.one_of(st.floats(0, 1e6), st.floats(-1e200, 1e200), st.just(-0.0),
                   st.integers(0, 10**6).map(lambda n: n / 10**4 + 0.00005))  # ties at the fourth decimal


@settings(max_examples=300, deadline=None)
@given(st.data(), st.binary(max_size=60))
def test_a_referral_written_in_c_is_the_bytes_of_the_source_way(monkeypatch_module, data, question):
    """blocks.referral writes a first referral (the shipped root's children in any order, any scores:
    large, negative, ties at the fourth decimal) as fastreply writes it from the templates' sums."""
    from tooldns.serving import fastreply

    packed, route = ROOT
    pieces = list(packed.children.values())
    chosen_pieces = data.draw(st.permutations(pieces).flatmap(lambda p: st.integers(1, len(p)).map(lambda n: p[:n])))
    chosen = [(n, data.draw(SCORES)) for n in range(len(chosen_pieces))]
    start = bytes(12) + route.key + bytes(4) + question  # what comes before: offsets alone matter
    compiled = bytearray(start)
    counts = packed._templated(compiled, route, chosen, chosen_pieces)
    monkeypatch_module.setattr(fastreply, "put_referral", None)
    try:
        source = bytearray(start)
        assert packed._templated(source, route, chosen, chosen_pieces) == counts
    finally:
        monkeypatch_module.undo()
    assert counts is not None and bytes(compiled) == bytes(source)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_a_referral_that_does_not_hold_together_leaves_the_reply_as_it_was():
    """Pieces that would write a field beyond a block, a pointer beyond reach or a carry: ValueError
    (or None where a block lies beyond a pointer's reach), and the reply as it was."""
    from tooldns.serving.fastreply import _RANK_HEADS

    packed, route = ROOT
    first_piece, second = list(packed.children.values())[:2]
    first = first_piece.first(route, packed.zone)
    chosen = [(0, 1.5), (1, 0.5)]
    out = bytearray(bytes(12) + route.key + bytes(4))
    kept = bytes(out)
    good = blocks.referral(out, first, [first_piece.wire, second.wire], chosen, _RANK_HEADS)
    assert good == (0, len(first_piece.ns) + len(second.ns), 2 + len(first_piece.glue) + len(second.glue))
    del out[len(kept):]
    beyond = (second.wire[0], blocks.offsets([len(second.wire[0])]), *second.wire[2:])
    carry = (second.wire[0], second.wire[1], second.wire[2], 0x3FFF, *second.wire[4:])  # its TXT owner out of reach
    for wire in (beyond, carry):
        with pytest.raises(ValueError):
            blocks.referral(out, first, [first_piece.wire, wire], chosen, _RANK_HEADS)
        assert bytes(out) == kept
    assert blocks.referral(out, first, [first_piece.wire, second.wire], [(0, 1e300), (1, 0.5)], _RANK_HEADS) is None
    assert bytes(out) == kept  # a score string beyond 255 octets: the full path answers
    far = bytearray(0x3FF0)
    assert blocks.referral(far, first, [first_piece.wire, second.wire], chosen, _RANK_HEADS) is None
    assert far == bytearray(0x3FF0)
    with pytest.raises(TypeError):
        blocks.referral(bytes(out), first, [first_piece.wire], chosen[:1], _RANK_HEADS)
    with pytest.raises(ValueError):  # more candidates than scores
        blocks.referral(out, first, [first_piece.wire, second.wire], chosen[:1], _RANK_HEADS)
    assert bytes(out) == kept


LEAF = _zone("forecast.weather.tools.yaml", b"\x04_any\x04_tcp\x08forecast")


@settings(max_examples=300, deadline=None)
@given(st.data(), st.booleans(), st.binary(max_size=60))
def test_an_answer_written_in_c_is_the_bytes_of_the_source_way(monkeypatch_module, data, brief, question):
    """blocks.answer writes a leaf's answer (its tools in any order, any scores, brief or whole) as
    fastreply writes it from each tool's wire in Python."""
    from tooldns.serving import fastreply
    from tooldns.serving.lookup import Kind, Ranked

    packed, route, entries = LEAF
    order = data.draw(st.permutations(range(len(entries))).flatmap(lambda p: st.integers(1, len(p)).map(lambda n: p[:n])))
    ranked = Ranked(Kind.ANSWER, entries, [(i, data.draw(SCORES)) for i in order], {}, (0, 0, "bm25"), brief)
    start = bytes(12) + route.key + bytes(4)
    compiled = bytearray(start)
    counts = packed._answer(compiled, route.key, route, ranked)
    monkeypatch_module.setattr(fastreply, "put_answer", None)
    try:
        source = bytearray(start)
        assert packed._answer(source, route.key, route, ranked) == counts
    finally:
        monkeypatch_module.undo()
    assert counts is not None and bytes(compiled) == bytes(source)
    assert None not in route.tool_wires  # the shipped leaf's tools: each one's name the same in any answer


def test_an_answer_that_does_not_hold_together_leaves_the_reply_as_it_was():
    from tooldns.serving.fastreply import _RANK_HEADS

    packed, route, entries = LEAF
    wires = route.tool_wires or packed._tool_wires(entries, route.answer_head[1] if route.answer_head else
                                                   packed._answer_head(12 + len(route.key) + 4, route.key, route)[1])
    out = bytearray(b"head")
    assert blocks.answer(out, b"\xc0\x0c", wires[:2], [(0, 1.0), (1, 1e300)], _RANK_HEADS, False) is None
    assert blocks.answer(out, b"\xc0\x0c", wires[:2], [(0, 1.0), (1, None)], _RANK_HEADS, False) is None
    assert out == bytearray(b"head")
    for args in ((b"\xc0", wires[:1], [(0, 1.0)]), (b"\xc0\x0c", wires[:2], [(0, 1.0)]),
                 (b"\xc0\x0c", [wires[0][:3]], [(0, 1.0)]), (b"\xc0\x0c", [(b"short",) + wires[0][1:]], [(0, 1.0)])):
        with pytest.raises(ValueError):
            blocks.answer(out, args[0], args[1], args[2], _RANK_HEADS, False)
        assert out == bytearray(b"head")


@settings(max_examples=3000, deadline=None)
@given(st.one_of(st.floats(), st.floats(-1e6, 1e6), st.integers(-10**12, 10**12),
                 st.builds(lambda m, j: m / 2 ** j, st.integers(-10**9, 10**9), st.integers(0, 24))))
def test_scores_are_written_as_percent_4f_writes_them(score):
    """The score strings' numbers, written by integer arithmetic below 2^49 and by CPython above (and
    for infinities and NaN): ``b"%.4f" % score`` octet for octet, halves rounded to even (m / 2^j
    draws exact halves of the fourth decimal), -0.0 and negatives that round to zero with their sign."""
    assert blocks.fixed4(score) == b"%.4f" % score


@pytest.mark.parametrize("score", [0.0, -0.0, 0.03125, -0.03125, 0.00015, 5e-324, -1e-9, 2.0 ** 49 - 0.5,
                                   2.0 ** 49, -(2.0 ** 49), 99999.99995, float("inf"), float("nan")])
def test_score_corner_cases_are_written_as_percent_4f_writes_them(score):
    assert blocks.fixed4(score) == b"%.4f" % score
