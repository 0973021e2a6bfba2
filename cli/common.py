"""What every command shares: error mapping, stderr notes, progress bars."""

from __future__ import annotations

import functools
import os
import sys

import click

from destiny.errors import DestinyError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def library_errors(fn):
    """Turn a ``DestinyError`` into exit code 1 with its message (``DESTINY_DEBUG=1``: traceback)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except DestinyError as e:
            if os.environ.get("DESTINY_DEBUG"):
                raise
            raise click.ClickException(str(e)) from None

    return wrapper


def note(command: str, message: str) -> None:
    """One line of information on stderr (stdout is kept for data)."""
    click.echo(f"{command}: {message}", err=True)


def progress_bar(total: int, desc: str):
    """A byte-count progress bar on stderr, shown only on a terminal and after one second."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, delay=1.0, file=sys.stderr,
                disable=None, leave=False)


