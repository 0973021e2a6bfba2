"""Counts, sizes and stored values in messages: "1 sample", "12,345 samples", "3.4 MiB",
"768.0 (float32)"."""

from __future__ import annotations

import numpy as np


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` (with thousands separators) and ``noun``, made plural (``noun + 's'`` unless
    ``plural`` is given) for every count but 1."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def sized(nbytes: int) -> str:
    """A number of bytes as a message shows it: "512 bytes", "3.4 MiB", "1.2 GiB"."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return counted(nbytes, "byte")


def shown(value) -> str:
    """A value read from a file (a NetCDF attribute) as a message shows it, with its type,
    which often is what is wrong: ``'abc' (text)``, ``768.0 (float32)``, ``[1, 2] (int32)``.
    Floats have their type's shortest digits (128.7, not 128.6999969482422); long values are
    cut short."""
    if isinstance(value, str):
        text, kind = repr(value), "text"
    else:
        array = np.asarray(value)
        kind = array.dtype.name
        items = [_item(v) for v in array.reshape(-1)[:20]] + (["..."] if array.size > 20 else [])
        text = items[0] if array.size == 1 else "[" + ", ".join(items) + "]"
    return f"{text if len(text) <= 60 else text[:57] + '...'} ({kind})"


def _item(value) -> str:
    if isinstance(value, np.floating):
        return str(value)
    return repr(value.item() if isinstance(value, np.generic) else value)
