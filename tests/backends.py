"""The kernel backends the tests compare, with the CUDA kernels callable on host arrays.

``family("loss")`` gives ``{"reference": ..., "cpu": ..., "cuda": ...}`` for one kernel family
module. The "cuda" entry wraps every function of ``destiny.kernels.cuda.<family>``: NumPy
arguments are copied to the device, the kernel runs, and every array is copied back into the
caller's arrays (so in-place and output arguments behave as on the cpu, and an array passed
twice, ``activation_forward(a, a, ...)``, is one device array). Under numba's CUDA simulator
(set up by conftest.py when there is no GPU) each thread runs in Python, so tests give the
"cuda" backend tiny shapes: see ``tiny``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import threading
import types

import numpy as np
from numba import config, cuda

SIMULATED = bool(config.ENABLE_CUDASIM)
NAMES = ("reference", "cpu", "cuda")


def tiny(backend: str) -> bool:
    """Whether ``backend`` runs in the simulator, where a test should shrink its shapes."""
    return backend == "cuda" and SIMULATED


def _make_shared_arrays_atomic():
    """Fix a race of numba 0.68's simulator: threads of a block can get different shared arrays.

    ``FakeCUDAShared.array`` looks the array up by the caller's line and creates it when
    missing, unlocked: two threads that both miss create two arrays, and a block reduction
    then sums garbage. This is the same lookup under a lock (numba-cuda's simulator has its
    own fixes of this kind, e.g. NVIDIA/numba-cuda#690 for a neighbouring race).
    """
    from numba.core import types as numba_types
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support

    lock = threading.Lock()
    original = kernelapi.FakeCUDAShared.array

    def array(self, shape, dtype):
        if shape == 0:  # dynamic shared memory: one buffer, no lookup
            return original(self, shape, dtype)
        if isinstance(dtype, numba_types.Type):
            dtype = numpy_support.as_dtype(dtype)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)
        with lock:
            found = self._allocations.get(key)
            if found is None:
                found = self._allocations[key] = np.empty(shape, dtype)
        return found

    kernelapi.FakeCUDAShared.array = array


if SIMULATED:
    _make_shared_arrays_atomic()


@contextlib.contextmanager
def _fast_simulator():
    # The simulator's block manager busy-waits at every syncthreads, holding the GIL for
    # Python's switch interval (5 ms) each time; a short interval makes a launch ~10x faster.
    if not SIMULATED:
        yield
        return
    interval = sys.getswitchinterval()
    sys.setswitchinterval(5e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def on_host(fn):
    """Call the CUDA kernel wrapper ``fn`` with host arrays: copy in, run, copy every array back."""
    @functools.wraps(fn)
    def call(*args):
        device = {}  # id of a host array -> its device copy (one copy per distinct array)
        for a in args:
            if isinstance(a, np.ndarray) and id(a) not in device:
                device[id(a)] = cuda.to_device(np.ascontiguousarray(a))
        with _fast_simulator():
            result = fn(*(device[id(a)] if isinstance(a, np.ndarray) else a for a in args))
        for a in args:
            if isinstance(a, np.ndarray) and a.size and a.flags.writeable:
                a[...] = device[id(a)].copy_to_host()
        if hasattr(result, "__float__") and not isinstance(result, (float, np.generic)):
            result = float(result)  # a loss's DeviceError, read as the network reads it
        return result
    return call


def _wrapped(module):
    names = {name: getattr(module, name) for name in dir(module) if not name.startswith("_")}
    return types.SimpleNamespace(**{
        name: on_host(value) if getattr(value, "__module__", None) == module.__name__
        and callable(value) else value
        for name, value in names.items()})


@functools.lru_cache(maxsize=None)
def family(name: str) -> dict:
    """The modules of kernel family ``name`` by backend; "cuda" takes host arrays (see above)."""
    modules = {backend: importlib.import_module(f"destiny.kernels.{backend}.{name}")
               for backend in ("reference", "cpu")}
    modules["cuda"] = _wrapped(importlib.import_module(f"destiny.kernels.cuda.{name}"))
    return modules
