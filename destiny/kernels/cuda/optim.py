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

from numba import cuda

from destiny.kernels.cuda.launch import THREADS, blocks_for, device_arrays
from destiny.kernels.reference.optim import (
    ADADELTA,
    ADAGRAD,
    ADAM,
    ADAM_EPSILON,
    MOMENTUM,
    NESTEROV,
    RMSPROP,
    SGD,
    SQUARE_FLOOR,
    state_arrays_needed,
    step_size,
)

# The mode constants and the plain-Python helpers are shared with the reference, re-exported.
__all__ = ["SGD", "MOMENTUM", "ADAGRAD", "NESTEROV", "RMSPROP", "ADADELTA", "ADAM",
           "state_arrays_needed", "step_size", "update_weights", "update_bias"]


@cuda.jit(device=True)
def _direction(gradient, w, lam, lam1):
    # g = G - lam*w - lam1*sgn(w), sgn(0) = 0 (spec 5.8): a zero weight gets no L1 push.
    g = gradient - lam * w
    if w > 0:
        g -= lam1
    elif w < 0:
        g += lam1
    return g


@cuda.jit
def _update_weights(w_, g_, v_, u_, mode, a, l2, l1, m, one_m, floor, m1, one_m1, c1, c2, eps):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, w_.shape[0], stride):
        w = w_[i]
        g = _direction(g_[i], w, l2, l1)
        if mode == SGD:
            w_[i] = w + a * g
        elif mode == MOMENTUM:
            v = m * v_[i] + a * g
            v_[i] = v
            w_[i] = w + v
        elif mode == ADAGRAD:
            v = v_[i] + g * g
            v_[i] = v
            w_[i] = w + a * g / math.sqrt(max(floor, v))
        elif mode == NESTEROV:
            v_old = v_[i]
            v = m * v_old + a * g
            v_[i] = v
            w_[i] = w + v + m * (v - v_old)
        elif mode == RMSPROP:
            v = m * v_[i] + one_m * g * g
            v_[i] = v
            w_[i] = w + a * g / math.sqrt(max(floor, v))
        elif mode == ADADELTA:
            # s1 = v (mean square of the steps), s2 = vg (of the gradients); alpha unused.
            vg = m * u_[i] + one_m * g * g
            dw = math.sqrt(max(floor, v_[i]) / max(floor, vg)) * g
            u_[i] = vg
            v_[i] = m * v_[i] + one_m * dw * dw
            w_[i] = w + dw
        else:  # ADAM: s1 = m, s2 = s; c1, c2 are the bias corrections (t + 1 quirk, spec 5.8)
            mom = m * v_[i] + one_m * g
            sq = m1 * u_[i] + one_m1 * g * g
            v_[i] = mom
            u_[i] = sq
            w_[i] = w + a * (mom * c1) / (math.sqrt(sq * c2) + eps)


@cuda.jit
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


def _flat(x):
    return x.reshape(x.size)


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
        _flat(W), _flat(G), _flat(s1), _flat(s2), int(mode), ty(alpha), ty(lam), ty(lam1),
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
        _flat(b), _flat(beta), _flat(s1), _flat(s2), int(mode), b.dtype.type(alpha),
        *_constants(b.dtype, mode, t, mu, mu1))
