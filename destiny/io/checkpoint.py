"""Network files and checkpoints: a ``Network`` to and from DSSTNE's network NetCDF layout.

A checkpoint is a network file (DSSTNE names them ``<network><epoch>.nc``, spec 4.5) with the
optimizer state, the update counter and the run's settings added under ``destiny_``, so that
``train --resume`` continues exactly where the run stopped. Writes are atomic.
"""

from __future__ import annotations

import glob
import math
import os
import re

import numpy as np

from destiny import shard
from destiny.errors import DataFormatError, netcdf_reads
from destiny.io import atomic
from destiny.io.network_checks import DAMAGED, check_finite
from destiny.io.network_file import (NetworkFile, destiny_attributes, read_block, read_network,
                                     write_network)
from destiny.network import Network
from destiny.wording import counted


def save_network(path, net: Network, *, destiny: dict, optimizer_state: bool = False,
                 arrays: dict | None = None) -> None:
    """Write ``net`` to ``path`` atomically; with ``optimizer_state`` as a checkpoint.

    ``arrays`` are extra float arrays stored as ``destiny_<name>`` variables. Under MPI every
    rank calls this; rank 0 writes the file, gathering the split matrices a block at a time.
    """
    comm = net.comm
    weights, biases, arrays, parts = {}, {}, dict(arrays or {}), {}

    def whole(c, array, key):  # a matrix shaped like c's weights
        array = net.to_host(array)
        if comm.size == 1:
            return array
        parts[key] = shard.Part(array, c.rows, c.cols, (c.source.n, c.dest.n))
        return key

    def whole_vector(c, array):  # biases and their state: small, gathered at once
        array = net.to_host(array)
        return array if comm.size == 1 else np.concatenate(comm.allgather(array))

    if optimizer_state:
        net.settle_optimizer()  # rows of a sparse layer may lag (Network.update)
    for k, c in enumerate(net.connections):
        if not c.shared:
            weights[k] = whole(c, c.W, f"weights{k}")
        biases[k] = whole_vector(c, c.b)
        if optimizer_state:
            for j, s in enumerate(c.state):
                if s.size:
                    arrays[f"state{k}_{j}"] = whole(c, s, f"state{k}_{j}")
            for j, s in enumerate(c.bias_state):
                if s.size:
                    arrays[f"bias_state{k}_{j}"] = whole_vector(c, s)

    def write(gathered: dict) -> None:
        def get(v):
            return gathered[v] if isinstance(v, str) else v

        with atomic.atomic_outputs() as out:
            write_network(out.path(path), net.netdef, {k: get(v) for k, v in weights.items()},
                          biases, destiny=destiny, arrays={k: get(v) for k, v in arrays.items()})

    if comm.size == 1:
        write({})
    else:
        shard.write_gathered(comm, parts, write)


def network_bytes(net: Network) -> tuple[int, int]:
    """About how many bytes a checkpoint of ``net`` takes on disk, and the trained network's
    file (no optimizer state): the whole network's values, 4 bytes each, under MPI too (a rank
    holds a share; counted from the layers' sizes). The files are not compressed."""
    weights = checkpoint = 0
    for c in net.connections:
        matrix = 0 if c.shared else c.source.n * c.dest.n
        weights += matrix + c.dest.n
        checkpoint += (matrix * (1 + sum(1 for s in c.state if s.size))
                       + c.dest.n * (1 + sum(1 for s in c.bias_state if s.size)))
    return 4 * checkpoint, 4 * weights


def load_weights(net: Network, path, *, gradients: bool = True, nf: NetworkFile | None = None
                 ) -> dict:
    """Set ``net``'s weights (and optimizer state, if saved) from a network file.

    Returns the file's ``destiny_`` attributes. The file must describe the same layers.
    ``gradients=False`` (prediction) allocates no gradient buffers; ``nf`` is the file
    already read, if the caller has it. A rank of a split network reads only its blocks.
    """
    split = net.comm.size > 1
    nf = nf or read_network(path, arrays=not split, weights=not split)
    mine = [(c.source.name, c.dest.name, c.source.n, c.dest.n) for c in net.connections]
    theirs = [(c.source.name, c.dest.name, c.source.n, c.dest.n)
              for c in Network(nf.netdef, net.backend).connections]
    if mine != theirs:
        raise DataFormatError(path, "its layers and connections differ from the network "
                              "definition being trained; it belongs to another run.")

    sizes = _variable_sizes(path) if split else None  # (the whole file's, for a rank's block)

    def matrix(c, k, name):  # this rank's block of a matrix shaped like c's weights
        if not split:  # (read_network checked the weights)
            return nf.weights[k] if name is None else _state(nf, path, name, c)
        var = f"weight{k}_weights" if name is None else f"destiny_{name}"
        if name is not None:
            _check_state_size(path, name, sizes.get(var), c)
        block = read_block(path, var, c.dest.n, c.rows, c.cols)
        if block is None:
            raise _no_state(path, name)
        check_finite(path, var, block, part=True)
        return block

    def vector(c, name, whole=None):  # this rank's units of a per-unit vector
        lo, hi = net.units[c.dest.name]
        if whole is None:
            if split:
                _check_state_size(path, name, sizes.get(f"destiny_{name}"), c, bias=True)
            whole = (_state(nf, path, name, c, bias=True) if not split else
                     read_block(path, f"destiny_{name}", c.dest.n, (0, 1), (0, c.dest.n)))
            if whole is None:
                raise _no_state(path, name)
            if split:  # (_state checked the whole file's)
                check_finite(path, f"destiny_{name}", whole)
        return np.ravel(whole)[lo:hi]

    for k, c in enumerate(net.connections):
        if not c.shared:
            c.W = net.to_backend(matrix(c, k, None))
        c.b = net.to_backend(vector(c, None, nf.biases[k]))
    if gradients:
        net.allocate_gradients()
    for k, c in enumerate(net.connections):
        c.current = None  # the state read is up to date with the checkpoint's last update
        for j, s in enumerate(c.state):
            if s.size:
                c.state[j] = net.to_backend(np.reshape(matrix(c, k, f"state{k}_{j}"), s.shape))
        for j, s in enumerate(c.bias_state):
            if s.size:
                c.bias_state[j] = net.to_backend(vector(c, f"bias_state{k}_{j}"))
    return nf.destiny


def _no_state(path, name: str) -> DataFormatError:
    return DataFormatError(path, f"lacks the optimizer state {name!r}; it is not a "
                           "checkpoint of this optimizer.")


def _state(nf, path, name: str, c, *, bias: bool = False) -> np.ndarray:
    if name not in nf.arrays:
        raise _no_state(path, name)
    _check_state_size(path, name, nf.arrays[name].size, c, bias=bias)
    check_finite(path, f"destiny_{name}", nf.arrays[name])
    return nf.arrays[name]


def _check_state_size(path, name: str, size: int | None, c, *, bias: bool = False) -> None:
    """Refuse optimizer state ``name`` of connection ``c`` that holds ``size`` values where
    its weights (or, with ``bias``, its biases) hold another number: the optimizer's kernels
    refused it with a ValueError, and a matrix's failed to reshape (a traceback either way).
    A missing one (None) is left to the caller, which says so."""
    if size is None:
        return
    needed = c.dest.n if bias else c.source.n * c.dest.n
    if size != needed:
        what = (f"the layer {c.dest.name!r} it is for has {c.dest.n:,} units" if bias else
                f"the weights {c.source.name} -> {c.dest.name} it is for hold "
                f"{c.source.n:,} x {c.dest.n:,}")
        raise DataFormatError(path, f"the optimizer state 'destiny_{name}' holds "
                              f"{counted(size, 'value')}; {what}. {DAMAGED}")


def _variable_sizes(path) -> dict[str, int]:
    """The number of values of each variable of a NetCDF file, from its header."""
    import netCDF4

    with netcdf_reads(path, f". {DAMAGED}"), netCDF4.Dataset(path, "r") as nc:
        return {name: v.size for name, v in nc.variables.items()}


def checkpoint_path(network_path, epoch: int) -> str:
    """DSSTNE's checkpoint name: the network path followed by the epoch (``gl.nc10.nc``)."""
    return f"{network_path}{epoch}.nc"


def checkpoint_epoch(network_path, path) -> int | None:
    """The epoch of ``path`` if it names one of ``network_path``'s checkpoints (its name, in
    the network's directory however spelt), else None."""
    path = os.fspath(path)
    m = re.fullmatch(checkpoint_names(network_path), os.path.basename(path))
    if m is None or not atomic.same_file(os.path.dirname(path) or ".",
                                         os.path.dirname(os.fspath(network_path)) or "."):
        return None
    return int(m.group(1))


def checkpoint_names(network_path) -> str:
    """A regular expression of the names of ``network_path``'s checkpoints, the epoch its group."""
    return re.escape(os.path.basename(os.fspath(network_path))) + r"(\d+)\.nc"


def latest_checkpoint(network_path) -> tuple[str, int] | None:
    """The newest ``<network><epoch>.nc`` beside ``network_path``, with its epoch: the last
    epoch of the run started last.

    Not simply the highest epoch: a fresh run (``--force``) stopped before the epochs an
    earlier run reached leaves that run's later checkpoints in place, and ``--resume`` must go
    on with the run that stopped. Each checkpoint records when its run started
    (``run_started``, kept on resuming); the files' times would not do, as a copy (cp, a
    download) sets them in its own order. A checkpoint that cannot be read counts as newest,
    so that resuming says it is damaged rather than pass over progress without a word; one
    of an earlier version (no start recorded) as oldest.
    """
    found = [(_run_started(path), epoch, path) for epoch, path in _checkpoints(network_path)]
    if not found:
        return None
    _, epoch, path = max(found)
    return path, epoch


def superseded_checkpoints(network_path, run_started: float, keep: int, epoch: int
                           ) -> list[str]:
    """The checkpoints ``train --keep-checkpoints keep`` removes once that of ``epoch`` is
    written: this run's (started at ``run_started``; a resumed run keeps its time) of earlier
    epochs, but the ``keep - 1`` newest. Only checkpoints are judged (a file with the run's
    settings: not an --initial-network named like one); another run's, any that cannot be
    read, and any of a later epoch (a copy) are never among them."""
    def ours(path) -> bool:
        attrs = destiny_attributes(path)
        return attrs is not None and "settings" in attrs and _started(attrs) == run_started

    older = sorted((e, path) for e, path in _checkpoints(network_path) if e < epoch and ours(path))
    return [path for _, path in older[:max(len(older) - (keep - 1), 0)]]


def _checkpoints(network_path) -> list[tuple[int, str]]:
    """(epoch, path) of each ``<network><epoch>.nc`` beside ``network_path``."""
    pattern = re.compile(checkpoint_names(network_path) + "$")
    return [(int(m.group(1)), path)
            for path in glob.glob(glob.escape(str(network_path)) + "*.nc")
            if (m := pattern.match(os.path.basename(path)))]


def _run_started(path) -> float:
    """When the run that wrote the checkpoint ``path`` started (``latest_checkpoint``): -inf
    where it does not say (an earlier version), +inf where it cannot be read or is not a time
    (damaged: resuming from it then says so)."""
    return _started(destiny_attributes(path))


def _started(attrs: dict | None) -> float:
    """``_run_started`` of a checkpoint's ``destiny_`` attributes (None: unreadable)."""
    if attrs is None:
        return math.inf
    if "run_started" not in attrs:
        return -math.inf
    started = np.asarray(attrs["run_started"])
    if started.dtype.kind not in "iuf" or started.size != 1:
        return math.inf
    return float(started.reshape(-1)[0]) if np.isfinite(started).all() else math.inf
