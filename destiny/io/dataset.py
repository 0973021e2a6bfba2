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

from dataclasses import dataclass

import numpy as np

from destiny.errors import DataFormatError
from destiny.sparse import gather_ranges

# Dataset attribute bits and data types (spec 2.3, 11).
SPARSE, BOOLEAN, INDEXED, WEIGHTED = 1, 2, 64, 128
UINT, INT, FLOAT, DOUBLE, UCHAR, CHAR = 0, 1, 4, 5, 8, 9
_SUPPORTED_TYPES = {UINT: "UInt", INT: "Int", FLOAT: "Float", DOUBLE: "Double",
                    UCHAR: "UChar", CHAR: "Char"}

WIDTH_MULTIPLE = 128


def round_up_width(n_features: int) -> int:
    """``width`` = number of feature-index entries rounded up to a multiple of 128 (quirk 10.2)."""
    return ((n_features + WIDTH_MULTIPLE - 1) // WIDTH_MULTIPLE) * WIDTH_MULTIPLE


@dataclass
class SparseDataset:
    """One sparse dataset as CSR arrays.

    ``indptr`` (int64, rows + 1), ``indices`` (int32 feature indices < ``width``), and
    ``values`` (float32, or None for indicator data where every listed feature is 1).
    ``weights`` holds per-example weights when the dataset is Weighted, else None.
    """

    name: str
    width: int
    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray | None = None
    weights: np.ndarray | None = None

    @property
    def rows(self) -> int:
        return len(self.indptr) - 1

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])

    @property
    def indicator(self) -> bool:
        return self.values is None


def write_dataset(path, ds: SparseDataset) -> None:
    """Write ``ds`` exactly as DSSTNE's generateNetCDF does (spec 1.5)."""
    import netCDF4

    if ds.rows == 0 or ds.nnz == 0:
        # DSSTNE's loader refuses both (spec 2.4); netCDF would make a 0 dimension unlimited.
        raise DataFormatError(path, "the dataset would have no examples or no entries, which "
                              "DSSTNE's loader refuses; check the input.")
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.setncattr("datasets", np.uint32(1))
        nc.setncattr("name0", ds.name)
        nc.setncattr("attributes0", np.uint32(SPARSE | BOOLEAN if ds.indicator else SPARSE))
        nc.setncattr("kind0", np.uint32(0))
        nc.setncattr("dataType0", np.uint32(UINT if ds.indicator else FLOAT))
        nc.setncattr("dimensions0", np.uint32(1))
        nc.setncattr("width0", np.uint32(ds.width))
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
        return [_text(nc, path, f"name{n}") for n in range(_count(nc, path))]


def read_dataset(path, name: str | None = None) -> SparseDataset:
    """Read one sparse dataset (the first, or the one called ``name``) as CSR arrays."""
    with _open(path) as nc:
        count = _count(nc, path)
        names = [_text(nc, path, f"name{n}") for n in range(count)]
        if name is None:
            n = 0
        elif name in names:
            n = names.index(name)
        else:
            raise DataFormatError(path, f"has no dataset named {name!r}; it holds "
                                  f"{', '.join(map(repr, names))}. The DataSet of a network "
                                  "layer must equal the -d name given to generate-netcdf.")
        return _read_sparse(nc, path, n, names[n])


def _read_sparse(nc, path, n: int, name: str) -> SparseDataset:
    attrs = _uint(nc, path, f"attributes{n}")
    dtype_name = f"dataType{n}" if f"dataType{n}" in nc.ncattrs() else f"datatype{n}"
    dtype = _uint(nc, path, dtype_name)
    dims = _uint(nc, path, f"dimensions{n}")
    if not attrs & SPARSE:
        raise DataFormatError(path, f"dataset {name!r} is dense (attributes{n} = {attrs} lacks "
                              "the Sparse bit); Destiny reads sparse datasets only. Write it "
                              "with generate-netcdf.")
    if dtype not in _SUPPORTED_TYPES:
        raise DataFormatError(path, f"dataset {name!r} has {dtype_name} = {dtype}; expected one "
                              f"of {sorted(_SUPPORTED_TYPES)} ({', '.join(_SUPPORTED_TYPES.values())}).")
    if not 1 <= dims <= 3:
        raise DataFormatError(path, f"dataset {name!r} has dimensions{n} = {dims}; expected 1 to 3.")
    width = _uint(nc, path, f"width{n}")
    height = _uint(nc, path, f"height{n}") if dims > 1 else 1
    length = _uint(nc, path, f"length{n}") if dims > 2 else 1
    stride = width * height * length
    if stride == 0:
        raise DataFormatError(path, f"dataset {name!r} has a zero width, height or length.")
    start = _var(nc, path, f"sparseStart{n}").astype(np.int64)
    end = _var(nc, path, f"sparseEnd{n}").astype(np.int64)
    index = _var(nc, path, f"sparseIndex{n}")
    data = None
    if not attrs & BOOLEAN:
        data = _var(nc, path, f"sparseData{n}").astype(np.float32)
        if dtype == UCHAR:
            data /= np.float32(256.0)  # DSSTNE scales 8-bit sparse values (spec 2.3)
        elif dtype == CHAR:
            data /= np.float32(128.0)
    if len(start) != len(end) or len(start) == 0:
        raise DataFormatError(path, f"dataset {name!r} has {len(start)} sparseStart{n} and "
                              f"{len(end)} sparseEnd{n} entries; expected the same number, > 0.")
    if np.any(end < start) or np.any(start < 0) or (len(end) and end.max() > len(index)):
        raise DataFormatError(path, f"dataset {name!r} has sparseStart{n}/sparseEnd{n} ranges "
                              f"outside 0..{len(index)}; the file is damaged.")
    if len(index) and int(index.max()) >= stride:
        bad = int(index.max())
        raise DataFormatError(path, f"dataset {name!r} has feature index {bad}, but its width is "
                              f"{stride}; every index must be < width. The file is damaged or "
                              "was written with another feature index.")
    lengths = end - start
    if attrs & INDEXED:
        rows = _var(nc, path, f"index{n}").astype(np.int64)
        if len(rows) and (rows.min() < 0 or rows.max() >= len(start)):
            raise DataFormatError(path, f"dataset {name!r} has index{n} values outside 0..{len(start) - 1}.")
        start, lengths = start[rows], lengths[rows]
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
    weights = None
    if attrs & WEIGHTED:
        weights = _var(nc, path, f"dataWeight{n}").astype(np.float32)
        if len(weights) != len(indptr) - 1:
            raise DataFormatError(path, f"dataset {name!r} has {len(weights)} dataWeight{n} "
                                  f"entries for {len(indptr) - 1} examples.")
    return SparseDataset(name=name, width=stride, indptr=indptr, indices=index.astype(np.int32),
                         values=data,
                         weights=weights)


def _open(path):
    import netCDF4

    try:
        return netCDF4.Dataset(path, "r")
    except FileNotFoundError:
        raise DataFormatError(path, "the dataset file does not exist; create it with "
                              "generate-netcdf.") from None
    except OSError as e:
        raise DataFormatError(path, f"is not a readable NetCDF file ({e}); create it with "
                              "generate-netcdf.") from None


def _count(nc, path) -> int:
    count = _uint(nc, path, "datasets")
    if count < 1:
        raise DataFormatError(path, "the global attribute 'datasets' is 0; expected at least 1.")
    return count


def _attr(nc, path, name):
    if name not in nc.ncattrs():
        raise DataFormatError(path, f"lacks the global attribute {name!r}, which every DSSTNE "
                              "dataset file has; is it a dataset written by generate-netcdf?")
    return nc.getncattr(name)


def _uint(nc, path, name) -> int:
    value = np.asarray(_attr(nc, path, name))
    if value.size != 1 or not np.issubdtype(value.dtype, np.integer) or int(value.flat[0]) < 0:
        raise DataFormatError(path, f"the attribute {name!r} is {value!r}; expected one "
                              "non-negative integer.")
    return int(value.flat[0])


def _text(nc, path, name) -> str:
    value = _attr(nc, path, name)
    if not isinstance(value, str):
        raise DataFormatError(path, f"the attribute {name!r} is {value!r}; expected text.")
    return value


def _var(nc, path, name) -> np.ndarray:
    if name not in nc.variables:
        raise DataFormatError(path, f"lacks the variable {name!r}; the dataset is incomplete.")
    v = nc.variables[name]
    v.set_auto_mask(False)
    return np.asarray(v[:])
