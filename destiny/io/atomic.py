"""Atomic outputs: write beside the target, rename into place only when all succeeded.

A killed or failing job therefore never leaves a half-written file where a good one stood,
and a command with several outputs (a dataset plus its index files) publishes none of them
unless it can publish all.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import stat
import sys
import tempfile
import time
from typing import Callable, TextIO

from destiny.errors import (FULL, OPEN_FILES, InterruptedAfterOutputs, OutputError, free_space,
                            in_file, too_many_open_files)
from destiny.io import failures
from destiny.signals import uninterrupted
from destiny.wording import quoted


def check_outputs(outputs, inputs=()) -> None:
    """Fail early, before any work, if an output cannot be written where it is asked for.

    ``outputs`` and ``inputs`` are (path, what) pairs, ``what`` naming the file and its flag
    ("network file (-n)"); outputs not given (None) are skipped, an empty path is refused.
    The checks are then ``check_distinct`` and ``check_writable``, which refuses a stream ('-'
    among them): an output that may be one is written in place (``is_stream``, ``text_output``)
    and not checked here.
    """
    for path, what in outputs:
        if path is not None and not os.fspath(path):
            raise OutputError(f"the {what} is an empty path; give a file name.")
    check_distinct(outputs, inputs)
    for path, what in outputs:
        if path is not None:
            check_writable(path, what)


def is_stream(path) -> bool:
    """Whether ``path`` is written in place, as a stream: '-' (standard output), a file
    descriptor of this process named as a file (``descriptor``: /dev/stdout, which may be a
    log the shell opened, ``>> cron.log``), a device, pipe or socket (``/dev/null``, a named
    pipe), through links. The rename that publishes a file would replace it (as root,
    ``/dev/null`` itself)."""
    if _output_fd(path) is not None:
        return True
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


_STANDARD = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}
_FD_NAME = re.compile(r"/(?:dev|proc/self|proc/(\d+))/fd/(\d+)")


def descriptor(path) -> int | None:
    """The open file descriptor of this process that ``path`` names, or None: /dev/stdout is 1,
    /dev/stderr 2, /dev/fd/N and /proc/self/fd/N are N, and so is a link to one of these."""
    try:
        name = os.path.abspath(os.fspath(path))
    except (TypeError, ValueError):
        return None
    for _ in range(40):  # (as the system, give up on a loop of links)
        match = _FD_NAME.fullmatch(name)
        if name in _STANDARD or match and match[1] in (None, str(os.getpid())):
            fd = _STANDARD[name] if name in _STANDARD else int(match[2])
            try:
                os.fstat(fd)
            except OSError:  # (not open: the name fails as any missing file would)
                return None
            return fd
        try:
            target = os.readlink(name)
        except OSError:  # not a link
            return None
        name = os.path.normpath(os.path.join(os.path.dirname(name), target))
    return None


def _output_fd(path) -> int | None:
    """The descriptor an output path names: '-' is standard output; else ``descriptor``."""
    return 1 if path == "-" else descriptor(path)


def _stream_kind(path) -> str:
    fd = _output_fd(path)
    return ("a device, pipe or socket" if fd is None else
            {0: "standard input", 1: "standard output", 2: "standard error"}.get(
                fd, f"this process's file descriptor {fd}"))


# The outputs this process has written in place (``open_stream``), by the names messages give
# them: an interrupt leaves them holding what was written before it (``streamed``).
_streamed: list[str] = []


def streamed() -> list[str]:
    """The names of the outputs written in place so far (standard output, a pipe)."""
    return list(dict.fromkeys(_streamed))


def forget_streamed() -> None:
    """Forget them, and the outputs put in place (a command starting: tests run many in one
    process)."""
    _streamed.clear()
    _put_in_place.clear()


# The outputs that this process's latest ``OutputSet.commit`` put in place, as the caller named
# them: an interrupt that comes after it (as the locks are released, a last note is printed)
# finds them complete, not "no output was replaced" (``put_in_place``).
_put_in_place: list[str] = []


def put_in_place() -> list[str]:
    """The outputs that the latest commit put in place (empty before any)."""
    return list(_put_in_place)


# The temporary files of the outputs being written (``OutputSet.path``), each to the output it
# is written for, as the caller named it: the stuck-command watch (cli/stuck.py) names the
# output whose temporary file a write never returned from (``errors.file_in_use``).
_temporaries: dict[str, str] = {}


def output_of(path) -> str | None:
    """The output (as the caller named it) whose temporary file is ``path``, or None."""
    return _temporaries.get(path)


def open_stream(path) -> TextIO:
    """``path`` (``is_stream``) open for writing UTF-8 text in place. A file descriptor of
    this process is written through, sharing its offset with the process's own writes: opening
    /dev/stdout again would empty the log that stdout appends to (``>> cron.log``), and it
    bypasses sys.stdout, whose short writes CPython drops under PYTHONUNBUFFERED=1 (a signal,
    a full disk). A device or pipe is opened."""
    fd, name = _output_fd(path), failures.output_name(path)  # (which a failure names)
    _streamed.append(name)
    if fd is None:
        return failures.open_text(path, name, in_place=True)
    try:
        os.fstat(fd)
    except OSError:  # ('-' with stdout closed: `>&-`)
        raise OutputError(f"{path}: standard output is closed; give a file path instead, or "
                          "run the command with its output open.") from None
    for stream in (sys.stdout, sys.stderr):  # what the process wrote there comes first
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.flush()
    return failures.open_text(fd, name, closefd=False, in_place=True)


def _read_only_mount(directory) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def check_writable(path, what: str) -> None:
    """Fail early, before any work, if ``path`` cannot be created as a file."""
    if is_stream(path):
        raise OutputError(f"{path}: is {_stream_kind(path)}, not a file; the {what} is "
                          "written to a temporary file and renamed into place, which would "
                          "replace it. Give the path of a file.")
    if _loops(path):  # (else the link at the loop's end was replaced by the file, as cp
        raise OutputError(  # and shells refuse to)
            f"{path}: is a symbolic link that loops (or goes through too many links), so the "
            f"{what} cannot be written through it; remove the link, or point it at the file "
            "meant.")
    directory = _place(path)[0]
    if not os.path.isdir(directory):
        raise OutputError(f"{path}: the directory {quoted(directory)} for the {what} does not "
                          "exist; create it first (mkdir -p) or choose another path.")
    if not os.access(directory, os.W_OK | os.X_OK):
        if _read_only_mount(directory):  # (no permission mends it)
            raise OutputError(f"{path}: the directory {quoted(directory)} for the {what} is on "
                              "a file system mounted read-only; choose a path on a writable "
                              "one (or mount it read-write).")
        raise OutputError(f"{path}: the directory {quoted(directory)} for the {what} is not "
                          "writable; check its permissions or choose another path.")
    if os.path.isdir(path):
        raise OutputError(f"{path}: is a directory; the {what} must be a file path.")


def _loops(path) -> bool:
    """Whether ``path`` is a symbolic link that cannot be followed to its end (ELOOP)."""
    try:
        os.stat(path)
    except OSError as e:
        return e.errno == errno.ELOOP
    return False


def check_distinct(outputs, inputs=()) -> None:
    """Fail early if an output would replace one of the inputs, or two outputs are one file.

    ``outputs`` and ``inputs`` are (path, what) pairs; empty paths and '-' (a standard stream)
    are skipped. Two paths are one file when they resolve to the same path (``./``, symbolic
    links) or are hard links of one file. Without this check the rename that publishes an
    output would silently replace the input (a training text turned into a NetCDF file), or
    the later of two outputs would replace the earlier.
    """
    seen = []
    for path, what in inputs:
        if path and path != "-":
            seen.append((os.fspath(path), what, False))
    for path, what in outputs:
        if not path or path == "-":
            continue
        path = os.fspath(path)
        for other, other_what, is_output in seen:
            if not is_output and _inside(path, other):
                raise OutputError(f"{path}: the {what} would be written into {other}, the "
                                  f"{other_what}, whose files are all read as input: the next "
                                  f"run would read it too. Choose a path outside {other}.")
            if same_file(path, other):
                if other != path:  # the same file by another name: say which, inside the
                    # flag's parentheses where the description has them ("(-o, as x.nc)")
                    other_what = f"{other_what[:-1]}, as {other})" if other_what.endswith(
                        ")") else f"{other_what} ({other})"
                if is_output:
                    raise OutputError(f"{path}: given as both the {other_what} and the {what}; "
                                      "each output needs a path of its own.")
                raise OutputError(f"{path}: the {what} would replace the {other_what}, which is "
                                  f"an input of this command; choose another path for the {what}.")
        seen.append((path, what, True))


def _inside(path: str, directory: str) -> bool:
    """Whether ``path`` would be a file in the directory ``directory`` itself: an input
    directory's files are read, not its subdirectories' (spec 1.1, ``text.input_files``)."""
    if not os.path.isdir(directory):
        return False
    return _place(path)[0] == os.path.realpath(directory)


def same_file(a, b) -> bool:
    """Whether paths ``a`` and ``b`` name one file: the same real path, or hard links."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # either does not exist (yet): not the same file
        return False


# flock's errors on a file system that has no such locks.
_NO_FLOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


@contextlib.contextmanager
def exclusive(path, what: str, on_wait: Callable[[str], None] | None = None,
              companions: str | None = None):
    """Hold the lock of output ``path`` for the ``with`` block, or fail at once if another
    process holds it: two runs writing one file at the same time (overlapping cron jobs)
    would otherwise both succeed, the later silently replacing the earlier's output. Given
    ``on_wait``, the block waits for the holder instead, so that runs sharing a file take
    turns (``make -j`` running two conversions that update one index file); ``on_wait`` is
    called first with a line saying what it waits for.

    The lock is ``flock`` on ``lock_path(path)``, removed on exit by its holder; a killed
    holder's lock is released by the kernel, so its file left behind is taken again. Once
    locked, temporary files of ``path`` that killed runs left are removed (see
    ``_remove_abandoned``), and those of the outputs in its directory whose names match the
    regular expression ``companions``: files written only under this lock (train's
    checkpoints; those of a ``path`` that is a link are beside the link). Where the file
    system has no flock, the block runs unlocked, as before locks existed.
    """
    directory, name = _place(path)
    lock = lock_path(path)
    fd, ours = None, False  # ours: the lock file is this run's, to remove at the end
    try:
        while True:
            with uninterrupted():  # (a lock file this run created, then interrupted before
                fd = _open_lock(path, lock)  # it knew the file was its own, would be left)
                taken = _flock(fd, path, lock, wait=False)
                ours = taken is None or taken and _is_current(fd, lock)
            if taken is None:
                break  # a file system without flock (some NFS, Lustre, FUSE mounts): unlocked
            if not taken:
                if on_wait is None:
                    raise OutputError(f"{path}: another run is writing this {what} now (it "
                                      f"holds {lock}); wait for it to finish, or choose "
                                      "another path.")
                on_wait(f"{path}: waiting for another run writing this {what} to finish "
                        f"(it holds {lock}).")
                if _flock(fd, path, lock, wait=True) is None:  # (lockd gone meanwhile, on NFS)
                    ours = True
                    break
                ours = _is_current(fd, lock)
            if ours:
                _remove_abandoned(directory, re.escape(name) if companions is None
                                  else f"{re.escape(name)}|{companions}")
                beside = os.path.realpath(os.path.dirname(os.fspath(path)) or ".")
                if companions is not None and beside != directory:  # (path: a link elsewhere)
                    _remove_abandoned(beside, companions)  # the companions are beside it
                break
            closed, fd = fd, None  # the holder before us removed the file we locked: lock
            os.close(closed)  # the new one
        yield
    finally:
        # (signals held: a SIGTERM here, once the outputs were in place, left the lock file
        # behind, where a stopped command removes its lock and temporary files)
        with uninterrupted():
            if ours:  # (removed before it is unlocked: a run waiting on it sees it is gone)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(lock)
            if fd is not None:
                os.close(fd)


def _open_lock(path, lock: str) -> int:
    try:
        return os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:
        remedy = _remedy(e, "check the directory's permissions")
        raise OutputError(f"{path}: cannot create the lock file {quoted(lock)} ({e.strerror}); "
                          f"{remedy}.") from None


def _remedy(e: OSError, otherwise: str) -> str:
    """What to do when a file cannot be created: ``otherwise``, unless the file system is
    full (or the quota reached, or no inode left: ENOSPC), or the process has as many files
    open as it may, which neither a permission nor another path mends, or the directory is
    gone (ENOENT), or is one where no file can be made (/proc: ENOENT too), or the name is a
    link to a directory that is not there (a lock file made a link by hand: ENOENT too)."""
    if e.errno in OPEN_FILES:
        return too_many_open_files(e.errno)
    if e.errno == errno.ENOENT and e.filename is not None and os.path.islink(e.filename):
        return (f"it is a symbolic link to {quoted(os.readlink(e.filename))}, whose directory "
                "does not exist; remove the link")
    if e.errno == errno.ENOENT and e.filename is not None and os.path.isdir(
            os.path.dirname(os.path.abspath(e.filename))):
        return "that directory's file system holds no new files (as /proc); choose another path"
    if e.errno == errno.ENOENT:  # (check_writable found the directory: it went since)
        return ("the directory was removed (or renamed) while the command ran; create it again "
                "(mkdir -p) and run the command again, or choose another path")
    return f"{free_space(e.filename)}, or choose another path" if e.errno in FULL else otherwise


def _flock(fd: int, path, lock: str, wait: bool) -> bool | None:
    """Lock ``fd`` (``flock``): True once locked; False if another process holds it and not
    ``wait``; None where the file system has no flock."""
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    except OSError as e:
        if e.errno in _NO_FLOCK:
            return None
        raise OutputError(f"{path}: cannot lock {quoted(lock)} ({e.strerror}).") from None
    return True


def _is_current(fd: int, lock: str) -> bool:
    """Whether ``fd`` is the file at ``lock`` still: its holder removes it when done."""
    try:
        return os.fstat(fd).st_ino == os.stat(lock).st_ino
    except FileNotFoundError:
        return False


def _place(path) -> tuple[str, str]:
    """The real path of output ``path``'s directory, and its name: its lock and temporary
    files go there, so that two spellings of one directory (a symbolic link, ``link/..``)
    give one lock, and the temporary files are where the lock's holder looks for them. An
    output that is a symbolic link is its target's place: the file it points to is replaced
    by the new one, and the link kept (the rename would otherwise replace the link)."""
    path = os.fspath(path)
    if os.path.islink(path):
        path = os.path.realpath(path)
    directory, name = os.path.split(path)
    return os.path.realpath(directory or "."), name


def real_output_path(path) -> str:
    """The real path that output ``path`` is written at: its temporary file goes in the same
    directory (``OutputSet.path``), and it is renamed to this."""
    return os.path.join(*_place(path))


def lock_path(path) -> str:
    """The lock file of output ``path``: a hidden ``.<name>.lock`` beside it."""
    directory, name = _place(path)
    return os.path.join(directory, f".{name}.lock")


# Temporary files untouched this long are a killed run's, even where flock is local to each
# machine (NFS with local locks), which could let a live run on another machine hold the lock.
ABANDONED_SECONDS = 3600


def _remove_abandoned(directory: str, names: str) -> None:
    """Remove the temporary files (``OutputSet.path``'s names) of the outputs whose names match
    the regular expression ``names`` that killed runs left behind: SIGKILL, the OOM killer or
    a power cut runs no clean-up, and a predict killed that way leaves a file as large as its
    output. Only with the outputs' lock held, and only files not written for
    ABANDONED_SECONDS; a file it cannot remove is left."""
    temporary = re.compile(rf"\.(?:{names})\.[a-z0-9_]{{8}}\.tmp")  # mkstemp's 8 chars
    before = time.time() - ABANDONED_SECONDS
    with os.scandir(directory) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):  # gone meanwhile, or another user's
                if (temporary.fullmatch(entry.name) and entry.is_file(follow_symlinks=False)
                        and entry.stat(follow_symlinks=False).st_mtime < before):
                    os.unlink(entry.path)


@contextlib.contextmanager
def exclusive_all(outputs, on_wait: Callable[[str], None] | None = None):
    """``exclusive`` over several (path, what) outputs, taken in the order of their lock files
    so that two runs waiting for each other's files cannot both wait forever. Two outputs
    with one lock file (one file by two names that ``check_distinct`` could not tell apart, as
    on a case-insensitive file system) are refused: the run would wait for itself."""
    taken: list[tuple[str, str]] = []
    with contextlib.ExitStack() as held:
        locks = sorted(((lock_path(path), path, what) for path, what in outputs),
                       key=lambda held_lock: held_lock[0])
        for lock, path, what in locks:
            for other_lock, other_what in taken:
                if same_file(lock, other_lock):
                    raise OutputError(f"{path}: given as both the {other_what} and the {what}; "
                                      "each output needs a path of its own.")
            held.enter_context(exclusive(path, what, on_wait))
            taken.append((lock, what))
        yield


@contextlib.contextmanager
def pinned(path):
    """Yield a test of whether ``path`` has been replaced (renamed over, removed) since the
    block began: for readers that open an input more than once, which a run renaming a new
    file over it meanwhile (``OutputSet.commit``) would give parts of two files. The file is
    held open meanwhile, so that its inode number is not given to another; a path that cannot
    be opened is never called replaced (reading it fails with its own message)."""
    try:  # (a named pipe given as the file: not waited on for a writer)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        fd = None
    if fd is None:
        yield lambda: False
        return
    try:
        held = os.fstat(fd)

        def replaced() -> bool:
            try:
                now = os.stat(path)
            except (FileNotFoundError, NotADirectoryError):  # (removed, or renamed away)
                return True
            except OSError:  # (unreadable now, an I/O error: the reads say so themselves)
                return False
            return (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino)

        yield replaced
    finally:
        os.close(fd)


class OutputSet:
    """Temporary paths for several outputs, published together by ``commit``."""

    def __init__(self):
        # (temporary path, final path, the output as the caller named it)
        self._pending: list[tuple[str, str, str]] = []
        self._opened: set[str] = set()  # temporary files of ``open``: they name their failures

    def path(self, final) -> str:
        """A temporary path in ``final``'s directory; write the output there."""
        final = os.fspath(final)
        if is_stream(final):  # (callers write streams in place; never replace one)
            raise OutputError(f"{final}: is {_stream_kind(final)}, not a file; it cannot be "
                              "replaced by a file. Give the path of a file.")
        directory, name = _place(final)
        with uninterrupted():  # (a file created but not yet noted would be left behind)
            try:
                fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
            except OSError as e:  # check_writable passed, but this file system refuses files
                raise OutputError(f"{final}: cannot create a file in {quoted(directory)} to write "
                                  f"it ({e.strerror}); {_remedy(e, 'choose another path')}."
                                  ) from None
            os.close(fd)
            self._pending.append((tmp, os.path.join(directory, name), final))  # (a link's)
            _temporaries[tmp] = final
        return tmp

    def open(self, final) -> TextIO:
        """A text file open at ``path(final)``, whose failures name ``final``."""
        tmp = self.path(final)
        self._opened.add(tmp)
        return failures.open_text(tmp, self._pending[-1][2])

    def named(self, e: BaseException) -> BaseException | None:
        """``e``, the system's failure while the outputs were written, naming the output it
        came from (``failures.named``): the one whose temporary file it names, else the one
        begun last, being written (they are written one after the other). None if that one
        names its own failures (``open``): ``e``, naming no file, came from elsewhere (a read
        of an input, between two writes)."""
        for tmp, _, given in self._pending:
            if getattr(e, "filename", None) == tmp:
                return failures.named(e, given, tmp)
        if not self._pending or self._pending[-1][0] in self._opened:
            return None
        tmp, _, given = self._pending[-1]
        return failures.named(e, given, tmp)

    def commit(self) -> None:
        given = [g for _, _, g in self._pending]  # (as the caller named them)
        # Each file's data reaches the disk before its rename does: after a crash or a power
        # cut, a rename without it may publish an empty or partial file (ext4 without
        # auto_da_alloc, xfs), where the old one stood.
        for tmp, _, _ in self._pending:
            with in_file(tmp, "writing"):  # (a large file to a slow or hung file system)
                _sync(tmp)
        with _stops_held(given):  # an interrupt between two renames would publish some
            for tmp, final, _ in self._pending:
                try:
                    os.chmod(tmp, 0o666 & ~_umask())
                    os.replace(tmp, final)
                except OSError as e:  # (an immutable file, a read-only bind mount, ...)
                    raise OutputError(f"{final}: cannot put the finished file in place "
                                      f"({e.strerror}); it is left as it was. Check the file "
                                      "and its directory, or choose another path.") from None
            _put_in_place[:] = given  # (with the renames: no interrupt between them)
            directories: dict[str, str] = {}  # (each to the first output put in it)
            for _, final, named in self._pending:
                directories.setdefault(os.path.dirname(final), named)
            for directory, named in directories.items():
                with in_file(named, "writing"):  # (its entry in the directory)
                    _sync(directory or ".", directory=True)  # (the renames themselves)
            self._forget()

    def discard(self) -> None:
        for tmp, _, _ in self._pending:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        self._forget()
        self._opened.clear()

    def _forget(self) -> None:
        for tmp, _, _ in self._pending:
            _temporaries.pop(tmp, None)
        self._pending.clear()


def _sync(path: str, directory: bool = False) -> None:
    """Flush ``path``'s data (a directory: its entries) to the disk. A file's failure (EIO, a
    full disk that NFS reports only now) names it, for ``OutputSet.named``; a directory's is
    passed over: its renames are done, and some file systems cannot sync a directory. So is a
    file system's that cannot sync at all (some FUSE and SMB mounts: EINVAL, ENOTSUP).

    The file is opened anew (netCDF wrote it through descriptors of its own): Linux reports an
    earlier write-back error to a descriptor opened after it (4.16 and later)."""
    try:
        fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        if not directory and e.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise OSError(e.errno, e.strerror, path) from None


@contextlib.contextmanager
def _stops_held(outputs: list[str]):
    """Hold back the stop signals until the block, which puts ``outputs`` in place, has run;
    then act on the first that came: an interrupt is raised as ``InterruptedAfterOutputs``
    once the block has completed, so that the message can say the outputs are whole."""
    completed = False
    try:
        with uninterrupted():
            yield
            completed = True
    except KeyboardInterrupt:
        if not completed:
            raise
        raise InterruptedAfterOutputs(list(outputs)) from None


@contextlib.contextmanager
def atomic_outputs():
    """``with atomic_outputs() as out: write(out.path(final))``: all renamed at the end, or none."""
    outputs = OutputSet()
    try:
        yield outputs
        outputs.commit()
    except (OSError, RuntimeError) as e:  # a full disk: say which output, not "a file"
        failure = outputs.named(e)
        if failure is None:
            raise
        raise failure from e
    finally:
        outputs.discard()


@contextlib.contextmanager
def text_output(path):
    """``with text_output(path) as f: f.write(...)``: a text output, written to a temporary
    file renamed into place at the end (``atomic_outputs``), or in place where ``path`` is a
    stream (``is_stream``: '-', /dev/stdout, a named pipe), which a rename would replace."""
    # (sys.stdout replaced by one with no descriptor: a test's, a notebook's)
    if path == "-" and sys.stdout is not None and not _has_descriptor(sys.stdout):
        _streamed.append(failures.output_name(path))
        yield sys.stdout
        return
    if is_stream(path):
        with _closed_after(open_stream(path)) as f:
            yield f
        return
    with atomic_outputs() as outputs, _closed_after(outputs.open(path)) as f:
        yield f


@contextlib.contextmanager
def _closed_after(f: TextIO):
    """``f``, closed after the block. Where the block failed, a failure of the close (it
    flushes the text still buffered: the same full disk again) is passed over, so that the
    block's own exception is the one raised: under mpiexec, the ``ParallelError`` that every
    rank raised alike on rank 0's full disk had been replaced on rank 0 alone by the close's
    failure, and rank 0 stopped the job through MPI_Abort."""
    try:
        yield f
    except BaseException:
        with contextlib.suppress(OSError, ValueError):
            f.close()
        raise
    f.close()


def _has_descriptor(stream) -> bool:
    try:
        stream.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return False
    return True


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
