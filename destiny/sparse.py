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


def keep_entries(indptr, keep: np.ndarray) -> np.ndarray:
    """The indptr of the same rows after dropping the entries where ``keep`` is False
    (``keep[k]`` for entry ``indptr[0] + k``)."""
    new_indptr = np.zeros(len(indptr), dtype=np.int64)
    if len(indptr) > 1:
        _count_kept(indptr, keep, new_indptr)
    return new_indptr


@njit(cache=True)
def _count_kept(indptr, keep, out):
    # One pass, no temporaries: denoising calls this every epoch on the whole training set,
    # where NumPy's row-of-each-entry array and bincount took 98 ms of 20 M entries, this
    # 9 ms (docs/benchmarks.md).
    base = indptr[0]
    for r in range(len(indptr) - 1):
        n = 0
        for k in range(indptr[r] - base, indptr[r + 1] - base):
            n += keep[k]
        out[r + 1] = out[r] + n


def column_range(indptr, indices, values, lo: int, hi: int):
    """The entries of columns ``[lo, hi)`` of a CSR matrix, their indices less ``lo`` (a rank's
    share of the columns, spec 7); ``values`` may be None or empty (none stored)."""
    keep = (indices >= lo) & (indices < hi)
    return (keep_entries(indptr, keep), (indices[keep] - lo).astype(indices.dtype, copy=False),
            values if values is None or len(values) == 0 else values[keep])


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
