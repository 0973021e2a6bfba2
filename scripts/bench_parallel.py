#!/usr/bin/env python3
"""Model-parallel training across MPI ranks: time per step and memory per rank, for P ranks.

For each P in --ranks, runs ``mpiexec -n P`` of this script's worker, which builds the split
network of --config (default: DSSTNE's benchmark network, RMSProp, batch 256) on synthetic
MovieLens-20M-shaped data (the files scripts/bench_train.py makes and caches), reads only its
feature columns of the data, trains --steps batches and reports, per rank: the median step
time, the time spent in collectives, the bytes it sent through them, the bytes of its weights,
gradients and optimizer state, the bytes of its data, and its peak resident memory. The cores
of the machine are shared out: each rank gets cores / P numba and BLAS threads.

Example:
  python scripts/bench_parallel.py --ranks 1,2 --json build/bench/parallel.json
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time

import click
import destiny  # noqa: F401, I001 - first: it sets the thread wait policies NumPy reads
import numpy as np

from destiny import synthetic

HERE = os.path.dirname(os.path.abspath(__file__))


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, invoke_without_command=True)
@click.option("--ranks", default="1,2", show_default=True, help="Rank counts, comma-separated.")
@click.option("--config", default=os.path.join(HERE, "..", "netdefs", "benchmark.json"),
              show_default=True)
@click.option("--users", type=int, default=synthetic.ML20M_USERS, show_default=True)
@click.option("--batch", type=int, default=256, show_default=True)
@click.option("--steps", type=int, default=40, show_default=True)
@click.option("--workdir", default="build/bench", show_default=True)
@click.option("--json", "json_path", default=None)
@click.pass_context
def main(ctx, ranks, config, users, batch, steps, workdir, json_path):
    """Run the worker under mpiexec for every P and print one line per P."""
    if ctx.invoked_subcommand is not None:
        return
    from bench_train import dataset_files

    os.makedirs(workdir, exist_ok=True)
    inp, out = dataset_files(workdir, users, synthetic.ML20M_ITEMS,
                             synthetic.ML20M_MEAN_PER_USER, 0)
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    cores = os.cpu_count() or 1
    results = []
    for P in (int(p) for p in ranks.split(",")):
        threads = str(max(1, cores // P))
        env = dict(os.environ, NUMBA_NUM_THREADS=threads, OMP_NUM_THREADS=threads,
                   OPENBLAS_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
        command = [sys.executable, os.path.abspath(__file__), "worker", inp, out, config,
                   str(batch), str(steps)]
        if P > 1:
            command = [mpiexec, "-n", str(P), *command]
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"P = {P} failed:\n{done.stderr}")
        ranks_report = json.loads(done.stdout.strip().splitlines()[-1])
        results.append({"ranks": P, "threads_per_rank": int(threads), "per_rank": ranks_report})
        step = statistics.median(r["step_ms"] for r in ranks_report)
        comm = max(r["collective_ms"] for r in ranks_report)
        print(f"P = {P} ({threads} thread{'' if threads == 1 else 's'} each): step {step:.0f} ms "
              f"({batch / step * 1e3:,.0f} samples/s), collectives {comm:.1f} ms/step, "
              f"sent {max(r['sent_mb'] for r in ranks_report):.2f} MB/step/rank; per rank: "
              + ", ".join(f"peak {r['peak_rss_mb']:,.0f} MB (params+grads+state "
                          f"{r['parameter_mb']:,.0f} MB, data {r['data_mb']:,.0f} MB)"
                          for r in ranks_report))
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"config": config, "users": users, "batch": batch, "steps": steps,
                       "cores": cores, "results": results}, f, indent=1)


@main.command()
@click.argument("inp")
@click.argument("out")
@click.argument("config")
@click.argument("batch", type=int)
@click.argument("steps", type=int)
def worker(inp, out, config, batch, steps):
    """One rank: build, read its shard, train ``steps`` batches, report as JSON on rank 0."""
    from destiny.fit import dataset_pool, read_training_datasets
    from destiny.kernels import get_backend
    from destiny.netdef import load_netdef
    from destiny.network import Network
    from destiny.parallel import get_comm
    from destiny.train import TrainData, train_config

    comm = get_comm()
    timer = _CollectiveTimer(comm)
    pool = dataset_pool([inp, out])
    widths = {name: width for name, (_, width) in pool.items()}
    net = Network(load_netdef(config, dataset_widths=widths), get_backend("cpu"), comm=comm)
    data = TrainData(net, read_training_datasets(pool, net))
    net.initialize(1)
    cfg = train_config("rmsprop", batch=batch)
    opt = cfg.optimizer_config()
    net.init_optimizer(opt)
    times, collective, sent = [], [], []
    for step in range(steps + 3):  # the first 3 compile and warm up
        rows = np.arange(step * batch, (step + 1) * batch) % data.examples
        timer.reset()
        comm.barrier()
        start = time.perf_counter()
        b = data.batch(rows)
        net.forward(b, train=True, dropout_key=step)
        net.backward()
        net.update(cfg.alpha, step + 1, opt)
        elapsed = time.perf_counter() - start
        if step >= 3:
            times.append(elapsed)
            collective.append(timer.seconds)
            sent.append(timer.bytes)
    parameters = sum(a.nbytes for c in net.connections for a in (c.W, c.G, *c.state, c.b)
                     if a is not None)
    data_bytes = sum(a.nbytes for ds in [*data.inputs.values(), *data.targets.values()]
                     for a in (ds.indptr, ds.indices, ds.values) if a is not None)
    report = {"rank": comm.rank, "step_ms": 1e3 * statistics.median(times),
              "collective_ms": 1e3 * statistics.median(collective),
              "sent_mb": statistics.median(sent) / 1e6,
              "parameter_mb": parameters / 1e6, "data_mb": data_bytes / 1e6,
              "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    reports = comm.gather(report)
    if comm.is_root:
        print(json.dumps(reports))


class _CollectiveTimer:
    """Wraps the column collectives of a Comm to time them and count what this rank sends."""

    def __init__(self, comm):
        self.seconds, self.bytes = 0.0, 0
        for name in ("allgather_columns", "reduce_scatter_columns", "allreduce_sum"):
            setattr(comm, name, self._timed(getattr(comm, name), name, comm.size))

    def reset(self):
        self.seconds, self.bytes = 0.0, 0

    def _timed(self, fn, name, size):
        def call(array, *args):
            start = time.perf_counter()
            result = fn(array, *args)
            self.seconds += time.perf_counter() - start
            if size > 1:  # a ring sends (P - 1) / P of the whole array (all-gather: P x local)
                whole = np.asarray(array).nbytes * (size if name == "allgather_columns" else 1)
                self.bytes += whole * (size - 1) // size
            return result
        return call


if __name__ == "__main__":
    main()
