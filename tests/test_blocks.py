"""Referrals and answers written in C (tooldns.serving.fast.cpack): the same bytes as the Python writers
they twin (tooldns.serving.fast.pack: record by record, name by name), and a clear error, with the reply
as it was, for what cannot be written.

The module exists only compiled (TOOLDNS_COMPILE=1 pip install ..., as CI installs); from source
the fast path writes with the Python writers alone, and these tests say so by skipping. Both are
compared with dnslib's replies in tests/test_fast_reply.py and tests/test_compiled.py.
"""

import pytest
from hypothesis import given, settings, strategies as st

from tooldns.serving.fast.pack import _RANK_HEADS, PackedZone, _offsets

cpack = pytest.importorskip("tooldns.serving.fast.cpack", exc_type=ImportError,
                            reason="tooldns.serving.fast.cpack runs compiled only (installed without TOOLDNS_COMPILE=1, or TOOLDNS_PURE set)")


def _zone(file: str, name: bytes):
    """The shipped zone of *file* packed for the compiled writers, the route of its question *name*, and
    its tools (any, TCP)."""
    from tooldns.serving.index import ZoneIndex
    from tooldns.zone.zonefile import load_zone

    from conftest import ZONES

    index = ZoneIndex(load_zone(ZONES / file))
    packed = PackedZone(index, cpack)
    tools = index.tool_candidates.get(("any", "tcp"))
    return packed, packed.routes[next(key for key in packed.routes if key.startswith(name))], tools and tools.entries


ROOT = _zone("tools.yaml", b"\x04_any\x04_tcp\x06_tools")[:2]
#: scores of any size a TXT string holds ("score=" and 201 digits and more at 1e200; 1e300 does not fit)
SCORES = st.one_of(st.floats(0, 1e6), st.floats(-1e200, 1e200), st.just(-0.0),
                   st.integers(0, 10**6).map(lambda n: n / 10**4 + 0.00005))  # ties at the fourth decimal


def _head(route) -> bytearray:
    """A reply up to the end of its question *route* (header zeroed: offsets alone matter)."""
    return bytearray(bytes(12) + route.key + bytes(4))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_referral_written_in_c_is_the_bytes_of_the_python_writer(data):
    """cpack.referral writes a referral (the shipped root's children in any order, any scores: large,
    negative, ties at the fourth decimal; under any of the root's search names) as the Python writer
    writes it record by record."""
    packed, _ = ROOT
    route = packed.routes[data.draw(st.sampled_from(sorted(packed.routes)))]
    pieces = list(packed.children.values())
    chosen_pieces = data.draw(st.permutations(pieces).flatmap(lambda p: st.integers(1, len(p)).map(lambda n: p[:n])))
    chosen = [(n, data.draw(SCORES)) for n in range(len(chosen_pieces))]
    compiled, source = _head(route), _head(route)
    first = chosen_pieces[0].first(route, packed.zone)
    counts = cpack.referral(compiled, first, [piece.wire for piece in chosen_pieces], chosen, _RANK_HEADS)
    assert counts is not None
    assert packed._packed_referral(source, route.key, route, chosen, chosen_pieces) == counts
    assert bytes(compiled) == bytes(source)


def test_a_referral_that_does_not_hold_together_leaves_the_reply_as_it_was():
    """Pieces that would write a field beyond a block, a pointer beyond reach or a carry: ValueError
    (or None where a block lies beyond a pointer's reach), and the reply as it was."""
    packed, route = ROOT
    first_piece, second = list(packed.children.values())[:2]
    first = first_piece.first(route, packed.zone)
    chosen = [(0, 1.5), (1, 0.5)]
    out = bytearray(bytes(12) + route.key + bytes(4))
    kept = bytes(out)
    good = cpack.referral(out, first, [first_piece.wire, second.wire], chosen, _RANK_HEADS)
    assert good == (0, len(first_piece.ns) + len(second.ns), 2 + len(first_piece.glue) + len(second.glue))
    del out[len(kept):]
    beyond = (second.wire[0], _offsets([len(second.wire[0])]), *second.wire[2:])
    carry = (second.wire[0], second.wire[1], second.wire[2], 0x3FFF, *second.wire[4:])  # its TXT owner out of reach
    for wire in (beyond, carry):
        with pytest.raises(ValueError):
            cpack.referral(out, first, [first_piece.wire, wire], chosen, _RANK_HEADS)
        assert bytes(out) == kept
    assert cpack.referral(out, first, [first_piece.wire, second.wire], [(0, 1e300), (1, 0.5)], _RANK_HEADS) is None
    assert bytes(out) == kept  # a score string beyond 255 octets: the full path answers
    far = bytearray(0x3FF0)
    assert cpack.referral(far, first, [first_piece.wire, second.wire], chosen, _RANK_HEADS) is None
    assert far == bytearray(0x3FF0)
    with pytest.raises(TypeError):
        cpack.referral(bytes(out), first, [first_piece.wire], chosen[:1], _RANK_HEADS)
    with pytest.raises(ValueError):  # more candidates than scores
        cpack.referral(out, first, [first_piece.wire, second.wire], chosen[:1], _RANK_HEADS)
    assert bytes(out) == kept


LEAF = _zone("forecast.weather.tools.yaml", b"\x04_any\x04_tcp\x08forecast")


@settings(max_examples=300, deadline=None)
@given(st.data(), st.booleans())
def test_an_answer_written_in_c_is_the_bytes_of_the_python_writer(data, brief):
    """cpack.answer writes a leaf's answer (its tools in any order, any scores, brief or whole) as the
    Python writer writes it name by name."""
    from tooldns.serving.lookup import Kind, Ranked

    packed, route, entries = LEAF
    order = data.draw(st.permutations(range(len(entries))).flatmap(lambda p: st.integers(1, len(p)).map(lambda n: p[:n])))
    ranked = Ranked(Kind.ANSWER, entries, [(i, data.draw(SCORES)) for i in order], {}, (0, 0, "bm25"), brief)
    compiled, source = _head(route), _head(route)
    block, known, owner = packed._answer_head(len(compiled), route.key, route)
    wires = packed._tool_wires(entries, known)
    assert None not in wires  # the shipped leaf's tools: each one's name the same in any answer
    compiled += block
    assert cpack.answer(compiled, owner, [wires[i] for i in order], ranked.chosen, _RANK_HEADS, brief) == 0
    assert packed._packed_answer(source, block, known, owner, route, ranked) == (len(order), 0, len(order))
    assert bytes(compiled) == bytes(source)


def test_an_answer_that_does_not_hold_together_leaves_the_reply_as_it_was():
    packed, route, entries = LEAF
    wires = route.tool_wires or packed._tool_wires(entries, route.answer_head[1] if route.answer_head else
                                                   packed._answer_head(12 + len(route.key) + 4, route.key, route)[1])
    out = bytearray(b"head")
    assert cpack.answer(out, b"\xc0\x0c", wires[:2], [(0, 1.0), (1, 1e300)], _RANK_HEADS, False) is None
    assert cpack.answer(out, b"\xc0\x0c", wires[:2], [(0, 1.0), (1, None)], _RANK_HEADS, False) is None
    assert out == bytearray(b"head")
    for args in ((b"\xc0", wires[:1], [(0, 1.0)]), (b"\xc0\x0c", wires[:2], [(0, 1.0)]),
                 (b"\xc0\x0c", [wires[0][:3]], [(0, 1.0)]), (b"\xc0\x0c", [(b"short",) + wires[0][1:]], [(0, 1.0)])):
        with pytest.raises(ValueError):
            cpack.answer(out, args[0], args[1], args[2], _RANK_HEADS, False)
        assert out == bytearray(b"head")


@settings(max_examples=3000, deadline=None)
@given(st.one_of(st.floats(), st.floats(-1e6, 1e6), st.integers(-10**12, 10**12),
                 st.builds(lambda m, j: m / 2 ** j, st.integers(-10**9, 10**9), st.integers(0, 24))))
def test_scores_are_written_as_percent_4f_writes_them(score):
    """The score strings' numbers, written by integer arithmetic below 2^49 and by CPython above (and
    for infinities and NaN): ``b"%.4f" % score`` octet for octet, halves rounded to even (m / 2^j
    draws exact halves of the fourth decimal), -0.0 and negatives that round to zero with their sign."""
    assert cpack.fixed4(score) == b"%.4f" % score


@pytest.mark.parametrize("score", [0.0, -0.0, 0.03125, -0.03125, 0.00015, 5e-324, -1e-9, 2.0 ** 49 - 0.5,
                                   2.0 ** 49, -(2.0 ** 49), 99999.99995, float("inf"), float("nan")])
def test_score_corner_cases_are_written_as_percent_4f_writes_them(score):
    assert cpack.fixed4(score) == b"%.4f" % score
