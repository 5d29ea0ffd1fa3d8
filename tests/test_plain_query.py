"""The plain query read with C integers (tooldns.serving.fast.cquery) reads every message as the Python
reading does (tooldns.serving.wire.read_plain_query): the same PlainQuery, or None, for hostile
messages of every category of tooldns/fuzzpackets.py, random bytes and well-formed queries alike.

The module exists only compiled (TOOLDNS_COMPILE=1 pip install ..., as CI installs); from source
the server reads queries the Python way, and these tests say so by skipping.
"""

import random

import pytest
from hypothesis import given, settings, strategies as st

from tooldns.fuzzpackets import CATEGORIES, Target, make_packet
from tooldns.serving import wire

cquery = pytest.importorskip("tooldns.serving.fast.cquery", exc_type=ImportError,
                                 reason="tooldns.serving.fast.cquery runs compiled only (installed without TOOLDNS_COMPILE=1, or TOOLDNS_PURE set)")



def _seen(query):
    if query is None:
        return None
    return (query.question_end, query.qtype, query.rd, query.udp_size, query.options)


def _alike(data: bytes) -> None:
    assert _seen(cquery.read_plain_query(data)) == _seen(wire.read_plain_query(data)), data.hex()


def test_the_server_reads_queries_in_c():
    from tooldns.serving.fast import path

    assert path.read_plain_query is cquery.read_plain_query


@pytest.mark.parametrize("category", sorted(CATEGORIES))
def test_every_hostile_category_reads_alike(category):
    rng = random.Random(category)
    target = Target("weather.tools.", ("history.weather.tools.", "_any._tcp._weather.tools."))
    read = 0
    for _ in range(1500):
        packet = make_packet(category, rng, target)
        _alike(packet)
        read += wire.read_plain_query(packet) is not None
    if category == "valid":
        assert read > 1000  # most valid queries are plain ones: the reading of a whole query is compared


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=120))
def test_random_bytes_read_alike(data):
    _alike(data)


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_a_plain_query_with_any_octet_changed_reads_alike(data):
    rng = random.Random(data.draw(st.integers(0, 10**6)))
    packet = bytearray(make_packet("valid", rng, Target("tools.")))
    for _ in range(data.draw(st.integers(1, 3))):
        packet[data.draw(st.integers(0, len(packet) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(packet)))
    _alike(bytes(packet))
    _alike(bytes(packet[:cut]))
    _alike(bytes(packet) + b"\0")
