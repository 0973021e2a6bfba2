"""One ``Comm`` interface for a single process and for MPI ranks (through mpi4py).

A plain process never imports mpi4py: ``get_comm()`` looks for the environment variables an
MPI launcher sets, and only then asks MPI how many ranks there are. With one rank every
collective is an identity, so the code that calls them runs unchanged without MPI.

Failures: a rank that raises while the others wait in a collective would hang the job. Work that
can fail therefore runs inside ``all_or_none(comm)`` (or ``gather_in_order``), which shares each
rank's failure with every rank, so that all of them raise the same ``ParallelError`` and the
command line prints it once (from rank 0) and exits non-zero on every rank.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import sys
import time
import traceback
from typing import Callable, Iterator

from destiny.errors import DestinyError, InterruptedAfterOutputs, system_failure
from destiny.launcher import launched_by_mpi, launcher_size
from destiny.signals import HeldSignals, held_back


class ParallelError(DestinyError):
    """Raised on every rank alike when any rank failed (the message is the failing rank's),
    or when every rank found the same failure (a subclass: ``TrainingDivergedError``).
    ``system``: the failure was the system's (``errors.system_failure``: a full disk)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.system = getattr(message, "system", False)


class StoppedTogether(KeyboardInterrupt):
    """An interrupt raised on every rank alike at the same step, once any rank got the stop
    signal ``signum`` (``stop_together``)."""

    def __init__(self, signum: int):
        super().__init__()
        self.signum = signum


class StoppedTogetherAfterOutputs(StoppedTogether, InterruptedAfterOutputs):
    """``StoppedTogether`` once the outputs ``paths`` were put in place: they are complete."""

    def __init__(self, signum: int, paths: list[str]):
        KeyboardInterrupt.__init__(self)  # (each base's __init__ wants its own arguments)
        self.signum, self.paths = signum, paths


def shard_range(n: int, rank: int, size: int) -> tuple[int, int]:
    """The contiguous slice ``[start, stop)`` of ``n`` items that ``rank`` of ``size`` takes.

    Slices follow rank order and differ in length by at most one: the first ``n % size`` ranks
    take one more item. With more ranks than items the last ranks get empty slices.
    """
    if size < 1 or not 0 <= rank < size or n < 0:
        raise ValueError(f"shard_range: need n >= 0 and 0 <= rank < size, got n={n}, "
                         f"rank={rank}, size={size}")
    base, extra = divmod(n, size)
    start = rank * base + min(rank, extra)
    return start, start + base + (rank < extra)


def unit_range(n: int, rank: int, size: int) -> tuple[int, int]:
    """DSSTNE's split of a layer's ``n`` units (spec 7): ``[n*rank // size, n*(rank+1) // size)``.

    Model-parallel layers and the feature columns of their data use this rule; it differs from
    ``shard_range`` only in which ranks take the extra units.
    """
    return n * rank // size, n * (rank + 1) // size


def unit_counts(n: int, size: int) -> list[int]:
    """How many of ``n`` units each rank holds under ``unit_range``."""
    return [n * (r + 1) // size - n * r // size for r in range(size)]


class Comm:
    """A single process: rank 0 of 1. Every collective returns what one rank would get."""

    rank = 0
    size = 1
    # This process's rank among the job's processes on its machine, and their number: they
    # pick the process's GPU (``destiny.kernels.get_backend``'s ``process``, ``processes``).
    local_rank = 0
    local_size = 1
    local_ranks: tuple[int, ...] = (0,)  # the ranks on this machine (``memory``'s sum)

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    def bcast(self, obj):
        """Rank 0's ``obj`` on every rank."""
        return obj

    def gather(self, obj) -> list | None:
        """Every rank's ``obj`` in rank order on rank 0; None on the other ranks."""
        return [obj]

    def allgather(self, obj) -> list:
        """Every rank's ``obj`` in rank order, on every rank."""
        return [obj]

    def allreduce_sum(self, x):
        """The sum over ranks, accumulated in float64: a float for a number, else an array."""
        import numpy as np

        if np.ndim(x) == 0:
            return float(x)
        return np.array(x, dtype=np.float64, copy=True)

    def allreduce_max(self, x: int) -> int:
        """The largest of the ranks' ``x``."""
        return int(x)

    def allgather_columns(self, local, counts: list[int]):
        """[B, counts[rank]] blocks of every rank side by side: a C-contiguous [B, sum] array."""
        return local

    def reduce_scatter_columns(self, full, counts: list[int]):
        """The sum over ranks of ``full`` [B, sum(counts)], of which each rank gets its block of
        ``counts[rank]`` columns (rank order), as a [B, counts[rank]] array (maybe a view)."""
        return full

    def barrier(self) -> None:
        """Wait until every rank gets here."""

    def abort(self, code: int = 1):
        """Stop the whole job with exit status ``code`` (for the command line only)."""
        raise SystemExit(code)


# Seconds a failing rank waits between writing its message and aborting the job (MPIComm.abort).
ABORT_GRACE_S = 0.5

_waiting = 0  # how many MPI collectives this process is in (one thread calls them)


def waiting_in_collective() -> bool:
    """Whether this process is inside an MPI collective now, waiting for the other ranks:
    there for as long as the slowest of them takes, which is not stuck (cli/stuck.py)."""
    return _waiting > 0


def _collective(method):
    @functools.wraps(method)
    def marked(*args, **kwargs):
        global _waiting
        _waiting += 1
        try:
            return method(*args, **kwargs)
        finally:
            _waiting -= 1

    return marked


class MPIComm(Comm):
    """Ranks of ``MPI.COMM_WORLD``; objects travel pickled, arrays as buffers."""

    def __init__(self, world):
        from mpi4py import MPI

        self._world = world
        self.rank = world.Get_rank()
        self.size = world.Get_size()
        host = world.Split_type(MPI.COMM_TYPE_SHARED)  # (the ranks sharing this machine)
        self.local_rank, self.local_size = host.Get_rank(), host.Get_size()
        self.local_ranks = tuple(host.allgather(self.rank))
        host.Free()

    @_collective
    def bcast(self, obj):
        return self._world.bcast(obj, root=0)

    @_collective
    def gather(self, obj) -> list | None:
        return self._world.gather(obj, root=0)

    @_collective
    def allgather(self, obj) -> list:
        return self._world.allgather(obj)

    @_collective
    def allreduce_sum(self, x):
        import numpy as np
        from mpi4py import MPI

        if np.ndim(x) == 0:
            return float(self._world.allreduce(float(x), op=MPI.SUM))
        send = np.ascontiguousarray(x, dtype=np.float64)
        out = np.empty_like(send)
        self._world.Allreduce(send, out, op=MPI.SUM)
        return out

    @_collective
    def allreduce_max(self, x: int) -> int:
        from mpi4py import MPI

        # Called at every training step: buffers made once, not pickled objects (3.4-4.0 us a
        # call instead of 7.8-8.0 under mpiexec -n 2 here: docs/benchmarks.md).
        send, out = self._max_buffers
        send[0] = x
        self._world.Allreduce(send, out, op=MPI.MAX)
        return int(out[0])

    @functools.cached_property
    def _max_buffers(self):
        import numpy as np

        return np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)

    @_collective
    def allgather_columns(self, local, counts: list[int]):
        import numpy as np

        # MPI gathers blocks of rows: gather the transposed blocks, then transpose back.
        send = np.ascontiguousarray(local.T)
        B = local.shape[0]
        full_t = np.empty((sum(counts), B), dtype=local.dtype)
        self._world.Allgatherv(send, (full_t, [c * B for c in counts]))
        return np.ascontiguousarray(full_t.T)

    @_collective
    def reduce_scatter_columns(self, full, counts: list[int]):
        import numpy as np

        send = np.ascontiguousarray(full.T)
        B = full.shape[0]
        mine = np.empty((counts[self.rank], B), dtype=full.dtype)
        self._world.Reduce_scatter(send, mine, [c * B for c in counts])
        return mine.T

    @_collective
    def barrier(self) -> None:
        self._world.Barrier()

    def abort(self, code: int = 1):
        # MPI_Abort ends every rank at once; flush first so that the last words get out. The
        # launcher forwards a rank's output through its own pipes, and an abort tears those
        # down: once, under load, a failing rank 0's message never reached mpiexec's stderr
        # (exit 1, nothing printed). A moment's pause lets the launcher read what was written.
        sys.stdout.flush()
        sys.stderr.flush()
        time.sleep(ABORT_GRACE_S)
        self._world.Abort(code)


@functools.cache
def get_comm() -> Comm:
    """The job's Comm: MPI ranks under a launcher with more than one process, else one process.

    Raises a ``DestinyError`` when the launcher started several processes that cannot talk to
    each other (mpi4py missing, or built for another MPI library): each would otherwise do the
    whole job alone and write the same output.
    """
    if not launched_by_mpi():
        return Comm()
    expected = launcher_size()
    try:
        from mpi4py import MPI
    except ImportError:
        if expected > 1:
            raise DestinyError(
                f"started by an MPI launcher with {expected} processes, but mpi4py is not "
                "installed; install it with pip install '.[mpi]' in Destiny's directory (which "
                "brings MPICH's mpiexec too), or run without mpiexec.") from None
        return Comm()
    world = MPI.COMM_WORLD
    if expected > 1 and world.Get_size() == 1:
        raise DestinyError(
            f"started by an MPI launcher with {expected} processes, but MPI sees each one alone: "
            f"mpiexec and mpi4py come from different MPI libraries (mpi4py uses "
            f"{MPI.Get_library_version().splitlines()[0].strip()}); run the mpiexec installed "
            "beside this Python (the 'mpich' package).")
    return MPIComm(world) if world.Get_size() > 1 else Comm()


class FailureText(str):
    """A rank's failure as every rank reports it; ``system``: a failure of the system's, whose
    advice a command may add to (train: the checkpoint to resume from). It travels pickled."""

    system = False


def failure_message(comm: Comm, exc: BaseException) -> FailureText:
    """The text every rank reports for ``exc``: a DestinyError's message, a failure of the
    system's (``system_failure``: a full disk), else the traceback.

    Rank 0 speaks as a single process does; another rank names itself.
    """
    system = getattr(exc, "system", False)  # (a ParallelError passed on)
    text = str(exc) if isinstance(exc, DestinyError) else system_failure(exc)
    if text is None:  # a bug: its traceback is what a report needs
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()
    elif not isinstance(exc, DestinyError):
        system = True
    failure = FailureText(text if comm.is_root else f"rank {comm.rank} of {comm.size}: {text}")
    failure.system = system
    return failure


def agree(comm: Comm, failure: str | None) -> None:
    """Raise ``ParallelError`` on every rank if any rank brings a failure (the lowest rank's)."""
    failures = comm.allgather(failure)
    first = next((f for f in failures if f is not None), None)
    if first is not None:
        raise ParallelError(first)


@contextlib.contextmanager
def all_or_none(comm: Comm) -> Iterator[None]:
    """Run a block on every rank; if it fails on any, every rank raises the same error, and
    if a stop signal interrupts it on any, every rank raises ``StoppedTogether``.

    The block must call no collective: a rank that failed before it would never join. A stop
    signal interrupts the block at once, as its handler would; the ranks then agree on it
    with the failures, and every rank's handler hears of it: they all stop if any handler
    raised (a rank's own copy of the signal may come after that, and passes unheeded: it is
    the same stop), and go on if none did. With one process the block runs as it is: its
    exceptions pass unchanged.
    """
    if comm.size == 1:
        yield
        return
    failure, mine, agreeing, interrupted = None, 0, False, False

    def arrival(held: HeldSignals, signum: int, frame) -> None:
        nonlocal mine
        mine = mine or signum
        if not agreeing:  # (while the ranks agree, only recorded)
            held.deliver(signum, frame)

    with held_back(arrival) as held:
        try:
            yield
        except Exception as e:  # noqa: BLE001 - any failure must reach the waiting ranks
            failure = failure_message(comm, e)
        except KeyboardInterrupt:  # (a stop signal, or Python's own interrupt: Ctrl-C's)
            interrupted, mine = True, mine or signal.SIGINT
        agreeing = True
        outcomes = comm.allgather((failure, mine))
        first = next((f for f, _ in outcomes if f is not None), None)
        signum = max(s for _, s in outcomes)
        # Another rank's signal, or this rank's own whose handler put it off (the command
        # line's does, while a module loads): the handler hears of it now, and the copy still
        # to come (mpiexec's, or the handler's resend) passes unheeded once the handlers are
        # back.
        stops = first is None and signum and _vote_to_stop(comm, held, signum, interrupted)
        if stops and not interrupted and held is not None:
            for late in {signum, mine} - {0}:
                held.pass_once(late)
    if first is not None:
        raise ParallelError(first)
    if signum and stops:
        raise StoppedTogether(signum)
    if mine and not signum:  # came as the ranks agreed: this rank alone
        held.deliver(mine)


class StopCheck:
    """What ``stop_together`` gives its block: the stop signal this rank holds, and the way to
    act on one on every rank alike."""

    def __init__(self, comm: Comm, held: HeldSignals | None):
        self._comm, self._held = comm, held
        self.own: set[int] = set()  # the signals this rank got itself and acted on

    def pending(self) -> int:
        """This rank's first stop signal not acted on yet, or 0."""
        return self._held.arrived[0] if self._held is not None and self._held.arrived else 0

    def check(self) -> None:
        """Every rank calls it at the same points of the block (a collective): a stop signal
        that any rank holds is acted on by all of them."""
        self.act(self._comm.allreduce_max(self.pending()))

    def act(self, signum: int) -> None:
        """Act on ``signum`` (0: none), which every rank has in hand at this point (a
        collective): each rank's handler runs, and if any raised (the command line's does),
        every rank raises ``StoppedTogether``; if none did, every rank goes on."""
        if not signum:
            return
        if self._held is not None:
            self.own.update(self._held.arrived)
            self._held.arrived.clear()
        if _vote_to_stop(self._comm, self._held, signum):
            raise StoppedTogether(signum)


def _vote_to_stop(comm: Comm, held: HeldSignals | None, signum: int,
                  raised: bool = False) -> bool:
    """Whether the ranks stop on ``signum``, which they all have in hand (a collective): each
    rank's handler hears of it, unless it ``raised`` already, and they stop if any raised.
    (Without handlers, off the main thread, a rank leaves the choice to the others.)"""
    if held is None:
        raised = True
    elif not raised:
        try:
            held.deliver(signum)  # (one ignored here does nothing)
        except KeyboardInterrupt:
            raised = True
    return bool(comm.allreduce_max(int(raised)))


@contextlib.contextmanager
def stop_together(comm: Comm) -> Iterator[StopCheck]:
    """Run a block of steps that the ranks take in step, and stop them at the same step on a
    stop signal (Ctrl-C, SIGTERM).

    mpiexec passes a signal to every rank, and each gets it at its own moment. A rank that
    stopped there and then would leave the others waiting in a collective until its MPI_Abort
    killed them, before they cleaned up (a temporary checkpoint left behind), each having said
    what it saw (one message per rank, naming different checkpoints). Here a rank records the
    signal, and at each ``check`` (or ``act``) every rank acts on it if any holds one, so that
    all stop in step, through one path. A rank stopped by another's signal lets its own copy,
    which may come later, pass once unheeded: it is the same stop.

    A second signal to one rank is acted on at once, by that rank alone, so that a step that
    never ends can still be stopped; so is a signal that comes after the block's last check.
    One held while the block fails is dropped: the failure stops the ranks. With one process
    the block runs as it is: a signal is acted on at once.
    """
    if comm.size == 1:
        yield StopCheck(comm, None)
        return

    def arrival(held: HeldSignals, signum: int, frame) -> None:
        if held.arrived:  # a second signal: this one is acted on, now, for both
            held.arrived.clear()
            held.deliver(signum, frame)
        else:
            held.arrived.append(signum)

    with held_back(arrival) as held:
        stops = StopCheck(comm, held)
        try:
            yield stops
        except StoppedTogether as stop:
            if held is not None and stop.signum not in stops.own | set(held.arrived):
                held.pass_once(stop.signum)  # (from when the handlers are back)
            raise
    if held is not None and held.arrived:  # (after the last check)
        held.deliver(held.arrived[0])


def gather_in_order(comm: Comm, n: int, step: int, produce: Callable[[int, int], object],
                    consume: Callable[[object], None]) -> None:
    """Share items ``[0, n)`` out in rounds of ``size`` chunks of ``step``; consume in order.

    In each round rank r produces the r-th chunk (``produce(start, stop)``) and rank 0 calls
    ``consume`` on every rank's result in rank order, so results arrive in item order while rank 0
    holds one round at a time. A chunk boundary falls every ``step`` items, as in a single
    process walking the items ``step`` at a time. Any rank's failure, or rank 0's in ``consume``,
    stops every rank at the end of the round with the same ``ParallelError``; a stop signal
    that any rank got, with ``StoppedTogether`` (``stop_together``).
    """
    if comm.size == 1:  # no one to tell: exceptions pass unchanged
        for start in range(0, n, step):
            consume(produce(start, min(start + step, n)))
        return
    with stop_together(comm) as stops:
        for first in range(0, n, step * comm.size):
            last = min(first + step * comm.size, n)
            lo, hi = shard_range(-(-(last - first) // step), comm.rank, comm.size)
            start, stop = first + lo * step, min(first + hi * step, last)
            result = failure = None
            try:
                result = produce(start, stop) if start < stop else None
            except Exception as e:  # noqa: BLE001
                failure = failure_message(comm, e)
            end_round(comm, stops, comm.gather((start < stop, result, failure, stops.pending())),
                      lambda parts: _consume_all(parts, consume))


def _consume_all(parts: list, consume) -> None:
    failed = next((f for _, _, f, _ in parts if f is not None), None)
    if failed is not None:
        raise ParallelError(failed)
    for has, result, _, _ in parts:
        if has:
            consume(result)


def end_round(comm: Comm, stops: StopCheck, parts: list | None,
              consume: Callable[[list], None]) -> None:
    """End a round of the steps of ``stop_together``'s block: rank 0 calls ``consume`` on
    ``parts``, what ``comm.gather`` brought it (None on the other ranks), each part ending
    with its rank's ``stops.pending()``. Then every rank raises rank 0's failure in
    ``consume`` as the same ``ParallelError``, or acts on a stop signal that any rank holds
    (rank 0's own may have come while it consumed)."""
    failure, signum = None, 0
    if comm.is_root:
        try:
            consume(parts)
        except Exception as e:  # noqa: BLE001 - the waiting ranks must hear of it
            failure = failure_message(comm, e)
        signum = max(stops.pending(), *(part[-1] for part in parts))
    failure, signum = comm.bcast((failure, signum))
    if failure is not None:
        raise ParallelError(failure)
    stops.act(signum)
