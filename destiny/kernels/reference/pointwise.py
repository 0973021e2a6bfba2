"""NumPy reference for the pointwise kernels: activations, dropout, sparseness penalty, norms.

Spec sections 3.6 (activations), 3.8 (dropout), 3.10 (sparseness penalty) and 3.13
(WeightNorm, DeltaNorm). Every function computes in float64 and stores in the output's dtype.
Activations are chosen by the integer codes of ``destiny.kernels.codes``. See
``destiny.kernels`` for the conventions; here ``N`` is the number of units of a layer.
"""

from __future__ import annotations

import numpy as np

from destiny.kernels.codes import (ELU, LINEAR, LRELU, RELU, SELU, SIGMOID, SOFTMAX, SOFTPLUS,
                                   SOFTSIGN, TANH, check_activation)
from destiny.kernels.reference.rng import uniform_fill


def _sigmoid(z):
    # exp of -|z| only, so that no exponent overflows whatever the sign of z.
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _softmax_rows(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def activate(act, z, slope, alpha, lam):
    """f(z) in float64 for an array ``z`` (any shape; rows for SoftMax)."""
    z = np.asarray(z, dtype=np.float64)
    check_activation(act)
    if act == SIGMOID:
        return _sigmoid(z)
    if act == TANH:
        return np.tanh(z)
    if act == LINEAR:
        return z.copy()
    if act == RELU:
        return np.maximum(z, 0.0)
    if act == LRELU:
        return np.where(z > 0, z, slope * z)
    if act == ELU:
        return np.where(z > 0, z, alpha * np.expm1(np.minimum(z, 0.0)))
    if act == SELU:
        return lam * np.where(z > 0, z, alpha * np.expm1(np.minimum(z, 0.0)))
    if act == SOFTPLUS:
        return np.maximum(z, 0.0) + np.log1p(np.exp(-np.abs(z)))
    if act == SOFTSIGN:
        return z / (1.0 + np.abs(z))
    return _softmax_rows(z)  # SOFTMAX


def derivative(act, a, slope, alpha, lam):
    """f'(z) expressed in the activation ``a = f(z)`` (spec 3.6), elementwise, in float64.

    SoftMax has no elementwise derivative; callers use the row Jacobian (``softmax_vjp``).
    Tanh is the plain 1 - a^2: Destiny keeps explicit dropout masks, so DSSTNE's
    1/(1 - pDropout) factor (quirk 10.17) has no place here.
    """
    a = np.asarray(a, dtype=np.float64)
    check_activation(act)
    if act == SIGMOID:
        return a * (1.0 - a)
    if act == TANH:
        return 1.0 - a * a
    if act == RELU:
        return (a > 0).astype(np.float64)
    if act == LRELU:
        return np.where(a > 0, 1.0, slope)
    if act == ELU:
        return np.where(a > 0, 1.0, a + alpha)
    if act == SELU:
        return np.where(a > 0, lam, a + lam * alpha)
    if act == SOFTPLUS:
        return -np.expm1(-a)  # sigmoid(z) = 1 - e^-a
    if act == SOFTSIGN:
        return (1.0 - np.abs(a)) ** 2  # 1 / (1 + |z|)^2
    if act == SOFTMAX:
        raise ValueError("SoftMax has no elementwise derivative; use softmax_vjp")
    return np.ones_like(a)  # LINEAR


def softmax_vjp(a, g):
    """The vector-Jacobian product of a row softmax: ``a * (g - sum_j g_j a_j)`` per row."""
    a = np.asarray(a, dtype=np.float64)
    g = np.asarray(g, dtype=np.float64)
    return a * (g - (g * a).sum(axis=1, keepdims=True))


def activation_forward(a, z, act, slope, alpha, lam, bias=None):
    """``a[B, N] = f(z[B, N] + bias)``; ``a`` may be ``z`` (spec 3.6).

    Parameters
    ----------
    a, z : float arrays [B, N]
        Output activations and input pre-activations.
    act : int
        Activation code (``destiny.kernels.codes``). SoftMax works per row, with the row
        maximum subtracted.
    slope, alpha, lam : float
        LReLU slope, ELU/SELU alpha, SELU lambda.
    bias : float array [N], optional
        Added to every row of z first, in z's dtype (as ``add_bias`` adds it); None or
        empty for none.
    """
    if bias is not None and len(bias):
        z = z + np.asarray(bias, dtype=z.dtype)
    a[...] = activate(act, z, slope, alpha, lam).astype(a.dtype)


def activation_backward(dz, da, a, act, slope, alpha, lam, mask=None):
    """``dz[B, N] = da * f'`` with f' taken from the activations ``a``; ``dz`` may be ``da``.

    SoftMax uses the exact Jacobian of each row, ``dz = a * (da - sum_j da_j a_j)``. With a
    dropout ``mask`` (``dropout_forward``'s), ``da`` is first multiplied by it, rounded to
    ``da``'s dtype: the delta reaching the activations through the dropout.
    """
    if mask is not None:
        da = np.multiply(da, mask, dtype=da.dtype)
    if act == SOFTMAX:
        dz[...] = softmax_vjp(a, da).astype(dz.dtype)
    else:
        dz[...] = (da * derivative(act, a, slope, alpha, lam)).astype(dz.dtype)


# A SoftMax layer split across MPI ranks (spec 7): each rank holds some units of every row, so
# the row's maximum and sum are combined across the ranks between two kernels (the network's
# collectives; kernels never call MPI). With one process ``activation_forward`` and
# ``activation_backward`` do it all in one pass.


def softmax_forward_partials(stats, z):
    """A rank's part of each SoftMax row: ``stats[r] = (m, s)``, float64 [B, 2], with m the
    maximum of row r of ``z`` [B, N] (this rank's units) and ``s = sum_j exp(z[r, j] - m)``.

    The ranks' (m, s) make the whole row's: ``M = max m``, ``S = sum s * exp(m - M)``, which
    ``softmax_forward_finish`` takes.
    """
    x = np.asarray(z, dtype=np.float64)
    m = x.max(axis=1)
    stats[:, 0] = m
    with np.errstate(invalid="ignore"):  # (units all -inf: NaN, which softmax_row_stats drops)
        stats[:, 1] = np.exp(x - m[:, None]).sum(axis=1)


def softmax_forward_finish(a, z, stats):
    """``a[r, j] = min(1, exp(z[r, j] - M) / S)`` with ``stats[r] = (M, S)``, the maximum and
    the sum of the whole row (``softmax_forward_partials``); ``a`` may be ``z``. The clamp is
    DSSTNE's (spec 3.6): S, summed over the ranks, may round below the row's largest term."""
    x = np.asarray(z, dtype=np.float64)
    st = np.asarray(stats, dtype=np.float64)
    a[...] = np.minimum(1.0, np.exp(x - st[:, :1]) / st[:, 1:]).astype(a.dtype)


def _masked(da, mask):
    return da if mask is None else np.multiply(da, mask, dtype=da.dtype)


def softmax_backward_partials(dots, da, a, mask=None):
    """A rank's part of each SoftMax row's Jacobian product: ``dots[r] = sum_j g[r, j] a[r, j]``
    (float64 [B]) over this rank's units, g = ``da`` (times the dropout ``mask``, rounded to
    ``da``'s dtype, as ``activation_backward`` takes it)."""
    g = np.asarray(_masked(da, mask), dtype=np.float64)
    dots[:] = (g * np.asarray(a, dtype=np.float64)).sum(axis=1)


def softmax_backward_finish(dz, da, a, dots, mask=None):
    """``dz = a * (g - dots[r])`` per row, ``dots`` the whole row's sums (the ranks'
    ``softmax_backward_partials`` added up): ``activation_backward``'s SoftMax, split."""
    g = np.asarray(_masked(da, mask), dtype=np.float64)
    x = np.asarray(a, dtype=np.float64)
    dz[...] = (x * (g - np.asarray(dots, dtype=np.float64)[:, None])).astype(dz.dtype)


def alpha_dropout_constants(p, act, alpha, lam):
    """``(a', A, b)`` of ELU/SELU alpha-dropout (spec 3.8): dropped units become A*a' + b."""
    saturation = -(lam if act == SELU else 1.0) * alpha
    q = 1.0 - p
    scale = 1.0 / np.sqrt(q + saturation * saturation * p * q)
    return saturation, scale, -scale * p * saturation


def dropout_forward(out, mask, a, key, row_offset, col_offset, p, act, alpha, lam):
    """Training-time dropout after the activation, with an explicit mask (spec 3.8).

    Parameters
    ----------
    out : float array [B, N]
        Post-dropout activations; may be ``a``.
    mask : float array [B, N]
        ``d out / d a``: the backward pass multiplies the incoming delta by it. DSSTNE keeps
        no mask and differentiates the dropped activations instead (quirk 10.17).
    a : float array [B, N]
        Activations.
    key, row_offset, col_offset : int
        The draw: unit (r, j) is dropped iff ``u(key, row_offset + r, col_offset + j) < p``,
        the uniform of ``uniform_fill`` (``destiny.kernels.counter_rng``), so that a rank
        holding some of the units drops what one process would.
    p : float
        Dropout probability, in [0, 1).
    act, alpha, lam : int, float, float
        Activation code, ELU/SELU alpha and SELU lambda: the rule depends on the activation.
        Sigmoid: dropped units become 0.5, kept ones are unchanged. ELU/SELU: alpha-dropout.
        Others: inverted dropout (dropped 0, kept scaled by 1/(1-p)).
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability {p} is outside [0, 1)")
    r = np.empty(a.shape, dtype=np.float64)
    uniform_fill(r, key, row_offset, col_offset)
    x = np.asarray(a, dtype=np.float64)
    dropped = r < p
    if act == SIGMOID:
        new, gain, dropped_value = x, 1.0, 0.5
    elif act in (ELU, SELU):
        saturation, scale, shift = alpha_dropout_constants(p, act, alpha, lam)
        new, gain, dropped_value = scale * x + shift, scale, scale * saturation + shift
    else:
        gain = 1.0 / (1.0 - p)
        new, dropped_value = gain * x, 0.0
    out[...] = np.where(dropped, dropped_value, new).astype(out.dtype)
    mask[...] = np.where(dropped, 0.0, gain).astype(mask.dtype)


def activation_dropout_forward(out, mask, a, z, act, slope, alpha, lam, bias, key, row_offset,
                               col_offset, p):
    """``activation_forward(a, z, ...)`` then ``dropout_forward(out, mask, a, ...)``: a
    training layer's forward after its products, in one pass where a backend can.

    ``a`` keeps the activations (the backward pass takes the derivative from them); ``out``
    gets the dropped-out ones. See those two functions for the parameters.
    """
    activation_forward(a, z, act, slope, alpha, lam, bias)
    dropout_forward(out, mask, a, key, row_offset, col_offset, p, act, alpha, lam)


def sparseness_penalty(da, a, p, beta):
    """``da[:, j] += beta * (-p / rho_j + (1 - p) / (1 - rho_j))`` (spec 3.10).

    ``rho_j`` is the mean of ``a[:, j]`` over the B rows (post-dropout activations), clamped to
    [1e-6, 0.999999]. ``da`` [B, N] is the delta before the activation derivative.
    """
    rho = np.clip(np.asarray(a, dtype=np.float64).mean(axis=0), 1e-6, 0.999999)
    da[...] = (da + beta * (-p / rho + (1.0 - p) / (1.0 - rho))).astype(da.dtype)


def _norm_scale(norms, limit):
    return np.where(norms > limit, limit / np.where(norms > 0, norms, 1.0), 1.0)


def delta_norm(d, limit):
    """Rescale each row of ``d`` [B, N] whose L2 norm exceeds ``limit`` > 0 to norm ``limit``.

    DeltaNorm (spec 3.13).
    """
    norms = np.sqrt((np.asarray(d, dtype=np.float64) ** 2).sum(axis=1))
    d[...] = (d * _norm_scale(norms, limit)[:, None]).astype(d.dtype)


def delta_norm_partials(sums, d):
    """``sums[r] = sum_j d[r, j]^2`` (float64 [B]): a rank's part of DeltaNorm's row norms,
    for a layer split across MPI ranks (the network adds the ranks' sums up)."""
    sums[:] = (np.asarray(d, dtype=np.float64) ** 2).sum(axis=1)


def delta_norm_finish(d, sums, limit):
    """``delta_norm`` with each row's sum of squares ``sums[r]`` over the whole row given."""
    norms = np.sqrt(np.asarray(sums, dtype=np.float64))
    d[...] = (d * _norm_scale(norms, limit)[:, None]).astype(d.dtype)


def weight_norm(W, limit):
    """Rescale each column of ``W`` [I, O] whose L2 norm exceeds ``limit`` > 0 to ``limit``.

    WeightNorm (spec 3.13): column j holds output unit j's incoming weights.
    """
    norms = np.sqrt((np.asarray(W, dtype=np.float64) ** 2).sum(axis=0))
    W[...] = (W * _norm_scale(norms, limit)[None, :]).astype(W.dtype)


def weight_norm_partials(sums, W):
    """``sums[j] = sum_i W[i, j]^2`` (float64 [O]): a rank's part of WeightNorm's column norms,
    for a matrix split across MPI ranks by rows (the network adds the ranks' sums up)."""
    sums[:] = (np.asarray(W, dtype=np.float64) ** 2).sum(axis=0)


def weight_norm_finish(W, sums, limit):
    """``weight_norm`` with each column's sum of squares ``sums[j]`` over the whole column
    given."""
    norms = np.sqrt(np.asarray(sums, dtype=np.float64))
    W[...] = (W * _norm_scale(norms, limit)[None, :]).astype(W.dtype)
