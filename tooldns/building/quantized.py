"""Vectors as zone files carry them, a matrix of rows at a time: what ``tooldns build --embed`` quantises.

A tree built with vectors carries each tool's vector quantised to int8 (the vector option's
encoding, :func:`tooldns.protocol.vector.encode_vector`), and makes its centroids and centre from
those vectors as the zone files carry them, read back (:func:`tooldns.scoring.hybrid.as_array`).
One vector at a time, in Python, that took a minute and some 4 GB for a million tools; these do the
same in numpy, a chunk of rows at a time, and give the same bytes and the same floats as the
functions they stand for (tests compare them):

* :func:`encode_rows`: ``encode_vector(model, row)`` of every row;
* :func:`unit_rows`: ``as_array(decode_vector(...))`` of every row of int8 codes;
* :func:`carried_rows`: both, the bytes and the rows read back from them;
* :func:`read_back`: the rows of vectors already encoded (a tree's zone files, ``tooldns embed``);
* :func:`mean_row`: the mean of unit rows in float64, summed in the order numpy sums a whole
  matrix's columns (row after row), without making that float64 matrix;
* :func:`row_centroids` and :func:`centroids_of`: a delegation's k-means centroids of distinct rows,
  encoded (``tooldns build``, the processes making leaf maps beside it, and ``tooldns embed`` alike).

    >>> encode_rows("m", np.array([[1.0, -0.5, 0.0]], dtype=np.float32))[0].hex()
    '00016d00033c0102047fc000'
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..protocol.vector import decode_vector, encode_vector

#: rows quantised, or summed, at once (bounds the float64 copies: 64 MB for 256 dimensions)
CHUNK = 32768
#: the most dimensions whose squared int8 codes sum exactly in float32 (every partial sum an integer
#: below 2**24: 1040 * 127**2 < 2**24), so that a row's norm is the same in whatever order it is summed
EXACT_DIM = 1040


def quantised(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The scale (float32) and int8 codes of every row of *rows*, as :func:`~tooldns.protocol.vector.quantize`
    makes them: ``scale = f32(max|v| / 127)`` (1.0 for a zero row), ``codes = round(v / scale)`` ties to
    even, clipped to [-127, 127]; each row's floats taken as float64, as that function takes them.
    Rows it would refuse (not finite, a scale outside float32) are left to it: ValueError."""
    x = np.asarray(rows, dtype=np.float64)
    biggest = np.abs(x).max(axis=1) if x.size else np.zeros(len(x))
    with np.errstate(over="ignore"):
        scale = np.where(biggest > 0, biggest / 127, 1.0).astype(np.float32)
    if not (np.isfinite(x).all() and np.isfinite(scale).all() and (scale > 0).all()):
        raise ValueError("rows that are not finite or too large for a float32 scale")
    codes = np.clip(np.rint(x / scale.astype(np.float64)[:, None]), -127, 127).astype(np.int8)
    return scale, codes


def encode_rows(model: str, rows: np.ndarray) -> list[bytes]:
    """``encode_vector(model, row)`` of every row of *rows* (a float matrix), byte for byte; a row
    encode_vector refuses raises its :class:`~tooldns.exceptions.VectorError`."""
    rows = np.asarray(rows)
    if not len(rows):
        return []
    dim = rows.shape[1]
    header = encode_vector(model, [0.0] * dim)[:-dim - 4]  # version, model, dim: what every row shares
    layout = np.dtype([("header", f"V{len(header)}"), ("scale", ">f4"), ("codes", "i1", (dim,))])
    out: list[bytes] = []
    for start in range(0, len(rows), CHUNK):
        part = rows[start:start + CHUNK]
        try:
            scale, codes = quantised(part)
        except ValueError:  # encode_vector says which row and why
            return [*out, *(encode_vector(model, row.tolist()) for row in part)]
        record = np.empty(len(part), dtype=layout)
        record["header"] = np.frombuffer(header, dtype=f"V{len(header)}")[0]
        record["scale"], record["codes"] = scale, codes
        blob, size = record.tobytes(), layout.itemsize
        out.extend(blob[i:i + size] for i in range(0, len(blob), size))
    return out


def unit_rows(codes: np.ndarray) -> np.ndarray:
    """Every row of int8 *codes* as :func:`~tooldns.scoring.hybrid.as_array` reads a vector back: float32
    over its float32 norm (a zero row as it is)."""
    q = np.asarray(codes, dtype=np.int8).astype(np.float32)
    if q.shape[1] > EXACT_DIM:  # sums of squares rounded: the norm as as_array takes it, row by row
        norms = np.array([np.linalg.norm(row) for row in q], dtype=np.float32)
    else:
        norms = np.sqrt(np.einsum("ij,ij->i", q, q))
    return q / np.where(norms > 0, norms, np.float32(1))[:, None]


def read_back(vectors: Sequence[bytes]) -> np.ndarray:
    """Encoded *vectors* (one model and size), each checked as :func:`~tooldns.protocol.vector.decode_vector`
    checks it, as :func:`unit_rows` reads them back: ``as_array(decode_vector(v))`` of each, as rows."""
    codes = [decode_vector(v).codes for v in vectors]
    if not codes:
        return np.zeros((0, 0), dtype=np.float32)
    return unit_rows(np.frombuffer(b"".join(codes), dtype=np.int8).reshape(len(codes), -1))


def carried_rows(model: str, rows: np.ndarray) -> tuple[list[bytes], np.ndarray]:
    """Every row of *rows* as a zone file carries it (:func:`encode_rows`) and as it is read back
    (:func:`unit_rows`): the encoded bytes, and the float32 matrix."""
    encoded = encode_rows(model, rows)
    if not encoded:
        return [], np.zeros((0, 0), dtype=np.float32)
    codes = np.frombuffer(b"".join(encoded), dtype=np.int8).reshape(len(encoded), -1)
    return encoded, unit_rows(codes[:, -np.shape(rows)[1]:])


def mean_row(rows: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """The float64 mean of the rows of *rows* (those *mask* keeps), as ``rows.astype(float64).mean(axis=0)``
    gives it, a chunk of rows at a time."""
    total, count = None, 0
    for start in range(0, len(rows), CHUNK):
        part = rows[start:start + CHUNK] if mask is None else rows[start:start + CHUNK][mask[start:start + CHUNK]]
        if not len(part):
            continue
        part = part.astype(np.float64)
        # row after row, as numpy sums a matrix's columns: the running total first, then this chunk's rows
        total = part.sum(axis=0) if total is None else np.add.reduce(np.vstack([total[None], part]), axis=0)
        count += len(part)
    if total is None:
        raise ValueError("no rows to take the mean of")
    return total / count


def row_centroids(model: str, rows: np.ndarray, n: int) -> tuple[bytes, ...]:
    """At most *n* unit vectors standing for *rows* (distinct rows read back, in the order of their
    encoded bytes), encoded: k-means centres when there are more rows than *n*, else the rows
    (:func:`~tooldns.scoring.hybrid.centroid_vectors`)."""
    from ..scoring.hybrid import centroid_vectors

    return centroid_vectors(model, rows, n)


def centroids_of(vectors: Sequence[bytes], n: int) -> tuple[bytes, ...]:
    """At most *n* centroids of encoded *vectors* (one model), as ``tooldns build`` makes them: of the
    distinct ones, in the order of their bytes, read back."""
    if not vectors:
        return ()
    distinct = sorted(set(vectors))
    return row_centroids(decode_vector(distinct[0]).model, read_back(distinct), n)
