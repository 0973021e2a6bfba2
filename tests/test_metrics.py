"""ranking_metrics on small cases whose values are worked out by hand in the comments."""

from __future__ import annotations

import math

import pytest

from destiny.metrics import ranking_metrics

L3 = math.log2(3)  # the discount of rank 2 is 1/log2(2 + 1); rank 1 is 1/log2(2) = 1


def test_one_hit_at_rank_two():
    # recs [a, b, c, d], held-out {b, d, e}, k = 3: the top 3 are a, b, c; one hit (b) at rank 2.
    # precision = 1/3; recall = 1 / min(3, 3) = 1/3
    # DCG = 1/log2(3); IDCG (3 ranks) = 1 + 1/log2(3) + 1/log2(4) = 1 + 1/log2(3) + 1/2
    # AP = (precision at the hit = 1/2) / min(3, 3) = 1/6
    m = ranking_metrics([["a", "b", "c", "d"]], [{"b", "d", "e"}], 3)
    assert m.precision == pytest.approx(1 / 3)
    assert m.recall == pytest.approx(1 / 3)
    assert m.ndcg == pytest.approx((1 / L3) / (1 + 1 / L3 + 1 / 2))
    assert m.map == pytest.approx((1 / 2) / 3)
    assert (m.k, m.users, m.skipped) == (3, 1, 0)


def test_two_hits_and_truncated_ideal():
    # recs [b, x, d], held-out {b, d, e, f, g}, k = 3: hits at ranks 1 and 3.
    # precision = 2/3; recall = 2 / min(3, 5) = 2/3
    # DCG = 1 + 1/2; IDCG is truncated at min(3, 5) = 3 ranks: 1 + 1/log2(3) + 1/2
    # (DSSTNE's encoder summed all 5 ranks, quirk 10.31)
    # AP = (1/1 + 2/3) / 3 = 5/9
    m = ranking_metrics([["b", "x", "d"]], [{"b", "d", "e", "f", "g"}], 3)
    assert m.precision == pytest.approx(2 / 3)
    assert m.recall == pytest.approx(2 / 3)
    assert m.ndcg == pytest.approx(1.5 / (1 + 1 / L3 + 0.5))
    assert m.map == pytest.approx(5 / 9)


def test_k_larger_than_the_list():
    # recs [x, b], held-out {b}, k = 5: one hit at rank 2; the 3 missing ranks are misses.
    # precision = 1/5; recall = 1 / min(5, 1) = 1; DCG = 1/log2(3), IDCG (1 rank) = 1
    # AP = (1/2) / 1 = 1/2
    m = ranking_metrics([["x", "b"]], [{"b"}], 5)
    assert m.precision == pytest.approx(1 / 5)
    assert m.recall == pytest.approx(1.0)
    assert m.ndcg == pytest.approx(1 / L3)
    assert m.map == pytest.approx(0.5)


@pytest.mark.parametrize("recs, truth, k", [
    (["a", "b"], {"a", "b"}, 2),
    (["a", "b", "c"], {"a", "b", "c", "d", "e"}, 3),  # more held-out items than k
    ([3, 1, 2], {1, 2, 3}, 3),                         # indices work as well as labels
])
def test_a_perfect_list_scores_one(recs, truth, k):
    m = ranking_metrics([recs], [truth], k)
    assert (m.precision, m.recall, m.ndcg, m.map) == pytest.approx((1.0, 1.0, 1.0, 1.0))


def test_users_without_held_out_items_are_skipped_and_the_rest_averaged():
    # user 1: recs [a], held-out {a}, k = 2: precision 1/2, recall 1, NDCG 1, AP 1
    # user 2: no held-out items: skipped
    # user 3: recs [], held-out {z}: all 0
    # averages over 2 users: precision 1/4, recall 1/2, NDCG 1/2, MAP 1/2
    m = ranking_metrics([["a"], ["a", "b"], []], [{"a"}, set(), {"z"}], 2)
    assert (m.users, m.skipped) == (2, 1)
    assert m.precision == pytest.approx(1 / 4)
    assert (m.recall, m.ndcg, m.map) == pytest.approx((0.5, 0.5, 0.5))


def test_no_users_gives_zeros():
    m = ranking_metrics([[]], [set()], 10)
    assert (m.users, m.skipped, m.precision, m.ndcg) == (0, 1, 0.0, 0.0)


def test_a_repeated_item_is_a_hit_once():
    # recs [b, b], held-out {b, c}, k = 2: one hit at rank 1 (the second b is a miss).
    # precision 1/2, recall 1/2, NDCG = 1 / (1 + 1/log2(3)), AP = 1/2
    m = ranking_metrics([["b", "b"]], [["b", "c"]], 2)  # held-out as a list is accepted too
    assert (m.precision, m.recall, m.map) == pytest.approx((0.5, 0.5, 0.5))
    assert m.ndcg == pytest.approx(1 / (1 + 1 / L3))


def test_bad_arguments():
    with pytest.raises(ValueError, match="k must be"):
        ranking_metrics([["a"]], [{"a"}], 0)
    with pytest.raises(ValueError, match="held-out sets"):
        ranking_metrics([["a"], ["b"]], [{"a"}], 1)


def test_a_huge_k_costs_only_the_ranks_there_are():
    """evaluate -k 1000000000 was killed for memory: a discount for every rank up to k."""
    got = ranking_metrics([["a", "b", "c"]], [{"b", "z"}], 10**9)
    assert got.precision == 1 / 10**9 and got.recall == 0.5
    assert got.ndcg == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))


def test_a_short_list_is_held_to_the_ideal_of_m_ranks():
    # recs [b], held-out {b, c}, k = 2: one hit at rank 1 of a list of 1. m = min(2, 2) = 2:
    # IDCG is that of 2 hits, 1 + 1/log2(3), whatever the list's length, so NDCG < 1;
    # precision 1/2, recall 1/2, AP = 1 / 2.
    m = ranking_metrics([["b"]], [{"b", "c"}], 2)
    assert m.ndcg == pytest.approx(1 / (1 + 1 / L3))
    assert (m.precision, m.recall, m.map) == pytest.approx((0.5, 0.5, 0.5))


def test_a_held_out_list_counts_a_repeated_item_once():
    # recs [b, x], held-out given as the list [b, b] (the set {b}), k = 2: m = min(2, 1) = 1.
    # One hit at rank 1: precision 1/2, recall 1/1, NDCG 1/1, AP (1/1)/1 = 1.
    m = ranking_metrics([["b", "x"]], [["b", "b"]], 2)
    assert (m.precision, m.recall, m.ndcg, m.map) == pytest.approx((0.5, 1.0, 1.0, 1.0))


def test_no_users_at_all_gives_zeros():
    m = ranking_metrics([], [], 5)
    assert (m.users, m.skipped, m.precision, m.recall, m.ndcg, m.map) == (0, 0, 0, 0, 0, 0)
