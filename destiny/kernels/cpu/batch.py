"""numba kernel assembling a minibatch from a CSR dataset (rows in parallel)."""

from __future__ import annotations

from numba import njit, prange


@njit(cache=True, parallel=True)
def take_rows(out_indices, out_values, out_indptr, indptr, indices, values, rows):
    """Rows ``rows`` of a CSR matrix, in that order, into ``out_indices`` / ``out_values``.

    ``out_indptr`` (B + 1) is given (see ``destiny.kernels.reference.batch.take_rows``).
    """
    analog = len(values) > 0
    for r in prange(len(rows)):
        src = indptr[rows[r]]
        dst = out_indptr[r]
        for k in range(out_indptr[r + 1] - dst):
            out_indices[dst + k] = indices[src + k]
            if analog:
                out_values[dst + k] = values[src + k]
