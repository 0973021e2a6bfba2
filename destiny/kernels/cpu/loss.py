"""numba kernels for the output-layer losses and deltas (spec 5.5, 3.11, 6.3).

Same names and signatures as ``destiny.kernels.reference.loss``, whose docstring explains the
"pre-delta" ``p`` and the SoftMax row Jacobian ``delta = p - a * sum_j p_j``. The public
functions are thin Python wrappers: they check the (loss, activation) pair, bundle the
scalars and call one parallel kernel, which works on whole rows (a SoftMax row is coupled) and
writes one error per row, summed afterwards in a fixed order (the result does not depend on
the number of threads). The per-unit maths lives in one small ``@njit`` helper, ``unit_loss``,
that branches on the integer codes, instead of one kernel per (loss, activation) pair. The one
exception is a Sigmoid output with CrossEntropy or (Data)ScaledMarginalCrossEntropy, DSSTNE's
recommender case, whose zero-target pass has a vectorised fast path (see below).
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np
from numba import njit, prange

from destiny.kernels import unit
from destiny.kernels.codes import (CROSS_ENTROPY, DSMCE, L1, L2, L2_HINGE, SIGMOID, SMCE,
                                   SOFTMAX, boost_applies, check_loss_activation)
from destiny.kernels.cpu.pointwise import in_row_blocks, unit_derivative
from destiny.kernels.cpu.vecmath import LOOP_FLAGS, log1m32

__all__ = ["check_loss_activation", "dense_loss_delta", "softmax_loss_finish",
           "softmax_loss_partials", "sparse_loss_delta"]

EPS = 1e-12  # DSSTNE's MIN_ERROR: every log is log(max(EPS, x)) (spec 5.5)
LOG_EPS = math.log(EPS)

# All float64, so that numba sees one homogeneous tuple type.
LossParams = namedtuple("LossParams", "slope alpha lam one_target zero_target one_scale zero_scale")


# NaN-keeping clamps and sign (``destiny.kernels.unit``): with max, min and a sign of
# comparisons a NaN output lost its NaN, and cost a finite error where the reference's (NumPy's
# maximum, minimum and sign) is NaN, so that training's NaN guard did not stop at that batch.
_at_least = njit(cache=True)(unit.at_least)
_at_most = njit(cache=True)(unit.at_most)
_sign = njit(cache=True)(unit.sign)


@njit(cache=True)
def _log(x):
    return math.log(_at_least(x, EPS))


@njit(cache=True)
def _hinge_gap(a, t):
    # L2Hinge: d = a - |t|, kept only on the wrong side of the target (spec 5.5).
    d = a - abs(t)
    return _at_most(d, 0.0) if t > 0.0 else _at_least(d, 0.0)


@njit(cache=True)
def _marginal(one, a, prm):
    """Whether an SMCE branch is active: a listed unit below oneTarget, a zero above zeroTarget."""
    return a < prm.one_target if one else a > prm.zero_target


@njit(cache=True)
def _marginal_loss(err_fn, act, a, t, one, prm):
    """(e, p) of SMCE and DSMCE, fused with the Sigmoid or SoftMax derivative."""
    if not _marginal(one, a, prm):
        return 0.0, 0.0
    if one:  # DSMCE scales a listed unit by its value t
        scale = prm.one_scale * (t if err_fn == DSMCE else 1.0)
        return -scale * _log(a), -scale if act == SOFTMAX else scale * (a - 1.0)
    e = -prm.zero_scale * _log(1.0 - a)
    if act == SOFTMAX:  # a * de/da
        return e, prm.zero_scale * a / max(EPS, 1.0 - a)
    return e, prm.zero_scale * a  # de/da * a (1 - a)


@njit(cache=True)
def unit_loss(err_fn, act, a, t, one, prm):
    """Per-unit error and pre-delta ``(e, p)`` of the output ``a`` for the target ``t``.

    ``p`` is ``de/da * f'(a)``, or ``a * de/da`` for SoftMax (the row Jacobian follows);
    ``one`` selects the SMCE/DSMCE listed-target branch. One function for both, so that the
    row kernels inline the per-unit maths at few call sites (numba compiles much faster).
    """
    if err_fn == CROSS_ENTROPY:  # fused with the Sigmoid / SoftMax derivative
        if act == SOFTMAX:
            return -t * _log(a), -t
        return -t * _log(a) - (1.0 - t) * _log(1.0 - a), a - t
    if err_fn == SMCE or err_fn == DSMCE:
        return _marginal_loss(err_fn, act, a, t, one, prm)
    if err_fn == L1:
        e, g = abs(a - t), _sign(a - t)
    elif err_fn == L2:
        e, g = 0.5 * (a - t) * (a - t), a - t
    elif err_fn == L2_HINGE:
        g = _hinge_gap(a, t)
        e = 0.5 * g * g
    else:  # HINGE: the exact gradient, not DSSTNE's a < 0
        e, g = _at_least(1.0 - t * a, 0.0), (-t if t * a < 1.0 else 0.0)
    if act == SOFTMAX:
        return e, a * g
    return e, g * unit_derivative(act, a, prm.slope, prm.alpha, prm.lam)


@njit(cache=True)
def _listed_target(err_fn, act, value, count):
    """A listed entry's target: its value, or 1 / (1/n for SoftMax CrossEntropy), spec 6.6."""
    if err_fn == CROSS_ENTROPY:
        return 1.0 / count if act == SOFTMAX else 1.0
    if err_fn == SMCE:
        return 1.0
    return value


@njit(cache=True)
def _jacobian_row(drow, arow, act):
    """SoftMax: ``drow = p - a * sum_j p_j`` in place; other activations: nothing to do."""
    if act == SOFTMAX:
        total = 0.0
        for j in range(len(drow)):
            total += np.float64(drow[j])
        for j in range(len(drow)):
            drow[j] = np.float64(drow[j]) - np.float64(arow[j]) * total


@njit(cache=True)
def _scale_row(drow, factor):
    if factor != 1.0:
        for j in range(len(drow)):
            drow[j] = np.float64(drow[j]) * factor


@njit(cache=True)
def _sparse_row(drow, arow, indices, values, lo, hi, err_fn, act, prm, boost_one, boost_zero,
                boosting, ignore_zero):
    """One row of ``sparse_loss_delta``: writes the unweighted delta, returns the error."""
    err = _pre_delta_row(drow, arow, indices, values, lo, hi, hi - lo, err_fn, act, prm,
                         ignore_zero)
    _jacobian_row(drow, arow, act)
    if boosting:
        _boost_row(drow, indices, lo, hi, boost_one, boost_zero)
    return err


@njit(cache=True)
def _pre_delta_row(drow, arow, indices, values, lo, hi, count, err_fn, act, prm, ignore_zero):
    """The pre-deltas of one row (its listed entries lo..hi-1, of ``count`` in the whole row)
    into ``drow``; returns the row's unweighted error."""
    boolean = len(values) == 0
    err = 0.0
    for j in range(len(arow)):  # every unit as a zero target (none with ignore_zero) ...
        if ignore_zero:
            drow[j] = 0.0
        else:
            e, drow[j] = unit_loss(err_fn, act, np.float64(arow[j]), 0.0, False, prm)
            err += e
    for k in range(lo, hi):  # ... then correct the listed entries
        j = indices[k]
        x = np.float64(arow[j])
        t = _listed_target(err_fn, act, 1.0 if boolean else np.float64(values[k]), count)
        e1, drow[j] = unit_loss(err_fn, act, x, t, True, prm)
        err += e1 if ignore_zero else e1 - unit_loss(err_fn, act, x, 0.0, False, prm)[0]
    return err


@njit(cache=True)
def _boost_row(drow, indices, lo, hi, boost_one, boost_zero):
    """DeltaBoost scales the final deltas, by boost_one at the listed units (spec 3.11)."""
    listed = np.empty(hi - lo, dtype=np.float64)
    for k in range(lo, hi):
        listed[k - lo] = drow[indices[k]]
    _scale_row(drow, boost_zero)
    for k in range(lo, hi):
        drow[indices[k]] = listed[k - lo] * boost_one


@njit(cache=True, parallel=True)
def _sparse_kernel(delta, a, indptr, indices, values, weights, err_fn, act, prm, boost_one,
                   boost_zero, boosting, ignore_zero):
    n_rows = a.shape[0]
    row_err = np.zeros(n_rows, dtype=np.float64)
    for r in prange(n_rows):
        w = 1.0 if len(weights) == 0 else np.float64(weights[r])
        err = _sparse_row(delta[r], a[r], indices, values, indptr[r], indptr[r + 1], err_fn, act,
                          prm, boost_one, boost_zero, boosting, ignore_zero)
        _scale_row(delta[r], w)
        row_err[r] = w * err
    return row_err.sum()


@njit(cache=True, parallel=True)
def _dense_kernel(delta, a, t, weights, err_fn, act, prm):
    n_rows, n_units = a.shape
    row_err = np.zeros(n_rows, dtype=np.float64)
    for r in prange(n_rows):
        err = 0.0
        for j in range(n_units):
            x = np.float64(a[r, j])
            y = np.float64(t[r, j])
            e, delta[r, j] = unit_loss(err_fn, act, x, y, y > 0.0, prm)
            err += e
        _jacobian_row(delta[r], a[r], act)
        w = 1.0 if len(weights) == 0 else np.float64(weights[r])
        _scale_row(delta[r], w)
        row_err[r] = w * err
    return row_err.sum()


def _params(slope, alpha, lam, one_target, zero_target, one_scale, zero_scale):
    return LossParams(float(slope), float(alpha), float(lam), float(one_target),
                      float(zero_target), float(one_scale), float(zero_scale))


def sparse_loss_delta(delta, a, indptr, indices, values, weights, err_fn, act, slope, alpha, lam,
                      one_target, zero_target, one_scale, zero_scale, boost_one, boost_zero,
                      ignore_zero=False):
    """Error and output delta for sparse CSR targets; see the reference for the parameters."""
    check_loss_activation(err_fn, act)
    if np.may_share_memory(delta, a):  # (both kernels read a row of a after writing delta's)
        raise ValueError("sparse_loss_delta: delta overlaps a; give delta memory of its own")
    boosting = boost_applies(err_fn, act) and (boost_one != 1.0 or boost_zero != 1.0)
    prm = _params(slope, alpha, lam, one_target, zero_target, one_scale, zero_scale)
    # (Without zero targets the generic kernel's first pass is a fill: nothing to speed up.)
    if not ignore_zero and _sigmoid_fast_path_applies(delta, err_fn, act):
        return _sigmoid_sparse_loss(delta, a, indptr, indices, values, weights, int(err_fn), prm,
                                    float(boost_one), float(boost_zero), boosting)
    if _softmax_fast_path_applies(delta, a, err_fn, act):
        return float(_softmax_ce_kernel(delta, a, indptr, indices, weights, bool(ignore_zero)))
    return float(_sparse_kernel(delta, a, indptr, indices, values, weights, int(err_fn), int(act),
                                prm, float(boost_one), float(boost_zero), boosting,
                                bool(ignore_zero)))


# --- A SoftMax output split across MPI ranks (see the reference) ----------------------------


@njit(cache=True, parallel=True)
def _softmax_partials_kernel(delta, sums, a, indptr, indices, values, weights, counts, err_fn,
                             prm, ignore_zero):
    n_rows = a.shape[0]
    row_err = np.zeros(n_rows, dtype=np.float64)
    for r in prange(n_rows):
        lo, hi = indptr[r], indptr[r + 1]
        count = hi - lo if len(counts) == 0 else counts[r]
        err = _pre_delta_row(delta[r], a[r], indices, values, lo, hi, count, err_fn, SOFTMAX,
                             prm, ignore_zero)
        total = 0.0  # the stored p, as _jacobian_row sums them
        for j in range(delta.shape[1]):
            total += np.float64(delta[r, j])
        sums[r] = total
        row_err[r] = err * (1.0 if len(weights) == 0 else np.float64(weights[r]))
    return row_err.sum()


@njit(cache=True, parallel=True)
def _softmax_finish_kernel(delta, sums, a, indptr, indices, weights, boost_one, boost_zero,
                           boosting):
    for r in prange(a.shape[0]):
        drow, arow, total = delta[r], a[r], sums[r]
        for j in range(len(drow)):  # _jacobian_row with the whole row's sum
            drow[j] = np.float64(drow[j]) - np.float64(arow[j]) * total
        if boosting:
            _boost_row(drow, indices, indptr[r], indptr[r + 1], boost_one, boost_zero)
        _scale_row(drow, 1.0 if len(weights) == 0 else np.float64(weights[r]))


def softmax_loss_partials(delta, sums, a, indptr, indices, values, weights, counts, err_fn,
                          one_target, zero_target, one_scale, zero_scale, boost_one, boost_zero,
                          ignore_zero=False):
    """A rank's pre-deltas, their row sums and its error; see the reference."""
    check_loss_activation(err_fn, SOFTMAX)
    if np.may_share_memory(delta, a):
        raise ValueError("softmax_loss_partials: delta overlaps a; give delta memory of its own")
    if _softmax_fast_path_applies(delta, a, err_fn, SOFTMAX):
        return float(_softmax_ce_partials_kernel(delta, sums, a, indptr, indices, weights,
                                                 counts, bool(ignore_zero)))
    prm = _params(0.0, 0.0, 0.0, one_target, zero_target, one_scale, zero_scale)
    return float(_softmax_partials_kernel(delta, sums, a, indptr, indices, values, weights,
                                          counts, int(err_fn), prm, bool(ignore_zero)))


def softmax_loss_finish(delta, sums, a, indptr, indices, values, weights, counts, err_fn,
                        one_target, zero_target, one_scale, zero_scale, boost_one, boost_zero,
                        ignore_zero=False):
    """The output delta from the pre-deltas and the whole rows' sums; see the reference."""
    check_loss_activation(err_fn, SOFTMAX)
    boosting = boost_applies(err_fn, SOFTMAX) and (boost_one != 1.0 or boost_zero != 1.0)
    _softmax_finish_kernel(delta, sums, a, indptr, indices, weights, float(boost_one),
                           float(boost_zero), boosting)


# --- Sigmoid output with (Scaled Marginal) CrossEntropy: DSSTNE's recommender networks --------
#
# With a Sigmoid output, the zero-target branch of CrossEntropy, SMCE and DSMCE is elementwise
# (spec 5.5): delta = zeroScale * a and e = -zeroScale * log(max(EPS, 1 - a)) where a is above
# zeroTarget, nothing elsewhere (CrossEntropy: zeroScale 1, every unit). Evaluated by the generic
# per-unit helper it costs a scalar log per unit of the whole [B, N] block, which dominates the
# step. The fast path writes each row's logs into its delta row (float32: ``vecmath.log1m32``,
# which vectorises; float64: NumPy's log1p, in one pass before the kernel), sums them and writes
# the delta in a vectorised pass while the row is still in cache, and then corrects the few
# listed entries with the generic helper.


def _sigmoid_fast_path_applies(delta, err_fn, act):
    # DeltaBoost (CrossEntropy) stays on the fast path, so that it leaves the error bit for bit
    # unchanged, as spec 3.11 says.
    return act == SIGMOID and err_fn in (CROSS_ENTROPY, SMCE, DSMCE) and delta.ndim == 2


def _sigmoid_sparse_loss(delta, a, indptr, indices, values, weights, err_fn, prm, boost_one,
                         boost_zero, boosting):
    """The fast path of ``sparse_loss_delta`` (see above); returns the weighted error."""
    # CrossEntropy: every unit is a zero target (a NaN one too), with unit scale; SMCE and
    # DSMCE: the units above zeroTarget (not a NaN one: the reference compares it).
    every = err_fn == CROSS_ENTROPY
    if every:
        zero_target, zero_scale = -np.inf, 1.0
    else:
        zero_target, zero_scale = prm.zero_target, prm.zero_scale
    # log(1 - a) as log1p(-a): in float32, 1 - a would round away most digits of a small a.
    # No clamp needed here: 1 - a < EPS only for a == 1, log1p(-1) = -inf, clamped below.
    logs_in_kernel = a.dtype == np.float32 and delta.dtype == np.float32
    if not logs_in_kernel:
        in_row_blocks(_log1m, delta, a)
    return float(_sigmoid_sparse_kernel(delta, a, indptr, indices, values, weights, err_fn,
                                        _threshold_below(zero_target, a.dtype), every,
                                        zero_scale, prm, boost_one, boost_zero, boosting,
                                        logs_in_kernel))


def _threshold_below(threshold, dtype):
    """The largest value of ``dtype`` not above ``threshold`` (a float64): for an ``a`` of
    ``dtype``, ``a > it`` is exactly ``float64(a) > threshold``, the comparison of the reference
    and of the generic helper (which corrects the listed units here), in the kernel's dtype.
    The threshold rounded to nearest was not: float32(0.1), the default zeroTarget's, is above
    0.1, so an output of exactly float32(0.1) lost its zero-target delta and error."""
    below = dtype.type(threshold)
    if float(below) > threshold:  # (float(): NumPy would compare in float32)
        below = np.nextafter(below, dtype.type(-np.inf))
    return below


def _log1m(out, a):
    """``out = log(1 - a)`` through NumPy's SIMD log1p (one block of rows)."""
    np.negative(a, out=out)
    with np.errstate(divide="ignore"):
        np.log1p(out, out=out)


@njit(cache=True, **LOOP_FLAGS)
def _log1m_row(out, a):
    """``out = log(1 - a)`` for one float32 row, vectorised (see ``vecmath``)."""
    for j in range(len(a)):
        out[j] = log1m32(a[j])


@njit(cache=True, fastmath={"reassoc", "nsz"})
def _active_log_sum(log_row, arow, zero_target, every):
    """``sum of max(log(EPS), log_row[j])`` over the units with ``arow[j] > zero_target``, or
    over every unit; a NaN log (of a NaN output) is kept, as NumPy's maximum keeps it in the
    reference: the error is NaN, where max dropped it.

    Float64 accumulation of the float32 logs. ``reassoc`` lets LLVM vectorise the sum (several
    partial sums): the order changes with the code, never with the data or the thread count.
    """
    total = 0.0
    if every:  # (a loop of its own: LLVM vectorises each of the two)
        for j in range(len(arow)):
            x = np.float64(log_row[j])
            total += x if not x <= LOG_EPS else LOG_EPS  # (not <=: a NaN is kept)
    else:
        for j in range(len(arow)):
            x = np.float64(log_row[j])
            term = x if not x <= LOG_EPS else LOG_EPS
            total += term if arow[j] > zero_target else 0.0
    return total


@njit(cache=True)
def _active_delta(drow, arow, zero_target, every, zero_scale):
    """``drow = zero_scale * a`` where ``a > zero_target`` (or everywhere), else 0: the
    zero-target delta (NaN for a NaN output of CrossEntropy, a - 0, as in the reference)."""
    for j in range(len(arow)):
        x = arow[j]
        drow[j] = zero_scale * x if every or x > zero_target else 0.0


@njit(cache=True)
def _listed_correction(drow, arow, indices, values, lo, hi, err_fn, prm):
    """Overwrite the delta of a row's listed units; returns the error correction ``e1 - e0``.

    The same per-unit maths as the generic kernel (an index listed twice corrects twice).
    """
    boolean = len(values) == 0
    err = 0.0
    for k in range(lo, hi):
        j = indices[k]
        x = np.float64(arow[j])
        t = _listed_target(err_fn, SIGMOID, 1.0 if boolean else np.float64(values[k]), hi - lo)
        e1, drow[j] = unit_loss(err_fn, SIGMOID, x, t, True, prm)
        err += e1 - unit_loss(err_fn, SIGMOID, x, 0.0, False, prm)[0]
    return err


@njit(cache=True, parallel=True)
def _sigmoid_sparse_kernel(delta, a, indptr, indices, values, weights, err_fn, zero_target,
                           every, zero_scale, prm, boost_one, boost_zero, boosting,
                           logs_in_kernel):
    # Each delta row first holds log(1 - a) (written here, or on entry if not logs_in_kernel),
    # is read as logs and then overwritten.
    n_rows = a.shape[0]
    row_err = np.zeros(n_rows, dtype=np.float64)
    for r in prange(n_rows):
        drow, arow = delta[r], a[r]
        if logs_in_kernel:
            _log1m_row(drow, arow)
        err = -zero_scale * _active_log_sum(drow, arow, zero_target, every)
        _active_delta(drow, arow, zero_target, every, zero_scale)
        lo, hi = indptr[r], indptr[r + 1]
        err += _listed_correction(drow, arow, indices, values, lo, hi, err_fn, prm)
        if boosting:
            _boost_row(drow, indices, lo, hi, boost_one, boost_zero)
        w = 1.0 if len(weights) == 0 else np.float64(weights[r])
        _scale_row(drow, w)
        row_err[r] = w * err
    return row_err.sum()


# --- SoftMax output with CrossEntropy: a recommender over the whole catalogue ----------------
#
# A zero target's error is -0 * log(a) and its pre-delta -0 (spec 5.5), and a listed unit's
# target is 1 / n (spec 6.6): its pre-delta is p = float32(-1 / n), the same for every listed
# unit of the row. The generic kernel still takes a scalar log of every unit and sums the row's
# pre-deltas in float64 one after the other (both latency-bound). Here the row's sum is
# u * float64(p), u the row's distinct listed units, which is what the sequential float64 sum of
# u copies of a float32 p gives exactly (u < 2**29); then delta = -(a * sum) in one vectorised
# pass, and the listed units are overwritten with p - a * sum. The result is the generic
# kernel's bit for bit (float32 only; float64, the gradient checks, keeps the generic kernel).
# An a holding NaN or +inf at an unlisted unit makes the error NaN there, its -0 * log(a)
# (``_nan_or_plus_inf``), as in the generic kernel and the reference: training's NaN guard
# stops at that batch (unless the targets ignore zeros, SparseIgnoreZero: then the unlisted
# units have no error at all). DeltaBoost does not apply to SoftMax (spec 3.11).


def _softmax_fast_path_applies(delta, a, err_fn, act):
    return (act == SOFTMAX and err_fn == CROSS_ENTROPY and delta.ndim == 2
            and delta.dtype == np.float32 and a.dtype == np.float32)


@njit(cache=True)
def _listed_cross_entropy(arow, indices, lo, hi, count):
    """(p, error) of a row's listed entries lo..hi-1, of ``count`` in the whole row: each one's
    target is t = 1 / count, its pre-delta p = float32(-t) as the generic kernel stores it, and
    its error -t * log(a) (an index listed twice counts twice, as in the generic kernel)."""
    t = 1.0 / count if count > 0 else 0.0
    err = 0.0
    for k in range(lo, hi):
        err += -t * _log(np.float64(arow[indices[k]]))
    return np.float64(np.float32(-t)), err


@njit(cache=True)
def _distinct_listed(drow, indices, lo, hi):
    """The number of distinct indices in ``indices[lo:hi]`` (``drow`` is scratch: zeroed)."""
    increasing = True
    for k in range(lo + 1, hi):
        if indices[k] <= indices[k - 1]:
            increasing = False
            break
    if increasing:
        return hi - lo
    drow[:] = 0.0
    distinct = 0
    for k in range(lo, hi):
        if drow[indices[k]] == 0.0:
            drow[indices[k]] = 1.0
            distinct += 1
    return distinct


@njit(cache=True, inline="always")
def _nan_or_plus_inf(b):
    """Whether the float32 of int32 bits ``b`` is NaN (either sign) or +inf: a zero target's
    error -0 * log(max(EPS, a)) is NaN there (at -inf, log(EPS): 0). Integer operations, so
    that the loops taking it vectorise (a float one would need fast-math's no-NaN promise)."""
    return ((b & 0x7FFFFFFF) > 0x7F800000) | (b == 0x7F800000)


@njit(cache=True)
def _negative_zero_row(drow, arow):
    """``drow = -0``, the pre-deltas of the zero targets; returns the sum of their errors
    -0 * log(max(EPS, a)) over the float32 row ``arow``: 0, or NaN where a unit is NaN or
    +inf (a listed unit's correction leaves that NaN, as in the generic kernel)."""
    bits = arow.view(np.int32)
    bad = False
    for j in range(len(bits)):
        drow[j] = -0.0
        bad |= _nan_or_plus_inf(bits[j])
    return np.nan if bad else 0.0


@njit(cache=True)
def _scaled_negative_row(drow, arow, total):
    """``drow = -(a * total)``: a zero target's ``p - a * total`` with ``p = -0``; returns the
    sum of the zero targets' errors, as ``_negative_zero_row``, in the same pass over the row."""
    bits = arow.view(np.int32)
    bad = False
    for j in range(len(arow)):
        drow[j] = -(np.float64(arow[j]) * total)
        bad |= _nan_or_plus_inf(bits[j])
    return np.nan if bad else 0.0


@njit(cache=True, parallel=True)
def _softmax_ce_kernel(delta, a, indptr, indices, weights, ignore_zero):
    n_rows = a.shape[0]
    row_err = np.zeros(n_rows, dtype=np.float64)
    for r in prange(n_rows):
        drow, arow = delta[r], a[r]
        lo, hi = indptr[r], indptr[r + 1]
        p, err = _listed_cross_entropy(arow, indices, lo, hi, hi - lo)
        total = 0.0 + _distinct_listed(drow, indices, lo, hi) * p  # (+0, as the sum starts)
        zero_targets = _scaled_negative_row(drow, arow, total)
        if not ignore_zero:
            err += zero_targets
        for k in range(lo, hi):
            j = indices[k]
            drow[j] = p - np.float64(arow[j]) * total
        w = 1.0 if len(weights) == 0 else np.float64(weights[r])
        _scale_row(drow, w)
        row_err[r] = w * err
    return row_err.sum()


@njit(cache=True, parallel=True)
def _softmax_ce_partials_kernel(delta, sums, a, indptr, indices, weights, counts,
                                ignore_zero):
    """``_softmax_partials_kernel`` for SoftMax CrossEntropy in float32, as ``_softmax_ce_kernel``
    computes one process's rows (bit for bit the generic kernel's): the pre-deltas are -0 and,
    at the listed units, p = float32(-1 / n), n the whole row's count; their sum is this rank's
    distinct listed units times p."""
    n_rows = a.shape[0]
    row_err = np.zeros(n_rows, dtype=np.float64)
    for r in prange(n_rows):
        drow, arow = delta[r], a[r]
        lo, hi = indptr[r], indptr[r + 1]
        p, err = _listed_cross_entropy(arow, indices, lo, hi,
                                       hi - lo if len(counts) == 0 else counts[r])
        sums[r] = 0.0 + _distinct_listed(drow, indices, lo, hi) * p
        zero_targets = _negative_zero_row(drow, arow)
        if not ignore_zero:
            err += zero_targets
        for k in range(lo, hi):
            drow[indices[k]] = p
        row_err[r] = err * (1.0 if len(weights) == 0 else np.float64(weights[r]))
    return row_err.sum()


def dense_loss_delta(delta, a, t, weights, err_fn, act, slope, alpha, lam,
                     one_target, zero_target, one_scale, zero_scale, boost_one, boost_zero):
    """Error and output delta for a dense target matrix; DeltaBoost does not apply (spec 3.11)."""
    check_loss_activation(err_fn, act)
    prm = _params(slope, alpha, lam, one_target, zero_target, one_scale, zero_scale)
    return float(_dense_kernel(delta, a, t, weights, int(err_fn), int(act), prm))
