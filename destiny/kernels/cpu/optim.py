"""numba kernels for the optimizers (spec 5.8); same names and signatures as the reference.

These are the hot loop of training (every parameter, every minibatch), and they are memory
bound, so each update makes exactly one pass over memory: one parallel loop over the
flattened arrays reads the parameter, the gradient and the state and writes the parameter and
the state back, with no temporary arrays. The arithmetic stays in the arrays' dtype (float32
for float32 arrays, as DSSTNE's GPU kernels): the scalar hyper-parameters are cast once,
outside the loop. The mode is tested outside the loop too, one loop per mode.

See ``destiny.kernels.reference.optim`` for which state array each mode uses.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from destiny.kernels import unit
from destiny.kernels.cpu.sparse import _CHUNKS, _feature_grad, _group_by_feature
from destiny.kernels.reference.optim import (
    ADADELTA,
    ADAGRAD,
    ADAM,
    ADAM_EPSILON,
    LAZY_MODES,
    MOMENTUM,
    NESTEROV,
    RMSPROP,
    SGD,
    SQUARE_FLOOR,
    check_lazy_mode,
    state_arrays_needed,
    state_rows,
    step_size,
)

# The mode constants and the plain-Python helpers are shared with the reference, re-exported.
__all__ = ["SGD", "MOMENTUM", "ADAGRAD", "NESTEROV", "RMSPROP", "ADADELTA", "ADAM", "LAZY_MODES",
           "state_arrays_needed", "step_size", "update_weights", "update_bias",
           "update_weight_rows", "sparse_grad_update_rows", "catch_up_rows"]


@njit(cache=True)
def _check_state(n, s1, s2, mode):
    # Out-of-bounds writes are unchecked in numba: refuse short state arrays up front.
    if mode < SGD or mode > ADAM:
        raise ValueError("unknown optimizer mode")
    if mode != SGD and s1.size != n:
        raise ValueError("this optimizer mode needs s1 with as many elements as the parameters")
    if (mode == ADADELTA or mode == ADAM) and s2.size != n:
        raise ValueError("this optimizer mode needs s2 with as many elements as the parameters")


_direction = njit(cache=True)(unit.direction)  # shared with the cuda backend


@njit(cache=True, parallel=True)
def update_weights(W, G, s1, s2, t, mode, alpha, lam, lam1, mu, mu1):
    """One optimizer step on the weights ``W``, in place (spec 5.8, weight table).

    ``G`` is the negated, batch-averaged gradient; ``t`` the update counter after its increment
    (first update ``t = 1``). See ``destiny.kernels.reference.optim.update_weights``.
    """
    n = W.size
    _check_state(n, s1, s2, mode)
    w_ = W.reshape(n)
    g_ = G.reshape(n)
    v_ = s1.reshape(s1.size)
    u_ = s2.reshape(s2.size)
    ty = W.dtype.type
    a = ty(alpha)
    l2 = ty(lam)
    l1 = ty(lam1)
    m = ty(mu)
    one_m = ty(1.0 - mu)
    floor = ty(SQUARE_FLOOR)
    if mode == SGD:
        for i in prange(n):
            w = w_[i]
            w_[i] = w + a * _direction(g_[i], w, l2, l1)
    elif mode == MOMENTUM:
        for i in prange(n):
            w = w_[i]
            v = m * v_[i] + a * _direction(g_[i], w, l2, l1)
            v_[i] = v
            w_[i] = w + v
    elif mode == ADAGRAD:
        for i in prange(n):
            w = w_[i]
            g = _direction(g_[i], w, l2, l1)
            v = v_[i] + g * g
            v_[i] = v
            w_[i] = w + a * g / math.sqrt(max(floor, v))
    elif mode == NESTEROV:
        for i in prange(n):
            w = w_[i]
            v_old = v_[i]
            v = m * v_old + a * _direction(g_[i], w, l2, l1)
            v_[i] = v
            w_[i] = w + v + m * (v - v_old)
    elif mode == RMSPROP:
        for i in prange(n):
            w = w_[i]
            g = _direction(g_[i], w, l2, l1)
            v = m * v_[i] + one_m * g * g
            v_[i] = v
            w_[i] = w + a * g / math.sqrt(max(floor, v))
    elif mode == ADADELTA:
        # s1 = v (mean square of the steps), s2 = vg (mean square of the gradients); alpha unused.
        for i in prange(n):
            w = w_[i]
            g = _direction(g_[i], w, l2, l1)
            vg = m * u_[i] + one_m * g * g
            dw = math.sqrt(max(floor, v_[i]) / max(floor, vg)) * g
            u_[i] = vg
            v_[i] = m * v_[i] + one_m * dw * dw
            w_[i] = w + dw
    else:  # ADAM: s1 = m, s2 = s
        # DSSTNE's quirk (spec 5.8): the bias correction uses t' = t + 1, so the first update
        # (t = 1) divides by 1 - mu^2. The corrections are computed once, in float64.
        c1 = ty(1.0 / (1.0 - mu ** (t + 1)))
        c2 = ty(1.0 / (1.0 - mu1 ** (t + 1)))
        m1 = ty(mu1)
        one_m1 = ty(1.0 - mu1)
        eps = ty(ADAM_EPSILON)
        for i in prange(n):
            w = w_[i]
            g = _direction(g_[i], w, l2, l1)
            mom = m * v_[i] + one_m * g
            sq = m1 * u_[i] + one_m1 * g * g
            v_[i] = mom
            u_[i] = sq
            w_[i] = w + a * (mom * c1) / (math.sqrt(sq * c2) + eps)


@njit(cache=True)
def _distinct_rows(rows, current, t, out_rows, out_steps):
    """The distinct ``rows``, ascending, with the updates each skipped (negative for a row
    ahead of ``t - 1``, which the caller refuses before anything changes). Ascending, because
    neighbouring rows are neighbours in memory: the update then reads the matrices nearly in
    order instead of a page here and a page there."""
    listed = np.zeros(current.size, np.bool_)
    for e in range(rows.size):
        listed[rows[e]] = True
    n = 0
    for r in range(current.size):
        if listed[r]:
            out_rows[n] = r
            out_steps[n] = t - 1 - current[r]
            n += 1
    return n


@njit(cache=True)
def _decay_row(s, r, steps, m):
    # What `steps` updates with a zero gradient do to a decaying state row: v = m * v + 0,
    # rounded each time (the zero term changes nothing), vectorized along the row. Once a
    # pass leaves the row as it was, every later one would too (zeros: a feature not seen
    # yet; or the subnormals m * v rounds back to), so the passes stop there, as cuda's
    # _decayed does for each value. Every 16th pass looks (looking at each costs 17%).
    done = 0
    while done < steps:
        moved = False
        for j in range(s.shape[1]):
            x = s[r, j]
            y = m * x
            moved |= y != x
            s[r, j] = y
        done += 1
        if not moved and m >= 0:  # (m < 0 flips a zero's sign each pass: -0 == 0)
            return
        unlooked = min(15, steps - done)
        for _ in range(unlooked):
            for j in range(s.shape[1]):
                s[r, j] = m * s[r, j]
        done += unlooked


@njit(cache=True, inline="always")
def _update_row(W, s1, s2, r, G, gr, steps, mode, a, m, one_m, floor):
    # update_weights' arithmetic for these modes, lam = lam1 = 0, on row r of W with the
    # gradient row G[gr], zeroed as it is read (consumed), after the decay of the ``steps``
    # updates the row skipped. The mode is tested outside the loops along the row, so that
    # they vectorize as the dense kernel's do.
    zero = W.dtype.type(0.0)
    n_out = W.shape[1]
    if mode == SGD:
        for j in range(n_out):
            w = W[r, j]
            W[r, j] = w + a * _direction(G[gr, j], w, zero, zero)
            G[gr, j] = zero
    elif mode == ADAGRAD:
        for j in range(n_out):
            w = W[r, j]
            g = _direction(G[gr, j], w, zero, zero)
            G[gr, j] = zero
            v = s1[r, j] + g * g
            s1[r, j] = v
            W[r, j] = w + a * g / math.sqrt(max(floor, v))
    elif mode == RMSPROP:
        # The last skipped update's decay is taken in the update's own pass over the row.
        _decay_row(s1, r, steps - 1, m)
        for j in range(n_out):
            w = W[r, j]
            g = _direction(G[gr, j], w, zero, zero)
            G[gr, j] = zero
            x = s1[r, j]
            if steps > 0:
                x = m * x
            v = m * x + one_m * g * g
            s1[r, j] = v
            W[r, j] = w + a * g / math.sqrt(max(floor, v))
    else:  # ADADELTA
        _decay_row(s1, r, steps, m)
        _decay_row(s2, r, steps, m)
        for j in range(n_out):
            w = W[r, j]
            g = _direction(G[gr, j], w, zero, zero)
            G[gr, j] = zero
            vg = m * s2[r, j] + one_m * g * g
            dw = math.sqrt(max(floor, s1[r, j]) / max(floor, vg)) * g
            s2[r, j] = vg
            s1[r, j] = m * s1[r, j] + one_m * dw * dw
            W[r, j] = w + dw


@njit(cache=True, parallel=True)
def _update_rows(W, G, s1, s2, current, t, rows, steps, n, mode, a, m, one_m, floor):
    for i in prange(n):
        _update_row(W, s1, s2, rows[i], G, rows[i], steps[i], mode, a, m, one_m, floor)
        current[rows[i]] = t


@njit(cache=True, parallel=True)
def _sparse_grad_update(W, s1, s2, current, t, features, start, entry_row, entry, values, delta,
                        scale, mode, a, m, one_m, floor):
    # Each thread takes whole features, as sparse_fc_weight_grad does: a feature's gradient row
    # is summed into a scratch row (zero, as its row of G would be, and zeroed again as the
    # update reads it) and applied at once, while the row is in cache, instead of through G.
    n_present = len(features)
    n_chunks = min(n_present, _CHUNKS)
    for c in prange(n_chunks):
        acc = np.empty(W.shape[1], dtype=np.float64)
        grad = np.zeros((1, W.shape[1]), dtype=W.dtype)
        for s in range(c * n_present // n_chunks, (c + 1) * n_present // n_chunks):
            f = features[s]
            _feature_grad(grad[0], acc, start[s], start[s + 1], entry_row, entry, values, delta,
                          scale)
            _update_row(W, s1, s2, f, grad, 0, t - 1 - current[f], mode, a, m, one_m, floor)
            current[f] = t


@njit(cache=True, parallel=True)
def _catch_up(s1, s2, current, t, mode, m):
    for r in prange(current.size):
        steps = t - current[r]
        if mode == RMSPROP or mode == ADADELTA:
            _decay_row(s1, r, steps, m)
        if mode == ADADELTA:
            _decay_row(s2, r, steps, m)
        current[r] = t


def update_weight_rows(W, G, s1, s2, rows, current, t, mode, alpha, mu):
    """Update ``t`` of the listed rows of a sparse layer's ``W``, the others left for later;
    the listed rows of ``G`` are zeroed.

    See ``destiny.kernels.reference.optim.update_weight_rows``: bit for bit the dense
    update_weights over every row at every update, for the `LAZY_MODES` without weight decay.
    """
    check_lazy_mode(mode)
    _check_state(W.size, s1, s2, mode)
    rows = rows.astype(np.int64, copy=False)
    out_rows = np.empty(rows.size, np.int64)
    out_steps = np.empty(rows.size, np.int64)
    n = _distinct_rows(rows, current, t, out_rows, out_steps)
    if n and out_steps[:n].min() < 0:
        raise ValueError(f"rows are up to date with an update after t - 1 = {t - 1}")
    ty = W.dtype.type
    _update_rows(W, G, state_rows(s1, W), state_rows(s2, W), current, np.int64(t), out_rows,
                 out_steps, n, int(mode), ty(alpha), ty(mu), ty(1.0 - mu), ty(SQUARE_FLOOR))


def sparse_grad_update_rows(W, G, s1, s2, current, indptr, indices, values, delta, scale, t,
                            mode, alpha, mu):
    """``sparse_fc_weight_grad`` and ``update_weight_rows`` in one pass over the batch's rows
    (see the reference): each feature's gradient row is summed in scratch and applied while
    the row is in cache; ``G`` (zero) is not touched."""
    check_lazy_mode(mode)
    _check_state(W.size, s1, s2, mode)
    features, start, entry_row, entry = _group_by_feature(indptr, indices, W.shape[0])
    if len(features) and current[features].max() > t - 1:
        raise ValueError(f"rows are up to date with an update after t - 1 = {t - 1}")
    ty = W.dtype.type
    _sparse_grad_update(W, state_rows(s1, W), state_rows(s2, W), current, np.int64(t), features,
                        start, entry_row, entry, values, delta, float(scale), int(mode),
                        ty(alpha), ty(mu), ty(1.0 - mu), ty(SQUARE_FLOOR))


def catch_up_rows(s1, s2, current, t, mode, mu):
    """Bring every row's state up to date with update ``t`` (see `update_weight_rows`)."""
    check_lazy_mode(mode)
    if current.size and (t - current).min() < 0:
        raise ValueError(f"rows are up to date with an update after t = {t}")
    if s1.size == 0:  # SGD: no state
        current[:] = t
        return
    shape = (current.size, s1.size // max(current.size, 1))
    s1 = s1.reshape(shape)
    s2 = s2.reshape(shape) if s2.size else s2.reshape(0, shape[1])
    _catch_up(s1, s2, current, t, int(mode), s1.dtype.type(mu))


@njit(cache=True, parallel=True)
def update_bias(b, beta, s1, s2, t, mode, alpha, mu, mu1):
    """One optimizer step on the bias ``b``, in place (spec 5.8, bias table).

    ``beta`` is the batch mean of the delta, not negated; no L1/L2 decay. See
    ``destiny.kernels.reference.optim.update_bias``.
    """
    n = b.size
    _check_state(n, s1, s2, mode)
    b_ = b.reshape(n)
    d_ = beta.reshape(n)
    v_ = s1.reshape(s1.size)
    u_ = s2.reshape(s2.size)
    ty = b.dtype.type
    a = ty(alpha)
    m = ty(mu)
    one_m = ty(1.0 - mu)
    floor = ty(SQUARE_FLOOR)
    if mode == SGD:
        for i in prange(n):
            b_[i] -= a * d_[i]
    elif mode == MOMENTUM:
        for i in prange(n):
            v = m * v_[i] - a * d_[i]
            v_[i] = v
            b_[i] += v
    elif mode == ADAGRAD:
        for i in prange(n):
            d = d_[i]
            v = v_[i] + d * d
            v_[i] = v
            b_[i] -= a * d / math.sqrt(max(floor, v))
    elif mode == NESTEROV:
        for i in prange(n):
            v_old = v_[i]
            v = m * v_old - a * d_[i]
            v_[i] = v
            b_[i] += v + m * (v - v_old)
    elif mode == RMSPROP:
        for i in prange(n):
            d = d_[i]
            v = m * v_[i] + one_m * d * d
            v_[i] = v
            b_[i] -= a * d / math.sqrt(max(floor, v))
    elif mode == ADADELTA:
        for i in prange(n):
            d = d_[i]
            vg = m * u_[i] + one_m * d * d
            dw = math.sqrt(max(floor, v_[i]) / max(floor, vg)) * d
            u_[i] = vg
            v_[i] = m * v_[i] + one_m * dw * dw
            b_[i] -= dw
    else:  # ADAM, with the same t + 1 quirk as the weights (spec 5.8)
        c1 = ty(1.0 / (1.0 - mu ** (t + 1)))
        c2 = ty(1.0 / (1.0 - mu1 ** (t + 1)))
        m1 = ty(mu1)
        one_m1 = ty(1.0 - mu1)
        eps = ty(ADAM_EPSILON)
        for i in prange(n):
            d = d_[i]
            mom = m * v_[i] + one_m * d
            sq = m1 * u_[i] + one_m1 * d * d
            v_[i] = mom
            u_[i] = sq
            b_[i] -= a * (mom * c1) / (math.sqrt(sq * c2) + eps)
