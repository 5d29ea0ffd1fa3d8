"""The intent option decoded in C (tooldns.serving.fast.cquery) decodes every option as the Python
decoding does (tooldns.protocol.intent.decode_intent), which the server's resolver uses from source: the same Intent, or the same IntentError
with the same text, for plain options, hostile ones and random bytes alike.

The module exists only compiled (TOOLDNS_COMPILE=1 pip install ..., as CI installs); from source
the Python decoding runs, and these tests say so by skipping.
"""

import struct

import pytest
from hypothesis import given, settings, strategies as st

from tooldns.exceptions import IntentError
from tooldns.protocol import intent

cquery = pytest.importorskip("tooldns.serving.fast.cquery", exc_type=ImportError,
                                  reason="tooldns.serving.fast.cquery runs compiled only (installed without TOOLDNS_COMPILE=1, or TOOLDNS_PURE set)")


def _outcome(decode, data):
    try:
        return "ok", decode(data)
    except IntentError as exc:
        return "error", str(exc)


def _alike(data) -> None:
    assert _outcome(cquery.decode_intent, data) == _outcome(intent.decode_intent, data), data


def _option(payload: bytes, k: int = 3, version: int = 0, length: int | None = None) -> bytes:
    return struct.pack("!BHB", version, len(payload) if length is None else length, k) + payload


def test_the_server_decodes_intents_in_c():
    from tooldns.serving.fast import path

    assert path.decode_intent is cquery.decode_intent


@pytest.mark.parametrize("data", [
    _option(b"historical weather Hong Kong"), _option(b"tabs\tand\nnew lines\r ok", k=255),
    _option(b"  \t\n "), _option(b"a\x00b"), _option(b"a\x1fb"), _option(b"del\x7f"), _option(b"\x0bx"),
    _option("天气 预报".encode()), _option("caf\u00e9".encode()), _option(b"\xff\xfe"), _option(b"\xc3"),
    _option(b"x", k=0), _option(b"x", version=1), _option(b"xy", length=1), _option(b"xy", length=3),
    _option(b""), _option(b"x" * 4096), _option(b"x" * 4097), b"", b"\0", b"\0\0\1", bytearray(_option(b"ok")),
])
def test_options_decode_alike(data):
    _alike(data)


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=60), st.integers(0, 255), st.integers(0, 2), st.sampled_from([None, 0, 1, 70]))
def test_random_options_decode_alike(payload, k, version, length):
    _alike(_option(payload, k, version, length))


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=40), st.integers(1, 255))
def test_text_options_decode_alike(text, k):
    _alike(_option(text.encode("utf-8", "surrogatepass"), k))
