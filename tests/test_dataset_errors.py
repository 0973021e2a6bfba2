"""Damaged or foreign dataset files (another tool's, DSSTNE's generateNetCDF's): one message
naming the file and what is wrong in it, through ``read_dataset`` and ``train`` (exit code 1,
no traceback, no network file), never a traceback, silent truncation or a misleading
"training diverged"."""

from __future__ import annotations

import json

import netCDF4
import numpy as np
import pytest
from click.testing import CliRunner

from destiny.cli.train import train
from destiny.errors import DataFormatError, DestinyError
from destiny.io.dataset import dataset_summaries, dataset_widths, read_dataset

from . import nctypes

ROWS, WIDTH = 40, 128
LENGTHS = np.random.default_rng(0).integers(1, 6, ROWS)
OFFSETS = np.concatenate([[0], np.cumsum(LENGTHS)])
ENTRIES = int(OFFSETS[-1])
INDICES = np.random.default_rng(1).integers(0, 100, ENTRIES)


def write(path, name, *, analog=False, attrs=None, variables=None, drop=(), zlib=False):
    """A dataset file laid out as generate-netcdf writes it (spec 1.5), then damaged:
    ``attrs`` replace or add global attributes; ``variables`` maps a variable's name to
    (NetCDF type, values) to store instead; ``drop`` names attributes to leave out; ``zlib``:
    the variables compressed (as another tool may write them)."""
    a = {"datasets": np.uint32(1), "name0": name, "attributes0": np.uint32(1 if analog else 3),
         "kind0": np.uint32(0), "dataType0": np.uint32(4 if analog else 0),
         "dimensions0": np.uint32(1), "width0": np.uint32(WIDTH),
         "destiny_indexEntries0": np.uint32(100), "destiny_indexDigest0": "d" * 16,
         "destiny_rowsDigest0": "r" * 16}
    a.update(attrs or {})
    v = {"sparseStart0": ("u4", OFFSETS[:-1]), "sparseEnd0": ("u4", OFFSETS[1:]),
         "sparseIndex0": ("u4", INDICES)}
    if analog:
        v["sparseData0"] = ("f4", np.linspace(0.5, 5, ENTRIES))
    v.update(variables or {})
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        for key, value in a.items():
            if key not in drop:
                nc.setncattr(key, value)
        nc.createDimension("examplesDim0", len(v["sparseStart0"][1]))
        nc.createDimension("sparseDataDim0", len(v["sparseIndex0"][1]))
        for key, (kind, values) in v.items():
            if kind is None:
                continue
            dims = (("examplesDim0",) if key in ("sparseStart0", "sparseEnd0", "dataWeight0",
                                                 "index0") else ("sparseDataDim0",))
            if len(values) != len(nc.dimensions[dims[0]]):
                nc.createDimension(f"{key}Dim", len(values))
                dims = (f"{key}Dim",)
            nc.createVariable(key, kind, dims, zlib=zlib)[:] = values
    return path


def changed(values, at, value, dtype=None):
    out = np.array(values, dtype=dtype or np.asarray(values).dtype)
    out[at] = value
    return out


# Destiny's own attributes, read by dataset_summaries (train records them for predict).
SUMMARY_CASES = [
    ("entries-text", {"destiny_indexEntries0": "abc"},
     "the attribute 'destiny_indexEntries0' is 'abc' (text); expected one non-negative "
     "integer; the file is damaged; write it again with generate-netcdf."),
    ("entries-negative", {"destiny_indexEntries0": np.int32(-3)},
     "the attribute 'destiny_indexEntries0' is -3 (int32); expected one non-negative integer"),
    ("index-digest-number", {"destiny_indexDigest0": np.int32(5)},
     "the attribute 'destiny_indexDigest0' is 5 (int32); expected text"),
    ("rows-digest-number", {"destiny_rowsDigest0": np.int32(5)},
     "the attribute 'destiny_rowsDigest0' is 5 (int32); expected text"),
    ("entries-two-numbers", {"destiny_indexEntries0": np.uint32([100, 7])},
     "the attribute 'destiny_indexEntries0' is [100, 7] (uint32); expected one non-negative "
     "integer"),
    ("no-datasets", {"datasets": np.uint32(0)},
     "the global attribute 'datasets' is 0; expected at least 1. The file holds no dataset; "
     "write it again with generate-netcdf."),
]


@pytest.mark.parametrize("attrs, fragment", [c[1:] for c in SUMMARY_CASES],
                         ids=[c[0] for c in SUMMARY_CASES])
def test_dataset_summaries_refuse(tmp_path, attrs, fragment):
    path = write(tmp_path / "d.nc", "gl_input", attrs=attrs)
    with pytest.raises(DataFormatError) as e:
        dataset_summaries(path)
    assert str(e.value).startswith(f"{path}: ") and fragment in str(e.value)


NETDEF = {"ErrorFunction": "ScaledMarginalCrossEntropy",
          "ScaledMarginalCrossEntropy": {"oneTarget": 1.0, "zeroTarget": 0.0, "oneScale": 1.0,
                                         "zeroScale": 1.0},
          "Layers": [{"Name": "Input", "Kind": "Input", "N": "auto", "DataSet": "gl_input",
                      "Sparse": True},
                     {"Name": "Hidden", "Kind": "Hidden", "N": 8, "Activation": "Sigmoid"},
                     {"Name": "Output", "Kind": "Output", "N": "auto", "DataSet": "gl_output",
                      "Activation": "Sigmoid"}]}


@pytest.mark.parametrize("attrs, fragment", [c[1:] for c in SUMMARY_CASES[:1]],
                         ids=[c[0] for c in SUMMARY_CASES[:1]])
def test_train_refuses_damaged_destiny_attributes(tmp_path, attrs, fragment):
    for name in ("gl_input", "gl_output"):
        write(tmp_path / f"{name}.nc", name, attrs=attrs if name == "gl_output" else None)
    (tmp_path / "net.json").write_text(json.dumps(NETDEF))
    result = CliRunner().invoke(train, ["-c", str(tmp_path / "net.json"),
                                        "-i", str(tmp_path / "gl_input.nc"),
                                        "-o", str(tmp_path / "gl_output.nc"),
                                        "-n", str(tmp_path / "net.nc"), "-e", "1"])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert result.output.splitlines()[-1] == f"Error: {tmp_path / 'gl_output.nc'}: {fragment}"
    assert not (tmp_path / "net.nc").exists()


# (id, write()'s keyword arguments, the message's fragment)
CASES = [
    ("negative-index", dict(variables={"sparseIndex0": ("i4", changed(INDICES, 7, -1, np.int32))}),
     "has feature index -1 in sparseIndex0 (entry 7, example 1; both count from 0), but its "
     "width is 128; every index must be 0 to 127"),
    ("float-index", dict(variables={"sparseIndex0": ("f8", changed(INDICES, 7, 2.7, float))}),
     "the variable 'sparseIndex0' is stored as float64; expected one dimension of integers"),
    ("nan-index", dict(variables={"sparseIndex0": ("f8", changed(INDICES, 7, np.nan, float))}),
     "the variable 'sparseIndex0' is stored as float64; expected one dimension of integers"),
    ("text-index", dict(variables={"sparseIndex0": (str, np.array(
        [str(i) for i in INDICES], dtype=object))}),
     "the variable 'sparseIndex0' is stored as text; expected one dimension of integers"),
    ("float-start", dict(variables={"sparseStart0": ("f8", OFFSETS[:-1] + 0.5)}),
     "the variable 'sparseStart0' is stored as float64; expected one dimension of integers"),
    ("nan-data", dict(analog=True, variables={"sparseData0": ("f4", changed(
        np.ones(ENTRIES, np.float32), 7, np.nan))}),
     "has the value nan in sparseData0 (entry 7, example 1; both count from 0); datasets hold "
     "float32 numbers, and NaN, Inf or a value beyond float32's range"),
    ("inf-data", dict(analog=True, variables={"sparseData0": ("f4", changed(
        np.ones(ENTRIES, np.float32), ENTRIES - 1, -np.inf))}),
     f"has the value -inf in sparseData0 (entry {ENTRIES - 1}, example {ROWS - 1}; both count "
     "from 0)"),
    ("double-beyond-float32", dict(analog=True, variables={"sparseData0": ("f8", changed(
        np.ones(ENTRIES), 0, 1e300))}),
     "has the value 1e+300 in sparseData0 (entry 0, example 0; both count from 0)"),
    ("text-data", dict(analog=True, variables={"sparseData0": (str, np.array(
        ["1"] * ENTRIES, dtype=object))}),
     "the variable 'sparseData0' is stored as text; expected one dimension of numbers"),
    ("short-data", dict(analog=True, variables={"sparseData0": ("f4", np.ones(ENTRIES - 1))}),
     f"has {ENTRIES - 1} sparseData0 values for {ENTRIES} sparseIndex0 entries"),
    ("nan-weight", dict(attrs={"attributes0": np.uint32(3 | 128)}, variables={
        "dataWeight0": ("f4", changed(np.ones(ROWS, np.float32), 3, np.nan))}),
     "has the weight nan for example 3 in dataWeight0"),
    ("inf-weight", dict(attrs={"attributes0": np.uint32(3 | 128)}, variables={
        "dataWeight0": ("f4", changed(np.ones(ROWS, np.float32), 3, np.inf))}),
     "has the weight inf for example 3 in dataWeight0"),
    ("index-at-the-width", dict(variables={"sparseIndex0": ("u4", changed(INDICES, 7, WIDTH))}),
     "has feature index 128 in sparseIndex0 (entry 7, example 1; both count from 0), but its "
     "width is 128; every index must be 0 to 127"),
    # (index0 names the stored examples 0..ROWS-1: ROWS, one past the last, is outside)
    ("row-index-one-past", dict(attrs={"attributes0": np.uint32(3 | 64)}, variables={
        "index0": ("u4", changed(np.arange(ROWS), 5, ROWS))}),
     f"has index0 values outside 0..{ROWS - 1}"),
    ("float-row-index", dict(attrs={"attributes0": np.uint32(3 | 64)}, variables={
        "index0": ("f4", np.arange(ROWS) + 0.5)}),
     "the variable 'index0' is stored as float32; expected one dimension of integers"),
    ("no-entries", dict(variables={"sparseStart0": ("u4", np.zeros(ROWS)),
                                   "sparseEnd0": ("u4", np.zeros(ROWS)),
                                   "sparseIndex0": ("u4", np.zeros(0))}),
     f"has no entries: all {ROWS} examples list no feature (sparseDataDim0 = 0), which DSSTNE's "
     "loader refuses"),
    ("range-past-the-entries", dict(variables={"sparseEnd0": ("u4", changed(
        OFFSETS[1:], ROWS - 1, ENTRIES + 1))}),
     f"has sparseStart0/sparseEnd0 ranges outside 0..{ENTRIES}; the file is damaged"),
    ("range-ending-before-its-start", dict(variables={"sparseEnd0": ("u4", changed(
        OFFSETS[1:], 4, OFFSETS[4] - 1))}),
     f"has sparseStart0/sparseEnd0 ranges outside 0..{ENTRIES}; the file is damaged"),
    ("range-starting-below-0", dict(variables={"sparseStart0": ("i8", changed(
        OFFSETS[:-1], 0, -1))}),
     f"has sparseStart0/sparseEnd0 ranges outside 0..{ENTRIES}; the file is damaged"),
    ("no-examples", dict(variables={"sparseStart0": ("u4", np.zeros(0)),
                                    "sparseEnd0": ("u4", np.zeros(0))}),
     "has 0 sparseStart0 and 0 sparseEnd0 entries; expected the same number, > 0. The file "
     "is damaged"),
    ("negative-row-index", dict(attrs={"attributes0": np.uint32(3 | 64)}, variables={
        "index0": ("i4", changed(np.arange(ROWS), 5, -1))}),
     f"has index0 values outside 0..{ROWS - 1}"),
    ("all-rows-empty", dict(variables={"sparseEnd0": ("u4", OFFSETS[:-1])}),
     f"has no entries: all {ROWS} examples list no feature, which DSSTNE's loader refuses"),
    ("width-beyond-int32", dict(attrs={"width0": np.uint32(4_000_000_000)}),
     "has width x height x length = 4000000000; Destiny holds at most 2147483647 features"),
    ("unknown-data-type", dict(attrs={"dataType0": np.uint32(99)}),
     "has dataType0 = 99; expected one of [0, "),
    ("four-dimensions", dict(attrs={"dimensions0": np.uint32(4)}),
     "has dimensions0 = 4; expected 1 to 3. The file is damaged"),
    ("no-index-variable", dict(variables={"sparseIndex0": (None, INDICES)}),
     "lacks the variable 'sparseIndex0'; the dataset is incomplete"),
]


@pytest.mark.parametrize("kwargs, fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_read_dataset_refuses(tmp_path, kwargs, fragment):
    path = write(tmp_path / "d.nc", "gl_input", **kwargs)
    with pytest.raises(DataFormatError) as e:
        read_dataset(path)
    assert str(e.value).startswith(f"{path}: ")
    assert fragment in str(e.value)
    assert "generate-netcdf" in str(e.value)  # what to do


def test_a_directory_or_an_empty_path_is_named_as_such(tmp_path):
    """NetCDF's words were 'Unknown file format' and 'Malformed URL', with 'create it with
    generate-netcdf' (describe_dataset.py, train's and predict's datasets)."""
    with pytest.raises(DataFormatError) as e:
        read_dataset(tmp_path)
    assert str(e.value) == (f"{tmp_path}: is a directory; expected a dataset file written by "
                            "generate-netcdf (give the .nc file's path).")
    with pytest.raises(DestinyError) as e:
        dataset_summaries("")
    assert str(e.value) == ("the dataset file's path is empty; give the path of a dataset file "
                            "written by generate-netcdf.")


TRAIN_CASES = ["negative-index", "nan-data", "inf-data", "no-entries"]


@pytest.mark.parametrize("loss", ["ScaledMarginalCrossEntropy", "L2"])
@pytest.mark.parametrize("damaged", ["gl_input", "gl_output"])
@pytest.mark.parametrize("case", TRAIN_CASES)
def test_train_refuses_a_damaged_dataset(tmp_path, case, damaged, loss):
    kwargs, fragment = next(c[1:] for c in CASES if c[0] == case)
    paths = {}
    for name in ("gl_input", "gl_output"):
        paths[name] = write(tmp_path / f"{name}.nc", name,
                            **(kwargs if name == damaged else {"analog": "data" in case}))
    (tmp_path / "net.json").write_text(json.dumps(NETDEF | {"ErrorFunction": loss}))
    result = CliRunner().invoke(train, ["-c", str(tmp_path / "net.json"),
                                        "-i", str(paths["gl_input"]),
                                        "-o", str(paths["gl_output"]),
                                        "-n", str(tmp_path / "net.nc"), "-e", "1"])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)  # a message, not a traceback
    error = result.output.splitlines()[-1]
    assert error.startswith(f"Error: {paths[damaged]}: dataset '{damaged}' has "), error
    assert fragment in error
    assert "diverged" not in result.output
    assert not (tmp_path / "net.nc").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gl_input.nc", "gl_output.nc",
                                                          "net.json"]


def test_entries_the_netcdf_library_cannot_read_name_the_file(tmp_path):
    """Entries HDF5 cannot read (compressed bytes damaged): netCDF's RuntimeError was worded
    as a failure to write, a full disk ('While writing, ...'), naming no file."""
    paths = {name: write(tmp_path / f"{name}.nc", name, zlib=name == "gl_input")
             for name in ("gl_input", "gl_output")}
    nctypes.damage_end(paths["gl_input"])
    with pytest.raises(DataFormatError) as e:
        read_dataset(paths["gl_input"])
    assert str(e.value) == (f"{paths['gl_input']}: the NetCDF library failed to read it "
                            "(NetCDF: HDF error); the file is damaged; write it again with "
                            "generate-netcdf.")
    result = train_on(tmp_path, paths)
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert result.output == f"Error: {e.value}\n"
    assert not (tmp_path / "net.nc").exists()


def train_on(tmp_path, paths):
    """train, in-process, of NETDEF on the datasets ``paths`` for one epoch, into net.nc."""
    (tmp_path / "net.json").write_text(json.dumps(NETDEF))
    return CliRunner().invoke(train, ["-c", str(tmp_path / "net.json"),
                                      "-i", str(paths["gl_input"]), "-o", str(paths["gl_output"]),
                                      "-n", str(tmp_path / "net.nc"), "-e", "1"])


def test_a_file_the_netcdf_library_fails_on_as_it_opens_names_the_file(tmp_path):
    """Damage netCDF meets as it opens the file, past the header (its global heap): the
    RuntimeError was worded as a failure to write, a full disk, naming no file."""
    paths = {name: write(tmp_path / f"{name}.nc", name) for name in ("gl_input", "gl_output")}
    nctypes.damage_global_heap(paths["gl_output"])
    result = train_on(tmp_path, paths)
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert result.output == (f"Error: {paths['gl_output']}: the NetCDF library failed to read it "
                             "(NetCDF: HDF error); the file is damaged; write it again with "
                             "generate-netcdf.\n")
    assert not (tmp_path / "net.nc").exists()


def test_attributes_the_netcdf_library_cannot_read_name_the_file(tmp_path, monkeypatch):
    """Attributes HDF5 cannot decode: netCDF's AttributeError was a traceback."""
    path = write(tmp_path / "d.nc", "gl_input")
    nctypes.attributes_undecodable(monkeypatch, path)
    for read in (read_dataset, dataset_widths, dataset_summaries):
        with pytest.raises(DataFormatError) as e:
            read(path)
        assert str(e.value) == (f"{path}: the NetCDF library failed to read it (NetCDF: Can't "
                                "open HDF5 attribute); the file is damaged; write it again "
                                "with generate-netcdf.")


def test_width_beyond_int32_is_refused_before_the_entries_are_read(tmp_path):
    path = write(tmp_path / "d.nc", "gl_input", attrs={"width0": np.uint32(2**31)})
    with pytest.raises(DataFormatError, match="at most 2147483647 features"):
        dataset_widths(path)


def test_what_dsstne_writes_still_reads_while_the_damage_is_refused(tmp_path):
    """The checks keep signed and 64-bit offsets and indices, integer values and an empty row
    (all of which DSSTNE reads), and refuse only the bad entry among them."""
    good = {"sparseStart0": ("i8", OFFSETS[:-1]), "sparseEnd0": ("u8", changed(OFFSETS[1:], 0, 0)),
            "sparseIndex0": ("i4", INDICES), "sparseData0": ("i4", np.arange(ENTRIES))}
    ds = read_dataset(write(tmp_path / "a.nc", "x", analog=True, attrs={"dataType0": np.uint32(1)},
                            variables=good))
    assert ds.indptr[1] == 0 and ds.values.tolist() == list(range(int(OFFSETS[1]), ENTRIES))
    bad = good | {"sparseIndex0": ("i4", changed(INDICES, ENTRIES - 1, -2))}
    with pytest.raises(DataFormatError, match=f"has feature index -2 in sparseIndex0 "
                       fr"\(entry {ENTRIES - 1}, example {ROWS - 1}; both count from 0\)"):
        read_dataset(write(tmp_path / "b.nc", "x", analog=True, attrs={"dataType0": np.uint32(1)},
                           variables=bad))


def test_a_ranks_shard_is_refused_for_a_bad_entry_outside_its_columns(tmp_path, monkeypatch):
    """Under mpiexec each rank reads only its columns (spec 7), but every block of entries:
    all ranks refuse the file alike, whichever column the bad entry is in."""
    from destiny.io import dataset

    monkeypatch.setattr(dataset._Entries, "BLOCK", 17)  # the bad entry in a later block
    at = ENTRIES - 3
    index = changed(INDICES, at, 120)
    path = write(tmp_path / "d.nc", "x", analog=True, variables={
        "sparseIndex0": ("u4", index),
        "sparseData0": ("f4", changed(np.ones(ENTRIES, np.float32), at, np.nan))})
    for columns in [(0, 64), (64, 128)]:
        with pytest.raises(DataFormatError, match=f"has the value nan in sparseData0 "
                           fr"\(entry {at}, example {ROWS - 1}; both count from 0\)"):
            read_dataset(path, columns=columns)


def test_a_damaged_shape_of_the_dataset_is_named(tmp_path):
    """Weights for another number of examples, a zero width and entries stored as a matrix:
    each named, not read as something else (an index past a width of 0, the first row)."""
    path = write(tmp_path / "w.nc", "x", attrs={"attributes0": np.uint32(3 | 128)},
                 variables={"dataWeight0": ("f4", np.ones(ROWS - 1, np.float32))})
    with pytest.raises(DataFormatError) as e:
        read_dataset(path)
    assert str(e.value) == (f"{path}: dataset 'x' has {ROWS - 1} dataWeight0 entries for "
                            f"{ROWS} examples; expected one weight per example. The file is "
                            "damaged; write it again with generate-netcdf.")
    path = write(tmp_path / "z.nc", "x", attrs={"width0": np.uint32(0)})
    with pytest.raises(DataFormatError) as e:
        read_dataset(path)
    assert str(e.value) == (f"{path}: dataset 'x' has a zero width, height or length (width0 "
                            "x height0 x length0 = 0), so no feature fits in it. The file is "
                            "damaged; write it again with generate-netcdf.")
    path = write(tmp_path / "m.nc", "x")
    with netCDF4.Dataset(path, "a") as nc:
        nc.renameVariable("sparseIndex0", "stored")
        nc.createDimension("rows", 2)
        nc.createVariable("sparseIndex0", "u4", ("rows", "sparseDataDim0"))[:] = [INDICES] * 2
    with pytest.raises(DataFormatError, match="the variable 'sparseIndex0' has 2 dimensions; "
                       "expected one dimension of integers"):
        read_dataset(path)
