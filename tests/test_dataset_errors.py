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
from destiny.errors import DataFormatError
from destiny.io.dataset import dataset_summaries, read_dataset

ROWS, WIDTH = 40, 128
LENGTHS = np.random.default_rng(0).integers(1, 6, ROWS)
OFFSETS = np.concatenate([[0], np.cumsum(LENGTHS)])
ENTRIES = int(OFFSETS[-1])
INDICES = np.random.default_rng(1).integers(0, 100, ENTRIES)


def write(path, name, *, analog=False, attrs=None, variables=None, drop=()):
    """A dataset file laid out as generate-netcdf writes it (spec 1.5), then damaged:
    ``attrs`` replace or add global attributes; ``variables`` maps a variable's name to
    (NetCDF type, values) to store instead; ``drop`` names attributes to leave out."""
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
            nc.createVariable(key, kind, dims)[:] = values
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
    ("no-entries", dict(variables={"sparseStart0": ("u4", np.zeros(ROWS)),
                                   "sparseEnd0": ("u4", np.zeros(ROWS)),
                                   "sparseIndex0": ("u4", np.zeros(0))}),
     f"has no entries: all {ROWS} examples list no feature (sparseDataDim0 = 0), which DSSTNE's "
     "loader refuses"),
    ("all-rows-empty", dict(variables={"sparseEnd0": ("u4", OFFSETS[:-1])}),
     f"has no entries: all {ROWS} examples list no feature, which DSSTNE's loader refuses"),
]


@pytest.mark.parametrize("kwargs, fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_read_dataset_refuses(tmp_path, kwargs, fragment):
    path = write(tmp_path / "d.nc", "gl_input", **kwargs)
    with pytest.raises(DataFormatError) as e:
        read_dataset(path)
    assert str(e.value).startswith(f"{path}: ")
    assert fragment in str(e.value)
    assert "generate-netcdf" in str(e.value)  # what to do


TRAIN_CASES = ["no-entries"]


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
