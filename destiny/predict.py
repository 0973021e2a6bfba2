"""Batched scoring and top-k with already-seen items removed.

``score_batches`` runs the forward pass (no dropout, no denoising) over a sparse input in
minibatches; ``top_k`` picks the best K items of each row without sorting the whole row,
leaving out the row's filtered items and the padding units past the real item count.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from destiny.network import Batch, Network

_EMPTY = np.zeros(0, dtype=np.float32)


def score_batches(net: Network, indptr, indices, values=None, *, batch_size: int = 1024,
                  output: str | None = None) -> Iterator[tuple[int, np.ndarray]]:
    """Yield (first row, scores [rows, N]) for each minibatch of the CSR input."""
    (input_name,) = net.inputs
    output = output or net.outputs[0]
    rows = len(indptr) - 1
    for lo in range(0, rows, batch_size):
        hi = min(lo + batch_size, rows)
        start, end = indptr[lo], indptr[hi]
        sub = (indptr[lo:hi + 1] - start, indices[start:end],
               _EMPTY if values is None or len(values) == 0 else values[start:end])
        net.forward(Batch(size=hi - lo, inputs={input_name: sub}))
        yield lo, net.activation(output, hi - lo)


def top_k(scores: np.ndarray, k: int, *, exclude_indptr=None, exclude_indices=None,
          n_items: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The k best items of each row (indices, scores), best first (equal scores by index).

    Items listed for a row in the CSR ``exclude_*`` arrays, and items >= ``n_items`` (padding
    units), are never returned. Rows with fewer than k candidates are padded with -1 / -inf.
    """
    scores = np.array(scores, dtype=np.float64, copy=True)
    if n_items is not None:
        scores[:, n_items:] = -np.inf
    if exclude_indptr is not None:
        rows = np.repeat(np.arange(len(exclude_indptr) - 1), np.diff(exclude_indptr))
        scores[rows, exclude_indices] = -np.inf
    k = min(k, scores.shape[1])
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    part_scores = np.take_along_axis(scores, part, axis=1)
    order = np.lexsort((part, -part_scores), axis=1)
    items = np.take_along_axis(part, order, axis=1)
    best = np.take_along_axis(part_scores, order, axis=1)
    items[~np.isfinite(best)] = -1
    return items, best
