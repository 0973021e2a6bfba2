"""numba kernels for the sparse input layer (spec 6.1 and 6.2).

Same names and signatures as ``destiny.kernels.reference``. Rows of the batch are independent
in the forward pass, so it runs in parallel over rows. The weight gradient scatters into rows
of ``dW`` shared between batch rows, so it runs in parallel over *output columns* instead:
each thread owns a slice of columns of every touched row, and no two threads ever write the
same element (no atomics, and a result independent of the thread count).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(cache=True, parallel=True, fastmath=False)
def sparse_fc_forward(out, indptr, indices, values, W, b):
    """``out[B, O] = b + sum over a row's entries of values[k] * W[indices[k]]``."""
    n_rows = len(indptr) - 1
    n_out = W.shape[1]
    boolean = len(values) == 0
    for r in prange(n_rows):
        row = out[r]
        for j in range(n_out):
            row[j] = b[j]
        for k in range(indptr[r], indptr[r + 1]):
            w = W[indices[k]]
            if boolean:
                for j in range(n_out):
                    row[j] += w[j]
            else:
                v = values[k]
                for j in range(n_out):
                    row[j] += v * w[j]


@njit(cache=True, parallel=True)
def sparse_fc_weight_grad(dW, indptr, indices, values, delta, scale):
    """``dW[i] += scale * sum over entries k with indices[k] == i of values[k] * delta[row(k)]``."""
    n_rows = len(indptr) - 1
    n_out = dW.shape[1]
    boolean = len(values) == 0
    # Group the entries by feature (a counting sort), so that each touched row of dW is
    # accumulated once, in a fixed order: deterministic whatever the number of threads.
    K = len(indices)
    row_of = np.empty(K, dtype=np.int64)
    for r in range(n_rows):
        for k in range(indptr[r], indptr[r + 1]):
            row_of[k] = r
    order = np.argsort(indices, kind="mergesort")
    tile = 64
    n_tiles = (n_out + tile - 1) // tile
    for t in prange(n_tiles):
        lo = t * tile
        hi = min(lo + tile, n_out)
        acc = np.zeros(hi - lo, dtype=np.float64)
        k = 0
        while k < K:
            feature = indices[order[k]]
            acc[:] = 0.0
            while k < K and indices[order[k]] == feature:
                e = order[k]
                v = 1.0 if boolean else values[e]
                d = delta[row_of[e]]
                for j in range(lo, hi):
                    acc[j - lo] += v * d[j]
                k += 1
            target = dW[feature]
            for j in range(lo, hi):
                target[j] += scale * acc[j - lo]
