"""Dense matrix products on the device: cuBLAS through CuPy, or a tiled numba.cuda kernel.

The dense products of a network (hidden layers, the output layer, their gradients) are what a
vendor library does best, so ``gemm`` hands them to cuBLAS whenever CuPy can be imported and a
real GPU is present. CuPy and numba.cuda share device memory through
``__cuda_array_interface__``: ``cupy.asarray(numba_array)`` wraps the same memory, no copy.
Both launch on the default stream here, so a product is ordered with the numba kernels around
it.

Without CuPy (and always under numba's simulator, which has no real device memory for CuPy to
wrap) ``gemm`` falls back to ``tiled_gemm``: the textbook shared-memory tiled product, correct
for any shape but several times slower than cuBLAS. It accumulates in float64.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from destiny.kernels.cuda.launch import SIMULATED, device_arrays

# Tile edge of the fallback: a block is TILE x TILE threads, each computing one output element.
TILE = 2 if SIMULATED else 16


@functools.lru_cache(maxsize=1)
def _cupy():
    """The cupy module if it is importable and sees a GPU, else None (decided once)."""
    if SIMULATED:
        return None
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
    except Exception:  # not installed, or no usable driver: CuPy raises its own types
        return None
    return cupy


def cublas_available() -> bool:
    """Whether ``gemm`` runs on cuBLAS (CuPy importable and a real GPU present)."""
    return _cupy() is not None


def _op_shape(x, trans):
    return (x.shape[1], x.shape[0]) if trans else (x.shape[0], x.shape[1])


def _check_shapes(out, a, b, trans_a, trans_b):
    m, k = _op_shape(a, trans_a)
    k2, n = _op_shape(b, trans_b)
    if k != k2 or tuple(out.shape) != (m, n):
        raise ValueError(f"gemm shapes do not match: op(a) is {m}x{k}, op(b) is {k2}x{n}, "
                         f"out is {'x'.join(map(str, out.shape))}")
    return m, n, k


@device_arrays
def gemm(out, a, b, trans_a=False, trans_b=False, alpha=1.0, beta=0.0):
    """``out = alpha * op(a) @ op(b) + beta * out``, in place; ``op(x)`` is ``x.T`` if trans.

    Parameters
    ----------
    out : device array [M, N]
        Written; read only when ``beta != 0`` (with ``beta == 0`` its old contents, NaN
        included, do not matter, as in BLAS).
    a : device array [M, K], or [K, M] with ``trans_a``
    b : device array [K, N], or [N, K] with ``trans_b``
        C-contiguous 2-D arrays of one float dtype (float32 in training).
    trans_a, trans_b : bool
        Use the transpose of ``a`` / ``b``: the weight gradient is ``X^T delta``
        (``trans_a``), the backward delta ``delta W^T`` (``trans_b``); no transposed copy is
        made.
    alpha, beta : float
        The scalars of BLAS's gemm.

    cuBLAS computes it when ``cublas_available()``, else ``tiled_gemm``.
    """
    _check_shapes(out, a, b, trans_a, trans_b)
    cupy = _cupy()
    if cupy is None:
        tiled_gemm(out, a, b, trans_a, trans_b, alpha, beta)
        return
    cupy.cublas.gemm("T" if trans_a else "N", "T" if trans_b else "N", cupy.asarray(a),
                     cupy.asarray(b), out=cupy.asarray(out), alpha=float(alpha),
                     beta=float(beta))


@cuda.jit
def _tiled(out, a, b, trans_a, trans_b, alpha, beta, k_total):
    tile_a = cuda.shared.array((TILE, TILE), np.float64)
    tile_b = cuda.shared.array((TILE, TILE), np.float64)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty  # of out
    col = cuda.blockIdx.x * TILE + tx
    m, n = out.shape
    acc = 0.0
    for k0 in range(0, k_total, TILE):
        # Each thread loads one element of op(a)[row, k0 + tx] and of op(b)[k0 + ty, col].
        ka, kb = k0 + tx, k0 + ty
        value = 0.0
        if row < m and ka < k_total:
            value = a[ka, row] if trans_a else a[row, ka]
        tile_a[ty, tx] = value
        value = 0.0
        if kb < k_total and col < n:
            value = b[col, kb] if trans_b else b[kb, col]
        tile_b[ty, tx] = value
        cuda.syncthreads()
        for kk in range(TILE):
            acc += tile_a[ty, kk] * tile_b[kk, tx]
        cuda.syncthreads()
    if row < m and col < n:
        if beta == 0.0:
            out[row, col] = alpha * acc
        else:
            out[row, col] = alpha * acc + beta * np.float64(out[row, col])


@device_arrays
def tiled_gemm(out, a, b, trans_a=False, trans_b=False, alpha=1.0, beta=0.0):
    """``gemm`` by the numba.cuda tiled kernel, whatever is installed (the fallback; a check)."""
    m, n, k = _check_shapes(out, a, b, trans_a, trans_b)
    if m == 0 or n == 0:
        return
    grid = ((n + TILE - 1) // TILE, (m + TILE - 1) // TILE)
    _tiled[grid, (TILE, TILE)](out, a, b, bool(trans_a), bool(trans_b), float(alpha),
                               float(beta), k)
