"""The system's failures while an output is written, told with the output's name.

The OSError of a write, flush or close that fails (a full disk, a quota, an I/O error) names
no file; netCDF's failures are RuntimeErrors ("NetCDF: HDF error") that name none either; and
those that name one name the temporary file written in the output's place (io/atomic.py).
errors.system_failure's message then said "No space left on device" without saying which
output. Here such a failure gets the output's name as the user gave it: a text file Destiny
opens (``open_text``) names its own writes' failures, and atomic_outputs names those of the
files a library writes to a path it is given (netCDF's, an index's) as its block ends.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
from typing import TextIO

from destiny.errors import FULL, STANDARD_OUTPUT, InPlaceFailure, NetCDFFailure


def output_name(path) -> str:
    """How a message names output ``path``: '-' is standard output."""
    return STANDARD_OUTPUT if path == "-" else str(path)


def named(e: BaseException, name: str, temporary=None) -> BaseException | None:
    """``e``, raised while output ``name`` was written (through the file ``temporary`` in its
    place), as the same failure naming ``name``; or None where ``e`` is not the system's
    failure in writing it: one naming another file (an input read meanwhile), a bug."""
    if isinstance(e, OSError):
        if (e.strerror is None or isinstance(e, BrokenPipeError)  # (the reader left: SIGPIPE)
                or e.filename not in (None, temporary)):
            return None
        # netCDF reports a failure of HDF5 to create a file as EACCES (on a full tmpfs,
        # "Permission denied" for the temporary file this process had just created) or as an
        # error code of its own ("NetCDF: HDF error").
        if e.filename == temporary and (e.errno in (errno.EACCES, errno.EPERM)
                                        or str(e.strerror).startswith("NetCDF:")):
            e = _full(temporary) or e
        return OSError(e.errno, e.strerror, name)  # (the subclass follows errno)
    if (isinstance(e, RuntimeError) and str(e).startswith("NetCDF:")
            and not isinstance(e, NetCDFFailure)):  # (not named yet)
        full = _full(temporary)  # "NetCDF: HDF error" is a full disk's, most often
        return NetCDFFailure(str(e), name) if full is None else OSError(
            full.errno, full.strerror, name)
    return None


# Enough to need a block of its own on any file system (tmpfs' page, ext4's 4 KiB, ...)
_PROBE_BYTES = 64 * 1024


def _full(temporary) -> OSError | None:
    """The system's failure of a write appended to the temporary file ``temporary`` if it
    is a full disk's, a quota's or a size limit's (``errors.FULL``), else None: what a
    library's vaguer failure there was (netCDF's "Permission denied", "HDF error"). The
    file is the failed output's, removed next, so its tail does not matter."""
    if not isinstance(temporary, str) or not os.path.isfile(temporary):  # (never a pipe)
        return None
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_APPEND)
    except OSError:
        return None
    try:
        try:
            data = memoryview(bytes(_PROBE_BYTES))
            while data:  # (a write short of space writes what fits; the next one fails)
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)  # (NFS reports a full disk at close)
    except OSError as e:
        return e if e.errno in FULL else None
    return None


class _NamedFile(io.FileIO):
    """A file open for writing whose failures (write, close: NFS reports a full disk at
    close) name the output ``output``, wherever the file is (a temporary file, a stream);
    ``in_place``: the output itself, as ``InPlaceFailure``."""

    def __init__(self, file, output: str, closefd: bool = True, in_place: bool = False):
        super().__init__(file, "w", closefd=closefd)
        self.output, self.in_place = output, in_place

    # (No temporary file given to ``named``: its writes' failures name no file, and one
    # written in place, a metrics file, must never be tried by ``_full``'s write.)
    def write(self, b):
        with self._naming():
            return super().write(b)

    def close(self):
        with self._naming():
            super().close()

    @contextlib.contextmanager
    def _naming(self):
        try:
            yield
        except OSError as e:
            failure = named(e, self.output)
            if failure is None:
                raise
            if self.in_place:
                failure = InPlaceFailure(failure.errno, failure.strerror, failure.filename)
            raise failure from e


def open_text(file, output: str, closefd: bool = True, in_place: bool = False) -> TextIO:
    """``file`` (a path, or a descriptor) open for writing UTF-8 text as ``open(file, "w",
    encoding="utf-8", newline="\\n")`` opens it, its failures naming ``output`` (``in_place``:
    the output itself, not a temporary file beside it). (The raw file names them: only its own
    writes are named, not a read of an input between two of them.)"""
    raw = _NamedFile(file, output, closefd, in_place)
    try:
        return io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8", newline="\n",
                                line_buffering=raw.isatty())
    except BaseException:
        raw.close()
        raise
