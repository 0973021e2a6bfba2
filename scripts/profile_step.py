#!/usr/bin/env python3
"""Profile training steps of a network in one process: the median step and where it goes.

Builds the network of --config on the synthetic MovieLens-20M-shaped files that
scripts/bench_train.py makes and caches (--users picks the size), trains 3 warm-up steps, then
--steps steps under cProfile, and prints the mean step time and the functions that take the
most time. To see what the thread wait policies Destiny sets on import are worth, run it once
as it is and once with both variables set empty, which Destiny keeps and the libraries take as
their defaults (libgomp prints a warning about the empty value):

  python scripts/profile_step.py --users 20000
  OMP_WAIT_POLICY= OPENBLAS_THREAD_TIMEOUT= python scripts/profile_step.py --users 20000

With --backend gpu it synchronizes the device after each step, and, where PyTorch is installed,
also lists the GPU's own time per kernel over the same steps (PyTorch's profiler records every
kernel of the process through CUPTI, numba's and cuBLAS's included): the GPU's busy time beside
the wall time says whether a step is bound by the kernels or by launching them from Python.

With --waits it instead times the training step without cProfile, rounds alternating, three
ways that differ only in when the host waits for the GPU:

- step: for the whole step (the loss read, then a synchronize after the update; the way the
  profile above times it);
- loss: for the loss alone, read once the backward pass is queued, as `train` reads it each
  step (the divergence brake and the NaN guard decide from it before the update);
- none: never within the window (the loss is not copied back; one synchronize at its end): the
  host queues the next steps while the GPU works, which a step whose brake and NaN guard were
  decided on the device would allow. 'loss' against 'none' is what that change could gain.

  python scripts/profile_step.py --backend gpu --users 20000 --steps 50 --waits
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sys
import time

import click
import destiny  # noqa: F401, I001 - before NumPy: it sets the thread wait policies NumPy reads
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", default=os.path.join(HERE, "..", "netdefs", "benchmark.json"),
              show_default=True)
@click.option("--optimizer", default="rmsprop", show_default=True)
@click.option("--users", type=int, default=20000, show_default=True)
@click.option("--batch", type=int, default=256, show_default=True)
@click.option("--steps", type=int, default=20, show_default=True)
@click.option("--top", type=int, default=15, show_default=True, help="Functions to list.")
@click.option("--sort", type=click.Choice(["tottime", "cumulative"]), default="tottime",
              show_default=True, help="Order of the list: own time, or time with callees.")
@click.option("--only", default="", help="List only functions whose file path contains this "
              "(e.g. destiny/ with --sort cumulative: which of Destiny's calls cost the most).")
@click.option("--workdir", default="build/bench", show_default=True)
@click.option("--backend", type=click.Choice(["cpu", "gpu"]), default="cpu", show_default=True)
@click.option("--waits", is_flag=True,
              help="Time the training step waiting for the GPU after each step, for the loss "
                   "only, and never (see above), without cProfile.")
@click.option("--predict", "topk", type=int, default=0,
              help="Profile prediction with top-K and the seen-item filter instead of training.")
def main(config, optimizer, users, batch, steps, top, workdir, backend, topk, sort, only, waits):
    from bench_train import dataset_files

    from destiny import synthetic
    from destiny.fit import dataset_pool, read_training_datasets
    from destiny.kernels import get_backend
    from destiny.netdef import load_netdef
    from destiny.network import Network
    from destiny.predict import fused_activation, score_batches, top_k
    from destiny.train import TrainData, train_config

    if waits and backend != "gpu":
        raise click.UsageError("--waits times how the host waits for the GPU: it needs "
                               "--backend gpu (the cpu never waits).")
    os.makedirs(workdir, exist_ok=True)
    inp, out = dataset_files(workdir, users, synthetic.ML20M_ITEMS,
                             synthetic.ML20M_MEAN_PER_USER, 0)
    pool = dataset_pool([inp, out])
    netdef = load_netdef(config, dataset_widths={n: w for n, (_, w) in pool.items()})
    kb = get_backend(backend)
    net = Network(netdef, kb)
    data = TrainData(net, read_training_datasets(pool, net))
    net.initialize(1)
    cfg = train_config(optimizer, batch=batch)
    opt = cfg.optimizer_config()
    net.init_optimizer(opt)

    queue_step = training_step(net, data, cfg, opt, batch)

    def train_step(s):
        queue_step(s)
        kb.synchronize()

    (inputs,) = net.inputs
    seen = data.inputs[inputs]

    output = net.outputs[0]
    # Chosen once, as predict chooses once a file: queue_recommendations (predict's loop)
    # would choose again each step, inside the steps profiled here.
    fused = fused_activation(net, output, topk, net.layers[output].n) if topk else None

    def predict_step(s):  # as predict scores a batch, and scripts/count_launches.py
        lo = s * batch % max(data.examples - batch, 1)
        ptr = seen.indptr[lo:lo + batch + 1] - seen.indptr[lo]
        idx = seen.indices[seen.indptr[lo]:seen.indptr[lo + batch]]
        ((_, scores),) = score_batches(net, ptr, idx, batch_size=batch, output=output,
                                       pre_activations=fused is not None)
        top_k(scores, topk, exclude_indptr=ptr, exclude_indices=idx, kernels=kb,
              activation=fused)

    step = predict_step if topk else train_step

    for s in range(3):  # compilation, first touch of the buffers
        step(s)
    if waits:
        time_waits(queue_step, kb, batch, steps)
        return
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.enable()
    for s in range(3, 3 + steps):
        step(s)
    profile.disable()
    print(f"{(time.perf_counter() - start) / steps * 1e3:.1f} ms per step (mean of {steps}, "
          f"under cProfile); OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')!r}, "
          f"OPENBLAS_THREAD_TIMEOUT={os.environ.get('OPENBLAS_THREAD_TIMEOUT')!r}")
    restrictions = (only, top) if only else (top,)
    pstats.Stats(profile).sort_stats(sort).print_stats(*restrictions)
    if backend == "gpu":
        gpu_kernel_times(step, 3 + steps, steps, top)


def training_step(net, data, cfg, opt, batch):
    """``step(s)``: queue training step ``s`` (batch ``s`` of the data in file order, update
    ``s + 1``); it waits for the GPU only where the network reads the loss."""
    def step(s):
        rows = np.arange(s * batch, (s + 1) * batch) % data.examples
        net.forward(data.batch(rows), train=True, dropout_key=s)
        net.backward()
        net.update(cfg.alpha, s + 1, opt)
    return step


WAITS = ("step", "loss", "none")


def time_waits(step, kb, batch, steps, rounds=3):
    """Median ms per training step (``training_step``'s, from step 3 on) over ``rounds``
    windows of ``steps`` steps for each way of waiting in ``WAITS`` (the module's docstring),
    the ways alternating."""
    import statistics

    from destiny.kernels.cuda.loss import DeviceError

    read = DeviceError.__float__
    first = 3
    times = {wait: [] for wait in WAITS}
    try:
        for _ in range(rounds):
            for wait in WAITS:
                # 'none': the error is not copied back (a float the loop adds up, unread)
                DeviceError.__float__ = (lambda self: 0.0) if wait == "none" else read
                kb.synchronize()
                start = time.perf_counter()
                for s in range(first, first + steps):
                    step(s)
                    if wait == "step":
                        kb.synchronize()
                kb.synchronize()
                times[wait].append((time.perf_counter() - start) / steps * 1e3)
                first += steps
    finally:
        DeviceError.__float__ = read
    for wait in WAITS:
        ms = statistics.median(times[wait])
        print(f"waiting {wait:>4}: {ms:6.2f} ms per step, {batch / ms * 1e3:9,.0f} samples/s "
              f"(median of {rounds} windows of {steps} steps)")


def gpu_kernel_times(step, first, steps, top):
    """The GPU time of each kernel over ``steps`` steps, through PyTorch's profiler."""
    try:
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        print("(PyTorch is not installed: no per-kernel GPU times)")
        return
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        for s in range(first, first + steps):
            step(s)
        wall = time.perf_counter() - start
    events = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
    busy = sum(e.self_device_time_total for e in events) / 1e3  # microseconds -> ms
    launches = sum(e.count for e in events)
    print(f"GPU busy {busy / steps:.2f} ms per step of {wall / steps * 1e3:.2f} ms wall; "
          f"{launches / steps:.0f} kernels and copies per step")
    events.sort(key=lambda e: -e.self_device_time_total)
    for e in events[:top]:
        print(f"{e.self_device_time_total / 1e3 / steps:8.3f} ms/step {e.count // steps:4d}x "
              f"{e.key[:110]}")


if __name__ == "__main__":
    main()
