"""The intent vector option codec: golden bytes, quantisation error, every decoding error, the meta flag."""

import json
import math
import random
import struct
import subprocess
import sys

import pytest

from conftest import ROOT
from tooldns.exceptions import IntentError, VectorError
from tooldns.protocol import (FLAG_VECTOR_IGNORED, VECTOR_OPTION_CODE, Vector, decode_vector, encode_vector,
                              quantize)
from tooldns.protocol.meta import FLAG_PRUNED, decode_meta, encode_meta
from tooldns.protocol.vector import MAX_DIM, MAX_MODEL

# model "m", values [1.0, -0.5, 0.0]: scale = 1/127 as f32 (0x3c010204), codes 127, -64, 0.
GOLDEN_SMALL = bytes.fromhex("00" "01" "6d" "0003" "3c010204" "7fc000")
# an all-zero vector: scale 1.0 (0x3f800000), codes all 0.
GOLDEN_ZERO = bytes.fromhex("00" "01" "6d" "0003" "3f800000" "000000")


def _header(model=b"m", dim=3, scale=1.0, version=0, model_len=None):
    n = len(model) if model_len is None else model_len
    return bytes([version, n]) + model + struct.pack("!Hf", dim, scale)


def test_option_code_and_error_hierarchy():
    assert VECTOR_OPTION_CODE == 65303
    assert issubclass(VectorError, IntentError)
    assert str(VectorError()) == "The vector option is malformed."


def test_golden_bytes_small_vector():
    assert encode_vector("m", [1.0, -0.5, 0.0]) == GOLDEN_SMALL
    vec = decode_vector(GOLDEN_SMALL)
    assert (vec.model, vec.dim, vec.codes) == ("m", 3, bytes([0x7F, 0xC0, 0x00]))
    assert vec.scale == struct.unpack("!f", bytes.fromhex("3c010204"))[0]
    assert vec.values() == [127 * vec.scale, -64 * vec.scale, 0.0]
    assert vec == quantize("m", [1.0, -0.5, 0.0])


def test_golden_bytes_all_zero_vector():
    assert encode_vector("m", [0.0, 0.0, 0.0]) == GOLDEN_ZERO
    vec = decode_vector(GOLDEN_ZERO)
    assert vec.scale == 1.0 and vec.values() == [0.0, 0.0, 0.0]


def test_minus_128_is_decoded_but_never_encoded():
    vec = decode_vector(_header(dim=2) + bytes([0x80, 0x7F]))
    assert vec.values() == [-128.0, 127.0]
    assert quantize("m", [-1.0, 0.5]).codes == bytes([0x81, 0x40])  # -127, 64


def test_round_trip_384_dim_unit_vector():
    rng = random.Random(384)
    raw = [rng.gauss(0.0, 1.0) for _ in range(384)]
    norm = math.sqrt(sum(x * x for x in raw))
    unit = [x / norm for x in raw]
    data = encode_vector("all-MiniLM-L6-v2", unit)
    assert len(data) == 1 + 1 + 16 + 2 + 4 + 384 == 408
    vec = decode_vector(data)
    assert vec.model == "all-MiniLM-L6-v2" and vec.dim == 384 and vec.to_bytes() == data
    assert vec == quantize("all-MiniLM-L6-v2", unit)
    assert vec.scale == pytest.approx(max(abs(x) for x in unit) / 127, rel=1e-6)
    got = vec.values()
    assert max(abs(a - b) for a, b in zip(got, unit)) <= vec.scale / 2 + 1e-12
    cosine = sum(a * b for a, b in zip(got, unit)) / math.sqrt(sum(a * a for a in got))
    assert cosine > 0.999


def test_largest_model_and_dim():
    vec = quantize("x" * MAX_MODEL, [1.0] * MAX_DIM)
    assert decode_vector(vec.to_bytes()) == vec


@pytest.mark.parametrize("data, message", [
    (b"", "0 bytes; the header alone is at least 9"),
    (b"\x00", "1 bytes; the header alone is at least 9"),
    (_header()[:-1], "8 bytes; the header alone, with a 1-byte model name, is 9"),
    (b"\x00\x10abc", "with a 16-byte model name, is 24"),
    (_header(version=1) + b"abc", "unsupported vector option version 1"),
    (_header(model=b"", model_len=0) + b"abc", "model length is 0; it must be 1 to 64"),
    (_header(model=b"x" * 65) + b"abc", "model length is 65; it must be 1 to 64"),
    (_header(model=b"a b") + b"abc", "byte 0x20 at position 1; use printable ASCII without spaces"),
    (_header(model=b"a\x00") + b"abc", "byte 0x00 at position 1"),
    (_header(model=b"\xc3\xa9") + b"abc", "byte 0xc3 at position 0"),
    (_header(dim=0), "0 components; it must have 1 to 4096"),
    (_header(dim=4097) + bytes(4097), "4097 components; it must have 1 to 4096"),
    (_header(dim=3) + b"ab", "dim field says 3 components but 2 bytes follow"),
    (_header(dim=3) + b"abcd", "dim field says 3 components but 4 bytes follow"),
    (_header(scale=0.0) + b"abc", "scale is 0.0; it must be a finite number above 0"),
    (_header(scale=-1.0) + b"abc", r"scale is -1.0; it must be a finite number above 0"),
    (_header(scale=math.inf) + b"abc", "scale is inf"),
    (_header(scale=math.nan) + b"abc", "scale is nan"),
])
def test_decode_errors(data, message):
    with pytest.raises(VectorError, match=message):
        decode_vector(data)


@pytest.mark.parametrize("model, values, message", [
    ("", [1.0], "model name is 0 bytes"),
    ("x" * 65, [1.0], "model name is 65 bytes"),
    ("all MiniLM", [1.0], "U\\+0020 at position 3"),
    ("modèle", [1.0], "U\\+00E8 at position 3"),
    ("m", [], "0 components"),
    ("m", [0.0] * (MAX_DIM + 1), "4097 components"),
    ("m", [1.0, math.nan], "component 1 is nan"),
    ("m", [math.inf], "component 0 is inf"),
    ("m", [1e300], "normalise the vector"),
])
def test_encode_errors(model, values, message):
    with pytest.raises(VectorError, match=message):
        encode_vector(model, values)


def test_to_bytes_checks_its_fields():
    with pytest.raises(VectorError, match="scale is 0"):
        Vector("m", 0.0, b"\x01").to_bytes()
    with pytest.raises(VectorError, match="0 components"):
        Vector("m", 1.0, b"").to_bytes()


def test_meta_vector_ignored_flag():
    data = encode_meta(FLAG_VECTOR_IGNORED | FLAG_PRUNED, 30, "bm25")
    assert data == bytes.fromhex("00" "06" "0000001e") + b"bm25"
    meta = decode_meta(data)
    assert meta.vector_ignored and meta.pruned and not meta.fallback
    assert not decode_meta(encode_meta(FLAG_PRUNED, 30, "bm25")).vector_ignored


@pytest.mark.integration
def test_the_codec_needs_only_the_standard_library():
    """What importing the module loads, beyond what the interpreter had at start-up (site hooks), is stdlib."""
    code = ("import json, sys; before = set(sys.modules); import tooldns.protocol.vector; "
            "print(json.dumps(sorted(set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    loaded = {m.split(".")[0] for m in json.loads(out)}
    assert "tooldns" in loaded
    cython_runtime = {m for m in loaded if m.startswith("_cython_") or m == "cython_runtime"}  # compiled modules share them
    assert loaded - set(sys.stdlib_module_names) - cython_runtime == {"tooldns"}, loaded
