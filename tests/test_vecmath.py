"""The cpu backend's vectorised float32 exp and log (destiny.kernels.cpu.vecmath), against
float64."""

import numpy as np
import pytest
from numba import njit

from destiny.kernels import codes
from destiny.kernels.cpu import pointwise
from destiny.kernels.cpu.vecmath import LOOP_FLAGS, exp_shifted32, log1m32, sigmoid32


@njit(**LOOP_FLAGS)
def _sigmoid_all(out, x):
    for j in range(len(x)):
        out[j] = sigmoid32(x[j])


@njit(**LOOP_FLAGS)
def _log1m_all(out, a):
    for j in range(len(a)):
        out[j] = log1m32(a[j])


@njit(**LOOP_FLAGS)
def _exp_shifted_all(out, z, m):
    for j in range(len(z)):
        out[j] = exp_shifted32(z[j], m)


def _ulps(got, want):
    """Distance in units in the last place between float32 arrays (finite, same sign)."""
    g = got.view(np.int32).astype(np.int64)
    w = want.view(np.int32).astype(np.int64)
    g = np.where(g < 0, -(g & 0x7FFFFFFF), g)
    w = np.where(w < 0, -(w & 0x7FFFFFFF), w)
    return np.abs(g - w)


def _sigmoid64(x):
    return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32)


def test_sigmoid32_within_two_ulps_from_underflow_to_saturation():
    # Every result from 0 (below -103.9) through the subnormals to exactly 1 (above ~17).
    x = np.linspace(-110, 110, 2_000_001).astype(np.float32)
    got = np.empty_like(x)
    _sigmoid_all(got, x)
    with np.errstate(over="ignore"):
        want = _sigmoid64(x)
    assert _ulps(got, want).max() <= 2
    # The subnormal tail is computed, not flushed to zero.
    tail = (x > -103) & (x < -88)
    assert np.all(got[tail] > 0) and np.all(got[tail] < 1.2e-38)


def test_sigmoid32_special_values():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 200.0, -200.0, 1e-30], np.float32)
    got = np.empty_like(x)
    _sigmoid_all(got, x)
    assert np.isnan(got[0])
    np.testing.assert_array_equal(got[1:], [1.0, 0.0, 0.5, 0.5, 1.0, 0.0, 0.5])


@pytest.mark.parametrize("m", [0.0, 3.7, -1000.0, 1000.0])
def test_exp_shifted32_within_two_ulps_whatever_the_shift(m):
    """SoftMax's exp(z - m): the float32 difference's rounding (large when |z - m| is) is
    compensated; the normal results within 2 ulps, the subnormal tail computed, below it 0."""
    m = np.float32(m)
    z = (m - np.linspace(0, 110, 2_000_001)).astype(np.float32)
    got = np.empty_like(z)
    _exp_shifted_all(got, z, m)
    want = np.exp(z.astype(np.float64) - np.float64(m)).astype(np.float32)
    normal = want >= np.finfo(np.float32).tiny
    assert _ulps(got[normal], want[normal]).max() <= 2
    assert np.abs(got[~normal] - want[~normal]).max() <= 2 * 2.0 ** -149
    special = np.array([np.nan, -np.inf], np.float32)
    _exp_shifted_all(got[:2], special, m)
    assert np.isnan(got[0]) and got[1] == 0.0


def test_log1m32_within_two_ulps_on_every_scale_of_a():
    # A stride through the bit patterns of [0, 1] covers every binade, plus the last values
    # below 1, where 1 - a is tiny and exact.
    bits = np.arange(0, 0x3F800000, 101, dtype=np.int64).astype(np.int32)
    near_one = np.float32(1) - np.arange(1, 4000, dtype=np.float32) * np.float32(2.0**-24)
    a = np.concatenate([bits.view(np.float32), near_one])
    got = np.empty_like(a)
    _log1m_all(got, a)
    want = np.log1p(-a.astype(np.float64)).astype(np.float32)
    assert _ulps(got, want).max() <= 2


def test_log1m32_keeps_the_digits_of_a_small_a():
    # 1 - a rounds for a < 1/2; without the correction term log(1 - a) of a = 3e-5 would be
    # off in its fourth digit.
    a = np.array([3e-5, 1e-7, 2.0**-30, 0.3], np.float32)
    got = np.empty_like(a)
    _log1m_all(got, a)
    np.testing.assert_allclose(got, np.log1p(-a.astype(np.float64)), rtol=2.5e-7)


def test_log1m32_special_values():
    a = np.array([1.0, 0.0, np.nan], np.float32)
    got = np.empty_like(a)
    _log1m_all(got, a)
    assert got[0] == -np.inf and got[1] == 0.0 and np.isnan(got[2])


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("in_place", [False, True])
def test_float32_sigmoid_activation_is_one_pass_of_sigmoid32(with_bias, in_place):
    rng = np.random.default_rng(4)
    z = rng.normal(scale=6, size=(37, 1029)).astype(np.float32)
    z[3, :5] = [np.nan, np.inf, -np.inf, 120.0, -120.0]
    b = rng.normal(size=1029).astype(np.float32) if with_bias else None
    x = z + b if with_bias else z.copy()  # the bias is added in float32, as add_bias adds it
    a = z if in_place else np.empty_like(z)
    pointwise.activation_forward(a, z, codes.SIGMOID, 0.0, 0.0, 0.0, b)
    want = np.empty_like(x)
    _sigmoid_all(want.reshape(-1), x.reshape(-1))
    np.testing.assert_array_equal(a, want)
    finite = np.isfinite(x)
    with np.errstate(over="ignore"):
        assert _ulps(a[finite], _sigmoid64(x[finite])).max() <= 2
