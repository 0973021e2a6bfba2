"""NumPy reference for the sparse input layer (spec 6.1, 6.2).

See ``destiny.kernels`` for the conventions (dimension letters, CSR batches, outputs first).
"""

from __future__ import annotations

import numpy as np


def _entry_values(indices, values):
    return np.ones(len(indices), dtype=np.float32) if len(values) == 0 else values


def _entry_rows(indptr):
    return np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))


def sparse_fc_forward(out, indptr, indices, values, W, b):
    """``out[B, O] = b + sum over a row's entries of values[k] * W[indices[k]]`` (spec 6.1).

    The sparse input layer never fills in the zeros: each listed feature adds its row of
    ``W`` [I, O]. A feature listed twice in a row adds its row twice (quirk 10.5).
    """
    dense = np.zeros((len(indptr) - 1, W.shape[0]), dtype=np.float64)
    np.add.at(dense, (_entry_rows(indptr), indices), _entry_values(indices, values))
    out[:] = (dense @ W.astype(np.float64) + b).astype(out.dtype)


def sparse_add(out, indptr, indices, values, scale, col_offset):
    """``out[r, j] += scale * values[k]`` for each entry k of row r with feature
    ``col_offset + j``, one entry at a time in entry order; entries outside out's columns are
    left out.

    A Skip from an Input layer (spec 3.16) adds the input's activations to a layer's sum: for
    a sparse input, its entries (value 1 for Boolean data). ``scale`` is q for denoised Boolean
    data (spec 3.9); ``col_offset`` is the first feature of the columns that ``out`` holds (a
    rank's share under MPI). Each term is rounded to out's precision before it is added, so
    every backend adds the same numbers.
    """
    rows = _entry_rows(indptr)
    cols = np.asarray(indices, dtype=np.int64) - col_offset
    inside = (cols >= 0) & (cols < out.shape[1])
    terms = (scale * _entry_values(indices, values).astype(np.float64)).astype(out.dtype)
    np.add.at(out, (rows[inside], cols[inside]), terms[inside])  # (in order, unbuffered)


def sparse_fc_weight_grad(dW, indptr, indices, values, delta, scale):
    """``dW[i] += scale * sum over entries k with indices[k] == i of values[k] * delta[row(k)]``.

    Only rows of features present in the batch are touched (spec 6.2); the caller zeroes or
    keeps the others. Each entry uses its own value, fixing DSSTNE's analog-gradient defect
    (quirk 10.19: DSSTNE used the first value of each chunk).
    """
    contrib = (_entry_values(indices, values)[:, None].astype(np.float64)
               * delta[_entry_rows(indptr)].astype(np.float64))
    acc = np.zeros(dW.shape, dtype=np.float64)
    np.add.at(acc, indices, contrib)
    present = np.unique(indices)
    dW[present] += (scale * acc[present]).astype(dW.dtype)
