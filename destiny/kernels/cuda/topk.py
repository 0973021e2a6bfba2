"""numba.cuda kernels for prediction: filters and top-K selection (spec 8.3, 8.4).

Same names, signatures and results as ``destiny.kernels.cpu.topk``.

``top_k`` gives each row a block. Three kernels:

1. ``_keys`` turns every score into an unsigned 32-bit key that sorts like the order of the
   output (the float's bits, sign-flipped; NaN lowest above 0, -0.0 equal to 0.0), and 0 for
   the items that may not be returned (padding units, items not ``allowed``);
2. ``_exclude`` sets the key of each row's filtered items to 0, a thread per filter entry;
3. ``_select`` finds a row's K-th largest key by radix select (four passes of an 8-bit
   histogram in shared memory), gathers the items above it and, in item order, as many of
   the items equal to it as are needed, and sorts those K in shared memory (bitonic sort).

Every pass reads the row at memory speed with all of the block's threads, where the previous
design (one thread per row, a heap in the output slots) left the GPU nearly idle: 11.7 ms for
256 rows of 27,392 on an H100. K above ``SELECT_MAX_K`` (shared memory is sized at compile
time) and scores other than float32 take that one-thread-per-row kernel (``_heap_top_k``),
which is correct for any K.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from destiny.kernels import unit
from destiny.kernels.codes import check_monotone
from destiny.kernels.cuda.csr import row_of
from destiny.kernels.cuda.launch import (ROW_THREADS, THREADS, blocks_for, device_arrays, kernel,
                                         reshaped, scratch, viewed)
from destiny.kernels.cuda.pointwise import activation_forward

# The largest K that ``_select`` sorts in shared memory (K keys of 8 bytes and K items of 4).
SELECT_MAX_K = 1024
RADIX = 256  # an 8-bit digit per pass, four passes over a 32-bit key


_ranks_below = cuda.jit(device=True)(unit.ranks_below)  # shared with the cpu


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


@kernel
def _heap_top_k(out_items, out_scores, heap, scores, exclude_indptr, exclude_indices, excluded,
                allowed, n_valid):
    # ``heap`` [B, K] holds the scores in their own dtype (``out_scores`` itself for float32):
    # float64 scores that differ below float32's resolution would tie once rounded, and then
    # go by item.
    n_items = scores.shape[1]
    k = out_items.shape[1]
    n_scan = max(0, min(n_valid, n_items))
    has_filter = exclude_indptr.shape[0] != 0
    has_allowed = allowed.shape[0] != 0
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for b in range(start, scores.shape[0], stride):
        row = scores[b]
        heap_scores = heap[b]
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
        for slot in range(size):
            out_scores[b, slot] = heap_scores[slot]
        for slot in range(size, k):
            out_scores[b, slot] = -math.inf
            heap_items[slot] = -1


@kernel
def _keys(keys, bits, allowed, n_valid):
    """``keys[b, j]``: the order key of score ``bits[b, j]`` (its float32 bits), 0 if the item
    may not be returned. Larger keys rank first; NaN is 1, below every number (-inf included).
    """
    n = keys.shape[1]
    has_allowed = allowed.shape[0] != 0
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, keys.shape[0] * n, stride):
        b = i // n
        j = i - b * n
        key = 0
        if j < n_valid and (not has_allowed or allowed[j] != 0):
            u = np.int64(bits[b, j])
            if (u & 0x7FFFFFFF) > 0x7F800000:  # NaN
                key = 1
            else:
                if u == 0x80000000:  # -0.0 ties with 0.0
                    u = 0
                key = (0xFFFFFFFF ^ u) if u & 0x80000000 else (u | 0x80000000)
        keys[b, j] = key


@kernel
def _exclude(keys, indptr, indices):
    # A thread per filter entry (its row by binary search in indptr). Entries outside [0, N)
    # are ignored; duplicates write the same 0.
    n_rows = indptr.shape[0] - 1
    n = keys.shape[1]
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for e in range(indptr[0] + start, indptr[n_rows], stride):
        i = indices[e]
        if 0 <= i < n:
            keys[row_of(indptr, e), i] = 0


@kernel
def _select(out_items, out_scores, keys, scores):
    """A block per row: the K largest keys, best first, equal keys by ascending item."""
    hist = cuda.shared.array(RADIX, np.int32)
    state = cuda.shared.array(4, np.int64)
    counter = cuda.shared.array(1, np.int32)
    scan = cuda.shared.array(ROW_THREADS, np.int32)
    cand_key = cuda.shared.array(SELECT_MAX_K, np.int64)
    cand_item = cuda.shared.array(SELECT_MAX_K, np.int32)
    t = cuda.threadIdx.x
    nt = cuda.blockDim.x
    n = keys.shape[1]
    k = out_items.shape[1]
    for b in range(cuda.blockIdx.x, keys.shape[0], cuda.gridDim.x):
        row = keys[b]
        # Radix select, most significant digit first: after each pass, `prefix` holds the
        # threshold's digits so far and `remaining` how many keys to take at or below it.
        remaining = k
        prefix = 0
        mask = 0
        found = True
        count_eq = 0
        for level in range(4):
            shift = 24 - 8 * level
            for d in range(t, RADIX, nt):
                hist[d] = 0
            cuda.syncthreads()
            for j in range(t, n, nt):
                key = np.int64(row[j])
                if key != 0 and (key & mask) == prefix:
                    cuda.atomic.add(hist, (key >> shift) & (RADIX - 1), 1)
            cuda.syncthreads()
            if t == 0:
                above = 0
                digit = -1
                for d in range(RADIX - 1, -1, -1):
                    if above + hist[d] >= remaining:
                        digit = d
                        break
                    above += hist[d]
                state[0] = digit
                state[1] = above
                state[2] = hist[digit] if digit >= 0 else 0
            cuda.syncthreads()
            digit = state[0]
            above = state[1]
            count_eq = state[2]
            cuda.syncthreads()  # every thread has read state before it is written again
            if digit < 0:  # fewer than K candidates in the whole row: take them all
                found = False
                break
            remaining -= above
            prefix |= digit << shift
            mask |= (RADIX - 1) << shift
        threshold = prefix if found else 0
        # Every key above the threshold, and the ones equal to it when all of them fit.
        take_equal = found and count_eq == remaining
        if t == 0:
            counter[0] = 0
        cuda.syncthreads()
        for j in range(t, n, nt):
            key = np.int64(row[j])
            if key > threshold or (take_equal and key == threshold):
                slot = cuda.atomic.add(counter, 0, 1)
                cand_key[slot] = key
                cand_item[slot] = j
        cuda.syncthreads()
        count = counter[0]
        if found and not take_equal:
            # More keys equal the threshold than slots are left: the first `remaining` of them
            # in item order, by a block-wide prefix count over each chunk of nt items.
            taken = 0
            for base in range(0, n, nt):
                j = base + t
                flag = 1 if j < n and np.int64(row[j]) == threshold else 0
                scan[t] = flag
                cuda.syncthreads()
                offset = 1
                while offset < nt:
                    value = scan[t - offset] if t >= offset else 0
                    cuda.syncthreads()
                    scan[t] += value
                    cuda.syncthreads()
                    offset *= 2
                pos = taken + scan[t] - flag
                if flag == 1 and pos < remaining:
                    cand_key[count + pos] = threshold
                    cand_item[count + pos] = j
                taken += scan[nt - 1]
                cuda.syncthreads()
                if taken >= remaining:
                    break
            count += remaining
        # Bitonic sort of the candidates, padded to a power of two with keys that rank last.
        size = 1
        while size < count:
            size *= 2
        for i in range(count + t, size, nt):
            cand_key[i] = -1
            cand_item[i] = 0x7FFFFFFF
        cuda.syncthreads()
        width = 2
        while width <= size:
            stride = width // 2
            while stride > 0:
                for i in range(t, size, nt):
                    other = i ^ stride
                    if other > i:
                        ka = cand_key[i]
                        kb = cand_key[other]
                        ia = cand_item[i]
                        ib = cand_item[other]
                        first = ka > kb or (ka == kb and ia < ib)
                        if first == ((i & width) != 0):
                            cand_key[i] = kb
                            cand_key[other] = ka
                            cand_item[i] = ib
                            cand_item[other] = ia
                cuda.syncthreads()
                stride //= 2
            width *= 2
        for slot in range(t, k, nt):
            if slot < count:
                item = cand_item[slot]
                out_items[b, slot] = item
                out_scores[b, slot] = scores[b, item]
            else:
                out_items[b, slot] = -1
                out_scores[b, slot] = -math.inf
        cuda.syncthreads()  # the shared arrays are free for the next row


@device_arrays
def top_k(out_items, out_scores, scores, exclude_indptr, exclude_indices, allowed, n_valid):
    """The K best items of every row, best first (spec 8.4); see the reference for the contract.

    ``scores`` [B, N] is read only; ``out_items`` int32 [B, K] and ``out_scores`` float32
    [B, K] get ``-1`` and ``-inf`` in the slots a row has no candidate for.
    """
    n_rows, k = out_items.shape
    if n_rows == 0 or k == 0:
        return
    has_filter = exclude_indptr.shape[0] != 0
    if has_filter and exclude_indptr.shape[0] != n_rows + 1:
        raise ValueError(f"exclude_indptr has {exclude_indptr.shape[0]} offsets for "
                         f"{n_rows} rows; expected {n_rows + 1}")
    # The radix select reads float32 bits; other dtypes take the heap kernel.
    if k > SELECT_MAX_K or scores.dtype != np.float32:
        n_excluded = exclude_indices.shape[0] if has_filter else 0
        excluded = cuda.device_array(max(n_excluded, 1), dtype=np.int64)
        heap = (out_scores if scores.dtype == out_scores.dtype
                else cuda.device_array(out_scores.shape, dtype=scores.dtype))
        _heap_top_k[blocks_for(n_rows), THREADS](out_items, out_scores, heap, scores,
                                                 exclude_indptr, exclude_indices, excluded,
                                                 allowed, int(n_valid))
        return
    keys = reshaped(scratch("top_k.keys", scores.size, np.uint32, exact=True), scores.shape)
    _keys[blocks_for(keys.size), THREADS](keys, viewed(scores, np.uint32), allowed, int(n_valid))
    if has_filter and exclude_indices.shape[0]:
        _exclude[blocks_for(exclude_indices.shape[0]), THREADS](keys, exclude_indptr,
                                                                exclude_indices)
    _select[min(n_rows, 65535), ROW_THREADS](out_items, out_scores, keys, scores)


@device_arrays
def top_k_activated(out_items, out_scores, z, exclude_indptr, exclude_indices, allowed, n_valid,
                    act, slope, alpha, lam):
    """``top_k`` of the scores f(z), f the activation ``act`` (monotone non-decreasing).

    On the GPU the activation is one pass at memory speed (256 x 27,392 scores are 56 MB read
    and written, under 20 us at an H100's 3 TB/s), so this is ``activation_forward`` into a
    scratch array and ``top_k``, where the cpu evaluates f for the few candidates only; the
    scores are the same (``unit_activation``), rounded to float32 whatever z's precision, as
    the reference ranks them (float64 scores of a float64 z would rank below float32's
    resolution: items that tie at float32 went by score, not by item).
    """
    check_monotone(act, slope, alpha, lam)
    scores = reshaped(scratch("top_k_activated.scores", z.size, np.float32, exact=True),
                      z.shape)
    activation_forward(scores, z, act, slope, alpha, lam)
    top_k(out_items, out_scores, scores, exclude_indptr, exclude_indices, allowed, n_valid)


@kernel
def _multiply_filter(scores, indptr, indices, values):
    # A thread per entry, its row by binary search in indptr. A row may list an item twice,
    # and then its values multiply in entry order, as on the cpu: the thread of the item's
    # first entry applies them all, and the others leave it. Finding which is first scans the
    # row's earlier entries, so a row of L entries costs L * L / 2 index reads in all but no
    # thread more than the L steps the whole row took with a thread per row. Without values
    # every factor is 0.0, and a second 0.0 * s gives the bits of the first (a signed zero or
    # NaN), so there each thread applies its own entry and repeats need no scan.
    n_rows = indptr.shape[0] - 1
    n_items = scores.shape[1]
    zero = values.shape[0] == 0
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for e in range(indptr[0] + start, indptr[n_rows], stride):
        i = indices[e]
        if i < 0 or i >= n_items:
            continue
        b = row_of(indptr, e)
        if zero:
            scores[b, i] = 0.0 * scores[b, i]
            continue
        first = True
        for earlier in range(indptr[b], e):
            if indices[earlier] == i:
                first = False
                break
        if first:
            s = scores[b, i] * values[e]
            for later in range(e + 1, indptr[b + 1]):
                if indices[later] == i:
                    s *= values[later]
            scores[b, i] = s


@device_arrays
def multiply_filter(scores, indptr, indices, values):
    """DSSTNE's filter, in place: ``scores[b, i] *= v`` for every CSR entry (spec 8.3).

    An empty ``values`` means every value is 0.0; an empty ``indptr`` means no filter. Entries
    outside ``[0, N)`` are ignored; a row's entries are applied in order.
    """
    if indptr.shape[0] < 2 or indices.shape[0] == 0 or scores.shape[0] == 0:
        return
    _multiply_filter[blocks_for(indices.shape[0]), THREADS](scores, indptr, indices, values)
