"""Runs a list of installed commands one after another in this process (``tests/batch.py``).

``python tests/batch_worker.py CASES.json``, plainly or as every rank of ``mpiexec -n P``:
CASES.json lists ``{"command": "train", "argv": [...], "out": folder}``. Each command runs
as its installed entry point runs it (``destiny.cli.entry``), a command that is a script's
path (``.../convert_ratings.py``) as ``python SCRIPT`` runs it, with the stop signals' handlers
this process started with; its exit status goes to ``out``/rc.RANK, what it wrote on the
standard output and error (the descriptors themselves) to ``out``/stdout.RANK and
``out``/stderr.RANK. One process's start (Python, numba's cache, MPI) serves every case.
"""

from __future__ import annotations

import json
import os
import pathlib
import runpy
import signal
import sys

from destiny.cli import entry
from destiny.signals import STOP_SIGNALS


def run(command: str, argv: list[str], out: pathlib.Path, rank: int, handlers: dict) -> None:
    for signum, handler in handlers.items():  # (as the process started: a command's own are
        signal.signal(signum, handler)       # ignored once it ends)
    sys.argv = [command, *argv]
    saved = {}
    for fd, name in ((1, "stdout"), (2, "stderr")):
        getattr(sys, name).flush()
        saved[fd] = os.dup(fd)
        target = os.open(out / f"{name}.{rank}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(target, fd)
        os.close(target)
    code = 0
    try:
        if command.endswith(".py"):
            runpy.run_path(command, run_name="__main__")
        else:
            getattr(entry, command.replace("-", "_"))()
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:  # (sys.exit("message"): printed, status 1)
            print(e.code, file=sys.stderr)
            code = 1
    finally:
        for fd, name in ((1, "stdout"), (2, "stderr")):
            getattr(sys, name).flush()
            os.dup2(saved[fd], fd)
            os.close(saved[fd])
    (out / f"rc.{rank}").write_text(str(code))


def main() -> None:
    cases = json.loads(pathlib.Path(sys.argv[1]).read_text())
    rank = int(os.environ.get("PMI_RANK", "0"))
    handlers = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for case in cases:
        run(case["command"], case["argv"], pathlib.Path(case["out"]), rank, handlers)


if __name__ == "__main__":
    main()
