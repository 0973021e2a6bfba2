"""One batch of a DSSTNE fully-connected network: forward, loss, backward, update.

No loop and no files here (``train.py`` and ``io/network_file.py`` own those). The graph is
DSSTNE's (spec 3.4, 5.3, 5.6): every (source, layer) pair is a ``Connection`` with its own
weight matrix [n_in, n_out] and bias; contributions of several sources and of skip layers
are summed; hidden deltas gather ``dZ @ W.T`` from every outgoing connection.

Conventions that come from DSSTNE: the stored weight gradient is negated and averaged,
``G = -(1 / (sharing * B)) * X.T @ dZ``, the bias gradient is ``mean(dZ)`` (spec 5.6, 5.7), and
the optimizer kernels apply both with spec 5.8's signs. Two DSSTNE defects are fixed here:
dropout keeps an explicit mask for the backward pass (quirk 10.17), and analog sparse inputs
use each entry's own value in the weight gradient (quirk 10.19).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from destiny.errors import NetDefError
from destiny.initialize import initial_weights
from destiny.netdef import LayerDef, LayerKind, NetworkDef

CSR = tuple  # (indptr int64, indices int32, values float32 or empty)


@dataclass
class Batch:
    """One minibatch: sparse inputs and targets by layer name, as CSR triples."""

    size: int
    inputs: dict[str, CSR]
    targets: dict[str, CSR] = field(default_factory=dict)


@dataclass
class OptimizerConfig:
    """Spec 5.8's hyper-parameters: mode (TrainingMode enum), lambda, lambda1, mu, mu1."""

    mode: int = 0
    lam: float = 0.0
    lam1: float = 0.0
    mu: float = 0.5
    mu1: float = 0.0


class Connection:
    """The weights from ``source`` into ``dest``; ``owner`` holds the matrix when shared."""

    def __init__(self, source: LayerDef, dest: LayerDef):
        self.source, self.dest = source, dest
        self.W: np.ndarray | None = None
        self.b: np.ndarray | None = None
        self.owner: Connection = self
        self.transposed = False
        self.sharing = 1  # connections using this matrix (DSSTNE's sharingCount)
        self.G: np.ndarray | None = None
        self.gb: np.ndarray | None = None
        self.state: list[np.ndarray] = []
        self.bias_state: list[np.ndarray] = []
        self.touched: np.ndarray | None = None  # rows of G written by a sparse gradient
        self._grad_fresh = False  # G already holds this batch's first contribution

    @property
    def shared(self) -> bool:
        return self.owner is not self

    def matrix(self) -> np.ndarray:
        """The [n_in, n_out] matrix this connection multiplies by (a view when transposed)."""
        return self.owner.W.T if self.transposed else self.owner.W


class Network:
    """A network built from a resolved ``NetworkDef`` (every N known), on one backend."""

    def __init__(self, netdef: NetworkDef, backend, *, dtype=np.float32):
        if not netdef.is_resolved:
            raise ValueError("resolve N: 'auto' against the datasets before building a network")
        self.netdef, self.backend, self.dtype = netdef, backend, np.dtype(dtype)
        self.layers = {layer.name: layer for layer in netdef.layers}
        self._check_supported()
        self.connections: list[Connection] = []
        self.incoming: dict[str, list[Connection]] = {n: [] for n in self.layers}
        self.outgoing: dict[str, list[Connection]] = {n: [] for n in self.layers}
        for layer in netdef.layers:
            for source in layer.sources:
                c = Connection(self.layers[source], layer)
                self.connections.append(c)
                self.incoming[layer.name].append(c)
                self.outgoing[source].append(c)
        self._share_weights()
        self.order = self._forward_order()
        self.inputs = [n for n in self.order if self.layers[n].kind == LayerKind.Input]
        self.outputs = [n for n in self.order if self.layers[n].kind == LayerKind.Output]
        self.skip_out: dict[str, list[str]] = {n: [] for n in self.layers}
        for layer in netdef.layers:
            for s in layer.skips:
                self.skip_out[s].append(layer.name)
        self._buffers: dict[str, dict[str, np.ndarray]] = {}
        self._capacity = 0

    # -- construction ---------------------------------------------------------------------

    def _check_supported(self) -> None:
        for i, layer in enumerate(self.netdef.layers):
            if layer.kind == LayerKind.Output and layer.p_dropout > 0:
                raise NetDefError(f"Layers[{i}].pDropout", "dropout on an Output layer is not "
                                  "supported (the loss would be taken on dropped-out units); "
                                  "remove it or move it to the last Hidden layer.")

    def _share_weights(self) -> None:
        by_pair = {(c.source.name, c.dest.name): c for c in self.connections}
        for c in self.connections:
            for share in c.dest.shared_weights:
                if share.input_layer != c.source.name:
                    continue
                owner = by_pair[(share.source_input_layer, share.source_output_layer)]
                c.owner, c.transposed = owner, share.transposed
                owner.sharing += 1

    def _forward_order(self) -> list[str]:
        """Layers by longest distance from an input (sources and skips count; spec 3.4)."""
        depth: dict[str, int] = {}

        def visit(name: str) -> int:
            if name not in depth:
                layer = self.layers[name]
                before = list(layer.sources) + list(layer.skips)
                depth[name] = 1 + max((visit(s) for s in before), default=-1)
            return depth[name]

        for name in self.layers:
            visit(name)
        position = {layer.name: i for i, layer in enumerate(self.netdef.layers)}
        return sorted(self.layers, key=lambda n: (depth[n], position[n]))

    def initialize(self, seed: int) -> None:
        """Draw every unshared matrix (spec 3.7), in creation order, from one generator."""
        rng = np.random.default_rng(seed)
        for c in self.connections:
            init = c.dest.weight_init
            if not c.shared:
                c.W = initial_weights(rng, init.scheme, init.scale, c.source.n, c.dest.n, self.dtype)
            c.b = np.full(c.dest.n, init.bias, dtype=self.dtype)
        self.allocate_gradients()

    def allocate_gradients(self) -> None:
        """Gradient buffers and optimizer state (zero), once the weights exist."""
        for c in self.connections:
            if not c.shared:
                c.G = np.zeros_like(c.W)
            c.gb = np.zeros_like(c.b)

    def parameters(self):
        """(name, array) of every trainable array, in a fixed order (files, checkpoints)."""
        for k, c in enumerate(self.connections):
            if not c.shared:
                yield f"weight{k}_weights", c.W
            yield f"weight{k}_bias", c.b

    # -- buffers --------------------------------------------------------------------------

    def _ensure_capacity(self, batch_size: int) -> None:
        if batch_size <= self._capacity:
            return
        self._capacity = batch_size
        for name, layer in self.layers.items():
            if layer.kind == LayerKind.Input:
                continue
            shape = (batch_size, layer.n)
            bufs = {"Z": np.empty(shape, self.dtype), "dZ": np.empty(shape, self.dtype),
                    "dA": np.empty(shape, self.dtype), "tmp": np.empty(shape, self.dtype)}
            if layer.p_dropout > 0:
                bufs["out"] = np.empty(shape, self.dtype)
                bufs["mask"] = np.empty(shape, self.dtype)
            self._buffers[name] = bufs

    def activation(self, name: str, batch_size: int) -> np.ndarray:
        """The (post-dropout) activations of a non-input layer for the last forward pass."""
        bufs = self._buffers[name]
        return bufs["out" if self._dropped.get(name) else "Z"][:batch_size]

    # -- forward --------------------------------------------------------------------------

    def forward(self, batch: Batch, *, train: bool = False, rng: np.random.Generator | None = None,
                denoise: dict[str, tuple[CSR, float]] | None = None) -> None:
        """Compute every layer's activations for ``batch``.

        ``train`` enables dropout (drawn from ``rng``); ``denoise`` maps an input layer to its
        denoised batch (kept entries only) and q = 1 / (1 - p) (spec 3.9, 5.4).
        """
        B = batch.size
        self._ensure_capacity(B)
        self._batch, self._denoise = batch, denoise or {}
        self._dropped: dict[str, bool] = {}
        kb = self.backend
        for name in self.order:
            layer = self.layers[name]
            if layer.kind == LayerKind.Input:
                continue
            bufs = self._buffers[name]
            Z = bufs["Z"][:B]
            for i, c in enumerate(self.incoming[name]):
                target = Z if i == 0 else bufs["tmp"][:B]
                self._contribution(target, c, B)
                if i:
                    Z += target
            for s in layer.skips:
                Z += self.activation(s, B)
            act = int(layer.activation)
            kb.activation_forward(Z, Z, act, layer.relu_slope, layer.elu_alpha, layer.selu_lambda)
            if train and layer.p_dropout > 0:
                r = rng.random((B, layer.n), dtype=self.dtype)
                kb.dropout_forward(bufs["out"][:B], bufs["mask"][:B], Z, r, layer.p_dropout, act,
                                   layer.elu_alpha, layer.selu_lambda)
                self._dropped[name] = True

    def _contribution(self, out: np.ndarray, c: Connection, B: int) -> None:
        """out = b + (input of c) @ W for one connection."""
        source = c.source
        if source.kind == LayerKind.Input:
            (indptr, indices, values), q = self._input_of(source.name)
            boolean = len(values) == 0
            if c.transposed:
                raise NetDefError(f"Layers[{c.dest.index}].SharedWeights", "a transposed shared "
                                  "matrix cannot read a sparse input layer.")
            self.backend.sparse_fc_forward(out, indptr, indices, values, c.matrix(), c.b)
            if q != 1.0 and boolean:
                out *= q  # DSSTNE's boolean fast path scales the bias by q too (quirk 10.18)
        else:
            np.matmul(self.activation(source.name, B), c.matrix(), out=out)
            out += c.b

    def _input_of(self, name: str) -> tuple[CSR, float]:
        """The batch of an input layer as the forward pass sees it, and q (1: no denoising)."""
        if name in self._denoise:
            (indptr, indices, values), q = self._denoise[name]
            if len(values) and q != 1.0:
                values = values * np.asarray(q, dtype=values.dtype)  # analog: q * v per entry
            return (indptr, indices, values), q
        return self._batch.inputs[name], 1.0

    # -- loss and backward ----------------------------------------------------------------

    def backward(self) -> float:
        """Output deltas and loss (summed over the batch), then every gradient."""
        B = self._batch.size
        kb, net = self.backend, self.netdef
        total = 0.0
        for name in reversed(self.order):
            layer = self.layers[name]
            if layer.kind == LayerKind.Input:
                continue
            bufs = self._buffers[name]
            dZ = bufs["dZ"][:B]
            act = int(layer.activation)
            if layer.kind == LayerKind.Output:
                indptr, indices, values = self._batch.targets[name]
                s, d = net.smce, net.delta_boost
                total += kb.sparse_loss_delta(
                    dZ, bufs["Z"][:B], indptr, indices, values, _EMPTY, int(net.error_function),
                    act, layer.relu_slope, layer.elu_alpha, layer.selu_lambda, s.one_target,
                    s.zero_target, s.one_scale, s.zero_scale, d.one, d.zero)
            else:
                dA = bufs["dA"][:B]
                self._gather_delta(dA, name, B)
                penalty = self._sparseness(layer)
                if penalty is not None:
                    kb.sparseness_penalty(dA, self.activation(name, B), *penalty)
                if self._dropped.get(name):
                    dA *= bufs["mask"][:B]
                kb.activation_backward(dZ, dA, bufs["Z"][:B], act, layer.relu_slope,
                                       layer.elu_alpha, layer.selu_lambda)
            if layer.delta_norm > 0:
                kb.delta_norm(dZ, layer.delta_norm)
            self._weight_gradients(name, dZ, B)
        return total

    def _gather_delta(self, dA: np.ndarray, name: str, B: int) -> None:
        """dA = sum over outgoing connections of dZ_dest @ W.T, plus skip-destination deltas."""
        first = True
        for c in self.outgoing[name]:
            dZ_dest = self._buffers[c.dest.name]["dZ"][:B]
            if first:
                np.matmul(dZ_dest, c.matrix().T, out=dA)
                first = False
            else:
                dA += dZ_dest @ c.matrix().T
        for dest in self.skip_out[name]:
            dZ_dest = self._buffers[dest]["dZ"][:B]
            if first:
                dA[:] = dZ_dest
                first = False
            else:
                dA += dZ_dest
        if first:
            dA[:] = 0.0

    def _sparseness(self, layer: LayerDef):
        """(p, beta) of the sparseness penalty, or None (spec 3.10, quirk 10.15)."""
        glob = self.netdef.sparseness_penalty
        if not layer.sparse or layer.kind != LayerKind.Hidden or glob.beta <= 0:
            return None
        own = layer.sparseness_penalty
        return (own.p if own.p > 0 else glob.p, own.beta if own.beta > 0 else glob.beta)

    def _weight_gradients(self, name: str, dZ: np.ndarray, B: int) -> None:
        beta = dZ.mean(axis=0, dtype=np.float64)  # every incoming bias gets it (spec 5.7)
        for c in self.incoming[name]:
            owner = c.owner
            scale = -1.0 / (owner.sharing * B)
            c.gb[:] = beta
            if c.source.kind == LayerKind.Input:
                (indptr, indices, values), q = self._input_of(c.source.name)
                if len(values) == 0 and q != 1.0:
                    values = np.full(len(indices), q, dtype=self.dtype)
                self.backend.sparse_fc_weight_grad(owner.G, indptr, indices, values, dZ, scale)
                owner.touched = indices
                continue
            X = self.activation(c.source.name, B)
            # Scale the [B, n_out] delta rather than the [n_in, n_out] product, and let BLAS
            # write G directly: no temporary of the matrix's size, one pass fewer over it.
            scaled = self._buffers[name]["tmp"][:B]
            np.multiply(dZ, scale, out=scaled)
            a, b = (scaled.T, X) if c.transposed else (X.T, scaled)
            if owner._grad_fresh:
                owner.G += a @ b
            else:
                np.matmul(a, b, out=owner.G)
                owner._grad_fresh = True

    # -- update ---------------------------------------------------------------------------

    def update(self, step: float, t: int, opt: OptimizerConfig) -> None:
        """Apply spec 5.8's update to every weight and bias; t counts updates from 1."""
        kb = self.backend
        for c in reversed(self.connections):  # DSSTNE updates in reverse creation order
            if not c.shared:
                kb.update_weights(c.W, c.G, *c.state, t, opt.mode, step, opt.lam, opt.lam1,
                                  opt.mu, opt.mu1)
                if c.dest.weight_norm > 0:
                    kb.weight_norm(c.W, c.dest.weight_norm)
            kb.update_bias(c.b, c.gb, *c.bias_state, t, opt.mode, step, opt.mu, opt.mu1)
        self.discard_gradients()  # G must be zero outside the next batch's sparse rows

    def discard_gradients(self) -> None:
        """Forget this batch's gradients without an update (a batch skipped by the brake)."""
        for c in self.connections:
            if c.touched is not None:
                c.G[np.unique(c.touched)] = 0.0
                c.touched = None
            c._grad_fresh = False

    def init_optimizer(self, opt: OptimizerConfig) -> None:
        """Zeroed optimizer state arrays for ``opt.mode`` (spec 5.8: velocities start at 0)."""
        n = self.backend.state_arrays_needed(opt.mode)
        for c in self.connections:
            c._grad_fresh = False
            if not c.shared:
                c.state = [np.zeros_like(c.W) for _ in range(n)] + [_EMPTY] * (2 - n)
            c.bias_state = [np.zeros_like(c.b) for _ in range(n)] + [_EMPTY] * (2 - n)

    def regularization_error(self, lam: float, lam1: float) -> float:
        """Sum over unshared matrices of 0.5 * lam * w^2 + lam1 * |w| (spec 5.2)."""
        if lam == 0 and lam1 == 0:
            return 0.0
        total = 0.0
        for c in self.connections:
            if not c.shared:
                w = c.W.astype(np.float64, copy=False)
                total += 0.5 * lam * float(np.dot(w.ravel(), w.ravel())) + lam1 * float(np.abs(w).sum())
        return total

    def check_finite(self) -> str | None:
        """The name of the first layer whose incoming weights hold NaN or inf, or None."""
        for c in self.connections:
            if (not c.shared and not np.isfinite(c.W).all()) or not np.isfinite(c.b).all():
                return c.dest.name
        return None


_EMPTY = np.zeros(0, dtype=np.float32)
