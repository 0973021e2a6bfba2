"""Small operations on CSR arrays (``indptr``, ``indices``, ``values``) shared by the I/O code."""

from __future__ import annotations

import numpy as np
from numba import njit


def gather_ranges(starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions covering ``[starts[r], starts[r] + lengths[r])`` for every r, back to back.

    Returns (new indptr, positions): ``array[positions]`` lays the ranges out as CSR rows.
    """
    indptr = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    positions = np.repeat(starts - indptr[:-1], lengths) + np.arange(indptr[-1], dtype=np.int64)
    return indptr, positions


def drop_entries(indptr, indices, values, keep: np.ndarray):
    """The CSR arrays (indptr, indices, values) of the same rows without the entries where
    ``keep`` is False. ``keep[k]``, ``indices[k]`` and ``values[k]`` are entry ``indptr[0] + k``;
    ``values`` may be None or empty (none stored), and is returned so.

    The new indices and values are the first entries of arrays as long as the old ones: views,
    not copies, as denoising's use per epoch wants it.
    """
    new_indptr = np.zeros(len(indptr), dtype=np.int64)
    new_indices = np.empty_like(indices)
    has_values = values is not None and len(values) > 0
    new_values = np.empty_like(values) if has_values else np.empty(0, np.float32)
    n = 0
    if len(indptr) > 1:
        n = _drop_entries(indptr, keep, indices, values if has_values else new_values,
                          new_indptr, new_indices, new_values)
    return (new_indptr, new_indices[:n],
            new_values[:n] if has_values else values)


@njit(cache=True)
def _drop_entries(indptr, keep, indices, values, out_indptr, out_indices, out_values):
    # One pass, no temporaries, no branch: each entry is written to the next free place,
    # which moves on only if it is kept. Denoising calls this every epoch on the whole
    # training set: 18 ms of 20 M entries where NumPy's indices[keep] and a count by row took
    # 68 ms (docs/benchmarks.md).
    base = indptr[0]
    with_values = values.shape[0] > 0
    n = 0
    for r in range(len(indptr) - 1):
        lo, hi = indptr[r] - base, indptr[r + 1] - base
        row, kept = indices[lo:hi], keep[lo:hi]  # (slices: numba then drops the bounds
        if with_values:                           #  and aliasing checks of the loop)
            row_values = values[lo:hi]
            for i in range(hi - lo):
                out_indices[n] = row[i]
                out_values[n] = row_values[i]
                n += np.int64(kept[i])
        else:
            for i in range(hi - lo):
                out_indices[n] = row[i]
                n += np.int64(kept[i])
        out_indptr[r + 1] = n
    return n


def column_range(indptr, indices, values, lo: int, hi: int):
    """The entries of columns ``[lo, hi)`` of a CSR matrix, their indices less ``lo`` (a rank's
    share of the columns, spec 7); ``values`` may be None or empty (none stored)."""
    new_indptr, new_indices, new_values = drop_entries(indptr, indices, values,
                                                       (indices >= lo) & (indices < hi))
    # Copies the size of the share: drop_entries' are views of arrays as long as the input
    return (new_indptr, new_indices - indices.dtype.type(lo),
            new_values if new_values is None or len(new_values) == 0 else new_values.copy())


def take_rows(indptr, indices, values, rows):
    """Rows ``rows`` of a CSR matrix, in that order; ``values`` may be None."""
    starts = indptr[:-1][rows]
    lengths = np.diff(indptr)[rows]
    new_indptr, positions = gather_ranges(starts, lengths)
    return new_indptr, indices[positions], None if values is None else values[positions]


@njit(cache=True)
def repeated_entries(indptr, indices, width):
    """(rows listing some index more than once, entries that repeat an index of their row)."""
    last_row = np.full(width, -1, dtype=np.int64)
    rows = entries = 0
    for r in range(len(indptr) - 1):
        repeats = 0
        for k in range(indptr[r], indptr[r + 1]):
            j = indices[k]
            if last_row[j] == r:
                repeats += 1
            else:
                last_row[j] = r
        entries += repeats
        rows += repeats > 0
    return rows, entries
