"""numba.cuda kernels for prediction: filters and top-K selection (spec 8.3, 8.4).

Same names, signatures and results as ``destiny.kernels.cpu.topk``, whose algorithm this is:
one thread per row scans the row once, keeping the K best candidates in a bounded min-heap
whose root is the worst of them. The heap lives in the row's own output slots (``out_scores``
and ``out_items`` have exactly K), so a thread needs no memory of its own whatever K is, and
an in-place heapsort finally puts them best first. The row's excluded items are copied to a
scratch array and sorted there (heapsort), so that a membership test is a binary search, made
only for items good enough to enter the heap.

One thread per row suits prediction batches (hundreds to thousands of rows, each scanned at
memory speed by its thread); a block-wide radix select would be the next step for batches of
a few rows over very wide outputs.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from destiny.kernels.cuda.launch import THREADS, blocks_for, device_arrays


@cuda.jit(device=True)
def _ranks_below(score_a, item_a, score_b, item_b):
    """Whether (score_a, item_a) comes after (score_b, item_b) in the output order.

    Score descending, then item ascending; NaN after every number, NaNs by item.
    """
    nan_a = score_a != score_a
    nan_b = score_b != score_b
    if nan_a != nan_b:
        return nan_a
    if nan_a or score_a == score_b:  # == also makes -0.0 and 0.0 a tie
        return item_a > item_b
    return score_a < score_b


@cuda.jit(device=True)
def _sift_down(heap_scores, heap_items, size, pos):
    """Restore the heap below ``pos``: every parent ranks below (is worse than) its children."""
    score = heap_scores[pos]
    item = heap_items[pos]
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        right = child + 1
        if right < size and _ranks_below(heap_scores[right], heap_items[right],
                                         heap_scores[child], heap_items[child]):
            child = right
        if not _ranks_below(heap_scores[child], heap_items[child], score, item):
            break
        heap_scores[pos] = heap_scores[child]
        heap_items[pos] = heap_items[child]
        pos = child
    heap_scores[pos] = score
    heap_items[pos] = item


@cuda.jit(device=True)
def _sift_up(heap_scores, heap_items, pos):
    score = heap_scores[pos]
    item = heap_items[pos]
    while pos > 0:
        parent = (pos - 1) // 2
        if not _ranks_below(score, item, heap_scores[parent], heap_items[parent]):
            break
        heap_scores[pos] = heap_scores[parent]
        heap_items[pos] = heap_items[parent]
        pos = parent
    heap_scores[pos] = score
    heap_items[pos] = item


@cuda.jit(device=True)
def _sift_int(x, lo, size, pos):
    """Max-heap sift-down of ``x[lo:lo + size]`` from ``pos``."""
    value = x[lo + pos]
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        if child + 1 < size and x[lo + child + 1] > x[lo + child]:
            child += 1
        if x[lo + child] <= value:
            break
        x[lo + pos] = x[lo + child]
        pos = child
    x[lo + pos] = value


@cuda.jit(device=True)
def _sort_ints(x, lo, hi):
    """Heapsort ``x[lo:hi]`` ascending, in place: O(n log n) with no memory of its own."""
    n = hi - lo
    for pos in range(n // 2 - 1, -1, -1):
        _sift_int(x, lo, n, pos)
    for end in range(n - 1, 0, -1):
        top = x[lo]
        x[lo] = x[lo + end]
        x[lo + end] = top
        _sift_int(x, lo, end, 0)


@cuda.jit(device=True)
def _contains(x, lo, hi, item):
    """Binary search of ``item`` in the sorted ``x[lo:hi]``."""
    end = hi
    while lo < hi:
        mid = (lo + hi) // 2
        if x[mid] < item:
            lo = mid + 1
        else:
            hi = mid
    return lo < end and x[lo] == item


@cuda.jit
def _top_k(out_items, out_scores, scores, exclude_indptr, exclude_indices, excluded, allowed,
           n_valid):
    n_items = scores.shape[1]
    k = out_items.shape[1]
    n_scan = max(0, min(n_valid, n_items))
    has_filter = exclude_indptr.shape[0] != 0
    has_allowed = allowed.shape[0] != 0
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for b in range(start, scores.shape[0], stride):
        row = scores[b]
        heap_scores = out_scores[b]
        heap_items = out_items[b]
        lo = hi = 0
        if has_filter:  # the row's excluded items, sorted, in the scratch array
            lo, hi = exclude_indptr[b], exclude_indptr[b + 1]
            for e in range(lo, hi):
                excluded[e] = exclude_indices[e]
            _sort_ints(excluded, lo, hi)
        size = 0
        worst = -math.inf  # the root's score, valid once the heap is full
        worst_nan = False
        for j in range(n_scan):
            s = row[j]
            if size == k:
                # Items come in ascending order, so a tie with the root never beats it: only a
                # strictly larger score does, or any number when the root is NaN.
                if not (s > worst or (worst_nan and s == s)):
                    continue
            if has_allowed and allowed[j] == 0:
                continue
            if has_filter and _contains(excluded, lo, hi, j):
                continue
            if size < k:
                heap_scores[size] = s
                heap_items[size] = j
                _sift_up(heap_scores, heap_items, size)
                size += 1
            else:
                heap_scores[0] = s
                heap_items[0] = j
                _sift_down(heap_scores, heap_items, size, 0)
            if size == k:
                worst = heap_scores[0]
                worst_nan = worst != worst
        # Heapsort in place: the root (the worst left) goes to the end of the shrinking heap.
        for end in range(size - 1, 0, -1):
            s = heap_scores[0]
            j = heap_items[0]
            heap_scores[0] = heap_scores[end]
            heap_items[0] = heap_items[end]
            heap_scores[end] = s
            heap_items[end] = j
            _sift_down(heap_scores, heap_items, end, 0)
        for slot in range(size, k):
            heap_scores[slot] = -math.inf
            heap_items[slot] = -1


@device_arrays
def top_k(out_items, out_scores, scores, exclude_indptr, exclude_indices, allowed, n_valid):
    """The K best items of every row, best first (spec 8.4); see the reference for the contract.

    ``scores`` [B, N] is read only; ``out_items`` int32 [B, K] and ``out_scores`` float32
    [B, K] get ``-1`` and ``-inf`` in the slots a row has no candidate for.
    """
    n_rows, k = out_items.shape
    if n_rows == 0 or k == 0:
        return
    n_excluded = exclude_indices.shape[0] if exclude_indptr.shape[0] != 0 else 0
    excluded = cuda.device_array(max(n_excluded, 1), dtype=np.int64)
    _top_k[blocks_for(n_rows), THREADS](out_items, out_scores, scores, exclude_indptr,
                                        exclude_indices, excluded, allowed, int(n_valid))


@cuda.jit
def _multiply_filter(scores, indptr, indices, values):
    # One thread per row, its entries in order: duplicates multiply twice, as on the cpu.
    n_items = scores.shape[1]
    zero = values.shape[0] == 0
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for b in range(start, scores.shape[0], stride):
        for e in range(indptr[b], indptr[b + 1]):
            i = indices[e]
            if i < 0 or i >= n_items:
                continue
            if zero:
                scores[b, i] = 0.0 * scores[b, i]
            else:
                scores[b, i] *= values[e]


@device_arrays
def multiply_filter(scores, indptr, indices, values):
    """DSSTNE's filter, in place: ``scores[b, i] *= v`` for every CSR entry (spec 8.3).

    An empty ``values`` means every value is 0.0; an empty ``indptr`` means no filter. Entries
    outside ``[0, N)`` are ignored; a row's entries are applied in order.
    """
    if indptr.shape[0] == 0 or scores.shape[0] == 0:
        return
    _multiply_filter[blocks_for(scores.shape[0]), THREADS](scores, indptr, indices, values)
