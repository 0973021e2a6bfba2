"""numba kernels for the sparse input layer (spec 6.1 and 6.2).

Same names and signatures as ``destiny.kernels.reference``. Rows of the batch are independent
in the forward pass, so it runs in parallel over rows. The weight gradient scatters into rows
of ``dW`` shared between batch rows, so it first groups the entries by feature (a linear
counting sort) and then runs in parallel over *features*: each thread owns whole rows of
``dW``, and no two threads ever write the same element (no atomics, and a result independent
of the thread count).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(cache=True, parallel=True, fastmath=False)
def sparse_fc_forward(out, indptr, indices, values, W, b):
    """``out[B, O] = b + sum over a row's entries of values[k] * W[indices[k]]``.

    Eight (then four) rows of W are added in one pass over the output row, left to right,
    which is the same float arithmetic as one pass per row (no reassociation, no contraction:
    fastmath off) but keeps eight streams from memory in flight instead of one: the gather is
    bound by fetching the rows of W (a batch of 256 MovieLens users reads 41 k rows of 4 KB).
    Four streams took it from 6.2-6.6 to 4.1-4.3 ms with the caches flushed, eight from
    5.7 to 4.4-4.9 ms on a busier machine (``scripts/bench_kernels.py``, alternating runs).
    """
    n_rows = len(indptr) - 1
    n_out = W.shape[1]
    boolean = len(values) == 0
    for r in prange(n_rows):
        row = out[r]
        for j in range(n_out):
            row[j] = b[j]
        k, end = indptr[r], indptr[r + 1]
        while k + 8 <= end:
            w1, w2, w3, w4 = W[indices[k]], W[indices[k + 1]], W[indices[k + 2]], W[indices[k + 3]]
            w5, w6 = W[indices[k + 4]], W[indices[k + 5]]
            w7, w8 = W[indices[k + 6]], W[indices[k + 7]]
            if boolean:
                for j in range(n_out):
                    row[j] = (row[j] + w1[j] + w2[j] + w3[j] + w4[j] + w5[j] + w6[j] + w7[j]
                              + w8[j])
            else:
                v1, v2, v3, v4 = values[k], values[k + 1], values[k + 2], values[k + 3]
                v5, v6, v7, v8 = values[k + 4], values[k + 5], values[k + 6], values[k + 7]
                for j in range(n_out):
                    row[j] = (row[j] + v1 * w1[j] + v2 * w2[j] + v3 * w3[j] + v4 * w4[j]
                              + v5 * w5[j] + v6 * w6[j] + v7 * w7[j] + v8 * w8[j])
            k += 8
        while k + 4 <= end:
            w1, w2, w3, w4 = W[indices[k]], W[indices[k + 1]], W[indices[k + 2]], W[indices[k + 3]]
            if boolean:
                for j in range(n_out):
                    row[j] = row[j] + w1[j] + w2[j] + w3[j] + w4[j]
            else:
                v1, v2, v3, v4 = values[k], values[k + 1], values[k + 2], values[k + 3]
                for j in range(n_out):
                    row[j] = row[j] + v1 * w1[j] + v2 * w2[j] + v3 * w3[j] + v4 * w4[j]
            k += 4
        for e in range(k, end):  # the last entries, fewer than four
            w = W[indices[e]]
            if boolean:
                for j in range(n_out):
                    row[j] += w[j]
            else:
                v = values[e]
                for j in range(n_out):
                    row[j] += v * w[j]


@njit(cache=True, parallel=True)
def sparse_add(out, indptr, indices, values, scale, col_offset):
    """``out[r, j] += scale * values[k]`` for the entries of feature ``col_offset + j``, in
    entry order (a Skip from an Input layer, spec 3.16; see the reference)."""
    n_cols = out.shape[1]
    boolean = len(values) == 0
    one = out.dtype.type(scale)
    for r in prange(len(indptr) - 1):
        for k in range(indptr[r], indptr[r + 1]):
            j = indices[k] - col_offset
            if 0 <= j < n_cols:
                out[r, j] += one if boolean else out.dtype.type(scale * values[k])


# The weight gradient splits the present features into this many chunks, each with its own
# scratch row: more than there are threads, so that a run of popular features (many entries)
# does not leave the other threads idle.
_CHUNKS = 64


@njit(cache=True)
def _group_by_feature(indptr, indices, n_features):
    """A counting sort of the batch's entries by feature, stable (row order within a feature).

    Returns ``(features, start, entry_row, entry)``: the distinct features in increasing order,
    where each one's entries begin in the grouped arrays (``start`` has one more element), and
    for each grouped entry its batch row and its position in ``indices`` / ``values``. Linear
    in the entries and the features; no comparison sort.
    """
    count = np.zeros(n_features, dtype=np.int64)
    for k in range(len(indices)):
        count[indices[k]] += 1
    n_present = 0
    for i in range(n_features):
        n_present += count[i] > 0
    features = np.empty(n_present, dtype=np.int64)
    start = np.empty(n_present + 1, dtype=np.int64)
    cursor = np.empty(n_features, dtype=np.int64)  # next free slot of each present feature
    s = 0
    total = 0
    for i in range(n_features):
        if count[i] > 0:
            features[s] = i
            start[s] = total
            cursor[i] = total
            total += count[i]
            s += 1
    start[n_present] = total
    entry_row = np.empty(total, dtype=np.int64)
    entry = np.empty(total, dtype=np.int64)
    for r in range(len(indptr) - 1):
        for k in range(indptr[r], indptr[r + 1]):
            pos = cursor[indices[k]]
            cursor[indices[k]] = pos + 1
            entry_row[pos] = r
            entry[pos] = k
    return features, start, entry_row, entry


@njit(cache=True)
def _feature_grad(target, acc, lo, hi, entry_row, entry, values, delta, scale):
    """``target += scale * sum of values[e] * delta[row]`` over one feature's grouped entries.

    The sum is taken in float64 in row order (``acc`` is scratch of ``target``'s length), then
    rounded once, as the reference does: a feature listed in all 256 rows keeps full accuracy.
    """
    boolean = len(values) == 0
    n_out = len(target)
    for p in range(lo, hi):
        v = 1.0 if boolean else np.float64(values[entry[p]])
        d = delta[entry_row[p]]
        if p == lo:
            for j in range(n_out):
                acc[j] = v * d[j]
        else:
            for j in range(n_out):
                acc[j] += v * d[j]
    for j in range(n_out):
        target[j] += target.dtype.type(scale * acc[j])


@njit(cache=True, parallel=True)
def sparse_fc_weight_grad(dW, indptr, indices, values, delta, scale):
    """``dW[i] += scale * sum over entries k with indices[k] == i of values[k] * delta[row(k)]``.

    Spec 6.2: only the rows of features present in the batch are touched, and a feature listed
    twice in a row counts twice. The entries are grouped by feature (a counting sort), then the
    features are split between threads: each thread owns whole rows of ``dW``, sums a
    feature's entries in a fixed (row) order and writes its row once, contiguously. No atomics,
    and the result does not depend on the number of threads.
    """
    features, start, entry_row, entry = _group_by_feature(indptr, indices, dW.shape[0])
    n_present = len(features)
    n_chunks = min(n_present, _CHUNKS)
    for c in prange(n_chunks):
        acc = np.empty(dW.shape[1], dtype=np.float64)
        for s in range(c * n_present // n_chunks, (c + 1) * n_present // n_chunks):
            _feature_grad(dW[features[s]], acc, start[s], start[s + 1], entry_row, entry,
                          values, delta, scale)
