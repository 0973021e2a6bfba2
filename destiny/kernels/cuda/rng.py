"""numba.cuda kernels for the counter-based uniforms of ``destiny.kernels.counter_rng``.

Same names and signatures as ``destiny.kernels.cpu.rng``; every thread hashes its own
(key, row, col), so the draws are bit for bit those of the cpu and reference backends.

The 64-bit products of the hash are taken as 32-bit limbs (``_mul64``). A GPU wraps uint64
products silently, but the simulator computes with NumPy scalars, which warn on every
wrap-around; with limbs no intermediate ever exceeds 64 bits, so one code path runs in both
and the simulator tests check the code the GPU runs. Three multiplies instead of one cost
nothing next to the memory traffic of a fill.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from destiny.kernels.counter_rng import MUL1, MUL2, UNIFORM_SCALE, UNIFORM_SHIFT
from destiny.kernels.cuda.csr import row_of
from destiny.kernels.cuda.launch import THREADS, blocks_for, device_arrays, kernel

_U = np.uint64
_LOW = _U(0xFFFFFFFF)
_S32 = _U(32)
_S30, _S27, _S31 = _U(30), _U(27), _U(31)
_SHIFT = _U(UNIFORM_SHIFT)
# The multipliers of SplitMix64's finaliser, as (low, high) 32-bit limbs.
_M1_LO, _M1_HI = _U(MUL1 & 0xFFFFFFFF), _U(MUL1 >> 32)
_M2_LO, _M2_HI = _U(MUL2 & 0xFFFFFFFF), _U(MUL2 >> 32)


@cuda.jit(device=True)
def _mul64(a, b_lo, b_hi):
    """``a * b mod 2**64`` for uint64 ``a`` and ``b = b_hi << 32 | b_lo``, without overflow."""
    a_lo = a & _LOW
    a_hi = a >> _S32
    low = a_lo * b_lo  # < 2**64
    # The high word: the cross products mod 2**32, plus the carry out of the low product.
    high = ((a_hi * b_lo) & _LOW) + ((a_lo * b_hi) & _LOW) + (low >> _S32)
    return ((high & _LOW) << _S32) | (low & _LOW)


@cuda.jit(device=True)
def _mix64(z):
    z = _mul64(z ^ (z >> _S30), _M1_LO, _M1_HI)
    z = _mul64(z ^ (z >> _S27), _M2_LO, _M2_HI)
    return z ^ (z >> _S31)


@cuda.jit(device=True)
def uniform(key, row, col):
    """u(key, row, col) in [0, 1), 24 bits; ``key``, ``row``, ``col`` as uint64."""
    h = _mix64(key ^ _mix64((row << _S32) | col))
    return np.float64(h >> _SHIFT) * UNIFORM_SCALE


@kernel
def _fill(out, key, row_offset, col_offset):
    n_cols = out.shape[1]
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, out.shape[0] * n_cols, stride):
        r = i // n_cols
        j = i - r * n_cols
        out[r, j] = uniform(key, _U(row_offset + r), _U(col_offset + j))


@device_arrays
def uniform_fill(out, key, row_offset, col_offset):
    """``out[r, j] = u(key, row_offset + r, col_offset + j)``: a block of one [rows, cols] draw."""
    if out.size:
        _fill[blocks_for(out.size), THREADS](out, _U(key), int(row_offset), int(col_offset))


@kernel
def _keep(keep, indptr, indices, key, row_offset, col_offset, p):
    # A thread per entry, its row by binary search in indptr: a batch's rows hold tens to
    # thousands of entries each, too uneven and too few rows (256) for a thread per row.
    n_rows = indptr.shape[0] - 1
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for k in range(indptr[0] + start, indptr[n_rows], stride):
        row = _U(row_offset + row_of(indptr, k))
        keep[k] = uniform(key, row, _U(col_offset + indices[k])) >= p


@device_arrays
def denoise_keep(keep, indptr, indices, key, row_offset, col_offset, p):
    """``keep[k] = u(key, row_offset + row(k), col_offset + indices[k]) >= p`` for a CSR matrix."""
    if indptr.shape[0] > 1 and indices.shape[0] > 0:
        _keep[blocks_for(indices.shape[0]), THREADS](keep, indptr, indices, _U(key),
                                                     int(row_offset), int(col_offset), float(p))
