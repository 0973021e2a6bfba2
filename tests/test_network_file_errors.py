"""A damaged network file or checkpoint: one paragraph naming the file and the attribute or
variable, exit code 1, no traceback and no output; never a Python exception, nor 'nan' scores."""

from __future__ import annotations

import json
import shutil

import netCDF4
import numpy as np
import pytest
from click.testing import CliRunner

from destiny.cli.predict import predict
from destiny.cli.train import train
from destiny.errors import DataFormatError
from destiny.io.dataset import SparseDataset, write_dataset
from destiny.io.network_file import read_network

from .test_train import random_dataset, small_netdef

DAMAGED = "The network file is damaged"


def damage(path, attribute, value) -> None:
    """Set a global attribute of a copy, or (``attribute`` ``var[:n]``) the first n values of
    a variable, as a hand or a faulty tool would."""
    with netCDF4.Dataset(path, "a") as nc:
        nc.set_auto_mask(False)
        if "[" in attribute:
            name, n = attribute.rstrip("]").split("[:")
            nc.variables[name][:int(n)] = value
        else:
            nc.setncattr(attribute, value)


def refused(result, path, fragment) -> None:
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)  # not a traceback
    assert "Traceback" not in result.output
    assert f"{path}: " in result.output and fragment in result.output, result.output
    assert DAMAGED in result.output


NETWORK_DAMAGE = [
    ("layer1_kind", np.uint32(99), "'layer1_kind' is 99 (uint32); expected a code of LayerKind "
                                   "(0 Input"),
    ("layer1_activation", np.uint32(99), "'layer1_activation' is 99 (uint32); expected a code "
                                         "of Activation (0 Sigmoid"),
    ("layer1_type", np.uint32(99), "'layer1_type' is 99 (uint32); expected a code of LayerType"),
    ("layer1_weightInit", np.uint32(99), "'layer1_weightInit' is 99 (uint32); expected a code "
                                         "of WeightInit"),
    ("kind", np.uint32(99), "'kind' is 99 (uint32); expected a code of NetworkKind"),
    ("errorFunction", np.uint32(99), "'errorFunction' is 99 (uint32); expected a code of "
                                     "ErrorFunction"),
    ("weight0_inputLayer", "Nope", "'weight0_inputLayer' is 'Nope' (text); expected 'Input': "
                                   "weight 0 joins 'Input' to 'Hidden'"),
    ("layer2_source0", "Nope", "'layer2_source0' is 'Nope' (text); expected the name of a layer "
                               "('Input', 'Hidden', 'Output')"),
    ("layer1_name", "Output", "'layer2_name' is 'Output' (text); expected a name of its own: "
                              "'layer1_name' is 'Output' too"),
    ("layers", np.uint32(0), "'layers' is 0 (uint32); expected a whole number of layers, 2 or "
                             "more"),
    ("layers", "abc", "'layers' is 'abc' (text); expected a whole number of layers"),
    ("layer1_source0", "Output", "the layers' sources form a cycle ('layer1_source0' is "
                                 "'Output', 'layer2_source0' is 'Hidden')"),
    ("layer2_kind", np.uint32(1), "has no Output layer (kind 2: 'layer0_kind' is 0"),
    ("layer1_Nx", np.uint32(0), "'layer1_Nx' is 0 (uint32); expected a whole number, 1 or more"),
    ("layer1_Nx", np.float32(128.7), "'layer1_Nx' is 128.7 (float32); expected a whole number"),
    ("weights", np.uint32(0), "'weights' is 0 (uint32); expected 2, one weight per source of a "
                              "layer"),
    ("destiny_indexes", "{bad", "'destiny_indexes' is '{bad' (text); expected JSON text of an "
                                "object"),
    ("destiny_indexes", '{"Input": 5}', "'destiny_indexes' is '{\"Input\": 5}' (text); "
                                        "expected JSON"),
    ("weight1_weights[:1000]", np.nan, "the variable 'weight1_weights' holds 1,000 values that "
                                       "are not finite (NaN or infinity)"),
    ("weight0_weights[:1]", np.inf, "the variable 'weight0_weights' holds 1 value that is not "
                                    "finite"),
    ("weight1_bias[:3]", -np.inf, "the variable 'weight1_bias' holds 3 values that are not"),
]


@pytest.mark.parametrize("attribute,value,fragment", NETWORK_DAMAGE)
def test_predict_refuses_a_damaged_network_file(model, tmp_path, attribute, value, fragment):
    net, out = tmp_path / "damaged.nc", tmp_path / "recs.txt"
    shutil.copy(model / "gl.nc", net)
    damage(net, attribute, value)
    result = CliRunner().invoke(predict, [
        "-n", str(net), "-i", str(model / "features_input"), "-o", str(model / "features_output"),
        "-r", str(model / "ratings.txt"), "-k", "5", "-s", str(out)])
    refused(result, net, fragment)
    assert not out.exists()
    with pytest.raises(DataFormatError, match="damaged"):  # (the library, as holdout reads it)
        read_network(net)


@pytest.mark.parametrize("attribute,value,what", [
    ("layer1_type", np.uint32(2), "a Pooling layer"),
    ("layer1_type", np.uint32(1), "a Convolutional layer"),
    ("layer1_kind", np.uint32(3), "a Target layer"),
])
def test_a_dsstne_layer_destiny_does_not_run_is_named_not_called_damage(model, tmp_path,
                                                                         attribute, value, what):
    """DSSTNE's own layer types (its CIFAR-10 sample) are refused by name, as in a JSON
    definition: the file is not damaged."""
    net = tmp_path / "other.nc"
    shutil.copy(model / "gl.nc", net)
    damage(net, attribute, value)
    with pytest.raises(DataFormatError, match=rf"layer 'Hidden' \(layer1_\) is {what}, which "
                                              r"Destiny does not run") as info:
        read_network(net)
    assert DAMAGED not in str(info.value)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """A run of 2 epochs with a checkpoint after each (its final network removed)."""
    d = tmp_path_factory.mktemp("ck")
    ds = random_dataset("x")
    for name in ("gl_input", "gl_output"):
        write_dataset(d / f"{name}.nc", SparseDataset(name, ds.width, ds.indptr, ds.indices))
    (d / "net.json").write_text(json.dumps(small_netdef()))
    assert run_train(d, "-e", "2").exit_code == 0
    (d / "net.nc").unlink()
    return d


def run_train(d, *args):
    return CliRunner().invoke(train, [
        "-c", str(d / "net.json"), "-i", str(d / "gl_input.nc"), "-o", str(d / "gl_output.nc"),
        "-n", str(d / "net.nc"), "-b", "64", "--checkpoint-every", "1", *args])


CHECKPOINT_DAMAGE = [
    ("destiny_run_started", "abc", "'destiny_run_started' is 'abc' (text); expected a number"),
    ("destiny_epoch", "abc", "'destiny_epoch' is 'abc' (text); expected a whole number"),
    ("destiny_epoch", np.int64(-1), "'destiny_epoch' is -1 (int64); expected a whole number"),
    ("destiny_updates", "x", "'destiny_updates' is 'x' (text); expected a whole number"),
    ("destiny_settings", "{bad", "'destiny_settings' is '{bad' (text); expected JSON text of an "
                                 "object"),
    ("destiny_settings", "[]", "'destiny_settings' is '[]' (text); expected JSON text of an "
                               "object"),
    ("layer1_activation", np.uint32(99), "'layer1_activation' is 99 (uint32); expected a code "
                                         "of"),
    ("weight0_weights[:10]", np.nan, "the variable 'weight0_weights' holds 10 values that are "
                                     "not finite"),
    ("destiny_state1_0[:10]", np.nan, "the variable 'destiny_state1_0' holds 10 values"),
]


@pytest.mark.parametrize("attribute,value,fragment", CHECKPOINT_DAMAGE)
def test_resume_refuses_a_damaged_checkpoint(checkpoints, tmp_path, attribute, value, fragment):
    for name in ("net.json", "gl_input.nc", "gl_output.nc", "net.nc1.nc", "net.nc2.nc"):
        shutil.copy(checkpoints / name, tmp_path / name)
    newest = tmp_path / "net.nc2.nc"
    damage(newest, attribute, value)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    result = run_train(tmp_path, "-e", "3", "--resume")
    refused(result, newest, fragment)
    assert f"--resume takes the newest checkpoint, {newest}" in result.output
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # nothing written
