"""The ``evaluate`` command on tiny hand-made files (values worked out in the comments)."""

from __future__ import annotations

import json
import math
import os
import re

import numpy as np
import pytest
from click.testing import CliRunner

from destiny.cli.evaluate import evaluate

L3 = math.log2(3)

# u1: three items (every one followed by ':', as predict writes); u2: no recommendation;
# u4: not in the held-out file (skipped). u3 of the held-out file has no line here.
RECS = "u1\ta,0.900:b,0.800:c,0.700:\nu2\t\nu4\tz,0.500:\n"
# Values are ignored; a trailing ':' is tolerated (u3).
HELD = "u1\tb,5:d\nu2\tc\nu3\ta:\n"
# Popularity (lines listing the item): a 2, c 1, b 2, d 2, e 1; ties keep first appearance,
# so the ranking is a, b, d, c, e.
TRAIN = "u1\ta:c\nu2\ta:b\nu3\tb:d\nu5\td:e\n"

# At k = 2:
# u1: top 2 = a, b; held-out {b, d}: hit at rank 2 -> P 1/2, R 1/2,
#     NDCG (1/log2 3) / (1 + 1/log2 3), AP (1/2)/2 = 1/4
# u2: empty list -> 0; u3: no line -> empty list -> 0. Averaged over the 3 users.
MODEL = {"k": 2, "precision": 1 / 6, "recall": 1 / 6, "ndcg": (1 / L3) / (1 + 1 / L3) / 3,
         "map": 1 / 12, "users": 3, "skipped": 1, "missing_recommendations": 1}
# Popularity at k = 2 (each user's own training items left out):
# u1 has a, c -> b, d; held-out {b, d}: P 1, R 1, NDCG 1, AP (1 + 1)/2 = 1
# u2 has a, b -> d, c; held-out {c}: hit at rank 2 -> P 1/2, R 1, NDCG 1/log2 3, AP 1/2
# u3 has b, d -> a, c; held-out {a}: hit at rank 1 -> P 1/2, R 1, NDCG 1, AP 1
POPULARITY = {"k": 2, "precision": 2 / 3, "recall": 1.0, "ndcg": (2 + 1 / L3) / 3,
              "map": 5 / 6, "users": 3, "skipped": 0, "missing_recommendations": 0}


@pytest.fixture(autouse=True)
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write("recs.txt", RECS)
    write("held.txt", HELD)
    write("train.txt", TRAIN)
    return tmp_path


def write(name: str, data: str | bytes) -> str:
    with open(name, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return name


def invoke(args):
    return CliRunner().invoke(evaluate, args)


def same(got: dict, want: dict):
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value), key


def test_json_output_and_counts():
    result = invoke(["-r", "recs.txt", "-t", "held.txt", "-k", "2", "--json"])
    assert result.exit_code == 0, result.output + result.stderr
    same(json.loads(result.stdout), MODEL)
    assert "skipped 1 sample of recs.txt that is not in" in result.stderr
    assert "1 held-out user has no line in recs.txt; it counts as an empty list" in result.stderr


def test_a_user_with_nothing_held_out_and_no_line_is_skipped_not_missing():
    """u5 holds out nothing and has no recommendation line: skipped (nothing to score), and
    not among the held-out users missing a line (only u3 is), whose empty lists count."""
    write("held.txt", HELD + "u5\t\n")
    result = invoke(["-r", "recs.txt", "-t", "held.txt", "-k", "2", "--json"])
    assert result.exit_code == 0, result.output + result.stderr
    same(json.loads(result.stdout), {**MODEL, "skipped": 2})
    assert "1 held-out user has no line in recs.txt" in result.stderr


def test_table_output():
    result = invoke(["--recommendations", "recs.txt", "--held-out", "held.txt", "--k", "2"])
    assert result.exit_code == 0, result.output + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["ranking", "precision@2", "recall@2", "ndcg@2", "map@2", "users",
                                "skipped", "no", "recs"]
    assert lines[1].split() == ["model", "0.1667", "0.1667", "0.1290", "0.0833", "3", "1", "1"]
    assert len(lines) == 2


def test_the_tables_columns_keep_their_widths_and_grow_to_fit_a_long_k():
    """The usual layout, character for character; a k of 14 digits ran the headers together
    (precision@99999999999999recall@...): each column grows to its header, a space before
    it, and every value ends where its header does."""
    args = ["-r", "recs.txt", "-t", "held.txt", "--popularity", "train.txt", "-q", "-k"]
    assert invoke([*args, "2"]).stdout == (
        "ranking        precision@2    recall@2     ndcg@2     map@2     users  skipped  no recs\n"
        "model               0.1667      0.1667     0.1290    0.0833         3        1        1\n"
        "popularity          0.6667      1.0000     0.8770    0.8333         3        0        0\n")
    k = "99999999999999"
    lines = invoke([*args, k]).stdout.splitlines()
    assert lines[0].split() == ["ranking", f"precision@{k}", f"recall@{k}", f"ndcg@{k}",
                                f"map@{k}", "users", "skipped", "no", "recs"]
    ends = [m.end() for m in re.finditer(r"\S+", lines[0].replace("no recs", "no_recs"))][1:]
    for line in lines[1:]:
        assert [m.end() for m in re.finditer(r"\S+", line)][1:] == ends, line


def test_the_notes_and_the_table_give_each_count_apart():
    """u5 and u6 hold out nothing (2 lines without items), u4 and u7 are not in the held-out
    file (2 samples), u3 alone has no recommendation line. By hand at k = 3, u1's top 3
    (a, b, c) hit b at rank 2 of {b, d}: P 1/3, R 1/2, NDCG (1/log2 3) / (1 + 1/log2 3), AP
    (1/2)/2; averaged over u1, u2, u3: 0.1111, 0.1667, 0.1290, 0.0833; skipped 2 + 2, no recs
    1. The longest list (3 items) is not shorter than k, and held-out users have lines: no
    note says otherwise."""
    write("recs.txt", RECS + "u7\ty,0.4:\n")
    write("held.txt", HELD + "u5\t\nu6\t\n")
    result = invoke(["-r", "recs.txt", "-t", "held.txt", "-k", "3"])
    assert result.exit_code == 0, result.output + result.stderr
    assert result.stdout.splitlines()[1].split() == ["model", "0.1111", "0.1667", "0.1290",
                                                     "0.0833", "3", "4", "1"]
    assert result.stderr.splitlines() == [
        "evaluate: scored 3 held-out users at k=3",
        "evaluate: skipped 2 samples of recs.txt that are not in held.txt",
        "evaluate: skipped 2 lines of held.txt without items",
        "evaluate: 1 held-out user has no line in recs.txt; it counts as an empty list "
        "(all misses)"]


def test_popularity_baseline(tmp_path):
    result = invoke(["-r", "recs.txt", "-t", "held.txt", "-k", "2", "--popularity", "train.txt",
                     "--json", "--json-out", "metrics.json", "-q"])
    assert result.exit_code == 0, result.output + result.stderr
    got = json.loads(result.stdout)
    same(got["popularity"], POPULARITY)
    same({key: value for key, value in got.items() if key != "popularity"}, MODEL)
    assert json.loads((tmp_path / "metrics.json").read_text()) == got
    assert result.stderr == ""
    table = invoke(["-r", "recs.txt", "-t", "held.txt", "-k", "2", "--popularity", "train.txt"])
    # (users and skipped its own: u4, not in held.txt, is skipped by the model's row alone)
    assert table.stdout.splitlines()[2].split() == ["popularity", "0.6667", "1.0000", "0.8770",
                                                    "0.8333", "3", "0", "0"]


def test_the_evaluation_counts_what_was_matched():
    """The library's Evaluation: the held-out file's lines (u5's, without items, among them),
    the recommendation lines not in it (u4), the held-out lines without items and the most
    items on a recommendation line; read_recommendations keeps a line's first ``keep`` items
    (all without ``keep``) and counts them all."""
    from destiny.evaluate import evaluate as run
    from destiny.evaluate import read_recommendations

    write("held.txt", HELD + "u5\t\n")
    got = run("recs.txt", "held.txt", 2)
    assert (got.held_out_users, got.not_in_held_out, got.empty_held_out, got.longest_list,
            got.popularity) == (4, 1, 1, 3, None)
    assert read_recommendations("recs.txt", keep=2) == (
        {"u1": ["a", "b"], "u2": [], "u4": ["z"]}, 3)
    assert read_recommendations("recs.txt") == ({"u1": ["a", "b", "c"], "u2": [], "u4": ["z"]}, 3)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_garbage_collector_is_left_as_it_was(enabled):
    """evaluate turns the cyclic garbage collector off while it reads, and back on only where
    it was on: the process's setting is as the call found it, after a refused file too."""
    import gc

    from destiny.errors import DataFormatError
    from destiny.evaluate import evaluate as run

    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        run("recs.txt", "held.txt", 2, popularity_train="train.txt")
        assert gc.isenabled() is enabled
        write("held.txt", "u1 b\n")
        with pytest.raises(DataFormatError):
            run("recs.txt", "held.txt", 2)
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_samples_and_items_match_by_their_exact_labels():
    """'u1 ' (a trailing space) and 'U1' are other samples than 'u1', 'B' another item than 'b'.
    By hand at k = 2: u1's [B, b] hits b at rank 2 of {b}: P 1/2, R 1, NDCG 1/log2 3, AP 1/2;
    'u1 ' has no line (all misses); U1 is not held out (skipped). Averaged over u1 and 'u1 '."""
    write("recs.txt", "u1\tB,0.9:b,0.8:\nU1\tb,0.9:\n")
    write("held.txt", "u1\tb\nu1 \tb\n")
    result = invoke(["-r", "recs.txt", "-t", "held.txt", "-k", "2", "--json"])
    assert result.exit_code == 0, result.output + result.stderr
    same(json.loads(result.stdout), {"k": 2, "precision": 1 / 4, "recall": 1 / 2,
                                     "ndcg": 1 / L3 / 2, "map": 1 / 4, "users": 2, "skipped": 1,
                                     "missing_recommendations": 1})


def test_more_held_out_items_than_k():
    """u1 holds out five items, k = 2: m = min(2, 5) = 2. [x, c, y] hits c at rank 2:
    P 1/2, R 1/2, NDCG (1/log2 3) / (1 + 1/log2 3), AP (1/2) / 2."""
    write("recs.txt", "u1\tx,0.9:c,0.8:y,0.7:\n")
    write("held.txt", "u1\ta:b:c:d:e\n")
    result = invoke(["-r", "recs.txt", "-t", "held.txt", "-k", "2", "--json"])
    assert result.exit_code == 0, result.output + result.stderr
    same(json.loads(result.stdout), {"k": 2, "precision": 1 / 2, "recall": 1 / 2,
                                     "ndcg": (1 / L3) / (1 + 1 / L3), "map": 1 / 4, "users": 1,
                                     "skipped": 0, "missing_recommendations": 0})


def test_default_k_and_short_lists():
    # k = 10: u1's only hit (b) is at rank 2 of a 3-item list.
    result = invoke(["-r", "recs.txt", "-t", "held.txt", "--json"])
    assert result.exit_code == 0
    got = json.loads(result.stdout)
    assert got["k"] == 10 and got["precision"] == pytest.approx(1 / 10 / 3)
    assert "longest recommendation list has 3 items" in result.stderr


def test_lines_without_a_trailing_colon_are_accepted():
    write("recs.txt", "u1\ta,0.9:b,0.8:c,7e-1\nu2\t\nu4\tz,1")  # no final newline either
    result = invoke(["-r", "recs.txt", "-t", "held.txt", "-k", "2", "--json"])
    assert result.exit_code == 0, result.stderr
    same(json.loads(result.stdout), MODEL)


def test_held_out_values_are_ignored_in_any_order():
    """The held-out file is DSSTNE text whose values are ignored: values that rise along a
    line (ratings, timestamps) are no recommendation order to check."""
    write("held.txt", "u1\tb,1:d,5\nu2\tc,2:\nu3\ta,1e9:\n")
    result = invoke(["-r", "recs.txt", "-t", "held.txt", "-k", "2", "--json"])
    assert result.exit_code == 0, result.stderr
    same(json.loads(result.stdout), MODEL)


def test_no_recommendations_at_all_is_pointed_out():
    write("recs.txt", "x1\ta,0.9:\n")
    result = invoke(["-r", "recs.txt", "-t", "held.txt", "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["missing_recommendations"] == 3
    assert "same sample labels" in result.stderr


def test_a_model_that_never_hits_is_pointed_out_once_it_has_lines():
    """Recommendations that never name a held-out item (a pipeline that trained and filtered
    with all the data, held-out items included) get a note on where those items went; one
    hit, or no lines at all (the labels' note instead), gets none."""
    write("recs.txt", "u1\ta,0.9:c,0.8:\nu2\ta,0.5:\nu3\tb,0.4:\n")
    result = invoke(["-r", "recs.txt", "-t", "held.txt", "-k", "2"])
    assert result.exit_code == 0
    assert "no recommendation in recs.txt is a held-out item" in result.stderr
    assert "split_holdout.py" in result.stderr
    write("recs.txt", "u1\ta,0.9:c,0.8:\nu2\tc,0.5:\n")  # u2's c is held out
    assert "is a held-out item" not in invoke(["-r", "recs.txt", "-t", "held.txt"]).stderr
    write("recs.txt", "x1\ta,0.9:\n")
    assert "is a held-out item" not in invoke(["-r", "recs.txt", "-t", "held.txt"]).stderr


def test_the_recommendations_given_as_the_held_out_file_are_refused(tmp_path):
    """`-r recs -t recs` read the recommendations as DSSTNE text (scores as values) and scored
    1.0 everywhere without a word; so through a link to the same file. Exit status 1, as
    every command's paths that are one file (test_cli's)."""
    os.link("recs.txt", "hard.txt")
    os.symlink(tmp_path / "recs.txt", "soft.txt")
    for held in ("recs.txt", "hard.txt", "soft.txt", str(tmp_path / "recs.txt")):
        result = invoke(["-r", "recs.txt", "-t", held, "-k", "2"])
        assert result.exit_code == 1, held
        assert "-r and -t name the same file (recs.txt): -t wants the held-out " in result.stderr
        assert "split_holdout.py" in result.stderr and result.stdout == ""


@pytest.mark.parametrize("flag, path, why", [
    ("-t", "held.txt", "not the held-out ones, which the baseline would leave out of each "
                       "user's list as items the user has already, scoring 0.0 everywhere"),
    ("-r", "recs.txt", "not predict's recommendations, which would make the baseline the items "
                       "recommended most")])
def test_the_held_out_or_recommendations_file_given_as_popularity_is_refused(tmp_path, flag,
                                                                              path, why):
    """`--popularity held.txt` (the -t file) left each user's held-out items out of their
    baseline list, as items they have, and scored 0.0 everywhere without a word; `--popularity
    recs.txt` (the -r file) ranked the items recommended most. Both are refused, through a
    link too, exit status 1, as -r and -t naming one file."""
    write("held.txt", "u1\tb,5:d\nu2\tc\nu3\ta\n")  # (each readable as training text)
    write("recs.txt", "u1\ta,0.900:b,0.800:c,0.700\nu2\tb,0.4\nu3\td,0.5\n")
    os.symlink(tmp_path / path, "soft.txt")
    for given in (path, "soft.txt"):
        result = invoke(["-r", "recs.txt", "-t", "held.txt", "-k", "2", "--popularity", given])
        assert result.exit_code == 1, (given, result.stdout)
        assert (f"Error: {flag} and --popularity name the same file ({path}): --popularity "
                "wants the training interactions, DSSTNE text of the items the model was "
                "trained on (scripts/split_holdout.py's --train), "
                f"{why}") in result.stderr, result.stderr
        assert "Give the training file with --popularity." in result.stderr
        assert result.stdout == ""


def test_the_recommendations_on_standard_input_are_not_compared_with_t():
    """'-' is no file to compare: standard input redirected from the -t file is scored."""
    import pathlib
    import subprocess
    import sys

    with open("recs.txt", "rb") as stdin:
        result = subprocess.run(
            [str(pathlib.Path(sys.executable).parent / "evaluate"), "-r", "-", "-t", "recs.txt",
             "-k", "1", "--json", "-q"], stdin=stdin, capture_output=True, text=True,
            timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["precision"] == 1.0


@pytest.mark.parametrize("users", [10, 9])
def test_a_perfect_score_over_many_users_is_pointed_out(users):
    """Every user's first k items all held out (-t a copy of the recommendations, or held-out
    items trained on) is no model's score: a note from 10 users on, none with -q or fewer."""
    recs = "".join(f"u{i}\ta,0.9:b,0.8:c,0.7:\n" for i in range(users))
    write("recs.txt", recs)
    write("held.txt", recs.replace("0.", ""))
    result = invoke(["-r", "recs.txt", "-t", "held.txt", "-k", "2"])
    assert result.exit_code == 0, result.output + result.stderr
    assert result.stdout.splitlines()[1].split()[1:3] == ["1.0000", "1.0000"]
    noted = ("evaluate: all 10 held-out users score a recall and NDCG of 1.0: each one's "
             "held-out items, up to k=2 of them, are the first of their recommendations. A "
             "perfect score usually means that -t's held.txt is the recommendations themselves")
    assert (noted in result.stderr) is (users == 10)
    quiet = invoke(["-r", "recs.txt", "-t", "held.txt", "-k", "2", "-q"])
    assert quiet.exit_code == 0 and quiet.stderr == ""
    # k past the lists (evaluate -k above predict's) is the same mistake, at a precision below 1
    past = invoke(["-r", "recs.txt", "-t", "held.txt", "-k", "5"])
    assert past.stdout.splitlines()[1].split()[1:3] == ["0.6000", "1.0000"], past.output
    assert ("up to k=5 of them, are the first" in past.stderr) is (users == 10)
    # (a miss anywhere is not a perfect score)
    write("held.txt", recs.replace("0.", "").replace("u0\ta,9:", "u0\tx,9:"))
    assert "perfect score" not in invoke(["-r", "recs.txt", "-t", "held.txt", "-k", "2"]).stderr


@pytest.mark.parametrize("users", [10, 9])
def test_a_popularity_baseline_that_never_hits_is_pointed_out(users):
    """A copy of the held-out file given as --popularity's training file (the same file is
    refused) leaves each user's held-out items out of their baseline list: 0.0 everywhere. A
    note from 10 users on where the training file lists most held-out items under their users;
    none with -q, with fewer users, where the baseline hits once, or where the held-out items
    are new (a cold start scores 0.0 too)."""
    held = "".join(f"u{i}\ta:b\n" for i in range(users))
    write("held.txt", held)
    write("copy.txt", held)
    write("recs.txt", "".join(f"u{i}\ta,0.9:c,0.8:\n" for i in range(users)))
    result = invoke(["-r", "recs.txt", "-t", "held.txt", "-k", "2", "--popularity", "copy.txt"])
    assert result.exit_code == 0, result.output + result.stderr
    assert result.stdout.splitlines()[2].split()[1] == "0.0000"
    noted = (f"evaluate: the popularity baseline recommends no held-out item to any of the "
             f"{users} held-out users: --popularity's copy.txt lists {2 * users} of the "
             f"{2 * users} held-out items under their users (a copy of -t's file, or all the "
             "data), and each user's items are left out of their list, as items they have; "
             "--popularity wants the training part alone (scripts/split_holdout.py's "
             "--train)\n")
    assert (noted in result.stderr) is (users == 10), result.stderr
    # A real training part scores 0.0 too where the held-out items are new (a cold start, a
    # split by time): it lists none of them, and gets no note.
    write("train.txt", "".join(f"u{i}\tc:x{i}\n" for i in range(users)))
    cold = invoke(["-r", "recs.txt", "-t", "held.txt", "-k", "2", "--popularity", "train.txt"])
    assert cold.stdout.splitlines()[2].split()[1] == "0.0000", cold.output
    assert "popularity baseline recommends no" not in cold.stderr, cold.stderr
    quiet = invoke(["-r", "recs.txt", "-t", "held.txt", "-k", "2", "--popularity", "copy.txt",
                    "-q"])
    assert quiet.exit_code == 0 and quiet.stderr == ""
    write("copy.txt", held.replace("u0\ta:b", "u0\ta"))  # (u0's b is then recommended)
    hit = invoke(["-r", "recs.txt", "-t", "held.txt", "-k", "2", "--popularity", "copy.txt"])
    assert "popularity baseline recommends no" not in hit.stderr, hit.stderr


def test_non_ascii_labels():
    write("recs.txt", "ü1\té,0.9:b,0.8:\n")
    write("held.txt", "ü1\tb:é\n")
    result = invoke(["-r", "recs.txt", "-t", "held.txt", "-k", "2", "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["precision"] == 1.0


def test_scores_are_read_closely_enough_to_order_them():
    """The scanner's decimal reading, which refuses a line whose scores rise, against Python's
    float() on numbers printed every way predict's -p formats and others might: falling and
    tied scores pass whatever the format, and the reading is within 1e-12 of float()."""
    import random

    import numpy as np

    from destiny.evaluate import _number, _rises

    rng = random.Random(3)
    formats = ["%.3f", "%g", "%.17g", "%e", "%.1f", "%.10e", "%d", "%+.4f"]
    for _ in range(300):
        fmt = rng.choice(formats)
        top = 10.0 ** rng.uniform(-8, 12) * rng.choice([1, -1])
        scores = sorted((top * rng.random() for _ in range(rng.randint(1, 12))), reverse=True)
        texts = [fmt % (round(x) if fmt == "%d" else x) for x in scores]
        for text in texts:
            buf = np.frombuffer(text.encode() + b":", dtype=np.uint8)
            end, value = _number(buf, 0)
            assert end == len(text) and value == pytest.approx(float(text), rel=1e-12, abs=0)
        line = "u1\t" + ":".join(f"i{j},{t}" for j, t in enumerate(texts)) + ":\n"
        write("recs.txt", line)
        result = invoke(["-r", "recs.txt", "-t", "held.txt", "--json"])
        assert result.exit_code == 0, (line, result.stderr)
    for text in ("100e-310", "1e-320", "0." + "4" * 400, "1" + "0" * 40 + ".5e-30",
                 "0." + "0" * 30 + "1234"):  # (zeros before the first significant digit)
        buf = np.frombuffer(text.encode() + b":", dtype=np.uint8)
        assert _number(buf, 0)[1] == pytest.approx(float(text), rel=1e-12, abs=0), text
    write("recs.txt", "u1\ta,100e-310:b,1e-308:\n")  # (10.0 ** -310 is 0: this rose)
    assert invoke(["-r", "recs.txt", "-t", "held.txt", "-q"]).exit_code == 0
    for text in ("inf", "-Infinity", "nan", "1e999", "-0.0"):
        buf = np.frombuffer(text.encode() + b":", dtype=np.uint8)
        assert _number(buf, 0)[0] == len(text)
        assert str(_number(buf, 0)[1]) == str(float(text))
    assert _rises(0.9, 0.5) and not _rises(0.5, 0.9) and not _rises(float("nan"), 0.5)
    assert not _rises(0.5, 0.5) and not _rises(1 + 1e-14, 1.0) and _rises(1 + 1e-10, 1.0)
    assert not _rises(-1 + 1e-14, -1.0) and _rises(-1 + 1e-10, -1.0)  # (Linear: below 0)
    # relative to the score: a reading error of large scores, a rise of small ones
    assert not _rises(1e9 * (1 + 1e-14), 1e9) and _rises(1e-9 * (1 + 1e-10), 1e-9)


@pytest.mark.parametrize("which, content, expected", [
    ("recs.txt", "u1 a,0.9:\n", "line 1: 'u1 a,0.9:' has no TAB"),
    ("recs.txt", "u1\ta,0.9:b:\n", "line 1, column 10: 'u1\\ta,0.9:b:' has the item 'b' without"),
    ("recs.txt", "u1\ta,high:\n", "the score 'high' (in 'a,high'), which is not a number"),
    ("recs.txt", "u1\ta,0.9,1:\n", "the score '0.9,1'"),
    ("recs.txt", "u1\ta,0.9::b,0.8:\n", "an empty item"),
    ("recs.txt", "u1\t,0.9:\n", "an item with an empty label"),
    ("recs.txt", "u1\ta,0.9\tb,0.8:\n", "second TAB"),
    ("recs.txt", "\ta,0.9:\n", "the sample name is empty"),
    ("recs.txt", "u1\ta,0.9:\nu2\tb,0.8:\nu1\tc,0.1:\n",
     "line 3: the sample 'u1' has a second line (line 3; the first is line 1)"),
    ("recs.txt", "u1\ta,0.9:\n\nu2\tb,0.5:\n", "line 2: the line is blank"),
    ("recs.txt", "u1\ta,0.9:\r\n", "carriage return"),
    ("recs.txt", b"u1\ta,0.9:\nu2\t\xe9,0.5:\n", "line 2, column 4: the bytes b'\\xe9' are not "
                                                  "valid UTF-8"),
    ("recs.txt", "", "recs.txt: the recommendation file is empty"),
    ("recs.txt", "u1\ta,0.5:b,0.900:\n", "line 1, column 10: 'u1\\ta,0.5:b,0.900:' has the score "
                                        "0.900 (in 'b,0.900') above the score 0.5 before it"),
    ("recs.txt", "u1\ta,0.9:b,nan:c,0.5:d,0.7:\n", "the score 0.7 (in 'd,0.7') above the "
                                                  "score 0.5"),
    ("recs.txt", "u1\ta,0.5:b,nan:c,0.9:\n", "the score 0.9 (in 'c,0.9') above the score 0.5"),
    ("recs.txt", "u1\t7,1360201315:9,1360187954:5,1360187955\n",  # DSSTNE text given as -r
     "the score 1360187955 (in '5,1360187955') above the score 1360187954 before it, but "
     "recommendations come best first; check that -r names recommendations"),
    ("held.txt", "u1\tb,five\n", "the value 'five' (in 'b,five'), which is not a number"),
    ("held.txt", "u1\tb\nu1\tc\n", "line 2: the sample 'u1' has a second line"),
    ("held.txt", "u1\tb::c\n", "an empty item"),
    ("held.txt", "u1\n", "has no TAB"),
    ("train.txt", "u1\ta\nu1\tb\n", "train.txt, line 2: the sample 'u1' has a second line"),
    ("train.txt", "u1\ta,x\n", "is not a number"),
    # A NUL is valid UTF-8 but in no label predict writes or generate-netcdf reads: it matched
    # nothing, silently; refused as generate-netcdf refuses it (file, line, column, remedy).
    ("recs.txt", b"u1\ta,0.9:\nu\x002\tb,0.8:\n", "recs.txt, line 2, column 2: the line "
     "'u\\x002\\tb,0.8:' holds a NUL byte (\\x00) in its sample name"),
    ("recs.txt", b"u1\ta,0.9:b\x00,0.8:\n", "line 1, column 11: the item 'b\\x00,0.8' in the "
     "line 'u1\\ta,0.9:b\\x00,0.8:' holds a NUL byte (\\x00). Labels are matched"),
    ("recs.txt", b"u1\ta,0.9\x00:\n", "line 1, column 9: the item 'a,0.9\\x00'"),
    ("recs.txt", b"u1\ta,0.9:\x00\n", "line 1, column 10: the item '\\x00'"),
    ("held.txt", b"u1\tb:c\x00d\n", "line 1, column 7: the item 'c\\x00d'"),
    ("held.txt", b"u1\tb\n\tc\x00d\n", "line 2, column 3: the item 'c\\x00d'"),  # (no name)
    ("held.txt", "u1\tb\n".encode("utf-16-le"), "line 1, column 2: the line 'u\\x001\\x00\\t"
     "\\x00b\\x00' holds a NUL byte (\\x00) in its sample name"),
    # a byte-order mark became part of the first sample's name: scores silently wrong
    ("train.txt", "", "train.txt: the input holds no records. Each line must be 'NAME<TAB>"
     "feature[,value]:feature[,value]...'; check that the right file was given with "
     "--popularity."),
    ("recs.txt", "\ufeff" + RECS, "line 1, column 1: the file starts with a UTF-8 byte-order"),
    ("held.txt", "\ufeff" + HELD, "line 1, column 1: the file starts with a UTF-8 byte-order"),
    ("train.txt", "\ufeff" + TRAIN, "line 1, column 1: the file starts with a UTF-8 byte-order"),
    # ... and at a later line's start (a file joined on with cat), that sample's name
    ("recs.txt", RECS.replace("\n", "\n\ufeff", 1), "recs.txt, line 2, column 1: the line "
     "'\\ufeffu2\\t' starts with a UTF-8 byte-order mark (bytes EF BB BF)"),
    ("held.txt", HELD.replace("\n", "\n\ufeff", 1), "held.txt, line 2, column 1: the line "
     "'\\ufeffu2\\tc' starts with a UTF-8 byte-order mark"),
    ("held.txt", "u1 b\n\ufeffu2\tc\n", "held.txt, line 1: 'u1 b' has no TAB"),  # (the first fault)
    ("train.txt", TRAIN.replace("\n", "\n\ufeff", 1), "train.txt, line 2, column 1: the line "
     "'\\ufeffu2\\ta:b' starts with a UTF-8 byte-order mark"),
    ("held.txt", HELD.encode("utf-16"), "line 1, column 1: the file starts with the bytes FF FE, "
     "a UTF-16 byte-order mark: it is UTF-16 text"),
])
def test_bad_input(which, content, expected):
    write(which, content)
    result = invoke(["-r", "recs.txt", "-t", "held.txt", "--popularity", "train.txt",
                     "--json-out", "metrics.json"])
    assert result.exit_code == 1, result.stdout
    assert expected in result.stderr
    assert f"{which}" in result.stderr
    assert result.stdout == ""
    import os
    assert not os.path.exists("metrics.json")


@pytest.mark.parametrize("which", ["recs.txt", "held.txt"])
def test_a_long_score_that_is_not_a_number_is_refused_at_once(which):
    """A run of digits followed by another character: the regular expression of a number
    split the run between two of its parts every way, time quadratic in its length (100,000
    digits: beyond a minute; found by fuzzing). A process, so that a return of that fails."""
    import pathlib
    import subprocess
    import sys

    write(which, "u1\ta," + "1" * 100_000 + "x:\n")
    done = subprocess.run([str(pathlib.Path(sys.executable).parent / "evaluate"), "-r",
                           "recs.txt", "-t", "held.txt"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(f"Error: {which}, line 1, column 4: "), done.stderr
    assert "which is not a number" in done.stderr


@pytest.mark.parametrize("flag, expected", [
    ("-r", "recommendation file does not exist; check the -r path"),
    ("-t", "held-out file does not exist; check the -t path"),
    ("--popularity", "training file does not exist; check the --popularity path"),
])
def test_missing_files(flag, expected):
    args = {"-r": "recs.txt", "-t": "held.txt", "--popularity": "train.txt"}
    args[flag] = "nowhere.txt"
    result = invoke([x for pair in args.items() for x in pair])
    assert result.exit_code == 1
    assert f"nowhere.txt: the {expected}" in result.stderr


@pytest.mark.parametrize("args, flags", [
    (["-r", "-", "-t", "-"], "-r and -t"),
    (["-r", "recs.txt", "-t", "-", "--popularity", "-"], "-t and --popularity"),
])
def test_standard_input_given_twice_is_a_usage_error(args, flags):
    """One of two '-' inputs would find standard input drained (an 'empty file' error that
    points at the wrong cause)."""
    result = CliRunner().invoke(evaluate, args, input=RECS)
    assert result.exit_code == 2, result.output
    assert f"{flags} are both '-', but standard input can be read only once" in result.stderr


def test_one_input_read_from_standard_input_scores_as_its_file():
    """'-' reads standard input (docs/commands.md; the command's own process: '-' is /dev/stdin).
    Given once, it is no usage error, and the scores are those of the file."""
    import pathlib
    import subprocess
    import sys

    result = subprocess.run(
        [str(pathlib.Path(sys.executable).parent / "evaluate"), "-r", "-", "-t", "held.txt",
         "-k", "2", "--json", "-q"], input=RECS, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    same(json.loads(result.stdout), MODEL)


def test_a_k_past_every_list_and_past_int64_is_taken():
    """-k has no upper bound: at k = 10**23 (past int64) u1's one hit, b at rank 2 of {b, d},
    gives m = min(k, 2) = 2 and so the recall, NDCG and MAP of k = 2; precision is tiny. The
    popularity lists (every unseen item: b, d, e; d, c, e; a, c, e) hit where they do at k = 2,
    and are scored at the same k."""
    result = invoke(["-r", "recs.txt", "-t", "held.txt", "-k", str(10**23), "--json",
                     "--popularity", "train.txt"])
    assert result.exit_code == 0, result.output + result.stderr
    got = json.loads(result.stdout)
    same({key: got[key] for key in ("recall", "ndcg", "map", "users", "skipped")},
         {key: MODEL[key] for key in ("recall", "ndcg", "map", "users", "skipped")})
    assert 0 < got["precision"] < 1e-18
    assert got["k"] == 10**23 and f"at k={10**23}" in result.stderr  # (it said 2^62)
    assert got["precision"] * 10**23 == pytest.approx(MODEL["precision"] * 2)
    baseline = got["popularity"]
    same({key: baseline[key] for key in ("recall", "ndcg", "map", "users", "skipped")},
         {key: POPULARITY[key] for key in ("recall", "ndcg", "map", "users", "skipped")})
    assert baseline["k"] == 10**23
    assert baseline["precision"] * 10**23 == pytest.approx(POPULARITY["precision"] * 2)


def test_a_directory_is_refused(tmp_path):
    (tmp_path / "dir").mkdir()
    result = invoke(["-r", "dir", "-t", "held.txt"])
    assert result.exit_code == 1 and "is a directory" in result.stderr


def test_unwritable_json_out_fails_before_reading():
    result = invoke(["-r", "recs.txt", "-t", "held.txt", "--json-out", "no/such/dir/m.json"])
    assert result.exit_code == 1 and "does not exist" in result.stderr


def test_json_out_over_an_input_is_refused():
    result = invoke(["-r", "recs.txt", "-t", "held.txt", "--json-out", "held.txt"])
    assert result.exit_code == 1
    assert "the JSON output (--json-out) would replace the held-out items (-t)" in result.stderr


def test_a_second_run_to_the_same_json_out_stops(tmp_path):
    """Two runs writing one --json-out (overlapping cron jobs): the second stops at once, as
    predict's and train's do, instead of silently replacing the first's file."""
    import os

    from destiny.io.atomic import exclusive

    with exclusive(tmp_path / "m.json", "JSON output (--json-out)"):
        result = invoke(["-r", "recs.txt", "-t", "held.txt", "--json-out", "m.json"])
    assert result.exit_code == 1
    assert "m.json: another run is writing this JSON output (--json-out) now" in result.stderr
    assert not os.path.exists("m.json")
    result = invoke(["-r", "recs.txt", "-t", "held.txt", "--json-out", "m.json"])
    with open("m.json") as f:
        assert result.exit_code == 0 and json.load(f)["k"] == 10
    assert sorted(os.listdir(tmp_path)) == ["held.txt", "m.json", "recs.txt", "train.txt"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_table_failing_on_standard_output_says_the_json_out_file_is_complete():
    """The --json-out file is put in place before the table is written: standard output then
    failing (a full disk) left it complete, which the message did not say (a cron job's user
    would not know whether to trust it). A process, for its own standard output."""
    import pathlib
    import subprocess
    import sys

    with open("/dev/full", "wb") as full:
        done = subprocess.run(
            [str(pathlib.Path(sys.executable).parent / "evaluate"), "-r", "recs.txt", "-t",
             "held.txt", "-k", "2", "--json-out", "m.json", "-q"],
            stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(
        "Error: standard output: No space left on device; it is written as the command goes, "
        "and holds what was written before the failure; m.json was put in place before the "
        "failure and is complete. "), done.stderr
    with open("m.json") as f:
        same(json.load(f), MODEL)


@pytest.mark.parametrize("k", ["0", "-3", "x"])
def test_bad_k_is_a_usage_error(k):
    result = invoke(["-r", "recs.txt", "-t", "held.txt", "-k", k])
    assert result.exit_code == 2


def test_help_has_an_example():
    result = invoke(["-h"])
    assert result.exit_code == 0 and "Example:" in result.stdout


# --- the popularity baseline's lists ------------------------------------------------------------

def _popularity_before(train_path, users, k):
    """The baseline as it was first written (a list per user), kept as the oracle."""
    from destiny.holdout import _line_counts
    from destiny.io.index import LabelTable
    from destiny.io.text import read_records

    features = LabelTable()
    records = read_records([train_path], features, update=True, keep_values=False)
    row_of = {name: row for row, name in enumerate(records.labels)}
    indptr, indices = records.indptr, records.indices
    order = np.argsort(-_line_counts(indptr, indices, len(features)), kind="stable").tolist()
    labels = features.labels()
    result = []
    for user in users:
        row = row_of.get(user)
        if row is None:
            result.append([labels[i] for i in order[:k]])
            continue
        seen = set(indices[indptr[row]:indptr[row + 1]].tolist())
        result.append([labels[i] for i in order if i not in seen][:k])
    return result


def _random_training(rng, users: int, items: int, most: int) -> str:
    """Lines of a few popular-skewed items (ties, and an item listed twice on a line)."""
    lines = []
    for u in range(users):
        n = int(rng.integers(0, most + 1))
        picked = rng.zipf(1.5, n) % items if n else []
        lines.append(f"u{u}\t" + ":".join(f"i{i}" for i in picked) if n else f"u{u}\t")
    return "\n".join(line for line in lines if not line.endswith("\t")) + "\n"


@pytest.mark.parametrize("seed", range(4))
def test_popularity_lists_are_as_before(seed):
    from destiny.evaluate import popularity_recommendations
    from destiny.metrics import ranking_metrics

    rng = np.random.default_rng(seed)
    items = int(rng.integers(3, 40))
    write("train.txt", _random_training(rng, users=int(rng.integers(1, 60)), items=items,
                                        most=int(rng.integers(1, 12))))
    users = [f"u{u}" for u in range(70)]  # some not in the training file
    held = [set(f"i{i}" for i in rng.integers(0, items, 3)) for _ in users]
    for k in (1, 2, 5, items - 1, items, items + 7, 2**62):
        got = popularity_recommendations("train.txt", users, k)
        want = _popularity_before("train.txt", users, k)
        assert [len(x) for x in got] == [len(x) for x in want], k
        assert [list(x) for x in got] == want, k
        assert [list(x) for x in got] == want, k  # read again: the same
        assert ranking_metrics(got, held, k) == ranking_metrics(want, held, k)


def test_popularity_memory_does_not_grow_with_users_times_items():
    """evaluate -k 2**62 --popularity held a list of every unseen item for every user: here
    200 users x 3000 items, 5 MB of list slots. Each list is now made as it is read."""
    import tracemalloc

    from destiny.evaluate import popularity_recommendations
    from destiny.metrics import ranking_metrics

    users, items = 200, 3000
    write("train.txt", "".join(f"u{u}\ti{u % items}:i{(7 * u) % items}\n" for u in range(users))
          + "all\t" + ":".join(f"i{i}" for i in range(items)) + "\n")
    names = [f"u{u}" for u in range(users)]
    held = [{f"i{(u + 1) % items}"} for u in range(users)]
    popularity_recommendations("train.txt", names, 1)  # (numba's compilation, outside)
    tracemalloc.start()  # (what the lists hold once made: the reading takes 16 MiB a while)
    try:
        lists = popularity_recommendations("train.txt", names, 2**62)
        held_by_lists = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        metrics = ranking_metrics(lists, held, 2**62)
        peak_scoring = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert metrics.users == users
    assert held_by_lists < 2_000_000, f"{held_by_lists:,} bytes"  # (3000 labels: 0.3 MB)
    assert peak_scoring < held_by_lists + 1_000_000, f"{peak_scoring:,} bytes"


def test_chunks_of_a_few_lines_read_as_one(monkeypatch):
    """The inputs are read in chunks of whole lines (io/text.line_chunks): chunks of a line or
    two give the same metrics, and a problem's line number counts across chunks."""
    import destiny.io.text

    whole = invoke(["-r", "recs.txt", "-t", "held.txt", "--popularity", "train.txt", "-k", "2",
                    "--json"])
    monkeypatch.setattr(destiny.io.text, "CHUNK_BYTES", 8)
    assert invoke(["-r", "recs.txt", "-t", "held.txt", "--popularity", "train.txt", "-k", "2",
                   "--json"]).stdout == whole.stdout
    write("train.txt", TRAIN + "u9\ta,x\n")
    result = invoke(["-r", "recs.txt", "-t", "held.txt", "--popularity", "train.txt"])
    assert result.exit_code == 1 and "train.txt, line 5" in result.stderr, result.stderr


@pytest.mark.skipif(not os.path.exists("/proc/self/mem"), reason="Linux's /proc")
def test_an_input_failing_as_it_is_read_is_named():
    """An I/O error while an input is read (/proc/self/mem fails at offset 0) names it: the
    system's error names no file."""
    result = invoke(["-r", "/proc/self/mem", "-t", "held.txt"])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("Error: /proc/self/mem: Input/output error; "), result.stderr


@pytest.mark.parametrize("flag", ["-r", "-t"])
def test_a_nul_is_refused_with_generate_netcdfs_remedy(flag):
    from destiny.errors import NUL_REMEDY

    write("bad.txt", b"u1\ta\x00,0.9:\n")
    args = {"-r": "recs.txt", "-t": "held.txt", flag: "bad.txt"}
    result = invoke(["-r", args["-r"], "-t", args["-t"]])
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: bad.txt, line 1, column 5: ")
    assert result.stderr.endswith(f"; {NUL_REMEDY}\n")
    assert result.stderr.count("\n") == 1 and result.stdout == ""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_standard_output_is_named():
    """The table (or JSON) written to a full device: the message names standard output, as
    predict's does, not only 'No space left on device'."""
    import pathlib
    import subprocess
    import sys

    command = str(pathlib.Path(sys.executable).parent / "evaluate")
    for extra in ([], ["--json"]):
        with open("/dev/full", "wb") as full:
            done = subprocess.run([command, "-r", "recs.txt", "-t", "held.txt", "-k", "2", "-q",
                                   *extra], stdout=full, stderr=subprocess.PIPE, text=True,
                                  timeout=120)
        assert done.returncode == 1
        assert done.stderr.startswith("Error: standard output: No space left on device; it is "
                                      "written as the command goes"), done.stderr
