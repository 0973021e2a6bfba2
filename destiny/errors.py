"""The errors Destiny raises for bad input.

The library never prints and never exits: it raises a ``DestinyError`` whose text is one
paragraph a user can act on (which file, line or JSON path; what was found; what was
expected; what to do). Only ``cli/`` turns it into exit code 1.
"""

from __future__ import annotations


class DestinyError(Exception):
    """Base class: bad input or an impossible request, explained for the user."""


class DataFormatError(DestinyError):
    """A text, index or NetCDF file that does not follow the expected format."""

    def __init__(self, path, message: str, *, line: int | None = None, column: int | None = None):
        where = str(path)
        if line is not None:
            where += f", line {line}"
            if column is not None:
                where += f", column {column}"
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.line = line
        self.column = column


class OutputError(DestinyError):
    """An output that cannot be written (missing directory, no permission, ...)."""


class NetDefError(DestinyError):
    """An invalid network definition (DSSTNE JSON), or one that uses an unsupported feature.

    The message starts with the file name (when read from a file) and the JSON path of the
    offending field, e.g. ``Layers[1].Activation: unknown 'Sigmod'; expected one of ...``.
    """

    def __init__(self, json_path: str, message: str, *, file: str | None = None):
        prefix = json_path if file is None else f"{file}: {json_path}"
        super().__init__(f"{prefix}: {message}")
        self.json_path = json_path
        self.detail = message
        self.file = file

    def with_file(self, file) -> "NetDefError":
        """Return the same error with the definition's file name in front."""
        return NetDefError(self.json_path, self.detail, file=str(file))


class InterruptedAfterOutputs(KeyboardInterrupt):
    """An interrupt (Ctrl-C, SIGTERM) that came while outputs were put in place, raised once
    all of them were: ``paths`` (as the caller named them) are complete."""

    def __init__(self, paths: list[str]):
        super().__init__()
        self.paths = paths
