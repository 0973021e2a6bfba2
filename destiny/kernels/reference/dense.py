"""NumPy reference for the dense operations of a network step, and array allocation.

The network calls these instead of NumPy so that the same code runs on device arrays (the CUDA
backend) and on both cores (the cpu backend's numba loops). Outputs first, in place.
"""

from __future__ import annotations

import numpy as np


# -- memory -------------------------------------------------------------------------------

def empty(shape, dtype=np.float32):
    return np.empty(shape, dtype=dtype)


def zeros(shape, dtype=np.float32):
    return np.zeros(shape, dtype=dtype)


def to_device(array):
    """The backend's copy of a host array (the array itself on the CPU)."""
    return np.asarray(array)


def synchronize():
    """Wait until the backend's queued work is done (timing; nothing is queued on the CPU)."""


def free_memory():
    """Bytes of the backend's memory free for more arrays, or None where the data a backend
    works on is already in its memory (the host's, here): nothing is copied, so there is
    nothing to budget (``destiny.train.TrainData``)."""
    return None


def to_host(array):
    """A NumPy array of a backend array (the array itself on the CPU)."""
    return np.asarray(array)


class Ready:
    """A host array already there: ``download``'s answer where nothing is left to copy."""

    def __init__(self, array):
        self.array = array

    def get(self):
        return self.array


def download(array):
    """Start copying a backend array to the host; the answer's ``get()`` waits for the copy and
    returns the NumPy array (the GPU goes on with later work meanwhile; here it is there)."""
    return Ready(to_host(array))


# -- dense operations ---------------------------------------------------------------------

def gemm(out, a, b, trans_a=False, trans_b=False, alpha=1.0, beta=0.0, tf32=False):
    """``out = alpha * op(a) @ op(b) + beta * out``; ``op(x)`` is ``x.T`` when trans.

    ``tf32`` models the GPU's TF32 products (``get_backend(..., tf32=True)``) for float32
    operands: each input is cut to TF32 first (``tf32_inputs``), then multiplied exactly.
    """
    if tf32 and a.dtype == np.float32 and b.dtype == np.float32:
        a, b = tf32_inputs(a), tf32_inputs(b)
    a, b = (a.T if trans_a else a), (b.T if trans_b else b)
    product = a.astype(np.float64) @ b.astype(np.float64)
    old = 0.0 if beta == 0 else beta * out.astype(np.float64)
    out[...] = (alpha * product + old).astype(out.dtype)


def tf32_inputs(x):
    """``x`` as the tensor cores read float32 operands in TF32: 10 of the 23 mantissa bits.

    The low 13 bits are dropped (truncation, as PyTorch's numerical-accuracy notes describe
    the hardware reading them); a kernel that converts with rounding first errs half as much,
    so this is the pessimistic model of the GPU's ``--tf32`` products. Infinities and NaN
    stay (a NaN whose payload is all in the low bits would otherwise become an infinity).
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    cut = (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(np.isnan(x), x, cut)


def add(out, x):
    """``out += x`` (same shapes)."""
    out += x


def add_bias(out, b, scale=1.0):
    """``out[r, :] += scale * b`` for every row r."""
    out += (scale * np.asarray(b, dtype=np.float64)).astype(out.dtype)


def multiply(out, x):
    """``out *= x`` elementwise (same shapes)."""
    out *= x


def scale(out, factor):
    """``out *= factor``."""
    out *= out.dtype.type(factor)


def copy(out, x):
    """``out[...] = x``."""
    out[...] = x


def fill(out, value):
    """``out[...] = value``."""
    out[...] = value


def column_mean(out, x):
    """``out[j] = mean over rows of x[:, j]``, summed in float64 (spec 5.7's bias gradient)."""
    out[...] = x.mean(axis=0, dtype=np.float64).astype(out.dtype)


def zero_rows(x, rows):
    """``x[rows] = 0`` (``rows`` may repeat): forget a sparse gradient's touched rows."""
    x[np.asarray(rows)] = 0


def sum_squares(x) -> float:
    """Sum of ``x**2`` in float64."""
    v = np.asarray(x, dtype=np.float64).ravel()
    return float(v @ v)


def abs_sum(x) -> float:
    """Sum of ``|x|`` in float64."""
    return float(np.abs(np.asarray(x, dtype=np.float64)).sum())


def all_finite(x) -> bool:
    """Whether no element of ``x`` is NaN or infinite."""
    return bool(np.isfinite(x).all())
