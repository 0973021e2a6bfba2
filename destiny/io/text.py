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
import re
import stat
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from itertools import islice
from typing import Callable

import numpy as np
from numba import get_num_threads

from destiny.errors import NUL_REMEDY, DataFormatError, open_files_failure
from destiny.io import textscan
from destiny.io.index import LabelTable
from destiny.io.ratings import decimal_number

CHUNK_BYTES = 16 << 20
# Each scanning thread holds a chunk and its outputs (about 40 MB for MovieLens-20M's); past
# a few threads the reading, the UTF-8 checks and the labels' decoding (one thread at a time,
# under the GIL) bound the parse anyway.
MAX_THREADS = 8
_NOT_UTF8 = -1  # a chunk's status when its bytes are not UTF-8 (the scanner's are >= 0)
_BOM_LINE = -2  # ... when a line after the file's first starts with a UTF-8 byte-order mark

_FIX_FORMAT = "Each line must be 'NAME<TAB>feature[,value]:feature[,value]...'"

# A line of MovieLens ratings (ratings.csv with its header, u.data, ratings.dat), read where
# DSSTNE text was expected: the conversion step was skipped (``_ratings_hint``). A row has its
# four fields, as convert_ratings reads it (it refuses '1,31,2.5').
_RATINGS_LINE = re.compile(r"userId,movieId(,.*)?|\d+(,\d+,[0-9.]+,\d+"
                           r"|\t\d+\t[0-9.]+\t\d+|::\d+::[0-9.]+::\d+)")


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


def input_files(path, flag: str = "-i", *, allow_empty: bool = False) -> list[str]:
    """A text input (generate-netcdf's ``-i``, predict's ``-r`` and ``-f``, named by ``flag``)
    is a file, or a directory whose files are read in sorted order (spec 1.1), bar those whose
    names start with '.' or '_': the files Hadoop and Spark write beside the data
    (``_SUCCESS``, ``.part-00000.crc``), which their own readers skip (DSSTNE read them).

    ``allow_empty``: a directory holding nothing else (an empty job's output, ``_SUCCESS``
    alone) is no files, as an empty file is no records (``read_records``' ``allow_empty``).
    One holding only folders is refused still: they are not read (spec 1.1 is not
    recursive), and a partitioned layout (``date=.../part-...``) would read as empty.
    """
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if not n.startswith((".", "_")))
        if not names and allow_empty:
            return []
        for name in names:  # (a link to a part that is gone: its records would be missing)
            entry = os.path.join(path, name)
            if os.path.islink(entry) and not os.path.exists(entry):
                raise DataFormatError(entry, "is a symbolic link to a file that does not exist "
                                      f"({os.readlink(entry)}), in the input directory given "
                                      f"with {flag}; restore the file, or remove the link.")
        files = [os.path.join(path, n) for n in names if os.path.isfile(os.path.join(path, n))]
        if not files:
            raise DataFormatError(path, "the input directory holds no files (names starting "
                                  "with '.' or '_' are skipped, as Hadoop does); give a text "
                                  f"file or a directory of text files with {flag}.")
        return files
    if not os.path.exists(path):
        raise DataFormatError(path, f"the input file does not exist; check the {flag} path.")
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
    flag: str = "-i",
    allow_empty: bool = False,
) -> Records:
    """Read every record of ``paths`` (in order), mapping feature names through ``features``;
    ``flag`` names the option that gave them, for the messages. Input with no records raises,
    unless ``allow_empty``.

    With ``update`` new feature names are added to ``features``; otherwise they are dropped
    and counted (spec 1.4), or raise with ``strict``. Without ``keep_values`` (indicator data)
    ``values`` is None, though every value is still checked. ``progress(n)`` is called with the
    number of bytes consumed since the last call.

    The chunks are scanned on as many threads at once as numba uses (the scanner releases the
    GIL); the result, the table's numbering and the first error of the input in file order are
    one thread's. Without ``update`` the table is only read. With it, the threads scan a round of
    chunks against the table as it stands, listing the names it lacks, and between rounds those
    are numbered in file order, which is the order of first appearance a new name's index
    follows (spec 1.3). Up to one chunk per thread (at most ``MAX_THREADS``), and one more, is
    held at once.
    """
    threads = min(get_num_threads(), MAX_THREADS)
    mode = textscan.LOOKUP if not update else textscan.DEFER if threads > 1 else textscan.UPDATE
    chunks: list[_Chunk] = []
    dropped = lines_with_drops = 0
    sources = []
    with ThreadPoolExecutor(threads) if threads > 1 else nullcontext() as pool:
        for path in paths:
            line_no = 1
            for chunk in _scanned(path, features, mode, strict, keep_values, pool, threads):
                if chunk.status != textscan.OK:
                    raise _scan_error(path, chunk, line_no)
                chunks.append(chunk)
                line_no += chunk.lines
                dropped += chunk.dropped
                lines_with_drops += chunk.lines_with_drops
                if progress is not None:
                    progress(chunk.size)
            sources.append((path, line_no - 1))
    labels = [s for chunk in chunks for s in chunk.labels]
    if not labels and not allow_empty:
        raise DataFormatError(", ".join(paths), "the input holds no records. " + _FIX_FORMAT
                              + f"; check that the right file was given with {flag}.")
    indptr = np.zeros(len(labels) + 1, dtype=np.int64)
    entries, row = 0, 1
    for chunk in chunks:
        indptr[row:row + chunk.lines] = chunk.row_end + entries
        row += chunk.lines
        entries += len(chunk.indices)
    # (each list starts with an empty array: an empty input has no chunks)
    return Records(labels=labels, indptr=indptr,
                   indices=np.concatenate([np.zeros(0, np.int32), *(c.indices for c in chunks)]),
                   values=np.concatenate([np.zeros(0, np.float32), *(c.values for c in chunks)])
                   if keep_values else None,
                   dropped=dropped, lines_with_drops=lines_with_drops, sources=sources)


@dataclass
class _Chunk:
    """One chunk's records, or the fault that stopped its scan (``status`` != OK)."""

    size: int  # bytes
    status: int
    data: bytes | None = None  # kept to quote a fault, or for the names in `pending`
    pending: np.ndarray | None = None  # (entry, name start, name end) of names to number
    pos: int = 0  # the offending byte, for a fault
    utf8_end: int = 0  # the end of the bytes that are not UTF-8, for that fault
    labels: list[str] = field(default_factory=list)
    row_end: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    indices: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    values: np.ndarray | None = None
    dropped: int = 0
    lines_with_drops: int = 0

    @property
    def lines(self) -> int:
        return len(self.labels)


def _scanned(path, features, mode, strict, keep_values, pool, threads):
    """Yield the scanned chunks of ``path`` in order, ``threads`` of them in flight at once."""
    chunks = _chunks(path)
    if pool is None:
        for data in chunks:
            yield _scan_chunk(data, features, mode, strict, keep_values)
    elif mode == textscan.DEFER:
        # The first chunk alone adds its names as one thread would: against an empty index
        # every name of a round would wait in `pending`, each with its chunk's bytes.
        for data in islice(chunks, 1):
            yield _scan_chunk(data, features, textscan.UPDATE, strict, keep_values)
        # Then in rounds: the table must not change while a thread reads it.
        while batch := list(islice(chunks, threads)):
            futures = [pool.submit(_scan_chunk, data, features, mode, strict, keep_values)
                       for data in batch]
            for future in futures:
                chunk = future.result()
                if chunk.pending is not None:
                    _number_pending(chunk, features)
                yield chunk
    else:
        in_flight: deque = deque()
        try:
            for data in chunks:
                in_flight.append(pool.submit(_scan_chunk, data, features, mode, strict,
                                             keep_values))
                if len(in_flight) > threads:
                    yield in_flight.popleft().result()
            while in_flight:
                yield in_flight.popleft().result()
        finally:  # a fault (or an interrupt) stops the read: scan no more chunks
            for future in in_flight:
                future.cancel()


def _number_pending(chunk: _Chunk, features: LabelTable) -> None:
    """Give the names a DEFER scan listed their indices, adding the new ones in order."""
    pending, buf = chunk.pending, np.frombuffer(chunk.data, dtype=np.uint8)
    done = 0
    while done < len(pending):
        done = textscan.resolve_pending(*features.scan_args(), buf, pending, done,
                                        len(pending), chunk.indices)
        if done < len(pending):
            rest = pending[done:]
            features.reserve(len(rest), int((rest[:, 2] - rest[:, 1]).sum()))
    chunk.data = chunk.pending = None


def _beyond_float32(text: str) -> bool:
    """Whether ``text`` is a decimal number (ASCII digits, as the scanner reads them) too large
    for a float32 (``1e40``; 1e400 too, which float() makes inf). Asked only of a value the
    scanner refused, and it refuses no decimal below the limit, so float64's rounding near the
    limit does not matter here."""
    return abs(decimal_number(text)) >= textscan.FLOAT32_OVERFLOW  # (NaN: not a number)


def _chunks(path):
    """Yield the file's bytes in chunks of whole lines (the last one gets a final newline)."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise (open_files_failure(e, path)
               or DataFormatError(path, f"cannot open the input ({e.strerror}).")) from None
    with f:
        yield from line_chunks(f, path)


def line_chunks(f, path):
    """Yield the bytes of the open file ``f`` (named ``path``) in chunks of whole lines, about
    CHUNK_BYTES each, the last given a final newline. A byte-order mark at the start is
    refused; a read that fails (an I/O error) names the file, which the system's error does
    not."""
    first = True
    while True:
        try:
            chunk = f.read(CHUNK_BYTES)
            if chunk and not chunk.endswith(b"\n"):
                chunk += f.readline()
        except OSError as e:
            raise OSError(e.errno, e.strerror, os.fspath(path)) from None
        if not chunk:
            return
        if first:
            textscan.check_text_start(path, chunk)
            first = False
        if not chunk.endswith(b"\n"):
            chunk += b"\n"
        yield chunk


def _scan_chunk(data: bytes, features: LabelTable, mode: int, strict: bool,
                keep_values: bool) -> _Chunk:
    bom = -1
    if not data.isascii():  # isascii is a fast scan; decoding checks the rest
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as e:
            return _Chunk(len(data), _NOT_UTF8, data, pos=e.start, utf8_end=e.end)
        bom = textscan.bom_line(data)
    buf = np.frombuffer(data, dtype=np.uint8)
    # Every line has a label and a TAB or a LF, every entry a name and a ':' or a LF, so
    # neither outnumbers half the bytes. (np.empty commits no memory until it is written.)
    most = len(data) // 2 + 1
    label_start = np.empty(most, dtype=np.int64)
    label_end = np.empty(most, dtype=np.int64)
    row_end = np.empty(most, dtype=np.int64)
    tok_index = np.empty(most, dtype=np.int32)
    tok_value = np.empty(most, dtype=np.float32)
    pending = np.empty((most if mode == textscan.DEFER else 0, 3), dtype=np.int64)
    counts = np.zeros(5, dtype=np.int64)
    pos = 0
    while True:
        status, pos = textscan.scan_records(
            buf, pos, *features.scan_args(), mode, strict,
            label_start, label_end, row_end, tok_index, tok_value, pending, counts)
        if status != textscan.NEED_ROOM:
            break
        line_len = data.find(b"\n", pos) - pos
        features.reserve(max(line_len // 2 + 1, len(features)), max(line_len, len(data)))
    if bom >= 0 and (status == textscan.OK or bom < pos):  # the first fault in the file
        return _Chunk(len(data), _BOM_LINE, data, pos=bom)
    if status != textscan.OK:
        return _Chunk(len(data), status, data, pos=pos)
    lines, entries, n_pending = int(counts[0]), int(counts[1]), int(counts[4])
    labels = [data[s:e].decode("utf-8")
              for s, e in zip(label_start[:lines].tolist(), label_end[:lines].tolist(),
                              strict=True)]
    return _Chunk(len(data), status, data if n_pending else None, labels=labels,
                  row_end=row_end[:lines].copy(), indices=tok_index[:entries].copy(),
                  values=tok_value[:entries].copy() if keep_values else None,
                  pending=pending[:n_pending].copy() if n_pending else None,
                  dropped=int(counts[2]), lines_with_drops=int(counts[3]))


def record_line_error(path, raw: bytes, line_no: int) -> DataFormatError | None:
    """The error generate-netcdf gives the line ``raw`` (its bytes, with its LF or without),
    line ``line_no`` of ``path``, or None where it reads the line. For a program that copies
    DSSTNE text (scripts/split_holdout.py): what generate-netcdf would refuse in its output is
    refused in its input, naming that file's line."""
    data = raw if raw.endswith(b"\n") else raw + b"\n"
    chunk = _scan_chunk(data, LabelTable(16), textscan.UPDATE, False, False)
    return None if chunk.status == textscan.OK else _scan_error(path, chunk, line_no)


def _line_bounds(chunk: bytes, pos: int) -> tuple[int, int]:
    """Where the line of ``chunk`` holding byte ``pos`` starts, and ends (its newline)."""
    end = chunk.find(b"\n", pos)
    return chunk.rfind(b"\n", 0, pos) + 1, len(chunk) if end < 0 else end


def _locate(chunk: bytes, pos: int, first_line: int) -> tuple[int, int, str]:
    """Line number, 1-based column (in characters) and a short quote of the line at ``pos``."""
    start, end = _line_bounds(chunk, pos)
    line = first_line + chunk.count(b"\n", 0, start)
    column = len(chunk[start:pos].decode("utf-8", errors="replace")) + 1
    text = chunk[start:end].decode("utf-8", errors="replace")
    quote = repr(text if len(text) <= 80 else text[:77] + "...")
    return line, column, f"the line {quote}"


def ratings_hint(line: str) -> str:
    """A sentence (with a leading space) for a ``line`` of text, refused as DSSTNE text, that
    is a line of MovieLens ratings: how to convert them. '' for any other line."""
    if not _RATINGS_LINE.fullmatch(line):
        return ""
    return (" It looks like MovieLens ratings (user, item, rating, timestamp), not DSSTNE "
            "text: convert them first with `python scripts/convert_ratings.py RATINGS -o "
            "TEXT` (one line per user) and give TEXT here.")


def _token_at(chunk: bytes, pos: int) -> str:
    end = pos
    while end < len(chunk) and chunk[end] not in b":\n":
        end += 1
    return chunk[pos:end].decode("utf-8", errors="replace")


def _token_start(chunk: bytes, pos: int) -> int:
    """Start of the feature holding byte ``pos``: after the nearest ':' or TAB of its line."""
    line_start = chunk.rfind(b"\n", 0, pos) + 1
    return max(chunk.rfind(b":", line_start, pos), chunk.rfind(b"\t", line_start, pos)) + 1


def _scan_error(path, scanned: _Chunk, first_line: int) -> DataFormatError:
    chunk, pos, status = scanned.data, scanned.pos, scanned.status
    line, column, quote = _locate(chunk, pos, first_line)
    start, end = _line_bounds(chunk, pos)
    if status == textscan.NUL_BYTE:
        return nul_error(path, chunk, pos, first_line)
    # UTF-16 text with CRLF line ends has a CR on every line, which the scanner names before
    # all else, and a NUL after every ASCII character: the NUL says what the file is (as
    # evaluate and convert_ratings say), and converting it from UTF-16 is the remedy.
    if status == textscan.CARRIAGE_RETURN and (nul := chunk.find(b"\0", start, end)) >= 0:
        return nul_error(path, chunk, nul, first_line)
    if status == _BOM_LINE:  # (at a line's start: never a line cut short)
        return bom_line_error(path, chunk, pos, first_line)
    cut = _cut_short(path, chunk, start, end)
    if status == _NOT_UTF8:
        return DataFormatError(
            path, f"the bytes {chunk[pos:scanned.utf8_end]!r} in {quote} are not valid UTF-8. "
            "Destiny reads text as UTF-8; convert the file first (for example with "
            "`iconv -f latin1 -t utf-8`)." + cut, line=line, column=column)
    token = _token_at(chunk, pos)
    hint = ratings_hint(chunk[start:end].decode("utf-8", errors="replace"))
    messages = {
        textscan.BLANK_LINE: "the line is blank. DSSTNE skipped blank lines silently, which hides "
        "truncated or mis-joined files; remove them (for example with `grep -v '^$'`).",
        textscan.NO_TAB: f"{quote} has no TAB between the sample name and its features. "
        f"{_FIX_FORMAT}; check the separator (spaces are not a TAB).{hint}",
        textscan.EMPTY_LABEL: f"{quote} starts with a TAB: the sample name is empty. "
                              f"{_FIX_FORMAT}.",
        textscan.EMPTY_FEATURE: f"{quote} has an empty feature name (at {token!r}). "
        f"{_FIX_FORMAT}: features are separated by single ':' and each needs a name.",
        textscan.TRAILING_COLON: f"{quote} ends with ':', an empty feature. Remove the trailing "
        "colon (for example with `sed 's/:$//'`).",
        textscan.BAD_VALUE: f"the value {token!r} in {quote} " + (
            "is beyond float32's range (about 3.4e38), in which datasets hold values; scale "
            "the values down." if _beyond_float32(token) else "is not a number. Each value "
            "after a feature's ',' must be a decimal number such as 4, 3.5 or 1e-3 (even on "
            "indicator data, where DSSTNE parses and then ignores it); fix the value or drop "
            "',value'."),
        textscan.EXTRA_FIELD: f"the feature {_token_at(chunk, _token_start(chunk, pos))!r} in "
        f"{quote} has more than one ','. {_FIX_FORMAT}: at most one value per feature.",
        textscan.SECOND_TAB: f"{quote} has a second TAB inside its features. {_FIX_FORMAT}: only "
        f"the first TAB separates the name; features are separated by ':'.{hint}",
        textscan.CARRIAGE_RETURN: f"{quote} contains a carriage return (Windows CRLF line ends); "
        "DSSTNE made it part of the last feature's name. Convert the file with `dos2unix` or "
        "`sed -i 's/\\r$//'`.",
        textscan.UNKNOWN_FEATURE: f"the feature {token.split(',')[0]!r} is not in the feature "
        "index, and --strict makes unknown features an error. Add it with -m (merge), rebuild "
        "the index with -c, or drop --strict to skip unknown features.",
    }
    return DataFormatError(path, messages[status] + cut, line=line, column=column)


def _cut_short(path, chunk: bytes, start: int, end: int) -> str:
    """A word on a fault in the line ``chunk[start:end]`` where it is the file's last line and
    the file does not end with a newline: a copy or a write that did not finish leaves such a
    line (a multi-byte character, a value or a feature cut off), and the fault's own remedy
    would not mend the file. '' otherwise."""
    if end != len(chunk) - 1:  # (not the chunk's last line)
        return ""
    line = chunk[start:end]
    try:
        # Only a regular file is read again: a named pipe's open would wait for a writer
        # that has gone (the command hung), and a pipe's data is not there a second time.
        if not stat.S_ISREG(os.stat(path).st_mode):
            return ""
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            if size < len(line):
                return ""
            f.seek(size - len(line) - 1 if size > len(line) else 0)
            tail = f.read()
    except (OSError, ValueError):  # (stdin, a pipe: not to be read again)
        return ""
    if not tail.endswith(line) or tail.endswith(b"\n"):
        return ""
    return (" It is the file's last line, and the file does not end with a newline: if the "
            "file was cut short (a copy or a write that did not finish), make it again.")


# Why generate-netcdf and predict refuse a NUL in a label (the default of ``nul_error``).
NUL_IN_OUTPUTS = ("Labels go into the index files and the outputs, text read line by line, "
                  "which a NUL breaks")


def bom_line_error(path, chunk: bytes, pos: int, first_line: int, *,
                   name: str = "sample name") -> DataFormatError:
    """The refusal of the line of ``chunk`` (whose first line is numbered ``first_line``) that
    `textscan.bom_line` found at ``pos``; every reader of DSSTNE text gives this one message
    (``name``: what the line's first field is; an index file's is a ``label``)."""
    line, column, quote = _locate(chunk, pos, first_line)
    return DataFormatError(
        path, f"{quote} starts with a UTF-8 byte-order mark (bytes EF BB BF), which would "
        f"become part of its {name}: a file that starts with one (written by some Windows "
        "editors) was joined on here, for example with `cat`. Remove the marks, for example "
        "with `sed -i 's/^\\xEF\\xBB\\xBF//' FILE`.", line=line, column=column)


def nul_error(path, chunk: bytes, pos: int, first_line: int, *, why: str = NUL_IN_OUTPUTS,
              entry: str = "feature") -> DataFormatError:
    """The refusal of the NUL byte at ``pos`` of ``chunk`` (whose first line is numbered
    ``first_line``): its line, column and label, ``why`` no label may hold one, and the
    remedies (``tr -d``; ``iconv`` for UTF-16 text, a NUL after every ASCII character). Every
    reader of DSSTNE text gives this one message; ``entry`` names what follows the TAB
    (``feature``; ``item`` in evaluate's files)."""
    line, column, quote = _locate(chunk, pos, first_line)
    if chunk.find(b"\t", _line_bounds(chunk, pos)[0], pos) < 0:
        where = f"{quote} holds a NUL byte (\\x00) in its sample name"
    else:
        where = (f"the {entry} {_token_at(chunk, _token_start(chunk, pos))!r} in {quote} holds "
                 "a NUL byte (\\x00)")
    return DataFormatError(path, f"{where}. {why}; {NUL_REMEDY}", line=line, column=column)
