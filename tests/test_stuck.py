"""cli/stuck.py: a stop signal that the command cannot act on, stuck in a call into C, ends it.

Each case runs a command as a program (``run_program``) in a subprocess, with the watch's
delay cut to half a second, and signals it once it says it is ready.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from destiny.wording import readable

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
    if how in ("reading", "writing"):  # the library stuck in its open of FILE (HDF5 looping
        import netCDF4                  # on a damaged file, a hung network file system)
        import numpy as np
        from destiny.io.dataset import SparseDataset, read_dataset, write_dataset

        def stuck_in_open(*args, **kwargs):
            print("ready", flush=True)
            libc.pthread_mutex_lock(mutex)

        netCDF4.Dataset = stuck_in_open
        if how == "reading":
            read_dataset(os.environ["FILE"])
        with atomic.atomic_outputs() as out:
            write_dataset(out.path(os.environ["FILE"]), SparseDataset(
                "x", 128, np.array([0, 1]), np.array([0], dtype=np.int32)))
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


def run_signalled(how: str, signals=(signal.SIGTERM,), program: str = _PROGRAM, args=(),
                  cwd=None, **env) -> subprocess.CompletedProcess:
    proc = subprocess.Popen([sys.executable, "-c", program, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cwd,
                            env=os.environ | {"HOW": how} | env)
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
    assert result.stderr.endswith(" 60 minutes old. If it was reading a file, check that file "
                                  "(ncdump -h FILE).\n"), result.stderr
    assert "done" not in result.stdout


@pytest.mark.parametrize("name", ["in put\udcff.nc", "it's $HOME; `x` *\t\\n\udcff\udc80a.nc",
                                  "it's $HOME; `x` * \\n.nc", "caf\u00e9.nc"])
def test_the_message_names_the_file_being_read(tmp_path, name):
    """HDF5 stuck reading a dataset (a damaged file it loops on): the message said "if it was
    reading a file, check that file (ncdump -h FILE)", naming none. It names the one
    ``netcdf_reads`` was reading, a byte of the name that is not UTF-8 shown as \\xff, in a
    command that reaches the file when pasted into bash: the name quoted (a space, the
    shell's own characters), and a byte that is not UTF-8 written as bash's $'\\xff' (inside
    plain quotes, \\xff named a file with a backslash in its name)."""
    path = tmp_path / name
    path.write_text("the file\n")
    result = run_signalled("reading", FILE=str(path))
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    shown = readable(str(path))
    assert f" 60 minutes old. It was reading {shown}: check that file (ncdump -h " in (
        result.stderr), result.stderr
    assert result.stderr.endswith(").\n"), result.stderr
    command = result.stderr[result.stderr.rindex("(ncdump -h ") + 1:-len(").\n")]
    # (ncdump itself need not be installed: a stand-in prints the file it is given)
    pasted = subprocess.run(["bash", "-c", f'ncdump() {{ cat -- "$2"; }}; {command}'],
                            capture_output=True, text=True, env=os.environ | {"HOME": "/"})
    assert (pasted.returncode, pasted.stdout, pasted.stderr) == (0, "the file\n", ""), command


def test_a_file_named_like_an_option_is_pasted_as_a_file(tmp_path):
    """A relative name starting with "-": the suggested ``ncdump -h -x.nc`` read it as
    options. The command names ./-x.nc."""
    (tmp_path / "-x.nc").write_text("the file\n")
    result = run_signalled("reading", cwd=tmp_path, FILE="-x.nc")
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    assert "It was reading -x.nc: check that file (ncdump -h ./-x.nc).\n" in result.stderr, (
        result.stderr)


def test_the_message_names_the_output_being_written(tmp_path):
    """A dataset's write stuck (a hung network mount): the output is named as given, not by
    the temporary file the library writes in its place, and the file system is what to
    check."""
    path = tmp_path / "out.nc"
    result = run_signalled("writing", FILE=str(path))
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    assert result.stderr.endswith(f" 60 minutes old. It was writing {path}: check the file "
                                  "system it is written to (a hung network mount, a failing "
                                  "disk).\n"), result.stderr


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


_TRAIN = """
import ctypes, ctypes.util, os
import netCDF4
from destiny.cli import stuck
from destiny.cli.common import run_program
from destiny.cli.train import train
from destiny.io import atomic

stuck.STUCK_SECONDS = 0.5
libc = ctypes.CDLL(ctypes.util.find_library("c"))
mutex = ctypes.create_string_buffer(64)
libc.pthread_mutex_lock(mutex)
how, stuck_on = os.environ["HOW"], os.environ["STUCK"]


def stuck_here():  # a call into C that never returns, the GIL released
    print("ready", flush=True)
    libc.pthread_mutex_lock(mutex)


open_netcdf, sync = netCDF4.Dataset, atomic._sync


def opened(path, *args, **kwargs):  # the library stuck writing the output, or reading it
    if ((how == "writing" and atomic.output_of(path) == stuck_on)
            or (how == "reading" and path == stuck_on)):
        stuck_here()
    return open_netcdf(path, *args, **kwargs)


def synced(path, directory=False):  # its sync to the disk, or its directory's once in place
    if ((how == "syncing" and not directory and atomic.output_of(path) == stuck_on)
            or (how == "synced" and directory and atomic.put_in_place() == [stuck_on])):
        stuck_here()
    return sync(path, directory)


netCDF4.Dataset, atomic._sync = opened, synced
run_program(train, "train")
"""


@pytest.mark.parametrize("how, stuck_on, newest, flag", [
    ("writing", "net.nc1.nc", None, None),  # (the first checkpoint)
    ("writing", "net.nc2.nc", ("net.nc1.nc", 1), None),
    ("writing", "net.nc2.nc", ("net.nc1.nc", 1), "--resume-or-restart"),
    ("syncing", "net.nc2.nc", ("net.nc1.nc", 1), None),
    ("synced", "net.nc2.nc", ("net.nc2.nc", 2), None),  # (in place before the run heard of it)
    ("reading", "net.nc1.nc", ("net.nc2.nc", 2), None),  # (--keep-checkpoints 1 judging it)
    ("synced", "net.nc", None, None)])  # (the trained network in place: complete)
def test_train_stuck_names_its_file_and_how_to_go_on_from_its_newest_checkpoint(
        tmp_path, how, stuck_on, newest, flag):
    """train stuck writing a checkpoint or the network (its file, the file's sync to the disk,
    its directory's once in place), or reading a checkpoint: the message names that file. It
    gave no word of the checkpoints written, which an interrupt names to go on from: it ends
    with the same advice where this run has one, the one just put in place counted, and
    says nothing of resuming before the first, nor once the network is in place. A run given
    --resume-or-restart goes on as the same command run again (not "with --resume")."""
    from destiny.io.dataset import SparseDataset, write_dataset
    from tests.test_train import random_dataset, small_netdef

    ds = random_dataset("x")
    for name in ("gl_input", "gl_output"):
        write_dataset(tmp_path / f"{name}.nc", SparseDataset(name, ds.width, ds.indptr,
                                                             ds.indices))
    (tmp_path / "net.json").write_text(json.dumps(small_netdef()))
    args = ["-c", str(tmp_path / "net.json"), "-i", str(tmp_path / "gl_input.nc"),
            "-o", str(tmp_path / "gl_output.nc"), "-n", str(tmp_path / "net.nc"), "-b", "64",
            "-e", "3", "--checkpoint-every", "1", "--keep-checkpoints", "1", "--backend", "cpu",
            "-q", *([flag] if flag else [])]
    result = run_signalled(how, program=_TRAIN, args=args, STUCK=str(tmp_path / stuck_on))
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    assert result.stderr.startswith("Error: SIGTERM could not be acted on"), result.stderr
    path = tmp_path / stuck_on
    assert (f" It was reading {path}: check that file (ncdump -h {path})." if how == "reading"
            else f" It was writing {path}: check the file system") in result.stderr, result.stderr
    if newest is None:
        assert "resume" not in result.stderr and "To go on" not in result.stderr, result.stderr
    elif flag is None:
        assert result.stderr.endswith(
            " To go on, run the same command with --resume to continue from "
            f"{tmp_path / newest[0]} (epoch {newest[1]}), the newest checkpoint.\n"
        ), result.stderr
    else:
        assert result.stderr.endswith(
            " To go on, run the same command again to continue from "
            f"{tmp_path / newest[0]} (epoch {newest[1]}), the newest checkpoint, which its "
            f"{flag} takes.\n"), result.stderr


_RANKS = """
import ctypes, ctypes.util
import click
from destiny.cli import stuck
from destiny.cli.common import library_errors, run_command
from destiny.errors import netcdf_reads
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
    if comm.rank == 1:  # stuck in C reading a file, never joining rank 0's collective
        with netcdf_reads("ranks.nc", "."):
            libc.pthread_mutex_lock(mutex)
    comm.barrier()

run_command(command, "command")
"""


def test_under_mpiexec_the_rank_stuck_in_c_ends_and_the_one_waiting_for_it_does_not(tmp_path):
    """Rank 1 stuck in a call into C, rank 0 waiting for it in a collective (a C call too):
    SIGTERM to mpiexec reaches both, and neither handler can run. The stuck rank ends, saying
    which it is, and mpiexec ends the job; the time rank 0 waits in the collective is not
    counted, so it says nothing of its own. The stuck rank names the file it was reading."""
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
    assert ("It was reading ranks.nc: check that file (ncdump -h ranks.nc).\n") in stderr, stderr
    assert "rank 0 of 2: SIGTERM could not" not in stderr, stderr
