"""The installed commands' entry points: each loads its command with Ctrl-C's default action.

Loading a command takes up to half a second (numba). Python's own Ctrl-C handler would raise
``KeyboardInterrupt`` somewhere in those imports: a traceback on the terminal, or, inside a
compiled module's initialization, an interrupt lost or reported as an ImportError (see
``_interrupt`` in cli/common.py). With the default action a Ctrl-C there stops the program at
once (exit status 130), as it stops a C program, before it has anything to clean up; each
command installs its own handlers when it starts (``library_errors``). Under an MPI launcher
each stop signal instead ends the rank with exit status 128 + the signal
(``_a_rank_stopped_while_loading_exits_with_the_status``), except while MPI starts in it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import warnings


def default_ctrl_c_while_loading() -> None:
    """Give Ctrl-C its default action until the command installs its handlers: called first by the
    installed commands (``_main``) and by the scripts (scripts/*.py) as they start. An ignored
    Ctrl-C (SIG_IGN: nohup, a background job) or another handler is kept; under an MPI launcher,
    every stop signal ends the rank with its status instead. First, a thread count numba cannot load
    with is refused (``_refuse_unusable_thread_count``), and so is a limit on the address space or
    on data too small to load (``_refuse_too_small_memory_limits``) (under one that is not, malloc
    keeps to one arena: ``addrspace.one_malloc_arena``), the system's failures while loading are
    worded, and numba's warning about its lock (and tqdm's about its monitor thread) is left out
    (``_numbas_lock_warning_left_out``)."""
    _refuse_unusable_thread_count()
    _refuse_too_small_memory_limits()
    from destiny.addrspace import one_malloc_arena

    one_malloc_arena()  # (under ulimit -v, before NumPy's OpenBLAS starts its threads)
    _word_failures_of_the_system_while_loading()
    _numbas_lock_warning_left_out()
    from destiny.launcher import launched_by_mpi

    if launched_by_mpi():
        _a_rank_stopped_while_loading_exits_with_the_status()
    elif signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.SIG_DFL)


def _a_rank_stopped_while_loading_exits_with_the_status() -> None:
    """Under an MPI launcher, a stop signal that comes while the command loads ends the
    rank with exit status 128 + the signal, as the command's own handlers end it a moment
    later, instead of by the signal's default action: MPICH's mpiexec reported ranks killed so
    with its BAD TERMINATION banner on stdout and exit status 15 or 2 (the signal's number),
    where a scheduler's SIGTERM (Slurm's scancel) or a Ctrl-C half a second later gave 143 or
    130. The handler is Python's, so a call into C delays it: MPI's start in the rank waits
    there for every rank to begin it, and is left to the signal's default action
    (``default_action_as_mpi_starts``). An ignored signal stays ignored."""
    from destiny.signals import STOP_SIGNALS

    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(signum, _exit_with_the_status)


def _exit_with_the_status(signum, frame) -> None:
    os._exit(128 + signum)  # (nothing written yet to flush, nor to clean up)


@contextlib.contextmanager
def default_action_as_mpi_starts():
    """Within the block, as MPI starts in the rank (``get_comm``), the stop signals that
    ``_exit_with_the_status`` would end a loading rank by take their default action: MPI_Init
    waits in C for every rank to begin it, where no Python handler runs, and MPICH leaves it
    waiting for ever where a rank ended before beginning it (pmodels/mpich#6124), as the same
    signal ends one still loading: the job hung until killed. Killed by the signal, the rank
    ends, and mpiexec reports it so."""
    from destiny.signals import STOP_SIGNALS

    swapped = [signum for signum in STOP_SIGNALS
               if signal.getsignal(signum) is _exit_with_the_status]
    for signum in swapped:
        signal.signal(signum, signal.SIG_DFL)
    try:
        yield
    finally:
        for signum in swapped:
            signal.signal(signum, _exit_with_the_status)


def _refuse_unusable_thread_count() -> None:
    """Exit 1 with a message where NUMBA_NUM_THREADS is not a whole number of at least 1:
    numba raised a traceback as it loaded for 0 (a script's cores // processes), and for text
    printed a warning with traceback lines and went on with every core."""
    value = os.environ.get("NUMBA_NUM_THREADS")
    if value is None or (value.strip().isdigit() and int(value) >= 1):
        return
    sys.stderr.write(f"Error: the environment variable NUMBA_NUM_THREADS is {value!r}; "
                     "expected the number of threads for numba's parallel loops, 1 or more "
                     "(under mpiexec, cores // processes, at least 1). Set it so, or unset it "
                     "to use every core.\n")
    sys.exit(1)


def _refuse_too_small_memory_limits() -> None:
    """Exit 1 with a message where the limit on the address space (``ulimit -v``) is below
    ``_LEAST_ADDRESS_SPACE``, or the one on data (``ulimit -d``) below ``_LEAST_DATA``, under
    which no command can load: NumPy's OpenBLAS ended the process with its own line ("Memory
    allocation still failed after 10 retries", or, under -d, that it could not start its
    threads) and exit status 1 or 130, libgomp with its own ("Thread creation failed"), or an
    import failed with a traceback. Help and the version are not refused under -v (they load
    less; under -d they need as much). Only the standard library is loaded here: NumPy itself
    cannot load under the smallest limits."""
    from destiny.addrspace import (FIRST_RUN_NEEDS, RAISE_THE_LIMIT, address_space_limit,
                                   data_limit)

    limit, data = address_space_limit(), data_limit()
    helping = any(arg in ("-h", "--help", "--version") for arg in sys.argv[1:])
    if limit is not None and limit < _LEAST_ADDRESS_SPACE and not helping:
        sys.stderr.write(
            f"Error: the limit on this process's address space (ulimit -v) is {limit >> 20} MiB, "
            "too small to run: loading Python, NumPy, numba's LLVM and netCDF4 maps about "
            f"{_LOADING_NEEDS >> 20} MiB, and a first run, which compiles numba's kernels, needs "
            f"{FIRST_RUN_NEEDS}. Nothing was done. To run, {RAISE_THE_LIMIT}.\n")
    elif data is not None and data < _LEAST_DATA:  # (help too: it needs 140 MiB of it)
        sys.stderr.write(
            f"Error: the limit on this process's data (ulimit -d) is {data >> 20} MiB, too small "
            "to run: on tiny data and with the kernels compiled, generate-netcdf needs about "
            "170 MiB of it, train 210 MiB and predict 230 MiB (their libraries' threads and "
            "buffers, and the kernels' code), more as the data grows and on a first run. Nothing "
            "was done. To run, raise the limit (ulimit -d unlimited, or a larger value).\n")
    else:
        return
    sys.exit(1)


# The least address space any command ran in, measured by bisecting `ulimit -v` (x86-64,
# Python 3.11, numba 0.6x, NUMBA_NUM_THREADS=1 and OPENBLAS_NUM_THREADS=1, a warm kernel cache,
# tiny data): train 373 MiB, generate-netcdf 410 MiB, predict 443 MiB (train --help: 303 MiB).
# Below this, a fifth under the least, none can have run; each thread maps more.
_LOADING_NEEDS = 373 << 20
_LEAST_ADDRESS_SPACE = 300 << 20
# Likewise under `ulimit -d` (2 threads, a warm cache, the bundled sample, by 10 MiB):
# generate-netcdf ran from 170 MiB, train from 210 MiB, predict from 230 MiB; a fifth under the
# least. Below it OpenBLAS or libgomp ended the process with their own lines (exit status 1 or
# 130), or an import failed with a traceback.
_LEAST_DATA = 136 << 20


def _numbas_lock_warning_left_out() -> None:
    """numba warns in three lines where it cannot take its multiprocessing lock as it starts
    its thread pool: /dev/shm missing or read-only (some containers and sandboxes), or the
    limit on open files reached, where the command's message of that failure follows. The lock
    keeps threads and forked processes from starting the pool at once; a command starts it
    once, from its main thread, so the warning was noise before every run's output."""
    warnings.filterwarnings("ignore", message="Could not obtain multiprocessing lock")
    # tqdm's likewise, in three lines, where its monitor thread cannot start (no memory for its
    # stack under ulimit -v): the bar works without it, and the message of the failure follows.
    warnings.filterwarnings("ignore", message="tqdm:disabling monitor support")


def _word_failures_of_the_system_while_loading() -> None:
    """Where a shared library cannot be loaded for want of memory as the command's modules load
    (numba's LLVM, netCDF4's libraries, under ulimit -v or a container's limit), or any other
    allocation fails there (a MemoryError: Python reading a module's code), or the limit
    on open files is reached there (a module loaded as click parses the command line), before
    any handler of the command's own, end with the one-paragraph message
    (errors.system_failure) and exit status 1 instead of a traceback of the imports. Anything
    else uncaught (a bug) keeps its traceback, as does every failure under DESTINY_DEBUG=1."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        if not os.environ.get("DESTINY_DEBUG"):
            try:
                from destiny.errors import (library_not_loaded, open_files_exhausted,
                                            out_of_memory_loading, system_failure)

                message = (system_failure(value) if library_not_loaded(value)
                           or open_files_exhausted(value) else
                           out_of_memory_loading(value) if isinstance(value, MemoryError)
                           else None)
            except Exception:  # noqa: BLE001 (destiny.errors itself not loaded: no memory)
                message = None
            if message is not None:
                sys.stderr.write(f"Error: {message}\n")
                return
        previous(kind, value, tb)

    sys.excepthook = hook


def _main(module: str):
    default_ctrl_c_while_loading()
    return importlib.import_module(module).main()


def generate_netcdf():
    return _main("destiny.cli.generate_netcdf")


def train():
    return _main("destiny.cli.train")


def predict():
    return _main("destiny.cli.predict")


def evaluate():
    return _main("destiny.cli.evaluate")


def destiny():
    return _main("destiny.cli.main")
