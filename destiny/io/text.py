"""Reading DSSTNE's text records into CSR arrays (spec 1.2 to 1.4).

A record is ``NAME<TAB>feat[,value]:feat[,value]...``. The file is read in chunks of whole
lines; ``textscan.scan_records`` walks each chunk, and any problem becomes a
``DataFormatError`` naming the file, line and column, the offending text, what was expected
and what to do. Where DSSTNE skipped or silently mangled a line (blank lines, no TAB, CRLF
line ends, ``a::b``, a trailing ``:``), Destiny refuses it: a pipeline that feeds such text has
a bug upstream, and a silently different dataset is worse than a stopped job.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from destiny.errors import DataFormatError
from destiny.io import textscan
from destiny.io.index import LabelTable

CHUNK_BYTES = 16 << 20

_FIX_FORMAT = "Each line must be 'NAME<TAB>feature[,value]:feature[,value]...'"


@dataclass
class Records:
    """Samples read from text, in input order (CSR over the entries).

    ``labels[r]`` is the sample name of row r, ``indptr`` (int64) has one more element than
    rows, ``indices`` (int32) are feature indices and ``values`` the float32 values (0.0 where
    a feature has none), or None when they were not kept.
    """

    labels: list[str] = field(default_factory=list)
    indptr: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    indices: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    values: np.ndarray | None = None
    dropped: int = 0          # unknown features left out
    lines_with_drops: int = 0  # lines that lost at least one feature
    sources: list[tuple[str, int]] = field(default_factory=list)  # (file, rows), in order

    def check_unique(self) -> None:
        """Refuse a sample name that appears on two lines (DSSTNE kept the last silently)."""
        first_row: dict[str, int] = {}
        for row, label in enumerate(self.labels):
            if label in first_row:
                path, line = self.where(row)
                first_path, first_line = self.where(first_row[label])
                first = f"line {first_line}" + ("" if first_path == path else f" of {first_path}")
                raise DataFormatError(
                    path, f"the sample {label!r} appears again (first on {first}). DSSTNE kept "
                    "only the last line of a repeated sample; merge its features into one line.",
                    line=line)
            first_row[label] = row

    def where(self, row: int) -> tuple[str, int]:
        """The file and 1-based line that row ``row`` came from (one line per row)."""
        for path, rows in self.sources:
            if row < rows:
                return path, row + 1
            row -= rows
        raise IndexError(row)


def input_files(path) -> list[str]:
    """``-i`` is a file, or a directory whose entries are read in sorted order (spec 1.1)."""
    if os.path.isdir(path):
        names = sorted(os.listdir(path))
        files = [os.path.join(path, n) for n in names if os.path.isfile(os.path.join(path, n))]
        if not files:
            raise DataFormatError(path, "the input directory holds no files; give a text file "
                                  "or a directory of text files with -i.")
        return files
    if not os.path.exists(path):
        raise DataFormatError(path, "the input file does not exist; check the -i path.")
    if not os.access(path, os.R_OK):
        raise DataFormatError(path, "the input file cannot be read (permission denied); check "
                              "its permissions.")
    return [str(path)]


def read_records(
    paths: list[str],
    features: LabelTable,
    *,
    update: bool,
    strict: bool = False,
    keep_values: bool = True,
    progress: Callable[[int], None] | None = None,
) -> Records:
    """Read every record of ``paths`` (in order), mapping feature names through ``features``.

    With ``update`` new feature names are added to ``features``; otherwise they are dropped
    and counted (spec 1.4), or raise with ``strict``. Without ``keep_values`` (indicator data)
    ``values`` stays empty, though every value is still checked. ``progress(n)`` is called with the
    number of bytes consumed since the last call.
    """
    label_chunks: list[list[str]] = []
    row_ends: list[np.ndarray] = []
    index_chunks: list[np.ndarray] = []
    value_chunks: list[np.ndarray] = []
    entries = 0
    dropped = lines_with_drops = 0
    sources = []
    for path in paths:
        line_no = 1
        for chunk in _chunks(path):
            counts = _scan_chunk(path, chunk, line_no, features, update, strict,
                                 label_chunks, row_ends, index_chunks,
                                 value_chunks if keep_values else None, entries)
            lines, n_entries = int(counts[0]), int(counts[1])
            line_no += lines
            entries += n_entries
            dropped += int(counts[2])
            lines_with_drops += int(counts[3])
            if progress is not None:
                progress(len(chunk))
        sources.append((path, line_no - 1))
    labels = [s for chunk in label_chunks for s in chunk]
    if not labels:
        raise DataFormatError(", ".join(paths), "the input holds no records. " + _FIX_FORMAT
                              + "; check that the right file was given with -i.")
    indptr = np.zeros(len(labels) + 1, dtype=np.int64)
    np.concatenate(row_ends, out=indptr[1:])
    return Records(labels=labels, indptr=indptr,
                   indices=np.concatenate(index_chunks),
                   values=np.concatenate(value_chunks) if keep_values else None,
                   dropped=dropped, lines_with_drops=lines_with_drops, sources=sources)


def _chunks(path):
    """Yield the file's bytes in chunks of whole lines (the last one gets a final newline)."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise DataFormatError(path, f"cannot open the input ({e.strerror}).") from None
    with f:
        while True:
            chunk = f.read(CHUNK_BYTES)
            if not chunk:
                return
            if not chunk.endswith(b"\n"):
                chunk += f.readline()
                if not chunk.endswith(b"\n"):
                    chunk += b"\n"
            yield chunk


def _scan_chunk(path, chunk, first_line, features, update, strict,
                label_chunks, row_ends, index_chunks, value_chunks, offset):
    try:
        chunk.decode("utf-8")
    except UnicodeDecodeError as e:
        line, column, text = _locate(chunk, e.start, first_line)
        raise DataFormatError(
            path, f"the bytes {chunk[e.start:e.end]!r} in {text} are not valid UTF-8. Destiny "
            "reads text as UTF-8; convert the file first (for example with "
            "`iconv -f latin1 -t utf-8`).", line=line, column=column) from None
    buf = np.frombuffer(chunk, dtype=np.uint8)
    max_lines = chunk.count(b"\n")
    max_entries = chunk.count(b":") + max_lines
    label_start = np.empty(max_lines, dtype=np.int64)
    label_end = np.empty(max_lines, dtype=np.int64)
    row_end = np.empty(max_lines, dtype=np.int64)
    tok_index = np.empty(max_entries, dtype=np.int32)
    tok_value = np.empty(max_entries, dtype=np.float32)
    counts = np.zeros(4, dtype=np.int64)
    pos = 0
    while True:
        status, pos = textscan.scan_records(
            buf, pos, *features.scan_args(), update, strict,
            label_start, label_end, row_end, tok_index, tok_value, counts)
        if status == textscan.OK:
            break
        if status == textscan.NEED_ROOM:
            line_len = chunk.find(b"\n", pos) - pos
            features.reserve(max(line_len // 2 + 1, len(features)), max(line_len, len(chunk)))
            continue
        raise _scan_error(path, chunk, pos, status, first_line)
    lines, entries = int(counts[0]), int(counts[1])
    label_chunks.append(
        [chunk[s:e].decode("utf-8") for s, e in zip(label_start[:lines].tolist(), label_end[:lines].tolist())])
    row_ends.append(row_end[:lines] + offset)
    index_chunks.append(tok_index[:entries].copy())
    if value_chunks is not None:
        value_chunks.append(tok_value[:entries].copy())
    return counts


def _locate(chunk: bytes, pos: int, first_line: int) -> tuple[int, int, str]:
    """Line number, 1-based column (in characters) and a short quote of the line at ``pos``."""
    start = chunk.rfind(b"\n", 0, pos) + 1
    end = chunk.find(b"\n", pos)
    end = len(chunk) if end < 0 else end
    line = first_line + chunk.count(b"\n", 0, start)
    column = len(chunk[start:pos].decode("utf-8", errors="replace")) + 1
    text = chunk[start:end].decode("utf-8", errors="replace")
    quote = repr(text if len(text) <= 80 else text[:77] + "...")
    return line, column, f"the line {quote}"


def _token_at(chunk: bytes, pos: int) -> str:
    end = pos
    while end < len(chunk) and chunk[end] not in b":\n":
        end += 1
    return chunk[pos:end].decode("utf-8", errors="replace")


def _token_start(chunk: bytes, pos: int) -> int:
    """Start of the feature holding byte ``pos``: after the nearest ':' or TAB of its line."""
    line_start = chunk.rfind(b"\n", 0, pos) + 1
    return max(chunk.rfind(b":", line_start, pos), chunk.rfind(b"\t", line_start, pos)) + 1


def _scan_error(path, chunk: bytes, pos: int, status: int, first_line: int) -> DataFormatError:
    line, column, quote = _locate(chunk, pos, first_line)
    token = _token_at(chunk, pos)
    messages = {
        textscan.BLANK_LINE: "the line is blank. DSSTNE skipped blank lines silently, which hides "
        "truncated or mis-joined files; remove them (for example with `grep -v '^$'`).",
        textscan.NO_TAB: f"{quote} has no TAB between the sample name and its features. "
        f"{_FIX_FORMAT}; check the separator (spaces are not a TAB).",
        textscan.EMPTY_LABEL: f"{quote} starts with a TAB: the sample name is empty. {_FIX_FORMAT}.",
        textscan.EMPTY_FEATURE: f"{quote} has an empty feature name (at {token!r}). "
        f"{_FIX_FORMAT}: features are separated by single ':' and each needs a name.",
        textscan.TRAILING_COLON: f"{quote} ends with ':', an empty feature. Remove the trailing "
        "colon (for example with `sed 's/:$//'`).",
        textscan.BAD_VALUE: f"the value {token!r} in {quote} is not a number. Each value after "
        "a feature's ',' must be a decimal number such as 4, 3.5 or 1e-3 (even on indicator "
        "data, where DSSTNE parses and then ignores it); fix the value or drop ',value'.",
        textscan.EXTRA_FIELD: f"the feature {_token_at(chunk, _token_start(chunk, pos))!r} in "
        f"{quote} has more than one ','. {_FIX_FORMAT}: at most one value per feature.",
        textscan.SECOND_TAB: f"{quote} has a second TAB inside its features. {_FIX_FORMAT}: only "
        "the first TAB separates the name; features are separated by ':'.",
        textscan.CARRIAGE_RETURN: f"{quote} contains a carriage return (Windows CRLF line ends); "
        "DSSTNE made it part of the last feature's name. Convert the file with `dos2unix` or "
        "`sed -i 's/\\r$//'`.",
        textscan.UNKNOWN_FEATURE: f"the feature {token.split(',')[0]!r} is not in the feature "
        "index, and --strict makes unknown features an error. Add it with -m (merge), rebuild "
        "the index with -c, or drop --strict to skip unknown features.",
    }
    return DataFormatError(path, messages[status], line=line, column=column)
