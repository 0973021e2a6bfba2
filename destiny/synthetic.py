"""Synthetic recommendation data with a known structure.

Items have a power-law (Zipf-like) popularity, and every user draws most of their items from
one of a few latent taste clusters. A popularity ranking therefore gets the head of the
distribution right, while a model that learns the clusters can also rank the long tail: the
gap between the two is what the quality tests and the demo measure.

Everything is vectorised with NumPy, so MovieLens-20M-sized data (138,493 users, 20 million
ratings) takes seconds, and the output depends only on the parameters and the seed.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator, TextIO

import numpy as np

# MovieLens-20M's shape (ratings.csv of ml-20m): the benchmark default.
ML20M_USERS = 138_493
ML20M_ITEMS = 27_278
ML20M_MEAN_PER_USER = 144.4

# Timestamps start at 1e9 (September 2001) so that all have ten digits, as in MovieLens.
_T0 = 1_000_000_000
_T1 = 1_420_070_400


@dataclass(frozen=True)
class Ratings:
    """Raw ratings sorted by user, then item (the order of MovieLens' ratings.csv).

    ``users`` and ``items`` hold 1-based ids; ``ratings`` are in half stars (0.5 to 5.0);
    ``timestamps`` are Unix seconds, increasing within a user in draw order. ``asked``: the
    ratings the users' drawn counts came to; fewer are drawn where popularity is so
    concentrated (a high ``zipf``) that heavy users run out of distinct items to find.
    """

    users: np.ndarray
    items: np.ndarray
    ratings: np.ndarray
    timestamps: np.ndarray
    asked: int = 0

    def __len__(self) -> int:
        return len(self.users)


def generate_ratings(
    users: int = ML20M_USERS,
    items: int = ML20M_ITEMS,
    mean_per_user: float = ML20M_MEAN_PER_USER,
    clusters: int = 8,
    zipf: float = 1.0,
    affinity: float = 30.0,
    seed: int = 0,
) -> Ratings:
    """Draw a ratings table.

    Parameters
    ----------
    users, items : number of users and items; ids run from 1.
    mean_per_user : mean number of distinct items per user (log-normal spread, at least 2).
    clusters : number of latent taste clusters; each item has one home cluster.
    zipf : popularity exponent: item of popularity rank r has weight 1 / (r + 1) ** zipf.
    affinity : how much more likely a user is to pick an item of their own cluster.
    seed : the only source of randomness.
    """
    if users < 1 or items < 2 or clusters < 1:
        raise ValueError("need users >= 1, items >= 2 and clusters >= 1")
    if not 1 <= mean_per_user <= items / 2:
        raise ValueError(f"mean_per_user must lie in [1, items / 2 = {items / 2:g}]")
    rng = np.random.default_rng(seed)

    # Popularity ranks are shuffled over item ids so that id order says nothing.
    popularity = 1.0 / (rng.permutation(items) + 1.0) ** zipf
    home = rng.integers(0, clusters, size=items)
    at_home = home[None, :] == np.arange(clusters)[:, None]
    weights = popularity[None, :] * (1.0 + affinity * at_home)
    cdf = np.cumsum(weights, axis=1)
    cdf /= cdf[:, -1:]
    stacked_cdf = (cdf + np.arange(clusters)[:, None]).ravel()

    cluster_of = rng.integers(0, clusters, size=users)
    sigma = 0.8
    counts = rng.lognormal(np.log(mean_per_user) - sigma**2 / 2, sigma, size=users)
    counts = np.clip(np.rint(counts), 2, items // 2).astype(np.int64)

    # Draw with replacement until every user has `count` distinct items (popular items
    # repeat, so one round falls short), then keep each user's first `count` in draw order.
    key = np.empty(0, dtype=np.int64)
    first = np.empty(0, dtype=np.int64)
    need = counts.copy()
    drawn = 0
    for attempt in range(6):  # a heavy user of a concentrated cluster may stay a little short
        short = np.flatnonzero(need > 0)
        if len(short) == 0:
            break
        extra = 1.3 * 2**attempt
        user_of_draw = np.repeat(short, np.ceil(need[short] * extra).astype(np.int64) + 2)
        u = rng.random(len(user_of_draw))
        # One search over the clusters' CDFs laid end to end, cluster c shifted by c.
        c = cluster_of[user_of_draw]
        item_of_draw = np.searchsorted(stacked_cdf, u + c, side="right") - c * items
        np.clip(item_of_draw, 0, items - 1, out=item_of_draw)
        key = np.concatenate([key, user_of_draw * items + item_of_draw])
        first = np.concatenate([first, drawn + np.arange(len(user_of_draw))])
        drawn += len(user_of_draw)
        key, pos = np.unique(key, return_index=True)
        first = first[pos]
        need = counts - np.bincount(key // items, minlength=users)
    order = np.lexsort((first, key // items))
    key, first = key[order], first[order]
    user = key // items
    starts = np.searchsorted(user, np.arange(users))
    rank = np.arange(len(key)) - starts[user]
    keep = rank < counts[user]
    key, first, user = key[keep], first[keep], user[keep]
    item = key % items

    own = home[item] == cluster_of[user]
    stars = rng.normal(np.where(own, 4.0, 3.0), 1.0)
    ratings = np.clip(np.rint(stars * 2) / 2, 0.5, 5.0)

    start = rng.integers(_T0, _T1, size=users)
    gaps = rng.exponential(3600.0, size=len(key)).astype(np.int64) + 1
    # Time follows draw order within a user: cumulative gaps in `first` order.
    by_draw = np.lexsort((first, user))
    t = np.empty(len(key), dtype=np.int64)
    csum = np.cumsum(gaps[by_draw])
    seg_start = np.searchsorted(user[by_draw], np.arange(users))
    base = np.where(seg_start > 0, csum[np.maximum(seg_start - 1, 0)], 0)
    t[by_draw] = start[user[by_draw]] + csum - base[user[by_draw]]

    order = np.lexsort((item, user))
    return Ratings(
        users=(user[order] + 1).astype(np.int64),
        items=(item[order] + 1).astype(np.int64),
        ratings=ratings[order].astype(np.float32),
        timestamps=t[order],
        asked=int(counts.sum()),
    )


def _format_rows(columns: list[np.ndarray], sep: str) -> str:
    template = sep.join(["%s"] * len(columns)) + "\n"
    return "".join(template % row for row in zip(*(c.tolist() for c in columns), strict=True))


@contextlib.contextmanager
def _text_out(target) -> Iterator[TextIO]:
    """``target`` if it is an open text file (stdout: ``scripts/synthetic_data.py -o -``),
    else the file at path ``target``, opened for writing."""
    if hasattr(target, "write"):
        yield target
    else:
        with open(target, "w", encoding="ascii", newline="\n") as f:
            yield f


def write_ratings_csv(path, r: Ratings, *, chunk: int = 1 << 20) -> None:
    """Write ``r`` as MovieLens' ratings.csv: ``userId,movieId,rating,timestamp`` rows.
    ``path``: a path, or an open text file."""
    stars = np.char.mod("%.1f", np.arange(1, 11) / 2)  # '0.5' ... '5.0'
    with _text_out(path) as f:
        f.write("userId,movieId,rating,timestamp\n")
        for lo in range(0, len(r), chunk):
            hi = lo + chunk
            rating_text = stars[(r.ratings[lo:hi] * 2).astype(np.int64) - 1]
            f.write(_format_rows(
                [r.users[lo:hi], r.items[lo:hi], rating_text, r.timestamps[lo:hi]], ","))


def write_ratings_dsstne(path, r: Ratings, *, value: str = "timestamp") -> None:
    """Write ``r`` directly as DSSTNE text, one user a line, as the converter would.

    ``value`` is ``timestamp`` (DSSTNE's MovieLens example), ``rating`` or ``none``; ``path``:
    a path, or an open text file.
    """
    starts = np.flatnonzero(np.r_[True, r.users[1:] != r.users[:-1]])
    ends = np.r_[starts[1:], len(r)]
    items = r.items.astype(str)
    if value == "timestamp":
        tokens = np.char.add(np.char.add(items, ","), r.timestamps.astype(str))
    elif value == "rating":
        tokens = np.char.add(np.char.add(items, ","), np.char.mod("%.1f", r.ratings))
    elif value == "none":
        tokens = items
    else:
        raise ValueError(f"value must be timestamp, rating or none, not {value!r}")
    tokens = tokens.tolist()
    with _text_out(path) as f:
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            f.write(f"{r.users[s]}\t{':'.join(tokens[s:e])}\n")
