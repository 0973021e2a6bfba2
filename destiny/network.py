"""One batch of a DSSTNE fully-connected network: forward, loss, backward, update.

No loop and no files here (``train.py`` and ``io/network_file.py`` own those). The graph is
DSSTNE's (spec 3.4, 5.3, 5.6): every (source, layer) pair is a ``Connection`` with its own
weight matrix [n_in, n_out] and bias; contributions of several sources and of skip layers
(an input layer's: its batch entries, spec 3.16) are summed; hidden deltas gather
``dZ @ W.T`` from every outgoing connection.

Conventions that come from DSSTNE: the stored weight gradient is negated and averaged,
``G = -(1 / (sharing * B)) * X.T @ dZ``, the bias gradient is ``mean(dZ)`` (spec 5.6, 5.7), and
the optimizer kernels apply both with spec 5.8's signs. Two DSSTNE defects are fixed here:
dropout keeps an explicit mask for the backward pass (quirk 10.17), and analog sparse inputs
use each entry's own value in the weight gradient (quirk 10.19).

Every array operation goes through the backend (``kernels/*/dense.py``: products, adds,
masks, column means), so the same code runs on NumPy arrays and on device arrays; only the
loss (a number) comes back to the host per batch.

Under MPI every layer is split by units across the ranks (spec 7, ``destiny/shard.py``): the
buffers of a layer hold the rank's columns only, each connection holds the rows or the columns
of its matrix, and the products are joined by all-gathers and reduce-scatters; a SoftMax
layer's rows are normalized, and differentiated, over every rank's units, as DeltaNorm's row
norms and a ``ROWS`` matrix's WeightNorm column norms are taken (a few float64 numbers per row
or column travel, through the host). A connection that shares a matrix (spec 3.14) uses the
owner's block, which is the block it needs (``shard.check_splittable`` refuses the other
shares), and its gradient adds into the owner's. With one process (``Comm()``) every
connection is ``WHOLE`` and the code below calls no collective at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from destiny import shard
from destiny.errors import NetDefError
from destiny.initialize import initial_weights
from destiny.kernels.codes import CROSS_ENTROPY
from destiny.kernels.counter_rng import stream_key
from destiny.kernels.reference.optim import LAZY_MODES
from destiny.netdef import Activation, LayerDef, LayerKind, NetworkDef
from destiny.parallel import Comm, unit_counts, unit_range
from destiny.sparse import column_range

CSR = tuple  # (indptr int64, indices int32, values float32 or empty)


@dataclass
class Batch:
    """One minibatch: sparse inputs and targets by layer name, as CSR triples; ``ignore_zero``
    names the output layers whose targets are SparseIgnoreZero (spec 2.3, 5.5): only their
    listed entries count in the loss. ``analog`` names the input layers whose data is analog:
    a batch of it that lists no entries (all dropped by denoising, or none in a rank's columns)
    stores no values, as Boolean data does, and must not take the Boolean path's bias."""

    size: int
    inputs: dict[str, CSR]
    targets: dict[str, CSR] = field(default_factory=dict)
    ignore_zero: frozenset[str] = frozenset()
    analog: frozenset[str] = frozenset()


@dataclass
class OptimizerConfig:
    """Spec 5.8's hyper-parameters: mode (TrainingMode enum), lambda, lambda1, mu, mu1."""

    mode: int = 0
    lam: float = 0.0
    lam1: float = 0.0
    mu: float = 0.5
    mu1: float = 0.0


def rows_only_updates(opt: OptimizerConfig) -> bool:
    """Whether ``Network.update`` updates a sparse input's matrix in the rows of a batch's
    features only, its gradient left unwritten, after the first update (``update``): an
    optimizer that leaves a weight with a zero gradient as it is, without weight decay.
    Otherwise every batch writes the gradient's rows of the features it lists."""
    return opt.mode in LAZY_MODES and opt.lam == 0 and opt.lam1 == 0


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
        # The rows of G written by sparse gradients this batch: one index array per sparse
        # input using the matrix (inputs sharing one matrix each add theirs).
        self.touched: list = []
        # The update each row's optimizer state is up to date with, while rows lag behind
        # (lazy updates of a sparse layer, see Network.update); None when none does.
        self.current: np.ndarray | None = None
        # While rows lag behind, backward leaves the sparse gradient to the update, which
        # computes it where it updates the rows: (indptr, indices, values, delta, scale).
        self.pending: tuple | None = None
        self._grad_fresh = False  # G already holds this batch's first contribution
        # A dense product wrote all of G since it was last zero: a shared matrix that reads a
        # sparse input as well must be zeroed before a batch's sparse gradient comes first.
        self._dense_grad = False
        # The part of the whole [n_in, n_out] matrix this rank holds (all of it in one process).
        self.layout = shard.WHOLE
        self.rows = (0, source.n)
        self.cols = (0, dest.n)

    @property
    def shared(self) -> bool:
        return self.owner is not self


class Network:
    """A network built from a resolved ``NetworkDef`` (every N known), on one backend."""

    def __init__(self, netdef: NetworkDef, backend, *, dtype=np.float32, comm: Comm | None = None):
        if not netdef.is_resolved:
            raise ValueError("resolve N: 'auto' against the datasets before building a network")
        self.netdef, self.backend, self.dtype = netdef, backend, np.dtype(dtype)
        self.comm = comm or Comm()
        self._last_update = None  # (t, optimizer) of the last update, for settle_optimizer
        self.layers = {layer.name: layer for layer in netdef.layers}
        P = self.comm.size
        if P > 1:
            shard.check_splittable(netdef, P)
        # The units of each layer this rank holds, and how many every rank holds (spec 7).
        self.units = {n: unit_range(layer.n, self.comm.rank, P) for n, layer in self.layers.items()}
        self.counts = {n: unit_counts(layer.n, P) for n, layer in self.layers.items()}
        self.connections: list[Connection] = []
        self.incoming: dict[str, list[Connection]] = {n: [] for n in self.layers}
        self.outgoing: dict[str, list[Connection]] = {n: [] for n in self.layers}
        for layer in netdef.layers:
            for source in layer.sources:
                c = Connection(self.layers[source], layer)
                self.connections.append(c)
                self.incoming[layer.name].append(c)
                self.outgoing[source].append(c)
                c.layout = shard.layout(c.source.n, layer.n, P)
                if c.layout == shard.ROWS:
                    c.rows = self.units[source]
                elif c.layout == shard.COLS:
                    c.cols = self.units[layer.name]
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
        self._views: dict = {}  # (layer, buffer, batch size) -> that many rows of the buffer
        self._full: dict[str, np.ndarray] = {}  # all-gathered activations and deltas of a batch
        self._no_weights = backend.empty(0, self.dtype)  # the loss's per-example weights: none
        self._no_counts = backend.empty(0, np.int64)  # a split SoftMax loss's own counts

    # -- construction ---------------------------------------------------------------------

    def check_trainable(self) -> None:
        """Raise for what Destiny can predict with but not train: DSSTNE's networks may carry
        dropout on an Output layer, which plays no part in prediction."""
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
                if c.transposed and c.source.kind == LayerKind.Input:
                    # (refused here, as every rank builds the network, not in a forward pass)
                    raise NetDefError(f"Layers[{c.dest.index}].SharedWeights", "a transposed "
                                      "shared matrix cannot read a sparse input layer.")

    def _forward_order(self) -> list[str]:
        """Layers by longest distance from an input (sources and skips count; spec 3.4)."""
        depth: dict[str, int] = {}
        for top in self.layers:  # (without recursion: a file may chain a thousand layers)
            stack = [top]
            while stack:
                layer = self.layers[stack[-1]]
                before = [*layer.sources, *layer.skips]
                pending = [s for s in before if s not in depth]
                if pending:  # (the graph has no cycle: netdef.check_graph)
                    stack += pending
                    continue
                depth[stack.pop()] = 1 + max((depth[s] for s in before), default=-1)
        position = {layer.name: i for i, layer in enumerate(self.netdef.layers)}
        return sorted(self.layers, key=lambda n: (depth[n], position[n]))

    def initialize(self, seed: int) -> None:
        """Draw every unshared matrix (spec 3.7), in creation order, from one generator.

        Every rank draws every whole matrix and keeps its part, so the weights do not depend
        on the number of ranks.
        """
        rng = np.random.default_rng(seed)
        for c in self.connections:
            init = c.dest.weight_init
            if not c.shared:
                c.W = self.to_backend(initial_weights(rng, init.scheme, init.scale, c.source.n,
                                                      c.dest.n, self.dtype, rows=c.rows,
                                                      cols=c.cols))
            lo, hi = self.units[c.dest.name]
            c.b = self.to_backend(np.full(hi - lo, init.bias, dtype=self.dtype))
        self.allocate_gradients()

    def to_backend(self, array) -> object:
        """A host array as the backend holds it (the array itself on the CPU), in the
        network's dtype."""
        return self.backend.to_device(np.ascontiguousarray(array, dtype=self.dtype))

    def to_host(self, array) -> np.ndarray:
        """A backend array as a NumPy array (the array itself on the CPU)."""
        return self.backend.to_host(array)

    def allocate_gradients(self) -> None:
        """Gradient buffers and optimizer state (zero), once the weights exist."""
        for c in self.connections:
            if not c.shared:
                c.G = self.backend.zeros(c.W.shape, self.dtype)
            c.gb = self.backend.zeros(c.b.shape, self.dtype)

    def local_n(self, name: str) -> int:
        """How many units of layer ``name`` this rank holds."""
        lo, hi = self.units[name]
        return hi - lo

    def input_columns(self, name: str) -> tuple[int, int]:
        """The feature columns of input layer ``name`` this rank holds: its own units when
        every matrix out of the layer is split by rows, else all of them (a matrix split by
        rows beside one split otherwise reads its own share of them: ``_own_columns``)."""
        if all(c.layout == shard.ROWS for c in self.outgoing[name]):
            return self.units[name]
        return 0, self.layers[name].n

    def _reads_own_columns(self, c: Connection | None) -> bool:
        """Whether connection ``c`` out of an input layer reads this rank's own columns of a
        batch that holds all of them: a ``ROWS`` matrix beside one split otherwise (the
        input is split both ways, ``input_columns``); then ``_input_of`` filters them."""
        return (c is not None and c.layout == shard.ROWS
                and self.input_columns(c.source.name) != self.units[c.source.name])

    # -- buffers --------------------------------------------------------------------------

    def _ensure_capacity(self, batch_size: int) -> None:
        if batch_size <= self._capacity:
            return
        self._capacity = batch_size
        for name, layer in self.layers.items():
            if layer.kind == LayerKind.Input:
                continue
            shape = (batch_size, self.local_n(name))
            names = ["Z", "dZ", "dA", "tmp"] + (["out", "mask"] if layer.p_dropout > 0 else [])
            self._buffers[name] = {n: self.backend.empty(shape, self.dtype) for n in names}
        self._views = {}

    def _rows(self, name: str, buffer: str, batch_size: int):
        """The first ``batch_size`` rows of one of a layer's buffers, sliced once per batch size:
        on the GPU a slice is a new numba device array, which costs the host about 20 us."""
        key = (name, buffer, batch_size)
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = self._buffers[name][buffer][:batch_size]
        return view

    def activation(self, name: str, batch_size: int) -> np.ndarray:
        """The (post-dropout) activations of a non-input layer for the last forward pass."""
        return self._rows(name, "out" if self._dropped.get(name) else "Z", batch_size)

    def feeds_others(self, name: str) -> bool:
        """Whether another layer reads this layer's activations (as a source or a skip)."""
        return bool(self.outgoing[name] or self.skip_out[name])

    def pre_activations(self, name: str, batch_size: int) -> np.ndarray:
        """z of the layer of the last ``forward(..., pre_activation=name)``."""
        return self._rows(name, "Z", batch_size)

    # -- forward --------------------------------------------------------------------------

    def forward(self, batch: Batch, *, train: bool = False, dropout_key: int | None = None,
                denoise: dict[str, tuple[CSR, float]] | None = None,
                pre_activation: str | None = None) -> None:
        """Compute every layer's activations for ``batch``.

        ``train`` enables dropout, drawn by the counter-based generator under ``dropout_key``
        (one key per batch; each layer mixes in its index, so the mask of a unit does not
        depend on which rank holds it); ``denoise`` maps an input layer to its denoised batch
        (kept entries only) and q = 1 / (1 - p) (spec 3.9, 5.4). The layer named
        ``pre_activation``, which no other layer may read, keeps its pre-activations z
        (``pre_activations``): prediction's top-k applies the activation to a few units only.
        """
        if pre_activation is not None and self.feeds_others(pre_activation):
            raise ValueError(f"layer {pre_activation!r} feeds other layers: its activations "
                             "are needed")
        B = batch.size
        self._ensure_capacity(B)
        self._batch, self._denoise = batch, denoise or {}
        self._inputs: dict = {}  # _input_of's and _gradient_input's, for this batch
        self._dropped: dict[str, bool] = {}
        self._full = {}
        kb = self.backend
        for name in self.order:
            layer = self.layers[name]
            if layer.kind == LayerKind.Input:
                continue
            Z = self._rows(name, "Z", B)
            incoming = self.incoming[name]
            bias = None
            if (len(incoming) == 1 and not layer.skips and name != pre_activation
                    and incoming[0].layout != shard.ROWS
                    and incoming[0].source.kind != LayerKind.Input):
                # One dense product: its bias goes into the activation's first pass (the same
                # sums; one pass over the batch fewer).
                self._contribution(Z, incoming[0], B, bias=False)
                bias = incoming[0].b
            else:
                self._sum_contributions(Z, name, B)
            for s in layer.skips:
                if self.layers[s].kind == LayerKind.Input:
                    self._add_input(Z, s, name)
                else:
                    kb.add(Z, self.activation(s, B))
            if name == pre_activation:
                continue
            act = int(layer.activation)
            if self._split_softmax(layer):
                self._softmax_forward(Z, B, bias)
                if train and layer.p_dropout > 0:
                    kb.dropout_forward(self._rows(name, "out", B), self._rows(name, "mask", B), Z,
                                       stream_key(dropout_key, layer.index), 0,
                                       self.units[name][0], layer.p_dropout, act,
                                       layer.elu_alpha, layer.selu_lambda)
                    self._dropped[name] = True
            elif train and layer.p_dropout > 0:
                # Z keeps the activations (the backward pass reads its derivative from them),
                # "out" the dropped-out ones; unit j of this rank draws as unit j of the layer.
                kb.activation_dropout_forward(
                    self._rows(name, "out", B), self._rows(name, "mask", B), Z, Z, act,
                    layer.relu_slope, layer.elu_alpha, layer.selu_lambda, bias,
                    stream_key(dropout_key, layer.index), 0, self.units[name][0], layer.p_dropout)
                self._dropped[name] = True
            else:
                kb.activation_forward(Z, Z, act, layer.relu_slope, layer.elu_alpha,
                                      layer.selu_lambda, bias)

    # -- a SoftMax layer split across ranks ------------------------------------------------
    #
    # A SoftMax row is normalized over all its units, which the ranks share (spec 3.6, 7).
    # DSSTNE normalized each GPU's slice alone, so its numbers changed with the number of GPUs;
    # here each rank reduces its units of every row to a few numbers per row, the ranks add
    # them up, and each finishes its units with the whole row's: one process's numbers, summed
    # in another order. Only B x 2 numbers per rank travel, never a row.

    def _split_softmax(self, layer: LayerDef) -> bool:
        return self.comm.size > 1 and layer.activation == Activation.SoftMax

    def _softmax_forward(self, Z, B: int, bias) -> None:
        """Z = SoftMax(Z + bias) over the whole rows of a split layer, in place.

        Each rank's (max, sum of exp(z - max)) per row are all-gathered in one collective
        (rather than an all-reduce of the maxima, then one of the sums: two round trips) and
        combined by ``softmax_row_stats`` on every rank alike.
        """
        kb = self.backend
        if bias is not None:
            kb.add_bias(Z, bias)  # (as activation_forward adds it: in Z's precision)
        stats = kb.empty((B, 2), np.float64)
        kb.softmax_forward_partials(stats, Z)
        parts = self.comm.allgather_columns(self.to_host(stats), [2] * self.comm.size)
        whole = kb.to_device(softmax_row_stats(parts))
        kb.softmax_forward_finish(Z, Z, whole)

    def _softmax_backward(self, dZ, dA, name: str, B: int, mask) -> None:
        """dZ = the SoftMax Jacobian's product with dA over the whole rows of a split layer."""
        kb = self.backend
        a = self._rows(name, "Z", B)
        dots = kb.empty(B, np.float64)
        kb.softmax_backward_partials(dots, dA, a, mask)
        kb.softmax_backward_finish(dZ, dA, a, self._summed_over_ranks(dots), mask)

    def _softmax_loss(self, dZ, name: str, B: int):
        """The loss and output delta of a split SoftMax output layer (``sparse_loss_delta``'s):
        this rank's error, and its units' deltas from the whole rows' sums of pre-deltas."""
        kb, net = self.backend, self.netdef
        indptr, indices, values = self._batch.targets[name]
        err_fn = int(net.error_function)
        counts = self._no_counts
        if err_fn == CROSS_ENTROPY:
            # SoftMax CrossEntropy's listed targets are 1/n, n counted over the whole row
            # (spec 5.5): each rank holds the targets of its own units only.
            mine = np.diff(self.to_host(indptr)).astype(np.float64)
            counts = kb.to_device(np.rint(self.comm.allreduce_sum(mine)).astype(np.int64))
        s, d = net.smce, net.delta_boost
        args = (self._rows(name, "Z", B), indptr, indices, values, self._no_weights, counts,
                err_fn, s.one_target, s.zero_target, s.one_scale, s.zero_scale, d.one, d.zero,
                name in self._batch.ignore_zero)
        sums = kb.empty(B, np.float64)
        error = kb.softmax_loss_partials(dZ, sums, *args)
        kb.softmax_loss_finish(dZ, self._summed_over_ranks(sums), *args)
        return error

    def _summed_over_ranks(self, partial):
        """A rank's float64 sums over its own units (per row, or per column of a ``ROWS``
        matrix) added up over the ranks: the whole rows' or columns', on the device."""
        return self.backend.to_device(self.comm.allreduce_sum(self.to_host(partial)))

    def _sum_contributions(self, Z: np.ndarray, name: str, B: int) -> None:
        """Z = the sum over incoming connections of b + X @ W (this rank's columns of it).

        Connections split by rows yield partial sums over all the layer's units; they are
        added up first and reduce-scattered once (spec 7), then their biases are added.
        """
        kb = self.backend
        first, partial, row_biases = True, None, []
        for c in self.incoming[name]:
            if c.layout == shard.ROWS:
                product, q = self._partial_product(c, B)
                if partial is None:
                    partial = product
                else:
                    kb.add(partial, product)
                row_biases.append((c.b, q))
                continue
            target = Z if first else self._rows(name, "tmp", B)
            self._contribution(target, c, B)
            if not first:
                kb.add(Z, target)
            first = False
        if partial is not None:
            mine = self._reduce_scatter(partial, name)
            if first:
                kb.copy(Z, mine)
            else:
                kb.add(Z, mine)
            for b, q in row_biases:
                kb.add_bias(Z, b, q)

    def _contribution(self, out: np.ndarray, c: Connection, B: int, bias: bool = True) -> None:
        """out = b + (input of c) @ W for one connection (whole, or split by columns); without
        ``bias`` the product alone (for a source that is not an input layer)."""
        source = c.source
        if source.kind == LayerKind.Input:
            (indptr, indices, values), q = self._input_of(source.name)
            self.backend.sparse_fc_forward(out, indptr, indices, values, c.owner.W, c.b)
            if q != 1.0 and self._boolean(source.name, values):
                self.backend.scale(out, q)  # DSSTNE's boolean fast path scales the bias too
                #                             (quirk 10.18)
        else:
            self.backend.gemm(out, self._source_activation(c, B), c.owner.W,
                              trans_b=c.transposed)
            if bias:
                self.backend.add_bias(out, c.b)

    def _add_input(self, Z: np.ndarray, source: str, dest: str) -> None:
        """Z += the activations of input layer ``source``, a Skip of layer ``dest`` (spec
        3.16): its batch entries (1 for Boolean data), as its products read them, denoised
        and scaled by q (spec 3.9), in this rank's columns of ``dest``, which are the input's
        own (a skip joins layers of one size, split alike); no delta flows back to data."""
        (indptr, indices, values), q = self._input_of(source)
        offset = self.units[dest][0] - self.input_columns(source)[0]
        self.backend.sparse_add(Z, indptr, indices, values,
                                q if self._boolean(source, values) else 1.0, offset)

    def _partial_product(self, c: Connection, B: int) -> tuple[np.ndarray, float]:
        """(input rows of this rank) @ (their rows of W): [B, all units of c.dest], and the
        factor q the bias takes (the boolean denoising fast path, quirk 10.18). A shared
        matrix's rows are the owner's block (transposed for a transposed share: its columns,
        ``shard.check_splittable``)."""
        kb = self.backend
        out = kb.empty((B, c.dest.n), self.dtype)
        if c.source.kind == LayerKind.Input:
            (indptr, indices, values), q = self._input_of(c.source.name, c)
            kb.sparse_fc_forward(out, indptr, indices, values, c.owner.W,
                                 kb.zeros(c.dest.n, self.dtype))
            if q != 1.0 and self._boolean(c.source.name, values):
                kb.scale(out, q)
                return out, q
            return out, 1.0
        kb.gemm(out, self.activation(c.source.name, B), c.owner.W, trans_b=c.transposed)
        return out, 1.0

    def _source_activation(self, c: Connection, B: int) -> np.ndarray:
        """The activations c multiplies: all units of the source when c is split by columns."""
        if c.layout != shard.COLS:
            return self.activation(c.source.name, B)
        key = ("A", c.source.name)
        if key not in self._full:
            self._full[key] = self._allgather(self.activation(c.source.name, B), c.source.name)
        return self._full[key]

    def _full_delta(self, name: str, B: int) -> np.ndarray:
        """dZ of layer ``name`` over all its units (all-gathered once per batch)."""
        key = ("dZ", name)
        if key not in self._full:
            self._full[key] = self._allgather(self._rows(name, "dZ", B), name)
        return self._full[key]

    # The collectives of a split network. MPI reads and writes host memory: a device backend's
    # arrays go through the host (a CUDA-aware MPI could take them directly).

    def _allgather(self, local, name: str):
        full = self.comm.allgather_columns(self.to_host(local), self.counts[name])
        return self.backend.to_device(np.ascontiguousarray(full))

    def _reduce_scatter(self, partial, name: str):
        mine = self.comm.reduce_scatter_columns(self.to_host(partial), self.counts[name])
        return self.backend.to_device(np.ascontiguousarray(mine))

    def _input_of(self, name: str, c: Connection | None = None) -> tuple[CSR, float]:
        """The batch of an input layer as the forward pass sees it, and q (1: no denoising);
        as connection ``c`` reads it where that is this rank's own columns of a batch holding
        all of them (``_reads_own_columns``).

        Made once per batch: every product, skip and weight gradient of the layer reads the
        same arrays. The analog denoised values scaled by q are a copy, which stays alive
        until the next ``forward`` (a gradient left pending for ``update`` reads it).
        """
        if self._reads_own_columns(c):
            return self._own_columns(name)
        found = self._inputs.get(name)
        if found is not None:
            return found
        if name in self._denoise:
            (indptr, indices, values), q = self._denoise[name]
            if len(values) and q != 1.0:
                scaled = self.backend.empty(len(values), values.dtype)  # analog: q * v per entry
                self.backend.copy(scaled.reshape(1, -1), values.reshape(1, -1))
                self.backend.scale(scaled, q)
                values = scaled
            found = (indptr, indices, values), q
        else:
            found = self._batch.inputs[name], 1.0
        self._inputs[name] = found
        return found

    def _boolean(self, name: str, values) -> bool:
        """Whether input layer ``name``'s batch, whose values are ``values``, is Boolean data:
        it stores no values, and its layer is not one ``Batch.analog`` names (an analog batch
        that lists no entries stores none either, and keeps the analog path: spec 5.4)."""
        return len(values) == 0 and name not in self._batch.analog

    def _own_columns(self, name: str) -> tuple[CSR, float]:
        """``_input_of(name)``'s batch, denoised and scaled alike, in this rank's own columns
        of the input only, their indices re-based to them (``_columns``'s shard): what a
        ``ROWS`` matrix beside one split otherwise reads. Made once per batch.

        Filtered on the host from the batch that holds all columns, rather than holding a
        second copy of the data (and of each epoch's denoised data) in these columns alone: a
        batch's entries are a few bytes each, fewer than the activations that the split
        network's collectives take through the host every step anyway, and the filter is one
        pass over them (``column_range``); the cpu's arrays are the host's, not copied."""
        key = ("own", name)
        found = self._inputs.get(key)
        if found is None:
            (indptr, indices, values), q = self._input_of(name)
            kb = self.backend
            own = column_range(kb.to_host(indptr), kb.to_host(indices), kb.to_host(values),
                               *self.units[name])
            found = self._inputs[key] = (tuple(kb.to_device(np.ascontiguousarray(a))
                                               for a in own), q)
        return found

    def _gradient_input(self, name: str, c: Connection | None = None) -> CSR:
        """The batch of an input layer as its weight gradients read it (as connection ``c``
        reads it, ``_input_of``): ``_input_of``'s, but denoised Boolean data's entries count
        q each, an array of q made once per batch (kept alive, as ``_input_of``'s copies are,
        by a gradient left pending for ``update``)."""
        key = ("gradient", name, self._reads_own_columns(c))
        found = self._inputs.get(key)
        if found is None:
            (indptr, indices, values), q = self._input_of(name, c)
            if self._boolean(name, values) and q != 1.0:
                values = self.backend.empty(len(indices), self.dtype)
                self.backend.fill(values, q)
            found = self._inputs[key] = (indptr, indices, values)
        return found

    # -- loss and backward ----------------------------------------------------------------

    def backward(self) -> float:
        """Output deltas and loss (summed over the batch and every rank), then every gradient
        (but a sparse layer's whose rows lag behind: `update` computes that one)."""
        B = self._batch.size
        kb, net = self.backend, self.netdef
        errors = []  # read once everything is queued: on a GPU, reading one waits for it
        for name in reversed(self.order):
            layer = self.layers[name]
            if layer.kind == LayerKind.Input:
                continue
            dZ = self._rows(name, "dZ", B)
            act = int(layer.activation)
            if layer.kind == LayerKind.Output and self._split_softmax(layer):
                errors.append(self._softmax_loss(dZ, name, B))
            elif layer.kind == LayerKind.Output:
                indptr, indices, values = self._batch.targets[name]
                s, d = net.smce, net.delta_boost
                errors.append(kb.sparse_loss_delta(
                    dZ, self._rows(name, "Z", B), indptr, indices, values, self._no_weights,
                    int(net.error_function),
                    act, layer.relu_slope, layer.elu_alpha, layer.selu_lambda, s.one_target,
                    s.zero_target, s.one_scale, s.zero_scale, d.one, d.zero,
                    name in self._batch.ignore_zero))
            else:
                dA = self._rows(name, "dA", B)
                self._gather_delta(dA, name, B)
                penalty = self._sparseness(layer)
                if penalty is not None:
                    kb.sparseness_penalty(dA, self.activation(name, B), *penalty)
                mask = self._rows(name, "mask", B) if self._dropped.get(name) else None
                if self._split_softmax(layer):
                    self._softmax_backward(dZ, dA, name, B, mask)
                else:
                    kb.activation_backward(dZ, dA, self._rows(name, "Z", B), act,
                                           layer.relu_slope, layer.elu_alpha,
                                           layer.selu_lambda, mask)
            if layer.delta_norm > 0:
                self._delta_norm(dZ, B, layer.delta_norm)
            self._weight_gradients(name, dZ, B)
        total = sum(float(e) for e in errors)
        return self.comm.allreduce_sum(total)  # each rank has the loss of its output units

    def _gather_delta(self, dA: np.ndarray, name: str, B: int) -> None:
        """dA = sum over outgoing connections of dZ_dest @ W.T, plus skip-destination deltas.

        Connections split by columns give partial sums over all of this layer's units, added
        up and reduce-scattered once; those split by rows use the all-gathered dZ_dest. W is
        the owner's matrix, or its transpose for a transposed shared one.
        """
        kb = self.backend
        first, partial = True, None
        for c in self.outgoing[name]:
            if c.layout == shard.COLS:
                dZ_dest = self._rows(c.dest.name, "dZ", B)
                if partial is None:
                    partial = kb.empty((B, self.layers[name].n), self.dtype)
                    kb.gemm(partial, dZ_dest, c.owner.W, trans_b=not c.transposed)
                else:
                    kb.gemm(partial, dZ_dest, c.owner.W, trans_b=not c.transposed, beta=1.0)
                continue
            dZ_dest = (self._full_delta(c.dest.name, B) if c.layout == shard.ROWS
                       else self._rows(c.dest.name, "dZ", B))
            # dZ_dest @ matrix.T, where matrix is W, or W.T for a transposed shared matrix
            kb.gemm(dA, dZ_dest, c.owner.W, trans_b=not c.transposed, beta=0.0 if first else 1.0)
            first = False
        for dest in self.skip_out[name]:
            dZ_dest = self._rows(dest, "dZ", B)
            if first:
                kb.copy(dA, dZ_dest)
                first = False
            else:
                kb.add(dA, dZ_dest)
        if partial is not None:
            mine = self._reduce_scatter(partial, name)
            if first:
                kb.copy(dA, mine)
                first = False
            else:
                kb.add(dA, mine)
        if first:
            kb.fill(dA, 0.0)

    def _sparseness(self, layer: LayerDef):
        """(p, beta) of the sparseness penalty, or None (spec 3.10, quirk 10.15)."""
        glob = self.netdef.sparseness_penalty
        if not layer.sparse or layer.kind != LayerKind.Hidden or glob.beta <= 0:
            return None
        own = layer.sparseness_penalty
        return (own.p if own.p > 0 else glob.p, own.beta if own.beta > 0 else glob.beta)

    def _weight_gradients(self, name: str, dZ, B: int) -> None:
        kb = self.backend
        for i, c in enumerate(self.incoming[name]):
            owner = c.owner
            scale = -1.0 / (owner.sharing * B)
            if i == 0:  # every incoming bias gets the same mean delta (spec 5.7)
                kb.column_mean(c.gb, dZ)
            else:
                kb.copy(c.gb.reshape(1, -1), self.incoming[name][0].gb.reshape(1, -1))
            delta = self._full_delta(name, B) if c.layout == shard.ROWS else dZ
            if c.source.kind == LayerKind.Input:
                indptr, indices, values = self._gradient_input(c.source.name, c)
                if owner.current is not None and owner.sharing == 1:
                    owner.pending = (indptr, indices, values, delta, scale)  # see update
                else:
                    # The sparse gradient adds into G, zero outside the rows of the last
                    # batch's sparse gradients (discard_gradients), unless a dense product
                    # of a connection sharing the matrix wrote all of it: then zero it when
                    # this batch's first contribution is this one (its dense user comes
                    # earlier in the forward order), and have that product add to it.
                    if not owner._grad_fresh and owner._dense_grad:
                        kb.fill(owner.G, 0.0)
                        owner._dense_grad = False
                    kb.sparse_fc_weight_grad(owner.G, indptr, indices, values, delta, scale)
                    owner._grad_fresh = True
                owner.touched.append(indices)
                continue
            X = self._source_activation(c, B)
            # G (+)= scale * X.T @ delta, or its transpose for a transposed shared matrix;
            # BLAS writes G directly: no temporary of the matrix's size.
            a, b = (delta, X) if c.transposed else (X, delta)
            kb.gemm(owner.G, a, b, trans_a=True, alpha=scale,
                    beta=1.0 if owner._grad_fresh else 0.0)
            owner._grad_fresh = owner._dense_grad = True

    # -- update ---------------------------------------------------------------------------

    def update(self, step: float, t: int, opt: OptimizerConfig) -> None:
        """Apply spec 5.8's update to every weight and bias; t counts updates from 1.

        A sparse input layer's matrix has a gradient only in the rows of the batch's features.
        Where the optimizer leaves a weight with a zero gradient as it is (``LAZY_MODES``, no
        weight decay), only those rows are updated; the decay that the skipped updates make to
        the other rows' state (RMSProp, AdaDelta) is applied when a row next has a gradient, or
        by `settle_optimizer` before the state is read. WeightNorm then rescales the whole
        matrix, as after a dense update (the other rows are the same either way). Same numbers,
        bit for bit, as updating every row; a fraction of the memory traffic.

        While rows lag behind, ``backward`` leaves such a layer's gradient pending and it is
        computed here, with the update (``sparse_grad_update_rows``: on the GPU each thread
        sums one weight's gradient and updates the weight, and G's rows are never written);
        where the update takes another path, the gradient is computed into G first.
        """
        kb = self.backend
        lazy = rows_only_updates(opt)
        for c in reversed(self.connections):  # DSSTNE updates in reverse creation order
            if not c.shared:
                rows_only = lazy and len(c.touched) == 1 and c.sharing == 1
                if rows_only and c.current is not None:  # backward left the gradient pending
                    kb.sparse_grad_update_rows(c.W, c.G, *c.state, c.current, *c.pending, t,
                                               opt.mode, step, opt.mu)
                    c.touched, c.pending = [], None
                else:
                    self._compute_pending(c)
                    self._catch_up(c, t - 1)
                    kb.update_weights(c.W, c.G, *c.state, t, opt.mode, step, opt.lam,
                                      opt.lam1, opt.mu, opt.mu1)
                    if rows_only:
                        # The first update after initializing or loading is dense: it turns
                        # the -0.0 weights of gradient-free rows (a Constant 0 init draws
                        # -0.0) into +0.0 as every dense update would, and no update makes a
                        # -0.0 again; from here on, leaving those rows alone changes no bit.
                        c.current = kb.to_device(np.full(c.W.shape[0], t, np.int64))
                if c.dest.weight_norm > 0:
                    self._weight_norm(c)
            kb.update_bias(c.b, c.gb, *c.bias_state, t, opt.mode, step, opt.mu, opt.mu1)
        self._last_update = (t, opt)
        self.discard_gradients()  # G must be zero outside the next batch's sparse rows

    def _delta_norm(self, dZ, B: int, limit: float) -> None:
        """DeltaNorm (spec 3.13) of a layer's rows ``dZ``. Under MPI each row's norm is over
        every rank's units: the ranks' sums of squares are added up (B float64 numbers), as
        for a SoftMax row; one process needs none."""
        kb = self.backend
        if self.comm.size == 1:
            kb.delta_norm(dZ, limit)
            return
        sums = kb.empty(B, np.float64)
        kb.delta_norm_partials(sums, dZ)
        kb.delta_norm_finish(dZ, self._summed_over_ranks(sums), limit)

    def _weight_norm(self, c: Connection) -> None:
        """WeightNorm (spec 3.13) of ``c``'s matrix. A rank holding its rows of every column
        (``shard.ROWS``) has part of each column: the ranks' sums of squares are added up
        (n_out float64 numbers); one holding whole columns, or one process, needs none."""
        kb = self.backend
        if c.layout != shard.ROWS:
            kb.weight_norm(c.W, c.dest.weight_norm)
            return
        sums = kb.empty(c.W.shape[1], np.float64)
        kb.weight_norm_partials(sums, c.W)
        kb.weight_norm_finish(c.W, self._summed_over_ranks(sums), c.dest.weight_norm)

    def _compute_pending(self, c: Connection) -> None:
        if c.pending is not None:
            self.backend.sparse_fc_weight_grad(c.G, *c.pending)
            c.pending = None

    def _catch_up(self, c: Connection, t: int) -> None:
        if c.current is not None:
            _, opt = self._last_update
            self.backend.catch_up_rows(*c.state, c.current, t, opt.mode, opt.mu)
            c.current = None

    def settle_optimizer(self) -> None:
        """Bring the optimizer state of every row up to date (before it is saved)."""
        if self._last_update is not None:
            for c in self.connections:
                self._catch_up(c, self._last_update[0])

    def discard_gradients(self) -> None:
        """Forget this batch's gradients without an update (a batch skipped by the brake)."""
        for c in self.connections:
            if c.pending is None:  # (a pending gradient never reached G)
                for rows in c.touched:
                    self.backend.zero_rows(c.G, rows)
            c.touched, c.pending = [], None
            c._grad_fresh = False

    def init_optimizer(self, opt: OptimizerConfig) -> None:
        """Zeroed optimizer state arrays for ``opt.mode`` (spec 5.8: velocities start at 0)."""
        kb = self.backend
        n = kb.state_arrays_needed(opt.mode)
        unused = [kb.empty(0, self.dtype)] * (2 - n)
        self._last_update = None
        for c in self.connections:
            c._grad_fresh = False
            c.current = None
            c.pending = None
            if not c.shared:
                c.state = [kb.zeros(c.W.shape, self.dtype) for _ in range(n)] + unused
            c.bias_state = [kb.zeros(c.b.shape, self.dtype) for _ in range(n)] + unused

    def regularization_error(self, lam: float, lam1: float) -> float:
        """Sum over unshared matrices of 0.5 * lam * w^2 + lam1 * |w| (spec 5.2)."""
        if lam == 0 and lam1 == 0:
            return 0.0
        kb, total = self.backend, 0.0
        for c in self.connections:
            if not c.shared:
                total += 0.5 * lam * kb.sum_squares(c.W) + (lam1 * kb.abs_sum(c.W) if lam1 else 0.0)
        return self.comm.allreduce_sum(total)

    def check_finite(self) -> str | None:
        """The name of the first layer whose incoming weights or biases hold NaN or inf, or
        None."""
        kb = self.backend
        bad = next((k for k, c in enumerate(self.connections)
                    if (not c.shared and not kb.all_finite(c.W)) or not kb.all_finite(c.b)), None)
        if self.comm.size > 1:  # every rank must give the same answer
            found = [k for k in self.comm.allgather(bad) if k is not None]
            bad = min(found) if found else None
        return None if bad is None else self.connections[bad].dest.name


def softmax_row_stats(parts: np.ndarray) -> np.ndarray:
    """The whole rows' (M, S) [B, 2] from the ranks' ``softmax_forward_partials`` side by side
    ([B, 2P]: each rank's maximum m and sum s of exp(z - m)): M = max m, S = sum s exp(m - M).

    A rank whose units of a row are all -inf (m = -inf; its s, exp(-inf - -inf) summed, is NaN)
    adds nothing, as those units add exp(-inf) = 0 in one process; a row all -inf has S = 0 and
    M = -inf, so its activations are NaN, as in one process."""
    m, s = parts[:, 0::2], parts[:, 1::2]
    top = m.max(axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):  # (m - top of a row all -inf: not taken)
        terms = np.where(m == -np.inf, 0.0, s * np.exp(m - top))
    return np.ascontiguousarray(np.stack([top[:, 0], terms.sum(axis=1)], 1))
