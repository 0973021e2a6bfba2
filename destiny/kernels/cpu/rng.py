"""numba kernels for the counter-based uniforms of ``destiny.kernels.counter_rng``.

Same names and signatures as ``destiny.kernels.reference.rng``; each element is an
independent hash, so the loops run in parallel and the result does not depend on threads.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from destiny.kernels.counter_rng import MUL1, MUL2, UNIFORM_SCALE, UNIFORM_SHIFT

# uint64 constants: mixing a uint64 with a Python int would make numba compute in float64.
_M1, _M2 = np.uint64(MUL1), np.uint64(MUL2)
_S30, _S27, _S31, _S32 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(32)
_SHIFT = np.uint64(UNIFORM_SHIFT)


@njit(cache=True, inline="always")
def _mix64(z):
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@njit(cache=True, inline="always")
def uniform(key, row, col):
    """u(key, row, col) in [0, 1), 24 bits; ``key``, ``row``, ``col`` as uint64."""
    h = _mix64(key ^ _mix64((row << _S32) | col))
    return np.float64(h >> _SHIFT) * UNIFORM_SCALE


@njit(cache=True, parallel=True)
def _fill(out, key, row_offset, col_offset):
    B, N = out.shape
    for r in prange(B):
        row = np.uint64(row_offset + r)
        for j in range(N):
            out[r, j] = uniform(key, row, np.uint64(col_offset + j))


def uniform_fill(out, key, row_offset, col_offset):
    """``out[r, j] = u(key, row_offset + r, col_offset + j)``: a block of one [rows, cols] draw."""
    _fill(out, np.uint64(key), np.int64(row_offset), np.int64(col_offset))


@njit(cache=True, parallel=True)
def _keep(keep, indptr, indices, key, row_offset, col_offset, p):
    for r in prange(len(indptr) - 1):
        row = np.uint64(row_offset + r)
        for k in range(indptr[r], indptr[r + 1]):
            keep[k] = uniform(key, row, np.uint64(col_offset + indices[k])) >= p


def denoise_keep(keep, indptr, indices, key, row_offset, col_offset, p):
    """``keep[k] = u(key, row_offset + row(k), col_offset + indices[k]) >= p`` for a CSR matrix."""
    _keep(keep, indptr, indices, np.uint64(key), np.int64(row_offset), np.int64(col_offset),
          float(p))
