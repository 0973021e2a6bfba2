"""numba kernels for prediction: filters and top-K selection (spec 8.3, 8.4).

Same names and signatures as ``destiny.kernels.reference.topk``. Rows are independent, so
both kernels run in parallel over rows. ``top_k`` never sorts a row: it scans the row once,
keeping the K best items seen so far in a bounded min-heap whose root is the worst of them,
so a row costs O(N) comparisons against the root plus O(log K) per item that gets in. A
first pass takes the maxima of blocks of 32 items (one vectorized loop); the K-th largest of
them is a floor under the K best, so the scan skips every block whose maximum is below it and
the heap sees a few hundred items fewer per row (256 x 27,392, K = 100, the batch's items
filtered: about 13.5 -> 5 ms, ``scripts/bench_kernels.py``).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from destiny.kernels import unit
from destiny.kernels.codes import LINEAR, check_monotone


_ranks_below = njit(cache=True, inline="always")(unit.ranks_below)  # shared with cuda
_unit_activation = njit(cache=True)(unit.unit_activation)


@njit(cache=True)
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


@njit(cache=True)
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


# Items per block of top_k's threshold pass (see _floor_of_top_k).
THRESHOLD_BLOCK = 32


# Order keys: the int32 bits b of a float32 map to an integer that orders as the floats do
# (-0.0 just below 0.0), b itself for a positive float and b with the magnitude bits flipped
# for a negative one. The map is its own inverse. Branch-free, so loops over it vectorise.


@njit(cache=True, inline="always")
def _order_key(b):
    """int32 bits of a float32 -> its order key (an int64)."""
    b = np.int64(b)
    return b ^ ((b >> 31) & 0x7FFFFFFF)


@njit(cache=True, inline="always")
def _bits_of_key(key):
    """An order key -> the int32 bits of its float32."""
    return np.int32(key ^ ((key >> 31) & 0x7FFFFFFF))


@njit(cache=True, inline="always")
def _float_of_key(key):
    return _bits_of_key(key).view(np.float32)


_NEG_INF_KEY = -0x7F800001  # the order key of -inf


@njit(cache=True)
def _block_maxima(bits, n_blocks, out):
    """``out[blk]`` = the largest non-NaN float of block ``blk`` (-inf if none), from the
    row's int32 ``bits``.

    On the floats' order keys: an integer maximum vectorises, where a float one does not (LLVM
    needs fast-math's no-NaN promise to vectorise a float max, and NaN must never win here).
    """
    for blk in range(n_blocks):
        m = _NEG_INF_KEY
        base = blk * THRESHOLD_BLOCK
        for q in range(THRESHOLD_BLOCK):
            b = bits[base + q]
            nan = (b & 0x7FFFFFFF) > 0x7F800000
            m = max(m, _NEG_INF_KEY if nan else _order_key(b))
        out[blk] = _float_of_key(m)


@njit(cache=True)
def _floor_of_top_k(row, n_scan, rank, maxima, filtered, excluded):
    """A score T such that at least ``rank`` unfiltered items of ``row[:n_scan]`` score T or
    more, or -inf; fills ``maxima`` with the blocks' maxima.

    The maxima of blocks of THRESHOLD_BLOCK items (NaN never counts as a maximum, nor does a
    filtered item: a block whose maximum is one is scanned again without them) are distinct
    items, so where at least ``rank`` blocks exist their rank-th largest is such a T. With
    ``rank`` = K plus the number of items not allowed, at least K returnable items score T or
    more: an item below T, or NaN, is not among the K best, and top_k skips it, and every
    block whose maximum is below T, without touching the heap.
    """
    n_blocks = n_scan // THRESHOLD_BLOCK
    if n_blocks < rank:
        return -np.inf
    _block_maxima(row.view(np.int32), n_blocks, maxima)
    for e in range(len(excluded)):
        i = excluded[e]
        if 0 <= i < n_blocks * THRESHOLD_BLOCK and row[i] >= maxima[i // THRESHOLD_BLOCK]:
            base = i // THRESHOLD_BLOCK * THRESHOLD_BLOCK
            m = -np.inf
            for j in range(base, base + THRESHOLD_BLOCK):
                if filtered[j] == 0 and row[j] > m:
                    m = row[j]
            maxima[i // THRESHOLD_BLOCK] = m
    return _kth_largest(maxima[:n_blocks], rank)


@njit(cache=True)
def _kth_largest(values, rank):
    """The ``rank``-th largest of float32 ``values`` (no NaN; 1 <= rank <= len).

    A radix select on the values' order keys, most significant digit first (11, 11 and 10
    bits): a histogram of the digit over the values still in the running finds the bucket of
    the wanted one, and only that bucket's values go on to the next digit. No comparison
    branches to mispredict, and no sort: numba's ``np.partition`` took 12 us of a row's 37 for
    856 block maxima, a quickselect 8 us, and a one-digit select that sorted its bucket was
    as slow where the scores are close together (an untrained network's: every maximum in
    one bucket).
    """
    n = len(values)
    bits = values.view(np.int32)
    keys = np.empty(n, np.int64)
    for i in range(n):
        keys[i] = _order_key(bits[i]) + 0x80000000  # unsigned: the digits read as written
    hist = np.empty(1 << 11, np.int32)
    need = rank  # the wanted value's rank among those still in the running
    for shift, width in ((21, 11), (10, 11), (0, 10)):
        mask = (1 << width) - 1
        hist[:] = 0
        for i in range(n):
            hist[(keys[i] >> shift) & mask] += 1
        bucket = mask
        while hist[bucket] < need:
            need -= hist[bucket]
            bucket -= 1
        kept = 0
        for i in range(n):
            if (keys[i] >> shift) & mask == bucket:
                keys[kept] = keys[i]
                kept += 1
        n = kept
    return _float_of_key(keys[0] - 0x80000000)  # every key left is the same


def top_k(out_items, out_scores, scores, exclude_indptr, exclude_indices, allowed, n_valid):
    """The K best items of every row, best first (spec 8.4); see the reference for the contract.

    ``scores`` [B, N] is read only; ``out_items`` int32 [B, K] and ``out_scores`` float32
    [B, K] get ``-1`` and ``-inf`` in the slots a row has no candidate for.
    """
    _top_k_rows(out_items, out_scores, scores, exclude_indptr, exclude_indices, allowed, n_valid,
                LINEAR, 0.0, 0.0, 0.0)


def top_k_activated(out_items, out_scores, z, exclude_indptr, exclude_indices, allowed, n_valid,
                    act, slope, alpha, lam):
    """``top_k`` of the scores f(z), f the activation ``act``, evaluating f on a few items only.

    f must be monotone non-decreasing (``codes.is_monotone``). The floor from block maxima is
    taken on z; every item whose z is below the lowest z that f maps to the floor's own score
    (a bisection over the float32 values) ranks below K others and is skipped, and f is
    evaluated for the rest alone: a few hundred items of a 27,392-item row for K = 100, instead
    of a pass over the whole row. Equal scores (a saturated sigmoid gives 1.0 to many z) still
    go by item, as in ``top_k`` of the activated scores; the scores are f's as
    ``unit_activation`` computes it (in float64, rounded to float32), as the reference's are.
    """
    check_monotone(act, slope, alpha, lam)
    _top_k_rows(out_items, out_scores, z, exclude_indptr, exclude_indices, allowed, n_valid,
                act, slope, alpha, lam)


@njit(cache=True)
def _score(act, z, slope, alpha, lam):
    return np.float32(_unit_activation(act, np.float64(z), slope, alpha, lam))


@njit(cache=True)
def _lowest_reaching(target, high, act, slope, alpha, lam):
    """The lowest float32 z with f(z) >= ``target``, given f(``high``) >= target and f
    monotone non-decreasing: a bisection over the float32 values in their order, as integers."""
    if _score(act, -np.inf, slope, alpha, lam) >= target:
        return np.float32(-np.inf)
    lo = _NEG_INF_KEY  # f(lo) < target
    hi = _order_key(np.float32(high).view(np.int32))  # f(hi) >= target
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _score(act, _float_of_key(mid), slope, alpha, lam) >= target:
            hi = mid
        else:
            lo = mid
    return _float_of_key(hi)


@njit(cache=True, parallel=True)
def _top_k_rows(out_items, out_scores, scores, exclude_indptr, exclude_indices, allowed, n_valid,
                act, slope, alpha, lam):
    n_rows = scores.shape[0]
    n_items = scores.shape[1]
    k = out_items.shape[1]
    n_scan = max(0, min(n_valid, n_items))
    has_filter = len(exclude_indptr) != 0
    has_allowed = len(allowed) != 0
    n_not_allowed = 0
    if has_allowed:
        for j in range(n_scan):
            n_not_allowed += allowed[j] == 0
    # The floor counts items by their values, so it needs a number for f of every value it
    # may take: f(+inf) is NaN for SoftSign (inf / inf) and for SELU with lambda 0 (0 * inf),
    # as in the reference, and NaN ranks below every number. Their rows are scanned whole.
    top = _score(act, np.inf, slope, alpha, lam) if act != LINEAR else np.float32(0.0)
    floored = top == top
    for b in prange(n_rows):
        if k == 0:
            continue
        row = scores[b]
        # The row's excluded items, as flags: membership is one load.
        excluded = (exclude_indices[exclude_indptr[b]:exclude_indptr[b + 1]] if has_filter
                    else np.empty(0, dtype=exclude_indices.dtype))
        filtered = np.zeros(n_scan if has_filter else 0, dtype=np.uint8)
        for e in range(len(excluded)):
            if 0 <= excluded[e] < n_scan:
                filtered[excluded[e]] = 1
        # The heap holds the scores in their own precision: float64 scores that differ below
        # float32's resolution would tie once rounded, and then go by item.
        heap_scores = np.empty(k, dtype=scores.dtype)
        heap_items = np.empty(k, dtype=np.int32)
        size = 0
        worst = np.float32(0.0)  # the root's score, valid once the heap is full
        worst_nan = False
        maxima = np.empty(n_scan // THRESHOLD_BLOCK, np.float32)
        # The floor reads the row's float32 bits (of a float64 row it would read halves of
        # numbers, and skip the best): other scores are scanned whole.
        floor = (_floor_of_top_k(row, n_scan, k + n_not_allowed, maxima, filtered, excluded)
                 if row.itemsize == 4 and floored else -np.inf)
        # With a floor, whole blocks whose maximum is below it are skipped: no item of theirs
        # can be among the K best. The items stay in ascending order either way. The floor is
        # on the row's values; at least K returnable items score f(floor) or more, so an item
        # is a candidate when f(its value) >= f(floor): when its value is at least ``low``.
        # (f(NaN) is NaN for every activation, so a NaN value is never one.)
        n_blocks = len(maxima) if floor > -np.inf else 0
        low = floor
        if n_blocks and act != LINEAR:
            low = _lowest_reaching(_score(act, floor, slope, alpha, lam), floor, act, slope,
                                   alpha, lam)
        first_unblocked = n_blocks * THRESHOLD_BLOCK
        for blk in range(n_blocks + 1):
            if blk < n_blocks:
                if not maxima[blk] >= low:
                    continue
                lo, hi = blk * THRESHOLD_BLOCK, (blk + 1) * THRESHOLD_BLOCK
            else:  # the items after the last whole block, or every item without a floor
                lo, hi = first_unblocked, n_scan
            for j in range(lo, hi):
                s = row[j]
                if n_blocks and not s >= low:  # below the K-th best, or NaN: never in
                    continue
                if act != LINEAR:
                    # f is monotone: a value at or below the root's own has a score at or
                    # below the root's, and cannot beat it. Most candidates stop here,
                    # without evaluating f.
                    if size == k and not worst_nan and s <= row[heap_items[0]]:
                        continue
                    s = _score(act, s, slope, alpha, lam)
                if size == k:
                    # Items come in ascending order, so a tie with the root never beats it:
                    # only a strictly larger score does, or any number when the root is NaN.
                    if not (s > worst or (worst_nan and s == s)):
                        continue
                if has_allowed and allowed[j] == 0:
                    continue
                if has_filter and filtered[j]:
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
        # Empty the heap worst first into the tail of the row's output: best first at the end.
        for slot in range(size - 1, -1, -1):
            out_scores[b, slot] = heap_scores[0]
            out_items[b, slot] = heap_items[0]
            heap_scores[0] = heap_scores[slot]
            heap_items[0] = heap_items[slot]
            _sift_down(heap_scores, heap_items, slot, 0)
        for slot in range(size, k):
            out_scores[b, slot] = -np.inf
            out_items[b, slot] = -1


@njit(cache=True, parallel=True)
def multiply_filter(scores, indptr, indices, values):
    """DSSTNE's filter, in place: ``scores[b, i] *= v`` for every CSR entry (spec 8.3).

    An empty ``values`` means every value is 0.0; an empty ``indptr`` means no filter. Entries
    outside ``[0, N)`` are ignored. A row's entries are applied in order, so duplicates
    multiply twice, exactly as in the reference.
    """
    if len(indptr) == 0:
        return
    n_items = scores.shape[1]
    zero = len(values) == 0
    for b in prange(scores.shape[0]):
        for e in range(indptr[b], indptr[b + 1]):
            i = indices[e]
            if i < 0 or i >= n_items:
                continue
            v = np.float32(0.0) if zero else values[e]
            scores[b, i] *= v
