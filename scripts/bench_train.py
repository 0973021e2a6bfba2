#!/usr/bin/env python3
"""Benchmark training and prediction on DSSTNE's benchmark network, beside PyTorch.

Trains netdefs/benchmark.json (N -> 3 x 1024 Sigmoid, pDropout 0.5 -> N, batch 256, RMSProp)
on synthetic MovieLens-20M-shaped data (138,493 users, 27,278 items; made once and cached
under --workdir), and reports the median samples/s over timed windows, GFLOP/s, and the
fraction of this machine's float32 matrix-multiply rate (NumPy's BLAS, the output layer's
shape). With --torch, ../shared/bench/torch_reference.py runs on the same data file, network,
batch and thread count in the same command, and the ratios are printed.

Example:
  python scripts/bench_train.py --torch --json build/bench/train.json
  python scripts/bench_train.py --quick          # ~1 minute, fewer users, shorter windows
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time

import click
import destiny  # noqa: I001 - before NumPy: it sets the thread wait policies NumPy reads
import numpy as np

from destiny import synthetic

HERE = os.path.dirname(os.path.abspath(__file__))

# The PyTorch peer lives beside the checkout (../shared/bench); a machine that has only the
# checkout (a lent GPU box) names its copy in DESTINY_TORCH_REFERENCE.
TORCH_REFERENCE = os.environ.get("DESTINY_TORCH_REFERENCE") or os.path.join(
    HERE, "..", "..", "shared", "bench", "torch_reference.py")


def check_torch() -> None:
    """Refuse --torch at once, not after minutes of Destiny's side, where PyTorch or its
    reference script is missing (the run used to end in a traceback)."""
    if not os.path.isfile(TORCH_REFERENCE):
        raise click.UsageError(f"--torch: {TORCH_REFERENCE} does not exist; set "
                               "DESTINY_TORCH_REFERENCE to torch_reference.py's path.")
    if importlib.util.find_spec("torch") is None:
        raise click.UsageError("--torch: PyTorch is not installed beside Destiny; install it "
                               "(pip install torch; docs/benchmarks.md records the versions "
                               "measured).")


def dataset_files(workdir: str, users: int, items: int, mean: float, seed: int) -> tuple[str, str]:
    """gl_input.nc / gl_output.nc of synthetic data, built once with generate-netcdf."""
    from destiny.generate import generate_netcdf

    tag = f"{users}_{items}_{mean:g}_{seed}"
    inp, out = (os.path.join(workdir, f"{n}_{tag}.nc") for n in ("gl_input", "gl_output"))
    if os.path.exists(inp) and os.path.exists(out):
        return inp, out
    text = os.path.join(workdir, f"synthetic_{tag}.txt")
    if not os.path.exists(text):
        subprocess.run([sys.executable, os.path.join(HERE, "synthetic_data.py"), "--users",
                        str(users), "--items", str(items), "--mean-per-user", str(mean),
                        "--seed", str(seed), "--format", "dsstne", "-o", text], check=True)
    for name, path in (("gl_input", inp), ("gl_output", out)):
        generate_netcdf(input_path=text, output=path, dataset_name=name, create=True,
                        feature_index=os.path.join(workdir, f"features_{tag}_{name}"),
                        sample_index=os.path.join(workdir, f"samples_{tag}"))
    return inp, out


def matmul_gflops(batch: int, hidden: int, outputs: int, seconds: float, kb=None) -> float:
    """The backend's float32 product rate on the output layer's shape (NumPy's BLAS, cuBLAS)."""
    if kb is None:
        from destiny.kernels import get_backend

        kb = get_backend("cpu")
    a = kb.to_device(np.random.default_rng(0).random((batch, hidden), dtype=np.float32))
    b = kb.to_device(np.random.default_rng(1).random((hidden, outputs), dtype=np.float32))
    c = kb.empty((batch, outputs), np.float32)
    kb.gemm(c, a, b)
    times, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 3:
        kb.synchronize()
        t = time.perf_counter()
        kb.gemm(c, a, b)
        kb.synchronize()
        times.append(time.perf_counter() - t)
    return 2.0 * batch * hidden * outputs / min(times) / 1e9


def copy_bandwidth(kb=None) -> float:
    """Bytes moved per second (read + write) by a 256 MiB copy in the backend's memory: the
    better of the backend's own copy kernel and the platform's (NumPy's copyto on the host,
    the driver's device-to-device copy on a GPU), so that the floor is the machine's."""
    if kb is None:
        from destiny.kernels import get_backend

        kb = get_backend("cpu")
    a = kb.to_device(np.ones((8192, 8192), dtype=np.float32))
    b = kb.empty((8192, 8192), np.float32)
    platform = b.copy_to_device if hasattr(b, "copy_to_device") else (lambda x: np.copyto(b, x))
    best = float("inf")
    for copy in (lambda x: kb.copy(b, x), platform):
        for _ in range(5):
            kb.synchronize()
            t = time.perf_counter()
            copy(a)
            kb.synchronize()
            best = min(best, time.perf_counter() - t)
    return 2 * 4 * 8192 * 8192 / best


def flops_per_sample(net, nnz_per_sample: float) -> tuple[float, float]:
    """(train, predict) FLOP per sample, counted as torch_reference.py counts them."""
    sparse = dense = 0.0
    for c in net.connections:
        if c.source.kind == 0:  # Input
            sparse += 2.0 * nnz_per_sample * c.dest.n
        else:
            dense += 2.0 * c.source.n * c.dest.n
    return 2 * sparse + 3 * dense, sparse + dense


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", default=os.path.join(HERE, "..", "netdefs", "benchmark.json"),
              show_default=True)
@click.option("--users", type=int, default=synthetic.ML20M_USERS, show_default=True)
@click.option("--items", type=int, default=synthetic.ML20M_ITEMS, show_default=True)
@click.option("--mean-per-user", type=float, default=synthetic.ML20M_MEAN_PER_USER,
              show_default=True)
@click.option("--batch", type=int, default=256, show_default=True)
@click.option("--optimizer", default="rmsprop", show_default=True)
@click.option("--train-seconds", type=float, default=60.0, show_default=True)
@click.option("--predict-seconds", type=float, default=20.0, show_default=True)
@click.option("--topk", type=int, default=100, show_default=True)
@click.option("--quick", is_flag=True, help="20,000 users, 8 s of training, 4 s of prediction.")
@click.option("--torch", "with_torch", is_flag=True, help="Run torch_reference.py beside it.")
@click.option("--backend", type=click.Choice(["cpu", "gpu"]), default="cpu", show_default=True,
              help="gpu: the CUDA backend, beside torch_reference.py --device cuda.")
@click.option("--tf32", type=click.Choice(["off", "on"]), default="off", show_default=True,
              help="TF32 products on the GPU, for both: Destiny's --tf32 and PyTorch's "
                   "allow_tf32 (before 2026-11-23 only PyTorch's).")
@click.option("--window-steps", type=int, default=None,
              help="Training steps per timed window [default: 1 on the cpu, 10 on a GPU].")
@click.option("--workdir", default="build/bench", show_default=True)
@click.option("--json", "json_path", default=None)
def main(config, users, items, mean_per_user, batch, optimizer, train_seconds, predict_seconds,
         topk, quick, with_torch, backend, tf32, window_steps, workdir, json_path):
    """Time Destiny's training and prediction on the benchmark network."""
    import numba

    from destiny.io.dataset import read_dataset
    from destiny.kernels import get_backend
    from destiny.netdef import load_netdef
    from destiny.network import Network
    from destiny.predict import queue_recommendations, score_batches
    from destiny.train import TrainData, train_config

    if with_torch:
        check_torch()
    if quick:
        users, train_seconds, predict_seconds = 20000, 8.0, 4.0
    os.makedirs(workdir, exist_ok=True)
    inp, out = dataset_files(workdir, users, items, mean_per_user, 0)
    datasets = {"gl_input": read_dataset(inp), "gl_output": read_dataset(out)}
    widths = {n: d.width for n, d in datasets.items()}
    netdef = load_netdef(config, dataset_widths=widths)
    kb = get_backend(backend, tf32=tf32 == "on")
    net = Network(netdef, kb)
    net.initialize(1)
    cfg = train_config(optimizer, batch=batch, shuffle=False)
    net.init_optimizer(cfg.optimizer_config())
    data = TrainData(net, datasets)
    E = data.examples
    phases = {"data": [], "forward": [], "backward": [], "update": []}
    window, pos, step = [], 0, 0
    # A GPU queues its work, so the phases of a step can be timed only by waiting for the
    # device after each, which stops the host from running ahead of it. The samples/s come
    # from windows of steps run as train_epochs runs them (the device synchronized at the
    # window's end only; backward's loss read is in every step, as in training), and the
    # breakdown from one more step after each window, synchronized phase by phase.
    # torch_reference.py times its windows the same way. On the cpu a window is one step and
    # is timed phase by phase (synchronize() does nothing there).
    if window_steps is None:
        window_steps = 1 if backend == "cpu" else 10

    def train_step(timed: bool):
        """One step as train_epochs runs it; with ``timed``, the seconds of its four phases."""
        nonlocal pos, step
        marks = [time.perf_counter()]

        def mark():
            if timed:
                kb.synchronize()
                marks.append(time.perf_counter())

        rows = np.arange(pos, min(pos + batch, E))
        b = data.batch(rows)
        mark()
        net.forward(b, train=True, dropout_key=step)
        mark()
        net.backward()
        mark()
        step += 1
        net.update(cfg.alpha, step, cfg.optimizer_config())
        mark()
        pos = 0 if pos + batch >= E else pos + batch
        return len(rows), np.diff(marks)

    deadline = None
    while True:
        kb.synchronize()
        t0 = time.perf_counter()
        samples, first_step = 0, step + 1
        for _ in range(window_steps):
            n, times = train_step(timed=window_steps == 1)
            samples += n
        kb.synchronize()
        t1 = time.perf_counter()
        if first_step <= 2:  # warm-up (compilation, first touch of the buffers): steps 1-2
            deadline = time.perf_counter() + train_seconds
            continue
        window.append(samples / (t1 - t0))
        if window_steps > 1:
            _, times = train_step(timed=True)
        for name, dt in zip(phases, times, strict=True):
            phases[name].append(dt)
        if time.perf_counter() > deadline:
            break
    train_sps = statistics.median(window)

    pred, pred_topk = [], []
    indptr, indices = datasets["gl_input"].indptr, datasets["gl_input"].indices
    n_items = len(np.unique(indices))
    output = net.outputs[0]
    span = window_steps * batch
    pos = 0

    def predict_window(with_top_k: bool) -> float:
        """Samples/s over a window of batches, the device synchronized at its end only (as
        torch_reference.py times its windows). Alternate windows take top-k as predict does
        (its loop, ``queue_recommendations``: from the output's pre-activations where that is
        exact and pays, each user's own items filtered out), a batch's answers waited for
        once the next batch is queued (``Predictor.recommend``)."""
        nonlocal pos
        lo, hi = pos, min(pos + span, E)
        pos = 0 if hi + span > E else hi  # (whole windows: a pass skips the rows after them)
        ptr = indptr[lo:hi + 1] - indptr[lo]
        idx = indices[indptr[lo]:indptr[hi]]
        seen = (ptr, idx, np.zeros(len(idx), np.float32))
        t0 = time.perf_counter()
        if with_top_k:
            queued = None
            for _, *ahead in queue_recommendations(net, ptr, idx, topk, layer=output,
                                                   batch_size=batch, filter_csr=seen,
                                                   n_items=n_items):
                for download in queued or ():
                    download.get()
                queued = ahead
            for download in queued or ():
                download.get()
        else:
            for _ in score_batches(net, ptr, idx, batch_size=batch, output=output):
                pass
        kb.synchronize()
        return (hi - lo) / (time.perf_counter() - t0)

    for i in range(4):  # warm-up
        predict_window(i % 2 == 1)
    deadline, i = time.perf_counter() + predict_seconds, 0
    while time.perf_counter() < deadline or i < 4:
        (pred_topk if i % 2 else pred).append(predict_window(i % 2 == 1))
        i += 1

    nnz = datasets["gl_input"].nnz / E
    train_flop, predict_flop = flops_per_sample(net, nnz)
    last = [c for c in net.connections if c.dest.name == net.outputs[0]][0]
    ceiling = max(matmul_gflops(batch, last.source.n, last.dest.n, 3.0, kb), 1e-9)
    bandwidth = copy_bandwidth(kb)
    params = sum(c.W.size + c.b.size for c in net.connections if not c.shared)
    floor_step = (train_flop * batch / (ceiling * 1e9)
                  + 4.0 * params * (3 + 2 * kb.state_arrays_needed(
                      cfg.optimizer_config().mode)) / bandwidth)
    result = {
        "device": backend, "products": kb.products, "threads": numba.get_num_threads(),
        "users": E, "items": items,
        "batch": batch, "optimizer": optimizer, "parameters": params,
        "train_samples_per_s": train_sps,
        "predict_samples_per_s": statistics.median(pred),
        "predict_topk_samples_per_s": statistics.median(pred_topk),
        "flop_per_sample": {"train": train_flop, "predict": predict_flop},
        "gflops": {"train": train_sps * train_flop / 1e9,
                   "predict": statistics.median(pred) * predict_flop / 1e9},
        "ceiling_gflops": ceiling, "copy_bandwidth_gb_s": bandwidth / 1e9,
        "floor_samples_per_s": batch / floor_step,
        "breakdown_ms": {k: 1e3 * statistics.median(v) for k, v in phases.items()},
        # The 10th and 90th percentiles of the samples/s behind each median: a run whose
        # median sits far from its neighbours' shows here whether all of it was slow.
        "percentiles_10_90": {name: [float(np.percentile(v, 10)), float(np.percentile(v, 90))]
                              for name, v in (("train", window), ("predict", pred),
                                              ("predict_topk", pred_topk))},
    }
    print(f"destiny train: {train_sps:,.0f} samples/s, {result['gflops']['train']:.1f} GFLOP/s "
          f"({100 * result['gflops']['train'] / ceiling:.0f}% of the {ceiling:.0f} GFLOP/s "
          f"matmul rate); floor {result['floor_samples_per_s']:,.0f} samples/s "
          f"({100 * train_sps / result['floor_samples_per_s']:.0f}% of it)")
    breakdown = result["breakdown_ms"].items()
    print("  per step (ms): " + ", ".join(f"{k} {v:.1f}" for k, v in breakdown))
    print(f"destiny predict: {result['predict_samples_per_s']:,.0f} samples/s; with top-{topk} "
          f"and filters {result['predict_topk_samples_per_s']:,.0f} samples/s")
    print("  10th-90th percentiles (samples/s): " + ", ".join(
        f"{name} {lo:,.0f}-{hi:,.0f}" for name, (lo, hi) in result["percentiles_10_90"].items()))
    if with_torch:
        result["torch"] = run_torch(inp, config, users, batch, optimizer, train_seconds,
                                    predict_seconds, workdir,
                                    device="cuda" if backend == "gpu" else "cpu", tf32=tf32)
        t = result["torch"]
        for key in ("train_samples_per_s", "predict_samples_per_s", "predict_topk_samples_per_s"):
            print(f"{key}: destiny {result[key]:,.1f}, torch {t[key]:,.1f}, "
                  f"ratio {result[key] / t[key]:.2f}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=2)


def torch_env() -> dict:
    """The environment PyTorch runs in: as its users run it, without the thread wait policies
    Destiny set for itself when it was imported (``destiny.THREAD_WAIT_DEFAULTS``)."""
    return {k: v for k, v in os.environ.items() if k not in destiny.SET_BY_DESTINY}


def run_torch(data, config, users, batch, optimizer, train_seconds, predict_seconds, workdir,
              device="cpu", tf32="off"):
    out = os.path.join(workdir, "torch.json")
    threads = str(len(os.sched_getaffinity(0)))
    subprocess.run([sys.executable, TORCH_REFERENCE, "--data", data, "--config", config,
                    "--users", str(users), "--batch", str(batch), "--optimizer", optimizer,
                    "--threads", threads, "--train-seconds", str(train_seconds),
                    "--predict-seconds", str(predict_seconds), "--device", device,
                    "--tf32", tf32, "--json", out], check=True, env=torch_env())
    with open(out) as f:
        return json.load(f)


if __name__ == "__main__":
    main()
