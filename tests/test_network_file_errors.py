"""A damaged network file or checkpoint: one paragraph naming the file and the attribute or
variable, exit code 1, no traceback and no output; never a Python exception, nor 'nan' scores."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil

import netCDF4
import numpy as np
import pytest
from click.testing import CliRunner

from destiny import __version__
from destiny.cli.predict import predict
from destiny.cli.train import train
from destiny.errors import DataFormatError
from destiny.io.dataset import SparseDataset, write_dataset
from destiny.io.network_file import FORMAT_VERSION, read_network, write_network
from destiny.netdef import LayerDef, LayerKind, NetworkDef

from . import nctypes
from .test_train import random_dataset, small_netdef

DAMAGED = "The network file is damaged"


def damage(path, attribute, value) -> None:
    """Set a global attribute of a copy, or (``attribute`` ``var[:n]``) the first n values of
    a variable, as a hand or a faulty tool would; ``attribute`` a dict: set each of its
    attributes (``value`` unused); a function: let it edit the open file."""
    with netCDF4.Dataset(path, "a") as nc:
        nc.set_auto_mask(False)
        if callable(attribute):
            attribute(nc)
        elif isinstance(attribute, dict):
            for key, setting in attribute.items():
                nc.setncattr(key, setting)
        elif "[" in attribute:
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


def other_layers(netdef: dict) -> dict:
    netdef["Layers"][1].update(Name="H", N=64)
    netdef["Layers"][2]["Source"] = "H"
    return netdef


def fewer_layers(netdef: dict) -> dict:
    del netdef["Layers"][1]
    return netdef


def resized_counts(nc) -> None:
    """The output's counts, one per unit of another size of layer."""
    nc.renameVariable("destiny_target_counts_Output", "destiny_old_counts")
    nc.createDimension("five", 5)
    nc.createVariable("destiny_target_counts_Output", "f4", ("five",))[:] = 1


def resized_bias(nc) -> None:
    nc.renameVariable("weight1_bias", "old_bias")
    nc.createDimension("five", 5)
    nc.createVariable("weight1_bias", "f4", ("five",))[:] = 0


# Weight 1 (Hidden -> Output) made to share the weight Output -> Input, which there is not.
SHARED = {"weight1_bShared": np.uint32(1), "weight1_bTransposed": np.uint32(0),
          "weight1_sourceInputLayer": "Output", "weight1_sourceOutputLayer": "Input"}

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
    ("layer2_source0", "Nope", "the attribute 'layer2_source0' is 'Nope' (text): unknown layer "
                               "'Nope'; expected one of Input, Hidden, Output."),
    ("layer1_name", "Output", "the attribute 'layer2_name' is 'Output' (text): duplicate layer "
                              "name 'Output'; also used by layer 1 (the 'layer1_' attributes)."),
    ("layers", np.uint32(0), "'layers' is 0 (uint32); expected a whole number of layers, 2 or "
                             "more"),
    ("layers", "abc", "'layers' is 'abc' (text); expected a whole number of layers"),
    ("layers", np.uint32(1), "'layers' is 1 (uint32); expected a whole number of layers, 2 or "
                             "more (an Input and an Output)"),
    ("layer1_source0", "Output", "the attribute 'layer2_source0' is 'Hidden' (text): cycle in "
                                 "the layer graph: Hidden -> Output -> Hidden; sources and skips "
                                 "must form an acyclic graph."),
    ("layer2_kind", np.uint32(1), "the attributes 'layer<i>_kind' are 0 Input, 1 Hidden, "
                                  "1 Hidden: no Output layer; a network needs at least one "
                                  "Input and one Output layer."),
    ("layer2_sources", np.uint32(0), "the attribute 'layer2_sources' is 0 (uint32): a "
                                     "non-Input layer needs at least one source."),
    ("layer1_Nx", np.uint32(0), "'layer1_Nx' is 0 (uint32); expected a whole number, 1 or more"),
    ("layer1_Nx", np.float32(128.7), "'layer1_Nx' is 128.7 (float32); expected a whole number"),
    ("layer1_Nx", np.uint32([128, 128]), "'layer1_Nx' is [128, 128] (uint32); expected a whole "
                                         "number, 1 or more"),
    ("layer1_name", np.uint32(5), "'layer1_name' is 5 (uint32); expected text"),
    ("weights", np.uint32(0), "'weights' is 0 (uint32); expected 2, one weight per source of a "
                              "layer"),
    ("weights", np.uint32(3), "'weights' is 3 (uint32); expected 2, one weight per source of a "
                              "layer"),
    (lambda nc: (nc.delncattr("weight1_bShared"), nc.setncattr("weights", np.uint32(1))), None,
     "'weights' is 1 (uint32); expected 2, one weight per source of a layer"),
    (resized_bias, None, "the variable 'weight1_bias' holds 5 values; the layer 'Output' it "
                         "feeds has 128 units."),
    ("destiny_indexes", "{bad", "'destiny_indexes' is '{bad' (text); expected JSON text of an "
                                "object"),
    ("destiny_indexes", '{"Input": 5}', "'destiny_indexes' is '{\"Input\": 5}' (text); "
                                        "expected JSON"),
    ("destiny_indexes", '{"Input": [true, "d"]}', "'destiny_indexes' is '{\"Input\": [true, "
                                                  "\"d\"]}' (text); expected JSON"),
    ("destiny_indexes", '{"Input": [5, "d", 1]}', "'destiny_indexes' is '{\"Input\": [5, \"d\", "
                                                  "1]}' (text); expected JSON"),
    ("destiny_indexes", '{"Input": [5, 7]}', "'destiny_indexes' is '{\"Input\": [5, 7]}' (text); "
                                             "expected JSON"),
    ("weight1_weights[:1000]", np.nan, "the variable 'weight1_weights' holds 1,000 values that "
                                       "are not finite (NaN or infinity)"),
    ("weight0_weights[:1]", np.inf, "the variable 'weight0_weights' holds 1 value that is not "
                                    "finite"),
    ("weight1_bias[:3]", -np.inf, "the variable 'weight1_bias' holds 3 values that are not"),
    # Shared weights, as a JSON definition's are checked (check_graph).
    (SHARED | {"weight1_sourceOutputLayer": "Nope"}, None,
     "the attribute 'weight1_sourceOutputLayer' is 'Nope' (text): unknown layer 'Nope'; "
     "expected one of Input, Hidden, Output."),
    (SHARED, None, "the attribute 'weight1_sourceInputLayer' is 'Output' (text): no weight "
                   "Output -> Input exists (spec 3.14); the sources of Input are none."),
    # Values predict took as they were: a layer's dropout (and any setting) NaN, infinite or
    # out of range; Destiny's copy of the definition; the counts of the units seen in training.
    ("layer1_pDropout", np.float32(np.nan), "'layer1_pDropout' is nan (float32); expected a "
                                            "finite number"),
    ("layer1_pDropout", np.float32(1), "'layer1_pDropout' is 1.0 (float32); expected a "
                                       "probability in [0, 1) (dropout keeps a unit"),
    ("layer1_pDropout", np.float32(-0.5), "'layer1_pDropout' is -0.5 (float32); expected a "
                                          "probability in [0, 1)"),
    ("layer1_RELUSlope", np.float32(np.inf), "'layer1_RELUSlope' is inf (float32); expected a "
                                             "finite number"),
    ("destiny_netdef_json", "{bad", "'destiny_netdef_json' is '{bad' (text); expected JSON text "
                                    "of an object: the network definition train was given."),
    ("destiny_netdef_json", "[1]", "'destiny_netdef_json' is '[1]' (text); expected JSON text "
                                   "of an object"),
    (lambda nc: nc.setncattr("destiny_netdef_json", json.dumps(
        other_layers(json.loads(nc.getncattr("destiny_netdef_json"))))), None,
     "the attribute 'destiny_netdef_json' holds a definition whose layer 1 is 'H' (Hidden, 64 "
     "units, dataset '', sources 'Input', skips none), and the attributes 'layer1_' describe "
     "'Hidden' (Hidden, 128 units, dataset '', sources 'Input', skips none)."),
    (lambda nc: nc.setncattr("destiny_netdef_json", json.dumps(
        fewer_layers(json.loads(nc.getncattr("destiny_netdef_json"))))), None,
     "the attribute 'destiny_netdef_json' holds a definition of 2 layers, and the attributes "
     "('layers') describe 3."),
    (lambda nc: nc.renameVariable("destiny_target_counts_Output", "destiny_target_counts_Out"),
     None, "the variable 'destiny_target_counts_Out' holds the counts of a layer 'Out', and the "
           "network's Output layers are 'Output'."),
    (lambda nc: nc.renameVariable("destiny_input_counts_Input", "destiny_input_counts_Hidden"),
     None, "the variable 'destiny_input_counts_Hidden' holds the counts of a layer 'Hidden', and "
           "the network's Input layers are 'Input'."),
    (resized_counts, None, "the variable 'destiny_target_counts_Output' holds 5 counts; the "
                           "layer 'Output' has 128 units."),
    ("destiny_target_counts_Output[:1]", np.nan, "the variable 'destiny_target_counts_Output' "
                                                 "holds 1 value that is not a count (a whole "
                                                 "number, 0 or more), the first nan (float32) "
                                                 "for unit 0."),
    ("destiny_input_counts_Input[:2]", -2.0, "the variable 'destiny_input_counts_Input' holds 2 "
                                             "values that are not a count (a whole number, 0 "
                                             "or more), the first -2.0 (float32) for unit 0."),
    ("destiny_target_counts_Output[:3]", 0.5, "the variable 'destiny_target_counts_Output' "
                                              "holds 3 values that are not a count (a whole "
                                              "number, 0 or more), the first 0.5 (float32) for "
                                              "unit 0."),
    ("destiny_input_counts_Input[:2]", -1.5, "the variable 'destiny_input_counts_Input' holds 2 "
                                             "values that are not a count (a whole number, 0 "
                                             "or more), the first -1.5 (float32) for unit 0."),
    # the ranges a JSON definition allows for the same settings (netdef.py)
    ("layer1_weightNorm", np.float32(-1), "'layer1_weightNorm' is -1.0 (float32); expected a "
                                          "number, 0 or more (0: none)"),
    ("layer2_deltaNorm", np.float32(-0.5), "'layer2_deltaNorm' is -0.5 (float32); expected a "
                                           "number, 0 or more"),
    ("sparsenessPenalty_p", np.float32(1.5), "'sparsenessPenalty_p' is 1.5 (float32); expected "
                                             "a target activation in [0, 1]"),
    ("layer1_sparsenessPenalty_beta", np.float32(-2), "'layer1_sparsenessPenalty_beta' is -2.0 "
                                                      "(float32); expected a number, 0 or more"),
    ("denoising_p", np.float32(1), "'denoising_p' is 1.0 (float32); expected a probability in "
                                   "[0, 1)"),
    ("layer0_sources", np.uint32(1), "'layer0_sources' is 1 (uint32); expected 0: an Input "
                                     "layer takes its values from its dataset"),
    ("layer2_sources", np.uint32(5), "'layer2_sources' is 5 (uint32); expected at most 4"),
    # Destiny's format version (NC_UINT): another type is damage, not a version to compare
    ("destiny_format_version", "1", "'destiny_format_version' is '1' (text); expected a whole "
                                    "number, 1 or more"),
    ("destiny_format_version", np.uint32([1, 1]), "'destiny_format_version' is [1, 1] (uint32); "
                                                  "expected a whole number, 1 or more"),
    ("destiny_format_version", np.float64(1.5), "'destiny_format_version' is 1.5 (float64); "
                                                "expected a whole number, 1 or more"),
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


def test_a_dataset_given_as_the_network_and_a_network_as_a_dataset_are_named(model, tmp_path):
    """-n and -i swapped: predict said the dataset was a damaged network file, and train that
    the network 'lacks the global attribute datasets'; each now names the kind of file it is."""
    out = tmp_path / "recs.txt"
    result = CliRunner().invoke(predict, [
        "-n", str(model / "gl_input.nc"), "-i", str(model / "features_input"),
        "-o", str(model / "features_output"), "-r", str(model / "ratings.txt"), "-k", "5",
        "-s", str(out)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert result.output == (f"Error: {model / 'gl_input.nc'}: is a dataset file (written by "
                             "generate-netcdf), not a network; give the network file train wrote "
                             "(its -n), and check that the flags are not swapped.\n")
    assert not out.exists()
    (tmp_path / "net.json").write_text(json.dumps(small_netdef()))
    result = CliRunner().invoke(train, [
        "-c", str(tmp_path / "net.json"), "-i", str(model / "gl.nc"),
        "-o", str(model / "gl_output.nc"), "-n", str(tmp_path / "new.nc"), "-e", "1"])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert result.output == (f"Error: {model / 'gl.nc'}: is a network file (written by train), "
                             "not a dataset; give the dataset files generate-netcdf wrote "
                             "(train's -i and -o), and check that the flags are not swapped.\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.json"]


def test_a_network_file_cut_short_says_what_to_do(model, tmp_path):
    """A network file cut short (a copy that did not finish) is not one netCDF can open: the
    message gave netCDF's 'HDF error' and nothing to do."""
    net, out = tmp_path / "cut.nc", tmp_path / "recs.txt"
    net.write_bytes((model / "gl.nc").read_bytes()[:20000])
    result = CliRunner().invoke(predict, [
        "-n", str(net), "-i", str(model / "features_input"), "-o", str(model / "features_output"),
        "-r", str(model / "ratings.txt"), "-k", "5", "-s", str(out)])
    refused(result, net, "is not a readable NetCDF network file")
    assert "cut short" in result.output and result.output.count("\n") == 1
    assert not out.exists()


def test_weights_the_netcdf_library_cannot_read_name_the_file(model, tmp_path):
    """A block of weights HDF5 cannot read (compressed bytes damaged): netCDF's RuntimeError
    was worded as a failure to write, a full disk ('While writing, ...'), naming no file."""
    net, out = tmp_path / "damaged.nc", tmp_path / "recs.txt"
    shutil.copy(model / "gl.nc", net)
    damage(net, nctypes.stored_compressed("weight1_weights"), None)
    nctypes.damage_end(net)
    result = CliRunner().invoke(predict, [
        "-n", str(net), "-i", str(model / "features_input"), "-o", str(model / "features_output"),
        "-r", str(model / "ratings.txt"), "-k", "5", "-s", str(out)])
    refused(result, net, "the NetCDF library failed to read it (NetCDF: HDF error). ")
    assert "While writing" not in result.output and result.output.count("\n") == 1
    assert not out.exists()


def test_a_network_file_the_netcdf_library_fails_on_as_it_opens_is_named(model, tmp_path):
    """Damage netCDF meets as it opens the file, past the header (its global heap): the
    RuntimeError was worded as a failure to write, a full disk, naming no file."""
    net, out = tmp_path / "damaged.nc", tmp_path / "recs.txt"
    shutil.copy(model / "gl.nc", net)
    nctypes.damage_global_heap(net)
    result = CliRunner().invoke(predict, [
        "-n", str(net), "-i", str(model / "features_input"), "-o", str(model / "features_output"),
        "-r", str(model / "ratings.txt"), "-k", "5", "-s", str(out)])
    refused(result, net, "the NetCDF library failed to read it (NetCDF: HDF error). ")
    assert "While writing" not in result.output and not out.exists()


def test_attributes_the_netcdf_library_cannot_read_are_damage(model, checkpoints, tmp_path,
                                                              monkeypatch):
    """Attributes HDF5 cannot decode: netCDF's AttributeError was a traceback, from predict,
    and from train --resume as it judged the checkpoint."""
    net, out = tmp_path / "damaged.nc", tmp_path / "recs.txt"
    shutil.copy(model / "gl.nc", net)
    nctypes.attributes_undecodable(monkeypatch, net)
    result = CliRunner().invoke(predict, [
        "-n", str(net), "-i", str(model / "features_input"), "-o", str(model / "features_output"),
        "-r", str(model / "ratings.txt"), "-k", "5", "-s", str(out)])
    refused(result, net, "the NetCDF library failed to read it (NetCDF: Can't open HDF5 "
                         "attribute). ")
    assert not out.exists()
    for name in ("net.json", "gl_input.nc", "gl_output.nc", "net.nc1.nc", "net.nc2.nc"):
        shutil.copy(checkpoints / name, tmp_path / name)
    nctypes.attributes_undecodable(monkeypatch, tmp_path / "net.nc2.nc")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    result = run_train(tmp_path, "-e", "3", "--resume")
    refused(result, tmp_path / "net.nc2.nc", "the NetCDF library failed to read it")
    assert f"--resume takes the newest checkpoint, {tmp_path / 'net.nc2.nc'}" in result.output
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # nothing written


@pytest.mark.parametrize("given", ["definition", "directory"])
def test_a_network_path_that_is_no_netcdf_file_is_not_called_cut_short(model, tmp_path, given):
    """The JSON definition given as -n (or a directory) was said to be a network file that may
    be cut short and damaged, to train again or restore from a copy: it is no network at all."""
    net = tmp_path / "net.json"
    if given == "definition":
        net.write_text('{"Version": 0.8, "Layers": []}')
    else:
        net.mkdir()
    result = CliRunner().invoke(predict, [
        "-n", str(net), "-i", str(model / "features_input"), "-o", str(model / "features_output"),
        "-r", str(model / "ratings.txt"), "-k", "5", "-s", str(tmp_path / "recs.txt")])
    assert result.exit_code == 1 and "is not a readable NetCDF network file" in result.output
    assert "cut short" not in result.output and DAMAGED not in result.output, result.output
    assert result.output.count("\n") == 1 and not (tmp_path / "recs.txt").exists()


def test_a_definition_this_destiny_does_not_accept_names_the_writer(model, tmp_path):
    """The embedded definition is read with today's parser: one it refuses may be an earlier
    Destiny's, not damage, and the message says which Destiny wrote the file."""
    net, out = tmp_path / "other.nc", tmp_path / "recs.txt"
    shutil.copy(model / "gl.nc", net)
    damage(net, {"destiny_netdef_json": '{"Layers": 3}', "destiny_version": "0.0.1"}, None)
    result = CliRunner().invoke(predict, [
        "-n", str(net), "-i", str(model / "features_input"), "-o", str(model / "features_output"),
        "-r", str(model / "ratings.txt"), "-k", "5", "-s", str(out)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert (f"{net}: the attribute 'destiny_netdef_json' holds a network definition that this "
            "Destiny does not accept (Layers: expected a non-empty array of layer objects); "
            "the file was written by Destiny 0.0.1, or altered. Predict with the Destiny that "
            "wrote it, or train the network again.") in result.output, result.output
    assert not out.exists()


@pytest.mark.parametrize("attribute,value,what", [
    ("layer1_type", np.uint32(2), "a Pooling layer"),
    ("layer1_type", np.uint32(1), "a Convolutional layer"),
    ("layer1_kind", np.uint32(3), "a Target layer"),
    # (its scale, shift and statistics were ignored: the file scored as a plain layer)
    ("layer1_attributes", np.uint32(4), "batch-normalised"),
    # (its weights and biases sized by Nx x Ny: they were said not to fit, the file damaged)
    ("layer1_Ny", np.uint32(2), r"multi-dimensional \(Nx 128, Ny 2, Nz 1, Nw 1\)"),
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


def test_a_network_file_of_a_newer_format_is_refused_by_its_version(model, tmp_path):
    """A newer Destiny may lay its files out otherwise: its format version is named, with the
    one this Destiny reads, and the file is not called damaged."""
    net, out = tmp_path / "newer.nc", tmp_path / "recs.txt"
    shutil.copy(model / "gl.nc", net)
    damage(net, {"destiny_format_version": np.uint32(FORMAT_VERSION + 1),
                 "destiny_version": "9.0.0",  # (and attributes this Destiny would misread)
                 "layers": "three"}, None)
    result = CliRunner().invoke(predict, [
        "-n", str(net), "-i", str(model / "features_input"), "-o", str(model / "features_output"),
        "-r", str(model / "ratings.txt"), "-k", "5", "-s", str(out)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert result.output == (
        f"Error: {net}: was written by Destiny 9.0.0 in network-file format version "
        f"{FORMAT_VERSION + 1} (destiny_format_version), and this Destiny ({__version__}) reads "
        f"versions up to {FORMAT_VERSION}. Upgrade Destiny to read it, or use the Destiny that "
        "wrote it.\n")
    assert not out.exists()


def test_a_newer_format_that_names_no_writer_is_a_newer_destinys(model, tmp_path):
    net = tmp_path / "newer.nc"
    shutil.copy(model / "gl.nc", net)
    damage(net, "destiny_format_version", np.uint32(FORMAT_VERSION + 1))
    with netCDF4.Dataset(net, "a") as nc:
        nc.delncattr("destiny_version")
    with pytest.raises(DataFormatError, match=re.escape(
            f"{net}: was written by a newer Destiny in network-file format version "
            f"{FORMAT_VERSION + 1} (destiny_format_version)")):
        read_network(net)


@pytest.mark.parametrize("value,shown", [("2", "'2' (text)"), (np.float32(1.5), "1.5 (float32)"),
                                         (np.int32(0), "0 (int32)")])
def test_a_format_version_that_is_not_one_is_damage(model, tmp_path, value, shown):
    net = tmp_path / "odd.nc"
    shutil.copy(model / "gl.nc", net)
    damage(net, "destiny_format_version", value)
    with pytest.raises(DataFormatError, match=re.escape(
            f"the attribute 'destiny_format_version' is {shown}; expected a whole number, 1 or "
            f"more. {DAMAGED}")):
        read_network(net)


def test_a_dsstne_network_file_has_no_format_version_and_reads(model, tmp_path):
    net = tmp_path / "dsstne.nc"
    shutil.copy(model / "gl.nc", net)
    with netCDF4.Dataset(net, "a") as nc:
        for key in [k for k in nc.ncattrs() if k.startswith("destiny_")]:
            nc.delncattr(key)
    assert read_network(net).destiny == {}


def test_a_dsstne_file_without_decay_or_a_layers_penalty_reads_with_the_defaults(model,
                                                                                  tmp_path):
    """No decay: none (0); no sparseness penalty of a layer's own: the network's, which
    DSSTNE reads in its place (quirk 10.25)."""
    net = tmp_path / "dsstne.nc"
    shutil.copy(model / "gl.nc", net)
    with netCDF4.Dataset(net, "a") as nc:
        for key in ("decay", "layer1_sparsenessPenalty_p", "layer1_sparsenessPenalty_beta"):
            nc.delncattr(key)
        nc.setncattr("sparsenessPenalty_p", np.float32(0.25))
        nc.setncattr("sparsenessPenalty_beta", np.float32(0.5))
    netdef = read_network(net).netdef
    assert netdef.decay == 0.0
    penalty = netdef.layers[1].sparseness_penalty
    assert (penalty.p, penalty.beta) == (0.25, 0.5)


def test_what_is_no_readable_network_has_no_destiny_attributes(model, tmp_path):
    from destiny.io.network_file import destiny_attributes

    (tmp_path / "text.nc").write_text("not NetCDF")
    assert destiny_attributes(tmp_path / "missing.nc") is None
    assert destiny_attributes(tmp_path / "text.nc") is None
    assert destiny_attributes(model / "gl.nc")["format_version"] == FORMAT_VERSION


@pytest.mark.parametrize("stored", ["big-endian", "double", "unwritten"])
def test_mapped_weights_are_the_weights_read_and_a_private_copy(model, tmp_path, stored):
    """predict maps the weights (mmap): the values read, also from a variable that is not
    plain little-endian float32 (big-endian, double, or never written and so stored nowhere:
    read, not mapped), and writable without writing the file."""
    net = tmp_path / "big.nc"
    shutil.copy(model / "gl.nc", net)
    with netCDF4.Dataset(net, "a") as nc:
        old = nc.variables["weight1_weights"]
        nc.renameVariable("weight1_weights", "old_weights")
        var = nc.createVariable("weight1_weights", {"big-endian": ">f4", "double": "f8"}.get(
            stored, "f4"), old.dimensions, endian="big" if stored == "big-endian" else "native",
            fill_value=None if stored == "unwritten" else False)
        if stored != "unwritten":  # (else its fill value, 9.97e36, is read)
            var[:] = old[:]
    before = net.read_bytes()
    read, mapped = read_network(net), read_network(net, mmap=True)
    for k in (0, 1):
        np.testing.assert_array_equal(mapped.weights[k], read.weights[k])
    assert isinstance(mapped.weights[0].base, np.memmap)  # (a map, not a copy)
    mapped.weights[0][:] = 7
    del mapped
    assert net.read_bytes() == before


def test_a_network_replaced_as_it_is_mapped_is_read_whole_from_the_file_opened(model, tmp_path,
                                                                              monkeypatch):
    """train --force renaming a new network over the file as predict reads it: the weights
    are mapped by opening the path anew, which then named the new file, and predict scored
    with the new weights beside the old biases. They are read from the file opened instead."""
    from destiny.io import network_file

    from tests.conftest import network_and_another

    net, new = network_and_another(model, tmp_path)
    old = read_network(net)
    offsets = network_file._hdf5_offsets

    def renamed_over_first(path, names):
        if new.exists():
            new.replace(net)
        return offsets(path, names)

    monkeypatch.setattr(network_file, "_hdf5_offsets", renamed_over_first)
    read = read_network(net, mmap=True)
    for k in (0, 1):
        np.testing.assert_array_equal(read.weights[k], old.weights[k])
        np.testing.assert_array_equal(read.biases[k], old.biases[k])


def network_skipping(tmp_path, source: str):
    """A network file of 8 -> 4 -> 8 units whose output layer skips from ``source``."""
    net = tmp_path / "skip.nc"
    layers = (LayerDef("Input", LayerKind.Input, 0, 8, dataset="gl_input"),
              LayerDef("Hidden", LayerKind.Hidden, 1, 4, sources=("Input",)),
              LayerDef("Output", LayerKind.Output, 2, 8, sources=("Hidden",), skips=(source,),
                       dataset="gl_output"))
    write_network(net, NetworkDef(layers=layers), {0: np.zeros((8, 4)), 1: np.zeros((4, 8))},
                  {0: np.zeros(4), 1: np.zeros(8)})
    return net


def test_a_skip_between_layers_of_other_sizes_is_refused(tmp_path):
    """check_graph's check of a JSON definition's skips, which the network file's own checks
    lacked: its weights and biases fit its layers, and only the skip is wrong."""
    net = network_skipping(tmp_path, "Hidden")
    with pytest.raises(DataFormatError, match=re.escape(
            f"{net}: the attribute 'layer2_skip0' is 'Hidden' (text): 'Hidden' has N=4 but this "
            f"layer has N=8; skip layers must have equal sizes. {DAMAGED}")):
        read_network(net)


def test_a_dsstne_network_skipping_from_the_input_layer_predicts_with_it(tmp_path):
    """A DSSTNE network file whose output layer skips from the input layer (spec 3.16), where
    predict stopped with a KeyError and was then refused: with zero weights and biases the
    output is sigmoid(input)."""
    from destiny.io.checkpoint import load_weights
    from destiny.kernels import get_backend
    from destiny.network import Batch, Network

    path = network_skipping(tmp_path, "Input")
    net = Network(read_network(path).netdef, get_backend("cpu"))
    load_weights(net, path)
    rows = (np.array([0, 2, 3], np.int64), np.array([1, 6, 6], np.int32), np.zeros(0, np.float32))
    net.forward(Batch(size=2, inputs={"Input": rows}))
    x = np.zeros((2, 8))
    x[0, [1, 6]] = 1.0
    x[1, 6] = 1.0
    np.testing.assert_allclose(net.activation("Output", 2), 1 / (1 + np.exp(-x)), rtol=1e-6)


def test_an_auto_layer_beside_a_wider_layer_of_its_dataset_reads_back(tmp_path):
    """An "auto" input layer takes its dataset's width, 19 (spec 3.4), and an output layer of
    the same dataset may be wider (N=20: Nx >= width binds it). The copy of the definition
    the file keeps resolved "auto" to the last such layer's N (20), and the network train
    had just written was called damaged."""
    from destiny.fit import fit
    from destiny.train import train_config

    write_dataset(tmp_path / "gl.nc", random_dataset("gl", rows=40, width=19, items=19))
    (tmp_path / "net.json").write_text(json.dumps({"ErrorFunction": "L2", "Layers": [
        {"Name": "Input", "Kind": "Input", "N": "auto", "DataSet": "gl", "Sparse": True},
        {"Name": "Hidden", "Kind": "Hidden", "N": 6, "Activation": "Sigmoid"},
        {"Name": "Output", "Kind": "Output", "N": 20, "DataSet": "gl",
         "Activation": "Sigmoid"}]}))
    fit(config_path=tmp_path / "net.json", input_path=tmp_path / "gl.nc",
        output_path=tmp_path / "gl.nc", network_path=tmp_path / "net.nc",
        cfg=train_config(batch=8, epochs=1), checkpoint_every=0)
    assert [layer.n for layer in read_network(tmp_path / "net.nc").netdef.layers] == [19, 6, 20]


def test_a_dsstne_network_whose_loss_cannot_train_its_output_layer_still_reads(model, tmp_path):
    """A JSON definition pairing ScaledMarginalCrossEntropy with a Linear output is refused
    for training (quirk 10.13); a network file, DSSTNE's, that does is read and predicts as
    it did (the file's layers get check_graph, not check_losses)."""
    net = tmp_path / "linear.nc"
    shutil.copy(model / "gl.nc", net)
    damage(net, "layer2_activation", np.uint32(3))
    assert read_network(net).netdef.layers[2].activation.name == "Linear"


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
    ("destiny_settings", '{"entries": {"gl_input": -1}}', "'destiny_settings' is '{\"entries\": "
                                                          "{\"gl_input\": -1}}' (text); expected "
                                                          "JSON text of an object"),
    ("destiny_settings", '{"examples": 1.5}', "'destiny_settings' is '{\"examples\": 1.5}' "
                                              "(text); expected JSON text of an object"),
    *[("destiny_settings", text, f"'destiny_settings' is '{text}' (text); expected JSON text of "
                                 "an object") for text in ('{"config": []}', '{"netdef": 5}',
                                                           '{"indexes": 5}', '{"entries": []}')],
    (lambda nc: nc.delncattr("destiny_epoch"), None, "records the run's settings "
     "('destiny_settings', as train's checkpoints do) but lacks 'destiny_epoch', the training "
     "state that goes with them."),
    (lambda nc: nc.delncattr("destiny_updates"), None, "but lacks 'destiny_updates', the "
     "training state"),
    ("layer1_activation", np.uint32(99), "'layer1_activation' is 99 (uint32); expected a code "
                                         "of"),
    ("layer1_pDropout", np.float32(np.nan), "'layer1_pDropout' is nan (float32); expected a "
                                            "finite number"),
    ("destiny_netdef_json", "[]", "'destiny_netdef_json' is '[]' (text); expected JSON text of "
                                  "an object"),
    ("weight0_weights[:10]", np.nan, "the variable 'weight0_weights' holds 10 values that are "
                                     "not finite"),
    ("destiny_state1_0[:10]", np.nan, "the variable 'destiny_state1_0' holds 10 values"),
]


def _resized(name: str, size: int, dtype: str = "f4"):
    """An edit that puts a variable of ``size`` values of ``dtype`` in the place of ``name``
    (netCDF cannot resize one in place: the old one is renamed)."""
    def edit(nc):
        nc.renameVariable(name, name + "_old")
        nc.createDimension(name + "_resized", size)
        nc.createVariable(name, dtype, (name + "_resized",))[:] = 0
    return edit


# Optimizer state of another size than its weights or biases: the optimizer's kernel raised
# a ValueError (a bias's), or the reshape did (a matrix's): a traceback either way.
CHECKPOINT_DAMAGE += [
    (_resized("destiny_bias_state0_0", 1), None, "the optimizer state 'destiny_bias_state0_0' "
     "holds 1 value; the layer 'Hidden' it is for has 16 units."),
    (_resized("destiny_state1_1", 3), None, "the optimizer state 'destiny_state1_1' holds 3 "
     "values; the weights Hidden -> Output it is for hold 16 x "),
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


def test_resume_refuses_a_checkpoint_of_a_newer_format(checkpoints, tmp_path):
    for name in ("net.json", "gl_input.nc", "gl_output.nc", "net.nc1.nc", "net.nc2.nc"):
        shutil.copy(checkpoints / name, tmp_path / name)
    newest = tmp_path / "net.nc2.nc"
    damage(newest, "destiny_format_version", np.uint32(FORMAT_VERSION + 1))
    result = run_train(tmp_path, "-e", "3", "--resume")
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert (f"{newest}: was written by Destiny {__version__} in network-file format version "
            f"{FORMAT_VERSION + 1} (destiny_format_version)") in result.output
    assert "Upgrade Destiny to read it" in result.output and DAMAGED not in result.output
    assert not (tmp_path / "net.nc").exists()


def test_damaged_settings_are_not_judged_another_runs(checkpoints, tmp_path):
    """Settings that parse but are none train records (a count below 0) are damage:
    --resume-or-restart refuses the checkpoint as damaged, rather than pass over it as made
    with other settings and start afresh."""
    for name in ("net.json", "gl_input.nc", "gl_output.nc", "net.nc1.nc", "net.nc2.nc"):
        shutil.copy(checkpoints / name, tmp_path / name)
    newest = tmp_path / "net.nc2.nc"
    damage(newest, "destiny_settings", '{"examples": -1}')
    result = run_train(tmp_path, "-e", "3", "--resume-or-restart")
    refused(result, newest, "'destiny_settings' is '{\"examples\": -1}' (text); expected JSON "
                            "text of an object of the run's settings")
    assert not (tmp_path / "net.nc").exists()


@pytest.mark.parametrize("flag", ["--resume", "--resume-or-restart"])
def test_a_newer_format_checkpoint_is_not_judged_another_run(checkpoints, tmp_path, flag):
    """Its settings (here other than this run's) are a later Destiny's to read: both flags
    say to upgrade, rather than refuse it, or pass over it, as made with other settings."""
    for name in ("net.json", "gl_input.nc", "gl_output.nc", "net.nc1.nc", "net.nc2.nc"):
        shutil.copy(checkpoints / name, tmp_path / name)
    newest = tmp_path / "net.nc2.nc"
    damage(newest, "destiny_format_version", np.uint32(FORMAT_VERSION + 1))
    result = run_train(tmp_path, "-e", "3", "-alpha", "0.5", flag)
    assert result.exit_code == 1 and "Upgrade Destiny to read it" in result.output, result.output
    assert "other settings" not in result.output


def test_every_network_and_layer_attribute_survives_a_write_and_read(tmp_path):
    """A definition whose every field differs from its default and from the others (values
    exact in float32), written and read back: the same definition, weights and biases, and
    the values a hand reads in the file, in DSSTNE's order (spec 4.1 to 4.3), so that no
    attribute is written from another field."""
    from destiny.netdef import parse_netdef

    d = {"Name": "roundtrip", "ErrorFunction": "ScaledMarginalCrossEntropy",
         "Kind": "AutoEncoder", "ShuffleIndices": False, "Decay": 0.015625, "Maxout": {"k": 3},
         "LRN": {"k": 2.5, "n": 7, "alpha": 0.0009765625, "beta": 0.625},
         "SparsenessPenalty": {"p": 0.0625, "beta": 0.875},
         "Denoising": {"p": 0.125},
         "DeltaBoost": {"one": 1.75, "zero": 0.8125},
         "ScaledMarginalCrossEntropy": {"oneTarget": 0.9375, "zeroTarget": 0.03125,
                                        "oneScale": 2.5, "zeroScale": 0.375},
         "Layers": [
             {"Name": "In", "Kind": "Input", "N": 12, "DataSet": "gl_input", "Sparse": True},
             {"Name": "Hid", "Kind": "Hidden", "N": 5, "Activation": "LeakyRectifiedLinear",
              "pDropout": 0.25, "RELUSlope": 0.1875, "ELUAlpha": 1.25, "SELULambda": 1.125,
              "WeightNorm": 2.5, "DeltaNorm": 3.5,
              "SparsenessPenalty": {"p": 0.015625, "beta": 0.5625},
              "WeightInit": {"Scheme": "Gaussian", "Scale": 0.0078125, "Bias": -0.4375}},
             {"Name": "Out", "Kind": "Output", "N": 12, "DataSet": "gl_output",
              "Activation": "Sigmoid", "Source": "Hid",
              "WeightInit": {"Scheme": "Uniform", "Scale": 0.3125, "Bias": -2.5}}]}
    nd = parse_netdef(d).resolve({"gl_input": 12, "gl_output": 12})
    rng = np.random.default_rng(3)
    weights = {0: rng.standard_normal((12, 5)).astype(np.float32),
               1: rng.standard_normal((5, 12)).astype(np.float32)}
    biases = {0: rng.standard_normal(5).astype(np.float32),
              1: rng.standard_normal(12).astype(np.float32)}
    path = tmp_path / "net.nc"
    write_network(path, nd, weights, biases)
    back = read_network(path)
    # (NN_VERSION and the default SELULambda are float64 in the definition, float32 written)
    f32 = lambda v: float(np.float32(v))  # noqa: E731
    assert back.netdef == dataclasses.replace(nd, version=f32(nd.version), layers=tuple(
        dataclasses.replace(layer, selu_lambda=f32(layer.selu_lambda)) for layer in nd.layers))
    for k in (0, 1):
        np.testing.assert_array_equal(back.weights[k], weights[k])
        np.testing.assert_array_equal(back.biases[k], biases[k])
    with netCDF4.Dataset(path) as nc:
        got = {a: nc.getncattr(a) for a in nc.ncattrs()}
    expected = {"name": "roundtrip", "kind": 1, "errorFunction": 3, "maxout_k": 3,
                "decay": 0.015625,
                "LRN_k": 2.5, "LRN_n": 7, "LRN_alpha": 0.0009765625, "LRN_beta": 0.625,
                "bSparsenessPenalty": 1, "sparsenessPenalty_p": 0.0625,
                "sparsenessPenalty_beta": 0.875, "bDenoising": 1, "denoising_p": 0.125,
                "deltaBoost_one": 1.75, "deltaBoost_zero": 0.8125,
                "SMCE_oneScale": 2.5, "SMCE_zeroScale": 0.375, "SMCE_oneTarget": 0.9375,
                "SMCE_zeroTarget": 0.03125, "ShuffleIndices": 0, "layers": 3, "weights": 2,
                "layer1_name": "Hid", "layer1_Nx": 5, "layer1_pDropout": 0.25,
                "layer1_weightInitScale": 0.0078125, "layer1_biasInit": -0.4375,
                "layer1_weightNorm": 2.5, "layer1_deltaNorm": 3.5,
                "layer1_sparsenessPenalty_p": 0.015625, "layer1_sparsenessPenalty_beta": 0.5625,
                "layer1_RELUSlope": 0.1875, "layer1_ELUAlpha": 1.25, "layer1_SELULambda": 1.125,
                "layer1_sources": 1, "layer1_source0": "In", "layer2_dataSet": "gl_output",
                "layer2_weightInitScale": 0.3125, "layer2_biasInit": -2.5,
                "weight0_inputLayer": "In", "weight0_outputLayer": "Hid", "weight0_width": 5,
                "weight0_height": 12, "weight1_width": 12, "weight1_height": 5}
    assert {a: got[a] for a in expected} == expected
    # in the order of spec 4.1 to 4.3's tables, DSSTNE's write order
    assert list(dict.fromkeys(re.sub(r"^(layer|weight)\d+_.*", r"\1<i>_", a) for a in got)) == [
        "version", "name", "kind", "errorFunction", "maxout_k", "decay", "LRN_k", "LRN_n",
        "LRN_alpha", "LRN_beta", "bSparsenessPenalty", "sparsenessPenalty_p",
        "sparsenessPenalty_beta", "bDenoising", "denoising_p", "deltaBoost_one", "deltaBoost_zero",
        "SMCE_oneScale", "SMCE_zeroScale", "SMCE_oneTarget", "SMCE_zeroTarget", "ShuffleIndices",
        "checkpoint_name", "checkpoint_interval", "checkpoint_epochs", "layers", "layer<i>_",
        "weights", "weight<i>_", "destiny_format_version"]
    assert [a[len("layer1_"):] for a in got if a.startswith("layer1_")] == [
        "name", "kind", "type", "dataSet", "Nx", "Ny", "Nz", "Nw", "dimensions", "kernelX",
        "kernelY", "kernelZ", "kernelDimensions", "kernelStrideX", "kernelStrideY",
        "kernelStrideZ", "kernelPaddingX", "kernelPaddingY", "kernelPaddingZ", "pDropout",
        "weightInit", "weightInitScale", "biasInit", "weightNorm", "deltaNorm", "activation",
        "sparsenessPenalty_p", "sparsenessPenalty_beta", "RELUSlope", "ELUAlpha", "SELULambda",
        "attributes", "sources", "source0", "skips"]
    assert [a[len("weight0_"):] for a in got if a.startswith("weight0_")] == [
        "inputLayer", "outputLayer", "width", "height", "length", "depth", "breadth", "bShared",
        "bLocked", "norm"]
    if nctypes.LIB is not None:  # the NetCDF types of spec 4.1 to 4.3
        types = nctypes.types(path)
        text = {"name", "checkpoint_name", "layer1_name", "layer1_dataSet", "layer1_source0",
                "weight0_inputLayer", "weight0_outputLayer"}
        ints = {"maxout_k", "LRN_n", "checkpoint_interval", "checkpoint_epochs"}
        floats = {"version", "decay", "LRN_k", "LRN_alpha", "LRN_beta", "sparsenessPenalty_p",
                  "sparsenessPenalty_beta", "denoising_p", "deltaBoost_one", "deltaBoost_zero",
                  "SMCE_oneScale", "SMCE_zeroScale", "SMCE_oneTarget", "SMCE_zeroTarget",
                  "weight0_norm"} | {f"layer1_{a}" for a in (
                      "pDropout", "weightInitScale", "biasInit", "weightNorm", "deltaNorm",
                      "sparsenessPenalty_p", "sparsenessPenalty_beta", "RELUSlope", "ELUAlpha",
                      "SELULambda")}
        uint64 = {f"weight0_{a}" for a in ("width", "height", "length", "depth", "breadth")}
        uints = {"kind", "errorFunction", "bSparsenessPenalty", "bDenoising", "ShuffleIndices",
                 "layers", "weights", "weight0_bShared", "weight0_bLocked",
                 "destiny_format_version"} | {
                     f"layer1_{a}" for a in (
                         "kind", "type", "Nx", "Ny", "Nz", "Nw", "dimensions", "kernelX",
                         "kernelY", "kernelZ", "kernelDimensions", "kernelStrideX",
                         "kernelStrideY", "kernelStrideZ", "kernelPaddingX", "kernelPaddingY",
                         "kernelPaddingZ", "weightInit", "activation", "attributes", "sources",
                         "skips")}
        spec = {**dict.fromkeys(text, nctypes.NC_CHAR), **dict.fromkeys(ints, nctypes.NC_INT),
                **dict.fromkeys(floats, nctypes.NC_FLOAT), **dict.fromkeys(uints, nctypes.NC_UINT),
                **dict.fromkeys(uint64, nctypes.NC_UINT64)}
        assert {a: types[a] for a in spec} == spec


def shared_network(path):
    """A network whose layer H3 takes a shared, transposed weight (weight 2, H1 -> H2's) and
    an unshared one (weight 3, from H1); (definition, weights, biases) as written to ``path``."""
    from destiny.netdef import parse_netdef

    d = {"ErrorFunction": "L2",  # (ShuffleIndices as default: true)
         "Layers": [
             {"Name": "Input", "Kind": "Input", "N": 7, "DataSet": "in"},
             {"Name": "H1", "Kind": "Hidden", "N": 6, "WeightNorm": 1.5},
             {"Name": "H2", "Kind": "Hidden", "N": 5},
             {"Name": "H3", "Kind": "Hidden", "N": 6, "Source": ["H2", "H1"], "WeightNorm": 0.75,
              "SharedWeights": {"SourceInputLayer": "H1", "SourceOutputLayer": "H2",
                                "InputLayer": "H2", "Transposed": True}},
             {"Name": "Output", "Kind": "Output", "N": 7, "DataSet": "out", "Source": "H3"}]}
    nd = parse_netdef(d).resolve({"in": 7, "out": 7})
    rng = np.random.default_rng(4)
    sizes = {0: (7, 6), 1: (6, 5), 2: (5, 6), 3: (6, 6), 4: (6, 7)}  # (2: 1's, transposed)
    weights = {k: rng.standard_normal(sizes[k]).astype(np.float32) for k in (0, 1, 3, 4)}
    biases = {k: rng.standard_normal(sizes[k][1]).astype(np.float32) for k in sizes}
    write_network(path, nd, weights, biases)
    return nd, weights, biases


def test_shared_weights_and_dsstnes_fixed_attributes_are_written(tmp_path):
    """A shared, transposed weight beside an unshared one into the same layer, read back as
    written; DSSTNE's attributes that Destiny fixes (one-dimensional layers, kernels of 1 and
    no padding, unlocked weights, no checkpointing), each weight's norm its destination's, and
    the flags that follow from the definition (an Input layer's Sparse bit, no penalty)."""
    path = tmp_path / "net.nc"
    nd, weights, biases = shared_network(path)
    back = read_network(path)
    assert [(layer.sources, layer.shared_weights) for layer in back.netdef.layers] == [
        (layer.sources, layer.shared_weights) for layer in nd.layers]
    assert back.netdef.layers[3].shared_weights[0].transposed and back.netdef.shuffle_indices
    assert sorted(back.weights) == [0, 1, 3, 4] and sorted(back.biases) == [0, 1, 2, 3, 4]
    for k in weights:
        np.testing.assert_array_equal(back.weights[k], weights[k])
    with netCDF4.Dataset(path) as nc:
        got = {a: nc.getncattr(a) for a in nc.ncattrs()}
        assert "weight2_weights" not in nc.variables and "weight3_weights" in nc.variables
    expected = {"bSparsenessPenalty": 0, "bDenoising": 0, "ShuffleIndices": 1,
                "checkpoint_name": "", "checkpoint_interval": 0, "checkpoint_epochs": 0,
                "destiny_format_version": FORMAT_VERSION,
                "weight2_bShared": 1, "weight2_bTransposed": 1, "weight2_sourceInputLayer": "H1",
                "weight2_sourceOutputLayer": "H2", "weight2_inputLayer": "H2",
                "weight2_outputLayer": "H3", "weight3_bShared": 0,
                "weight3_inputLayer": "H1", "weight3_outputLayer": "H3"}
    for i in range(5):
        expected |= {f"layer{i}_{a}": 1 for a in (
            "Ny", "Nz", "Nw", "dimensions", "kernelX", "kernelY", "kernelZ", "kernelDimensions",
            "kernelStrideX", "kernelStrideY", "kernelStrideZ")}
        expected |= {f"layer{i}_{a}": 0 for a in ("kernelPaddingX", "kernelPaddingY",
                                                   "kernelPaddingZ")}
        expected[f"layer{i}_attributes"] = 1 if i == 0 else 0  # (Input: its dataset's, sparse)
    for k, norm in enumerate([1.5, 0.0, 0.75, 0.75, 0.0]):
        expected |= {f"weight{k}_norm": norm, f"weight{k}_bLocked": 0, f"weight{k}_length": 1,
                     f"weight{k}_depth": 1, f"weight{k}_breadth": 1}
    assert {a: got[a] for a in expected} == expected


def test_a_share_not_transposed_is_written_and_read_as_one(tmp_path):
    """bTransposed 0: the output's weight is the input's own matrix (4 x 4), as it is, where
    the shared network's share is transposed."""
    from destiny.netdef import parse_netdef

    layers = [{"Name": "Input", "Kind": "Input", "N": 4, "DataSet": "in"},
              {"Name": "H", "Kind": "Hidden", "N": 4},
              {"Name": "Output", "Kind": "Output", "N": 4, "DataSet": "out", "SharedWeights": {
                  "SourceInputLayer": "Input", "SourceOutputLayer": "H", "InputLayer": "H"}}]
    nd = parse_netdef({"Layers": layers}).resolve({})
    path = tmp_path / "net.nc"
    write_network(path, nd, {0: np.eye(4)}, {0: np.zeros(4), 1: np.zeros(4)})
    with netCDF4.Dataset(path) as nc:
        assert (nc.getncattr("weight1_bShared"), nc.getncattr("weight1_bTransposed")) == (1, 0)
    share = read_network(path).netdef.layers[2].shared_weights
    assert share == nd.layers[2].shared_weights and not share[0].transposed


@pytest.mark.parametrize("attribute,value,fragment", [
    ({"weight3_bShared": np.uint32(1), "weight3_bTransposed": np.uint32(0),
      "weight3_sourceInputLayer": "H1", "weight3_sourceOutputLayer": "Nope"}, None,
     "the attribute 'weight3_sourceOutputLayer' is 'Nope' (text): unknown layer 'Nope'"),
    ("layer3_source1", "Nope", "the attribute 'layer3_source1' is 'Nope' (text): unknown "
                               "layer 'Nope'"),
], ids=["second-share", "second-source"])
def test_a_layers_second_source_or_share_is_named(tmp_path, attribute, value, fragment):
    """check_graph's error of a layer's second source, or second share, told as the attribute
    of that source, or of the weight the share is recorded on."""
    path = tmp_path / "net.nc"
    shared_network(path)
    damage(path, attribute, value)
    with pytest.raises(DataFormatError, match=re.escape(f"{path}: {fragment}")):
        read_network(path)


@pytest.mark.parametrize("weights", [True, False])
def test_weights_of_another_size_are_refused_also_unread(model, tmp_path, weights):
    """A rank of a split network reads its blocks later (weights=False): the size is still
    checked, with the same message."""
    def resized(nc):
        nc.renameVariable("weight1_weights", "old_weights")
        nc.createDimension("five", 5)
        nc.createVariable("weight1_weights", "f4", ("five",))[:] = 0

    net = tmp_path / "resized.nc"
    shutil.copy(model / "gl.nc", net)
    damage(net, resized, None)
    with pytest.raises(DataFormatError, match=re.escape(
            f"{net}: the variable 'weight1_weights' holds 5 values; the layers it joins need "
            "128 x ")):
        read_network(net, weights=weights)


def test_a_ranks_block_of_a_matrix_is_read_a_block_of_rows_at_a_time(model, monkeypatch):
    """read_block (a rank of a split network): its rows and columns of the matrix, read in
    blocks of rows; None for a variable the file lacks (a checkpoint of another optimizer)."""
    from destiny import shard
    from destiny.io.network_file import read_block

    monkeypatch.setattr(shard, "_BLOCK_VALUES", 1000)  # blocks of a few rows
    whole = read_network(model / "gl.nc").weights[0]
    n_cols = whole.shape[1]
    block = read_block(model / "gl.nc", "weight0_weights", n_cols, (3, 80), (5, 40))
    np.testing.assert_array_equal(block, whole[3:80, 5:40])
    assert read_block(model / "gl.nc", "destiny_state9_0", n_cols, (0, 1), (0, 2)) is None


def test_a_ranks_non_finite_values_are_counted_through_the_whole_variable(tmp_path):
    """check_finite(part=True): a rank that finds NaN in its block tells the count of the whole
    variable, read a block at a time (4M values each), as one process would."""
    from destiny.io.network_checks import check_finite

    size = (1 << 22) + 1000
    with netCDF4.Dataset(tmp_path / "w.nc", "w", format="NETCDF4") as nc:
        nc.createDimension("n", size)
        values = np.zeros(size, np.float32)
        values[[5, 1 << 22, size - 1]] = (np.nan, np.inf, -np.inf)
        nc.createVariable("weight0_weights", "f4", ("n",), fill_value=False)[:] = values
    with pytest.raises(DataFormatError, match=re.escape(
            f"{tmp_path / 'w.nc'}: the variable 'weight0_weights' holds 3 values that are not "
            f"finite (NaN or infinity) among {size:,}. {DAMAGED}")):
        check_finite(tmp_path / "w.nc", "weight0_weights", values[:10], part=True)
