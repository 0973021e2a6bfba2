"""Kernels: the same functions in ``reference`` (NumPy), ``cpu`` (numba) and ``cuda`` (numba.cuda).

Conventions for every backend:

* Dimension letters: ``B`` batch rows, ``I`` input units (features), ``O`` output units,
  ``K`` entries of a CSR batch.
* Kernels take raw arrays only. A CSR batch is ``(indptr, indices, values)``: ``indptr`` int64
  of length B + 1, ``indices`` int32 of length K, ``values`` float32 of length K, or of length
  0 for indicator data (every listed value is 1). Dense arrays are C-contiguous float32.
* Outputs are passed in, first; kernels allocate nothing the caller can reuse.
* Kernels never communicate. What needs a whole row or column of a layer split across MPI
  ranks (SoftMax, DeltaNorm, WeightNorm of a ``ROWS`` matrix) comes as a pair: ``*_partials``
  reduces the rank's units to a few float64 numbers per row (or column), the network adds the
  ranks' numbers up, and ``*_finish`` completes the rank's units with the whole row's (or column's).
"""

from __future__ import annotations

import os
import types

from destiny.errors import DestinyError


class BackendUnavailableError(DestinyError):
    """The requested backend cannot run on this machine."""


# The kernels every backend provides, by family module (the same names in each backend).
KERNELS = {
    "sparse": ("sparse_fc_forward", "sparse_fc_weight_grad", "sparse_add"),
    "pointwise": ("activation_forward", "activation_backward", "dropout_forward",
                  "activation_dropout_forward", "sparseness_penalty", "delta_norm",
                  "weight_norm", "softmax_forward_partials", "softmax_forward_finish",
                  "softmax_backward_partials", "softmax_backward_finish",
                  "delta_norm_partials", "delta_norm_finish", "weight_norm_partials",
                  "weight_norm_finish"),
    "loss": ("sparse_loss_delta", "dense_loss_delta", "softmax_loss_partials",
             "softmax_loss_finish"),
    "optim": ("update_weights", "update_bias", "update_weight_rows", "sparse_grad_update_rows",
              "catch_up_rows", "state_arrays_needed"),
    "topk": ("top_k", "top_k_activated", "multiply_filter"),
    "rng": ("uniform_fill", "denoise_keep"),
    "batch": ("take_rows",),
    "dense": ("empty", "zeros", "free_memory", "to_device", "to_host", "download",
              "synchronize", "gemm", "add", "add_bias", "multiply", "scale", "copy", "fill",
              "column_mean", "zero_rows", "sum_squares", "abs_sum", "all_finite"),
}


def _load(package: str, tf32: bool = False, process: int = 0,
          processes: int = 1) -> types.SimpleNamespace:
    import functools
    import importlib

    functions = {}
    for family, names in KERNELS.items():
        module = importlib.import_module(f"destiny.kernels.{package}.{family}")
        functions.update({name: getattr(module, name) for name in names})
    # The arithmetic of the dense products: TF32 only where allowed and a GPU computes them,
    # or the reference models it (to measure TF32's effect on a model without a GPU).
    products = "tf32" if tf32 and package in ("cuda", "reference") else "float32"
    if products == "tf32":
        functions["gemm"] = functools.partial(functions["gemm"], tf32=True)
    device = None
    if package == "cuda":  # (before any array is made: the device decides where they live)
        from destiny.kernels.cuda.device import use_device

        device, shared_by = use_device(process, processes)
        if shared_by > 1:  # the processes on one GPU each count on a share of its memory
            free_memory = functions["free_memory"]
            functions["free_memory"] = lambda: (None if (free := free_memory()) is None
                                                else free // shared_by)
    return types.SimpleNamespace(name=package, products=products, device=device, **functions)


def cuda_available() -> bool:
    """Whether numba.cuda drives a real NVIDIA GPU here (the CUDA simulator does not count).

    Imports numba.cuda (the first call decides, for the process, between a GPU and the
    simulator: ``NUMBA_ENABLE_CUDASIM=1`` must be set before it).
    """
    try:
        from numba import config, cuda
    except Exception:  # numba.cuda can fail to import without a CUDA toolkit
        return False
    if config.ENABLE_CUDASIM:
        return False
    try:
        return bool(cuda.is_available())
    except Exception:
        return False


def get_backend(name: str = "auto", *, tf32: bool = False, process: int = 0,
                processes: int = 1) -> types.SimpleNamespace:
    """The kernels of one backend, chosen once: ``reference``, ``cpu``, ``gpu`` or ``auto``.

    ``auto`` takes the GPU when numba.cuda finds one, else the cpu. ``gpu`` where there is
    none raises with the extra to install; under numba's CUDA simulator
    (``NUMBA_ENABLE_CUDASIM=1``, the tests) it runs the CUDA kernels in Python.

    ``tf32`` allows the GPU's dense products to run in TF32 on the tensor cores (as
    PyTorch's ``allow_tf32``): a permission, so the cpu, whose products are float32 anyway,
    takes it without effect. The reference models TF32 by cutting the operands' mantissas.
    The namespace's ``products`` says which arithmetic they use.

    ``process``: this process's rank among the job's ``processes`` on its machine
    (``Comm.local_rank``, ``Comm.local_size``). The GPU backend binds the process to GPU
    ``process % count``, so that the ranks of a job each drive their own GPU
    (``kernels/cuda/device.py``; the namespace's ``device`` says which: None on the cpu and
    under the simulator), and its ``free_memory`` is this process's share of that GPU's.
    """
    if name == "auto":
        name = "gpu" if _gpu_present() else "cpu"
    if name in ("reference", "cpu"):
        return _load(name, tf32)
    if name == "gpu":
        if not (_simulated() or cuda_available()):
            raise BackendUnavailableError(
                "--backend gpu: no NVIDIA GPU is usable here (numba.cuda finds none, or the "
                "gpu extra is missing: pip install '.[gpu]' in Destiny's directory, which "
                "brings numba-cuda and CuPy). Use --backend cpu (or auto).")
        return _load("cuda", tf32, process, processes)
    raise BackendUnavailableError(f"unknown backend {name!r}; expected auto, cpu, gpu or "
                                  "reference.")


def _simulated() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def _gpu_present() -> bool:
    # Importing numba.cuda costs a few tenths of a second: ask it only where a driver exists.
    return os.path.exists("/dev/nvidiactl") and cuda_available()
