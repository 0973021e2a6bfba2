"""The sparse input layer kernels of every backend against the NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest

from .backends import family, tiny

BACKENDS = family("sparse")


def sizes(backend, rows, features, units):
    """The test's shape, or a tiny one for the CUDA simulator (every thread runs in Python):
    there, more units than a block has threads (8), so the gradient's grid has two columns of
    blocks."""
    return (5, 30, 9) if tiny(backend) else (rows, features, units)


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
    n_rows, n_features, n_out = sizes(backend, 37, 50, 70)
    indptr, indices, values = random_batch(rng, rows=n_rows, features=n_features,
                                           boolean=boolean)
    W = rng.normal(size=(n_features, n_out)).astype(np.float32)
    b = rng.normal(size=n_out).astype(np.float32)
    out = np.full((n_rows, n_out), np.nan, dtype=np.float32)
    BACKENDS[backend].sparse_fc_forward(out, indptr, indices, values, W, b)
    X = np.zeros((n_rows, n_features))
    rows = np.repeat(np.arange(n_rows), np.diff(indptr))
    np.add.at(X, (rows, indices), 1.0 if boolean else values)  # repeats count twice
    np.testing.assert_allclose(out, X @ W + b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("boolean", [True, False])
def test_cpu_forward_adds_the_rows_in_order_bit_for_bit(boolean):
    """The cpu gather adds eight, then four rows of W per pass over the output row; the sums
    must still be the sequential ones, rounding for rounding (rows of 0 to 23 entries: every
    remainder after each)."""
    rng = np.random.default_rng(2)
    indptr, indices, values = random_batch(rng, 80, 60, boolean, max_per_row=24)
    W = rng.normal(size=(60, 33)).astype(np.float32)
    b = rng.normal(size=33).astype(np.float32)
    out = np.empty((80, 33), np.float32)
    BACKENDS["cpu"].sparse_fc_forward(out, indptr, indices, values, W, b)
    assert set(np.diff(indptr)) >= set(range(24)) - {0}  # every length up to 23 occurs
    for r in range(80):
        expected = b.copy()
        for k in range(indptr[r], indptr[r + 1]):
            expected = expected + (W[indices[k]] if boolean else values[k] * W[indices[k]])
        np.testing.assert_array_equal(out[r], expected)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("boolean", [True, False])
def test_weight_grad_touches_only_present_rows(backend, boolean):
    rng = np.random.default_rng(2)
    n_rows, n_features, n_out = sizes(backend, 29, 80, 130)
    indptr, indices, values = random_batch(rng, rows=n_rows, features=n_features,
                                           boolean=boolean)
    delta = rng.normal(size=(n_rows, n_out)).astype(np.float32)
    dW = np.full((n_features, n_out), 7.0, dtype=np.float32)
    BACKENDS[backend].sparse_fc_weight_grad(dW, indptr, indices, values, delta, -0.5)
    X = np.zeros((n_rows, n_features))
    rows = np.repeat(np.arange(n_rows), np.diff(indptr))
    np.add.at(X, (rows, indices), 1.0 if boolean else values)
    expected = np.full((n_features, n_out), 7.0)
    present = np.unique(indices)
    expected[present] += -0.5 * (X.T @ delta)[present]
    np.testing.assert_allclose(dW, expected, rtol=1e-5, atol=1e-5)
    absent = np.setdiff1d(np.arange(n_features), present)
    assert len(absent) and np.all(dW[absent] == 7.0)


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_weight_grad_is_deterministic_in_entry_order(backend):
    # Both group the entries by feature and sum each feature's in entry order in float64: the
    # same result on every run (no float atomics), and the same order on cpu and cuda. On a
    # GPU, the fused multiply-adds that CUDA compiles may change the last bits from the cpu's;
    # the simulator computes as the cpu does, so there the two agree bit for bit.
    rng = np.random.default_rng(3)
    n_rows, n_features, n_out = sizes(backend, 64, 40, 33)
    indptr, indices, values = random_batch(rng, rows=n_rows, features=n_features,
                                           boolean=False)
    delta = rng.normal(size=(n_rows, n_out)).astype(np.float32)
    results = {}
    for name, run in [("reference", 0), ("cpu", 0), (backend, 1)]:
        dW = np.ones((n_features, n_out), dtype=np.float32)
        BACKENDS[name].sparse_fc_weight_grad(dW, indptr, indices, values, delta, 0.25)
        results[name, run] = dW
    np.testing.assert_allclose(results[backend, 1], results["reference", 0], rtol=1e-6)
    if backend == "cpu" or tiny(backend):
        np.testing.assert_array_equal(results[backend, 1], results["cpu", 0])
    dW = np.ones((n_features, n_out), dtype=np.float32)
    BACKENDS[backend].sparse_fc_weight_grad(dW, indptr, indices, values, delta, 0.25)
    np.testing.assert_array_equal(dW, results[backend, 1])


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_empty_rows_and_empty_batch(backend):
    W = np.ones((4, 3), dtype=np.float32)
    b = np.arange(3, dtype=np.float32)
    kernels = BACKENDS[backend]
    out = np.empty((2, 3), dtype=np.float32)
    no_entries = (np.zeros(3, dtype=np.int64), np.zeros(0, dtype=np.int32),
                  np.zeros(0, dtype=np.float32))
    kernels.sparse_fc_forward(out, *no_entries, W, b)
    np.testing.assert_array_equal(out, np.tile(b, (2, 1)))
    dW = np.full_like(W, 2.0)
    kernels.sparse_fc_weight_grad(dW, *no_entries, out, 1.0)
    np.testing.assert_array_equal(dW, 2.0)
    kernels.sparse_fc_forward(np.empty((0, 3), dtype=np.float32), np.zeros(1, dtype=np.int64),
                              *no_entries[1:], W, b)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("boolean", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sparse_add_adds_the_entries_of_its_columns(backend, boolean, dtype):
    """A Skip from an Input layer (spec 3.16): out += the batch as a dense matrix, columns
    col_offset onward only (a rank's share), a feature listed twice added twice (quirk 10.5),
    bit for bit the reference's sums in every backend."""
    rng = np.random.default_rng(5)
    n_rows, n_features, _ = sizes(backend, 37, 50, 0)
    indptr, indices, values = random_batch(rng, n_rows, n_features, boolean)
    lo, width, scale = 7, n_features - 19, 1.0 / 0.7  # q of p = 0.3: not a float32
    start = rng.normal(size=(n_rows, width)).astype(dtype)
    out = start.copy()
    BACKENDS[backend].sparse_add(out, indptr, indices, values, scale, lo)
    X = np.zeros((n_rows, n_features))
    rows = np.repeat(np.arange(n_rows), np.diff(indptr))
    np.add.at(X, (rows, indices), scale * (1.0 if boolean else values.astype(np.float64)))
    np.testing.assert_allclose(out, start + X[:, lo:lo + width], rtol=1e-5, atol=1e-5)
    expected = start.copy()
    BACKENDS["reference"].sparse_add(expected, indptr, indices, values, scale, lo)
    np.testing.assert_array_equal(out, expected)
    assert set(indices) - set(range(lo, lo + width)), "every entry was inside: a weak test"


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_sparse_add_of_no_entries_changes_nothing(backend):
    out = np.arange(6, dtype=np.float32).reshape(2, 3)
    BACKENDS[backend].sparse_add(out, np.zeros(3, dtype=np.int64), np.zeros(0, dtype=np.int32),
                                 np.zeros(0, dtype=np.float32), 2.0, 0)
    np.testing.assert_array_equal(out, np.arange(6).reshape(2, 3))
    BACKENDS[backend].sparse_add(np.empty((0, 3), dtype=np.float32), np.zeros(1, dtype=np.int64),
                                 np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32), 2.0, 0)



@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("boolean", [True, False])
def test_sparse_add_adds_a_rows_repeats_in_entry_order(backend, boolean):
    """A feature listed again in a row adds again, each term rounded into the sum in entry
    order (quirk 10.5), whether the repeats are neighbours (one round of the CUDA kernel's
    block) or far apart: in float32 (1 + 1e8) - 1e8 is 0, where 1 + (1e8 - 1e8) would be 1.
    Feature 3 is past out's columns (another rank's)."""
    indptr = np.array([0, 3, 3, 12], np.int64)
    indices = np.array([2, 2, 2, 0, 1, 0, 3, 0, 2, 2, 1, 1], np.int32)
    values = (np.zeros(0, np.float32) if boolean else
              np.array([1e8, -1e8, 1, 5, 1e8, 0.5, 7, 0.25, 3, -3, -1e8, 2], np.float32))
    out = np.ones((3, 3), np.float32)
    BACKENDS[backend].sparse_add(out, indptr, indices, values, 1.0, 0)
    expected = [[1, 1, 4], [1, 1, 1], [4, 4, 3]] if boolean else [[1, 1, 1], [1, 1, 1],
                                                                     [6.75, 2, 1]]
    np.testing.assert_array_equal(out, np.array(expected, np.float32))


def test_cuda_sparse_add_gives_each_row_a_block(monkeypatch):
    """A block per row, its threads along the row's entries: a thread per row left a batch
    of 256 rows 256 threads on the whole GPU, each walking its row's entries one at a time
    (batch.py's gather measured 0.14 ms that way for a benchmark-network batch on an H100)."""
    from destiny.kernels.cuda import launch
    from destiny.kernels.cuda import sparse as cuda_sparse

    launches = []

    class Launch:
        def __getitem__(self, config):
            launches.append(config)
            return lambda *args: None

    monkeypatch.setattr(cuda_sparse, "_add_entries", Launch())
    cuda_sparse.sparse_add(np.zeros((3, 4), np.float32), np.array([0, 1, 1, 2], np.int64),
                           np.array([0, 3], np.int32), np.zeros(0, np.float32), 1.0, 0)
    assert launches == [(min(3, launch.MAX_BLOCKS), launch.ROW_THREADS)]
