"""NumPy reference for the output-layer losses and deltas (spec 5.5, 3.11, 6.3).

Each loss gives a per-unit error e(a, t) and an output delta ``delta = dE/dz`` that includes
the activation derivative. For every activation but SoftMax the delta is elementwise:
``delta = de/da * f'(a)``, fused to ``a - t`` (CrossEntropy) or its scaled forms (SMCE) for
Sigmoid. A SoftMax row is coupled through its Jacobian, so the kernels first compute the
per-unit "pre-delta" ``p = a * de/da`` and then ``delta = p - a * sum_j p_j`` per row.

Errors are summed over the batch, weighted by the example weights, and returned as a float.
See ``destiny.kernels`` for the conventions; ``N`` is the number of output units (padding
units included: they are zero targets, spec 6.4).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from destiny.kernels.codes import (CROSS_ENTROPY, DSMCE, HINGE, L1, L2, L2_HINGE, SMCE, SOFTMAX,
                                   boost_applies, check_loss_activation)
from destiny.kernels.reference.pointwise import derivative

__all__ = ["check_loss_activation", "dense_loss_delta", "softmax_loss_finish",
           "softmax_loss_partials", "sparse_loss_delta"]

EPS = 1e-12  # DSSTNE's MIN_ERROR: every log is log(max(EPS, x)) (spec 5.5)

LossParams = namedtuple("LossParams", "slope alpha lam one_target zero_target one_scale zero_scale")


def _log(x):
    return np.log(np.maximum(EPS, x))


def _hinge_gap(a, t):
    # L2Hinge: d = a - |t|, kept only on the wrong side of the target (spec 5.5).
    d = a - np.abs(t)
    return np.where(t > 0, np.minimum(0.0, d), np.maximum(0.0, d))


def _marginal(one, a, prm):
    """Where an SMCE branch is active: a listed unit below oneTarget, a zero above zeroTarget."""
    return np.where(one, a < prm.one_target, a > prm.zero_target)


def unit_error(err_fn, act, a, t, one, prm):
    """Per-unit error e(a, t) in float64; ``one`` selects the SMCE/DSMCE listed-target branch."""
    if err_fn == L1:
        return np.abs(a - t)
    if err_fn == L2:
        return 0.5 * (a - t) ** 2
    if err_fn == L2_HINGE:
        return 0.5 * _hinge_gap(a, t) ** 2
    if err_fn == HINGE:
        return np.maximum(0.0, 1.0 - t * a)
    if err_fn == CROSS_ENTROPY:
        e = -t * _log(a)
        return e if act == SOFTMAX else e - (1.0 - t) * _log(1.0 - a)
    # SMCE, DSMCE: DSMCE scales a listed unit by its value t.
    scale = t if err_fn == DSMCE else 1.0
    e = np.where(one, -prm.one_scale * scale * _log(a), -prm.zero_scale * _log(1.0 - a))
    return np.where(_marginal(one, a, prm), e, 0.0)


def _error_slope(err_fn, a, t):
    """de/da for the losses that work with every activation."""
    if err_fn == L1:
        return np.sign(a - t)
    if err_fn == L2:
        return a - t
    if err_fn == L2_HINGE:
        return _hinge_gap(a, t)
    return np.where(t * a < 1.0, -t, 0.0)  # HINGE: the exact gradient, not DSSTNE's a < 0


def unit_pre_delta(err_fn, act, a, t, one, prm):
    """The delta before the SoftMax Jacobian: ``de/da * f'(a)``, or ``a * de/da`` for SoftMax.

    CrossEntropy and (D)SMCE are fused with their Sigmoid or SoftMax derivative, which is exact
    and never divides by a.
    """
    if err_fn == CROSS_ENTROPY:
        return -t if act == SOFTMAX else a - t
    if err_fn in (SMCE, DSMCE):
        scale = t if err_fn == DSMCE else 1.0
        if act == SOFTMAX:  # a * de/da: -oneScale for a listed unit, zeroScale * a / (1 - a)
            p = np.where(one, -prm.one_scale * scale,
                         prm.zero_scale * a / np.maximum(EPS, 1.0 - a))
        else:  # Sigmoid: de/da * a (1 - a)
            p = np.where(one, prm.one_scale * scale * (a - 1.0), prm.zero_scale * a)
        return np.where(_marginal(one, a, prm), p, 0.0)
    g = _error_slope(err_fn, a, t)
    if act == SOFTMAX:
        return a * g
    return g * derivative(act, a, prm.slope, prm.alpha, prm.lam)


def _jacobian(pre, a, act):
    """SoftMax rows: ``delta = p - a * sum_j p_j``; other activations: ``delta = p``."""
    if act != SOFTMAX:
        return pre
    return pre - a * pre.sum(axis=1, keepdims=True)


def listed_targets(err_fn, act, values, counts):
    """The target of each listed entry: its value, or 1 where the loss ignores values.

    CrossEntropy and SMCE treat analog targets as Boolean (spec 6.6); SoftMax CrossEntropy
    spreads a row's unit of probability over its ``counts`` listed entries (t = 1/n).
    """
    if err_fn == CROSS_ENTROPY:
        return 1.0 / counts if act == SOFTMAX else np.ones(len(counts))
    if err_fn == SMCE:
        return np.ones(len(counts))
    return values


def _example_weights(weights, n_rows):
    return np.ones(n_rows) if len(weights) == 0 else np.asarray(weights, dtype=np.float64)


def sparse_loss_delta(delta, a, indptr, indices, values, weights, err_fn, act, slope, alpha, lam,
                      one_target, zero_target, one_scale, zero_scale, boost_one, boost_zero,
                      ignore_zero=False):
    """Error and output delta for sparse targets, without a dense target matrix (spec 5.5, 6.3).

    The target is 1 (Boolean) or the value at the listed units and 0 at every other unit of
    the row. The zero-target error and delta are computed for every unit, then the listed
    entries are corrected: the error gains ``e1 - e0`` per entry (twice for an index listed
    twice, as in DSSTNE) and the delta is overwritten.

    With ``ignore_zero`` (the targets' SparseIgnoreZero bit, spec 2.3) the other units are
    not targets at all: the error is the listed entries' ``e1`` alone and the delta its exact
    gradient, the listed units' and 0 elsewhere (a SoftMax row's Jacobian then spreads it over
    the row; DSSTNE wrote the listed units' deltas only, and its DSMCE ignored the bit).

    Parameters
    ----------
    delta : float array [B, N]
        Output: dE/dz, activation derivative included, times the example weight; memory of
        its own (no backend computes it in place over ``a``, which it reads after writing).
    a : float array [B, N]
        Output-layer activations.
    indptr, indices, values : CSR targets
        int64 [B + 1], int32 [K], float32 [K] or [0] (Boolean: every listed target is 1).
    weights : float32 [B] or [0]
        Example weights (length 0: all 1); they multiply each example's error and delta.
    err_fn, act : int
        Loss and activation codes (``destiny.kernels.codes``); see ``check_loss_activation``.
    slope, alpha, lam : float
        LReLU slope, ELU/SELU alpha, SELU lambda.
    one_target, zero_target, one_scale, zero_scale : float
        ScaledMarginalCrossEntropy parameters (spec 3.12).
    boost_one, boost_zero : float
        DeltaBoost factors of listed and zero-target deltas (spec 3.11); they scale only the
        delta, and only for L1, and for L2, L2Hinge, CrossEntropy with Sigmoid.
    ignore_zero : bool
        Only the listed entries are targets (above).

    Returns
    -------
    float
        The weighted error summed over the batch.
    """
    check_loss_activation(err_fn, act)
    prm = LossParams(slope, alpha, lam, one_target, zero_target, one_scale, zero_scale)
    x = np.asarray(a, dtype=np.float64)
    pre, row_err = _sparse_pre_delta(x, indptr, indices, values, np.diff(indptr), err_fn, act,
                                     prm, ignore_zero)
    w = _example_weights(weights, x.shape[0])
    _finish(delta, _jacobian(pre, x, act), indptr, indices, w, err_fn, act, boost_one,
            boost_zero)
    return float((row_err * w).sum())


def _sparse_pre_delta(x, indptr, indices, values, counts, err_fn, act, prm, ignore_zero):
    """(pre-deltas [B, N], unweighted errors [B]) of sparse targets: every unit as a zero
    target, then the listed entries corrected; ``counts`` [B] are the rows' listed entries."""
    rows = np.repeat(np.arange(x.shape[0]), np.diff(indptr))
    v = np.ones(len(indices)) if len(values) == 0 else np.asarray(values, dtype=np.float64)
    t1 = listed_targets(err_fn, act, v, np.asarray(counts)[rows])
    x1 = x[rows, indices]

    zero = np.zeros_like(x)  # the target of every unit before the listed entries are corrected
    e0 = zero if ignore_zero else unit_error(err_fn, act, x, zero, False, prm)
    row_err = e0.sum(axis=1)
    correction = unit_error(err_fn, act, x1, t1, True, prm) - e0[rows, indices]
    np.add.at(row_err, rows, correction)

    pre = np.zeros_like(x) if ignore_zero else unit_pre_delta(err_fn, act, x, zero, False, prm)
    pre[rows, indices] = unit_pre_delta(err_fn, act, x1, t1, True, prm)
    return pre, row_err


def _finish(delta, d, indptr, indices, w, err_fn, act, boost_one, boost_zero):
    """``delta = d`` times DeltaBoost (where it applies) and the example weights ``w``."""
    if boost_applies(err_fn, act):
        boost = np.full(d.shape, float(boost_zero))
        boost[np.repeat(np.arange(d.shape[0]), np.diff(indptr)), indices] = boost_one
        d = d * boost
    delta[...] = (d * w[:, None]).astype(delta.dtype)


# A SoftMax output split across MPI ranks (spec 7): each rank holds some units of every row and
# their targets (the indices re-based to its first unit). Two things need the whole row: the
# listed count n of SoftMax CrossEntropy's targets 1/n, which ``counts`` gives, and the sum of
# the row's pre-deltas in the Jacobian ``delta = p - a * sum_j p_j``, which the network adds up
# over the ranks between ``softmax_loss_partials`` and ``softmax_loss_finish``. Both take the
# same arguments; with one process ``sparse_loss_delta`` does it all.


def softmax_loss_partials(delta, sums, a, indptr, indices, values, weights, counts, err_fn,
                          one_target, zero_target, one_scale, zero_scale, boost_one, boost_zero,
                          ignore_zero=False):
    """A rank's part of ``sparse_loss_delta`` on a SoftMax output: the pre-deltas ``p`` of its
    units into ``delta``, their sum per row into ``sums`` (float64 [B]), and the weighted
    error of its units, returned.

    ``counts`` (int64 [B]) holds each row's listed targets over every rank (length 0: this
    rank's alone, as one process counts them). The other parameters are ``sparse_loss_delta``'s
    (SoftMax takes no slope, alpha or lambda).
    """
    check_loss_activation(err_fn, SOFTMAX)
    prm = LossParams(0.0, 0.0, 0.0, one_target, zero_target, one_scale, zero_scale)
    x = np.asarray(a, dtype=np.float64)
    n = np.diff(indptr) if len(counts) == 0 else counts
    pre, row_err = _sparse_pre_delta(x, indptr, indices, values, n, err_fn, SOFTMAX, prm,
                                     ignore_zero)
    delta[...] = pre.astype(delta.dtype)
    sums[:] = np.asarray(delta, dtype=np.float64).sum(axis=1)
    return float((row_err * _example_weights(weights, x.shape[0])).sum())


def softmax_loss_finish(delta, sums, a, indptr, indices, values, weights, counts, err_fn,
                        one_target, zero_target, one_scale, zero_scale, boost_one, boost_zero,
                        ignore_zero=False):
    """The output delta from the pre-deltas ``softmax_loss_partials`` left in ``delta``:
    ``(p - a * sums[r])`` times DeltaBoost and the example weight, ``sums`` the whole row's
    (the ranks' added up). The arguments are ``softmax_loss_partials``'."""
    check_loss_activation(err_fn, SOFTMAX)
    x = np.asarray(a, dtype=np.float64)
    p = np.asarray(delta, dtype=np.float64)
    d = p - x * np.asarray(sums, dtype=np.float64)[:, None]
    _finish(delta, d, indptr, indices, _example_weights(weights, x.shape[0]), err_fn, SOFTMAX,
            boost_one, boost_zero)


def dense_loss_delta(delta, a, t, weights, err_fn, act, slope, alpha, lam,
                     one_target, zero_target, one_scale, zero_scale, boost_one, boost_zero):
    """Error and output delta for a dense target matrix ``t`` [B, N] (spec 5.5).

    Same parameters as ``sparse_loss_delta`` with ``t`` in place of the CSR targets. SMCE and
    DSMCE take a unit with ``t > 0`` as a listed target (DSMCE scaled by t). DeltaBoost does
    not apply to dense targets (spec 3.11): ``boost_one`` and ``boost_zero`` are ignored.
    """
    check_loss_activation(err_fn, act)
    prm = LossParams(slope, alpha, lam, one_target, zero_target, one_scale, zero_scale)
    x = np.asarray(a, dtype=np.float64)
    target = np.asarray(t, dtype=np.float64)
    one = target > 0
    row_err = unit_error(err_fn, act, x, target, one, prm).sum(axis=1)
    d = _jacobian(unit_pre_delta(err_fn, act, x, target, one, prm), x, act)
    w = _example_weights(weights, x.shape[0])
    delta[...] = (d * w[:, None]).astype(delta.dtype)
    return float((row_err * w).sum())
