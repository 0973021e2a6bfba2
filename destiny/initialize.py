"""Initial weights, with DSSTNE's exact formulas (spec 3.7, quirk 10.16).

``u`` below is uniform on (0, 1], as cuRAND's; ``s`` the layer's WeightInit Scale; ``n_in``
and ``n_out`` the strides of the source and destination layers. The whole matrix is drawn from
one generator, so a run split across ranks can draw the same matrix and slice it.
"""

from __future__ import annotations

import numpy as np

from destiny.netdef import WeightInit
from destiny.shard import block_columns, block_rows


def initial_weights(rng: np.random.Generator, scheme: WeightInit, scale: float, n_in: int,
                    n_out: int, dtype=np.float32, *, rows: tuple[int, int] | None = None,
                    cols: tuple[int, int] | None = None) -> np.ndarray:
    """A [n_in, n_out] weight matrix drawn as DSSTNE's ``NNWeight::Randomize`` does.

    With ``rows`` / ``cols`` only that block of the matrix is returned, but the whole matrix is
    drawn (in blocks of rows; ``rng`` ends where a whole draw would leave it), so every rank of
    a split network keeps its part of the same matrix (spec 7).
    """
    r0, r1 = rows or (0, n_in)
    c0, c1 = cols or (0, n_out)
    out = np.empty((r1 - r0, c1 - c0), dtype=dtype)
    step = block_rows(n_out)  # a rank keeping a slice of a huge matrix never holds all of it
    # A row wider than a block is drawn a block of columns at a time (in order: the same
    # numbers): a whole row of a layer of 10^9 units took each rank 8 GB in float64, and as
    # much again for each temporary, whatever its own share of the row.
    width = block_columns(n_out)
    for start in range(0, n_in, step):
        stop = min(start + step, n_in)
        for first in range(0, n_out, width):  # (one piece, unless step is one row)
            last = min(first + width, n_out)
            block = _draw(rng, scheme, scale, n_in, n_out, (stop - start, last - first))
            lo, hi = max(start, r0), min(stop, r1)
            left, right = max(first, c0), min(last, c1)
            if lo < hi and left < right:
                out[lo - r0:hi - r0, left - c0:right - c0] = \
                    block[lo - start:hi - start, left - first:right - first]
    return out


def _draw(rng, scheme, scale, n_in, n_out, shape):
    if scheme == WeightInit.Xavier:
        # Half the usual Glorot range: S * (u - 0.5) with S = s * sqrt(6 / (n_in + n_out)).
        w = scale * np.sqrt(6.0 / (n_in + n_out)) * (_u(rng, shape) - 0.5)
    elif scheme == WeightInit.CaffeXavier:
        w = 2.0 * scale * np.sqrt(3.0 / n_out) * (_u(rng, shape) - 0.5)  # fan-out, as DSSTNE
    elif scheme == WeightInit.Gaussian:
        w = rng.normal(0.0, scale, size=shape)
    elif scheme == WeightInit.Uniform:
        w = 2.0 * scale * (_u(rng, shape) - 0.5)
    elif scheme == WeightInit.UnitBall:
        w = scale * _u(rng, shape)  # (0, s]: positive only
    elif scheme == WeightInit.SELU:
        w = rng.normal(0.0, 1.0 / n_in, size=shape)  # sigma = 1/n_in, not 1/sqrt(n_in)
    elif scheme == WeightInit.Constant:
        w = np.full(shape, -scale)  # kScaleAndBias flips the sign of the constant
    else:
        raise ValueError(f"unknown weight initialisation scheme {scheme!r}")
    return w


def _u(rng: np.random.Generator, shape) -> np.ndarray:
    return 1.0 - rng.random(shape)  # (0, 1], like cuRAND's uniform
