"""Where numba caches Destiny's compiled kernels: a directory named for their source.

numba checks a cached function against its own file's timestamp only. A kernel that calls a
compiled helper from another module (``kernels/unit.py``'s formulas, ``codes.py``'s constants)
keeps its old machine code when only that other module changes, as a ``git pull`` that touches
one file does: the program runs the old arithmetic without a word. So the cache directory is
named after a hash of every module that numba compiles or reads from; any edit to one of them
starts a fresh cache, and the directories of older sources are removed (in the user's cache
directory, which several installs may share, once unused for a month). A ``NUMBA_CACHE_DIR``
the user set is kept as it is.

This runs from ``destiny/__init__.py`` before numba is imported (numba reads the variable when
it loads); it imports nothing but the standard library.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

PREFIX = "numba-"


def source_digest(package: Path) -> str:
    """A hash of the modules whose change must invalidate the cache: all of ``kernels/`` and
    every other module that mentions numba (each file read once)."""
    h = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        text = path.read_bytes()
        if "kernels" in path.relative_to(package).parts[:-1] or b"numba" in text:
            h.update(str(path.relative_to(package)).encode())
            h.update(b"\0")
            h.update(text)
            h.update(b"\0")
    return h.hexdigest()[:16]


def _writable_dir(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(path, os.W_OK | os.X_OK)


def choose_cache_dir(package: Path, environ) -> str | None:
    """The directory for numba's cache, or None where the user chose one (NUMBA_CACHE_DIR).

    In the package's ``__pycache__`` where it is writable (a checkout, a user install), else
    in the user's cache directory (a system-wide install). Sibling directories of other
    sources in the package's ``__pycache__`` are removed: they can never be valid again.
    """
    if environ.get("NUMBA_CACHE_DIR"):
        return None
    name = PREFIX + source_digest(package)
    in_tree = package / "__pycache__"
    if _writable_dir(in_tree / name):
        for old in in_tree.glob(PREFIX + "*"):
            if old.name != name:
                shutil.rmtree(old, ignore_errors=True)
        return str(in_tree / name)
    user = Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "destiny" / name
    if _writable_dir(user):
        _prune_unused(user)
        return str(user)
    return None  # nowhere to write: numba's own choice (it warns and compiles each run)


UNUSED_DAYS = 30


def _prune_unused(ours: Path, now: float | None = None) -> None:
    """Mark ``ours`` as used, and remove the sibling directories no Destiny has used for
    UNUSED_DAYS.

    The user's cache directory is shared by every install that cannot write its own
    ``__pycache__`` (two virtual environments of different versions, say), so a sibling may
    still be some other install's; but each run marks its own, and one unused for a month
    belongs to an upgraded or removed install (a cron job retraining through upgrades would
    otherwise leave one of these, tens of MB, per version). An install back after a month
    compiles its kernels again, as on its first run.
    """
    now = time.time() if now is None else now
    try:
        os.utime(ours, (now, now))
    except OSError:
        return  # (another user's directory, writable to us: leave the others alone too)
    for other in ours.parent.glob(PREFIX + "*"):
        try:
            unused = now - other.stat().st_mtime > UNUSED_DAYS * 86400
        except OSError:  # removed by another process as we looked
            continue
        if unused:  # (never ours, just marked)
            shutil.rmtree(other, ignore_errors=True)
