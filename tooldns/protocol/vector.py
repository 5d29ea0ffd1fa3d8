"""The intent vector EDNS0 option: the client's embedding of its intent; a pure codec, no I/O.

A client that runs an embedding model may send, next to the intent option
(:mod:`tooldns.protocol.intent`), its embedding of the intent, so that a zone whose summaries and
tools were embedded with the same model scores them by cosine similarity without running a
model. The query-only option's data is::

    version u8 (0) | model length u8 (1..64) | model name (ASCII, printable, no spaces)
        | dim u16 (1..4096, network order) | scale f32 (IEEE 754 big-endian, finite, > 0)
        | dim bytes: int8 components (two's complement)

The vector is ``component_i * scale``. Encoders quantise with ``scale = max|v_i| / 127`` rounded
to f32 (1.0 for an all-zero vector) and ``q_i = round(v_i / scale)`` (ties to even) clipped to
[-127, 127]; -128 is never produced but is accepted. A 384-dimension vector of the model
``all-MiniLM-L6-v2`` takes 1 + 1 + 16 + 2 + 4 + 384 = 408 bytes. Decoding is strict: anything
that disagrees with the layout raises :class:`VectorError` (a kind of
:class:`~tooldns.exceptions.IntentError`), which servers answer with FORMERR and an Extended DNS
Error ``bad vector option: ...``.

Example::

    >>> encode_vector("m", [1.0, -0.5, 0.0]).hex()
    '00016d00033c0102047fc000'
    >>> decode_vector(bytes.fromhex("00016d00033c0102047fc000")).codes.hex()
    '7fc000'
    >>> [round(x, 3) for x in decode_vector(encode_vector("m", [1.0, -0.5, 0.0])).values()]
    [1.0, -0.504, 0.0]
"""

from __future__ import annotations

import math
import struct
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from ..exceptions import VectorError

#: EDNS0 option code of the query-only intent vector option (local/experimental range, RFC 6891).
VECTOR_OPTION_CODE = 65303

VERSION = 0
#: Longest model name in bytes.
MAX_MODEL = 64
#: Most components a vector may have.
MAX_DIM = 4096

_PREFIX = struct.Struct("!BB")  # version, model length
_TAIL = struct.Struct("!Hf")  # dim, scale (after the model name)
_F32 = struct.Struct("!f")


@dataclass(frozen=True)
class Vector:
    """A quantised intent vector: the model that made it, the scale and the int8 components."""

    model: str
    scale: float
    codes: bytes

    @property
    def dim(self) -> int:
        """Number of components."""
        return len(self.codes)

    def values(self) -> list[float]:
        """The components as floats: each int8 code times the scale."""
        return [code * self.scale for code in array("b", bytes(self.codes))]

    def to_bytes(self) -> bytes:
        """Return the option data; raise :class:`VectorError` if a field cannot be encoded."""
        name = _check_model(self.model)
        _check_dim(self.dim)
        scale = _check_scale(self.scale)
        return _PREFIX.pack(VERSION, len(name)) + name + _TAIL.pack(self.dim, scale) + bytes(self.codes)


def _check_model(model: str) -> bytes:
    if not isinstance(model, str):
        raise VectorError(f"vector model name must be text, got {type(model).__name__}")
    bad = next((i for i, ch in enumerate(model) if not 0x21 <= ord(ch) <= 0x7E), None)
    if bad is not None:
        raise VectorError(f"vector model name {model!r} has U+{ord(model[bad]):04X} at position {bad}; "
                          "use printable ASCII without spaces")
    if not 1 <= len(model) <= MAX_MODEL:
        raise VectorError(f"vector model name is {len(model)} bytes; it must be 1 to {MAX_MODEL}")
    return model.encode("ascii")


def _check_dim(dim: int) -> None:
    if not 1 <= dim <= MAX_DIM:
        raise VectorError(f"vector has {dim} components; it must have 1 to {MAX_DIM}")


def _check_scale(scale: float) -> float:
    if not math.isfinite(scale) or scale <= 0:
        raise VectorError(f"vector scale is {scale!r}; it must be a finite number above 0")
    try:
        single = _F32.unpack(_F32.pack(scale))[0]
    except OverflowError:
        raise VectorError(f"vector scale {scale!r} does not fit an IEEE 754 single") from None
    if single <= 0:  # too small: it would go out as 0, which no decoder accepts
        raise VectorError(f"vector scale {scale!r} is below the smallest IEEE 754 single")
    return single


def _f32(x: float) -> float:
    """*x* rounded to the nearest IEEE 754 single (inf when it is too large)."""
    try:
        return _F32.unpack(_F32.pack(x))[0]
    except OverflowError:
        return math.inf


def quantize(model: str, values: Sequence[float]) -> Vector:
    """Quantise an embedding (normally of unit length) into a :class:`Vector` for *model*."""
    _check_model(model)
    floats = [float(v) for v in values]
    _check_dim(len(floats))
    bad = next((i for i, v in enumerate(floats) if not math.isfinite(v)), None)
    if bad is not None:
        raise VectorError(f"vector component {bad} is {floats[bad]!r}; components must be finite")
    biggest = max(abs(v) for v in floats)
    scale = _f32(biggest / 127) if biggest else 1.0
    if not math.isfinite(scale) or scale <= 0:
        raise VectorError(f"vector components up to {biggest!r} give a scale outside IEEE 754 single range; "
                          "normalise the vector to unit length")
    codes = array("b", (max(-127, min(127, round(v / scale))) for v in floats))
    return Vector(model=model, scale=scale, codes=codes.tobytes())


def encode_vector(model: str, values: Sequence[float]) -> bytes:
    """Return the option data for the embedding *values* made by *model*."""
    return quantize(model, values).to_bytes()


def decode_vector(data: bytes) -> Vector:
    """Parse option data strictly; raise :class:`VectorError` saying what is wrong."""
    data = bytes(data)
    if len(data) < _PREFIX.size:
        raise VectorError(f"vector option is {len(data)} bytes; the header alone is at least "
                          f"{_PREFIX.size + 1 + _TAIL.size}")
    version, model_len = _PREFIX.unpack_from(data)
    if version != VERSION:
        raise VectorError(f"unsupported vector option version {version}; this server speaks {VERSION}")
    if not 1 <= model_len <= MAX_MODEL:
        raise VectorError(f"vector model length is {model_len}; it must be 1 to {MAX_MODEL}")
    header = _PREFIX.size + model_len + _TAIL.size
    if len(data) < header:
        raise VectorError(f"vector option is {len(data)} bytes; the header alone, with a {model_len}-byte "
                          f"model name, is {header}")
    raw = data[_PREFIX.size:_PREFIX.size + model_len]
    bad = next((i for i, b in enumerate(raw) if not 0x21 <= b <= 0x7E), None)
    if bad is not None:
        raise VectorError(f"vector model name has byte 0x{raw[bad]:02x} at position {bad}; "
                          "use printable ASCII without spaces")
    dim, scale = _TAIL.unpack_from(data, _PREFIX.size + model_len)
    _check_dim(dim)
    codes = data[header:]
    if dim != len(codes):
        raise VectorError(f"vector dim field says {dim} components but {len(codes)} bytes follow")
    if not math.isfinite(scale) or scale <= 0:
        raise VectorError(f"vector scale is {scale!r}; it must be a finite number above 0")
    return Vector(model=raw.decode("ascii"), scale=scale, codes=codes)
