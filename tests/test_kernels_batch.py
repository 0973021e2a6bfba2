"""Assembling a minibatch from a CSR dataset the backend holds (kernels/*/batch.py)."""

from __future__ import annotations

import numpy as np
import pytest

from destiny.sparse import take_rows as numpy_take_rows

from .backends import family, tiny

BACKENDS = family("batch")


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("analog", [False, True])
def test_take_rows_equals_numpy_gather(backend, analog):
    rng = np.random.default_rng(7)
    n_rows = 6 if tiny(backend) else 200
    lengths = rng.integers(0, 5 if tiny(backend) else 30, size=n_rows)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    indices = rng.integers(0, 1000, size=indptr[-1]).astype(np.int32)
    values = rng.random(indptr[-1]).astype(np.float32) if analog else np.zeros(0, np.float32)
    rows = rng.permutation(n_rows)[: n_rows // 2].astype(np.int64)
    rows[-1] = rows[0]  # a row taken twice
    p, i, v = numpy_take_rows(indptr, indices, values if analog else None, rows)
    out_indices = np.full(len(i), -1, dtype=np.int32)
    out_values = np.full(len(i) if analog else 0, np.nan, dtype=np.float32)
    BACKENDS[backend].take_rows(out_indices, out_values, p, indptr, indices, values, rows)
    np.testing.assert_array_equal(out_indices, i)
    if analog:
        np.testing.assert_array_equal(out_values, v)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_take_rows_copies_the_value_of_a_lone_analog_entry(backend):
    indptr = np.array([0, 0, 1], dtype=np.int64)  # one entry in all: the values still count
    indices = np.array([4], dtype=np.int32)
    values = np.array([0.75], dtype=np.float32)
    rows = np.array([1, 0], dtype=np.int64)
    out_indptr = np.array([0, 1, 1], dtype=np.int64)
    out_indices = np.full(1, -1, dtype=np.int32)
    out_values = np.full(1, np.nan, dtype=np.float32)
    BACKENDS[backend].take_rows(out_indices, out_values, out_indptr, indptr, indices, values, rows)
    np.testing.assert_array_equal(out_indices, [4])
    np.testing.assert_array_equal(out_values, [0.75])
