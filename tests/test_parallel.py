"""``destiny.parallel``: shard_range, the single-process Comm (no MPI), and MPI collectives."""

from __future__ import annotations

import itertools
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from destiny.errors import DestinyError
from destiny.parallel import (Comm, ParallelError, StoppedTogether, agree, all_or_none,
                              end_round, failure_message, gather_in_order, get_comm,
                              launched_by_mpi, shard_range, stop_together)

MPIEXEC = pathlib.Path(sys.executable).parent / "mpiexec"
LAUNCHER_VARS = ("PMI_RANK", "PMI_SIZE", "PMI_FD", "HYDI_CONTROL_FD", "MPI_LOCALNRANKS",
                 "MPI_LOCALRANKID", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK")


def plain_env(**extra):
    """The environment of a process that no MPI launcher started."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env.update(OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", **extra)
    return env


# For the tests that run real jobs under MPICH's mpiexec (from the mpich wheel, beside Python).
needs_mpiexec = pytest.mark.skipif(
    not MPIEXEC.exists(), reason=f"no {MPIEXEC}: install the extra with pip install -e '.[mpi]'")


def rank_env(**extra):
    """The environment of such a job: one numba and BLAS thread per rank, so that the ranks do
    not oversubscribe the cores, and no DESTINY_DEBUG tracebacks in place of the messages."""
    env = plain_env(OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", **extra)
    env.pop("DESTINY_DEBUG", None)
    return env


@pytest.mark.parametrize("n,size,expected", [
    (10, 3, [(0, 4), (4, 7), (7, 10)]),      # the first n % size ranks take one more
    (11, 4, [(0, 3), (3, 6), (6, 9), (9, 11)]),
    (2, 4, [(0, 1), (1, 2), (2, 2), (2, 2)]),  # more ranks than items: empty slices at the end
    (0, 2, [(0, 0), (0, 0)]),
    (7, 1, [(0, 7)]),
])
def test_shard_range(n, size, expected):
    assert [shard_range(n, rank, size) for rank in range(size)] == expected


def test_shard_range_covers_every_item_once_in_order():
    for n in range(30):
        for size in range(1, 9):
            slices = [shard_range(n, rank, size) for rank in range(size)]
            assert slices[0][0] == 0 and slices[-1][1] == n
            assert all(a[1] == b[0] for a, b in itertools.pairwise(slices))
            lengths = [stop - start for start, stop in slices]
            assert max(lengths) - min(lengths) <= 1 and lengths == sorted(lengths, reverse=True)


@pytest.mark.parametrize("n,rank,size", [(5, 2, 2), (5, -1, 2), (5, 0, 0), (-1, 0, 1)])
def test_shard_range_rejects_impossible_arguments(n, rank, size):
    with pytest.raises(ValueError, match="shard_range"):
        shard_range(n, rank, size)


def test_single_process_comm_collectives_are_identities():
    comm = Comm()
    assert (comm.rank, comm.size, comm.is_root) == (0, 1, True)
    obj = {"a": 1}
    assert comm.bcast(obj) is obj
    assert comm.gather(obj) == [obj] and comm.allgather(obj) == [obj]
    x = np.arange(4, dtype=np.float32)
    total = comm.allreduce_sum(x)
    assert total.dtype == np.float64 and np.array_equal(total, x) and total is not x
    x64 = np.arange(3, dtype=np.float64)  # a new array too, as MPI's sum is, not x itself
    assert comm.allreduce_sum(x64) is not x64
    assert comm.allreduce_sum(np.float32(1.5)) == 1.5 and isinstance(comm.allreduce_sum(2), float)
    assert comm.allreduce_max(np.int64(3)) == 3
    comm.barrier()
    with pytest.raises(SystemExit) as stop:
        comm.abort(3)
    assert stop.value.code == 3


def test_single_process_errors_pass_unchanged():
    comm = Comm()
    with pytest.raises(KeyError):
        with all_or_none(comm):
            raise KeyError("x")
    seen = []
    gather_in_order(comm, 10, 4, lambda lo, hi: (lo, hi), seen.append)
    assert seen == [(0, 4), (4, 8), (8, 10)]
    with pytest.raises(ZeroDivisionError):
        gather_in_order(comm, 10, 4, lambda lo, hi: 1 / 0, seen.append)


def test_failure_message_names_other_ranks():
    class Rank2(Comm):
        rank, size = 2, 3

    assert failure_message(Comm(), DestinyError("bad")) == "bad"
    assert failure_message(Rank2(), DestinyError("bad")) == "rank 2 of 3: bad"
    try:
        raise RuntimeError("a bug")
    except RuntimeError as e:
        text = failure_message(Rank2(), e)
    assert text.startswith("rank 2 of 3: Traceback") and "RuntimeError: a bug" in text
    full = OSError(28, "No space left on device", "recs.txt")  # the system's: its message
    assert failure_message(Rank2(), full).startswith(
        "rank 2 of 3: recs.txt: No space left on device; no output was replaced")
    # The system's failure stays one (train adds the checkpoint to resume from) as it is passed
    # on: raised on every rank, then reported again; a DestinyError is not one.
    passed_on = ParallelError(failure_message(Comm(), full))
    assert passed_on.system and failure_message(Rank2(), passed_on).system
    assert not failure_message(Rank2(), DestinyError("bad")).system


class TwoRanks(Comm):
    """Rank 0 of two, in this process: ``theirs`` holds the other rank's part of each
    ``allreduce_max`` in turn (0 once they run out), ``gathered`` its part of ``allgather``."""

    size = 2

    def __init__(self, *theirs: int, gathered=None):
        self.theirs, self.gathered = list(theirs), gathered

    def allreduce_max(self, x: int) -> int:
        return max(int(x), self.theirs.pop(0) if self.theirs else 0)

    def allgather(self, obj) -> list:
        return [obj, self.gathered if self.gathered is not None else obj]


def test_ranks_agree_on_the_lowest_ranks_failure():
    """Every rank raises the same failure: the lowest failing rank's, so the message does not
    depend on which rank speaks."""
    with pytest.raises(ParallelError, match="^mine$"):
        agree(TwoRanks(gathered="theirs"), "mine")
    with pytest.raises(ParallelError, match="^theirs$"):
        agree(TwoRanks(gathered="theirs"), None)
    agree(TwoRanks(), None)
    with pytest.raises(ParallelError, match="^mine$"):
        with all_or_none(TwoRanks(gathered=("theirs", 0))):
            raise DestinyError("mine")


@pytest.fixture
def handlers():
    """The command line's kind of handler on the stop signals (an interrupt), for one test:
    ``handlers`` lists the signals it was called with."""
    called = []

    def interrupt(signum, frame):
        called.append(signum)
        raise KeyboardInterrupt

    saved = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    yield called
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_stop_signal_waits_for_the_check_then_stops_every_rank(handlers):
    steps = []
    with pytest.raises(StoppedTogether) as stopped:
        with stop_together(TwoRanks()) as stops:
            for step in range(5):
                if step == 2:
                    os.kill(os.getpid(), signal.SIGTERM)
                steps.append(step)  # (the step goes on to its end)
                assert handlers == []
                stops.check()
    assert steps == [0, 1, 2] and stopped.value.signum == signal.SIGTERM
    assert handlers == [signal.SIGTERM]  # the handler ran once, at the check
    assert signal.getsignal(signal.SIGTERM).__name__ == "interrupt"  # put back


def test_other_ranks_stop_signal_stops_this_one_whose_copy_then_passes_once(handlers):
    with pytest.raises(StoppedTogether) as stopped:
        with stop_together(TwoRanks(0, signal.SIGHUP, 1)) as stops:
            stops.check()
            stops.check()
    assert stopped.value.signum == signal.SIGHUP and handlers == [signal.SIGHUP]
    # mpiexec's copy of the signal for this rank, late: the same stop, let pass once
    os.kill(os.getpid(), signal.SIGHUP)
    assert handlers == [signal.SIGHUP]
    with pytest.raises(KeyboardInterrupt):  # the next one is a new signal
        os.kill(os.getpid(), signal.SIGHUP)
    assert handlers == [signal.SIGHUP] * 2


def test_a_rank_whose_handler_goes_on_stops_with_the_others():
    called = []
    saved = signal.signal(signal.SIGTERM, lambda signum, frame: called.append(signum))
    try:
        with pytest.raises(StoppedTogether):  # (the other rank's handler raised)
            with stop_together(TwoRanks(0, 1)) as stops:
                os.kill(os.getpid(), signal.SIGTERM)
                stops.check()
        assert called == [signal.SIGTERM]
        os.kill(os.getpid(), signal.SIGTERM)  # (its own copy came: nothing passed unheeded)
        assert called == [signal.SIGTERM] * 2
    finally:
        signal.signal(signal.SIGTERM, saved)


def test_ranks_whose_handlers_all_go_on_go_on():
    called = []
    saved = signal.signal(signal.SIGTERM, lambda signum, frame: called.append(signum))
    try:
        with stop_together(TwoRanks()) as stops:
            os.kill(os.getpid(), signal.SIGTERM)
            stops.check()
            assert called == [signal.SIGTERM]
            os.kill(os.getpid(), signal.SIGTERM)  # (a first signal again: held)
            assert called == [signal.SIGTERM]
            stops.check()
        assert called == [signal.SIGTERM] * 2
    finally:
        signal.signal(signal.SIGTERM, saved)


def test_a_rank_ignoring_the_signal_stops_with_the_others(handlers):
    saved = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with pytest.raises(StoppedTogether):
            with stop_together(TwoRanks(signal.SIGHUP, 1)) as stops:
                assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
                os.kill(os.getpid(), signal.SIGHUP)  # (ignored here)
                stops.check()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, saved)
    assert handlers == []


def test_second_stop_signal_acts_at_once(handlers):
    with pytest.raises(KeyboardInterrupt) as raised:
        with stop_together(TwoRanks()):
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
            raise AssertionError("not stopped")  # pragma: no cover
    assert type(raised.value) is KeyboardInterrupt and handlers == [signal.SIGTERM]


def test_stop_signal_after_the_last_check_acts_as_the_block_ends(handlers):
    with pytest.raises(KeyboardInterrupt) as raised:
        with stop_together(TwoRanks()) as stops:
            stops.check()
            os.kill(os.getpid(), signal.SIGHUP)
    assert type(raised.value) is KeyboardInterrupt and handlers == [signal.SIGHUP]


def test_stop_signal_rank_0_gets_as_it_consumes_a_round_stops_every_rank_after_it(handlers):
    """(end_round: rank 0 writes the round's records while the others wait; a signal that
    comes to it meanwhile, after its part of the round was gathered, stops every rank at that
    round's end, not a round later, or after the last round by rank 0 alone)"""
    comm, rounds = TwoRanks(), []

    def consume(parts):
        rounds.append(parts)
        os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(StoppedTogether) as stopped:
        with stop_together(comm) as stops:
            end_round(comm, stops, [("mine", 0), ("theirs", 0)], consume)
            raise AssertionError("not stopped at the end of the round")  # pragma: no cover
    assert stopped.value.signum == signal.SIGTERM and handlers == [signal.SIGTERM]
    assert rounds == [[("mine", 0), ("theirs", 0)]]


def test_stop_signal_held_while_the_block_fails_gives_way_to_the_failure(handlers):
    """(every rank raises an agreed failure alike: a rank raising an interrupt instead would
    report it alone)"""
    from destiny.parallel import ParallelError

    with pytest.raises(ParallelError):
        with stop_together(TwoRanks()):
            os.kill(os.getpid(), signal.SIGTERM)
            raise ParallelError("diverged")
    assert handlers == []


def test_stop_signal_in_a_block_of_all_or_none_stops_every_rank(handlers):
    """(as the ranks read their data or load the network: the block stops at once, and the
    ranks agree on the stop with the failures)"""
    done = []
    with pytest.raises(StoppedTogether) as stopped:
        with all_or_none(TwoRanks(gathered=(None, 0))):
            os.kill(os.getpid(), signal.SIGTERM)
            done.append("rest of the block")  # pragma: no cover
    assert stopped.value.signum == signal.SIGTERM and done == [] and handlers == [signal.SIGTERM]
    with pytest.raises(StoppedTogether) as stopped:  # the other rank's
        with all_or_none(TwoRanks(gathered=(None, signal.SIGHUP))):
            done.append("the whole block")
    assert stopped.value.signum == signal.SIGHUP and done == ["the whole block"]
    assert handlers == [signal.SIGTERM, signal.SIGHUP]  # this rank's handler heard of it
    os.kill(os.getpid(), signal.SIGHUP)  # (this rank's own copy, late: passes)
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGHUP)
    with pytest.raises(ParallelError, match="their failure"):  # a failure beats a stop
        with all_or_none(TwoRanks(gathered=("their failure", 0))):
            os.kill(os.getpid(), signal.SIGTERM)
    assert handlers == [signal.SIGTERM, signal.SIGHUP, signal.SIGHUP, signal.SIGTERM]
    with pytest.raises(ParallelError, match="their failure"):  # another rank's stop, too
        with all_or_none(TwoRanks(gathered=("their failure", signal.SIGHUP))):
            pass
    # this rank's handler never heard of it (the command line's would make its exit status
    # 143 where the failure's is 1)
    assert handlers == [signal.SIGTERM, signal.SIGHUP, signal.SIGHUP, signal.SIGTERM]


def test_an_interrupt_raised_in_a_block_of_all_or_none_stops_every_rank():
    """Python's own KeyboardInterrupt (Ctrl-C with Python's handler) comes through no held
    signal: the ranks stop together on it as on a SIGINT."""
    with pytest.raises(StoppedTogether) as stopped:
        with all_or_none(TwoRanks(gathered=(None, 0))):
            raise KeyboardInterrupt
    assert stopped.value.signum == signal.SIGINT


def test_all_or_none_stops_on_a_signal_its_handler_put_off():
    """The command line's handler puts a signal off while a module loads, and sends it again
    later: the block goes on, the ranks stop together, and the resend passes unheeded."""
    calls = []

    def put_off_once(signum, frame):
        calls.append(signum)
        if len(calls) > 1:
            raise KeyboardInterrupt

    saved = signal.signal(signal.SIGTERM, put_off_once)
    try:
        with pytest.raises(StoppedTogether):
            with all_or_none(TwoRanks(gathered=(None, 0))):
                os.kill(os.getpid(), signal.SIGTERM)
                calls.append("block done")
        assert calls == [signal.SIGTERM, "block done", signal.SIGTERM]
        os.kill(os.getpid(), signal.SIGTERM)  # the resend
        assert len(calls) == 3
    finally:
        signal.signal(signal.SIGTERM, saved)


def test_all_or_none_goes_on_where_no_handler_raised():
    """As at a step's check: every rank's handler hears of the signal, and the ranks stop if
    any raised, and go on if none did."""
    called = []
    saved = signal.signal(signal.SIGTERM, lambda signum, frame: called.append(signum))
    try:
        with all_or_none(TwoRanks(0, gathered=(None, signal.SIGTERM))):  # (theirs returned)
            pass
        assert called == [signal.SIGTERM]
        with pytest.raises(StoppedTogether):
            with all_or_none(TwoRanks(1, gathered=(None, signal.SIGTERM))):  # (theirs raised)
                pass
        assert called == [signal.SIGTERM] * 2
    finally:
        signal.signal(signal.SIGTERM, saved)


def test_one_process_acts_on_stop_signals_at_once(handlers):
    with pytest.raises(KeyboardInterrupt) as raised:
        with stop_together(Comm()):
            os.kill(os.getpid(), signal.SIGTERM)
            raise AssertionError("not stopped")  # pragma: no cover
    assert type(raised.value) is KeyboardInterrupt


def test_plain_process_never_imports_mpi4py():
    code = ("import sys; from destiny.parallel import get_comm; c = get_comm(); "
            "assert type(c).__name__ == 'Comm' and c.size == 1, c; "
            "assert 'mpi4py' not in sys.modules; print('ok')")
    done = subprocess.run([sys.executable, "-c", code], env=plain_env(), capture_output=True,
                          text=True)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
    assert not launched_by_mpi(plain_env())
    assert get_comm().size == 1


def test_launcher_without_mpi4py_is_a_clear_error():
    # sys.modules[name] = None makes `import mpi4py` fail, as if it were not installed.
    code = ("import sys; sys.modules['mpi4py'] = None; from destiny.parallel import get_comm\n"
            "try:\n    get_comm()\nexcept Exception as e:\n    print(type(e).__name__, e)")
    done = subprocess.run([sys.executable, "-c", code], env=plain_env(PMI_SIZE="2", PMI_RANK="0"),
                          capture_output=True, text=True)
    assert done.stdout.startswith("DestinyError started by an MPI launcher with 2 processes, "
                                  "but mpi4py is not installed"), done.stdout + done.stderr


def test_a_command_under_a_launcher_without_mpi4py_exits_1_with_the_message():
    """Bad input's exit status 1 (not click's 2 for usage), the message on stderr alone."""
    code = ("import sys; sys.modules['mpi4py'] = None; sys.argv = ['train', '-h']\n"
            "from destiny.cli.train import main; main()")
    done = subprocess.run([sys.executable, "-c", code], env=plain_env(PMI_SIZE="2", PMI_RANK="0"),
                          capture_output=True, text=True)
    assert done.returncode == 1 and done.stdout == "", done.stdout + done.stderr
    assert done.stderr.startswith("Error: started by an MPI launcher with 2 processes, but "
                                  "mpi4py is not installed"), done.stderr


def test_a_launcher_of_one_process_without_mpi4py_runs_it_alone():
    """(mpiexec -n 1: nothing to share, so mpi4py is not needed)"""
    code = ("import sys; sys.modules['mpi4py'] = None; from destiny.parallel import get_comm; "
            "c = get_comm(); print(type(c).__name__, c.size)")
    done = subprocess.run([sys.executable, "-c", code], env=plain_env(PMI_SIZE="1", PMI_RANK="0"),
                          capture_output=True, text=True)
    assert done.stdout == "Comm 1\n", done.stdout + done.stderr


def test_a_launcher_of_another_mpi_library_is_a_clear_error():
    """Open MPI's mpirun starting processes whose mpi4py uses MPICH: each sees MPI alone, and
    would do the whole job alone, every one writing the same output."""
    pytest.importorskip("mpi4py")
    code = ("from destiny.parallel import get_comm\n"
            "try:\n    get_comm()\nexcept Exception as e:\n    print(type(e).__name__, e)")
    done = subprocess.run([sys.executable, "-c", code], env=plain_env(OMPI_COMM_WORLD_SIZE="2"),
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.startswith(
        "DestinyError started by an MPI launcher with 2 processes, but MPI sees each one alone: "
        "mpiexec and mpi4py come from different MPI libraries"), done.stdout + done.stderr


# The collectives under a real launcher: rank r brings r + 1, and rank 2 fails in round 2;
# then a stop signal that one rank gets.
MPI_SCRIPT = textwrap.dedent("""
    import os, signal
    import numpy as np
    from destiny.errors import DestinyError
    from destiny.parallel import (MPIComm, ParallelError, StoppedTogether, all_or_none,
                                  gather_in_order, get_comm, stop_together)

    comm = get_comm()
    assert isinstance(comm, MPIComm) and comm.size == 3, comm
    r = comm.rank
    assert comm.local_rank == r  # (all three on this machine: each would take its own GPU)
    assert comm.bcast(r + 10) == 10
    assert comm.gather(r + 1) == ([1, 2, 3] if r == 0 else None)
    assert comm.allgather(r + 1) == [1, 2, 3]
    total = comm.allreduce_sum(np.full(3, r + 1, dtype=np.float32))
    assert total.dtype == np.float64 and total.tolist() == [6.0] * 3
    assert comm.allreduce_sum(0.5 * (r + 1)) == 3.0
    counts = [3, 1, 2]  # (blocks of columns in rank order, not in order of size)
    whole = np.arange(2 * 6, dtype=np.float32).reshape(2, 6)
    mine = whole[:, [0, 3, 4][r]:[3, 4, 6][r]]
    full = comm.allgather_columns(mine, counts)
    assert full.flags.c_contiguous and full.tolist() == whole.tolist(), full
    part = comm.reduce_scatter_columns(whole * (r + 1), counts)  # 1 + 2 + 3 times each block
    assert part.tolist() == (6 * mine).tolist(), part
    comm.barrier()
    seen = []
    gather_in_order(comm, 10, 2, lambda lo, hi: list(range(lo, hi)), seen.extend)
    assert seen == (list(range(10)) if r == 0 else []), seen
    seen = []  # 11 items by 2: a chunk boundary every 2 items, the last chunk one item
    gather_in_order(comm, 11, 2, lambda lo, hi: (lo, hi), seen.append)
    assert seen == ([(0, 2), (2, 4), (4, 6), (6, 8), (8, 10), (10, 11)] if r == 0 else []), seen
    try:
        with all_or_none(comm):
            if r == 1:
                raise DestinyError("only rank 1")
    except ParallelError as e:
        assert str(e) == "rank 1 of 3: only rank 1", e
    else:
        raise AssertionError("no error")

    def produce(lo, hi):
        if r == 2 and lo >= 6:
            raise DestinyError("rank 2 fails in round 2")
        return list(range(lo, hi))

    seen = []
    try:
        gather_in_order(comm, 20, 1, produce, seen.extend)
    except ParallelError as e:
        assert str(e) == "rank 2 of 3: rank 2 fails in round 2", e
        assert seen == (list(range(6)) if r == 0 else []), seen  # not round 2 (items 6-8)
    else:
        raise AssertionError("no error")

    def ranks_1_and_2_fail(lo, hi):  # in the same round: the lower rank's failure
        if r:
            raise DestinyError(f"rank {r}'s failure")
        return [lo]

    try:
        gather_in_order(comm, 6, 1, ranks_1_and_2_fail, seen.extend)
    except ParallelError as e:
        assert str(e) == "rank 1 of 3: rank 1's failure", e
    else:
        raise AssertionError("no error")

    # A stop signal that rank 1 gets stops every rank at the same check; the copy that rank 2
    # gets after that (mpiexec's, late) passes unheeded, and the next acts.
    assert comm.allreduce_max(r * 2) == 4

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    steps = []
    try:
        with stop_together(comm) as stops:
            for step in range(5):
                if r == 1 and step == 2:
                    os.kill(os.getpid(), signal.SIGTERM)
                steps.append(step)
                stops.check()
    except StoppedTogether as e:
        assert e.signum == signal.SIGTERM and steps == [0, 1, 2], (e.signum, steps)
    else:
        raise AssertionError("not stopped")
    if r == 2:
        os.kill(os.getpid(), signal.SIGTERM)
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        except KeyboardInterrupt:
            pass
        else:
            raise AssertionError("a new signal passed too")

    def produce(lo, hi):  # rank 2 gets a signal making items 6-8: that round ends, then all stop
        if r == 2 and lo >= 6:
            os.kill(os.getpid(), signal.SIGTERM)
        return list(range(lo, hi))

    seen = []
    try:
        gather_in_order(comm, 20, 1, produce, seen.extend)
    except StoppedTogether:
        assert seen == (list(range(9)) if r == 0 else []), seen
    else:
        raise AssertionError("not stopped")
    if comm.allgather("ok") == ["ok"] * 3 and r == 0:
        print("all ranks ok")  # one line: the ranks' stdout would interleave
""")


def run_ranks(n: int, script) -> subprocess.CompletedProcess:
    """``script`` as a job of ``n`` ranks. ``python -m mpi4py`` aborts the job when a rank
    ends on an exception (a failed assertion): the other ranks, waiting in a collective that
    rank never reaches, kept the test until its timeout, and then the failure said only
    that."""
    return subprocess.run([str(MPIEXEC), "-n", str(n), sys.executable, "-m", "mpi4py",
                           str(script)], env=plain_env(), capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


@needs_mpiexec
def test_mpi_collectives_and_failures(tmp_path):
    script = tmp_path / "collectives.py"
    script.write_text(MPI_SCRIPT)
    done = run_ranks(3, script)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == "all ranks ok\n"


@needs_mpiexec
def test_a_failing_rank_ends_the_test_job_at_once(tmp_path):
    """(what run_ranks is for: rank 1 fails while the others wait for it)"""
    script = tmp_path / "fails.py"
    script.write_text("from destiny.parallel import get_comm\n"
                      "comm = get_comm()\n"
                      "assert comm.rank != 1, 'rank 1 fails'\n"
                      "comm.barrier()\n")
    done = run_ranks(3, script)
    assert done.returncode != 0 and "AssertionError: rank 1 fails" in done.stderr, done.stderr


# The column collectives of a layer split by columns (spec 7) on 2 and 4 ranks (3 above): each
# rank's block of columns has its own width, in rank order but not in order of size, as
# uneven layer widths give them; the batch has more rows than any block has columns, so a
# transposition mixed up anywhere shows.
COLUMNS_SCRIPT = textwrap.dedent("""
    import numpy as np
    from destiny.parallel import get_comm

    comm = get_comm()
    r, P = comm.rank, comm.size
    counts = {2: [1, 3], 4: [2, 1, 4, 1]}[P]
    edges = np.cumsum([0] + counts)
    B = 5
    whole = np.arange(B * edges[-1], dtype=np.float32).reshape(B, edges[-1])
    mine = whole[:, edges[r]:edges[r + 1]]
    full = comm.allgather_columns(np.ascontiguousarray(mine), counts)
    assert full.flags.c_contiguous and full.tolist() == whole.tolist(), (r, full)
    part = comm.reduce_scatter_columns(whole * (r + 1), counts)  # (1 + ... + P) times mine
    sums = P * (P + 1) // 2 * mine
    assert part.shape == mine.shape and part.tolist() == sums.tolist(), (r, part)
    if comm.allgather("ok") == ["ok"] * P and r == 0:
        print("all ranks ok")
""")


@needs_mpiexec
@pytest.mark.parametrize("ranks", [2, 4])
def test_column_collectives_on_other_numbers_of_ranks(tmp_path, ranks):
    script = tmp_path / "columns.py"
    script.write_text(COLUMNS_SCRIPT)
    done = run_ranks(ranks, script)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == "all ranks ok\n"


# Rank 0 writing a network file runs out of memory inside a collective, receiving the pieces
# of a matrix (mpi4py allocates the buffer for them once it knows their sizes): rank 1 is in
# the same gather, sending a piece too large to leave without rank 0 receiving it.
GATHER_FAILS_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    from destiny import shard
    from destiny.parallel import get_comm

    comm = get_comm()
    r = comm.rank
    W = np.ones((512, 1024), dtype=np.float32)  # (2 MiB a rank: sent only once received)
    part = shard.Part(W, (512 * r, 512 * (r + 1)), (0, 1024), (1024, 1024))
    if r == 0:
        def gather(obj):
            raise MemoryError("simulated")
        comm.gather = gather

    def write(gathered):
        gathered["W"].rows(0, 1024)

    try:
        shard.write_gathered(comm, {"W": part}, write)
    except BaseException as e:
        print(f"rank {r}: {type(e).__name__}: {e}", flush=True)
        comm.abort(3)
""")


@needs_mpiexec
def test_rank_0_failing_inside_a_collective_as_it_writes_a_network_stops_alone(tmp_path):
    """A failure inside one of write_gathered's collectives leaves the ranks out of step:
    rank 0 released the others with its end of the file and waited for them to agree on its
    failure while rank 1 waited in the gather it had left, and the job hung (train under
    mpiexec, rank 0 out of memory as it wrote a checkpoint). It is raised on rank 0 as it is,
    for the command line to stop the job with its message (MPI_Abort)."""
    script = tmp_path / "gather_fails.py"
    script.write_text(GATHER_FAILS_SCRIPT)
    done = run_ranks(2, script)
    assert done.returncode != 0
    assert done.stdout == "rank 0: MemoryError: simulated\n", done.stdout + done.stderr


LOADING = ("from destiny.cli.entry import default_ctrl_c_while_loading\n"
           "default_ctrl_c_while_loading()\n"
           "import time\n"
           "print('loading', flush=True)\n"
           "time.sleep(60)  # (a command's modules loading: numba, up to half a second)\n")


def two_ranks_loading(tmp_path, code: str) -> subprocess.Popen:
    """``code`` as a job of 2 ranks, once each has said 'loading'."""
    script = tmp_path / "ranks.py"
    script.write_text(code)
    job = subprocess.Popen([str(MPIEXEC), "-n", "2", sys.executable, str(script)],
                           env=rank_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    assert [job.stdout.readline() for _ in range(2)] == ["loading\n"] * 2
    return job


@needs_mpiexec
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_as_the_ranks_load_ends_the_job_with_its_status(tmp_path, signum):
    """A scheduler's SIGTERM or a Ctrl-C to mpiexec as the ranks load their command, before its
    handlers: the ranks died by it, and MPICH reported that as exit status 15 or 2 (the
    signal's number) with its BAD TERMINATION banner, where the same signal a moment later
    gave 143 or 130."""
    job = two_ranks_loading(tmp_path, LOADING)
    try:
        job.send_signal(signum)
        out, err = job.communicate(timeout=30)
    finally:
        job.kill()
    assert job.returncode == 128 + signum, out + err
    assert "BAD TERMINATION" not in out + err


def test_a_stop_signal_ignored_as_a_rank_loads_stays_ignored(monkeypatch):
    """As without a launcher: nohup's SIGHUP, a background job's SIGINT."""
    import warnings

    from destiny.cli.entry import default_ctrl_c_while_loading

    monkeypatch.setenv("PMI_RANK", "0")
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # (it sets its own: put back)
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with warnings.catch_warnings():  # (and a filter of numba's warning)
            default_ctrl_c_while_loading()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


# Rank 0 still loading its command, rank 1 already in MPI's start (MPI_Init, in C), where it
# waits for rank 0.
STARTING = ("import os, time\n"
            "from destiny.cli.entry import default_ctrl_c_while_loading\n"
            "default_ctrl_c_while_loading()\n"
            "print('loading', flush=True)\n"
            "if os.environ['PMI_RANK'] == '0':\n"
            "    time.sleep(60)\n"
            "import click\n"
            "from destiny.cli.common import run_command\n"
            "run_command(click.Command('command', callback=lambda: None), 'command')\n")


@needs_mpiexec
def test_a_stop_signal_as_a_rank_starts_mpi_ends_it_too(tmp_path):
    """A rank that has begun MPI's start waits in C for every rank to begin it, where no
    Python handler runs: the rank still loading ended by the signal (status 143) never
    begins it, and MPICH leaves the waiting one there for ever (pmodels/mpich#6124). The
    job hung until killed; the signal's default action ends the waiting rank."""
    job = two_ranks_loading(tmp_path, STARTING)
    try:
        time.sleep(3)  # (rank 1 in MPI_Init by then)
        job.send_signal(signal.SIGTERM)
        try:
            job.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("the job still ran 30 s after SIGTERM")
    finally:
        job.kill()
    assert job.returncode != 0


@needs_mpiexec
def test_the_launchers_process_is_found_through_a_wrapper():
    """launcher_pid walks up past wrappers (which inherit the launcher's variables, and any
    binding it gave) to the first process without them: MPICH's hydra proxy."""
    code = ("from destiny.launcher import launcher_pid\n"
            "pid = launcher_pid()\n"
            "environ = open(f'/proc/{pid}/environ', 'rb').read()\n"
            "comm = open(f'/proc/{pid}/comm').read().strip()\n"
            "print(comm, b'MPI_LOCALNRANKS' in environ, pid == __import__('os').getppid())\n")
    wrapper = ["sh", "-c", '"$0" "$@"; exit $?']  # (a shell that stays, as a script's does)
    done = subprocess.run([MPIEXEC, "-n", "2", *wrapper, sys.executable, "-c", code],
                          env=plain_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all(line.split()[1:] == ["False", "False"] for line in lines), (
        done.stdout)
    assert all("hydra" in line.split()[0] for line in lines), done.stdout


@pytest.mark.parametrize("environ, cores, parents, expected", [
    ({}, 8, 8, None),  # (no launcher)
    ({"MPI_LOCALNRANKS": "1"}, 8, 8, None),  # (alone on this machine)
    ({"MPI_LOCALNRANKS": "2"}, 8, 8, 4),  # (MPICH's mpiexec)
    ({"OMPI_COMM_WORLD_LOCAL_SIZE": "3"}, 8, 8, 2),  # (Open MPI's mpirun, unbound)
    ({"MPI_LOCALNRANKS": "3"}, 2, 2, 1),  # (more processes than cores: one thread each)
    ({"MPI_LOCALNRANKS": "2"}, 2, 8, None),  # (bound to some cores: its share already)
    ({"MPI_LOCALNRANKS": "4"}, 8, 8, 2),  # (a container of 8 of the machine's 64 cores)
    ({"MPI_LOCALNRANKS": "2", "OMP_NUM_THREADS": "4"}, 8, 8, None),  # (the user's count)
    ({"MPI_LOCALNRANKS": "2", "NUMBA_NUM_THREADS": "1"}, 8, 8, None),
    ({"MPI_LOCALNRANKS": "x"}, 8, 8, None),
])
def test_threads_per_rank(monkeypatch, environ, cores, parents, expected):
    """The cores a process may run on are shared out where they are its launcher's; a process
    bound to fewer has its share already."""
    from destiny import launcher

    def affinity(pid):
        return set(range(cores if pid == 0 else parents))

    monkeypatch.setattr(os, "sched_getaffinity", affinity, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(launcher, "launcher_pid", lambda: 12345)
    assert launcher.threads_per_rank(environ) == expected


@needs_mpiexec
def test_the_processes_on_a_machine_share_its_cores_unless_the_user_said_otherwise():
    """Under mpiexec every process took a thread per core for numba's loops and for BLAS:
    2 processes on 2 cores trained the benchmark network 2.1-2.5x slower than with a thread
    each. Now each takes the cores divided among them, read as Destiny loads (before NumPy
    and numba); a count the user set is kept, and so is one process's default, and numba's
    where it was loaded first."""
    from destiny.launcher import THREAD_COUNT_VARS

    cores = len(os.sched_getaffinity(0))
    if cores < 2:
        pytest.skip("needs 2 cores or more (one thread each either way)")
    env = {k: v for k, v in plain_env().items() if k not in THREAD_COUNT_VARS}
    code = ("import os, destiny, numba\n"
            "print(numba.get_num_threads(), os.environ.get('OPENBLAS_NUM_THREADS'))\n")

    def threads(*launcher, **extra):
        done = subprocess.run([*launcher, sys.executable, "-c", code], env={**env, **extra},
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return sorted(done.stdout.splitlines())

    share = f"{max(1, cores // 2)} {max(1, cores // 2)}"
    assert threads(MPIEXEC, "-n", "2") == [share, share]
    # (through a wrapper script, which inherits the launcher's variables and any binding: the
    # cores are compared with the launcher's process, not the wrapper's)
    assert threads(MPIEXEC, "-n", "2", "sh", "-c", '"$0" "$@"; exit $?') == [share, share]
    # (numba loaded first, by a program of the user's: its count stands, as numba refuses
    # another once its threads have started)
    first = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-c", "import numba\n" + code],
                           env=env, capture_output=True, text=True, timeout=120)
    assert sorted(first.stdout.splitlines()) == [f"{cores} None"] * 2, first.stderr
    assert threads(MPIEXEC, "-n", "2", NUMBA_NUM_THREADS="2") == ["2 None", "2 None"]
    assert threads() == [f"{cores} None"]
