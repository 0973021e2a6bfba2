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
