"""NumPy reference for the counter-based uniforms of ``destiny.kernels.counter_rng``."""

from __future__ import annotations

import numpy as np

from destiny.kernels.counter_rng import MUL1, MUL2, UNIFORM_SCALE, UNIFORM_SHIFT

_U = np.uint64


def _mix64(z):
    z = (z ^ (z >> _U(30))) * _U(MUL1)
    z = (z ^ (z >> _U(27))) * _U(MUL2)
    return z ^ (z >> _U(31))


def _uniform(key, rows, cols):
    counter = (np.asarray(rows, dtype=np.uint64) << _U(32)) | np.asarray(cols, dtype=np.uint64)
    h = _mix64(_U(key) ^ _mix64(counter))
    return (h >> _U(UNIFORM_SHIFT)).astype(np.float64) * UNIFORM_SCALE


def uniform_fill(out, key, row_offset, col_offset):
    """``out[r, j] = u(key, row_offset + r, col_offset + j)``: a block of one [rows, cols] draw."""
    B, N = out.shape
    rows = np.arange(row_offset, row_offset + B, dtype=np.uint64)[:, None]
    cols = np.arange(col_offset, col_offset + N, dtype=np.uint64)[None, :]
    with np.errstate(over="ignore"):
        out[...] = _uniform(key, rows, cols).astype(out.dtype)


def denoise_keep(keep, indptr, indices, key, row_offset, col_offset, p):
    """``keep[k] = u(key, row_offset + row(k), col_offset + indices[k]) >= p`` for a CSR matrix.

    Spec 3.9's denoising drops each stored entry with probability p; the draw depends on the
    entry's example and feature only, not on which rank holds it.
    """
    rows = np.repeat(np.arange(len(indptr) - 1, dtype=np.uint64), np.diff(indptr)) + _U(row_offset)
    cols = np.asarray(indices, dtype=np.uint64) + _U(col_offset)
    with np.errstate(over="ignore"):
        keep[...] = _uniform(key, rows, cols) >= p
