"""NumPy reference for assembling a minibatch from a CSR dataset held by the backend."""

from __future__ import annotations

import numpy as np


def take_rows(out_indices, out_values, out_indptr, indptr, indices, values, rows):
    """Rows ``rows`` of a CSR matrix, in that order, into ``out_indices`` / ``out_values``.

    ``out_indptr`` (B + 1) is given: the prefix sums of the rows' lengths, which the caller
    computes (it must know the sizes of the outputs anyway). ``values`` and ``out_values`` are
    empty for indicator data.
    """
    for r, row in enumerate(np.asarray(rows)):
        src = slice(indptr[row], indptr[row + 1])
        dst = slice(out_indptr[r], out_indptr[r + 1])
        out_indices[dst] = indices[src]
        if len(values):
            out_values[dst] = values[src]
