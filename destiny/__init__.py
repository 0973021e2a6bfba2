"""Destiny: a DSSTNE-compatible toolchain for sparse recommendation networks.

The library raises ``destiny.errors.DestinyError`` for bad input and never prints or exits;
the command line lives in ``destiny.cli``. Importing ``destiny`` loads no CUDA and no MPI.
"""

import os as _os

__version__ = "0.1.0"

# A training step alternates BLAS products (OpenBLAS's threads) with numba's parallel loops
# (OpenMP threads). By default both spin-wait for a while after their parallel regions, so on
# a machine with few cores each steals the cores the other needs next: measured on 2 cores,
# 27% of a benchmark-network step (docs/benchmarks.md, run 5). Both read these variables once,
# when their libraries load, so they are set here, before NumPy or numba is imported through
# Destiny; a value the user set is kept.
THREAD_WAIT_DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE", "OPENBLAS_THREAD_TIMEOUT": "4"}
SET_BY_DESTINY = {name for name in THREAD_WAIT_DEFAULTS if name not in _os.environ}
for _name, _value in THREAD_WAIT_DEFAULTS.items():
    _os.environ.setdefault(_name, _value)
