"""Dataset NetCDF files in DSSTNE's layout (spec 1.5 and 2), to and from CSR arrays.

Writing follows ``generateNetCDF`` object for object: NetCDF-4, the global uint attributes
``datasets``, ``name0`` (text), ``attributes0``, ``kind0``, ``dataType0``, ``dimensions0``,
``width0``; dimensions ``examplesDim0`` and ``sparseDataDim0``; uint variables
``sparseStart0``, ``sparseEnd0``, ``sparseIndex0`` and, for analog data only, float
``sparseData0``; no variable attributes and no fill values. A DSSTNE user's files and ours
are interchangeable.

Reading accepts what DSSTNE's loader accepts for sparse data: several datasets per file,
``dataType<n>`` or DSSTNE's own lower-case ``datatype<n>`` (quirk 10.8), uint or uint64 row
offsets, rows that are not contiguous, and the Indexed and Weighted attributes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from destiny.errors import (DataFormatError, DestinyError, in_file, memory_limit_may_be_why,
                            netcdf_reads, open_files_failure)
from destiny.limits import MAX_INDEX
from destiny.sparse import gather_ranges
from destiny.wording import counted, shown

# Dataset attribute bits and data types (spec 2.3, 11).
SPARSE, BOOLEAN, IGNORE_ZERO, INDEXED, WEIGHTED = 1, 2, 32, 64, 128
UINT, INT, FLOAT, DOUBLE, UCHAR, CHAR = 0, 1, 4, 5, 8, 9
_SUPPORTED_TYPES = {UINT: "UInt", INT: "Int", FLOAT: "Float", DOUBLE: "Double",
                    UCHAR: "UChar", CHAR: "Char"}

WIDTH_MULTIPLE = 128

# What to do about a dataset file that is damaged or was written by another tool.
_REWRITE = "write it again with generate-netcdf"
_DAMAGED = f"the file is damaged; {_REWRITE}"


def round_up_width(n_features: int) -> int:
    """``width`` = number of feature-index entries rounded up to a multiple of 128 (quirk 10.2)."""
    return ((n_features + WIDTH_MULTIPLE - 1) // WIDTH_MULTIPLE) * WIDTH_MULTIPLE


@dataclass
class SparseDataset:
    """One sparse dataset as CSR arrays.

    ``indptr`` (int64, rows + 1), ``indices`` (int32 feature indices < ``width``), and
    ``values`` (float32, or None for indicator data where every listed feature is 1).
    ``weights`` holds per-example weights when the dataset is Weighted, else None.
    ``columns = (lo, hi)`` when only those feature columns were read (a rank's shard, spec
    7): ``indices`` then hold feature - lo. ``ignore_zero``: the SparseIgnoreZero bit (spec
    2.3); as targets, only the listed entries count in the loss (no zero targets).
    """

    name: str
    width: int
    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray | None = None
    weights: np.ndarray | None = None
    columns: tuple[int, int] | None = None
    ignore_zero: bool = False

    @property
    def offset(self) -> int:
        """The feature index of ``indices`` 0: the first column held."""
        return self.columns[0] if self.columns else 0

    @property
    def rows(self) -> int:
        return len(self.indptr) - 1

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])

    @property
    def indicator(self) -> bool:
        return self.values is None


def write_dataset(path, ds: SparseDataset, index: tuple[int, str] | None = None,
                  rows: str | None = None) -> None:
    """Write ``ds`` exactly as DSSTNE's generateNetCDF does (spec 1.5).

    ``index``: the feature index's (entries, ``index_digest``), written after DSSTNE's
    attributes as ``destiny_indexEntries0`` and ``destiny_indexDigest0`` (DSSTNE reads its
    own attributes by name and never sees them); ``rows``: the ``rows_digest`` of the
    samples, as ``destiny_rowsDigest0``. ``ds.weights`` are not written (generateNetCDF writes
    no Weighted data, spec 2.5, and nothing Destiny writes has weights).
    """
    import netCDF4

    if ds.rows == 0 or ds.nnz == 0:
        # DSSTNE's loader refuses both (spec 2.4); netCDF would make a 0 dimension unlimited.
        raise DataFormatError(path, "the dataset would have no examples or no entries, which "
                              "DSSTNE's loader refuses; check the input.")
    with in_file(path, "writing"), netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.setncattr("datasets", np.uint32(1))
        set_attribute(nc, "name0", ds.name)
        nc.setncattr("attributes0", np.uint32(SPARSE | (BOOLEAN if ds.indicator else 0)
                                              | (IGNORE_ZERO if ds.ignore_zero else 0)))
        nc.setncattr("kind0", np.uint32(0))
        nc.setncattr("dataType0", np.uint32(UINT if ds.indicator else FLOAT))
        nc.setncattr("dimensions0", np.uint32(1))
        nc.setncattr("width0", np.uint32(ds.width))
        if index is not None:
            nc.setncattr("destiny_indexEntries0", np.uint32(index[0]))
            nc.setncattr("destiny_indexDigest0", index[1])
        if rows is not None:
            nc.setncattr("destiny_rowsDigest0", rows)
        nc.createDimension("examplesDim0", ds.rows)
        nc.createDimension("sparseDataDim0", ds.nnz)
        start = nc.createVariable("sparseStart0", "u4", ("examplesDim0",), fill_value=False)
        end = nc.createVariable("sparseEnd0", "u4", ("examplesDim0",), fill_value=False)
        index = nc.createVariable("sparseIndex0", "u4", ("sparseDataDim0",), fill_value=False)
        start[:] = ds.indptr[:-1].astype(np.uint32)
        end[:] = ds.indptr[1:].astype(np.uint32)
        index[:] = ds.indices.astype(np.uint32)
        if not ds.indicator:
            data = nc.createVariable("sparseData0", "f4", ("sparseDataDim0",), fill_value=False)
            data[:] = ds.values.astype(np.float32)


def dataset_names(path) -> list[str]:
    """The names of the datasets in a DSSTNE dataset file, in file order."""
    with _open(path) as nc:
        return _names(nc, path)


def read_dataset(path, name: str | None = None, *, columns: tuple[int, int] | None = None
                 ) -> SparseDataset:
    """Read one sparse dataset (the first, or the one called ``name``) as CSR arrays.

    With ``columns = (lo, hi)`` only the entries of features lo <= i < hi are kept, with
    indices re-based to i - lo (``offset`` = lo): a rank's shard of a model-parallel layer
    (spec 7). The entries are then read a block at a time, so a rank never holds the whole
    dataset.
    """
    with _open(path) as nc:
        names = _names(nc, path)
        if name is None:
            n = 0
        elif name in names:
            n = names.index(name)
        else:
            raise DataFormatError(path, f"has no dataset named {name!r}; it holds "
                                  f"{', '.join(map(repr, names))}. The DataSet of a network "
                                  "layer must equal the -d name given to generate-netcdf.")
        return _read_sparse(nc, path, n, names[n], columns)


def dataset_widths(path) -> dict[str, int]:
    """The width of every dataset in a file, by name, without reading the entries."""
    with _open(path) as nc:
        return {name: _header(nc, path, n, name)[2] for n, name in enumerate(_names(nc, path))}


class DatasetSummary(NamedTuple):
    """What a dataset file says of one dataset without reading its entries."""

    entries: int | None  # None: a dense dataset
    index: tuple[int, str] | None  # the feature index's (entries, digest) it was written with
    rows: str | None  # the ``rows_digest`` of its samples
    # (index and rows: None where the file does not record them, as DSSTNE's files)


def dataset_summaries(path) -> dict[str, DatasetSummary]:
    """The ``DatasetSummary`` of every dataset in a file, by name (``write_dataset``'s
    ``index`` and ``rows``)."""
    with _open(path) as nc:
        attrs = set(nc.ncattrs())
        found = {}
        for n, name in enumerate(_names(nc, path)):
            index = None
            if {f"destiny_indexEntries{n}", f"destiny_indexDigest{n}"} <= attrs:
                index = (_uint(nc, path, f"destiny_indexEntries{n}", _DAMAGED),
                         _text(nc, path, f"destiny_indexDigest{n}", _DAMAGED))
            rows = (_text(nc, path, f"destiny_rowsDigest{n}", _DAMAGED)
                    if f"destiny_rowsDigest{n}" in attrs else None)
            entries = nc.dimensions.get(f"sparseDataDim{n}")  # (None: a dense dataset)
            found[name] = DatasetSummary(entries and len(entries), index, rows)
        return found


# What a dataset's contents are: its attributes and its variables as stored (spec 2.3, 2.4).
_CONTENT_ATTRIBUTES = ("attributes", "dataType", "datatype", "dimensions", "width", "height",
                       "length")
_CONTENT_VARIABLES = ("sparseStart", "sparseEnd", "index", "sparseIndex", "sparseData",
                      "dataWeight")


def contents_digests(path, names) -> dict[str, str]:
    """A digest of each of the datasets ``names`` of a file, of everything that decides what
    it holds (its attributes and variables as stored), read a block at a time.

    ``train`` records them in its checkpoints, so that ``--resume`` tells data changed in
    place from the data the run started on even where the sizes are the same. Call it on a
    file ``read_dataset`` has read (the variables are then known to be one-dimensional).
    """
    with _open(path) as nc:
        stored = _names(nc, path)
        attrs = set(nc.ncattrs())
        digests = {}
        for name in names:
            n = stored.index(name)
            h = hashlib.sha256()  # (SHA-NI: about 1.8 GB/s here; blake2b 0.9)
            for key in (f"{a}{n}" for a in _CONTENT_ATTRIBUTES):
                if key in attrs:
                    h.update(f"{key}={_stable_repr(nc.getncattr(key))};".encode())
            for key in (f"{v}{n}" for v in _CONTENT_VARIABLES):
                if key in nc.variables:
                    v = _variable(nc, path, key)
                    h.update(f"{key}:{v.dtype.str}:{v.shape[0]};".encode())
                    for a in range(0, v.shape[0], _Entries.BLOCK):
                        h.update(np.ascontiguousarray(v[a:a + _Entries.BLOCK]))
            digests[name] = h.hexdigest()[:32]
        return digests


def _stable_repr(value) -> str:
    """An attribute's value as numpy 2 writes a scalar (``np.uint32(3)``), whatever numpy's
    version and print options (numpy 1, or ``legacy`` printing, write ``3``): a checkpoint's
    digest must not change with them."""
    if isinstance(value, np.generic):
        return f"np.{type(value).__name__}({value.item()!r})"
    return repr(value)


def _header(nc, path, n: int, name: str) -> tuple[int, int, int]:
    """(attributes, data type, width x height x length) of dataset n, checked."""
    attrs = _uint(nc, path, f"attributes{n}")
    dtype_name = f"dataType{n}" if f"dataType{n}" in nc.ncattrs() else f"datatype{n}"
    dtype = _uint(nc, path, dtype_name)
    dims = _uint(nc, path, f"dimensions{n}")
    if not attrs & SPARSE:
        raise DataFormatError(path, f"dataset {name!r} is dense (attributes{n} = {attrs} lacks "
                              "the Sparse bit); Destiny reads sparse datasets only. Write it "
                              "with generate-netcdf.")
    if dtype not in _SUPPORTED_TYPES:
        names = ", ".join(_SUPPORTED_TYPES.values())
        raise DataFormatError(path, f"dataset {name!r} has {dtype_name} = {dtype}; expected one "
                              f"of {sorted(_SUPPORTED_TYPES)} ({names}). The file is "
                              f"damaged or holds a type Destiny does not train on; {_REWRITE}.")
    if not 1 <= dims <= 3:
        raise DataFormatError(path, f"dataset {name!r} has dimensions{n} = {dims}; expected 1 "
                              f"to 3. {_DAMAGED.capitalize()}.")
    width = _uint(nc, path, f"width{n}")
    height = _uint(nc, path, f"height{n}") if dims > 1 else 1
    length = _uint(nc, path, f"length{n}") if dims > 2 else 1
    stride = width * height * length
    if stride == 0:
        raise DataFormatError(path, f"dataset {name!r} has a zero width, height or length "
                              f"(width{n} x height{n} x length{n} = 0), so no feature fits "
                              f"in it. {_DAMAGED.capitalize()}.")
    if stride > MAX_INDEX:
        raise DataFormatError(path, f"dataset {name!r} has width x height x length = {stride}; "
                              f"Destiny holds at most {MAX_INDEX} features (int32 indices), and "
                              "a layer that wide could not be trained anyway. The file is "
                              f"damaged or was not written for Destiny; {_REWRITE}.")
    return attrs, dtype, stride


def _read_sparse(nc, path, n: int, name: str, columns) -> SparseDataset:
    attrs, dtype, stride = _header(nc, path, n, name)
    start = _var(nc, path, f"sparseStart{n}", integer=True).astype(np.int64)
    end = _var(nc, path, f"sparseEnd{n}", integer=True).astype(np.int64)
    n_entries = _vector(nc, path, f"sparseIndex{n}", integer=True).size
    if len(start) != len(end) or len(start) == 0:
        raise DataFormatError(path, f"dataset {name!r} has {len(start)} sparseStart{n} and "
                              f"{len(end)} sparseEnd{n} entries; expected the same number, > 0. "
                              f"{_DAMAGED.capitalize()}.")
    if np.any(end < start) or np.any(start < 0) or end.max() > n_entries:
        raise DataFormatError(path, f"dataset {name!r} has sparseStart{n}/sparseEnd{n} ranges "
                              f"outside 0..{n_entries}; {_DAMAGED}.")
    lengths = end - start
    if attrs & INDEXED:
        rows = _var(nc, path, f"index{n}", integer=True).astype(np.int64)
        if len(rows) and (rows.min() < 0 or rows.max() >= len(start)):
            raise DataFormatError(path, f"dataset {name!r} has index{n} values outside "
                                  f"0..{len(start) - 1}; {_DAMAGED}.")
        start, lengths = start[rows], lengths[rows]
    if not lengths.any():
        # As write_dataset and DSSTNE's loader (spec 2.4): nothing to train on or to predict.
        stored = f" (sparseDataDim{n} = 0)" if n_entries == 0 else ""
        verb = "lists" if len(lengths) == 1 else "list"
        raise DataFormatError(path, f"dataset {name!r} has no entries: all "
                              f"{counted(len(lengths), 'example')} {verb} no feature{stored}, "
                              "which "
                              "DSSTNE's loader refuses and generate-netcdf never writes. The file "
                              f"is damaged or its input listed no feature; {_REWRITE} from "
                              "samples that list features.")
    scale = {UCHAR: 256.0, CHAR: 128.0}.get(dtype)  # DSSTNE scales 8-bit values (spec 2.3)
    entries = _Entries(nc, path, n, name, stride, analog=not attrs & BOOLEAN, scale=scale,
                       examples=(start, lengths))
    if columns is None:
        index, data = entries.read(0, n_entries)
        indptr = np.zeros(len(start) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        if not (start[0] == 0 and np.array_equal(start[1:], indptr[1:-1])):
            # Rows are not stored back to back (DSSTNE allows any order, spec 2.4): gather them.
            indptr, take = gather_ranges(start, lengths)
            index = index[take]
            data = None if data is None else data[take]
        elif len(index) != indptr[-1]:
            index = index[: indptr[-1]]
            data = None if data is None else data[: indptr[-1]]
    else:
        indptr, index, data = entries.read_columns(start, lengths, *columns)
    weights = None
    if attrs & WEIGHTED:
        with np.errstate(over="ignore", invalid="ignore"):  # (an Inf is refused below)
            weights = _var(nc, path, f"dataWeight{n}").astype(np.float32)
        if len(weights) != len(indptr) - 1:
            raise DataFormatError(path, f"dataset {name!r} has {len(weights)} dataWeight{n} "
                                  f"entries for {len(indptr) - 1} examples; expected one "
                                  f"weight per example. {_DAMAGED.capitalize()}.")
        bad = np.flatnonzero(~np.isfinite(weights))
        if len(bad):
            raise DataFormatError(path, f"dataset {name!r} has the weight "
                                  f"{_number(weights[bad[0]])} for example {bad[0]} in "
                                  f"dataWeight{n}; {_FINITE}")
    return SparseDataset(name=name, width=stride, indptr=indptr, indices=index.astype(np.int32),
                         values=data, weights=weights, columns=columns,
                         ignore_zero=bool(attrs & IGNORE_ZERO))


class _Entries:
    """The entries of dataset n (feature indices, values), read whole or a block at a time."""

    BLOCK = 1 << 23  # entries per read when keeping some columns: 32 MB of indices

    def __init__(self, nc, path, n, name, stride, *, analog: bool, scale, examples):
        self.path, self.name, self.stride, self.scale = path, name, stride, scale
        self.examples = examples  # (start, lengths) of each example's entries
        self.index = _vector(nc, path, f"sparseIndex{n}", integer=True)
        self.data = _vector(nc, path, f"sparseData{n}") if analog else None
        self.where = f"sparseIndex{n}", f"sparseData{n}"
        if self.data is not None and self.data.size != self.index.size:
            raise DataFormatError(path, f"dataset {name!r} has {self.data.size} sparseData{n} "
                                  f"values for {self.index.size} sparseIndex{n} entries; "
                                  f"expected one value per entry. The file is damaged; "
                                  f"{_REWRITE}.")
        self.signed = self.index.dtype.kind == "i"
        self.floating = self.data is not None and self.data.dtype.kind == "f"

    def read(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray | None]:
        index = np.asarray(self.index[a:b])
        if len(index) and (int(index.max()) >= self.stride
                           or (self.signed and int(index.min()) < 0)):
            at = int(np.flatnonzero((index < 0) | (index >= self.stride))[0])
            raise DataFormatError(self.path, f"dataset {self.name!r} has feature index "
                                  f"{int(index[at])} in {self.where[0]} ({self._entry(a + at)})"
                                  f", but its width is {self.stride}; every index must be 0 to "
                                  f"{self.stride - 1}. The file is damaged or was written with "
                                  f"another feature index; {_REWRITE}.")
        data = None
        if self.data is not None:
            stored = np.asarray(self.data[a:b])
            with np.errstate(over="ignore", invalid="ignore"):  # (an Inf is refused below)
                data = stored.astype(np.float32)
            if self.floating and not np.isfinite(data).all():
                at = int(np.flatnonzero(~np.isfinite(data))[0])
                raise DataFormatError(self.path, f"dataset {self.name!r} has the value "
                                      f"{_number(stored[at])} in {self.where[1]} "
                                      f"({self._entry(a + at)}); {_FINITE}")
            if self.scale is not None:
                data /= np.float32(self.scale)
        return index, data

    def _entry(self, position: int) -> str:
        """'entry 5, example 0': where a bad entry is (cheap only once: on an error)."""
        start, lengths = self.examples
        mine = np.flatnonzero((start <= position) & (position < start + lengths))
        return f"entry {position}" + (f", example {mine[0]}; both count from 0" if len(mine)
                                      else ", in no example; entries count from 0")

    def read_columns(self, start, lengths, lo: int, hi: int):
        """CSR of the entries with lo <= index < hi (indices minus lo), rows as listed.
        (``_read_sparse`` asks only where the dataset has entries: there is a block.)"""
        positions, kept, values = [], [], []
        for a in range(0, self.index.size, self.BLOCK):
            index, data = self.read(a, min(a + self.BLOCK, self.index.size))
            mine = np.flatnonzero((index >= lo) & (index < hi))
            positions.append(mine + a)
            kept.append((index[mine] - lo).astype(np.int32))
            if data is not None:
                values.append(data[mine])
        positions = np.concatenate(positions)
        first = np.searchsorted(positions, start)
        counts = np.searchsorted(positions, start + lengths) - first
        indptr, take = gather_ranges(first, counts)
        index = np.concatenate(kept)[take]
        data = np.concatenate(values)[take] if values else None  # (None: indicator data)
        return indptr, index, data


@contextlib.contextmanager
def _open(path):
    """The dataset file ``path``, open for the ``with`` block, in which the NetCDF library's
    failure to read it (a damaged file) is a ``DataFormatError`` naming it."""
    with netcdf_reads(path, f"; {_DAMAGED}."), _opened(path) as nc:  # (also as it opens)
        yield nc


def _opened(path):
    import netCDF4

    if not os.fspath(path):  # (NetCDF's word for it: 'Malformed URL')
        raise DestinyError("the dataset file's path is empty; give the path of a dataset file "
                           "written by generate-netcdf.")
    if os.path.isdir(path):  # (NetCDF's: 'Unknown file format')
        raise DataFormatError(path, "is a directory; expected a dataset file written by "
                              "generate-netcdf (give the .nc file's path).")
    try:
        return netCDF4.Dataset(path, "r")
    except FileNotFoundError:
        raise DataFormatError(path, "the dataset file does not exist; create it with "
                              "generate-netcdf.") from None
    except OSError as e:
        raise open_files_failure(e, path) or DataFormatError(
            path, f"is not a readable NetCDF file ({e}); create it with generate-netcdf."
            + memory_limit_may_be_why(path)) from None


def _names(nc, path) -> list[str]:
    """The names of the datasets of an open file, in file order (``datasets`` of them, dataset
    n called ``name<n>``, spec 2.1)."""
    count = _uint(nc, path, "datasets")
    if count < 1:
        raise DataFormatError(path, "the global attribute 'datasets' is 0; expected at least "
                              f"1. The file holds no dataset; {_REWRITE}.")
    return [_text(nc, path, f"name{n}") for n in range(count)]


def _attr(nc, path, name):
    if name not in nc.ncattrs():
        if "layers" in nc.ncattrs():  # (a network's attribute: -n and -i swapped, say)
            raise DataFormatError(path, "is a network file (written by train), not a dataset; "
                                  "give the dataset files generate-netcdf wrote (train's -i and "
                                  "-o), and check that the flags are not swapped.")
        raise DataFormatError(path, f"lacks the global attribute {name!r}, which every DSSTNE "
                              "dataset file has; is it a dataset written by generate-netcdf?")
    return nc.getncattr(name)


def _uint(nc, path, name, then: str | None = None) -> int:
    stored = _attr(nc, path, name)
    value = np.asarray(stored)
    if value.size != 1 or not np.issubdtype(value.dtype, np.integer) or int(value.flat[0]) < 0:
        raise DataFormatError(path, f"the attribute {name!r} is {shown(stored)}; expected one "
                              "non-negative integer" + (f"; {then}." if then else "."))
    return int(value.flat[0])


def set_attribute(nc, name: str, value) -> None:
    """``nc.setncattr``, with text written as NC_CHAR, as DSSTNE writes and reads it (spec 1.5,
    4): netCDF4-python writes a ``str`` that is not ASCII as NC_STRING, which DSSTNE's
    reader (netcdf-cxx4, reading text into a ``std::string``) cannot read."""
    nc.setncattr(name, value.encode("utf-8") if isinstance(value, str) else value)


def _text(nc, path, name, then: str | None = None) -> str:
    value = _attr(nc, path, name)
    if not isinstance(value, str):
        raise DataFormatError(path, f"the attribute {name!r} is {shown(value)}; expected text"
                              + (f"; {then}." if then else "."))
    return value


def _variable(nc, path, name):
    if name not in nc.variables:
        raise DataFormatError(path, f"lacks the variable {name!r}; the dataset is incomplete "
                              f"(the file was cut short or damaged); {_REWRITE}.")
    v = nc.variables[name]
    v.set_auto_mask(False)
    return v


def _vector(nc, path, name, *, integer: bool = False):
    """The variable ``name``, checked to be one-dimensional and of integer (``integer``) or
    numeric type; DSSTNE writes uint offsets and indices and float values (spec 1.5, 2.4)."""
    v = _variable(nc, path, name)
    dtype = v.dtype if isinstance(v.dtype, np.dtype) else None  # (str, VLen, ...: text or other)
    kinds = "iu" if integer else "iuf"
    if dtype is None or dtype.kind not in kinds or v.ndim != 1:
        stored = (f"has {v.ndim} dimensions" if v.ndim != 1 else "is stored as " + (
            dtype.name if dtype is not None else "text" if v.dtype is str else "a non-number"))
        expected = "integers (DSSTNE writes uint)" if integer else "numbers"
        raise DataFormatError(path, f"the variable {name!r} {stored}; expected one dimension of "
                              f"{expected}. The file is damaged or was not written as a DSSTNE "
                              f"dataset; {_REWRITE}.")
    return v


def _var(nc, path, name, *, integer: bool = False) -> np.ndarray:
    return np.asarray(_vector(nc, path, name, integer=integer)[:])


_FINITE = ("datasets hold float32 numbers, and NaN, Inf or a value beyond float32's range "
           "(about 3.4e38) cannot be trained on. The file is damaged or its writer let a bad "
           f"value through; fix the value at its source and {_REWRITE}.")


def _number(value) -> str:
    """A stored value as text, its type's precision (``nan``, ``inf``, ``1e+300``)."""
    return repr(value.item()) if hasattr(value, "item") else repr(value)
