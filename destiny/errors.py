"""The errors Destiny raises for bad input.

The library never prints and never exits: it raises a ``DestinyError`` whose text is one
paragraph a user can act on (which file, line or JSON path; what was found; what was
expected; what to do). Only ``cli/`` turns it into exit code 1. A failure of the system (a
full disk, memory) is an OSError or MemoryError, which ``system_failure`` words alike for the
command line and for an MPI rank's report to the others.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Sequence

try:  # (loaded now: at the limit on open files, its own loading would fail)
    import resource
except ImportError:  # (not on Windows)
    resource = None

from destiny.wording import readable


class DestinyError(Exception):
    """Base class: bad input or an impossible request, explained for the user.

    Its text shows a byte of a file name or of the command line that is not UTF-8 as ``\\xff``
    (``wording.readable``), whatever the message put in; attributes keep the names as given.
    """

    def __str__(self) -> str:
        return readable(super().__str__())


class DataFormatError(DestinyError):
    """A text, index or NetCDF file that does not follow the expected format."""

    def __init__(self, path, message: str, *, line: int | None = None, column: int | None = None):
        where = str(path)
        if line is not None:
            where += f", line {line}"
            if column is not None:
                where += f", column {column}"
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.line = line
        self.column = column


class OutputError(DestinyError):
    """An output that cannot be written (missing directory, no permission, ...)."""


class NetDefError(DestinyError):
    """An invalid network definition (DSSTNE JSON), or one that uses an unsupported feature.

    The message starts with the file name (when read from a file) and the JSON path of the
    offending field, e.g. ``Layers[1].Activation: unknown 'Sigmod'; expected one of ...``.
    ``item`` is the position of the offending name in the list the path ends with (a layer's
    Source or Skip), for a reader that names each entry (a network file's ``layer2_source1``).
    """

    def __init__(self, json_path: str, message: str, *, file: str | None = None,
                 item: int | None = None):
        # (no JSON path for a file that cannot be read at all)
        prefix = ": ".join(part for part in (file, json_path) if part)
        super().__init__(f"{prefix}: {message}")
        self.json_path = json_path
        self.detail = message
        self.file = file
        self.item = item

    def with_file(self, file) -> "NetDefError":
        """Return the same error with the definition's file name in front."""
        return NetDefError(self.json_path, self.detail, file=str(file), item=self.item)


class InterruptedAfterOutputs(KeyboardInterrupt):
    """An interrupt (Ctrl-C, SIGTERM) that came while outputs were put in place, raised once
    all of them were: ``paths`` (as the caller named them) are complete."""

    def __init__(self, paths: list[str]):
        super().__init__()
        self.paths = paths


class NetCDFFailure(RuntimeError):
    """netCDF's own failure ("NetCDF: HDF error") while the file ``filename`` was written: a
    RuntimeError as netCDF4's, with the name of the output (io/failures.py)."""

    def __init__(self, message: str, filename: str):
        super().__init__(message)
        self.filename = filename


class InPlaceFailure(OSError):
    """The system's failure in writing an output written in place (a stream, train's metrics
    file), which therefore holds what was written before it (io/failures.py)."""


# Outputs are written to temporary files and renamed into place once complete (io/atomic.py),
# so a command stopped part-way leaves every output as it was.
NOTHING_REPLACED = "no output was replaced (each is put in place only once complete)"
# The same, once some were put in place (complete) before the command failed or was stopped.
NO_OTHER_REPLACED = "no other output was replaced (each is put in place only once complete)"
# A full file system, a quota reached (ENOSPC also where no inode is left), a file size limit.
FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
FREE_SPACE = "free space on that file system (or raise the quota)"  # (what mends FULL)
# What ``system_failure`` says to do once the cause is mended, where its caller gives no
# ``then``: each ends the message, "then RUN_AGAIN." (train under mpiexec, whose ranks worded
# it, puts its own in their place).
RUN_AGAIN = "run the command again"  # (for memory, or the limit on open files)
RUN_AGAIN_OR_ELSEWHERE = f"{RUN_AGAIN}, or write the outputs elsewhere"
STANDARD_OUTPUT = "standard output"  # (how messages name '-' as an output)
# What a map refused for want of memory means (a library not loaded, ENOMEM): a clause.
_TOO_LITTLE_MEMORY = ("the memory free, or the address space that a limit allows (ulimit -v, a "
                      "container's or a job's memory limit), is too small")
# Too many files open: the process's limit (ulimit -n) or the system's table is reached. No
# file is at fault, whichever one was being opened (an input, a lock, a module numba loads).
OPEN_FILES = {errno.EMFILE, errno.ENFILE}
# What mends a NUL byte in text whose labels may hold none (io/text.py, io/ratings.py): a NUL is
# valid UTF-8, and one after every ASCII character is UTF-16 text.
NUL_REMEDY = ("remove the NUL bytes (for example with `tr -d '\\000'`). A NUL after every "
              "character means UTF-16 text: convert it with `iconv -f utf-16 -t utf-8`.")


def utf16_bom_error(path, head: bytes) -> DataFormatError | None:
    """The refusal of a file whose first bytes ``head`` are a UTF-16 byte-order mark, or None.
    Its first byte (FF or FE) is never UTF-8, so the readers' own message would name that byte
    and suggest converting from latin1, which turns UTF-16 into garbage."""
    if not head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return None
    return DataFormatError(path, f"the file starts with the bytes {head[0]:02X} {head[1]:02X}, a "
                           "UTF-16 byte-order mark: it is UTF-16 text, and Destiny reads UTF-8 "
                           "(or ASCII). Convert it, for example with `iconv -f utf-16 -t utf-8`.",
                           line=1, column=1)


# The first bytes of a NetCDF file: classic (CDF 1, 2, 5) or netCDF-4, which is HDF5's.
NETCDF_MAGIC = (b"CDF\x01", b"CDF\x02", b"CDF\x05", b"\x89HDF\r\n\x1a\n")


def starts_as_netcdf(path) -> bool:
    """Whether ``path`` is a regular file whose first bytes are a NetCDF file's. (Only a
    regular file is opened: a named pipe's open would wait for a writer.)"""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as f:
            return f.read(8).startswith(NETCDF_MAGIC)
    except (OSError, ValueError):
        return False


def memory_limit_may_be_why(path) -> str:
    """A sentence to end the message of the NetCDF library's failure to open or read ``path``
    where a limit on this process's memory (ulimit -v, -d) leaves it little
    (``near_a_memory_limit``) and the file starts as a NetCDF file does: the library refused an
    allocation fails so too (train under ulimit -v 414 MiB: "NetCDF: Unknown file format" for a
    whole dataset file). Otherwise ""."""
    from destiny.addrspace import memory_limits, near_a_memory_limit

    found = memory_limits()
    if not found or not near_a_memory_limit() or not starts_as_netcdf(path):
        return ""
    return (f" A limit on this process's memory is set ({', '.join(found)}), under which an "
            "allocation the NetCDF library is refused fails so too: raise the limit and run the "
            "command again; only where it fails so without the limit is the file at fault.")


def netcdf_text_error(path, head: bytes) -> DataFormatError | None:
    """The refusal of a file whose first bytes ``head`` are a NetCDF file's, where text is
    read, or None. A dataset or network given for a text or index file (flags swapped, a
    path from another step) would otherwise be reported as text that is not UTF-8, with
    advice to convert it from latin1."""
    if not head.startswith(NETCDF_MAGIC):
        return None
    return DataFormatError(path, "is a NetCDF file (a dataset written by generate-netcdf, or a "
                           "network written by train), not text; check that the file flags "
                           "are not swapped and that this path is the text or index file meant.")


def netcdf_library_failure(e: BaseException) -> bool:
    """Whether ``e`` is the NetCDF library's own failure to read an open file, as
    netCDF4-python raises it: a RuntimeError (an AttributeError for an attribute) worded
    ``NetCDF: ...`` ("NetCDF: HDF error", "NetCDF: Can't open HDF5 attribute"). (A file it
    cannot open at all is an OSError, which each caller words itself.)"""
    return (isinstance(e, (RuntimeError, AttributeError)) and bool(e.args)
            and isinstance(e.args[0], str) and e.args[0].startswith("NetCDF:"))


# The file the main thread is in a call into a library for, as ("reading" or "writing", the
# path as given), or None: a call that never returns (HDF5 looping on a damaged file, a hung
# network file system) is ended by the stuck-command watch (cli/stuck.py), whose message then
# names the file. The watch's thread reads it while the main thread is blocked; one assignment
# on the way in and one on the way out, atomic in Python, so no lock is needed, and a read
# pays two assignments. Only the main thread reads and writes NetCDF files.
_in_file: tuple[str, object] | None = None


def file_in_use() -> tuple[str, object] | None:
    """("reading" or "writing", path) of the file the command is in a library call for
    (``netcdf_reads``, ``in_file``), or None."""
    return _in_file


@contextlib.contextmanager
def in_file(path, doing: str):
    """Within the block, ``file_in_use`` is (``doing``, ``path``): "reading" or "writing"."""
    global _in_file
    outer, _in_file = _in_file, (doing, path)
    try:
        yield
    finally:
        _in_file = outer


@contextlib.contextmanager
def netcdf_reads(path, damaged: str):
    """Raise the NetCDF library's failure to read the file ``path`` within the block (as it
    opens, past the header, or later: an attribute or a block of data in a damaged file that
    HDF5 cannot decode) as a ``DataFormatError`` naming the file, ``damaged`` ending the
    message (what to do). It was a traceback (AttributeError), or, as a RuntimeError, worded
    as a full disk while writing. ``damaged`` follows the library's words: "; the file is
    damaged; ..." or ". The ...". Within the block, ``file_in_use`` names ``path``."""
    global _in_file
    outer, _in_file = _in_file, ("reading", path)  # (``in_file``'s, without a second frame)
    try:
        yield
    except (RuntimeError, AttributeError) as e:
        if not netcdf_library_failure(e) or isinstance(e, NetCDFFailure):  # (ours: writes)
            raise
        raise DataFormatError(path, f"the NetCDF library failed to read it ({e.args[0]})"
                              f"{damaged}{memory_limit_may_be_why(path)}") from None
    finally:
        _in_file = outer


def system_failure(e: BaseException, then: str | None = None, *, network: bool = True,
                   kept: str | None = None, complete: Sequence[str] = ()) -> str | None:
    """The message for a failure of the system (a full disk, a quota, an I/O error, netCDF's
    own failure, memory), or None if ``e`` is none of them (a bug: its traceback is wanted).
    ``then`` is what to do once the cause is mended (by default, run the command again, or
    write the outputs elsewhere; for memory or the limit on open files, run it again);
    ``network``: the command holds a network (train, predict), whose size is then the advice
    on memory;
    ``kept``: what the outputs are left as, where a file being replaced failed (train has put
    files in place before); by default, that none was. ``complete``: the outputs put in place
    before the failure (evaluate's --json-out file, before its table failed on standard
    output), which the message says are complete."""
    # (another file system mends neither memory nor the limit on open files, the process's)
    again = then or RUN_AGAIN
    then = then or RUN_AGAIN_OR_ELSEWHERE
    # ("no output was replaced" was false for them, or nothing was said of them at all)
    done = "" if not complete else (
        f"{', '.join(complete)} {'was' if len(complete) == 1 else 'were'} put in place before "
        f"the failure and {'is' if len(complete) == 1 else 'are'} complete")
    if kept is None:
        kept = NO_OTHER_REPLACED if complete else NOTHING_REPLACED
    in_place_kept = done and f"; {done}"  # (after what the output that failed holds)
    kept = f"{done}; {kept}" if done else kept
    loading = library_not_loaded(e)
    if loading is not None:  # (an ImportError, or llvmlite's OSError without a strerror)
        return (f"out of memory ({loading}); {kept}. A library the command needs could not be "
                f"loaded: {_TOO_LITTLE_MEMORY} for it. Free memory or raise the limit, then "
                f"{again}.")
    e = open_files_exhausted(e) or e  # (a compiled module's ImportError: an OSError below)
    if isinstance(e, OSError):  # after the checks: a full disk, a quota, an I/O error
        if e.strerror is None or isinstance(e, BrokenPipeError):  # (stdout's reader left)
            return None
        where = f"{e.filename}: " if e.filename else ""
        said = e.strerror
        if e.errno == errno.EFBIG:
            remedy = ("The file is larger than the file system, or the process's file size "
                      "limit (ulimit -f), allows: raise the limit (or use a file system that "
                      f"takes larger files), then {then}.")
        elif e.errno in FULL:
            advice = free_space(e.filename)
            remedy = f"{_begun(advice)}, then {then}."
        elif e.errno in OPEN_FILES:  # ("check the file" sent the user to a file at no fault)
            advice = too_many_open_files(e.errno)
            remedy = f"{_begun(advice)}, then {again}."
        elif e.errno == errno.ENOMEM:  # (a map refused: llvmlite's executable memory as numba
            # compiles, under ulimit -v; its guess at SELinux, which refuses with EACCES or
            # EPERM, is left out: ENOMEM is memory)
            said = said.split(". ")[0].rstrip(".")
            remedy = f"{_begun(_TOO_LITTLE_MEMORY)}: free memory or raise the limit, then {again}."
        else:
            remedy = f"Check the file and the file system, then {then}."
        if isinstance(e, InPlaceFailure):
            kept = (f"{'it' if e.filename else 'the output'} is written as the command goes, "
                    f"and holds what was written before the failure{in_place_kept}")
        return f"{where}{said}; {kept}. {remedy}"
    if isinstance(e, RuntimeError) and str(e).startswith("NetCDF:"):  # "NetCDF: HDF error"
        where = f"{e.filename}: " if isinstance(e, NetCDFFailure) else ""
        return (f"{where}the NetCDF library failed ({e}); {kept}. While writing, "
                f"a full disk or quota is the usual cause: free space, then {then}.")
    if isinstance(e, SystemError):
        from destiny.addrspace import near_a_memory_limit

        if near_a_memory_limit():
            # (a C function that failed to allocate and returned an error without an
            # exception: numba loading a cached kernel, its target_context.refresh(), under
            # ulimit -v 410 MiB; far from a limit, a SystemError is a bug: its traceback)
            e = MemoryError("an allocation in a library failed")
    on_gpu = _out_of_gpu_memory(e)
    if isinstance(e, MemoryError) or on_gpu:  # NumPy's says how much one array needed
        said = str(e).rstrip(".") or "an allocation failed"  # (CuPy's ends in a full stop)
        what = f"out of {'GPU ' if on_gpu else ''}memory ({said})"
        if on_gpu:
            return (f"{what}. The network's weights (in training, with their gradients and "
                    "optimizer state) and a batch's activations must fit in the GPU's memory "
                    "(the training data need not: it is streamed where it takes more than half "
                    "of what they leave free): use smaller layers or a smaller batch (-b), "
                    "split the layers over several GPUs with mpiexec (train; predict "
                    "--split-layers: the README's sections on them), or free the GPU of other "
                    "processes (nvidia-smi lists them).")
        if not network:
            # (the inputs are files, or sizes asked for: synthetic_data.py's --users)
            return (f"{what}; {kept}. Check that the inputs and flags are the ones meant (not "
                    "a binary file read as text, nor sizes larger than intended), then free "
                    f"memory or run on a machine with more.{_memory_limited()}")
        return (f"{what}. The network's weights (in training, with their gradients and "
                "optimizer state), the data and a batch must fit in this machine's memory: use "
                "smaller layers or a smaller batch (-b), or split the layers over several "
                "processes or machines with mpiexec (train; predict --split-layers: the "
                f"README's sections on them).{_memory_limited()}")
    return None


def _memory_limited() -> str:
    """A sentence naming the limits on this process's memory that are set (ulimit -v, -d),
    which refuse an allocation whatever the machine has free, or "" where none is."""
    from destiny.addrspace import memory_limits

    found = memory_limits()
    if not found:
        return ""
    return (f" A limit on this process's memory is set ({', '.join(found)}), which refuses "
            "allocations whatever the machine has free: raise it, or, in a batch job, ask for "
            "memory (SLURM's --mem, PBS's mem) instead of virtual memory (vmem).")


def out_of_memory_loading(e: MemoryError) -> str:
    """The message for ``e``, a MemoryError raised as the command's modules load (Python
    unmarshalling a module's code, under ulimit -v) or as it starts its threads (the
    stuck-command watch's), before the command has begun: the
    advice on inputs and network sizes that ``system_failure`` gives does not apply."""
    said = str(e).rstrip(".") or "an allocation failed"
    return (f"out of memory as the command loaded ({said}); {NOTHING_REPLACED}. "
            f"{_begun(_TOO_LITTLE_MEMORY)} for it to start: free memory or raise the limit, then "
            f"{RUN_AGAIN}.")


def _begun(clause: str) -> str:
    """``clause`` (the advice functions below give clauses) as the start of a sentence."""
    return clause[:1].upper() + clause[1:]


def free_space(path) -> str:
    """What mends ``FULL`` for a file at ``path`` (a clause): ``FREE_SPACE``, or, where its file
    system has no inode left (ENOSPC too, with space to spare: many small files), removing
    files, which freeing space in large ones does not mend."""
    if path is not None:
        with contextlib.suppress(OSError, TypeError, ValueError):
            # (standard output is the file system of descriptor 1, not of the current
            # directory; a file there already, through its links: /dev/stdout's)
            found = (os.fstatvfs(1) if path == STANDARD_OUTPUT else os.statvfs(path)
                     if os.path.exists(path) else
                     os.statvfs(os.path.dirname(os.fspath(path)) or "."))
            if found.f_files and not found.f_ffree:  # (f_files 0: a file system without a
                return ("remove files from that file system: it has no inode left for a new "
                        "one (df -i shows it), whatever space it has free")  # count of them)
    return FREE_SPACE


# The dynamic loader's words (glibc's dlopen) for a shared library it could not map into the
# process: mmap failed, the memory or the address space (ulimit -v) being exhausted.
_NOT_MAPPED = "failed to map segment from shared object"


def library_not_loaded(e: BaseException) -> str | None:
    """The loader's words where ``e``, or an exception it was raised from or while handling, is
    a shared library that could not be mapped into memory (an ImportError of a compiled module:
    netCDF4's libbz2; llvmlite's OSError, raised as its ctypes load failed), else None. The
    modules load as the command starts, or on first use: a traceback said it."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, (ImportError, OSError)) and _NOT_MAPPED in str(e):
            return str(e).strip()
        e = e.__cause__ or e.__context__
    return None


def open_files_failure(e: OSError, path) -> OSError | None:
    """``e``, an input's open or read that failed, as the system's failure naming ``path``
    where the limit on open files was reached (``OPEN_FILES``), for ``system_failure`` to word;
    else None (a file missing, unreadable: each reader words it). Its message said to check
    the path and its permissions, or to create the file again."""
    if e.errno not in OPEN_FILES:
        return None
    return OSError(e.errno, e.strerror, os.fspath(path))


def open_files_exhausted(e: BaseException) -> OSError | None:
    """``e`` as an OSError where it is the limit on open files reached (``OPEN_FILES``), else
    None: ``e`` itself, or a compiled module that could not be loaded for it (the loader's
    ImportError, "...so: cannot open shared object file: Too many open files", as numba loads
    its thread pool on first use), naming the module."""
    if isinstance(e, OSError):
        return e if e.errno in OPEN_FILES else None
    if isinstance(e, ImportError):
        for code in (errno.ENFILE, errno.EMFILE):  # (EMFILE's words begin ENFILE's)
            if str(e).endswith(os.strerror(code)):
                return OSError(code, os.strerror(code), e.path or e.name)
    return None


def too_many_open_files(code: int) -> str:
    """What mends ``code``, an ``OPEN_FILES`` errno (a clause): the limit is the process's
    (EMFILE; its value said, as a cron job or a service may run under a lower one than a
    shell) or the whole system's (ENFILE)."""
    if code == errno.ENFILE:
        return ("the system has as many files open as it allows (fs.file-max): close programs "
                "that hold many files, or raise the system's limit")
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (AttributeError, OSError, ValueError):  # (AttributeError: no resource module)
        soft = hard = None
    # A value to raise it to, above the one in force: 1024, the usual default, was the advice
    # itself, so a process at 1024 was told to set 1024. Not above the hard limit, which only
    # root raises (ulimit -n past it fails).
    higher = None if soft is None else max(4 * soft, 1024)
    if higher is not None and hard != resource.RLIM_INFINITY:
        higher = min(higher, hard)
    limit = "" if soft is None else f", {soft} now"
    if higher is not None and higher <= soft:
        return (f"this process has as many files open as its limit allows (ulimit -n{limit}), "
                "which is also the hard limit: raise the hard limit (as root: nofile in "
                "/etc/security/limits.conf, or LimitNOFILE= for a systemd service)")
    return (f"this process has as many files open as its limit allows (ulimit -n{limit}): "
            f"raise the limit (ulimit -n {higher or 4096}, or LimitNOFILE= for a systemd "
            "service)")


def _out_of_gpu_memory(e: BaseException) -> bool:
    """Whether ``e`` is a GPU allocation that failed: CuPy's pool's OutOfMemoryError (a
    MemoryError; numba's arrays come from that pool), or numba's own allocator's
    CUDA_ERROR_OUT_OF_MEMORY where CuPy's pool is not used (``kernels/cuda/memory.py``)."""
    if isinstance(e, MemoryError):
        return type(e).__module__.startswith("cupy")
    return type(e).__name__ == "CudaAPIError" and "CUDA_ERROR_OUT_OF_MEMORY" in str(e)
