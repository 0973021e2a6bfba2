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


def _wake_the_block_manager_on_change():
    """The simulator's block manager without its busy wait: the same rule, on being told.

    numba 0.68's ``BlockManager.run`` polls its block's threads in a loop until every one has
    ended, releasing them when every live one waits in syncthreads: a thread of its own that
    keeps the GIL busy (half of a launch's time, 255,000 polls in one top_k test). Here each
    thread says when it starts waiting in syncthreads or ends (an event), and the manager
    polls once for each such change, with the same checks in the same order: all live threads
    blocked releases them; a thread's exception aborts the others and is raised.
    """
    from numba.cuda.simulator import kernel

    thread, manager = kernel.BlockThread, kernel.BlockManager
    if "livethreads" not in manager.run.__code__.co_varnames:  # (not the polling loop: a
        return                                                 # numba whose manager differs)
    plain_run = thread.run

    def run(self):
        try:
            plain_run(self)
        finally:
            self.finished = True
            self._manager.changed.set()

    def syncthreads(self):  # (BlockThread.syncthreads, telling the manager it waits)
        if self.abort:
            raise RuntimeError("abort flag set on syncthreads call")
        self.syncthreads_blocked = True
        self._manager.changed.set()
        self.syncthreads_event.wait()
        self.syncthreads_event.clear()
        if self.abort:
            raise RuntimeError("abort flag set on syncthreads clear")

    def manage(self, grid_point, *args):
        self.changed = threading.Event()
        threads = []
        for block_point in np.ndindex(*self._block_dim):
            def target():
                self._f(*args)
            t = kernel.BlockThread(target, self, grid_point, block_point, self._debug)
            t.finished = False
            t.start()
            threads.append(t)
        live, blocked = set(threads), set()
        while live:
            self.changed.wait()
            self.changed.clear()
            for t in live:
                if t.syncthreads_blocked:
                    blocked.add(t)
                elif t.exception:
                    for t_other in threads:
                        t_other.abort = True
                        t_other.syncthreads_blocked = False
                        t_other.syncthreads_event.set()
                    raise t.exception[0].with_traceback(t.exception[1])
            live = {t for t in live if not t.finished}
            if live and live == blocked:
                for t in blocked:
                    t.syncthreads_blocked = False
                    t.syncthreads_event.set()
                blocked = set()
        for t in threads:
            t.join()
            if t.exception:
                raise t.exception[0].with_traceback(t.exception[1])

    thread.run, thread.syncthreads, manager.run = run, syncthreads, manage


if SIMULATED:
    _make_shared_arrays_atomic()
    _wake_the_block_manager_on_change()


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
