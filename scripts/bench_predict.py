#!/usr/bin/env python3
"""Benchmark predict: model load + one user, and throughput of scoring + filtered top-100.

Uses the benchmark network's shape (27,392 -> 3 x 1024 -> 27,392; weights as initialised,
which costs the same to score as trained ones) and the synthetic MovieLens-20M-shaped data of
scripts/bench_train.py. Three figures:
  1. a fresh `predict` process that loads the 233 MB network and the index files and writes
     the top 100 of one user: wall time (DSSTNE took 26.5 s to load a MovieLens-10M model);
  2. scoring + top-100 with each user's own items filtered, samples/s (median of batches),
     and the time to write one batch's records (the kernel beside Python's formatting);
  3. the whole `predict` command on all users (parse, score, filter, write), wall time;
     with --ranks, also under `mpiexec -n P`, each process holding the whole network and with
     --split-layers (each holding 1/P of it): wall time and every process's peak memory.
With --torch, torch_reference.py's predict + top-k figure on the same data, in the same command
(on CUDA where Destiny's backend is the GPU).

Example:
  python scripts/bench_predict.py --torch --json build/bench/predict.json
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import click
import destiny  # noqa: F401, I001 - first: it sets the thread wait policies NumPy reads
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # bench_train, beside this script

from bench_train import TORCH_REFERENCE, check_torch, dataset_files, torch_env  # noqa: E402

from destiny import synthetic  # noqa: E402


def benchmark_network(workdir, inp, out, config) -> str:
    """A network file of the benchmark shape (initialised weights), made once."""
    from destiny.io.checkpoint import save_network
    from destiny.io.dataset import read_dataset
    from destiny.kernels import get_backend
    from destiny.netdef import load_netdef
    from destiny.network import Network

    path = os.path.join(workdir, "bench_network.nc")
    if not os.path.exists(path):
        widths = {"gl_input": read_dataset(inp).width, "gl_output": read_dataset(out).width}
        net = Network(load_netdef(config, dataset_widths=widths), get_backend("cpu"))
        net.initialize(1)
        save_network(path, net, destiny={"note": "benchmark shape, untrained"})
    return path


def time_records(labels, items, scores, item_labels, repeats: int = 9) -> dict[str, float]:
    """Milliseconds to write one batch's records: the kernel, and Python's formatting."""
    from destiny.io.records import format_records, python_records

    times = {"kernel": [], "python": []}
    for _ in range(repeats):
        for name, write in (("kernel", lambda: format_records(labels, items, scores,
                                                               item_labels)),
                            ("python", lambda: python_records(labels, items, scores,
                                                               item_labels.labels))):
            t = time.perf_counter()
            write()
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(v) * 1e3 for name, v in times.items()}


# A predict process that reports its peak memory once the command is over.
_MEASURED = """
import resource, sys
from destiny.parallel import get_comm
try:
    from destiny.cli.predict import main
    main()
finally:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"peak_rss_mb {get_comm().rank} {peak}", file=sys.stderr)
"""


def time_ranks(cmd: list[str], P: int, split: bool, recs: str, whole: str) -> dict:
    """The whole command under ``mpiexec -n P`` (the cores shared out): wall time, each
    process's peak memory, and how its records differ from one process's (``whole``)."""
    threads = str(max(1, len(os.sched_getaffinity(0)) // P))
    env = dict(os.environ, NUMBA_NUM_THREADS=threads, OMP_NUM_THREADS=threads,
               OPENBLAS_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    argv = [mpiexec, "-n", str(P), sys.executable, "-c", _MEASURED, *cmd[3:], "-s", recs]
    t = time.perf_counter()
    done = subprocess.run(argv + (["--split-layers"] if split else []), env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    peaks = sorted((int(r), int(m)) for _, r, m in (line.split() for line in
                                                   done.stderr.splitlines()
                                                   if line.startswith("peak_rss_mb ")))
    return {"ranks": P, "split_layers": split, "seconds": seconds,
            "peak_rss_mb": [m for _, m in peaks]} | _compare_records(recs, whole)


def _compare_records(a: str, b: str) -> dict:
    """How two recommendation files differ: lines, and lines whose items differ other than by
    the order of items of equal printed score (near-ties that float32 rounding may swap)."""
    lines = beyond_ties = 0
    with open(a, encoding="utf-8") as fa, open(b, encoding="utf-8") as fb:
        for x, y in zip(fa, fb, strict=True):
            if x != y:
                lines += 1
                px, py = ([tuple(p.split(",")[::-1]) for p in line.split("\t")[1].split(":")
                           if p.strip()] for line in (x, y))
                beyond_ties += sorted(px) != sorted(py)
    return {"lines_differing": lines, "lines_differing_beyond_ties": beyond_ties}


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", default=os.path.join(HERE, "..", "netdefs", "benchmark.json"),
              show_default=True)
@click.option("--users", type=int, default=synthetic.ML20M_USERS, show_default=True)
@click.option("--batch", type=int, default=256, show_default=True)
@click.option("--topk", type=int, default=100, show_default=True)
@click.option("--seconds", type=float, default=20.0, show_default=True,
              help="Time spent measuring throughput.")
@click.option("--full/--no-full", default=True, show_default=True,
              help="Also time the predict command on every user.")
@click.option("--load-runs", type=int, default=11, show_default=True,
              help="Fresh predict processes timed for the load figure.")
@click.option("--ranks", default="", show_default=True, metavar="P,...",
              help="Also time the whole command under mpiexec -n P, whole and split layers "
                   "(with --full).")
@click.option("--torch", "with_torch", is_flag=True)
@click.option("--backend", type=click.Choice(["auto", "cpu", "gpu"]), default="auto",
              show_default=True, help="Destiny's backend (auto: the GPU where there is one).")
@click.option("--workdir", default="build/bench", show_default=True)
@click.option("--json", "json_path", default=None)
def main(config, users, batch, topk, seconds, full, load_runs, backend, ranks, with_torch,
         workdir, json_path):
    """Time Destiny's predict."""
    if with_torch:
        check_torch()
    os.makedirs(workdir, exist_ok=True)
    items, mean = synthetic.ML20M_ITEMS, synthetic.ML20M_MEAN_PER_USER
    inp, out = dataset_files(workdir, users, items, mean, 0)
    tag = f"{users}_{items}_{mean:g}_0"
    text = os.path.join(workdir, f"synthetic_{tag}.txt")
    f_in = os.path.join(workdir, f"features_{tag}_gl_input")
    f_out = os.path.join(workdir, f"features_{tag}_gl_output")
    network = benchmark_network(workdir, inp, out, config)
    one = os.path.join(workdir, "one_user.txt")
    with open(text, encoding="utf-8") as f, open(one, "w", encoding="utf-8") as o:
        o.write(f.readline())
    cmd = [sys.executable, "-c", "from destiny.cli.predict import main; main()", "-q",
           "-n", network, "-i", f_in, "-o", f_out, "-k", str(topk), "--backend", backend]
    subprocess.run(cmd + ["-r", one, "-f", one, "-s", os.devnull], check=True)  # warm the cache
    loads = []
    for _ in range(load_runs):
        t = time.perf_counter()
        subprocess.run(cmd + ["-r", one, "-f", one, "-s", os.path.join(workdir, "one.recs")],
                       check=True)
        loads.append(time.perf_counter() - t)

    from destiny.predict import Predictor

    predictor = Predictor(network, f_in, f_out, dataset=None, backend=backend)
    t = time.perf_counter()
    records = predictor.read_input(text)
    parse_s = time.perf_counter() - t
    text_bytes = os.path.getsize(text)
    rows = len(records.labels)
    filt = (records.indptr, records.indices, np.zeros(len(records.indices), np.float32))
    rates, done, started = [], 0, time.perf_counter()
    stream = predictor.recommend(records, topk, filter_csr=filt, batch_size=batch)
    t, step = time.perf_counter(), None
    for step in stream:
        lo, got, _ = step
        now = time.perf_counter()
        if lo > 0:  # the first batch includes warm-up
            rates.append(len(got) / (now - t))
        done += len(got)
        t = now
        if now - started > seconds:
            break
    if step is None:
        raise SystemExit(f"bench_predict: {text} holds no users to predict for.")
    lo, got, best = step  # the last batch scored: its records are the ones timed
    records_ms = time_records(records.labels[lo:lo + len(got)], got, best,
                              predictor.item_labels())
    result = {"load_and_predict_one_user_s": statistics.median(loads), "load_runs_s": loads,
              "predict_topk_samples_per_s": statistics.median(rates), "users": rows,
              "batch": batch, "topk": topk, "records_ms_per_batch": records_ms,
              "backend": predictor.kernels.name, "parse_input_s": parse_s,
              "input_bytes": text_bytes}
    print(f"destiny predict: load + one user {result['load_and_predict_one_user_s']:.2f} s "
          f"(median of {len(loads)} fresh processes; fastest {min(loads):.2f}, slowest "
          f"{max(loads):.2f})")
    print(f"destiny predict: parsing the input: {parse_s:.2f} s for {rows:,} users "
          f"({text_bytes / parse_s / 1e6:,.0f} MB/s, one run)")
    print(f"destiny predict: scoring + filtered top-{topk}: "
          f"{result['predict_topk_samples_per_s']:,.0f} samples/s (batch {batch})")
    print(f"destiny predict: the records of a batch: {records_ms['kernel']:.2f} ms "
          f"(Python's formatting {records_ms['python']:.2f} ms; medians of 9)")
    if full:
        t = time.perf_counter()
        subprocess.run(cmd + ["-b", str(batch), "-r", text, "-f", text, "-s",
                              os.path.join(workdir, "all.recs")], check=True)
        result["full_command_s"] = time.perf_counter() - t
        print(f"destiny predict: the whole command on {rows:,} users: "
              f"{result['full_command_s']:.1f} s ({rows / result['full_command_s']:,.0f} users/s)")
    if full and ranks:
        whole = os.path.join(workdir, "all.recs")
        result["ranks"] = []
        for P in [int(p) for p in ranks.split(",")]:
            for split in (False, True):
                run = time_ranks(cmd + ["-b", str(batch), "-r", text, "-f", text], P, split,
                                 os.path.join(workdir, f"ranks{P}.recs"), whole)
                result["ranks"].append(run)
                print(f"destiny predict: the whole command under mpiexec -n {P}"
                      f"{' --split-layers' if split else ''}: {run['seconds']:.1f} s "
                      f"({rows / run['seconds']:,.0f} users/s), peak memory per process "
                      f"{', '.join(f'{m:,} MB' for m in run['peak_rss_mb'])}; "
                      f"{run['lines_differing']:,} lines differ from one process's, "
                      f"{run['lines_differing_beyond_ties']:,} beyond the order of equal "
                      "scores")
    if with_torch:
        out_json = os.path.join(workdir, "torch_predict.json")
        threads = str(len(os.sched_getaffinity(0)))
        subprocess.run([sys.executable, TORCH_REFERENCE, "--data", inp, "--config", config,
                        "--batch", str(batch), "--topk", str(topk), "--threads", threads,
                        "--train-seconds", "1", "--max-train-steps", "2",
                        "--predict-seconds", str(seconds), "--json", out_json, "--device",
                        "cuda" if predictor.kernels.name == "cuda" else "cpu"], check=True,
                       env=torch_env())
        with open(out_json) as f:
            torch_result = json.load(f)
        result["torch"] = torch_result
        ratio = result["predict_topk_samples_per_s"] / torch_result["predict_topk_samples_per_s"]
        print(f"predict_topk_samples_per_s: destiny {result['predict_topk_samples_per_s']:,.1f}, "
              f"torch {torch_result['predict_topk_samples_per_s']:,.1f}, ratio {ratio:.2f}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
