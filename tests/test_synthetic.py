"""The synthetic generator: deterministic, the requested shape, and learnable beyond popularity."""

from __future__ import annotations

import numpy as np
import pytest

from destiny import synthetic


@pytest.fixture(scope="module")
def ratings():
    return synthetic.generate_ratings(users=1500, items=400, mean_per_user=25, seed=7)


def test_deterministic(ratings):
    again = synthetic.generate_ratings(users=1500, items=400, mean_per_user=25, seed=7)
    other = synthetic.generate_ratings(users=1500, items=400, mean_per_user=25, seed=8)
    for name in ("users", "items", "ratings", "timestamps"):
        np.testing.assert_array_equal(getattr(ratings, name), getattr(again, name))
    assert not np.array_equal(ratings.items, other.items)


def test_shape_and_ranges(ratings):
    users, items = ratings.users, ratings.items
    assert users.min() == 1 and users.max() == 1500 and len(np.unique(users)) == 1500
    assert items.min() >= 1 and items.max() <= 400
    assert abs(len(ratings) / 1500 - 25) < 0.05 * 25
    key = users * 1000 + items
    assert np.all(np.diff(key) > 0)  # sorted by user then item, no repeated pair
    assert set(np.unique(ratings.ratings).tolist()) == {x / 2 for x in range(1, 11)}  # all
    assert np.all((ratings.timestamps >= 1e9) & (ratings.timestamps < 1e10))


def test_each_user_has_at_least_2_and_at_most_half_the_items():
    for mean, items in ((1, 100), (5, 10)):
        per_user = np.bincount(synthetic.generate_ratings(
            users=300, items=items, mean_per_user=mean, seed=7).users)[1:]
        assert per_user.min() >= 2 and per_user.max() <= items // 2, (mean, items)


def test_a_users_timestamps_follow_draw_order_from_a_start_before_2015(ratings):
    """Each user's own clock: a start in [1e9, 2015-01-01), then a gap of at least a second
    per rating, in the order the items were drawn (not by item id)."""
    users, t = ratings.users, ratings.timestamps
    order = np.lexsort((t, users))
    same_user = users[order][1:] == users[order][:-1]
    assert np.all(np.diff(t[order])[same_user] > 0)  # no two at the same second
    first = np.minimum.reduceat(t[order], np.flatnonzero(np.r_[True, ~same_user]))
    assert first.min() > 1_000_000_000 and first.max() < 1_420_070_400 + 10**6
    assert np.ptp(first) > 10 * 365 * 86400  # (the starts spread over the 13 years)
    by_item = [np.all(np.diff(t[users == u]) > 0) for u in range(1, 1501)]
    assert np.mean(by_item) < 0.05  # (1 user in 200: those few that drew in item order)


def test_zipf_sets_how_skewed_popularity_is():
    def top_decile_share(zipf):
        r = synthetic.generate_ratings(users=1500, items=400, mean_per_user=25, zipf=zipf,
                                       seed=7)
        counts = np.sort(np.bincount(r.items, minlength=401)[1:])[::-1]
        return counts[:40].sum() / counts.sum()

    assert top_decile_share(0.0) < 0.15 < 0.3 < top_decile_share(1.0) < 0.5 < top_decile_share(2.0)


def test_a_user_rates_their_own_clusters_items_a_star_higher():
    """Stars ~ N(4, 1) for an item of the user's cluster, N(3, 1) for another (rounded to half
    stars, clipped): one cluster, every item is the user's; four, drawn without affinity, one
    in four is."""
    one = synthetic.generate_ratings(users=500, items=200, mean_per_user=20, clusters=1, seed=3)
    four = synthetic.generate_ratings(users=500, items=200, mean_per_user=20, clusters=4,
                                      affinity=0.0, seed=3)
    assert 3.85 < one.ratings.mean() < 4.0 and 3.15 < four.ratings.mean() < 3.3


def test_popularity_is_skewed(ratings):
    counts = np.sort(np.bincount(ratings.items, minlength=401)[1:])[::-1]
    top = counts[: len(counts) // 10].sum() / counts.sum()
    assert top > 0.3  # the top 10% of items hold far more than 10% of the ratings


def test_item_ids_say_nothing_of_popularity_or_cluster(ratings):
    """Popularity ranks and home clusters are drawn over the ids: the most rated tenth of the
    items spreads over all ids, and a user's items share no id residue (mod the 8 clusters)
    more than chance and popularity make them."""
    counts = np.bincount(ratings.items, minlength=401)[1:]
    top = np.argsort(-counts)[:40] + 1
    assert 120 < np.median(top) < 280, np.median(top)
    shared = [np.bincount(ratings.items[ratings.users == u] % 8, minlength=8).max()
              / np.sum(ratings.users == u) for u in range(1, 1501)]
    assert np.mean(shared) < 0.4, np.mean(shared)  # (0.27; a cluster per residue: 0.8)


def test_clusters_make_it_learnable(ratings):
    # Hold out 20% of each user's items. Item-item co-occurrence must find them clearly
    # better than a popularity ranking: the structure a model is meant to learn.
    rng = np.random.default_rng(0)
    x = np.zeros((1500, 400))
    x[ratings.users - 1, ratings.items - 1] = 1
    held = (rng.random(x.shape) < 0.2) & (x > 0)
    train = x - held

    def recall_at_10(scores):
        scores = np.where(train > 0, -np.inf, scores)
        top = np.argsort(-scores, axis=1)[:, :10]
        hits = np.take_along_axis(held, top, axis=1).sum(axis=1)
        n = held.sum(axis=1)
        ok = n > 0
        return float(np.mean(hits[ok] / np.minimum(n[ok], 10)))

    popularity = recall_at_10(np.broadcast_to(train.sum(axis=0), x.shape))
    cooccurrence = recall_at_10(train @ (train.T @ train))
    assert cooccurrence > 1.3 * popularity, (cooccurrence, popularity)


def test_csv_and_dsstne_writers(tmp_path):
    r = synthetic.generate_ratings(users=3, items=10, mean_per_user=3, seed=1)
    synthetic.write_ratings_csv(tmp_path / "r.csv", r)
    lines = (tmp_path / "r.csv").read_text().splitlines()
    assert lines[0] == "userId,movieId,rating,timestamp" and len(lines) == len(r) + 1
    u, i, stars, t = lines[1].split(",")
    assert (int(u), int(i), float(stars), int(t)) == (
        r.users[0], r.items[0], r.ratings[0], r.timestamps[0])
    synthetic.write_ratings_dsstne(tmp_path / "r.txt", r, value="none")
    first = (tmp_path / "r.txt").read_text().splitlines()[0]
    mine = r.items[r.users == 1].tolist()
    assert first == "1\t" + ":".join(map(str, mine))


def test_csv_is_written_whole_chunk_by_chunk(tmp_path):
    r = synthetic.generate_ratings(users=3, items=10, mean_per_user=3, seed=1)
    synthetic.write_ratings_csv(tmp_path / "whole.csv", r)
    synthetic.write_ratings_csv(tmp_path / "chunked.csv", r, chunk=2)
    assert (tmp_path / "chunked.csv").read_text() == (tmp_path / "whole.csv").read_text()


@pytest.mark.parametrize("kwargs, message", [
    ({"mean_per_user": 9}, r"mean_per_user must lie in \[1, items / 2 = 5\]"),
    ({"mean_per_user": 5.01}, "mean_per_user"),
    ({"mean_per_user": 0.99}, "mean_per_user"),
    ({"users": 0}, "need users >= 1"),
    ({"items": 1, "mean_per_user": 1}, "items >= 2"),
    ({"clusters": 0}, "clusters >= 1"),
])
def test_bad_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        synthetic.generate_ratings(**{"users": 10, "items": 10, "mean_per_user": 2, **kwargs})


def test_the_bounds_of_the_parameters_are_allowed():
    r = synthetic.generate_ratings(users=1, items=10, mean_per_user=5, clusters=1)
    assert len(r) >= 2
    assert len(synthetic.generate_ratings(users=1, items=2, mean_per_user=1)) == 1


# --- scripts/synthetic_data.py: written atomically, output errors refused before any work ------

def _script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "synthetic_data.py"
    spec = importlib.util.spec_from_file_location("synthetic_data_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


SMALL = ["--users", "20", "--items", "10", "--mean-per-user", "3", "--seed", "5"]


def _invoke(*args):
    from click.testing import CliRunner

    return CliRunner().invoke(_script(), [*map(str, args)])


def _run(*args):
    return _invoke(*args, *SMALL)


@pytest.mark.parametrize("fmt", ["csv", "dsstne"])
def test_script_writes_atomically(tmp_path, fmt):
    result = _run("-o", tmp_path / "r.out", "--format", fmt)
    assert result.exit_code == 0, result.output
    r = synthetic.generate_ratings(users=20, items=10, mean_per_user=3, seed=5)
    write = synthetic.write_ratings_csv if fmt == "csv" else synthetic.write_ratings_dsstne
    write(tmp_path / "direct", r)
    assert (tmp_path / "r.out").read_bytes() == (tmp_path / "direct").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["direct", "r.out"]  # no temporary


@pytest.mark.parametrize("fmt", ["csv", "dsstne"])
def test_script_writes_stdout_for_dash(tmp_path, fmt):
    """The script run as a program, with the installed package (no sys.path of its own):
    '-o -' writes the text to stdout, the summary to stderr, and no file."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "synthetic_data.py"
    result = subprocess.run([sys.executable, script, "-o", "-", "--format", fmt, *SMALL],
                            capture_output=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    r = synthetic.generate_ratings(users=20, items=10, mean_per_user=3, seed=5)
    write = synthetic.write_ratings_csv if fmt == "csv" else synthetic.write_ratings_dsstne
    write(tmp_path / "direct", r)
    assert result.stdout == (tmp_path / "direct").read_bytes()
    assert result.stderr.decode().startswith("wrote standard output: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["direct"]


def test_script_passes_every_parameter_on(tmp_path):
    result = _invoke("-o", tmp_path / "r.txt", "--users", 30, "--items", 12,
                              "--mean-per-user", 4, "--clusters", 3, "--zipf", 2, "--seed", 9,
                              "--format", "dsstne", "--value", "rating")
    assert result.exit_code == 0, result.output
    r = synthetic.generate_ratings(users=30, items=12, mean_per_user=4, clusters=3, zipf=2,
                                   seed=9)
    synthetic.write_ratings_dsstne(tmp_path / "direct", r, value="rating")
    assert (tmp_path / "r.txt").read_bytes() == (tmp_path / "direct").read_bytes()
    assert result.stderr == f"wrote {tmp_path / 'r.txt'}: {len(r):,} ratings from 30 users on " \
                            "12 items\n"


@pytest.mark.parametrize("args, text", [
    (["--users", "0"], "Invalid value for '--users': 0 is not in the range 1<=x<=2147483647"),
    (["--items", "1"], "Invalid value for '--items': 1 is not in the range 2<="),
    (["--clusters", "0"], "Invalid value for '--clusters': 0 is not in the range 1<="),
    (["--mean-per-user", "6"], "Invalid value for '--mean-per-user': 6 is more than half of "
                               "--items 10 (5); lower it or raise --items."),
    (["--mean-per-user", "0.5"], "Invalid value for '--mean-per-user': 0.5 is not in the range"),
    (["--seed", "-1"], "-1 is not in the range 0<="),
    # NumPy's 'Maximum allowed dimension exceeded', a usage error naming no flag
    (["--users", str(10**23)], f"Invalid value for '--users': {10**23} is not in the range"),
    (["--items", str(2**31)], "Invalid value for '--items': 2147483648 is not in the range"),
    # a NaN popularity: a file of one item per user, written (and 1e308 overflowed, with
    # NumPy's RuntimeWarning on stderr)
    (["--zipf", "nan"], "Invalid value for '--zipf': 'nan' is not a finite number"),
    (["--zipf", "1e308"], "Invalid value for '--zipf': 1e+308 is not in the range -30.0<=x<=30.0"),
    (["--mean-per-user", "inf"], "Invalid value for '--mean-per-user': 'inf' is not a finite"),
    # (ignored without a word: csv always has the rating and timestamp columns)
    (["--value", "rating"], "--value chooses the value of --format dsstne's items; csv always "
                            "has MovieLens' userId,movieId,rating,timestamp columns."),
])
def test_script_bad_parameters_are_usage_errors(tmp_path, args, text):
    result = _invoke("-o", tmp_path / "r.csv", *SMALL, *args)  # (a flag's last value wins)
    assert result.exit_code == 2 and text in result.stderr, result.output
    assert list(tmp_path.iterdir()) == []


def test_a_concentrated_popularity_draws_fewer_items_than_asked_and_says_so(tmp_path):
    """At --zipf 3 nearly every draw is one of a few items, so heavy users stop short of
    their count (six rounds of draws): the summary's count alone left that unexplained."""
    usual = synthetic.generate_ratings(users=300, items=1000, mean_per_user=50, seed=2)
    steep = synthetic.generate_ratings(users=300, items=1000, mean_per_user=50, zipf=3, seed=2)
    assert len(usual) >= 0.95 * usual.asked and len(steep) < 0.5 * steep.asked
    sizes = ["--users", 300, "--items", 1000, "--mean-per-user", 50, "--seed", 2]
    result = _invoke("-o", tmp_path / "r.csv", *sizes, "--zipf", 3)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[1] == (
        f"note: {len(steep) / 300:.1f} items per user, where --mean-per-user asked for 50: "
        "with --zipf 3 the draws keep finding the same popular items. Lower --zipf or raise "
        "--items for more.")
    result = _invoke("-o", tmp_path / "usual.csv", *sizes)
    assert result.exit_code == 0 and "note:" not in result.stderr, result.output


def test_script_an_empty_output_path_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = _invoke("-o", "", *SMALL)
    assert result.exit_code == 2 and "Invalid value for '-o' / '--output': is an empty path" in \
        result.stderr, result.output
    assert list(tmp_path.iterdir()) == []


def test_script_the_bounds_of_zipf_are_allowed(tmp_path):
    for zipf in ("-30", "30"):
        result = _invoke("-o", tmp_path / "r.csv", *SMALL, "--zipf", zipf)
        assert result.exit_code == 0 and result.stderr.startswith("wrote "), result.output


def _refused(result, output, *texts):
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)  # no traceback
    assert result.stderr.startswith(f"Error: {output}: ") and result.stderr.count("\n") == 1
    for text in texts:
        assert text in result.stderr, result.stderr


def test_script_output_directory_missing(tmp_path):
    out = tmp_path / "nodir" / "r.csv"
    _refused(_run("-o", out), out, "-o", "does not exist")
    assert list(tmp_path.iterdir()) == []


def test_script_output_is_a_directory(tmp_path):
    _refused(_run("-o", tmp_path), tmp_path, "-o", "is a directory")
    assert list(tmp_path.iterdir()) == []


def test_script_output_directory_read_only(tmp_path, monkeypatch):
    """Simulated, so that it also holds where the tests run as root."""
    import os

    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: (
        False if os.fspath(path) == str(tmp_path) else real_access(path, mode, **kw)))
    _refused(_run("-o", tmp_path / "r.csv"), tmp_path / "r.csv", "-o", "not writable")
    assert list(tmp_path.iterdir()) == []


def test_script_out_of_memory_names_the_sizes(tmp_path, monkeypatch):
    """Sizes too large for the machine (--users, --items) are the likely cause here: the
    advice names them among the inputs, not a network, and nothing is written."""
    def too_large(**_):
        raise MemoryError("Unable to allocate 80.0 GiB for an array with shape (10000000000,)")

    monkeypatch.setattr(synthetic, "generate_ratings", too_large)
    result = _run("-o", tmp_path / "r.csv")
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: out of memory (Unable to allocate 80.0 GiB"), \
        result.output
    assert "sizes larger than intended" in result.output
    assert "network" not in result.output
    assert list(tmp_path.iterdir()) == []
