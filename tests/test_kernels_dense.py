"""The dense operations of a network step (kernels/*/dense.py) against the NumPy reference."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from .backends import family, tiny

BACKENDS = family("dense")


def shape(backend):
    # In the simulator, more elements (21) than a grid has threads (2 blocks of 8): every
    # grid-stride loop goes round more than once.
    return (3, 7) if tiny(backend) else (37, 70)


def rand(rng, shape):
    return rng.normal(size=shape).astype(np.float32)


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
@pytest.mark.parametrize("op", ["add", "multiply", "copy"])
def test_elementwise_ops(backend, op):
    rng = np.random.default_rng(1)
    out, x = rand(rng, shape(backend)), rand(rng, shape(backend))
    expected = out.copy()
    getattr(BACKENDS["reference"], op)(expected, x)
    getattr(BACKENDS[backend], op)(out, x)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_bias_scale_and_fill(backend):
    rng = np.random.default_rng(2)
    out = rand(rng, shape(backend))
    b = rand(rng, shape(backend)[1])
    expected = out + np.float32(0.5) * b
    BACKENDS[backend].add_bias(out, b, 0.5)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    BACKENDS[backend].scale(out, -2.0)
    np.testing.assert_allclose(out, -2.0 * expected, rtol=1e-6)
    BACKENDS[backend].fill(out, 0.25)
    assert np.all(out == np.float32(0.25))


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
@pytest.mark.parametrize("size", ["small", "wide"])
def test_column_mean_sums_in_float64(backend, size):
    rng = np.random.default_rng(3)
    if tiny(backend):  # the simulator's blocks: 2 columns x 2 row lanes, at most 2 blocks
        rows, cols = (5, 3) if size == "small" else (7, 11)  # odd rows; column groups again
    else:
        rows, cols = (256, 1300) if size == "small" else (33, 27392)
    x = rand(rng, (rows, cols)) + np.float32(1e4)  # float32 sums would lose digits
    out = np.empty(cols, dtype=np.float32)
    BACKENDS[backend].column_mean(out, x)
    np.testing.assert_allclose(out, x.astype(np.float64).mean(axis=0), rtol=1e-7)
    again = np.empty(cols, dtype=np.float32)
    BACKENDS[backend].column_mean(again, x)
    np.testing.assert_array_equal(again, out)
    one = np.empty(cols, dtype=np.float32)
    BACKENDS[backend].column_mean(one, x[:1].copy())
    np.testing.assert_array_equal(one, x[0])
    column = np.full(1, np.nan, dtype=np.float32)  # fewer columns than a block takes
    BACKENDS[backend].column_mean(column, x[:, 1:2].copy())
    np.testing.assert_allclose(column, x[:, 1].astype(np.float64).mean(), rtol=1e-7)


@pytest.mark.parametrize("backend", ["reference", "cpu", "cuda"])
def test_column_mean_of_no_rows_is_nan(backend):
    out = np.zeros(5, dtype=np.float32)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's "mean of empty slice"
        BACKENDS[backend].column_mean(out, np.zeros((0, 5), dtype=np.float32))
    assert np.isnan(out).all()


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_zero_rows_with_repeats(backend):
    rng = np.random.default_rng(4)
    x = rand(rng, shape(backend))
    rows = np.array([2, 0, 2], dtype=np.int32)
    expected = x.copy()
    expected[[0, 2]] = 0
    BACKENDS[backend].zero_rows(x, rows)
    np.testing.assert_array_equal(x, expected)


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_reductions(backend):
    rng = np.random.default_rng(5)
    x = rand(rng, shape(backend))
    kb = BACKENDS[backend]
    assert kb.sum_squares(x) == pytest.approx(float((x.astype(np.float64) ** 2).sum()), rel=1e-9)
    assert kb.abs_sum(x) == pytest.approx(float(np.abs(x.astype(np.float64)).sum()), rel=1e-9)
    assert kb.all_finite(x)
    x[1, 2] = np.nan
    assert not kb.all_finite(x)


def test_the_cpu_reductions_read_the_matrix_in_place():
    """The regularization sum and the finite check once an epoch made a float64 copy (twice
    the matrix) and a boolean one of every weight matrix: training that fitted in memory took
    twice its largest matrix more as each epoch ended. Now nothing the matrix's size is
    allocated; strided views and vectors give the reference's figures."""
    import tracemalloc

    kb = BACKENDS["cpu"]
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2048, 1024)).astype(np.float32)  # 8 MiB
    for f in (kb.sum_squares, kb.abs_sum, kb.all_finite):
        f(x)  # (compiled first)
        tracemalloc.start()
        try:
            f(x)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < x.nbytes // 16, (f.__name__, peak)
    ref = BACKENDS["reference"]
    for view in (x[:, ::3], x[5], x[:0], x.T):
        assert kb.sum_squares(view) == pytest.approx(ref.sum_squares(view), rel=1e-9)
        assert kb.abs_sum(view) == pytest.approx(ref.abs_sum(view), rel=1e-9)
        assert kb.all_finite(view)
    x[100, 999] = np.inf
    assert not kb.all_finite(x[:, ::3]) and not kb.all_finite(x.T) and kb.all_finite(x[:100])


@pytest.mark.parametrize("backend", ["reference", "cpu", "cuda"])
def test_all_finite_finds_nan_and_either_infinity_anywhere(backend):
    kb = BACKENDS[backend]
    x = np.ones(shape(backend), dtype=np.float32)
    for value in (np.nan, np.inf, -np.inf):
        for index in (0, x.size // 2, x.size - 1):  # the first, a middle and the last
            bad = x.copy()
            bad.flat[index] = value
            assert not kb.all_finite(bad), (value, index)
    assert kb.all_finite(x) and kb.all_finite(np.zeros((0, 4), dtype=np.float32))


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (-0.25, 0.0), (0.5, 1.0), (2.0, -0.5)])
def test_cpu_gemm(trans_a, trans_b, alpha, beta):
    rng = np.random.default_rng(6)
    a = rand(rng, (9, 13) if trans_a else (13, 9))
    b = rand(rng, (21, 9) if trans_b else (9, 21))
    out = rand(rng, (13, 21))
    expected = out.copy()
    BACKENDS["reference"].gemm(expected, a, b, trans_a, trans_b, alpha, beta)
    BACKENDS["cpu"].gemm(out, a, b, trans_a, trans_b, alpha, beta)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_cpu_gemm_long_reduction_against_a_transposed_operand():
    # The output layer's input delta: dZ @ W.T with K >> M, N.
    rng = np.random.default_rng(8)
    dZ, W = rand(rng, (6, 400)), rand(rng, (9, 400))
    out = np.full((6, 9), np.nan, dtype=np.float32)
    BACKENDS["cpu"].gemm(out, dZ, W, trans_b=True)
    np.testing.assert_allclose(out, dZ.astype(np.float64) @ W.T, rtol=1e-5, atol=1e-4)
    assert out.flags.c_contiguous


def test_reference_tf32_products_read_ten_bits_of_each_mantissa():
    """The reference's model of the GPU's ``--tf32`` products: the operands' mantissas cut to
    TF32's 10 bits, then multiplied exactly; float32 products stay as they were."""
    from destiny.kernels import get_backend
    from destiny.kernels.reference.dense import tf32_inputs

    x = np.array([1 + 2.0**-10, 1 + 2.0**-11 + 2.0**-12, -3.0, np.inf, -np.inf, 0.0],
                 dtype=np.float32)
    np.testing.assert_array_equal(tf32_inputs(x), [1 + 2.0**-10, 1.0, -3.0, np.inf, -np.inf, 0])
    nan = np.array([0x7F800001, 0xFF801FFF, 0x7FC00000], np.uint32).view(np.float32)
    assert np.isnan(tf32_inputs(nan)).all()  # a payload in the low bits alone stays a NaN
    rng = np.random.default_rng(9)
    a, b = rand(rng, (7, 300)), rand(rng, (11, 300))
    ref = get_backend("reference", tf32=True)
    assert ref.products == "tf32" and get_backend("reference").products == "float32"
    out, plain = np.empty((7, 11), np.float32), np.empty((7, 11), np.float32)
    ref.gemm(out, a, b, trans_b=True)
    BACKENDS["reference"].gemm(plain, a, b, trans_b=True)
    cut = tf32_inputs(a).astype(np.float64) @ tf32_inputs(b).astype(np.float64).T
    np.testing.assert_array_equal(out, cut.astype(np.float32))
    # Off from float32 by up to 2 x 2**-10 relative per term, never beyond.
    bound = 2 * 2.0**-10 * (np.abs(a).astype(np.float64) @ np.abs(b).T)
    assert np.all(np.abs(out - plain) <= bound) and not np.array_equal(out, plain)
    whole = np.round(a * 64)  # small integers: exact in TF32, so the same product
    ref.gemm(out, whole, b, trans_b=True)
    BACKENDS["reference"].gemm(plain, whole, tf32_inputs(b), trans_b=True)
    np.testing.assert_array_equal(out, plain)


def test_cuda_memory_round_trip():
    from destiny.kernels.cuda import dense

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    on_device = dense.to_device(x)
    assert dense.to_device(on_device) is on_device
    np.testing.assert_array_equal(dense.to_host(on_device), x)
    np.testing.assert_array_equal(dense.to_host(dense.zeros((2, 3))), np.zeros((2, 3)))
    assert dense.empty((4, 0)).shape == (4, 0)


@pytest.mark.parametrize("name", list(BACKENDS))
def test_downloads_give_the_arrays(name):
    """``download`` in every backend. On a GPU the copies are queued (page-locked slots, an
    event each), so work queued after them must not reach what ``get()`` returns; on the cpu
    the answer is the array itself, as ``to_host``'s is."""
    from destiny.kernels.cuda import dense

    kb = dense if name == "cuda" else BACKENDS[name]
    rng = np.random.default_rng(10)
    hosts = [rng.random((3, 5)).astype(np.float32) for _ in range(12)]  # more than the slots
    arrays = [kb.to_device(h.copy()) for h in hosts]
    pending = [kb.download(a) for a in arrays]
    if name == "cuda":
        for a in arrays:
            kb.fill(a, -1.0)  # queued after the copies
    for h, p in zip(hosts, pending, strict=True):
        got = p.get()
        assert isinstance(got, np.ndarray) and p.get() is got
        np.testing.assert_array_equal(got, h)


@pytest.mark.gpu
def test_device_arrays_come_from_cupys_pool_where_cupy_is_installed():
    import gc

    cupy = pytest.importorskip("cupy")
    from numba import cuda

    import destiny.kernels.cuda  # noqa: F401 - installs the pool before the first context

    pool = cupy.get_default_memory_pool()
    gc.collect()
    before = pool.used_bytes()
    x = cuda.device_array(1 << 20, np.float32)
    x[:] = 1.0
    held = pool.used_bytes()
    assert held >= before + (4 << 20)
    assert float(x.copy_to_host().sum()) == 1 << 20
    del x
    gc.collect()
    assert pool.used_bytes() <= held - (4 << 20)  # the block went back to the pool
