"""Parse and validate DSSTNE JSON network definitions into frozen dataclasses.

The accepted language is what DSSTNE's parser accepts (`LoadNeuralNetworkJSON`, spec section
3), with DSSTNE's defaults, including the surprising ones (spec "Defaults that surprise"):
ShuffleIndices true, ErrorFunction CrossEntropy, Activation Sigmoid, WeightInit Xavier, RELUSlope
1.0, and positional default layer names such as ``Output2``. Features DSSTNE parses but that
Destiny does not implement (convolution, pooling, batch normalisation, Target layers, the
RELUMax and LinearMax activations) are refused with an error rather than silently ignored.
SoftPlus and SoftSign, identity stubs in DSSTNE too, are accepted: Destiny implements them
(quirk 10.12).

Every error is a `NetDefError` whose message starts with the JSON path of the offending field.

Example
-------
>>> net = load_netdef("netdefs/movielens.json", {"gl_input": 27392, "gl_output": 27392})
>>> [layer.n for layer in net.layers]
[27392, 128, 27392]
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from destiny.errors import NetDefError, open_files_failure
from destiny.kernels.codes import LOSS_ACTIVATIONS
from destiny.netdef_fields import (
    ACTIVATION_NAMES, ACTIVATION_REFUSED, ERROR_FUNCTION_NAMES, ERROR_FUNCTION_REFUSED,
    LAYER_KEY_KINDS, LAYER_KEYS, LAYER_KIND_NAMES,
    LAYER_TYPE_NAMES, MAX_SOURCES, MIN_VERSION, NETWORK_KIND_NAMES, NN_VERSION, TOP_KEYS,
    WEIGHT_INIT_NAMES, Activation, ErrorFunction, LayerKind, LayerType, NetworkKind, WeightInit,
    DECAY, DENOISING_P, DROPOUT, GAUSSIAN_SCALE, NORM, PENALTY_BETA, PENALTY_P, check_range,
    as_float32, fold_keys, params_reader, ranged_reader, read_bool, read_enum, read_float,
    read_n, read_names, read_number, read_str, setter, sub_path,
)

__all__ = [
    "Activation", "DeltaBoost", "Denoising", "ErrorFunction", "LayerDef", "LayerKind",
    "LayerType", "LRNParams", "NetworkDef", "NetworkKind", "SMCEParams", "SharedWeight",
    "SparsenessPenalty", "WeightInit", "WeightInitDef", "load_netdef", "parse_netdef",
]


@dataclass(frozen=True)
class SMCEParams:
    """ScaledMarginalCrossEntropy parameters; defaults from spec 3.2, meaning in 5.5."""

    one_scale: float = 1.0
    zero_scale: float = 1.0
    one_target: float = as_float32(0.9)  # (the parameters are float32, as_float32)
    zero_target: float = as_float32(0.1)


@dataclass(frozen=True)
class DeltaBoost:
    """Output-delta multipliers for non-zero/zero sparse targets (spec 3.11)."""

    one: float = 1.0
    zero: float = 1.0


@dataclass(frozen=True)
class SparsenessPenalty:
    """Target activation p and weight beta (spec 3.10); enabled only if the global beta > 0."""

    p: float = 0.0
    beta: float = 0.0


@dataclass(frozen=True)
class Denoising:
    """Sparse-input corruption probability (spec 3.9); enabled iff p > 0."""

    p: float = 0.0


@dataclass(frozen=True)
class LRNParams:
    """Local response normalisation; parsed for compatibility, used only by pooling (3.2)."""

    k: float = 2.0
    n: float = 5.0
    alpha: float = as_float32(0.0001)
    beta: float = 0.75


@dataclass(frozen=True)
class WeightInitDef:
    """Initialisation of a layer's incoming weights and biases (spec 3.7)."""

    scheme: WeightInit = WeightInit.Xavier
    scale: float = 1.0
    bias: float = 0.0


@dataclass(frozen=True)
class SharedWeight:
    """The weight from `input_layer` into this layer reuses matrix source_input -> source_output
    (spec 3.14)."""

    input_layer: str
    source_input_layer: str
    source_output_layer: str
    transposed: bool = False


@dataclass(frozen=True)
class LayerDef:
    """One layer. `n` is None while ``"N": "auto"`` is unresolved (see `NetworkDef.resolve`)."""

    name: str
    kind: LayerKind
    index: int
    n: int | None
    n_auto: bool = False
    type: LayerType = LayerType.FullyConnected
    sources: tuple[str, ...] = ()
    skips: tuple[str, ...] = ()
    dataset: str = ""
    # DSSTNE's descriptor default; an Input layer carries it but never applies it (spec 3.3).
    activation: Activation = Activation.Sigmoid
    sparse: bool = False
    p_dropout: float = 0.0
    weight_init: WeightInitDef = WeightInitDef()
    weight_norm: float = 0.0
    delta_norm: float = 0.0
    relu_slope: float = 1.0
    elu_alpha: float = 1.0
    selu_lambda: float = as_float32(1.050701)
    sparseness_penalty: SparsenessPenalty = SparsenessPenalty()
    shared_weights: tuple[SharedWeight, ...] = ()
    denoising: bool = False
    name_generated: bool = False


@dataclass(frozen=True)
class NetworkDef:
    """A whole network definition (spec 3.2); `layers` keeps the JSON order."""

    layers: tuple[LayerDef, ...]
    name: str = ""
    kind: NetworkKind = NetworkKind.FeedForward
    version: float = NN_VERSION
    error_function: ErrorFunction = ErrorFunction.CrossEntropy
    smce: SMCEParams = SMCEParams()
    delta_boost: DeltaBoost = DeltaBoost()
    sparseness_penalty: SparsenessPenalty = SparsenessPenalty()
    denoising: Denoising = Denoising()
    shuffle_indices: bool = True  # CDL.txt says false; the code says true (quirk 10.11)
    relu_slope: float = 1.0  # makes LReLU the identity unless set (quirk 10.14)
    elu_alpha: float = 1.0
    selu_lambda: float = as_float32(1.050701)
    decay: float = 0.0
    lrn: LRNParams = LRNParams()
    maxout_k: float = 2.0
    weights_data: str | None = None  # parsed and ignored, as in DSSTNE (spec 3.2)

    def layer(self, name: str) -> LayerDef:
        """The layer called `name`; KeyError if there is none."""
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(name)

    def layers_of(self, kind: LayerKind) -> tuple[LayerDef, ...]:
        """The layers of one kind, in JSON order."""
        return tuple(layer for layer in self.layers if layer.kind == kind)

    def unused_layers(self) -> tuple[LayerDef, ...]:
        """The layers, in JSON order, from which no Source or Skip leads to an Output layer:
        what they compute reaches neither the loss nor the predictions. DSSTNE takes such a
        network, so train notes them rather than refusing it: an Input layer's data is read
        for nothing, a hidden layer trained for nothing, which is usually a definition's
        mistake (a Source that names the wrong layer)."""
        by_name = {layer.name: layer for layer in self.layers}
        pending = [layer for layer in self.layers if layer.kind == LayerKind.Output]
        used = {layer.name for layer in pending}
        while pending:  # (back from the outputs, along what feeds each layer)
            layer = pending.pop()
            for name in layer.sources + layer.skips:
                if name not in used:
                    used.add(name)
                    pending.append(by_name[name])
        return tuple(layer for layer in self.layers if layer.name not in used)

    @property
    def is_resolved(self) -> bool:
        """True when every layer's N is known."""
        return all(layer.n is not None for layer in self.layers)

    def resolve(self, dataset_widths: Mapping[str, int]) -> NetworkDef:
        """Replace ``"N": "auto"`` by the width of the layer's DataSet (spec 3.4).

        Parameters
        ----------
        dataset_widths : mapping of dataset name -> width (units per example)

        Returns
        -------
        NetworkDef
            A copy with every auto layer's `n` set. Raises `NetDefError` when a needed width
            is missing or not a positive integer.
        """
        layers = tuple(_resolve_layer(layer, dataset_widths) for layer in self.layers)
        resolved = dataclasses.replace(self, layers=layers)
        check_graph(resolved)
        check_losses(resolved)
        return resolved


def _resolve_layer(layer: LayerDef, widths: Mapping[str, int]) -> LayerDef:
    if not layer.n_auto or layer.n is not None:
        return layer
    path = f"Layers[{layer.index}].N"
    if layer.dataset not in widths:
        known = ", ".join(map(repr, sorted(widths))) or "none"
        raise NetDefError(f"Layers[{layer.index}].DataSet",
                          f"'auto' needs the width of dataset '{layer.dataset}', but the "
                          f"datasets given hold {known}; the layer's DataSet must equal the -d "
                          "name given to generate-netcdf")
    width = widths[layer.dataset]
    if isinstance(width, bool) or not isinstance(width, int) or width <= 0:
        raise NetDefError(path, f"dataset '{layer.dataset}' has width {width!r}; expected a "
                                f"positive integer")
    return dataclasses.replace(layer, n=width)


def load_netdef(source, dataset_widths: Mapping[str, int] | None = None, *,
                flag: str = "-c", file=None) -> NetworkDef:
    """Load a DSSTNE JSON network definition from a file path or an already-parsed dict.

    Parameters
    ----------
    source : str, os.PathLike or Mapping
        The JSON file, or its content as a dict.
    dataset_widths : mapping of dataset name -> width, optional
        When given, ``"N": "auto"`` layers are resolved from it (spec 3.4); otherwise their
        `n` stays None until `NetworkDef.resolve` is called.
    flag : str
        The option that named the file, for the message where it cannot be read.
    file : str or os.PathLike, optional
        Where an already-parsed ``source`` was read from (``read_netdef_json``), named by the
        errors as a path ``source`` is.

    Raises
    ------
    NetDefError
        For invalid JSON or any invalid or unsupported field; file errors name the file.
    """
    if not isinstance(source, Mapping):
        file = os.fspath(source)
        source = read_netdef_json(file, flag=flag)
    try:
        net = parse_netdef(source)
        return net if dataset_widths is None else net.resolve(dataset_widths)
    except NetDefError as exc:
        if file is None:
            raise
        raise exc.with_file(file) from None


def read_netdef_json(path, *, flag: str = "-c"):
    """The JSON value of the network definition file ``path`` (not yet checked as one), or a
    ``NetDefError`` naming the file where it cannot be read or is not JSON (and ``flag``, the
    option that gave it, where it cannot be read)."""
    path = os.fspath(path)
    try:
        # A UTF-8 byte order mark (Windows' Notepad writes one) is skipped, as RFC 8259 8.1
        # allows: json's "Unexpected UTF-8 BOM (decode using utf-8-sig)" was no help to a user.
        with open(path, encoding="utf-8-sig") as handle:
            text = handle.read()
    except OSError as exc:
        raise open_files_failure(exc, path) or NetDefError(
            "", f"cannot read the network definition: {exc.strerror}; check the {flag} path",
            file=path) from None
    except UnicodeDecodeError as exc:  # a binary file (a NetCDF network given as -c, say)
        raise NetDefError(f"byte {exc.start}", f"0x{exc.object[exc.start]:02x} is not valid "
                          "UTF-8; a network definition is JSON text. Is this another kind of "
                          "file (a NetCDF network or dataset)?", file=path) from None
    try:
        data = json.loads(text, object_pairs_hook=_JSONObject)
    except json.JSONDecodeError as exc:
        raise NetDefError(f"line {exc.lineno}, column {exc.colno}",
                          f"invalid JSON: {exc.msg}", file=path) from None
    except ValueError:  # an integer of more than 4,300 digits (Python's limit)
        raise NetDefError("", "invalid JSON for a network definition: an integer of thousands "
                          "of digits", file=path) from None
    except RecursionError:
        raise NetDefError("", "invalid JSON: arrays or objects nested too deeply to read; a "
                          "network definition is a few levels deep", file=path) from None
    return data


class _JSONObject(dict):
    """A JSON object that remembers the keys written twice with the same spelling
    (``given_twice``), which ``json`` would reduce to the last silently; ``fold_keys`` refuses
    them with their JSON path."""

    def __init__(self, pairs):
        super().__init__(pairs)
        counts = Counter(key for key, _ in pairs)
        self.given_twice = {key for key, n in counts.items() if n > 1}


def parse_netdef(data) -> NetworkDef:
    """Build a `NetworkDef` from parsed JSON (a dict); see `load_netdef`."""
    fields = fold_keys(data, "$", TOP_KEYS, "a network definition")
    if "Layers" not in fields:
        raise NetDefError("Layers", "required key missing; a network needs an array of layer "
                                    "objects (at least an Input and an Output layer)")
    kw = {}
    for key, (written, value) in fields.items():
        if key != "Layers":
            _TOP_READERS[key](kw, written, value)
    base = NetworkDef(layers=(), **kw)
    layers_written, layers_value = fields["Layers"]
    layers = _parse_layers(layers_written, layers_value, base)
    net = dataclasses.replace(base, layers=layers)
    check_graph(net)
    check_losses(net)
    return net


# --- top level -------------------------------------------------------------------------------

_read_smce = params_reader(SMCEParams, {"oneScale": "one_scale", "zeroScale": "zero_scale",
                                  "oneTarget": "one_target", "zeroTarget": "zero_target"})
_read_penalty = params_reader(SparsenessPenalty, {"p": "p", "beta": "beta"})
_read_denoising = params_reader(Denoising, {"p": "p"})
_read_boost = params_reader(DeltaBoost, {"one": "one", "zero": "zero"})
_read_lrn = params_reader(LRNParams, {"k": "k", "n": "n", "alpha": "alpha", "beta": "beta"})
_read_maxout = params_reader(dict, {"k": "k"})


def _version(kw, path, value):
    version = read_number(path, value)
    if version < MIN_VERSION:
        raise NetDefError(path, f"{version} is too old; expected 0.7 or later (spec 3.2)")
    kw["version"] = version


def _penalty(path, value) -> SparsenessPenalty:
    penalty = _read_penalty(path, value)
    check_range(f"{path}.p", penalty.p, PENALTY_P)
    check_range(f"{path}.beta", penalty.beta, PENALTY_BETA)
    return penalty


def _denoising(kw, path, value):
    denoising = _read_denoising(path, value)
    check_range(f"{path}.p", denoising.p, DENOISING_P)
    kw["denoising"] = denoising


_TOP_READERS = {
    "Version": _version,
    "Name": setter("name", read_str),
    "Kind": setter("kind", lambda p, v: read_enum(p, v, NETWORK_KIND_NAMES)),
    "WeightsData": setter("weights_data", read_str),
    "LRN": setter("lrn", _read_lrn),
    "Maxout": setter("maxout_k", lambda p, v: _read_maxout(p, v).get("k", 2.0)),
    "SparsenessPenalty": setter("sparseness_penalty", _penalty),
    "Denoising": _denoising,
    "DeltaBoost": setter("delta_boost", _read_boost),
    "ScaledMarginalCrossEntropy": setter("smce", _read_smce),
    "ShuffleIndices": setter("shuffle_indices", read_bool),
    "RELUSlope": setter("relu_slope", read_float),
    "ELUAlpha": setter("elu_alpha", read_float),
    "SELULambda": setter("selu_lambda", read_float),
    "Decay": setter("decay", ranged_reader(DECAY)),
    "ErrorFunction": setter("error_function", lambda p, v: read_enum(
        p, v, ERROR_FUNCTION_NAMES, ERROR_FUNCTION_REFUSED)),
}


# --- layers ----------------------------------------------------------------------------------

def _parse_layers(written: str, value, net: NetworkDef) -> tuple[LayerDef, ...]:
    if isinstance(value, dict) and not value:
        raise NetDefError(written, "expected a non-empty array of layer objects, got an empty "
                                   "object; write the layers as an array: "
                                   "[{\"Kind\": \"Input\", ...}, ...]")
    if isinstance(value, dict):  # a single layer object is allowed (spec 3.2)
        stray = next((key for key in value if key.lower() not in LAYER_KEYS), None)
        if stray is not None:  # more likely layers keyed by name than one layer with a typo
            raise NetDefError(written, f"expected an array of layer objects, got an object "
                                       f"whose key '{stray}' is not a layer key; write the "
                                       f"layers as an array: [{{\"Kind\": \"Input\", ...}}, ...]")
    items = [value] if isinstance(value, dict) else value
    if not isinstance(items, list) or not items:
        raise NetDefError(written, "expected a non-empty array of layer objects")
    layers = []
    for i, item in enumerate(items):
        previous = layers[-1].name if layers else None
        layers.append(_parse_layer(f"{written}[{i}]", i, len(items), item, previous, net))
    return tuple(layers)


def _positional_kind(i: int, count: int) -> LayerKind:
    # Without "Kind", the first layer is Input, the last Output, the rest Hidden (spec 3.3).
    if i == 0:
        return LayerKind.Input
    return LayerKind.Output if i == count - 1 else LayerKind.Hidden


def _parse_layer(path, i, count, item, previous, net: NetworkDef) -> LayerDef:
    fields = fold_keys(item, path, LAYER_KEYS, "a layer")
    # Kind and Type are read before the other keys (spec 3.3).
    kind = _positional_kind(i, count)
    if "Kind" in fields:
        w, v = fields["Kind"]
        kind = read_enum(f"{path}.{w}", v, LAYER_KIND_NAMES)
        if kind == LayerKind.Target:
            raise NetDefError(f"{path}.{w}", "Target layers are parsed but not implemented "
                                             "by DSSTNE (spec 3.17); Destiny does not support "
                                             "them; expected one of Input, Hidden, Output")
    _check_keys_for_kind(path, fields, kind)
    _refuse_unsupported(path, fields)
    kw = {"kind": kind, "index": i, "n": 1, "n_auto": False,  # DSSTNE's default N (spec 3.3)
          "relu_slope": net.relu_slope, "elu_alpha": net.elu_alpha,
          "selu_lambda": net.selu_lambda, "name": f"{kind.name}{i}", "name_generated": True}
    if kind != LayerKind.Input and previous is not None:
        kw["sources"] = (previous,)  # default Source: the previous layer (spec 3.4)
    for key, (w, v) in fields.items():
        if key in _LAYER_READERS:
            _LAYER_READERS[key](kw, sub_path(path, w), v)
    _check_layer(path, kw, fields)
    # Only JSON-sparse Input layers get the Denoising attribute (spec 3.9).
    kw["denoising"] = kind == LayerKind.Input and kw.get("sparse", False) and net.denoising.p > 0
    return LayerDef(**kw)


def _check_keys_for_kind(path, fields, kind: LayerKind) -> None:
    for key, (w, _v) in fields.items():
        if kind not in LAYER_KEY_KINDS[key]:
            allowed = ", ".join(k for k, kinds in LAYER_KEY_KINDS.items() if kind in kinds)
            article = "an" if kind.name[0] in "IO" else "a"
            raise NetDefError(sub_path(path, w), f"not allowed on {article} {kind.name} layer "
                                                 f"(spec 3.3); allowed keys: {allowed}")


def _refuse_unsupported(path, fields) -> None:
    """Refuse what DSSTNE only implements through cuDNN or not at all (spec 3.15-3.17)."""
    if "Type" in fields:
        w, v = fields["Type"]
        kind = read_enum(sub_path(path, w), v, LAYER_TYPE_NAMES)
        if kind != LayerType.FullyConnected:
            raise NetDefError(sub_path(path, w), f"{kind.name} layers are cuDNN-only in DSSTNE "
                              "(spec 3.17); Destiny does not support them; expected "
                              "FullyConnected")
    for key in ("Kernel", "KernelStride", "Function"):
        if key in fields:
            raise NetDefError(sub_path(path, fields[key][0]), "convolution and pooling "
                              "settings are not supported by Destiny (spec 3.17); only "
                              "FullyConnected layers are")
    if "BatchNormalization" in fields:
        w, v = fields["BatchNormalization"]
        if read_bool(sub_path(path, w), v):
            raise NetDefError(sub_path(path, w), "batch normalisation is not supported by "
                              "Destiny (spec 3.15); expected false or no key")


_WEIGHT_INIT_KEYS = {"scheme": "Scheme", "scale": "Scale", "bias": "Bias"}


def _read_weight_init(path, value) -> WeightInitDef:
    found = fold_keys(value, path, _WEIGHT_INIT_KEYS, "a WeightInit")
    args = {}
    if "Scheme" in found:
        w, v = found["Scheme"]
        args["scheme"] = read_enum(f"{path}.{w}", v, WEIGHT_INIT_NAMES)
    for key in ("Scale", "Bias"):
        if key in found:
            w, v = found[key]
            args[key.lower()] = read_float(f"{path}.{w}", v)
    init = WeightInitDef(**args)
    if init.scheme == WeightInit.Gaussian and "Scale" in found:  # (numpy refused it with a
        check_range(f"{path}.{found['Scale'][0]}", init.scale, GAUSSIAN_SCALE)  # traceback)
    return init


_SHARED_KEYS = {"inputlayer": "InputLayer", "sourceinputlayer": "SourceInputLayer",
                "sourceoutputlayer": "SourceOutputLayer", "transposed": "Transposed"}


def _read_shared(path, value) -> tuple[SharedWeight, ...]:
    items = [value] if isinstance(value, dict) else value
    if not isinstance(items, list):
        raise NetDefError(path, "expected an object or an array of objects with InputLayer, "
                                "SourceInputLayer, SourceOutputLayer, Transposed")
    shares = []
    for i, item in enumerate(items):
        item_path = f"{path}[{i}]"
        found = fold_keys(item, item_path, _SHARED_KEYS, "a SharedWeights")
        names = {}
        for key in ("InputLayer", "SourceInputLayer", "SourceOutputLayer"):
            if key not in found:
                raise NetDefError(f"{item_path}.{key}", "required key missing")
            names[key] = read_str(f"{item_path}.{found[key][0]}", found[key][1])
        transposed = False
        if "Transposed" in found:
            transposed = read_bool(f"{item_path}.{found['Transposed'][0]}", found["Transposed"][1])
        shares.append(SharedWeight(names["InputLayer"], names["SourceInputLayer"],
                                   names["SourceOutputLayer"], transposed))
    return tuple(shares)


def _name(kw, path, value):
    kw["name"], kw["name_generated"] = read_str(path, value), False


def _activation(path, value) -> Activation:
    return read_enum(path, value, ACTIVATION_NAMES, ACTIVATION_REFUSED)


_LAYER_READERS = {
    "Name": _name,
    "N": read_n,
    "Sparse": setter("sparse", read_bool),
    "pDropout": setter("p_dropout", ranged_reader(DROPOUT)),
    "Source": setter("sources", read_names),
    "Skip": setter("skips", read_names),
    "DataSet": setter("dataset", read_str),
    "Activation": setter("activation", _activation),
    "RELUSlope": setter("relu_slope", read_float),
    "ELUAlpha": setter("elu_alpha", read_float),
    "SELULambda": setter("selu_lambda", read_float),
    "WeightNorm": setter("weight_norm", ranged_reader(NORM)),
    "DeltaNorm": setter("delta_norm", ranged_reader(NORM)),
    "WeightInit": setter("weight_init", _read_weight_init),
    "SharedWeights": setter("shared_weights", _read_shared),
    "SparsenessPenalty": setter("sparseness_penalty", _penalty),
}


def _check_layer(path, kw, fields) -> None:
    kind = kw["kind"]
    if kw["n_auto"] and kind == LayerKind.Hidden:
        raise NetDefError(sub_path(path, fields["N"][0]), "'auto' is allowed only on Input and "
                          "Output layers (spec 3.4); expected a positive integer")
    if kind in (LayerKind.Input, LayerKind.Output) and not kw.get("dataset"):
        raise NetDefError(f"{path}.DataSet", f"required on an {kind.name} layer: the name of "
                          "the dataset that feeds it (spec 3.3)")
    if len(kw.get("sources", ())) > MAX_SOURCES:
        raise NetDefError(sub_path(path, fields["Source"][0]), f"{len(kw['sources'])} sources; "
                          f"a layer has at most {MAX_SOURCES} (spec 3.4)")


# --- whole-network checks --------------------------------------------------------------------


def check_graph(net: NetworkDef) -> None:
    """Cross-layer checks: names, required kinds, references (skip sizes and shared weights
    included), cycles. A network file's reader makes them too (io/network_file.py)."""
    by_name: dict[str, LayerDef] = {}
    for layer in net.layers:
        if layer.name in by_name:
            how = " (a generated default name)" if layer.name_generated else ""
            first = by_name[layer.name].index
            raise NetDefError(f"Layers[{layer.index}].Name", f"duplicate layer name "
                              f"'{layer.name}'{how}; also used by Layers[{first}]")
        by_name[layer.name] = layer
    for kind in (LayerKind.Input, LayerKind.Output):
        if not net.layers_of(kind):
            raise NetDefError("Layers", f"no {kind.name} layer; a network needs at least one "
                                        f"Input and one Output layer")
    for layer in net.layers:
        if layer.kind != LayerKind.Input and not layer.sources:
            raise NetDefError(f"Layers[{layer.index}].Source", "a non-Input layer needs at "
                                                               "least one source")
        _check_references(layer, by_name)
    _check_acyclic(net, by_name)


def check_losses(net: NetworkDef) -> None:
    """Refuse an output activation the error function cannot train. Only a definition to
    train is checked: a DSSTNE network file may pair them, and predicts as it is."""
    for layer in net.layers_of(LayerKind.Output):
        # The CrossEntropy family has output deltas only for some activations; DSSTNE left
        # the delta stale otherwise (quirk 10.13), and DSMCE has a Sigmoid kernel only (5.5).
        allowed = LOSS_ACTIVATIONS.get(int(net.error_function))
        if allowed is not None and int(layer.activation) not in allowed:
            names = " or ".join(Activation(code).name for code in allowed)
            raise NetDefError(f"Layers[{layer.index}].Activation", f"{layer.activation.name} "
                              f"cannot be used with ErrorFunction {net.error_function.name} "
                              f"(spec 3.6, 5.5, quirk 10.13); expected {names}")


def _check_references(layer: LayerDef, by_name: dict[str, LayerDef]) -> None:
    path = f"Layers[{layer.index}]"
    known = ", ".join(by_name)
    for key, names in (("Source", layer.sources), ("Skip", layer.skips)):
        for j, name in enumerate(names):
            if name not in by_name:
                raise NetDefError(f"{path}.{key}", f"unknown layer '{name}'; expected one of "
                                                   f"{known}", item=j)
            if name in names[:j]:  # (DSSTNE took it, names unchecked: spec 3.4)
                why = ("each source gets one weight matrix, and a second from the same layer "
                       "would only split its part in two, with two weights that the network "
                       "file and SharedWeights could not tell apart" if key == "Source" else
                       "a skip adds that layer's activations, and a second would add them again")
                raise NetDefError(f"{path}.{key}", f"'{name}' is listed twice (entries "
                                  f"{names.index(name)} and {j}); {why}. List it once.", item=j)
    for j, name in enumerate(layer.skips):
        other = by_name[name]
        if layer.n is not None and other.n is not None and layer.n != other.n:
            raise NetDefError(f"{path}.Skip", f"'{name}' has N={other.n} but this layer has "
                                              f"N={layer.n}; skip layers must have equal sizes",
                              item=j)
    for i, share in enumerate(layer.shared_weights):
        _check_share(f"{path}.SharedWeights[{i}]", layer, share, by_name)


def _check_share(path, layer, share: SharedWeight, by_name) -> None:
    for key, name in (("InputLayer", share.input_layer),
                      ("SourceInputLayer", share.source_input_layer),
                      ("SourceOutputLayer", share.source_output_layer)):
        if name not in by_name:
            raise NetDefError(f"{path}.{key}", f"unknown layer '{name}'; expected one of "
                                               f"{', '.join(by_name)}")
    if share.input_layer not in layer.sources:
        raise NetDefError(f"{path}.InputLayer", f"'{share.input_layer}' is not a Source of "
                          f"this layer; expected one of {', '.join(layer.sources)}")
    target = by_name[share.source_output_layer]
    if share.source_input_layer not in target.sources:
        raise NetDefError(f"{path}.SourceInputLayer", f"no weight "
                          f"{share.source_input_layer} -> {share.source_output_layer} exists "
                          f"(spec 3.14); the sources of {target.name} are "
                          f"{', '.join(target.sources) or 'none'}")
    owner = f"{share.source_input_layer} -> {share.source_output_layer}"
    if any(s.input_layer == share.source_input_layer for s in target.shared_weights):
        raise NetDefError(f"{path}.SourceOutputLayer", f"the weight {owner} is itself shared; "
                          "a share reuses an unshared matrix (spec 3.14): name the matrix "
                          "that weight shares")
    mine = (by_name[share.input_layer].n, layer.n)
    theirs = (by_name[share.source_input_layer].n, target.n)
    if share.transposed:
        theirs = theirs[::-1]
    if None not in mine + theirs and mine != theirs:  # (sizes "auto" are checked once known)
        raise NetDefError(f"{path}.SourceOutputLayer", f"the weight {share.input_layer} -> "
                          f"{layer.name} is {mine[0]} x {mine[1]} units, and {owner}"
                          f"{' transposed' if share.transposed else ''} is {theirs[0]} x "
                          f"{theirs[1]}; the dimensions of a shared matrix must match "
                          "(spec 3.14)")


def _check_acyclic(net: NetworkDef, by_name: dict[str, LayerDef]) -> None:
    """Refuse cycles through Source and Skip (DSSTNE's propagation order needs a DAG, 3.4).
    A depth-first walk without recursion: a network file may chain a thousand layers."""
    def steps(layer: LayerDef):
        return iter([("Source", j, name) for j, name in enumerate(layer.sources)]
                    + [("Skip", j, name) for j, name in enumerate(layer.skips)])

    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    for top in net.layers:
        if top.name in state:
            continue
        state[top.name] = 1
        trail, pending = [top], [steps(top)]
        while trail:
            step = next(pending[-1], None)
            if step is None:
                state[trail.pop().name] = 2
                pending.pop()
                continue
            key, j, name = step
            if state.get(name) == 1:
                full = [layer.name for layer in trail]
                cycle = " -> ".join(full[full.index(name):] + [name])
                raise NetDefError(f"Layers[{trail[-1].index}].{key}", f"cycle in the layer "
                                  f"graph: {cycle}; sources and skips must form an acyclic "
                                  "graph", item=j)
            if name not in state:
                state[name] = 1
                trail.append(by_name[name])
                pending.append(steps(by_name[name]))
