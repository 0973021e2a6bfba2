"""The optimizer kernels (spec 5.2, 5.8) of every backend: hand-checked values and the reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

from destiny.kernels.reference.optim import (
    ADADELTA,
    ADAGRAD,
    ADAM,
    MOMENTUM,
    NESTEROV,
    RMSPROP,
    SGD,
)
from .backends import family, tiny

BACKENDS = family("optim")
ref_optim = BACKENDS["reference"]
MODES = [SGD, MOMENTUM, ADAGRAD, NESTEROV, RMSPROP, ADADELTA, ADAM]
TWO_STATE = (ADADELTA, ADAM)


def test_mode_values_are_dsstne_training_mode():
    assert MODES == list(range(7))
    for name in ("cpu", "cuda"):
        assert BACKENDS[name].ADAM == ADAM and BACKENDS[name].SGD == SGD
    for backend in BACKENDS.values():
        assert [backend.state_arrays_needed(m) for m in MODES] == [0, 1, 1, 1, 1, 2, 2]


def test_step_size_decay():
    for backend in BACKENDS.values():
        assert backend.step_size(0.1, 0.0, 50) == 0.1
        assert backend.step_size(0.1, -1.0, 50) == 0.1
        assert backend.step_size(0.1, 0.5, 0) == 0.1
        assert backend.step_size(0.1, 0.5, 3) == pytest.approx(0.1 / 2.5)


# Hand-checked weights of one element over two steps: w0 = 0.5, the stored (negated) gradient
# G = 0.2 on both steps, lam = 0.01, lam1 = 0.001, alpha = 0.1, mu = 0.9, mu1 = 0.999. Each
# entry unrolls the formulas of spec 5.8 by hand: (w after step 1, w after step 2, s1 and s2
# after step 2, None where unused).
W0, GRAD, LAM, LAM1, ALPHA, MU, MU1 = 0.5, 0.2, 0.01, 0.001, 0.1, 0.9, 0.999


def _hand_weights(mode):
    g1 = GRAD - LAM * W0 - LAM1  # sgn(0.5) = 1
    assert g1 == pytest.approx(0.194)
    if mode == SGD:
        w1 = W0 + ALPHA * g1  # 0.5194
        w2 = w1 + ALPHA * (GRAD - LAM * w1 - LAM1)  # 0.5194 + 0.1 * 0.193806
        assert w2 == pytest.approx(0.5387806)
        return w1, w2, None, None
    if mode == MOMENTUM:
        v1 = ALPHA * g1  # 0.0194
        w1 = W0 + v1
        v2 = MU * v1 + ALPHA * (GRAD - LAM * w1 - LAM1)  # 0.01746 + 0.0193806
        w2 = w1 + v2
        assert w2 == pytest.approx(0.5562406)
        return w1, w2, v2, None
    if mode == ADAGRAD:
        v1 = g1 ** 2
        w1 = W0 + ALPHA * g1 / math.sqrt(v1)  # exactly alpha on the first step: 0.6
        assert w1 == pytest.approx(0.6)
        g2 = GRAD - LAM * w1 - LAM1  # 0.193
        v2 = v1 + g2 ** 2  # 0.037636 + 0.037249
        assert v2 == pytest.approx(0.074885)
        return w1, w1 + ALPHA * g2 / math.sqrt(v2), v2, None
    if mode == NESTEROV:
        v1 = ALPHA * g1  # 0.0194
        w1 = W0 + v1 + MU * (v1 - 0.0)  # 0.53686
        assert w1 == pytest.approx(0.53686)
        g2 = GRAD - LAM * w1 - LAM1  # 0.1936314
        v2 = MU * v1 + ALPHA * g2  # 0.03682314
        assert v2 == pytest.approx(0.03682314)
        return w1, w1 + v2 + MU * (v2 - v1), v2, None
    if mode == RMSPROP:
        v1 = (1 - MU) * g1 ** 2
        w1 = W0 + ALPHA * g1 / math.sqrt(v1)  # alpha / sqrt(0.1) on the first step
        assert w1 == pytest.approx(0.5 + 0.1 / math.sqrt(0.1))
        g2 = GRAD - LAM * w1 - LAM1
        v2 = MU * v1 + (1 - MU) * g2 ** 2
        return w1, w1 + ALPHA * g2 / math.sqrt(v2), v2, None
    if mode == ADADELTA:
        vg1 = (1 - MU) * g1 ** 2
        dw1 = math.sqrt(1e-9 / vg1) * g1  # v = 0 is floored at 1e-9; alpha unused
        v1 = (1 - MU) * dw1 ** 2
        w1 = W0 + dw1
        g2 = GRAD - LAM * w1 - LAM1
        vg2 = MU * vg1 + (1 - MU) * g2 ** 2
        assert v1 == pytest.approx(1e-9)  # dw1^2 = 1e-9 / (1 - mu): v1 lands on the floor
        dw2 = math.sqrt(max(1e-9, v1) / vg2) * g2
        v2 = MU * v1 + (1 - MU) * dw2 ** 2
        return w1, w1 + dw2, v2, vg2
    if mode == ADAM:
        m1 = (1 - MU) * g1
        s1 = (1 - MU1) * g1 ** 2
        # DSSTNE's quirk: the first update (t = 1) corrects with exponent t + 1 = 2.
        w1 = W0 + ALPHA * (m1 / (1 - MU ** 2)) / (math.sqrt(s1 / (1 - MU1 ** 2)) + 1e-8)
        g2 = GRAD - LAM * w1 - LAM1
        m2 = MU * m1 + (1 - MU) * g2
        s2 = MU1 * s1 + (1 - MU1) * g2 ** 2
        w2 = w1 + ALPHA * (m2 / (1 - MU ** 3)) / (math.sqrt(s2 / (1 - MU1 ** 3)) + 1e-8)
        return w1, w2, m2, s2
    raise AssertionError(mode)


# The same for a bias: b0 = 0.5, beta = 0.2 (the delta's mean, not negated), no decay.
B0, BETA = 0.5, 0.2


def _hand_bias(mode):
    if mode == SGD:
        return 0.48, 0.46, None, None
    if mode == MOMENTUM:
        # v1 = -0.02, b1 = 0.48; v2 = -0.018 - 0.02 = -0.038, b2 = 0.442
        return 0.48, 0.442, -0.038, None
    if mode == ADAGRAD:
        # v1 = 0.04, b1 = 0.5 - 0.02 / 0.2; v2 = 0.08, b2 = b1 - 0.02 / sqrt(0.08)
        return 0.4, 0.4 - 0.02 / math.sqrt(0.08), 0.08, None
    if mode == NESTEROV:
        # v1 = -0.02, b1 = 0.5 - 0.02 - 0.018; v2 = -0.038, b2 = b1 - 0.038 + 0.9 * -0.018
        return 0.462, 0.462 - 0.038 - 0.0162, -0.038, None
    if mode == RMSPROP:
        # v1 = 0.004, b1 = 0.5 - 0.02 / sqrt(0.004); v2 = 0.0036 + 0.004 = 0.0076
        b1 = 0.5 - 0.02 / math.sqrt(0.004)
        return b1, b1 - 0.02 / math.sqrt(0.0076), 0.0076, None
    if mode == ADADELTA:
        # vg1 = 0.004, dw1 = sqrt(1e-9 / 0.004) * 0.2, v1 = 0.1 * dw1^2 = 1e-9 (the floor);
        # vg2 = 0.0076, dw2 = sqrt(max(1e-9, v1) / 0.0076) * 0.2, v2 = 0.9 * v1 + 0.1 * dw2^2
        dw1 = math.sqrt(1e-9 / 0.004) * 0.2
        v1 = 0.1 * dw1 ** 2
        dw2 = math.sqrt(max(1e-9, v1) / 0.0076) * 0.2
        return 0.5 - dw1, 0.5 - dw1 - dw2, 0.9 * v1 + 0.1 * dw2 ** 2, 0.0076
    if mode == ADAM:
        # m1 = 0.02, s1 = 0.001 * 0.04 = 4e-5, corrected with exponent 2 (quirk);
        # m2 = 0.018 + 0.02 = 0.038, s2 = 0.999 * 4e-5 + 4e-5, corrected with exponent 3.
        b1 = 0.5 - 0.1 * (0.02 / 0.19) / (math.sqrt(4e-5 / (1 - 0.999 ** 2)) + 1e-8)
        s2 = 0.999 * 4e-5 + 4e-5
        b2 = b1 - 0.1 * (0.038 / (1 - 0.9 ** 3)) / (math.sqrt(s2 / (1 - 0.999 ** 3)) + 1e-8)
        return b1, b2, 0.038, s2
    raise AssertionError(mode)


def _state(mode, shape, dtype):
    """Zeroed state arrays for ``mode``, empty (same number of dimensions) where unused."""
    needed = ref_optim.state_arrays_needed(mode)
    empty = (0,) * len(shape)  # same ndim as the parameters: fewer numba specialisations
    return tuple(np.zeros(shape if k < needed else empty, dtype=dtype) for k in range(2))


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("mode", MODES)
def test_hand_checked_weight_steps(backend, mode):
    update = BACKENDS[backend].update_weights
    w1, w2, e1, e2 = _hand_weights(mode)
    # The checked element sits among others, so that the flattened loop runs over a 2-D array.
    W = np.full((3, 4), W0)
    G = np.full((3, 4), GRAD)
    s1, s2 = _state(mode, W.shape, np.float64)
    update(W, G, s1, s2, 1, mode, ALPHA, LAM, LAM1, MU, MU1)
    np.testing.assert_allclose(W, w1, rtol=1e-12)
    update(W, G, s1, s2, 2, mode, ALPHA, LAM, LAM1, MU, MU1)
    np.testing.assert_allclose(W, w2, rtol=1e-12)
    if e1 is not None:
        np.testing.assert_allclose(s1, e1, rtol=1e-12)
    if e2 is not None:
        np.testing.assert_allclose(s2, e2, rtol=1e-12)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("mode", MODES)
def test_hand_checked_bias_steps(backend, mode):
    update = BACKENDS[backend].update_bias
    b1, b2, e1, e2 = _hand_bias(mode)
    b = np.full(5, B0)
    beta = np.full(5, BETA)
    s1, s2 = _state(mode, b.shape, np.float64)
    update(b, beta, s1, s2, 1, mode, ALPHA, MU, MU1)
    np.testing.assert_allclose(b, b1, rtol=1e-12)
    update(b, beta, s1, s2, 2, mode, ALPHA, MU, MU1)
    np.testing.assert_allclose(b, b2, rtol=1e-12)
    if e1 is not None:
        np.testing.assert_allclose(s1, e1, rtol=1e-12)
    if e2 is not None:
        np.testing.assert_allclose(s2, e2, rtol=1e-12)


def test_adam_first_step_uses_exponent_two():
    # Textbook Adam's first step is alpha * g / (|g| + eps), about alpha; DSSTNE's t + 1 quirk
    # gives alpha * (0.1 / 0.19) / sqrt(0.001 / 0.001999) instead (spec 5.8).
    for backend in BACKENDS.values():
        W = np.zeros((1, 3))
        G = np.full((1, 3), 0.5)
        s1, s2 = np.zeros((1, 3)), np.zeros((1, 3))
        backend.update_weights(W, G, s1, s2, 1, ADAM, 0.1, 0.0, 0.0, 0.9, 0.999)
        expected = 0.1 * (0.1 / 0.19) / math.sqrt(0.001 / 0.001999)
        np.testing.assert_allclose(W, expected, rtol=1e-6)
        assert abs(W[0, 0] - 0.1) > 0.02


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", MODES)
def test_matches_reference(backend, mode, dtype):
    rng = np.random.default_rng(10 + mode)
    W = rng.normal(size=(4, 9) if tiny(backend) else (23, 41)).astype(dtype)
    W[rng.random(W.shape) < 0.1] = 0.0  # exact zeros exercise sgn(0) = 0
    W.flat[:2] = 0.0
    b = rng.normal(size=W.shape[1]).astype(dtype)
    names = ("reference", backend)
    weights = {name: W.copy() for name in names}
    biases = {name: b.copy() for name in names}
    w_state = {name: _state(mode, W.shape, dtype) for name in names}
    b_state = {name: _state(mode, b.shape, dtype) for name in names}
    for t in range(1, 6):
        G = (0.3 * rng.normal(size=W.shape)).astype(dtype)
        beta = (0.3 * rng.normal(size=b.shape)).astype(dtype)
        for name in names:
            BACKENDS[name].update_weights(weights[name], G, *w_state[name], t, mode,
                                          0.05, 1e-2, 3e-3, 0.9, 0.999)
            BACKENDS[name].update_bias(biases[name], beta, *b_state[name], t, mode, 0.05, 0.9,
                                       0.999)
    # float32 kernels round every operation to float32, the reference only the results; an
    # absolute tolerance scaled to each array's magnitude absorbs cancellations near zero.
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    pairs = [(weights[backend], weights["reference"]), (biases[backend], biases["reference"])]
    pairs += list(zip(w_state[backend] + b_state[backend],
                      w_state["reference"] + b_state["reference"], strict=True))
    for got, want in pairs:
        assert got.dtype == dtype
        scale = np.abs(want).max() if want.size else 0.0
        np.testing.assert_allclose(got, want, rtol=rtol, atol=0.1 * rtol * scale)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_sgd_with_dsstne_defaults(backend):
    # `train` always uses SGD with alpha = 0.025 and lam = 1e-4 (spec 5.8, last rule).
    rng = np.random.default_rng(3)
    W = rng.normal(size=(17, 9)).astype(np.float32)
    G = rng.normal(size=W.shape).astype(np.float32)
    b = rng.normal(size=9).astype(np.float32)
    beta = rng.normal(size=9).astype(np.float32)
    expected_W = W.astype(np.float64) + 0.025 * (G - 1e-4 * W.astype(np.float64))
    expected_b = b.astype(np.float64) - 0.025 * beta
    empty1, empty2 = np.zeros(0, dtype=np.float32), np.zeros((0, 0), dtype=np.float32)
    BACKENDS[backend].update_weights(W, G, empty2, empty2, 1, SGD, 0.025, 1e-4, 0.0, 0.0, 0.0)
    BACKENDS[backend].update_bias(b, beta, empty1, empty1, 1, SGD, 0.025, 0.0, 0.0)
    np.testing.assert_allclose(W, expected_W, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(b, expected_b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("mode", MODES)
def test_zero_weights_get_no_l1_push(backend, mode):
    # With no gradient, sgn(0) = 0 leaves a zero weight at exactly zero in every mode, while
    # L1 and L2 pull the others toward zero.
    W = np.array([[0.0, 0.5, -0.5, 0.0]], dtype=np.float32)
    G = np.zeros_like(W)
    s1, s2 = _state(mode, W.shape, np.float32)
    BACKENDS[backend].update_weights(W, G, s1, s2, 1, mode, 0.1, 0.1, 0.2, 0.9, 0.999)
    assert W[0, 0] == 0.0 and W[0, 3] == 0.0
    assert 0.0 <= W[0, 1] < 0.5 and -0.5 < W[0, 2] <= 0.0
    if mode in (SGD, MOMENTUM):  # 0.5 - 0.1 * (0.1 * 0.5 + 0.2)
        np.testing.assert_allclose(W[0, 1:3], [0.475, -0.475], rtol=1e-6)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_unused_state_is_untouched(backend):
    update = BACKENDS[backend].update_weights
    W = np.ones((4, 6), dtype=np.float32)
    G = np.ones_like(W)
    s1, s2 = np.full_like(W, 7.0), np.full_like(W, 7.0)
    update(W, G, s1, s2, 1, SGD, 0.1, 0.01, 0.01, 0.9, 0.999)
    assert np.all(s1 == 7.0) and np.all(s2 == 7.0)
    BACKENDS[backend].update_bias(W[0], G[0], s1[0], s2[0], 1, SGD, 0.1, 0.9, 0.999)
    assert np.all(s1 == 7.0) and np.all(s2 == 7.0)
    for mode in (MOMENTUM, ADAGRAD, NESTEROV, RMSPROP):  # s1 only
        update(W, G, s1, s2, 1, mode, 0.1, 0.01, 0.01, 0.9, 0.999)
        assert np.all(s2 == 7.0)
    empty = np.zeros((0, 0), dtype=np.float32)
    update(W, G, empty, empty, 1, SGD, 0.1, 0.0, 0.0, 0.0, 0.0)  # empty arrays are accepted


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_missing_state_is_refused(backend):
    W = np.ones((4, 6), dtype=np.float32)
    G = np.ones_like(W)
    s, empty = np.zeros_like(W), np.zeros((0, 0), dtype=np.float32)
    longer = np.zeros((5, 6), dtype=np.float32)  # another layer's state
    # (The messages name the state array refused: a bare ValueError would also be NumPy's
    # broadcast error, which a reference without the check raises on the same arrays.)
    for mode, s1, s2, bad in [(MOMENTUM, empty, empty, 1), (ADAM, s, empty, 2),
                              (ADADELTA, empty, s, 1), (ADADELTA, s, empty, 2),
                              (MOMENTUM, longer, empty, 1), (ADAM, s, longer, 2)]:
        with pytest.raises(ValueError, match=f"optimizer mode {mode} needs s{bad} |"
                                             f"this optimizer mode needs s{bad} "):
            BACKENDS[backend].update_weights(W, G, s1, s2, 1, mode, 0.1, 0.0, 0.0, 0.9, 0.999)
    with pytest.raises(ValueError, match="unknown optimizer mode"):
        BACKENDS[backend].update_bias(W[0], G[0], s[0], s[0], 1, 7, 0.1, 0.9, 0.999)
    assert np.all(W == 1.0)


LAZY = [SGD, ADAGRAD, RMSPROP, ADADELTA]


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("mode", LAZY)
def test_lazy_row_updates_equal_dense_updates_bit_for_bit(backend, mode):
    """Updating only a sparse layer's rows with a gradient, and decaying the others' state
    when they next have one (or at catch-up), is the dense update of every row, exactly."""
    kb = BACKENDS[backend]
    assert tuple(LAZY) == kb.LAZY_MODES
    rng = np.random.default_rng(mode)
    n_in, n_out = (9, 4) if tiny(backend) else (40, 33)
    W = (0.1 * rng.normal(size=(n_in, n_out))).astype(np.float32)
    dense = [W.copy(), np.zeros_like(W), np.zeros_like(W)]
    lazy = [W.copy(), np.zeros_like(W), np.zeros_like(W)]
    if kb.state_arrays_needed(mode) < 2:  # unused state arrays may be empty
        lazy[2] = np.zeros(0, np.float32)
    current = np.zeros(n_in, np.int64)
    steps = 6
    for t in range(1, steps + 1):
        rows = rng.integers(0, n_in, size=rng.integers(0, n_in)).astype(np.int32)  # repeats
        G = np.zeros_like(W)
        G[rows] = rng.normal(size=(len(rows), n_out)).astype(np.float32)
        kb.update_weights(dense[0], G, dense[1], dense[2], t, mode, 0.05, 0.0, 0.0, 0.9, 0.999)
        kb.update_weight_rows(lazy[0], G, lazy[1], lazy[2], rows, current, t, mode, 0.05, 0.9)
        np.testing.assert_array_equal(lazy[0], dense[0])  # weights are never behind
        assert not G.any()  # the gradient rows were consumed
        assert set(np.flatnonzero(current == t)) == set(rows.tolist())
    kb.catch_up_rows(lazy[1], lazy[2], current, steps, mode, 0.9)
    assert (current == steps).all()
    for k in range(kb.state_arrays_needed(mode)):
        np.testing.assert_array_equal(lazy[1 + k], dense[1 + k])
    if mode in (RMSPROP, ADADELTA):  # the test means something: some state did decay
        assert (dense[1] != 0).any()


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_catch_up_over_a_long_gap(backend):
    """A row idle for 1,203 updates at mu = 0.9: its state reaches the subnormal that 0.9 * x
    rounds back to (after about 960 multiplies) and stays there, exactly as 1,203 multiplies
    leave it; some values were zero, one is already at the fixed point, a row is all zero
    (a feature not seen yet: the cpu stops at once)."""
    kb = BACKENDS[backend]
    s1 = np.array([[1.0, 3e-39, 0.0], [6e-45, 0.25, 1e-30], [0.0, 0.0, 0.0]], dtype=np.float32)
    expected = s1.copy()
    for _ in range(1203):
        expected *= np.float32(0.9)
    for mode, s2 in ((RMSPROP, np.zeros(0, np.float32)), (ADADELTA, s1[::-1].copy())):
        a, b = s1.copy(), s2.copy()
        current = np.zeros(3, np.int64)
        kb.catch_up_rows(a, b, current, 1203, mode, 0.9)
        np.testing.assert_array_equal(a, expected)
        if b.size:
            np.testing.assert_array_equal(b, expected[::-1])
        assert (current == 1203).all()
    assert expected[0, 0] == np.float32(6e-45) and expected[0, 0] > 0  # the fixed point
    # A negative decay (not one train takes) flips a zero's sign every pass: not a fixed point.
    for steps in (2, 3):
        a = np.zeros((1, 3), np.float32)
        kb.catch_up_rows(a, np.zeros(0, np.float32), np.zeros(1, np.int64), steps, RMSPROP, -0.5)
        assert np.signbit(a).all() == (steps % 2 == 1), (steps, a)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("mode", [MOMENTUM, NESTEROV, ADAM])
def test_lazy_row_updates_refuse_modes_that_move_idle_weights(backend, mode):
    kb = BACKENDS[backend]
    W = np.zeros((3, 2), np.float32)
    state = np.zeros_like(W)
    with pytest.raises(ValueError, match="moves weights whose gradient is zero"):
        kb.update_weight_rows(W, W.copy(), state, state.copy(), np.zeros(1, np.int32),
                              np.zeros(3, np.int64), 1, mode, 0.1, 0.9)


@pytest.mark.parametrize("backend", ["reference", "cpu"])  # (the GPU does not check)
def test_rows_ahead_of_the_update_are_refused(backend):
    kb = BACKENDS[backend]
    W = np.ones((3, 2), np.float32)
    state = np.zeros_like(W)
    for ahead in (5, 3):  # (a row already at t has had this update: it is ahead of t - 1)
        current = np.array([0, ahead, 0], np.int64)
        with pytest.raises(ValueError, match="after t - 1 = 2"):
            kb.update_weight_rows(W, np.zeros_like(W), state, state.copy(),
                                  np.array([0, 1], np.int32), current, 3, ADAGRAD, 0.1, 0.9)
        np.testing.assert_array_equal(current, [0, ahead, 0])  # a refused call changes nothing
    indptr, indices = np.array([0, 1], np.int64), np.array([1], np.int32)
    with pytest.raises(ValueError, match="after t - 1 = 2"):  # row 1 has had update 3 already
        kb.sparse_grad_update_rows(W, np.zeros_like(W), state, state.copy(),
                                   np.array([0, 3, 0], np.int64), indptr, indices,
                                   np.zeros(0, np.float32), np.ones((1, 2), np.float32), -1.0, 3,
                                   ADAGRAD, 0.1, 0.9)
    with pytest.raises(ValueError, match="after t = 3"):
        kb.catch_up_rows(state, np.zeros(0, np.float32), np.array([0, 4, 0], np.int64), 3,
                         RMSPROP, 0.9)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_catch_up_without_state_marks_every_row_up_to_date(backend):
    current = np.array([0, 2, 5], np.int64)
    empty = np.zeros(0, np.float32)
    BACKENDS[backend].catch_up_rows(empty, empty, current, 5, SGD, 0.9)
    np.testing.assert_array_equal(current, [5, 5, 5])


def _random_batch(rng, n_rows, n_in, analog):
    """A CSR batch of a sparse input (repeats within a row, empty rows) and its values."""
    lengths = rng.integers(0, 4, size=n_rows)
    indptr = np.zeros(n_rows + 1, np.int64)
    np.cumsum(lengths, out=indptr[1:])
    indices = rng.integers(0, n_in, size=indptr[-1]).astype(np.int32)
    values = (rng.uniform(0.5, 2.0, size=indptr[-1]).astype(np.float32) if analog
              else np.zeros(0, np.float32))
    return indptr, indices, values


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("mode", LAZY)
@pytest.mark.parametrize("analog", [False, True])
def test_sparse_gradient_and_row_update_in_one_call_are_the_two_calls_exactly(backend, mode,
                                                                              analog):
    """``sparse_grad_update_rows`` is ``sparse_fc_weight_grad`` into a zero G and then
    ``update_weight_rows``, bit for bit, over steps where rows lag behind by different
    numbers of updates; G is zero on return. The GPU's fused kernel never writes G. Off the
    simulator, more features are present than the cpu's 64 chunks of features, and not a
    multiple of them: chunks of unequal sizes."""
    kb, sparse = BACKENDS[backend], family("sparse")[backend]
    rng = np.random.default_rng(10 * mode + analog)
    n_in, n_out, B = (9, 5, 3) if tiny(backend) else (200, 33, 80)
    present = set()
    W = (0.1 * rng.normal(size=(n_in, n_out))).astype(np.float32)
    W[0] = -0.0  # a Constant 0 init's -0.0: the signs of zeros must agree too
    two = [[W.copy(), np.zeros_like(W), np.zeros_like(W), np.zeros(n_in, np.int64)]
           for _ in range(2)]
    for t in range(1, 6):
        indptr, indices, values = _random_batch(rng, B, n_in, analog)
        present.add(len(np.unique(indices)))
        delta = rng.normal(size=(B, n_out)).astype(np.float32)
        delta[:, 0] = 0.0  # a gradient of -0.0 (scale < 0 times a zero sum)
        scale = -1.0 / B
        W1, s1, u1, current1 = two[0]
        G = np.zeros_like(W)
        sparse.sparse_fc_weight_grad(G, indptr, indices, values, delta, scale)
        kb.update_weight_rows(W1, G, s1, u1, indices, current1, t, mode, 0.05, 0.9)
        W2, s2, u2, current2 = two[1]
        G = np.zeros_like(W)
        kb.sparse_grad_update_rows(W2, G, s2, u2, current2, indptr, indices, values, delta,
                                   scale, t, mode, 0.05, 0.9)
        assert not G.any()
        for a, b in zip(two[0], two[1], strict=True):
            np.testing.assert_array_equal(a, b)
            assert np.array_equal(np.signbit(a), np.signbit(b))
    if mode in (RMSPROP, ADADELTA):  # rows did lag: their decay was applied on the way
        assert len(set(two[0][3].tolist())) > 1
    assert tiny(backend) or any(n > 64 and n % 64 for n in present)
