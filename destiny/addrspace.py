"""The address space that a limit on it (``ulimit -v``: RLIMIT_AS) leaves this process.

Many batch schedulers (SLURM's or PBS's vmem limits) and some cron setups run jobs under such a
limit. It counts every mapping, not the memory used: the shared libraries (numba's LLVM alone
maps about 100 MiB), each thread's stack and malloc arena, and what LLVM takes as numba
compiles the kernels on a command's first run. Where LLVM is refused memory it aborts the
process (SIGABRT, exit status 134: "LLVM ERROR: out of memory" or ``std::bad_alloc``), with no
Python exception to word, and no way to tell beforehand how much a compile will take (a
threshold on what is left refused runs that would have compiled). So, while a limit is set,
``watch_crashes`` turns that abort into a message and exit status 1 (and so another library's
abort or crash, under a limit), and
``memory.available_memory`` counts what the limit leaves beside the memory free.

It imports nothing but the standard library at first (the command line's start-up check reads
it before NumPy loads, which itself fails under a limit too small).
"""

from __future__ import annotations

import os
import signal

try:
    import resource
except ImportError:  # (not on Windows)
    resource = None

# What to say a first run needs in all (the VmPeak of train and predict on tiny data with a
# cold cache and 2 threads was 680-700 MiB; each further thread maps its stack and arena).
FIRST_RUN_NEEDS = "about 1 GiB, more on a machine with many cores"
# What to do about a limit that is too small (a clause).
RAISE_THE_LIMIT = ("raise the limit (ulimit -v unlimited, or a larger value), or, in a batch "
                   "job, ask for memory (SLURM's --mem, PBS's mem) instead of virtual memory "
                   "(vmem), which counts every mapping rather than the memory used")

# How ``address_space_left`` names the figure it gives (its start).
ADDRESS_SPACE_LIMIT = "the address-space limit"


def address_space_limit() -> int | None:
    """The soft limit on this process's address space (RLIMIT_AS, ``ulimit -v``) in bytes, or
    None where there is none (or it cannot be read)."""
    return _soft_limit("RLIMIT_AS")


def data_limit() -> int | None:
    """The soft limit on this process's data (RLIMIT_DATA, ``ulimit -d``: since Linux 4.7, its
    private writable mappings too, so it stops LLVM as ``ulimit -v`` does), or None."""
    return _soft_limit("RLIMIT_DATA")


def _soft_limit(name: str) -> int | None:
    """The soft limit ``resource.<name>`` in bytes; None where it is unlimited or unreadable."""
    if resource is None:
        return None
    try:
        soft, _ = resource.getrlimit(getattr(resource, name))
    except (OSError, ValueError, AttributeError):
        return None
    return None if soft == resource.RLIM_INFINITY or soft < 0 else soft


def address_space_in_use() -> int | None:
    """The bytes this process maps (VmSize in /proc/self/status), or None where unreadable."""
    return _vm("VmSize")


def near_a_memory_limit() -> bool:
    """Whether a limit on this process's memory is set and leaves it little: under a tenth of
    the limit, or under 256 MiB, of the address space (``ulimit -v``) or of data (``ulimit -d``,
    against VmData). A library's failure without a word of its own (a SystemError) is then
    taken for memory; far from a limit (a scheduler's default of 64 GiB), for a bug."""
    for limit, used in ((address_space_limit(), address_space_in_use()),
                        (data_limit(), _vm("VmData"))):
        if limit is not None and used is not None and limit - used < max(limit // 10, 256 << 20):
            return True
    return False


def _vm(field: str) -> int | None:
    """A ``Vm...`` figure of /proc/self/status in bytes, or None where unreadable."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def address_space_left() -> tuple[int, str] | None:
    """The bytes that the limit on the address space (``ulimit -v``) still lets this process
    map, and where the figure comes from; None without a limit (or where VmSize is unreadable)."""
    limit = address_space_limit()
    if limit is None:
        return None
    from destiny.wording import sized

    used = address_space_in_use()
    if used is None:
        return None
    return (max(0, limit - used),
            f"{ADDRESS_SPACE_LIMIT}, ulimit -v, of {sized(limit)}, less the {sized(used)} this "
            "process maps")


class _CompileWatch:
    """A numba.core.event listener (made one by ``watch_crashes``) of the compiler's lock and
    of compiles: while the lock is held (a compile, or a kernel loaded from the cache, which
    LLVM links in too; the overloads compiled while typing a kernel take it again, inside),
    LLVM's abort ends the process with ``_abort_message`` (``_on_crash``), which names the
    kernel once its compile begins."""

    depth = 0

    def on_start(self, event):
        global _abort_message
        if event.kind == "numba:compile":
            data = event.data if isinstance(event.data, dict) else {}
            name = getattr(data.get("dispatcher"), "__qualname__", None)
            if name and self.depth == 1:  # (the kernel itself, not an overload inside it)
                _abort_message = _aborted_compile(name)
            return
        self.depth += 1
        if self.depth == 1:
            _abort_message = _aborted_compile(None)

    def on_end(self, event):
        global _abort_message
        if event.kind == "numba:compile":
            return
        self.depth = max(0, self.depth - 1)
        if self.depth == 0:
            _abort_message = b""


def memory_limits(*, left: bool = False) -> list[str]:
    """The limits on this process's memory that are set, as the shell sets them ("ulimit -v
    8.0 GiB"; -v: RLIMIT_AS, -d: RLIMIT_DATA); with ``left``, what the one on the address
    space leaves now ("ulimit -v 600.0 MiB, 8.1 MiB of it left as it began")."""
    from destiny.wording import sized

    said = []
    limit = address_space_limit()
    if limit is not None:
        found = address_space_left() if left else None
        said.append(f"ulimit -v {sized(limit)}"
                    + (f", {sized(found[0])} of it left as it began" if found else ""))
    data = data_limit()
    if data is not None:
        said.append(f"ulimit -d {sized(data)}")
    return said


# What a message of a library's end says of the outputs.
_OUTPUTS_LEFT = ("No output being written was replaced (each is put in place only once "
                 "complete); their temporary files are left as a kill would leave them (the "
                 "next run removes them).")


def _aborted_compile(name: str | None) -> bytes:
    """The message for LLVM's abort as numba compiles the kernel ``name`` (None: compiles or
    loads a kernel), worded beforehand (a handler of SIGABRT must not allocate much: the memory
    is exhausted)."""
    kernel = f"compiling the kernel {name}" if name else "compiling or loading a kernel"
    limits = "; ".join(memory_limits(left=True))
    return (f"Error: out of memory: numba's compiler (LLVM) aborted in {kernel} (the lines "
            f"above are its own), under a limit on this process's memory ({limits}). "
            "A command compiles its kernels on its first run (and after an upgrade of Destiny "
            f"or numba), which needs {FIRST_RUN_NEEDS}, and caches them, so that later runs need "
            f"less. {_OUTPUTS_LEFT} To run, {RAISE_THE_LIMIT}; or run the command once without "
            "the limit, to fill the cache.\n").encode("utf-8", "backslashreplace")


def _crashed(signum: int) -> bytes:
    """The message for a library's abort (SIGABRT) or crash (SIGSEGV) outside a compile under a
    limit, worded beforehand: refused an allocation, NetCDF's library aborted ("NCbytes
    failure": generate-netcdf under ulimit -v 360 MiB) or crashed (a segmentation fault in
    HDF5 as the dataset file was created: 382 MiB)."""
    how = "aborted (SIGABRT" if signum == signal.SIGABRT else "crashed (a segmentation fault"
    limits = "; ".join(memory_limits(left=True))
    return (f"Error: a library {how}; the lines above, if any, are its own) under a limit on "
            f"this process's memory ({limits}), which is the likely cause: refused an "
            f"allocation, the libraries Destiny runs (NetCDF's, LLVM) abort or crash so. "
            f"{_OUTPUTS_LEFT} To run, {RAISE_THE_LIMIT}; where it ends so without the limit "
            "too, report it, with the lines above.\n").encode("utf-8", "backslashreplace")


# What ``_on_crash`` writes: outside a compile, ``_crash_messages[signum]``; within one, for
# SIGABRT, ``_abort_message``.
_abort_message = b""
_crash_messages: dict[int, bytes] = {}
_CRASHES = (signal.SIGABRT, signal.SIGSEGV)
_handler = None  # (the ctypes callback, kept alive while installed)
_libc_signal = None


def _on_crash(signum: int) -> None:
    """The handler of SIGABRT and SIGSEGV under a limit: LLVM calls abort() where an allocation
    fails ("LLVM ERROR: out of memory", or std::bad_alloc thrown through a C function), and
    NetCDF's library aborts or crashes, with no exception to catch. It runs in the thread that
    failed, in C's signal context, so it writes the prepared message and exits, and does little
    else (the memory may be gone). Outside a compile, a crash far from the limit (a scheduler's
    default of 64 GiB) is no shortage: the signal's default action is restored and taken, with
    its exit status and core dump."""
    if not (signum == signal.SIGABRT and _abort_message):
        try:
            near = near_a_memory_limit()
        except BaseException:  # noqa: BLE001 (no memory left to tell: near, then)
            near = True
        if not near:
            _libc_signal(signum, None)  # (SIG_DFL: the fault repeats, or abort() raises again)
            return
    os.write(2, _abort_message if signum == signal.SIGABRT and _abort_message
             else _crash_messages.get(signum, b""))
    os._exit(1)


def _install_crash_handler() -> None:
    """``_on_crash`` as the C-level handler of ``_CRASHES``, with the C library's signal(): a
    Python-level handler (``signal.signal``) would never run, as abort() raises the signal
    again, with the default action, once the C-level handler Python installs returns (and a
    segmentation fault repeats the faulting instruction)."""
    global _handler, _libc_signal
    import ctypes

    _libc_signal = ctypes.CDLL(None).signal
    _libc_signal.restype = ctypes.c_void_p
    _libc_signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
    _handler = ctypes.CFUNCTYPE(None, ctypes.c_int)(_on_crash)
    for signum in _CRASHES:
        _libc_signal(signum, _handler)


# mallopt's parameter for the most malloc arenas (glibc's malloc.h).
_M_ARENA_MAX = -8


def one_malloc_arena() -> None:
    """Under a limit on the address space (``ulimit -v``), have glibc's malloc serve every
    thread from one arena: by default it reserves 64 MiB of address space for each thread that
    allocates at once with another (up to 8 per core), which the limit counts whole though
    little of it is used. A warm train on tiny data with 2 threads mapped 650 MiB at most by
    default, 440 MiB with one arena (its VmPeak). The threads that allocate (OpenBLAS's,
    numba's, tqdm's and the stuck watch's) do so seldom, so contention costs nothing measured.
    Call it before the libraries start their threads (before NumPy loads); without a limit,
    with another C library than glibc, or where the user set the arenas (MALLOC_ARENA_MAX, or
    glibc.malloc.arena_max in GLIBC_TUNABLES), nothing is done."""
    if (address_space_limit() is None or "MALLOC_ARENA_MAX" in os.environ
            or "arena_max" in os.environ.get("GLIBC_TUNABLES", "")):
        return
    import ctypes

    try:
        ctypes.CDLL(None).mallopt(_M_ARENA_MAX, 1)
    except (AttributeError, OSError):  # (not glibc: musl has no arenas to cap)
        pass


# What OpenBLAS maps for a thread's buffer (measured: VmSize before and after NumPy's first
# product; a threaded product maps nothing more).
_BLAS_BUFFER = 32 << 20
# The least address space train or predict must have left as they start (``map_thread_memory``):
# warm runs on tiny data, under the least limit each ran in, mapped 109 MiB (train) and 138 MiB
# (predict) more than they had as they started (VmPeak less VmSize then). Below this none can
# run.
_LEAST_ROOM = 2 * _BLAS_BUFFER


def map_thread_memory() -> str | None:
    """Have the libraries' threads map what they need now, for commands that run them anyway
    (train, predict): under a limit on the address space (or on data), a library refused it
    later ends the process itself, with its own line, exit status 1 and no other message.

    - numba's parallel loops start their threads (a stack each) at the first loop:
      "libgomp: Thread creation failed: Resource temporarily unavailable", seen by a warm train
      on tiny data under ulimit -v 390 to 490 MiB. They start here with a bias added to a
      2 x 2 matrix, in every run, so that a cache warmed by a run without the limit holds the
      kernel (compiled under the limit, it can take more than the limit leaves).
    - Under a limit, NumPy's BLAS maps its buffer (32 MiB and more) at the first product, a
      2 x 2 one here: "OpenBLAS error: Memory allocation still failed after 10 retries, giving
      up."

    Allocations refused later are NumPy's MemoryError, or LLVM's abort, worded. Where the
    limit on the address space leaves less than ``_LEAST_ROOM``, too little for any run, nothing
    is mapped, and the reason the command cannot run is returned (for the caller to raise once
    the ranks of mpiexec have started, so that all of them end with it); otherwise None."""
    found = address_space_left()
    if found is not None and found[0] < _LEAST_ROOM:
        return _too_little_room(found[0])
    import numpy as np

    from destiny.kernels.cpu import dense

    a = np.ones((2, 2), np.float32)
    dense.add_bias(a, np.zeros(2, np.float32))
    if address_space_limit() is not None or data_limit() is not None:
        np.matmul(a, a)
    return None


def _too_little_room(left: int) -> str:
    from destiny.wording import sized

    return (f"out of memory: under the limit on this process's address space (ulimit -v "
            f"{sized(address_space_limit())}), {sized(left)} is left once the command's "
            f"libraries are loaded, and a run maps {sized(_LEAST_ROOM)} more at the least (its "
            "threads' stacks, NumPy's BLAS buffer, the data, the network and the kernels' "
            f"code). Nothing was done. To run, {RAISE_THE_LIMIT}.")


_watch: _CompileWatch | None = None


def watch_crashes() -> None:
    """While a limit on the address space (or on data: ``ulimit -d``) is set, end the process
    with a message and exit status 1 where a library aborts or crashes it (SIGABRT, SIGSEGV):
    LLVM as numba compiles or loads a kernel (``_CompileWatch``, the message naming it), or,
    near the limit (``near_a_memory_limit``), another library refused an allocation; instead of
    exit status 134 or 139 (and a core dump, where they are enabled). Without a limit, with
    DESTINY_DEBUG set (to debug the crash), or with Python's faulthandler enabled
    (PYTHONFAULTHANDLER, whose tracebacks the user asked for), nothing is done. Idempotent."""
    global _watch
    import faulthandler

    if (_watch is not None or os.environ.get("DESTINY_DEBUG") or faulthandler.is_enabled()
            or address_space_limit() is None and data_limit() is None):
        return
    from numba.core import event

    for signum in _CRASHES:
        _crash_messages[signum] = _crashed(signum)
    _install_crash_handler()
    _watch = type("CompileWatch", (_CompileWatch, event.Listener), {})()
    event.register("numba:compiler_lock", _watch)
    event.register("numba:compile", _watch)
