"""Atomic outputs: write beside the target, rename into place only when all succeeded.

A killed or failing job therefore never leaves a half-written file where a good one stood,
and a command with several outputs (a dataset plus its index files) publishes none of them
unless it can publish all.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

from destiny.errors import OutputError


def check_writable(path, what: str) -> None:
    """Fail early, before any work, if ``path`` cannot be created."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise OutputError(f"{path}: the directory {directory!r} for the {what} does not exist; "
                          "create it first (mkdir -p) or choose another path.")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise OutputError(f"{path}: the directory {directory!r} for the {what} is not writable; "
                          "check its permissions or choose another path.")
    if os.path.isdir(path):
        raise OutputError(f"{path}: is a directory; the {what} must be a file path.")


class OutputSet:
    """Temporary paths for several outputs, published together by ``commit``."""

    def __init__(self):
        self._pending: list[tuple[str, str]] = []

    def path(self, final) -> str:
        """A temporary path in ``final``'s directory; write the output there."""
        final = os.fspath(final)
        directory, name = os.path.split(os.path.abspath(final))
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
        os.close(fd)
        self._pending.append((tmp, final))
        return tmp

    def commit(self) -> None:
        for tmp, final in self._pending:
            os.chmod(tmp, 0o666 & ~_umask())
            os.replace(tmp, final)
        self._pending.clear()

    def discard(self) -> None:
        for tmp, _ in self._pending:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        self._pending.clear()


@contextlib.contextmanager
def atomic_outputs():
    """``with atomic_outputs() as out: write(out.path(final))``: all renamed at the end, or none."""
    outputs = OutputSet()
    try:
        yield outputs
        outputs.commit()
    finally:
        outputs.discard()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
