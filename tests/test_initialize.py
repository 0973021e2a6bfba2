"""Initial weights and biases (spec 3.7, quirk 10.16), against the spec's formulas.

Each scheme is drawn for a matrix of 60,000 weights: a uniform draw then comes within 0.1 %
of both ends of its range, and a normal draw's spread within 1 % of its sigma, so a range or
a sigma other than the spec's (the full Glorot range, fan-in for CaffeXavier, 1/sqrt(n_in)
for SELU, +Scale for Constant) fails.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from destiny.initialize import initial_weights
from destiny.kernels import get_backend
from destiny.netdef import WeightInit, parse_netdef
from destiny.network import Network

N_IN, N_OUT, SCALE = 300, 200, 0.7


def draw(scheme: WeightInit, scale: float = SCALE) -> np.ndarray:
    w = initial_weights(np.random.default_rng(0), scheme, scale, N_IN, N_OUT, np.float64)
    assert w.shape == (N_IN, N_OUT)
    return w


def assert_uniform_on(w: np.ndarray, lo: float, hi: float) -> None:
    """``w`` fills [lo, hi]: nothing outside, both ends reached within 0.1 % of the width."""
    width = hi - lo
    assert lo <= w.min() < lo + 1e-3 * width
    assert hi - 1e-3 * width < w.max() <= hi


# (scheme, the range of spec 3.7's table) for the uniform schemes.
UNIFORM = {
    # S * (u - 0.5), S = s * sqrt(6 / (n_in + n_out)): half the usual Glorot range.
    WeightInit.Xavier: 0.5 * SCALE * math.sqrt(6 / (N_IN + N_OUT)),
    # S * (u - 0.5), S = 2 s sqrt(3 / n_out): the fan-out, not the fan-in.
    WeightInit.CaffeXavier: SCALE * math.sqrt(3 / N_OUT),
    # 2 s (u - 0.5)
    WeightInit.Uniform: SCALE,
}


@pytest.mark.parametrize("scheme", list(UNIFORM), ids=lambda s: s.name)
def test_uniform_schemes_fill_the_spec_range(scheme):
    bound = UNIFORM[scheme]
    assert_uniform_on(draw(scheme), -bound, bound)


def test_unit_ball_is_positive_up_to_the_scale():
    w = draw(WeightInit.UnitBall)  # s * u with u in (0, 1]
    assert w.min() > 0
    assert_uniform_on(w, 0.0, SCALE)


def test_gaussian_sigma_is_the_scale():
    w = draw(WeightInit.Gaussian)
    assert abs(w.mean()) < 0.01 * SCALE
    assert w.std() == pytest.approx(SCALE, rel=0.01)


def test_selu_sigma_is_one_over_the_fan_in_whatever_the_scale():
    for scale in (SCALE, 3.0):
        w = draw(WeightInit.SELU, scale)
        assert w.std() == pytest.approx(1 / N_IN, rel=0.01)  # not 1 / sqrt(n_in): quirk 10.16


def test_constant_is_minus_the_scale():
    np.testing.assert_array_equal(draw(WeightInit.Constant), -SCALE)


def test_a_network_draws_with_each_layers_own_scheme_scale_sizes_and_bias():
    """Network.initialize: the destination layer's WeightInit, its n_in and n_out (CaffeXavier's
    fan-out tells them apart), and every bias set to the layer's Bias."""
    nd = parse_netdef({"ErrorFunction": "L2", "Layers": [
        {"Name": "Input", "Kind": "Input", "N": 400, "DataSet": "in", "Sparse": True},
        {"Name": "Hidden", "Kind": "Hidden", "N": 150, "Activation": "Sigmoid",
         "WeightInit": {"Scheme": "CaffeXavier", "Scale": 0.5, "Bias": -1.25}},
        {"Name": "Output", "Kind": "Output", "N": 3, "DataSet": "out", "Activation": "Sigmoid",
         "WeightInit": {"Scheme": "Constant", "Scale": 0.25, "Bias": 0.75}}]})
    net = Network(nd, get_backend("reference"), dtype=np.float64)
    net.initialize(1)
    into_hidden, into_output = net.connections
    bound = 0.5 * math.sqrt(3 / 150)
    assert_uniform_on(into_hidden.W, -bound, bound)
    np.testing.assert_array_equal(into_hidden.b, np.full(150, -1.25))
    np.testing.assert_array_equal(into_output.W, np.full((150, 3), -0.25))
    np.testing.assert_array_equal(into_output.b, np.full(3, 0.75))


class _Ends:
    """A generator whose uniform draws are 0.0, the one end of NumPy's [0, 1)."""

    def random(self, shape):
        return np.zeros(shape)


@pytest.mark.parametrize("scheme, end", [(WeightInit.UnitBall, SCALE), (WeightInit.Uniform, SCALE),
                                         (WeightInit.Xavier, UNIFORM[WeightInit.Xavier])],
                         ids=["UnitBall", "Uniform", "Xavier"])
def test_u_is_uniform_on_0_excluded_to_1_as_curands(scheme, end):
    """u = 1 - NumPy's draw: its 0.0 is u = 1, the range's top, and UnitBall never draws a 0."""
    w = initial_weights(_Ends(), scheme, SCALE, N_IN, N_OUT, np.float64)
    np.testing.assert_allclose(w, end, rtol=1e-15)
