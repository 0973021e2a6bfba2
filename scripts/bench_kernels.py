#!/usr/bin/env python3
"""Time the hot CPU kernels of a training step on DSSTNE's benchmark shapes.

netdefs/benchmark.json trains 27,392 sparse inputs -> 3 x 1024 Sigmoid -> 27,392 Sigmoid
outputs with ScaledMarginalCrossEntropy, batch 256, ~144 listed items per example. This script
times, on those shapes and a batch of synthetic MovieLens-like examples (``destiny.synthetic``):

* ``sparse_fc_forward``: the input layer's gather, K ~ 37k rows of W x 1024 columns, from
  memory (a 64 MB buffer is written before each call, as the output layer's product evicts
  the input layer's rows from the caches in a real step);
* ``sparse_fc_weight_grad``: the input layer's weight gradient, K ~ 37k entries x 1024 columns;
* ``sparse_add``: a Skip from the Input layer into the output layer (spec 3.16), the batch's
  entries added to the 256 x 27,392 sum, which is rewritten before each call (the output
  layer's product has just written it in a real step);
* ``sparse_loss_delta``: the output loss and delta, 256 x 27,392 (SMCE and CrossEntropy of a
  Sigmoid output, CrossEntropy of a SoftMax output);
* ``softmax_forward_partials`` + ``softmax_forward_finish`` and ``softmax_loss_partials`` +
  ``softmax_loss_finish``: a SoftMax CrossEntropy output split over two MPI ranks, one rank's
  half (256 x 13,696), the other half's row numbers computed once beforehand;
* ``activation_backward``: a hidden layer's Sigmoid / Tanh derivative, 256 x 1024;
* ``activation_forward``: the output layer's Sigmoid, 256 x 27,392, beside one NumPy pass, and
  a SoftMax output's (a row's maximum, an exp per unit, the row sum);
* ``top_k``: the 100 best of 256 x 27,392 scores, with and without the batch's own items
  filtered out (as ``predict`` does), and ``top_k_activated`` (the same from the output
  layer's pre-activations, the Sigmoid evaluated on the candidates only) beside the Sigmoid
  pass plus ``top_k`` that it replaces;
* ``update_weights``: RMSProp over the input layer's 27,392 x 1024 weights, beside
  ``update_weight_rows`` over the batch's rows only (the lazy update of ``Network.update``,
  each row one skipped update behind);
* ``sparse_grad_update_rows``: the input layer's gradient and lazy update in one call, beside
  ``sparse_fc_weight_grad`` and ``update_weight_rows`` (its rows passing through G);
* ``catch_up_rows``: the input layer's RMSProp state brought up to date, 32 updates behind.

As llm.c's kernel benchmarks do, every kernel is FIRST checked against the NumPy reference
(``destiny.kernels.reference``) and the script stops unless all results match; then each is
timed over repeats (interleaved, so that a busy machine slows all of them alike) and the median
and minimum are printed with the effective GB/s (bytes the kernel must move) or GFLOP/s.

Usage:
  .venv/bin/python scripts/bench_kernels.py [--repeats 30] [--batch 256] [--seed 0]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import destiny  # noqa: F401, I001 - first: it sets the thread wait policies NumPy reads
import numpy as np

from destiny import synthetic
from destiny.kernels import codes
from destiny.kernels.cpu import loss as cpu_loss
from destiny.kernels.cpu import optim as cpu_optim
from destiny.kernels.cpu import pointwise as cpu_pointwise
from destiny.kernels.cpu import sparse as cpu_sparse
from destiny.kernels.cpu import topk as cpu_topk
from destiny.kernels.reference import loss as ref_loss
from destiny.kernels.reference import optim as ref_optim
from destiny.kernels.reference import pointwise as ref_pointwise
from destiny.kernels.reference import sparse as ref_sparse
from destiny.kernels.reference import topk as ref_topk

FEATURES = 27_392  # the benchmark network's input and output width
HIDDEN = 1024
# (one_target, zero_target, one_scale, zero_scale): netdefs/benchmark.json, Destiny's defaults.
SMCE_BENCHMARK = (1.0, 0.0, 1.0, 1.0)
SMCE_DEFAULT = (0.9, 0.1, 1.0, 1.0)
NO_ACT_PARAMS = (0.0, 0.0, 0.0)  # LReLU slope, ELU alpha, SELU lambda: unused by Sigmoid / Tanh


def csr_batch(batch: int, seed: int):
    """CSR indices of ``batch`` synthetic users' items (sorted per row, 0-based), Boolean."""
    r = synthetic.generate_ratings(users=batch, items=FEATURES, seed=seed)
    indptr = np.zeros(batch + 1, dtype=np.int64)
    np.cumsum(np.bincount(r.users - 1, minlength=batch), out=indptr[1:])
    return indptr, (r.items - 1).astype(np.int32), np.zeros(0, dtype=np.float32)


class Case:
    """One kernel call on fixed inputs: ``run(module)`` calls the kernel of that backend."""

    def __init__(self, name, run, outputs, moved_bytes=0.0, flops=0.0, prepare=None):
        self.name, self.run, self.outputs = name, run, outputs
        self.moved_bytes, self.flops = moved_bytes, flops
        self.prepare = prepare or (lambda: None)  # before each call, outside the timing
        self.times: list[float] = []


def gather_case(batch_csr, rng) -> Case:
    indptr, indices, values = batch_csr
    B = len(indptr) - 1
    W = (rng.normal(size=(FEATURES, HIDDEN)) * 1e-2).astype(np.float32)
    b = np.zeros(HIDDEN, dtype=np.float32)
    out = np.empty((B, HIDDEN), dtype=np.float32)
    evict = np.zeros(16 << 20, dtype=np.float32)  # 64 MB, twice the last-level cache here

    def run(backend):
        backend.sparse_fc_forward(out, indptr, indices, values, W, b)
        return out

    def prepare():
        np.add(evict, 1.0, out=evict)

    moved = len(indices) * HIDDEN * 4 + out.nbytes  # every listed row of W, the output once
    return Case(f"sparse_fc_forward K={len(indices)} x {HIDDEN} (caches flushed)", run, [out],
                moved, prepare=prepare)


def weight_grad_case(batch_csr, rng) -> Case:
    indptr, indices, values = batch_csr
    B = len(indptr) - 1
    delta = (rng.normal(size=(B, HIDDEN)) * 1e-2).astype(np.float32)
    dW = np.zeros((FEATURES, HIDDEN), dtype=np.float32)
    scale = -1.0 / B

    def run(backend):
        backend.sparse_fc_weight_grad(dW, indptr, indices, values, delta, scale)
        return dW

    touched = len(np.unique(indices))
    moved = delta.nbytes + 2 * touched * HIDDEN * 4  # delta once, touched rows of dW in and out
    return Case(f"sparse_fc_weight_grad K={len(indices)} x {HIDDEN}", run, [dW], moved,
                2.0 * len(indices) * HIDDEN)


def skip_case(batch_csr, rng) -> Case:
    indptr, indices, values = batch_csr
    B = len(indptr) - 1
    z = rng.normal(size=(B, FEATURES)).astype(np.float32)
    out = np.empty_like(z)

    def run(backend):
        backend.sparse_add(out, indptr, indices, values, 1.0, 0)
        return out

    def prepare():
        np.copyto(out, z)

    # the entries' indices and the row offsets read, one float read and written per entry
    moved = indices.nbytes + indptr.nbytes + 2 * 4 * len(indices)
    return Case(f"sparse_add K={len(indices)} into {B} x {FEATURES}", run, [out], moved,
                prepare=prepare)


def loss_case(batch_csr, rng, err_fn, smce, act=codes.SIGMOID) -> Case:
    indptr, indices, values = batch_csr
    B = len(indptr) - 1
    # Early training: the output bias of -10.2 (benchmark.json) keeps most a near 4e-5; the
    # spread puts some units above any SMCE zeroTarget and listed units on both sides.
    z = rng.normal(-8.0, 3.0, size=(B, FEATURES)).astype(np.float32)
    a = np.empty_like(z)
    # (SoftMax: the reference's, so that the inputs do not change with the cpu kernel.)
    (cpu_pointwise if act == codes.SIGMOID else ref_pointwise).activation_forward(
        a, z, act, *NO_ACT_PARAMS)
    delta = np.empty_like(a)
    weights = np.zeros(0, dtype=np.float32)
    result = np.zeros(1)

    def run(backend):
        result[0] = backend.sparse_loss_delta(delta, a, indptr, indices, values, weights, err_fn,
                                              act, *NO_ACT_PARAMS, *smce, 1.0, 1.0)
        return delta

    name = (f"sparse_loss_delta {codes.ERROR_FUNCTION_NAMES[err_fn]} {smce[:2]} {B}x{FEATURES}"
            if act == codes.SIGMOID else
            f"sparse_loss_delta {codes.ACTIVATION_NAMES[act]} "
            f"{codes.ERROR_FUNCTION_NAMES[err_fn]} {B}x{FEATURES}")
    return Case(name, run, [delta, result], a.nbytes + delta.nbytes)


def backward_case(rng, B, act) -> Case:
    z = rng.normal(size=(B, HIDDEN)).astype(np.float32)
    a = np.empty_like(z)
    cpu_pointwise.activation_forward(a, z, act, *NO_ACT_PARAMS)
    da = rng.normal(size=(B, HIDDEN)).astype(np.float32)
    dz = np.empty_like(a)

    def run(backend):
        backend.activation_backward(dz, da, a, act, *NO_ACT_PARAMS)
        return dz

    name = f"activation_backward {codes.ACTIVATION_NAMES[act]} {B}x{HIDDEN}"
    return Case(name, run, [dz], 3 * a.nbytes)


def sigmoid_case(rng, B, split: bool) -> Case:
    """The output layer's Sigmoid; ``split=False`` times one NumPy pass for comparison."""
    z = rng.normal(-8.0, 3.0, size=(B, FEATURES)).astype(np.float32)
    a = np.empty_like(z)

    def run(backend):
        if split:
            backend.activation_forward(a, z, codes.SIGMOID, *NO_ACT_PARAMS)
        else:
            cpu_pointwise._numpy_sigmoid(a, z)  # one thread, whatever the backend
        return a

    name = (f"activation_forward Sigmoid {B}x{FEATURES}" if split
            else f"one-pass Sigmoid {B}x{FEATURES} (NumPy, one thread)")
    return Case(name, run, [a], 2 * a.nbytes)


def softmax_case(rng, B) -> Case:
    """A SoftMax output layer's activation (a row's maximum, an exp per unit, the row sum)."""
    z = rng.normal(-8.0, 3.0, size=(B, FEATURES)).astype(np.float32)
    a = np.empty_like(z)

    def run(backend):
        backend.activation_forward(a, z, codes.SOFTMAX, *NO_ACT_PARAMS)
        return a

    return Case(f"activation_forward SoftMax {B}x{FEATURES}", run, [a], 2 * a.nbytes)


def split_softmax_case(rng, B) -> Case:
    """One rank's share of a SoftMax output split over two MPI ranks (its first half of the
    units): ``softmax_forward_partials``, the rows' statistics combined with the other half's
    (computed once by the reference, as the all-gather would bring them), and
    ``softmax_forward_finish``, as ``Network._softmax_forward`` calls them (in place there;
    here into an array of its own, so that no copy of the input is timed)."""
    from destiny.network import softmax_row_stats

    half = FEATURES // 2
    z = rng.normal(-8.0, 3.0, size=(B, FEATURES)).astype(np.float32)
    other = np.empty((B, 2))
    ref_pointwise.softmax_forward_partials(other, z[:, half:])
    mine = np.ascontiguousarray(z[:, :half])
    a = np.empty_like(mine)
    stats = np.empty((B, 2))

    def run(backend):
        backend.softmax_forward_partials(stats, mine)
        backend.softmax_forward_finish(a, mine, softmax_row_stats(np.hstack([stats, other])))
        return a

    return Case(f"softmax_forward_partials+finish {B}x{half} (a rank's half)", run, [a],
                3 * a.nbytes)


def split_softmax_loss_case(batch_csr, rng) -> Case:
    """One rank's share of a SoftMax CrossEntropy output split over two ranks (its first half
    of the units and their targets): ``softmax_loss_partials``, the row sums added to the
    other half's (computed once by the reference), and ``softmax_loss_finish``, as
    ``Network._softmax_loss`` calls them; the rows' target counts are the whole rows'."""
    from destiny.sparse import column_range

    indptr, indices, values = batch_csr
    B, half = len(indptr) - 1, FEATURES // 2
    z = rng.normal(-8.0, 3.0, size=(B, FEATURES)).astype(np.float32)
    a = np.empty_like(z)
    ref_pointwise.activation_forward(a, z, codes.SOFTMAX, *NO_ACT_PARAMS)
    counts = np.diff(indptr).astype(np.int64)
    weights = np.zeros(0, dtype=np.float32)
    rest = (codes.CROSS_ENTROPY, *SMCE_DEFAULT, 1.0, 1.0)

    def share(lo, hi):
        return (np.ascontiguousarray(a[:, lo:hi]), *column_range(indptr, indices, values, lo, hi),
                weights, counts, *rest)

    mine, theirs = share(0, half), share(half, FEATURES)
    other = np.empty(B)
    ref_loss.softmax_loss_partials(np.empty_like(theirs[0]), other, *theirs)
    delta, sums, result = np.empty_like(mine[0]), np.empty(B), np.zeros(1)

    def run(backend):
        result[0] = backend.softmax_loss_partials(delta, sums, *mine)
        backend.softmax_loss_finish(delta, sums + other, *mine)
        return delta

    return Case(f"softmax_loss_partials+finish CrossEntropy {B}x{half} (a rank's half)", run,
                [delta, result], 2 * mine[0].nbytes + delta.nbytes)


def top_k_case(batch_csr, rng, k: int, filtered: bool) -> Case:
    """Top-k of the output layer's scores, the batch's own items filtered out or not."""
    indptr, indices, _ = batch_csr
    B = len(indptr) - 1
    z = rng.normal(-3.0, 2.0, size=(B, FEATURES)).astype(np.float32)
    scores = np.empty_like(z)
    cpu_pointwise.activation_forward(scores, z, codes.SIGMOID, *NO_ACT_PARAMS)
    items = np.empty((B, k), dtype=np.int32)
    best = np.empty((B, k), dtype=np.float32)
    no_filter = (np.zeros(0, np.int64), np.zeros(0, np.int32))
    exclude = (indptr, indices) if filtered else no_filter

    def run(backend):
        backend.top_k(items, best, scores, *exclude, np.zeros(0, np.uint8), FEATURES)
        return items

    name = f"top_k K={k} {B}x{FEATURES} {'filter' if filtered else 'no filter'}"
    return Case(name, run, [items, best], scores.nbytes)


def top_k_activated_case(batch_csr, rng, k: int, fused: bool) -> Case:
    """Prediction's top-k from the output layer's pre-activations z, the batch's own items
    filtered: ``top_k_activated`` (fused), or the Sigmoid pass over z and then ``top_k``."""
    indptr, indices, _ = batch_csr
    B = len(indptr) - 1
    z = rng.normal(-3.0, 2.0, size=(B, FEATURES)).astype(np.float32)
    scores = np.empty_like(z)
    items = np.empty((B, k), dtype=np.int32)
    best = np.empty((B, k), dtype=np.float32)
    args = (indptr, indices, np.zeros(0, np.uint8), FEATURES)

    def run(backend):
        if fused:
            backend.top_k_activated(items, best, z, *args, codes.SIGMOID, *NO_ACT_PARAMS)
        else:
            pointwise = ref_pointwise if backend is ref_topk else cpu_pointwise
            pointwise.activation_forward(scores, z, codes.SIGMOID, *NO_ACT_PARAMS)
            backend.top_k(items, best, scores, *args)
        return items

    name = (f"top_k_activated Sigmoid K={k} {B}x{FEATURES} filter" if fused
            else f"top_k after activation_forward Sigmoid K={k} {B}x{FEATURES} filter")
    # The cpu's Sigmoid pass (NumPy's float32 exp) and the reference's (float64) differ in the
    # last bit now and then, which can swap two near-tied items: that case checks the scores.
    return Case(name, run, [items, best] if fused else [best], z.nbytes)


def _input_layer(rng):
    """The input layer's weights, a zero gradient, RMSProp's state (and no second state
    array), and the update each row is up to date with."""
    W = (rng.normal(size=(FEATURES, HIDDEN)) * 1e-2).astype(np.float32)
    return (W, np.zeros_like(W), np.zeros_like(W), np.zeros(0, dtype=np.float32),
            np.zeros(FEATURES, dtype=np.int64))


def optimizer_case(batch_csr, rng, rows_only: bool) -> Case:
    """RMSProp on the input layer: every row, or only the batch's rows (``update_weight_rows``)."""
    indptr, indices, _ = batch_csr
    W, G, v, unused, current = _input_layer(rng)
    gradient = (rng.normal(size=(FEATURES, HIDDEN)) * 1e-3).astype(np.float32)
    present = np.unique(indices)
    t = [0]

    def prepare():
        t[0] += 1
        G[present] = gradient[present]  # the batch's rows have a gradient, the others none
        current[:] = t[0] - 2  # every row one update behind, as in training on average

    def run(backend):
        if rows_only:
            backend.update_weight_rows(W, G, v, unused, indices, current, t[0],
                                       cpu_optim.RMSPROP, 1e-3, 0.9)
        else:
            backend.update_weights(W, G, v, unused, t[0], cpu_optim.RMSPROP, 1e-3, 0.0, 0.0,
                                   0.9, 0.0)
        return W

    rows = len(present) if rows_only else FEATURES
    name = (f"update_weight_rows RMSProp {len(present)} of {FEATURES} rows x {HIDDEN}"
            if rows_only else f"update_weights RMSProp {FEATURES}x{HIDDEN}")
    # W, G and v read, W and v written; the lazy update also writes G's rows (zeroed).
    return Case(name, run, [W, v], (5 + rows_only) * 4 * rows * HIDDEN, prepare=prepare)


def sparse_update_case(batch_csr, rng, fused: bool) -> Case:
    """The input layer's weight gradient and lazy RMSProp row update: ``sparse_fc_weight_grad``
    and then ``update_weight_rows`` (two calls, the rows passing through G), or
    ``sparse_grad_update_rows`` (one call), as ``Network.update`` runs it once rows lag."""
    indptr, indices, values = batch_csr
    B = len(indptr) - 1
    W, G, v, unused, current = _input_layer(rng)
    delta = (rng.normal(size=(B, HIDDEN)) * 1e-2).astype(np.float32)
    present = len(np.unique(indices))
    t = [0]

    def prepare():
        t[0] += 1
        current[:] = t[0] - 2  # every row one update behind, as in training on average

    def run(backend):
        if fused:
            backend.sparse_grad_update_rows(W, G, v, unused, current, indptr, indices, values,
                                            delta, -1.0 / B, t[0], cpu_optim.RMSPROP, 1e-3, 0.9)
        else:
            sparse = ref_sparse if backend is ref_optim else cpu_sparse
            sparse.sparse_fc_weight_grad(G, indptr, indices, values, delta, -1.0 / B)
            backend.update_weight_rows(W, G, v, unused, indices, current, t[0],
                                       cpu_optim.RMSPROP, 1e-3, 0.9)
        return W

    shape = f"RMSProp K={len(indices)}, {present} rows x {HIDDEN}"
    name = (f"sparse_grad_update_rows {shape}" if fused
            else f"sparse_fc_weight_grad + update_weight_rows {shape}")
    # W and v read and written, delta once; the two calls also write, read and zero G's rows.
    moved = (4 + 3 * (not fused)) * 4 * present * HIDDEN + delta.nbytes
    return Case(name, run, [W, v], moved, prepare=prepare)


def catch_up_case(rng, gap: int) -> Case:
    """``catch_up_rows``: RMSProp's state of the input layer brought up to date before it is
    read (a checkpoint), every row ``gap`` updates behind; one row in 7 has a state, the others
    are zero, as a wide catalogue's features no example has had yet."""
    _, _, v, unused, current = _input_layer(rng)
    seen = (rng.random((len(v[::7]), HIDDEN)) * 1e-3).astype(np.float32)
    t = [0]

    def prepare():
        t[0] += gap
        v[...] = 0.0
        v[::7] = seen
        current[:] = t[0] - gap

    def run(backend):
        backend.catch_up_rows(v, unused, current, t[0], cpu_optim.RMSPROP, 0.9)
        return v

    name = f"catch_up_rows RMSProp {FEATURES}x{HIDDEN}, {gap} behind, 1 row in 7 seen"
    return Case(name, run, [v], 2 * 4 * v.size, prepare=prepare)


def snapshot(case: Case, backend) -> list[np.ndarray]:
    """The case's outputs after one call of ``backend``, from zeroed accumulators."""
    for out in case.outputs:
        out[...] = 0.0
    case.prepare()
    case.run(backend)
    return [out.copy() for out in case.outputs]


def check(case: Case) -> bool:
    """Whether the cpu kernel reproduces the reference on float32 data.

    rtol 1e-5 as in the kernel tests, and an absolute tolerance of 1e-5 of the largest
    expected magnitude (the test suite's atol, 1e-5, would be loose for gradients ~1e-4).
    """
    expected = snapshot(case, _module(case, "reference"))
    got = snapshot(case, _module(case, "cpu"))
    ok = True
    for g, e in zip(got, expected, strict=True):
        e = e.astype(np.float64)
        atol = 1e-5 * float(np.max(np.abs(e)))
        if not np.allclose(g, e, rtol=1e-5, atol=atol):
            rel = np.abs(g - e) / (np.abs(e) + atol)
            print(f"MISMATCH {case.name}: worst |diff| / (|expected| + atol) {rel.max():.3g}")
            ok = False
    return ok


def _module(case: Case, backend: str):
    kind = case.name.split()[0].split("+")[0]
    if kind == "sparse_fc_weight_grad" and "+" in case.name:
        kind = "update_weight_rows"  # the two-call case: its run picks the sparse module
    modules = {"reference": {"sparse_fc_weight_grad": ref_sparse,
                             "sparse_fc_forward": ref_sparse, "sparse_add": ref_sparse,
                             "sparse_loss_delta": ref_loss,
                             "activation_backward": ref_pointwise,
                             "activation_forward": ref_pointwise, "top_k": ref_topk,
                             "softmax_loss_partials": ref_loss,
                             "softmax_forward_partials": ref_pointwise,
                             "top_k_activated": ref_topk,
                             "update_weights": ref_optim, "update_weight_rows": ref_optim,
                             "sparse_grad_update_rows": ref_optim, "catch_up_rows": ref_optim},
               "cpu": {"sparse_fc_weight_grad": cpu_sparse, "sparse_fc_forward": cpu_sparse,
                       "sparse_add": cpu_sparse,
                       "sparse_loss_delta": cpu_loss, "softmax_loss_partials": cpu_loss,
                       "activation_backward": cpu_pointwise, "activation_forward": cpu_pointwise,
                       "top_k": cpu_topk, "top_k_activated": cpu_topk,
                       "update_weights": cpu_optim,
                       "update_weight_rows": cpu_optim, "sparse_grad_update_rows": cpu_optim,
                       "catch_up_rows": cpu_optim}}
    # The comparison case (one-pass) calls NumPy whatever the backend.
    return modules[backend].get(kind, cpu_pointwise)


def time_all(cases: list[Case], repeats: int) -> None:
    """Interleave the cases, one call of each per round, after a warm-up round."""
    for case in cases:
        case.prepare()
        case.run(_module(case, "cpu"))
    for _ in range(repeats):
        for case in cases:
            module = _module(case, "cpu")
            case.prepare()
            start = time.perf_counter()
            case.run(module)
            case.times.append(time.perf_counter() - start)


def report(case: Case) -> str:
    med, best = statistics.median(case.times), min(case.times)
    rate = (f"{case.flops / med / 1e9:7.2f} GFLOP/s" if case.flops
            else f"{case.moved_bytes / med / 1e9:7.2f} GB/s")
    return f"{case.name:<64} median {med * 1e3:8.3f} ms  min {best * 1e3:8.3f} ms  {rate}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    batch_csr = csr_batch(args.batch, args.seed)
    cases = [gather_case(batch_csr, rng),
             weight_grad_case(batch_csr, rng),
             loss_case(batch_csr, rng, codes.SMCE, SMCE_BENCHMARK),
             loss_case(batch_csr, rng, codes.SMCE, SMCE_DEFAULT),
             loss_case(batch_csr, rng, codes.CROSS_ENTROPY, SMCE_DEFAULT),
             loss_case(batch_csr, rng, codes.CROSS_ENTROPY, SMCE_DEFAULT, codes.SOFTMAX),
             backward_case(rng, args.batch, codes.SIGMOID),
             backward_case(rng, args.batch, codes.TANH),
             sigmoid_case(rng, args.batch, split=True),
             sigmoid_case(rng, args.batch, split=False),
             softmax_case(rng, args.batch),
             split_softmax_case(rng, args.batch),
             split_softmax_loss_case(batch_csr, rng),
             top_k_case(batch_csr, rng, 100, filtered=True),
             top_k_case(batch_csr, rng, 100, filtered=False),
             top_k_activated_case(batch_csr, rng, 100, fused=True),
             top_k_activated_case(batch_csr, rng, 100, fused=False),
             optimizer_case(batch_csr, rng, rows_only=False),
             optimizer_case(batch_csr, rng, rows_only=True),
             sparse_update_case(batch_csr, rng, fused=False),
             sparse_update_case(batch_csr, rng, fused=True),
             catch_up_case(rng, 32),
             skip_case(batch_csr, rng)]  # (last: the others' random inputs stay as they were)
    print(f"batch {args.batch}, {len(batch_csr[1])} listed entries "
          f"({len(batch_csr[1]) / args.batch:.1f} per row)")
    if not all([check(case) for case in cases]):  # every case, so that all mismatches print
        print("Results differ from the reference: not timing")
        return 1
    print("All results match")
    time_all(cases, args.repeats)
    for case in cases:
        print(report(case))
    return 0


if __name__ == "__main__":
    sys.exit(main())
