#!/usr/bin/env python3
"""What one training step and one prediction batch ask of the GPU, counted without one.

On a GPU Destiny's benchmark-network step is bound by the host (docs/benchmarks.md): every
kernel launch costs it about 10 us, every numba device array made (a view included) about
20 us, and every copy to the device a little more. This runs the CUDA backend under numba's
simulator (no GPU needed) on a narrow copy of a network definition (``--hidden`` units in
place of each hidden layer's N: the counts do not depend on the widths) and counts, per
training step and per prediction batch with top-k and the seen-item filter:

- kernel launches, by kernel (``_tiled`` is the simulator's stand-in for a cuBLAS product);
- launches that Destiny's launcher (``kernels/cuda/launch.py``) would leave to numba's slower
  launch: an argument that is not a scalar, a tuple of scalars or a C-contiguous array;
- numba device arrays made, and copies between host and device.

With ``--host-steps N`` it also times N more steps with every kernel doing nothing: the
Python of the network and the kernel wrappers, a lower bound of the host's time per step.

  python scripts/count_launches.py --host-steps 50
  python scripts/count_launches.py --config netdefs/movielens.json --hidden 6
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import sys
import tempfile
import time

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before numba is imported

import click  # noqa: E402
import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


class Counts:
    """Counters fed by wrappers around the simulator's kernels, arrays and copies."""

    def __init__(self):
        self.launches = collections.Counter()
        self.slow = collections.Counter()
        self.arrays = 0
        self.uploads = 0
        self.downloads = 0
        self.in_kernel = False
        self.host_ms: float | None = None


def _slow_argument(a) -> bool:
    """Whether Destiny's launcher would leave an argument like ``a`` to numba's launch (its own
    rules, ``launch.packs_as_scalars`` and ``launch.c_contiguous``, on the simulator's arrays)."""
    from destiny.kernels.cuda import launch

    if launch.packs_as_scalars(a):
        return False
    if isinstance(a, (np.ndarray, np.generic)) or not hasattr(a, "strides"):
        return True  # a host array (numba copies it over and back), another scalar or object
    return not launch.c_contiguous(a.shape, a.strides, a.dtype.itemsize)


@contextlib.contextmanager
def instrumented(counts: Counts):
    """Count into ``counts`` while inside: the simulator's kernels, arrays and copies wrapped."""
    from numba import cuda
    from numba.cuda.simulator import kernel as sim_kernel
    from numba.cuda.simulator.cudadrv import devicearray

    kernel_class, array_class = sim_kernel.FakeCUDAKernel, devicearray.FakeCUDAArray
    call, init = kernel_class.__call__, array_class.__init__
    to_host, to_device = array_class.copy_to_host, cuda.to_device

    def counted_call(self, *args):
        if self._device:
            return call(self, *args)
        name = self.fn.__name__
        counts.launches[name] += 1
        if any(_slow_argument(a) for a in args):
            counts.slow[name] += 1
        counts.in_kernel = True  # the simulator's own arrays (a row of an array in a kernel)
        try:
            return call(self, *args)
        finally:
            counts.in_kernel = False

    def counted_init(self, *args, **kwargs):
        counts.arrays += not counts.in_kernel
        init(self, *args, **kwargs)

    def counted_to_host(self, *args, **kwargs):
        counts.downloads += 1
        return to_host(self, *args, **kwargs)

    def counted_to_device(*args, **kwargs):
        counts.uploads += 1
        return to_device(*args, **kwargs)

    kernel_class.__call__, array_class.__init__ = counted_call, counted_init
    array_class.copy_to_host, cuda.to_device = counted_to_host, counted_to_device
    try:
        yield counts
    finally:
        kernel_class.__call__, array_class.__init__ = call, init
        array_class.copy_to_host, cuda.to_device = to_host, to_device


def narrow_netdef(path: str, hidden: int) -> str:
    """A copy of the definition at ``path`` with every numeric N set to ``hidden``."""
    with open(path) as f:
        text = json.load(f)
    for layer in text["Layers"]:
        if isinstance(layer.get("N"), int):
            layer["N"] = hidden
    out = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(text, out)
    out.close()
    return out.name


def synthetic(examples: int, items: int, seed: int = 0):
    """CSR arrays of ``examples`` rows with 1-8 distinct items each."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 9, examples)
    indptr = np.zeros(examples + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    indices = np.concatenate([np.sort(rng.choice(items, n, replace=False)) for n in lengths])
    return indptr, indices.astype(np.int32)


def report(title: str, counts: Counts, steps: int) -> None:
    total = sum(counts.launches.values())
    print(f"{title}: {total / steps:g} launches, {counts.arrays / steps:g} device arrays made, "
          f"{counts.uploads / steps:g} copies to the device, "
          f"{counts.downloads / steps:g} to the host")
    if counts.host_ms is not None:
        print(f"  host Python with kernels that do nothing: {counts.host_ms:.3f} ms")
    for name, n in sorted(counts.launches.items(), key=lambda kv: (-kv[1], kv[0])):
        slow = counts.slow.get(name, 0)
        note = f"   ({slow / steps:g} through numba's own launch)" if slow else ""
        print(f"  {n / steps:5g}  {name}{note}")


@contextlib.contextmanager
def kernels_do_nothing():
    """Inside, a kernel launch returns at once: what is left of a step is the host's Python."""
    from numba.cuda.simulator import kernel as sim_kernel

    call = sim_kernel.FakeCUDAKernel.__call__
    sim_kernel.FakeCUDAKernel.__call__ = (
        lambda self, *args: call(self, *args) if self._device else None)
    try:
        yield
    finally:
        sim_kernel.FakeCUDAKernel.__call__ = call


def count(config: str, *, hidden: int = 6, items: int = 40, optimizer: str = "rmsprop",
          batch: int = 8, steps: int = 3, top: int = 5,
          host_steps: int = 0) -> dict[str, Counts]:
    """The counts of ``steps`` training steps and prediction batches (after two of each, which
    make the buffers and scratch arrays kept for the next ones), by "train" and "predict".

    With ``host_steps``, each Counts also gets ``host_ms``: the mean time of that many more
    steps with every kernel doing nothing (``kernels_do_nothing``).
    """
    from destiny.io.dataset import SparseDataset
    from destiny.kernels import get_backend
    from destiny.netdef import load_netdef
    from destiny.network import Network
    from destiny.predict import fused_activation, score_batches, top_k
    from destiny.train import TrainData, train_config

    netdef = load_netdef(narrow_netdef(config, hidden),
                         dataset_widths={"gl_input": items, "gl_output": items})
    kb = get_backend("gpu")
    net = Network(netdef, kb)
    examples = batch * (steps + 3)
    indptr, indices = synthetic(examples, items)
    datasets = {layer.dataset: SparseDataset(layer.dataset, items, indptr, indices)
                for layer in netdef.layers if layer.dataset}
    data = TrainData(net, datasets)
    net.initialize(1)
    cfg = train_config(optimizer, batch=batch)
    opt = cfg.optimizer_config()
    net.init_optimizer(opt)

    def train_step(s):
        rows = np.arange(s * batch, (s + 1) * batch) % examples
        net.forward(data.batch(rows), train=True, dropout_key=s)
        net.backward()
        net.update(cfg.alpha, s + 1, opt)

    output = net.outputs[0]
    # Chosen once, as predict chooses once a file: queue_recommendations (predict's loop)
    # would choose again each step, inside the host time measured here.
    fused = fused_activation(net, output, top, net.layers[output].n)

    def predict_step(s):  # as predict scores a batch, and profile_step.py
        lo = s * batch % (examples - batch)
        ptr = indptr[lo:lo + batch + 1] - indptr[lo]
        idx = indices[indptr[lo]:indptr[lo + batch]]
        ((_, scores),) = score_batches(net, ptr, idx, batch_size=batch, output=output,
                                       pre_activations=fused is not None)
        top_k(scores, top, exclude_indptr=ptr, exclude_indices=idx, kernels=kb,
              activation=fused)

    # The simulator's blocks busy-wait at each syncthreads, holding the GIL for Python's
    # switch interval each time (as tests/backends.py notes): a short one is ~10x faster.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(5e-5)
    found = {}
    try:
        for name, step in (("train", train_step), ("predict", predict_step)):
            step(0)
            step(1)
            with instrumented(Counts()) as found[name]:
                for s in range(2, 2 + steps):
                    step(s)
            if host_steps:
                with kernels_do_nothing():
                    start = time.perf_counter()
                    for s in range(2, 2 + host_steps):
                        step(s)
                    found[name].host_ms = (time.perf_counter() - start) / host_steps * 1e3
    finally:
        sys.setswitchinterval(interval)
    return found


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", default=os.path.join(HERE, "..", "netdefs", "benchmark.json"),
              show_default=True)
@click.option("--hidden", type=int, default=6, show_default=True,
              help="Units of each layer with a numeric N.")
@click.option("--items", type=int, default=40, show_default=True,
              help="Width of the input and output datasets.")
@click.option("--optimizer", default="rmsprop", show_default=True)
@click.option("--batch", type=int, default=8, show_default=True)
@click.option("--steps", type=int, default=3, show_default=True)
@click.option("--top", type=int, default=5, show_default=True, help="K of the prediction.")
@click.option("--host-steps", type=int, default=0, show_default=True,
              help="Also time this many steps with every kernel doing nothing: the Python of "
                   "the network and the kernel wrappers (the simulator's own launch included; "
                   "on a GPU add ~10 us a launch, ~20 us an array made, the products' calls).")
def main(config, hidden, items, optimizer, batch, steps, top, host_steps):
    found = count(config, hidden=hidden, items=items, optimizer=optimizer, batch=batch,
                  steps=steps, top=top, host_steps=host_steps)
    name = os.path.basename(config)
    report(f"training step ({name}, {optimizer}, mean of {steps})", found["train"], steps)
    report(f"prediction batch ({name}, top-{top} with the seen-item filter, mean of {steps})",
           found["predict"], steps)


if __name__ == "__main__":
    sys.exit(main())
