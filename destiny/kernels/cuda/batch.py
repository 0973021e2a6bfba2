"""numba.cuda kernel assembling a minibatch from a CSR dataset that stays on the device.

The training set is copied to the device once; a batch is its rows gathered on the device
(one thread per batch row), so per batch only the row numbers and the new row offsets (B + 1
integers, computed on the host from its copy of the offsets) cross to the device.
"""

from __future__ import annotations

from numba import cuda

from destiny.kernels.cuda.launch import MAX_BLOCKS, ROW_THREADS, device_arrays, kernel


@kernel
def _take_rows(out_indices, out_values, out_indptr, indptr, indices, values, rows, analog):
    # A block per row, its threads along the row's entries: the copies are coalesced and run
    # side by side. (A thread per row copied one entry at a time on the batch's 256 threads:
    # 0.14 ms a call on an H100 for a benchmark-network batch of 37,000 entries.)
    for r in range(cuda.blockIdx.x, rows.size, cuda.gridDim.x):
        src = indptr[rows[r]]
        dst = out_indptr[r]
        for k in range(cuda.threadIdx.x, out_indptr[r + 1] - dst, cuda.blockDim.x):
            out_indices[dst + k] = indices[src + k]
            if analog:
                out_values[dst + k] = values[src + k]


@device_arrays
def take_rows(out_indices, out_values, out_indptr, indptr, indices, values, rows):
    """Rows ``rows`` of a CSR matrix, in that order, into ``out_indices`` / ``out_values``.

    ``out_indptr`` (B + 1) is given (see ``destiny.kernels.reference.batch.take_rows``).
    """
    if rows.size:
        _take_rows[min(rows.size, MAX_BLOCKS), ROW_THREADS](
            out_indices, out_values, out_indptr, indptr, indices, values, rows, values.size > 0)
