"""The training loop: epochs, shuffling, denoising masks, the divergence brake, the NaN guard.

One readable loop in nanoGPT's order (spec 5.2): per epoch draw the permutation and the
denoising mask, then per minibatch forward -> loss -> backward -> step size -> brake -> update.
Every random draw of epoch e depends on (seed, e) only: the permutation comes from a generator
seeded with them, the denoising and dropout masks from counter-based draws keyed by them
(``kernels/counter_rng.py``). A run resumed from the checkpoint of epoch e therefore reaches the
same weights as an uninterrupted one, and a run split across MPI ranks draws the same masks as
one process. Under MPI every rank runs this loop on its shard; the loss is summed over ranks
inside ``Network.backward``, so every rank takes the same brake and NaN decisions. Checkpoints
are the caller's, written from ``on_epoch`` (``fit.py``).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Callable, Iterator

import numpy as np

from destiny.errors import DestinyError
from destiny.io.dataset import SparseDataset
from destiny.kernels.counter_rng import DENOISE, DROPOUT, stream_key
from destiny.kernels.reference.optim import step_size
from destiny.netdef import LayerKind
from destiny.network import Batch, Network, OptimizerConfig
from destiny.parallel import ParallelError, StopCheck, stop_together
from destiny.sparse import column_range, drop_entries

OPTIMIZERS = {"sgd": 0, "momentum": 1, "adagrad": 2, "nesterov": 3, "rmsprop": 4,
              "adadelta": 5, "adam": 6}

# What each optimizer uses when a value is not given. DSSTNE's train was always SGD with
# these values (spec 5.1); run as its MovieLens example says, it learns little beyond
# popularity, so Destiny's default optimizer is Adam (README, "Defaults").
OPTIMIZER_DEFAULTS = {
    "sgd": {"alpha": 0.025, "lam": 1e-4, "mu": 0.5, "mu1": 0.0},
    "momentum": {"alpha": 0.025, "lam": 1e-4, "mu": 0.9, "mu1": 0.0},
    "nesterov": {"alpha": 0.025, "lam": 1e-4, "mu": 0.9, "mu1": 0.0},
    "adagrad": {"alpha": 0.01, "lam": 0.0, "mu": 0.0, "mu1": 0.0},
    "rmsprop": {"alpha": 0.001, "lam": 0.0, "mu": 0.9, "mu1": 0.0},
    "adadelta": {"alpha": 1.0, "lam": 0.0, "mu": 0.95, "mu1": 0.0},
    "adam": {"alpha": 0.01, "lam": 0.0, "mu": 0.9, "mu1": 0.999},
}
DEFAULT_OPTIMIZER = "adam"

# The settings each optimizer's update reads (spec 5.8); weight decay acts in every one. A
# setting given for an optimizer that does not read it changes nothing (AdaDelta has no
# learning rate: its step is the ratio of two running averages).
OPTIMIZER_SETTINGS = {
    "sgd": ("alpha", "lam", "lam1"),
    "momentum": ("alpha", "lam", "lam1", "mu"),
    "nesterov": ("alpha", "lam", "lam1", "mu"),
    "adagrad": ("alpha", "lam", "lam1"),
    "rmsprop": ("alpha", "lam", "lam1", "mu"),
    "adadelta": ("lam", "lam1", "mu"),
    "adam": ("alpha", "lam", "lam1", "mu", "mu1"),
}
SETTING_FLAGS = {"alpha": "-alpha", "lam": "-lambda", "lam1": "-lambda1", "mu": "-mu",
                 "mu1": "-mu1"}


def optimizer_settings(cfg: TrainConfig) -> str:
    """The settings ``cfg``'s optimizer reads, by their flags: 'alpha 0.01, lambda 0, ...'."""
    return ", ".join(f"{SETTING_FLAGS[k][1:]} {getattr(cfg, k):g}"
                     for k in OPTIMIZER_SETTINGS[cfg.optimizer])


def unused_settings(optimizer: str, given) -> list[str]:
    """The flags among ``given`` (setting names, as ``TrainConfig``'s) that ``optimizer``
    does not read, in the order of ``SETTING_FLAGS``."""
    return [flag for key, flag in SETTING_FLAGS.items()
            if key in given and key not in OPTIMIZER_SETTINGS[optimizer]]


def _divergence_advice(cfg: TrainConfig) -> str:
    """What to change when a run diverges: the settings its optimizer reads that could cause
    it (adadelta reads no -alpha; a weight decay of 1 or more shrinks weights past 0 each
    step, and beyond float32's range overflows), then the default optimizer."""
    reads = OPTIMIZER_SETTINGS[cfg.optimizer]
    fixes = ["lower the learning rate (-alpha)"] if "alpha" in reads else []
    fixes += [f"lower the weight decay ({SETTING_FLAGS[k]} {getattr(cfg, k):g})"
              for k in ("lam", "lam1") if k in reads and getattr(cfg, k) >= 1.0]
    if cfg.optimizer != DEFAULT_OPTIMIZER:
        fixes.append(f"use the default optimizer ({DEFAULT_OPTIMIZER})")
    return " or ".join(fixes)


class TrainingDivergedError(ParallelError):
    """The loss or the weights stopped being finite. Under MPI every rank finds it alike (the
    loss is summed over ranks, the weights checked on all), so it is a ``ParallelError``:
    reported once, and no rank is aborted."""


@dataclass
class TrainConfig:
    """Everything that decides the arithmetic of a run (stored in checkpoints to resume)."""

    batch: int = 1024
    epochs: int = 40
    optimizer: str = "sgd"
    alpha: float = 0.025
    lam: float = 1e-4
    lam1: float = 0.0
    mu: float = 0.5
    mu1: float = 0.0
    seed: int = 12134  # DSSTNE's FIXED_SEED
    shuffle: bool | None = None  # None: the definition's ShuffleIndices
    brake: bool = True

    def optimizer_config(self) -> OptimizerConfig:
        return OptimizerConfig(mode=OPTIMIZERS[self.optimizer], lam=self.lam, lam1=self.lam1,
                               mu=self.mu, mu1=self.mu1)


def train_config(optimizer: str = DEFAULT_OPTIMIZER, **values) -> TrainConfig:
    """A TrainConfig for ``optimizer``: values given as None take the optimizer's defaults."""
    given = {k: v for k, v in values.items() if v is not None}
    return TrainConfig(optimizer=optimizer, **(OPTIMIZER_DEFAULTS[optimizer] | given))


@dataclass
class TrainState:
    """Where a run stands: epochs completed and updates applied (DSSTNE's ``_batches``)."""

    epoch: int = 0
    updates: int = 0


@dataclass
class EpochRecord:
    epoch: int
    loss: float
    training_error: float
    regularization_error: float
    seconds: float
    learning_rate: float | None  # None for AdaDelta, which reads no learning rate
    samples_per_s: float
    skipped_batches: int

    def json(self) -> str:
        return json.dumps(asdict(self))


def unknown_dataset(layer: str, dataset: str, available) -> DestinyError:
    return DestinyError(f"layer {layer!r} reads the dataset {dataset!r}, but the dataset files "
                        f"hold {', '.join(map(repr, sorted(available)))}. The layer's DataSet "
                        "must equal the -d name given to generate-netcdf.")


def too_narrow(net: Network, layer: str, dataset: str, width: int, path=None) -> DestinyError:
    """The error for a layer with fewer units than its dataset's width (``path``: its file)."""
    i = [lay.name for lay in net.netdef.layers].index(layer)
    where = f"{path}: " if path is not None else ""
    return DestinyError(f"{where}the dataset {dataset!r} has width {width:,}, but Layers[{i}].N "
                        f"gives layer {layer!r} only {net.layers[layer].n:,} units; use N "
                        f"\"auto\" or an N of at least {width:,}.")


# The training data is copied to the device whole when it takes at most this share of the
# device memory free once the network is there; the rest is left for a batch's arrays, the
# activations, scratch and cuBLAS. Larger data is streamed: each epoch's examples go to the
# device in chunks of at most that size, in the epoch's order (``TrainData.batches``).
DEVICE_DATA_SHARE = 0.5


class TrainData:
    """The datasets bound to a network's Input and Output layers (spec 3.4), and the backend's
    copy of them, from which each minibatch is gathered.

    On the cpu the copy is the arrays themselves. On a GPU the data is copied to the device
    once, when first used, or, where it takes more than ``device_budget`` bytes (by default
    ``DEVICE_DATA_SHARE`` of the device's memory free at that time), streamed a chunk at a
    time in each epoch's order (``streamed``).
    """

    def __init__(self, net: Network, datasets: dict[str, SparseDataset], *,
                 device_budget: int | None = None):
        net.check_trainable()
        self.inputs: dict[str, SparseDataset] = {}
        self.targets: dict[str, SparseDataset] = {}
        for name in net.inputs + net.outputs:
            layer = net.layers[name]
            if layer.dataset not in datasets:
                raise unknown_dataset(name, layer.dataset, datasets)
            ds = datasets[layer.dataset]
            if ds.weights is not None:
                raise DestinyError(f"dataset {layer.dataset!r} is Weighted (per-example weights); "
                                   "Destiny does not train on weighted datasets yet. Write it "
                                   "without weights (generate-netcdf never adds them).")
            if ds.width > layer.n:
                raise too_narrow(net, name, layer.dataset, ds.width)
            if net.comm.size > 1:
                ds = _columns(ds, net.input_columns(name) if layer.kind == LayerKind.Input
                              else net.units[name])
            (self.inputs if layer.kind == LayerKind.Input else self.targets)[name] = ds
        rows = {ds.rows for ds in datasets.values()}
        if len(rows) != 1:
            sizes = ", ".join(f"{ds.name!r}: {ds.rows:,}" for ds in datasets.values())
            raise DestinyError(f"the datasets hold different numbers of examples ({sizes}); "
                               "build them from the same samples (one -s index, same input).")
        self.examples = rows.pop()
        # The analog inputs (a rank's shard keeps its dataset's values array, empty or not): a
        # batch that lists no entries stores no values, as Boolean data does (Batch.analog).
        self._analog = frozenset(n for n, ds in self.inputs.items() if ds.values is not None)
        # The data on the host, by layer. An autoencoder's input and output datasets usually
        # hold the same entries (DSSTNE's examples write both from one file): they share one
        # copy on the backend, and each batch one gather.
        self._host: dict[str, tuple] = {}
        bound = self.inputs | self.targets
        for n, ds in bound.items():
            twin = next((m for m in self._host if _same_entries(bound[m], ds)), None)
            self._host[n] = (self._host[twin] if twin is not None else
                             (ds.indptr, ds.indices, _EMPTY if ds.values is None else ds.values))
        self._ignore_zero = frozenset(n for n, ds in self.targets.items() if ds.ignore_zero)
        self._denoised_host: dict[str, tuple] = {}
        self.kernels = net.backend
        denoising = [n for n in self.inputs if net.layers[n].denoising]
        # The bytes the data takes on the backend held whole (with an epoch's denoised copy).
        self.bytes = (sum(_nbytes(csr) for csr in _distinct(self._host.values()))
                      + sum(_nbytes(self._host[n]) for n in denoising))
        self._device_budget = device_budget
        self._placed = False  # (``_place``: when first used)
        self._held: dict[str, tuple] = {}
        self._denoised: dict[str, tuple] = {}

    def _place(self) -> None:
        """Decide, once, whether the data is held on the backend whole (copied now) or
        streamed (``DEVICE_DATA_SHARE``). Done when the data is first used, not when it is
        bound: by then the network's weights, gradients and optimizer state are on the device,
        and the budget is what they leave free."""
        if self._placed:
            return
        budget = self._device_budget
        if budget is None:
            free = self.kernels.free_memory()
            budget = None if free is None else int(free * DEVICE_DATA_SHARE)
        self._budget = budget
        self._streamed = budget is not None and self.bytes > budget
        self._held = {} if self._streamed else self._hold(self._host)
        self._placed = True

    @property
    def streamed(self) -> bool:
        """Whether the data goes to the backend a chunk at a time (``batches``)."""
        self._place()
        return self._streamed

    @property
    def budget(self) -> int | None:
        """The bytes the data may take on the backend (None: no limit, the cpu's case)."""
        self._place()
        return self._budget

    def _hold(self, host: dict[str, tuple]) -> dict[str, tuple]:
        """The backend's copies of CSR matrices by layer (a matrix shared by layers is held
        once): (host indptr, backend indptr, backend indices, backend values) each."""
        kb, held = self.kernels, {}
        for csr in _distinct(host.values()):
            indptr, indices, values = csr
            held[id(csr)] = (indptr, kb.to_device(indptr), kb.to_device(indices),
                             kb.to_device(values))
        return {n: held[id(csr)] for n, csr in host.items()}

    def set_denoised(self, inputs: dict[str, tuple]) -> None:
        """This epoch's denoised input CSR matrices, by input layer (spec 3.9)."""
        self._denoised = {}  # (last epoch's copies go before this one's are made)
        self._denoised_host = {n: (indptr, indices, _EMPTY if values is None else values)
                               for n, (indptr, indices, values) in inputs.items()}
        if not self.streamed:
            self._denoised = self._hold(self._denoised_host)

    def _epoch_host(self) -> dict[str, tuple]:
        """This epoch's CSR matrices on the host, by layer (the denoised inputs instead)."""
        return self._host | self._denoised_host

    def batch(self, rows: np.ndarray) -> Batch:
        """The minibatch of examples ``rows``, assembled by the backend from the data it holds.

        For tools that take batches one at a time (benchmarks, profiles): where the data is
        streamed, each call gathers its rows on the host and copies them, where ``batches``
        copies a chunk of many batches at once."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.streamed:
            return self._gather(self._chunk(rows), np.arange(len(rows), dtype=np.int64))
        return self._gather(self._held | self._denoised, rows)

    def batches(self, order: np.ndarray, size: int) -> Iterator[tuple[int, Batch]]:
        """The minibatches of ``size`` examples of ``order`` in turn, each with the position of
        its first example in ``order``.

        Streamed data goes to the backend a chunk at a time: the examples of as many whole
        batches as fit in the budget, copied in ``order``, so that each batch is gathered from
        the chunk on the backend as from data held whole (the same batches, bit for bit).
        """
        order = np.asarray(order, dtype=np.int64)
        if not self.streamed:
            held = self._held | self._denoised
            for pos in range(0, len(order), size):
                yield pos, self._gather(held, order[pos:pos + size])
            return
        for c0, c1 in self.chunks(order, size):
            chunk = None  # (the last chunk's memory goes before this one is copied)
            chunk = self._chunk(order[c0:c1])
            local = np.arange(c1 - c0, dtype=np.int64)
            for pos in range(c0, c1, size):
                yield pos, self._gather(chunk, local[pos - c0:pos - c0 + size])

    def chunks(self, order: np.ndarray, size: int) -> list[tuple[int, int]]:
        """The ranges [c0, c1) of positions in ``order`` that ``batches`` copies to the
        backend at a time: whole batches, as many as fit in the budget (at least one)."""
        starts = np.arange(0, len(order), size)
        if not self.streamed:
            return [(0, len(order))] if len(order) else []
        row_bytes = sum(_row_bytes(csr) for csr in _distinct(self._epoch_host().values()))
        per_batch = np.add.reduceat(row_bytes[order], starts) if len(order) else row_bytes[:0]
        ends = np.cumsum(per_batch)  # bytes of batches [0, j] together
        out, i = [], 0
        while i < len(starts):
            below = ends[i - 1] if i else 0
            j = max(i + 1, int(np.searchsorted(ends, below + self.budget, side="right")))
            out.append((int(starts[i]), int(starts[j]) if j < len(starts) else len(order)))
            i = j
        return out

    def _chunk(self, rows: np.ndarray) -> dict[str, tuple]:
        """Examples ``rows`` of this epoch's data, in that order, copied to the backend: the
        host gathers them as a batch is gathered (the cpu's ``take_rows``), then one copy."""
        from destiny.kernels import get_backend

        host_kernels, host = get_backend("cpu"), {}
        for csr in _distinct(self._epoch_host().values()):
            host[id(csr)] = _take(host_kernels, (csr[0], *csr), rows, rows)
        return self._hold({n: host[id(csr)] for n, csr in self._epoch_host().items()})

    def _gather(self, held: dict[str, tuple], rows: np.ndarray) -> Batch:
        """The minibatch of rows ``rows`` of the CSR matrices ``held`` on the backend."""
        kb = self.kernels
        on_backend = kb.to_device(rows)
        gathered = {}  # id of a held matrix -> its batch (matrices held once, gathered once)

        def csr(name):
            h = held[name]
            if id(h) not in gathered:
                gathered[id(h)] = _take(kb, h, rows, on_backend)
            return gathered[id(h)]

        return Batch(size=len(rows), inputs={n: csr(n) for n in self.inputs},
                     targets={n: csr(n) for n in self.targets}, ignore_zero=self._ignore_zero,
                     analog=self._analog)


def _take(kb, held: tuple, rows: np.ndarray, rows_on_kb) -> tuple:
    """Rows ``rows`` (``rows_on_kb``: the same, on the backend ``kb``) of a CSR matrix held by
    ``kb`` as (host indptr, indptr, indices, values), in that order: a CSR matrix on ``kb``.
    (Not ``sparse.take_rows``, which lists every entry's position first: 8 bytes each.)"""
    host_indptr, indptr, indices, values = held
    out_indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(host_indptr[rows + 1] - host_indptr[rows], out=out_indptr[1:])
    out_indices = kb.empty(int(out_indptr[-1]), np.int32)
    out_values = kb.empty(int(out_indptr[-1]) if len(values) else 0, np.float32)
    out_indptr = kb.to_device(out_indptr)
    kb.take_rows(out_indices, out_values, out_indptr, indptr, indices, values, rows_on_kb)
    return out_indptr, out_indices, out_values


def _distinct(csrs) -> list[tuple]:
    """The CSR matrices of ``csrs``, each once (matrices shared by layers are one object)."""
    return list({id(c): c for c in csrs}.values())


def _nbytes(csr: tuple) -> int:
    return sum(a.nbytes for a in csr)


def _row_bytes(csr: tuple) -> np.ndarray:
    """The bytes each row of a CSR matrix takes on the backend: its entries and its offset."""
    indptr, indices, values = csr
    per_entry = indices.itemsize + (values.itemsize if len(values) else 0)
    return np.diff(indptr) * per_entry + indptr.itemsize


def _same_entries(a: SparseDataset, b: SparseDataset) -> bool:
    """Whether two datasets list the same entries with the same values (one array compare of
    each, once per run)."""
    if (a.values is None) != (b.values is None) or a.nnz != b.nnz or a.rows != b.rows:
        return False
    return (np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
            and (a.values is None or np.array_equal(a.values, b.values)))


def _columns(ds: SparseDataset, columns: tuple[int, int]) -> SparseDataset:
    """The feature columns ``columns`` of ``ds`` (a rank's shard, spec 7), indices re-based."""
    lo, hi = columns
    held = ds.columns or (0, ds.width)
    if held[0] == lo and held[1] <= hi:
        return ds  # read as this shard already (or narrower than the layer: padding units)
    if not held[0] <= lo:
        raise ValueError(f"dataset {ds.name!r} holds columns {held}, not all of {columns}")
    indptr, indices, values = column_range(ds.indptr, ds.indices.astype(np.int32, copy=False),
                                           ds.values, lo - held[0], hi - held[0])
    return SparseDataset(ds.name, ds.width, indptr, indices, values, ds.weights,
                         columns=(lo, hi), ignore_zero=ds.ignore_zero)


def denoised(net: Network, name: str, ds: SparseDataset, seed: int, epoch: int) -> tuple:
    """The CSR arrays of ``ds`` without the entries denoising drops in ``epoch`` (spec 3.9).

    One draw per stored entry per epoch, as DSSTNE; each draw is keyed by the entry's example
    and feature, so a rank holding some of the columns drops the same entries as one process.
    """
    from destiny.kernels.cpu.rng import denoise_keep  # the data is on the host; every
    #                                                   backend draws the same bits

    keep = np.empty(ds.nnz, dtype=bool)
    key = stream_key(seed, DENOISE, epoch, net.layers[name].index)
    denoise_keep(keep, ds.indptr, ds.indices, key, 0, ds.offset, net.netdef.denoising.p)
    return drop_entries(ds.indptr, ds.indices, ds.values, keep)


def epoch_rng(seed: int, epoch: int) -> np.random.Generator:
    return np.random.default_rng([seed, epoch])


def train_epochs(net: Network, data: TrainData, cfg: TrainConfig, state: TrainState, *,
                 on_batch: Callable[[int, float], None] | None = None,
                 on_epoch: Callable[[EpochRecord, TrainState], None] | None = None) -> TrainState:
    """Train from ``state.epoch`` to ``cfg.epochs``; ``on_epoch`` may write checkpoints."""
    # Under MPI a stop signal stops every rank after the same step (parallel.stop_together).
    with stop_together(net.comm) as stops:
        while state.epoch < cfg.epochs:
            record = _train_epoch(net, data, cfg, state, on_batch=on_batch, stops=stops)
            if on_epoch is not None:
                on_epoch(record, state)
            stops.check()  # (a signal that came while a checkpoint was written)
    return state


def _train_epoch(net: Network, data: TrainData, cfg: TrainConfig, state: TrainState, *,
                 on_batch: Callable[[int, float], None] | None,
                 stops: StopCheck) -> EpochRecord:
    """Train epoch ``state.epoch + 1`` and count it in ``state``; ``stops.check()`` after each
    update."""
    opt = cfg.optimizer_config()
    E, decay = data.examples, net.netdef.decay
    epoch, started = state.epoch + 1, time.perf_counter()
    rng = epoch_rng(cfg.seed, epoch)
    perm = rng.permutation(E) if cfg.shuffle else np.arange(E)
    masks = {name: denoised(net, name, ds, cfg.seed, epoch)
             for name, ds in data.inputs.items() if net.layers[name].denoising}
    data.set_denoised(masks)
    scale = 1.0 / (1.0 - net.netdef.denoising.p)
    total_t, skipped, step = 0.0, 0, cfg.alpha
    moving, init_steps, brake_steps = 0.0, 100, 0  # reset every epoch (spec 5.2)
    for number, (pos, batch) in enumerate(data.batches(perm, cfg.batch)):
        denoise = {n: (batch.inputs[n], scale) for n in masks}
        with np.errstate(over="ignore", invalid="ignore"):  # the NaN guard reports it
            net.forward(batch, train=True, denoise=denoise,
                        dropout_key=stream_key(cfg.seed, DROPOUT, epoch, number))
            err_t = net.backward()
        if not np.isfinite(err_t):
            raise TrainingDivergedError(
                f"training diverged in epoch {epoch}: the loss of layer "
                f"{net.outputs[0]!r} became {err_t} at example {pos:,}. The last good "
                f"checkpoint (if any) is kept; {_divergence_advice(cfg)}.")
        total_t += err_t
        step = step_size(cfg.alpha, decay, state.updates)
        if cfg.brake:
            moving = 0.9 * moving + 0.1 * err_t
            if init_steps > 0:
                init_steps -= 1
            elif err_t > 2.0 * moving:
                brake_steps = 25  # spec 5.2: skip this batch, then 0.1 x alpha for 24
            if brake_steps > 0:
                step *= 0.1
                brake_steps -= 1
        if brake_steps < 24:
            state.updates += 1
            net.update(step, state.updates, opt)
        else:
            skipped += 1
            net.discard_gradients()
        if on_batch is not None:
            on_batch(batch.size, err_t)
        stops.check()
    bad = net.check_finite()
    if bad is not None:
        raise TrainingDivergedError(
            f"training diverged in epoch {epoch}: the weights into layer {bad!r} are no "
            f"longer finite. The last good checkpoint (if any) is kept; "
            f"{_divergence_advice(cfg)}.")
    seconds = time.perf_counter() - started
    reg = net.regularization_error(cfg.lam, cfg.lam1)
    state.epoch = epoch
    return EpochRecord(epoch=epoch, loss=(total_t + reg * E) / E, training_error=total_t / E,
                       regularization_error=reg, seconds=seconds,
                       learning_rate=step if "alpha" in OPTIMIZER_SETTINGS[cfg.optimizer] else None,
                       samples_per_s=E / seconds, skipped_batches=skipped)


_EMPTY = np.zeros(0, dtype=np.float32)
