"""Output losses and deltas of every backend (spec 5.5, 3.11).

The deltas are checked against central finite differences of the returned error in float64,
the sparse kernels against the dense ones on the same targets, and the numba kernels against
the NumPy reference on float32 data.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from destiny.kernels import codes
from destiny.netdef_fields import Activation, ErrorFunction
from .backends import family, tiny

BACKENDS = {name: (family("loss")[name], family("pointwise")[name])
            for name in ("reference", "cpu", "cuda")}
KERNEL_BACKENDS = ["cpu", "cuda"]  # the ones checked against the reference
ref_loss = BACKENDS["reference"][0]
SLOPE, ALPHA, LAM = 0.1, 1.3, 1.0507
# SMCE thresholds inside (0, 1), so that both branches of both targets occur.
SMCE_PARAMS = dict(one_target=0.7, zero_target=0.3, one_scale=1.5, zero_scale=0.8)


def supported(err_fn, act):
    try:
        codes.check_loss_activation(err_fn, act)
    except ValueError:
        return False
    return True


PAIRS = [pair for pair in itertools.product(sorted(codes.ERROR_FUNCTION_NAMES),
                                            sorted(codes.ACTIVATION_NAMES)) if supported(*pair)]
PAIR_IDS = [f"{codes.ERROR_FUNCTION_NAMES[e]}-{codes.ACTIVATION_NAMES[a]}" for e, a in PAIRS]
# DeltaBoost applies to exactly these pairs (spec 3.11), written out rather than imported.
BOOSTED = ({(codes.L1, act) for act in codes.ACTIVATION_NAMES}
           | {(err_fn, codes.SIGMOID) for err_fn in (codes.L2, codes.L2_HINGE,
                                                     codes.CROSS_ENTROPY)})


def sparse_targets(rng, rows, units, boolean, max_per_row=3):
    """CSR targets with distinct indices per row (some rows empty), values in [0.3, 1.5]."""
    lengths = rng.integers(0, max_per_row + 1, size=rows)
    indptr = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    indices = np.concatenate([rng.choice(units, size=n, replace=False) for n in lengths])
    values = (np.zeros(0, dtype=np.float32) if boolean
              else rng.uniform(0.3, 1.5, size=indptr[-1]).astype(np.float32))
    return indptr, indices.astype(np.int32), values


def effective_dense_targets(indptr, indices, values, units, err_fn, act):
    """The dense targets the sparse kernels mean: 1 or v at listed units, 0 elsewhere.

    CrossEntropy and SMCE ignore the values, and SoftMax CrossEntropy gives each of a row's
    n listed units 1/n (spec 5.5, 6.6).
    """
    counts = np.diff(indptr)
    rows = np.repeat(np.arange(len(counts)), counts)
    t = np.zeros((len(counts), units))
    v = np.ones(len(indices)) if len(values) == 0 else values.astype(np.float64)
    if err_fn == codes.CROSS_ENTROPY:
        v = 1.0 / counts[rows] if act == codes.SOFTMAX else np.ones(len(indices))
    elif err_fn == codes.SMCE:
        v = np.ones(len(indices))
    t[rows, indices] = v
    return t


def loss_args(err_fn, act, boost_one=1.0, boost_zero=1.0):
    p = SMCE_PARAMS
    return (err_fn, act, SLOPE, ALPHA, LAM, p["one_target"], p["zero_target"], p["one_scale"],
            p["zero_scale"], boost_one, boost_zero)


def activate(backend, z, act):
    a = np.empty_like(z)
    BACKENDS[backend][1].activation_forward(a, z, act, SLOPE, ALPHA, LAM)
    return a


def sparse(backend, a, targets, weights, err_fn, act, ignore_zero=False, **boost):
    delta = np.full_like(a, np.nan)
    error = BACKENDS[backend][0].sparse_loss_delta(delta, a, *targets, weights,
                                                   *loss_args(err_fn, act, **boost), ignore_zero)
    assert isinstance(error, float)
    return error, delta


def dense(backend, a, t, weights, err_fn, act):
    delta = np.full_like(a, np.nan)
    error = BACKENDS[backend][0].dense_loss_delta(delta, a, t.astype(a.dtype), weights,
                                                  *loss_args(err_fn, act))
    assert isinstance(error, float)
    return error, delta


def rows_away_from_kinks(z, a, t, act, margin=1e-3):
    """Rows where no unit sits near a kink of an activation or loss (finite differences fail).

    Kinks: z = 0 (ReLU family, ELU), a = |t| (L1, L2Hinge), t*a = 1 (Hinge) and the SMCE
    thresholds; a ReLU unit with z < 0 does not move, so its loss kinks do not matter. A
    SoftMax row is coupled, so one bad unit spoils its row.
    """
    near = ((np.abs(a - np.abs(t)) < margin) | (np.abs(t * a - 1) < margin)
            | (np.abs(a - SMCE_PARAMS["one_target"]) < margin)
            | (np.abs(a - SMCE_PARAMS["zero_target"]) < margin))
    if act == codes.RELU:
        near &= z > 0
    return ~(near | (np.abs(z) < margin)).any(axis=1)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("boolean", [True, False], ids=["boolean", "analog"])
@pytest.mark.parametrize("err_fn, act", PAIRS, ids=PAIR_IDS)
def test_sparse_delta_is_the_gradient_of_the_error(backend, boolean, err_fn, act):
    rng = np.random.default_rng(100 * err_fn + act + 7 * boolean)
    rows, units = (2, 3) if tiny(backend) else (6, 7)
    targets = sparse_targets(rng, rows, units, boolean)
    weights = rng.uniform(0.5, 2.0, size=rows).astype(np.float32)
    z = rng.normal(scale=1.5, size=(rows, units))
    a = activate(backend, z, act)
    _, delta = sparse(backend, a, targets, weights, err_fn, act)
    check_gradient(backend, z, a, delta, targets, weights, err_fn, act)


def check_gradient(backend, z, a, delta, targets, weights, err_fn, act, ignore_zero=False):
    """``delta`` against central differences of the error in z, on the rows away from kinks."""
    # In the simulator the perturbed activations come from the reference (the activation
    # kernels have their own tests), which halves the launches.
    act_backend = "reference" if tiny(backend) else backend
    h = 1e-6
    numeric = np.empty_like(z)
    for i in np.ndindex(z.shape):
        zp, zm = z.copy(), z.copy()
        zp[i] += h
        zm[i] -= h
        up, down = (sparse(backend, activate(act_backend, x, act), targets, weights, err_fn, act,
                           ignore_zero)[0] for x in (zp, zm))
        numeric[i] = (up - down) / (2 * h)
    t = effective_dense_targets(*targets, z.shape[1], err_fn, act)
    clean = rows_away_from_kinks(z, a, t, act)
    assert clean.sum() >= z.shape[0] // 2
    np.testing.assert_allclose(delta[clean], numeric[clean], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("err_fn, act", PAIRS, ids=PAIR_IDS)
def test_ignore_zero_counts_only_the_listed_entries(backend, err_fn, act):
    """SparseIgnoreZero targets (spec 2.3): the error is the listed entries' alone, and the
    delta its gradient, 0 at the units not listed but through a SoftMax row's coupling."""
    rng = np.random.default_rng(400 + 100 * err_fn + act)
    rows, units = (2, 3) if tiny(backend) else (6, 7)
    targets = sparse_targets(rng, rows, units, boolean=False, max_per_row=2)
    weights = rng.uniform(0.5, 2.0, size=rows).astype(np.float32)
    z = rng.normal(scale=1.5, size=(rows, units))
    a = activate(backend, z, act)
    error, delta = sparse(backend, a, targets, weights, err_fn, act, ignore_zero=True)

    indptr, indices, values = targets
    listed = np.zeros((rows, units), dtype=bool)
    listed[np.repeat(np.arange(rows), np.diff(indptr)), indices] = True
    # The same rows with every unlisted unit's output changed: neither error nor listed
    # deltas move (but SoftMax's, whose listed outputs depend on the whole row).
    if act != codes.SOFTMAX:
        assert (delta[~listed] == 0).all()
        moved = np.where(listed, a, activate(backend, z + 0.7, act))
        moved_error, moved_delta = sparse(backend, moved, targets, weights, err_fn, act,
                                          ignore_zero=True)
        assert moved_error == pytest.approx(error, rel=1e-12)
        np.testing.assert_array_equal(moved_delta, delta)
    check_gradient(backend, z, a, delta, targets, weights, err_fn, act, ignore_zero=True)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("err_fn, act", PAIRS, ids=PAIR_IDS)
def test_sparse_equals_dense_on_the_same_targets(backend, err_fn, act):
    rng = np.random.default_rng(200 + 100 * err_fn + act)
    rows, units = (3, 4) if tiny(backend) else (9, 11)
    for boolean, weighted in itertools.product([True, False], repeat=2):
        targets = sparse_targets(rng, rows, units, boolean)
        weights = (rng.uniform(0.5, 2.0, size=rows).astype(np.float32) if weighted
                   else np.zeros(0, dtype=np.float32))
        a = activate(backend, rng.normal(size=(rows, units)), act)
        t = effective_dense_targets(*targets, units, err_fn, act)
        error, delta = sparse(backend, a, targets, weights, err_fn, act)
        dense_error, dense_delta = dense(backend, a, t, weights, err_fn, act)
        assert error == pytest.approx(dense_error, rel=1e-10)
        np.testing.assert_allclose(delta, dense_delta, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("err_fn, act", PAIRS, ids=PAIR_IDS)
def test_matches_reference_float32(backend, err_fn, act):
    rng = np.random.default_rng(300 + 100 * err_fn + act)
    # In the simulator, rows of more than two PART_UNITS: the sparse kernel splits them over
    # two blocks of unequal parts (SoftMax rows excepted, which a block takes whole).
    rows, units = (3, 9) if tiny(backend) else (23, 37)
    z = rng.normal(scale=2.0, size=(rows, units)).astype(np.float32)
    a = activate("reference", z, act)
    names = ("reference", backend)
    for boolean, weighted, ignore_zero in itertools.product([True, False], repeat=3):
        targets = sparse_targets(rng, rows, units, boolean, max_per_row=6 if rows > 6 else 3)
        weights = (rng.uniform(0.5, 2.0, size=rows).astype(np.float32) if weighted
                   else np.zeros(0, dtype=np.float32))
        results = {name: sparse(name, a, targets, weights, err_fn, act, ignore_zero,
                                boost_one=3.0, boost_zero=0.5) for name in names}
        if ignore_zero:  # (the dense kernels have no such mode)
            got, expected = results[backend], results["reference"]
            assert got[0] == pytest.approx(expected[0], rel=1e-5)
            np.testing.assert_allclose(got[1], expected[1], rtol=1e-5, atol=1e-6)
            continue
        t = effective_dense_targets(*targets, units, err_fn, act).astype(np.float32)
        dense_results = {name: dense(name, a, t, weights, err_fn, act) for name in names}
        for got, expected in [(results[backend], results["reference"]),
                              (dense_results[backend], dense_results["reference"])]:
            assert got[0] == pytest.approx(expected[0], rel=1e-5)
            np.testing.assert_allclose(got[1], expected[1], rtol=1e-5, atol=1e-6)


SOFTMAX_LOSSES = [err_fn for err_fn, act in PAIRS if act == codes.SOFTMAX]


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("parts", [1, 3])
@pytest.mark.parametrize("err_fn", SOFTMAX_LOSSES,
                         ids=[codes.ERROR_FUNCTION_NAMES[e] for e in SOFTMAX_LOSSES])
def test_softmax_loss_split_by_columns_is_the_whole_rows(backend, parts, err_fn):
    """A SoftMax output split across ranks: each block of columns takes its targets (indices
    re-based) and the rows' listed counts over every block, the network adds up the blocks'
    row sums of pre-deltas, and each block finishes its deltas: ``sparse_loss_delta`` of the
    whole rows, the error summed over the blocks. One block with no counts given counts its
    own (as one process)."""
    loss = BACKENDS[backend][0]
    rng = np.random.default_rng(700 + 10 * err_fn + parts)
    rows, units = (3, 7) if tiny(backend) else (9, 23)
    a = activate("reference", rng.normal(scale=2.0, size=(rows, units)).astype(np.float32),
                 codes.SOFTMAX)
    blocks = [(units * r // parts, units * (r + 1) // parts) for r in range(parts)]
    for boolean, weighted, ignore_zero in itertools.product([True, False], repeat=3):
        targets = sparse_targets(rng, rows, units, boolean, max_per_row=5)
        weights = (rng.uniform(0.5, 2.0, size=rows).astype(np.float32) if weighted
                   else np.zeros(0, dtype=np.float32))
        expected_error, expected = sparse("reference", a, targets, weights, err_fn,
                                          codes.SOFTMAX, ignore_zero, boost_one=3.0,
                                          boost_zero=0.5)
        counts = (np.diff(targets[0]) if parts > 1 else np.zeros(0)).astype(np.int64)
        error, delta = _softmax_loss_in_blocks(loss, blocks, a, targets, weights, counts, err_fn,
                                               (3.0, 0.5), ignore_zero)
        assert error == pytest.approx(expected_error, rel=1e-5)
        np.testing.assert_allclose(delta, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("err_fn", SOFTMAX_LOSSES,
                         ids=[codes.ERROR_FUNCTION_NAMES[e] for e in SOFTMAX_LOSSES])
def test_softmax_loss_split_by_columns_with_repeated_targets_is_this_backends_whole_rows(
        backend, err_fn):
    """Rows listing a unit twice (its last value wins, its error counts twice, and it counts
    twice in CrossEntropy's n), an empty row and rows whose targets lie in one block, on 2 and
    3 blocks: the same backend's ``sparse_loss_delta`` of the whole rows."""
    loss = BACKENDS[backend][0]
    rng = np.random.default_rng(90 + err_fn)
    a = activate("reference", rng.normal(scale=2.0, size=(5, 9)).astype(np.float32),
                 codes.SOFTMAX)
    indptr = np.array([0, 4, 4, 7, 9, 12], np.int64)
    indices = np.array([1, 5, 1, 8, 0, 0, 2, 3, 3, 6, 7, 6], np.int32)
    for boolean, ignore_zero, boost, parts in itertools.product(
            [True, False], [False, True], [(1.0, 1.0), (3.0, 0.5)], [2, 3]):
        values = (np.zeros(0, np.float32) if boolean
                  else rng.uniform(0.3, 1.5, size=len(indices)).astype(np.float32))
        targets, weights = (indptr, indices, values), np.zeros(0, np.float32)
        expected_error, expected = sparse(backend, a, targets, weights, err_fn, codes.SOFTMAX,
                                          ignore_zero, boost_one=boost[0], boost_zero=boost[1])
        blocks = [(9 * r // parts, 9 * (r + 1) // parts) for r in range(parts)]
        error, delta = _softmax_loss_in_blocks(loss, blocks, a, targets, weights, np.diff(indptr),
                                               err_fn, boost, ignore_zero)
        assert error == pytest.approx(expected_error, rel=1e-6)
        np.testing.assert_allclose(delta, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("ignore_zero", [False, True])
def test_cpu_split_softmax_cross_entropy_is_the_generic_kernels_bit_for_bit(ignore_zero):
    """The cpu's float32 SoftMax CrossEntropy partials (no log per unit) store the generic
    kernel's pre-deltas, row sums and error exactly: rows with repeated and unsorted targets,
    an empty row, weights, and counts over more units than this block holds."""
    from destiny.kernels.cpu import loss as cpu_loss

    rng = np.random.default_rng(77)
    a = activate("reference", rng.normal(scale=2.0, size=(6, 50)).astype(np.float32),
                 codes.SOFTMAX)
    indptr = np.array([0, 3, 3, 8, 9, 12, 20], np.int64)
    indices = np.array([4, 1, 4, 0, 9, 2, 7, 9, 49, 30, 10, 20, *range(40, 48)], np.int32)
    counts = np.diff(indptr) + np.array([2, 0, 5, 1, 0, 3])
    weights = rng.uniform(0.5, 2.0, size=6).astype(np.float32)
    p = SMCE_PARAMS
    for w, n in itertools.product([weights, weights[:0]], [counts, counts[:0]]):
        got, want = np.full_like(a, np.nan), np.full_like(a, np.nan)
        got_sums, want_sums = np.full(6, np.nan), np.full(6, np.nan)
        error = cpu_loss.softmax_loss_partials(
            got, got_sums, a, indptr, indices, np.zeros(0, np.float32), w, n,
            codes.CROSS_ENTROPY, *p.values(), 1.0, 1.0, ignore_zero)
        prm = cpu_loss._params(0.0, 0.0, 0.0, *p.values())
        expected = cpu_loss._softmax_partials_kernel(
            want, want_sums, a, indptr, indices, np.zeros(0, np.float32), w, n,
            codes.CROSS_ENTROPY, prm, ignore_zero)
        assert error == expected
        np.testing.assert_array_equal(got_sums, want_sums)
        np.testing.assert_array_equal(got, want)


def _softmax_loss_in_blocks(loss, blocks, a, targets, weights, counts, err_fn, boost,
                            ignore_zero):
    """(error, delta) of SoftMax rows ``a`` split by columns into ``blocks`` (lo, hi), as the
    ranks take them: each block's ``softmax_loss_partials``, the row sums added up, then each
    block's ``softmax_loss_finish``."""
    from destiny.sparse import column_range

    p = SMCE_PARAMS
    error, sums, pieces = 0.0, np.zeros(len(a)), []
    for lo, hi in blocks:
        args = (np.ascontiguousarray(a[:, lo:hi]), *column_range(*targets, lo, hi), weights,
                counts, err_fn, p["one_target"], p["zero_target"], p["one_scale"],
                p["zero_scale"], *boost, ignore_zero)
        delta, mine = np.full((len(a), hi - lo), np.nan, np.float32), np.full(len(a), np.nan)
        error += float(loss.softmax_loss_partials(delta, mine, *args))
        sums += mine
        pieces.append((delta, args))
    for delta, args in pieces:
        loss.softmax_loss_finish(delta, sums, *args)
    return error, np.hstack([d for d, _ in pieces])


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("err_fn, act", PAIRS, ids=PAIR_IDS)
def test_delta_boost_scales_only_the_listed_pairs_deltas(backend, err_fn, act):
    rng = np.random.default_rng(400 + 100 * err_fn + act)
    rows, units = (3, 5) if tiny(backend) else (8, 10)
    targets = sparse_targets(rng, rows, units, boolean=False)
    a = activate(backend, rng.normal(size=(rows, units)).astype(np.float32), act)
    weights = np.zeros(0, dtype=np.float32)
    error, delta = sparse(backend, a, targets, weights, err_fn, act)
    for one, zero in ((3.0, 0.5), (1.0, 0.5)):  # (a zero-target boost alone boosts too)
        boosted_error, boosted = sparse(backend, a, targets, weights, err_fn, act,
                                        boost_one=one, boost_zero=zero)
        assert boosted_error == error  # DeltaBoost never touches the error
        factor = np.ones_like(a)
        if (err_fn, act) in BOOSTED:
            indptr, indices, _ = targets
            factor[:] = zero
            factor[np.repeat(np.arange(rows), np.diff(indptr)), indices] = one
        np.testing.assert_allclose(boosted, factor * delta, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_dense_targets_ignore_delta_boost(backend):
    rng = np.random.default_rng(5)
    a = activate(backend, rng.normal(size=(4, 5)).astype(np.float32), codes.SIGMOID)
    t = (rng.random((4, 5)) < 0.3).astype(np.float32)
    w = np.zeros(0, dtype=np.float32)
    plain = np.empty_like(a)
    boosted = np.empty_like(a)
    loss = BACKENDS[backend][0]
    loss.dense_loss_delta(plain, a, t, w, *loss_args(codes.L1, codes.SIGMOID))
    loss.dense_loss_delta(boosted, a, t, w, *loss_args(codes.L1, codes.SIGMOID, 3.0, 0.5))
    np.testing.assert_array_equal(plain, boosted)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_movielens_smce_is_sigmoid_cross_entropy(backend):
    # Spec 5.5: SMCE with oneTarget 1, zeroTarget 0 and unit scales is binary cross-entropy.
    rng = np.random.default_rng(6)
    a = activate(backend, rng.normal(size=(5, 8)), codes.SIGMOID)
    targets = sparse_targets(rng, 5, 8, boolean=True)
    t = effective_dense_targets(*targets, 8, codes.SMCE, codes.SIGMOID)
    delta = np.empty_like(a)
    error = BACKENDS[backend][0].sparse_loss_delta(
        delta, a, *targets, np.zeros(0, dtype=np.float32), codes.SMCE, codes.SIGMOID,
        SLOPE, ALPHA, LAM, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0)
    assert error == pytest.approx(-(t * np.log(a) + (1 - t) * np.log(1 - a)).sum(), rel=1e-12)
    np.testing.assert_allclose(delta, a - t, rtol=1e-12)
    # SparseIgnoreZero (spec 5.5): only the listed entries, -log(a) and a - 1.
    error = BACKENDS[backend][0].sparse_loss_delta(
        delta, a, *targets, np.zeros(0, dtype=np.float32), codes.SMCE, codes.SIGMOID,
        SLOPE, ALPHA, LAM, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, True)
    assert error == pytest.approx(-(t * np.log(a)).sum(), rel=1e-12)
    np.testing.assert_allclose(delta, np.where(t > 0, a - 1, 0), rtol=1e-12)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_hinge_zero_targets_cost_one_per_unit(backend):
    a = np.full((2, 4), 0.25)
    no_targets = (np.zeros(3, dtype=np.int64), np.zeros(0, dtype=np.int32),
                  np.zeros(0, dtype=np.float32))
    error, delta = sparse(backend, a, no_targets, np.zeros(0, dtype=np.float32), codes.HINGE,
                          codes.LINEAR)
    assert error == 8.0
    np.testing.assert_array_equal(delta, 0.0)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_l1_and_hinge_have_no_gradient_at_their_kinks(backend):
    # L1's sign(a - t) is 0 where a == t, and Hinge's gradient is 0 where t * a reaches 1.
    a = np.array([[0.5, 0.25, 1.0, -1.0]])
    no_weights = np.zeros(0, dtype=np.float32)
    error, delta = dense(backend, a, np.array([[0.5, 0.75, 1.0, 0.0]]), no_weights, codes.L1,
                         codes.LINEAR)
    assert error == 1.5
    np.testing.assert_array_equal(delta, [[0.0, -1.0, 0.0, -1.0]])
    error, delta = dense(backend, a, np.array([[1.0, 1.0, 1.0, -1.0]]), no_weights,
                         codes.HINGE, codes.LINEAR)
    assert error == 1.25
    np.testing.assert_array_equal(delta, [[-1.0, -1.0, 0.0, 0.0]])


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_duplicate_targets_count_twice_in_the_error_only(backend):
    rng = np.random.default_rng(7)
    a = activate(backend, rng.normal(size=(1, 6)), codes.SIGMOID)
    w = np.zeros(0, dtype=np.float32)
    once = (np.array([0, 2], dtype=np.int64), np.array([1, 4], dtype=np.int32),
            np.zeros(0, dtype=np.float32))
    twice = (np.array([0, 3], dtype=np.int64), np.array([1, 4, 4], dtype=np.int32),
             np.zeros(0, dtype=np.float32))
    error1, delta1 = sparse(backend, a, once, w, codes.L2, codes.SIGMOID)
    error2, delta2 = sparse(backend, a, twice, w, codes.L2, codes.SIGMOID)
    x = a[0, 4]
    assert error2 - error1 == pytest.approx(0.5 * (x - 1) ** 2 - 0.5 * x ** 2, rel=1e-10)
    np.testing.assert_array_equal(delta1, delta2)
    # With values, the unit's delta is that of its last entry (the CUDA kernel scans for it
    # only here: an indicator row's entries of one unit all give the same delta).
    last = (once[0], once[1], np.array([0.5, 0.9], dtype=np.float32))
    both = (twice[0], twice[1], np.array([0.5, 0.2, 0.9], dtype=np.float32))
    np.testing.assert_array_equal(sparse(backend, a, both, w, codes.L2, codes.SIGMOID)[1],
                                  sparse(backend, a, last, w, codes.L2, codes.SIGMOID)[1])


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("boost", [(1.0, 1.0), (1.5, 0.7)], ids=["plain", "boosted"])
def test_units_listed_several_times_take_their_last_entrys_value(backend, boost):
    """Rows of analog targets listing units up to five times with different values, the last
    entry at every position: each unit's delta is its last entry's, as in the reference. On
    the GPU the entries of a row are spread over the block's threads, and only the entry that
    ``_is_last`` finds writes (DeltaBoost's rewrite of the listed units too)."""
    rng = np.random.default_rng(12)
    rows, units, per_row = 5, 6, 7
    a = rng.uniform(0.1, 0.9, size=(rows, units)).astype(np.float32)
    indptr = np.arange(0, rows * per_row + 1, per_row, dtype=np.int64)
    indices = rng.integers(0, units, size=rows * per_row).astype(np.int32)
    values = rng.uniform(0.3, 1.5, size=len(indices)).astype(np.float32)
    w = np.zeros(0, dtype=np.float32)
    args = (codes.L2, codes.SIGMOID, SLOPE, ALPHA, LAM, 0.7, 0.3, 1.5, 0.8, *boost)
    results = {}
    for name in ("reference", backend):
        delta = np.zeros_like(a)
        error = BACKENDS[name][0].sparse_loss_delta(delta, a, indptr, indices, values, w, *args)
        results[name] = float(error), delta
    assert results[backend][0] == pytest.approx(results["reference"][0], rel=1e-6)
    np.testing.assert_allclose(results[backend][1], results["reference"][1], rtol=1e-6,
                               atol=1e-7)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("boost", [(1.0, 1.0), (1.5, 0.7)], ids=["plain", "boosted"])
def test_a_unit_listed_again_as_its_rows_last_entry_takes_that_value(backend, boost):
    """The second listing of a unit is the row's last entry, right after the first ([u, u])
    or one entry later ([x, u, u]): the earlier entry, handled by the other thread of a
    simulated block, must see it and leave the unit to it, whichever thread writes first."""
    rows, units = 8, 5
    a = np.linspace(0.1, 0.9, rows * units).reshape(rows, units).astype(np.float32)
    lengths = [2, 3] * (rows // 2)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    indices = np.concatenate([[r % units] * 2 if n == 2 else [(r + 1) % units, r % units,
                                                              r % units]
                              for r, n in enumerate(lengths)]).astype(np.int32)
    values = np.linspace(0.3, 1.5, len(indices)).astype(np.float32)
    w = np.zeros(0, dtype=np.float32)
    args = (codes.L2, codes.SIGMOID, SLOPE, ALPHA, LAM, 0.7, 0.3, 1.5, 0.8, *boost)
    expected, got = np.zeros_like(a), np.zeros_like(a)
    BACKENDS["reference"][0].sparse_loss_delta(expected, a, indptr, indices, values, w, *args)
    BACKENDS[backend][0].sparse_loss_delta(got, a, indptr, indices, values, w, *args)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
def test_a_softmax_output_of_one_at_a_zero_target_costs_min_error(backend):
    """SMCE on SoftMax: an output of exactly 1 at a zero target divides by
    max(MIN_ERROR, 1 - a), as the reference does, not by 0."""
    a = np.array([[1.0, 0.0, 0.0], [0.5, 0.25, 0.25]], dtype=np.float32)
    targets = (np.array([0, 1, 2], np.int64), np.array([1, 0], np.int32),
               np.zeros(0, np.float32))
    w = np.zeros(0, dtype=np.float32)
    results = {}
    for name in ("reference", backend):
        delta = np.full_like(a, np.nan)
        error = BACKENDS[name][0].sparse_loss_delta(
            delta, a, *targets, w, codes.SMCE, codes.SOFTMAX, SLOPE, ALPHA, LAM, 0.9, 0.1,
            2.0, 0.5, 1.0, 1.0)
        results[name] = float(error), delta
    assert np.isfinite(results[backend][1]).all()
    assert results[backend][0] == pytest.approx(results["reference"][0], rel=1e-6)
    np.testing.assert_allclose(results[backend][1], results["reference"][1], rtol=1e-6)


@pytest.mark.parametrize("err_fn, act", [
    (codes.CROSS_ENTROPY, codes.TANH), (codes.SMCE, codes.RELU), (codes.DSMCE, codes.SOFTMAX),
    (codes.CROSS_ENTROPY, codes.LINEAR), (codes.L2, 8), (9, codes.SIGMOID),
])
def test_unsupported_pairs_are_refused(err_fn, act):
    with pytest.raises(ValueError):
        codes.check_loss_activation(err_fn, act)
    a = np.full((1, 2), 0.5, dtype=np.float32)
    for backend in BACKENDS:
        with pytest.raises(ValueError):
            dense(backend, a, np.zeros_like(a), np.zeros(0, dtype=np.float32), err_fn, act)


def test_codes_are_the_network_files_enum_values():
    # A network's errorFunction and layer activations reach the kernels as int(enum member).
    assert codes.ERROR_FUNCTION_NAMES == {int(e): e.name for e in ErrorFunction}
    assert codes.ACTIVATION_NAMES == {int(a): a.name for a in Activation
                                      if int(a) in codes.ACTIVATION_NAMES}
    assert {a.name for a in Activation} - set(codes.ACTIVATION_NAMES.values()) == {
        "ParametricRectifiedLinear", "RELUMax", "LinearMax"}  # no kernel (spec 3.6)


def test_refusal_message_names_the_fix():
    with pytest.raises(ValueError, match="CrossEntropy needs a Sigmoid or SoftMax output layer, "
                                         "not Tanh"):
        ref_loss.check_loss_activation(codes.CROSS_ENTROPY, codes.TANH)


@pytest.mark.parametrize("err_fn, act", [
    (codes.L2, codes.TANH), (codes.L1, codes.RELU), (codes.HINGE, codes.LINEAR),
    (codes.L2_HINGE, codes.SOFTMAX), (codes.CROSS_ENTROPY, codes.SOFTMAX),
    (codes.SMCE, codes.SIGMOID), (codes.DSMCE, codes.SIGMOID),
])
def test_supported_pairs_are_accepted(err_fn, act):
    for loss, _ in BACKENDS.values():
        loss.check_loss_activation(err_fn, act)


def test_cuda_error_is_read_when_asked_and_each_output_keeps_its_own():
    """On the device the loss kernels return the error unread (``DeviceError``): the network
    queues the rest of the backward pass first and reads it at the end. Two output layers of
    one shape, their errors read after both kernels ran: each is its own layer's, the cpu's."""
    from numba import cuda

    from destiny.kernels.cuda import loss as cuda_loss

    cpu = BACKENDS["cpu"][0]
    rng = np.random.default_rng(11)
    cases = []
    for units in (9, 9):
        a = rng.uniform(0.05, 0.95, size=(4, units)).astype(np.float32)
        indptr, indices, values = sparse_targets(rng, 4, units, boolean=False)
        expected = cpu.sparse_loss_delta(np.empty_like(a), a, indptr, indices, values,
                                         np.zeros(0, np.float32), *loss_args(codes.L2,
                                                                             codes.SIGMOID))
        device = [cuda.to_device(x) for x in (a, indptr, indices, values)]
        cases.append((expected, device))
    pending = []
    for _, (a, indptr, indices, values) in cases:
        delta = cuda.device_array(a.shape, np.float32)
        pending.append(cuda_loss.sparse_loss_delta(
            delta, a, indptr, indices, values, cuda.device_array(0, np.float32),
            *loss_args(codes.L2, codes.SIGMOID)))
    assert all(isinstance(e, cuda_loss.DeviceError) for e in pending)
    for (expected, _), error in zip(cases, pending, strict=True):
        assert float(error) == pytest.approx(expected, rel=1e-6)


def _hand_loss(backend, a, targets, err_fn, one_target, zero_target, one_scale, zero_scale):
    delta = np.full_like(a, np.nan)
    error = BACKENDS[backend][0].sparse_loss_delta(
        delta, a, *targets, np.zeros(0, dtype=np.float32), err_fn, codes.SIGMOID, SLOPE, ALPHA,
        LAM, one_target, zero_target, one_scale, zero_scale, 1.0, 1.0)
    return error, delta


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("err_fn", [codes.CROSS_ENTROPY, codes.SMCE])
def test_saturated_outputs_cost_minus_log_min_error(backend, dtype, err_fn):
    """Every log is log(max(MIN_ERROR, x)), MIN_ERROR = 1e-12 (spec 5.5, section 11): a
    Sigmoid output of exactly 1 at a zero target, or exactly 0 at a listed one, costs
    -log(1e-12) = 27.631 (times the SMCE scale), not more and not infinity; the deltas are
    a - t as ever (SMCE: times the scale). Unit 2 (0.5, a zero target) costs log 2."""
    a = np.array([[1.0, 0.0, 0.5]], dtype=dtype)
    targets = (np.array([0, 1], np.int64), np.array([1], np.int32), np.zeros(0, np.float32))
    one_scale, zero_scale = (2.0, 0.5) if err_fn == codes.SMCE else (1.0, 1.0)
    error, delta = _hand_loss(backend, a, targets, err_fn, 1.0, 0.0, one_scale, zero_scale)
    floor = -np.log(1e-12)
    assert error == pytest.approx((one_scale + zero_scale) * floor + zero_scale * np.log(2),
                                  rel=1e-6)
    np.testing.assert_allclose(delta, [[zero_scale, -one_scale, 0.5 * zero_scale]], rtol=1e-6)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_smce_thresholds_are_strict(backend):
    """Spec 5.5: a listed unit counts only if a < oneTarget, a zero target only if
    a > zeroTarget; at the threshold itself, neither error nor delta. Units: listed at
    oneTarget 0.75, zero at zeroTarget 0.25, listed at 0.5, zero at 0.5."""
    a = np.array([[0.75, 0.25, 0.5, 0.5]], dtype=np.float32)
    targets = (np.array([0, 2], np.int64), np.array([0, 2], np.int32), np.zeros(0, np.float32))
    error, delta = _hand_loss(backend, a, targets, codes.SMCE, 0.75, 0.25, 2.0, 0.5)
    assert error == pytest.approx(2.0 * np.log(2) + 0.5 * np.log(2), rel=1e-6)
    np.testing.assert_allclose(delta, [[0.0, 0.0, 2.0 * (0.5 - 1), 0.5 * 0.5]], rtol=1e-6)



@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("err_fn", [codes.SMCE, codes.DSMCE], ids=["SMCE", "DSMCE"])
def test_a_zero_target_between_two_floats_is_compared_in_float64(backend, err_fn):
    """zeroTarget 0.1, the default (spec 3.12), is no float32: float32(0.1) lies above it, so
    a Sigmoid output of exactly float32(0.1) is above the threshold, as the reference compares
    (float64(a) > zeroTarget). The cpu's Sigmoid fast path compared a with the threshold
    rounded to float32 (equal: not above) for the zero targets, and in float64 for the listed
    unit's correction: units 1 and 2 lost their deltas 0.5 * a, and the error subtracted a
    zero-target term of unit 0 that it had never added."""
    a = np.full((1, 3), 0.1, dtype=np.float32)
    targets = (np.array([0, 1], np.int64), np.array([0], np.int32), np.zeros(0, np.float32))
    error, delta = _hand_loss(backend, a, targets, err_fn, 0.9, 0.1, 2.0, 0.5)
    x = float(np.float32(0.1))
    assert x > 0.1
    assert error == pytest.approx(-2.0 * np.log(x) - 2 * 0.5 * np.log(1 - x), rel=1e-6)
    np.testing.assert_allclose(delta, [[2.0 * (x - 1), 0.5 * x, 0.5 * x]], rtol=1e-6)


NAN_PAIRS = [(codes.CROSS_ENTROPY, codes.SIGMOID), (codes.CROSS_ENTROPY, codes.SOFTMAX),
             (codes.HINGE, codes.TANH), (codes.HINGE, codes.LINEAR),
             (codes.L2_HINGE, codes.LINEAR), (codes.L1, codes.LINEAR), (codes.L1, codes.RELU)]


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("ignore_zero", [False, True], ids=["", "ignore-zero"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("err_fn, act", NAN_PAIRS,
                         ids=[f"{codes.ERROR_FUNCTION_NAMES[e]}-{codes.ACTIVATION_NAMES[a]}"
                              for e, a in NAN_PAIRS])
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_a_nan_output_has_the_references_nan_error_and_deltas(backend, ignore_zero, dtype,
                                                              err_fn, act):
    """An output of NaN (weights no longer finite) costs NaN in the reference: NumPy's
    maximum keeps a NaN in log(max(MIN_ERROR, a)) and max(0, 1 - t a), and its sign of NaN is
    NaN, so training's NaN guard (train.py) stops at that batch. The cpu and the GPU clamped
    with max (and a GPU's fmax), which drops a NaN: each reported a finite error of its own
    (CrossEntropy, Hinge, L2Hinge), and L1 or the cpu's Sigmoid CrossEntropy a delta of 0
    where the reference's is NaN. Rows: a NaN at a zero target (which SparseIgnoreZero leaves
    out of the error), at a listed one, none."""
    w = np.zeros(0, dtype=np.float32)
    for row, listed, nan in (([0.3, np.nan, 0.6], 0, not ignore_zero),
                             ([0.2, 0.5, np.nan], 2, True), ([0.1, 0.7, 0.2], 1, False)):
        a = np.array([row], dtype=dtype)
        targets = (np.array([0, 1], np.int64), np.array([listed], np.int32),
                   np.zeros(0, np.float32))
        results = {}
        for name in ("reference", backend):
            delta = np.full_like(a, 7.0)
            error = BACKENDS[name][0].sparse_loss_delta(delta, a, *targets, w,
                                                        *loss_args(err_fn, act), ignore_zero)
            results[name] = [error, delta]
            if not ignore_zero:
                dense_delta = np.full_like(a, 7.0)
                t = effective_dense_targets(*targets, 3, err_fn, act).astype(dtype)
                dense_error = BACKENDS[name][0].dense_loss_delta(dense_delta, a, t, w,
                                                                 *loss_args(err_fn, act))
                results[name] += [dense_error, dense_delta]
        want, got = results["reference"], results[backend]
        for k in range(0, len(want), 2):
            assert np.isnan(want[k]) == nan
            assert np.isnan(got[k]) == nan
            assert nan or got[k] == pytest.approx(want[k], rel=1e-6)
            np.testing.assert_allclose(got[k + 1], want[k + 1], rtol=1e-6)  # (NaN where NaN)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("ignore_zero", [False, True], ids=["", "ignore-zero"])
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_a_nan_output_of_a_split_softmax_has_the_references_error(backend, ignore_zero):
    """A rank's part of a SoftMax CrossEntropy row with NaN at a zero target: its error is
    NaN, as the reference's, unless the targets ignore zeros (the cpu's float32 fast path
    summed the listed units alone)."""
    a = np.array([[0.3, np.nan, 0.6], [0.2, 0.5, 0.3]], dtype=np.float32)
    targets = (np.array([0, 1, 2], np.int64), np.array([0, 2], np.int32),
               np.zeros(0, np.float32))
    args = (np.zeros(0, np.float32), np.array([2, 1], np.int64), codes.CROSS_ENTROPY,
            *SMCE_PARAMS.values(), 1.0, 1.0, ignore_zero)
    errors = {}
    for name in ("reference", backend):
        delta, sums = np.full_like(a, 7.0), np.zeros(2)
        errors[name] = BACKENDS[name][0].softmax_loss_partials(delta, sums, a, *targets, *args)
        rows = []
        for r in range(2):  # (row by row: the NaN row's error alone)
            delta, sums = np.full_like(a[r:r + 1], 7.0), np.zeros(1)
            rows.append(BACKENDS[name][0].softmax_loss_partials(
                delta, sums, a[r:r + 1], np.array([0, 1], np.int64), targets[1][r:r + 1],
                targets[2], args[0], args[1][r:r + 1], *args[2:]))
        errors[name] = (errors[name], *rows)
    assert np.isnan(errors["reference"]).tolist() == [not ignore_zero, not ignore_zero, False]
    np.testing.assert_allclose(errors[backend], errors["reference"], rtol=1e-6)

def test_cpu_refuses_a_delta_over_its_activations():
    """Both cpu kernels read a row of ``a`` after writing that row's delta: in place, the
    error came out 146 where it is 103. Refused rather than computed wrong."""
    rng = np.random.default_rng(9)
    a = activate("cpu", rng.normal(size=(4, 8)), codes.SIGMOID)
    targets = sparse_targets(rng, 4, 8, boolean=True)
    for err_fn in (codes.SMCE, codes.L2):  # the Sigmoid fast path, and the generic kernel
        with pytest.raises(ValueError, match="delta overlaps a"):
            BACKENDS["cpu"][0].sparse_loss_delta(
                a, a, *targets, np.zeros(0, dtype=np.float32), err_fn, codes.SIGMOID,
                SLOPE, ALPHA, LAM, **SMCE_PARAMS, boost_one=1.0, boost_zero=1.0)
