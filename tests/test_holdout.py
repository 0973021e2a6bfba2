"""destiny.holdout.prepare_split: the work files of a held-out split are written atomically."""

from __future__ import annotations

import numpy as np
import pytest

from destiny import synthetic
from destiny.holdout import popularity_metrics, prepare_split, split_holdout
from destiny.io import dataset, ratings

WORK_FILES = {"ratings.txt", "features", "samples", "all.nc", "gl_input.nc", "gl_output.nc"}


@pytest.fixture
def csv(tmp_path):
    path = tmp_path / "ratings.csv"
    synthetic.write_ratings_csv(path, synthetic.generate_ratings(users=60, items=40,
                                                                 mean_per_user=8, seed=2))
    return path


def listed(work) -> set[str]:
    return {p.name for p in work.iterdir()}


def left_by_a_stop(csv, tmp_path) -> set[str]:
    """The files a split leaves in its work directory when a step patched to raise
    KeyboardInterrupt stops it."""
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(KeyboardInterrupt):
        prepare_split(csv, work)
    return listed(work)


def test_the_split_writes_its_work_files_and_nothing_else(csv, tmp_path):
    """... and splits all.nc with its own fraction and seed (not the defaults 0.2 and 1)."""
    work = tmp_path / "work"
    work.mkdir()
    split = prepare_split(csv, work, fraction=0.5, seed=3)
    assert listed(work) == WORK_FILES  # (no temporary file left)
    assert dataset.read_dataset(split.input_nc).indptr.tolist() == split.train_indptr.tolist()
    full = dataset.read_dataset(work / "all.nc")
    indptr, indices, held = split_holdout(full.indptr, full.indices, 0.5, 3)
    assert split.held == held and split.train_indices.tolist() == indices.tolist()


def test_a_run_stopped_while_it_writes_the_text_leaves_no_text(csv, tmp_path, monkeypatch):
    """A partial ratings.txt used to stay, looking like a whole one (a stop, a full disk)."""
    convert = ratings.convert_ratings

    def stopped(src, out, **options):
        convert(src, out, **options)  # (all of it written, not yet in place)
        out.flush()
        raise KeyboardInterrupt

    monkeypatch.setattr(ratings, "convert_ratings", stopped)
    assert left_by_a_stop(csv, tmp_path) == set()


def test_a_run_stopped_while_it_writes_the_datasets_leaves_neither(csv, tmp_path, monkeypatch):
    """gl_input.nc and gl_output.nc go into place together, once both are whole: a stop as the
    second is written used to leave the first, and the second cut short."""
    write = dataset.write_dataset

    def stopped(path, ds, *args, **kwargs):
        write(path, ds, *args, **kwargs)
        if ds.name == "gl_output":
            raise KeyboardInterrupt

    monkeypatch.setattr(dataset, "write_dataset", stopped)
    assert left_by_a_stop(csv, tmp_path) == WORK_FILES - {"gl_input.nc", "gl_output.nc"}


@pytest.mark.parametrize("fraction", [0.2, 0.9])
def test_every_row_keeps_an_item_for_training(fraction):
    """A row of two items at fraction 0.9 (round(1.8) = 2) used to give both to the held-out
    set, leaving a user with nothing to recommend from; a row of one keeps it."""
    indptr = np.array([0, 2, 3, 13])
    indices = np.arange(13)
    train_indptr, train_indices, held = split_holdout(indptr, indices, fraction, seed=4)
    kept = np.diff(train_indptr)
    assert kept.min() >= 1 and kept[1] == 1 and held[1] == set()
    assert [len(h) for h in held] == [min(round(n * fraction), n - 1) if n >= 2 else 0
                                      for n in np.diff(indptr)]
    for r, h in enumerate(held):  # each item in exactly one part
        row = set(train_indices[train_indptr[r]:train_indptr[r + 1]].tolist())
        assert row.isdisjoint(h) and row | h == set(indices[indptr[r]:indptr[r + 1]].tolist())


def test_split_draws_each_row_from_one_seeded_generator():
    """The split's specification, the slow and obvious way (as scripts/split_holdout.py draws
    a line's features): one generator for the whole split, each row in turn drawing
    held_out_count of its positions without replacement; the held-out sets hold the items at
    those positions (numbers unlike the positions here), the training part the rest in order."""
    from destiny.holdout import held_out_count

    rng = np.random.default_rng(0)
    rows = [rng.choice(1000, size=n, replace=False) + 1000 for n in (5, 0, 1, 2, 9, 40, 3, 17)]
    indptr = np.concatenate(([0], np.cumsum([len(r) for r in rows]))).astype(np.int64)
    indices = np.concatenate(rows).astype(np.int32)
    for fraction, seed in ((0.2, 1), (0.5, 7), (0.9, 3)):
        draw = np.random.default_rng(seed)
        want_held, want_train = [], []
        for row in rows:
            out = set(draw.choice(len(row), size=held_out_count(len(row), fraction),
                                  replace=False).tolist())
            want_held.append({int(row[p]) for p in out})
            want_train.append([int(x) for p, x in enumerate(row) if p not in out])
        train_indptr, train_indices, held = split_holdout(indptr, indices, fraction, seed)
        assert held == want_held
        assert [train_indices[a:b].tolist() for a, b in zip(train_indptr[:-1], train_indptr[1:],
                                                           strict=True)] == want_train


def _popularity_by_top_k(indptr, indices, held, n_items, k):
    """The baseline as this module first computed it (predict's top_k over every user's copy
    of the counts), kept as the oracle of the ranking now shared with evaluate --popularity."""
    from destiny.metrics import ranking_metrics
    from destiny.predict import top_k

    popularity = np.bincount(indices, minlength=n_items).astype(np.float64)
    scores = np.broadcast_to(popularity, (len(indptr) - 1, n_items))
    items, _ = top_k(scores, k, exclude_indptr=indptr, exclude_indices=indices)
    return ranking_metrics(items.tolist(), held, k)


@pytest.mark.parametrize("seed", range(4))
def test_popularity_metrics_are_as_before(seed):
    """Rows of popular-skewed items (many ties) with no item twice on a row, as a split's are
    (ratings.csv has no repeated rating): the same metrics for every k, ties and all."""
    rng = np.random.default_rng(seed)
    n_items = int(rng.integers(3, 40))
    weights = 1.0 / np.arange(1, n_items + 1)
    rows = [rng.choice(n_items, size=int(rng.integers(0, n_items)), replace=False,
                       p=weights / weights.sum()) for _ in range(int(rng.integers(1, 60)))]
    indptr = np.concatenate(([0], np.cumsum([len(r) for r in rows]))).astype(np.int64)
    indices = np.concatenate(rows).astype(np.int32)
    held = [set(rng.integers(0, n_items, 3).tolist()) for _ in rows]
    for k in (1, 2, 5, n_items - 1, n_items, n_items + 7):
        assert (popularity_metrics(indptr, indices, held, n_items, k)
                == _popularity_by_top_k(indptr, indices, held, n_items, k)), k


def test_popularity_counts_rows_so_an_item_repeated_on_a_row_counts_once():
    """Popularity is the number of rows listing an item (DSSTNE text keeps a repeated feature,
    quirk 10.5): item 0 listed three times on one row is less popular than item 1, on two rows.
    By hand, for a third row that lists neither: [1, 0] (1 on 2 rows, then 0 and 2 on 1, the
    tie to the lower number)."""
    from destiny.holdout import popularity_lists

    indptr = np.array([0, 3, 5, 6])
    indices = np.array([0, 0, 0, 1, 2, 1])
    lists = popularity_lists(indptr, indices, 4, 2, [None, 2])
    assert [list(x) for x in lists] == [[1, 0], [0, 2]]


def test_a_network_is_scored_on_unseen_items_without_padding_units():
    """score_network ranks as ``predict -r X -f X`` does: each user's training items and the
    output units past the index's items (padding) are never recommended. A Linear output of
    biases alone (0.4, 0.3, 0.2, 0.1 for items 0..3; 0.9, 0.8 for padding units 4, 5), k = 1:
    user 0 (trained on 0, held out 1) gets 1, a hit; user 1 (trained on 1, 2, held out 3)
    gets 0, a miss. By hand: precision, recall, NDCG and MAP 1/2."""
    from destiny.holdout import SampleSplit, score_network
    from destiny.kernels import get_backend
    from destiny.netdef import parse_netdef
    from destiny.network import Network

    nd = parse_netdef({"ErrorFunction": "L2", "Layers": [
        {"Name": "Input", "Kind": "Input", "N": 6, "DataSet": "gl_input", "Sparse": True},
        {"Name": "Output", "Kind": "Output", "N": 6, "DataSet": "gl_output", "Source": "Input",
         "Activation": "Linear"}]})
    net = Network(nd, get_backend("cpu"))
    net.initialize(1)
    (connection,) = net.connections
    connection.W[:] = 0.0
    connection.b[:] = np.float32([0.4, 0.3, 0.2, 0.1, 0.9, 0.8])
    split = SampleSplit(None, None, None, 4, np.array([0, 1, 3], np.int64),
                        np.array([0, 1, 2], np.int32), [{1}, {3}])
    metrics = score_network(net, split, 1)
    assert (metrics.users, metrics.skipped) == (2, 0)
    assert (metrics.precision, metrics.recall, metrics.ndcg, metrics.map) == (0.5,) * 4


def test_a_recipe_s_values_are_read_as_booleans_integers_or_floats():
    """evaluate_recipe's 'optimizer key=value ...': true/false in any case are booleans,
    whole numbers integers, the rest floats."""
    from destiny.holdout import recipe_value

    assert [recipe_value(t) for t in ("true", "False", "TRUE", "3", "0.5", "1e-3")] == [
        True, False, True, 3, 0.5, 0.001]
    assert type(recipe_value("3")) is int and type(recipe_value("true")) is bool


@pytest.mark.parametrize("recipe, optimizer, settings", [
    ("default", "adam", {"alpha": 0.01, "mu": 0.9}),
    ("", "adam", {"alpha": 0.01, "mu": 0.9}),
    ("default alpha=0.002", "adam", {"alpha": 0.002, "mu": 0.9}),
    ("momentum alpha=0.05 mu=0.8", "momentum", {"alpha": 0.05, "mu": 0.8}),
])
def test_a_recipe_trains_its_optimizer_and_settings(recipe, optimizer, settings, monkeypatch):
    """evaluate_recipe's 'optimizer key=value ...' ('default': the default optimizer, adam,
    with its own defaults) reaches the training run with the given epochs and batch, on the
    split's input and output datasets (fit stubbed: what it was given is the point)."""
    import destiny.fit
    from destiny.holdout import SampleSplit, evaluate_recipe

    given = {}

    def fit(**kwargs):
        given.update(kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(destiny.fit, "fit", fit)
    split = SampleSplit("work", "in.nc", "out.nc", 4, None, None, None)
    with pytest.raises(KeyboardInterrupt):
        evaluate_recipe(split, "config.json", recipe, epochs=3, batch=7, k=10)
    cfg = given["cfg"]
    assert (cfg.optimizer, cfg.epochs, cfg.batch) == (optimizer, 3, 7)
    assert {key: getattr(cfg, key) for key in settings} == settings
    assert (given["config_path"], given["input_path"], given["output_path"]) == (
        "config.json", "in.nc", "out.nc")
