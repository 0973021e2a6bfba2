"""What every CUDA kernel module shares: launch sizes and argument conversion.

Launch sizes are module constants because block-wide reductions size their shared memory by
them at compile time. Under numba's simulator every thread is a Python thread (about 0.15 ms
each to start), so there the blocks are tiny and the grids capped: the kernels loop with a
grid stride, so any launch size computes the same result, and the small blocks make the
tests go through those loops.

Device functions that call ``cuda.*`` (block reductions) live in the module of the kernels
that use them: the simulator substitutes its fake ``cuda`` module in the launching kernel's
module for the whole launch, but in another module only around each call, which races when
several simulated threads are inside that call at once.
"""

from __future__ import annotations

import functools
import math

from numba import config, cuda

SIMULATED = bool(config.ENABLE_CUDASIM)

# Threads per block of the elementwise kernels, and the most blocks a grid-stride kernel gets.
THREADS = 8 if SIMULATED else 256
MAX_BLOCKS = 2 if SIMULATED else 4096
# Threads per block of the kernels that give one block to each row (a power of two: the
# reductions halve it).
ROW_THREADS = 2 if SIMULATED else 256


def blocks_for(n: int, threads: int = THREADS) -> int:
    """Blocks for ``n`` items of a grid-stride kernel: enough to cover them, at most MAX_BLOCKS."""
    return max(1, min(math.ceil(n / threads), MAX_BLOCKS))


def _as_device(x):
    # numba device arrays (and the simulator's) pass through; CuPy arrays and other owners of
    # __cuda_array_interface__ become numba views of the same memory (no copy).
    if hasattr(x, "__cuda_array_interface__") and not hasattr(x, "copy_to_host"):
        return cuda.as_cuda_array(x)
    return x


def device_arrays(fn):
    """Let a kernel wrapper take any ``__cuda_array_interface__`` array as a numba device array."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*(_as_device(a) for a in args),
                  **{name: _as_device(a) for name, a in kwargs.items()})
    return wrapper
