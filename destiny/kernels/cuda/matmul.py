"""Dense matrix products on the device: cuBLAS through CuPy, or a tiled numba.cuda kernel.

The dense products of a network (hidden layers, the output layer, their gradients) are what a
vendor library does best, so ``gemm`` hands them to cuBLAS whenever CuPy can be imported and a
real GPU is present. It calls cuBLAS's gemm through CuPy's binding on the raw device pointers
of the numba.cuda arrays (``__cuda_array_interface__``): no wrapper objects, no copies. CuPy's
cuBLAS handle runs on CuPy's current stream, the legacy default stream, as numba's kernels
here do, so a product is ordered with the kernels around it.

Without CuPy (and always under numba's simulator, which has no real device memory for CuPy to
wrap) ``gemm`` falls back to ``tiled_gemm``: the textbook shared-memory tiled product, correct
for any shape but several times slower than cuBLAS. It accumulates in float64.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from destiny.kernels.cuda.launch import SIMULATED, device_arrays, kept, kernel

# Tile edge of the fallback: a block is TILE x TILE threads, each computing one output element.
# In the simulator, where each syncthreads is a round of Python threads polled by the block
# manager, a product of m x n x k costs about m*n*k / TILE of that polling: 8 is 2-3x faster
# there than 2 or 16 (with the grid below, ``MAX_GRID_X``).
TILE = 8 if SIMULATED else 16


@functools.lru_cache(maxsize=1)
def _cublas():
    """(cupy, cuBLAS's Python binding) if CuPy is importable and sees a GPU, else None.

    Asked once per process: every product asks, and the device count is a driver call."""
    if SIMULATED:
        return None
    try:
        import cupy
        from cupy_backends.cuda.libs import cublas

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
    except Exception:  # not installed, or no usable driver: CuPy raises its own types
        return None
    return cupy, cublas


def cublas_available() -> bool:
    """Whether ``gemm`` runs on cuBLAS (CuPy importable and a real GPU present)."""
    return _cublas() is not None


def cupy_module():
    """CuPy, where ``cublas_available()``."""
    return _cublas()[0]


def _op_shape(x, trans):
    return (x.shape[1], x.shape[0]) if trans else (x.shape[0], x.shape[1])


def _check_shapes(out, a, b, trans_a, trans_b):
    m, k = _op_shape(a, trans_a)
    k2, n = _op_shape(b, trans_b)
    if k != k2 or tuple(out.shape) != (m, n):
        raise ValueError(f"gemm shapes do not match: op(a) is {m}x{k}, op(b) is {k2}x{n}, "
                         f"out is {'x'.join(map(str, out.shape))}")
    return m, n, k


# cuBLAS's math modes (cublasMath_t): float32 products in full float32, or on the tensor
# cores in TF32 (inputs rounded to a 10-bit mantissa, sums in float32).
DEFAULT_MATH, TF32_MATH = 0, 3


@device_arrays
def gemm(out, a, b, trans_a=False, trans_b=False, alpha=1.0, beta=0.0, tf32=False):
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
    tf32 : bool
        Let cuBLAS compute a float32 product in TF32 on the tensor cores (Ampere and later):
        several times the speed, with inputs rounded to 10 bits of mantissa. Only where
        asked (``get_backend(..., tf32=True)``): DSSTNE's products were full float32.

    cuBLAS computes it when ``cublas_available()``, else ``tiled_gemm``. float32 arrays take
    sgemm, in full float32 unless ``tf32``; float64 take dgemm.
    """
    m, n, k = _check_shapes(out, a, b, trans_a, trans_b)
    lib = _cublas()
    if lib is None:
        tiled_gemm(out, a, b, trans_a, trans_b, alpha, beta)
        return
    if m == 0 or n == 0:
        return
    cupy, cublas = lib
    dtype = np.dtype(out.dtype)
    if dtype not in _GEMM or a.dtype != dtype or b.dtype != dtype:
        raise TypeError(f"gemm takes float32 or float64 arrays of one dtype, not {a.dtype}, "
                        f"{b.dtype} -> {out.dtype}")
    for x in (out, a, b):
        if not x.is_c_contiguous():
            raise ValueError("gemm takes C-contiguous arrays")
    # cuBLAS is column-major, and a C-order [r, c] array read column-major is its [c, r]
    # transpose. So out^T = op(b)^T @ op(a)^T is a column-major product of the same buffers
    # with the operands swapped and the same transpose flags: no copy. A leading dimension
    # must be at least 1 even when k == 0 (then cuBLAS computes out = beta * out).
    scalars = np.array([alpha, beta], dtype)  # host pointer mode: read during the call
    flag = {False: cublas.CUBLAS_OP_N, True: cublas.CUBLAS_OP_T}
    handle = cupy.cuda.device.get_cublas_handle()
    cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)  # CuPy's default; be sure
    # The handle is the process's (CuPy's, per device): set its mode for every product.
    cublas.setMathMode(handle, TF32_MATH if tf32 and dtype == np.float32 else DEFAULT_MATH)
    getattr(cublas, _GEMM[dtype])(
        handle, flag[bool(trans_b)], flag[bool(trans_a)],
        n, m, k, scalars.ctypes.data, _pointer(b), max(b.shape[1], 1),
        _pointer(a), max(a.shape[1], 1), scalars.ctypes.data + dtype.itemsize,
        _pointer(out), max(n, 1))


_GEMM = {np.dtype(np.float32): "sgemm", np.dtype(np.float64): "dgemm"}


def _pointer(x) -> int:
    # Kept on the array: a numba array's __cuda_array_interface__ builds a dict on every read.
    return kept(x, "pointer", lambda a: a.__cuda_array_interface__["data"][0])


@kernel
def _tiled(out, a, b, trans_a, trans_b, alpha, beta, k_total):
    tile_a = cuda.shared.array((TILE, TILE), np.float64)
    tile_b = cuda.shared.array((TILE, TILE), np.float64)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    m, n = out.shape
    # Tiles stride over the grid: its y holds at most 65,535 blocks, and a product with
    # millions of rows (a catalogue-wide layer's gradient) has more row tiles than that.
    # (The bounds depend on the block only, so every thread of a block reaches each
    # syncthreads.)
    for row0 in range(cuda.blockIdx.y * TILE, m, cuda.gridDim.y * TILE):
        row = row0 + ty  # of out
        for col0 in range(cuda.blockIdx.x * TILE, n, cuda.gridDim.x * TILE):
            col = col0 + tx
            acc = 0.0
            for k0 in range(0, k_total, TILE):
                # Each thread loads one element of op(a)[row, k0 + tx] and op(b)[k0 + ty, col].
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


# The most blocks a launch takes along each axis: a GPU's limits (x: 2^31 - 1, y: 65,535).
# The simulator starts a Python thread for every thread of every block, which was most of
# the time of the tests that train under it: there a launch takes 2 x 2 blocks, which stride
# over the other tiles (so every simulated product runs the striding too).
MAX_GRID_X, MAX_GRID_Y = (2, 2) if SIMULATED else (2**31 - 1, 65_535)


@device_arrays
def tiled_gemm(out, a, b, trans_a=False, trans_b=False, alpha=1.0, beta=0.0):
    """``gemm`` by the numba.cuda tiled kernel, whatever is installed (the fallback; a check)."""
    m, n, k = _check_shapes(out, a, b, trans_a, trans_b)
    if m == 0 or n == 0:
        return
    grid = (min((n + TILE - 1) // TILE, MAX_GRID_X), min((m + TILE - 1) // TILE, MAX_GRID_Y))
    _tiled[grid, (TILE, TILE)](out, a, b, bool(trans_a), bool(trans_b), float(alpha),
                               float(beta), k)
