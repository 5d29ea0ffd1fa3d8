"""Vectors quantised a matrix at a time give the bytes and floats of encode_vector and as_array, one at a time."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tooldns.building import quantized
from tooldns.building.build import Embedded, centre_of
from tooldns.building.quantized import carried_rows, encode_rows, mean_row, read_back, unit_rows
from tooldns.exceptions import VectorError
from tooldns.protocol.vector import decode_vector, encode_vector
from tooldns.scoring.hybrid import as_array


def _unit(n, dim, seed=0):
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _one_at_a_time_rows(encoded):
    return np.asarray([as_array(decode_vector(e)) for e in encoded], dtype=np.float32)


def _one_at_a_time(model, rows):
    encoded = [encode_vector(model, row.tolist()) for row in rows]
    return encoded, _one_at_a_time_rows(encoded)


def test_rows_encode_and_read_back_as_one_at_a_time(monkeypatch):
    monkeypatch.setattr(quantized, "CHUNK", 7)  # several chunks, the last one short
    rows = _unit(50, 24)
    rows[3] = 0.0  # a zero row: scale 1.0, codes 0
    rows[4] = np.float32(0.5) * np.sign(rows[4])  # every component a tie for the largest
    rows[5, :] = [0.5 * (i % 3) for i in range(24)]  # 0, 0.5 and 1: the middle ones near half a code
    encoded, carried = carried_rows("all-MiniLM-L6-v2", rows)
    want_encoded, want_rows = _one_at_a_time("all-MiniLM-L6-v2", rows)
    assert encoded == want_encoded
    assert carried.tobytes() == want_rows.tobytes()
    assert not carried[3].any()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.floats(-1e6, 1e6, width=32), min_size=3, max_size=3), min_size=1, max_size=6))
def test_any_finite_rows_encode_as_one_at_a_time(values):
    rows = np.asarray(values, dtype=np.float32)
    try:
        want = [encode_vector("m", row.tolist()) for row in rows]
    except VectorError:  # a scale below float32's smallest: refused alike
        with pytest.raises(VectorError):
            encode_rows("m", rows)
        return
    assert encode_rows("m", rows) == want


def test_a_row_encode_vector_refuses_is_refused_as_it_says():
    rows = _unit(4, 8)
    rows[2, 1] = np.nan
    with pytest.raises(VectorError, match="component 1"):
        encode_rows("m", rows)
    with pytest.raises(VectorError):
        encode_rows("has space", _unit(2, 8))


def test_wide_rows_take_their_norm_as_as_array_does():
    rows = _unit(5, quantized.EXACT_DIM + 60)
    encoded, carried = carried_rows("m", rows)
    assert carried.tobytes() == _one_at_a_time("m", rows)[1].tobytes()
    codes = np.frombuffer(b"".join(encoded), dtype=np.int8).reshape(5, -1)[:, -rows.shape[1]:]
    assert unit_rows(codes).tobytes() == carried.tobytes()


def test_vectors_read_back_as_as_array_reads_each():
    encoded = encode_rows("m", _unit(40, 24, seed=7))
    assert read_back(encoded).tobytes() == _one_at_a_time_rows(encoded).tobytes()
    with pytest.raises(VectorError):
        read_back([encoded[0], encoded[1][:-1]])  # a vector decode_vector refuses: refused alike


def test_mean_row_sums_as_numpy_sums_a_whole_matrix(monkeypatch):
    monkeypatch.setattr(quantized, "CHUNK", 64)
    rows = _unit(1000, 16, seed=3)
    mask = np.random.default_rng(4).random(1000) < 0.7
    assert mean_row(rows).tobytes() == rows.astype(np.float64).mean(axis=0).tobytes()
    assert mean_row(rows, mask).tobytes() == rows[mask].astype(np.float64).mean(axis=0).tobytes()
    with pytest.raises(ValueError):
        mean_row(rows, np.zeros(1000, dtype=bool))


def test_a_builds_centre_is_the_centre_embed_makes_from_its_files(monkeypatch):
    monkeypatch.setattr(quantized, "CHUNK", 100)
    rows = _unit(700, 32, seed=5)
    covered = [i % 5 != 0 for i in range(700)]
    embedded = Embedded("m", rows, [""] * 700, covered)
    encoded, _ = embedded.carried()
    assert embedded.centre() == centre_of([e for e, ok in zip(encoded, covered) if ok])
    assert Embedded("m", rows, [""] * 700, [False] * 700).centre() == b""


def test_centroids_of_encoded_vectors_are_the_builds_of_its_rows():
    """A delegation's centroids made from the vectors zone files carry (the leaf-map processes of a build,
    ``tooldns embed``) are those the build makes of its rows: the covered tools' distinct vectors, more of
    them than centroids, some shared."""
    from tooldns.building.build import Embedded
    from tooldns.building.quantized import centroids_of

    rng = np.random.default_rng(3)
    rows = rng.normal(size=(200, 48)).astype(np.float32)
    rows[100:120] = rows[0]  # twenty tools of one text
    covered = [i % 7 != 0 for i in range(200)]
    embedded = Embedded("m", rows, [""] * 200, covered)
    members = list(range(0, 200, 2))
    encoded = [embedded.tool_fields(i)["vector"] for i in members if covered[i]]
    made = embedded.centroids(members)
    assert len(made) == Embedded.CENTROIDS and centroids_of(encoded, Embedded.CENTROIDS) == made
    assert centroids_of([], 4) == () and embedded.centroids([0, 7, 14]) == ()


def test_many_rows_are_clustered_on_a_sample_and_every_row_counts_in_its_centre(monkeypatch):
    """Beyond KMEANS_SAMPLE rows, k-means is fitted on a fixed sample, then every row is assigned and
    averaged: four far-apart groups still come back as their means, the same twice."""
    from tooldns.scoring import hybrid

    monkeypatch.setattr(hybrid, "KMEANS_SAMPLE", 300)
    rng = np.random.default_rng(3)
    means = np.eye(8, dtype=np.float32)[:4] * 10
    x = np.vstack([m + rng.normal(0, 0.1, (250, 8)).astype(np.float32) for m in means])
    centres = hybrid.kmeans_centres(x, 4)
    assert np.array_equal(centres, hybrid.kmeans_centres(x, 4))
    for i, m in enumerate(means):  # each group's mean over all of its 250 rows, not over the sample's few
        nearest = centres[np.argmin(np.linalg.norm(centres - m, axis=1))]
        assert np.allclose(nearest, x[i * 250:(i + 1) * 250].mean(axis=0), atol=1e-5)
    small = hybrid.kmeans_centres(x[:200], 4)  # within the sample: every row fitted, as before
    assert len(small) == 4
