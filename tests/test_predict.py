"""``predict``: DSSTNE's record format, both filter modes, K above 128, unknown features."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from destiny.cli.predict import predict

RECORD = re.compile(r"^[^\t]+\t(?:[^,:\t]+,-?\d+\.\d{3}:)*$")


def run(model, *args, output="recs.txt"):
    argv = ["-n", str(model / "gl.nc"), "-i", str(model / "features_input"),
            "-o", str(model / "features_output"), "-s", output, *args]
    return CliRunner().invoke(predict, argv)


def records(path):
    out = {}
    for line in open(path, encoding="utf-8").read().splitlines():
        name, _, rest = line.partition("\t")
        out[name] = [(t.split(",")[0], float(t.split(",")[1])) for t in rest.split(":") if t]
    return out


def test_dsstne_record_format(model, tmp_path):
    out = tmp_path / "recs.txt"
    result = run(model, "-r", str(model / "ratings.txt"), "-d", "gl", "-k", "10", output=str(out))
    assert result.exit_code == 0, result.output
    lines = out.read_text().splitlines()
    names = [line.split("\t")[0] for line in (model / "ratings.txt").read_text().splitlines()]
    assert [line.split("\t")[0] for line in lines] == names  # input order
    for line in lines:
        assert RECORD.match(line), line
    recs = records(out)
    for items in recs.values():
        assert len(items) == 10
        scores = [s for _, s in items]
        assert scores == sorted(scores, reverse=True)


def test_remove_filter_never_recommends_listed_items(model, tmp_path):
    out = tmp_path / "recs.txt"
    text = model / "ratings.txt"
    assert run(model, "-r", str(text), "-f", str(text), "-k", "20", output=str(out)).exit_code == 0
    seen = {line.split("\t")[0]: {t.split(",")[0] for t in line.split("\t")[1].split(":")}
            for line in text.read_text().splitlines()}
    for name, items in records(out).items():
        assert not seen[name] & {item for item, _ in items}


def test_multiply_filter_is_dsstnes(model, tmp_path):
    # DSSTNE multiplies scores by the filter value; with timestamps as values (its MovieLens
    # recipe) the already-seen items are boosted to the top instead of being removed.
    out = tmp_path / "recs.txt"
    text = model / "ratings.txt"
    result = run(model, "-r", str(text), "-f", str(text), "--filter-mode", "multiply", "-k", "5",
                 output=str(out))
    assert result.exit_code == 0, result.output
    first = text.read_text().splitlines()[0]
    name, rest = first.split("\t")
    seen = {t.split(",")[0] for t in rest.split(":")}
    top = records(out)[name]
    assert {item for item, _ in top[: min(5, len(seen))]} <= seen
    assert top[0][1] > 1e6  # score x timestamp


def test_k_above_128_and_above_the_item_count(model, tmp_path):
    out = tmp_path / "recs.txt"
    items = len((model / "features_output").read_text().splitlines())
    assert run(model, "-r", str(model / "ratings.txt"), "-k", "500", output=str(out)).exit_code == 0
    recs = records(out)
    for listed in recs.values():
        assert len(listed) <= items  # padding units (width 128) are never returned
        assert len({item for item, _ in listed}) == len(listed)
    assert max(len(v) for v in recs.values()) > 0


def test_unknown_features_still_get_a_line(model, tmp_path):
    src = tmp_path / "in.txt"
    known = (model / "ratings.txt").read_text().splitlines()[0].split("\t")[1]
    src.write_text(f"stranger\tnot-an-item:nor-this\nregular\t{known}:unknown-item\n")
    out = tmp_path / "recs.txt"
    result = run(model, "-r", str(src), "-k", "3", output=str(out))
    assert result.exit_code == 0, result.output
    assert "dropped 3 features" in result.stderr and "from 2 lines" in result.stderr
    assert "1 samples have no known feature" in result.stderr
    recs = records(out)
    assert list(recs) == ["stranger", "regular"] and len(recs["stranger"]) == 3


def test_stdout_and_batches_agree(model, tmp_path):
    text = str(model / "ratings.txt")
    one = run(model, "-r", text, "-k", "7", "-b", "1", output="-")
    many = run(model, "-r", text, "-k", "7", "-b", "256", output="-")
    assert one.exit_code == many.exit_code == 0
    assert one.stdout == many.stdout and one.stdout.count("\n") == 300


def test_items_never_seen_in_training_are_not_recommended(model, tmp_path):
    index = tmp_path / "features_output"
    lines = (model / "features_output").read_text()
    index.write_text(lines + "brand-new-item\t120\n")  # a unit that was never a target
    out = tmp_path / "recs.txt"
    argv = ["-n", str(model / "gl.nc"), "-i", str(model / "features_input"), "-o", str(index),
            "-s", str(out), "-r", str(model / "ratings.txt"), "-k", "500"]
    assert CliRunner().invoke(predict, argv).exit_code == 0
    assert "brand-new-item" not in out.read_text()


@pytest.mark.parametrize("args,message", [
    (["-d", "ml"], "-d ml: the network's input layer reads the dataset 'gl_input'"),
    (["-l", "Out"], "the network has no layer named 'Out'"),
    (["-p", "q"], "is not a printf conversion"),
])
def test_predict_errors(model, tmp_path, args, message):
    out = tmp_path / "recs.txt"
    result = run(model, "-r", str(model / "ratings.txt"), *args, output=str(out))
    assert result.exit_code in (1, 2) and message in result.output
    assert not out.exists()
