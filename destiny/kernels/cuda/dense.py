"""The dense operations of a network step on the device, and device memory.

Same names and signatures as ``destiny.kernels.cpu.dense``: the network calls these instead of
NumPy so that one code path runs on host arrays and on device arrays. Products go to
``matmul.gemm`` (cuBLAS when CuPy is there); the elementwise operations are grid-stride loops
over the flattened (C-contiguous) arrays; ``column_mean`` gives a block to a group of columns
and sums each in float64 over several row lanes. The three reductions (``sum_squares``,
``abs_sum``, ``all_finite``) return Python values: each thread sums a fixed grid-stride share
in float64 into its own slot and the host adds the slots (a copy of a few thousand numbers,
made once per epoch), so the result does not depend on timing.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda

from destiny.kernels.cuda.launch import (MAX_BLOCKS, SIMULATED, THREADS, blocks_for,
                                         device_arrays, flat, kernel)
from destiny.kernels.cuda.matmul import gemm  # noqa: F401  (this family's product)
from destiny.kernels.reference.dense import Ready

# -- memory -------------------------------------------------------------------------------


def empty(shape, dtype=np.float32):
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if 0 in shape:  # nothing to hold: one shared array per dtype and shape (an indicator
        return _nothing(shape, dtype)  # dataset's values, every batch)
    return cuda.device_array(shape, dtype=dtype)


_EMPTY: dict = {}


def _nothing(shape, dtype):
    key = (np.dtype(dtype).str, tuple(int(n) for n in shape))
    a = _EMPTY.get(key)
    if a is None:
        a = _EMPTY[key] = cuda.device_array(key[1], dtype=dtype)
    return a


def zeros(shape, dtype=np.float32):
    out = cuda.device_array(shape, dtype=dtype)
    fill(out, 0)
    return out


def to_device(array):
    """A device copy of a host array (device arrays are returned as they are).

    On a GPU, arrays of up to ``_Staging.SLOT_BYTES`` (a batch's row numbers and offsets) go
    through page-locked staging memory and are queued without waiting (see ``_Staging``);
    larger ones (a dataset, once) are copied at once.
    """
    if hasattr(array, "copy_to_host") or hasattr(array, "__cuda_array_interface__"):
        return array
    array = np.ascontiguousarray(array)
    if array.size == 0:
        return _nothing(array.shape, array.dtype)
    slot = _slot(array.nbytes)
    if slot is None:
        return cuda.to_device(array)
    return _staging().upload(slot, array)


def download(array):
    """Start copying a device array to the host; ``get()`` on the answer waits for that copy
    alone and returns the NumPy array, while the GPU goes on with work queued after it.

    Prediction queues the next batch before it takes a batch's top-k (``destiny.predict``).
    A copy to pageable memory would wait for everything queued, so small arrays are copied
    into a page-locked slot (``_Staging``) and an event recorded after the copy; the slot is
    free again once ``get()`` has copied them out. Larger arrays, or no free slot: a copy now.
    """
    if not hasattr(array, "copy_to_host"):
        return Ready(to_host(array))
    slot = _slot(array.nbytes)
    if slot is None:
        return Ready(array.copy_to_host())
    return _staging().download(slot, array)


def _slot(nbytes: int) -> int | None:
    """A staging slot for a copy of ``nbytes``, or None: a copy at once (under the simulator,
    for an array larger than a slot, or with every slot held)."""
    return None if SIMULATED or nbytes > _Staging.SLOT_BYTES else _staging().take()


class _Staging:
    """Page-locked slots for copies that do not wait for the GPU, taken in turn.

    A copy from pageable memory (NumPy's) first waits for every kernel already queued (or
    may, in CUDA's API synchronization rules), so each batch's three uploads held the host
    until the previous step's update had run on the GPU. A copy from page-locked memory is
    queued like a kernel. So an array to upload is first copied on the host into a slot, and
    a slot is written again only after its last copy is done (an event recorded after it);
    the GPU runs at most about one step behind the host (the loss is read every step), so
    that wait does not happen in training. A slot a download wrote is held until its
    ``get()`` has copied it out.
    """

    SLOTS = 8
    SLOT_BYTES = 1 << 20

    def __init__(self):
        self.host = cuda.pinned_array(self.SLOTS * self.SLOT_BYTES, dtype=np.uint8)
        self.done = [cuda.event(timing=False) for _ in range(self.SLOTS)]
        self.used = [False] * self.SLOTS
        self.held = [False] * self.SLOTS
        self.next = 0
        self.stream = cuda.default_stream()  # the legacy default stream, as every kernel here

    def take(self) -> int | None:
        """The next slot not held by a download, its last copy done; None if all are held."""
        for _ in range(self.SLOTS):
            i = self.next
            self.next = (i + 1) % self.SLOTS
            if not self.held[i]:
                if self.used[i]:
                    self.done[i].synchronize()
                return i
        return None

    def _view(self, i, like):
        start = i * self.SLOT_BYTES
        return self.host[start:start + like.nbytes].view(like.dtype).reshape(like.shape)

    def upload(self, i, array):
        staged = self._view(i, array)
        staged[...] = array
        out = cuda.device_array(array.shape, dtype=array.dtype)
        out.copy_to_device(staged, stream=self.stream)
        self.done[i].record(self.stream)
        self.used[i] = True
        return out

    def download(self, i, array):
        staged = self._view(i, array)
        array.copy_to_host(staged, stream=self.stream)
        self.done[i].record(self.stream)
        self.used[i] = self.held[i] = True
        return _Download(self, i, staged, array)


class _Download:
    """A copy queued into a staging slot; ``get()`` waits for it and frees the slot."""

    def __init__(self, staging, slot, staged, source):
        self.staging, self.slot, self.staged = staging, slot, staged
        self.source = source  # the device array stays alive until its copy is done
        self.array = None

    def get(self):
        if self.array is None:
            self.staging.done[self.slot].synchronize()
            self.array = self.staged.copy()
            self.staging.held[self.slot] = False
            self.staged = self.source = None
        return self.array

    def __del__(self):  # never fetched (a caller stopped early): free the slot once copied
        if self.staged is not None:
            try:
                self.staging.done[self.slot].synchronize()
            except Exception:  # the context is already gone (interpreter exit): nothing to free
                return
            self.staging.held[self.slot] = False


@functools.lru_cache(maxsize=1)
def _staging() -> _Staging:
    return _Staging()


def synchronize():
    """Wait until every kernel and copy queued on the device is done (for timing)."""
    cuda.synchronize()


def free_memory():
    """Bytes of device memory the driver has free now; None under the simulator, whose
    device memory is the host's and has no limit of its own. (Blocks CuPy's pool keeps for
    reuse are not counted: free in the pool, but not to the driver.)"""
    if SIMULATED:
        return None
    return int(cuda.current_context().get_memory_info().free)


def to_host(array):
    """A NumPy array of a device array (host arrays are returned as they are)."""
    if hasattr(array, "copy_to_host"):
        return array.copy_to_host()
    if hasattr(array, "__cuda_array_interface__"):
        return cuda.as_cuda_array(array).copy_to_host()
    return np.asarray(array)


# -- elementwise --------------------------------------------------------------------------


@kernel
def _add(out, x):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, out.shape[0], stride):
        out[i] += x[i]


@kernel
def _multiply(out, x):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, out.shape[0], stride):
        out[i] *= x[i]


@kernel
def _copy(out, x):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, out.shape[0], stride):
        out[i] = x[i]


@kernel
def _scale(out, factor):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, out.shape[0], stride):
        out[i] *= factor


@kernel
def _fill(out, value):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, out.shape[0], stride):
        out[i] = value


@kernel
def _add_bias(out, b, s):
    n_cols = out.shape[1]
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, out.shape[0] * n_cols, stride):
        r = i // n_cols
        j = i - r * n_cols
        out[r, j] += s * b[j]


def _elementwise(kernel, out, *args):
    if out.size:
        kernel[blocks_for(out.size), THREADS](flat(out), *args)


@device_arrays
def add(out, x):
    """``out += x`` (same shapes)."""
    _elementwise(_add, out, flat(x))


@device_arrays
def add_bias(out, b, scale=1.0):
    """``out[r, :] += scale * b`` for every row r."""
    if out.size:
        _add_bias[blocks_for(out.size), THREADS](out, b, out.dtype.type(scale))


@device_arrays
def multiply(out, x):
    """``out *= x`` elementwise (same shapes)."""
    _elementwise(_multiply, out, flat(x))


@device_arrays
def scale(out, factor):
    """``out *= factor`` (the factor in ``out``'s dtype, as on the cpu)."""
    _elementwise(_scale, out, out.dtype.type(factor))


@device_arrays
def copy(out, x):
    """``out[...] = x`` (same shapes)."""
    _elementwise(_copy, out, flat(x))


@device_arrays
def fill(out, value):
    """``out[...] = value``."""
    _elementwise(_fill, out, out.dtype.type(value))


# column_mean's block: COLUMNS neighbouring columns (a warp reads 128 contiguous bytes of a
# row) times LANES row lanes, each lane summing every LANES-th row. A thread per column gave a
# 1,024-unit layer 4 blocks on the whole GPU, each thread walking 256 rows one load at a time
# (0.10 ms for a step's four bias gradients, docs/benchmarks.md).
COLUMNS = 2 if SIMULATED else 32
LANES = 2 if SIMULATED else 16  # a power of two: the lanes are added pairwise


@kernel
def _column_mean(out, x):
    partial = cuda.shared.array((LANES, COLUMNS), np.float64)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    n_rows, n_cols = x.shape
    for j0 in range(cuda.blockIdx.x * COLUMNS, n_cols, cuda.gridDim.x * COLUMNS):
        j = j0 + tx
        acc = 0.0
        if j < n_cols:
            for r in range(ty, n_rows, LANES):
                acc += np.float64(x[r, j])
        partial[ty, tx] = acc
        cuda.syncthreads()
        half = LANES // 2  # lanes summed pairwise in a fixed order: the same bits every run
        while half > 0:
            if ty < half:
                partial[ty, tx] += partial[ty + half, tx]
            cuda.syncthreads()
            half //= 2
        if ty == 0 and j < n_cols:
            out[j] = partial[0, tx] / n_rows if n_rows > 0 else math.nan
        cuda.syncthreads()  # before the next column group writes partial


@device_arrays
def column_mean(out, x):
    """``out[j] = mean over rows of x[:, j]``, summed in float64 (spec 5.7): LANES partial sums
    of every LANES-th row, added pairwise in a fixed order, so the same bits every run (the
    cpu sums in row order; in float64 both round to the same float32 but for near-ties)."""
    if x.shape[1]:
        blocks = min((x.shape[1] + COLUMNS - 1) // COLUMNS, MAX_BLOCKS)
        _column_mean[blocks, (COLUMNS, LANES)](out, x)


@kernel
def _zero_rows(x, rows):
    n_cols = x.shape[1]
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, rows.shape[0] * n_cols, stride):
        k = i // n_cols
        x[rows[k], i - k * n_cols] = 0  # a repeated row is zeroed twice: harmless


@device_arrays
def zero_rows(x, rows):
    """``x[rows] = 0`` (``rows`` may repeat; a host array is copied over)."""
    rows = to_device(np.asarray(rows) if isinstance(rows, (list, tuple)) else rows)
    if rows.shape[0] and x.size:
        _zero_rows[blocks_for(rows.shape[0] * x.shape[1]), THREADS](x, rows)


# -- reductions (once per epoch) ----------------------------------------------------------

_SQUARES, _ABSOLUTE = 0, 1


@kernel
def _partial_sums(block_sums, x, kind):
    # Each thread sums its grid-stride share in float64 into its own slot; the host adds them.
    t = cuda.threadIdx.x
    start, stride = cuda.grid(1), cuda.gridsize(1)
    acc = 0.0
    for i in range(start, x.shape[0], stride):
        v = np.float64(x[i])
        acc += v * v if kind == _SQUARES else abs(v)
    block_sums[cuda.blockIdx.x, t] = acc


@kernel
def _any_not_finite(flag, x):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, x.shape[0], stride):
        v = x[i]
        if v != v or v == math.inf or v == -math.inf:
            flag[0] = 1  # every writer writes the same value: no atomics needed


def _reduce(x, kind):
    if x.size == 0:
        return 0.0
    blocks = blocks_for(x.size)
    block_sums = cuda.device_array((blocks, THREADS), dtype=np.float64)
    _partial_sums[blocks, THREADS](block_sums, flat(x), kind)
    return float(block_sums.copy_to_host().sum())


@device_arrays
def sum_squares(x) -> float:
    """Sum of ``x**2`` in float64."""
    return _reduce(x, _SQUARES)


@device_arrays
def abs_sum(x) -> float:
    """Sum of ``|x|`` in float64."""
    return _reduce(x, _ABSOLUTE)


@device_arrays
def all_finite(x) -> bool:
    """Whether no element of ``x`` is NaN or infinite."""
    if x.size == 0:
        return True
    flag = cuda.to_device(np.zeros(1, dtype=np.int32))
    _any_not_finite[blocks_for(x.size), THREADS](flag, flat(x))
    return not bool(flag.copy_to_host()[0])
