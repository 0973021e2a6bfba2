"""Record the argument types of every CUDA kernel launch of a test run.

Set ``DESTINY_CUDA_SIGNATURES=<file>`` and conftest.py installs the recorder before any kernel
module is imported; at the end of the session the file lists each kernel with each signature
it was launched with. ``scripts/cuda_compile_check.py`` then compiles every one of them to PTX
with numba-cuda's real compiler, which needs no GPU: under the simulator a kernel runs as
Python, so code the compiler refuses would otherwise be found only on a GPU.
"""

from __future__ import annotations

import functools
import json

import numpy as np

_SEEN: dict[tuple, list] = {}


def describe(a):
    """A launch argument as JSON: an array's dtype, dimensions and layout, or a scalar's type."""
    from destiny.kernels.cuda.launch import c_contiguous

    if isinstance(a, tuple):
        return ["tuple", [describe(x) for x in a]]
    if hasattr(a, "shape") and hasattr(a, "dtype") and not isinstance(a, np.generic):
        shape, strides, itemsize = tuple(a.shape), tuple(a.strides), a.dtype.itemsize
        if c_contiguous(shape, strides, itemsize):
            layout = "C"
        elif c_contiguous(shape[::-1], strides[::-1], itemsize):
            layout = "F"
        else:
            layout = "A"
        return ["array", a.dtype.str, len(shape), layout]
    if isinstance(a, (bool, np.bool_)):
        return ["scalar", "bool"]
    if isinstance(a, int):
        return ["scalar", "int64"]  # numba types a Python int as int64, a float as float64
    if isinstance(a, float):
        return ["scalar", "float64"]
    return ["scalar", np.dtype(type(a)).name]


class _Recording:
    """A kernel as ``launch.kernel`` makes it, noting each launch's signature."""

    def __init__(self, make, fn):
        self.dispatcher = make(fn)
        self.where = (fn.__module__, fn.__name__)
        functools.update_wrapper(self, fn)

    def __getattr__(self, name):
        return getattr(self.dispatcher, name)

    def __getitem__(self, config):
        run = self.dispatcher[config]

        def launch(*args):
            described = [describe(a) for a in args]
            _SEEN[(*self.where, json.dumps(described))] = described
            return run(*args)
        return launch


def install() -> None:
    """Record from now on: every kernel module takes ``kernel`` from ``launch`` at its import,
    so this must come before the first of them is imported."""
    from destiny.kernels.cuda import launch

    make = launch.kernel
    launch.kernel = functools.partial(_Recording, make)


def write(path: str) -> None:
    with open(path, "w") as f:
        json.dump([[module, name, described] for (module, name, _), described in _SEEN.items()],
                  f, indent=1)
