"""The intent option codec: golden bytes and every decoding error."""

import pytest

from tooldns.exceptions import IntentError
from tooldns.protocol.ede import decode_ede, encode_ede
from tooldns.protocol.intent import MAX_INTENT_BYTES, decode_intent, encode_intent
from tooldns.protocol.meta import FLAG_FALLBACK, FLAG_PRUNED, decode_meta, encode_meta


def test_golden_bytes_ascii():
    assert encode_intent("weather in Hong Kong", 3) == bytes.fromhex(
        "00" "0014" "03" "7765617468657220696e20486f6e67204b6f6e67")


def test_golden_bytes_chinese():
    # 香港天气 is 4 characters, 12 UTF-8 bytes
    assert encode_intent("香港天气", 5) == bytes.fromhex("00" "000c" "05" "e9a699e6b8afe5a4a9e6b094")
    assert decode_intent(bytes.fromhex("00000c05e9a699e6b8afe5a4a9e6b094")).text == "香港天气"


def test_round_trip():
    got = decode_intent(encode_intent("find a PDF tool", 255))
    assert (got.text, got.k, got.version) == ("find a PDF tool", 255, 0)


@pytest.mark.parametrize("data, message", [
    (b"", "header alone"),
    (b"\x00\x00", "header alone"),
    (bytes.fromhex("01000303") + b"abc", "version 1"),
    (bytes.fromhex("00000503") + b"abc", "says 5 bytes but 3 follow"),
    (bytes.fromhex("00000203") + b"abc", "says 2 bytes but 3 follow"),
    (bytes.fromhex("00000300") + b"abc", "K is 0"),
    (bytes.fromhex("00000003"), "empty"),
    (bytes.fromhex("00000303") + b"   ", "empty"),
    (bytes.fromhex("00000203") + b"\xff\xfe", "not valid UTF-8"),
    (bytes.fromhex("00000303") + b"a\x00b", "control character"),
])
def test_decode_errors(data, message):
    with pytest.raises(IntentError, match=message):
        decode_intent(data)


def test_over_long_payload():
    text = "x" * (MAX_INTENT_BYTES + 1)
    data = bytes([0]) + len(text).to_bytes(2, "big") + bytes([3]) + text.encode()
    with pytest.raises(IntentError, match=f"at most {MAX_INTENT_BYTES}"):
        decode_intent(data)
    with pytest.raises(IntentError):
        encode_intent(text, 3)
    assert decode_intent(encode_intent("x" * MAX_INTENT_BYTES, 1)).text == "x" * MAX_INTENT_BYTES


@pytest.mark.parametrize("k", [0, 256, -1, "3"])
def test_encode_rejects_bad_k(k):
    with pytest.raises(IntentError, match="K must be"):
        encode_intent("x", k)


def test_meta_and_ede():
    data = encode_meta(FLAG_FALLBACK | FLAG_PRUNED, 30, "bm25")
    assert data == bytes.fromhex("00" "03" "0000001e") + b"bm25"
    meta = decode_meta(data)
    assert meta.fallback and meta.pruned and meta.cache_ttl == 30 and meta.scorer == "bm25"
    assert decode_ede(encode_ede("bad intent")) == (0, "bad intent")
    with pytest.raises(IntentError):
        decode_meta(b"\x00")
