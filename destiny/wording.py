"""Counts, sizes, stored values and names in messages: "1 sample", "12,345 samples",
"3.4 MiB", "768.0 (float32)", "x\\xff.txt"; a file name in a command to paste into a shell."""

from __future__ import annotations

import os
import re
import shlex

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


# The characters of a value that a message quotes whole; a longer one is cut short.
LONGEST = 60


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
    return f"{text if len(text) <= LONGEST else text[:LONGEST - 3] + '...'} ({kind})"


def _item(value) -> str:
    if isinstance(value, np.floating):
        return str(value)
    return repr(value.item() if isinstance(value, np.generic) else value)


# Python holds a byte of a file name or of the command line that is not UTF-8 as a surrogate
# escape: U+DC80..U+DCFF for the bytes 0x80..0xff (os.fsdecode(b'\xff') is '\udcff').
_BYTE_ESCAPE = re.compile("[\udc80-\udcff]")
# The same escape as repr() writes it (an escaped backslash is skipped whole).
_REPR_BYTE_ESCAPE = re.compile(r"\\\\|\\udc([89a-f][0-9a-f])")


def readable(text: str) -> str:
    """``text`` with each byte that is not UTF-8 (a surrogate escape, '\\udcff') shown as
    ``\\xff``, as ``os.fsencode(name).decode('utf-8', 'backslashreplace')`` shows a file name,
    and any other lone surrogate as its escape: a message always writable as UTF-8 (a lone
    surrogate cannot be encoded: stderr shows it as '\\udcff', a strict stream fails)."""
    text = _BYTE_ESCAPE.sub(lambda m: f"\\x{ord(m[0]) - 0xdc00:02x}", text)
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def quoted(text: str) -> str:
    """``repr(text)`` for a file name or a command-line value, its bytes that are not UTF-8
    shown as ``readable`` shows them: ``'a\\xff'``, not repr's ``'a\\udcff'``. (Text read as
    UTF-8, such as a JSON string holding the escape \\udcff, keeps repr's escape: use repr.)"""
    return _REPR_BYTE_ESCAPE.sub(lambda m: m[0] if m[1] is None else f"\\x{m[1]}", repr(text))


def shell_word(name: str) -> str:
    """A file name (its bytes that are not UTF-8 as surrogate escapes) as one word that bash
    reads back as the same bytes, for a command a message suggests: ``shlex.quote``'s where
    every character is printable; else bash's ``$'...'``, the other bytes as ``\\xNN``
    escapes (in plain quotes, ``readable``'s \\xff would name a file with a backslash). A
    relative name starting with ``-`` gets ``./`` before it, so that the command does not read
    it as an option."""
    if name.startswith("-"):
        name = "./" + name
    if name.isprintable():
        return shlex.quote(name)
    words = []
    for c in name:
        if c in "\\'":
            words.append("\\" + c)
        elif c.isprintable():
            words.append(c)
        else:  # (a byte that is not UTF-8, a control character: its bytes)
            words.extend(f"\\x{byte:02x}" for byte in os.fsencode(c))
    return "$'" + "".join(words) + "'"


def digits_abridged(digits: str) -> str:
    """A whole number of many digits for a message, by its first six and its length:
    ``999999... (4,000 digits)``."""
    return f"{digits[:6]}... ({len(digits):,} digits)"


def abridged(text: str) -> str:
    """``repr(text)`` for an error message, one longer than ``LONGEST`` by its start and its
    length: a value of thousands of characters, quoted whole, buried the message."""
    if len(text) <= LONGEST:
        return repr(text)
    return f"{text[:LONGEST // 2]!r}... ({len(text):,} characters)"
