"""The address space that a limit on it (``ulimit -v``: RLIMIT_AS) leaves this process.

Many batch schedulers (SLURM's or PBS's vmem limits) and some cron setups run jobs under such a
limit. It counts every mapping, not the memory used: the shared libraries (numba's LLVM alone
maps about 100 MiB), each thread's stack and malloc arena, and what LLVM takes as numba
compiles the kernels on a command's first run. ``memory.available_memory`` counts what the
limit leaves beside the memory free.

It imports nothing but the standard library at first (the command line's start-up check reads
it before NumPy loads, which itself fails under a limit too small).
"""

from __future__ import annotations

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
    if resource is None:
        return None
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (OSError, ValueError, AttributeError):
        return None
    return None if soft == resource.RLIM_INFINITY or soft < 0 else soft


def address_space_in_use() -> int | None:
    """The bytes this process maps (VmSize in /proc/self/status), or None where unreadable."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmSize:"):
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
