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
@click.option("--workdir", default="build/bench", show_default=True)
def main(config, optimizer, users, batch, steps, top, workdir):
    from bench_train import dataset_files

    from destiny import synthetic
    from destiny.fit import dataset_pool, read_training_datasets
    from destiny.kernels import get_backend
    from destiny.netdef import load_netdef
    from destiny.network import Network
    from destiny.train import TrainData, train_config

    os.makedirs(workdir, exist_ok=True)
    inp, out = dataset_files(workdir, users, synthetic.ML20M_ITEMS,
                             synthetic.ML20M_MEAN_PER_USER, 0)
    pool = dataset_pool([inp, out])
    netdef = load_netdef(config, dataset_widths={n: w for n, (_, w) in pool.items()})
    net = Network(netdef, get_backend("cpu"))
    data = TrainData(net, read_training_datasets(pool, net))
    net.initialize(1)
    cfg = train_config(optimizer, batch=batch)
    opt = cfg.optimizer_config()
    net.init_optimizer(opt)

    def step(s):
        rows = np.arange(s * batch, (s + 1) * batch) % data.examples
        net.forward(data.batch(rows), train=True, dropout_key=s)
        net.backward()
        net.update(cfg.alpha, s + 1, opt)

    for s in range(3):  # compilation, first touch of the buffers
        step(s)
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.enable()
    for s in range(3, 3 + steps):
        step(s)
    profile.disable()
    print(f"{(time.perf_counter() - start) / steps * 1e3:.1f} ms per step (mean of {steps}, "
          f"under cProfile); OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')!r}, "
          f"OPENBLAS_THREAD_TIMEOUT={os.environ.get('OPENBLAS_THREAD_TIMEOUT')!r}")
    pstats.Stats(profile).sort_stats("tottime").print_stats(top)


if __name__ == "__main__":
    main()
