"""Central finite-difference gradient checks, in float64, for every activation x loss.

Tiny networks: a sparse input (7 features) -> hidden (5 units) -> output (6 units) with sparse
targets. The network stores DSSTNE's negated, averaged gradient G = -(1/B) X^T dZ and the bias
gradient mean(dZ); the loss it returns is summed over the batch, so dE/dW = -B * G (times the
number of users of a shared matrix, whose gradient DSSTNE averages over them) and
dE/db = B * gb.
"""

from __future__ import annotations

import numpy as np
import pytest

from destiny.kernels import get_backend
from destiny.netdef import parse_netdef
from destiny.network import Batch, Network

HIDDEN = ["Sigmoid", "Tanh", "Linear", "RectifiedLinear", "LeakyRectifiedLinear",
          "ExponentialLinear", "ScaledExponentialLinear", "SoftPlus", "SoftSign", "SoftMax"]
ANY = HIDDEN
OUTPUTS = {
    "L1": ANY, "L2": ANY, "L2Hinge": ANY, "Hinge": ANY,
    "CrossEntropy": ["Sigmoid", "SoftMax"],
    "ScaledMarginalCrossEntropy": ["Sigmoid", "SoftMax"],
    "DataScaledMarginalCrossEntropy": ["Sigmoid"],
}
COMBOS = ([("Sigmoid", out, loss) for loss, outs in OUTPUTS.items() for out in outs]
          + [(hidden, "Linear", "L2") for hidden in HIDDEN if hidden != "Sigmoid"]
          + [(hidden, "Sigmoid", "CrossEntropy") for hidden in HIDDEN if hidden != "Sigmoid"])


def netdef(hidden: str, output: str, loss: str, *, analog_input: bool = False, extra=None):
    d = {
        "Version": 0.9, "ErrorFunction": loss, "RELUSlope": 0.1, "ShuffleIndices": False,
        # SMCE thresholds that the random activations stay clear of: every unit is active.
        "ScaledMarginalCrossEntropy": {"oneTarget": 1.0, "zeroTarget": 0.0, "oneScale": 1.3,
                                       "zeroScale": 0.7},
        "Layers": [
            {"Name": "Input", "Kind": "Input", "N": 7, "DataSet": "in", "Sparse": True},
            {"Name": "Hidden", "Kind": "Hidden", "N": 5, "Activation": hidden},
            {"Name": "Output", "Kind": "Output", "N": 6, "DataSet": "out", "Activation": output},
        ],
    }
    for key, value in (extra or {}).items():
        d[key] = value
    return parse_netdef(d)


def random_csr(rng, rows, cols, per_row, analog):
    indptr = np.arange(0, rows * per_row + 1, per_row, dtype=np.int64)
    indices = np.concatenate([rng.choice(cols, per_row, replace=False) for _ in range(rows)])
    values = (rng.uniform(0.5, 1.5, len(indices)) if analog else np.zeros(0)).astype(np.float64)
    return indptr, indices.astype(np.int32), values


def build(nd, seed=0, analog_input=False, analog_target=False):
    rng = np.random.default_rng(seed)
    net = Network(nd, get_backend("reference"), dtype=np.float64)
    net.initialize(seed)
    for c in net.connections:  # larger weights than Xavier's, so every unit matters
        if not c.shared:
            c.W[:] = rng.normal(0, 0.7, c.W.shape)
        c.b[:] = rng.normal(0, 0.3, c.b.shape)
    batch = Batch(size=4, inputs={"Input": random_csr(rng, 4, 7, 3, analog_input)},
                  targets={"Output": random_csr(rng, 4, 6, 2, analog_target)})
    return net, batch


def loss_at(net, batch) -> float:
    net.forward(batch)
    return net.backward()


def check(net, batch, eps=1e-6, rtol=2e-5, atol=1e-7):
    loss_at(net, batch)
    analytic = {}
    for k, c in enumerate(net.connections):
        if not c.shared:
            # DSSTNE averages a shared matrix's gradient over its users (1 / sharingCount).
            analytic[("W", k)] = -batch.size * c.sharing * c.G.copy()
        analytic[("b", k)] = batch.size * c.gb.copy()
    _clear(net)
    for (what, k), grad in analytic.items():
        c = net.connections[k]
        param = c.W if what == "W" else c.b
        numeric = np.zeros_like(param)
        for idx in np.ndindex(param.shape):
            old = param[idx]
            param[idx] = old + eps
            up = loss_at(net, batch)
            param[idx] = old - eps
            down = loss_at(net, batch)
            param[idx] = old
            numeric[idx] = (up - down) / (2 * eps)
            _clear(net)
        np.testing.assert_allclose(grad, numeric, rtol=rtol, atol=atol,
                                   err_msg=f"{what} of connection {k} "
                                           f"({c.source.name}->{c.dest.name})")


def _clear(net):
    """Zero the gradients: a sparse gradient accumulates into rows, dense ones are rewritten."""
    net.discard_gradients()
    for c in net.connections:
        if not c.shared:
            c.G[:] = 0


@pytest.mark.parametrize("hidden,output,loss", COMBOS)
def test_gradient(hidden, output, loss):
    net, batch = build(netdef(hidden, output, loss), analog_target=(loss.startswith("DataScaled")))
    check(net, batch)


@pytest.mark.parametrize("loss", ["L2", "L1", "L2Hinge"])
def test_gradient_analog_input_and_targets(loss):
    # Analog inputs use each entry's own value in the weight gradient (quirk 10.19, fixed).
    net, batch = build(netdef("Tanh", "Sigmoid", loss), analog_input=True, analog_target=True)
    check(net, batch)


def test_gradient_with_skip_and_two_sources():
    d = {
        "ErrorFunction": "L2", "ShuffleIndices": False,
        "Layers": [
            {"Name": "Input", "Kind": "Input", "N": 7, "DataSet": "in", "Sparse": True},
            {"Name": "H1", "Kind": "Hidden", "N": 5, "Activation": "Tanh"},
            {"Name": "H2", "Kind": "Hidden", "N": 5, "Activation": "Sigmoid", "Skip": ["H1"]},
            {"Name": "Output", "Kind": "Output", "N": 6, "DataSet": "out", "Source": ["H1", "H2"],
             "Activation": "Sigmoid"},
        ],
    }
    net, batch = build(parse_netdef(d))
    check(net, batch)


@pytest.mark.parametrize("analog", [False, True], ids=["boolean", "analog"])
def test_gradient_with_a_skip_from_the_input_layer(analog):
    d = {
        "ErrorFunction": "L2", "ShuffleIndices": False,
        "Layers": [
            {"Name": "Input", "Kind": "Input", "N": 7, "DataSet": "in", "Sparse": True},
            {"Name": "Hidden", "Kind": "Hidden", "N": 5, "Activation": "Tanh"},
            {"Name": "Output", "Kind": "Output", "N": 7, "DataSet": "out", "Skip": "Input",
             "Activation": "Sigmoid"},
        ],
    }
    net, batch = build(parse_netdef(d), analog_input=analog)
    check(net, batch)


def test_gradient_with_shared_transposed_weights():
    d = {
        "ErrorFunction": "L2", "ShuffleIndices": False,
        "Layers": [
            {"Name": "Input", "Kind": "Input", "N": 7, "DataSet": "in", "Sparse": True},
            {"Name": "H1", "Kind": "Hidden", "N": 6, "Activation": "Tanh"},
            {"Name": "H2", "Kind": "Hidden", "N": 5, "Activation": "Sigmoid"},
            {"Name": "H3", "Kind": "Hidden", "N": 6, "Activation": "Tanh",
             "SharedWeights": {"SourceInputLayer": "H1", "SourceOutputLayer": "H2",
                               "InputLayer": "H2", "Transposed": True}},
            {"Name": "Output", "Kind": "Output", "N": 6, "DataSet": "out", "Activation": "Sigmoid"},
        ],
    }
    net, batch = build(parse_netdef(d))
    assert net.connections[2].owner is net.connections[1]
    check(net, batch)


def test_sparseness_penalty_changes_the_delta_not_the_loss():
    # The penalty (spec 3.10) is added to the hidden delta but never to the error: same loss,
    # different hidden gradient, and only for a Hidden layer marked Sparse.
    layers = [
        {"Name": "Input", "Kind": "Input", "N": 7, "DataSet": "in", "Sparse": True},
        {"Name": "Hidden", "Kind": "Hidden", "N": 5, "Activation": "Sigmoid", "Sparse": True},
        {"Name": "Output", "Kind": "Output", "N": 6, "DataSet": "out", "Activation": "Sigmoid"},
    ]
    plain = parse_netdef({"ErrorFunction": "L2", "Layers": layers})
    penal = parse_netdef({"ErrorFunction": "L2", "Layers": layers,
                          "SparsenessPenalty": {"p": 0.2, "beta": 3.0}})
    (net_a, batch), (net_b, _) = build(plain), build(penal)
    assert loss_at(net_a, batch) == pytest.approx(loss_at(net_b, batch))
    np.testing.assert_allclose(net_a.connections[1].G, net_b.connections[1].G)  # output weights
    assert not np.allclose(net_a.connections[0].G, net_b.connections[0].G)  # input weights


def test_gradient_of_a_sparse_input_matrix_shared_by_an_earlier_layer():
    # Input -> H3's matrix, read from the sparse input, is shared (transposed) by H1 -> H2,
    # which comes earlier in the forward order: backward adds the sparse gradient first, and
    # the dense product must add to it (it overwrote it), and the next batch's sparse gradient
    # must not add to what the last batch's dense product left in G outside its rows.
    d = {
        "ErrorFunction": "L2", "ShuffleIndices": False,
        "Layers": [
            {"Name": "Input", "Kind": "Input", "N": 7, "DataSet": "in", "Sparse": True},
            {"Name": "H1", "Kind": "Hidden", "N": 5, "Activation": "Tanh"},
            {"Name": "H2", "Kind": "Hidden", "N": 7, "Activation": "Sigmoid",
             "SharedWeights": {"SourceInputLayer": "Input", "SourceOutputLayer": "H3",
                               "InputLayer": "H1", "Transposed": True}},
            {"Name": "H3", "Kind": "Hidden", "N": 5, "Activation": "Tanh",
             "Source": ["Input", "H2"]},
            {"Name": "Output", "Kind": "Output", "N": 6, "DataSet": "out", "Source": "H3",
             "Activation": "Sigmoid"},
        ],
    }
    net, batch = build(parse_netdef(d))
    assert net.connections[1].owner is net.connections[2]
    check(net, batch)
    # A batch of one example with one feature: its sparse gradient is a single row of G.
    other = Batch(size=1, inputs={"Input": (np.array([0, 1]), np.array([3], np.int32),
                                            np.zeros(0))},
                  targets={"Output": (np.array([0, 1]), np.array([2], np.int32), np.zeros(0))})
    loss_at(net, other)  # its gradients twice, without zeroing G by hand between them
    first = net.connections[2].G.copy()
    net.discard_gradients()
    loss_at(net, other)
    np.testing.assert_array_equal(net.connections[2].G, first)
