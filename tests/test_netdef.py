"""Tests for destiny.netdef: shipped netdefs, defaults, aliases, N auto, one test per error."""

from __future__ import annotations

import copy
import json
import math
import sys
from pathlib import Path

import pytest

from destiny.errors import DestinyError, NetDefError
from destiny.netdef import (
    Activation, ErrorFunction, LayerKind, NetworkDef, WeightInit, load_netdef,
)
from destiny.netdef_fields import as_float32 as f32

ROOT = Path(__file__).resolve().parents[1]
WIDTHS = {"gl_input": 27392, "gl_output": 27392}


def minimal() -> dict:
    """The smallest valid network: Input -> Hidden -> Output, everything else default."""
    return {"Layers": [
        {"Kind": "Input", "N": "auto", "DataSet": "in"},
        {"Kind": "Hidden", "N": 8},
        {"Kind": "Output", "N": "auto", "DataSet": "out"},
    ]}


def test_movielens_netdef_loads():
    net = load_netdef(ROOT / "netdefs" / "movielens.json", WIDTHS)
    assert [layer.name for layer in net.layers] == ["Input", "Hidden", "Output"]
    assert [layer.n for layer in net.layers] == [27392, 128, 27392]
    assert net.error_function == ErrorFunction.ScaledMarginalCrossEntropy
    assert (net.smce.one_target, net.smce.zero_target) == (1.0, 0.0)
    assert net.shuffle_indices is False
    assert net.denoising.p == f32(0.2) and net.layers[0].denoising
    assert (net.sparseness_penalty.p, net.sparseness_penalty.beta) == (0.5, 2.0)
    assert net.layer("Output").activation == Activation.Sigmoid
    assert net.layer("Output").sources == ("Hidden",)


def test_benchmark_netdef_loads():
    net = load_netdef(ROOT / "netdefs" / "benchmark.json")
    assert not net.is_resolved
    hidden = net.layers_of(LayerKind.Hidden)
    assert [h.n for h in hidden] == [1024] * 3
    assert all(h.p_dropout == 0.5 and h.weight_init.scheme == WeightInit.Gaussian
               and h.weight_init.scale == f32(0.01) for h in hidden)
    out = net.layer("Output")
    assert (out.weight_init.scale, out.weight_init.bias) == (f32(0.01), f32(-10.2))
    assert net.error_function == ErrorFunction.ScaledMarginalCrossEntropy
    resolved = net.resolve(WIDTHS)
    assert resolved.is_resolved and resolved.layer("Input").n == 27392


def test_defaults_follow_dsstne():
    net = load_netdef(minimal())
    assert isinstance(net, NetworkDef)
    assert net.shuffle_indices is True  # quirk 10.11
    assert net.error_function == ErrorFunction.CrossEntropy
    assert net.relu_slope == 1.0 and net.elu_alpha == 1.0 and net.selu_lambda == f32(1.050701)
    assert (net.smce.one_target, net.smce.zero_target) == (f32(0.9), f32(0.1))
    assert net.version == 0.9 and net.decay == 0.0
    hidden = net.layers[1]
    assert hidden.activation == Activation.Sigmoid
    assert hidden.weight_init.scheme == WeightInit.Xavier and hidden.weight_init.scale == 1.0
    assert hidden.p_dropout == 0.0 and hidden.sparse is False
    # Positional default names: Output2, not Output (quirk 10.9).
    assert [layer.name for layer in net.layers] == ["Input0", "Hidden1", "Output2"]
    assert net.layers[2].sources == ("Hidden1",)


def test_only_input_layers_sparse_in_the_json_are_denoised():
    """Spec 3.9: Denoising.p > 0 gives the Denoising attribute to the Input layers that have
    "Sparse": true in the JSON, and to no other layer."""
    data = minimal()
    data["Denoising"] = {"p": 0.2}
    data["Layers"][1]["Sparse"] = True  # a Sparse hidden layer: the penalty's, not denoised
    data["Layers"][2]["Sparse"] = True  # (an Output layer's Sparse has no effect, spec 3.5)
    net = load_netdef(data, {"in": 4, "out": 4})
    assert [layer.denoising for layer in net.layers] == [False, False, False]
    data["Layers"][0]["Sparse"] = True
    net = load_netdef(data, {"in": 4, "out": 4})
    assert [layer.denoising for layer in net.layers] == [True, False, False]


def test_positional_kinds_and_default_n():
    net = load_netdef({"Layers": [{"DataSet": "a", "N": 3}, {}, {"DataSet": "b"}]})
    assert [layer.kind for layer in net.layers] == [LayerKind.Input, LayerKind.Hidden,
                                                    LayerKind.Output]
    assert net.layers[1].n == 1  # DSSTNE's default N


def test_case_insensitive_keys_values_and_aliases():
    data = {"layers": [
        {"kind": "INPUT", "n": 4, "dataset": "in", "sparse": True},
        {"Kind": "hidden", "N": 8, "Activation": "relu", "Slope": 0.1,
         "weightinit": {"scheme": "caffexavier"}},
        {"Kind": "Output", "N": 4, "DataSet": "out", "Activation": "SoftMax"},
    ], "errorfunction": "Cross Entropy", "DataScaledMarginalCrossEntropy": {"oneScale": 30},
        "Slope": 0.5, "LocalResponseNormalization": {"k": 3}}
    net = load_netdef(data)
    assert net.layers[1].activation == Activation.RectifiedLinear
    assert net.layers[1].relu_slope == f32(0.1) and net.layers[2].relu_slope == 0.5
    assert net.layers[1].weight_init.scheme == WeightInit.CaffeXavier
    assert net.error_function == ErrorFunction.CrossEntropy
    assert net.smce.one_scale == 30 and net.lrn.k == 3
    assert not net.layers[0].denoising  # Denoising.p is 0


def test_numbers_0_and_1_are_booleans_as_in_dsstnes_parser():
    """jsoncpp's asBool, which DSSTNE reads these keys with, takes numbers."""
    data = minimal()
    data["Layers"][0]["Sparse"] = 1
    data["Layers"][1]["Sparse"] = 0.0
    data["ShuffleIndices"] = 0
    net = load_netdef(data, {"in": 4, "out": 4})
    assert net.layers[0].sparse is True and net.layers[1].sparse is False
    assert net.shuffle_indices is False


def test_enum_values_match_spec_section_11():
    assert Activation.SoftMax == 7 and Activation.ScaledExponentialLinear == 12
    assert ErrorFunction.ScaledMarginalCrossEntropy == 3 and ErrorFunction.L2Hinge == 6
    assert WeightInit.Constant == 5 and WeightInit.SELU == 6


def test_softplus_is_accepted():
    data = minimal()
    data["ErrorFunction"] = "L2"
    data["Layers"][1]["Activation"] = "SoftPlus"
    assert load_netdef(data).layers[1].activation == Activation.SoftPlus


# Every spelling DSSTNE's parser takes (spec 3.6 table, 3.2 ErrorFunction), in some other case
# (enum strings are case-insensitive, spec 3.1), with the enum of spec 11 it means.
@pytest.mark.parametrize("spelling, expected", [
    ("SIGMOID", Activation.Sigmoid), ("tanh", Activation.Tanh), ("LINEAR", Activation.Linear),
    ("relu", Activation.RectifiedLinear), ("RectifiedLinear", Activation.RectifiedLinear),
    ("LRELU", Activation.LeakyRectifiedLinear),
    ("leakyRectifiedLinear", Activation.LeakyRectifiedLinear),
    ("Elu", Activation.ExponentialLinear), ("exponentiallinear", Activation.ExponentialLinear),
    ("SELU", Activation.ScaledExponentialLinear),
    ("ScaledExponentialLinear", Activation.ScaledExponentialLinear),
    ("softmax", Activation.SoftMax), ("SOFTPLUS", Activation.SoftPlus),
    ("softSign", Activation.SoftSign),
])
def test_every_activation_spelling_of_the_spec(spelling, expected):
    net = load_netdef(_with(_set_layer(1, "Activation", spelling)))
    assert net.layers[1].activation is expected


@pytest.mark.parametrize("spelling, expected", [
    ("l1", ErrorFunction.L1), ("L2", ErrorFunction.L2), ("l2HINGE", ErrorFunction.L2Hinge),
    ("HINGE", ErrorFunction.Hinge), ("crossentropy", ErrorFunction.CrossEntropy),
    ("CROSS ENTROPY", ErrorFunction.CrossEntropy),
    ("scaledmarginalcrossentropy", ErrorFunction.ScaledMarginalCrossEntropy),
    ("DATASCALEDMARGINALCROSSENTROPY", ErrorFunction.DataScaledMarginalCrossEntropy),
])
def test_every_error_function_spelling_of_the_spec(spelling, expected):
    # (the Output layer is Sigmoid, which every error function trains)
    assert load_netdef(_with(_set_top("ErrorFunction", spelling))).error_function is expected


def test_auto_is_case_insensitive_as_in_dsstne():
    """DSSTNE lower-cases the N string before comparing it with "auto" (spec 3.1)."""
    net = load_netdef(_with(_set_layer(0, "N", "AUTO")), {"in": 128, "out": 128})
    assert net.layers[0].n == 128 and net.layers[0].n_auto


@pytest.mark.parametrize("spelling", ["RELUMax", "linearmax", "ParametricRectifiedLinear",
                                      "PRelu", "MaxOut"])
def test_activations_dsstne_cannot_run_are_refused_with_the_reason(spelling):
    """RELUMax and LinearMax ran as an identity without a delta (quirk 10.12); PRelu, MaxOut
    (LDL.txt's) and ParametricRectifiedLinear do not parse in DSSTNE (spec 3.3, 10.10, 11).
    Each is refused as unsupported, saying why, not as a misspelling."""
    with pytest.raises(NetDefError, match=rf"^Layers\[1\]\.Activation: '{spelling}' is not "
                                          r"supported: DSSTNE.*Destiny does not support it$"):
        load_netdef(_with(_set_layer(1, "Activation", spelling)))


def test_auto_needs_a_width():
    net = load_netdef(minimal())
    assert net.layers[0].n is None and net.layers[0].n_auto
    with pytest.raises(NetDefError, match=r"^Layers\[2\]\.DataSet: 'auto' needs the width "
                                          r"of dataset 'out', but the datasets given hold "
                                          r"'in'; the layer's DataSet must equal the -d name"):
        net.resolve({"in": 128})
    assert net.resolve({"in": 128, "out": 256}).layers[2].n == 256


def test_single_layer_object_and_skip_and_shared_weights():
    data = minimal()
    data["Layers"][1]["Name"] = "H"
    data["Layers"].insert(2, {"Kind": "Hidden", "Name": "H2", "N": 8, "Skip": "H"})
    data["Layers"].insert(3, {"Kind": "Hidden", "Name": "H3", "N": 8,
                              "SharedWeights": {"InputLayer": "H2", "SourceInputLayer": "H",
                                                "SourceOutputLayer": "H2"}})
    net = load_netdef(data)
    assert net.layer("H2").skips == ("H",)
    assert net.layer("H3").sources == ("H2",)
    assert net.layer("H3").shared_weights[0].transposed is False


def test_a_skip_from_an_input_layer_is_taken_and_its_size_checked_once_resolved():
    """A skip adds its source's activations (spec 3.16); an Input layer's are the batch's
    entries. Its N may be "auto": the sizes are compared once the datasets resolve them."""
    data = minimal()
    data["Layers"][0]["Name"] = "In"
    data["Layers"][2]["Skip"] = ["In"]
    net = load_netdef(data, {"in": 16, "out": 16})
    assert net.layers[2].skips == ("In",)
    with pytest.raises(NetDefError, match=r"^Layers\[2\]\.Skip: 'In' has N=16 but this layer "
                                          r"has N=20; skip layers must have equal sizes"):
        load_netdef(data, {"in": 16, "out": 20})


def test_unused_layers_are_those_no_source_or_skip_leads_from_to_an_output():
    data = minimal()
    data["Layers"][1]["Name"] = "H"
    data["Layers"][2]["Name"] = "Out"
    assert load_netdef(data).unused_layers() == ()
    data["Layers"][:0] = [{"Kind": "Input", "Name": "Idle", "N": 4, "DataSet": "idle"},
                          {"Kind": "Input", "Name": "Skipped", "N": 4, "DataSet": "side"}]
    data["Layers"] += [{"Kind": "Hidden", "Name": "Dead", "N": 4, "Source": ["H", "Idle"]},
                       {"Kind": "Hidden", "Name": "Deader", "N": 4, "Source": "Dead"},
                       {"Kind": "Hidden", "Name": "Side", "N": 4, "Source": "H",
                        "Skip": "Skipped"},
                       {"Kind": "Output", "Name": "Out2", "N": 4, "DataSet": "out2",
                        "Source": "Side"}]
    unused = load_netdef(data).unused_layers()
    assert [layer.name for layer in unused] == ["Idle", "Dead", "Deader"]


@pytest.mark.parametrize("share, message", [
    ({"InputLayer": "H2", "SourceInputLayer": "H2", "SourceOutputLayer": "H3"},
     "the weight H2 -> H3 is itself shared; a share reuses an unshared matrix (spec 3.14)"),
    ({"InputLayer": "H2", "SourceInputLayer": "H", "SourceOutputLayer": "H2", "Transposed": 1},
     "the weight H2 -> H3 is 8 x 6 units, and H -> H2 transposed is 8 x 8; the dimensions of a "
     "shared matrix must match (spec 3.14)"),
])
def test_a_share_of_a_share_or_of_another_size_is_refused(share, message):
    """A shared matrix is an unshared one of the same dimensions (spec 3.14); before, such a
    definition was taken and failed (or trained wrongly) once weights were made."""
    data = minimal()
    data["Layers"][1]["Name"] = "H"
    data["Layers"].insert(2, {"Kind": "Hidden", "Name": "H2", "N": 8})
    data["Layers"].insert(3, {"Kind": "Hidden", "Name": "H3", "N": 6, "SharedWeights": share})
    with pytest.raises(NetDefError, match=r"^Layers\[3\]\.SharedWeights\[0\]\."
                                          r"SourceOutputLayer: ") as raised:
        load_netdef(data)
    assert message in str(raised.value)


def _with(change):
    data = minimal()
    change(data)
    return data


def _set_layer(i, key, value):
    return lambda d: d["Layers"][i].__setitem__(key, value)


def _set_top(key, value):
    return lambda d: d.__setitem__(key, value)


def _cycle(d):
    d["Layers"][1].update(Name="A", Source="B")
    d["Layers"].insert(2, {"Kind": "Hidden", "Name": "B", "N": 4, "Source": "A"})


INVALID = [
    ("missing_layers", lambda d: d.pop("Layers"), r"^Layers: required key missing"),
    ("unknown_top_key", _set_top("WeightData", "x"),
     r"^WeightData: unknown key \(DSSTNE's parser spells it WeightsData\); expected one of "
     r"Version, Name"),
    ("unknown_layer_key", _set_layer(1, "L1Penalty", 1),
     r"^Layers\[1\]\.L1Penalty: unknown key .*expected one of Kind, Type, Name"),
    ("key_not_allowed_for_kind", _set_layer(0, "Activation", "Tanh"),
     r"^Layers\[0\]\.Activation: not allowed on an Input layer .*allowed keys: Kind, Type"),
    ("key_twice", lambda d: d["Layers"][1].update(RELUSlope=1, slope=2),
     r"^Layers\[1\]\.slope: given twice \(also as 'RELUSlope'\)$"),
    ("string_for_number", _set_layer(1, "pDropout", "0.5"),
     r"^Layers\[1\]\.pDropout: expected a number, got a string \('0.5'\)"),
    ("bool_expected", _set_top("ShuffleIndices", 2),
     r"^ShuffleIndices: expected true or false \(or 0 or 1\), got a number \(2\)"),
    ("bool_as_string", _set_layer(1, "Sparse", "true"),
     r"^Layers\[1\]\.Sparse: expected true or false \(or 0 or 1\), got a string"),
    ("unknown_activation", _set_layer(1, "Activation", "Sigmod"),
     r"^Layers\[1\]\.Activation: unknown 'Sigmod'; expected one of Sigmoid, Tanh, "
     r"RectifiedLinear, Linear, SoftPlus"),
    ("relumax_refused", _set_layer(1, "Activation", "RELUMax"),
     r"^Layers\[1\]\.Activation: 'RELUMax' is not supported: .*identity"),
    ("prelu_refused", _set_layer(1, "Activation", "PRelu"),
     r"^Layers\[1\]\.Activation: 'PRelu' is not supported"),
    ("unknown_kind", _set_layer(1, "Kind", "Pooling"),
     r"^Layers\[1\]\.Kind: unknown 'Pooling'; expected one of Input, Hidden, Output"),
    ("target_kind", _set_layer(1, "Kind", "Target"),
     r"^Layers\[1\]\.Kind: Target layers .*not support"),
    ("unknown_error_function", _set_top("ErrorFunction", "MSE"),
     r"^ErrorFunction: unknown 'MSE'; expected one of L1, L2, CrossEntropy, "
     r"ScaledMarginalCrossEntropy"),
    ("smce_alias_refused", _set_top("ErrorFunction", "SMCE"),
     r"^ErrorFunction: 'SMCE' is not supported: .*ScaledMarginalCrossEntropy"),
    ("unknown_weight_init", _set_layer(1, "WeightInit", {"Scheme": "He"}),
     r"^Layers\[1\]\.WeightInit\.Scheme: unknown 'He'; expected one of Xavier, CaffeXavier, "
     r"Gaussian"),
    ("n_zero", _set_layer(1, "N", 0), r"^Layers\[1\]\.N: expected a positive integer or 'auto'"),
    ("n_float", _set_layer(1, "N", 2.5), r"^Layers\[1\]\.N: expected a positive integer"),
    ("n_beyond_int32", _set_layer(1, "N", 2**62),
     r"^Layers\[1\]\.N: 4611686018427387904 units is more than Destiny holds in a layer \(at "
     r"most 2,147,483,647"),
    ("n_float_beyond_int32", _set_layer(1, "N", 1e19), r"^Layers\[1\]\.N: 10000000000000000000 "
                                                        r"units is more than"),
    # An integer of thousands of digits (json reads up to 4,300) was a traceback converting it
    # to float; the messages quote a long value by its start and length.
    ("n_thousands_of_digits", _set_layer(1, "N", int("9" * 4000)),
     r"^Layers\[1\]\.N: 999999\.\.\. \(4,000 digits\) units is more than Destiny holds"),
    ("n_negative_thousands_of_digits", _set_layer(1, "N", -int("9" * 4000)),
     r"^Layers\[1\]\.N: expected a positive integer or 'auto', got a number of 4,000 digits "
     r"\(-999999\.\.\.\)$"),
    ("dropout_thousands_of_digits", _set_layer(1, "pDropout", int("9" * 400)),
     r"^Layers\[1\]\.pDropout: expected a finite number, got a number of 400 digits"),
    ("activation_long_string", _set_layer(1, "Activation", "x" * 5000),
     r"^Layers\[1\]\.Activation: unknown 'x{30}'\.\.\. \(5,000 characters\); expected "),
    ("n_auto_hidden", _set_layer(1, "N", "auto"),
     r"^Layers\[1\]\.N: 'auto' is allowed only on Input and Output"),
    ("n_multi_dim", _set_layer(1, "N", [2, 3]), r"^Layers\[1\]\.N: multi-dimensional"),
    # (the ranges and words a network file's attributes are held to as well: netdef_fields.Range)
    ("dropout_one", _set_layer(1, "pDropout", 1.0),
     r"^Layers\[1\]\.pDropout: 1.0 is out of range; expected a probability in \[0, 1\) "
     r"\(dropout keeps a unit with probability 1 - pDropout\)$"),
    ("dropout_negative", _set_layer(1, "pDropout", -0.1),
     r"^Layers\[1\]\.pDropout: -0.1 is out of range"),
    ("weight_norm_negative", _set_layer(1, "WeightNorm", -1),
     r"^Layers\[1\]\.WeightNorm: -1.0 is out of range; expected a number, 0 or more "
     r"\(0: none\)$"),
    ("penalty_p", _set_layer(1, "SparsenessPenalty", {"p": 1.5}),
     r"^Layers\[1\]\.SparsenessPenalty\.p: 1.5 is out of range; expected a target activation "
     r"in \[0, 1\]$"),
    ("penalty_beta", _set_top("SparsenessPenalty", {"beta": -2}),
     r"^SparsenessPenalty\.beta: -2.0 is out of range; expected a number, 0 or more"),
    ("decay_negative", _set_top("Decay", -0.5), r"^Decay: -0.5 is out of range"),
    # a normal draw's deviation: numpy refused a negative one as train drew the weights (a
    # traceback, found by fuzzing); the key's spelling as written, the scheme's in any case
    ("gaussian_scale_negative", _set_layer(1, "WeightInit", {"scheme": "gaussian", "scale": -1}),
     r"^Layers\[1\]\.WeightInit\.scale: -1.0 is out of range; expected a standard deviation, "
     r"0 or more \(the Gaussian scheme draws each weight from N\(0, Scale squared\)\)$"),
    ("unknown_source", _set_layer(2, "Source", "Hiden"),
     r"^Layers\[2\]\.Source: unknown layer 'Hiden'; expected one of Input0, Hidden1, Output2"),
    ("too_many_sources", _set_layer(2, "Source", ["Input0"] * 5),
     r"^Layers\[2\]\.Source: 5 sources; a layer has at most 4"),
    ("duplicate_names", lambda d: [layer.__setitem__("Name", "X") for layer in d["Layers"]],
     r"^Layers\[1\]\.Name: duplicate layer name 'X'"),
    ("input_without_dataset", lambda d: d["Layers"][0].pop("DataSet"),
     r"^Layers\[0\]\.DataSet: required on an Input layer"),
    ("output_without_dataset", lambda d: d["Layers"][2].pop("DataSet"),
     r"^Layers\[2\]\.DataSet: required on an Output layer"),
    ("no_output_layer", lambda d: d["Layers"].__setitem__(2, {"Kind": "Hidden", "N": 3}),
     r"^Layers: no Output layer"),
    ("no_input_layer", lambda d: d["Layers"].__setitem__(0, {"Kind": "Hidden", "N": 3}),
     r"^Layers: no Input layer"),
    ("empty_source", _set_layer(1, "Source", []),
     r"^Layers\[1\]\.Source: a non-Input layer needs at least one source"),
    ("cycle", _cycle, r"^Layers\[\d\]\.Source: cycle in the layer graph: "),
    ("self_source", _set_layer(1, "Source", "Hidden1"),
     r"^Layers\[1\]\.Source: cycle in the layer graph: Hidden1 -> Hidden1"),
    ("self_skip", _set_layer(2, "Skip", "Output2"),
     r"^Layers\[2\]\.Skip: cycle in the layer graph: Output2 -> Output2; sources and skips"),
    ("convolutional", _set_layer(1, "Type", "Convolutional"),
     r"^Layers\[1\]\.Type: Convolutional layers .*Destiny does not support"),
    ("kernel", _set_layer(1, "Kernel", 3), r"^Layers\[1\]\.Kernel: convolution and pooling"),
    ("batch_norm", _set_layer(1, "BatchNormalization", True),
     r"^Layers\[1\]\.BatchNormalization: batch normalisation is not supported"),
    ("recurrent", _set_layer(1, "Recurrent", True),
     r"^Layers\[1\]\.Recurrent: unknown key .*recurrent"),
    ("old_version", _set_top("Version", 0.6), r"^Version: 0.6 is too old"),
    ("ce_with_tanh_output", _set_layer(2, "Activation", "Tanh"),
     r"^Layers\[2\]\.Activation: Tanh cannot be used with ErrorFunction CrossEntropy "
     r".*expected Sigmoid or SoftMax"),
    ("dsmce_with_softmax_output", lambda d: (d.update(
        ErrorFunction="DataScaledMarginalCrossEntropy"), d["Layers"][2].update(
        Activation="SoftMax")),
     r"^Layers\[2\]\.Activation: SoftMax cannot be used with ErrorFunction "
     r"DataScaledMarginalCrossEntropy .*expected Sigmoid$"),
    ("denoising_p", _set_top("Denoising", {"p": 1}),
     r"^Denoising\.p: 1.0 is out of range; expected a probability in \[0, 1\)"),
    ("smce_sub_key", _set_top("ScaledMarginalCrossEntropy", {"oneTargets": 1}),
     r"^ScaledMarginalCrossEntropy\.oneTargets: unknown key; expected one of oneScale, "
     r"zeroScale, oneTarget, zeroTarget"),
    ("layers_not_array", _set_top("Layers", 3), r"^Layers: expected a non-empty array"),
    ("layers_keyed_by_name", _set_top("Layers", {"Input": {"Kind": "Input", "N": 3}}),
     r"^Layers: expected an array of layer objects, got an object whose key 'Input' is not "
     r"a layer key; write the layers as an array"),
    ("layers_empty_object", _set_top("Layers", {}),
     r"^Layers: expected a non-empty array of layer objects, got an empty object"),
    ("single_layer_object", _set_top("Layers", {"Kind": "Input", "N": 3, "DataSet": "in"}),
     r"^Layers: no Output layer"),
    # Python's json reads NaN, Infinity and 1e999 as floats; a network needs finite numbers.
    ("nan_number", _set_layer(1, "pDropout", float("nan")),
     r"^Layers\[1\]\.pDropout: expected a finite number, got NaN$"),
    ("infinite_number", _set_layer(1, "WeightInit", {"Scheme": "Gaussian", "Scale": math.inf}),
     r"^Layers\[1\]\.WeightInit\.Scale: expected a finite number, got Infinity"),
    ("nan_version", _set_top("Version", float("nan")), r"^Version: expected a finite number"),
    ("n_nan", _set_layer(1, "N", float("nan")),
     r"^Layers\[1\]\.N: expected a positive integer or 'auto', got NaN$"),
    ("n_infinite", _set_layer(1, "N", math.inf), r"^Layers\[1\]\.N: expected a positive"),
    # NetCDF text is UTF-8 ended by a NUL: such names failed after training, or were cut.
    ("nul_in_name", _set_layer(1, "Name", "H\0a"),
     r"^Layers\[1\]\.Name: 'H\\x00a' holds a NUL character"),
    ("surrogate_in_name", _set_layer(1, "Name", "\ud800x"),
     r"^Layers\[1\]\.Name: '\\ud800x' holds half of a UTF-16 surrogate pair"),
    ("surrogate_in_source", _set_layer(2, "Source", "\udc80"),
     r"^Layers\[2\]\.Source: '\\udc80' holds half of a UTF-16 surrogate pair"),
    ("surrogate_in_dataset", _set_layer(0, "DataSet", "in\udc80"),
     r"^Layers\[0\]\.DataSet: 'in\\udc80' holds half"),
    # Each message names the element at fault: the item of an array, the key of a sub-object.
    ("source_item", _set_layer(2, "Source", ["Hidden1", 3]),
     r"^Layers\[2\]\.Source\[1\]: expected a string, got a number \(3\)$"),
    ("n_array_item", _set_layer(1, "N", [0]),
     r"^Layers\[1\]\.N\[0\]: expected a positive integer or 'auto', got a number \(0\)$"),
    ("n_empty_array", _set_layer(1, "N", []),
     r"^Layers\[1\]\.N: expected a positive integer or 'auto', got an empty array$"),
    ("n_boolean", _set_layer(1, "N", True),
     r"^Layers\[1\]\.N: expected a positive integer or 'auto', got a boolean \(true\)$"),
    ("boolean_for_number", _set_layer(1, "RELUSlope", True),
     r"^Layers\[1\]\.RELUSlope: expected a number, got a boolean \(true\)$"),
    ("minus_infinity", _set_layer(1, "pDropout", -math.inf),
     r"^Layers\[1\]\.pDropout: expected a finite number, got -Infinity"),
    ("smce_parameter", _set_top("ScaledMarginalCrossEntropy", {"oneScale": "x"}),
     r"^ScaledMarginalCrossEntropy\.oneScale: expected a number, got a string \('x'\)$"),
    ("layer_not_object", lambda d: d["Layers"].__setitem__(0, 3),
     r"^Layers\[0\]: expected a layer object, got a number \(3\)$"),
    ("error_function_aliases", _set_top("ErrorFunction", "MSE"),
     r"^ErrorFunction: unknown 'MSE'; expected one of L1, L2, CrossEntropy, "
     r"ScaledMarginalCrossEntropy, DataScaledMarginalCrossEntropy, Hinge, L2Hinge "
     r"\(aliases: cross entropy\)$"),
    ("layer_error_function", _set_layer(2, "ErrorFunction", "L2"),
     r"^Layers\[2\]\.ErrorFunction: unknown key \(ErrorFunction is a network-level key\)"),
    ("transpose_key", _set_layer(1, "SharedWeights", {"InputLayer": "Input0", "Transpose": 1}),
     r"^Layers\[1\]\.SharedWeights\[0\]\.Transpose: unknown key \(the SharedWeights key is "
     r"Transposed\); expected one of InputLayer, SourceInputLayer, SourceOutputLayer, "
     r"Transposed$"),
    ("share_key_missing", _set_layer(1, "SharedWeights", {"InputLayer": "Input0",
                                                          "SourceInputLayer": "Input0"}),
     r"^Layers\[1\]\.SharedWeights\[0\]\.SourceOutputLayer: required key missing$"),
    ("shares_not_objects", _set_layer(1, "SharedWeights", "Input0"),
     r"^Layers\[1\]\.SharedWeights: expected an object or an array of objects"),
    ("pooling", _set_layer(1, "Type", "pooling"),
     r"^Layers\[1\]\.Type: Pooling layers are cuDNN-only in DSSTNE \(spec 3\.17\)"),
    ("function", _set_layer(1, "Function", "Max"), r"^Layers\[1\]\.Function: convolution and "),
    ("kernel_stride", _set_layer(1, "KernelStride", 2),
     r"^Layers\[1\]\.KernelStride: convolution and pooling"),
    ("delta_norm_negative", _set_layer(1, "DeltaNorm", -0.5),
     r"^Layers\[1\]\.DeltaNorm: -0\.5 is out of range; expected a number, 0 or more"),
    ("repeated_source", _set_layer(2, "Source", ["Hidden1", "Input0", "Hidden1"]),
     r"^Layers\[2\]\.Source: 'Hidden1' is listed twice \(entries 0 and 2\); each source gets "
     r"one weight matrix, .* List it once\.$"),
    ("repeated_skip", _set_layer(2, "Skip", ["Input0", "Input0"]),
     r"^Layers\[2\]\.Skip: 'Input0' is listed twice \(entries 0 and 1\); a skip adds "),
    ("unknown_skip", _set_layer(2, "Skip", "Hiden"),
     r"^Layers\[2\]\.Skip: unknown layer 'Hiden'; expected one of Input0, Hidden1, Output2$"),
    ("share_input_not_a_source", lambda d: d["Layers"].insert(2, {
        "Kind": "Hidden", "N": 8, "SharedWeights": {"InputLayer": "Input0", "SourceInputLayer":
                                                     "Input0", "SourceOutputLayer": "Hidden1"}}),
     r"^Layers\[2\]\.SharedWeights\[0\]\.InputLayer: 'Input0' is not a Source of this layer; "
     r"expected one of Hidden1$"),
    ("layers_empty_array", _set_top("Layers", []),
     r"^Layers: expected a non-empty array of layer objects$"),
    ("null_for_string", _set_layer(1, "Name", None),
     r"^Layers\[1\]\.Name: expected a string, got null$"),
    ("weight_init_sub_key", _set_layer(1, "WeightInit", {"Seed": 1}),
     r"^Layers\[1\]\.WeightInit\.Seed: unknown key; expected one of Scheme, Scale, Bias$"),
    ("array_for_string", _set_layer(1, "Name", ["H"]),
     r"^Layers\[1\]\.Name: expected a string, got an array$"),
    ("n_auto_hidden_as_written", lambda d: d["Layers"][1].update({"n": "auto"}) or d[
        "Layers"][1].pop("N"), r"^Layers\[1\]\.n: 'auto' is allowed only on Input and Output"),
    ("transposed_not_bool", _set_layer(1, "SharedWeights", {
        "InputLayer": "a", "SourceInputLayer": "b", "SourceOutputLayer": "c", "transposed": "no"}),
     r"^Layers\[1\]\.SharedWeights\[0\]\.transposed: expected true or false"),
    # The first layer of an array is Input without a Kind (spec 3.3), even the only one.
    ("single_layer_positional", _set_top("Layers", {"N": 3, "DataSet": "in"}),
     r"^Layers: no Output layer"),
    ("unknown_layer_key_list", _set_layer(1, "Sparsity", True),
     r"^Layers\[1\]\.Sparsity: unknown key; expected one of Kind, Type, Name, Sparse, N, "
     r"pDropout, Source, Kernel, KernelStride, BatchNormalization, SparsenessPenalty, Function, "
     r"Skip, Activation, RELUSlope, ELUAlpha, SELULambda, WeightNorm, DeltaNorm, WeightInit, "
     r"SharedWeights, DataSet$"),
    # A generated name taken already: the message says the name was not written.
    ("duplicate_generated_name", lambda d: (d["Layers"][1].update(Name="Hidden2"), d[
        "Layers"].insert(2, {"Kind": "Hidden", "N": 8})),
     r"^Layers\[2\]\.Name: duplicate layer name 'Hidden2' \(a generated default name\); also "
     r"used by Layers\[1\]$"),
]


@pytest.mark.parametrize("change, pattern", [c[1:] for c in INVALID],
                         ids=[c[0] for c in INVALID])
def test_invalid_definitions(change, pattern):
    data = _with(change)
    with pytest.raises(NetDefError, match=pattern) as info:
        load_netdef(copy.deepcopy(data))
    assert isinstance(info.value, DestinyError)


@pytest.mark.parametrize("scheme", ["Xavier", "CaffeXavier", "Uniform", "UnitBall", "Constant",
                                    "SELU"])
def test_a_negative_scale_of_the_schemes_it_scales_is_taken(scheme):
    """Only the Gaussian scheme's Scale is a deviation; the others scale a draw or a constant
    (a negative one mirrors it), as DSSTNE takes them."""
    data = minimal()
    data["Layers"][1]["WeightInit"] = {"Scheme": scheme, "Scale": -0.5}
    assert load_netdef(data).layers[1].weight_init.scale == -0.5


def test_invalid_json_names_file_line_and_column(tmp_path):
    """The place is json's own: Python 3.13's json names a trailing comma itself ("Illegal
    trailing comma before end of object", column 21), earlier ones the brace after it
    ("Expecting property name enclosed in double quotes", column 22)."""
    path = tmp_path / "bad.json"
    path.write_text('{\n  "Layers": [\n    {"Kind": "Input",}\n  ]\n}\n')
    column = 21 if sys.version_info >= (3, 13) else 22
    with pytest.raises(NetDefError, match=rf"bad\.json: line 3, column {column}: invalid JSON: "):
        load_netdef(path)


def test_file_errors_name_the_file(tmp_path):
    data = minimal()
    data["Layers"][1]["Activation"] = "Sigmod"
    path = tmp_path / "net.json"
    path.write_text(json.dumps(data))
    with pytest.raises(NetDefError) as info:
        load_netdef(str(path))
    assert str(info.value).startswith(f"{path}: Layers[1].Activation: unknown 'Sigmod'")
    assert info.value.json_path == "Layers[1].Activation"


@pytest.mark.parametrize("text, message", [
    # the same key twice with the same spelling: json keeps the last one silently
    ('{"Kind": "FeedForward", "Kind": "FeedForward", "Layers": []}',
     r"json: Kind: given twice; a JSON reader keeps one of them silently"),
    ('{"Layers": [{"Kind": "Input", "N": 3, "N": 4, "DataSet": "in"}]}',
     r"json: Layers\[0\]\.N: given twice"),
    ('{"Layers": [{"Kind": "Input", "N": NaN, "DataSet": "in"}]}',
     r"json: Layers\[0\]\.N: expected a positive integer or 'auto', got NaN"),
    ('{"Layers": [{"Kind": "Input", "N": 1e999, "DataSet": "in"}]}',
     r"json: Layers\[0\]\.N: expected a positive integer or 'auto', got Infinity"),
    ('{"Layers": [{"Kind": "Input", "N": 1' + "0" * 5000 + ', "DataSet": "in"}]}',
     r"json: invalid JSON for a network definition: an integer of thousands of digits$"),
    ('{"Layers": ' + "[" * 100_000 + "]" * 100_000 + "}",
     r"json: invalid JSON: arrays or objects nested too deeply to read"),
])
def test_json_that_python_reads_but_a_definition_cannot_hold(tmp_path, text, message):
    path = tmp_path / "net.json"
    path.write_text(text)
    with pytest.raises(NetDefError, match=message):
        load_netdef(path)


def test_missing_file(tmp_path):
    with pytest.raises(NetDefError, match="cannot read"):
        load_netdef(tmp_path / "nope.json")


def test_binary_file_is_named_as_another_kind_of_file(tmp_path):
    path = tmp_path / "gl.nc"
    path.write_bytes(b'{"Layers": 1}\x89HDF\r\n\x1a\n')  # a NetCDF file given as -c
    with pytest.raises(NetDefError, match=r"gl\.nc: byte 13: 0x89 is not valid UTF-8; a network "
                                          r"definition is JSON text\. Is this another kind"):
        load_netdef(path)


def test_a_utf8_byte_order_mark_is_skipped(tmp_path):
    """Windows' Notepad starts a file with one; json refused it ('decode using utf-8-sig'). An
    error's line and column are counted as without it."""
    plain = (ROOT / "netdefs" / "movielens.json").read_bytes()
    path = tmp_path / "net.json"
    path.write_bytes(b"\xef\xbb\xbf" + plain)
    assert load_netdef(path) == load_netdef(ROOT / "netdefs" / "movielens.json")
    path.write_bytes(b"\xef\xbb\xbf{,}")
    with pytest.raises(NetDefError, match=r"net\.json: line 1, column 2: invalid JSON"):
        load_netdef(path)


def test_netdef_is_frozen():
    net = load_netdef(minimal())
    with pytest.raises(AttributeError):
        net.name = "x"


def test_a_long_chain_of_layers_is_checked_and_ordered_without_recursion():
    """A definition (or a network file) may chain more layers than Python's recursion limit;
    listed output-first, the walk goes as deep as the chain. A cycle closing it is reported."""
    import sys

    from destiny.kernels import get_backend
    from destiny.network import Network

    depth = sys.getrecursionlimit() + 200
    hidden = [{"Kind": "Hidden", "Name": f"H{i}", "N": 2, "Source": f"H{i - 1}" if i else "In"}
              for i in range(depth)]
    layers = ([{"Kind": "Output", "Name": "Out", "N": 3, "DataSet": "out",
                "Source": f"H{depth - 1}"}] + hidden[::-1]
              + [{"Kind": "Input", "Name": "In", "N": 3, "DataSet": "in"}])
    net = Network(load_netdef({"Layers": layers}), get_backend("reference"))
    assert net.order[0] == "In" and net.order[-1] == "Out" and len(net.order) == depth + 2
    layers[-2]["Source"] = "H5"  # H0 <- H5 <- ... <- H1 <- H0
    with pytest.raises(NetDefError, match=r"cycle in the layer graph: H5 -> H4 -> H3 -> H2 -> "
                                          r"H1 -> H0 -> H5; sources"):
        load_netdef({"Layers": layers})


# Spec 3.3's table of the keys each kind takes: a key marked there as an error for a kind.
@pytest.mark.parametrize("layer, key, value", [
    (0, "Source", "Hidden1"), (0, "Skip", "Hidden1"), (0, "WeightInit", {"Scheme": "Gaussian"}),
    (0, "SparsenessPenalty", {"p": 0.1}), (1, "DataSet", "in"),
    (2, "BatchNormalization", False), (2, "SparsenessPenalty", {"p": 0.1}),
])
def test_keys_the_spec_refuses_for_a_kind(layer, key, value):
    kind = ("Input", "Hidden", "Output")[layer]
    article = "a" if kind == "Hidden" else "an"
    with pytest.raises(NetDefError, match=rf"^Layers\[{layer}\]\.{key}: not allowed on "
                                          rf"{article} {kind} layer \(spec 3\.3\); allowed keys: "):
        load_netdef(_with(_set_layer(layer, key, value)))


def test_the_refusal_lists_the_keys_of_that_kind_only():
    with pytest.raises(NetDefError) as raised:
        load_netdef(_with(_set_layer(0, "Activation", "Tanh")))
    assert raised.value.detail.endswith(
        "allowed keys: Kind, Type, Name, Sparse, N, pDropout, DataSet")
    with pytest.raises(NetDefError) as raised:
        load_netdef(_with(_set_layer(2, "SparsenessPenalty", {})))
    assert raised.value.detail == (
        "not allowed on an Output layer (spec 3.3); allowed keys: Kind, Type, Name, Sparse, N, "
        "pDropout, Source, Kernel, KernelStride, Function, Skip, Activation, RELUSlope, "
        "ELUAlpha, SELULambda, WeightNorm, DeltaNorm, WeightInit, SharedWeights, DataSet")


def test_keys_the_spec_allows_on_input_and_hidden_layers():
    """pDropout is allowed on every kind (an Input layer's drops dense inputs, spec 3.8), and
    BatchNormalization false on a Hidden layer asks for nothing Destiny lacks (README)."""
    data = minimal()
    data["Layers"][0]["pDropout"] = 0.2
    data["Layers"][1]["BatchNormalization"] = False
    net = load_netdef(data)
    assert net.layers[0].p_dropout == f32(0.2)


def test_parameters_are_float32_as_dsstne_and_network_files_hold_them():
    """A run trains with the values its network file keeps (spec 4.1 stores them as float),
    and compares as DSSTNE did: an output above float32(0.1) for SMCE's zeroTarget."""
    data = minimal()
    data["ScaledMarginalCrossEntropy"] = {"zeroTarget": 0.1, "oneScale": 3}
    data["Layers"][1].update({"pDropout": 0.3, "RELUSlope": 0.01, "WeightInit": {"Scale": 0.7}})
    net = load_netdef(data)
    assert net.smce.zero_target == f32(0.1) > 0.1 and net.smce.one_scale == 3.0
    hidden = net.layers[1]
    assert (hidden.p_dropout, hidden.relu_slope, hidden.weight_init.scale) == (
        f32(0.3), f32(0.01), f32(0.7))
    data["Layers"][1]["pDropout"] = 0.99999999  # (below 1, but 1 as float32)
    with pytest.raises(NetDefError, match=r"^Layers\[1\]\.pDropout: 0\.99999999 is 1\.0 as "
                                          r"float32, the precision in which DSSTNE and network "
                                          r"files hold it, which is out of range; expected a "
                                          r"probability in \[0, 1\)"):
        load_netdef(data)
    data["Layers"][1]["pDropout"] = -0.3  # (shown as written, not as its float32's repr)
    with pytest.raises(NetDefError, match=r"^Layers\[1\]\.pDropout: -0\.3 is out of range"):
        load_netdef(data)
    data["Layers"][1]["pDropout"] = 0.3
    data["ScaledMarginalCrossEntropy"]["oneScale"] = 1e39
    with pytest.raises(NetDefError, match=r"^ScaledMarginalCrossEntropy\.oneScale: 1e\+39 is "
                                          r"beyond float32's range \(3\.4e38 either way\)"):
        load_netdef(data)


def test_every_network_default_of_spec_3_2():
    net = load_netdef(minimal())
    assert net.name == "" and net.kind.name == "FeedForward" and net.weights_data is None
    assert (net.smce.one_scale, net.smce.zero_scale, net.smce.one_target,
            net.smce.zero_target) == (1.0, 1.0, f32(0.9), f32(0.1))
    assert (net.delta_boost.one, net.delta_boost.zero) == (1.0, 1.0)
    assert (net.sparseness_penalty.p, net.sparseness_penalty.beta) == (0.0, 0.0)
    assert net.denoising.p == 0.0
    assert (net.lrn.k, net.lrn.n, net.lrn.alpha, net.lrn.beta) == (2.0, 5.0, f32(0.0001), 0.75)
    assert net.maxout_k == 2.0
    # An object giving some of the parameters keeps the defaults of the others.
    net = load_netdef({**minimal(), "ScaledMarginalCrossEntropy": {"oneTarget": 1},
                       "DeltaBoost": {"one": 30}, "LRN": {"beta": 0.5}, "Maxout": {},
                       "Kind": "autoencoder"})
    assert (net.smce.one_scale, net.smce.zero_scale, net.smce.one_target,
            net.smce.zero_target) == (1.0, 1.0, 1.0, f32(0.1))
    assert (net.delta_boost.one, net.delta_boost.zero) == (30.0, 1.0)
    assert (net.lrn.k, net.lrn.n, net.lrn.alpha, net.lrn.beta) == (2.0, 5.0, f32(0.0001), 0.5)
    assert net.maxout_k == 2.0 and net.kind.name == "AutoEncoder"
    assert load_netdef({**minimal(), "Maxout": {"k": 3}}).maxout_k == 3.0


def test_every_layer_default_of_spec_3_3():
    hidden = load_netdef(minimal()).layers[1]
    assert (hidden.weight_init.scheme, hidden.weight_init.scale,
            hidden.weight_init.bias) == (WeightInit.Xavier, 1.0, 0.0)
    assert (hidden.weight_norm, hidden.delta_norm, hidden.skips, hidden.shared_weights) == (
        0.0, 0.0, (), ())
    assert (hidden.sparseness_penalty.p, hidden.sparseness_penalty.beta) == (0.0, 0.0)
    # A WeightInit object giving the scheme only keeps Scale 1 and Bias 0.
    net = load_netdef(_with(_set_layer(1, "WeightInit", {"Scheme": "Gaussian"})))
    assert (net.layers[1].weight_init.scale, net.layers[1].weight_init.bias) == (1.0, 0.0)


def test_layer_slope_alpha_and_lambda_default_to_the_networks():
    """RELUSlope, ELUAlpha and SELULambda on a layer default to the network's (spec 3.3)."""
    data = {**minimal(), "RELUSlope": 0.25, "ELUAlpha": 1.5, "SELULambda": 1.25}
    data["Layers"][2].update(RELUSlope=0.5, ELUAlpha=2.0, SELULambda=3.0)
    net = load_netdef(data)
    hidden, out = net.layers[1], net.layers[2]
    assert (hidden.relu_slope, hidden.elu_alpha, hidden.selu_lambda) == (0.25, 1.5, 1.25)
    assert (out.relu_slope, out.elu_alpha, out.selu_lambda) == (0.5, 2.0, 3.0)


def test_four_sources_and_a_fully_connected_type_are_taken():
    """A layer takes up to 4 sources (spec 3.4); Type FullyConnected is the default (3.3)."""
    data = minimal()
    data["Layers"][1]["Type"] = "fullyCONNECTED"
    data["Layers"][2:2] = [{"Kind": "Hidden", "N": 8}, {"Kind": "Hidden", "N": 8}]
    data["Layers"][4]["Source"] = ["Input0", "Hidden1", "Hidden2", "Hidden3"]
    assert load_netdef(data).layers[4].sources == ("Input0", "Hidden1", "Hidden2", "Hidden3")


def test_auto_sizes_are_checked_once_resolved():
    """A Skip's equal sizes (spec 3.16) are checked once "auto" has a width, and a width must
    be a positive integer; load_netdef resolves a dict's "auto" when given the widths."""
    data = minimal()
    data["Layers"][2]["Skip"] = "Hidden1"  # N 8
    net = load_netdef(data)
    assert load_netdef(data, {"in": 4, "out": 8}).layers[2].n == 8
    with pytest.raises(NetDefError, match=r"^Layers\[2\]\.Skip: 'Hidden1' has N=8 but this "
                                          r"layer has N=16; skip layers must have equal sizes$"):
        net.resolve({"in": 4, "out": 16})
    with pytest.raises(NetDefError, match=r"^Layers\[0\]\.N: dataset 'in' has width 0; expected "
                                          r"a positive integer$"):
        net.resolve({"in": 0, "out": 8})


def test_names_are_kept_as_written_and_decay_has_no_upper_bound():
    """Names (of the network, layers, datasets) are kept as written, a comma included; Decay
    may exceed 1 (the step is alpha / (1 + Decay * batches), spec 5.2)."""
    data = {**minimal(), "Name": "MovieLens AE", "Decay": 2.5}
    data["Layers"][0]["DataSet"] = "Gl_Input"
    data["Layers"][1]["Name"] = "Hidden, 1st"
    data["Layers"][2]["Source"] = "Hidden, 1st"
    net = load_netdef(data, {"Gl_Input": 128, "out": 128})
    assert (net.name, net.decay, net.layers[0].dataset) == ("MovieLens AE", 2.5, "Gl_Input")
    assert net.layers[2].sources == ("Hidden, 1st",)


def test_the_closed_ends_of_ranges_are_taken():
    """A SparsenessPenalty p of 1 (its range is [0, 1], where pDropout's is [0, 1)) and N of
    2,147,483,647 units, the most the refusal of a larger N names."""
    data = minimal()
    data["Layers"][1].update(N=2**31 - 1, SparsenessPenalty={"p": 1})
    hidden = load_netdef(data).layers[1]
    assert (hidden.n, hidden.sparseness_penalty.p) == (2**31 - 1, 1.0)


def test_a_file_error_keeps_the_item_it_names(tmp_path):
    """NetDefError.item (the entry of a Source or Skip list at fault) survives the file name
    being put in front (with_file), for a reader that names each entry."""
    data = minimal()
    data["Layers"][2]["Source"] = ["Hidden1", "Hiden"]
    path = tmp_path / "net.json"
    path.write_text(json.dumps(data))
    with pytest.raises(NetDefError) as raised:
        load_netdef(path)
    assert (raised.value.json_path, raised.value.item) == ("Layers[2].Source", 1)
    assert str(raised.value).startswith(f"{path}: Layers[2].Source: unknown layer 'Hiden'")


def test_a_tied_share_with_an_auto_side_is_checked_once_resolved():
    """An autoencoder's output weight shares the input weight transposed (spec 3.14); with
    the Input's N "auto", its dimensions are compared once the width is known."""
    data = minimal()
    data["Layers"][2].update(N=4, SharedWeights={
        "InputLayer": "Hidden1", "SourceInputLayer": "Input0", "SourceOutputLayer": "Hidden1",
        "Transposed": True})
    net = load_netdef(data)  # (Input0's N unknown yet: 8 x 4 against ? x 8 transposed)
    assert net.resolve({"in": 4, "out": 4}).layers[0].n == 4
    with pytest.raises(NetDefError, match=r"^Layers\[2\]\.SharedWeights\[0\]\.SourceOutputLayer: "
                                          r"the weight Hidden1 -> Output2 is 8 x 4 units, and "
                                          r"Input0 -> Hidden1 transposed is 8 x 6"):
        net.resolve({"in": 6, "out": 4})
