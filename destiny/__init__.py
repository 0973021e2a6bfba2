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

# Under mpiexec, the processes on one machine share its cores: each takes its share of threads
# (launcher.threads_per_rank), read, like the variables above, as the libraries load.
from destiny.launcher import THREAD_COUNT_VARS as _THREAD_COUNT_VARS  # noqa: E402
from destiny.launcher import threads_per_rank as _threads_per_rank  # noqa: E402

# (numba loaded before Destiny has read its thread count, and refuses another once its threads
# have started: the program that loaded it chose)
_share = None if "numba" in __import__("sys").modules else _threads_per_rank()
if _share is not None:
    for _name in _THREAD_COUNT_VARS:
        _os.environ[_name] = str(_share)
        SET_BY_DESTINY.add(_name)

# numba's cache of the compiled kernels goes to a directory named for their source, so that
# an edit to one module can never leave another module's kernel compiled against its old
# version (destiny/_numba_cache.py). numba reads the variable when it loads.
from destiny._numba_cache import choose_cache_dir as _choose_cache_dir  # noqa: E402

_cache_dir = _choose_cache_dir(__import__("pathlib").Path(__file__).parent, _os.environ)
if _cache_dir is not None:
    _os.environ["NUMBA_CACHE_DIR"] = _cache_dir
    if "numba" in __import__("sys").modules:  # loaded before Destiny: tell its config too
        __import__("numba").core.config.CACHE_DIR = _cache_dir
