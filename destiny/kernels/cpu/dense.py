"""The dense operations of a network step on the CPU: BLAS products, numba loops on all cores.

Same names and signatures as ``destiny.kernels.reference.dense``. NumPy's own elementwise
operations run on one core; these loops split rows between threads, so a step keeps both cores
busy between its matrix products.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

# Allocation is NumPy's.
from destiny.kernels.reference.dense import (  # noqa: F401
    download, empty, free_memory, synchronize, to_device, to_host, zeros)


def gemm(out, a, b, trans_a=False, trans_b=False, alpha=1.0, beta=0.0):
    """``out = alpha * op(a) @ op(b) + beta * out`` through NumPy's BLAS.

    NumPy has no alpha: the smaller operand is scaled into a temporary instead (for a weight
    gradient ``X.T @ dZ``, that is [B, n] rather than the [n_in, n_out] product).
    """
    A = a.T if trans_a else a
    Bm = b.T if trans_b else b
    if alpha != 1.0:
        if A.size <= Bm.size:
            A = A * A.dtype.type(alpha)
        else:
            Bm = Bm * Bm.dtype.type(alpha)
    if beta == 0.0:
        np.matmul(A, Bm, out=out)
    else:
        if beta != 1.0:
            scale(out, beta)
        out += A @ Bm


@njit(cache=True, parallel=True)
def add(out, x):
    """``out += x`` (same shapes, 2-D)."""
    for r in prange(out.shape[0]):
        for j in range(out.shape[1]):
            out[r, j] += x[r, j]


@njit(cache=True, parallel=True)
def _add_bias(out, b, s):
    for r in prange(out.shape[0]):
        for j in range(out.shape[1]):
            out[r, j] += s * b[j]


def add_bias(out, b, scale=1.0):
    """``out[r, :] += scale * b`` for every row r."""
    _add_bias(out, b, out.dtype.type(scale))


@njit(cache=True, parallel=True)
def multiply(out, x):
    """``out *= x`` elementwise (same shapes, 2-D)."""
    for r in prange(out.shape[0]):
        for j in range(out.shape[1]):
            out[r, j] *= x[r, j]


@njit(cache=True, parallel=True)
def _scale(flat, factor):
    for i in prange(flat.size):
        flat[i] *= factor


def scale(out, factor):
    """``out *= factor``."""
    _scale(out.reshape(-1), out.dtype.type(factor))


@njit(cache=True, parallel=True)
def copy(out, x):
    """``out[...] = x`` (same shapes, 2-D)."""
    for r in prange(out.shape[0]):
        for j in range(out.shape[1]):
            out[r, j] = x[r, j]


def fill(out, value):
    """``out[...] = value``."""
    out.fill(value)


@njit(cache=True)
def column_block_sums(x, lo, hi):
    """Sums of the columns [lo, hi) of ``x`` [B, N] in float64, each in row order."""
    acc = np.zeros(hi - lo, dtype=np.float64)
    for r in range(x.shape[0]):
        row = x[r, lo:hi]  # a contiguous slice: the inner loop vectorizes
        for k in range(hi - lo):
            acc[k] += row[k]
    return acc


@njit(cache=True, parallel=True)
def _column_means(out, x, column_block):
    n_rows, n_cols = x.shape
    for c in prange((n_cols + column_block - 1) // column_block):
        lo = c * column_block
        hi = min(lo + column_block, n_cols)
        acc = column_block_sums(x, lo, hi)
        for k in range(hi - lo):
            out[lo + k] = acc[k] / n_rows


def column_mean(out, x):
    """``out[j] = mean over rows of x[:, j]``, summed in float64 in row order."""
    if x.shape[0] == 0:
        out[...] = np.nan
        return
    _column_means(out, x, 512)


@njit(cache=True, parallel=True)
def _zero_rows(x, rows):
    for i in prange(len(rows)):
        x[rows[i]] = 0  # a repeated row is zeroed twice: harmless


def zero_rows(x, rows):
    """``x[rows] = 0`` (``rows`` may repeat): forget a sparse gradient's touched rows."""
    _zero_rows(x, np.asarray(rows))


# The reductions over a whole matrix, once per epoch (the regularization term, the check that
# the weights are finite), read it in place: NumPy's made a float64 copy for the sums (twice
# the matrix) and a boolean one for the check, so that training whose weights, gradients and
# optimizer state fitted in memory took twice its largest matrix more at each epoch's end (a
# 18,500 x 18,500 matrix trained with sgd: a peak of 5.8 GB of RSS for 2.9 GB of arrays).
_SQUARES, _ABSOLUTE = 0, 1


def _rows(x):
    """``x`` as a 2-D view (a vector: one row)."""
    return x.reshape(x.shape[0], x.size // max(x.shape[0], 1)) if x.ndim > 1 else x.reshape(1, -1)


@njit(cache=True, parallel=True)
def _sum(x, kind):
    total = 0.0
    for r in prange(x.shape[0]):
        s = 0.0  # (a row's own sum, in float64: each adds up no more than a row's terms)
        for j in range(x.shape[1]):
            v = np.float64(x[r, j])
            s += v * v if kind == _SQUARES else abs(v)
        total += s
    return total


def sum_squares(x) -> float:
    """Sum of ``x**2`` in float64."""
    return float(_sum(_rows(x), _SQUARES))


def abs_sum(x) -> float:
    """Sum of ``|x|`` in float64."""
    return float(_sum(_rows(x), _ABSOLUTE))


@njit(cache=True, parallel=True)
def _count_not_finite(x):
    found = 0
    for r in prange(x.shape[0]):
        for j in range(x.shape[1]):
            if not np.isfinite(x[r, j]):
                found += 1
                break  # (one in a row tells)
    return found


def all_finite(x) -> bool:
    """Whether no element of ``x`` is NaN or infinite."""
    return _count_not_finite(_rows(x)) == 0
