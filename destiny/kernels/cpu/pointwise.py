"""numba kernels for activations, dropout, the sparseness penalty and the norms (spec 3.6-3.13).

Same names and signatures as ``destiny.kernels.reference.pointwise``. Rows are independent, so
the kernels run in parallel over rows. Scalars are computed in float64 and stored in the
output's dtype (``np.float64(x)``, not ``float(x)``: numba types the latter of a float32 as
float32, so the arithmetic would stay float32). No explicit signatures: the same kernels
compile for float32 (training) and float64 (gradient checks).

``unit_activation`` and ``unit_derivative`` are scalar device helpers shared with
``destiny.kernels.cpu.loss``; they branch on the activation code, which LLVM hoists out of
the loops.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from destiny.kernels import unit
from destiny.kernels.codes import (ELU, LINEAR, LRELU, RELU, SELU, SIGMOID, SOFTMAX, SOFTPLUS,
                                   SOFTSIGN, TANH)
from destiny.kernels.cpu.dense import column_block_sums
from destiny.kernels.cpu.rng import uniform
from destiny.kernels.cpu.vecmath import LOOP_FLAGS, exp_shifted32, sigmoid32


@njit(cache=True)
def is_known_activation(act):
    """Whether ``act`` is an activation code with a kernel (see ``destiny.kernels.codes``)."""
    return act in (SIGMOID, TANH, RELU, LINEAR, SOFTPLUS, SOFTSIGN, SOFTMAX, ELU, LRELU, SELU)


# The per-unit formulas are shared with the cuda backend (destiny.kernels.unit).
unit_activation = njit(cache=True)(unit.unit_activation)


unit_derivative = njit(cache=True)(unit.unit_derivative)
unit_sparseness_penalty = njit(cache=True)(unit.sparseness_penalty)


@njit(cache=True)
def _softmax_row(out, z):
    # Max subtraction keeps every exponent <= 0; out may be z (each z[j] is read before out[j]
    # is written, and the second loop reads only out).
    m = -np.inf
    for j in range(len(z)):
        m = max(m, np.float64(z[j]))
    total = 0.0
    for j in range(len(z)):
        e = math.exp(np.float64(z[j]) - m)
        out[j] = e
        total += e
    for j in range(len(z)):
        out[j] = np.float64(out[j]) / total


def activation_forward(a, z, act, slope, alpha, lam, bias=None):
    """``a[B, N] = f(z[B, N] + bias)``; ``a`` may be ``z``. SoftMax works per row.

    A float32 Sigmoid is one vectorised numba pass (``vecmath.sigmoid32``, with the bias added
    in float32 as ``add_bias`` would). Tanh, and a float64 Sigmoid, go through NumPy's SIMD
    ``exp``/``tanh`` (5x faster here than a scalar loop, which LLVM cannot vectorise without
    SVML), several passes. A float32 SoftMax is ``_softmax32_rows`` (vectorised passes over each
    row); the others use the numba kernel. The bias goes into the first pass:
    the Sigmoid's first pass computes (-b) - z, which is -(z + b) exactly (rounding to nearest
    is symmetric), so the result is the same bit for bit as ``add_bias`` followed by the
    activation, one pass over the batch fewer.
    """
    has_bias = bias is not None and len(bias) != 0
    if act == SIGMOID and a.dtype == np.float32 and z.dtype == np.float32:
        b = bias if has_bias else z[:0, 0]
        if a.ctypes.data == z.ctypes.data and a.strides == z.strides:
            _sigmoid32_in_place(a, b)
        else:
            _sigmoid32_rows(a, z, b)
    elif act == SIGMOID:
        if has_bias:
            minus_b = np.negative(bias)
            in_row_blocks(lambda a_, z_: _numpy_sigmoid(a_, z_, minus_b), a, z)
        else:
            in_row_blocks(_numpy_sigmoid, a, z)
    elif act == SOFTMAX and a.dtype == np.float32 and z.dtype == np.float32:
        in_place = a.ctypes.data == z.ctypes.data and a.strides == z.strides
        _softmax32_rows(a, z, bias if has_bias else z[:0, 0], in_place)
    elif act == TANH:
        if has_bias:
            in_row_blocks(lambda a_, z_: np.tanh(np.add(z_, bias, out=a_), out=a_), a, z)
        else:
            in_row_blocks(np.tanh, z, a)
    else:
        _activation_forward(a, z, act, slope, alpha, lam, bias if has_bias else z[:0, 0])


# A float32 SoftMax: the row's maximum, exp(z - m) and the row's float64 sum, each one
# vectorised loop over the row while it is in cache (the generic kernel's scalar libm exp per
# unit took 14x the time of one copy of the batch; docs/benchmarks.md). Same order of
# operations as the generic kernel (the exp stored in float32, scaled by the float64 sum), but
# exp from ``vecmath.exp_shifted32`` (within 2 units in the last place of float32), the sum
# reassociated (partial sums, an order fixed by the code) and a multiplication by 1 / sum.


@njit(cache=True)
def _row_max32(z):
    """The row's maximum (float32), found as the maximum of the floats' bits mapped to ordered
    integers (LLVM vectorises an integer maximum, not a float one that must respect NaN). With
    a NaN in the row it may be the NaN or a number: the NaN then reaches the sum through
    exp_shifted32, and the whole row is NaN all the same."""
    bits = z.view(np.int32)
    m = np.int32(-2147483648)
    for j in range(len(bits)):
        i = bits[j]
        m = max(m, i ^ ((i >> 31) & np.int32(0x7FFFFFFF)))
    return np.int32(m ^ ((m >> 31) & np.int32(0x7FFFFFFF))).view(np.float32)


@njit(cache=True, **LOOP_FLAGS)
def _exp_shifted_row(out, z, m):
    for j in range(len(z)):
        out[j] = exp_shifted32(z[j], m)


@njit(cache=True, fastmath={"reassoc", "nsz"})
def _row_sum64(row):
    total = 0.0
    for j in range(len(row)):
        total += np.float64(row[j])
    return total


@njit(cache=True, **LOOP_FLAGS)
def _exp_shifted_in_place(row, m):
    # Its own loop: with one array as both input and output, LLVM's runtime overlap check
    # fails and the loop runs scalar (see _sigmoid32_in_place).
    for j in range(len(row)):
        row[j] = exp_shifted32(row[j], m)


@njit(cache=True, **LOOP_FLAGS)
def _scale_row32(row, factor):
    for j in range(len(row)):
        row[j] = np.float64(row[j]) * factor


@njit(cache=True, parallel=True)
def _softmax32_rows(a, z, b, in_place):
    has_bias = len(b) != 0
    if z.shape[1] == 0:
        return
    for r in prange(z.shape[0]):
        arow, zrow = a[r], z[r]
        if has_bias:
            for j in range(len(zrow)):
                arow[j] = zrow[j] + b[j]  # in float32, as add_bias adds it
        if has_bias or in_place:
            _exp_shifted_in_place(arow, _row_max32(arow))
        else:
            _exp_shifted_row(arow, zrow, _row_max32(zrow))
        _scale_row32(arow, 1.0 / _row_sum64(arow))


def _numpy_sigmoid(a, z, minus_b=None):
    with np.errstate(over="ignore"):  # exp(-z) = inf gives 1 / inf = 0, as it should
        if minus_b is None:
            np.negative(z, out=a)
        else:
            np.subtract(minus_b, z, out=a)
        np.exp(a, out=a)
        np.add(a, 1.0, out=a)
        np.reciprocal(a, out=a)


@njit(cache=True, parallel=True, **LOOP_FLAGS)
def _sigmoid32_rows(a, z, b):
    has_bias = len(b) != 0
    for r in prange(z.shape[0]):
        arow, zrow = a[r], z[r]
        if has_bias:
            for j in range(len(zrow)):
                arow[j] = sigmoid32(zrow[j] + b[j])
        else:
            for j in range(len(zrow)):
                arow[j] = sigmoid32(zrow[j])


@njit(cache=True, parallel=True, **LOOP_FLAGS)
def _sigmoid32_in_place(a, b):
    # Its own kernel: with a passed as both input and output, LLVM's runtime overlap check
    # fails and every row takes the scalar loop (8x slower, measured in a training step).
    has_bias = len(b) != 0
    for r in prange(a.shape[0]):
        arow = a[r]
        if has_bias:
            for j in range(len(arow)):
                arow[j] = sigmoid32(arow[j] + b[j])
        else:
            for j in range(len(arow)):
                arow[j] = sigmoid32(arow[j])


# NumPy's ufuncs run on one core but release the GIL: a large array is cut into blocks of
# rows, one per numba thread, computed by a small pool of Python threads.
_PARALLEL_MIN = 1 << 20
_pool = None


def in_row_blocks(fn, first, second):
    """``fn(first, second)`` on blocks of rows of both [B, N] arrays, one per numba thread."""
    global _pool
    from numba import get_num_threads

    threads = get_num_threads()
    if threads == 1 or first.size < _PARALLEL_MIN or first.ndim != 2 or len(first) < threads:
        fn(first, second)
        return
    if _pool is None:
        from concurrent.futures import ThreadPoolExecutor

        _pool = ThreadPoolExecutor(threads, thread_name_prefix="destiny-ufunc")
    bounds = np.linspace(0, len(first), threads + 1).astype(int)
    blocks = [slice(bounds[i], bounds[i + 1]) for i in range(threads)]
    list(_pool.map(lambda rows: fn(first[rows], second[rows]), blocks))


@njit(cache=True, parallel=True)
def _activation_forward(a, z, act, slope, alpha, lam, b):
    if not is_known_activation(act):
        raise ValueError("unknown activation code (see destiny.kernels.codes)")
    has_bias = len(b) != 0
    for r in prange(z.shape[0]):
        if act == SOFTMAX:
            if has_bias:
                for j in range(z.shape[1]):
                    a[r, j] = z[r, j] + b[j]  # in z's precision, as add_bias adds it
                _softmax_row(a[r], a[r])
            else:
                _softmax_row(a[r], z[r])
        elif has_bias:
            for j in range(z.shape[1]):
                a[r, j] = unit_activation(act, np.float64(z[r, j] + b[j]), slope, alpha, lam)
        else:
            for j in range(z.shape[1]):
                a[r, j] = unit_activation(act, np.float64(z[r, j]), slope, alpha, lam)


@njit(cache=True)
def softmax_row_dot(a, g):
    """``sum_j g[j] * a[j]`` in float64: the shared term of a softmax row's Jacobian product."""
    s = 0.0
    for j in range(len(a)):
        s += np.float64(g[j]) * np.float64(a[j])
    return s


def activation_backward(dz, da, a, act, slope, alpha, lam, mask=None):
    """``dz[B, N] = da * f'(a)``, f' taken from the activations ``a``; ``dz`` may be ``da``.

    SoftMax uses the exact Jacobian of each row: ``dz = a * (da - sum_j da_j a_j)``. With a
    dropout ``mask``, ``da * mask`` (rounded to ``da``'s dtype) takes the place of ``da``.

    Sigmoid and Tanh, the hidden layers of DSSTNE's networks, go through three NumPy SIMD
    passes (as ``activation_forward`` does): as fast as the numba kernel on an idle machine,
    and much faster when another process holds a core (a parallel numba kernel then waits for
    its descheduled thread). The others use the numba kernel.
    """
    if act == SIGMOID or act == TANH:
        _derivative_product(dz, da, a, act, mask)
    else:
        _activation_backward(dz, da, a, act, slope, alpha, lam,
                             mask if mask is not None else a[:0])


def _derivative_product(dz, da, a, act, mask=None):
    """``dz = da * a (1 - a)`` (Sigmoid) or ``da * (1 - a)(1 + a)`` (Tanh), in ``a``'s dtype.

    Tanh's 1 - a^2 is factored: in float32, 1 - a * a would cancel away the digits of a
    saturated unit (a near +-1), while 1 - a and 1 + a are exact or nearly there.
    """
    fprime = np.subtract(1.0, a, dtype=a.dtype)
    if act == SIGMOID:
        np.multiply(fprime, a, out=fprime)
    else:
        fprime *= np.add(1.0, a, dtype=a.dtype)
    if mask is not None:
        np.multiply(da, mask, out=dz)  # elementwise, so dz may be da
        da = dz
    np.multiply(da, fprime, out=dz)


@njit(cache=True, parallel=True)
def _activation_backward(dz, da, a, act, slope, alpha, lam, mask):
    if not is_known_activation(act):
        raise ValueError("unknown activation code (see destiny.kernels.codes)")
    masked = mask.size != 0
    for r in prange(a.shape[0]):
        if masked:  # in da's dtype, as the reference rounds it (dz may be da)
            for j in range(a.shape[1]):
                dz[r, j] = da[r, j] * mask[r, j]
            g = dz[r]
        else:
            g = da[r]
        if act == SOFTMAX:
            s = softmax_row_dot(a[r], g)
            for j in range(a.shape[1]):
                dz[r, j] = np.float64(a[r, j]) * (np.float64(g[j]) - s)
        else:
            for j in range(a.shape[1]):
                x = np.float64(a[r, j])
                dz[r, j] = np.float64(g[j]) * unit_derivative(act, x, slope, alpha, lam)


# A SoftMax layer split across MPI ranks: the row's maximum and sum, and its Jacobian product's
# sum, are added up over the ranks between two kernels (see the reference). A float32 layer
# takes the one-process SoftMax's vectorised row passes (``_softmax32_rows``): the generic
# kernels' scalar libm exp per unit, twice, took 23 ms a step at a rank's half of the
# benchmark's output (256 x 13,696, one thread), against 1.4 ms for a whole one-process pass
# there (docs/benchmarks.md).


def softmax_forward_partials(stats, z):
    """``stats[r] = (m, s)``: row r's maximum m and ``sum_j exp(z[r, j] - m)`` (reference).

    For float32 ``z`` the sum is of exp(z - m) rounded to float32 (``exp_shifted32``, within 2
    units in the last place), added in float64 in an order fixed by the code."""
    if z.dtype == np.float32 and z.shape[1] != 0:
        _softmax32_partials(stats, z)
    else:
        _softmax_forward_partials(stats, z)


@njit(cache=True, parallel=True)
def _softmax32_partials(stats, z):
    for r in prange(z.shape[0]):
        zrow = z[r]
        m = _row_max32(zrow)
        # (the exps go to a row of scratch, in cache, and are summed in a loop of their own:
        # reassociating the sum in the exp's loop would fold away exp_shifted32's compensation)
        scratch = np.empty(len(zrow), np.float32)
        _exp_shifted_row(scratch, zrow, m)
        total = _row_sum64(scratch)
        stats[r, 0] = _nan_if_any(zrow, m) if total != total else m
        stats[r, 1] = total


@njit(cache=True)
def _nan_if_any(row, m):
    """NaN where ``row`` holds one, else ``m``: the maximum of a row holding NaN is NaN, as the
    reference's (NumPy's max). A part of a split row whose units are all NaN (or NaN and -inf)
    then makes the whole row NaN, as in one process; its maximum of the numbers, -inf, made
    ``softmax_row_stats`` drop it as a part of units all -inf. Asked only where the sum is NaN
    (a NaN unit, or units all -inf), so the integer maximum above stays as fast."""
    for j in range(len(row)):
        if row[j] != row[j]:
            return np.nan
    return m


@njit(cache=True, parallel=True)
def _softmax_forward_partials(stats, z):
    for r in prange(z.shape[0]):
        m = -np.inf
        for j in range(z.shape[1]):
            m = max(m, np.float64(z[r, j]))
        total = 0.0
        for j in range(z.shape[1]):
            total += math.exp(np.float64(z[r, j]) - m)
        stats[r, 0] = _nan_if_any(z[r], m) if total != total else m  # (see _nan_if_any)
        stats[r, 1] = total


def softmax_forward_finish(a, z, stats):
    """``a = min(1, exp(z - M) / S)`` with ``stats[r] = (M, S)`` (reference); ``a`` may be ``z``.
    NaN stays NaN (numba's ``min(1.0, nan)`` is 1.0).

    For float32 ``a`` and ``z``: ``exp_shifted32(z, float32(M))`` times 1 / S in float64, then
    rounded. M is a maximum of float32 ``z`` (``softmax_forward_partials``), so float32(M) is
    M itself."""
    if a.dtype == np.float32 and z.dtype == np.float32:
        _softmax32_finish(a, z, stats, a.ctypes.data == z.ctypes.data and a.strides == z.strides)
    else:
        _softmax_forward_finish(a, z, stats)


@njit(cache=True, **LOOP_FLAGS)
def _exp_scaled_row(out, z, m, factor):
    for j in range(len(z)):
        x = np.float64(exp_shifted32(z[j], m)) * factor
        out[j] = 1.0 if x > 1.0 else x


@njit(cache=True, **LOOP_FLAGS)
def _exp_scaled_in_place(row, m, factor):
    # (its own loop, as _exp_shifted_in_place: one array as both sides runs scalar)
    for j in range(len(row)):
        x = np.float64(exp_shifted32(row[j], m)) * factor
        row[j] = 1.0 if x > 1.0 else x


@njit(cache=True, parallel=True)
def _softmax32_finish(a, z, stats, in_place):
    for r in prange(z.shape[0]):
        m, total = np.float32(stats[r, 0]), stats[r, 1]
        factor = 1.0 / total if total != 0.0 else np.inf  # (S = 0: a row all -inf, NaN)
        if in_place:
            _exp_scaled_in_place(a[r], m, factor)
        else:
            _exp_scaled_row(a[r], z[r], m, factor)


@njit(cache=True, parallel=True)
def _softmax_forward_finish(a, z, stats):
    for r in prange(z.shape[0]):
        m, total = stats[r, 0], stats[r, 1]
        for j in range(z.shape[1]):
            x = math.exp(np.float64(z[r, j]) - m) / total
            a[r, j] = 1.0 if x > 1.0 else x


def softmax_backward_partials(dots, da, a, mask=None):
    """``dots[r] = sum_j g[r, j] a[r, j]``, g = ``da`` (times ``mask``), float64 (reference)."""
    _softmax_backward_partials(dots, da, a, mask if mask is not None else a[:0])


@njit(cache=True, parallel=True)
def _softmax_backward_partials(dots, da, a, mask):
    masked = mask.size != 0
    for r in prange(a.shape[0]):
        s = 0.0
        for j in range(a.shape[1]):
            g = da[r, j] * mask[r, j] if masked else da[r, j]  # (in da's dtype, as the
            s += np.float64(g) * np.float64(a[r, j])          # reference rounds it)
        dots[r] = s


def softmax_backward_finish(dz, da, a, dots, mask=None):
    """``dz = a * (g - dots[r])``, ``dots`` the whole row's (reference); ``dz`` may be ``da``."""
    _softmax_backward_finish(dz, da, a, dots, mask if mask is not None else a[:0])


@njit(cache=True, parallel=True)
def _softmax_backward_finish(dz, da, a, dots, mask):
    masked = mask.size != 0
    for r in prange(a.shape[0]):
        s = np.float64(dots[r])
        for j in range(a.shape[1]):
            g = da[r, j] * mask[r, j] if masked else da[r, j]
            dz[r, j] = np.float64(a[r, j]) * (np.float64(g) - s)


def dropout_forward(out, mask, a, key, row_offset, col_offset, p, act, alpha, lam):
    """Dropout with an explicit mask ``d out / d a`` (spec 3.8): unit (r, j) is dropped iff
    ``u(key, row_offset + r, col_offset + j) < p``, drawn here, element by element.

    Sigmoid: dropped -> 0.5, kept unchanged. ELU/SELU: alpha-dropout. Others: inverted
    dropout. ``out`` may be ``a``. See the reference for the parameters.
    """
    _dropout(out, mask, a, np.uint64(key), np.int64(row_offset), np.int64(col_offset), float(p),
             int(act), float(alpha), float(lam))


def activation_dropout_forward(out, mask, a, z, act, slope, alpha, lam, bias, key, row_offset,
                               col_offset, p):
    """``activation_forward`` then ``dropout_forward`` (see the reference): two passes here,
    the activation's own fast paths and then the draw with the dropout."""
    activation_forward(a, z, act, slope, alpha, lam, bias)
    dropout_forward(out, mask, a, key, row_offset, col_offset, p, act, alpha, lam)


@njit(cache=True, parallel=True)
def _dropout(out, mask, a, key, row_offset, col_offset, p, act, alpha, lam):
    if not (p >= 0.0 and p < 1.0):
        raise ValueError("dropout probability is outside [0, 1)")
    if act == SIGMOID:
        gain, shift, dropped_value = 1.0, 0.0, 0.5
    elif act == ELU or act == SELU:
        saturation = -(lam if act == SELU else 1.0) * alpha
        q = 1.0 - p
        gain = 1.0 / math.sqrt(q + saturation * saturation * p * q)
        shift = -gain * p * saturation
        dropped_value = gain * saturation + shift
    else:
        gain, shift, dropped_value = 1.0 / (1.0 - p), 0.0, 0.0
    for i in prange(a.shape[0]):
        row = np.uint64(row_offset + i)
        for j in range(a.shape[1]):
            if uniform(key, row, np.uint64(col_offset + j)) < p:
                out[i, j] = dropped_value
                mask[i, j] = 0.0
            else:
                out[i, j] = gain * np.float64(a[i, j]) + shift
                mask[i, j] = gain


# Column statistics (sparseness penalty, WeightNorm) run in parallel over tiles of columns: each
# thread reads a contiguous slice of every row, owns its columns, and sums them in row order
# (deterministic whatever the number of threads).
_TILE = 64


@njit(cache=True, parallel=True)
def sparseness_penalty(da, a, p, beta):
    """``da[:, j] += beta * (-p / rho_j + (1 - p) / (1 - rho_j))``, rho_j = clamped column mean.

    Spec 3.10; ``da`` [B, N] is the delta before the activation derivative.
    """
    n_rows, n_units = a.shape
    for t in prange((n_units + _TILE - 1) // _TILE):
        lo = t * _TILE
        hi = min(lo + _TILE, n_units)
        penalty = column_block_sums(a, lo, hi)
        for j in range(hi - lo):
            penalty[j] = unit_sparseness_penalty(penalty[j], n_rows, p, beta)
        for r in range(n_rows):
            for j in range(lo, hi):
                da[r, j] = np.float64(da[r, j]) + penalty[j - lo]


@njit(cache=True)
def _row_squares(row):
    """``sum_j row[j]^2`` in float64, in unit order."""
    total = 0.0
    for j in range(len(row)):
        total += np.float64(row[j]) * np.float64(row[j])
    return total


@njit(cache=True)
def _limit_row(row, squares, limit):
    """Rescale ``row``, of sum of squares ``squares``, to norm ``limit`` where it exceeds it."""
    norm = math.sqrt(squares)
    if norm > limit:
        scale = limit / norm
        for j in range(len(row)):
            row[j] = np.float64(row[j]) * scale


@njit(cache=True, parallel=True)
def delta_norm(d, limit):
    """Rescale each row of ``d`` [B, N] whose L2 norm exceeds ``limit`` to norm ``limit`` (3.13)."""
    for r in prange(d.shape[0]):
        _limit_row(d[r], _row_squares(d[r]), limit)


@njit(cache=True, parallel=True)
def delta_norm_partials(sums, d):
    """``sums[r] = sum_j d[r, j]^2`` in float64: a rank's part of the row norms (reference)."""
    for r in prange(d.shape[0]):
        sums[r] = _row_squares(d[r])


@njit(cache=True, parallel=True)
def delta_norm_finish(d, sums, limit):
    """``delta_norm`` with the whole rows' sums of squares ``sums`` given (reference)."""
    for r in prange(d.shape[0]):
        _limit_row(d[r], sums[r], limit)


@njit(cache=True)
def _tile_squares(W, lo, hi):
    """``sum_i W[i, j]^2`` of columns lo..hi-1 in float64, in row order."""
    total = np.zeros(hi - lo, dtype=np.float64)
    for i in range(W.shape[0]):
        for j in range(lo, hi):
            total[j - lo] += np.float64(W[i, j]) * np.float64(W[i, j])
    return total


@njit(cache=True)
def _limit_tile(W, lo, hi, squares, limit):
    """Rescale columns lo..hi-1 of ``W``, of sums of squares ``squares``, to norm ``limit``
    where it exceeds it; W is not touched where no column does."""
    scale = np.ones(hi - lo, dtype=np.float64)
    rescale = False
    for j in range(hi - lo):
        norm = math.sqrt(squares[j])
        if norm > limit:
            scale[j] = limit / norm
            rescale = True
    if rescale:
        for i in range(W.shape[0]):
            for j in range(lo, hi):
                W[i, j] = np.float64(W[i, j]) * scale[j - lo]


@njit(cache=True, parallel=True)
def weight_norm(W, limit):
    """Rescale each column of ``W`` [I, O] whose L2 norm exceeds ``limit`` to ``limit`` (3.13)."""
    n_out = W.shape[1]
    for t in prange((n_out + _TILE - 1) // _TILE):
        lo = t * _TILE
        hi = min(lo + _TILE, n_out)
        _limit_tile(W, lo, hi, _tile_squares(W, lo, hi), limit)


@njit(cache=True, parallel=True)
def weight_norm_partials(sums, W):
    """``sums[j] = sum_i W[i, j]^2`` in float64, in row order: a rank's part of the column
    norms (reference)."""
    n_out = W.shape[1]
    for t in prange((n_out + _TILE - 1) // _TILE):
        lo = t * _TILE
        hi = min(lo + _TILE, n_out)
        sums[lo:hi] = _tile_squares(W, lo, hi)


@njit(cache=True, parallel=True)
def weight_norm_finish(W, sums, limit):
    """``weight_norm`` with the whole columns' sums of squares ``sums`` given (reference)."""
    n_out = W.shape[1]
    for t in prange((n_out + _TILE - 1) // _TILE):
        lo = t * _TILE
        hi = min(lo + _TILE, n_out)
        _limit_tile(W, lo, hi, sums[lo:hi], limit)
