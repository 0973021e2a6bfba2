"""A stop signal that a command cannot act on, because it is stuck in a call into C, ends it.

Python runs a signal's handler in the main thread between two of its bytecodes, so a call into
a C library that never returns never hears Ctrl-C or SIGTERM: HDF5 loops for ever on some
damaged NetCDF files (the fuzz campaign found one byte that does it), and a hung network file
system blocks a read. `timeout` without `-k`, systemd or a user's kill then left the job
running for ever, its lock held. Such calls release the GIL (netCDF4 releases it around its
calls into the library), so another thread still runs: ``watch`` starts one that hears of each
signal through Python's wakeup descriptor (written by the C-level handler, whatever the main
thread is doing) and, where no Python handler has run within STUCK_SECONDS (``signals.heard``),
says so and ends the process.

The message names the file the command was reading or writing where the call was one on a
file (``errors.file_in_use``), and ends with what the command adds (``advising``: train's way
to go on from its newest checkpoint).

Under mpiexec a rank waiting in a collective for a slower rank is in a C call too, and its
signal is acted on once the ranks meet (parallel.py): the time it waits there is not counted
(``waiting``). A rank stuck elsewhere ends, and mpiexec then ends the others.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import threading
import time
from typing import Callable

from destiny.cli.common import _hold
from destiny.errors import file_in_use
from destiny.io import atomic
from destiny.signals import STOP_SIGNALS, last_heard
from destiny.wording import readable, shell_word

# Far above the calls of a healthy run (a product, a read of a block of a dataset), but not
# above all of them: a network of many GB written, or synced to a slow disk, can take one call
# longer. Stopped then, the run leaves what a kill leaves (its outputs old or whole, and its
# temporary files); without the watch, a stuck run never ends. Well below a user's patience.
STUCK_SECONDS = 30.0
# A handler that ran this long before the watch read the signal's byte acted on it: the main
# thread may run the handler before the watch thread reads (both wait for the GIL), and two
# signals that came together write two bytes but run the handler once.
_HEARD_BEFORE_S = 1.0
# What the command running adds to the message (``advising``), or None.
_advice: Callable[[], str | None] | None = None


def watch(waiting: Callable[[], bool] = lambda: False, who: str = "") -> None:
    """Start the watch, from the main thread, for the rest of the process: nothing is done if
    a wakeup descriptor is already in use (an embedding's event loop). While ``waiting()``
    (an MPI rank in a collective), the time does not count; ``who`` begins the message (an
    MPI rank's "rank 1 of 2: ")."""
    read_end, write_end = (_above_standard(fd) for fd in os.pipe())
    os.set_blocking(write_end, False)  # (the C handler must never wait on a full pipe)
    try:
        previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    except ValueError:  # (not the main thread)
        previous = None
    if previous != -1:
        if previous is not None:
            signal.set_wakeup_fd(previous)
        os.close(read_end)
        os.close(write_end)
        return
    try:
        threading.Thread(target=_watch, args=(read_end, waiting, who),
                         name="destiny-stuck-watch", daemon=True).start()
    except RuntimeError as e:  # (no memory for its stack, under ulimit -v or -d: a traceback)
        signal.set_wakeup_fd(-1)
        os.close(read_end)
        os.close(write_end)
        raise MemoryError(f"{e}: the stuck-command watch's thread") from None


@contextlib.contextmanager
def advising(advice: Callable[[], str | None]):
    """Within the block, the message ends with ``advice()``, a sentence, where it gives one
    (train: how to go on from its newest checkpoint). It runs in the watch's thread while the
    main thread is stuck: it must neither touch the file system, which may be what hangs,
    nor take a lock the main thread may hold."""
    global _advice
    outer, _advice = _advice, advice
    try:
        yield
    finally:
        _advice = outer


def _above_standard(fd: int) -> int:
    """``fd``, moved above 2 where it took the place of a closed standard stream (`>&-`), which
    a write meant for that stream would otherwise reach."""
    if fd > 2:
        return fd
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return moved


def _watch(read_end: int, waiting: Callable[[], bool], who: str) -> None:
    while True:
        try:
            arrived = os.read(read_end, 64)
        except OSError:
            return
        if not arrived:
            return
        signum = next((s for s in arrived if s in STOP_SIGNALS), None)
        if signum is None:
            continue
        came = counted_from = time.monotonic()
        while last_heard() < came - _HEARD_BEFORE_S:
            now = time.monotonic()
            if waiting():
                counted_from = now
            elif now - counted_from >= STUCK_SECONDS:
                _stop_now(signum, who)
            time.sleep(0.05)


def _stop_now(signum: int, who: str) -> None:
    """Say why, straight to the descriptor (the main thread may hold sys.stderr's lock), and
    end the process with the status of a death by ``signum``, as a shell reports it."""
    name = signal.Signals(signum).name
    message = (f"Error: {who}{name} could not be acted on for {STUCK_SECONDS:g} s: the command "
               "is in a call into a library that has not returned (HDF5 reading a damaged "
               "NetCDF file can loop for ever; a hung network file system blocks a read or a "
               "write), so it stopped at once. Each output it replaces is still "
               f"the old file or the complete new one{_in_place()}; temporary files it was "
               "writing (.NAME.XXXXXXXX.tmp) are left beside them, and the next run to the same "
               f"file removes them once {atomic.ABANDONED_SECONDS // 60} minutes old. "
               f"{_the_file()}{_advised()}\n")
    with contextlib.suppress(Exception):  # (the process must still end)
        message = readable(message)  # (a file name's bytes that are not UTF-8 as \xff)
    with contextlib.suppress(OSError):
        os.write(2, message.encode("utf-8", "backslashreplace"))
    os._exit(128 + signum)


def _in_place() -> str:
    """What the outputs written in place hold (``predict -s -``, evaluate's table: a clause
    after the others'), which "the old file or the complete new one" did not describe."""
    try:
        streams = atomic.streamed()
        return f", and {_hold(streams)}" if streams else ""
    except Exception:  # noqa: BLE001 (the process must still end)
        return ""


def _the_file() -> str:
    """What to check: the file the command was reading or writing (``errors.file_in_use``),
    the output a temporary file is written for named, not that file."""
    unknown = "If it was reading a file, check that file (ncdump -h FILE)."
    try:
        found = file_in_use()
        if found is None:
            return unknown
        doing, path = found[0], os.fsdecode(found[1])
        if doing == "writing":
            return (f"It was writing {atomic.output_of(path) or path}: check the file system "
                    "it is written to (a hung network mount, a failing disk).")
        return f"It was reading {path}: check that file (ncdump -h {shell_word(path)})."
    except Exception:  # noqa: BLE001 (the process must still end)
        return unknown


def _advised() -> str:
    """The command's advice (``advising``) after a space, or nothing."""
    try:
        said = _advice() if _advice is not None else None
        return f" {said}" if said else ""
    except Exception:  # noqa: BLE001 (the process must still end)
        return ""
