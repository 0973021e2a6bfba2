"""What every CUDA kernel module shares: launch sizes, argument conversion, scratch arrays and
the launcher of the kernels.

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

import ctypes
import functools
import math
import os
import struct

import numpy as np
from numba import config, cuda

try:
    from numba.cuda.cudadrv.devicearray import DeviceNDArrayBase
except ImportError:  # the simulator's stand-in module (where no _Launcher is made)
    DeviceNDArrayBase = ()

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


_SCRATCH: dict = {}


def scratch(name: str, n: int, dtype, *, exact: bool = False):
    """A 1-D device array for a kernel wrapper's temporaries, kept for the next call that asks
    for ``name``: ``n`` elements with ``exact`` (a call with another ``n`` makes a new one),
    else at least ``n``. Its contents are whatever the last call left.

    All kernels here run on one stream, so a call's kernels run after the previous call's and
    handing it the same memory is safe; it saves the host the 20 us or so that making a numba
    device array costs (several per sparse layer and step). One array per name and dtype, so
    the memory kept is bounded.
    """
    key = (name, np.dtype(dtype).str)
    a = _SCRATCH.get(key)
    if a is None or (a.shape[0] != n if exact else a.shape[0] < n):
        size = n if exact else max(n + n // 4, 1)  # room for the next batch's few more
        a = _SCRATCH[key] = cuda.device_array(size, dtype=dtype)
    return a


def kept(x, key, make):
    """``make(x)``, made once and kept on the array ``x`` under ``key``: a numba device array's
    shape and memory never change, and on a GPU each reshape or view is a new numba device
    array, which costs the host about 20 us. Objects without a ``__dict__`` get a new one."""
    cache = getattr(x, "__dict__", None)
    if cache is None:
        return make(x)
    values = cache.setdefault("_destiny_kept", {})
    value = values.get(key)
    if value is None:
        value = values[key] = make(x)
    return value


def reshaped(x, shape: tuple):
    """``x.reshape(shape)`` (C-contiguous ``x``), made once per array and shape (`kept`)."""
    return kept(x, ("reshape", shape), lambda a: a.reshape(shape))


def viewed(x, dtype):
    """``x.view(dtype)``, made once per array and dtype (`kept`)."""
    return kept(x, ("view", np.dtype(dtype).str), lambda a: a.view(dtype))


def flat(x):
    """``x`` as a 1-D array of its ``size`` elements (see `reshaped`)."""
    return reshaped(x, (x.size,))


def _as_device(x):
    # numba device arrays (and the simulator's) pass through; CuPy arrays and other owners of
    # __cuda_array_interface__ become numba views of the same memory (no copy).
    # (copy_to_host is asked first: on a numba array, __cuda_array_interface__ builds a dict.)
    if hasattr(x, "copy_to_host") or not hasattr(x, "__cuda_array_interface__"):
        return x
    return cuda.as_cuda_array(x)


def device_arrays(fn):
    """Let a kernel wrapper take any ``__cuda_array_interface__`` array as a numba device array."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*(_as_device(a) for a in args),
                  **{name: _as_device(a) for name, a in kwargs.items()})
    return wrapper


# -- launching ------------------------------------------------------------------------------
#
# numba's own launch (``kernel[grid, block](*args)``) costs the host 20 us plus about 8 us per
# array argument: it types every argument, wraps every array again and converts every field
# through cuda.core. A training step makes about 40 launches and the GPU works 3.7 ms of a
# 12.7 ms step (docs/benchmarks.md), so on a real GPU the kernels are launched by ``_Launcher``:
# numba still types and compiles each kernel (once per argument signature), but the launch packs
# the arguments into one buffer laid out as numba's kernel expects them and calls the driver's
# cuLaunchKernel once. Arrays that are not plainly C-contiguous take numba's path, so a kernel
# never runs with a layout it was not compiled for.

# The scalar types the kernels are given; numba types each one by its type alone (a Python int
# as int64, a float as float64), so the type is the key of a scalar argument.
_SCALARS = frozenset({int, float, bool, np.int64, np.uint64, np.int32, np.uint32, np.float32,
                      np.float64, np.bool_})
# numba's kernel ABI for an array (numba.cuda.dispatcher._Kernel._prepare_args): meminfo and
# parent (both null here), the item count, the item size, the data pointer, then the shape and
# the strides in bytes.
_ARRAY_HEAD = "PPqqP"
_CODES = {"int64": "q", "uint64": "Q", "int32": "i", "uint32": "I", "float32": "f",
          "float64": "d", "bool": "?"}
_NO_DICT: dict = {}
_INVALID_CONTEXT = 201  # CUDA_ERROR_INVALID_CONTEXT


def packs_as_scalars(a) -> bool:
    """Whether the launcher packs ``a`` itself as scalars: a value of one of the types of
    ``_SCALARS``, or a tuple of them (numba passes a tuple's items as parameters of their
    own)."""
    return type(a) in _SCALARS or (type(a) is tuple and all(type(x) in _SCALARS for x in a))


def c_contiguous(shape, strides, itemsize) -> bool:
    """Whether an array is one numba types as C-contiguous: strides exactly C's, or empty."""
    if 0 in shape:
        return True
    expected = itemsize
    for n, s in zip(reversed(shape), reversed(strides), strict=True):
        if s != expected:
            return False
        expected *= n
    return True


def _array_fields(a):
    """(key, kernel arguments) of a numba device array that numba types as C-contiguous, or
    None."""
    if not isinstance(a, DeviceNDArrayBase):
        return None
    shape, strides, itemsize = a.shape, a.strides, a.dtype.itemsize
    if not c_contiguous(shape, strides, itemsize):
        return None
    fields = ((a.dtype, len(shape)),
              (0, 0, a.size, itemsize, a.device_ctypes_pointer.value or 0) + shape + strides)
    a.__dict__["_destiny_launch"] = fields  # a device array's shape and memory never change
    return fields


def _is_array(numba_type):
    # By its attributes: numba-cuda has its own copy of numba's type classes.
    return hasattr(numba_type, "layout") and hasattr(numba_type, "ndim")


def _codes(numba_type) -> str:
    """The ``struct`` codes of one argument as numba flattens it: an array's fields, a tuple's
    items one after another (numba passes each as its own kernel parameter), a scalar."""
    if _is_array(numba_type):
        return _ARRAY_HEAD + "q" * (2 * numba_type.ndim)
    if hasattr(numba_type, "types"):  # UniTuple, Tuple
        return "".join(_codes(t) for t in numba_type.types)
    return _CODES[str(numba_type)]


def param_layout(argtypes):
    """The ``struct`` format of a kernel's flattened arguments, and each one's byte offset.

    Every argument sits at an offset aligned to its size, as ``struct``'s native mode and C
    both place them; the offsets only locate each argument in the buffer, since
    cuLaunchKernel is given one pointer per argument.
    """
    codes = "".join(_codes(t) for t in argtypes)
    offsets, prefix = [], "@"
    for code in codes:
        offsets.append(struct.calcsize(prefix + code) - struct.calcsize("@" + code))
        prefix += code
    return "@" + codes, offsets


class _Compiled:
    """One compiled signature of a kernel: its driver handle and its argument buffer."""

    __slots__ = ("handle", "format", "buffer", "params")

    def __init__(self, kernel, argtypes):
        self.format, offsets = param_layout(argtypes)
        # cuLaunchKernel copies the arguments when it is called, so the buffer is reused.
        self.buffer = ctypes.create_string_buffer(max(struct.calcsize(self.format), 8))
        base = ctypes.addressof(self.buffer)
        self.params = (ctypes.c_void_p * len(offsets))(*(base + o for o in offsets))
        handle = kernel._codelibrary.get_cufunc().handle
        self.handle = int(getattr(handle, "value", handle))  # ctypes or cuda-python binding


@functools.lru_cache(maxsize=1)
def _driver_launch():
    lib = ctypes.CDLL("libcuda.so.1")
    fn = lib.cuLaunchKernel
    fn.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    fn.restype = ctypes.c_int
    return fn


def _error_name(code: int) -> str:
    name = ctypes.c_char_p()
    if ctypes.CDLL("libcuda.so.1").cuGetErrorName(code, ctypes.byref(name)) == 0 and name.value:
        return f"{name.value.decode()} ({code})"
    return f"CUresult {code}"


def _dim3(d):
    if isinstance(d, (tuple, list)):
        return tuple(int(n) for n in d) + (1,) * (3 - len(d))
    return int(d), 1, 1


class _Launcher:
    """A numba.cuda kernel, launched as ``kernel[grid, block](*args)`` with less host work.

    Launches from one thread at a time: each compiled signature packs its arguments into one
    buffer (Destiny's training and prediction launch from their main thread only).
    """

    def __init__(self, dispatcher):
        self.dispatcher = dispatcher
        self._compiled = {}  # argument key -> _Compiled, or None: numba's own launch
        functools.update_wrapper(self, dispatcher.py_func)

    def __getattr__(self, name):  # the dispatcher's attributes (overloads, ...) as they are
        return getattr(self.dispatcher, name)

    def __getitem__(self, config):
        grid, block = config
        return functools.partial(self._launch, _dim3(grid), _dim3(block))

    def _launch(self, grid, block, *args):
        key, values = [], []
        for a in args:
            if type(a) in _SCALARS:
                key.append(type(a))
                values.append(a)
                continue
            if type(a) is tuple and packs_as_scalars(a):
                key.append((tuple, *map(type, a)))  # a tuple of scalars: its items, in turn
                values.extend(a)
                continue
            fields = getattr(a, "__dict__", _NO_DICT).get("_destiny_launch") or _array_fields(a)
            if fields is None:
                return self.dispatcher[grid, block](*args)
            key.append(fields[0])
            values.extend(fields[1])
        key = tuple(key)
        compiled = self._compiled.get(key, False)
        if compiled is False:
            compiled = self._compiled[key] = self._compile(args)
        if compiled is None:
            return self.dispatcher[grid, block](*args)
        struct.pack_into(compiled.format, compiled.buffer, 0, *values)
        err = _driver_launch()(compiled.handle, *grid, *block, 0, None, compiled.params, None)
        if err == _INVALID_CONTEXT:  # a thread that has not used the device yet: numba makes
            cuda.current_context()   # the context current on it, then launch again
            err = _driver_launch()(compiled.handle, *grid, *block, 0, None, compiled.params,
                                   None)
        if err:
            raise RuntimeError(f"cuLaunchKernel of {self.dispatcher.py_func.__name__} (grid "
                               f"{grid}, block {block}) failed: {_error_name(err)}")

    def _compile(self, args):
        argtypes = tuple(self.dispatcher.typeof_pyval(a) for a in args)
        if any(_is_array(t) and t.layout != "C" for t in argtypes):
            return None
        kernel = self.dispatcher.compile(argtypes)
        return _Compiled(kernel, argtypes)


def kernel(fn):
    """``cuda.jit`` for a kernel; on a real GPU it is launched through ``_Launcher``.

    ``DESTINY_CUDA_LAUNCH=numba`` keeps numba's own launch (to compare the two).
    """
    dispatcher = cuda.jit(fn)
    if SIMULATED or os.environ.get("DESTINY_CUDA_LAUNCH", "") == "numba":
        return dispatcher
    return _Launcher(dispatcher)
