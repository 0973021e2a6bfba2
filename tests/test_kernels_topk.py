"""The prediction kernels (filters, top-K) of every backend against brute force (spec 8.3, 8.4)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from destiny.kernels import codes
from destiny.kernels.reference import pointwise as REFERENCE

from .backends import family, tiny

BACKENDS = family("topk")
NONE_INT64 = np.zeros(0, dtype=np.int64)
NONE_INT32 = np.zeros(0, dtype=np.int32)
NONE_UINT8 = np.zeros(0, dtype=np.uint8)
NONE_FLOAT32 = np.zeros(0, dtype=np.float32)


def tied_scores(rng, rows, items, nan_fraction=0.0):
    """Scores rounded to one decimal, so that most of them tie with others."""
    scores = np.round(rng.normal(size=(rows, items)), 1).astype(np.float32)
    scores[rng.random(size=(rows, items)) < nan_fraction] = np.nan
    return scores


def random_filter(rng, rows, items, max_per_row=30):
    """A CSR filter with empty rows and repeated items."""
    lengths = rng.integers(0, max_per_row, size=rows)
    lengths[::4] = 0
    indptr = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    indices = rng.integers(0, items, size=indptr[-1]).astype(np.int32)
    return indptr, indices


def brute_force(scores, k, indptr, indices, allowed, n_valid):
    """Python's sort of every row's candidates, with NaN after every number."""
    rows, items = scores.shape
    out_items = np.full((rows, k), -1, dtype=np.int32)
    out_scores = np.full((rows, k), -np.inf, dtype=np.float32)
    for b in range(rows):
        excluded = set(indices[indptr[b]:indptr[b + 1]].tolist()) if len(indptr) else set()
        candidates = [j for j in range(min(n_valid, items))
                      if j not in excluded and (len(allowed) == 0 or allowed[j])]
        s = scores[b]
        candidates.sort(key=lambda j: (math.isnan(s[j]), 0.0 if math.isnan(s[j]) else -s[j], j))
        best = candidates[:k]
        out_items[b, :len(best)] = best
        out_scores[b, :len(best)] = s[best]
    return out_items, out_scores


def run_top_k(backend, scores, k, indptr=NONE_INT64, indices=NONE_INT32, allowed=NONE_UINT8,
              n_valid=None):
    items = np.full((scores.shape[0], k), 12345, dtype=np.int32)
    values = np.full((scores.shape[0], k), 7.0, dtype=np.float32)
    before = scores.copy()
    n_valid = scores.shape[1] if n_valid is None else n_valid
    BACKENDS[backend].top_k(items, values, scores, indptr, indices, allowed, n_valid)
    np.testing.assert_array_equal(scores, before)  # scores are read only
    return items, values


def check(backend, scores, k, indptr=NONE_INT64, indices=NONE_INT32, allowed=NONE_UINT8,
          n_valid=None):
    """Both the backend and the reference equal brute force exactly; returns the items."""
    n = scores.shape[1] if n_valid is None else n_valid
    expected_items, expected_scores = brute_force(scores, k, indptr, indices, allowed, n)
    items, values = run_top_k(backend, scores, k, indptr, indices, allowed, n_valid)
    np.testing.assert_array_equal(items, expected_items)
    np.testing.assert_array_equal(values, expected_scores)  # NaN equals NaN here
    return items


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("k", [1, 5, 100, 250])
def test_ties_by_ascending_item(backend, k):
    rng = np.random.default_rng(k)
    # In the CUDA simulator: fewer items than the larger K, which then take every item.
    rows, items = (3, 40) if tiny(backend) else (23, 200)
    check(backend, tied_scores(rng, rows, items), k)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_more_ties_at_the_threshold_than_shared_memory_holds(backend):
    """1,297 items tie at the K-th score, more than the cuda select's SELECT_MAX_K slots: the
    first in item order are taken (its tie gather walks the row a block's width at a time)."""
    scores = np.full((2, 1300), 0.25, dtype=np.float32)
    scores[0, [5, 700, 1299]] = 0.5
    scores[1, 1200] = np.nan
    for k in (2, 10, 1024):
        items = check(backend, scores, k)
        assert items[1, -1] == (k - 1 if k < 1200 else k)
    assert list(check(backend, scores, 10)[0]) == [5, 700, 1299, 0, 1, 2, 3, 4, 6, 7]


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_k_larger_than_items_fills_with_minus_one(backend):
    rng = np.random.default_rng(3)
    scores = tied_scores(rng, 6, 9)
    items = check(backend, scores, 15)
    assert np.all(items[:, 9:] == -1)
    assert np.array_equal(np.sort(items[:, :9], axis=1), np.tile(np.arange(9), (6, 1)))


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_k_equal_to_candidates(backend):
    rng = np.random.default_rng(4)
    scores = tied_scores(rng, 5, 40)
    # Every row excludes the same 10 distinct items: exactly 30 candidates, and K = 30.
    indices = np.tile(rng.permutation(40)[:10].astype(np.int32), 5)
    indptr = np.arange(0, 51, 10, dtype=np.int64)
    items = check(backend, scores, 30, indptr, indices)
    assert np.all(items >= 0)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("k", [1, 20, 100])
def test_filter_excludes_items(backend, k):
    rng = np.random.default_rng(10 + k)
    rows, n_items = (5, 40) if tiny(backend) else (40, 150)
    scores = tied_scores(rng, rows, n_items)
    indptr, indices = random_filter(rng, rows, n_items, max_per_row=n_items // 5)
    items = check(backend, scores, k, indptr, indices)
    for b in range(rows):
        assert not set(items[b].tolist()) & set(indices[indptr[b]:indptr[b + 1]].tolist())


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_filter_excluding_everything(backend):
    scores = np.ones((2, 4), dtype=np.float32)
    indptr = np.array([0, 8, 8], dtype=np.int64)
    indices = np.array([3, 2, 1, 0, 0, 1, 2, 3], dtype=np.int32)
    items = check(backend, scores, 3, indptr, indices)
    assert np.all(items[0] == -1)
    np.testing.assert_array_equal(items[1], [0, 1, 2])


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_padding_units_and_allowed_mask(backend):
    rng = np.random.default_rng(5)
    rows, n_items, n_valid = (4, 32, 25) if tiny(backend) else (30, 128, 101)
    scores = tied_scores(rng, rows, n_items)
    allowed = (rng.random(n_items) < 0.7).astype(np.uint8)
    indptr, indices = random_filter(rng, rows, n_items, max_per_row=n_items // 4)
    for k in (1, 10, 100):
        items = check(backend, scores, k, indptr, indices, allowed, n_valid=n_valid)
        chosen = items[items >= 0]
        assert np.all(chosen < n_valid) and np.all(allowed[chosen] == 1)
    check(backend, scores, 10, n_valid=0)
    check(backend, scores, 10, n_valid=500)  # more than N: every unit is real


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_nan_ranks_below_every_number(backend):
    rng = np.random.default_rng(6)
    rows, n = (4, 12) if tiny(backend) else (20, 60)
    scores = tied_scores(rng, rows, n, nan_fraction=0.3)
    scores[0, :] = np.nan
    scores[1, ::2] = -np.inf
    scores[2, :5] = [-0.0, 0.0, -0.0, np.nan, -np.inf]
    for k in (1, n // 2, n, n + 10):
        check(backend, scores, k)
    items, values = run_top_k(backend, scores, n + 10)
    np.testing.assert_array_equal(items[0, :n], np.arange(n))  # all NaN: by item
    assert np.all(np.isnan(values[0, :n])) and np.all(values[0, n:] == -np.inf)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_an_infinite_score_among_low_ones_is_found(backend):
    # Rows long enough for the cpu's floor from blocks of 32 items: +inf is a block's maximum.
    rng = np.random.default_rng(16)
    rows, n = (2, 100) if tiny(backend) else (3, 2048)
    scores = rng.normal(size=(rows, n)).astype(np.float32)
    scores[:, 64:96] = -100.0
    scores[:, 70] = np.inf
    scores[1, 80] = -np.inf
    for k in (1, 5):
        items = check(backend, scores, k)
        assert (items[:, 0] == 70).all()


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_empty_batch_and_zero_k(backend):
    scores = np.zeros((0, 10), dtype=np.float32)
    items, values = run_top_k(backend, scores, 5, indptr=np.zeros(1, dtype=np.int64))
    assert items.shape == (0, 5) and values.shape == (0, 5)
    items, values = run_top_k(backend, np.ones((3, 10), dtype=np.float32), 0)
    assert items.shape == (3, 0)


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_equals_reference_exactly(backend):
    rng = np.random.default_rng(7)
    rows, n_items, n_excluded = (4, 150, 20) if tiny(backend) else (64, 3000, 200)
    scores = tied_scores(rng, rows, n_items, nan_fraction=0.01)
    indptr, indices = random_filter(rng, rows, n_items, max_per_row=n_excluded)
    allowed = (rng.random(n_items) < 0.9).astype(np.uint8)
    for k in (1, 37, 100):
        expected = run_top_k("reference", scores, k, indptr, indices, allowed, n_items - 10)
        got = run_top_k(backend, scores, k, indptr, indices, allowed, n_items - 10)
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_array_equal(got[1], expected[1])


def test_cpu_block_floor_skips_nothing_it_should_not():
    """Wide rows, small K: the cpu kernel's floor from block maxima is in use. The filtered
    items are the best ones (as a user's own items are), some blocks are all NaN, scores tie,
    and -0.0 meets 0.0: the result is still the reference's, exactly."""
    rng = np.random.default_rng(11)
    rows, n_items = 24, 4000
    scores = tied_scores(rng, rows, n_items, nan_fraction=0.02)
    scores[:, 64:96] = np.nan  # a block of NaN only
    scores[:, 200:260] = -0.0
    scores[3] = 0.0  # a row of ties
    order = np.argsort(-np.nan_to_num(scores, nan=-9), axis=1)
    lengths = rng.integers(0, 80, size=rows)
    indptr = np.zeros(rows + 1, dtype=np.int64)
    indptr[1:] = np.cumsum(lengths)
    indices = np.concatenate([order[r, :n] for r, n in enumerate(lengths)]).astype(np.int32)
    allowed = np.ones(n_items, np.uint8)
    allowed[order[0, :60]] = 0  # row 0's best items may not be returned
    for k in (1, 10, 40):
        for args in ((), (indptr, indices), (indptr, indices, allowed, n_items - 17)):
            expected = run_top_k("reference", scores, k, *args)
            got = run_top_k("cpu", scores, k, *args)
            np.testing.assert_array_equal(got[0], expected[0])
            np.testing.assert_array_equal(got[1], expected[1])


@pytest.mark.parametrize("kind", ["normal", "few values", "mostly -inf", "tiny and signed zeros",
                                  "ascending"])
def test_cpu_kth_largest_selects_exactly(kind):
    """The cpu floor's radix select against a sort: ties, -inf, subnormals, -0.0 and 0.0, inf,
    and every rank."""
    from destiny.kernels.cpu.topk import _block_maxima, _kth_largest

    rng = np.random.default_rng(5)
    draw = {"normal": lambda n: rng.normal(size=n),
            "few values": lambda n: rng.integers(0, 4, n),
            "mostly -inf": lambda n: np.where(rng.random(n) < 0.7, -np.inf, rng.normal(size=n)),
            "tiny and signed zeros": lambda n: np.where(rng.random(n) < 0.3, -0.0,
                                                        rng.normal(size=n) * 1e-40),
            "ascending": lambda n: np.sort(rng.normal(size=n))}[kind]
    for n in (1, 2, 7, 300, 856):
        v = draw(n).astype(np.float32)
        if kind == "tiny and signed zeros":
            v[::11] = np.inf
        ascending = np.sort(v)
        for rank in range(1, n + 1):
            assert _kth_largest(v, rank) == ascending[n - rank]
    # The block maxima ignore NaN, and a block of NaN only has -inf.
    row = rng.normal(size=4 * 32).astype(np.float32)
    row[5] = np.nan
    row[32:64] = np.nan
    row[64:96] = -np.inf
    maxima = np.empty(4, np.float32)
    _block_maxima(row.view(np.int32), 4, maxima)
    want = [np.nanmax(row[:32]), -np.inf, -np.inf, row[96:].max()]
    np.testing.assert_array_equal(maxima, want)


def test_cuda_heap_kernel_for_k_beyond_shared_memory(monkeypatch):
    """K above SELECT_MAX_K takes the one-thread-per-row heap kernel: same results."""
    from destiny.kernels.cuda import topk

    monkeypatch.setattr(topk, "SELECT_MAX_K", 0)  # read by the wrapper, not the kernels
    rng = np.random.default_rng(8)
    scores = tied_scores(rng, 4, 150, nan_fraction=0.01)
    indptr, indices = random_filter(rng, 4, 150, max_per_row=20)
    allowed = (rng.random(150) < 0.9).astype(np.uint8)
    for k in (1, 37):
        expected = run_top_k("reference", scores, k, indptr, indices, allowed, 140)
        got = run_top_k("cuda", scores, k, indptr, indices, allowed, 140)
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_array_equal(got[1], expected[1])
    # Few distinct scores (ties across the K-th place, which the root of the full heap keeps
    # against later items), and filters of each row's best items in ascending order (the
    # kernel heapsorts them for its binary search), the last row's ending below its best.
    scores = np.round(rng.normal(size=(4, 150)) * 2) / 2
    scores = scores.astype(np.float32)
    best = np.argsort(-scores, axis=1, kind="stable")[:, :12]
    last = np.sort(best[-1])[:9]  # (its highest-numbered best items left unfiltered)
    indices = np.concatenate([np.sort(row) for row in best[:-1]] + [last])
    indptr = np.array([0, 12, 24, 36, 45])
    for k in (5, 37):
        expected = run_top_k("reference", scores, k, indptr, indices.astype(np.int32))
        got = run_top_k("cuda", scores, k, indptr, indices.astype(np.int32))
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_array_equal(got[1], expected[1])


def test_cuda_top_k_of_float64_scores_and_a_filter_not_starting_at_zero():
    """The radix select reads float32 bits: float64 scores take the heap kernel. A filter's
    entries before indptr[0] belong to no row. K above the row's candidates: the heap kernel
    fills every slot past them with -1 and -inf."""
    scores = np.array([[0.1, 0.9, 0.5, 0.3], [0.7, 0.2, 0.8, 0.4]])
    for k in (1, 2, 4, 6):
        got, expected = run_top_k("cuda", scores, k), run_top_k("reference", scores, k)
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_array_equal(got[1], expected[1])
    # A NaN fills the heap first: every later number beats that root.
    nan_first = np.array([[np.nan, 0.5, 0.2, np.nan, 0.7]])
    for k in (1, 2):
        got, expected = run_top_k("cuda", nan_first, k), run_top_k("reference", nan_first, k)
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_array_equal(got[1], expected[1])
    # (entry 0, before the rows, lists item 2: row 0's best but for its own item 1)
    indptr, indices = np.array([1, 2, 3]), np.array([2, 1, 0], np.int32)
    scores = scores.astype(np.float32)
    np.testing.assert_array_equal(run_top_k("cuda", scores, 2, indptr, indices)[0],
                                  run_top_k("reference", scores, 2, indptr, indices)[0])
    with pytest.raises(ValueError, match="offsets for 2 rows"):
        run_top_k("cuda", scores, 2, np.array([0, 1, 2, 3]), indices)


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_float64_scores_rank_by_their_own_precision(backend):
    """float64 scores that differ only below float32 resolution (all round to 0.5) rank as the
    reference ranks them, by their float64 values: a kernel that ranked them by their float32
    rounding would see ties and order them by item. Rows wide enough for the cpu's floor from
    blocks of 32 items, a filter, and K past the candidates."""
    rng = np.random.default_rng(21)
    rows, n_items = (2, 70) if tiny(backend) else (6, 400)
    tiny_steps = rng.integers(-4, 5, size=(rows, n_items)) * 2.0 ** -40
    scores = 0.5 + tiny_steps
    assert np.all(scores.astype(np.float32) == np.float32(0.5))
    indptr, indices = random_filter(rng, rows, n_items, max_per_row=10)
    for k in (1, 7, 40, n_items + 3):
        for args in ((), (indptr, indices)):
            expected = run_top_k("reference", scores, k, *args)
            got = run_top_k(backend, scores, k, *args)
            np.testing.assert_array_equal(got[0], expected[0])
            np.testing.assert_array_equal(got[1], expected[1])
    # (the reference's order is not the rounded scores' order, by item)
    rounded = scores.astype(np.float32)
    assert not np.array_equal(run_top_k("reference", scores, 40)[0],
                              run_top_k("reference", rounded, 40)[0])


def hand_filter(scores, indptr, indices, values):
    out = scores.copy()
    for b in range(len(indptr) - 1):
        for e in range(indptr[b], indptr[b + 1]):
            v = np.float32(0.0) if len(values) == 0 else values[e]
            out[b, indices[e]] = np.float32(out[b, indices[e]] * v)
    return out


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("weighted", [True, False])
def test_multiply_filter_matches_hand_loop(backend, weighted):
    rng = np.random.default_rng(8)
    rows, n_items = (5, 12) if tiny(backend) else (25, 40)
    scores = rng.normal(size=(rows, n_items)).astype(np.float32)
    indptr, indices = random_filter(rng, rows, n_items)  # repeats multiply twice
    values = (rng.normal(size=len(indices)).astype(np.float32) if weighted else NONE_FLOAT32)
    expected = hand_filter(scores, indptr, indices, values)
    BACKENDS[backend].multiply_filter(scores, indptr, indices, values)
    np.testing.assert_array_equal(scores, expected)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_multiply_filter_duplicates_and_no_filter(backend):
    scores = np.full((2, 3), 2.0, dtype=np.float32)
    indptr = np.array([0, 3, 3], dtype=np.int64)
    BACKENDS[backend].multiply_filter(scores, indptr, np.array([1, 1, 2], dtype=np.int32),
                                      np.array([3.0, 3.0, 0.5], dtype=np.float32))
    np.testing.assert_array_equal(scores, [[2.0, 18.0, 1.0], [2.0, 2.0, 2.0]])
    BACKENDS[backend].multiply_filter(scores, NONE_INT64, NONE_INT32, NONE_FLOAT32)
    np.testing.assert_array_equal(scores, [[2.0, 18.0, 1.0], [2.0, 2.0, 2.0]])
    BACKENDS[backend].multiply_filter(scores, np.array([0, 0, 1], dtype=np.int64),
                                      np.array([0], dtype=np.int32), NONE_FLOAT32)
    np.testing.assert_array_equal(scores, [[2.0, 18.0, 1.0], [0.0, 2.0, 2.0]])


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # (inf * 0)
def test_multiply_filter_of_zeros_multiplies(backend):
    """The zero filter (no values) multiplies by 0.0 as a weighted one would: a NaN or an
    infinite score becomes NaN, a negative one -0.0 (DSSTNE's product, not a store of 0)."""
    scores = np.array([[np.nan, np.inf, -2.0, 3.0]], dtype=np.float32)
    BACKENDS[backend].multiply_filter(scores, np.array([0, 4], dtype=np.int64),
                                      np.arange(4, dtype=np.int32), NONE_FLOAT32)
    assert np.isnan(scores[0, :2]).all()
    assert scores[0, 2] == 0 and np.signbit(scores[0, 2])
    assert scores[0, 3] == 0 and not np.signbit(scores[0, 3])


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_filter_entries_outside_the_items_are_ignored(backend):
    """Both filters ignore entries outside [0, N): -1, N itself and beyond (spec 8.3: unknown
    features are skipped); the entries inside still count."""
    scores = np.array([[0.5, 0.9, 0.1, 0.7], [0.2, 0.3, 0.8, 0.4]], dtype=np.float32)
    indptr = np.array([0, 4, 6], dtype=np.int64)
    indices = np.array([-1, 4, 1, 9, 4, 2], dtype=np.int32)
    check(backend, scores, 4, indptr, indices)
    items, _ = run_top_k(backend, scores, 4, indptr, indices)
    np.testing.assert_array_equal(items, [[3, 0, 2, -1], [3, 1, 0, -1]])
    filtered = scores.copy()
    values = np.array([5.0, 5.0, 2.0, 5.0, 5.0, 0.5], dtype=np.float32)
    BACKENDS[backend].multiply_filter(filtered, indptr, indices, values)
    expected = np.array([[0.5, 1.8, 0.1, 0.7], [0.2, 0.3, 0.4, 0.4]], dtype=np.float32)
    np.testing.assert_array_equal(filtered, expected)  # (x2 and x0.5 are exact)


ACTIVATIONS = [  # (code, slope, alpha, lambda): every activation top_k_activated takes
    (codes.SIGMOID, 0.0, 0.0, 0.0), (codes.TANH, 0.0, 0.0, 0.0), (codes.RELU, 0.0, 0.0, 0.0),
    (codes.LINEAR, 0.0, 0.0, 0.0), (codes.SOFTPLUS, 0.0, 0.0, 0.0),
    (codes.SOFTSIGN, 0.0, 0.0, 0.0), (codes.ELU, 0.0, 1.0, 0.0), (codes.LRELU, 0.1, 0.0, 0.0),
    (codes.SELU, 0.0, 1.6733, 1.0507)]


def saturating_scores(rng, rows, items):
    """Pre-activations with the cases where ranking by z and by f(z) part: runs of z that a
    Sigmoid or Tanh saturates to one value (ties that go by item, not by z), exact ties, NaN
    and blocks of z far below the rest."""
    z = (rng.normal(size=(rows, items)) * 4).astype(np.float32)
    z[:, 40:90] = rng.uniform(17, 60, size=(rows, 50))  # Sigmoid(z) = 1.0, Tanh(z) = 1.0
    z[:, 300:330] = rng.uniform(9.0, 9.2, size=(rows, 30))  # 1 - 1e-4: near, not equal
    z[1] = np.round(z[1])
    z[2, ::7] = np.nan
    z[3, :500] = -30.0
    return z


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("act", ACTIVATIONS, ids=lambda a: codes.ACTIVATION_NAMES[a[0]])
def test_top_k_activated_equals_top_k_of_the_activations(backend, act):
    """The floor on z, the bisection to the lowest z that reaches f(floor), the candidates'
    f alone: the same items and scores as the reference's activation pass and top_k."""
    rng = np.random.default_rng(5)
    rows, n_items = (4, 400) if tiny(backend) else (16, 4000)
    z = saturating_scores(rng, rows, n_items)
    indptr, indices = random_filter(rng, rows, n_items, max_per_row=60)
    indices[:5] = 41  # a saturated item filtered out
    allowed = (rng.random(n_items) < 0.97).astype(np.uint8)
    scores = np.empty_like(z)
    REFERENCE.activation_forward(scores, z, *act)
    for k in (1, 10, 75):
        for args in ((NONE_INT64, NONE_INT32, NONE_UINT8, n_items),
                     (indptr, indices, allowed, n_items - 13)):
            expected = run_top_k("reference", scores, k, *args)
            items = np.full((rows, k), 12345, dtype=np.int32)
            values = np.full((rows, k), 7.0, dtype=np.float32)
            before = z.copy()
            BACKENDS[backend].top_k_activated(items, values, z, *args, *act)
            np.testing.assert_array_equal(z, before)  # z is read only
            np.testing.assert_array_equal(items, expected[0])
            np.testing.assert_array_equal(values, expected[1])


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("act", [(codes.SOFTSIGN, 0.0, 0.0, 0.0), (codes.SELU, 0.0, 1.0, 0.0)],
                         ids=["SoftSign", "SELU-lambda-0"])
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # (f(inf))
def test_top_k_activated_of_an_infinite_z_whose_score_is_nan(backend, act):
    """SoftSign's z / (1 + |z|), and SELU's lambda * z with lambda 0, are NaN at z = +inf (as
    in the reference and DSSTNE), and NaN ranks below every number: the best two of a row
    with two infinite z are two finite ones (SoftSign: the two scoring f(1e30) = 1; SELU:
    items 0 and 1, as every finite z scores 0). The cpu's floor took the infinite z as the
    row's largest, and returned them, NaN."""
    z = np.zeros((1, 96), np.float32)
    z[0, [5, 40]] = np.inf
    z[0, [70, 80]] = 1e30
    scores = np.empty_like(z)
    REFERENCE.activation_forward(scores, z, *act)
    expected = run_top_k("reference", scores, 2)
    assert expected[0].tolist() == [[70, 80] if act[0] == codes.SOFTSIGN else [0, 1]]
    items, values = np.empty((1, 2), np.int32), np.empty((1, 2), np.float32)
    BACKENDS[backend].top_k_activated(items, values, z, NONE_INT64, NONE_INT32, NONE_UINT8, 96,
                                      *act)
    np.testing.assert_array_equal(items, expected[0])
    np.testing.assert_array_equal(values, expected[1])

@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_top_k_activated_of_float64_z_ranks_the_float32_scores(backend):
    """``top_k_activated``'s scores are f(z) rounded to float32, whatever z's precision (the
    reference's contract), so Sigmoids of float64 z that all round to 1.0 tie, and go by
    item. The GPU computed them in z's precision and ranked float64 scores: 2, 1, 0."""
    z = np.array([[20.0, 20.5, 21.0, -1.0]])
    items, values = np.empty((1, 3), np.int32), np.empty((1, 3), np.float32)
    BACKENDS[backend].top_k_activated(items, values, z, NONE_INT64, NONE_INT32, NONE_UINT8, 4,
                                      codes.SIGMOID, 0.0, 0.0, 0.0)
    assert items.tolist() == [[0, 1, 2]]
    assert values.tolist() == [[1.0, 1.0, 1.0]]

@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_top_k_activated_refuses_an_activation_that_can_decrease(backend):
    z = np.zeros((2, 64), np.float32)
    out = (np.empty((2, 3), np.int32), np.empty((2, 3), np.float32))
    for act in [(codes.SOFTMAX, 0.0, 0.0, 0.0), (codes.LRELU, -0.5, 0.0, 0.0),
                (codes.ELU, 0.0, -1.0, 0.0)]:
        with pytest.raises(ValueError, match="monotone"):
            BACKENDS[backend].top_k_activated(*out, z, NONE_INT64, NONE_INT32, NONE_UINT8, 64,
                                              *act)


@pytest.mark.parametrize("act, slope, alpha, lam", [
    (codes.RELU, 0.0, 0.0, 0.0), (codes.LRELU, 0.0, 0.0, 0.0), (codes.LRELU, 0.2, 0.0, 0.0),
    (codes.LRELU, -0.5, 0.0, 0.0), (codes.ELU, 0.0, 0.0, 0.0), (codes.ELU, 0.0, 1.0, 0.0),
    (codes.ELU, 0.0, -1.0, 0.0), (codes.SELU, 0.0, 1.6733, 1.0507),
    (codes.SELU, 0.0, -1.0, 1.0507), (codes.SELU, 0.0, -1.0, -1.0),
    (codes.SELU, 0.0, 1.0, -1.0), (codes.SIGMOID, 0.0, 0.0, 0.0), (codes.SOFTSIGN, 0.0, 0.0, 0.0),
])
def test_is_monotone_says_whether_the_activation_never_decreases(act, slope, alpha, lam):
    z = np.linspace(-4.0, 4.0, 81).reshape(1, -1)  # (0.0 among them)
    a = np.empty_like(z)
    REFERENCE.activation_forward(a, z, act, slope, alpha, lam)
    assert codes.is_monotone(act, slope, alpha, lam) == bool(np.all(np.diff(a[0]) >= 0))


def test_is_monotone_is_false_for_softmax_and_codes_without_a_kernel():
    assert not codes.is_monotone(codes.SOFTMAX, 0.0, 0.0, 0.0)
    for act in (4, 8, 9, 13, -1):  # PReLU, RELUMax, LinearMax: DSSTNE's stubs; and unknown
        assert not codes.is_monotone(act, 0.0, 0.0, 0.0)
