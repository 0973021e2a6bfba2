"""numba.cuda kernels: activations, dropout, the sparseness penalty and the norms (spec 3.6-3.13).

Same names and signatures as ``destiny.kernels.cpu.pointwise``. As there, every unit is
computed in float64 and stored in the output's dtype, with the formulas of the reference
(``unit_activation`` and ``unit_derivative`` are the cpu's own, compiled from
``destiny.kernels.unit``; they are shared with ``destiny.kernels.cuda.loss``).

Elementwise work is one grid-stride loop over the flattened [B, N] block. A SoftMax row, and
DeltaNorm's row norm, need a row-wide sum: those kernels give a block to each row and reduce
in shared memory (``_block_sum``). Column statistics (sparseness penalty, WeightNorm) take
``column_mean``'s layout (``destiny.kernels.cuda.dense``): a block of COLUMNS neighbouring
columns times LANES row lanes, the lanes' float64 sums added pairwise in a fixed order, so the
same bits every run (the cpu sums in row order: in float64 both give the same float32 but for
near-ties). A thread per column gave a 1,024-unit layer 4 blocks on the whole GPU, each
thread walking its column alone: WeightNorm over a 27,392-row input layer is 28 M serial loads
spread over 1,024 threads.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from destiny.kernels import unit
from destiny.kernels.codes import ELU, SELU, SIGMOID, SOFTMAX, check_activation
from destiny.kernels.cuda.launch import (MAX_BLOCKS, ROW_THREADS, SIMULATED, THREADS,
                                         blocks_for, device_arrays, kernel, scratch)
from destiny.kernels.cuda.dense import COLUMNS, LANES, add_bias, copy, empty
from destiny.kernels.cuda.rng import uniform
from destiny.kernels.reference.pointwise import alpha_dropout_constants

_U = np.uint64


# The per-unit formulas are shared with the cpu backend (destiny.kernels.unit).
unit_activation = cuda.jit(device=True)(unit.unit_activation)


unit_derivative = cuda.jit(device=True)(unit.unit_derivative)
unit_sparseness_penalty = cuda.jit(device=True)(unit.sparseness_penalty)


@cuda.jit(device=True)
def _block_sum(shared, value):
    """The sum of ``value`` over a ROW_THREADS block, returned to every thread (a fixed tree).

    ``shared`` is a float64 shared array of ROW_THREADS elements, free again on return.
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
def _block_max(shared, value):
    """The maximum of ``value`` over a ROW_THREADS block, like ``_block_sum``."""
    t = cuda.threadIdx.x
    shared[t] = value
    cuda.syncthreads()
    step = ROW_THREADS // 2
    while step > 0:
        if t < step:
            shared[t] = max(shared[t], shared[t + step])
        cuda.syncthreads()
        step //= 2
    total = shared[0]
    cuda.syncthreads()
    return total


def _flat_launch(n):
    return blocks_for(n), THREADS


def _row_launch(n_rows):
    return min(n_rows, MAX_BLOCKS), ROW_THREADS


@cuda.jit(device=True)
def _activated(z, b, r, j, act, slope, alpha, lam):
    """f(z[r, j] + b[j]) in float64; the sum in z's precision, as add_bias adds it (an empty
    ``b``: no bias). The one formula of both forward kernels."""
    x = z[r, j] + b[j] if b.shape[0] != 0 else z[r, j]
    return unit_activation(act, np.float64(x), slope, alpha, lam)


@kernel
def _activation_forward(a, z, b, act, slope, alpha, lam):
    n_units = z.shape[1]
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, z.shape[0] * n_units, stride):
        r = i // n_units
        j = i - r * n_units
        a[r, j] = _activated(z, b, r, j, act, slope, alpha, lam)


@kernel
def _softmax_forward(a, z):
    # A block per row: the row maximum (subtracted, so every exponent is <= 0), then the sum.
    # Each thread reads and writes only its own units, so ``a`` may be ``z``.
    shared = cuda.shared.array(ROW_THREADS, np.float64)
    t = cuda.threadIdx.x
    n_units = z.shape[1]
    for r in range(cuda.blockIdx.x, z.shape[0], cuda.gridDim.x):
        m = -math.inf
        for j in range(t, n_units, ROW_THREADS):
            m = max(m, np.float64(z[r, j]))
        m = _block_max(shared, m)
        total = 0.0
        for j in range(t, n_units, ROW_THREADS):
            e = math.exp(np.float64(z[r, j]) - m)
            a[r, j] = e
            total += e
        total = _block_sum(shared, total)
        for j in range(t, n_units, ROW_THREADS):
            a[r, j] = np.float64(a[r, j]) / total


@device_arrays
def activation_forward(a, z, act, slope, alpha, lam, bias=None):
    """``a[B, N] = f(z[B, N] + bias)``; ``a`` may be ``z``. SoftMax works per row (spec 3.6).

    The bias is added in the activation's own kernel: one launch and one pass fewer than
    ``add_bias`` before it, the same arithmetic.
    """
    check_activation(act)
    if z.size == 0:
        return
    has_bias = bias is not None and bias.shape[0] != 0
    if act == SOFTMAX:
        if has_bias:
            if a is not z:
                copy(a, z)
            add_bias(a, bias)
            z = a
        _softmax_forward[_row_launch(z.shape[0])](a, z)
    else:
        b = bias if has_bias else empty(0, z.dtype)  # no bias: the shared empty array
        _activation_forward[_flat_launch(z.size)](a, z, b, int(act), float(slope),
                                                  float(alpha), float(lam))


@cuda.jit(device=True)
def _masked(da, mask, r, j):
    """``da[r, j]``, times ``mask[r, j]`` in ``da``'s dtype where there is a mask."""
    return da[r, j] * mask[r, j] if mask.shape[0] != 0 else da[r, j]


@kernel
def _activation_backward(dz, da, a, mask, act, slope, alpha, lam):
    n_units = a.shape[1]
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, a.shape[0] * n_units, stride):
        r = i // n_units
        j = i - r * n_units
        fprime = unit_derivative(act, np.float64(a[r, j]), slope, alpha, lam)
        dz[r, j] = np.float64(_masked(da, mask, r, j)) * fprime


@kernel
def _softmax_backward(dz, da, a, mask):
    # dz = a * (g - sum_j g_j a_j) per row, g = da (times the mask); the sum is complete
    # before any dz is written, so ``dz`` may be ``da``.
    shared = cuda.shared.array(ROW_THREADS, np.float64)
    t = cuda.threadIdx.x
    n_units = a.shape[1]
    for r in range(cuda.blockIdx.x, a.shape[0], cuda.gridDim.x):
        s = 0.0
        for j in range(t, n_units, ROW_THREADS):
            s += np.float64(_masked(da, mask, r, j)) * np.float64(a[r, j])
        s = _block_sum(shared, s)
        for j in range(t, n_units, ROW_THREADS):
            dz[r, j] = np.float64(a[r, j]) * (np.float64(_masked(da, mask, r, j)) - s)


@device_arrays
def activation_backward(dz, da, a, act, slope, alpha, lam, mask=None):
    """``dz[B, N] = da * f'(a)``, f' taken from the activations ``a``; ``dz`` may be ``da``.

    SoftMax uses the exact Jacobian of each row: ``dz = a * (da - sum_j da_j a_j)``. With a
    dropout ``mask``, ``da * mask`` (in ``da``'s dtype) takes the place of ``da``: the
    dropout's backward in the same pass.
    """
    check_activation(act)
    if a.size == 0:
        return
    if mask is None:
        mask = empty((0, a.shape[1]), a.dtype)  # the shared empty array: no mask
    if act == SOFTMAX:
        _softmax_backward[_row_launch(a.shape[0])](dz, da, a, mask)
    else:
        _activation_backward[_flat_launch(a.size)](dz, da, a, mask, int(act), float(slope),
                                                   float(alpha), float(lam))


# A SoftMax layer split across MPI ranks: the row's maximum and sum, and its Jacobian product's
# sum, are added up over the ranks between two kernels (see the reference). The partial sums
# take a block per row, as the whole row's kernels do; the finishing passes are elementwise.


@kernel
def _softmax_forward_partials(stats, z):
    shared = cuda.shared.array(ROW_THREADS, np.float64)
    t = cuda.threadIdx.x
    n_units = z.shape[1]
    for r in range(cuda.blockIdx.x, z.shape[0], cuda.gridDim.x):
        m = -math.inf
        for j in range(t, n_units, ROW_THREADS):
            m = max(m, np.float64(z[r, j]))
        m = _block_max(shared, m)
        total = 0.0
        for j in range(t, n_units, ROW_THREADS):
            total += math.exp(np.float64(z[r, j]) - m)
        total = _block_sum(shared, total)
        if t == 0:
            if total != total:  # a NaN unit, or units all -inf: the maximum of a row holding
                for j in range(n_units):  # NaN is NaN, as the reference's (NumPy's max) and
                    if z[r, j] != z[r, j]:  # the cpu's (_nan_if_any there); fmax drops it
                        m = math.nan
                        break
            stats[r, 0] = m
            stats[r, 1] = total


@device_arrays
def softmax_forward_partials(stats, z):
    """``stats[r] = (m, s)``: row r's maximum m and ``sum_j exp(z[r, j] - m)`` (reference)."""
    if z.size:
        _softmax_forward_partials[_row_launch(z.shape[0])](stats, z)


@kernel
def _softmax_forward_finish(a, z, stats):
    n_units = z.shape[1]
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, z.shape[0] * n_units, stride):
        r = i // n_units
        j = i - r * n_units
        x = math.exp(np.float64(z[r, j]) - stats[r, 0]) / stats[r, 1]
        a[r, j] = 1.0 if x > 1.0 else x  # (NaN stays NaN, where min(1.0, x) may give 1.0)


@device_arrays
def softmax_forward_finish(a, z, stats):
    """``a = min(1, exp(z - M) / S)`` with ``stats[r] = (M, S)`` (reference); ``a`` may be ``z``."""
    if z.size:
        _softmax_forward_finish[_flat_launch(z.size)](a, z, stats)


@kernel
def _softmax_backward_partials(dots, da, a, mask):
    shared = cuda.shared.array(ROW_THREADS, np.float64)
    t = cuda.threadIdx.x
    n_units = a.shape[1]
    for r in range(cuda.blockIdx.x, a.shape[0], cuda.gridDim.x):
        s = 0.0
        for j in range(t, n_units, ROW_THREADS):
            s += np.float64(_masked(da, mask, r, j)) * np.float64(a[r, j])
        s = _block_sum(shared, s)
        if t == 0:
            dots[r] = s


@device_arrays
def softmax_backward_partials(dots, da, a, mask=None):
    """``dots[r] = sum_j g[r, j] a[r, j]``, g = ``da`` (times ``mask``), float64 (reference)."""
    if a.size == 0:
        return
    if mask is None:
        mask = empty((0, a.shape[1]), a.dtype)
    _softmax_backward_partials[_row_launch(a.shape[0])](dots, da, a, mask)


@kernel
def _softmax_backward_finish(dz, da, a, mask, dots):
    n_units = a.shape[1]
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, a.shape[0] * n_units, stride):
        r = i // n_units
        j = i - r * n_units
        dz[r, j] = np.float64(a[r, j]) * (np.float64(_masked(da, mask, r, j)) - dots[r])


@device_arrays
def softmax_backward_finish(dz, da, a, dots, mask=None):
    """``dz = a * (g - dots[r])``, ``dots`` the whole row's (reference); ``dz`` may be ``da``."""
    if a.size == 0:
        return
    if mask is None:
        mask = empty((0, a.shape[1]), a.dtype)
    _softmax_backward_finish[_flat_launch(a.size)](dz, da, a, mask, dots)


@cuda.jit(device=True)
def _drop(out, mask, r, j, x, key, row_offset, col_offset, p, gain, shift, dropped_value):
    """Dropout of unit (r, j) with activation ``x`` (float64), drawn from its own uniform."""
    if uniform(key, _U(row_offset + r), _U(col_offset + j)) < p:
        out[r, j] = dropped_value
        mask[r, j] = 0.0
    else:
        out[r, j] = gain * x + shift
        mask[r, j] = gain


@kernel
def _dropout(out, mask, a, key, row_offset, col_offset, p, gain, shift, dropped_value):
    n_units = a.shape[1]
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, a.shape[0] * n_units, stride):
        r = i // n_units
        j = i - r * n_units
        _drop(out, mask, r, j, np.float64(a[r, j]), key, row_offset, col_offset, p, gain, shift,
              dropped_value)


@kernel
def _activation_dropout(out, mask, a, z, b, act, slope, alpha, lam, key, row_offset, col_offset,
                        p, gain, shift, dropped_value):
    # _activation_forward and _dropout in one pass: the activation is stored in a, and the
    # dropout takes it as stored (rounded to a's dtype), as the two kernels one after the other.
    n_units = z.shape[1]
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, z.shape[0] * n_units, stride):
        r = i // n_units
        j = i - r * n_units
        y = a.dtype.type(_activated(z, b, r, j, act, slope, alpha, lam))
        a[r, j] = y
        _drop(out, mask, r, j, np.float64(y), key, row_offset, col_offset, p, gain, shift,
              dropped_value)


def _dropout_constants(p, act, alpha, lam):
    """(gain, shift, dropped value) of spec 3.8's rule for ``act``."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability {p} is outside [0, 1)")
    if act == SIGMOID:
        return 1.0, 0.0, 0.5
    if act in (ELU, SELU):
        saturation, gain, shift = alpha_dropout_constants(p, act, alpha, lam)
        return float(gain), float(shift), float(gain * saturation + shift)
    return 1.0 / (1.0 - p), 0.0, 0.0


@device_arrays
def dropout_forward(out, mask, a, key, row_offset, col_offset, p, act, alpha, lam):
    """Dropout with an explicit mask ``d out / d a`` (spec 3.8): unit (r, j) is dropped iff
    ``u(key, row_offset + r, col_offset + j) < p``, drawn by its own thread.

    Sigmoid: dropped -> 0.5, kept unchanged. ELU/SELU: alpha-dropout. Others: inverted
    dropout. ``out`` may be ``a``. See the reference for the parameters.
    """
    constants = _dropout_constants(p, act, alpha, lam)
    if a.size:
        _dropout[_flat_launch(a.size)](out, mask, a, _U(key), int(row_offset), int(col_offset),
                                       float(p), *constants)


@device_arrays
def activation_dropout_forward(out, mask, a, z, act, slope, alpha, lam, bias, key, row_offset,
                               col_offset, p):
    """``activation_forward`` then ``dropout_forward`` (see the reference), one kernel: the
    bias, the activation and the draw of a training layer in one pass (SoftMax, whose rows
    are coupled, takes its own kernel first)."""
    check_activation(act)
    constants = _dropout_constants(p, act, alpha, lam)
    if z.size == 0:
        return
    if act == SOFTMAX:
        activation_forward(a, z, act, slope, alpha, lam, bias)
        dropout_forward(out, mask, a, key, row_offset, col_offset, p, act, alpha, lam)
        return
    b = bias if bias is not None and bias.shape[0] != 0 else empty(0, z.dtype)
    _activation_dropout[_flat_launch(z.size)](out, mask, a, z, b, int(act), float(slope),
                                              float(alpha), float(lam), _U(key), int(row_offset),
                                              int(col_offset), float(p), *constants)


@cuda.jit(device=True)
def _lane_sum(partial, value):
    """The sum of ``value`` over the LANES row lanes of column threadIdx.x, returned to each
    of them (``partial``: a (LANES, COLUMNS) float64 shared array, free again on return).

    ``dense._column_mean`` adds its lanes the same way, inline: a device function cannot be
    shared across modules under the simulator (see ``loss._block_sum``)."""
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    partial[ty, tx] = value
    cuda.syncthreads()
    half = LANES // 2
    while half > 0:
        if ty < half:
            partial[ty, tx] += partial[ty + half, tx]
        cuda.syncthreads()
        half //= 2
    total = partial[0, tx]
    cuda.syncthreads()
    return total


def _column_blocks(n_cols):
    return min((n_cols + COLUMNS - 1) // COLUMNS, MAX_BLOCKS)


@kernel
def _sparseness_penalty(da, a, p, beta):
    partial = cuda.shared.array((LANES, COLUMNS), np.float64)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    n_rows, n_cols = a.shape
    for j0 in range(cuda.blockIdx.x * COLUMNS, n_cols, cuda.gridDim.x * COLUMNS):
        j = j0 + tx
        total = 0.0
        if j < n_cols:
            for r in range(ty, n_rows, LANES):
                total += np.float64(a[r, j])
        total = _lane_sum(partial, total)
        if j < n_cols:
            penalty = unit_sparseness_penalty(total, n_rows, p, beta)
            for r in range(ty, n_rows, LANES):
                da[r, j] = np.float64(da[r, j]) + penalty


@device_arrays
def sparseness_penalty(da, a, p, beta):
    """``da[:, j] += beta * (-p / rho_j + (1 - p) / (1 - rho_j))``, rho_j = clamped column mean.

    Spec 3.10; ``da`` [B, N] is the delta before the activation derivative.
    """
    if a.size:
        _sparseness_penalty[_column_blocks(a.shape[1]), (COLUMNS, LANES)](da, a, float(p),
                                                                         float(beta))


@cuda.jit(device=True)
def _row_squares(shared, d, r):
    """``sum_j d[r, j]^2`` in float64 over a ROW_THREADS block, returned to every thread."""
    total = 0.0
    for j in range(cuda.threadIdx.x, d.shape[1], ROW_THREADS):
        x = np.float64(d[r, j])
        total += x * x
    return _block_sum(shared, total)


@kernel
def _delta_norm(d, limit):
    shared = cuda.shared.array(ROW_THREADS, np.float64)
    t = cuda.threadIdx.x
    n_units = d.shape[1]
    for r in range(cuda.blockIdx.x, d.shape[0], cuda.gridDim.x):
        norm = math.sqrt(_row_squares(shared, d, r))
        if norm > limit:
            scale = limit / norm
            for j in range(t, n_units, ROW_THREADS):
                d[r, j] = np.float64(d[r, j]) * scale


@device_arrays
def delta_norm(d, limit):
    """Rescale each row of ``d`` [B, N] whose L2 norm exceeds ``limit`` to norm ``limit`` (3.13)."""
    if d.size:
        _delta_norm[_row_launch(d.shape[0])](d, float(limit))


@kernel
def _delta_norm_partials(sums, d):
    shared = cuda.shared.array(ROW_THREADS, np.float64)
    for r in range(cuda.blockIdx.x, d.shape[0], cuda.gridDim.x):
        total = _row_squares(shared, d, r)
        if cuda.threadIdx.x == 0:
            sums[r] = total


@device_arrays
def delta_norm_partials(sums, d):
    """``sums[r] = sum_j d[r, j]^2`` in float64: a rank's part of the row norms (reference)."""
    if d.size:
        _delta_norm_partials[_row_launch(d.shape[0])](sums, d)


@kernel
def _delta_norm_finish(d, sums, limit):
    n_units = d.shape[1]
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, d.shape[0] * n_units, stride):
        r = i // n_units
        norm = math.sqrt(sums[r])
        if norm > limit:
            j = i - r * n_units
            d[r, j] = np.float64(d[r, j]) * (limit / norm)


@device_arrays
def delta_norm_finish(d, sums, limit):
    """``delta_norm`` with the whole rows' sums of squares ``sums`` given (reference)."""
    if d.size:
        _delta_norm_finish[_flat_launch(d.size)](d, sums, float(limit))


# WeightNorm's W can have millions of rows (a catalogue-wide layer): its grid also splits the
# rows, in at most NORM_CHUNKS chunks of at least NORM_CHUNK_ROWS rows, and each chunk's sums of
# squares are added in chunk order.
NORM_CHUNKS = 3 if SIMULATED else 64
NORM_CHUNK_ROWS = 2 if SIMULATED else 256


@kernel
def _column_squares(sums, W, chunk_rows):
    partial = cuda.shared.array((LANES, COLUMNS), np.float64)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    n_rows, n_cols = W.shape
    r0 = cuda.blockIdx.y * chunk_rows
    r1 = min(r0 + chunk_rows, n_rows)
    for j0 in range(cuda.blockIdx.x * COLUMNS, n_cols, cuda.gridDim.x * COLUMNS):
        j = j0 + tx
        total = 0.0
        if j < n_cols:
            for r in range(r0 + ty, r1, LANES):
                x = np.float64(W[r, j])
                total += x * x
        total = _lane_sum(partial, total)
        if ty == 0 and j < n_cols:
            sums[cuda.blockIdx.y * n_cols + j] = total


@kernel
def _scale_columns(W, sums, limit, chunk_rows, n_chunks):
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    n_rows, n_cols = W.shape
    r0 = cuda.blockIdx.y * chunk_rows
    r1 = min(r0 + chunk_rows, n_rows)
    for j in range(cuda.blockIdx.x * COLUMNS + tx, n_cols, cuda.gridDim.x * COLUMNS):
        total = 0.0
        for c in range(n_chunks):
            total += sums[c * n_cols + j]
        norm = math.sqrt(total)
        if norm > limit:
            scale = limit / norm
            for r in range(r0 + ty, r1, LANES):
                W[r, j] = np.float64(W[r, j]) * scale


def _row_chunks(n_rows):
    """How many chunks of how many rows WeightNorm's grid splits ``n_rows`` rows into."""
    n_chunks = max(1, min(NORM_CHUNKS, n_rows // NORM_CHUNK_ROWS))
    return n_chunks, (n_rows + n_chunks - 1) // n_chunks


@device_arrays
def weight_norm(W, limit):
    """Rescale each column of ``W`` [I, O] whose L2 norm exceeds ``limit`` to ``limit`` (3.13)."""
    if W.size == 0:
        return
    n_rows, n_cols = W.shape
    n_chunks, chunk_rows = _row_chunks(n_rows)
    sums = scratch("weight_norm.sums", n_chunks * n_cols, np.float64)
    grid = (_column_blocks(n_cols), n_chunks)
    _column_squares[grid, (COLUMNS, LANES)](sums, W, chunk_rows)
    _scale_columns[grid, (COLUMNS, LANES)](W, sums, float(limit), chunk_rows, n_chunks)


@kernel
def _add_chunks(out, sums, n_chunks):
    n_cols = out.shape[0]
    for j in range(cuda.grid(1), n_cols, cuda.gridsize(1)):
        total = 0.0
        for c in range(n_chunks):
            total += sums[c * n_cols + j]
        out[j] = total


@device_arrays
def weight_norm_partials(sums, W):
    """``sums[j] = sum_i W[i, j]^2`` in float64: a rank's part of the column norms (reference).

    ``weight_norm``'s first pass, its chunks' sums then added in chunk order."""
    n_rows, n_cols = W.shape
    if n_cols == 0:
        return
    n_chunks, chunk_rows = _row_chunks(n_rows)
    if n_rows == 0:
        n_chunks = 0  # (no rows: every sum is 0)
    else:
        chunks = scratch("weight_norm.sums", n_chunks * n_cols, np.float64)
        grid = (_column_blocks(n_cols), n_chunks)
        _column_squares[grid, (COLUMNS, LANES)](chunks, W, chunk_rows)
    _add_chunks[_flat_launch(n_cols)](sums, chunks if n_rows else sums, n_chunks)


@device_arrays
def weight_norm_finish(W, sums, limit):
    """``weight_norm`` with the whole columns' sums of squares ``sums`` given (reference):
    its second pass, over one chunk of sums."""
    if W.size == 0:
        return
    n_rows, n_cols = W.shape
    n_chunks, chunk_rows = _row_chunks(n_rows)
    grid = (_column_blocks(n_cols), n_chunks)
    _scale_columns[grid, (COLUMNS, LANES)](W, sums, float(limit), chunk_rows, 1)
