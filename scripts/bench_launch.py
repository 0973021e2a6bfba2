#!/usr/bin/env python3
"""What one kernel launch costs the host, by the ways of launching it (a GPU, not the simulator).

A training step of the benchmark network launches about 50 kernels; on an H100 the GPU works
about 3 ms of a 10 ms step, so the host's cost per launch decides the step. This times a kernel
that does almost nothing (so the host's side is all there is), with 1, 4 and 8 array arguments:

- ``dispatch``: numba's ``kernel[grid, block](*args)``;
- ``configured``: the ``kernel[grid, block]`` object made once and called;
- ``destiny``: ``destiny.kernels.cuda.launch``'s launcher, which every Destiny kernel uses on a
  GPU (the arguments packed into one buffer, one cuLaunchKernel through ctypes);
- ``cupy-args``: dispatch with CuPy arrays (numba wraps each through __cuda_array_interface__);
- ``cupy-raw``: the same kernel as a CuPy RawKernel, for the floor of a Python launch.

  python scripts/bench_launch.py
"""

from __future__ import annotations

import statistics
import time

import numpy as np
from numba import cuda

from destiny.kernels.cuda.launch import _Launcher


@cuda.jit
def _one(a):
    if cuda.grid(1) == 0:
        a[0] += 1.0


@cuda.jit
def _four(a, b, c, d):
    if cuda.grid(1) == 0:
        a[0] += b[0] + c[0] + d[0]


@cuda.jit
def _eight(a, b, c, d, e, f, g, h):
    if cuda.grid(1) == 0:
        a[0] += b[0] + c[0] + d[0] + e[0] + f[0] + g[0] + h[0]


RAW = r"""
extern "C" __global__ void eight(float* a, const float* b, const float* c, const float* d,
                                 const float* e, const float* f, const float* g, const float* h) {
    if (blockIdx.x * blockDim.x + threadIdx.x == 0) a[0] += b[0] + c[0] + d[0] + e[0] + f[0]
                                                           + g[0] + h[0];
}
"""


def per_launch_us(launch, n=2000, repeats=5) -> float:
    try:
        launch()
    except Exception as e:  # a way this numba version lacks: say so, time the rest
        print(f"  ({type(e).__name__}: {e})")
        return float("nan")
    cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            launch()
        times.append((time.perf_counter() - start) / n * 1e6)
        cuda.synchronize()
    return statistics.median(times)


def main():
    arrays = [cuda.to_device(np.ones(1024, np.float32)) for _ in range(8)]
    kernels = {1: _one, 4: _four, 8: _eight}
    rows = []
    for n_args, k in kernels.items():
        # Each launch is timed before the next iteration; defaults bind this iteration's values.
        args = arrays[:n_args]
        rows.append((f"dispatch, {n_args} arrays",
                     per_launch_us(lambda k=k, args=args: k[1, 32](*args))))
        configured = k[1, 32]
        rows.append((f"configured, {n_args} arrays",
                     per_launch_us(lambda c=configured, args=args: c(*args))))
        fast = _Launcher(k)
        rows.append((f"destiny, {n_args} arrays",
                     per_launch_us(lambda f=fast, args=args: f[1, 32](*args))))
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        cargs = [cupy.ones(1024, np.float32) for _ in range(8)]
        rows.append(("cupy-args, 8 arrays", per_launch_us(lambda: _eight[1, 32](*cargs))))
        raw = cupy.RawKernel(RAW, "eight")
        rows.append(("cupy-raw, 8 arrays", per_launch_us(lambda: raw((1,), (32,), tuple(cargs)))))
        a = cupy.ones((256, 1024), np.float32)
        b = cupy.ones((1024, 1024), np.float32)
        out = cupy.empty((256, 1024), np.float32)
        rows.append(("cupy.matmul 256x1024x1024",
                     per_launch_us(lambda: cupy.matmul(a, b, out=out), n=500)))
    for name, us in rows:
        print(f"{us:8.1f} us per launch  {name}")


if __name__ == "__main__":
    main()
