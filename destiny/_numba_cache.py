"""Where numba caches Destiny's compiled kernels: a directory named for their source.

numba checks a cached function against its own file's timestamp only. A kernel that calls a
compiled helper from another module (``kernels/unit.py``'s formulas, ``codes.py``'s constants)
keeps its old machine code when only that other module changes, as a ``git pull`` that touches
one file does: the program runs the old arithmetic without a word. So the cache directory is
named after a hash of every module that numba compiles or reads from; any edit to one of them
starts a fresh cache, and the directories of older sources are removed. A ``NUMBA_CACHE_DIR``
the user set is kept as it is.

This runs from ``destiny/__init__.py`` before numba is imported (numba reads the variable when
it loads); it imports nothing but the standard library.
"""

from __future__ import annotations

import hashlib
import os
import shutil
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
        return str(user)
    return None  # nowhere to write: numba's own choice (it warns and compiles each run)
