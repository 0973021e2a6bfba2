"""cli/stuck.py: a stop signal that the command cannot act on, stuck in a call into C, ends it.

Each case runs a command as a program (``run_program``) in a subprocess, with the watch's
delay cut to half a second, and signals it once it says it is ready.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

_PROGRAM = """
import ctypes, ctypes.util, os, time
import click
from destiny.cli import stuck
from destiny.cli.common import library_errors, run_program
from destiny.io import atomic
from destiny.signals import uninterrupted

stuck.STUCK_SECONDS = 0.5

@click.command()
@library_errors
def command():
    how = os.environ["HOW"]
    # (loaded before "ready": find_library runs ldconfig, and a signal that came before the
    # call was acted on by its handler)
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    mutex = ctypes.create_string_buffer(64)  # (zeros: PTHREAD_MUTEX_INITIALIZER)
    libc.pthread_mutex_lock(mutex)
    if how == "streamed":  # (standard output written in place, then stuck)
        out = atomic.open_stream("-")
        out.write("a line\\n")
        out.flush()
    print("ready", flush=True)
    if how in ("stuck", "streamed"):  # a call into C that never returns, the GIL released
        libc.pthread_mutex_lock(mutex)  # (a normal mutex locked again: waits for ever)
    elif how == "held":  # Python's work, the stop signals held back for longer than the watch
        with uninterrupted():
            end = time.monotonic() + 1.2  # (the signal comes 0.1 s in)
            while time.monotonic() < end:
                pass
    print("done", flush=True)

run_program(command, "command")
"""


def run_signalled(how: str, signals=(signal.SIGTERM,)) -> subprocess.CompletedProcess:
    proc = subprocess.Popen([sys.executable, "-c", _PROGRAM], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=os.environ | {"HOW": how})
    before = ""  # (what it wrote before "ready")
    while (line := proc.stdout.readline()) != "ready\n":
        if not line:
            pytest.fail(f"ended before it was ready: {proc.communicate()[1]}")
        before += line
    time.sleep(0.1)  # (into the call)
    for signum in signals:
        proc.send_signal(signum)
    try:
        stdout, stderr = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"still running 30 s after {', '.join(map(str, signals))}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, before + "ready\n" + stdout,
                                       stderr)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_command_stuck_in_a_call_into_c_is_ended_by_a_stop_signal(signum):
    """HDF5 loops for ever on some damaged files, the GIL released: SIGTERM was never acted on
    and the job ran for ever. The watch ends it with a message and the status of a death by
    the signal (128 + its number)."""
    result = run_signalled("stuck", (signum,))
    assert result.returncode == 128 + signum, result.stderr
    name = signal.Signals(signum).name
    assert result.stderr.startswith(f"Error: {name} could not be acted on for 0.5 s: the "
                                    "command is in a call into a library that has not "
                                    "returned"), result.stderr
    assert "removes them once 60 minutes old" in result.stderr
    assert ("Each output it replaces is still the old file or the complete new one; "
            in result.stderr)
    assert "done" not in result.stdout


def test_an_output_written_in_place_is_said_to_hold_what_was_written():
    """predict -s - stuck after writing some of standard output: the message said that each
    output was still the old file or the complete new one, which a stream is neither."""
    result = run_signalled("streamed")
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    assert ("Each output it replaces is still the old file or the complete new one, and "
            "standard output holds what was written before it; temporary files") in result.stderr
    assert "a line" in result.stdout


def test_signals_held_back_while_python_runs_are_left_to_the_command():
    """A signal held back (``uninterrupted``) for longer than the watch's delay reached its
    handler, which recorded it: the watch leaves it, and the command stops as usual once the
    block is over. So do two signals that came together (two bytes, one handler call)."""
    result = run_signalled("held", (signal.SIGTERM, signal.SIGTERM))
    assert result.returncode == -signal.SIGTERM, result.stderr
    assert result.stderr.startswith("Error: interrupted; no output was replaced"), result.stderr


_RANKS = """
import ctypes, ctypes.util
import click
from destiny.cli import stuck
from destiny.cli.common import library_errors, run_command
from destiny.parallel import get_comm

stuck.STUCK_SECONDS = 0.5

@click.command()
@library_errors
def command():
    comm = get_comm()
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    mutex = ctypes.create_string_buffer(64)
    libc.pthread_mutex_lock(mutex)
    print(f"ready {comm.rank}", flush=True)
    if comm.rank == 1:  # stuck in C, never joining rank 0's collective
        libc.pthread_mutex_lock(mutex)
    comm.barrier()

run_command(command, "command")
"""


def test_under_mpiexec_the_rank_stuck_in_c_ends_and_the_one_waiting_for_it_does_not(tmp_path):
    """Rank 1 stuck in a call into C, rank 0 waiting for it in a collective (a C call too):
    SIGTERM to mpiexec reaches both, and neither handler can run. The stuck rank ends, saying
    which it is, and mpiexec ends the job; the time rank 0 waits in the collective is not
    counted, so it says nothing of its own."""
    from tests.test_parallel import MPIEXEC, needs_mpiexec, rank_env

    if needs_mpiexec.args[0]:
        pytest.skip(needs_mpiexec.kwargs["reason"])
    script = tmp_path / "ranks.py"
    script.write_text(_RANKS)
    proc = subprocess.Popen([str(MPIEXEC), "-n", "2", sys.executable, str(script)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=rank_env())
    ready = {proc.stdout.readline(), proc.stdout.readline()}
    assert ready == {"ready 0\n", "ready 1\n"}, (ready, proc.poll())
    time.sleep(0.3)  # (into the calls)
    proc.send_signal(signal.SIGTERM)
    try:
        _, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("the job still ran 60 s after SIGTERM")
    assert proc.returncode != 0
    assert "Error: rank 1 of 2: SIGTERM could not be acted on for 0.5 s" in stderr, stderr
    assert "rank 0 of 2: SIGTERM could not" not in stderr, stderr
