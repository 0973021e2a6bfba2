"""Which GPU this process drives: under mpiexec, each rank on a machine takes its own.

DSSTNE ran one process per GPU, its layers split across them (spec 7). numba.cuda and CuPy
both start on device 0, so without a choice every rank of a job on a machine with several
GPUs would share the first one, and the others would stand idle. A rank instead takes GPU
``local rank % count`` (the launcher's or ``CUDA_VISIBLE_DEVICES``' numbering): the ranks on
a machine take its GPUs in turn, and share them round-robin when there are more ranks.

Both libraries are bound to the device before any array is made: numba's kernels and arrays
(``cuda.select_device``, the device's primary context) and CuPy's memory pool and cuBLAS
handle (its current device, the same primary context), which numba's arrays come from
(``memory``) and the products run on (``matmul``). A process drives one GPU: the kernels'
scratch arrays and staging memory belong to the first device's context.
"""

from __future__ import annotations

from numba import cuda

from destiny.kernels.cuda.launch import SIMULATED
from destiny.kernels.cuda.matmul import cublas_available, cupy_module

_bound: int | None = None  # the device this process drives, once bound


def device_for(process: int, count: int) -> int:
    """The GPU of the ``process``-th process on a machine with ``count`` GPUs."""
    return process % count


def sharing(process: int, processes: int, count: int) -> int:
    """How many of a machine's ``processes`` drive the GPU of the ``process``-th."""
    return len(range(device_for(process, count), processes, count))


def use_device(process: int, processes: int = 1) -> tuple[int | None, int]:
    """Bind this process to its GPU (``device_for``): (the device's number, how many of the
    machine's ``processes`` share it). Under the simulator, which has one device: (None, 1).

    Raises ``BackendUnavailableError`` where this process already drives another GPU.
    """
    global _bound
    if SIMULATED:
        return None, 1
    from destiny.kernels import BackendUnavailableError

    count = len(cuda.gpus)
    index = device_for(process, count)
    if _bound is None:
        try:
            cuda.select_device(index)
        except RuntimeError as e:  # numba: "Cannot switch CUDA-context."
            raise BackendUnavailableError(
                f"this process already drives a GPU and cannot take GPU {index} too ({e}); "
                "one process drives one GPU: run the work for the other GPU in its own "
                "process.") from None
        if cublas_available():
            cupy_module().cuda.Device(index).use()
        _bound = index
    elif _bound != index:
        raise BackendUnavailableError(
            f"this process already drives GPU {_bound} and cannot take GPU {index} too; one "
            "process drives one GPU: run the work for the other GPU in its own process.")
    return index, sharing(process, processes, count)
