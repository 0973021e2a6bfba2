"""Many runs of the installed commands in few processes, for the tests that only read what each
run left (its exit status, output and files).

A process under ``mpiexec`` spends a second or two starting (Python, numba's cache, MPI) for a
run of a fraction of that on the tests' small data. ``run_batch`` runs every run of one size
in one process (one rank: ``python tests/batch_worker.py``) or one job (``mpiexec -n P``),
the runs one after another, each as its installed command runs it, and gives back each run's
exit status (the first rank's that is not 0), standard output and standard error as
``subprocess.run`` would have: the ranks' outputs one after another, in rank order. A run that
ends its process (MPI_Abort, a rank that dies, a traceback) ends the job there: it and the
runs after it report the job's exit status and standard error. Runs whose point is how a
process fails or stops (a signal, a rank that dies) keep a process of their own.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from collections.abc import Callable, Hashable

WORKER = pathlib.Path(__file__).with_name("batch_worker.py")


def run_batch(runs: dict[Hashable, tuple[int, str, list]], folder: pathlib.Path, env: dict,
              mpiexec: pathlib.Path) -> dict[Hashable, subprocess.CompletedProcess]:
    """``runs``: {key: (ranks, command, argv)}, each run in a process of its size, in the
    order given; ``folder`` takes the processes' own files. {key: its CompletedProcess}."""
    folder.mkdir(parents=True, exist_ok=True)
    done = {}
    for ranks in sorted({ranks for ranks, _, _ in runs.values()}):
        keys = [key for key, (n, _, _) in runs.items() if n == ranks]
        outs = [folder / f"{ranks}_{i}" for i in range(len(keys))]
        cases = []
        for key, out in zip(keys, outs, strict=True):
            out.mkdir()
            _, command, argv = runs[key]
            cases.append({"command": command, "argv": [str(a) for a in argv], "out": str(out)})
        listed = folder / f"{ranks}.json"
        listed.write_text(json.dumps(cases))
        prefix = [str(mpiexec), "-n", str(ranks)] if ranks > 1 else []
        command = [*prefix, sys.executable, str(WORKER), str(listed)]
        job = subprocess.run(command, env=env, capture_output=True, timeout=600)
        for key, out in zip(keys, outs, strict=True):
            done[key] = _result(command, job, out, ranks)
    return done


def _result(command, job, out: pathlib.Path, ranks: int) -> subprocess.CompletedProcess:
    codes = [(out / f"rc.{rank}") for rank in range(ranks)]
    if not all(code.exists() for code in codes):  # (the job ended before or during this run)
        return subprocess.CompletedProcess(
            command, job.returncode or -1, job.stdout,
            b"(the batch job ended before this run finished)\n" + job.stderr)
    status = next((c for c in (int(code.read_text()) for code in codes) if c != 0), 0)
    stdout, stderr = (b"".join((out / f"{name}.{rank}").read_bytes() for rank in range(ranks))
                      for name in ("stdout", "stderr"))
    return subprocess.CompletedProcess(command, status, stdout, stderr)


def selected(request, test: str) -> bool:
    """Whether the session runs the test function ``test`` of the requesting module (any of its
    parameters): a module's batch leaves out the runs of the tests deselected (``-k``)."""
    return any(item.module is request.module and item.originalname == test
               for item in request.session.items)


class Batched:
    """A test module's tests whose runs of ``command`` go together: decorate each with
    ``@BATCHED(make)``, where ``make(data, d)`` writes what its runs need in the test's own
    folder ``d`` and returns them, {key: (ranks, the command's arguments)}. The module's
    fixture calls ``run`` once, and each test reads its own: (its folder, {key: its run})."""

    def __init__(self, command: str):
        self.command, self.makers = command, {}

    def __call__(self, make: Callable, *readers: str):
        """Decorator: the test's runs are ``make``'s (read also by the tests named
        ``readers``, through the module's fixtures)."""
        def register(test):
            self.makers[test.__name__] = (make, (test.__name__, *readers))
            return test
        return register

    def run(self, request, tmp_path_factory, data, env: dict, mpiexec: pathlib.Path) -> dict:
        """Every run of the tests that the session selected: {test: (its folder, {key: its
        run})}."""
        runs, folders = {}, {}
        for test, (make, readers) in self.makers.items():
            if any(selected(request, name) for name in readers):
                folders[test] = d = tmp_path_factory.mktemp(test.removeprefix("test_")[:40])
                for key, (ranks, argv) in make(data, d).items():
                    runs[test, key] = (ranks, self.command, argv)
        done = run_batch(runs, tmp_path_factory.mktemp("batch"), env, mpiexec)
        return {test: (d, {key: run for (of, key), run in done.items() if of == test})
                for test, d in folders.items()}


def succeeded(*runs: subprocess.CompletedProcess) -> None:
    for done in runs:
        assert done.returncode == 0, done.stderr.decode()
