"""Activation, dropout, sparseness-penalty and norm kernels of every backend.

The numba kernels are checked against the NumPy reference on float32 data, and the
activation derivatives against central finite differences in float64 (spec 3.6-3.13).
"""

from __future__ import annotations

import numpy as np
import pytest

from destiny.kernels import codes
from destiny.kernels.counter_rng import DROPOUT, stream_key
from .backends import family, tiny

BACKENDS = family("pointwise")
KERNEL_BACKENDS = ["cpu", "cuda"]  # the ones checked against the reference
ACTIVATIONS = sorted(codes.ACTIVATION_NAMES)
SLOPE, ALPHA, LAM = 0.1, 1.3, 1.0507  # not the defaults, so that each parameter matters


def random_pre_activations(rng, shape, dtype=np.float32, margin=1e-3, large=True):
    """Normal z kept ``margin`` away from 0 (kinks); with ``large``, a few huge values."""
    z = rng.normal(scale=2.0, size=shape)
    if large:  # overflow checks
        z.flat[:4] = [60.0, -60.0, 500.0, -500.0]
    z[np.abs(z) < margin] = margin
    return z.astype(dtype)


def forward(backend, z, act):
    a = np.empty_like(z)
    BACKENDS[backend].activation_forward(a, z, act, SLOPE, ALPHA, LAM)
    return a


def shape(backend, rows, units):
    """The test's shape, or a tiny one for the CUDA simulator (every thread runs in Python)."""
    return (3, 5) if tiny(backend) else (rows, units)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_forward_matches_reference(backend, act):
    z = random_pre_activations(np.random.default_rng(act), shape(backend, 23, 41))
    expected = forward("reference", z, act)
    assert np.all(np.isfinite(expected))
    np.testing.assert_allclose(forward(backend, z, act), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_forward_known_values_and_in_place(backend):
    z = np.array([[-2.0, 0.0, 3.0]], dtype=np.float32)
    cases = {
        codes.SIGMOID: 1 / (1 + np.exp(-z)), codes.TANH: np.tanh(z), codes.LINEAR: z,
        codes.RELU: [[0, 0, 3]], codes.LRELU: [[-0.2, 0, 3]],
        codes.ELU: [[ALPHA * np.expm1(-2.0), 0, 3]],
        codes.SELU: [[LAM * ALPHA * np.expm1(-2.0), 0, 3 * LAM]],
        codes.SOFTPLUS: np.log1p(np.exp(z)), codes.SOFTSIGN: [[-2 / 3, 0, 0.75]],
        codes.SOFTMAX: np.exp(z) / np.exp(z).sum(),
    }
    for act, expected in cases.items():
        a = z.copy()
        BACKENDS[backend].activation_forward(a, a, act, SLOPE, ALPHA, LAM)  # a is z
        np.testing.assert_allclose(a, expected, rtol=1e-6, atol=1e-7, err_msg=str(act))


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_softmax_of_far_negative_or_positive_rows(backend):
    """SoftMax subtracts the row's own maximum, whatever its sign: rows of -1000 or +1000
    (whose exponentials under- or overflow) give what the shifted row [0, -1, -2] gives."""
    z = np.array([[-1000.0, -1001.0, -1002.0], [1000.0, 999.0, 998.0]], dtype=np.float32)
    shifted = np.exp([0.0, -1.0, -2.0])
    a = z.copy()
    BACKENDS[backend].activation_forward(a, a, codes.SOFTMAX, SLOPE, ALPHA, LAM)
    np.testing.assert_allclose(a, np.tile(shifted / shifted.sum(), (2, 1)), rtol=1e-6)


def column_blocks(units, parts):
    """The units each of ``parts`` MPI ranks holds (DSSTNE's split, spec 7)."""
    return [(units * r // parts, units * (r + 1) // parts) for r in range(parts)]


def blocks_row_stats(kernels, z, blocks, fill=np.nan) -> list[np.ndarray]:
    """Each block of columns' ``softmax_forward_partials`` of the rows ``z`` (a rank's), its
    [B, 2] array filled with ``fill`` first."""
    stats = []
    for lo, hi in blocks:
        stats.append(np.full((len(z), 2), fill))
        kernels.softmax_forward_partials(stats[-1], np.ascontiguousarray(z[:, lo:hi]))
    return stats


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("parts", [1, 3])
def test_softmax_split_by_columns_is_the_whole_rows(backend, parts):
    """A SoftMax layer split across ranks: each block of columns reduces its rows, the
    network combines the blocks' numbers (``softmax_row_stats``, added dot products), and each
    block finishes its units: the whole rows' activations and Jacobian product, forward and
    backward, with and without a dropout mask."""
    from destiny.network import softmax_row_stats

    kernels = BACKENDS[backend]
    rng = np.random.default_rng(31 + parts)
    rows, units = (3, 7) if tiny(backend) else (9, 40)
    z = random_pre_activations(rng, (rows, units))
    z[1] -= 400  # (a row far below zero: its exponentials relative to its own maximum)
    expected = forward("reference", z, codes.SOFTMAX)
    blocks = column_blocks(units, parts)
    whole = softmax_row_stats(np.hstack(blocks_row_stats(kernels, z, blocks)))
    a = z.copy()
    for lo, hi in blocks:  # (in place: a is z)
        block = np.ascontiguousarray(a[:, lo:hi])
        kernels.softmax_forward_finish(block, block, whole)
        a[:, lo:hi] = block
    np.testing.assert_allclose(a, expected, rtol=2e-6, atol=1e-9)
    assert (a <= 1).all()

    da = rng.normal(size=z.shape).astype(np.float32)
    mask = np.where(rng.random(z.shape) < 0.3, 0.0, 1.25).astype(np.float32)
    for m in (None, mask):
        reference = np.empty_like(da)
        BACKENDS["reference"].activation_backward(reference, da, expected, codes.SOFTMAX, SLOPE,
                                                  ALPHA, LAM, m)
        pieces = [[x[:, lo:hi].copy() if x is not None else None for x in (da, expected, m)]
                  for lo, hi in blocks]
        dots = np.zeros(rows)
        for piece in pieces:
            mine = np.full(rows, np.nan)
            kernels.softmax_backward_partials(mine, *piece)
            dots += mine
        dz = []
        for g, y, mk in pieces:
            dz.append(np.full_like(g, np.nan))
            kernels.softmax_backward_finish(dz[-1], g, y, dots, mk)
        np.testing.assert_allclose(np.hstack(dz), reference, rtol=1e-5, atol=1e-7)
        g, y, mk = pieces[0]  # dz may be da
        kernels.softmax_backward_finish(g, g, y, dots, mk)
        np.testing.assert_array_equal(g, dz[0])


def test_cpu_split_softmax_float32_in_place_or_not_is_the_reference_on_wide_rows():
    """The cpu's float32 split SoftMax (vectorised exp, as its one-pass SoftMax) on rows as
    wide as a catalogue's share, in two blocks: the reference's activations within 2e-6, the
    same bits whether ``a`` is ``z`` or not, and one process's vectorised SoftMax within 2e-6."""
    from destiny.network import softmax_row_stats

    kernels = BACKENDS["cpu"]
    rng = np.random.default_rng(8)
    z = random_pre_activations(rng, (5, 3001))
    z[2] -= 400
    z[3, 1500:] = -np.inf  # (the second block's units of a row all -inf)
    blocks = column_blocks(3001, 2)
    whole = softmax_row_stats(np.hstack(blocks_row_stats(kernels, z, blocks)))
    apart, in_place = np.full_like(z, np.nan), z.copy()
    for lo, hi in blocks:
        block = np.ascontiguousarray(z[:, lo:hi])
        out = np.full_like(block, np.nan)
        kernels.softmax_forward_finish(out, block, whole)
        kernels.softmax_forward_finish(block, block, whole)
        apart[:, lo:hi], in_place[:, lo:hi] = out, block
    np.testing.assert_array_equal(apart, in_place)
    np.testing.assert_allclose(apart, forward("reference", z, codes.SOFTMAX), rtol=2e-6,
                               atol=1e-12)
    np.testing.assert_allclose(apart, forward("cpu", z, codes.SOFTMAX), rtol=2e-6, atol=1e-12)
    assert (apart <= 1).all()


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # (NumPy's -inf - -inf)
@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_softmax_split_by_columns_keeps_nan_and_minus_infinity_as_the_whole_rows(backend):
    """What one process gives for rows holding NaN or -inf, split over two blocks: a NaN makes
    its whole row NaN (the clamp to 1 must not turn it into 1, hiding a diverged network from
    the brake), and a block whose units of a row are all -inf adds nothing to the row's sum
    (its own sum of exp(z - m), m = -inf, is NaN) while the other block's units normalize as
    in one process; a row all -inf is NaN, as in one process."""
    from destiny.network import softmax_row_stats

    kernels = BACKENDS[backend]
    z = np.array([[0.5, 1.0, np.nan, 2.0], [-np.inf, -np.inf, 0.0, 1.0],
                  [0.0, 1.0, -np.inf, 2.0], [-np.inf] * 4], dtype=np.float32)
    expected = forward(backend, z, codes.SOFTMAX)
    assert np.isnan(expected[0]).all() and np.isnan(expected[3]).all()
    assert np.isfinite(expected[1:3]).all()
    blocks = column_blocks(4, 2)
    whole = softmax_row_stats(np.hstack(blocks_row_stats(kernels, z, blocks)))
    a = np.full_like(z, -1.0)
    for lo, hi in blocks:
        block = np.ascontiguousarray(z[:, lo:hi])
        kernels.softmax_forward_finish(block, block, whole)
        a[:, lo:hi] = block
    np.testing.assert_allclose(a, expected, rtol=2e-6, atol=1e-9)  # (NaN where NaN)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # (NumPy's -inf - -inf)
@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_split_by_columns_with_a_block_of_nan_units_is_a_nan_row(backend, dtype):
    """A block whose units of a row are all NaN, or NaN and -inf, makes the whole row NaN, as
    in one process: its maximum m is NaN, as the reference's (NumPy's max keeps a NaN). The cpu
    and the GPU took the maximum of the numbers alone, -inf there, and softmax_row_stats then
    dropped the block as one of units all -inf: the other block's units came out finite."""
    from destiny.network import softmax_row_stats

    kernels = BACKENDS[backend]
    nan = np.array([np.nan, -np.nan], dtype=dtype)  # (x86's NaN from inf - inf is negative)
    z = np.array([[nan[0], nan[1], 0.0, 1.0], [nan[1], -np.inf, 0.0, 1.0],
                  [-np.inf, -np.inf, 0.0, 1.0]], dtype=dtype)
    stats = blocks_row_stats(kernels, z, column_blocks(4, 2), fill=7.0)
    assert np.isnan(stats[0][:2, 0]).all() and stats[0][2, 0] == -np.inf
    whole = softmax_row_stats(np.hstack(stats))
    a = np.full_like(z, -1.0)
    kernels.softmax_forward_finish(a, z, whole)
    assert np.isnan(a[:2]).all() and np.isfinite(a[2]).all()

@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_backward_matches_finite_differences(backend, act):
    # Vector-Jacobian check: dz must be the gradient of sum(da * f(z)) with respect to z.
    rng = np.random.default_rng(10 + act)
    # No saturated units here: they would hide derivative errors.
    z = random_pre_activations(rng, (2, 3) if tiny(backend) else (4, 6), np.float64, margin=1e-2,
                               large=False)
    da = rng.normal(size=z.shape)
    dz = np.empty_like(z)
    BACKENDS[backend].activation_backward(dz, da, forward(backend, z, act), act, SLOPE, ALPHA, LAM)
    h = 1e-6
    numeric = np.empty_like(z)
    for i in np.ndindex(z.shape):
        zp, zm = z.copy(), z.copy()
        zp[i] += h
        zm[i] -= h
        numeric[i] = (da * (forward(backend, zp, act) - forward(backend, zm, act))).sum() / (2 * h)
    np.testing.assert_allclose(dz, numeric, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_backward_matches_reference_in_place(backend, act):
    rng = np.random.default_rng(30 + act)
    a = forward("reference", random_pre_activations(rng, shape(backend, 19, 33)), act)
    da = rng.normal(size=a.shape).astype(np.float32)
    expected = np.empty_like(da)
    BACKENDS["reference"].activation_backward(expected, da, a, act, SLOPE, ALPHA, LAM)
    BACKENDS[backend].activation_backward(da, da, a, act, SLOPE, ALPHA, LAM)  # dz is da
    np.testing.assert_allclose(da, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_tanh_derivative_keeps_the_digits_of_saturated_units(backend):
    # 1 - a^2 as (1 - a)(1 + a): in float32, 1 - a * a would lose most digits near a = +-1.
    a = np.array([[0.99999, -0.999997, 0.9990005, -0.5, 0.0]], dtype=np.float32)
    dz = np.empty_like(a)
    BACKENDS[backend].activation_backward(dz, np.ones_like(a), a, codes.TANH, SLOPE, ALPHA, LAM)
    x = a.astype(np.float64)
    np.testing.assert_allclose(dz, (1 - x) * (1 + x), rtol=2e-7)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_bias_is_added_bit_for_bit_as_add_bias_adds_it(backend, act, dtype):
    """f(z + b) in one kernel equals add_bias and then f, exactly (the network folds a dense
    product's bias into its activation), in place and not, without a bias as before; in
    float32 (training) and float64 (the gradient checks), whose Sigmoids take other paths."""
    dense = family("dense")[backend]
    rng = np.random.default_rng(9)
    z = random_pre_activations(rng, shape(backend, 6, 40), dtype)
    b = rng.normal(scale=3.0, size=z.shape[1]).astype(dtype)
    expected = z.copy()
    dense.add_bias(expected, b)
    BACKENDS[backend].activation_forward(expected, expected, act, SLOPE, ALPHA, LAM)
    got = np.empty_like(z)
    BACKENDS[backend].activation_forward(got, z, act, SLOPE, ALPHA, LAM, b)
    np.testing.assert_array_equal(got, expected)
    in_place = z.copy()
    BACKENDS[backend].activation_forward(in_place, in_place, act, SLOPE, ALPHA, LAM, b)
    np.testing.assert_array_equal(in_place, expected)
    for none in (None, np.zeros(0, dtype)):
        np.testing.assert_array_equal(
            forward(backend, z, act),
            _with_bias(backend, z, act, none))


def _with_bias(backend, z, act, bias):
    a = np.empty_like(z)
    BACKENDS[backend].activation_forward(a, z, act, SLOPE, ALPHA, LAM, bias)
    return a


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_nan_stays_nan(backend, act):
    """f(NaN) is NaN for every activation: a diverged unit stays visible, and the cpu
    top_k_activated relies on it (a NaN z is never a candidate there)."""
    z = np.full((2, 3), np.nan, dtype=np.float32)
    z[1] = 1.0  # SoftMax works per row: a row without NaN stays finite
    a = forward(backend, z, act)
    assert np.isnan(a[0]).all()
    assert np.isfinite(a[1]).all()


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_unknown_activation_is_refused(backend):
    z = np.zeros((2, 3), dtype=np.float32)
    with pytest.raises(ValueError):
        BACKENDS[backend].activation_forward(z.copy(), z, 8, SLOPE, ALPHA, LAM)  # RELUMax


KEY = stream_key(12134, DROPOUT, 3, 1)  # a key as training draws them


def draws(shape, key=KEY, row_offset=0, col_offset=0):
    """The uniforms a dropout of ``shape`` compares with p (the reference generator's)."""
    r = np.empty(shape, dtype=np.float64)
    family("rng")["reference"].uniform_fill(r, key, row_offset, col_offset)
    return r


def run_dropout(backend, a, p, act, key=KEY, row_offset=0, col_offset=0):
    out, mask = np.empty_like(a), np.empty_like(a)
    BACKENDS[backend].dropout_forward(out, mask, a, key, row_offset, col_offset, p, act, ALPHA,
                                      LAM)
    return out, mask


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("act", [codes.SIGMOID, codes.RELU, codes.ELU, codes.SELU])
def test_dropout_rules(backend, act):
    rng = np.random.default_rng(40 + act)
    p = 0.3
    a = rng.uniform(-1, 1, size=shape(backend, 400, 500)).astype(np.float32)
    out, mask = run_dropout(backend, a, p, act, row_offset=7, col_offset=(1 << 33) + 5)
    dropped = draws(a.shape, row_offset=7, col_offset=(1 << 33) + 5) < p
    assert 0 < dropped.sum() < dropped.size
    assert tiny(backend) or abs(dropped.mean() - p) < 0.01
    if act == codes.SIGMOID:
        dropped_value, gain, shift = 0.5, 1.0, 0.0
    elif act == codes.RELU:
        dropped_value, gain, shift = 0.0, 1 / (1 - p), 0.0
    else:  # alpha-dropout, spec 3.8
        saturation = -(LAM if act == codes.SELU else 1.0) * ALPHA
        gain = 1 / np.sqrt((1 - p) + saturation ** 2 * p * (1 - p))
        shift = -gain * p * saturation
        dropped_value = gain * saturation + shift
    np.testing.assert_allclose(out[dropped], dropped_value, rtol=1e-6)
    assert np.all(mask[dropped] == 0)
    np.testing.assert_allclose(out[~dropped], gain * a[~dropped] + shift, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mask[~dropped], gain, rtol=1e-6)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("act", [codes.SIGMOID, codes.TANH, codes.ELU, codes.SELU])
def test_dropout_matches_reference_in_place(backend, act):
    rng = np.random.default_rng(50 + act)
    a = rng.normal(size=shape(backend, 31, 17)).astype(np.float32)
    expected_out, expected_mask = run_dropout("reference", a, 0.25, act)
    mask = np.empty_like(a)
    BACKENDS[backend].dropout_forward(a, mask, a, KEY, 0, 0, 0.25, act, ALPHA, LAM)  # out is a
    np.testing.assert_allclose(a, expected_out, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(mask, expected_mask)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_dropout_keeps_a_unit_whose_draw_equals_p(backend):
    """u < p drops, so a draw exactly p keeps its unit (as the reference, spec 3.8): p is set
    to one unit's own draw (24-bit uniforms, exact in float64). With p = 0.3 no draw is p."""
    a = np.random.default_rng(3).normal(size=shape(backend, 4, 6)).astype(np.float32)
    u = draws(a.shape)
    p = float(u[1, 2])
    out, mask = run_dropout(backend, a, p, codes.RELU)
    expected_out, expected_mask = run_dropout("reference", a, p, codes.RELU)
    assert mask[1, 2] != 0 and expected_mask[1, 2] != 0
    np.testing.assert_array_equal(mask, expected_mask)
    np.testing.assert_allclose(out, expected_out, rtol=1e-6)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_dropout_of_a_block_of_units_is_that_block_of_the_layers_dropout(backend):
    """A rank holding units 3.. of a layer drops what one process drops there (spec 7)."""
    a = np.random.default_rng(2).normal(size=shape(backend, 8, 12)).astype(np.float32)
    whole_out, whole_mask = run_dropout(backend, a, 0.5, codes.RELU)
    out, mask = run_dropout(backend, np.ascontiguousarray(a[:, 3:]), 0.5, codes.RELU,
                            col_offset=3)
    np.testing.assert_array_equal(out, whole_out[:, 3:])
    np.testing.assert_array_equal(mask, whole_mask[:, 3:])
    other_key, _ = run_dropout(backend, a, 0.5, codes.RELU, key=KEY + 1)
    assert not np.array_equal(other_key, whole_out)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_dropout_probability_zero_keeps_everything_and_one_is_refused(backend):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    out, mask = run_dropout(backend, a, 0.0, codes.RELU)
    np.testing.assert_array_equal(out, a)
    np.testing.assert_array_equal(mask, np.ones_like(a))
    for p in (1.0, -0.1):
        with pytest.raises(ValueError):
            run_dropout(backend, a, p, codes.RELU)
        with pytest.raises(ValueError):
            BACKENDS[backend].activation_dropout_forward(
                np.empty_like(a), np.empty_like(a), a.copy(), a, codes.RELU, SLOPE, ALPHA, LAM,
                None, KEY, 0, 0, p)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_activation_dropout_forward_is_the_activation_then_the_dropout(backend, act):
    """The training forward of a layer in one call: bit for bit ``activation_forward`` (with
    the bias) and then ``dropout_forward`` on the stored activations, in place as the network
    calls it (a is z) and into another array."""
    k = BACKENDS[backend]
    rng = np.random.default_rng(60 + act)
    z = random_pre_activations(rng, shape(backend, 9, 40))
    b = rng.normal(size=z.shape[1]).astype(np.float32)
    for bias in (b, None):
        a = np.empty_like(z)
        k.activation_forward(a, z, act, SLOPE, ALPHA, LAM, bias)
        out, mask = np.empty_like(z), np.empty_like(z)
        k.dropout_forward(out, mask, a, KEY, 2, 5, 0.4, act, ALPHA, LAM)
        got_a, got_out, got_mask = z.copy(), np.empty_like(z), np.empty_like(z)
        k.activation_dropout_forward(got_out, got_mask, got_a, got_a, act, SLOPE, ALPHA, LAM,
                                     bias, KEY, 2, 5, 0.4)
        np.testing.assert_array_equal(got_a, a)
        np.testing.assert_array_equal(got_out, out)
        np.testing.assert_array_equal(got_mask, mask)
        other = np.empty_like(z)
        k.activation_dropout_forward(got_out, got_mask, other, z, act, SLOPE, ALPHA, LAM, bias,
                                     KEY, 2, 5, 0.4)
        np.testing.assert_array_equal(other, a)
        np.testing.assert_array_equal(got_out, out)
    if backend != "reference":
        expected = [np.empty_like(z) for _ in range(3)]
        BACKENDS["reference"].activation_dropout_forward(*expected[1:], expected[0], z, act,
                                                         SLOPE, ALPHA, LAM, b, KEY, 2, 5, 0.4)
        got = [np.empty_like(z) for _ in range(3)]
        k.activation_dropout_forward(*got[1:], got[0], z, act, SLOPE, ALPHA, LAM, b, KEY, 2, 5,
                                     0.4)
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_backward_with_a_mask_is_the_masked_delta_through_the_activation(backend, act):
    """``activation_backward(..., mask)`` is bit for bit ``da *= mask`` (in da's dtype) and
    then the backward without one; in place (dz is da) as well."""
    k = BACKENDS[backend]
    rng = np.random.default_rng(70 + act)
    a = forward("reference", random_pre_activations(rng, shape(backend, 7, 33)), act)
    da = rng.normal(size=a.shape).astype(np.float32)
    _, mask = run_dropout("reference", a, 0.3, codes.ELU)  # zeros and an inexact gain
    assert np.any(mask == 0) and np.any((mask != 0) & (mask != 1))
    expected = da * mask
    k.activation_backward(expected, expected, a, act, SLOPE, ALPHA, LAM)
    got = np.empty_like(da)
    k.activation_backward(got, da, a, act, SLOPE, ALPHA, LAM, mask)
    np.testing.assert_array_equal(got, expected)
    k.activation_backward(da, da, a, act, SLOPE, ALPHA, LAM, mask)
    np.testing.assert_array_equal(da, expected)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_sparseness_penalty_by_hand(backend):
    a = np.array([[0.2, 0.0, 1.0], [0.4, 0.0, 1.0]], dtype=np.float32)
    da = np.ones_like(a)
    p, beta = 0.05, 2.0
    BACKENDS[backend].sparseness_penalty(da, a, p, beta)
    rho = np.array([0.3, 1e-6, 0.999999])  # column means, clamped (spec 3.10)
    expected = 1.0 + beta * (-p / rho + (1 - p) / (1 - rho))
    np.testing.assert_allclose(da, np.tile(expected, (2, 1)), rtol=1e-5)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_sparseness_penalty_of_a_nan_column_is_nan(backend):
    """A NaN activation keeps its column's penalty NaN in every backend, as NumPy's clip of
    the mean does: a GPU's min and max (fmin, fmax) would have clamped the mean to 1e-6 and
    added a large finite penalty instead, hiding the NaN from the training's NaN guard."""
    a = np.array([[0.2, np.nan, 0.5], [0.4, 0.3, 0.1]], dtype=np.float32)
    da = np.zeros_like(a)
    BACKENDS[backend].sparseness_penalty(da, a, 0.1, 0.5)
    assert np.isnan(da[:, 1]).all(), da
    assert np.isfinite(da[:, [0, 2]]).all(), da


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_delta_norm_by_hand(backend):
    d = np.array([[3.0, 4.0, 0.0], [0.3, 0.4, 0.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    BACKENDS[backend].delta_norm(d, 2.0)
    expected = [[1.2, 1.6, 0.0], [0.3, 0.4, 0.0], [0.0, 0.0, 0.0]]  # only row 0 exceeds 2
    np.testing.assert_allclose(d, expected, rtol=1e-6)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("parts", [1, 3])
def test_delta_norm_split_by_columns_is_the_whole_rows(backend, parts):
    """DeltaNorm of a layer split across ranks: each block of columns sums its squares per
    row, the network adds the blocks' sums up, and each block rescales its units: the whole
    rows' ``delta_norm`` (some rows above the limit, some below)."""
    kernels = BACKENDS[backend]
    rng = np.random.default_rng(41 + parts)
    rows, units = (3, 7) if tiny(backend) else (9, 40)
    d = rng.normal(size=(rows, units)).astype(np.float32)
    d[0] *= 10  # (above any limit)
    limit = np.median(np.sqrt((d.astype(np.float64) ** 2).sum(axis=1)))
    expected = d.copy()
    BACKENDS["reference"].delta_norm(expected, limit)
    blocks = column_blocks(units, parts)
    pieces = [d[:, lo:hi].copy() for lo, hi in blocks]
    sums = np.zeros(rows)
    for piece in pieces:
        mine = np.full(rows, np.nan)
        kernels.delta_norm_partials(mine, piece)
        sums += mine
    for piece in pieces:
        kernels.delta_norm_finish(piece, sums, limit)
    np.testing.assert_allclose(np.hstack(pieces), expected, rtol=1e-6, atol=1e-7)
    scaled = (expected != d).any(axis=1)
    assert scaled.any() and not scaled.all()


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_weight_norm_by_hand(backend):
    W = np.array([[3.0, 0.3, 0.0], [4.0, 0.4, 0.0]], dtype=np.float32)  # [I, O]
    BACKENDS[backend].weight_norm(W, 2.0)
    expected = [[1.2, 0.3, 0.0], [1.6, 0.4, 0.0]]  # column 0 has norm 5 > 2
    np.testing.assert_allclose(W, expected, rtol=1e-6)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("one_column", [False, True], ids=["wide", "one column"])
def test_penalty_and_norms_match_reference(backend, one_column):
    # (one column: fewer than the CUDA kernels' block of COLUMNS takes)
    rng = np.random.default_rng(60)
    a = rng.random(shape(backend, 37, 150)).astype(np.float32)
    if one_column:
        a = a[:, :1].copy()
    d = rng.normal(size=a.shape).astype(np.float32)
    # Limits that some rows and columns exceed and others do not, whatever the shape.
    row_limit = np.median(np.sqrt((d.astype(np.float64) ** 2).sum(axis=1)))
    column_limit = np.median(np.sqrt((d.astype(np.float64) ** 2).sum(axis=0)))
    if one_column:
        column_limit /= 2
    outputs = {}
    for name in ("reference", backend):
        da, dn, W = d.copy(), d.copy(), d.copy()
        BACKENDS[name].sparseness_penalty(da, a, 0.1, 0.5)
        BACKENDS[name].delta_norm(dn, row_limit)
        BACKENDS[name].weight_norm(W, column_limit)
        outputs[name] = (da, dn, W)
    for got, ref in zip(outputs[backend], outputs["reference"], strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    assert not np.array_equal(outputs[backend][0], d)  # the penalty was added
    assert not np.array_equal(outputs[backend][2], d)  # a column was scaled


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("extra_row", [0, 1])
def test_weight_norm_of_a_tall_matrix_matches_reference(backend, extra_row):
    """A layer's W with many more rows than columns (the CUDA kernels split its rows in
    chunks, several column groups to a block; the simulator's shape has 3 chunks and 3
    groups over 2 blocks; with the extra row, 10 rows: chunks of 4, the last one short)."""
    rng = np.random.default_rng(61)
    rows, cols = (9, 5) if tiny(backend) else (3000, 70)
    W = rng.normal(size=(rows + extra_row, cols)).astype(np.float32)
    norms = np.sqrt((W.astype(np.float64) ** 2).sum(axis=0))
    limit = np.median(norms)
    got, ref = W.copy(), W.copy()
    BACKENDS[backend].weight_norm(got, limit)
    BACKENDS["reference"].weight_norm(ref, limit)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=0)
    moved = norms > limit
    assert moved.any() and not moved.all()
    np.testing.assert_array_equal(got[:, ~moved], W[:, ~moved])


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("parts", [1, 3])
def test_weight_norm_split_by_rows_is_the_whole_columns(backend, parts):
    """WeightNorm of a matrix split across ranks by rows: each block of rows sums its squares
    per column, the network adds the blocks' sums up, and each block rescales its rows: the
    whole columns' ``weight_norm`` (some columns above the limit, some below; the CUDA
    kernels split the one block's 11 rows in chunks in the simulator, 3000 on a GPU)."""
    kernels = BACKENDS[backend]
    rng = np.random.default_rng(71 + parts)
    rows, cols = (11, 5) if tiny(backend) else (3000, 70)
    W = rng.normal(size=(rows, cols)).astype(np.float32)
    W[:, 0] *= 10  # (above any limit)
    norms = np.sqrt((W.astype(np.float64) ** 2).sum(axis=0))
    limit = np.median(norms)
    expected = W.copy()
    BACKENDS["reference"].weight_norm(expected, limit)
    pieces = [W[lo:hi].copy() for lo, hi in column_blocks(rows, parts)]
    sums = np.zeros(cols)
    for piece in pieces:
        mine = np.full(cols, np.nan)
        kernels.weight_norm_partials(mine, piece)
        sums += mine
    np.testing.assert_allclose(sums, norms ** 2, rtol=1e-12)
    for piece in pieces:
        kernels.weight_norm_finish(piece, sums, limit)
    got = np.vstack(pieces)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=0)
    moved = norms > limit
    assert moved.any() and not moved.all()
    np.testing.assert_array_equal(got[:, ~moved], W[:, ~moved])


@pytest.mark.parametrize("act", [codes.SIGMOID, codes.TANH])
def test_large_sigmoid_and_tanh_split_by_rows_equal_one_pass(act):
    # Arrays of >= 1 M values are computed in blocks of rows by several threads (a float32
    # Sigmoid is one numba pass, tests/test_vecmath.py; a float64 one takes the NumPy path).
    from destiny.kernels.cpu import pointwise as cpu

    dtype = np.float64 if act == codes.SIGMOID else np.float32
    z = np.random.default_rng(9).normal(scale=4, size=(129, 8200)).astype(dtype)
    assert z.size >= cpu._PARALLEL_MIN
    split, whole = np.empty_like(z), np.empty_like(z)
    cpu.activation_forward(split, z, act, SLOPE, ALPHA, LAM)
    if act == codes.SIGMOID:
        cpu._numpy_sigmoid(whole, z)
    else:
        np.tanh(z, out=whole)
    np.testing.assert_array_equal(split, whole)


@pytest.mark.parametrize("act", [codes.ELU, codes.SELU, codes.SOFTPLUS, codes.SOFTSIGN],
                         ids=["ELU", "SELU", "Softplus", "Softsign"])
def test_cpu_activations_are_computed_in_float64_as_the_reference(act):
    """The numba kernel's per-unit f is the reference's float64 arithmetic, rounded once to
    float32. (numba types ``float(x)`` of a float32 as float32: the kernel used to compute
    these in float32, a rounding off the reference on 12-17% of the units.)"""
    z = random_pre_activations(np.random.default_rng(5), (64, 257))
    np.testing.assert_array_equal(forward("cpu", z, act), forward("reference", z, act))
