"""numba.cuda kernels for the output-layer losses and deltas (spec 5.5, 3.11, 6.3).

Same names and signatures as ``destiny.kernels.cpu.loss``, whose docstring (and the
reference's) explains the "pre-delta" ``p`` and the SoftMax row Jacobian
``delta = p - a * sum_j p_j``. The per-unit maths is one device function, ``unit_loss``, a
line-for-line mirror of the cpu helper, computed in float64.

A SoftMax row is coupled, so both kernels give one block to each row (grid-stride over the
rows). Other activations are per unit, so the sparse kernel splits a wide row by column range
over several blocks (the grid's y), each taking its range's units and listed entries: a batch
of 256 rows is otherwise 256 blocks, too few to fill a GPU (on an H100 that kernel ran at a
thirteenth of the memory's speed). For sparse targets a block makes the two passes of spec 5.5
without a dense target:

1. every unit as a zero target: its delta ``p0`` and error ``e0`` (SparseIgnoreZero targets:
   a delta of 0 and no error, and pass 2 adds ``e1`` alone);
2. the row's listed entries, one per thread: the error gains ``e1 - e0`` (twice for an index
   listed twice, as in DSSTNE), and the delta of the unit becomes ``p1``, written only by the
   entry that is the unit's last in the row (as the cpu's sequential overwrite), so the result
   is deterministic;
3. the SoftMax Jacobian, DeltaBoost and the example weight, over the units again (DeltaBoost
   rewrites the listed units' deltas from ``p1`` once the others are scaled).

Each thread sums the weighted errors of its units over the block's rows; the block reduces them
in shared memory (a fixed tree) and writes one number, and the host sums those when it reads
the error (``DeviceError``: the one small device-to-host copy of a step). The grid depends
only on B and the row's width, so the result is deterministic.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from destiny.kernels import unit
from destiny.kernels.codes import (CROSS_ENTROPY, DSMCE, L1, L2, L2_HINGE, SMCE, SOFTMAX,
                                   boost_applies, check_loss_activation)
from destiny.kernels.cuda.launch import (MAX_BLOCKS, ROW_THREADS, SIMULATED, device_arrays,
                                         kept, kernel)
from destiny.kernels.cuda.pointwise import unit_derivative

__all__ = ["check_loss_activation", "dense_loss_delta", "softmax_loss_finish",
           "softmax_loss_partials", "sparse_loss_delta"]

EPS = 1e-12  # DSSTNE's MIN_ERROR: every log is log(max(EPS, x)) (spec 5.5)
# Units of a row per block of the sparse kernel (four per thread), and the most blocks a row
# is split over. Under the simulator a few units, so that the tests' tiny rows are split.
PART_UNITS = 4 if SIMULATED else 4 * ROW_THREADS
MAX_PARTS = 64


# NaN-keeping clamps and sign (``destiny.kernels.unit``): with max, min and a sign of
# comparisons a NaN output lost its NaN, and cost a finite error where the reference's (NumPy's
# maximum, minimum and sign) is NaN, so that training's NaN guard did not stop at that batch.
_at_least = cuda.jit(device=True)(unit.at_least)
_at_most = cuda.jit(device=True)(unit.at_most)
_sign = cuda.jit(device=True)(unit.sign)


@cuda.jit(device=True)
def _log(x):
    return math.log(_at_least(x, EPS))


@cuda.jit(device=True)
def _hinge_gap(a, t):
    # L2Hinge: d = a - |t|, kept only on the wrong side of the target (spec 5.5).
    d = a - abs(t)
    return _at_most(d, 0.0) if t > 0.0 else _at_least(d, 0.0)


@cuda.jit(device=True)
def _marginal_loss(err_fn, act, a, t, one, prm):
    """(e, p) of SMCE and DSMCE, fused with the Sigmoid or SoftMax derivative."""
    one_target, zero_target, one_scale, zero_scale = prm[3], prm[4], prm[5], prm[6]
    if not (a < one_target if one else a > zero_target):  # the active branch (spec 5.5)
        return 0.0, 0.0
    if one:  # DSMCE scales a listed unit by its value t
        scale = one_scale * (t if err_fn == DSMCE else 1.0)
        return -scale * _log(a), -scale if act == SOFTMAX else scale * (a - 1.0)
    e = -zero_scale * _log(1.0 - a)
    if act == SOFTMAX:  # a * de/da
        return e, zero_scale * a / max(EPS, 1.0 - a)
    return e, zero_scale * a  # de/da * a (1 - a)


@cuda.jit(device=True)
def unit_loss(err_fn, act, a, t, one, prm):
    """Per-unit error and pre-delta ``(e, p)`` of the output ``a`` for the target ``t``.

    ``prm`` is the float64 tuple (slope, alpha, lam, one_target, zero_target, one_scale,
    zero_scale); ``one`` selects the SMCE/DSMCE listed-target branch.
    """
    if err_fn == CROSS_ENTROPY:  # fused with the Sigmoid / SoftMax derivative
        if act == SOFTMAX:
            return -t * _log(a), -t
        return -t * _log(a) - (1.0 - t) * _log(1.0 - a), a - t
    if err_fn == SMCE or err_fn == DSMCE:
        return _marginal_loss(err_fn, act, a, t, one, prm)
    if err_fn == L1:
        e, g = abs(a - t), _sign(a - t)
    elif err_fn == L2:
        e, g = 0.5 * (a - t) * (a - t), a - t
    elif err_fn == L2_HINGE:
        g = _hinge_gap(a, t)
        e = 0.5 * g * g
    else:  # HINGE: the exact gradient, not DSSTNE's a < 0
        e, g = _at_least(1.0 - t * a, 0.0), (-t if t * a < 1.0 else 0.0)
    if act == SOFTMAX:
        return e, a * g
    return e, g * unit_derivative(act, a, prm[0], prm[1], prm[2])


@cuda.jit(device=True)
def _listed_target(err_fn, act, value, count):
    """A listed entry's target: its value, or 1 / (1/n for SoftMax CrossEntropy), spec 6.6."""
    if err_fn == CROSS_ENTROPY:
        return 1.0 / count if act == SOFTMAX else 1.0
    if err_fn == SMCE:
        return 1.0
    return value


@cuda.jit(device=True)
def _is_last(indices, k, hi):
    """Whether entry k is the last of entries k..hi-1 to list its unit.

    A unit listed twice in a row takes the last entry's value (quirk 10.5), as on the cpu.
    The block writes a row's entries in rounds of ROW_THREADS with a barrier between them,
    so a later round overwrites an earlier one, and a thread need only scan the rest of its
    own round (hi = the round's end): at most ROW_THREADS - 1 indices, where a scan to the
    row's end made a row of 9,000 entries scan 40 M. Only asked where the values differ: an
    indicator row's entries of one unit all write the same delta, in any order."""
    j = indices[k]
    for later in range(k + 1, hi):
        if indices[later] == j:
            return False
    return True


@cuda.jit(device=True)
def _finish_row(delta, a, r, act, factor, total, c0, c1):
    """``delta[r] = (p - a * total) * factor`` (SoftMax) or ``p * factor``, units c0 to c1."""
    if act != SOFTMAX and factor == 1.0:
        return
    for j in range(c0 + cuda.threadIdx.x, c1, ROW_THREADS):
        d = np.float64(delta[r, j])
        if act == SOFTMAX:
            d -= np.float64(a[r, j]) * total
        delta[r, j] = d * factor


@cuda.jit(device=True)
def _block_sum(shared, value):
    """The sum of ``value`` over the block, returned to every thread (a fixed tree).

    Here rather than shared with ``pointwise``: the simulator swaps in its fake ``cuda`` module
    per module, and only the launching kernel's module is swapped for the whole launch.
    """
    t = cuda.threadIdx.x
    shared[t] = value
    cuda.syncthreads()
    step = ROW_THREADS // 2
    while step > 0:
        if t < step:
            shared[t] += shared[t + step]
        cuda.syncthreads()
        step //= 2
    total = shared[0]
    cuda.syncthreads()
    return total


@cuda.jit(device=True)
def _pre_delta_row(delta, a, r, indices, values, lo, hi, count, c0, c1, err_fn, act, prm,
                   ignore_zero):
    """Steps 1 and 2 for row r, units c0 to c1 (its listed entries lo..hi-1, of ``count`` in
    the whole row): the pre-deltas into ``delta``; returns this thread's share of the row's
    unweighted error. Every thread of the block calls it (it waits for the block)."""
    t = cuda.threadIdx.x
    boolean = values.shape[0] == 0
    row_err = 0.0
    for j in range(c0 + t, c1, ROW_THREADS):  # 1. every unit as a zero target ...
        if ignore_zero:  # (no zero targets: SparseIgnoreZero)
            delta[r, j] = 0.0
        else:
            e, p = unit_loss(err_fn, act, np.float64(a[r, j]), 0.0, False, prm)
            delta[r, j] = p
            row_err += e
    cuda.syncthreads()
    for start in range(lo, hi, ROW_THREADS):  # 2. ... then correct the listed entries,
        k = start + t                          #    a round of ROW_THREADS at a time
        end = min(start + ROW_THREADS, hi)
        if k < end and c0 <= indices[k] < c1:  # (not another block's units)
            x = np.float64(a[r, indices[k]])
            v = 1.0 if boolean else np.float64(values[k])
            e1, p1 = unit_loss(err_fn, act, x, _listed_target(err_fn, act, v, count), True,
                               prm)
            row_err += e1
            if not ignore_zero:
                row_err -= unit_loss(err_fn, act, x, 0.0, False, prm)[0]
            if boolean or _is_last(indices, k, end):
                delta[r, indices[k]] = p1
        if not boolean:  # (the same for the whole block)
            cuda.syncthreads()  # this round's writes before the next round's
    return row_err


@cuda.jit(device=True)
def _boost_listed(delta, a, r, indices, values, lo, hi, count, c0, c1, err_fn, act, prm, total,
                  boost_one, w):
    """DeltaBoost's listed units of row r, once ``_finish_row`` scaled the others: their
    deltas from ``p1`` again (``total``: the SoftMax row's sum of pre-deltas), in rounds as
    step 2 writes them. Every thread of the block calls it."""
    t = cuda.threadIdx.x
    boolean = values.shape[0] == 0
    cuda.syncthreads()
    for start in range(lo, hi, ROW_THREADS):  # (in rounds, as in 2.)
        k = start + t
        end = min(start + ROW_THREADS, hi)
        if k < end and c0 <= indices[k] < c1 and (boolean or _is_last(indices, k, end)):
            j = indices[k]
            x = np.float64(a[r, j])
            v = 1.0 if boolean else np.float64(values[k])
            p1 = unit_loss(err_fn, act, x, _listed_target(err_fn, act, v, count), True, prm)[1]
            if act == SOFTMAX:
                p1 -= x * total
            delta[r, j] = p1 * boost_one * w
        if not boolean:
            cuda.syncthreads()


@kernel
def _sparse_kernel(delta, block_err, a, indptr, indices, values, weights, err_fn, act, prm,
                   boost_one, boost_zero, boosting, ignore_zero):
    shared = cuda.shared.array(ROW_THREADS, np.float64)
    t = cuda.threadIdx.x
    n_units = a.shape[1]
    # This block's units of each row: part blockIdx.y of gridDim.y (the whole row for SoftMax)
    width = (n_units + cuda.gridDim.y - 1) // cuda.gridDim.y
    c0 = min(cuda.blockIdx.y * width, n_units)
    c1 = min(c0 + width, n_units)
    err = 0.0  # this thread's share of the block's weighted error
    for r in range(cuda.blockIdx.x, a.shape[0], cuda.gridDim.x):
        lo, hi = indptr[r], indptr[r + 1]
        w = 1.0 if weights.shape[0] == 0 else np.float64(weights[r])
        row_err = _pre_delta_row(delta, a, r, indices, values, lo, hi, hi - lo, c0, c1, err_fn,
                                 act, prm, ignore_zero)
        err += w * row_err
        cuda.syncthreads()
        total = 0.0
        if act == SOFTMAX:  # 3. the row Jacobian, DeltaBoost and the example weight
            for j in range(c0 + t, c1, ROW_THREADS):  # (c0, c1 = the whole row here)
                total += np.float64(delta[r, j])
            total = _block_sum(shared, total)
        _finish_row(delta, a, r, act, w * boost_zero if boosting else w, total, c0, c1)
        if boosting:
            _boost_listed(delta, a, r, indices, values, lo, hi, hi - lo, c0, c1, err_fn, act,
                          prm, total, boost_one, w)
    err = _block_sum(shared, err)
    if t == 0:
        block_err[cuda.blockIdx.y * cuda.gridDim.x + cuda.blockIdx.x] = err


# A SoftMax output split across MPI ranks (see the reference): steps 1 and 2 and the row's sum
# of pre-deltas, then (once the ranks added up their sums) step 3; a block per row in both.


@kernel
def _softmax_partials_kernel(delta, sums, block_err, a, indptr, indices, values, weights, counts,
                             err_fn, prm, ignore_zero):
    shared = cuda.shared.array(ROW_THREADS, np.float64)
    t = cuda.threadIdx.x
    n_units = a.shape[1]
    err = 0.0
    for r in range(cuda.blockIdx.x, a.shape[0], cuda.gridDim.x):
        lo, hi = indptr[r], indptr[r + 1]
        count = hi - lo if counts.shape[0] == 0 else counts[r]
        w = 1.0 if weights.shape[0] == 0 else np.float64(weights[r])
        err += w * _pre_delta_row(delta, a, r, indices, values, lo, hi, count, 0, n_units,
                                  err_fn, SOFTMAX, prm, ignore_zero)
        cuda.syncthreads()
        total = 0.0
        for j in range(t, n_units, ROW_THREADS):
            total += np.float64(delta[r, j])
        total = _block_sum(shared, total)
        if t == 0:
            sums[r] = total
    err = _block_sum(shared, err)
    if t == 0:
        block_err[cuda.blockIdx.x] = err


@kernel
def _softmax_finish_kernel(delta, sums, a, indptr, indices, values, weights, counts, err_fn,
                           prm, boost_one, boost_zero, boosting):
    n_units = a.shape[1]
    for r in range(cuda.blockIdx.x, a.shape[0], cuda.gridDim.x):
        lo, hi = indptr[r], indptr[r + 1]
        w = 1.0 if weights.shape[0] == 0 else np.float64(weights[r])
        total = sums[r]
        _finish_row(delta, a, r, SOFTMAX, w * boost_zero if boosting else w, total, 0, n_units)
        if boosting:
            count = hi - lo if counts.shape[0] == 0 else counts[r]
            _boost_listed(delta, a, r, indices, values, lo, hi, count, 0, n_units, err_fn,
                          SOFTMAX, prm, total, boost_one, w)


@kernel
def _dense_kernel(delta, block_err, a, target, weights, err_fn, act, prm):
    shared = cuda.shared.array(ROW_THREADS, np.float64)
    t = cuda.threadIdx.x
    n_units = a.shape[1]
    err = 0.0
    for r in range(cuda.blockIdx.x, a.shape[0], cuda.gridDim.x):
        w = 1.0 if weights.shape[0] == 0 else np.float64(weights[r])
        row_err = 0.0
        total = 0.0
        for j in range(t, n_units, ROW_THREADS):
            y = np.float64(target[r, j])
            e, p = unit_loss(err_fn, act, np.float64(a[r, j]), y, y > 0.0, prm)
            delta[r, j] = p
            row_err += e
            total += np.float64(delta[r, j])  # the stored p, as the cpu's Jacobian sums it
        err += w * row_err
        if act == SOFTMAX:
            total = _block_sum(shared, total)
        _finish_row(delta, a, r, act, w, total, 0, n_units)
    err = _block_sum(shared, err)
    if t == 0:
        block_err[cuda.blockIdx.x] = err


def _params(slope, alpha, lam, one_target, zero_target, one_scale, zero_scale):
    return (float(slope), float(alpha), float(lam), float(one_target), float(zero_target),
            float(one_scale), float(zero_scale))


def _launch(kernel, delta, n_parts=1):
    """(kernel configured for the rows of ``delta``, each split in n_parts, its per-block
    errors: an array kept on ``delta``, so that each output layer's error is its own until
    read)."""
    n_blocks = min(delta.shape[0], MAX_BLOCKS)
    size = n_blocks * n_parts
    block_err = kept(delta, ("loss.block_err", size),
                     lambda _: cuda.device_array(size, dtype=np.float64))
    return kernel[(n_blocks, n_parts), ROW_THREADS], block_err


class DeviceError:
    """A loss kernel's error, still on the device as per-block sums: ``float()`` copies them
    (min(rows, MAX_BLOCKS) x the parts of a row: 6,912 float64 for the benchmark network's
    256 x 27,392 outputs) and adds them up.

    A copy to the host waits for every kernel queued before it, so the loss kernels return
    this instead of a float: the network reads the error once the whole backward pass is
    queued, and the GPU works meanwhile (reading it in the loss kernel's call held the host
    while the output layer's products ran). It must be read before the next loss kernel on
    the same ``delta`` overwrites the sums (the network reads it in the same step).
    """

    __slots__ = ("_block_err",)

    def __init__(self, block_err):
        self._block_err = block_err

    def __float__(self) -> float:
        return float(self._block_err.copy_to_host().sum())


@device_arrays
def sparse_loss_delta(delta, a, indptr, indices, values, weights, err_fn, act, slope, alpha, lam,
                      one_target, zero_target, one_scale, zero_scale, boost_one, boost_zero,
                      ignore_zero=False):
    """Error and output delta for sparse CSR targets; see the reference for the parameters.

    Returns the weighted error summed over the batch, as a ``DeviceError``: ``float()``
    reads it.
    """
    check_loss_activation(err_fn, act)
    boosting = boost_applies(err_fn, act) and (boost_one != 1.0 or boost_zero != 1.0)
    prm = _params(slope, alpha, lam, one_target, zero_target, one_scale, zero_scale)
    n_rows = a.shape[0]
    if n_rows == 0:
        return 0.0
    n_parts = 1 if act == SOFTMAX else max(1, min(a.shape[1] // PART_UNITS, MAX_PARTS))
    kernel, block_err = _launch(_sparse_kernel, delta, n_parts)
    kernel(delta, block_err, a, indptr, indices, values, weights, int(err_fn), int(act), prm,
           float(boost_one), float(boost_zero), boosting, bool(ignore_zero))
    return DeviceError(block_err)


@device_arrays
def softmax_loss_partials(delta, sums, a, indptr, indices, values, weights, counts, err_fn,
                          one_target, zero_target, one_scale, zero_scale, boost_one, boost_zero,
                          ignore_zero=False):
    """A rank's pre-deltas, their row sums and its error (a ``DeviceError``); see the
    reference."""
    check_loss_activation(err_fn, SOFTMAX)
    prm = _params(0.0, 0.0, 0.0, one_target, zero_target, one_scale, zero_scale)
    if a.shape[0] == 0:
        return 0.0
    kernel, block_err = _launch(_softmax_partials_kernel, delta)
    kernel(delta, sums, block_err, a, indptr, indices, values, weights, counts, int(err_fn), prm,
           bool(ignore_zero))
    return DeviceError(block_err)


@device_arrays
def softmax_loss_finish(delta, sums, a, indptr, indices, values, weights, counts, err_fn,
                        one_target, zero_target, one_scale, zero_scale, boost_one, boost_zero,
                        ignore_zero=False):
    """The output delta from the pre-deltas and the whole rows' sums; see the reference."""
    check_loss_activation(err_fn, SOFTMAX)
    boosting = boost_applies(err_fn, SOFTMAX) and (boost_one != 1.0 or boost_zero != 1.0)
    prm = _params(0.0, 0.0, 0.0, one_target, zero_target, one_scale, zero_scale)
    if a.shape[0] == 0:
        return
    _softmax_finish_kernel[min(a.shape[0], MAX_BLOCKS), ROW_THREADS](
        delta, sums, a, indptr, indices, values, weights, counts, int(err_fn), prm,
        float(boost_one), float(boost_zero), boosting)


@device_arrays
def dense_loss_delta(delta, a, t, weights, err_fn, act, slope, alpha, lam,
                     one_target, zero_target, one_scale, zero_scale, boost_one, boost_zero):
    """Error and output delta for a dense target matrix; DeltaBoost does not apply (spec 3.11).

    Returns a ``DeviceError``, as ``sparse_loss_delta``.
    """
    check_loss_activation(err_fn, act)
    prm = _params(slope, alpha, lam, one_target, zero_target, one_scale, zero_scale)
    n_rows = a.shape[0]
    if n_rows == 0:
        return 0.0
    kernel, block_err = _launch(_dense_kernel, delta)
    kernel(delta, block_err, a, t, weights, int(err_fn), int(act), prm)
    return DeviceError(block_err)
