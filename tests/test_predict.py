"""``predict``: DSSTNE's record format, both filter modes, K above 128, unknown features."""

from __future__ import annotations

import io
import os
import re
import sys

import numpy as np
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


def no_records(tmp_path, kind: str):
    """An input with no records: an empty file, an empty directory, or the directory an empty
    Spark job writes (``_SUCCESS`` alone, which is skipped)."""
    if kind == "file":
        (tmp_path / "empty.txt").touch()
        return tmp_path / "empty.txt"
    (tmp_path / "empty").mkdir()
    if kind == "spark-directory":
        (tmp_path / "empty" / "_SUCCESS").touch()
    return tmp_path / "empty"


EMPTY_KINDS = ["file", "directory", "spark-directory"]


@pytest.mark.parametrize("kind", EMPTY_KINDS)
@pytest.mark.parametrize("mode", ["remove", "multiply"])
def test_a_filter_with_no_records_filters_nothing(model, tmp_path, mode, kind):
    """As in DSSTNE (spec 8.3): a cron job's filter (the day's purchases) may be empty; a
    directory of its parts then holds none."""
    empty = no_records(tmp_path, kind)
    text = str(model / "ratings.txt")
    plain = run(model, "-r", text, "-k", "5", output=str(tmp_path / "plain.txt"))
    result = run(model, "-r", text, "-k", "5", "-f", str(empty), "--filter-mode", mode,
                 output=str(tmp_path / "recs.txt"))
    assert plain.exit_code == 0 and result.exit_code == 0, result.output
    assert "0 filter entries applied" in result.output
    assert (tmp_path / "recs.txt").read_text() == (tmp_path / "plain.txt").read_text()


@pytest.mark.parametrize("kind", EMPTY_KINDS)
@pytest.mark.parametrize("filtered", [False, True])
def test_an_input_with_no_records_gets_no_recommendations(model, tmp_path, filtered, kind):
    """Empty in, empty out, as a Unix filter: a cron job's list of the day's active users may
    be empty (a file, or a directory of its parts that holds none)."""
    empty = no_records(tmp_path, kind)
    out = tmp_path / "recs.txt"
    result = run(model, "-r", str(empty), *(["-f", str(model / "ratings.txt")] if filtered
                                             else []), output=str(out))
    assert result.exit_code == 0, result.output
    assert "wrote 0 recommendation lines" in result.output
    assert out.read_bytes() == b""


def _run_with_directory(model, tmp_path, flag):
    """predict with ``flag`` (-r or -f) reading the directory ``tmp_path/parts``: (the
    result, the recommendations file's path)."""
    args = {"-r": str(model / "ratings.txt"), flag: str(tmp_path / "parts")}
    out = tmp_path / "recs.txt"
    return run(model, *[x for kv in args.items() for x in kv], output=str(out)), out


@pytest.mark.parametrize("flag", ["-r", "-f"])
def test_a_directory_holding_only_folders_is_refused(model, tmp_path, flag):
    """Folders are not read (spec 1.1), so partitioned parts (date=.../part-0) would be
    silently no records: that stays an error, unlike a directory holding nothing."""
    (tmp_path / "parts" / "date=1").mkdir(parents=True)
    (tmp_path / "parts" / "date=1" / "part-0").write_text("u1\t1\n")
    result, out = _run_with_directory(model, tmp_path, flag)
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"Error: {tmp_path / 'parts'}: the input directory holds "
                                    "no files"), result.output
    assert f"with {flag}." in result.output
    assert not out.exists()


@pytest.mark.parametrize("flag", ["-r", "-f"])
def test_a_dangling_link_in_an_input_directory_names_the_flag(model, tmp_path, flag):
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "part-0").write_text("u1\t1\n")
    (tmp_path / "parts" / "part-1").symlink_to(tmp_path / "gone")
    result, out = _run_with_directory(model, tmp_path, flag)
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"Error: {tmp_path / 'parts' / 'part-1'}: is a symbolic link "
                                    "to a file that does not exist"), result.output
    assert f"in the input directory given with {flag};" in result.output
    assert not out.exists()


def test_a_k_beyond_the_catalogue_gives_every_item(model, tmp_path):
    """-k 99999999999 asked for memory for that many items a row ('out of memory')."""
    out = tmp_path / "recs.txt"
    result = run(model, "-r", str(model / "ratings.txt"), "-k", "99999999999", output=str(out))
    assert result.exit_code == 0, result.output
    items = len((model / "features_output").read_text().splitlines())
    assert {len(line) for line in records(out).values()} == {items}
    # (the summary said "top 99999999999" alone)
    assert (f"predict: -k 99999999999 is more than the {items:,} items the network can "
            "recommend (the output index's items that were training targets): each line "
            "lists all of them but those filtered out\n") in result.output, result.output
    exact = run(model, "-r", str(model / "ratings.txt"), "-k", str(items),
                output=str(tmp_path / "exact.txt"))
    assert exact.exit_code == 0 and "is more than" not in exact.output


@pytest.mark.parametrize("mode", ["remove", "multiply"])
def test_a_later_filter_line_for_a_sample_replaces_the_earlier_one(model, tmp_path, mode):
    """Spec 8.3: a later line for the same sample replaces its earlier filter. The first
    line lists the sample's best item, the second its second best: only the second is
    filtered (multiply: each without a value, worth 0.0)."""
    line = (model / "ratings.txt").read_text().splitlines()[0]
    (tmp_path / "one.txt").write_text(line + "\n")
    name = line.split("\t")[0]
    assert run(model, "-r", str(tmp_path / "one.txt"), "-k", "5",
               output=str(tmp_path / "plain.txt")).exit_code == 0
    best = [item for item, _ in records(tmp_path / "plain.txt")[name]]
    (tmp_path / "filter.txt").write_text(f"{name}\t{best[0]}\n{name}\t{best[1]}\n")
    result = run(model, "-r", str(tmp_path / "one.txt"), "-k", "5", "-f",
                 str(tmp_path / "filter.txt"), "--filter-mode", mode,
                 output=str(tmp_path / "recs.txt"))
    assert result.exit_code == 0, result.output
    got = [item for item, _ in records(tmp_path / "recs.txt")[name]]
    assert got[0] == best[0]
    assert best[1] not in got  # removed, or scored 0.0, below the other 89 items


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
    assert "filter entries applied (multiply)" in result.output


def test_a_dsstne_network_with_dropout_on_its_output_layer_predicts(model, tmp_path):
    """DSSTNE trains with pDropout on an Output layer; prediction ignores dropout (spec 3.8),
    so such a network predicts as it would without it (only train refuses it)."""
    import shutil

    import netCDF4

    net = tmp_path / "dropout.nc"
    shutil.copy(model / "gl.nc", net)
    with netCDF4.Dataset(net, "a") as nc:
        output = [name for name in nc.ncattrs()
                  if name.endswith("_kind") and nc.getncattr(name) == 2]  # Output (spec 11)
        assert len(output) == 1
        nc.setncattr(output[0].replace("_kind", "_pDropout"), np.float32(0.1))
    ratings = str(model / "ratings.txt")
    plain, dropped = tmp_path / "plain.txt", tmp_path / "dropped.txt"
    assert run(model, "-r", ratings, "-k", "5", output=str(plain)).exit_code == 0
    result = CliRunner().invoke(predict, ["-n", str(net), "-i", str(model / "features_input"),
                                          "-o", str(model / "features_output"), "-r", ratings,
                                          "-k", "5", "-s", str(dropped)])
    assert result.exit_code == 0, result.output
    assert dropped.read_text() == plain.read_text()


def test_k_above_128_and_above_the_item_count(model, tmp_path):
    out = tmp_path / "recs.txt"
    items = len((model / "features_output").read_text().splitlines())
    assert run(model, "-r", str(model / "ratings.txt"), "-k", "500", output=str(out)).exit_code == 0
    recs = records(out)
    for listed in recs.values():
        assert len(listed) <= items  # padding units (width 128) are never returned
        assert len({item for item, _ in listed}) == len(listed)
    assert max(len(v) for v in recs.values()) > 0


@pytest.mark.parametrize("quiet", [[], ["-q"]], ids=["", "quiet"])
def test_unknown_features_still_get_a_line(model, tmp_path, quiet):
    """The features dropped are reported, -q or not (it leaves out the summary alone); a
    sample left one known feature is scored from it, not counted as having none."""
    src = tmp_path / "in.txt"
    known = (model / "ratings.txt").read_text().splitlines()[0].split("\t")[1]
    src.write_text(f"stranger\tnot-an-item:nor-this\nregular\t{known}:unknown-item\n"
                   f"single\t{known.split(':')[0]}\n")
    out = tmp_path / "recs.txt"
    result = run(model, "-r", str(src), "-k", "3", *quiet, output=str(out))
    assert result.exit_code == 0, result.output
    assert ("wrote" in result.stderr) != bool(quiet)
    assert "dropped 3 features" in result.stderr and "from 2 lines" in result.stderr
    assert "1 sample has no known feature; its recommendations" in result.stderr
    recs = records(out)
    assert list(recs) == ["stranger", "regular", "single"] and len(recs["stranger"]) == 3


def test_stdout_and_batches_agree(model, tmp_path):
    text = str(model / "ratings.txt")
    one = run(model, "-r", text, "-k", "7", "-b", "1", output="-")
    many = run(model, "-r", text, "-k", "7", "-b", "256", output="-")
    assert one.exit_code == many.exit_code == 0
    assert one.stdout == many.stdout and one.stdout.count("\n") == 300


def test_split_layers_without_mpiexec_says_so_and_changes_nothing(model):
    text = str(model / "ratings.txt")
    plain = run(model, "-r", text, "-k", "7", output="-")
    split = run(model, "-r", text, "-k", "7", "--split-layers", output="-")
    assert plain.exit_code == split.exit_code == 0 and split.stdout == plain.stdout
    assert "--split-layers has nothing to split without mpiexec" in split.stderr


def test_tf32_on_the_cpu_changes_nothing(model, tmp_path):
    """``--tf32`` allows TF32 products where a GPU computes them; the cpu's are float32
    anyway: the same records, and no mention of TF32."""
    plain, tf32 = tmp_path / "plain.txt", tmp_path / "tf32.txt"
    ratings = str(model / "ratings.txt")
    assert run(model, "-r", ratings, "--backend", "cpu", output=str(plain)).exit_code == 0
    result = run(model, "-r", ratings, "--backend", "cpu", "--tf32", output=str(tf32))
    assert result.exit_code == 0, result.output
    assert "TF32" not in result.output
    assert tf32.read_text() == plain.read_text()


@pytest.mark.parametrize("flags, expected", [([], ("auto", False)),
                                             (["--backend", "cpu", "--tf32"], ("cpu", True))])
def test_backend_and_tf32_reach_the_backend(model, tmp_path, monkeypatch, flags, expected):
    """--backend (auto by default) and --tf32 (off) choose the kernels predict scores with."""
    import destiny.kernels

    real, asked = destiny.kernels.get_backend, []

    def spy(backend, tf32=False, **kw):
        asked.append((backend, tf32))
        return real("cpu", **kw)

    monkeypatch.setattr(destiny.kernels, "get_backend", spy)
    result = run(model, "-r", str(model / "ratings.txt"), *flags, output=str(tmp_path / "r"))
    assert result.exit_code == 0, result.output
    assert asked == [expected]


def test_quiet_predict_writes_nothing_to_stderr_and_batches_1024(model, tmp_path, monkeypatch):
    """-q: no summary on stderr (README); without -b, batches of 1024 samples (spec 8.1)."""
    import destiny.predict

    real, batches = destiny.predict.predict_file, []

    def spy(*args, **kw):
        batches.append(kw["batch_size"])
        return real(*args, **kw)

    monkeypatch.setattr(destiny.predict, "predict_file", spy)
    result = run(model, "-r", str(model / "ratings.txt"), "-q", output=str(tmp_path / "r"))
    assert result.exit_code == 0 and result.output == "", result.output
    assert batches == [1024]
    assert "wrote" in run(model, "-r", str(model / "ratings.txt"),
                          output=str(tmp_path / "again")).output  # (the summary -q leaves out)


def test_items_never_seen_in_training_are_not_recommended(model, tmp_path):
    index = tmp_path / "features_output"
    lines = (model / "features_output").read_text()
    index.write_text(lines + "brand-new-item\t120\n")  # a unit that was never a target
    out = tmp_path / "recs.txt"
    argv = ["-n", str(model / "gl.nc"), "-i", str(model / "features_input"), "-o", str(index),
            "-s", str(out), "-r", str(model / "ratings.txt"), "-k", "500"]
    assert CliRunner().invoke(predict, argv).exit_code == 0
    assert "brand-new-item" not in out.read_text()


@pytest.mark.parametrize("fmt", ["4.3f", ".3e", "+08.2f", "g", "10.4G", "4.3lf", "99.99f"])
def test_score_formats_of_printf_are_taken(model, tmp_path, fmt):
    out = tmp_path / "recs.txt"
    result = run(model, "-r", str(model / "ratings.txt"), "-k", "2", "-p", fmt, output=str(out))
    assert result.exit_code == 0, result.output
    for pair in out.read_text().splitlines()[0].split("\t")[1].split(":")[:-1]:
        score = pair.split(",")[1]
        assert f"%{fmt}" % float(score) == score  # written with -p's conversion


@pytest.mark.parametrize("args,message", [
    (["-d", "ml"], "-d ml: the network's input layer reads the dataset 'gl_input'"),
    (["-l", "Out"], "the network has no layer named 'Out'"),
    (["-l", "Input"], "-l Input: is the network's input layer, which has no activations"),
    (["-l", "Hidden"], "-l Hidden: is a hidden layer, whose units are not items"),
    (["-p", "q"], "is not a printf conversion"),
    (["-p", "abc"], "'abc' is not a printf conversion"),  # Python's % took 'a', then "bc"
    (["-p", "4.3d"], "'4.3d' is not a printf conversion"),
    (["-p", "4.3f,9"], "'4.3f,9' is not a printf conversion"),  # a ',' inside the records
    (["-p", "1000000000f"], "'1000000000f' asks for a width or precision above 99"),  # (memory)
    (["-p", ".99999999999f"], "asks for a width or precision above 99"),  # (a traceback)
    (["-r", "nope.txt"], "nope.txt: the input file does not exist; check the -r path"),
    (["-f", "nope.txt"], "nope.txt: the input file does not exist; check the -f path"),
    (["-k", "0"], "0 is not in the range x>=1"),
    (["-b", "0"], "0 is not in the range x>=1"),
])
def test_predict_errors(model, tmp_path, args, message):
    """Bad input exits 1; a value the command line refuses (-p, -k, -b) is a usage error, 2."""
    out = tmp_path / "recs.txt"
    result = run(model, "-r", str(model / "ratings.txt"), *args, output=str(out))
    assert result.exit_code == (2 if args[0] in ("-p", "-k", "-b") else 1), result.output
    assert message in result.output
    assert not out.exists()


@pytest.mark.parametrize("flag", ["-r", "-f"])
def test_a_nul_in_a_label_is_refused(model, tmp_path, flag):
    """It would go into the recommendations, text read line by line, which a NUL breaks."""
    bad = tmp_path / "bad.txt"
    first = (model / "ratings.txt").read_bytes().split(b"\n")[0]
    bad.write_bytes(b"u\x001\t" + first.split(b"\t")[1] + b"\n")
    args = {"-r": str(model / "ratings.txt"), flag: str(bad)}
    out = tmp_path / "recs.txt"
    result = run(model, *[x for kv in args.items() for x in kv], output=str(out))
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"Error: {bad}, line 1, column 2: the line 'u\\x001\\t")
    assert "holds a NUL byte (\\x00) in its sample name" in result.output
    assert not out.exists()


@pytest.mark.parametrize("target,what", [
    ("ratings.txt", "would replace the input text (-r)"),
    ("features_output", "would replace the output index (-o)"),
    ("gl.nc", "would replace the network file (-n)"),
])
def test_predict_refuses_to_write_over_an_input(model, target, what):
    path = model / target
    before = path.read_bytes()
    result = run(model, "-r", str(model / "ratings.txt"), output=str(path))
    assert result.exit_code == 1 and f"recommendations file (-s) {what}" in result.output
    assert path.read_bytes() == before


def test_predict_refuses_an_index_the_network_was_not_trained_with(model, tmp_path):
    """The network records the feature index of each dataset it was trained on: an index cut
    short, or rebuilt with -c on other data (same items, numbered anew), would label its
    units with the wrong items, silently; an index grown since (-m) still fits."""
    lines = (model / "features_output").read_text().splitlines(keepends=True)
    names = [line.split("\t")[0] for line in lines]
    cases = {
        "short": ("".join(lines[:len(lines) // 2]), "this file has only"),
        "renumbered": ("".join(f"{n}\t{i}\n" for i, n in enumerate(reversed(names))),
                       f"this file's entries numbered below {len(lines)} differ from them"),
        "grown": ("".join(lines) + f"new-item\t{len(lines)}\n", None),
    }
    for case, (text, message) in cases.items():
        index = tmp_path / f"{case}_output"
        index.write_text(text)
        out = tmp_path / f"{case}.txt"
        argv = ["-n", str(model / "gl.nc"), "-i", str(model / "features_input"), "-o", str(index),
                "-s", str(out), "-r", str(model / "ratings.txt")]
        result = CliRunner().invoke(predict, argv)
        if message is None:
            assert result.exit_code == 0, result.output
            continue
        assert result.exit_code == 1, case
        assert f"{index}: is not the output index this network was trained with" in result.output
        assert f"an index of {len(lines)} entries, and {message}" in result.output
        assert not out.exists()


def test_features_no_training_example_had_are_left_out(model, tmp_path):
    """An input index grown with -m since training: the features added have only their
    initial random weights, so they are left out and counted, as unknown features are (they
    used to move the scores at random)."""
    from destiny.io.network_file import read_network

    lines = (model / "features_input").read_text().splitlines(keepends=True)
    index = tmp_path / "grown_input"
    index.write_text("".join(lines) + f"new-a\t{len(lines)}\nnew-b\t{len(lines) + 1}\n")
    counts = read_network(model / "gl.nc").arrays["input_counts_Input"]
    assert (counts[:len(lines)] > 0).all() and (counts[len(lines):] == 0).all()
    user, known = (model / "ratings.txt").read_text().splitlines()[0].split("\t")
    src = tmp_path / "in.txt"
    src.write_text(f"{user}\t{known}:new-a:new-b\n")
    plain, grown = tmp_path / "plain.txt", tmp_path / "grown.txt"
    (tmp_path / "known.txt").write_text(f"{user}\t{known}\n")
    assert run(model, "-r", str(tmp_path / "known.txt"), output=str(plain)).exit_code == 0
    result = CliRunner().invoke(predict, [
        "-n", str(model / "gl.nc"), "-i", str(index), "-o", str(model / "features_output"),
        "-r", str(src), "-s", str(grown)])
    assert result.exit_code == 0, result.output
    assert "dropped 2 features that are not in" in result.stderr
    assert grown.read_text() == plain.read_text()


def test_features_left_out_of_the_input_still_filter(model, tmp_path):
    """Leaving features out of the input (above) must not leave them out of the filter: the
    filter's items are the output's, and an item may be a target that no input had."""
    from destiny.predict import Predictor

    lines = (model / "features_input").read_text().splitlines(keepends=True)
    index = tmp_path / "grown"
    index.write_text("".join(lines) + f"new-a\t{len(lines)}\n")
    predictor = Predictor(model / "gl.nc", index, index, dataset=None, backend="cpu")
    assert predictor.features_left_out == 1
    user, known = (model / "ratings.txt").read_text().splitlines()[0].split("\t")
    src = tmp_path / "in.txt"
    src.write_text(f"{user}\t{known}:new-a\n")
    records = predictor.read_input(src)
    indptr, indices, _ = predictor.read_filter(src, records, input_path=src, values=False)
    assert len(indices) == len(records.indices) + 1  # new-a is filtered, though not an input


def test_an_index_with_gaps_grown_since_still_passes():
    """An index numbered with gaps (a 0, b 1, c 5) grows from its size up (d 3), so its
    entries numbered below its size stay those the network recorded."""
    from destiny.errors import DataFormatError
    from destiny.io.index import index_digest
    from destiny.predict import check_trained_index

    labels, values = ["a", "b", "c"], np.array([0, 1, 5])
    trained = (3, index_digest(labels, values, 3))
    check_trained_index("idx", labels + ["d"], np.array([0, 1, 5, 3]), trained, "output", "Out")
    with pytest.raises(DataFormatError, match="entries numbered below 3 differ"):
        check_trained_index("idx", ["b", "a", "c"], np.array([0, 1, 5]), trained, "output",
                            "Out")


def test_a_second_run_to_the_same_output_stops_and_a_killed_runs_file_is_removed(model,
                                                                                 tmp_path):
    """Two runs writing one recommendations file: the second stops at once, as train does. A
    run killed outright (SIGKILL, the OOM killer) leaves its temporary file, as large as the
    output: the next run to that output removes it once it is an hour old, and only its."""
    import os
    import time

    from destiny.io.atomic import ABANDONED_SECONDS, exclusive

    out = tmp_path / "recs.txt"
    with exclusive(out, "recommendations file (-s)"):
        result = run(model, "-r", str(model / "ratings.txt"), output=str(out))
        assert result.exit_code == 1
        assert f"{out}: another run is writing this recommendations file (-s) now" in result.output
    left = {name: b"partial" for name in (".recs.txt.k3m_x9qa.tmp", ".recs.txt.0123abcd.tmp",
                                          ".recs.txt.0123abc.tmp", ".recs.txt2.0123abcd.tmp",
                                          ".other.txt.0123abcd.tmp", "recs.txt.0123abcd.tmp")}
    old = time.time() - ABANDONED_SECONDS - 60
    for name, data in left.items():
        (tmp_path / name).write_bytes(data)
        os.utime(tmp_path / name, (old, old))
    (tmp_path / ".recs.txt.fresh123.tmp").write_bytes(b"written a minute ago")
    result = run(model, "-r", str(model / "ratings.txt"), output=str(out))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        {"recs.txt", ".recs.txt.0123abc.tmp", ".recs.txt2.0123abcd.tmp",
         ".other.txt.0123abcd.tmp", "recs.txt.0123abcd.tmp", ".recs.txt.fresh123.tmp"})


def test_records_go_through_links_devices_and_pipes_without_replacing_them(model, tmp_path):
    """A link's target gets the records and the link stays; a device or named pipe is
    written as a stream (the rename into place would replace it: as root, /dev/null)."""
    import os
    import stat
    import threading

    ratings = str(model / "ratings.txt")
    plain = tmp_path / "plain.txt"
    assert run(model, "-r", ratings, "-k", "5", output=str(plain)).exit_code == 0
    expected = plain.read_text()

    target, link = tmp_path / "target.txt", tmp_path / "link.txt"
    target.write_text("old\n")
    link.symlink_to(target)
    assert run(model, "-r", ratings, "-k", "5", output=str(link)).exit_code == 0
    assert link.is_symlink() and target.read_text() == expected

    null = tmp_path / "null"
    null.symlink_to("/dev/null")
    result = run(model, "-r", ratings, "-k", "5", output=str(null))
    assert result.exit_code == 0, result.output
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and null.is_symlink()

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    received = []
    reader = threading.Thread(target=lambda: received.append(pipe.read_text()), daemon=True)
    reader.start()
    result = run(model, "-r", ratings, "-k", "5", output=str(pipe))
    reader.join(timeout=60)
    assert result.exit_code == 0, result.output
    assert received == [expected] and stat.S_ISFIFO(os.stat(pipe).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "null", "pipe",
                                                          "plain.txt", "target.txt"]


def test_a_reader_that_leaves_the_pipe_stops_predict_as_sigpipe_does(model):
    """`predict -s - | head`: once head has its lines and leaves, predict stops silently with
    SIGPIPE's status (141), as cat or grep would; exit code 1 would fail a pipeline under
    `set -o pipefail` as a real error."""
    import pathlib
    import signal
    import subprocess
    import sys

    predict_bin = pathlib.Path(sys.executable).parent / "predict"
    proc = subprocess.Popen(  # -k 90: ~250 KB of records, beyond what the pipe holds
        [str(predict_bin), "-n", str(model / "gl.nc"), "-i", str(model / "features_input"),
         "-o", str(model / "features_output"), "-r", str(model / "ratings.txt"), "-k", "90",
         "-s", "-"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().count(b",") == 90
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == -signal.SIGPIPE, stderr
    assert "Error" not in stderr and "Traceback" not in stderr, stderr


def test_a_reader_of_stderr_that_leaves_does_not_stop_predict(model, tmp_path):
    """`predict ... 2>&1 | head` with the records going to a file: the notes have nowhere to
    go and are dropped, and the file is written whole (it used to be lost to SIGPIPE)."""
    import pathlib
    import subprocess
    import sys

    predict_bin = pathlib.Path(sys.executable).parent / "predict"
    argv = [str(predict_bin), "-n", str(model / "gl.nc"), "-i", str(model / "features_input"),
            "-o", str(model / "features_output"), "-r", str(model / "ratings.txt"), "-k", "5"]
    proc = subprocess.Popen([*argv, "-s", str(tmp_path / "recs")], stderr=subprocess.PIPE)
    proc.stderr.close()
    assert proc.wait(timeout=120) == 0
    expected = subprocess.run([*argv, "-s", "-", "-q"], capture_output=True, check=True).stdout
    assert (tmp_path / "recs").read_bytes() == expected and expected.count(b"\n") > 10


def test_a_closed_stderr_does_not_fail_predict(model, tmp_path):
    """`predict ... 2>&-`: Python has no sys.stderr then, and the notes ended the run with exit
    status 120 though the file was written; a failure still exits 1."""
    import os
    import pathlib
    import subprocess
    import sys

    predict_bin = pathlib.Path(sys.executable).parent / "predict"
    argv = [str(predict_bin), "-n", str(model / "gl.nc"), "-i", str(model / "features_input"),
            "-o", str(model / "features_output"), "-r", str(model / "ratings.txt"), "-k", "5"]

    def closed(*args):
        return subprocess.run(args, preexec_fn=lambda: os.close(2), timeout=120).returncode

    assert closed(*argv, "-s", str(tmp_path / "recs")) == 0
    expected = subprocess.run([*argv, "-s", "-", "-q"], capture_output=True, check=True).stdout
    assert (tmp_path / "recs").read_bytes() == expected
    assert closed(*argv, "-s", str(tmp_path / "recs2"), "-l", "nope") == 1
    assert not (tmp_path / "recs2").exists()


def test_alike_indices_are_digested_once(model, monkeypatch):
    """An autoencoder's input and output indices map alike: the check of each against the
    network's record computes one digest for both (0.26 s each at 930k items)."""
    import destiny.predict as module

    calls = []

    def counted(labels, values, below):
        calls.append(below)
        return index_digest(labels, values, below)

    index_digest = module.index_digest
    monkeypatch.setattr(module, "index_digest", counted)
    predictor = module.Predictor(model / "gl.nc", model / "features_input",
                                 model / "features_output", dataset=None, backend="cpu")
    assert predictor.indices_alike and len(calls) == 1


def wide_network(output_activation="Sigmoid", n_out=3000, extra_layer=False):
    """An untrained network with a wide output layer whose large weights saturate many
    Sigmoid units to 1.0 (ties that go by item) and a sparse input batch for it."""
    import numpy as np

    from destiny.kernels import get_backend
    from destiny.netdef import parse_netdef
    from destiny.network import Network

    layers = [{"Name": "Input", "Kind": "Input", "N": 400, "DataSet": "in", "Sparse": True},
              {"Name": "Hidden", "Kind": "Hidden", "N": 16, "Activation": "Sigmoid"},
              {"Name": "Output", "Kind": "Output", "N": n_out, "DataSet": "out",
               "Activation": output_activation}]
    if extra_layer:  # the hidden layer is also an output: top-k of it cannot skip f
        layers.append({"Name": "Echo", "Kind": "Output", "N": 8, "DataSet": "echo",
                       "Source": ["Hidden"], "Activation": "Sigmoid"})
    nd = parse_netdef({"ErrorFunction": "L2", "Layers": layers})
    net = Network(nd, get_backend("cpu"))
    net.initialize(3)
    rng = np.random.default_rng(3)
    for c in net.connections:
        c.W[:] = rng.normal(0, 3.0, c.W.shape)
        c.b[:] = rng.normal(0, 4.0, c.b.shape)
    rows = 40
    indptr = np.arange(0, rows * 6 + 1, 6, dtype=np.int64)
    indices = rng.integers(0, 400, rows * 6).astype(np.int32)
    return net, (indptr, indices)


def test_top_k_of_pre_activations_equals_top_k_after_the_activation():
    """Prediction's fused path (z kept, the Sigmoid applied to the candidates inside top-k)
    returns what the reference's activation and top-k return, saturated ties included. The cpu
    activation pass (NumPy's float32 exp) rounds a few z near 17 to 1.0 where float64 gives
    1 - 2^-24: the same scores to 1e-7, the order of such near-ties by item aside."""
    import numpy as np

    from destiny.kernels.reference.pointwise import activation_forward
    from destiny.predict import fused_activation, score_batches, top_k

    net, (indptr, indices) = wide_network()
    exclude = (indptr, indices % 3000)  # some of the wide layer's items filtered out
    for k in (1, 20):
        activation = fused_activation(net, "Output", k, 3000)
        assert activation is not None
        (_, z), = score_batches(net, indptr, indices, batch_size=64, pre_activations=True)
        z = z.copy()
        fused = top_k(z, k, exclude_indptr=exclude[0], exclude_indices=exclude[1],
                      activation=activation)
        scores = np.empty_like(z)
        activation_forward(scores, z, *activation)
        assert (scores == 1.0).sum() > 40 * k  # more ties at 1.0 than a row's K
        expected = top_k(scores, k, exclude_indptr=exclude[0], exclude_indices=exclude[1])
        np.testing.assert_array_equal(fused[0], expected[0])
        np.testing.assert_array_equal(fused[1], expected[1])
        (_, plain_scores), = score_batches(net, indptr, indices, batch_size=64)
        plain = top_k(plain_scores, k, exclude_indptr=exclude[0], exclude_indices=exclude[1])
        np.testing.assert_allclose(fused[1], plain[1], rtol=0, atol=1.2e-7)


def test_fused_top_k_only_where_it_is_exact_and_pays():
    net, _ = wide_network()
    assert fused_activation_of(net, k=40) is not None
    assert fused_activation_of(net, k=1000) is None  # too few blocks of 32 for a floor
    assert fused_activation_of(net, k=10, n_not_allowed=2900) is None
    assert fused_activation_of(wide_network("SoftMax")[0], k=10) is None  # not elementwise
    net, (indptr, indices) = wide_network(extra_layer=True)
    # (a layer another reads is never fused: test_an_output_layer_that_feeds_another_...;
    # Hidden here is also too narrow for a floor, so asking fused_activation proves nothing)
    with pytest.raises(ValueError, match="feeds other layers"):
        from destiny.network import Batch
        net.forward(Batch(size=40, inputs={"Input": (indptr, indices, indices[:0] * 0.0)}),
                    pre_activation="Hidden")


def fused_activation_of(net, k, n_not_allowed=0, layer="Output"):
    from destiny.predict import fused_activation

    return fused_activation(net, layer, k, net.layers[layer].n, n_not_allowed)


def test_recommend_takes_the_fused_path_and_agrees_with_the_plain_one(model, monkeypatch):
    """``Predictor.recommend`` through top_k_activated (forced on for this 90-item model, where
    there is no block floor and every item is evaluated) against the activation pass."""
    import numpy as np

    import destiny.predict as P

    predictor = P.Predictor(model / "gl.nc", model / "features_input", model / "features_output",
                            dataset=None, backend="cpu")
    records = predictor.read_input(model / "ratings.txt")
    filter_csr = predictor.read_filter(model / "ratings.txt", records)
    results = {}
    for fused in (True, False):
        calls = []
        real = P.fused_activation

        def spy(*args, fused=fused, real=real, calls=calls):
            calls.append(real(*args) if fused else None)
            return calls[-1]

        monkeypatch.setattr(P, "_FUSED_BLOCKS_PER_RANK", 0)
        monkeypatch.setattr(P, "fused_activation", spy)
        out = list(predictor.recommend(records, 7, filter_csr=filter_csr, batch_size=128))
        assert calls and all((c is not None) == fused for c in calls)
        results[fused] = [np.concatenate([o[i] for o in out]) for i in (1, 2)]
    (items, scores), (plain_items, plain_scores) = results[True], results[False]
    np.testing.assert_allclose(scores, plain_scores, rtol=0, atol=1e-6)
    # A slot whose score is more than 1e-6 from both neighbours holds the same item.
    gap = np.abs(np.diff(plain_scores, axis=1)) > 1e-6
    clear = np.ones(scores.shape, bool)
    clear[:, :-1] &= gap
    clear[:, 1:] &= gap
    assert clear.mean() > 0.5
    np.testing.assert_array_equal(items[clear], plain_items[clear])


def test_the_input_given_again_as_the_filter_is_not_parsed_again(model, tmp_path, monkeypatch):
    """``-r X -f X`` with indices that map alike: the filter is the input's own parse, the
    same rows as parsing the file again; any other case parses the filter file."""
    import numpy as np

    import destiny.predict as P

    text = model / "ratings.txt"
    predictor = P.Predictor(model / "gl.nc", model / "features_input", model / "features_output",
                            dataset=None, backend="cpu")
    assert predictor.indices_alike  # the fixture writes both indices from one file
    records = predictor.read_input(text)
    parsed = predictor.read_filter(text, records)
    parses = []
    real = P.read_records
    monkeypatch.setattr(P, "read_records", lambda *a, **k: parses.append(1) or real(*a, **k))
    reused = predictor.read_filter(str(text), records, input_path=text, values=False)
    assert not parses
    for got, expected in zip(reused[:2], parsed[:2], strict=True):
        np.testing.assert_array_equal(got, expected)
    predictor.read_filter(text, records, input_path=text, values=True)  # multiply's values
    copy = tmp_path / "copy.txt"
    copy.write_bytes(text.read_bytes())
    predictor.read_filter(copy, records, input_path=text, values=False)  # another file
    predictor.indices_alike = False
    predictor.read_filter(text, records, input_path=text, values=False)
    assert len(parses) == 3


def test_standard_input_as_both_samples_and_filter_is_read_once_or_refused(model, tmp_path):
    """`predict -r - -f -` reads standard input once, the filter being the input's own parse
    (``-r X -f X``'s). Where the filter is parsed apart from the input (--filter-mode
    multiply, input features left out as untrained, indices that map otherwise), the second
    read found the pipe drained and filtered nothing without a word (from a terminal it
    waited for more): refused before anything is read or written, a usage error where the
    flags alone tell. Standard input redirected from a file is opened again, as a file."""
    import pathlib
    import subprocess

    text = model / "ratings.txt"
    args = [str(pathlib.Path(sys.executable).parent / "predict"), "-n", str(model / "gl.nc"),
            "-k", "5", "-q", "-s", "-"]

    def piped(*more, indices=(model / "features_input", model / "features_output"),
              stdin=None):
        return subprocess.run([*args, "-i", str(indices[0]), "-o", str(indices[1]), *more],
                              capture_output=True,
                              timeout=300, **({"stdin": stdin} if stdin else
                                              {"input": text.read_bytes()}))

    def from_file(*more):
        done = piped("-r", str(text), "-f", str(text), *more)
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout

    done = piped("-r", "-", "-f", "-")
    assert done.returncode == 0 and done.stdout == from_file(), done.stderr.decode()
    done = piped("-r", "-", "-f", "-", "--filter-mode", "multiply")
    assert done.returncode == 1 and done.stdout == b"", done.stderr.decode()
    said = " ".join(done.stderr.decode().split())
    assert ("Error: /dev/stdin: -r and -f both read it, but standard input or a pipe can be "
            "read only once, and the filter is parsed apart from the input here: "
            "--filter-mode multiply reads the filter's values, which the input's parse does "
            "not keep; write it to a file and give that with -r and -f.") in said, said
    with open(text, "rb") as redirected:  # (`< ratings.txt`: read as a file, twice)
        done = piped("-r", "-", "-f", "-", "--filter-mode", "multiply", stdin=redirected)
    assert done.returncode == 0
    assert done.stdout == from_file("--filter-mode", "multiply"), done.stderr.decode()
    lines = (model / "features_input").read_text().splitlines(keepends=True)
    grown = tmp_path / "grown"  # (a feature added since training: left out of the input)
    grown.write_text("".join(lines) + f"new-a\t{len(lines)}\n")
    for indices, why in (((grown, grown), b"the input's features that no training example had "
                                          b"are left out of it"),
                         ((grown, model / "features_output"), b"the input and output indices "
                                                              b"map the features otherwise")):
        done = piped("-r", "-", "-f", "-", "-s", str(tmp_path / "recs"), indices=indices)
        assert done.returncode == 1, done.stderr.decode()
        assert b"the filter is parsed apart from the input here: " + why in done.stderr, \
            done.stderr.decode()
        assert os.listdir(tmp_path) == ["grown"]


@pytest.mark.parametrize("ranks", [2, 3, 5])
def test_merging_the_ranks_top_k_is_the_top_k_of_all(ranks):
    """--split-layers: each rank ranks its own units, and rank 0 merges their k best into what
    top_k of the whole row gives: ties by item across ranks, NaN below -inf, slots left empty
    where the candidates run out (filtered items, rows of few allowed items)."""
    from destiny.parallel import unit_range
    from destiny.predict import merge_top_k, top_k

    rng = np.random.default_rng(7)
    rows, n = 30, 41
    scores = rng.integers(0, 6, (rows, n)).astype(np.float32) / 4  # many ties
    scores[rng.random((rows, n)) < 0.05] = np.nan
    scores[rng.random((rows, n)) < 0.05] = -np.inf
    allowed = (rng.random(n) < 0.8).astype(np.uint8)
    lengths = rng.integers(0, 30, rows)
    lengths[3] = n  # every item filtered: a row of empty slots
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    indices = np.concatenate([rng.permutation(n)[:m] for m in lengths]).astype(np.int32)
    for k in (1, 7, 40, 50):
        expected = top_k(scores, k, exclude_indptr=indptr, exclude_indices=indices,
                         allowed=allowed)
        items, best = [], []
        for r in range(ranks):
            lo, hi = unit_range(n, r, ranks)
            keep = (indices >= lo) & (indices < hi)
            row_of = np.repeat(np.arange(rows), lengths)
            mine = np.concatenate([[0], np.cumsum(np.bincount(row_of[keep], minlength=rows))])
            i, s = top_k(scores[:, lo:hi], k, exclude_indptr=mine,
                         exclude_indices=indices[keep] - lo, allowed=allowed[lo:hi])
            items.append(np.where(i >= 0, i + lo, i))
            best.append(s)
        for order in (1, -1):  # (in any order of the ranks)
            merged = merge_top_k(items[::order], best[::order], k)
            np.testing.assert_array_equal(merged[0], expected[0])
            np.testing.assert_array_equal(merged[1], expected[1])


def _write_linear_4x4(d, W):
    """gl.nc in ``d``: a DSSTNE network of 4 sparse inputs straight into 4 Linear outputs (no
    padding units), with weights ``W`` [in, out] and the output biases 0, 0, 0.0625, 0."""
    from destiny.io.network_file import write_network
    from destiny.netdef import parse_netdef

    nd = parse_netdef({"ErrorFunction": "L2", "Layers": [
        {"Name": "Input", "Kind": "Input", "N": 4, "DataSet": "gl_input", "Sparse": True},
        {"Name": "Output", "Kind": "Output", "N": 4, "DataSet": "gl_output", "Source": "Input",
         "Activation": "Linear"}]}).resolve({})
    write_network(d / "gl.nc", nd, {0: np.float32(W)}, {0: np.float32([0.0, 0.0, 0.0625, 0.0])})


def test_a_k_beyond_an_output_layer_without_padding_gives_every_item(tmp_path):
    """A DSSTNE network whose output layer has exactly as many units as the index has items
    (no padding units): -k beyond them lists all four, best first, each score as %4.3f."""
    # Linear output: the scores are the rows of W listed plus the bias, worked by hand.
    _write_linear_4x4(tmp_path, [[0.5, 0.25, 0.0, 0.125], [0.0, 0.5, 0.25, 0.0],
                                 [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    index = "a\t0\nb\t1\nc\t2\nd\t3\n"
    for name in ("features_input", "features_output"):
        (tmp_path / name).write_text(index)
    (tmp_path / "in.txt").write_text("u1\ta:b\nu2\tc\n")
    result = run(tmp_path, "-r", str(tmp_path / "in.txt"), "-k", "99",
                 output=str(tmp_path / "recs.txt"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "recs.txt").read_text() == (
        "u1\tb,0.750:a,0.500:c,0.312:d,0.125:\n"
        "u2\tc,0.062:a,0.000:b,0.000:d,0.000:\n")


def test_without_k_a_sample_gets_100_recommendations_and_4_3f_scores(model, tmp_path):
    """Spec 8.1: -k defaults to 100 and -p to 4.3f. The model's 90 items give every line
    all its recommendable items, as -k 100 -p 4.3f does, more than 10 on a line."""
    default, explicit = tmp_path / "default.txt", tmp_path / "explicit.txt"
    assert run(model, "-r", str(model / "ratings.txt"), output=str(default)).exit_code == 0
    assert run(model, "-r", str(model / "ratings.txt"), "-k", "100", "-p", "4.3f",
               output=str(explicit)).exit_code == 0
    assert default.read_text() == explicit.read_text()
    assert max(len(v) for v in records(default).values()) > 10


def test_the_multiplying_filter_scales_the_activations_even_on_a_wide_layer():
    """Spec 8.3: DSSTNE's filter multiplies the output layer's activations, score *= value
    (0.0 without one). On a layer wide enough for the fused top-k (which ranks pre-activations
    z and applies f inside), the multiply mode must still scale f(z), not z: an item filtered
    without a value scores 0.0 (never Sigmoid(0 * z) = 0.5), one with 2.0 scores 2 f(z)."""
    from destiny.predict import fused_activation, queue_recommendations, score_batches, top_k

    net, (indptr, indices) = wide_network()
    rows, k = len(indptr) - 1, 20
    assert fused_activation(net, "Output", k, 3000) is not None  # (the remove mode's way)
    (_, activations), = score_batches(net, indptr, indices, batch_size=64)
    expected = activations.copy()
    # Every row's filter: items 0..9 without a value (0.0), item 10 with 2.0. Its scores by
    # hand: the activations with those columns scaled.
    expected[:, :10] = 0.0
    expected[:, 10] *= 2.0
    filter_csr = (np.arange(0, 11 * rows + 1, 11, dtype=np.int64),
                  np.tile(np.arange(11, dtype=np.int32), rows),
                  np.tile(np.float32([0.0] * 10 + [2.0]), rows))
    (_, items, scores), = queue_recommendations(net, indptr, indices, k, layer="Output",
                                                batch_size=64, filter_csr=filter_csr,
                                                multiply=True)
    items, scores = items.get(), scores.get()
    want_items, want_scores = top_k(expected, k)
    np.testing.assert_array_equal(items, want_items)
    np.testing.assert_array_equal(scores, want_scores)
    assert (scores > 1.0).any()  # (item 10 doubled: above what a Sigmoid gives)


def test_an_output_layer_that_feeds_another_is_ranked_after_its_activation():
    """A wide output layer that another layer reads keeps its activations (the fused top-k,
    which needs its pre-activations, cannot be taken): the K best are those of f(z)."""
    from destiny.kernels import get_backend
    from destiny.netdef import parse_netdef
    from destiny.network import Network
    from destiny.predict import fused_activation, queue_recommendations, score_batches, top_k

    layers = [{"Name": "Input", "Kind": "Input", "N": 400, "DataSet": "in", "Sparse": True},
              {"Name": "Output", "Kind": "Output", "N": 3000, "DataSet": "out",
               "Activation": "Sigmoid"},
              {"Name": "Echo", "Kind": "Output", "N": 8, "DataSet": "echo", "Source": ["Output"],
               "Activation": "Sigmoid"}]
    net = Network(parse_netdef({"ErrorFunction": "L2", "Layers": layers}), get_backend("cpu"))
    net.initialize(3)
    indptr = np.arange(0, 41 * 6, 6, dtype=np.int64)
    indices = np.random.default_rng(3).integers(0, 400, 40 * 6).astype(np.int32)
    assert fused_activation(net, "Output", 2, 3000) is None  # (wide enough, but read by Echo)
    (_, items, scores), = queue_recommendations(net, indptr, indices, 2, layer="Output",
                                                batch_size=64)
    (_, activations), = score_batches(net, indptr, indices, batch_size=64)
    want_items, want_scores = top_k(activations, 2)
    np.testing.assert_array_equal(items.get(), want_items)
    np.testing.assert_array_equal(scores.get(), want_scores)


def test_an_output_index_numbering_an_item_past_the_layer_is_refused(model, tmp_path):
    """The model's output layer has 128 units (0..127): an index grown since training with an
    item numbered 128 has no unit for it, and is named, as an index the network was not
    trained with (not an IndexError's traceback)."""
    index = tmp_path / "features_output"
    index.write_text((model / "features_output").read_text() + "late-item\t128\n")
    out = tmp_path / "recs.txt"
    result = CliRunner().invoke(predict, [
        "-n", str(model / "gl.nc"), "-i", str(model / "features_input"), "-o", str(index),
        "-s", str(out), "-r", str(model / "ratings.txt")])
    assert result.exit_code == 1, result.output
    assert result.output == (f"Error: {index}: has index 128 but the layer 'Output' has 128 "
                             "units; it is not the output index this network was trained "
                             "with.\n")
    assert not out.exists()


def test_a_sample_repeated_in_the_input_is_refused(model, tmp_path):
    """docs/dsstne.md: a sample repeated in the input is an error (DSSTNE kept its last line)."""
    first, second = (model / "ratings.txt").read_text().splitlines()[:2]
    name = first.split("\t")[0]
    src = tmp_path / "in.txt"
    src.write_text(f"{first}\n{second}\n{name}\t{second.split(chr(9))[1]}\n")
    out = tmp_path / "recs.txt"
    result = run(model, "-r", str(src), output=str(out))
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"Error: {src}, line 3: the sample {name!r} appears again "
                                    "(first on line 1)."), result.output
    assert not out.exists()


def test_the_rows_an_mpi_rank_scores_are_their_own_csr_arrays():
    """``_rows`` (the share of the samples a rank scores under mpiexec) starts its rows at 0,
    as every CSR reader takes them: rows 1..2 of [[1, 2], [3], [4, 5]] are [[3], [4, 5]]."""
    from destiny.io.text import Records
    from destiny.predict import _rows

    records = Records(labels=["a", "b", "c"], indptr=np.array([0, 2, 3, 5]),
                      indices=np.array([1, 2, 3, 4, 5], np.int32))
    filter_csr = (np.array([0, 1, 1, 3]), np.array([7, 8, 9], np.int32),
                  np.float32([0.5, 1.0, 2.0]))
    sub, sub_filter = _rows(records, filter_csr, 1, 3)
    assert sub.labels == ["b", "c"]
    assert sub.indptr.tolist() == [0, 1, 3] and sub.indices.tolist() == [3, 4, 5]
    assert [x.tolist() for x in sub_filter] == [[0, 0, 2], [8, 9], [1.0, 2.0]]


def test_the_filter_is_read_against_the_output_index(tmp_path):
    """Spec 8.3: a filter's items are looked up in the output index (-o). Here the input's
    features (w, x, y, z) are not the output's items (a, b, c, d): filtering b removes item b.
    By hand (Linear output, W rows of x and y plus the bias): a 0.5, b 0.75, c 0.3125 (written
    0.312, half to even), d 0.125."""
    _write_linear_4x4(tmp_path, [[0.0, 0.0, 0.0, 0.0], [0.5, 0.25, 0.0, 0.125],
                                 [0.0, 0.5, 0.25, 0.0], [0.0, 0.0, 0.0, 0.0]])
    (tmp_path / "features_input").write_text("w\t0\nx\t1\ny\t2\nz\t3\n")
    (tmp_path / "features_output").write_text("a\t0\nb\t1\nc\t2\nd\t3\n")
    (tmp_path / "in.txt").write_text("u1\tx:y\n")
    (tmp_path / "filter.txt").write_text("u1\tb:w\n")  # (w: no item of the output, skipped)
    result = run(tmp_path, "-r", str(tmp_path / "in.txt"), "-f", str(tmp_path / "filter.txt"),
                 "-k", "9", output=str(tmp_path / "recs.txt"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "recs.txt").read_text() == "u1\ta,0.500:c,0.312:d,0.125:\n"
    assert "1 filter entry applied" in result.output


def test_the_notes_count_one_dropped_feature_and_several_featureless_samples(model, tmp_path):
    """The notes agree with their counts: 1 feature 'is' dropped, 2 samples 'have' none."""
    src = tmp_path / "in.txt"
    src.write_text("s1\tnot-an-item\ns2\t\n")
    result = run(model, "-r", str(src), "-k", "3", "-q", output=str(tmp_path / "recs.txt"))
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        f"predict: dropped 1 feature that is not in {model / 'features_input'} or that no "
        "training example had, from 1 line",
        "predict: 2 samples have no known feature; their recommendations come from the output "
        "biases alone (the most popular items)"]


@pytest.mark.parametrize("output", ["recs.txt", "-"])
def test_the_progress_bar_counts_the_records_written(model, tmp_path, progress_bars, output):
    """A bar of samples on stderr, made once the input is read (its count is known then),
    shown only on a terminal (tqdm's disable=None) after a second, and cleared when done; none
    with -q. Records on stdout not to a terminal (here the runner's) leave it shown."""
    out = str(tmp_path / output) if output != "-" else output
    result = run(model, "-r", str(model / "ratings.txt"), "-b", "128", output=out)
    assert result.exit_code == 0, result.output
    (bar,) = progress_bars
    assert bar.on_stderr and bar.kwargs == dict(total=300, desc="predict", unit="sample",
                                                unit_scale=True, delay=1.0, disable=None,
                                                leave=False)
    assert bar.updates == [128, 128, 44] and bar.closed
    progress_bars.clear()
    assert run(model, "-r", str(model / "ratings.txt"), "-q", output=out).exit_code == 0
    assert progress_bars == []


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_no_progress_bar_where_the_records_go_to_the_same_terminal(model, progress_bars,
                                                                   monkeypatch):
    """Records on stdout to a terminal would break up the bar's line and it theirs: predict
    -s - there shows none."""
    monkeypatch.setattr(sys, "stdout", Terminal())
    argv = ["-n", str(model / "gl.nc"), "-i", str(model / "features_input"),
            "-o", str(model / "features_output"), "-r", str(model / "ratings.txt"), "-s", "-",
            "-q"]
    predict.main(argv, standalone_mode=False)
    assert sys.stdout.getvalue().count("\n") == 300 and progress_bars == []
    argv.remove("-q")
    predict.main(argv, standalone_mode=False)
    assert progress_bars == []


def test_a_failure_closes_the_bar(model, tmp_path, progress_bars, monkeypatch):
    """An error while scoring clears the bar before its message is printed."""
    import destiny.predict
    from destiny.errors import DestinyError

    def fail(*args, **kwargs):
        raise DestinyError("simulated failure")

    monkeypatch.setattr(destiny.predict, "write_records", fail)
    result = run(model, "-r", str(model / "ratings.txt"), output=str(tmp_path / "recs.txt"))
    assert result.exit_code == 1 and "simulated failure" in result.output
    (bar,) = progress_bars
    assert bar.closed and bar.updates == []


def test_ranks_reading_as_many_samples_with_other_features_or_filters_stop():
    """Under mpiexec (here in this process: rank 0 of two, told the other rank's counts),
    ranks that read as many samples but other features or another filter would score other
    records: predict stops (test_predict_mpi.py runs the whole command on two ranks)."""
    from destiny.io.text import Records
    from destiny.parallel import Comm, ParallelError
    from destiny.predict import _check_same_input

    class TwoRanks(Comm):
        size = 2

        def __init__(self, theirs):
            self.theirs = theirs

        def allgather(self, obj) -> list:
            return [obj, self.theirs]

    records = Records(labels=["a", "b"], indptr=np.array([0, 1, 3]),
                      indices=np.array([4, 5, 6], np.int32))
    filter_csr = (np.array([0, 1, 1]), np.array([7], np.int32), np.zeros(1, np.float32))
    _check_same_input(TwoRanks((2, 3, 1)), records, filter_csr)
    for theirs in ((2, 4, 1), (2, 3, 0)):
        with pytest.raises(ParallelError, match=rf"^rank 1 of 2 read 2 samples with "
                                                rf"{theirs[1]} features and {theirs[2]} filter "
                                                r"entries, but rank 0 read 2 with 3 and 1; "):
            _check_same_input(TwoRanks(theirs), records, filter_csr)


def test_a_network_with_two_input_layers_is_refused_naming_them(tmp_path):
    """predict feeds one input, the -r samples (DSSTNE's predict bound one dataset,
    '<-d>_input', spec 8.2): a network trained with a second input layer is refused, naming
    both (it was a ValueError's traceback)."""
    from destiny.io.network_file import write_network
    from destiny.netdef import parse_netdef

    nd = parse_netdef({"ErrorFunction": "L2", "Layers": [
        {"Name": "Input", "Kind": "Input", "N": 4, "DataSet": "gl_input", "Sparse": True},
        {"Name": "Side", "Kind": "Input", "N": 4, "DataSet": "gl_side", "Sparse": True},
        {"Name": "Output", "Kind": "Output", "N": 4, "DataSet": "gl_output",
         "Source": ["Input", "Side"], "Activation": "Linear"}]}).resolve({})
    write_network(tmp_path / "gl.nc", nd, {0: np.eye(4, dtype=np.float32),
                                           1: np.eye(4, dtype=np.float32)},
                  {0: np.zeros(4, np.float32), 1: np.zeros(4, np.float32)})
    for name in ("features_input", "features_output"):
        (tmp_path / name).write_text("a\t0\nb\t1\nc\t2\nd\t3\n")
    (tmp_path / "in.txt").write_text("u1\ta:b\n")
    out = tmp_path / "recs.txt"
    result = run(tmp_path, "-r", str(tmp_path / "in.txt"), output=str(out))
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert "has 2 input layers ('Input', 'Side')" in result.output
    assert not out.exists()


def test_too_little_address_space_left_to_run_is_refused_before_anything_is_done(
        model, tmp_path, monkeypatch):
    """As train's test of the same name: under ulimit -v, too little left to run is said before
    any output is begun."""
    from destiny import addrspace

    monkeypatch.setattr(addrspace, "map_thread_memory", lambda: "out of memory: too little")
    result = run(model, "-r", str(model / "ratings.txt"), "-k", "5",
                 output=str(tmp_path / "recs.txt"))
    assert result.exit_code == 1, result.output
    assert result.output == "Error: out of memory: too little\n"
    assert list(tmp_path.iterdir()) == []
