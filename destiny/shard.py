"""Model parallelism (spec 7): which rank holds which part of every layer and weight matrix.

Every layer's units are split across the ranks with DSSTNE's rule (``parallel.unit_range``).
For a weight matrix W [n_in, n_out] the larger side decides the layout:

* ``COLS`` (outgoing larger, ``3 * n_out > 2 * n_in``): a rank holds W[:, its output units].
  Forward: all-gather the input activations, then a local product gives the local outputs.
  Backward: dW is local; the partial input delta ``dZ @ W.T`` is reduce-scattered.
* ``ROWS`` (otherwise): a rank holds W[its input units, :]. Forward: the local product is a
  partial sum over all outputs, reduce-scattered. Backward: all-gather the output delta; dW and
  the local input delta are then local.

Biases are split by destination unit, as is every layer, SoftMax layers included (the network
adds up a SoftMax row's sums across the ranks, as it does DeltaNorm's row norms and a ``ROWS``
matrix's WeightNorm column norms). A shared matrix (spec 3.14) is held by its owner's layout
and used as it is by every connection that shares it: its own layout needs the same block
(``check_splittable``; a tied-weights autoencoder's W and W.T do), so sharing costs no
communication, and only the owner's matrix is written. With one process every layout is
``WHOLE`` and no collective is called. Writing a network file gathers the matrices on rank 0 a
block of rows at a time (``write_gathered``), so no rank ever holds a whole matrix it does not
own.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from destiny.errors import NetDefError
from destiny.netdef import NetworkDef
from destiny.parallel import Comm, agree, failure_message
from destiny.wording import counted

WHOLE, ROWS, COLS = "whole", "rows", "cols"

# Values per block of rows when a matrix is drawn, sent to rank 0 or read: 4 M (16 MB).
_BLOCK_VALUES = 1 << 22


def layout(n_in: int, n_out: int, size: int) -> str:
    """The layout of an [n_in, n_out] matrix split across ``size`` ranks (spec 7)."""
    if size == 1:
        return WHOLE
    return COLS if 3 * n_out > 2 * n_in else ROWS


# What to do instead of splitting, in every refusal.
_UNSPLIT = "run without mpiexec (predict: without --split-layers)"


def check_splittable(netdef: NetworkDef, size: int) -> None:
    """Refuse what Destiny does not split across ``size`` ranks, naming the JSON path."""
    for i, layer in enumerate(netdef.layers):
        path = f"Layers[{i}]"
        _check_shares_aligned(netdef, layer, path)
        if layer.n < size:
            raise NetDefError(f"{path}.N", f"layer {layer.name!r} has "
                              f"{counted(layer.n, 'unit')}, fewer than the {size} MPI ranks "
                              "that would each hold some of them; run on at most "
                              f"{counted(layer.n, 'rank')}, or {_UNSPLIT}.")


def _check_shares_aligned(netdef: NetworkDef, layer, path: str) -> None:
    """Refuse a share whose block a rank would need is not the block of the matrix it holds.

    A rank holds its block of the owner's matrix [a, b] and uses it for every connection that
    shares it, with no communication. An untransposed share has the owner's shape, hence its
    layout and its block. A transposed one [b, a] needs W.T's block: the owner's block
    transposed when one layout is ``ROWS`` and the other ``COLS`` (a rank holds W[its units of
    a, :], and W.T[:, its units of a] is that), which holds unless neither side has at most
    two thirds of the other's units: then both are ``COLS`` and the blocks differ."""
    by_name = {other.name: other for other in netdef.layers}
    for share in layer.shared_weights:
        a = by_name[share.source_input_layer].n
        b = by_name[share.source_output_layer].n
        if not share.transposed or layout(a, b, 2) != layout(b, a, 2):
            continue
        owner = f"{share.source_input_layer} -> {share.source_output_layer}"
        raise NetDefError(
            f"{path}.SharedWeights", f"the weight {share.input_layer} -> {layer.name} uses "
            f"{owner}'s matrix ({a} x {b} units) transposed, and Destiny splits both across "
            "MPI ranks by their output units (the larger side decides, spec 7), so a rank "
            "would need another block of the matrix than the one it holds; it splits a "
            "transposed share only where one side has at most two thirds of the other's "
            f"units. Change the layers' sizes, give them their own weights, or {_UNSPLIT}.")


class Part:
    """A rank's part of a matrix: rows ``rows`` and columns ``cols`` of the whole."""

    def __init__(self, array: np.ndarray, rows: tuple[int, int], cols: tuple[int, int],
                 shape: tuple[int, int]):
        self.array, self.rows, self.cols, self.shape = array, rows, cols, shape

    def piece(self, r0: int, r1: int) -> np.ndarray | None:
        """What this rank holds of whole rows [r0, r1), or None."""
        lo, hi = max(r0, self.rows[0]), min(r1, self.rows[1])
        if lo >= hi or self.cols[0] == self.cols[1]:
            return None
        return self.array[lo - self.rows[0]:hi - self.rows[0]]


class Gathered:
    """A matrix split across ranks, as the file writer on rank 0 sees it (``shape``, ``rows``).

    ``rows(r0, r1)`` asks every rank for its piece of those rows (the other ranks answer in
    ``serve``) and joins the pieces: one block of rows of the whole matrix at a time.
    """

    def __init__(self, comm: Comm, key, part: Part):
        self.comm, self.key, self.part = comm, key, part
        self.shape = part.shape
        self.size = part.shape[0] * part.shape[1]
        self.in_step = True  # False once a collective of ``rows`` failed here (write_gathered)

    def rows(self, r0: int, r1: int) -> np.ndarray:
        self.in_step = False
        self.comm.bcast((self.key, r0, r1))
        pieces = self.comm.gather((self.part.cols, self.part.piece(r0, r1)))
        self.in_step = True
        return _join(pieces, r1 - r0, self.shape[1])


def _join(pieces, n_rows: int, n_cols: int) -> np.ndarray:
    out = np.empty((n_rows, n_cols), dtype=np.float32)
    row = {}
    for (c0, c1), piece in pieces:
        if piece is None:
            continue
        start = row.get((c0, c1), 0)  # ROWS parts: consecutive ranks give consecutive rows
        out[start:start + len(piece), c0:c1] = piece
        row[(c0, c1)] = start + len(piece)
    return out


def block_rows(n_cols: int) -> int:
    """Rows per block when a matrix of ``n_cols`` columns is drawn, sent or read in blocks."""
    return max(1, _BLOCK_VALUES // max(n_cols, 1))


def block_columns(n_cols: int) -> int:
    """Columns drawn at a time in a row of ``n_cols``: all of them, or, in a row wider than a
    block (a block of its own, ``block_rows``), a block's worth."""
    return max(1, min(n_cols, _BLOCK_VALUES))


def write_gathered(comm: Comm, parts: dict, write: Callable[[dict], None]) -> None:
    """Rank 0 calls ``write({key: Gathered})``; the other ranks send it their parts meanwhile.

    ``parts`` maps a key to this rank's ``Part``. A failure on rank 0 (say, a full disk)
    raises the same ``ParallelError`` on every rank once the others have been released. One
    inside a collective of ``Gathered.rows`` (out of memory receiving the pieces) is raised on
    rank 0 alone, as it is: the others may still wait in that collective, which no later one
    matches (the job hung), so only stopping the job ends them (the command line's
    ``Comm.abort``).
    """
    failure = None
    if comm.is_root:
        gathered = {key: Gathered(comm, key, part) for key, part in parts.items()}
        try:
            write(gathered)
        except Exception as e:  # noqa: BLE001 - the waiting ranks must hear of it
            if not all(g.in_step for g in gathered.values()):
                raise
            failure = failure_message(comm, e)
        finally:
            if all(g.in_step for g in gathered.values()):
                comm.bcast(None)
    else:
        while (request := comm.bcast(None)) is not None:
            key, r0, r1 = request
            part = parts[key]
            comm.gather((part.cols, part.piece(r0, r1)))
    agree(comm, failure)
