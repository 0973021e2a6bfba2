"""Under a limit on the address space (ulimit -v: RLIMIT_AS, as SLURM's or PBS's vmem limits set
it), a command ends with a message and exit status 1, not natively (LLVM's SIGABRT, 134).

Each case runs in a child process that sets the limit on itself (relative to what it maps
already, so that the figures hold on any machine), or under ``prlimit``."""

from __future__ import annotations

import os
import pathlib
import resource
import subprocess
import sys

BIN = pathlib.Path(sys.executable).parent
ENV = {k: v for k, v in os.environ.items() if k != "DESTINY_DEBUG"}


def _child(code: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=ENV, **kwargs)


def _no_core_dumps():
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))


# A child that limits its address space to what it maps now and LIMIT_MIB more (its modules
# loaded first), then runs the rest of its code.
LIMITED = """\
import resource
import numba, numpy
from destiny.addrspace import address_space_in_use
resource.setrlimit(resource.RLIMIT_AS,
                   (address_space_in_use() + {mib} * 2**20, resource.RLIM_INFINITY))
"""


def test_the_memory_free_for_training_counts_what_a_limit_on_the_address_space_leaves():
    """train's check before allocating the weights (memory.available_memory) read only
    /proc/meminfo and the cgroup: under ulimit -v, a network that fits the machine but not the
    limit went on to numpy's MemoryError, worded as a machine too small."""
    code = LIMITED.format(mib=100) + (
        "from destiny.memory import available_memory\n"
        "free, source = available_memory()\n"
        "print(free >> 20)\n"
        "print(source)\n")
    done = _child(code)
    assert done.returncode == 0, done.stderr
    free, source = done.stdout.splitlines()
    assert 90 <= int(free) <= 100, done.stdout
    assert source.startswith("the address-space limit, ulimit -v, of "), source


def test_a_network_too_large_for_the_limit_on_the_address_space_is_refused_before_training(
        tmp_path):
    """The same as a machine without the memory: the check's message (the layer, the bytes),
    which says that the limit is what is short, and exit status 1, before the weights are
    allocated."""
    from .conftest import write_sample_data

    d = write_sample_data(tmp_path, users=40, items=20, mean_per_user=4, seed=3)
    netdef = (pathlib.Path(__file__).parent.parent / "netdefs" / "movielens.json").read_text()
    # (about 1.6 GiB, more than the limit leaves and less than a test machine has free)
    (d / "net.json").write_text(netdef.replace('"N" : 128', '"N" : 1000000'))
    done = subprocess.run(
        [str(BIN / "train"), "-q", "-c", "net.json", "-i", "gl_input.nc", "-o", "gl_output.nc",
         "-n", "net.nc", "-e", "1"], cwd=d, capture_output=True, text=True, timeout=120,
        env=ENV, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29)))
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("Error: out of memory: training needs at least "), done.stderr
    assert ("free (the address-space limit, ulimit -v, of 1.5 GiB, less the " in done.stderr
            and "layer 'Hidden'" in done.stderr
            and "Here the limit on the address space (ulimit -v) leaves too little: raise the "
                "limit" in done.stderr), done.stderr
    assert not (d / "net.nc").exists()
