"""NumPy reference for the optimizers: weight and bias updates, step size (spec 5.2, 5.8).

See ``destiny.kernels`` for the conventions. Every update is element-wise and in place on the
parameter array and on its optimizer state arrays ``s1`` and ``s2`` (same shape as the
parameters; pass empty arrays for the ones a mode does not use, see `state_arrays_needed`).
The reference computes each step in float64 and rounds the results to the arrays' dtype.

State arrays by mode (DSSTNE's names in brackets):

======== ===== =========================== ===========================
mode     value ``s1``                      ``s2``
======== ===== =========================== ===========================
SGD      0     unused                      unused
MOMENTUM 1     velocity v                  unused
ADAGRAD  2     sum of squares v            unused
NESTEROV 3     velocity v                  unused
RMSPROP  4     mean square v               unused
ADADELTA 5     mean square of steps v      mean square of gradients vg
ADAM     6     first moment m [velocity]   second moment s [gradient velocity]
======== ===== =========================== ===========================

Every state array starts at zero (spec 5.8).
"""

from __future__ import annotations

import numpy as np

# DSSTNE's TrainingMode enum (spec 2.3, 5.8).
SGD = 0
MOMENTUM = 1
ADAGRAD = 2
NESTEROV = 3
RMSPROP = 4
ADADELTA = 5
ADAM = 6

# Floors and offsets of spec 5.8, the same in every mode that uses them.
SQUARE_FLOOR = 1e-9  # AdaGrad, RMSProp, AdaDelta: sqrt(max(1e-9, v))
ADAM_EPSILON = 1e-8  # Adam: sqrt(s_hat) + 1e-8

_STATE_ARRAYS = {SGD: 0, MOMENTUM: 1, ADAGRAD: 1, NESTEROV: 1, RMSPROP: 1, ADADELTA: 2, ADAM: 2}

# The modes in which a zero gradient (and no weight decay) leaves a weight exactly as it is, so
# that the rows of a sparse layer absent from a batch need no update then (update_weight_rows).
# SGD and AdaGrad leave their state as it is too; RMSProp and AdaDelta multiply it by mu (their
# "decaying" state arrays: s1, and s2 for AdaDelta). Momentum, Nesterov and Adam move a weight
# with a zero gradient (the velocity carries it), so they always update every row.
LAZY_MODES = (SGD, ADAGRAD, RMSPROP, ADADELTA)
_DECAYING = {SGD: 0, ADAGRAD: 0, RMSPROP: 1, ADADELTA: 2}


def state_arrays_needed(mode):
    """Number of state arrays (0, 1 or 2) that optimizer ``mode`` reads and writes.

    With 1, only ``s1`` is used; with 2, ``s1`` and ``s2``. The unused ones may be empty arrays
    and are never touched. See the module docstring for what each array holds.
    """
    try:
        return _STATE_ARRAYS[int(mode)]
    except KeyError:
        raise ValueError(f"unknown optimizer mode {mode!r}") from None


def step_size(alpha, decay, t):
    """Step size of spec 5.2: ``alpha`` if ``decay <= 0``, else ``alpha / (1 + decay * t)``.

    ``t`` is DSSTNE's update counter ``_batches`` when the step size is computed, which is
    *before* this minibatch's increment: the number of updates already made.
    """
    return alpha if decay <= 0 else alpha / (1.0 + decay * t)


def _check_state(param, s1, s2, mode):
    needed = state_arrays_needed(mode)
    for k, s in enumerate((s1, s2)[:needed]):
        if s.shape != param.shape:
            raise ValueError(f"optimizer mode {mode} needs s{k + 1} of shape {param.shape}, "
                             f"got {s.shape}")


def _f64(a):
    # Always a copy: a view of a float64 state array would change under the in-place stores.
    return np.array(a, dtype=np.float64)


def _store(dst, value):
    dst[...] = value.astype(dst.dtype)


def update_weights(W, G, s1, s2, t, mode, alpha, lam, lam1, mu, mu1):
    """One optimizer step on the weights ``W``, in place (spec 5.8, weight table).

    Parameters
    ----------
    W : ndarray
        Weights, updated in place.
    G : ndarray
        DSSTNE's stored gradient, already negated and averaged over the batch:
        ``G = -(1/B) X^T delta``. Same shape as ``W``.
    s1, s2 : ndarray
        Optimizer state, updated in place; see the module docstring and `state_arrays_needed`.
    t : int
        Update counter after its increment: the first update has ``t = 1``. Only Adam uses it.
    mode : int
        One of `SGD`, `MOMENTUM`, `ADAGRAD`, `NESTEROV`, `RMSPROP`, `ADADELTA`, `ADAM`.
    alpha : float
        Step size (`step_size`). AdaDelta ignores it.
    lam, lam1 : float
        L2 and L1 weight decay, applied to every weight every step, not scaled by 1/B.
    mu, mu1 : float
        Momentum / decay rates; ``mu1`` is Adam's second-moment rate, unused elsewhere.
    """
    _check_state(W, s1, s2, mode)
    w = _f64(W)
    # The regularised ascent direction of spec 5.8, with sgn(0) = 0 (np.sign agrees): a zero
    # weight gets no L1 push.
    g = _f64(G) - lam * w - lam1 * np.sign(w)
    if mode == SGD:
        _store(W, w + alpha * g)
    elif mode == MOMENTUM:
        v = mu * _f64(s1) + alpha * g
        _store(s1, v)
        _store(W, w + v)
    elif mode == ADAGRAD:
        v = _f64(s1) + g * g
        _store(s1, v)
        _store(W, w + alpha * g / np.sqrt(np.maximum(SQUARE_FLOOR, v)))
    elif mode == NESTEROV:
        v_old = _f64(s1)
        v_new = mu * v_old + alpha * g
        _store(s1, v_new)
        _store(W, w + v_new + mu * (v_new - v_old))
    elif mode == RMSPROP:
        v = mu * _f64(s1) + (1.0 - mu) * g * g
        _store(s1, v)
        _store(W, w + alpha * g / np.sqrt(np.maximum(SQUARE_FLOOR, v)))
    elif mode == ADADELTA:
        vg = mu * _f64(s2) + (1.0 - mu) * g * g
        dw = np.sqrt(np.maximum(SQUARE_FLOOR, _f64(s1)) / np.maximum(SQUARE_FLOOR, vg)) * g
        _store(s2, vg)
        _store(s1, mu * _f64(s1) + (1.0 - mu) * dw * dw)
        _store(W, w + dw)
    elif mode == ADAM:
        m = mu * _f64(s1) + (1.0 - mu) * g
        s = mu1 * _f64(s2) + (1.0 - mu1) * g * g
        _store(s1, m)
        _store(s2, s)
        # DSSTNE's quirk (spec 5.8): the bias correction uses t' = t + 1, so the first update
        # (t = 1) divides by 1 - mu^2, not 1 - mu. Reproduced on purpose.
        tp = t + 1
        m_hat = m / (1.0 - mu ** tp)
        s_hat = s / (1.0 - mu1 ** tp)
        _store(W, w + alpha * m_hat / (np.sqrt(s_hat) + ADAM_EPSILON))
    else:
        raise ValueError(f"unknown optimizer mode {mode!r}")


def check_lazy_mode(mode):
    """Refuse a mode in which a zero gradient moves a weight (see `LAZY_MODES`)."""
    if int(mode) not in LAZY_MODES:
        raise ValueError(f"optimizer mode {mode!r} moves weights whose gradient is zero; only "
                         f"modes {LAZY_MODES} update rows lazily")


def state_rows(s, W):
    """``s`` as rows of W's length: an unused (empty) state array as zero rows, so that numba
    types every state argument of a row kernel as the same 2-D array."""
    return s.reshape(W.shape) if s.size else s.reshape(0, W.shape[1])


def _decay(s1, s2, rows, steps, mode, mu):
    """Multiply the decaying state of ``rows`` by mu, ``steps[i]`` times for ``rows[i]``: what
    that many updates with a zero gradient do to it, rounded after each as update_weights."""
    for s in (s1, s2)[:_DECAYING[int(mode)]]:
        for i in range(int(steps.max(initial=0))):
            sel = rows[steps > i]
            s[sel] = (mu * _f64(s[sel])).astype(s.dtype)


def update_weight_rows(W, G, s1, s2, rows, current, t, mode, alpha, mu):
    """Update ``t`` of the rows of ``W`` listed in ``rows``, bringing their state up to date,
    and zero those rows of ``G`` (the gradient is consumed, as `Network.update` then needs).

    For a matrix whose other rows have a zero gradient (a sparse input layer: only the features
    of the batch have one) and no weight decay. In the `LAZY_MODES` such an update leaves a
    weight as it is, so the rows left out are not touched; what it does to their state (RMSProp
    and AdaDelta multiply it by mu) is applied when the row next has a gradient
    (`update_weight_rows`) or when the state is read (`catch_up_rows`). The result is the
    same, bit for bit, as `update_weights` over every row at every update.

    Parameters
    ----------
    W, G, s1, s2 : ndarray [I, O]
        As in `update_weights` (``lam`` and ``lam1`` are 0 here); the listed rows of ``G``
        are set to zero.
    rows : int32 [K]
        The rows with a gradient in this update; repeats are allowed (a batch's feature list).
    current : int64 [I]
        The update each row's state is up to date with; the listed rows' become ``t``.
    t, mode, alpha, mu : as in `update_weights`; ``mode`` one of `LAZY_MODES`.
    """
    check_lazy_mode(mode)
    _check_state(W, s1, s2, mode)
    rows = np.unique(np.asarray(rows, dtype=np.int64))
    if rows.size == 0:
        return
    steps = t - 1 - current[rows]
    if steps.min() < 0:
        raise ValueError(f"rows are up to date with an update after t - 1 = {t - 1}")
    _decay(s1, s2, rows, steps, mode, mu)

    def part(a):
        return a[rows] if a.size else a

    w, a1, a2 = part(W), part(s1), part(s2)
    update_weights(w, G[rows], a1, a2, t, mode, alpha, 0.0, 0.0, mu, 0.0)
    for full, sub in ((W, w), (s1, a1), (s2, a2)):
        if full.size:
            full[rows] = sub
    G[rows] = 0  # consumed: the next batch's sparse gradient adds into zero rows
    current[rows] = t


def sparse_grad_update_rows(W, G, s1, s2, current, indptr, indices, values, delta, scale, t,
                            mode, alpha, mu):
    """A sparse input layer's weight gradient and its lazy row update in one call:
    ``sparse_fc_weight_grad(G, indptr, indices, values, delta, scale)`` and then
    ``update_weight_rows(W, G, s1, s2, indices, current, t, mode, alpha, mu)``.

    ``G`` must be zero on entry and is zero on return: a backend may hold the gradient's rows
    in it between the two (as this one does), or never write it (the GPU computes each
    gradient element where it updates the weight, as FBGEMM's fused embedding backward and
    optimizer do, and spares the memory traffic of G's rows). The parameters are those of the
    two functions.
    """
    from destiny.kernels.reference.sparse import sparse_fc_weight_grad

    sparse_fc_weight_grad(G, indptr, indices, values, delta, scale)
    update_weight_rows(W, G, s1, s2, indices, current, t, mode, alpha, mu)


def catch_up_rows(s1, s2, current, t, mode, mu):
    """Bring the state of every row up to date with update ``t`` (see `update_weight_rows`)."""
    check_lazy_mode(mode)
    steps = t - current
    if steps.size and steps.min() < 0:
        raise ValueError(f"rows are up to date with an update after t = {t}")
    _decay(s1, s2, np.arange(len(current)), steps, mode, mu)
    current[:] = t


def update_bias(b, beta, s1, s2, t, mode, alpha, mu, mu1):
    """One optimizer step on the bias ``b``, in place (spec 5.8, bias table).

    ``beta`` is the bias gradient of spec 5.7, the batch mean of the delta, **not** negated,
    hence the ``b -=`` of the table. Biases get no L1/L2 decay. The other parameters are as in
    `update_weights`, with ``s1``, ``s2`` shaped like ``b``.
    """
    _check_state(b, s1, s2, mode)
    x = _f64(b)
    beta = _f64(beta)
    if mode == SGD:
        _store(b, x - alpha * beta)
    elif mode == MOMENTUM:
        v = mu * _f64(s1) - alpha * beta
        _store(s1, v)
        _store(b, x + v)
    elif mode == ADAGRAD:
        v = _f64(s1) + beta * beta
        _store(s1, v)
        _store(b, x - alpha * beta / np.sqrt(np.maximum(SQUARE_FLOOR, v)))
    elif mode == NESTEROV:
        v_old = _f64(s1)
        v_new = mu * v_old - alpha * beta
        _store(s1, v_new)
        _store(b, x + v_new + mu * (v_new - v_old))
    elif mode == RMSPROP:
        v = mu * _f64(s1) + (1.0 - mu) * beta * beta
        _store(s1, v)
        _store(b, x - alpha * beta / np.sqrt(np.maximum(SQUARE_FLOOR, v)))
    elif mode == ADADELTA:
        vg = mu * _f64(s2) + (1.0 - mu) * beta * beta
        dw = np.sqrt(np.maximum(SQUARE_FLOOR, _f64(s1)) / np.maximum(SQUARE_FLOOR, vg)) * beta
        _store(s2, vg)
        _store(s1, mu * _f64(s1) + (1.0 - mu) * dw * dw)
        _store(b, x - dw)
    elif mode == ADAM:
        m = mu * _f64(s1) + (1.0 - mu) * beta
        s = mu1 * _f64(s2) + (1.0 - mu1) * beta * beta
        _store(s1, m)
        _store(s2, s)
        tp = t + 1  # the same t + 1 quirk as the weights (spec 5.8)
        m_hat = m / (1.0 - mu ** tp)
        s_hat = s / (1.0 - mu1 ** tp)
        _store(b, x - alpha * m_hat / (np.sqrt(s_hat) + ADAM_EPSILON))
    else:
        raise ValueError(f"unknown optimizer mode {mode!r}")
