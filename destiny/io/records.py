"""DSSTNE's recommendation records (spec 8.5), written by a numba kernel.

A record is ``NAME<TAB>item,score:item,score:...:`` and a newline, each score formatted with
the printf conversion of ``predict -p`` (DSSTNE's ``4.3f``). Python's ``%`` formatting of one
batch's 25,600 scores (256 users, top 100) takes about 9 ms: ten times what a GPU takes to
score and rank the batch, and a tenth of the cpu's. The kernel writes the same bytes.

It rounds exactly as Python does: a float32 score times 10**P (P decimals, at most 12) is
exact in float64 (24 bits of mantissa and 28 of 5**12), so rounding that product half to even
is rounding the score's exact value, which is what Python's correctly rounded formatting does.
Conversions other than ``[W].Pf`` (flags, exponents), scores that are not float32, and scores
the kernel cannot write exactly (NaN, infinities, values of 2**53 / 10**P or more) take
Python's formatting, ``python_records``, which is also the reference the tests compare with.
"""

from __future__ import annotations

import math
import re

import numpy as np
from numba import njit

# ``[width].precision f``: the conversions the kernel writes (no flags: '-', '+', ' ', '0').
_FIXED = re.compile(r"([1-9][0-9]*)?\.([0-9]+)f")
_MAX_DECIMALS = 12  # float32 x 10**12 is exact in float64: 24 + 28 bits <= 53
_EXACT = 2.0 ** 53  # below it, the scaled score's integer is exact in float64 and int64


class EncodedLabels:
    """Labels encoded for the kernel: one UTF-8 buffer and offsets (the output units' labels
    once per predictor, a batch's sample names once per batch)."""

    def __init__(self, labels):
        self.labels = labels  # indexable; each formatted with str() as Python's '%s' does
        encoded = [str(label).encode("utf-8") for label in labels]
        self.offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=self.offsets[1:])
        self.data = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        self.longest = max((len(e) for e in encoded), default=0)


def fixed_point(score_format: str) -> tuple[int, int] | None:
    """``(width, decimals)`` of a conversion the kernel writes, or None for Python's."""
    m = _FIXED.fullmatch(score_format)
    if m is None or int(m.group(2)) > _MAX_DECIMALS:
        return None
    return int(m.group(1) or 0), int(m.group(2))


def format_records(labels, items: np.ndarray, scores: np.ndarray, item_labels: EncodedLabels,
                   score_format: str = "4.3f") -> str:
    """The records of one batch: ``labels[r]`` with its row of ``items`` (-1: an empty slot,
    left out) and ``scores``."""
    if len(labels) != items.shape[0] or items.shape != scores.shape:
        raise ValueError(f"{len(labels)} labels, items {items.shape} and scores {scores.shape}: "
                         "one label and one row of each per record")
    fixed = fixed_point(score_format)
    in_range = items.size == 0 or int(items.max()) < len(item_labels.offsets) - 1
    if fixed is not None and scores.dtype == np.float32 and len(labels) and in_range:
        names = EncodedLabels(labels)
        width, decimals = fixed
        number = max(width, 1 + 16 + 1 + decimals)  # sign, < 2**53 / 10**P, point, decimals
        room = len(names.data) + 2 * len(labels) + items.size * (item_labels.longest + 2
                                                                 + number)
        buf = np.empty(room, dtype=np.uint8)
        end = _write(buf, names.data, names.offsets,
                     np.ascontiguousarray(items, dtype=np.int64), np.ascontiguousarray(scores),
                     item_labels.data, item_labels.offsets, width, decimals)
        if end >= 0:
            return buf[:end].tobytes().decode("utf-8")
    return python_records(labels, items, scores, item_labels.labels, score_format)


def python_records(labels, items: np.ndarray, scores: np.ndarray, item_labels,
                   score_format: str = "4.3f") -> str:
    """``format_records`` in Python's own printf formatting (DSSTNE's ``"%s,%" + fmt + ":"``)."""
    template = "%s,%" + score_format + ":"
    lines = []
    for label, row_items, row_scores in zip(labels, items.tolist(), scores.tolist(), strict=True):
        parts = [template % (item_labels[i], s)
                 for i, s in zip(row_items, row_scores, strict=True) if i >= 0]
        lines.append(f"{label}\t{''.join(parts)}\n")
    return "".join(lines)


@njit(cache=True)
def _copy(buf, pos, data, lo, hi):
    for b in range(lo, hi):
        buf[pos] = data[b]
        pos += 1
    return pos


@njit(cache=True)
def _write(buf, names, name_offsets, items, scores, item_data, item_offsets, width, decimals):
    """Write the records into ``buf``; the bytes written, or -1 where a score needs Python."""
    scale = 10.0 ** decimals
    unit = np.int64(10) ** decimals
    digits = np.empty(20, dtype=np.uint8)
    pos = 0
    for r in range(items.shape[0]):
        pos = _copy(buf, pos, names, name_offsets[r], name_offsets[r + 1])
        buf[pos] = 9  # TAB
        pos += 1
        for j in range(items.shape[1]):
            i = items[r, j]
            if i < 0:
                continue
            x = np.float64(scores[r, j])
            v = abs(x) * scale
            if not v < _EXACT:  # NaN, infinities, huge values
                return -1
            n = np.int64(np.rint(v))  # half to even, as Python rounds the exact value
            negative = math.copysign(1.0, x) < 0.0  # -0.0 and scores rounding to 0 keep '-'
            whole, fraction = n // unit, n % unit
            count = 0
            while True:
                digits[count] = 48 + whole % 10
                count += 1
                whole //= 10
                if whole == 0:
                    break
            length = negative + count + (decimals + 1 if decimals > 0 else 0)
            pos = _copy(buf, pos, item_data, item_offsets[i], item_offsets[i + 1])
            buf[pos] = 44  # ','
            pos += 1
            for _ in range(width - length):
                buf[pos] = 32
                pos += 1
            if negative:
                buf[pos] = 45  # '-'
                pos += 1
            for d in range(count - 1, -1, -1):
                buf[pos] = digits[d]
                pos += 1
            if decimals > 0:
                buf[pos] = 46  # '.'
                pos += 1
                for d in range(decimals - 1, -1, -1):
                    buf[pos + d] = 48 + fraction % 10
                    fraction //= 10
                pos += decimals
            buf[pos] = 58  # ':'
            pos += 1
        buf[pos] = 10  # newline
        pos += 1
    return pos
