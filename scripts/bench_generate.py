#!/usr/bin/env python3
"""Benchmark generate-netcdf on MovieLens-20M-shaped synthetic text.

Generates the input once (cached under --workdir), then runs the real command in a fresh
process --repeat times and reports the median wall time, the peak resident memory of the
process, and the floor: reading the text from the page cache plus writing the output at the
machine's measured copy bandwidth.

Example:
  python scripts/bench_generate.py --repeat 3 --json build/bench/generate.json
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

from destiny import synthetic

RUN = "from destiny.cli.generate_netcdf import main; main()"


def timed_run(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one child process (which includes this process's RSS
    at the fork)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode()
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"generate-netcdf failed:\n{err}")
    return wall, usage.ru_maxrss / 1024


def read_bandwidth(path: str) -> float:
    """Bytes/s reading ``path`` (already in the page cache) in 16 MiB chunks."""
    start = time.perf_counter()
    with open(path, "rb") as f:
        while f.read(16 << 20):
            pass
    return os.path.getsize(path) / (time.perf_counter() - start)


def copy_bandwidth() -> float:
    """Bytes/s of a 256 MiB memcpy (read + write counted once, as moved bytes)."""
    a = np.ones(32 << 20, dtype=np.float64)
    b = np.empty_like(a)
    best = min(_time(lambda: np.copyto(b, a)) for _ in range(5))
    return a.nbytes / best


def _time(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--users", type=int, default=synthetic.ML20M_USERS, show_default=True)
@click.option("--items", type=int, default=synthetic.ML20M_ITEMS, show_default=True)
@click.option("--mean-per-user", type=float, default=synthetic.ML20M_MEAN_PER_USER,
              show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--repeat", type=int, default=3, show_default=True)
@click.option("--workdir", default="build/bench", show_default=True)
@click.option("--json", "json_path", default=None, help="Also write the numbers here.")
def main(users, items, mean_per_user, seed, repeat, workdir, json_path):
    """Time generate-netcdf on synthetic MovieLens-20M-shaped text."""
    os.makedirs(workdir, exist_ok=True)
    text = os.path.join(workdir, f"synthetic_{users}_{items}_{mean_per_user:g}_{seed}.txt")
    if not os.path.exists(text):
        # In a child process: Linux counts a parent's memory high-water mark at fork into its
        # children's ru_maxrss, so this process must stay small to measure generate-netcdf.
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "synthetic_data.py")
        subprocess.run([sys.executable, script, "--users", str(users), "--items", str(items),
                        "--mean-per-user", str(mean_per_user), "--seed", str(seed),
                        "--format", "dsstne", "-o", text], check=True)
    size = os.path.getsize(text)
    out = os.path.join(workdir, "gen")
    argv = [sys.executable, "-c", RUN, "-q", "-i", text, "-o", out + ".nc", "-d", "gl_input",
            "-f", out + "_features", "-s", out + "_samples", "-c"]

    cold_wall, cold_rss = timed_run(argv)  # may include numba compilation (cold cache)
    runs = [timed_run(argv) for _ in range(repeat)]
    walls = [w for w, _ in runs]
    peak = max(m for _, m in runs + [(cold_wall, cold_rss)])
    with open(text, "rb") as f:
        lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(16 << 20), b""))
    from destiny.io.dataset import read_dataset
    entries = read_dataset(out + ".nc").nnz
    out_bytes = os.path.getsize(out + ".nc")
    read_bw, copy_bw = read_bandwidth(text), copy_bandwidth()
    floor = size / read_bw + out_bytes / copy_bw
    median = statistics.median(walls)
    result = {
        "input_bytes": size, "lines": lines, "entries": entries, "output_bytes": out_bytes,
        "first_run_s": cold_wall, "median_s": median, "runs_s": walls, "peak_rss_mib": peak,
        "mb_per_s": size / median / 1e6, "entries_per_s": entries / median,
        "read_bandwidth_gb_s": read_bw / 1e9, "copy_bandwidth_gb_s": copy_bw / 1e9,
        "floor_s": floor, "fraction_of_floor": floor / median,
    }
    click.echo(
        f"generate-netcdf: {lines:,} lines, {entries:,} entries, {size / 1e6:.0f} MB of text\n"
        f"  median {median:.2f} s over {repeat} runs ({', '.join(f'{w:.2f}' for w in walls)}); "
        f"first run {cold_wall:.2f} s\n"
        f"  {size / median / 1e6:.0f} MB/s, {entries / median / 1e6:.2f} M entries/s, "
        f"peak RSS {peak:.0f} MiB\n"
        f"  floor {floor:.2f} s (read {read_bw / 1e9:.2f} GB/s from page cache, copy "
        f"{copy_bw / 1e9:.2f} GB/s): {100 * floor / median:.0f}% of the floor's speed")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
