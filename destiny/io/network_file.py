"""Network NetCDF files in DSSTNE's layout (spec 4), written and read back.

Everything DSSTNE stores is global attributes, in DSSTNE's write order, with its NetCDF
types (uint, int, float, text as NC_CHAR, uint64 for weight shapes), plus one ``bias`` and one
``weights`` variable per connection (row-major [input unit][output unit]). A DSSTNE network
file therefore loads here, and ours loads in DSSTNE, which ignores the attributes Destiny adds
under the ``destiny_`` prefix: the format version, the JSON definition, the training state
and, in checkpoints, the optimizer state.

This module owns that layout: the names and types of the attributes and variables, how a
``NetworkDef`` and its matrices map onto them both ways, and the format version (a later one
is refused before anything is read). What the values read back must be, and the messages
that refuse them, are ``network_checks.py``'s.
"""

from __future__ import annotations

import contextlib
import os
from typing import Callable

import numpy as np

from destiny import __version__
from destiny.errors import (DataFormatError, NetDefError, in_file, memory_limit_may_be_why,
                            netcdf_library_failure, netcdf_reads, open_files_failure,
                            starts_as_netcdf)
from destiny.io import atomic
from destiny.io.dataset import set_attribute
from destiny.io.network_checks import (DAMAGED, Getter, check_counts, check_destiny, check_finite,
                                       graph_error)
from destiny.netdef import (
    Activation, DeltaBoost, Denoising, ErrorFunction, LayerDef, LayerKind, LayerType, LRNParams,
    NetworkDef, NetworkKind, SharedWeight, SMCEParams, SparsenessPenalty, WeightInit,
    WeightInitDef, check_graph)
from destiny.netdef_fields import (DENOISING_P, DROPOUT, LAYER_ATTR_BATCH_NORMALIZATION,
                                   LAYER_ATTR_DENOISING, LAYER_ATTR_SPARSE, MAX_SOURCES, NN_VERSION,
                                   NORM, PENALTY_BETA, PENALTY_P)

# The layout of Destiny's additions (destiny_format_version): raised when one changes so that
# an earlier Destiny would misread a file, which then refuses it rather than call it damaged.
FORMAT_VERSION = 1

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

    with in_file(path, "writing"), netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        for key, value in _network_attributes(netdef):
            set_attribute(nc, key, value)
        layers = netdef.layers
        set_attribute(nc, "layers", _u32(len(layers)))
        for i, layer in enumerate(layers):
            for key, value in _layer_attributes(layer):
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


def _layer_attributes(layer: LayerDef):
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
    yield "attributes", _u32((LAYER_ATTR_SPARSE if sparse else 0)
                             | (LAYER_ATTR_DENOISING if layer.denoising else 0))
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
    # The weights are mapped by opening the path anew (_mappable): train --force renaming a
    # new network over it meanwhile would give the new file's weights beside the old one's
    # attributes and biases. The file held open from before the read says whether it did.
    with atomic.pinned(path) if mmap and weights else contextlib.nullcontext() as replaced:
        return _read_network(path, mmap=mmap, arrays=arrays, weights=weights,
                             replaced=replaced)


def _read_network(path, *, mmap: bool, arrays: bool | Callable[[str], bool], weights: bool,
                  replaced: Callable[[], bool] | None) -> NetworkFile:
    import netCDF4

    try:
        with netcdf_reads(path, f". {DAMAGED}"):  # (HDF5 may fail past the header as it opens)
            nc = netCDF4.Dataset(path, "r")
    except FileNotFoundError:
        raise DataFormatError(path, "the network file does not exist; train one first.") from None
    except OSError as e:
        raise open_files_failure(e, path) or DataFormatError(
            path, f"is not a readable NetCDF network file ({e})" + _unreadable_why(path)
            + memory_limit_may_be_why(path)) from None
    with nc, netcdf_reads(path, f". {DAMAGED}"):  # (a damaged file: its words, not a traceback)
        nc.set_auto_mask(False)
        attrs = {k: nc.getncattr(k) for k in nc.ncattrs()}
        if "layers" not in attrs and "datasets" in attrs:  # (-n and -i swapped, say)
            raise DataFormatError(path, "is a dataset file (written by generate-netcdf), not a "
                                  "network; give the network file train wrote (its -n), and "
                                  "check that the flags are not swapped.")
        get = Getter(path, attrs)
        try:
            _check_format_version(get)
            netdef, pairs = _read_structure(get)
            check_destiny(get, netdef)
        except (ValueError, TypeError, KeyError, IndexError, OverflowError) as e:
            # (a check above missed it: a damaged file; DESTINY_DEBUG shows where)
            if os.environ.get("DESTINY_DEBUG"):
                raise
            raise DataFormatError(path, f"its attributes do not describe a network "
                                  f"({type(e).__name__}: {e}). {DAMAGED}") from None
        n_units = {layer.name: layer.n for layer in netdef.layers}
        matrices, biases = {}, {}
        mapped = (_mappable(nc, path, [f"weight{k}_weights" for k in range(len(pairs))],
                            replaced) if mmap and weights else {})
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
        check_counts(nc, path, netdef, extra)
    return NetworkFile(netdef, matrices, biases, destiny, extra)


def destiny_attributes(path) -> dict | None:
    """Destiny's ``destiny_`` attributes of a network file (prefix removed), without its
    arrays; None if ``path`` is not a NetCDF file that can be read."""
    import netCDF4

    try:
        with in_file(path, "reading"), netCDF4.Dataset(path, "r") as nc:
            return {k[len("destiny_"):]: nc.getncattr(k) for k in nc.ncattrs()
                    if k.startswith("destiny_")}
    except OSError:  # (missing, not NetCDF, damaged)
        return None
    except (RuntimeError, AttributeError) as e:  # (an attribute HDF5 cannot decode: damaged)
        if netcdf_library_failure(e):
            return None
        raise


def read_block(path, name: str, n_cols: int, rows: tuple[int, int], cols: tuple[int, int]
               ) -> np.ndarray | None:
    """Rows ``rows`` and columns ``cols`` of the flat float variable ``name`` seen as a matrix
    of ``n_cols`` columns, read a block of rows at a time; None if there is no such variable."""
    import netCDF4

    from destiny.shard import block_rows

    (r0, r1), (c0, c1) = rows, cols
    out = np.empty((r1 - r0, c1 - c0), dtype=np.float32)
    with netcdf_reads(path, f". {DAMAGED}"), netCDF4.Dataset(path, "r") as nc:
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


def _mappable(nc, path, names: list[str], replaced: Callable[[], bool] | None = None
              ) -> dict[str, np.ndarray]:
    """Copy-on-write maps of the variables stored as plain contiguous little-endian floats.

    netCDF-4 files are HDF5 files; an unfiltered contiguous dataset is one run of bytes whose
    offset libhdf5 reports. Anything else (chunked, compressed, another type), or a libhdf5
    that cannot be found, is simply read the usual way. So is everything where ``replaced()``
    says the path no longer names the file ``nc`` opened (``atomic.pinned``): the offsets and maps,
    which open the path anew, may be another file's.
    """
    plain = [n for n in names if n in nc.variables
             and nc.variables[n].dtype == np.float32 and nc.variables[n].chunking() == "contiguous"
             and not any(v for v in (nc.variables[n].filters() or {}).values())
             and nc.variables[n].endian() in ("little", "native")]
    offsets = _hdf5_offsets(path, plain) if plain else {}
    try:
        mapped = {n: np.memmap(path, dtype="<f4", mode="c", offset=off,
                               shape=(nc.variables[n].size,)) for n, off in offsets.items()}
    except (OSError, ValueError):  # (a shorter file renamed over it: past its end)
        if replaced is None or not replaced():
            raise
        return {}
    return {} if replaced is not None and replaced() else mapped


def _unreadable_why(path) -> str:
    """The end of the message for a network file netCDF cannot open: one that starts as a
    NetCDF file does may be cut short; any other (a JSON definition or text given as -n, a
    directory) is not a network at all, and training again would not be the remedy."""
    if starts_as_netcdf(path):
        return f"; it may be cut short (a copy or a write that did not finish). {DAMAGED}"
    if not os.path.isfile(path) or not os.access(path, os.R_OK):  # (a directory, a pipe,
        return "."  # a file it may not read: nothing more to say)
    return ("; it is not a NetCDF file: give the network file train wrote (its -n), and check "
            "that the flags are not swapped.")


def _hdf5_offsets(path, names: list[str]) -> dict[str, int]:
    """Byte offsets of contiguous HDF5 datasets, through the libhdf5 netCDF4 loaded."""
    import ctypes
    import glob
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


def _read_structure(get: Getter) -> tuple[NetworkDef, list[tuple[str, str]]]:
    """The network definition a file's attributes describe, with its connections (source,
    destination) in the order of its ``weight<k>_`` attributes, checked as the JSON parser
    checks a definition: a damaged file is refused here, not met as a failure later."""
    count = get.uint("layers", 2, "a whole number of layers, 2 or more (an Input and an Output)")
    glob_penalty = _penalty(get, "")  # (each layer's falls back to it: quirk 10.25)
    layers = [_read_layer(get, i, glob_penalty) for i in range(count)]
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
        raise graph_error(get, layers, shared, e) from None
    if get.uint("weights") != len(pairs):
        raise get.bad("weights", f"{len(pairs)}, one weight per source of a layer")
    for k, pair in enumerate(pairs):
        for key, name in zip(("inputLayer", "outputLayer"), pair, strict=True):
            if get.text(f"weight{k}_{key}") != name:
                raise get.bad(f"weight{k}_{key}", f"{name!r}: weight {k} joins {pair[0]!r} to "
                              f"{pair[1]!r} (the layers' sources, in order)")
    return _read_netdef(get, layers, glob_penalty), pairs


def _read_netdef(get: Getter, layers, glob_penalty: SparsenessPenalty) -> NetworkDef:
    """The ``NetworkDef`` of ``layers`` and the file's network-level attributes (spec 4.1)."""
    return NetworkDef(
        layers=layers, name=get.text("name"), kind=get.enum("kind", NetworkKind),
        version=get.float("version"), error_function=get.enum("errorFunction", ErrorFunction),
        smce=SMCEParams(get.float("SMCE_oneScale"), get.float("SMCE_zeroScale"),
                        get.float("SMCE_oneTarget"), get.float("SMCE_zeroTarget")),
        delta_boost=DeltaBoost(get.float("deltaBoost_one"), get.float("deltaBoost_zero")),
        sparseness_penalty=glob_penalty,
        denoising=Denoising(get.ranged("denoising_p", DENOISING_P)),
        # (decay unranged: DSSTNE takes a negative one as none, spec 5.2; netdef_fields.DECAY)
        shuffle_indices=bool(get.uint("ShuffleIndices")), decay=get.float("decay", 0.0),
        lrn=LRNParams(get.float("LRN_k"), get.float("LRN_n"), get.float("LRN_alpha"),
                      get.float("LRN_beta")),
        maxout_k=get.float("maxout_k"))


def _read_layer(get: Getter, i: int, glob_penalty: SparsenessPenalty) -> LayerDef:
    p = f"layer{i}_"
    attributes = get.uint(p + "attributes")
    if attributes & LAYER_ATTR_BATCH_NORMALIZATION:  # (read as a plain layer, its saved
        #   scale, shift and running statistics unused, it would score wrongly without a word)
        raise DataFormatError(get.path, f"layer {get.text(p + 'name')!r} (layer{i}_) is "
                              f"batch-normalised, which Destiny does not run (the "
                              f"BatchNormalization bit, 4, of {p}attributes, spec 3.15; README: "
                              "What Destiny does not run); "
                              "only networks without batch normalisation are supported.")
    shape = {key: get.uint(p + key, 1) for key in ("Nx", "Ny", "Nz", "Nw")}
    if shape["Ny"] * shape["Nz"] * shape["Nw"] != 1:  # (DSSTNE sizes its weights and biases
        #   by all four: read as Nx units, the file was called damaged)
        sizes = ", ".join(f"{key} {n}" for key, n in shape.items())
        raise DataFormatError(get.path, f"layer {get.text(p + 'name')!r} (layer{i}_) is "
                              f"multi-dimensional ({sizes}), which Destiny does not run (README: "
                              "What Destiny does not run); only layers of one dimension (Ny, Nz "
                              "and Nw 1) are supported.")
    kind = get.enum(p + "kind", LayerKind)
    n_sources = get.uint(p + "sources")
    if n_sources > (0 if kind == LayerKind.Input else MAX_SOURCES):  # (as a JSON definition)
        raise get.bad(p + "sources", "0: an Input layer takes its values from its dataset"
                      if kind == LayerKind.Input else
                      f"at most {MAX_SOURCES}: a layer has at most {MAX_SOURCES} (spec 3.4)")
    return LayerDef(
        name=get.text(p + "name"), kind=kind, index=i,
        n=shape["Nx"], type=get.enum(p + "type", LayerType),
        sources=tuple(get.text(f"{p}source{j}") for j in range(n_sources)),
        skips=tuple(get.text(f"{p}skip{j}") for j in range(get.uint(p + "skips"))),
        dataset=get.text(p + "dataSet"), activation=get.enum(p + "activation", Activation),
        sparse=bool(attributes & LAYER_ATTR_SPARSE), p_dropout=get.ranged(p + "pDropout", DROPOUT),
        weight_init=WeightInitDef(get.enum(p + "weightInit", WeightInit),
                                  get.float(p + "weightInitScale"), get.float(p + "biasInit")),
        weight_norm=get.ranged(p + "weightNorm", NORM),
        delta_norm=get.ranged(p + "deltaNorm", NORM),
        relu_slope=get.float(p + "RELUSlope"), elu_alpha=get.float(p + "ELUAlpha"),
        selu_lambda=get.float(p + "SELULambda"),
        sparseness_penalty=_penalty(get, p, glob_penalty), shared_weights=(),
        denoising=bool(attributes & LAYER_ATTR_DENOISING))


def _penalty(get: Getter, p: str, glob: SparsenessPenalty | None = None) -> SparsenessPenalty:
    """The sparseness penalty of layer ``p`` (``layer<i>_``: its own values, falling back to
    the global ones ``glob`` DSSTNE reads, quirk 10.25; "": the global ones), in a JSON
    definition's ranges."""
    return SparsenessPenalty(
        get.ranged(p + "sparsenessPenalty_p", PENALTY_P, None if glob is None else glob.p),
        get.ranged(p + "sparsenessPenalty_beta", PENALTY_BETA,
                   None if glob is None else glob.beta))


def _check_format_version(get: Getter) -> None:
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


def _variable(nc, path, name, read: bool = True):
    """The variable ``name``'s values (``read=False``: the variable, unread)."""
    if name not in nc.variables:
        raise DataFormatError(path, f"lacks the variable {name!r}; the network file is incomplete.")
    return np.asarray(nc.variables[name][:]) if read else nc.variables[name]


def _attach_shares(get: Getter, layers: list[LayerDef], pairs
                   ) -> tuple[tuple[LayerDef, ...], dict[int, list[int]]]:
    """Give each layer the SharedWeights entries recorded on its incoming weights (spec 4.3),
    with, for each layer's index, the weight each entry came from (``graph_error``)."""
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
