"""Per-element formulas that both numba backends compile from this one source.

Plain Python functions that call nothing but ``math``: ``destiny.kernels.cpu`` compiles each
with ``njit`` and ``destiny.kernels.cuda`` with ``cuda.jit(device=True)``, so the two backends
cannot drift apart. (A function that calls another compiled helper cannot be shared this way:
its callee must be the backend's own compiled one.)
"""

from __future__ import annotations

import math

from destiny.kernels.codes import ELU, LRELU, RELU, SELU, SIGMOID, SOFTPLUS, SOFTSIGN, TANH


def unit_activation(act, z, slope, alpha, lam):
    """f(z) for one float64 unit; SoftMax is handled per row by the callers."""
    if act == SIGMOID:
        # exp of -|z| only, so that no exponent overflows whatever the sign of z.
        e = math.exp(-abs(z))
        return 1.0 / (1.0 + e) if z >= 0.0 else e / (1.0 + e)
    if act == TANH:
        return math.tanh(z)
    if act == RELU:
        return z if z > 0.0 or z != z else 0.0  # NaN stays NaN, as NumPy's maximum keeps it
    if act == LRELU:
        return z if z > 0.0 else slope * z
    if act == ELU:
        return z if z > 0.0 else alpha * math.expm1(z)
    if act == SELU:
        return lam * z if z > 0.0 else lam * alpha * math.expm1(z)
    if act == SOFTPLUS:
        return max(z, 0.0) + math.log1p(math.exp(-abs(z)))
    if act == SOFTSIGN:
        return z / (1.0 + abs(z))
    return z  # LINEAR


def unit_derivative(act, a, slope, alpha, lam):
    """f'(z) in terms of the activation a = f(z) (spec 3.6); SoftMax uses the row Jacobian.

    Tanh is the plain 1 - a^2: Destiny keeps explicit dropout masks (no 1/(1-p) factor).
    """
    if act == SIGMOID:
        return a * (1.0 - a)
    if act == TANH:
        return 1.0 - a * a
    if act == RELU:
        return 1.0 if a > 0.0 else 0.0
    if act == LRELU:
        return 1.0 if a > 0.0 else slope
    if act == ELU:
        return 1.0 if a > 0.0 else a + alpha
    if act == SELU:
        return lam if a > 0.0 else a + lam * alpha
    if act == SOFTPLUS:
        return -math.expm1(-a)  # sigmoid(z) = 1 - e^-a
    if act == SOFTSIGN:
        s = 1.0 - abs(a)  # 1 / (1 + |z|)
        return s * s
    return 1.0  # LINEAR


def sparseness_penalty(column_sum, n_rows, p, beta):
    """beta * (-p / rho + (1 - p) / (1 - rho)) for a column's mean activation rho, clamped to
    [1e-6, 0.999999] (spec 3.10). The clamp compares, where ``min`` and ``max`` would do: on a
    GPU they become fmin and fmax, which drop a NaN, and a NaN column would get a finite
    penalty where the cpu and NumPy's clip keep it NaN."""
    rho = column_sum / max(n_rows, 1)
    if rho < 1e-6:
        rho = 1e-6
    elif rho > 0.999999:
        rho = 0.999999
    return beta * (-p / rho + (1.0 - p) / (1.0 - rho))


def at_least(x, floor):
    """``max(floor, x)`` that keeps a NaN ``x``, as NumPy's maximum in the reference does
    (Python's and numba's max, and a GPU's fmax, drop it). The losses clamp with it: a NaN
    output then costs NaN, and training's NaN guard stops at that batch."""
    return x if x > floor or x != x else floor


def at_most(x, ceiling):
    """``min(ceiling, x)`` that keeps a NaN ``x`` (see ``at_least``)."""
    return x if x < ceiling or x != x else ceiling


def sign(x):
    """The sign of ``x``: -1, 0 or 1, and NaN for NaN, as NumPy's sign."""
    if x > 0.0:
        return 1.0
    if x < 0.0:
        return -1.0
    return x * 0.0  # (0 for 0, NaN for NaN)


def direction(gradient, w, lam, lam1):
    # g = G - lam*w - lam1*sgn(w), sgn(0) = 0 (spec 5.8): a zero weight gets no L1 push.
    g = gradient - lam * w
    if w > 0:
        g -= lam1
    elif w < 0:
        g += lam1
    return g


def ranks_below(score_a, item_a, score_b, item_b):
    """Whether (score_a, item_a) comes after (score_b, item_b) in the output order.

    Score descending, then item ascending; NaN after every number, NaNs by item.
    """
    nan_a = score_a != score_a
    nan_b = score_b != score_b
    if nan_a != nan_b:
        return nan_a
    if nan_a or score_a == score_b:  # == also makes -0.0 and 0.0 a tie
        return item_a > item_b
    return score_a < score_b
