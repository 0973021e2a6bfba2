"""Ranking metrics for top-k recommendations against held-out items.

Every function takes the recommended items per user (a list of item lists, best first; items
may be indices or labels, anything hashable) and the held-out items per user (a list of sets),
and averages over the users that have at least one held-out item; users without are skipped
and counted.

Definitions, for one user with held-out set T, the first k recommendations and m = min(k, |T|):

* precision@k = hits / k (a list shorter than k counts its missing ranks as misses);
* recall@k = hits / m, so that a perfect list scores 1 even when |T| > k;
* NDCG@k = DCG / IDCG with DCG = sum over hits at rank r (1-based) of 1 / log2(r + 1) and
  IDCG = sum over r = 1..m of 1 / log2(r + 1), the DCG of a perfect list. DSSTNE's encoder
  (``Command: "Predict"``, spec 8.6 and quirk 10.31) summed IDCG over all |T| items, not
  truncated at k, which underestimates NDCG for users with more than k held-out items;
* MAP@k = (sum over hits at rank r of hits-so-far / r) / m.

An item repeated in a list counts as a hit only at its first position.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import accumulate, islice


@dataclass(frozen=True)
class RankingMetrics:
    k: int
    precision: float
    recall: float  # normalised by min(k, held-out), so a perfect list scores 1
    ndcg: float
    map: float
    users: int
    skipped: int

    def as_dict(self) -> dict:
        return {"k": self.k, "precision": self.precision, "recall": self.recall,
                "ndcg": self.ndcg, "map": self.map, "users": self.users, "skipped": self.skipped}


def ranking_metrics(recommended: list, held_out: list, k: int) -> RankingMetrics:
    """precision@k, recall@k, NDCG@k and MAP@k averaged over users with held-out items.

    ``recommended[u]`` is user u's ranking (best first), ``held_out[u]`` their held-out items;
    both lists must have the same length. Plain Python: with k in the tens, a user costs a few
    microseconds, far less than one NumPy call.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    if len(recommended) != len(held_out):
        raise ValueError(f"{len(recommended)} recommendation lists for {len(held_out)} "
                         "held-out sets; give one of each per user")
    # Ranks beyond the longest list and the largest held-out set are never looked at: a k of
    # a billion (evaluate -k) needs no billion discounts.
    depth = min(k, max((max(len(recs), len(truth)) for recs, truth in
                        zip(recommended, held_out, strict=True)), default=0))
    discounts = [1.0 / math.log2(rank + 2) for rank in range(depth)]
    ideal = list(accumulate(discounts))  # ideal[m - 1]: the DCG of m hits at ranks 1..m
    p = r = n = ap_sum = 0.0
    users = skipped = 0
    for recs, truth in zip(recommended, held_out, strict=True):
        if not truth:
            skipped += 1
            continue
        if not isinstance(truth, (set, frozenset, dict)):
            truth = set(truth)
        users += 1
        m = min(k, len(truth))
        hits = 0
        dcg = ap = 0.0
        found = None
        for rank, item in enumerate(islice(recs, depth)):  # (depth: k, or past every list)
            if item in truth:
                if found is None:
                    found = {item}
                elif item in found:
                    continue
                else:
                    found.add(item)
                hits += 1
                dcg += discounts[rank]
                ap += hits / (rank + 1)
        p += hits / k
        r += hits / m
        n += dcg / ideal[m - 1]
        ap_sum += ap / m
    div = max(users, 1)
    return RankingMetrics(k=k, precision=p / div, recall=r / div, ndcg=n / div,
                          map=ap_sum / div, users=users, skipped=skipped)
