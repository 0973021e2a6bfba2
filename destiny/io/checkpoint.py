"""Network files and checkpoints: a ``Network`` to and from DSSTNE's network NetCDF layout.

A checkpoint is a network file (DSSTNE names them ``<network><epoch>.nc``, spec 4.5) with the
optimizer state, the update counter and the run's settings added under ``destiny_``, so that
``train --resume`` continues exactly where the run stopped. Writes are atomic.
"""

from __future__ import annotations

import glob
import json
import os
import re

import numpy as np

from destiny.errors import DataFormatError
from destiny.io import atomic
from destiny.io.network_file import NetworkFile, read_network, write_network
from destiny.network import Network


def save_network(path, net: Network, *, destiny: dict, optimizer_state: bool = False,
                 arrays: dict | None = None) -> None:
    """Write ``net`` to ``path`` atomically; with ``optimizer_state`` as a checkpoint.

    ``arrays`` are extra float arrays stored as ``destiny_<name>`` variables.
    """
    weights, biases, arrays = {}, {}, dict(arrays or {})
    for k, c in enumerate(net.connections):
        if not c.shared:
            weights[k] = c.W
        biases[k] = c.b
        if optimizer_state:
            for j, s in enumerate(c.state):
                if s.size:
                    arrays[f"state{k}_{j}"] = s
            for j, s in enumerate(c.bias_state):
                if s.size:
                    arrays[f"bias_state{k}_{j}"] = s
    with atomic.atomic_outputs() as out:
        write_network(out.path(path), net.netdef, weights, biases, destiny=destiny, arrays=arrays)


def load_weights(net: Network, path, *, gradients: bool = True, nf: NetworkFile | None = None
                 ) -> dict:
    """Set ``net``'s weights (and optimizer state, if saved) from a network file.

    Returns the file's ``destiny_`` attributes. The file must describe the same layers.
    ``gradients=False`` (prediction) allocates no gradient buffers; ``nf`` is the file
    already read, if the caller has it.
    """
    nf = nf or read_network(path)
    mine = [(c.source.name, c.dest.name, c.source.n, c.dest.n) for c in net.connections]
    theirs = [(c.source.name, c.dest.name, c.source.n, c.dest.n)
              for c in Network(nf.netdef, net.backend).connections]
    if mine != theirs:
        raise DataFormatError(path, "its layers and connections differ from the network "
                              "definition being trained; it belongs to another run.")
    for k, c in enumerate(net.connections):
        if not c.shared:
            c.W = np.ascontiguousarray(nf.weights[k], dtype=net.dtype)
        c.b = np.ascontiguousarray(nf.biases[k], dtype=net.dtype)
    if gradients:
        net.allocate_gradients()
    for k, c in enumerate(net.connections):
        for j, s in enumerate(c.state):
            if s.size:
                s[...] = _state(nf, path, f"state{k}_{j}", s)
        for j, s in enumerate(c.bias_state):
            if s.size:
                s[...] = _state(nf, path, f"bias_state{k}_{j}", s)
    return nf.destiny


def _state(nf, path, name: str, like: np.ndarray) -> np.ndarray:
    if name not in nf.arrays:
        raise DataFormatError(path, f"lacks the optimizer state {name!r}; it is not a "
                              "checkpoint of this optimizer.")
    return nf.arrays[name].reshape(like.shape)


def checkpoint_path(network_path, epoch: int) -> str:
    """DSSTNE's checkpoint name: the network path followed by the epoch (``gl.nc10.nc``)."""
    return f"{network_path}{epoch}.nc"


def latest_checkpoint(network_path) -> tuple[str, int] | None:
    """The newest ``<network><epoch>.nc`` next to ``network_path``, with its epoch."""
    pattern = re.compile(re.escape(os.path.basename(str(network_path))) + r"(\d+)\.nc$")
    found = []
    for path in glob.glob(glob.escape(str(network_path)) + "*.nc"):
        m = pattern.match(os.path.basename(path))
        if m:
            found.append((int(m.group(1)), path))
    if not found:
        return None
    epoch, path = max(found)
    return path, epoch


def settings_json(settings: dict) -> str:
    return json.dumps(settings, sort_keys=True)
