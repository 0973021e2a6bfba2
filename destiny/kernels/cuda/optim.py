"""numba.cuda kernels for the optimizers (spec 5.8); same names and signatures as the cpu's.

Every update is ONE fused elementwise pass: a thread reads a parameter, its gradient and its
state, and writes the parameter and the state back, with no temporaries (the update is memory
bound; one pass is the least traffic there is). The arithmetic is the cpu kernels', in the
arrays' dtype (float32 for float32 arrays, as DSSTNE's GPU kernels): the hyper-parameters are
cast to that dtype on the host and passed as typed scalars, so no float64 constant promotes
the loop. The mode is a kernel argument; every thread takes the same branch.

See ``destiny.kernels.reference.optim`` for which state array each mode uses.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from destiny.kernels import unit
from destiny.kernels.cuda.dense import fill
from destiny.kernels.cuda.launch import (THREADS, blocks_for, device_arrays, flat, kernel,
                                         reshaped, scratch)
from destiny.kernels.cuda.sparse import feature_grid, feature_sum, group_by_feature
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
    step_size,
)

# The mode constants and the plain-Python helpers are shared with the reference, re-exported.
__all__ = ["SGD", "MOMENTUM", "ADAGRAD", "NESTEROV", "RMSPROP", "ADADELTA", "ADAM", "LAZY_MODES",
           "state_arrays_needed", "step_size", "update_weights", "update_bias",
           "update_weight_rows", "sparse_grad_update_rows", "catch_up_rows"]


_direction = cuda.jit(device=True)(unit.direction)  # shared with the cpu backend


@kernel
def _update_weights(w_, g_, v_, u_, mode, a, l2, l1, m, one_m, floor, m1, one_m1, c1, c2, eps):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, w_.shape[0], stride):
        w = w_[i]
        g = _direction(g_[i], w, l2, l1)
        # The lazy modes' arithmetic (SGD, AdaGrad, RMSProp, AdaDelta) fuses its multiply-adds
        # explicitly, as _update_rows does: NVVM contracts a * b + c on its own, and where it
        # chooses differently in two kernels a lazy row update is no longer the dense update
        # bit for bit.
        if mode == SGD:
            w_[i] = cuda.fma(a, g, w)
        elif mode == MOMENTUM:
            v = m * v_[i] + a * g
            v_[i] = v
            w_[i] = w + v
        elif mode == ADAGRAD:
            v = cuda.fma(g, g, v_[i])
            v_[i] = v
            w_[i] = w + a * g / math.sqrt(max(floor, v))
        elif mode == NESTEROV:
            v_old = v_[i]
            v = m * v_old + a * g
            v_[i] = v
            w_[i] = w + v + m * (v - v_old)
        elif mode == RMSPROP:
            v = cuda.fma(m, v_[i], one_m * g * g)
            v_[i] = v
            w_[i] = w + a * g / math.sqrt(max(floor, v))
        elif mode == ADADELTA:
            # s1 = v (mean square of the steps), s2 = vg (of the gradients); alpha unused.
            vg = cuda.fma(m, u_[i], one_m * g * g)
            root = math.sqrt(max(floor, v_[i]) / max(floor, vg))
            dw = root * g
            u_[i] = vg
            v_[i] = cuda.fma(m, v_[i], one_m * dw * dw)
            w_[i] = cuda.fma(root, g, w)
        else:  # ADAM: s1 = m, s2 = s; c1, c2 are the bias corrections (t + 1 quirk, spec 5.8)
            mom = m * v_[i] + one_m * g
            sq = m1 * u_[i] + one_m1 * g * g
            v_[i] = mom
            u_[i] = sq
            w_[i] = w + a * (mom * c1) / (math.sqrt(sq * c2) + eps)


@kernel
def _update_bias(b_, d_, v_, u_, mode, a, m, one_m, floor, m1, one_m1, c1, c2, eps):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, b_.shape[0], stride):
        d = d_[i]
        if mode == SGD:
            b_[i] -= a * d
        elif mode == MOMENTUM:
            v = m * v_[i] - a * d
            v_[i] = v
            b_[i] += v
        elif mode == ADAGRAD:
            v = v_[i] + d * d
            v_[i] = v
            b_[i] -= a * d / math.sqrt(max(floor, v))
        elif mode == NESTEROV:
            v_old = v_[i]
            v = m * v_old - a * d
            v_[i] = v
            b_[i] += v + m * (v - v_old)
        elif mode == RMSPROP:
            v = m * v_[i] + one_m * d * d
            v_[i] = v
            b_[i] -= a * d / math.sqrt(max(floor, v))
        elif mode == ADADELTA:
            vg = m * u_[i] + one_m * d * d
            dw = math.sqrt(max(floor, v_[i]) / max(floor, vg)) * d
            u_[i] = vg
            v_[i] = m * v_[i] + one_m * dw * dw
            b_[i] -= dw
        else:  # ADAM, with the same t + 1 quirk as the weights (spec 5.8)
            mom = m * v_[i] + one_m * d
            sq = m1 * u_[i] + one_m1 * d * d
            v_[i] = mom
            u_[i] = sq
            b_[i] -= a * (mom * c1) / (math.sqrt(sq * c2) + eps)


def _check_state(param, s1, s2, mode):
    """Refuse an unknown mode or short state arrays: out-of-bounds writes are unchecked."""
    needed = state_arrays_needed(mode)  # raises ValueError for an unknown mode
    for k, s in enumerate((s1, s2)[:needed]):
        if s.size != param.size:
            raise ValueError(f"optimizer mode {mode} needs s{k + 1} with {param.size} elements, "
                             f"got {s.size}")


def _constants(dtype, mode, t, mu, mu1):
    """The rates, the floor and Adam's constants, cast to the parameters' dtype."""
    ty = dtype.type
    c1 = c2 = 1.0
    if mode == ADAM:  # the bias corrections, in float64 first as on the cpu (t + 1, spec 5.8)
        c1 = 1.0 / (1.0 - mu ** (t + 1))
        c2 = 1.0 / (1.0 - mu1 ** (t + 1))
    return (ty(mu), ty(1.0 - mu), ty(SQUARE_FLOOR), ty(mu1), ty(1.0 - mu1), ty(c1), ty(c2),
            ty(ADAM_EPSILON))


@device_arrays
def update_weights(W, G, s1, s2, t, mode, alpha, lam, lam1, mu, mu1):
    """One optimizer step on the weights ``W``, in place (spec 5.8, weight table).

    ``G`` is the negated, batch-averaged gradient; ``t`` the update counter after its increment
    (first update ``t = 1``). See ``destiny.kernels.reference.optim.update_weights``.
    """
    _check_state(W, s1, s2, mode)
    if W.size == 0:
        return
    ty = W.dtype.type
    _update_weights[blocks_for(W.size), THREADS](
        flat(W), flat(G), flat(s1), flat(s2), int(mode), ty(alpha), ty(lam), ty(lam1),
        *_constants(W.dtype, mode, t, mu, mu1))


@device_arrays
def update_bias(b, beta, s1, s2, t, mode, alpha, mu, mu1):
    """One optimizer step on the bias ``b``, in place (spec 5.8, bias table).

    ``beta`` is the batch mean of the delta, not negated; no L1/L2 decay. See
    ``destiny.kernels.reference.optim.update_bias``.
    """
    _check_state(b, s1, s2, mode)
    if b.size == 0:
        return
    _update_bias[blocks_for(b.size), THREADS](
        flat(b), flat(beta), flat(s1), flat(s2), int(mode), b.dtype.type(alpha),
        *_constants(b.dtype, mode, t, mu, mu1))


@kernel
def _claim_rows(rows, current, t, out_rows, out_steps, count):
    # A thread per listed row; the first to raise a row's `current` to t lists it once, with
    # the updates it skipped.
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for e in range(start, rows.shape[0], stride):
        r = rows[e]
        old = cuda.atomic.max(current, r, t)
        if old < t:
            slot = cuda.atomic.add(count, 0, 1)
            out_rows[slot] = r
            out_steps[slot] = t - 1 - old


@cuda.jit(device=True)
def _decayed(x, steps, m):
    # What `steps` updates with a zero gradient do to a decaying state value: x = m * x + 0.
    # Once a multiply leaves x as it was, every later one would too: 0, or the subnormal that
    # m * x rounds back to (4 units of 2**-149 for m = 0.9), reached after a few hundred steps
    # for m = 0.9 and tens of thousands for m = 0.999, where the loop would otherwise go on.
    for _ in range(steps):
        y = m * x
        if y == x and m >= 0:  # (m < 0 flips a zero's sign each step: -0 == 0)
            break
        x = y
    return x


@cuda.jit(device=True)
def _lazy_step(W, s1, s2, r, j, gradient, k, mode, a, zero, m, one_m, floor):
    """update_weights' arithmetic for element (r, j) in the lazy modes, lam = lam1 = 0, after
    the decay of the ``k`` updates its row skipped; the multiply-adds are fused as in
    _update_weights (NVVM would contract a * b + c by its own choice otherwise)."""
    w = W[r, j]
    g = _direction(gradient, w, zero, zero)
    if mode == SGD:
        W[r, j] = cuda.fma(a, g, w)
    elif mode == ADAGRAD:
        v = cuda.fma(g, g, s1[r, j])
        s1[r, j] = v
        W[r, j] = w + a * g / math.sqrt(max(floor, v))
    elif mode == RMSPROP:
        v = cuda.fma(m, _decayed(s1[r, j], k, m), one_m * g * g)
        s1[r, j] = v
        W[r, j] = w + a * g / math.sqrt(max(floor, v))
    else:  # ADADELTA
        v = _decayed(s1[r, j], k, m)
        vg = cuda.fma(m, _decayed(s2[r, j], k, m), one_m * g * g)
        root = math.sqrt(max(floor, v) / max(floor, vg))
        dw = root * g
        s2[r, j] = vg
        s1[r, j] = cuda.fma(m, v, one_m * dw * dw)
        W[r, j] = cuda.fma(root, g, w)


@kernel
def _update_rows(W, G, s1, s2, rows, steps, count, mode, a, zero, m, one_m, floor):
    # A thread per element of the listed rows (grid-stride over count * columns, as
    # update_weights strides over every element); each gradient is zeroed as it is read.
    # (A block per row, its threads along the row, took 1.13 ms of a benchmark-network step
    # on an H100; this takes 0.50.)
    n_cols = W.shape[1]
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for e in range(start, count[0] * n_cols, stride):
        i = e // n_cols
        j = e - i * n_cols
        r = rows[i]
        gradient = G[r, j]
        G[r, j] = zero
        _lazy_step(W, s1, s2, r, j, gradient, steps[i], mode, a, zero, m, one_m, floor)


@kernel
def _feature_update(W, s1, s2, current, t, features, n_present, start, entry, entry_row, values,
                    delta, scale, mode, a, zero, m, one_m, floor):
    # Thread (present feature, unit), as sparse._feature_grad: the gradient element it sums
    # is the weight's it updates, so G's rows are never written, read or zeroed.
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    if j >= W.shape[1]:
        return
    for s in range(cuda.blockIdx.y, n_present[0], cuda.gridDim.y):
        f = features[s]
        # the rounded sum, the G element _feature_grad would leave (where G would hold +0.0
        # this may be -0.0: no weight or state differs by it, the test checks the signs too)
        gradient = W.dtype.type(scale * feature_sum(start, entry, entry_row, values, delta,
                                                    f, j))
        _lazy_step(W, s1, s2, f, j, gradient, t - 1 - current[f], mode, a, zero, m, one_m,
                   floor)


@kernel
def _advance(current, features, n_present, t):
    # After _feature_update, whose threads all read the rows' old `current`.
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for s in range(start, n_present[0], stride):
        current[features[s]] = t


@kernel
def _catch_up(s1, s2, current, t, mode, m):
    n_out = s1.shape[1]
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, s1.shape[0] * n_out, stride):
        r = i // n_out
        j = i - r * n_out
        steps = t - current[r]
        s1[r, j] = _decayed(s1[r, j], steps, m)
        if mode == ADADELTA:
            s2[r, j] = _decayed(s2[r, j], steps, m)


def _state_rows(s, W):
    # reference.optim.state_rows, each view made once (see launch.reshaped)
    return reshaped(s, tuple(W.shape) if s.size else (0, W.shape[1]))


@device_arrays
def update_weight_rows(W, G, s1, s2, rows, current, t, mode, alpha, mu):
    """Update ``t`` of the listed rows of a sparse layer's ``W``, the others left for later;
    the listed rows of ``G`` are zeroed.

    See ``destiny.kernels.reference.optim.update_weight_rows``. Rows whose state is ahead of
    ``t - 1`` are not checked for on the device (the caller keeps ``current`` consistent).
    """
    check_lazy_mode(mode)
    _check_state(W, s1, s2, mode)
    n = rows.shape[0]
    if n == 0 or W.size == 0:
        return
    out_rows = scratch("update_weight_rows.rows", n, np.int64)
    out_steps = scratch("update_weight_rows.steps", n, np.int64)
    count = scratch("update_weight_rows.count", 1, np.int64)
    fill(count, 0)
    _claim_rows[blocks_for(n), THREADS](rows, current, int(t), out_rows, out_steps, count)
    ty = W.dtype.type
    _update_rows[blocks_for(n * W.shape[1]), THREADS](
        W, G, _state_rows(s1, W), _state_rows(s2, W), out_rows, out_steps, count, int(mode),
        ty(alpha), ty(0.0), ty(mu), ty(1.0 - mu), ty(SQUARE_FLOOR))


@device_arrays
def sparse_grad_update_rows(W, G, s1, s2, current, indptr, indices, values, delta, scale, t,
                            mode, alpha, mu):
    """``sparse_fc_weight_grad`` and ``update_weight_rows`` in one pass over the batch's rows
    (see the reference): each thread sums the gradient of one weight and updates it, so
    ``G`` (zero, and left zero) is not touched, and the row list comes from the gradient's
    own grouping of the entries by feature instead of a separate claim."""
    check_lazy_mode(mode)
    _check_state(W, s1, s2, mode)
    n_entries = indices.shape[0]
    if n_entries == 0 or indptr.shape[0] <= 1 or W.size == 0:
        return
    groups = group_by_feature(indptr, indices, W.shape[0])
    ty = W.dtype.type
    _feature_update[feature_grid(W.shape[1], n_entries)](
        W, _state_rows(s1, W), _state_rows(s2, W), current, int(t), *groups, values, delta,
        float(scale), int(mode), ty(alpha), ty(0.0), ty(mu), ty(1.0 - mu), ty(SQUARE_FLOOR))
    features, n_present = groups[:2]
    _advance[blocks_for(n_entries), THREADS](current, features, n_present, int(t))


@device_arrays
def catch_up_rows(s1, s2, current, t, mode, mu):
    """Bring every row's state up to date with update ``t`` (see `update_weight_rows`)."""
    check_lazy_mode(mode)
    n_rows = current.shape[0]
    if n_rows == 0:
        return
    if mode in (RMSPROP, ADADELTA):  # the modes whose state a zero gradient decays
        shape = (n_rows, s1.size // n_rows)
        s1 = s1.reshape(shape)
        s2 = s2.reshape(shape) if s2.size else s2.reshape(0, shape[1])
        _catch_up[blocks_for(s1.size), THREADS](s1, s2, current, int(t), int(mode),
                                                s1.dtype.type(mu))
    fill(current, t)
