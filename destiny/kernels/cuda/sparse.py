"""numba.cuda kernels for the sparse input layer (spec 6.1 and 6.2).

Same names and signatures as ``destiny.kernels.cpu.sparse``.

The forward gather gives a thread to each output element (row b, unit j): it adds the bias
and then W[indices[k], j] for the row's entries in order, so neighbouring threads read
neighbouring elements of a row of W, and no two threads write the same element.

The weight gradient scatters into the rows of ``dW`` of the batch's features. As on the cpu it
first groups the entries by feature (spec 6.2 builds the same feature -> rows lists), so that
each output element is summed by one thread in a fixed order: deterministic, with no float
atomics. The grouping is a counting sort on the device: integer atomics count and place the
entries (a thread each), then a block per feature puts its entries back in entry order (the
atomics leave them in an arbitrary one), which is exactly the cpu's order.

``sparse_add`` (a Skip from an Input layer) gives a block to each row of the batch, its threads
along the row's entries.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from destiny.kernels.cuda.csr import row_of
from destiny.kernels.cuda.launch import (MAX_BLOCKS, ROW_THREADS, SIMULATED, THREADS, blocks_for,
                                         device_arrays, kernel, scratch)

# The prefix sum of the feature counts (one per feature of the layer: millions for a
# catalogue-wide input) runs over SCAN_BLOCKS x SCAN_THREADS threads at most, each owning a
# contiguous chunk of at least SCAN_MIN features; one block then scans the chunks' totals.
# (One block of 512 threads walked 5,860 features each at 3 M features.)
SCAN_THREADS = 4 if SIMULATED else 256
SCAN_BLOCKS = 3 if SIMULATED else 64
SCAN_MIN = 2 if SIMULATED else 16


@kernel
def _forward(out, indptr, indices, values, W, b):
    n_out = out.shape[1]
    boolean = values.shape[0] == 0
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, out.shape[0] * n_out, stride):
        r = i // n_out
        j = i - r * n_out
        acc = b[j]
        for k in range(indptr[r], indptr[r + 1]):
            if boolean:
                acc += W[indices[k], j]
            else:
                acc += values[k] * W[indices[k], j]
        out[r, j] = acc


@device_arrays
def sparse_fc_forward(out, indptr, indices, values, W, b):
    """``out[B, O] = b + sum over a row's entries of values[k] * W[indices[k]]`` (spec 6.1).

    A feature listed twice in a row adds its row of W twice (quirk 10.5).
    """
    if out.size:
        _forward[blocks_for(out.size), THREADS](out, indptr, indices, values, W, b)


@kernel
def _add_entries(out, indptr, indices, values, scale, col_offset):
    # A block per row, its threads along the row's entries, in rounds of ROW_THREADS with a
    # barrier between rounds (as the loss kernel writes a row's entries; batch.py's gather
    # found a thread per row, 256 threads on the whole GPU, 0.14 ms for a benchmark batch).
    # A feature listed twice in a row adds twice (quirk 10.5) and in entry order, as the
    # reference: a later round adds after an earlier one, and within a round the first entry
    # of a column adds its own and its round's repeats' terms in order, one rounding each, and
    # alone writes (deterministic, no float atomics; a scan of the round in shared memory, at
    # most ROW_THREADS indices, as the loss kernel's _is_last).
    columns = cuda.shared.array(ROW_THREADS, np.int32)
    t = cuda.threadIdx.x
    n_cols = out.shape[1]
    boolean = values.shape[0] == 0
    one = out.dtype.type(scale)
    for r in range(cuda.blockIdx.x, indptr.shape[0] - 1, cuda.gridDim.x):
        lo, hi = indptr[r], indptr[r + 1]
        for start in range(lo, hi, ROW_THREADS):  # (the same rounds for the whole block)
            n = min(ROW_THREADS, hi - start)
            j = -1  # (no entry, or another rank's column)
            if t < n:
                j = indices[start + t] - col_offset
                if not 0 <= j < n_cols:
                    j = -1
            columns[t] = j
            cuda.syncthreads()
            first = j >= 0
            for m in range(t):
                if columns[m] == j:
                    first = False
            if first:
                acc = out[r, j]
                for m in range(t, n):
                    if columns[m] == j:
                        acc += one if boolean else out.dtype.type(scale * values[start + m])
                out[r, j] = acc
            cuda.syncthreads()  # (this round's writes and reads of columns before the next)


@device_arrays
def sparse_add(out, indptr, indices, values, scale, col_offset):
    """``out[r, j] += scale * values[k]`` for the entries of feature ``col_offset + j``, in
    entry order (a Skip from an Input layer, spec 3.16; see the reference)."""
    rows = indptr.shape[0] - 1
    if rows and out.shape[1]:
        # (np.float64: the simulator multiplies a float32 by a Python float in float32)
        _add_entries[min(rows, MAX_BLOCKS), ROW_THREADS](out, indptr, indices, values,
                                                         np.float64(scale), int(col_offset))


@kernel
def _zero(x):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, x.shape[0], stride):
        x[i] = 0


@kernel
def _count(count, indices):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for k in range(start, indices.shape[0], stride):
        cuda.atomic.add(count, indices[k], 1)


def _scan_layout(n: int) -> tuple[int, int]:
    """(blocks, features a thread) of the scan over n features."""
    per = max(SCAN_MIN, -(-n // (SCAN_BLOCKS * SCAN_THREADS)))
    blocks = max(1, min(SCAN_BLOCKS, -(-n // (per * SCAN_THREADS))))
    return blocks, per


@cuda.jit(device=True)
def _span(i, size, n):
    """Items [lo, hi) of the i-th run of ``size`` of n items (empty past the end)."""
    lo = min(i * size, n)
    return lo, min(lo + size, n)


@kernel
def _chunk_totals(count, per, chunk_entries, chunk_present):
    """Each thread's chunk of ``per`` features: its entries and its features present."""
    c = cuda.grid(1)
    lo, hi = _span(c, per, count.shape[0])
    entries = 0
    present = 0
    for i in range(lo, hi):
        entries += count[i]
        present += count[i] > 0
    chunk_entries[c] = entries
    chunk_present[c] = present


@kernel
def _scan_totals(chunk_entries, chunk_present, n, start, n_present):
    """The first ``n`` chunks' totals made exclusive prefix sums, in place (one block: each
    thread a contiguous run of chunks, thread 0 scanning the runs); the grand totals into
    ``start[-1]`` and ``n_present``."""
    run_entries = cuda.shared.array(SCAN_THREADS, np.int64)
    run_present = cuda.shared.array(SCAN_THREADS, np.int64)
    t = cuda.threadIdx.x
    lo, hi = _span(t, (n + SCAN_THREADS - 1) // SCAN_THREADS, n)
    entries = 0
    present = 0
    for c in range(lo, hi):
        entries += chunk_entries[c]
        present += chunk_present[c]
    run_entries[t] = entries
    run_present[t] = present
    cuda.syncthreads()
    if t == 0:
        entries = 0
        present = 0
        for r in range(SCAN_THREADS):
            e, p = run_entries[r], run_present[r]
            run_entries[r] = entries
            run_present[r] = present
            entries += e
            present += p
        start[start.shape[0] - 1] = entries
        n_present[0] = present
    cuda.syncthreads()
    entries = run_entries[t]
    present = run_present[t]
    for c in range(lo, hi):
        e, p = chunk_entries[c], chunk_present[c]
        chunk_entries[c] = entries
        chunk_present[c] = present
        entries += e
        present += p


@kernel
def _chunk_scan(count, per, chunk_entries, chunk_present, start, features):
    """Each thread's chunk from its offsets: ``start``, the present features in order, and
    ``count`` zeroed on the way, to serve as the placement cursors."""
    c = cuda.grid(1)
    lo, hi = _span(c, per, count.shape[0])
    entries = chunk_entries[c]
    present = chunk_present[c]
    for i in range(lo, hi):
        k = count[i]
        start[i] = entries
        if k > 0:
            features[present] = i
            present += 1
        entries += k
        count[i] = 0


@kernel
def _place(cursor, start, indptr, indices, entry, entry_row):
    # One thread per entry (its batch row found by binary search in indptr); the atomics hand
    # out the slots of each feature's segment, in an arbitrary order.
    first, stride = cuda.grid(1), cuda.gridsize(1)
    for k in range(first, indices.shape[0], stride):
        f = indices[k]
        slot = start[f] + cuda.atomic.add(cursor, f, 1)
        entry[slot] = k
        entry_row[slot] = row_of(indptr, k)


@kernel
def _sort_segments(features, n_present, start, entry, entry_row, sorted_entry, sorted_row):
    """Each feature's entries in entry order, into ``sorted_*``: a block per feature.

    A rank sort: the thread of slot p counts the segment's entries smaller than its own
    (entries are distinct) and writes it at that rank. Quadratic in a segment's length, but
    every comparison runs in parallel and reads the segment from cache; the segments are at
    most as long as the batch has rows listing the feature.
    """
    t = cuda.threadIdx.x
    for s in range(cuda.blockIdx.x, n_present[0], cuda.gridDim.x):
        f = features[s]
        lo, hi = start[f], start[f + 1]
        for p in range(lo + t, hi, cuda.blockDim.x):
            k = entry[p]
            rank = lo
            for q in range(lo, hi):
                if entry[q] < k:
                    rank += 1
            sorted_entry[rank] = k
            sorted_row[rank] = entry_row[p]


@kernel
def _feature_grad(dW, features, n_present, start, entry, entry_row, values, delta, scale):
    """``dW[f, j] += scale * sum of values[e] * delta[row, j]`` over feature f's entries.

    Thread (feature slot s, unit j), the units across threadIdx for coalesced rows. The sum is
    taken in float64 in entry order and rounded once, as on the cpu.
    """
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    if j >= dW.shape[1]:
        return
    for s in range(cuda.blockIdx.y, n_present[0], cuda.gridDim.y):
        f = features[s]
        # rounded, then added, as on the cpu
        dW[f, j] += dW.dtype.type(scale * feature_sum(start, entry, entry_row, values, delta,
                                                      f, j))


@cuda.jit(device=True)
def feature_sum(start, entry, entry_row, values, delta, f, j):
    """The sum of ``values[e] * delta[row(e), j]`` over feature f's entries, in float64 in
    entry order (``group_by_feature``'s arrays; no values: every value is 1)."""
    acc = 0.0
    for p in range(start[f], start[f + 1]):
        v = 1.0 if values.shape[0] == 0 else np.float64(values[entry[p]])
        acc += v * np.float64(delta[entry_row[p], j])
    return acc


def group_by_feature(indptr, indices, n_features):
    """The entries of a CSR batch grouped by feature, each group in entry order (the cpu's
    order): (features present, their number [1], each feature's first slot [n_features + 1],
    the entries in slot order, their batch rows). Scratch arrays, valid until the next call;
    ``indices`` must not be empty."""
    n_entries = indices.shape[0]
    # (count and start are exactly n_features long: the scan covers all of count.)
    count = scratch("by_feature.count", n_features, np.int32, exact=True)
    start = scratch("by_feature.start", n_features + 1, np.int64, exact=True)
    features = scratch("by_feature.features", min(n_entries, n_features), np.int32)
    n_present = scratch("by_feature.n_present", 1, np.int64)
    entry = scratch("by_feature.entry", n_entries, np.int64)
    entry_row = scratch("by_feature.entry_row", n_entries, np.int64)
    sorted_entry = scratch("by_feature.sorted_entry", n_entries, np.int64)
    sorted_row = scratch("by_feature.sorted_row", n_entries, np.int64)

    blocks, per = _scan_layout(n_features)
    chunk_entries = scratch("by_feature.chunk_entries", blocks * SCAN_THREADS, np.int64)
    chunk_present = scratch("by_feature.chunk_present", blocks * SCAN_THREADS, np.int64)

    _zero[blocks_for(n_features), THREADS](count)
    _count[blocks_for(n_entries), THREADS](count, indices)
    _chunk_totals[blocks, SCAN_THREADS](count, per, chunk_entries, chunk_present)
    _scan_totals[1, SCAN_THREADS](chunk_entries, chunk_present, blocks * SCAN_THREADS, start,
                                  n_present)
    _chunk_scan[blocks, SCAN_THREADS](count, per, chunk_entries, chunk_present, start, features)
    _place[blocks_for(n_entries), THREADS](count, start, indptr, indices, entry, entry_row)
    _sort_segments[min(n_entries, MAX_BLOCKS), ROW_THREADS](features, n_present, start, entry,
                                                           entry_row, sorted_entry, sorted_row)
    return features, n_present, start, sorted_entry, sorted_row


def feature_grid(n_out, n_entries):
    """The grid of a kernel with a thread for each (present feature, unit): units across
    threadIdx for coalesced rows, features across the grid's y."""
    return ((n_out + THREADS - 1) // THREADS, min(n_entries, MAX_BLOCKS)), THREADS


@device_arrays
def sparse_fc_weight_grad(dW, indptr, indices, values, delta, scale):
    """``dW[i] += scale * sum over entries k with indices[k] == i of values[k] * delta[row(k)]``.

    Spec 6.2: only the rows of features present in the batch are touched, and a feature listed
    twice in a row counts twice. Each entry uses its own value (quirk 10.19 fixed).
    Deterministic: the entries are grouped by feature on the device (see the module
    docstring), and each element of ``dW`` is summed by one thread in entry order.
    """
    n_entries = indices.shape[0]
    if n_entries == 0 or indptr.shape[0] <= 1 or dW.shape[1] == 0:
        return
    groups = group_by_feature(indptr, indices, dW.shape[0])
    _feature_grad[feature_grid(dW.shape[1], n_entries)](dW, *groups, values, delta, float(scale))
