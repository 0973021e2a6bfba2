"""tests/batch.py: each run of a batch gets its own exit status, stdout and stderr."""

from __future__ import annotations

import pytest

from tests.batch import run_batch
from tests.test_parallel import MPIEXEC, needs_mpiexec, rank_env


@pytest.mark.parametrize("ranks", [1, pytest.param(2, marks=needs_mpiexec)])
def test_each_run_of_a_batch_has_its_own_status_and_output(tmp_path, ranks):
    done = run_batch({"usage": (ranks, "train", ["--bogus"]),
                      "help": (ranks, "train", ["--help"]),
                      "other": (ranks, "predict", ["--help"])},
                     tmp_path, rank_env(), MPIEXEC)
    assert done["usage"].returncode == 2 and done["usage"].stdout == b""
    assert done["usage"].stderr.decode().count("Error: No such option '--bogus'") == 1
    assert done["help"].returncode == 0 and done["help"].stderr == b""
    assert done["help"].stdout.decode().count("Usage: train") == 1  # (rank 0 alone prints)
    assert done["other"].returncode == 0 and b"Usage: train" not in done["other"].stdout
    assert done["other"].stdout.decode().count("Usage: predict") == 1
