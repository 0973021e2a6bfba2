"""NumPy reference for prediction: filters and top-K selection (spec 8.3, 8.4).

See ``destiny.kernels`` for the conventions (dimension letters, CSR batches, outputs first).
Here ``N`` is the width of the score matrix (the output layer's units, padding included) and
``K`` the number of recommendations per row. An empty array (length 0) means "absent".
"""

from __future__ import annotations

import numpy as np

from destiny.kernels.codes import check_monotone
from destiny.kernels.reference.pointwise import activate


def _row_entries(indptr, indices, b, n_items):
    """The listed items of CSR row ``b`` that fall inside ``[0, n_items)``, and their positions."""
    lo, hi = int(indptr[b]), int(indptr[b + 1])
    positions = np.arange(lo, hi)
    items = indices[lo:hi].astype(np.int64)
    inside = (items >= 0) & (items < n_items)
    return items[inside], positions[inside]


def top_k(out_items, out_scores, scores, exclude_indptr, exclude_indices, allowed, n_valid):
    """The K best items of every row, best first (spec 8.4, with its recommended order).

    Parameters
    ----------
    out_items : int32 [B, K]
        Written: the chosen items, ``-1`` in the slots a row has no candidate for.
    out_scores : float32 [B, K]
        Written: their scores, ``-inf`` in the empty slots.
    scores : float32 [B, N]
        The scores; read only.
    exclude_indptr : int64 [B + 1], or empty for no exclusion at all
    exclude_indices : int32
        CSR rows of items never to recommend (for example the items a user already has).
        Entries outside ``[0, N)`` are ignored; duplicates are harmless.
    allowed : uint8 [N], or empty
        When given, items with ``allowed[j] == 0`` are never recommended (never seen in training).
    n_valid : int
        The number of real items: units ``j >= n_valid`` are padding (spec 6.4) and are skipped.

    Order: score descending, equal scores by ascending item index; NaN ranks below every number
    (``-inf`` included) but is still a candidate. ``K`` may exceed the number of candidates.
    """
    n_rows, n_items = scores.shape
    k = out_items.shape[1]
    out_items[:] = -1
    out_scores[:] = -np.inf
    if k == 0:
        return
    candidate = np.arange(n_items) < max(0, min(int(n_valid), n_items))
    if len(allowed) != 0:
        candidate &= allowed != 0
    for b in range(n_rows):
        keep = candidate.copy()
        if len(exclude_indptr) != 0:
            excluded, _ = _row_entries(exclude_indptr, exclude_indices, b, n_items)
            keep[excluded] = False
        items = np.flatnonzero(keep)
        row = scores[b, items]
        # lexsort sorts by its last key first; -NaN is NaN, and NaN sorts last.
        order = np.lexsort((items, -row))[:k]
        out_items[b, :len(order)] = items[order]
        out_scores[b, :len(order)] = row[order]


def top_k_activated(out_items, out_scores, z, exclude_indptr, exclude_indices, allowed, n_valid,
                    act, slope, alpha, lam):
    """``top_k`` of the scores f(z), f the activation ``act`` (spec 3.6) in float64 rounded to
    float32, as ``activation_forward`` computes them.

    Prediction's top-k of an output layer's activations, for an f that never decreases as z
    grows (``codes.is_monotone``: not SoftMax); the other backends evaluate f for the few
    items that can be among the K best only. ``z`` [B, N] is read only; the other arguments
    are ``top_k``'s, and ``slope``, ``alpha``, ``lam`` are ``activation_forward``'s.
    """
    check_monotone(act, slope, alpha, lam)
    scores = activate(act, z, slope, alpha, lam).astype(np.float32)
    top_k(out_items, out_scores, scores, exclude_indptr, exclude_indices, allowed, n_valid)


def multiply_filter(scores, indptr, indices, values):
    """DSSTNE's filter, in place: ``scores[b, i] *= v`` for every entry (b, i, v) (spec 8.3).

    Parameters
    ----------
    scores : float32 [B, N]
        Modified in place.
    indptr : int64 [B + 1], or empty for no filter
    indices : int32
        CSR rows of the filter. Entries outside ``[0, N)`` are ignored.
    values : float32, same length as ``indices``, or empty
        The multipliers. Empty means every value is 0.0 (a filter entry without a comma in
        DSSTNE's text format is worth 0.0, not 1.0). An item listed twice is multiplied twice.
    """
    if len(indptr) == 0:
        return
    n_items = scores.shape[1]
    for b in range(scores.shape[0]):
        items, positions = _row_entries(indptr, indices, b, n_items)
        factors = (np.zeros(len(items), dtype=np.float32) if len(values) == 0
                   else values[positions].astype(np.float32))
        # multiply.at applies repeated items once each (a plain fancy *= would apply them once).
        np.multiply.at(scores[b], items, factors)
