"""Network NetCDF files in DSSTNE's layout (spec 4), written and read back.

Everything DSSTNE stores is global attributes, in DSSTNE's write order, with its NetCDF
types (uint, int, float, text as NC_CHAR, uint64 for weight shapes), plus one ``bias`` and one
``weights`` variable per connection (row-major [input unit][output unit]). A DSSTNE network
file therefore loads here, and ours loads in DSSTNE, which ignores the attributes Destiny adds
under the ``destiny_`` prefix: the format version, the JSON definition, the training state
and, in checkpoints, the optimizer state.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Callable

import numpy as np

from destiny import __version__
from destiny.errors import DataFormatError, NetDefError
from destiny.io.dataset import set_attribute
from destiny.netdef import (
    Activation, DeltaBoost, Denoising, ErrorFunction, LayerDef, LayerKind, LayerType, LRNParams,
    NetworkDef, NetworkKind, SharedWeight, SMCEParams, SparsenessPenalty, WeightInit,
    WeightInitDef, check_graph, parse_netdef)
from destiny.wording import counted, shown

# The layout of Destiny's additions (destiny_format_version): raised when one changes so that
# an earlier Destiny would misread a file, which then refuses it rather than call it damaged.
FORMAT_VERSION = 1
NN_VERSION = 0.9

_u32, _i32, _f32, _u64 = np.uint32, np.int32, np.float32, np.uint64


def write_network(path, netdef: NetworkDef, weights: dict[int, np.ndarray],
                  biases: dict[int, np.ndarray], *, destiny: dict | None = None,
                  arrays: dict[str, np.ndarray] | None = None) -> None:
    """Write a network file.

    ``weights[k]`` / ``biases[k]`` belong to connection k (DSSTNE's weight k: layers in
    definition order, each layer's sources in order); shared connections have no weights.
    ``destiny`` holds extra attributes (written as ``destiny_<key>``) and ``arrays`` extra
    float variables (written as ``destiny_<name>``).
    """
    import netCDF4

    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        for key, value in _network_attributes(netdef):
            set_attribute(nc, key, value)
        layers = netdef.layers
        set_attribute(nc, "layers", _u32(len(layers)))
        for i, layer in enumerate(layers):
            for key, value in _layer_attributes(layer, netdef):
                set_attribute(nc, f"layer{i}_{key}", value)
        pairs = connections(netdef)
        set_attribute(nc, "weights", _u32(len(pairs)))
        by_name = {layer.name: layer for layer in layers}
        for k, (source, dest) in enumerate(pairs):
            _write_weight(nc, k, by_name[source], by_name[dest], weights.get(k), biases[k])
        for key, value in (destiny or {}).items():
            set_attribute(nc, f"destiny_{key}", value)
        set_attribute(nc, "destiny_format_version", _u32(FORMAT_VERSION))
        for name, array in (arrays or {}).items():
            dim = f"destiny_{name}_dim"
            nc.createDimension(dim, array.size)
            var = nc.createVariable(f"destiny_{name}", "f4", (dim,), fill_value=False)
            _fill(var, array)


def connections(netdef: NetworkDef) -> list[tuple[str, str]]:
    """(source, destination) of every weight matrix, in DSSTNE's creation order."""
    return [(s, layer.name) for layer in netdef.layers for s in layer.sources]


def _network_attributes(n: NetworkDef):
    yield "version", _f32(NN_VERSION)
    yield "name", n.name
    yield "kind", _u32(int(n.kind))
    yield "errorFunction", _u32(int(n.error_function))
    yield "maxout_k", _i32(int(n.maxout_k))
    yield "decay", _f32(n.decay)
    yield "LRN_k", _f32(n.lrn.k)
    yield "LRN_n", _i32(int(n.lrn.n))
    yield "LRN_alpha", _f32(n.lrn.alpha)
    yield "LRN_beta", _f32(n.lrn.beta)
    yield "bSparsenessPenalty", _u32(n.sparseness_penalty.beta > 0)
    yield "sparsenessPenalty_p", _f32(n.sparseness_penalty.p)
    yield "sparsenessPenalty_beta", _f32(n.sparseness_penalty.beta)
    yield "bDenoising", _u32(n.denoising.p > 0)
    yield "denoising_p", _f32(n.denoising.p)
    yield "deltaBoost_one", _f32(n.delta_boost.one)
    yield "deltaBoost_zero", _f32(n.delta_boost.zero)
    yield "SMCE_oneScale", _f32(n.smce.one_scale)
    yield "SMCE_zeroScale", _f32(n.smce.zero_scale)
    yield "SMCE_oneTarget", _f32(n.smce.one_target)
    yield "SMCE_zeroTarget", _f32(n.smce.zero_target)
    yield "ShuffleIndices", _u32(n.shuffle_indices)
    yield "checkpoint_name", ""
    yield "checkpoint_interval", _i32(0)
    yield "checkpoint_epochs", _i32(0)


def _layer_attributes(layer: LayerDef, net: NetworkDef):
    yield "name", layer.name
    yield "kind", _u32(int(layer.kind))
    yield "type", _u32(int(layer.type))
    yield "dataSet", layer.dataset
    for key, value in (("Nx", layer.n), ("Ny", 1), ("Nz", 1), ("Nw", 1), ("dimensions", 1)):
        yield key, _u32(value)
    for key in ("kernelX", "kernelY", "kernelZ", "kernelDimensions", "kernelStrideX",
                "kernelStrideY", "kernelStrideZ"):
        yield key, _u32(1)
    for key in ("kernelPaddingX", "kernelPaddingY", "kernelPaddingZ"):
        yield key, _u32(0)
    yield "pDropout", _f32(layer.p_dropout)
    yield "weightInit", _u32(int(layer.weight_init.scheme))
    yield "weightInitScale", _f32(layer.weight_init.scale)
    yield "biasInit", _f32(layer.weight_init.bias)
    yield "weightNorm", _f32(layer.weight_norm)
    yield "deltaNorm", _f32(layer.delta_norm)
    yield "activation", _u32(int(layer.activation))
    # Written per layer (DSSTNE wrote them but read the global values back, quirk 10.25).
    yield "sparsenessPenalty_p", _f32(layer.sparseness_penalty.p)
    yield "sparsenessPenalty_beta", _f32(layer.sparseness_penalty.beta)
    yield "RELUSlope", _f32(layer.relu_slope)
    yield "ELUAlpha", _f32(layer.elu_alpha)
    yield "SELULambda", _f32(layer.selu_lambda)
    # The Sparse bit of an Input layer is that of its dataset, always sparse here (spec 4.2).
    sparse = layer.sparse or layer.kind == LayerKind.Input
    yield "attributes", _u32(int(sparse) | (2 if layer.denoising else 0))
    yield "sources", _u32(len(layer.sources))
    for j, s in enumerate(layer.sources):
        yield f"source{j}", s
    yield "skips", _u32(len(layer.skips))
    for j, s in enumerate(layer.skips):
        yield f"skip{j}", s


def _write_weight(nc, k: int, source: LayerDef, dest: LayerDef, W, b) -> None:
    p = f"weight{k}_"
    share = next((s for s in dest.shared_weights if s.input_layer == source.name), None)
    set_attribute(nc, p + "inputLayer", source.name)
    set_attribute(nc, p + "outputLayer", dest.name)
    set_attribute(nc, p + "width", _u64(dest.n))
    set_attribute(nc, p + "height", _u64(source.n))
    for key in ("length", "depth", "breadth"):
        set_attribute(nc, p + key, _u64(1))
    set_attribute(nc, p + "bShared", _u32(share is not None))
    set_attribute(nc, p + "bLocked", _u32(0))
    set_attribute(nc, p + "norm", _f32(dest.weight_norm))
    nc.createDimension(p + "biasDim", dest.n)
    bias = nc.createVariable(p + "bias", "f4", (p + "biasDim",), fill_value=False)
    bias[:] = np.asarray(b, dtype=np.float32)
    if share is not None:
        set_attribute(nc, p + "bTransposed", _u32(share.transposed))
        set_attribute(nc, p + "sourceInputLayer", share.source_input_layer)
        set_attribute(nc, p + "sourceOutputLayer", share.source_output_layer)
        return
    nc.createDimension(p + "weightDim", source.n * dest.n)
    var = nc.createVariable(p + "weights", "f4", (p + "weightDim",), fill_value=False)
    _fill(var, W)


def _fill(var, array) -> None:
    """Write a matrix into a flat variable: an array at once, or, for a matrix split across
    MPI ranks (``shard.Gathered``), one block of rows at a time as rank 0 gathers them."""
    if not hasattr(array, "rows"):
        var[:] = np.ravel(np.asarray(array, dtype=np.float32))
        return
    from destiny.shard import block_rows

    n_rows, n_cols = array.shape
    step = block_rows(n_cols)
    for r0 in range(0, n_rows, step):
        r1 = min(r0 + step, n_rows)
        var[r0 * n_cols:r1 * n_cols] = array.rows(r0, r1).ravel()


# -- reading ---------------------------------------------------------------------------------

class NetworkFile:
    """A network file read back: the definition, weights and biases, and Destiny's extras."""

    def __init__(self, netdef, weights, biases, destiny, arrays):
        self.netdef: NetworkDef = netdef
        self.weights: dict[int, np.ndarray] = weights
        self.biases: dict[int, np.ndarray] = biases
        self.destiny: dict = destiny
        self.arrays: dict[str, np.ndarray] = arrays


def read_network(path, *, mmap: bool = False, arrays: bool | Callable[[str], bool] = True,
                 weights: bool = True) -> NetworkFile:
    """Read a DSSTNE or Destiny network file (``version`` is read but not checked, quirk 10.34).

    With ``mmap`` the weight matrices are mapped from the file (copy-on-write) instead of
    read: a cold ``predict`` then does not copy hundreds of MB before its first product.
    ``arrays`` says which of Destiny's extra variables to read: all, none (a rank of a split
    network reads its blocks of the optimizer state with ``read_block``), or those whose names
    (without ``destiny_``) it holds true (predict's counts, not a checkpoint's optimizer
    state).
    ``weights=False`` leaves the weight matrices out (their sizes are still checked): a rank
    of a split network reads its blocks of them.
    """
    import netCDF4

    try:
        nc = netCDF4.Dataset(path, "r")
    except FileNotFoundError:
        raise DataFormatError(path, "the network file does not exist; train one first.") from None
    except OSError as e:
        raise DataFormatError(path, f"is not a readable NetCDF network file ({e}).") from None
    with nc:
        nc.set_auto_mask(False)
        attrs = {k: nc.getncattr(k) for k in nc.ncattrs()}
        get = _Getter(path, attrs)
        try:
            _check_format_version(get)
            netdef, pairs = _read_structure(get)
            _check_destiny(get, netdef)
        except (ValueError, TypeError, KeyError, IndexError, OverflowError) as e:
            # (a check above missed it: a damaged file; DESTINY_DEBUG shows where)
            if os.environ.get("DESTINY_DEBUG"):
                raise
            raise DataFormatError(path, f"its attributes do not describe a network "
                                  f"({type(e).__name__}: {e}). {DAMAGED}") from None
        n_units = {layer.name: layer.n for layer in netdef.layers}
        matrices, biases = {}, {}
        mapped = (_mappable(nc, path, [f"weight{k}_weights" for k in range(len(pairs))])
                  if mmap and weights else {})
        for k, (source, dest) in enumerate(pairs):
            p = f"weight{k}_"
            biases[k] = _variable(nc, path, p + "bias").astype(np.float32, copy=False)
            if biases[k].size != n_units[dest]:
                raise DataFormatError(path, f"the variable '{p}bias' holds {biases[k].size} "
                                      f"values; the layer {dest!r} it feeds has {n_units[dest]} "
                                      f"units. {DAMAGED}")
            check_finite(path, p + "bias", biases[k])
            if not get.uint(p + "bShared"):
                rows, cols = n_units[source], n_units[dest]
                if not weights:
                    size = _variable(nc, path, p + "weights", read=False).size
                else:
                    flat = mapped.get(p + "weights")
                    if flat is None:
                        flat = _variable(nc, path, p + "weights").astype(np.float32, copy=False)
                    size = flat.size
                if size != rows * cols:
                    raise DataFormatError(path, f"the variable '{p}weights' holds {size} "
                                          f"values; the layers it joins need {rows} x {cols}. "
                                          f"{DAMAGED}")
                if weights:
                    check_finite(path, p + "weights", flat)
                    matrices[k] = flat.reshape(rows, cols)
        destiny = {k[len("destiny_"):]: v for k, v in attrs.items() if k.startswith("destiny_")}
        extra = {name[len("destiny_"):]: np.asarray(v[:]) for name, v in nc.variables.items()
                 if name.startswith("destiny_")
                 and (arrays(name[len("destiny_"):]) if callable(arrays) else arrays)}
        _check_counts(nc, path, netdef, extra)
    return NetworkFile(netdef, matrices, biases, destiny, extra)


def destiny_attributes(path) -> dict | None:
    """Destiny's ``destiny_`` attributes of a network file (prefix removed), without its
    arrays; None if ``path`` is not a NetCDF file that can be read."""
    import netCDF4

    try:
        with netCDF4.Dataset(path, "r") as nc:
            return {k[len("destiny_"):]: nc.getncattr(k) for k in nc.ncattrs()
                    if k.startswith("destiny_")}
    except OSError:  # (missing, not NetCDF, damaged)
        return None


def read_block(path, name: str, n_cols: int, rows: tuple[int, int], cols: tuple[int, int]
               ) -> np.ndarray | None:
    """Rows ``rows`` and columns ``cols`` of the flat float variable ``name`` seen as a matrix
    of ``n_cols`` columns, read a block of rows at a time; None if there is no such variable."""
    import netCDF4

    from destiny.shard import block_rows

    (r0, r1), (c0, c1) = rows, cols
    out = np.empty((r1 - r0, c1 - c0), dtype=np.float32)
    with netCDF4.Dataset(path, "r") as nc:
        if name not in nc.variables:
            return None
        var = nc.variables[name]
        var.set_auto_mask(False)
        step = block_rows(n_cols)
        for a in range(r0, r1, step):
            b = min(a + step, r1)
            block = np.asarray(var[a * n_cols:b * n_cols]).reshape(b - a, n_cols)
            out[a - r0:b - r0] = block[:, c0:c1]
    return out


def _mappable(nc, path, names: list[str]) -> dict[str, np.ndarray]:
    """Copy-on-write maps of the variables stored as plain contiguous little-endian floats.

    netCDF-4 files are HDF5 files; an unfiltered contiguous dataset is one run of bytes whose
    offset libhdf5 reports. Anything else (chunked, compressed, another type), or a libhdf5
    that cannot be found, is simply read the usual way.
    """
    plain = [n for n in names if n in nc.variables
             and nc.variables[n].dtype == np.float32 and nc.variables[n].chunking() == "contiguous"
             and not any(v for v in (nc.variables[n].filters() or {}).values())
             and nc.variables[n].endian() in ("little", "native")]
    offsets = _hdf5_offsets(path, plain) if plain else {}
    return {n: np.memmap(path, dtype="<f4", mode="c", offset=off, shape=(nc.variables[n].size,))
            for n, off in offsets.items()}


def _hdf5_offsets(path, names: list[str]) -> dict[str, int]:
    """Byte offsets of contiguous HDF5 datasets, through the libhdf5 netCDF4 loaded."""
    import ctypes
    import glob
    import os
    import sys

    import netCDF4

    libs = os.path.join(os.path.dirname(os.path.dirname(netCDF4.__file__)), "netcdf4.libs")
    found = glob.glob(os.path.join(libs, "libhdf5-*.so*"))
    if not found or sys.byteorder != "little":
        return {}
    try:
        h5 = ctypes.CDLL(found[0])
        h5.H5open()
        h5.H5Fopen.restype = h5.H5Dopen2.restype = ctypes.c_int64
        h5.H5Fopen.argtypes = [ctypes.c_char_p, ctypes.c_uint, ctypes.c_int64]
        h5.H5Dopen2.argtypes = [ctypes.c_int64, ctypes.c_char_p, ctypes.c_int64]
        h5.H5Dget_offset.restype = ctypes.c_uint64
        h5.H5Dget_offset.argtypes = h5.H5Dclose.argtypes = h5.H5Fclose.argtypes = [ctypes.c_int64]
    except (OSError, AttributeError):
        return {}
    fid = h5.H5Fopen(os.fsencode(path), 0, 0)  # H5F_ACC_RDONLY, H5P_DEFAULT
    if fid < 0:
        return {}
    offsets = {}
    try:
        for name in names:
            did = h5.H5Dopen2(fid, ("/" + name).encode(), 0)
            if did < 0:
                continue
            offset = h5.H5Dget_offset(did)
            h5.H5Dclose(did)
            if offset != 2**64 - 1:  # HADDR_UNDEF: not allocated or not contiguous
                offsets[name] = int(offset)
    finally:
        h5.H5Fclose(fid)
    return offsets


# What to do about a network file whose attributes or values are wrong.
DAMAGED = ("The network file is damaged (or was not written by DSSTNE or Destiny): train "
           "the network again, or restore the file from a copy.")


class _Getter:
    """The attributes of a network file, each read as the type DSSTNE writes it; a value of
    another type or out of range is a ``DataFormatError`` naming the file and the attribute."""

    def __init__(self, path, attrs):
        self.path, self.attrs = path, attrs

    def bad(self, key, expected: str) -> DataFormatError:
        return DataFormatError(self.path, f"the attribute {key!r} is "
                               f"{shown(self.attrs.get(key))}; expected {expected}. {DAMAGED}")

    def raw(self, key):
        if key not in self.attrs:
            raise DataFormatError(self.path, f"lacks the attribute {key!r} that every DSSTNE "
                                  f"network file has. {DAMAGED}")
        return self.attrs[key]

    def _number(self, key, expected: str):
        value = np.asarray(self.raw(key))
        if value.dtype.kind not in "iuf" or value.size != 1:
            raise self.bad(key, expected)
        return value.reshape(-1)[0].item()

    def uint(self, key, low: int = 0, expected: str | None = None) -> int:
        expected = expected or ("a whole number" if low == 0 else f"a whole number, {low} or more")
        value = self._number(key, expected)
        if not float(value).is_integer() or value < low:
            raise self.bad(key, expected)
        return int(value)

    def float(self, key, default=None) -> float:
        """A finite number: NaN or infinity in a network's setting is damage (DSSTNE's JSON
        parser reads no such value, nor does Destiny's)."""
        if default is not None and key not in self.attrs:
            return default
        value = float(self._number(key, "a number"))
        if not math.isfinite(value):
            raise self.bad(key, "a finite number")
        return value

    def dropout(self, key) -> float:
        """A layer's pDropout, in [0, 1) as in a JSON definition (netdef_fields.read_dropout)."""
        value = self.float(key)
        if not 0.0 <= value < 1.0:
            raise self.bad(key, "a probability in [0, 1): dropout keeps a unit with "
                           "probability 1 - pDropout")
        return value

    def text(self, key) -> str:
        value = self.raw(key)
        if not isinstance(value, str):
            raise self.bad(key, "text")
        return value

    def enum(self, key, kind):
        code = self.uint(key, expected=f"a code of {kind.__name__}")
        try:
            return kind(code)
        except ValueError:
            codes = ", ".join(f"{m.value} {m.name}" for m in kind)
            raise self.bad(key, f"a code of {kind.__name__} ({codes})") from None

    def json(self, key, check: Callable[[object], bool], expected: str):
        """Destiny's JSON text attribute ``key``, which ``check`` must accept."""
        text = self.text(key)
        try:
            value = json.loads(text)
        except ValueError:
            raise self.bad(key, f"JSON text of {expected}") from None
        if not check(value):
            raise self.bad(key, f"JSON text of {expected}")
        return value


def _read_structure(get: _Getter) -> tuple[NetworkDef, list[tuple[str, str]]]:
    """The network definition a file's attributes describe, with its connections (source,
    destination) in the order of its ``weight<k>_`` attributes, checked as the JSON parser
    checks a definition: a damaged file is refused here, not met as a failure later."""
    count = get.uint("layers", 2, "a whole number of layers, 2 or more (an Input and an Output)")
    layers = [_read_layer(get, i) for i in range(count)]
    for layer in layers:  # (DSSTNE's own layers that Destiny does not run: not damage)
        if layer.type != LayerType.FullyConnected or layer.kind == LayerKind.Target:
            what = (f"a {layer.type.name} layer" if layer.type != LayerType.FullyConnected
                    else "a Target layer")
            raise DataFormatError(get.path, f"layer {layer.name!r} (layer{layer.index}_) is "
                                  f"{what}, which Destiny does not run (README: What Destiny "
                                  "does not run); only fully connected networks are supported.")
    pairs = connections(NetworkDef(layers=tuple(layers)))
    # (the weights the file has: a count that disagrees is told once the layers it follows
    # from are known to be sound)
    layers, shared = _attach_shares(get, layers, pairs[:get.uint("weights")])
    try:  # (the checks of a JSON definition: names, kinds, sources, skips, shares, cycles)
        check_graph(NetworkDef(layers=layers))
    except NetDefError as e:
        raise _graph_error(get, layers, shared, e) from None
    if get.uint("weights") != len(pairs):
        raise get.bad("weights", f"{len(pairs)}, one weight per source of a layer")
    for k, pair in enumerate(pairs):
        for key, name in zip(("inputLayer", "outputLayer"), pair, strict=True):
            if get.text(f"weight{k}_{key}") != name:
                raise get.bad(f"weight{k}_{key}", f"{name!r}: weight {k} joins {pair[0]!r} to "
                              f"{pair[1]!r} (the layers' sources, in order)")
    return _read_network(get, layers), pairs


def _read_network(get: _Getter, layers) -> NetworkDef:
    glob_penalty = SparsenessPenalty(get.float("sparsenessPenalty_p"),
                                     get.float("sparsenessPenalty_beta"))
    return NetworkDef(
        layers=layers, name=get.text("name"), kind=get.enum("kind", NetworkKind),
        version=get.float("version"), error_function=get.enum("errorFunction", ErrorFunction),
        smce=SMCEParams(get.float("SMCE_oneScale"), get.float("SMCE_zeroScale"),
                        get.float("SMCE_oneTarget"), get.float("SMCE_zeroTarget")),
        delta_boost=DeltaBoost(get.float("deltaBoost_one"), get.float("deltaBoost_zero")),
        sparseness_penalty=glob_penalty, denoising=Denoising(get.float("denoising_p")),
        shuffle_indices=bool(get.uint("ShuffleIndices")), decay=get.float("decay", 0.0),
        lrn=LRNParams(get.float("LRN_k"), get.float("LRN_n"), get.float("LRN_alpha"),
                      get.float("LRN_beta")),
        maxout_k=get.float("maxout_k"))


def _read_layer(get: _Getter, i: int) -> LayerDef:
    p = f"layer{i}_"
    attributes = get.uint(p + "attributes")
    return LayerDef(
        name=get.text(p + "name"), kind=get.enum(p + "kind", LayerKind), index=i,
        n=get.uint(p + "Nx", 1), type=get.enum(p + "type", LayerType),
        sources=tuple(get.text(f"{p}source{j}") for j in range(get.uint(p + "sources"))),
        skips=tuple(get.text(f"{p}skip{j}") for j in range(get.uint(p + "skips"))),
        dataset=get.text(p + "dataSet"), activation=get.enum(p + "activation", Activation),
        sparse=bool(attributes & 1), p_dropout=get.dropout(p + "pDropout"),
        weight_init=WeightInitDef(get.enum(p + "weightInit", WeightInit),
                                  get.float(p + "weightInitScale"), get.float(p + "biasInit")),
        weight_norm=get.float(p + "weightNorm"), delta_norm=get.float(p + "deltaNorm"),
        relu_slope=get.float(p + "RELUSlope"), elu_alpha=get.float(p + "ELUAlpha"),
        selu_lambda=get.float(p + "SELULambda"),
        # Per-layer values, falling back to the global ones DSSTNE reads (quirk 10.25).
        sparseness_penalty=SparsenessPenalty(
            get.float(p + "sparsenessPenalty_p", get.float("sparsenessPenalty_p")),
            get.float(p + "sparsenessPenalty_beta", get.float("sparsenessPenalty_beta"))),
        shared_weights=(), denoising=bool(attributes & 2))


def _graph_error(get: _Getter, layers, shared: dict[int, list[int]],
                 e: NetDefError) -> DataFormatError:
    """``check_graph``'s error in the file's terms: the attribute its JSON path stands for
    (``Layers[2].Source`` with ``item`` 1: ``layer2_source1``; a layer's ``SharedWeights[s]``:
    the attributes of the weight it came from)."""
    detail = re.sub(r"Layers\[(\d+)\]", r"layer \1 (the 'layer\1_' attributes)", e.detail)
    m = re.fullmatch(r"Layers\[(\d+)\]\.(\w+)(?:\[(\d+)\]\.(\w+))?", e.json_path)
    if m is None:  # ("Layers": no Input or no Output layer)
        kinds = ", ".join(f"{int(layer.kind)} {layer.kind.name}" for layer in layers)
        return DataFormatError(get.path, f"the attributes 'layer<i>_kind' are {kinds}: "
                               f"{detail}. {DAMAGED}")
    i, key = int(m[1]), m[2]
    if key == "SharedWeights":  # (InputLayer, SourceInputLayer, SourceOutputLayer)
        attribute = f"weight{shared[i][int(m[3])]}_{m[4][0].lower()}{m[4][1:]}"
    elif key in ("Source", "Skip"):
        attribute = f"layer{i}_{key.lower()}" + ("s" if e.item is None else str(e.item))
    else:  # (Name)
        attribute = f"layer{i}_{key[0].lower()}{key[1:]}"
    if attribute not in get.attrs:  # (a check added to check_graph since)
        return DataFormatError(get.path, f"the 'layer{i}_' attributes: {detail}. {DAMAGED}")
    return DataFormatError(get.path, f"the attribute {attribute!r} is "
                           f"{shown(get.attrs[attribute])}: {detail}. {DAMAGED}")


def _check_format_version(get: _Getter) -> None:
    """Refuse a file of a later layout than this Destiny reads, before anything it would
    misread is called damage. A DSSTNE file has no version, and is read as DSSTNE's (spec 4)."""
    key = "destiny_format_version"
    if key in get.attrs and get.uint(key, 1) > FORMAT_VERSION:
        writer = get.attrs.get("destiny_version")
        by = f"Destiny {writer}" if isinstance(writer, str) else "a newer Destiny"
        raise DataFormatError(get.path, f"was written by {by} in network-file format version "
                              f"{get.uint(key)} ({key}), and this Destiny ({__version__}) reads "
                              f"versions up to {FORMAT_VERSION}. Upgrade Destiny to read it, or "
                              "use the Destiny that wrote it.")


def _check_destiny(get: _Getter, netdef: NetworkDef) -> None:
    """Destiny's attributes that the commands read back (the training state a checkpoint
    resumes from, the feature indexes predict checks), where present, and the definition
    train embedded."""
    for key in ("destiny_epoch", "destiny_updates"):
        if key in get.attrs:
            get.uint(key)
    if "destiny_run_started" in get.attrs:
        get.float("destiny_run_started")  # (seconds since 1970)
    if "destiny_netdef_json" in get.attrs:
        _check_netdef_json(get, netdef)
    if "destiny_indexes" in get.attrs:
        get.json("destiny_indexes", _is_indexes,
                 "an object: layer name -> [entries, digest] of its feature index")
    if "destiny_settings" in get.attrs:
        get.json("destiny_settings", _is_settings, "an object of the run's settings (config, "
                 "netdef, examples, entries, indexes)")
        for key in ("destiny_epoch", "destiny_updates"):  # (what --resume goes on from)
            get.raw(key)


def _check_netdef_json(get: _Getter, netdef: NetworkDef) -> None:
    """The JSON definition train was given (fit.py) must parse, and describe the layers the
    attributes do: a copy that disagrees was edited or damaged, and would mislead whoever
    reads the network's definition from it."""
    key = "destiny_netdef_json"
    data = get.json(key, lambda v: isinstance(v, dict), "an object: the network definition "
                    "train was given")
    try:  # ("N": "auto" is the width of the layer's dataset, as the file's layer has it)
        copy = parse_netdef(data).resolve({layer.dataset: layer.n for layer in netdef.layers})
    except NetDefError as e:
        raise DataFormatError(get.path, f"the attribute {key!r} holds a network definition "
                              f"that is not valid ({e}). {DAMAGED}") from None
    mine, theirs = _outline(netdef), _outline(copy)
    if len(mine) != len(theirs):
        raise DataFormatError(get.path, f"the attribute {key!r} holds a definition of "
                              f"{counted(len(theirs), 'layer')}, and the attributes ('layers') "
                              f"describe {len(mine)}. {DAMAGED}")
    for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
        if a != b:
            raise DataFormatError(get.path, f"the attribute {key!r} holds a definition whose "
                                  f"layer {i} is {b}, and the attributes 'layer{i}_' describe "
                                  f"{a}. {DAMAGED}")


def _outline(netdef: NetworkDef) -> list[str]:
    """Each layer's name, kind, size, dataset, sources and skips, as a message says them."""
    def said(names) -> str:
        return ", ".join(map(repr, names)) or "none"

    return [f"{layer.name!r} ({layer.kind.name}, {counted(layer.n, 'unit')}, dataset "
            f"{layer.dataset!r}, sources {said(layer.sources)}, skips {said(layer.skips)})"
            for layer in netdef.layers]


# Destiny's counts (fit.py) of how often each output unit was a target and each input feature
# in an example: predict never recommends a unit counted 0 and leaves out such features.
_COUNTS = {"destiny_target_counts_": LayerKind.Output, "destiny_input_counts_": LayerKind.Input}


def _check_counts(nc, path, netdef: NetworkDef, read: dict[str, np.ndarray]) -> None:
    """Every count variable names a layer of its kind and holds one whole number >= 0 per
    unit (those read): counts of a renamed or resized layer would be passed over unseen."""
    for name, var in nc.variables.items():
        prefix = next((p for p in _COUNTS if name.startswith(p)), None)
        if prefix is None:
            continue
        kind, layer_name = _COUNTS[prefix], name[len(prefix):]
        layer = next((lay for lay in netdef.layers if lay.name == layer_name), None)
        if layer is None or layer.kind != kind:
            have = ", ".join(repr(lay.name) for lay in netdef.layers_of(kind))
            raise DataFormatError(path, f"the variable {name!r} holds the counts of a layer "
                                  f"{layer_name!r}, and the network's {kind.name} layers are "
                                  f"{have}. {DAMAGED}")
        if var.size != layer.n:
            raise DataFormatError(path, f"the variable {name!r} holds {var.size:,} counts; the "
                                  f"layer {layer_name!r} has {counted(layer.n, 'unit')}. "
                                  f"{DAMAGED}")
        values = read.get(name[len("destiny_"):])
        if values is None:
            continue
        with np.errstate(invalid="ignore"):
            bad = np.flatnonzero(~(np.isfinite(values) & (values >= 0)
                                   & (np.floor(values) == values)))
        if bad.size:
            raise DataFormatError(path, f"the variable {name!r} holds "
                                  f"{counted(bad.size, 'value')} that "
                                  f"{'is' if bad.size == 1 else 'are'} not a count (a whole "
                                  f"number, 0 or more), the first {shown(values[bad[0]])} for "
                                  f"unit {bad[0]:,}. {DAMAGED}")


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_indexes(value) -> bool:
    return isinstance(value, dict) and all(
        isinstance(v, list) and len(v) == 2 and _is_count(v[0]) and isinstance(v[1], str)
        for v in value.values())


def _is_settings(value) -> bool:
    return (isinstance(value, dict)
            and isinstance(value.get("config", {}), dict)
            and isinstance(value.get("netdef", ""), str)
            and isinstance(value.get("indexes", ""), str)
            and _is_count(value.get("examples", 0))
            and isinstance(value.get("entries", {}), dict)
            and all(_is_count(v) for v in value.get("entries", {}).values()))


def check_finite(path, name: str, values: np.ndarray, *, part: bool = False) -> None:
    """Refuse a weight or bias variable holding NaN or infinity (a damaged file, or a run that
    diverged): predict would write 'nan' scores, and training would go on from them.

    ``part``: ``values`` are a block of the variable ``name`` of ``path`` (a rank of a split
    network reads only its own). What a block holds is then told of the whole variable,
    counted through the file a block at a time: the message one process gives for the file.
    """
    bad, size = _non_finite(values), np.size(values)
    if bad and part:
        import netCDF4

        with netCDF4.Dataset(path, "r") as nc:
            var = nc.variables[name]
            var.set_auto_mask(False)
            step = 1 << 22
            size = var.size
            bad = sum(_non_finite(np.asarray(var[i:i + step])) for i in range(0, size, step))
    if bad:
        raise DataFormatError(path, f"the variable {name!r} holds {counted(bad, 'value')} that "
                              f"{'is' if bad == 1 else 'are'} not finite (NaN or infinity) "
                              f"among {size:,}. {DAMAGED}")


def _non_finite(values: np.ndarray) -> int:
    """How many values are NaN or infinite. One float32 sum of the values, which is finite
    only if they all are, costs about as much as reading them once and needs no temporary
    array; only a sum too large for float32 (not weights any training writes) is looked at
    value by value."""
    flat = np.asarray(values).reshape(-1)
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(np.add.reduce(flat, dtype=np.float32)):
            return 0
    step = 1 << 20
    return sum(int(flat[i:i + step].size - np.count_nonzero(np.isfinite(flat[i:i + step])))
               for i in range(0, flat.size, step))


def _variable(nc, path, name, read: bool = True):
    """The variable ``name``'s values (``read=False``: the variable, unread)."""
    if name not in nc.variables:
        raise DataFormatError(path, f"lacks the variable {name!r}; the network file is incomplete.")
    return np.asarray(nc.variables[name][:]) if read else nc.variables[name]


def _attach_shares(get: _Getter, layers: list[LayerDef], pairs
                   ) -> tuple[tuple[LayerDef, ...], dict[int, list[int]]]:
    """Give each layer the SharedWeights entries recorded on its incoming weights (spec 4.3),
    with, for each layer's index, the weight each entry came from (``_graph_error``)."""
    import dataclasses

    shares: dict[str, list[SharedWeight]] = {}
    weights: dict[int, list[int]] = {}
    index = {layer.name: layer.index for layer in layers}
    for k, (source, dest) in enumerate(pairs):
        p = f"weight{k}_"
        if get.uint(p + "bShared"):
            shares.setdefault(dest, []).append(SharedWeight(
                input_layer=source, source_input_layer=get.text(p + "sourceInputLayer"),
                source_output_layer=get.text(p + "sourceOutputLayer"),
                transposed=bool(get.uint(p + "bTransposed"))))
            weights.setdefault(index[dest], []).append(k)
    return tuple(dataclasses.replace(layer, shared_weights=tuple(shares.get(layer.name, ())))
                 for layer in layers), weights
