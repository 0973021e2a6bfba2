"""Which GPU this process drives: under mpiexec, each rank on a machine takes its own.

DSSTNE ran one process per GPU, its layers split across them (spec 7). numba.cuda and CuPy
both start on device 0, so without a choice every rank of a job on a machine with several
GPUs would share the first one, and the others would stand idle. A rank instead takes GPU
``local rank % count`` (the launcher's or ``CUDA_VISIBLE_DEVICES``' numbering): the ranks on
a machine take its GPUs in turn, and share them round-robin when there are more ranks.

Both libraries must be bound to the same device before either makes its context: numba's
kernels and arrays (``cuda.select_device``, the device's primary context) and CuPy's memory
pool and cuBLAS handle (its current device), which numba's arrays come from (``memory``) and
the products run on (``matmul``).
"""

from __future__ import annotations

from numba import cuda

from destiny.kernels.cuda.launch import SIMULATED
from destiny.kernels.cuda.matmul import _cublas


def device_for(process: int, count: int) -> int:
    """The GPU of the ``process``-th process on a machine with ``count`` GPUs."""
    return process % count


def use_device(process: int) -> int | None:
    """Bind this process to its GPU (``device_for``) and return the device's number; None
    under the simulator, which has one device only."""
    if SIMULATED:
        return None
    index = device_for(process, len(cuda.gpus))
    if index:  # (device 0 is both libraries' default: a one-GPU run binds nothing)
        cuda.select_device(index)
        if _cublas() is not None:
            cupy, _ = _cublas()
            cupy.cuda.Device(index).use()
    return index
