"""generate-netcdf writes DSSTNE's exact dataset layout (spec 1.5), and the reader reads it back."""

from __future__ import annotations

import netCDF4
import numpy as np
import pytest
from click.testing import CliRunner

from destiny.cli.generate_netcdf import generate_netcdf
from destiny.errors import DataFormatError
from destiny.io.dataset import (DatasetSummary, SparseDataset, contents_digests,
                                dataset_summaries, read_dataset, round_up_width, write_dataset)
from destiny.io.index import index_digest, read_index, rows_digest

from . import nctypes


def run(tmp_path, text: str | bytes, *args: str, name="in.txt"):
    """Run generate-netcdf on ``text`` in ``tmp_path``; return the click result."""
    data = text.encode() if isinstance(text, str) else text
    (tmp_path / name).write_bytes(data)
    argv = ["-i", str(tmp_path / name), "-o", str(tmp_path / "out.nc"), "-d", "gl_input",
            "-f", str(tmp_path / "features"), "-s", str(tmp_path / "samples"), *args]
    result = CliRunner().invoke(generate_netcdf, argv)
    assert result.exit_code == 0, result.output
    return result


def test_indicator_layout_matches_dsstne(tmp_path):
    # The userguide's ncdump example: three samples, nine entries (spec 1.5).
    run(tmp_path, "s1\tf0:f1:f2\ns2\tf3:f1:f4\ns3\tf5:f6:f7\n", "-c")
    with netCDF4.Dataset(tmp_path / "out.nc") as nc:
        assert nc.data_model == "NETCDF4"
        # DSSTNE's attributes, then the feature index Destiny's predict checks and the rows
        # train compares (DSSTNE reads its attributes by name and never sees these).
        assert nc.ncattrs() == ["datasets", "name0", "attributes0", "kind0", "dataType0",
                                "dimensions0", "width0", "destiny_indexEntries0",
                                "destiny_indexDigest0", "destiny_rowsDigest0"]
        labels, values = read_index(tmp_path / "features")
        assert nc.getncattr("destiny_indexEntries0") == 8
        assert nc.getncattr("destiny_indexDigest0") == index_digest(labels, values, 8)
        for attr, value in [("datasets", 1), ("attributes0", 3), ("kind0", 0),
                            ("dataType0", 0), ("dimensions0", 1), ("width0", 128)]:
            v = nc.getncattr(attr)
            assert v == value and v.dtype == np.uint32, attr  # NC_UINT, not int or uint64
        assert nc.getncattr("name0") == "gl_input"
        assert {d: len(nc.dimensions[d]) for d in nc.dimensions} == {
            "examplesDim0": 3, "sparseDataDim0": 9}
        assert list(nc.variables) == ["sparseStart0", "sparseEnd0", "sparseIndex0"]
        for v in nc.variables.values():
            assert v.dtype == np.uint32
            assert v.ncattrs() == []  # no _FillValue, no variable attributes
            assert not nc.dimensions[v.dimensions[0]].isunlimited()
        assert nc["sparseStart0"][:].tolist() == [0, 3, 6]
        assert nc["sparseEnd0"][:].tolist() == [3, 6, 9]
        assert nc["sparseIndex0"][:].tolist() == [0, 1, 2, 3, 1, 4, 5, 6, 7]


@pytest.mark.skipif(nctypes.LIB is None, reason="libnetcdf not found for ctypes")
@pytest.mark.parametrize("data_type", ["indicator", "analog"])
def test_netcdf_types_are_dsstnes(tmp_path, data_type):
    # netCDF4-python hides these, so read the raw types: uint (not int or uint64) attributes
    # and variables, NC_CHAR (not NC_STRING) text, float data.
    run(tmp_path, "s1\ta,1:b\n", "-c", "-t", data_type)
    expected = {"datasets": nctypes.NC_UINT, "name0": nctypes.NC_CHAR,
                "attributes0": nctypes.NC_UINT, "kind0": nctypes.NC_UINT,
                "dataType0": nctypes.NC_UINT, "dimensions0": nctypes.NC_UINT,
                "width0": nctypes.NC_UINT, "destiny_indexEntries0": nctypes.NC_UINT,
                "destiny_indexDigest0": nctypes.NC_CHAR, "destiny_rowsDigest0": nctypes.NC_CHAR,
                "sparseStart0": nctypes.NC_UINT,
                "sparseEnd0": nctypes.NC_UINT, "sparseIndex0": nctypes.NC_UINT}
    if data_type == "analog":
        expected["sparseData0"] = nctypes.NC_FLOAT
    assert nctypes.types(tmp_path / "out.nc") == expected


def test_analog_layout_and_values(tmp_path):
    run(tmp_path, "s1\ta,1.5:b:c,-2e-1\ns2\tb,\n", "-c", "-t", "analog")
    with netCDF4.Dataset(tmp_path / "out.nc") as nc:
        assert nc.getncattr("attributes0") == 1 and nc.getncattr("dataType0") == 4
        assert list(nc.variables) == ["sparseStart0", "sparseEnd0", "sparseIndex0", "sparseData0"]
        data = nc["sparseData0"]
        assert data.dtype == np.float32 and data.ncattrs() == []
        # A feature without a value is 0.0, as in DSSTNE (quirk 10.3); "b," has no value.
        np.testing.assert_array_equal(data[:], np.float32([1.5, 0.0, -0.2, 0.0]))


def test_width_counts_index_entries_rounded_to_128():
    assert [round_up_width(n) for n in (1, 127, 128, 129, 27278)] == [128, 128, 128, 256, 27392]


def test_width_is_the_index_size_rounded_not_the_largest_index_used(tmp_path):
    """Spec 1.5: width0 = F rounded up to 128, F the feature index's entries (after updates),
    "not max index + 1": an index of 130 entries gives 256 to a file using features 0 and 1."""
    (tmp_path / "features").write_text("".join(f"f{i}\t{i}\n" for i in range(130)))
    run(tmp_path, "u1\tf1:f0\n")
    ds = read_dataset(tmp_path / "out.nc")
    assert ds.width == 256 and ds.indices.tolist() == [1, 0]
    run(tmp_path, "u1\tf1:new\n", "-m")  # 131 entries now: still 256
    assert read_dataset(tmp_path / "out.nc").width == 256


def test_first_appearance_order_and_duplicates_kept(tmp_path):
    # Features and samples are numbered in order of first appearance (spec 1.3); a feature
    # repeated within a sample is kept twice (quirk 10.5).
    result = run(tmp_path, "u9\t2:29:32\nu3\t32:47:2:47\n", "-c")
    assert "width 128 (4 features, 4 new; 2 new samples)" in result.output, result.output
    labels, values = read_index(tmp_path / "features")
    assert dict(zip(labels, values.tolist(), strict=True)) == {"2": 0, "29": 1, "32": 2, "47": 3}
    labels, values = read_index(tmp_path / "samples")
    assert dict(zip(labels, values.tolist(), strict=True)) == {"u9": 0, "u3": 1}
    ds = read_dataset(tmp_path / "out.nc")
    assert ds.indices.tolist() == [0, 1, 2, 2, 3, 0, 3]
    assert ds.indptr.tolist() == [0, 3, 7]
    assert (tmp_path / "features").read_text() == "2\t0\n29\t1\n32\t2\n47\t3\n"


def test_rows_follow_reused_sample_index(tmp_path):
    # Rows are the samples present, in ascending sample index (quirk 10.1).
    (tmp_path / "samples").write_text("a\t2\nb\t0\nc\t1\n")
    result = run(tmp_path, "a\tx\nc\ty\n", "-c")
    ds = read_dataset(tmp_path / "out.nc")
    assert ds.indptr.tolist() == [0, 1, 2]
    assert ds.indices.tolist() == [1, 0]  # c (index 1) first, then a (index 2)
    # The rows' digest, which train compares between datasets, is of the rows' order.
    assert dataset_summaries(tmp_path / "out.nc")["gl_input"].rows == rows_digest(["c", "a"])
    assert "holds 1 sample that is not in this input" in result.output
    # No new samples: the sample index is left as it was.
    assert (tmp_path / "samples").read_text() == "a\t2\nb\t0\nc\t1\n"


def test_samples_of_the_index_missing_from_the_input_are_counted_beside_new_ones(tmp_path):
    """The note counts the sample index's samples this input lacks (b), not the input's new
    ones (z, numbered after the index's: len(index), spec 1.3)."""
    (tmp_path / "samples").write_text("a\t0\nb\t1\n")
    result = run(tmp_path, "z\ty\na\tx\n", "-c")
    assert "holds 1 sample that is not in this input" in result.output
    assert (tmp_path / "samples").read_text() == "a\t0\nb\t1\nz\t2\n"
    assert read_dataset(tmp_path / "out.nc").indices.tolist() == [1, 0]  # a (0), then z (2)


def test_index_outputs_left_as_they_were_take_the_datasets_time_for_make(tmp_path):
    """Two make rules: `in.nc features samples &: in.txt` saw a sample index older than the
    text after a run that found no new sample, and ran again on every make; `out.nc &: in.txt
    samples` must not see it newer than out.nc once out.nc's run is done. Indices left as
    they were take the dataset's time; one only read (no -c, -m) is an input, left alone."""
    import os

    run(tmp_path, "a\tx\nb\ty\n", "-c")
    for name in ("samples", "features"):
        os.utime(tmp_path / name, (1, 1))
    before = {n: (tmp_path / n).read_bytes() for n in ("samples", "features")}
    run(tmp_path, "a\ty\nb\tx\n", "-m")  # no new sample, no new feature
    dataset = (tmp_path / "out.nc").stat().st_mtime_ns
    for name in ("samples", "features"):
        assert (tmp_path / name).read_bytes() == before[name]
        assert (tmp_path / name).stat().st_mtime_ns == dataset
        assert dataset >= (tmp_path / "in.txt").stat().st_mtime_ns
    os.utime(tmp_path / "features", (1, 1))
    run(tmp_path, "a\ty\n")  # the feature index only read
    assert (tmp_path / "features").stat().st_mtime == 1


def test_new_samples_appended_to_index(tmp_path):
    (tmp_path / "samples").write_text("a\t0\nb\t1\n")
    run(tmp_path, "c\tx\na\ty\n", "-c")
    assert (tmp_path / "samples").read_text() == "a\t0\nb\t1\nc\t2\n"
    ds = read_dataset(tmp_path / "out.nc")
    assert ds.indices.tolist() == [1, 0]  # a (0) then c (2)


def test_reused_feature_index_drops_unknown(tmp_path):
    run(tmp_path, "u1\ta:b\nu2\tc\n", "-c")
    before = (tmp_path / "features").read_text()
    result = run(tmp_path, "u1\ta:zz:b\nu2\tyy:c:xx\nu3\tb\n")
    assert "dropped 3 features" in result.output and "from 2 lines" in result.output
    assert (tmp_path / "features").read_text() == before
    ds = read_dataset(tmp_path / "out.nc")
    assert ds.indices.tolist() == [0, 1, 2, 1]


def test_merge_appends_new_features(tmp_path):
    run(tmp_path, "u1\ta:b\n", "-c")
    run(tmp_path, "u1\tc:a\nu2\td\n", "-m")
    assert (tmp_path / "features").read_text() == "a\t0\nb\t1\nc\t2\nd\t3\n"
    assert read_dataset(tmp_path / "out.nc").indices.tolist() == [2, 0, 3]


def test_a_merged_index_is_written_sorted_by_index(tmp_path):
    """An index numbered 0..n-1 but listed out of order (edited, or another tool's) is written
    back in index order once -m adds to it, the new entries after; the sample index too."""
    (tmp_path / "features").write_text("b\t1\na\t0\n")
    (tmp_path / "samples").write_text("u2\t1\nu1\t0\n")
    run(tmp_path, "u3\tc:a\n", "-m")
    assert (tmp_path / "features").read_text() == "a\t0\nb\t1\nc\t2\n"
    assert (tmp_path / "samples").read_text() == "u1\t0\nu2\t1\nu3\t2\n"


def test_create_ignores_existing_feature_index(tmp_path):
    (tmp_path / "features").write_text("this is not an index\n")
    run(tmp_path, "u1\tb:a\n", "-c")
    assert (tmp_path / "features").read_text() == "b\t0\na\t1\n"


def test_directory_input_in_sorted_order(tmp_path):
    d = tmp_path / "parts"
    d.mkdir()
    (d / "b.txt").write_text("u2\ty\n")
    (d / "a.txt").write_text("u1\tx:y\n")
    (d / "c.txt").write_text("u3\tz\n")
    argv = ["-i", str(d), "-o", str(tmp_path / "out.nc"), "-d", "gl", "-f",
            str(tmp_path / "features"), "-s", str(tmp_path / "samples"), "-c"]
    assert CliRunner().invoke(generate_netcdf, argv).exit_code == 0
    assert (tmp_path / "features").read_text() == "x\t0\ny\t1\nz\t2\n"
    assert (tmp_path / "samples").read_text() == "u1\t0\nu2\t1\nu3\t2\n"


def test_labels_with_spaces_commas_and_unicode(tmp_path):
    run(tmp_path, "user one, the first\tcafé:naïve,2\n", "-c", "-t", "analog")
    assert (tmp_path / "samples").read_text() == "user one, the first\t0\n"
    assert (tmp_path / "features").read_text() == "café\t0\nnaïve\t1\n"


def test_empty_feature_list_is_a_sample(tmp_path):
    run(tmp_path, "u1\ta\nu2\t\nu3\tb\n", "-c")
    ds = read_dataset(tmp_path / "out.nc")
    assert ds.indptr.tolist() == [0, 1, 1, 2]


def test_last_line_without_newline(tmp_path):
    run(tmp_path, "u1\ta\nu2\tb:c", "-c")
    assert read_dataset(tmp_path / "out.nc").indptr.tolist() == [0, 1, 3]


def test_large_input_spans_several_chunks(tmp_path, monkeypatch):
    # Chunk borders and hash-table growth must not change the result.
    import destiny.io.text as text
    monkeypatch.setattr(text, "CHUNK_BYTES", 4096)
    rng = np.random.default_rng(0)
    rows = [rng.choice(5000, size=rng.integers(1, 30), replace=False) for _ in range(2000)]
    body = "".join(f"u{i}\t" + ":".join(f"f{j}" for j in r) + "\n" for i, r in enumerate(rows))
    run(tmp_path, body, "-c")
    labels, values = read_index(tmp_path / "features")
    index = dict(zip(labels, values.tolist(), strict=True))
    ds = read_dataset(tmp_path / "out.nc")
    expected = np.concatenate([[index[f"f{j}"] for j in r] for r in rows])
    np.testing.assert_array_equal(ds.indices, expected)
    np.testing.assert_array_equal(ds.indptr, np.cumsum([0] + [len(r) for r in rows]))
    order = list(dict.fromkeys(f"f{j}" for r in rows for j in r))
    assert labels == order and values.tolist() == list(range(len(order)))


def test_reader_round_trip_and_dsstne_variants(tmp_path):
    ds = SparseDataset(name="x", width=256, indptr=np.array([0, 2, 2, 5]),
                       indices=np.array([3, 1, 0, 255, 7], dtype=np.int32),
                       values=np.float32([1, 2, 3, 4, 5]))
    write_dataset(tmp_path / "a.nc", ds)
    back = read_dataset(tmp_path / "a.nc")
    assert back.name == "x" and back.width == 256
    np.testing.assert_array_equal(back.indptr, ds.indptr)
    np.testing.assert_array_equal(back.indices, ds.indices)
    np.testing.assert_array_equal(back.values, ds.values)

    # DSSTNE's own writer: lower-case datatype, uint64 offsets, rows stored out of order,
    # a second dataset in the same file, Indexed and Weighted (spec 2.1, 2.4, quirk 10.8).
    with netCDF4.Dataset(tmp_path / "b.nc", "w", format="NETCDF4") as nc:
        nc.setncattr("datasets", np.uint32(2))
        for n, name in enumerate(["first", "second"]):
            nc.setncattr(f"name{n}", name)
            nc.setncattr(f"attributes{n}", np.uint32(3 | 64 | 128))
            nc.setncattr(f"kind{n}", np.uint32(0))
            nc.setncattr(f"datatype{n}", np.uint32(0))
            nc.setncattr(f"dimensions{n}", np.uint32(1))
            nc.setncattr(f"width{n}", np.uint32(128))
            nc.createDimension(f"examplesDim{n}", 3)
            nc.createDimension(f"uniqueExamplesDim{n}", 2)
            nc.createDimension(f"sparseDataDim{n}", 4)
            start = nc.createVariable(f"sparseStart{n}", "u8", (f"uniqueExamplesDim{n}",))
            end = nc.createVariable(f"sparseEnd{n}", "u8", (f"uniqueExamplesDim{n}",))
            idx = nc.createVariable(f"sparseIndex{n}", "u4", (f"sparseDataDim{n}",))
            index = nc.createVariable(f"index{n}", "u4", (f"examplesDim{n}",))
            weight = nc.createVariable(f"dataWeight{n}", "f4", (f"examplesDim{n}",))
            start[:] = [3, 0]   # unique row 0 is stored after unique row 1
            end[:] = [4, 3]
            idx[:] = [10, 11, 12, 99 + n]
            index[:] = [0, 1, 0]
            weight[:] = [1.0, 0.5, 2.0]
    second = read_dataset(tmp_path / "b.nc", "second")
    assert second.indicator and second.width == 128
    assert second.indptr.tolist() == [0, 1, 4, 5]
    assert second.indices.tolist() == [100, 10, 11, 12, 100]
    np.testing.assert_array_equal(second.weights, np.float32([1.0, 0.5, 2.0]))


def test_generated_file_reads_in_torch_reference_layout(tmp_path):
    # The PyTorch peer reads the same files; it needs the Sparse bit and these variables.
    run(tmp_path, "u1\ta:b\nu2\tb\n", "-c")
    ds = read_dataset(tmp_path / "out.nc", "gl_input")
    assert ds.rows == 2 and ds.nnz == 3 and ds.values is None


def test_unknown_dataset_name(tmp_path):
    run(tmp_path, "u1\ta\n", "-c")
    from destiny.errors import DataFormatError
    with pytest.raises(DataFormatError,
                       match="has no dataset named 'gl_output'; it holds 'gl_input'"):
        read_dataset(tmp_path / "out.nc", "gl_output")


def test_runs_sharing_an_index_take_turns(tmp_path):
    """make -j converting two inputs that share one sample index (-s): the second run waits
    for the first, then reads the index the first wrote and numbers its new samples after
    those, instead of numbering from what it read at its start and replacing the first's."""
    import threading
    import time

    from destiny.generate import generate_netcdf as convert
    from destiny.io.atomic import exclusive

    (tmp_path / "b.txt").write_text("u3\tx\nu1\ty\n")
    waits = []

    def second():
        convert(input_path=tmp_path / "b.txt", output=tmp_path / "b.nc", dataset_name="gl_output",
                feature_index=tmp_path / "features_b", sample_index=tmp_path / "samples",
                create=True, on_wait=waits.append)

    thread = threading.Thread(target=second)
    with exclusive(tmp_path / "samples", "sample index (-s)"):  # the first run, meanwhile
        thread.start()
        deadline = time.monotonic() + 60
        while not waits and time.monotonic() < deadline:
            time.sleep(0.01)
        assert waits == [f"{tmp_path / 'samples'}: waiting for another run writing this sample "
                         f"index (-s) to finish (it holds {tmp_path / '.samples.lock'})."]
        assert thread.is_alive() and not (tmp_path / "b.nc").exists()
        (tmp_path / "samples").write_text("u1\t0\nu2\t1\n")  # what the first run publishes
    thread.join(60)
    assert not thread.is_alive()
    assert (tmp_path / "samples").read_text() == "u1\t0\nu2\t1\nu3\t2\n"
    assert read_dataset(tmp_path / "b.nc").indices.tolist() == [1, 0]  # u1 (y) then u3 (x)
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".lock")]


def test_runs_only_reading_a_feature_index_do_not_wait_for_each_other(tmp_path):
    """Without -c or -m the feature index is an input: a run goes on while another holds it,
    as the runs of make -j converting several inputs with one index do."""
    import threading
    import time

    from destiny.generate import generate_netcdf as convert
    from destiny.io.atomic import exclusive

    (tmp_path / "features").write_text("x\t0\n")
    (tmp_path / "b.txt").write_text("u1\tx\n")
    waits = []

    def reader():
        convert(input_path=tmp_path / "b.txt", output=tmp_path / "b.nc", dataset_name="gl_input",
                feature_index=tmp_path / "features", sample_index=tmp_path / "samples",
                on_wait=waits.append)

    thread = threading.Thread(target=reader)
    with exclusive(tmp_path / "features", "feature index (-f)"):  # a run writing it, with -m
        thread.start()
        deadline = time.monotonic() + 60
        while thread.is_alive() and not waits and time.monotonic() < deadline:
            time.sleep(0.01)
        assert waits == [] and not thread.is_alive()
    thread.join(60)
    assert read_dataset(tmp_path / "b.nc").indices.tolist() == [0]


def test_outputs_through_a_symbolic_link_lock_their_real_directory(tmp_path, monkeypatch):
    """`link/../features` is sub/features (the link is followed before '..'), not ./features:
    the two outputs have locks of their own, and the run does not wait for itself."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub" / "dir").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "sub" / "dir")
    (tmp_path / "in.txt").write_text("u1\tx:y\n")
    argv = ["-i", "in.txt", "-o", "gl.nc", "-d", "gl_input", "-f", "link/../features", "-s",
            "features", "-c"]
    result = CliRunner().invoke(generate_netcdf, argv)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "sub" / "features").read_text() == "x\t0\ny\t1\n"
    assert (tmp_path / "features").read_text() == "u1\t0\n"


def test_two_outputs_with_one_lock_file_are_refused(tmp_path, monkeypatch):
    """Two names of one file that check_distinct cannot tell apart (as on a case-insensitive
    file system, simulated here) would make the run wait for itself: refused."""
    import destiny.io.atomic as atomic

    monkeypatch.setattr(atomic, "check_distinct", lambda *_: None)
    real = atomic.lock_path
    monkeypatch.setattr(atomic, "lock_path", lambda path: real(str(path).lower()))
    (tmp_path / "in.txt").write_text("u1\tx:y\n")
    argv = ["-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "gl.nc"), "-d", "gl_input",
            "-f", str(tmp_path / "Idx"), "-s", str(tmp_path / "idx"), "-c"]
    result = CliRunner().invoke(generate_netcdf, argv)
    assert result.exit_code == 1
    assert "given as both the sample index (-s) and the feature index (-f)" in result.output


def test_an_empty_output_path_is_refused(tmp_path):
    (tmp_path / "in.txt").write_text("u1\tx:y\n")
    argv = ["-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "gl.nc"), "-d", "gl_input",
            "-f", str(tmp_path / "features"), "-s", "", "-c"]
    result = CliRunner().invoke(generate_netcdf, argv)
    assert result.exit_code == 2  # (the sample index is read too: refused as its flag's value)
    assert "Invalid value for '-s' / '--samples': is an empty path; give the file's path" in \
        result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_outputs_through_links_replace_the_target_and_devices_are_refused(tmp_path):
    """A dataset or index written through a symbolic link replaces the file it points to and
    keeps the link; a device or pipe (here /dev/null through a link) is refused before any
    work, since the rename into place would replace it."""
    import os
    import stat

    (tmp_path / "real.nc").write_bytes(b"old")
    (tmp_path / "out.nc").symlink_to(tmp_path / "real.nc")
    run(tmp_path, "s1\ta:b\n", "-c")
    assert (tmp_path / "out.nc").is_symlink()
    assert read_dataset(tmp_path / "real.nc").nnz == 2

    (tmp_path / "in.txt").write_text("s1\ta:b\n")
    (tmp_path / "null").symlink_to("/dev/null")
    result = CliRunner().invoke(generate_netcdf, [
        "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "null"), "-d", "gl_input",
        "-f", str(tmp_path / "f2"), "-s", str(tmp_path / "s2"), "-c"])
    assert result.exit_code == 1
    assert "null: is a device, pipe or socket, not a file" in result.output
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert not (tmp_path / "f2").exists() and not (tmp_path / "s2").exists()


def test_an_output_link_that_loops_is_refused(tmp_path):
    """A link loop as the output (or a link to one): the file used to replace the link at
    the loop's end; now it is refused before any work, as cp refuses it."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "out.nc").symlink_to(tmp_path / "a")
    (tmp_path / "in.txt").write_text("s1\ta:b\n")
    result = CliRunner().invoke(generate_netcdf, [
        "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.nc"), "-d", "gl_input",
        "-f", str(tmp_path / "f"), "-s", str(tmp_path / "s"), "-c"])
    assert result.exit_code == 1
    assert result.output == (
        f"Error: {tmp_path / 'out.nc'}: is a symbolic link that loops (or goes through too many "
        "links), so the output NetCDF file (-o) cannot be written through it; remove the "
        "link, or point it at the file meant.\n")
    assert (tmp_path / "a").is_symlink() and (tmp_path / "out.nc").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "in.txt", "out.nc"]


@pytest.mark.parametrize("datatype,stored,expected", [
    (8, ("u1", [0, 64, 255]), [0.0, 0.25, 255 / 256]),   # UChar: x / 256 (spec 2.3)
    (9, ("i1", [-128, 32, 127]), [-1.0, 0.25, 127 / 128]),  # Char: x / 128
])
def test_eight_bit_values_are_scaled_as_dsstne_scales_them(tmp_path, datatype, stored, expected):
    kind, numbers = stored
    with netCDF4.Dataset(tmp_path / "c.nc", "w", format="NETCDF4") as nc:
        for key, value in (("datasets", 1), ("attributes0", 1), ("kind0", 0),
                           ("dataType0", datatype), ("dimensions0", 1), ("width0", 128)):
            nc.setncattr(key, np.uint32(value))
        nc.setncattr("name0", "x")
        nc.createDimension("examplesDim0", 1)
        nc.createDimension("sparseDataDim0", 3)
        for var, dtype, dim, value in (("sparseStart0", "u4", "examplesDim0", [0]),
                                       ("sparseEnd0", "u4", "examplesDim0", [3]),
                                       ("sparseIndex0", "u4", "sparseDataDim0", [0, 1, 2]),
                                       ("sparseData0", kind, "sparseDataDim0", numbers)):
            nc.createVariable(var, dtype, (dim,))[:] = value
    back = read_dataset(tmp_path / "c.nc")
    assert back.values.dtype == np.float32 and back.values.tolist() == expected


def test_contents_digest_tells_any_change_and_only_a_change(tmp_path):
    """What --resume compares beside the sizes: a value, an index, the Boolean bit or a
    row's bounds changed make another digest; the same dataset written again does not."""
    indptr = np.array([0, 2, 3], dtype=np.int64)
    indices = np.array([1, 4, 2], dtype=np.int32)
    values = np.array([0.5, 1.0, 2.0], dtype=np.float32)

    def digest(name, ds):
        write_dataset(tmp_path / name, ds)
        return contents_digests(tmp_path / name, ["x"])["x"]

    base = digest("a.nc", SparseDataset("x", 128, indptr, indices, values))
    assert digest("b.nc", SparseDataset("x", 128, indptr, indices, values)) == base
    others = [SparseDataset("x", 128, indptr, indices, values * np.float32(2)),
              SparseDataset("x", 128, indptr, indices[::-1].copy(), values),
              SparseDataset("x", 128, np.array([0, 1, 3]), indices, values),
              SparseDataset("x", 128, indptr, indices)]  # (Boolean: no values)
    assert len({base} | {digest(f"o{i}.nc", ds) for i, ds in enumerate(others)}) == 5


def test_contents_digest_is_the_same_under_numpy_1s_printing(tmp_path):
    """numpy 1 (and numpy 2's legacy printing) write np.uint32(3) as '3': a checkpoint's
    digest of unchanged data must not change with them (--resume would call it changed)."""
    write_dataset(tmp_path / "a.nc", SparseDataset("x", 128, np.array([0, 2]),
                                                   np.array([1, 4], np.int32)))
    digest = contents_digests(tmp_path / "a.nc", ["x"])
    with np.printoptions(legacy="1.25"):
        assert contents_digests(tmp_path / "a.nc", ["x"]) == digest


def dsstne_file(path, attrs, variables, dims):
    """A one-dataset file written as DSSTNE's tools may write it: ``attrs`` (uint, or text),
    ``variables`` name -> (type, dimension, values), ``dims`` name -> size."""
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        for key, value in attrs.items():
            nc.setncattr(key, value if isinstance(value, str) else np.uint32(value))
        for dim, size in dims.items():
            nc.createDimension(dim, size)
        for var, (dtype, dim, values) in variables.items():
            nc.createVariable(var, dtype, (dim,))[:] = values
    return path


def test_contents_digest_covers_the_width_the_row_index_and_the_stored_types(tmp_path):
    """Beside values and bounds, what else decides what a dataset holds: its width, an
    Indexed dataset's index0 (which stored rows are the examples), and the type its values
    are stored as (the same bytes as int32 are other values)."""
    def digest(name, width=128, index=(0, 1, 0), data=("f4", (1.0, 2.0, 3.0))):
        path = dsstne_file(tmp_path / name, {
            "datasets": 1, "name0": "x", "attributes0": 1 | 64, "kind0": 0, "dataType0": 4,
            "dimensions0": 1, "width0": width}, {
            "sparseStart0": ("u4", "uniqueExamplesDim0", [0, 2]),
            "sparseEnd0": ("u4", "uniqueExamplesDim0", [2, 3]),
            "sparseIndex0": ("u4", "sparseDataDim0", [4, 9, 1]),
            "index0": ("u4", "examplesDim0", index),
            "sparseData0": (data[0], "sparseDataDim0", data[1])},
            {"examplesDim0": 3, "uniqueExamplesDim0": 2, "sparseDataDim0": 3})
        read_dataset(path)  # (contents_digests is called on a file the reader took)
        return contents_digests(path, ["x"])["x"]

    base = digest("a.nc")
    assert digest("b.nc") == base
    as_int = np.float32([1, 2, 3]).view(np.int32)
    assert read_dataset(dsstne_file(tmp_path / "c.nc", {
        "datasets": 1, "name0": "x", "attributes0": 1, "kind0": 0, "dataType0": 4,
        "dimensions0": 1, "width0": 128}, {
        "sparseStart0": ("u4", "examplesDim0", [0]), "sparseEnd0": ("u4", "examplesDim0", [3]),
        "sparseIndex0": ("u4", "sparseDataDim0", [4, 9, 1]),
        "sparseData0": ("i4", "sparseDataDim0", as_int)},
        {"examplesDim0": 1, "sparseDataDim0": 3})).values.tolist() == as_int.tolist()
    others = [digest("w.nc", width=256), digest("i.nc", index=(1, 0, 0)),
              digest("t.nc", data=("i4", as_int))]
    assert len({base, *others}) == 4


@pytest.mark.skipif(nctypes.LIB is None, reason="libnetcdf not found for ctypes")
def test_a_name_that_is_not_ascii_is_written_as_dsstnes_text(tmp_path):
    """netCDF4-python would write it as NC_STRING, which DSSTNE cannot read (spec 1.5)."""
    write_dataset(tmp_path / "a.nc", SparseDataset("données_été", 128, np.array([0, 1]),
                                                   np.array([5], np.int32)))
    assert nctypes.types(tmp_path / "a.nc")["name0"] == nctypes.NC_CHAR
    assert read_dataset(tmp_path / "a.nc").name == "données_été"


def test_each_dataset_of_a_file_has_its_own_contents_digest(tmp_path):
    path = tmp_path / "a.nc"
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.setncattr("datasets", np.uint32(2))
        for n, name in enumerate(["first", "second"]):
            for key, value in (("attributes", 3), ("kind", 0), ("dataType", 0),
                               ("dimensions", 1), ("width", 128)):
                nc.setncattr(f"{key}{n}", np.uint32(value))
            nc.setncattr(f"name{n}", name)
            nc.createDimension(f"examplesDim{n}", 1)
            nc.createDimension(f"sparseDataDim{n}", 2)
            for var, dim, values in ((f"sparseStart{n}", f"examplesDim{n}", [0]),
                                     (f"sparseEnd{n}", f"examplesDim{n}", [2]),
                                     (f"sparseIndex{n}", f"sparseDataDim{n}", [3, 4 + n])):
                nc.createVariable(var, "u4", (dim,))[:] = values
    first, second = (contents_digests(path, ["first", "second"])[name]
                     for name in ("first", "second"))
    assert contents_digests(path, ["second"]) == {"second": second} and first != second


@pytest.mark.parametrize("ignore_zero", [True, False])
def test_the_ignore_zero_bit_is_written_and_read_back(tmp_path, ignore_zero):
    write_dataset(tmp_path / "a.nc", SparseDataset("x", 128, np.array([0, 1]),
                                                   np.array([5], np.int32),
                                                   ignore_zero=ignore_zero))
    with netCDF4.Dataset(tmp_path / "a.nc") as nc:
        assert nc.getncattr("attributes0") == (1 | 2 | 32 if ignore_zero else 1 | 2)
    assert read_dataset(tmp_path / "a.nc").ignore_zero is ignore_zero


@pytest.mark.parametrize("indptr", [[0], [0, 0, 0]], ids=["no-examples", "no-entries"])
def test_a_dataset_without_examples_or_entries_is_not_written(tmp_path, indptr):
    ds = SparseDataset("x", 128, np.array(indptr), np.zeros(0, np.int32))
    with pytest.raises(DataFormatError, match="would have no examples or no entries, which "
                       "DSSTNE's loader refuses"):
        write_dataset(tmp_path / "a.nc", ds)
    assert not (tmp_path / "a.nc").exists()


def test_dataset_summaries_tell_what_each_dataset_records(tmp_path):
    """The entries of a sparse dataset, None for a dense one (no sparseDataDim<n>); the index
    only where both its entries and its digest are recorded; the rows' digest where it is."""
    path = tmp_path / "a.nc"
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.setncattr("datasets", np.uint32(3))
        for n, name in enumerate(["sparse", "dense", "half"]):
            nc.setncattr(f"name{n}", name)
        nc.createDimension("sparseDataDim0", 7)
        nc.createDimension("sparseDataDim2", 2)
        nc.setncattr("destiny_indexEntries1", np.uint32(9))
        nc.setncattr("destiny_indexDigest1", "abc")
        nc.setncattr("destiny_rowsDigest1", "def")
        nc.setncattr("destiny_indexEntries2", np.uint32(4))  # (no digest: no index)
    assert dataset_summaries(path) == {"sparse": DatasetSummary(7, None, None),
                                       "dense": DatasetSummary(None, (9, "abc"), "def"),
                                       "half": DatasetSummary(2, None, None)}


@pytest.mark.parametrize("dims,width", [(1, 4), (2, 32), (3, 64)])
def test_width_is_width_times_height_times_length_of_the_dimensions_used(tmp_path, dims,
                                                                           width):
    """DSSTNE's dimensions<n> of 1 to 3 (spec 2.3): the features are width0 x height0 x
    length0, each size counted only if the dataset has that many dimensions."""
    path = dsstne_file(tmp_path / "a.nc", {
        "datasets": 1, "name0": "x", "attributes0": 3, "kind0": 0, "dataType0": 0,
        "dimensions0": dims, "width0": 4, "height0": 8, "length0": 2}, {
        "sparseStart0": ("u4", "examplesDim0", [0]), "sparseEnd0": ("u4", "examplesDim0", [2]),
        "sparseIndex0": ("u4", "sparseDataDim0", [width - 1, 0])},
        {"examplesDim0": 1, "sparseDataDim0": 2})
    ds = read_dataset(path)
    assert ds.width == width and ds.indices.tolist() == [width - 1, 0]


@pytest.mark.parametrize("bounds,indices", [((2, 4), [1, 5]), ((0, 2), [7, 8])])
def test_one_example_reads_its_own_entries_among_others_stored(tmp_path, bounds, indices):
    """Entries stored before or after an example's range (DSSTNE allows any layout, spec
    2.4) are not read as its own."""
    path = dsstne_file(tmp_path / "a.nc", {
        "datasets": 1, "name0": "x", "attributes0": 1, "kind0": 0, "dataType0": 4,
        "dimensions0": 1, "width0": 128}, {
        "sparseStart0": ("u4", "examplesDim0", [bounds[0]]),
        "sparseEnd0": ("u4", "examplesDim0", [bounds[1]]),
        "sparseIndex0": ("u4", "sparseDataDim0", [7, 8, 1, 5]),
        "sparseData0": ("f4", "sparseDataDim0", [0.5, 1.5, 2.5, 3.5])},
        {"examplesDim0": 1, "sparseDataDim0": 4})
    ds = read_dataset(path)
    assert ds.indptr.tolist() == [0, 2] and ds.indices.tolist() == indices
    assert ds.values.tolist() == ([2.5, 3.5] if bounds[0] else [0.5, 1.5])
