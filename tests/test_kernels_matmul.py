"""Dense products on the device (``destiny.kernels.cuda.matmul``) against NumPy.

Under the CUDA simulator (no GPU, no CuPy) ``gemm`` is the tiled numba kernel; on a GPU it is
cuBLAS through CuPy when CuPy is installed, and the ``gpu`` tests compare both with NumPy on
training-sized shapes.
"""

from __future__ import annotations

import ctypes
import itertools

import numpy as np
import pytest

from .backends import on_host, tiny

matmul = pytest.importorskip("destiny.kernels.cuda.matmul")
gemm = on_host(matmul.gemm)
tiled_gemm = on_host(matmul.tiled_gemm)


def operands(rng, m, n, k, trans_a, trans_b, dtype=np.float32):
    a = rng.normal(size=(k, m) if trans_a else (m, k)).astype(dtype)
    b = rng.normal(size=(n, k) if trans_b else (k, n)).astype(dtype)
    op_a = a.T if trans_a else a
    op_b = b.T if trans_b else b
    return a, b, op_a.astype(np.float64) @ op_b.astype(np.float64)


@pytest.mark.parametrize("trans_a, trans_b", list(itertools.product([False, True], repeat=2)))
def test_gemm_matches_numpy(trans_a, trans_b):
    rng = np.random.default_rng(2 * trans_a + trans_b)
    # Not multiples of the tile, and more than one tile along each.
    m, n, k = (11, 9, 19) if tiny("cuda") else (70, 45, 130)
    a, b, product = operands(rng, m, n, k, trans_a, trans_b)
    out = np.full((m, n), np.nan, dtype=np.float32)  # beta = 0 never reads out
    gemm(out, a, b, trans_a, trans_b)
    np.testing.assert_allclose(out, product, rtol=1e-5, atol=1e-5)
    c = rng.normal(size=(m, n)).astype(np.float32)
    out = c.copy()
    gemm(out, a, b, trans_a, trans_b, -0.5, 2.0)
    np.testing.assert_allclose(out, -0.5 * product + 2.0 * c, rtol=1e-5, atol=1e-5)


def test_tiled_gemm_tiles_beyond_the_grid(monkeypatch):
    """More row tiles than the grid's y holds (65,535 on a GPU: a catalogue-wide layer's
    gradient has millions of rows), and more column tiles than its x is given (the
    simulator's 2): the blocks stride over the rest."""
    monkeypatch.setattr(matmul, "MAX_GRID_X", 2)
    monkeypatch.setattr(matmul, "MAX_GRID_Y", 2)
    rng = np.random.default_rng(9)
    m, n = 5 * matmul.TILE + 1, 3 * matmul.TILE + 1
    for trans_a, trans_b in itertools.product([False, True], repeat=2):
        a, b, product = operands(rng, m, n, matmul.TILE + 1, trans_a, trans_b)  # one k past a tile
        out = np.full((m, n), np.nan, dtype=np.float32)
        tiled_gemm(out, a, b, trans_a, trans_b)
        np.testing.assert_allclose(out, product, rtol=1e-5, atol=1e-5)


def test_gemm_empty_inner_dimension_and_bad_shapes():
    out = np.full((2, 3), 4.0, dtype=np.float32)
    gemm(out, np.zeros((2, 0), np.float32), np.zeros((0, 3), np.float32), False, False, 1.0, 0.5)
    np.testing.assert_array_equal(out, 2.0)  # alpha * 0 + beta * out
    with pytest.raises(ValueError, match="shapes do not match"):
        gemm(out, np.zeros((2, 4), np.float32), np.zeros((5, 3), np.float32))
    with pytest.raises(ValueError, match="shapes do not match"):
        gemm(np.zeros((3, 3), np.float32), np.zeros((2, 4), np.float32),
             np.zeros((4, 3), np.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("trans_a, trans_b", list(itertools.product([False, True], repeat=2)))
def test_cublas_and_tiled_gemm_on_training_shapes(trans_a, trans_b):
    rng = np.random.default_rng(5)
    a, b, product = operands(rng, 512, 384, 1000, trans_a, trans_b)
    scale = np.abs(product).max()
    for fn in (gemm, tiled_gemm):
        out = np.empty((512, 384), dtype=np.float32)
        fn(out, a, b, trans_a, trans_b)
        np.testing.assert_allclose(out, product, rtol=1e-4, atol=1e-5 * scale)


@pytest.mark.gpu
def test_gemm_takes_cupy_arrays():
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng(6)
    a, b, product = operands(rng, 64, 32, 48, False, True)
    out = cupy.zeros((64, 32), dtype=cupy.float32)
    matmul.gemm(out, cupy.asarray(a), cupy.asarray(b), False, True)
    np.testing.assert_allclose(cupy.asnumpy(out), product, rtol=1e-5, atol=1e-5)


def test_gemm_sets_cublas_math_mode_for_each_product(monkeypatch):
    """With stand-ins for CuPy and its cuBLAS binding: a float32 product asked for TF32 runs
    in cuBLAS's TF32 math mode, and every other product (float32 by default, float64 always)
    in the default mode, set anew on the shared handle each time."""
    from numba import cuda

    calls = []

    class Cublas:
        CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_POINTER_MODE_HOST = 0, 1, 0

        def setPointerMode(self, handle, mode):
            pass

        def setMathMode(self, handle, mode):
            calls.append(("mode", handle, mode))

        def sgemm(self, handle, *args):
            calls.append(("sgemm", handle))

        def dgemm(self, handle, *args):
            calls.append(("dgemm", handle))

    cupy = type("CuPy", (), {})()
    cupy.cuda = type("cuda", (), {})()
    cupy.cuda.device = type("device", (), {"get_cublas_handle": staticmethod(lambda: 77)})()
    monkeypatch.setattr(matmul, "_cublas", lambda: (cupy, Cublas()))
    monkeypatch.setattr(matmul, "_pointer", lambda x: 0)
    for dtype in (np.float32, np.float64):
        x = cuda.to_device(np.ones((2, 2), dtype))
        for tf32 in (True, False):
            matmul.gemm(x, x, x, tf32=tf32)
    mode = matmul.TF32_MATH, matmul.DEFAULT_MATH
    assert calls == [("mode", 77, mode[0]), ("sgemm", 77), ("mode", 77, mode[1]), ("sgemm", 77),
                     ("mode", 77, mode[1]), ("dgemm", 77), ("mode", 77, mode[1]), ("dgemm", 77)]
    assert (matmul.TF32_MATH, matmul.DEFAULT_MATH) == (3, 0)  # cublasMath_t's values


def test_a_backend_allowed_tf32_says_so_and_its_products_take_it():
    import functools

    from destiny.kernels import get_backend

    assert get_backend("cpu", tf32=True).products == "float32"  # float32 anyway: no effect
    assert get_backend("gpu").products == "float32"
    gpu = get_backend("gpu", tf32=True)
    assert gpu.products == "tf32"
    assert isinstance(gpu.gemm, functools.partial) and gpu.gemm.keywords == {"tf32": True}


@pytest.mark.gpu
def test_tf32_products_are_close_to_float32_ones():
    from destiny.kernels import get_backend

    rng = np.random.default_rng(8)
    a, b, product = operands(rng, 256, 2048, 1024, False, False)
    out = np.empty((256, 2048), dtype=np.float32)
    on_host(get_backend("gpu", tf32=True).gemm)(out, a, b)
    scale = np.abs(product).max()
    # TF32 rounds each input to 10 bits of mantissa (2**-11 relative), sums in float32.
    np.testing.assert_allclose(out, product, rtol=0, atol=2e-3 * scale)


class _ColumnMajorBlas:
    """A stand-in for CuPy's cuBLAS binding that computes what cuBLAS's gemm computes, on the
    host: column-major operands with their leading dimensions, alpha and beta read from the
    host pointers (host pointer mode), BLAS's own checks of the leading dimensions."""

    CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_POINTER_MODE_HOST = 0, 1, 0

    def __init__(self, arrays):
        self.arrays = arrays  # "pointer" -> device array

    def setPointerMode(self, handle, mode):
        assert mode == self.CUBLAS_POINTER_MODE_HOST

    def setMathMode(self, handle, mode):
        pass

    def _gemm(self, ctype, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        def operand(pointer, ld, trans, rows, cols):  # op(x), rows x cols
            stored = (cols, rows) if trans else (rows, cols)
            assert ld >= max(1, stored[0]), "a leading dimension below the stored rows"
            flat = self.arrays[pointer].copy_to_host().ravel()
            x = flat[:ld * stored[1]].reshape(stored[1], ld).T[:stored[0]]
            return x.T if trans else x

        op_a, op_b = operand(a, lda, transa, m, k), operand(b, ldb, transb, k, n)
        assert ldc >= max(1, m)
        out = self.arrays[c]
        flat = out.copy_to_host().ravel()
        full = flat.reshape(-1, ldc).T.copy()  # column-major, ldc x columns
        alpha, beta = (ctype.from_address(p).value for p in (alpha, beta))
        full[:m, :n] = alpha * (op_a.astype(np.float64) @ op_b) + beta * full[:m, :n]
        out.copy_to_device(full.T.ravel().reshape(out.shape).astype(flat.dtype))

    def sgemm(self, handle, *args):
        self._gemm(ctypes.c_float, *args)

    def dgemm(self, handle, *args):
        self._gemm(ctypes.c_double, *args)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_hands_cublas_the_transposed_product_of_the_same_buffers(monkeypatch, dtype):
    """cuBLAS is column-major: ``gemm`` computes out^T = op(b)^T op(a)^T with the operands
    swapped, each flag its own operand's, the dimensions n, m, k, each leading dimension its
    own array's row length, and alpha and beta from host memory. Checked with a stand-in that
    does what cuBLAS does (this runs without a GPU; the ``gpu`` tests run cuBLAS itself)."""
    from numba import cuda

    arrays = {}
    cupy = type("CuPy", (), {})()
    cupy.cuda = type("cuda", (), {})()
    cupy.cuda.device = type("device", (), {"get_cublas_handle": staticmethod(lambda: 1)})()
    monkeypatch.setattr(matmul, "_cublas", lambda: (cupy, _ColumnMajorBlas(arrays)))

    def pointer(x):
        arrays[id(x)] = x
        return id(x)

    monkeypatch.setattr(matmul, "_pointer", pointer)
    rng = np.random.default_rng(12)
    m, n, k = 3, 4, 5  # all different: a dimension or a leading dimension mixed up shows
    for trans_a, trans_b in itertools.product([False, True], repeat=2):
        a, b, product = operands(rng, m, n, k, trans_a, trans_b, dtype)
        c = rng.normal(size=(m, n)).astype(dtype)
        out = cuda.to_device(c)
        matmul.gemm(out, cuda.to_device(a), cuda.to_device(b), trans_a, trans_b, -0.5, 2.0)
        np.testing.assert_allclose(out.copy_to_host(), -0.5 * product + 2.0 * c, rtol=1e-5,
                                   atol=1e-5)
