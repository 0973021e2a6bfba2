"""Destiny: a DSSTNE-compatible toolchain for sparse recommendation networks.

The library raises ``destiny.errors.DestinyError`` for bad input and never prints or exits;
the command line lives in ``destiny.cli``. Importing ``destiny`` loads no CUDA and no MPI.
"""

__version__ = "0.1.0"
