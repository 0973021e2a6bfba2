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
    assert set(np.unique(ratings.ratings).tolist()) <= {x / 2 for x in range(1, 11)}
    assert np.all((ratings.timestamps >= 1e9) & (ratings.timestamps < 1e10))


def test_popularity_is_skewed(ratings):
    counts = np.sort(np.bincount(ratings.items, minlength=401)[1:])[::-1]
    top = counts[: len(counts) // 10].sum() / counts.sum()
    assert top > 0.3  # the top 10% of items hold far more than 10% of the ratings


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


def test_bad_parameters():
    with pytest.raises(ValueError, match="mean_per_user"):
        synthetic.generate_ratings(users=10, items=10, mean_per_user=9)


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


def _run(*args):
    from click.testing import CliRunner

    return CliRunner().invoke(_script(), [*map(str, args), *SMALL])


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
