"""The DSSTNE MovieLens pipeline on the bundled sample: CSV -> text -> two datasets."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np

from destiny.io.dataset import read_dataset
from destiny.io.index import read_index

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent


def sh(*argv):
    result = subprocess.run([str(a) for a in argv], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result


def test_sample_pipeline(tmp_path):
    text = tmp_path / "ratings.txt"
    sh(sys.executable, ROOT / "scripts" / "convert_ratings.py", ROOT / "data" / "ratings.csv",
       "-o", text)
    for side in ("input", "output"):
        sh(BIN / "generate-netcdf", "-d", f"gl_{side}", "-i", text,
           "-o", tmp_path / f"gl_{side}.nc", "-f", tmp_path / f"features_{side}",
           "-s", tmp_path / "samples_input", "-c")
    inp = read_dataset(tmp_path / "gl_input.nc", "gl_input")
    out = read_dataset(tmp_path / "gl_output.nc", "gl_output")
    # The sample: 2,000 users, 80,242 ratings on (at most) 1,000 items.
    assert inp.rows == out.rows == 2000 and inp.nnz == out.nnz == 80242
    assert inp.width == out.width == 1024
    np.testing.assert_array_equal(inp.indices, out.indices)
    samples, ids = read_index(tmp_path / "samples_input")
    assert samples[:3] == ["1", "2", "3"] and ids.tolist() == list(range(2000))
    describe = sh(sys.executable, ROOT / "scripts" / "describe_dataset.py",
                  tmp_path / "gl_input.nc")
    assert "2,000 samples x width 1,024, 80,242 entries" in describe.stdout
