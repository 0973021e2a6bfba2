"""One batch of ``Network`` against the spec's formulas, recomputed by hand in NumPy (float64).

``tests/test_gradcheck.py`` checks the plain network against finite differences; these are the
features that are not the gradient of the loss, or not only it: denoising's q (spec 3.9, 5.4,
quirk 10.18), the sparseness penalty's rules (3.10, quirk 10.15), DeltaNorm's place in the
backward pass (3.13, 5.6), and L1/L2 decay of the input rows a batch does not touch (5.8).
"""

from __future__ import annotations

import numpy as np
import pytest

from destiny.kernels import get_backend
from destiny.netdef import parse_netdef
from destiny.netdef_fields import as_float32 as f32
from destiny.network import Batch, Network, OptimizerConfig

NONE = np.zeros(0, dtype=np.float64)


def csr(rows, values=None):
    """CSR arrays of lists of indices (and of values)."""
    indptr = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
    indices = np.array([i for r in rows for i in r], dtype=np.int32)
    vals = NONE if values is None else np.array([v for r in values for v in r], dtype=np.float64)
    return indptr, indices, vals


def dense(rows, n, values=None):
    x = np.zeros((len(rows), n))
    for b, r in enumerate(rows):
        for k, i in enumerate(r):
            x[b, i] += 1.0 if values is None else values[b][k]
    return x


def network(d, seed=0, scale=0.8):
    """A float64 reference network of definition ``d`` with weights and biases away from 0."""
    net = Network(parse_netdef(d), get_backend("reference"), dtype=np.float64)
    net.initialize(seed)
    rng = np.random.default_rng(seed)
    for c in net.connections:
        c.W[:] = rng.choice([-1.0, 1.0], c.W.shape) * rng.uniform(0.2, 1.0, c.W.shape) * scale
        c.b[:] = rng.normal(0, 0.5, c.b.shape)
    return net


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


# -- denoising (spec 3.9, 5.4) -------------------------------------------------------------

DENOISED = {"ErrorFunction": "L2", "Denoising": {"p": 0.5}, "Layers": [
    {"Name": "Input", "Kind": "Input", "N": 5, "DataSet": "in", "Sparse": True},
    {"Name": "Output", "Kind": "Output", "N": 3, "DataSet": "out", "Activation": "Linear"}]}
ROWS = [[0, 2, 4], [1, 3], [2]]
KEPT = [[0, 4], [3], []]  # what a draw kept of ROWS
VALUES = [[0.5, 9.0, 1.5], [7.0, 2.0], [3.0]]
KEPT_VALUES = [[0.5, 1.5], [2.0], []]
TARGETS = [[1], [0, 2], []]


@pytest.mark.parametrize("analog", [False, True], ids=["boolean", "analog"])
def test_denoised_input_is_scaled_by_q_and_boolean_data_scales_the_bias_too(analog):
    """Kept entries count q = 1 / (1 - p) times, in the forward pass and in the input weights'
    gradient (spec 3.9); DSSTNE's boolean fast path multiplies the bias by q as well (5.4,
    quirk 10.18), its analog path does not. The bias gradient is the plain mean delta (5.7)."""
    net = network(DENOISED)
    assert net.layers["Input"].denoising
    (c,) = net.connections
    W, b, q, B = c.W.copy(), c.b.copy(), 2.0, len(ROWS)
    given = csr(ROWS, VALUES if analog else None)
    kept = csr(KEPT, KEPT_VALUES if analog else None)
    batch = Batch(size=B, inputs={"Input": given}, targets={"Output": csr(TARGETS)})
    net.forward(batch, train=True, denoise={"Input": (kept, q)})
    loss = net.backward()

    X = q * dense(KEPT, 5, KEPT_VALUES if analog else None)  # the scaled input
    A = X @ W + (b if analog else q * b)
    T = dense(TARGETS, 3)
    np.testing.assert_allclose(net.activation("Output", B), A, rtol=1e-12)
    assert loss == pytest.approx(0.5 * ((A - T) ** 2).sum(), rel=1e-12)
    delta = A - T
    np.testing.assert_allclose(c.G, -(X.T @ delta) / B, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(c.gb, delta.mean(axis=0), rtol=1e-12)


def test_a_denoised_analog_batch_left_no_entries_keeps_the_plain_bias():
    """A batch of analog data whose entries denoising all dropped (or, under MPI, with none in
    a rank's columns) stores no values, as Boolean data does: the bias must still be the
    analog path's, unscaled (spec 5.4), not q times it as for Boolean data. TrainData's batch
    says which inputs are analog."""
    from destiny.io.dataset import SparseDataset
    from destiny.train import TrainData

    net = network(DENOISED)
    (c,) = net.connections
    b, q = c.b.copy(), 2.0
    indptr, indices, values = csr(ROWS, VALUES)
    data = TrainData(net, {
        "in": SparseDataset("in", 5, indptr, indices, values.astype(np.float32)),
        "out": SparseDataset("out", 3, *csr(TARGETS)[:2])})
    none = np.zeros(0, np.int32)
    data.set_denoised({"Input": (np.zeros(4, np.int64), none, np.zeros(0, np.float32))})
    batch = data.batch(np.arange(3))
    assert len(batch.inputs["Input"][2]) == 0  # (no entry, no value)
    net.forward(batch, train=True, denoise={"Input": (batch.inputs["Input"], q)})
    np.testing.assert_allclose(net.activation("Output", 3), np.tile(b, (3, 1)), rtol=1e-12)


# -- a Skip from an Input layer (spec 3.16) ---------------------------------------------------

SKIP_INPUT = {"ErrorFunction": "L2", "Denoising": {"p": 0.5}, "Layers": [
    {"Name": "Input", "Kind": "Input", "N": 5, "DataSet": "in", "Sparse": True},
    {"Name": "Hidden", "Kind": "Hidden", "N": 3, "Activation": "Tanh"},
    {"Name": "Output", "Kind": "Output", "N": 5, "DataSet": "out", "Activation": "Sigmoid",
     "Skip": "Input"}]}


@pytest.mark.parametrize("denoised", [False, True], ids=["clean", "denoised"])
@pytest.mark.parametrize("analog", [False, True], ids=["boolean", "analog"])
def test_a_skip_from_the_input_layer_adds_the_input_as_its_products_see_it(analog, denoised):
    """The input's activations join the output's sum (spec 3.16): 1, or the value, at each
    listed feature, and q times the kept entries when denoised (3.9); the weights' gradients
    follow through the output's derivative, and no delta goes to the data."""
    net = network(SKIP_INPUT)
    into_hidden, into_output = net.connections
    B, q = len(ROWS), 2.0
    given = csr(ROWS, VALUES if analog else None)
    kept = csr(KEPT, KEPT_VALUES if analog else None)
    batch = Batch(size=B, inputs={"Input": given}, targets={"Output": csr(TARGETS)})
    net.forward(batch, train=denoised, denoise={"Input": (kept, q)} if denoised else None)
    loss = net.backward()

    if denoised:
        X = q * dense(KEPT, 5, KEPT_VALUES if analog else None)
        H = np.tanh(X @ into_hidden.W + (into_hidden.b if analog else q * into_hidden.b))
    else:
        X = dense(ROWS, 5, VALUES if analog else None)
        H = np.tanh(X @ into_hidden.W + into_hidden.b)
    A = sigmoid(H @ into_output.W + into_output.b + X)
    T = dense(TARGETS, 5)
    np.testing.assert_allclose(net.activation("Output", B), A, rtol=1e-12)
    assert loss == pytest.approx(0.5 * ((A - T) ** 2).sum(), rel=1e-12)
    delta = (A - T) * A * (1 - A)
    np.testing.assert_allclose(into_output.G, -(H.T @ delta) / B, rtol=1e-12, atol=1e-15)


def test_a_skip_from_the_input_layer_runs_alike_in_every_backend():
    """The cpu's network, float32, against the reference's: same forward, loss and update."""
    rng = np.random.default_rng(3)
    rows = [sorted(rng.choice(5, rng.integers(0, 4), replace=False)) for _ in range(6)]
    _cpu_step_is_the_reference_step(SKIP_INPUT, rows)


# The input joins both layers' sums and the output's product; the hidden layer its product
# and, through the output's Skip, its delta.
SKIPS_AND_SOURCES = {"ErrorFunction": "L2", "Denoising": {"p": 0.5}, "Layers": [
    {"Name": "Input", "Kind": "Input", "N": 5, "DataSet": "in", "Sparse": True},
    {"Name": "Hidden", "Kind": "Hidden", "N": 5, "Activation": "Tanh", "Skip": "Input"},
    {"Name": "Output", "Kind": "Output", "N": 5, "DataSet": "out", "Activation": "Sigmoid",
     "Source": ["Hidden", "Input"], "Skip": ["Input", "Hidden"]}]}


@pytest.mark.parametrize("analog", [False, True], ids=["boolean", "analog"])
def test_an_input_read_by_products_and_skips_of_two_layers_is_one_scaled_input(analog):
    """Each product and each skip of the denoised input reads q times its kept entries (spec
    3.9, 3.16): Boolean data's fast path also multiplies the biases of the input's products by
    q (quirk 10.18), not the other connection's. The output's delta reaches the hidden layer
    through its matrix and its skip; every gradient follows (spec 5.7)."""
    net = network(SKIPS_AND_SOURCES)
    into_hidden, hidden_out, input_out = net.connections
    assert (into_hidden.source.name, hidden_out.source.name, input_out.source.name) == \
        ("Input", "Hidden", "Input")
    B, q = len(ROWS), 2.0
    given = csr(ROWS, VALUES if analog else None)
    kept = csr(KEPT, KEPT_VALUES if analog else None)
    batch = Batch(size=B, inputs={"Input": given}, targets={"Output": csr(TARGETS)})
    net.forward(batch, train=True, denoise={"Input": (kept, q)})
    loss = net.backward()

    X = q * dense(KEPT, 5, KEPT_VALUES if analog else None)
    bias = 1.0 if analog else q  # (of the input's products)
    H = np.tanh(X @ into_hidden.W + bias * into_hidden.b + X)
    A = sigmoid(H @ hidden_out.W + hidden_out.b + X @ input_out.W + bias * input_out.b + X + H)
    T = dense(TARGETS, 5)
    np.testing.assert_allclose(net.activation("Hidden", B), H, rtol=1e-12)
    np.testing.assert_allclose(net.activation("Output", B), A, rtol=1e-12)
    assert loss == pytest.approx(0.5 * ((A - T) ** 2).sum(), rel=1e-12)
    delta = (A - T) * A * (1 - A)
    hidden_delta = (delta @ hidden_out.W.T + delta) * (1 - H ** 2)
    for c, x, d in ((hidden_out, H, delta), (input_out, X, delta),
                    (into_hidden, X, hidden_delta)):
        np.testing.assert_allclose(c.G, -(x.T @ d) / B, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(c.gb, d.mean(axis=0), rtol=1e-12, atol=1e-15)


def test_a_denoised_analog_input_is_scaled_once_per_step(monkeypatch):
    """The input's two products, two skips and two weight gradients read one copy of its kept
    values times q, made anew for each batch; a gradient left pending until ``update`` (the
    rows a lazy optimizer updates, from the second step on) holds that copy."""
    net = network(SKIPS_AND_SOURCES)
    opt = OptimizerConfig(mode=4, mu=0.9)  # RMSProp: lazy
    net.init_optimizer(opt)
    into_hidden, _, input_out = net.connections
    real, copies = net.backend.scale, []

    def scale(x, q):
        copies.append(x)
        real(x, q)

    monkeypatch.setattr(net.backend, "scale", scale)
    batch = Batch(size=len(ROWS), inputs={"Input": csr(ROWS, VALUES)},
                  targets={"Output": csr(TARGETS)})
    for t, values in enumerate((KEPT_VALUES, [[4.0, 0.25], [3.0], []], KEPT_VALUES), 1):
        copies.clear()
        net.forward(batch, train=True, denoise={"Input": (csr(KEPT, values), 2.0)})
        net.backward()
        (copy,) = copies
        np.testing.assert_array_equal(copy, 2.0 * csr(KEPT, values)[2])
        if t > 1:
            assert into_hidden.pending[2] is input_out.pending[2] is copy
        net.update(0.01, t, opt)
        assert copies == [copy]


def test_a_denoised_boolean_input_gives_its_gradients_one_array_of_q_per_step(monkeypatch):
    """Boolean data has no values: the input's two weight gradients read one array of q per
    kept entry, made anew for each batch (not one per connection per step); a gradient left
    pending until ``update`` (a lazy optimizer, from the second step on) holds that array."""
    net = network(SKIPS_AND_SOURCES)
    opt = OptimizerConfig(mode=4, mu=0.9)  # RMSProp: lazy
    net.init_optimizer(opt)
    into_hidden, _, input_out = net.connections
    real, filled = net.backend.fill, []

    def fill(out, value):
        if value == 2.0:
            filled.append(out)
        real(out, value)

    monkeypatch.setattr(net.backend, "fill", fill)
    batch = Batch(size=len(ROWS), inputs={"Input": csr(ROWS)}, targets={"Output": csr(TARGETS)})
    made = []
    for t, kept in enumerate((KEPT, [[1, 2], [0], [4]], KEPT), 1):
        filled.clear()
        net.forward(batch, train=True, denoise={"Input": (csr(kept), 2.0)})
        net.backward()
        (values,) = filled
        np.testing.assert_array_equal(values, np.full(len(csr(kept)[1]), 2.0))
        assert all(values is not earlier for earlier in made)
        made.append(values)
        if t > 1:
            assert into_hidden.pending[2] is input_out.pending[2] is values
        net.update(0.01, t, opt)
        assert filled == [values]


def test_an_input_read_by_products_and_skips_of_two_layers_runs_alike_in_every_backend():
    """The cpu's network, float32, against the reference's, denoised Boolean data: same
    forward, loss and update."""
    rng = np.random.default_rng(5)
    rows = [sorted(rng.choice(5, rng.integers(0, 4), replace=False)) for _ in range(6)]
    kept = [[i for i in r if rng.random() < 0.6] for r in rows]
    _cpu_step_is_the_reference_step(SKIPS_AND_SOURCES, rows, {"Input": (_f32(csr(kept)), 2.0)})


def _cpu_step_is_the_reference_step(definition, rows, denoise=None):
    """One training step of ``definition`` (float32, the batch ``rows`` as input and target)
    gives the reference's loss, output activations and weights on the cpu."""
    opt = OptimizerConfig(mode=4, mu=0.9)
    batch = Batch(size=len(rows), inputs={"Input": _f32(csr(rows))},
                  targets={"Output": _f32(csr(rows))})
    results = []
    for backend in ("reference", "cpu"):
        net = Network(parse_netdef(definition), get_backend(backend), dtype=np.float32)
        net.initialize(7)
        net.init_optimizer(opt)
        net.forward(batch, train=True, dropout_key=1, denoise=denoise)
        loss = net.backward()
        net.update(0.01, 1, opt)
        results.append((loss, net.to_host(net.activation("Output", len(rows))).copy(),
                        [net.to_host(c.W).copy() for c in net.connections]))
    (loss0, a0, w0), (loss1, a1, w1) = results
    assert loss1 == pytest.approx(loss0, rel=1e-5)
    np.testing.assert_allclose(a1, a0, rtol=1e-5, atol=1e-6)
    for x, y in zip(w0, w1, strict=True):
        np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-6)


def _f32(arrays):
    indptr, indices, values = arrays
    return indptr, indices, values.astype(np.float32)


# -- sparseness penalty (spec 3.10, quirk 10.15) ---------------------------------------------

def _penalized(top=None, layer=None, dropout=0.0, bias=None):
    hidden = {"Name": "Hidden", "Kind": "Hidden", "N": 6, "Activation": "Sigmoid",
              "Sparse": True, "pDropout": dropout}
    if layer is not None:
        hidden["SparsenessPenalty"] = layer
    d = {"ErrorFunction": "L2", "Layers": [
        {"Name": "Input", "Kind": "Input", "N": 7, "DataSet": "in", "Sparse": True}, hidden,
        {"Name": "Output", "Kind": "Output", "N": 4, "DataSet": "out", "Activation": "Sigmoid"}]}
    if top is not None:
        d["SparsenessPenalty"] = top
    net = network(d, seed=3)
    if bias is not None:
        net.connections[0].b[:] = bias
    return net


PENALTY_ROWS = [[0, 1, 5], [2, 6], [3, 4, 0], [1], [6, 2, 5, 3], [4, 0], [5], [1, 3]]


def _hidden_gradients(net, dropout_key=None):
    batch = Batch(size=len(PENALTY_ROWS), inputs={"Input": csr(PENALTY_ROWS)},
                  targets={"Output": csr([[r[0] % 4] for r in PENALTY_ROWS])})
    net.forward(batch, train=dropout_key is not None, dropout_key=dropout_key)
    net.backward()
    into_hidden = net.connections[0]
    return into_hidden.G.copy(), into_hidden.gb.copy()


@pytest.mark.parametrize("layer, same_as", [
    ({"p": 0.3}, {"p": 0.3, "beta": 2.0}),  # the layer's p, the global beta
    ({"beta": 0.5}, {"p": 0.05, "beta": 0.5}),  # the global p, the layer's beta
    ({"p": 0.3, "beta": 0.5}, {"p": 0.3, "beta": 0.5}),
])
def test_a_layers_penalty_values_replace_the_global_ones_where_set(layer, same_as):
    top = {"p": 0.05, "beta": 2.0}
    got = _hidden_gradients(_penalized(top, layer))
    expected = _hidden_gradients(_penalized(same_as))
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-15)
    plain = _hidden_gradients(_penalized(top))
    assert not np.allclose(got[1], plain[1])  # the layer's values did change something


def test_a_layers_penalty_does_nothing_without_a_global_beta():
    """Quirk 10.15: the penalty needs the global beta > 0, whatever the layer sets."""
    plain = _hidden_gradients(_penalized())
    for top in (None, {"p": 0.2}):
        got = _hidden_gradients(_penalized(top, {"p": 0.2, "beta": 3.0}))
        for g, e in zip(got, plain, strict=True):
            np.testing.assert_array_equal(g, e)
    assert not np.allclose(_hidden_gradients(_penalized({"p": 0.2, "beta": 3.0}))[1], plain[1])


def test_the_penalty_takes_the_mean_of_the_dropped_out_activations():
    """rho_j is the batch mean of the post-dropout activations (spec 3.10). With a bias of -8
    the sigmoid units sit near 0 and the dropped ones at 0.5, so the two means are far apart.
    The penalty is added to the delta before the activation derivative and the dropout mask:
    the hidden bias gradient changes by the batch mean of penalty_j * mask * a (1 - a)."""
    p, beta, key = 0.05, 1.0, 12345
    top = {"p": p, "beta": beta}
    plain = _penalized(dropout=0.5, bias=-8.0)
    penal = _penalized(top, dropout=0.5, bias=-8.0)
    _, gb_plain = _hidden_gradients(plain, key)
    _, gb_penal = _hidden_gradients(penal, key)

    c = penal.connections[0]
    a = sigmoid(dense(PENALTY_ROWS, 7) @ c.W + c.b)  # before dropout
    out = penal.activation("Hidden", len(PENALTY_ROWS))
    kept = out != 0.5  # a dropped sigmoid unit becomes 0.5 (spec 3.8)
    assert 0 < kept.sum() < kept.size
    np.testing.assert_allclose(out[kept], a[kept], rtol=1e-12)
    rho = np.clip(out.mean(axis=0), 1e-6, 0.999999)
    penalty = beta * (-f32(p) / rho + (1 - f32(p)) / (1 - rho))  # (float32, as parsed)
    np.testing.assert_allclose(gb_penal - gb_plain, (penalty * kept * a * (1 - a)).mean(axis=0),
                               rtol=1e-9, atol=1e-15)


# -- DeltaNorm (spec 3.13, 5.6) ------------------------------------------------------------

def _row_norm(d, limit):
    norms = np.sqrt((d ** 2).sum(axis=1, keepdims=True))
    return np.where(norms > limit, d * limit / norms, d)


def test_delta_norm_of_the_output_and_of_a_hidden_layer_after_its_derivative():
    """The output delta is normalized right after the loss; a hidden delta after the
    activation derivative, before its gradients are taken (spec 5.6)."""
    d = {"ErrorFunction": "L2", "Layers": [
        {"Name": "Input", "Kind": "Input", "N": 7, "DataSet": "in", "Sparse": True},
        {"Name": "Hidden", "Kind": "Hidden", "N": 5, "Activation": "Sigmoid", "DeltaNorm": 0.7},
        {"Name": "Output", "Kind": "Output", "N": 4, "DataSet": "out", "Activation": "Linear",
         "DeltaNorm": 1.5}]}
    net = network(d, seed=5, scale=1.5)
    (c1, c2), B = net.connections, len(PENALTY_ROWS)
    X, T = dense(PENALTY_ROWS, 7), dense([[r[0] % 4] for r in PENALTY_ROWS], 4)
    H = sigmoid(X @ c1.W + c1.b)
    d2_raw = H @ c2.W + c2.b - T
    d2 = _row_norm(d2_raw, 1.5)
    d1_raw = (d2 @ c2.W.T) * H * (1 - H)
    d1 = _row_norm(d1_raw, f32(0.7))  # (float32, as parsed)
    for raw, limit in ((d2_raw, 1.5), (d1_raw, 0.7)):  # some rows above the limit, some below
        norms = np.sqrt((raw ** 2).sum(axis=1))
        assert (norms > limit).any() and (norms < limit).any()
    _hidden_gradients(net)
    np.testing.assert_allclose(c2.gb, d2.mean(axis=0), rtol=1e-10)
    np.testing.assert_allclose(c2.G, -(H.T @ d2) / B, rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(c1.gb, d1.mean(axis=0), rtol=1e-10)
    np.testing.assert_allclose(c1.G, -(X.T @ d1) / B, rtol=1e-10, atol=1e-15)


# -- weight decay of the rows a batch does not touch (spec 5.8) ----------------------------

@pytest.mark.parametrize("mode", [0, 2, 4], ids=["sgd", "adagrad", "rmsprop"])
@pytest.mark.parametrize("lam, lam1", [(0.01, 0.0), (0.0, 0.01)], ids=["L2", "L1"])
def test_decay_moves_the_input_rows_no_batch_touches(mode, lam, lam1):
    """L2 and L1 act on every weight every step, rows of features absent from the batch
    included (spec 5.8): a row with a zero gradient moves as the mode moves g = -lam w -
    lam1 sgn(w) alone. Here, over two updates (the second one is where a sparse layer's rows
    could be left alone), features 3 and 4 are never in a batch."""
    d = {"ErrorFunction": "L2", "Layers": [
        {"Name": "Input", "Kind": "Input", "N": 5, "DataSet": "in", "Sparse": True},
        {"Name": "Output", "Kind": "Output", "N": 3, "DataSet": "out", "Activation": "Sigmoid"}]}
    net = network(d)
    opt = OptimizerConfig(mode=mode, lam=lam, lam1=lam1, mu=0.9)
    net.init_optimizer(opt)
    (c,) = net.connections
    w = c.W[3:].copy()
    v = np.zeros_like(w)  # AdaGrad's sum of squares, RMSProp's mean square
    alpha = 0.1
    for t, rows in enumerate(([[0, 1], [2]], [[1], [0, 2]]), start=1):
        net.forward(Batch(size=2, inputs={"Input": csr(rows)}, targets={"Output": csr([[0], [1]])}))
        net.backward()
        net.update(alpha, t, opt)
        g = -lam * w - lam1 * np.sign(w)
        if mode == 0:
            w = w + alpha * g
        else:
            v = (v + g * g) if mode == 2 else (0.9 * v + 0.1 * g * g)
            w = w + alpha * g / np.sqrt(np.maximum(1e-9, v))
        np.testing.assert_allclose(c.W[3:], w, rtol=1e-12)


# -- construction and forward order (spec 3.4, 3.7, 3.8) -----------------------------------

def _chain(order, dropout=0.0):
    layers = {
        "Input": {"Name": "Input", "Kind": "Input", "N": 7, "DataSet": "in", "Sparse": True},
        "H1": {"Name": "H1", "Kind": "Hidden", "N": 16, "Activation": "Sigmoid",
               "Source": "Input", "pDropout": dropout, "WeightInit": {"Bias": 0.25}},
        "H2": {"Name": "H2", "Kind": "Hidden", "N": 16, "Activation": "Sigmoid",
               "Source": "H1", "pDropout": dropout, "WeightInit": {"Bias": -0.5}},
        "Output": {"Name": "Output", "Kind": "Output", "N": 4, "DataSet": "out",
                   "Activation": "Sigmoid", "Source": "H2"}}
    return {"ErrorFunction": "L2", "Layers": [layers[name] for name in order]}


def test_layers_run_after_their_sources_whatever_order_the_file_lists_them_in():
    net = network(_chain(["Output", "H2", "Input", "H1"]), seed=5)
    B = len(PENALTY_ROWS)
    net.forward(Batch(size=B, inputs={"Input": csr(PENALTY_ROWS)}))
    c = {(c.source.name, c.dest.name): c for c in net.connections}
    a = dense(PENALTY_ROWS, 7)
    for source, dest in [("Input", "H1"), ("H1", "H2"), ("H2", "Output")]:
        a = sigmoid(a @ c[source, dest].W + c[source, dest].b)
    np.testing.assert_allclose(net.activation("Output", B), a, rtol=1e-12)


def test_initial_biases_are_each_layers_weight_init_bias():
    net = Network(parse_netdef(_chain(["Input", "H1", "H2", "Output"])), get_backend("reference"),
                  dtype=np.float64)
    net.initialize(1)
    assert [(c.dest.name, set(c.b.tolist())) for c in net.connections] == [
        ("H1", {0.25}), ("H2", {-0.5}), ("Output", {0.0})]


def test_each_layer_draws_its_own_dropout_mask():
    """Two layers of the same width under one batch key: the key mixes in the layer, so the
    units they drop differ (a dropped sigmoid unit is 0.5, spec 3.8)."""
    net = network(_chain(["Input", "H1", "H2", "Output"], dropout=0.5), seed=5)
    B = len(PENALTY_ROWS)
    net.forward(Batch(size=B, inputs={"Input": csr(PENALTY_ROWS)}), train=True, dropout_key=77)
    dropped = [net.activation(name, B) == 0.5 for name in ("H1", "H2")]
    assert 0 < dropped[0].sum() < dropped[0].size and 0 < dropped[1].sum() < dropped[1].size
    assert (dropped[0] != dropped[1]).any()


def test_a_hidden_layer_that_feeds_nothing_gets_no_gradient():
    d = {"ErrorFunction": "L2", "Layers": [
        {"Name": "Input", "Kind": "Input", "N": 7, "DataSet": "in", "Sparse": True},
        {"Name": "Dangling", "Kind": "Hidden", "N": 3, "Activation": "Sigmoid", "Source": "Input"},
        {"Name": "Output", "Kind": "Output", "N": 4, "DataSet": "out", "Activation": "Sigmoid",
         "Source": "Input"}]}
    net = network(d, seed=2)
    B = len(PENALTY_ROWS)
    batch = Batch(size=B, inputs={"Input": csr(PENALTY_ROWS)},
                  targets={"Output": csr([[r[0] % 4] for r in PENALTY_ROWS])})
    net.forward(batch)
    net._rows("Dangling", "dA", B)[...] = np.nan  # whatever the buffer held before
    net.backward()
    into = net.connections[0]
    assert into.dest.name == "Dangling"
    assert not into.G.any() and not into.gb.any()


def test_an_input_matrix_shared_with_a_dense_layer_is_updated_in_every_row():
    """A sparse input's matrix that another layer also reads (transposed) has a gradient in
    rows no batch lists: each SGD update is W += alpha * G over the whole matrix, not the
    lazy update of the listed rows."""
    d = {"ErrorFunction": "L2", "Layers": [
        {"Name": "Input", "Kind": "Input", "N": 7, "DataSet": "in", "Sparse": True},
        {"Name": "Hidden", "Kind": "Hidden", "N": 3, "Activation": "Sigmoid"},
        {"Name": "Output", "Kind": "Output", "N": 7, "DataSet": "out", "Activation": "Sigmoid",
         "SharedWeights": {"InputLayer": "Hidden", "SourceInputLayer": "Input",
                           "SourceOutputLayer": "Hidden", "Transposed": True}}]}
    net = Network(parse_netdef(d), get_backend("reference"), dtype=np.float64)
    net.initialize(4)
    opt = OptimizerConfig(mode=0, lam=0.0)  # SGD
    net.init_optimizer(opt)
    owner = net.connections[0]
    rows = [[0, 1], [1], [0]]  # features 2-6 never listed
    batch = Batch(size=3, inputs={"Input": csr(rows)}, targets={"Output": csr([[2], [5], [6]])})
    lam, lam1 = 0.1, 0.01  # the shared matrix counts once in the regularization error
    assert net.regularization_error(lam, lam1) == pytest.approx(
        0.5 * lam * (owner.W ** 2).sum() + lam1 * np.abs(owner.W).sum(), rel=1e-12)
    for t in (1, 2):
        net.forward(batch)
        net.backward()
        expected = owner.W + 0.5 * owner.G
        assert owner.G[2:].any()
        net.update(0.5, t, opt)
        np.testing.assert_array_equal(owner.W, expected)


def test_check_finite_names_the_first_layer_with_a_non_finite_weight_or_bias():
    net = network(_chain(["Input", "H1", "H2", "Output"]))
    assert net.check_finite() is None
    net.connections[2].b[1] = np.inf
    assert net.check_finite() == "Output"
    net.connections[1].W[0, 2] = np.nan
    assert net.check_finite() == "H2"
