"""How every command runs: error mapping and exit codes, stop signals, stderr notes and
progress bars, the ranks under mpiexec. (Their flags: ``options``.)"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import signal
import sys
import threading
import time
import traceback

import click

from destiny.errors import (NO_OTHER_REPLACED, NOTHING_REPLACED, DestinyError,
                            InterruptedAfterOutputs, system_failure)
from destiny.signals import STOP_SIGNALS, heard
from destiny.wording import readable


def library_errors(fn):
    """Turn a ``DestinyError`` into exit code 1 with its message (``DESTINY_DEBUG=1``: traceback);
    so too an interrupt (Ctrl-C, SIGTERM) and the system's failures (a full disk). Every
    message the command ends with passes here, where a byte of a file name that is not UTF-8
    is shown as \\xff (``wording.readable``): an OSError's file name, an output's path."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return _mapped(*args, **kwargs)
        except click.ClickException as e:
            e.message = readable(e.message)
            raise

    def _mapped(*args, **kwargs):
        if threading.current_thread() is threading.main_thread():
            _catch_stop_signals()
        from destiny.addrspace import watch_crashes
        from destiny.io import atomic

        watch_crashes()  # (under ulimit -v: a library's abort or crash, LLVM's, is a message)
        _finished(False)  # (a test runs many commands in one process)
        atomic.forget_streamed()
        try:
            result = fn(*args, **kwargs)
            _finished(True)
            return result
        except DestinyError as e:
            if os.environ.get("DESTINY_DEBUG"):
                raise
            raise click.ClickException(str(e)) from None
        except InterruptedAfterOutputs as e:
            if os.environ.get("DESTINY_DEBUG"):
                raise
            raise click.ClickException(
                f"interrupted as the outputs were put in place, once all were: "
                f"{', '.join(e.paths)} {'is' if len(e.paths) == 1 else 'are'} complete.") from None
        except BrokenPipeError:
            # The reader of a pipe this command writes left (`predict -s - | head`): once the
            # outputs are cleaned up, stop silently by SIGPIPE, as cat or grep do (exit status
            # 141), so that a pipeline under `set -o pipefail` reads it as they would.
            _stopped(signal.SIGPIPE)
            raise
        except KeyboardInterrupt:
            if os.environ.get("DESTINY_DEBUG"):
                raise
            raise click.ClickException(_on_interrupt()) from None
        except Exception as e:  # the system's failures (anything else: None, its traceback)
            # (the advice on memory is the network's size only where there is one; outputs
            # put in place before it are complete: evaluate's --json-out file, its table
            # failing on standard output after it)
            message = system_failure(e, network=fn.__name__ in ("train", "predict"),
                                     complete=atomic.put_in_place())
            if os.environ.get("DESTINY_DEBUG") or message is None:
                raise
            raise click.ClickException(message) from None

    return wrapper


class _Diagnostics:
    """stderr whose reader may leave: what the command would still say is then dropped, and
    the command goes on (see _diagnostics_outlive_their_reader)."""

    def __init__(self, stream):
        self._stream = stream
        self.reader_left = False

    def write(self, text):
        if not self.reader_left:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._left()
        return len(text)

    def flush(self):
        if not self.reader_left:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._left()

    def _left(self):
        self.reader_left = True
        # The descriptor is pointed at /dev/null, as Python's documentation advises for a
        # reader that left: the stream still holds the text that failed, and flushing it as
        # the process exits would fail again (exit status 120), as would the final message.
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

    def __getattr__(self, name):  # (isatty, fileno, encoding: the stream's own)
        return getattr(self._stream, name)


def _diagnostics_outlive_their_reader():
    """From here to the process's exit, a reader of stderr that leaves (`train 2>&1 | head`)
    stops only the notes, progress, summary and final message, not the command: stderr is
    commentary, and hours of training, or a prediction's file, are lost to a log filter that
    has seen enough. The exit status still says how the command ended. A reader of stdout
    that leaves still stops the command by SIGPIPE (records and metrics written there are its
    output, as cat's)."""
    if sys.stderr is None:
        _stderr_closed()
    if not isinstance(sys.stderr, _Diagnostics):
        sys.stderr = _Diagnostics(sys.stderr)


def _stderr_closed():
    """stderr closed (`2>&-`): Python then has none, and a command ended with exit status 120
    (a note written to None) even when it succeeded. The descriptor gets /dev/null: what
    would have been said is dropped, as for a reader that left, and no file this process
    opens takes descriptor 2, where a library's diagnostics (HDF5's) would land in it."""
    with contextlib.suppress(OSError):
        try:
            os.fstat(2)
        except OSError:  # (closed indeed: not an embedding's choice to keep one)
            devnull = os.open(os.devnull, os.O_WRONLY)
            if devnull != 2:
                os.dup2(devnull, 2)
                os.close(devnull)
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)


def products_note(kernels) -> str:
    """What a backend note adds when the products are not float32."""
    return " with TF32 products" if kernels.products == "tf32" else ""


def note(command: str, message: str) -> None:
    """One line of information on stderr (stdout is kept for data); file names as
    ``wording.readable`` shows them."""
    click.echo(f"{command}: {readable(message)}", file=sys.stderr)  # (the stream as it is
    #                                                                  now: _Diagnostics)


def progress_bar(total: int, desc: str, unit: str = "B"):
    """A progress bar on stderr (bytes, or another ``unit``), shown only on a terminal and
    after one second, and cleared when closed."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, delay=1.0, file=sys.stderr,
                disable=None, leave=False)


def run_command(command: click.Command, name: str):
    """Run a click command as a program: plainly in one process, or on every MPI rank.

    Under ``mpiexec`` a rank that stopped alone would leave the others waiting in a collective
    for ever, so the ranks first agree on the command line, rank 0 alone prints, the command
    raises its failures on every rank (``ParallelError``) and stops on a stop signal on every
    rank together (``StoppedTogether``), and anything else stops the whole job with
    ``Comm.abort``.
    """
    from destiny.cli.entry import default_action_as_mpi_starts
    from destiny.parallel import get_comm

    try:
        with default_action_as_mpi_starts():  # (MPI_Init: in C, waiting for the other ranks)
            comm = get_comm()
    except DestinyError as e:
        click.echo(f"Error: {e}", err=True)
        sys.exit(1)
    if comm.size == 1:
        return run_program(command, name)
    _run_ranks(command, name, comm)


# SIGTERM (timeout, systemd, Slurm, Kubernetes stopping a job) and SIGHUP (the terminal
# closed) stop a command as Ctrl-C does: temporaries removed, locks released, a message (train:
# how to resume). Once that is done, run_program dies by the same signal.
_stopped_by: int | None = None  # the signal that interrupted this command, if one did


def _catch_stop_signals():
    """Turn the stop signals into ``KeyboardInterrupt``; one that is ignored stays ignored (the
    shell ignores SIGINT in a background job, nohup SIGHUP)."""
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _interrupt)


def _interrupt(signum, frame):
    global _deferred_since
    heard()
    _stopped(signum)
    if _completed:  # nothing left to stop: run_program ends the process by it, with a word
        return
    now = time.monotonic()
    if _losing(frame) and now - (_deferred_since or now) < _DEFER_LIMIT_S:
        # An exception raised while a compiled module initializes can be lost: Cython's module
        # code (NumPy's random generators, loaded on first use) drops it inside abc.register,
        # or reports it as an ImportError, so a SIGTERM there was ignored and the command ran
        # on; so is one raised in a ctypes callback (llvmlite's, below). Until the import or
        # callback is over (for at most _DEFER_LIMIT_S), the signal is sent again to the main
        # thread, where it also interrupts a blocking read, every _RESEND_S.
        _deferred_since = _deferred_since or now
        _send_again_later(signum)
        return
    _deferred_since = None
    raise KeyboardInterrupt


_RESEND_S = 0.02
_DEFER_LIMIT_S = 2.0
_deferred_since: float | None = None  # when the first deferred signal came
_resend: threading.Timer | None = None  # the pending resend; one at a time


def _send_again_later(signum: int):
    global _resend
    if _resend is not None:  # (a second signal meanwhile: the pending resend stops the command)
        return
    _resend = threading.Timer(_RESEND_S, _send_again, (signum,))
    _resend.daemon = True
    try:
        _resend.start()
    except RuntimeError:  # (no new threads at the interpreter's shutdown)
        _resend = None
        raise KeyboardInterrupt from None


def _send_again(signum: int):
    global _resend
    _resend = None  # (before the signal: its handler may need the next resend)
    signal.pthread_kill(threading.main_thread().ident, signum)


# (frozen, or read from source under -X frozen_modules=off)
_IMPORT_MACHINERY = {"_frozen_importlib", "_frozen_importlib_external", "importlib._bootstrap",
                     "importlib._bootstrap_external"}


# llvmlite's ctypes callbacks, through which LLVM hands numba a kernel's machine code: ctypes
# prints an exception raised in one ("Exception ignored on calling ctypes callback function")
# and drops it. A signal that comes while LLVM compiles (seconds, on a first run) is acted on
# at the first Python code after the compilation, often this callback: the command ran on.
_CALLBACKS = {("llvmlite.binding.executionengine", "_raw_object_cache_notify"),
              ("llvmlite.binding.executionengine", "_raw_object_cache_getbuffer")}


def _losing(frame) -> bool:
    """Whether an interrupt raised in ``frame`` could be lost: an import, a ctypes callback
    of llvmlite's, a finalizer, or a compiled Cython module's code is under way. Python drops
    an exception raised in a ``__del__`` ("Exception ignored in"): a Ctrl-C that came as
    llvmlite freed a compiled object (numba compiling, a first run) let quality_sample.py train
    on to its end. So did one raised in netCDF4's Cython code (its ``Variable.__getattr__`` and
    ``_ensure_nc_success``, as NumPy looked up an array's interface on a slice of a variable
    while train hashed a dataset's entries): 5 runs in 15 of quality_sample.py stopped just
    after its split, none once deferred."""
    while frame is not None:
        module, name = frame.f_globals.get("__name__"), frame.f_code.co_name
        if (module in _IMPORT_MACHINERY or (module, name) in _CALLBACKS or name == "__del__"
                or frame.f_code.co_filename.endswith(_CYTHON_SOURCES)):
            return True
        frame = frame.f_back
    return False


# The source files a Cython module's frames name (netCDF4's: src/netCDF4/_netCDF4.pyx).
_CYTHON_SOURCES = (".pyx", ".pxd", ".pxi")


def _stopped(signum: int):
    global _stopped_by
    _stopped_by = signum


def _on_interrupt() -> str:
    """The message of a command that an interrupt stopped: what it leaves (``_kept_on_interrupt``),
    or, where its outputs were put in place before it (the interrupt came as the locks were
    released, or a last note printed), that they are complete: "no output was replaced" said
    the opposite of what was on the disk."""
    from destiny.io import atomic

    done = atomic.put_in_place()
    if not done:
        return f"interrupted; {_kept_on_interrupt()}. Run the command again to start afresh."
    streams = atomic.streamed()  # (evaluate's table, after its --json-out file)
    return (f"interrupted as the command finished, once its outputs were put in place: "
            f"{', '.join(done)} {'is' if len(done) == 1 else 'are'} complete"
            + (f"; {_hold(streams)}" if streams else "") + ".")


def _kept_on_interrupt() -> str:
    """What an interrupted command leaves: the outputs written in place (``predict -s -``)
    hold what was written before the interrupt, the others were not replaced."""
    from destiny.io import atomic

    streams = atomic.streamed()
    if not streams:
        return NOTHING_REPLACED
    return f"{_hold(streams)}, and {NO_OTHER_REPLACED}"


def _hold(streams: list[str]) -> str:
    """What the outputs written in place, ``streams``, hold once a command is interrupted."""
    return (f"{' and '.join(streams)} {'holds' if len(streams) == 1 else 'hold'} what was "
            "written before it")


_completed = False  # the command returned: its work done, its outputs in place


def _finished(completed: bool):
    global _completed
    _completed = completed


def _say_finished(name: str) -> None:
    """The message of a stop signal that came once the command had completed: without it, an
    exit status of 130 or 143 and no word (a cron log, `timeout` at the wrong moment) reads as
    a run that was cut short."""
    if _completed and _stopped_by is not None:
        with contextlib.suppress(OSError, ValueError):  # (stderr gone with SIGHUP)
            click.echo(f"{name}: {signal.Signals(_stopped_by).name} came as the command "
                       "finished, after its work was complete: its outputs are whole.", err=True)


def run_program(command: click.Command, name: str):
    """Run a click command as one process's program. A command stopped by a signal says so,
    cleans up, then dies by that signal (exit status 128 + its number: 130 for Ctrl-C, 143 for
    SIGTERM), so that the shell script, make or scheduler that ran it stops too instead of
    taking it for an ordinary failure it may go past. One stuck in a call into C that does not
    return, where no handler can run, ends STUCK_SECONDS after the signal (cli/stuck.py)."""
    from destiny.cli import stuck

    _diagnostics_outlive_their_reader()
    stuck.watch()
    try:
        return command(prog_name=name)
    except BaseException as e:  # (also the message's own failure: stderr gone with SIGHUP)
        # (also after a success: a signal that came too late to stop the command, or that
        # was lost, still ends it as the signal would)
        if _stopped_by is not None:
            _say_finished(name)
            _die_by(_stopped_by)
        if isinstance(e, OSError) and _failed_on_stdout(e):
            _click_output_failed(e)
        raise
    finally:
        _ignore_stop_signals()


def _failed_on_stdout(e: OSError) -> bool:
    """Whether ``e`` is a write to standard output failing (a full disk, an I/O error) in the
    frame that raised it: click's ``echo`` of the help or version, whose ``file`` is stdout
    (click stops silently on a closed pipe itself)."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    stream = tb.tb_frame.f_locals.get("file") if tb is not None else None
    try:
        return (bool(e.strerror) and not isinstance(e, BrokenPipeError)
                and stream is not None and stream.fileno() == 1)
    except (AttributeError, ValueError, OSError):  # (no descriptor: not the process's stdout)
        return False


def _click_output_failed(e: OSError):
    """Exit 1 with a message where click's own output failed: --help or --version written to
    a full disk or a failing device (the command's own failures are library_errors'). A
    traceback said it before."""
    with contextlib.suppress(OSError, ValueError):  # (what stdout still holds, unwritable)
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (kept open until the exit)
    with contextlib.suppress(OSError, ValueError):  # (stderr failing too: nowhere to say it)
        click.echo(f"Error: standard output: {e.strerror}; the help or version was not "
                   "written.", err=True)
    sys.exit(1)


def _ignore_stop_signals():
    """Ignore the stop signals once the command has ended and its process exits with its
    status. As it exits, Python gives them their default action back, before it frees its
    modules and arrays (a quarter of a second for train): one there ended the process with
    status 143 and no word, after the command had said that its outputs were written."""
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) is _interrupt:
            signal.signal(signum, signal.SIG_IGN)


def _die_by(signum: int):
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _run_ranks(command: click.Command, name: str, comm):
    from destiny.cli import stuck
    from destiny.parallel import ParallelError, StoppedTogether, waiting_in_collective

    _diagnostics_outlive_their_reader()
    stuck.watch(waiting_in_collective, who=f"rank {comm.rank} of {comm.size}: ")
    ctx, stop = _parse_ranks(command, name, comm)
    if stop is not None:
        code, text = stop
        if comm.is_root:
            click.echo(text, err=code != 0, nl=False)
        sys.exit(code)
    try:
        with ctx:
            command.invoke(ctx)
    except click.ClickException as e:
        # raised on every rank alike: a failure shared, or a stop signal acted on in step
        agreed = isinstance(e.__context__, (ParallelError, StoppedTogether))
        if not agreed and not comm.is_root:  # this rank alone: say which one
            e.message = f"rank {comm.rank} of {comm.size}: {e.message}"
        if comm.is_root or not agreed:
            e.show()
        code = _rank_status(e.exit_code)
        if not agreed:
            comm.abort(code)
        if isinstance(e.__context__, StoppedTogether):
            # mpiexec's copy of the signal for this rank may come yet, as it shuts down, where
            # Python's handlers are gone and the signal would kill it (the launcher then
            # reports a rank killed): the rank is stopping already.
            for signum in STOP_SIGNALS:
                signal.signal(signum, signal.SIG_IGN)
        sys.exit(code)
    except ParallelError:  # DESTINY_DEBUG=1 lets it through: one traceback
        if comm.is_root:
            traceback.print_exc()
        sys.exit(1)
    except Exception:  # noqa: BLE001 - a bug, or a failure after the ranks agreed
        traceback.print_exc()
        comm.abort(1)
    if comm.is_root:
        _say_finished(name)
    code = _rank_status(0)  # (not 0 after a signal too late to stop the command)
    _ignore_stop_signals()  # (mpiexec's copy of a late signal: the rank is done)
    sys.exit(code)


def _rank_status(code: int) -> int:
    """A rank's exit status: ``code``, or once a stop signal came, 128 + its number, which
    mpiexec passes on, as one process's death by the signal (run_program) reads."""
    return code if _stopped_by is None else 128 + _stopped_by


def _parse_ranks(command: click.Command, name: str, comm):
    """The parsed command line, or (exit code, text to print) if any rank stops while parsing."""
    ctx = stop = None
    text = io.StringIO()
    try:
        with contextlib.redirect_stdout(text):  # --help: printed by rank 0 only
            ctx = command.make_context(name, sys.argv[1:])
            if isinstance(command, click.Group):  # check the subcommand's flags too, now
                args = [*getattr(ctx, "_protected_args", ()), *ctx.args]
                if args:
                    sub_name, sub, rest = command.resolve_command(ctx, args)
                    sub.make_context(sub_name, rest, parent=ctx)
    except click.exceptions.Exit as e:
        stop = (e.exit_code, text.getvalue())
    except click.ClickException as e:
        e.show(file=text)
        stop = (e.exit_code, text.getvalue())
    stops = [s for s in comm.allgather(stop) if s is not None]
    return ctx, (stops[0] if stops else None)
