"""float32 ``exp`` and ``log`` that LLVM vectorises inside numba loops.

numba compiles ``math.exp`` and ``math.log`` to scalar libm calls (LLVM vectorises them only
with Intel's SVML, not a dependency here), so a loop that needs one per element ran at a
fraction of the machine's speed, and the cpu backend took its Sigmoid and its loss logs from
NumPy's SIMD ufuncs instead: one pass over the whole [B, N] output per operation (four for a
Sigmoid, two for the logs), each a round trip through memory. These helpers are plain float32
arithmetic (Cephes's range reductions and polynomials, the power of two built from its bits),
so a loop that calls them vectorises and does everything in one pass.

Accuracy, measured against the float64 formula rounded to float32 (``tests/test_vecmath.py``
sweeps it): ``sigmoid32`` within 2 units in the last place (NumPy's float32 ``exp``-based
Sigmoid, which it replaces, was within 3); ``log1m32`` within 2. They are for float32 arrays
only; float64 (the gradient checks) keeps the exact libm path.

The loops that call them compile with ``LOOP_FLAGS``: under numba's default (Python) error model
every float division checks for zero, and that branch alone keeps LLVM from vectorising the
loop; "contract" lets LLVM fuse multiplies and adds (FMA), which is faster and rounds once
where it would round twice. No other fast-math flag: reassociation would fold away the
rounding tricks (``(x + C) - C``, ``(1 - u) - a``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

LOOP_FLAGS = {"error_model": "numpy", "fastmath": {"contract"}}

_f = np.float32
_ONE, _ZERO, _HALF = _f(1.0), _f(0.0), _f(0.5)

# exp: x = k ln2 + r with ln2 split in two (C1 has 9 significant bits, so k * C1 is exact for
# every k used here); exp(r) on |r| <= ln2 / 2 by Cephes expf's polynomial.
_LOG2E = _f(1.44269504088896341)
_LN2_HI, _LN2_LO = _f(0.693359375), _f(-2.12194440e-4)
_ROUND = _f(12582912.0)  # 1.5 * 2**23: adding and subtracting it rounds to an integer
_E0, _E1, _E2 = _f(1.9875691500e-4), _f(1.3981999507e-3), _f(8.3334519073e-3)
_E3, _E4, _E5 = _f(4.1665795894e-2), _f(1.6666665459e-1), _f(5.0000001201e-1)
_EXP_ARG_MIN = _f(-104.0)  # exp(-104) is below half the smallest float32 subnormal: 0


@njit(cache=True, inline="always", **LOOP_FLAGS)
def _exp_nonpositive(x):
    """``exp(x)`` for float32 ``x`` in [-104, 0] (subnormal results included)."""
    k = (x * _LOG2E + _ROUND) - _ROUND
    r = (x - k * _LN2_HI) - k * _LN2_LO
    p = ((((_E0 * r + _E1) * r + _E2) * r + _E3) * r + _E4) * r + _E5
    p = p * (r * r) + r + _ONE
    # 2**k in two factors: k reaches -150, below the smallest normal power of two (2**-126),
    # and the second product rounds into the subnormals as the true result would.
    k1 = np.int32(k) >> 1
    k2 = np.int32(k) - k1
    return (p * np.int32((k1 + 127) << 23).view(np.float32)) * \
        np.int32((k2 + 127) << 23).view(np.float32)


@njit(cache=True, inline="always", **LOOP_FLAGS)
def exp_shifted32(z, m):
    """``exp(z - m)`` for float32 ``z <= m`` (``m`` a SoftMax row's maximum); NaN stays NaN,
    results below the float32 range give 0.

    z - m rounds in float32 (by up to half a unit of the difference: for z - m = -40, 1e-6 of
    the result); its rounding error, recovered exactly by TwoSum, goes back in as the
    first-order factor 1 + err, so the result is within ``_exp_nonpositive``'s accuracy of the
    exact exp(z - m).
    """
    x = z - m
    v = x - z
    err = (z - (x - v)) + (-m - v)  # TwoSum: x + err = z - m exactly
    e = _exp_nonpositive(max(x, _EXP_ARG_MIN))
    e = e + e * err if x > _EXP_ARG_MIN else e  # (z = -inf: err is NaN, e is 0)
    return x if x != x else e


@njit(cache=True, inline="always", **LOOP_FLAGS)
def sigmoid32(x):
    """``1 / (1 + exp(-x))`` for float32 ``x``; NaN stays NaN, +-inf give 1 and 0.

    From u = exp(-|x|), which never overflows: 1 / (1 + u) for x >= 0, u / (1 + u) below.
    """
    u = _exp_nonpositive(max(-abs(x), _EXP_ARG_MIN))
    s = (_ONE if x >= _ZERO else u) / (_ONE + u)
    return x if x != x else s


# log: u = m 2**e with m in [sqrt(1/2), sqrt(2)); log(m) = log(1 + f) by Cephes logf's
# polynomial in f = m - 1.
_MANTISSA, _EXP_ONE = np.int32(0x007FFFFF), np.int32(0x3F800000)
_SQRT_TWO = _f(1.41421356237309505)
_L0, _L1, _L2 = _f(7.0376836292e-2), _f(-1.1514610310e-1), _f(1.1676998740e-1)
_L3, _L4, _L5 = _f(-1.2420140846e-1), _f(1.4249322787e-1), _f(-1.6668057665e-1)
_L6, _L7, _L8 = _f(2.0000714765e-1), _f(-2.4999993993e-1), _f(3.3333331174e-1)
_NEG_INF = _f(-np.inf)


@njit(cache=True, inline="always", **LOOP_FLAGS)
def log1m32(a):
    """``log(1 - a)`` for float32 ``a`` in [0, 1]: -inf at 1, NaN stays NaN.

    1 - a rounds when a < 1/2; the rounding error goes back in as the first-order term
    ``((1 - u) - a) / u`` (u the rounded 1 - a), so a small ``a`` keeps its digits, as
    ``log1p(-a)`` would.
    """
    u = _ONE - a
    bits = np.float32(u).view(np.int32)
    e = (bits >> 23) - 127
    m = np.int32((bits & _MANTISSA) | _EXP_ONE).view(np.float32)  # in [1, 2)
    big = m > _SQRT_TWO
    m = m * _HALF if big else m
    e = e + 1 if big else e
    f = m - _ONE
    z = f * f
    y = ((((((((_L0 * f + _L1) * f + _L2) * f + _L3) * f + _L4) * f + _L5) * f + _L6) * f
          + _L7) * f + _L8) * f * z
    ef = np.float32(e)
    y = y + ef * _LN2_LO - _HALF * z
    r = f + y + ef * _LN2_HI
    r = r + ((_ONE - u) - a) / u
    r = _NEG_INF if u == _ZERO else r
    return a if a != a else r
