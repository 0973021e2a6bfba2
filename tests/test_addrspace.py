"""Under a limit on the address space (ulimit -v: RLIMIT_AS, as SLURM's or PBS's vmem limits set
it), a command ends with a message and exit status 1, not natively (LLVM's SIGABRT, 134).

Each case runs in a child process that sets the limit on itself (relative to what it maps
already, so that the figures hold on any machine), or under a fixed one (``_limited``)."""

from __future__ import annotations

import os
import pathlib
import re
import resource
import signal
import subprocess
import sys

import pytest

BIN = pathlib.Path(sys.executable).parent
ENV = {k: v for k, v in os.environ.items() if k != "DESTINY_DEBUG"}


def _child(code: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=ENV, **kwargs)


def _no_core_dumps():
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))


def _limited(mib: int, which: str = "RLIMIT_AS"):
    """A preexec_fn: the child's address space limited to ``mib`` MiB (as ``ulimit -v``; no
    prlimit(1), which a bare machine may lack; RLIMIT_DATA: its data, as ``ulimit -d``),
    without core dumps."""
    def limit():
        _no_core_dumps()
        resource.setrlimit(getattr(resource, which), (mib << 20, resource.RLIM_INFINITY))
    return limit


# A child's code that defines limit_to(room): its address space limited to what it maps then
# and ``room`` bytes more, so that the figures hold on any machine.
LIMIT_TO = """\
import resource
from destiny.addrspace import address_space_in_use
def limit_to(room):
    resource.setrlimit(resource.RLIMIT_AS, (address_space_in_use() + room, resource.RLIM_INFINITY))
"""
# A child that limits itself so to {mib} MiB more (its modules loaded first), then runs the rest
# of its code.
LIMITED = "import numba, numpy\n" + LIMIT_TO + "limit_to({mib} << 20)\n"
# A child whose first argument names the room it limits itself to: "limited", near a limit
# (100 MiB left); "far", far from one (8 GiB more, as a scheduler's generous default); any
# other, no limit.
ROOM_BY_ARGUMENT = LIMIT_TO + """\
import sys
if sys.argv[1] in ("limited", "far"):
    limit_to({"limited": 100 << 20, "far": 8 << 30}[sys.argv[1]])
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


def test_a_limit_on_the_address_space_too_small_to_load_is_refused_at_once(tmp_path):
    """Under 300 MiB no command can load (the least measured was train's, 373 MiB): NumPy's
    OpenBLAS ended the process with its own line ("OpenBLAS error: Memory allocation still
    failed after 10 retries, giving up.") and exit status 1, or an import a traceback. Now
    one paragraph naming the limit, what is needed and what to do; --help is not refused."""
    argv = [str(BIN / "train"), "-c", "x.json", "-i", "x.nc", "-o", "y.nc", "-n", "z.nc"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=ENV,
                          cwd=tmp_path, preexec_fn=_limited(200))
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        "Error: the limit on this process's address space (ulimit -v) is 200 MiB, too small to "
        "run: loading Python, NumPy, numba's LLVM and netCDF4 maps about 373 MiB, and a first "
        "run, which compiles numba's kernels, needs about 1 GiB, more on a machine with many "
        "cores. Nothing was done. To run, raise the limit (ulimit -v unlimited, or a larger "
        "value), or, in a batch job, ask for memory (SLURM's --mem, PBS's mem) instead of "
        "virtual memory (vmem), which counts every mapping rather than the memory used.\n")
    done = subprocess.run([str(BIN / "train"), "--help"], capture_output=True, text=True,
                          timeout=60, env=ENV, preexec_fn=_limited(400))
    assert done.returncode == 0 and "Usage: train" in done.stdout, done.stderr


def test_a_limit_on_data_too_small_to_load_is_refused_at_once(tmp_path):
    """Under ulimit -d 60 to 130 MiB train ended with OpenBLAS's lines ("Memory allocation
    still failed", or "blas_thread_init: pthread_create failed" and exit status 130), libgomp's,
    or a traceback of the imports (no command ran below 170 MiB). Now one paragraph, for --help
    too (which needs 140 MiB of it); a limit a command may run under is not refused."""
    argv = [str(BIN / "train"), "-c", "x.json", "-i", "x.nc", "-o", "y.nc", "-n", "z.nc"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=ENV,
                          cwd=tmp_path, preexec_fn=_limited(100, "RLIMIT_DATA"))
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        "Error: the limit on this process's data (ulimit -d) is 100 MiB, too small to run: on "
        "tiny data and with the kernels compiled, generate-netcdf needs about 170 MiB of it, "
        "train 210 MiB and predict 230 MiB (their libraries' threads and buffers, and the "
        "kernels' code), more as the data grows and on a first run. Nothing was done. To run, "
        "raise the limit (ulimit -d unlimited, or a larger value).\n")
    done = subprocess.run([str(BIN / "train"), "--help"], capture_output=True, text=True,
                          timeout=60, env=ENV, preexec_fn=_limited(100, "RLIMIT_DATA"))
    assert done.returncode == 1 and done.stderr.startswith("Error: the limit on this "
                                                           "process's data"), done.stderr
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=ENV,
                          cwd=tmp_path, preexec_fn=_limited(1000, "RLIMIT_DATA"))
    assert done.returncode == 1 and "x.nc: the dataset file does not exist" in done.stderr, (
        done.stderr)  # (past the check: the missing file)


def test_an_allocation_that_fails_as_a_command_loads_is_a_message():
    """Python reading a module's code under ulimit -v raises a MemoryError among the imports,
    before the command's own handlers: a traceback. Now one paragraph, exit status 1."""
    done = _child("from destiny.cli.entry import default_ctrl_c_while_loading\n"
                  "default_ctrl_c_while_loading()\n"
                  "raise MemoryError\n")
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        "Error: out of memory as the command loaded (an allocation failed); no output was "
        "replaced (each is put in place only once complete). The memory free, or the address "
        "space that a limit allows (ulimit -v, a container's or a job's memory limit), is too "
        "small for it to start: free memory or raise the limit, then run the command again.\n")


def test_a_thread_that_cannot_start_for_want_of_memory_is_a_message(monkeypatch):
    """The stuck-command watch's thread, started before the command's own handlers, could not
    start under ulimit -d 120 MiB (its stack): a traceback of RuntimeError("can't start new
    thread"). Now a MemoryError, which the handler of failures while loading words, with the
    wakeup descriptor given back."""
    import threading

    from destiny.cli import stuck

    def refused(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refused)
    before = signal.set_wakeup_fd(-1)
    try:
        with pytest.raises(MemoryError, match="can't start new thread: the stuck-command"):
            stuck.watch()
        assert signal.set_wakeup_fd(-1) == -1
    finally:
        signal.set_wakeup_fd(before)


def test_llvms_abort_while_a_kernel_compiles_under_a_limit_is_a_message():
    """LLVM refused memory aborts the process (SIGABRT: "LLVM ERROR: out of memory", or
    std::bad_alloc thrown through C): under ulimit -v, a first run of train or predict died so
    between about 500 and 720 MiB, exit status 134 and no message. While the compiler's lock
    is held under a limit (a compile, or a kernel loaded from the cache), the abort is a
    message and exit status 1 (outside it, near the limit, too: test_a_librarys_crash_...).
    (The abort is raised here, as LLVM's is not reproducible at a fixed limit on every
    machine.)"""
    code = (LIMITED.format(mib=4000) + "import os, sys\n"
            "from numba.core import event\n"
            "from destiny.addrspace import watch_crashes\n"
            "watch_crashes()\n"
            "if sys.argv[1] == 'outside':\n"
            "    os.abort()\n"
            "from numba.core.compiler_lock import global_compiler_lock\n"
            "with global_compiler_lock:\n"
            "    if sys.argv[1] == 'loading':\n"
            "        os.abort()\n"
            "    with event.trigger_event('numba:compile', data={'dispatcher': watch_crashes}):\n"
            "        os.abort()\n")
    done = subprocess.run([sys.executable, "-c", code, "compiling"], capture_output=True,
                          text=True, timeout=120, env=ENV, preexec_fn=_no_core_dumps)
    assert done.returncode == 1, done.stderr
    assert re.match(
        r"Error: out of memory: numba's compiler \(LLVM\) aborted in compiling the kernel "
        r"watch_crashes \(the lines above are its own\), under a limit on this process's "
        r"memory \(ulimit -v [0-9.]+ [MG]iB, [0-9.]+ [MG]iB of it left as it began\)\. ",
        done.stderr), done.stderr
    assert ("A command compiles its kernels on its first run" in done.stderr
            and "run the command once without the limit, to fill the cache.\n"
            in done.stderr and done.stderr.count("\n") == 1), done.stderr
    done = subprocess.run([sys.executable, "-c", code, "loading"], capture_output=True,
                          text=True, timeout=120, env=ENV, preexec_fn=_no_core_dumps)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("Error: out of memory: numba's compiler (LLVM) aborted in "
                                  "compiling or loading a kernel (the lines"), done.stderr
    # (outside a compile and far from the limit, 4,000 MiB of room: no shortage, the default
    # action; near it, test_a_librarys_crash_under_a_limit_is_a_message)
    done = subprocess.run([sys.executable, "-c", code, "outside"], capture_output=True,
                          text=True, timeout=120, env=ENV, preexec_fn=_no_core_dumps)
    assert done.returncode == -signal.SIGABRT, done.stderr


@pytest.mark.parametrize("how", ["segfault", "abort"])
def test_a_librarys_crash_under_a_limit_is_a_message(how):
    """Refused an allocation, NetCDF's library aborted generate-netcdf under ulimit -v 360 MiB
    ("NCbytes failure", exit status 134) and crashed it at 382 MiB (a segmentation fault in
    HDF5 as the dataset file was created, exit status 139), with no message. Under a limit
    either is now a message and exit status 1, near the limit; without one, far from it (a
    scheduler's default: a crash is then no shortage), or with Python's faulthandler enabled
    (its traceback asked for), the signal takes its default action."""
    crash = "ctypes.string_at(0)" if how == "segfault" else "os.abort()"
    code = ("import ctypes, os\n"
            "import numba, numpy\n"
            "from destiny.addrspace import watch_crashes\n"
            + ROOM_BY_ARGUMENT + "watch_crashes()\n"
            f"{crash}\n")
    signum = signal.SIGSEGV if how == "segfault" else signal.SIGABRT

    def run(how, **env):
        return subprocess.run([sys.executable, "-c", code, how], capture_output=True, text=True,
                              timeout=120, env={**ENV, **env}, preexec_fn=_no_core_dumps)

    done = run("limited")
    assert done.returncode == 1, done.stderr
    what = ("crashed (a segmentation fault" if how == "segfault" else "aborted (SIGABRT")
    assert done.stderr.startswith(
        f"Error: a library {what}; the lines above, if any, are its own) under a limit on this "
        "process's memory (ulimit -v "), done.stderr
    assert re.search(
        r"\(ulimit -v [0-9.]+ MiB, [0-9.]+ MiB of it left as it began\), which is the likely "
        r"cause: refused an allocation, the libraries Destiny runs \(NetCDF's, LLVM\) abort or "
        r"crash so\. No output being written was replaced .* To run, raise the limit .*; where "
        r"it ends so without the limit too, report it, with the lines above\.\n$",
        done.stderr), done.stderr
    assert run("unlimited").returncode == -signum
    assert run("far").returncode == -signum
    faulted = run("limited", PYTHONFAULTHANDLER="1")
    assert faulted.returncode == -signum and "Fatal Python error" in faulted.stderr


def test_a_real_compile_out_of_address_space_does_not_abort():
    """A kernel compiled (no cache) with 2 MiB of the limit left: LLVM aborted (exit status
    134); now exit status 1, with the message (or with a MemoryError's traceback, where one of
    Python's allocations fails first: this child is no command)."""
    code = (LIMITED.format(mib=2) + "from destiny.addrspace import watch_crashes\n"
            "watch_crashes()\n"
            "@numba.njit\n"
            "def f(x):\n"
            "    return max(x, 1.0) + min(x, 2)\n"
            "f(3.0)\n")
    done = _child(code, preexec_fn=_no_core_dumps)
    assert done.returncode == 1, done.stderr


def test_tqdms_warning_that_its_monitor_thread_cannot_start_is_left_out():
    """Under ulimit -v (generate-netcdf at 400 MiB), tqdm warned in three lines that it could
    not start its monitor thread, before the command's message of the failure."""
    done = _child("from destiny.cli.entry import default_ctrl_c_while_loading\n"
                  "default_ctrl_c_while_loading()\n"
                  "import warnings\n"
                  "from tqdm import TqdmMonitorWarning\n"
                  "warnings.warn(TqdmMonitorWarning('tqdm:disabling monitor support "
                  "(monitor_interval = 0) due to:\\ncan\\'t start new thread'))\n"
                  "warnings.warn(TqdmMonitorWarning('another warning'))\n")
    assert done.returncode == 0, done.stderr
    assert "monitor support" not in done.stderr and "another warning" in done.stderr


def test_the_message_of_an_allocation_refused_under_a_limit_names_the_limit():
    """NumPy's MemoryError under ulimit -v was worded as a machine too small (free memory, or
    run on a machine with more) alone: the limit, not the machine, refused it."""
    code = ("import resource\n"
            "from destiny.errors import system_failure\n"
            "print(system_failure(MemoryError('Unable to allocate 4 GiB'), network=False))\n"
            "resource.setrlimit(resource.RLIMIT_AS, (8 << 30, resource.RLIM_INFINITY))\n"
            "print(system_failure(MemoryError('Unable to allocate 4 GiB'), network=False))\n"
            "print(system_failure(MemoryError('Unable to allocate 4 GiB')))\n")
    done = _child(code)
    assert done.returncode == 0, done.stderr
    unlimited, limited, network = done.stdout.splitlines()
    assert "ulimit" not in unlimited, unlimited
    tail = (" A limit on this process's memory is set (ulimit -v 8.0 GiB), which refuses "
            "allocations whatever the machine has free: raise it, or, in a batch job, ask for "
            "memory (SLURM's --mem, PBS's mem) instead of virtual memory (vmem).")
    assert limited == unlimited + tail, limited
    assert network.endswith("the README's sections on them)." + tail), network


def test_a_system_error_under_a_limit_is_out_of_memory():
    """numba loading a cached kernel under ulimit -v 410 MiB (a warm train on tiny data) ended
    with a traceback of "SystemError: error return without exception set": a C function that
    failed to allocate and returned an error without setting one. Near a limit it is worded
    as memory; without one, or far from it (a scheduler's default), a SystemError is a bug, and
    keeps its traceback (None here)."""
    code = (LIMIT_TO + "from destiny.errors import system_failure\n"
            "e = SystemError('error return without exception set')\n"
            "print(system_failure(e))\n"
            "limit_to(8 << 30)\n"
            "print(system_failure(e))\n"
            "limit_to(100 << 20)\n"
            "print(system_failure(e))\n")
    done = _child(code)
    assert done.returncode == 0, done.stderr
    unlimited, far, limited = done.stdout.splitlines()
    assert unlimited == far == "None"
    assert limited.startswith("out of memory (an allocation in a library failed). The network's "
                              "weights"), limited
    assert re.search(r"\(ulimit -v [0-9.]+ MiB\), which refuses allocations whatever the "
                     r"machine has free: raise it, or, in a batch job, ask for memory \(SLURM's "
                     r"--mem, PBS's mem\) instead of virtual memory \(vmem\)\.$", limited), limited


def test_malloc_keeps_to_one_arena_under_a_limit():
    """glibc's malloc reserves 64 MiB of address space for each thread that allocates beside
    another (an arena), which ulimit -v counts whole: a warm train on tiny data mapped 650 MiB
    at most, 440 MiB with one arena. Under a limit the commands keep to one as they start
    (before NumPy's threads); without one, or where the user set the arenas, nothing changes.
    Four threads that each allocate at once map no more than one does."""
    code = ("import resource, sys, threading\n"
            "if sys.argv[1] == 'limited':\n"
            "    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, resource.RLIM_INFINITY))\n"
            "from destiny.cli.entry import default_ctrl_c_while_loading\n"
            "default_ctrl_c_while_loading()\n"
            "from destiny.addrspace import address_space_in_use\n"
            "before = address_space_in_use()\n"
            "go = threading.Barrier(4)\n"
            "def allocate():\n"
            "    go.wait()\n"
            "    kept = [bytearray(1000) for _ in range(2000)]\n"
            "    go.wait()\n"
            "threads = [threading.Thread(target=allocate) for _ in range(4)]\n"
            "for t in threads: t.start()\n"
            "for t in threads: t.join()\n"
            "print((address_space_in_use() - before) >> 20)\n")
    grown = {}
    for case, how, env in (("unlimited", "unlimited", {}), ("limited", "limited", {}),
                           ("set", "limited", {"MALLOC_ARENA_MAX": "8"}),
                           ("tuned", "limited", {"GLIBC_TUNABLES": "glibc.malloc.arena_max=8"})):
        done = subprocess.run([sys.executable, "-c", code, how], capture_output=True, text=True,
                              timeout=60, env={**ENV, **env})
        assert done.returncode == 0, done.stderr
        grown[case] = int(done.stdout)
    # (threads' stacks: 8 MiB each by default, ulimit -s; arenas: 64 MiB each)
    assert grown["limited"] < 64 <= min(grown["unlimited"], grown["set"], grown["tuned"]), grown


def test_numbas_threads_start_as_train_and_predict_start_under_a_limit():
    """numba's parallel loops start their threads at the first loop, and libgomp, refused a
    thread's stack, ended the process with its own line ("libgomp: Thread creation failed:
    Resource temporarily unavailable", exit status 1, no message: a warm train on tiny data
    under ulimit -v 390 to 490 MiB). Under a limit they start as the command starts, while there
    is room; without one too, so that a cache warmed by a run without the limit holds the
    kernel that starts them."""
    code = ("import resource, sys\n"
            "import numba, numpy\n"
            "from destiny.addrspace import map_thread_memory\n"
            "if sys.argv[1] == 'limited':\n"
            "    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, resource.RLIM_INFINITY))\n"
            "def threads():\n"
            "    with open('/proc/self/status') as f:\n"
            "        return next(int(line.split()[1]) for line in f if line[:8] == 'Threads:')\n"
            "before = threads()\n"
            "map_thread_memory()\n"
            "print(threads() - before)\n")
    started = {}
    for how in ("unlimited", "limited"):
        done = subprocess.run([sys.executable, "-c", code, how], capture_output=True, text=True,
                              timeout=120, env={**ENV, "NUMBA_NUM_THREADS": "3"})
        assert done.returncode == 0, done.stderr
        started[how] = int(done.stdout)
    assert started == {"unlimited": 2, "limited": 2}, started


def test_openblass_buffer_is_mapped_as_train_and_predict_start_under_a_limit():
    """OpenBLAS maps its buffer (32 MiB) at the first product and, refused, ended predict
    itself ("OpenBLAS error: Memory allocation still failed after 10 retries, giving up.",
    exit status 1, no message: predict under ulimit -v 600 MiB). Under a limit the buffer is
    mapped as the command starts, while there is room; without one, or with too little left
    for it, nothing is done. (The kernel that starts numba's threads is loaded first, and one
    thread runs it: what they map is not counted.)"""
    code = ("import sys\n"
            "import numpy\n"
            "from destiny.addrspace import map_thread_memory\n"
            "from destiny.kernels.cpu import dense\n"
            "dense.add_bias(numpy.ones((2, 2), numpy.float32), numpy.ones(2, numpy.float32))\n"
            + LIMIT_TO + "extra = int(sys.argv[1])\n"
            "if extra:\n"
            "    limit_to(extra << 20)\n"
            "before = address_space_in_use()\n"
            "refused = map_thread_memory()\n"
            "print((address_space_in_use() - before) >> 20)\n"
            "print(refused)\n")
    grown, refused = {}, {}
    for extra in (0, 40, 1000):
        done = subprocess.run([sys.executable, "-c", code, str(extra)], capture_output=True,
                              text=True, timeout=60, env={**ENV, "NUMBA_NUM_THREADS": "1"})
        assert done.returncode == 0, done.stderr
        grown[extra], refused[extra] = done.stdout.splitlines()
    assert grown == {0: "0", 40: "0", 1000: grown[1000]} and int(grown[1000]) > 0, grown
    # (with 40 MiB left no command can run: train and predict raise the reason, on every rank)
    assert refused[0] == refused[1000] == "None", refused
    assert re.fullmatch(
        r"out of memory: under the limit on this process's address space \(ulimit -v "
        r"[\d.]+ MiB\), (39|40)\.\d MiB is left once the command's libraries are loaded, and a "
        r"run maps 64\.0 MiB more at the least \(its threads' stacks, NumPy's BLAS buffer, the "
        r"data, the network and the kernels' code\)\. Nothing was done\. To run, raise the "
        r"limit \(ulimit -v unlimited.*", refused[40]), refused[40]


def test_netcdfs_failure_to_read_a_netcdf_file_under_a_limit_says_the_limit_may_be_why(model,
                                                                                      tmp_path):
    """Under ulimit -v 414 MiB train said of a whole dataset file "is not a readable NetCDF file
    ([Errno -51] NetCDF: Unknown file format); create it with generate-netcdf": the NetCDF
    library, refused an allocation, fails so too. Under a limit, a file that starts as a NetCDF
    file does gets a sentence on the limit, near it (its open, the network's, and a read past
    it); a file that does not, no limit, or one far from it (a scheduler's default), none."""
    text = tmp_path / "ratings.txt"
    text.write_text("u1\t1\n")
    code = ("import netCDF4\n"
            "from destiny.errors import DestinyError, netcdf_reads\n"
            "from destiny.io.dataset import read_dataset\n"
            "from destiny.io.network_file import read_network\n"
            "real = netCDF4.Dataset\n"
            "def refused(path, mode='r', **kw):\n"
            "    raise OSError(-51, 'NetCDF: Unknown file format', str(path))\n"
            "netCDF4.Dataset = refused\n"
            "def said(read, path):\n"
            "    try:\n"
            "        read(path)\n"
            "    except DestinyError as e:\n"
            "        return str(e)\n"
            "def hdf_error(path):\n"
            "    with netcdf_reads(path, '; it is damaged.'):\n"
            "        raise RuntimeError('NetCDF: HDF error')\n"
            + ROOM_BY_ARGUMENT + "dataset, network, text = sys.argv[2:]\n"
            "for read, path in ((read_dataset, dataset), (read_network, network),\n"
            "                   (hdf_error, network), (read_dataset, text)):\n"
            "    print(said(read, path))\n")
    tail = (" A limit on this process's memory is set (ulimit -v LIMIT), under which an "
            "allocation the NetCDF library is refused fails so too: raise the limit and run the "
            "command again; only where it fails so without the limit is the file at fault.")
    for how in ("unlimited", "far", "limited"):
        done = subprocess.run([sys.executable, "-c", code, how, str(model / "gl_input.nc"),
                               str(model / "gl.nc"), str(text)],
                              capture_output=True, text=True, timeout=60, env=ENV)
        assert done.returncode == 0, done.stderr
        said = re.sub(r"ulimit -v [0-9.]+ MiB", "ulimit -v LIMIT", done.stdout)
        dataset, network, read, not_netcdf = said.splitlines()
        assert dataset.endswith("gl_input.nc'); create it with generate-netcdf."
                                + (tail if how == "limited" else "")), dataset
        assert network.endswith("train the network again, or restore the file from a copy."
                                + (tail if how == "limited" else "")), network
        assert read.endswith("(NetCDF: HDF error); it is damaged."
                             + (tail if how == "limited" else "")), read
        assert not_netcdf.endswith("create it with generate-netcdf."), not_netcdf
