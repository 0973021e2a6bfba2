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
