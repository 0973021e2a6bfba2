"""Fixtures shared by several test modules."""

from __future__ import annotations

import pathlib

import pytest

from destiny import synthetic
from destiny.fit import fit
from destiny.generate import generate_netcdf
from destiny.train import train_config

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def model(tmp_path_factory):
    """A small model trained on synthetic data through the real pipeline."""
    d = tmp_path_factory.mktemp("model")
    r = synthetic.generate_ratings(users=300, items=90, mean_per_user=8, seed=4)
    synthetic.write_ratings_dsstne(d / "ratings.txt", r)
    for side in ("input", "output"):
        generate_netcdf(input_path=d / "ratings.txt", output=d / f"gl_{side}.nc",
                        dataset_name=f"gl_{side}", feature_index=d / f"features_{side}",
                        sample_index=d / "samples", create=True)
    fit(config_path=ROOT / "netdefs" / "movielens.json", input_path=d / "gl_input.nc",
        output_path=d / "gl_output.nc", network_path=d / "gl.nc",
        cfg=train_config(batch=64, epochs=3), checkpoint_every=0)
    return d
