"""Whether an MPI launcher started this process, from its environment alone.

Kept apart from parallel.py, which loads NumPy and Destiny's errors, so that the installed
commands can ask before anything else loads (cli/entry.py: how a stop signal ends a rank
while the command loads). Neither imports mpi4py.
"""

from __future__ import annotations

import os

# Set by the launchers: MPICH's hydra (PMI_*, HYDI_CONTROL_FD, MPI_LOCALNRANKS), Open MPI's
# mpirun (OMPI_COMM_WORLD_SIZE) and PMIx launchers such as Slurm's srun --mpi=pmix (PMIX_RANK).
LAUNCHER_VARS = ("PMI_RANK", "PMI_SIZE", "HYDI_CONTROL_FD", "MPI_LOCALNRANKS",
                 "OMPI_COMM_WORLD_SIZE", "PMIX_RANK")
SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")
# The number of the job's processes on this machine: hydra's (MPICH, Intel MPI, MVAPICH) and
# Open MPI's.
LOCAL_SIZE_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")
# The thread counts of what a process runs: numba's parallel loops (and their OpenMP) and
# NumPy's BLAS (OpenBLAS, or MKL).
THREAD_COUNT_VARS = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                     "MKL_NUM_THREADS")


def launched_by_mpi(environ=os.environ) -> bool:
    """Whether an MPI launcher (mpiexec, mpirun, srun) started this process."""
    return any(name in environ for name in LAUNCHER_VARS)


def launcher_size(environ=os.environ) -> int:
    """The number of processes the launcher says it started; 0 where it does not say."""
    for name in SIZE_VARS:
        value = environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def threads_per_rank(environ=os.environ) -> int | None:
    """The threads each process of an MPI job should run, where its launcher started several
    on this machine without binding them to cores of their own: the cores it may run on divided
    among them, at least 1. Each library's default is a thread per core in every process, so
    that 2 processes on 2 cores ran 4 threads of each kind: the benchmark network trained
    2.1-2.5x slower than with a thread each (docs/benchmarks.md). None where no launcher says
    how many share the machine, where one does alone, where the user set any thread count
    (``THREAD_COUNT_VARS``), or where the launcher bound the process to cores of its own (its
    cores differ from the launcher's: Open MPI's mpirun, Slurm's srun, hydra's -bind-to),
    which gave it its threads' share. (A job or container confined to some of the machine's
    cores confines the launcher too: its processes share those.)"""
    if any(name in environ for name in THREAD_COUNT_VARS):
        return None
    local = next((int(environ[name]) for name in LOCAL_SIZE_VARS
                  if environ.get(name, "").isdigit()), 0)
    if local < 2:
        return None
    try:
        cores = os.sched_getaffinity(0)
    except (AttributeError, OSError):  # (not on macOS)
        return max(1, (os.cpu_count() or 1) // local)
    if cores != _launchers_cores():
        return None
    return max(1, len(cores) // local)


def _launchers_cores() -> set[int]:
    """The cores the launcher's process on this machine may run on (``launcher_pid``); where
    it cannot be told, the parent's; failing that, every core."""
    for pid in (launcher_pid(), os.getppid()):
        if pid is not None:
            try:
                return os.sched_getaffinity(pid)
            except OSError:  # (gone, or not ours to read)
                pass
    return set(range(os.cpu_count() or 1))


def launcher_pid() -> int | None:
    """The launcher's process on this machine (hydra's proxy, Open MPI's daemon): the nearest
    ancestor whose environment has none of ``LOCAL_SIZE_VARS``, which the launcher sets for
    the processes it starts (and which a wrapper script between them inherits, with their
    binding); None where /proc cannot tell."""
    pid = os.getppid()
    try:
        for _ in range(16):  # (a few wrappers at most)
            with open(f"/proc/{pid}/environ", "rb") as f:
                names = {entry.split(b"=", 1)[0] for entry in f.read().split(b"\0")}
            if not any(name.encode() in names for name in LOCAL_SIZE_VARS):
                return pid
            with open(f"/proc/{pid}/stat", "rb") as f:
                pid = int(f.read().rsplit(b")", 1)[1].split()[1])  # (its 4th field: ppid)
    except (OSError, ValueError, IndexError):
        pass
    return None
