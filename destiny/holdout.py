"""Held-out splits and the popularity baseline, for measuring a model's quality.

A user's items are split at random into a training part and a held-out part; a model sees
the training part and is scored on how many held-out items it ranks in its top k, against a
ranking of items by training popularity: the number of users (rows) listing an item, ties
broken by the lower item number. ``evaluate --popularity`` ranks a training file's items by
the same rule (``popularity_lists``), numbered in order of first appearance as
generate-netcdf numbers them.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice

import numpy as np
from numba import njit

from destiny.metrics import RankingMetrics, ranking_metrics
from destiny.sparse import drop_entries


def held_out_count(n: int, fraction: float) -> int:
    """How many of a row's ``n`` items a split holds out: ``fraction`` of them, rounded; none
    of a row with fewer than 2, and never all (a row with none left would be a user with
    nothing to recommend from)."""
    return min(int(round(n * fraction)), n - 1) if n >= 2 else 0


def split_holdout(indptr, indices, fraction: float, seed: int):
    """(train indptr, train indices, held-out sets): ``fraction`` of each row held out
    (``held_out_count``)."""
    rng = np.random.default_rng(seed)
    keep = np.ones(len(indices), dtype=bool)
    held = []
    for r in range(len(indptr) - 1):
        lo, hi = indptr[r], indptr[r + 1]
        n_out = held_out_count(int(hi - lo), fraction)
        out = lo + rng.choice(hi - lo, size=n_out, replace=False)
        keep[out] = False
        held.append(set(indices[out].tolist()))
    train_indptr, train_indices, _ = drop_entries(indptr, indices, None, keep)
    return train_indptr, train_indices, held


def popularity_metrics(indptr, indices, held, n_items: int, k: int) -> RankingMetrics:
    """The metrics of recommending the most popular unseen items to everyone."""
    lists = popularity_lists(indptr, indices, n_items, k, range(len(indptr) - 1))
    return ranking_metrics(lists, held, k)


def popularity_lists(indptr, indices, n_items: int, k: int, rows, labels=None) -> list[Unseen]:
    """Each of ``rows``' list of the ``k`` most popular items it does not list, best first.

    Popularity is the number of rows of the CSR ``indptr``/``indices`` listing an item; ties
    go to the lower item number. A row of ``rows`` that is None (a user without training
    items) gets the overall top k. Items are given as their numbers, or as ``labels[item]``.
    Each list is a sized iterable made as it is read (``Unseen``).
    """
    counts = _line_counts(indptr, indices, n_items)
    # A user's k best unseen items are among the first k + (items on their line) of the
    # ranking, so only that much of it, for the longest line, is kept (and labelled), once.
    most_seen = int(np.diff(indptr).max(initial=0))
    top = np.argsort(-counts, kind="stable")[:k + most_seen].tolist()  # (ties: lower number)
    ranking = Ranking(top, top if labels is None else [labels[i] for i in top], n_items)
    none = indices[:0]
    return [Unseen(ranking, none if row is None else indices[indptr[row]:indptr[row + 1]], k)
            for row in rows]


@dataclass(frozen=True)
class Ranking:
    """The head of the popularity ranking: item numbers, the names lists give them (the
    numbers, or labels), and how many items there are in all."""

    items: list[int]
    labels: list
    n_items: int


class Unseen:
    """One user's popularity list: the first ``k`` items of the ranking that ``seen`` (their
    training line's items) does not hold, made each time it is read. A list per user held
    users x k labels at once: with a large -k (up to 2^62), every item for every user."""

    __slots__ = ("ranking", "seen", "k")

    def __init__(self, ranking: Ranking, seen: np.ndarray, k: int):
        self.ranking, self.seen, self.k = ranking, seen, k

    def __len__(self) -> int:
        # (where the head is cut short, it holds at least k unseen items)
        return min(self.k, self.ranking.n_items - len(set(self.seen.tolist())))

    def __iter__(self):
        seen = set(self.seen.tolist())
        head = zip(self.ranking.items, self.ranking.labels, strict=True)
        return islice((label for item, label in head if item not in seen), self.k)


@njit(cache=True)
def _line_counts(indptr, indices, n_items):
    """The number of rows listing each item (an item repeated within a row counts once)."""
    counts = np.zeros(n_items, dtype=np.int64)
    last = np.full(n_items, -1, dtype=np.int64)
    for row in range(len(indptr) - 1):
        for j in range(indptr[row], indptr[row + 1]):
            item = indices[j]
            if last[item] != row:
                last[item] = row
                counts[item] += 1
    return counts


class SampleSplit:
    """A ratings file split for evaluation, with its training datasets on disk."""

    def __init__(self, work, input_nc, output_nc, n_items, train_indptr, train_indices, held):
        self.work, self.input_nc, self.output_nc = work, input_nc, output_nc
        self.n_items = n_items
        self.train_indptr, self.train_indices, self.held = train_indptr, train_indices, held

    def popularity(self, k: int) -> RankingMetrics:
        return popularity_metrics(self.train_indptr, self.train_indices, self.held,
                                  self.n_items, k)


def prepare_split(ratings_csv, work, *, fraction: float = 0.2, seed: int = 1) -> SampleSplit:
    """Ratings CSV -> DSSTNE text -> held-out split -> gl_input.nc / gl_output.nc in ``work``.

    Every work file is written atomically (io/atomic.py), as the commands write theirs: a run
    stopped part-way leaves each one whole or absent, never a partial file that would pass for
    a whole one.
    """
    import os

    from destiny.generate import generate_netcdf
    from destiny.io.atomic import atomic_outputs, text_output
    from destiny.io.dataset import SparseDataset, read_dataset, write_dataset
    from destiny.io.index import read_index
    from destiny.io.ratings import convert_ratings

    text = os.path.join(work, "ratings.txt")
    with text_output(text) as out:
        convert_ratings(ratings_csv, out)
    common = dict(input_path=text, feature_index=os.path.join(work, "features"),
                  sample_index=os.path.join(work, "samples"))
    generate_netcdf(output=os.path.join(work, "all.nc"), dataset_name="all", create=True, **common)
    full = read_dataset(os.path.join(work, "all.nc"))
    indptr, indices, held = split_holdout(full.indptr, full.indices, fraction, seed)
    names = ("gl_input", "gl_output")
    paths = [os.path.join(work, f"{name}.nc") for name in names]
    with atomic_outputs() as outputs:  # (both or neither)
        for name, path in zip(names, paths, strict=True):
            write_dataset(outputs.path(path), SparseDataset(
                name=name, width=full.width, indptr=indptr, indices=indices))
    n_items = len(read_index(common["feature_index"])[0])
    return SampleSplit(work, paths[0], paths[1], n_items, indptr, indices, held)


def evaluate_recipe(split: SampleSplit, config_path, recipe: str, *, epochs: int, batch: int,
                    k: int, backend: str = "cpu", tf32: bool = False) -> RankingMetrics:
    """Train ``recipe`` ('default' or 'optimizer key=value ...') and score it on the split.

    ``tf32`` as ``train --tf32`` and ``predict --tf32``: on the ``reference`` backend, the
    model of the GPU's TF32 products.
    """
    import os

    from destiny.fit import fit
    from destiny.io.checkpoint import load_weights
    from destiny.kernels import get_backend
    from destiny.network import Network
    from destiny.train import DEFAULT_OPTIMIZER, train_config

    words = recipe.split()
    optimizer = DEFAULT_OPTIMIZER if not words or words[0] == "default" else words[0]
    overrides = {key: recipe_value(value) for key, value in (w.split("=", 1) for w in words[1:])}
    cfg = train_config(optimizer, epochs=epochs, batch=batch, **overrides)
    network = os.path.join(split.work, f"net-{abs(hash(recipe))}.nc")
    fit(config_path=config_path, input_path=split.input_nc, output_path=split.output_nc,
        network_path=network, cfg=cfg, backend=backend, tf32=tf32, checkpoint_every=0,
        force=True)
    from destiny.io.network_file import read_network

    net = Network(read_network(network).netdef, get_backend(backend, tf32=tf32))
    load_weights(net, network)
    return score_network(net, split, k)


def score_network(net, split: SampleSplit, k: int) -> RankingMetrics:
    """Top-k of every user from their training items, seen items removed, against held-out."""
    from destiny.predict import queue_recommendations

    # As ``predict -r X -f X`` scores X (predict's own loop: top-k from the pre-activations
    # where that is exact and pays): each user's training items are the filter. The output
    # units past the index's items are padding.
    seen = (split.train_indptr, split.train_indices,
            np.zeros(len(split.train_indices), np.float32))
    recommended = []
    for _, items, _ in queue_recommendations(net, split.train_indptr, split.train_indices, k,
                                             layer=net.outputs[0], filter_csr=seen,
                                             n_items=split.n_items):
        recommended.extend(items.get().tolist())
    return ranking_metrics(recommended, split.held, k)


def recipe_value(text: str):
    """A recipe's ``key=value`` value: true or false, an int, else a float (ValueError if
    none): how ``evaluate_recipe`` reads it, and what a caller checking recipes first must
    read alike."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        return float(text)
