"""NetCDF file paths and dataset names that are not UTF-8, refused before any work.

netCDF4-python hands paths to the C library, and writes text attributes, as UTF-8; bytes that
are not UTF-8 (on the command line, which Python gives as surrogate escapes: b'\\xff' is
'\\udcff') failed with a UnicodeEncodeError traceback, and for train's -n only once training
was over.
"""

from __future__ import annotations

import os

from destiny.errors import DestinyError
from destiny.io.atomic import real_output_path


def check_netcdf_names(*, inputs=(), outputs=(), names=()) -> None:
    """Refuse, before any work, a NetCDF file's path or a dataset name that is not UTF-8.

    ``inputs`` and ``outputs`` are (path, what) pairs as for ``atomic.check_outputs``
    ("network file (-n)"; None is skipped), ``names`` (name, what) pairs. An output is written
    at its real path (a symbolic link's target, a directory's real path:
    ``atomic.real_output_path``), which must then be UTF-8 too.
    """
    for value, what in names:
        if value is not None and _not_utf8(value):
            raise DestinyError(f"the {what} {_shown_name(value)} is not valid UTF-8 "
                               f"({_not_utf8(value)}). NetCDF stores names as UTF-8 text, and "
                               "the network definition's DataSet that must match it is UTF-8 "
                               "JSON; give the name in UTF-8.")
    for path, what in inputs:
        _check_path(path, what, "open", "rename the file, or give a link to it whose name is "
                                        "UTF-8 (ln -s)")
    for path, what in outputs:
        _check_path(path, what, "write", "give a name in UTF-8")
        real = None if path is None else real_output_path(path)
        if real is not None and _not_utf8(real):
            raise DestinyError(f"the {what} {_shown_name(os.fsdecode(path))} would be written at "
                               f"{_shown_name(real)} (its directory's real path, or a link's "
                               f"target), which is not valid UTF-8 ({_not_utf8(real)}); the "
                               "NetCDF library takes file names as UTF-8, so it cannot write "
                               "there. Write the file into a directory whose path is UTF-8.")


def _check_path(path, what: str, verb: str, to_do: str) -> None:
    text = None if path is None else os.fsdecode(path)
    if text is not None and _not_utf8(text):
        raise DestinyError(f"the {what} {_shown_name(text)} is not valid UTF-8 "
                           f"({_not_utf8(text)}), and the NetCDF library takes file names as "
                           f"UTF-8, so it cannot {verb} the file; {to_do}.")


def _not_utf8(text: str) -> str | None:
    """What of ``text`` is not UTF-8 ("the byte \\xff"), or None if all of it is."""
    try:
        text.encode("utf-8")
        return None
    except UnicodeEncodeError as e:
        bad = text[e.start:e.end]
    try:  # argv's undecodable bytes, as surrogate escapes
        raw = bad.encode("utf-8", "surrogateescape")
        shown = "".join(f"\\x{b:02x}" for b in raw)
        return f"the byte{'s' if len(raw) > 1 else ''} {shown}"
    except UnicodeEncodeError:  # a lone surrogate in a str from Python code
        return f"the lone surrogate {bad.encode('utf-8', 'backslashreplace').decode()}"


def _shown_name(text: str) -> str:
    """``text`` quoted for a message, its bytes that are not UTF-8 as \\xff."""
    try:
        shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        shown = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return f"'{shown}'"
