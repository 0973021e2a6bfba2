"""NetCDF paths and dataset names that are not UTF-8: refused up front, by flag, exit code 1.

netCDF4-python hands paths to the C library (and writes text attributes) as UTF-8, so bytes
that are not UTF-8 on the command line, which Python gives as surrogate escapes (b'\\xff' is
'\\udcff'), failed with a UnicodeEncodeError traceback; ``train -n`` failed so only after the
whole training. CliRunner takes the surrogate-escaped strings that argv would give; one test
runs the installed command with the raw bytes.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from destiny.cli.generate_netcdf import generate_netcdf
from destiny.cli.predict import predict
from destiny.cli.train import train
from destiny.io.dataset import SparseDataset, write_dataset

ROOT = pathlib.Path(__file__).resolve().parent.parent
BAD = "\udcff"  # how Python's argv holds the byte 0xff


def refused(command, args, *texts):
    """Run ``command``; check the one-line message holds ``texts`` and that the current
    directory did not change (no output, no temporary file)."""
    before = sorted(os.listdir("."))
    result = CliRunner().invoke(command, args)
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # no traceback
    assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1, result.stderr
    for text in texts:
        assert text in result.stderr, result.stderr
    assert sorted(os.listdir(".")) == before
    return result.stderr


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.txt").write_text("u1\ta:b\nu2\tb:c\n")
    return tmp_path


GENERATE = ["-i", "in.txt", "-f", "features", "-s", "samples", "-c"]


def test_generate_dataset_name_not_utf8(work):
    message = refused(generate_netcdf, [*GENERATE, "-o", "out.nc", "-d", f"g{BAD}"],
                      "the dataset name (-d) 'g\\xff' is not valid UTF-8 (the byte \\xff)",
                      "stores names as UTF-8", "give the name in UTF-8")
    assert "\\udcff" not in message  # the byte as the user typed it, not Python's escape


def test_a_run_of_bytes_not_utf8_is_named_whole(work):
    refused(generate_netcdf, [*GENERATE, "-o", "out.nc", "-d", f"g{BAD}\udcfeh"],
            "the dataset name (-d) 'g\\xff\\xfeh' is not valid UTF-8 (the bytes \\xff\\xfe)")


def test_a_lone_surrogate_from_python_code_is_named_as_one():
    """A str from Python code (fit's network_path, say) may hold a surrogate that stands for
    no byte, where argv's stand for bytes that are not UTF-8: it is named as the surrogate."""
    from destiny.errors import DestinyError
    from destiny.io.netcdf_names import check_netcdf_names

    with pytest.raises(DestinyError, match=r"^the dataset name 'g\\ud800' is not valid UTF-8 "
                                           r"\(the lone surrogate \\ud800\)\. "):
        check_netcdf_names(names=[("g\ud800", "dataset name")])


def test_generate_output_not_utf8(work):
    refused(generate_netcdf, [*GENERATE, "-o", f"{BAD}.nc", "-d", "g"],
            "the output NetCDF file (-o) '\\xff.nc' is not valid UTF-8 (the byte \\xff)",
            "cannot write the file; give a name in UTF-8")


def test_generate_output_in_a_directory_not_utf8(work, monkeypatch):
    """A relative -o is written at its directory's real path (a temporary file beside it),
    which netCDF must be able to open too."""
    os.mkdir(f"d{BAD}")
    shutil.copy("in.txt", f"d{BAD}/in.txt")
    monkeypatch.chdir(f"d{BAD}")
    refused(generate_netcdf, [*GENERATE, "-o", "out.nc", "-d", "g"],
            "the output NetCDF file (-o) 'out.nc' would be written at '",
            "/d\\xff/out.nc' (its directory's real path", "directory whose path is UTF-8")


def test_generate_raw_bytes_on_the_command_line(work):
    """The installed command, given the byte 0xff itself (as a shell's $'g\\xff' does)."""
    exe = pathlib.Path(sys.executable).parent / "generate-netcdf"
    result = subprocess.run([exe, *GENERATE, "-o", "out.nc", "-d", b"g\xff"],
                            capture_output=True)
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith(b"Error: the dataset name (-d) 'g\\xff' is not valid "
                                    b"UTF-8"), result.stderr
    assert os.listdir(".") == ["in.txt"]


@pytest.fixture
def datasets(work):
    rng = np.random.default_rng(0)
    indptr = np.arange(0, 41, 2, dtype=np.int64)
    indices = rng.integers(0, 20, 40).astype(np.int32)
    for name in ("gl_input", "gl_output"):
        write_dataset(f"{name}.nc", SparseDataset(name, 128, indptr, indices))
    layers = [{"Name": "Input", "Kind": "Input", "N": "auto", "DataSet": "gl_input",
               "Sparse": True},
              {"Name": "Hidden", "Kind": "Hidden", "N": 4, "Activation": "Sigmoid"},
              {"Name": "Output", "Kind": "Output", "N": "auto", "DataSet": "gl_output",
               "Activation": "Sigmoid"}]
    pathlib.Path("net.json").write_text(json.dumps({"Layers": layers}))
    return work


TRAIN = {"-c": "net.json", "-i": "gl_input.nc", "-o": "gl_output.nc", "-n": "net.nc"}


@pytest.mark.parametrize("flag,what,verb", [
    ("-n", "network file (-n)", "write"),
    ("--initial-network", "initial network (--initial-network)", "write"),
    ("-i", "input dataset file (-i)", "open"),
    ("-o", "output dataset file (-o)", "open"),
])
def test_train_path_not_utf8(datasets, monkeypatch, flag, what, verb):
    """Refused before any work: train -n used to fail only after training."""
    import destiny.fit

    def no_work(*args, **kwargs):
        raise AssertionError("train started working before refusing the name")

    monkeypatch.setattr(destiny.fit, "get_backend", no_work)
    args = dict(TRAIN, **{flag: f"x{BAD}.nc"})
    if flag in ("-i", "-o"):  # an input that exists under that name
        shutil.copy(TRAIN[flag], args[flag])
    refused(train, [x for kv in args.items() for x in kv] + ["-e", "1"],
            f"the {what} 'x\\xff.nc' is not valid UTF-8 (the byte \\xff)",
            f"cannot {verb} the file")


def test_predict_network_not_utf8(model, work):
    shutil.copy(model / "gl.nc", f"{BAD}.nc")
    refused(predict, ["-n", f"{BAD}.nc", "-r", str(model / "ratings.txt"),
                      "-i", str(model / "features_input"), "-o", str(model / "features_output"),
                      "-s", "recs.txt"],
            "the network file (-n) '\\xff.nc' is not valid UTF-8 (the byte \\xff)",
            "rename the file, or give a link to it whose name is UTF-8")


def test_describe_dataset_file_not_utf8(datasets):
    """scripts/describe_dataset.py reads NetCDF files named on its command line."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "describe_dataset_script", ROOT / "scripts" / "describe_dataset.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shutil.copy("gl_input.nc", f"{BAD}.nc")
    refused(module.main, ["gl_input.nc", f"{BAD}.nc"],
            "the dataset file '\\xff.nc' is not valid UTF-8 (the byte \\xff)")
