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
