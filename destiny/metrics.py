"""Ranking metrics for top-k recommendations against held-out items.

Every function takes the recommended items per user (a list of item-index lists, best first)
and the held-out items per user (a list of sets), and averages over the users that have at
least one held-out item; users without are skipped and counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
    """precision@k, recall@k, NDCG@k and MAP@k averaged over users with held-out items."""
    discounts = 1.0 / np.log2(np.arange(2, k + 2))
    p = r = n = m = 0.0
    users = skipped = 0
    for recs, truth in zip(recommended, held_out):
        if not truth:
            skipped += 1
            continue
        users += 1
        hits = np.array([item in truth for item in list(recs)[:k]], dtype=bool)
        h = int(hits.sum())
        p += h / k
        r += h / min(k, len(truth))
        ideal = discounts[: min(k, len(truth))].sum()
        n += float(discounts[: len(hits)][hits].sum()) / ideal
        if h:
            precision_at_hits = np.cumsum(hits)[hits] / (np.flatnonzero(hits) + 1)
            m += float(precision_at_hits.sum()) / min(k, len(truth))
    div = max(users, 1)
    return RankingMetrics(k=k, precision=p / div, recall=r / div, ndcg=n / div, map=m / div,
                          users=users, skipped=skipped)
