"""The raw NetCDF type of attributes and variables, read through libnetcdf with ctypes.

netCDF4-python hides the difference between NC_CHAR and NC_STRING text, and between
attribute integer widths, both of which decide whether DSSTNE can load a file.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os

import netCDF4

NC_CHAR, NC_INT, NC_FLOAT, NC_UINT, NC_UINT64, NC_STRING = 2, 4, 5, 9, 11, 12
NC_GLOBAL = -1


def _library():
    libs = os.path.join(os.path.dirname(os.path.dirname(netCDF4.__file__)), "netcdf4.libs")
    found = glob.glob(os.path.join(libs, "libnetcdf*.so*")) or [ctypes.util.find_library("netcdf")]
    if not found or found[0] is None:
        return None
    return ctypes.CDLL(found[0])


LIB = _library()


def types(path) -> dict[str, int]:
    """{global attribute or variable name: NetCDF type code} for ``path``."""
    ncid = ctypes.c_int()
    assert LIB.nc_open(os.fsencode(path), 0, ctypes.byref(ncid)) == 0
    try:
        natts, nvars = ctypes.c_int(), ctypes.c_int()
        LIB.nc_inq_natts(ncid, ctypes.byref(natts))
        LIB.nc_inq_nvars(ncid, ctypes.byref(nvars))
        out = {}
        name = ctypes.create_string_buffer(257)
        xtype, length = ctypes.c_int(), ctypes.c_size_t()
        for i in range(natts.value):
            LIB.nc_inq_attname(ncid, NC_GLOBAL, i, name)
            LIB.nc_inq_att(ncid, NC_GLOBAL, name, ctypes.byref(xtype), ctypes.byref(length))
            out[name.value.decode()] = xtype.value
        for v in range(nvars.value):
            LIB.nc_inq_varname(ncid, v, name)
            LIB.nc_inq_vartype(ncid, v, ctypes.byref(xtype))
            out[name.value.decode()] = xtype.value
        return out
    finally:
        LIB.nc_close(ncid)


def attributes_undecodable(monkeypatch, damaged) -> None:
    """Make the file ``damaged`` one whose attributes HDF5 cannot decode, as bytes damaged in
    its attribute heap do (found by fuzzing, not reproducible by a fixed edit): netCDF4's
    ``ncattrs`` raises AttributeError("NetCDF: Can't open HDF5 attribute") for it. (A proxy:
    a subclass of netCDF4.Dataset fails in its own deallocation.)"""
    real = netCDF4.Dataset

    class Undecodable:
        def __init__(self, nc):
            self._nc = nc

        def ncattrs(self):
            raise AttributeError("NetCDF: Can't open HDF5 attribute")

        def __getattr__(self, name):
            return getattr(self._nc, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self._nc.__exit__(*exc)

    def opened(path, *args, **kwargs):
        nc = real(path, *args, **kwargs)
        return Undecodable(nc) if os.path.samefile(path, damaged) else nc

    monkeypatch.setattr(netCDF4, "Dataset", opened)


def stored_compressed(name: str):
    """An edit (for a file open to append) that stores the variable ``name`` compressed, as
    another tool may: its chunk, written last, then ends the file, where damage to it is bytes
    HDF5 fails to inflate ("NetCDF: HDF error" as the variable is read)."""
    def edit(nc):
        values = nc.variables[name][:]
        nc.renameVariable(name, name + "_plain")
        nc.createVariable(name, nc.variables[name + "_plain"].dtype,
                          nc.variables[name + "_plain"].dimensions, zlib=True)[:] = values
    return edit


def damage_end(path, size: int = 32) -> None:
    """Overwrite the last ``size`` bytes of the file ``path`` (its last chunk of data)."""
    data = bytearray(path.read_bytes())
    data[-size:] = b"\xff" * size
    path.write_bytes(bytes(data))


def damage_global_heap(path) -> None:
    """Overwrite 4 bytes of the file's global heap (the 'GCOL' collection that holds its
    dimension lists), which netCDF reads as it opens the file, past the header: netCDF4 then
    raises RuntimeError('NetCDF: HDF error'), not the OSError of a file it cannot open."""
    data = bytearray(path.read_bytes())
    at = data.index(b"GCOL") + 32
    data[at:at + 4] = b"\xff" * 4
    path.write_bytes(bytes(data))
