"""Counts in messages: "1 sample", "2 samples", "12,345 samples"."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` (with thousands separators) and ``noun``, made plural (``noun + 's'`` unless
    ``plural`` is given) for every count but 1."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
