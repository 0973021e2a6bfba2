"""The sparse input layer kernels of every backend against the NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest

from destiny.kernels.reference import sparse as ref_sparse
from destiny.kernels.cpu import sparse as cpu_sparse

BACKENDS = {"reference": ref_sparse, "cpu": cpu_sparse}


def random_batch(rng, rows, features, boolean, max_per_row=12):
    lengths = rng.integers(0, max_per_row, size=rows)
    indptr = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    indices = rng.integers(0, features, size=indptr[-1]).astype(np.int32)  # repeats included
    values = (np.zeros(0, dtype=np.float32) if boolean
              else rng.normal(size=indptr[-1]).astype(np.float32))
    return indptr, indices, values


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("boolean", [True, False])
def test_forward_matches_dense_product(backend, boolean):
    rng = np.random.default_rng(1)
    indptr, indices, values = random_batch(rng, rows=37, features=50, boolean=boolean)
    W = rng.normal(size=(50, 70)).astype(np.float32)
    b = rng.normal(size=70).astype(np.float32)
    out = np.full((37, 70), np.nan, dtype=np.float32)
    BACKENDS[backend].sparse_fc_forward(out, indptr, indices, values, W, b)
    X = np.zeros((37, 50))
    rows = np.repeat(np.arange(37), np.diff(indptr))
    np.add.at(X, (rows, indices), 1.0 if boolean else values)  # repeats count twice
    np.testing.assert_allclose(out, X @ W + b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("boolean", [True, False])
def test_weight_grad_touches_only_present_rows(backend, boolean):
    rng = np.random.default_rng(2)
    indptr, indices, values = random_batch(rng, rows=29, features=80, boolean=boolean)
    delta = rng.normal(size=(29, 130)).astype(np.float32)
    dW = np.full((80, 130), 7.0, dtype=np.float32)
    BACKENDS[backend].sparse_fc_weight_grad(dW, indptr, indices, values, delta, -0.5)
    X = np.zeros((29, 80))
    rows = np.repeat(np.arange(29), np.diff(indptr))
    np.add.at(X, (rows, indices), 1.0 if boolean else values)
    expected = np.full((80, 130), 7.0)
    present = np.unique(indices)
    expected[present] += -0.5 * (X.T @ delta)[present]
    np.testing.assert_allclose(dW, expected, rtol=1e-5, atol=1e-5)
    absent = np.setdiff1d(np.arange(80), present)
    assert np.all(dW[absent] == 7.0)


def test_empty_rows_and_empty_batch():
    W = np.ones((4, 3), dtype=np.float32)
    b = np.arange(3, dtype=np.float32)
    for backend in BACKENDS.values():
        out = np.empty((2, 3), dtype=np.float32)
        backend.sparse_fc_forward(out, np.zeros(3, dtype=np.int64), np.zeros(0, dtype=np.int32),
                                  np.zeros(0, dtype=np.float32), W, b)
        np.testing.assert_array_equal(out, np.tile(b, (2, 1)))
