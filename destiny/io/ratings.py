"""Raw MovieLens ratings to DSSTNE text: the successor of DSSTNE's ``convert_ratings.awk``.

Three inputs are read, each ``user item rating timestamp`` per line:

* ``csv``: ``ratings.csv`` of ml-latest / ml-20m, comma separated, with the header
  ``userId,movieId,rating,timestamp`` (any first line whose first field is not a number is
  taken for a header);
* ``udata``: ``u.data`` of ml-100k, TAB separated, no header;
* ``dat``: ``ratings.dat`` of ml-1m / ml-10m, ``::`` separated, no header.

The output has one line per user, ``USER<TAB>item,value:item,value...``, users in order of
first appearance and each user's items in input order. Unlike the awk script the input need
not be grouped by user; on a grouped ``ratings.csv`` the output is the awk script's, byte for
byte, because fields are copied as text and never reformatted (duplicate rows stay, as there).

The file is read once, in chunks of whole lines. Consecutive rows of one user (a "run") are
collected as ``item,value`` strings and joined when the user changes, so grouped input, the
usual case, keeps one string per user in memory rather than one per rating. Rows are checked
chunk by chunk where a scan of the whole chunk can show them clean (see ``_clean``), which
halves the time of a 20-million-row file (about 12 s).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import TextIO

from destiny.errors import (NUL_REMEDY, DataFormatError, netcdf_text_error, open_files_failure,
                            utf16_bom_error)

FORMATS = ("auto", "csv", "udata", "dat")
VALUES = ("timestamp", "rating", "none")

_SEPARATORS = {"csv": ",", "udata": "\t", "dat": "::"}
_LAYOUTS = {
    "csv": "'userId,movieId,rating,timestamp' (comma separated, MovieLens ratings.csv)",
    "udata": "'user<TAB>item<TAB>rating<TAB>timestamp' (TAB separated, MovieLens u.data)",
    "dat": "'user::item::rating::timestamp' (MovieLens ratings.dat)",
}
_CSV_HEADER = "userId,movieId,rating,timestamp"
_FIELDS = ("user", "item", "rating", "timestamp")  # a row's, in order, as messages name them
CHUNK_CHARS = 4 << 20  # characters read at a time


@dataclass(frozen=True)
class ConvertReport:
    """What ``convert_ratings`` wrote: ``users`` lines holding ``ratings`` items in all.

    ``skipped_below_min`` counts the rows that ``min_rating`` left out, and ``fmt`` is the
    input format that was read (the detected one when ``fmt="auto"``).
    """

    users: int
    ratings: int
    skipped_below_min: int
    fmt: str


def convert_ratings(
    src_path,
    out: TextIO,
    *,
    fmt: str = "auto",
    value: str = "timestamp",
    min_rating: float | None = None,
) -> ConvertReport:
    """Convert the ratings file ``src_path`` to DSSTNE text written to the text stream ``out``.

    ``fmt`` is ``auto`` (detected from the first line), ``csv``, ``udata`` or ``dat``;
    ``value`` is what follows each item: the ``timestamp`` (DSSTNE's example), the ``rating``,
    or ``none`` for a bare item. With ``min_rating``, only rows rated at least that much are
    kept. Nothing is written to ``out`` unless the whole input is valid; bad input raises
    ``DataFormatError`` naming the file and line.
    """
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if value not in VALUES:
        raise ValueError(f"value must be one of {', '.join(VALUES)}, not {value!r}")
    try:
        # newline="\n": lines end at LF only and a CR stays in the text, so that CRLF files
        # are caught instead of silently giving timestamps like '964982703\r'.
        with open(src_path, encoding="utf-8-sig", newline="\n") as f:
            # (UTF-16 text and a NetCDF file, by their first bytes, before they are decoded)
            if error := (utf16_bom_error(src_path, head := f.buffer.peek(8)[:8])
                         or netcdf_text_error(src_path, head)):
                raise error
            try:
                groups, report = _read(f, src_path, fmt, value, min_rating)
            except UnicodeDecodeError:
                raise _decode_error(src_path) from None
    except OSError as e:
        raise open_files_failure(e, src_path) or DataFormatError(
            src_path, f"the ratings file cannot be read ({e.strerror or e}); check the path and "
            "its permissions.") from None
    out.writelines(f"{user}\t{':'.join(runs)}\n" for user, runs in groups.items())
    return report


def _read(f, path, fmt: str, value: str, min_rating: float | None):
    text = _read_chunk(f)
    if not text:
        raise DataFormatError(path, "the file is empty; expected MovieLens ratings, one "
                              "'user item rating timestamp' row a line.", line=1)
    first = text.split("\n", 1)[0]
    if "\r" in first and "\0" not in first:  # (UTF-16 text, CRLF or not: the NUL says so)
        raise _cr_error(path, 1)
    if fmt == "auto":
        try:
            fmt = _detect(first, path)
        except DataFormatError:
            # UTF-16 text ('::' read as ':\0:') has no separator to detect: its NUL bytes,
            # not "cannot tell the format", say what is wrong and how to mend it.
            if "\0" in first:
                raise _nul_error(first, None, path, 1) from None
            raise
    sep = _SEPARATORS[fmt]
    if "\0" in first:  # (a header too: the rows are checked below, the header is not)
        raise _nul_error(first, sep, path, 1)
    header = fmt == "csv" and _is_header(first)

    value_index = {"timestamp": 3, "rating": 2, "none": None}[value]
    filtering = min_rating is not None
    groups: dict[str, list[str]] = {}  # user -> joined runs; dict order = first appearance
    run_user = None
    run: list[str] = []
    ratings = skipped = 0
    start = 1  # number of the chunk's first line
    while text:
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()  # the chunk ends with a line end (all but maybe the last chunk)
        # Rows that hold only numbers need no check of their values one by one (which costs
        # 40% more time); others are checked a row at a time.
        plain = _plain(text.partition("\n")[2] if header else text)
        if header:
            del lines[0]
            start, header = 2, False
        clean = _clean(text, fmt)
        for lineno, line in enumerate(lines, start):
            if not clean and "\0" in line:  # (before the fields: UTF-16 text splits oddly)
                raise _nul_error(line, sep, path, lineno)
            fields = line.split(sep)
            if len(fields) != 4:
                raise _field_count_error(line, fields, path, lineno, fmt)
            if not clean:
                _check_row(line, fields, value_index, path, lineno)
            user, item, rating, stamp = fields
            if filtering and _rating(rating, path, lineno, fmt) < min_rating:
                skipped += 1
                continue
            if user != run_user:
                if run:
                    groups.setdefault(run_user, []).append(":".join(run))
                run_user = user
                run = []
            if value_index is None:
                run.append(item)
            else:
                if not plain:
                    _check_number(fields[value_index], value, path, lineno, fmt)
                run.append(f"{item},{fields[value_index]}")
            ratings += 1
        start += len(lines)
        text = _read_chunk(f)
    if run:
        groups.setdefault(run_user, []).append(":".join(run))

    if ratings == 0:
        if skipped:
            raise DataFormatError(path, f"none of the {skipped} ratings is at least "
                                  f"--min-rating {min_rating:g}, so there is nothing to write; "
                                  "lower --min-rating (MovieLens rates 0.5 to 5 stars).")
        raise DataFormatError(path, "the file ends after its header and holds no ratings; "
                              f"expected rows of {_LAYOUTS[fmt]}.", line=start)
    return groups, ConvertReport(len(groups), ratings, skipped, fmt)


def _read_chunk(f) -> str:
    """About CHUNK_CHARS characters of whole lines ('' at the end of the file)."""
    text = f.read(CHUNK_CHARS)
    if text and text[-1] != "\n":
        text += f.readline()
    return text


def _clean(text: str, fmt: str) -> bool:
    """Whether no row of ``text`` can hold an empty field, a CR, a NUL or a character with a
    meaning in DSSTNE text (TAB, ':', ','), so that its rows need no checks one by one.

    A few scans of the whole chunk in C are much cheaper than tests on every row; a false
    alarm only costs speed, as the rows are then checked one by one.
    """
    sep = _SEPARATORS[fmt]
    if "\r" in text or "\0" in text or sep + sep in text:
        return False
    if text.startswith(sep) or text.endswith(sep):
        return False
    if f"\n{sep}" in text or f"{sep}\n" in text:
        return False
    if fmt == "dat":
        # Every run of colons must be exactly one '::' ('::::' was tested above).
        return not ("\t" in text or "," in text or text.count(":") != 2 * text.count("::"))
    # csv: the field count already rules out extra commas; udata: extra TABs.
    return ":" not in text and ("," if fmt == "udata" else "\t") not in text


def _detect(first: str, path) -> str:
    if "::" in first:
        return "dat"
    if "\t" in first:
        return "udata"
    if "," in first:
        return "csv"
    raise DataFormatError(path, f"cannot tell the ratings format from the first line "
                          f"{_show(first)}: it has no '::', TAB or comma; expected one of "
                          f"{'; '.join(_LAYOUTS.values())}. Give the format explicitly "
                          "(--format) if the file is one of these.", line=1)


def _is_header(first: str) -> bool:
    """The MovieLens header, or any first line whose first field is not a number."""
    line = first.rstrip("\n")
    return line == _CSV_HEADER or not _is_number(line.split(",", 1)[0])


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# A number as generate-netcdf's scanner reads one (textscan._parse_value): ASCII digits with
# an optional sign, point and exponent. Python's float() reads more ('1_000', ' 4', '٣', 'inf'),
# which the scanner refuses, naming a line of the text written instead of this file's.
# (Here, where no numba is loaded; scripts/split_holdout.py reads its features' values so too.)
# Each text matches one way: with '[0-9]+\.?[0-9]*' a run of digits split between the two
# runs as many ways as it is long, so a failed match took time quadratic in its length, and
# split_holdout.py's line of such numbers (repeated) time exponential in their count.
DECIMAL = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_DECIMAL = re.compile(DECIMAL)
_NUMBER_FORM = "a decimal such as 4, 3.5 or 1e-3, without spaces or '_'"


def decimal_number(text: str) -> float:
    """The decimal number ``text`` (as generate-netcdf reads it), or NaN where it is not one."""
    if not _DECIMAL.fullmatch(text):
        return math.nan
    return float(text)


def _rating(text: str, path, lineno: int, fmt: str) -> float:
    rating = decimal_number(text)
    if math.isnan(rating):
        raise DataFormatError(path, f"the rating {_show(text)} is not a number ({_NUMBER_FORM}), "
                              "so it cannot be compared with --min-rating; expected rows of "
                              f"{_LAYOUTS[fmt]}. Fix the row, or leave out --min-rating "
                              "(without it the rating is not read).", line=lineno)
    return rating


# float32 rounds this and above to infinity: textscan.FLOAT32_OVERFLOW, restated so that
# convert_ratings does not load numba (textscan's kernels) to read a CSV file.
_FLOAT32_OVERFLOW = 2.0**128 - 2.0**103
_FLOAT32_LIMIT = Decimal(_FLOAT32_OVERFLOW)  # (exact: the limit is an integer)
_NEAR_LIMIT = _FLOAT32_OVERFLOW * (1 - 1e-9)  # below it, float()'s rounding cannot cross it
_DIGITS = b"0123456789"
_ZEROS = bytes.maketrans(b"123456789", b"000000000")
_POINT_ALONE = re.compile(rb"\.(?![0-9])(?<![0-9]\.)")


def _plain(text: str) -> bool:
    """Whether every field of ``text`` (whole rows, no empty field: ``_clean``) is a number that
    float() reads within float32's range: digits with one point at most, not a point alone,
    no run of 39 digits (1e38 has 39; float32 ends at 3.4e38).

    A few passes in C over the chunk (about 3 ms a MB) instead of a test on every row; a false
    alarm (an id such as '1.2.3', a value of 39 digits that fits) only costs speed.
    """
    if not text.isascii():
        return False
    raw = text.encode("ascii")
    marks = raw.translate(None, _DIGITS)  # the separators and points, in order
    if marks.translate(None, b".,:\t\n") or b".." in marks:  # (a letter; '1.2.3')
        return False
    return not (_POINT_ALONE.search(raw) or b"0" * 39 in raw.translate(_ZEROS))


def _within_float32(text: str) -> bool:
    """Whether ``text`` is a number (``decimal_number``) that float32 rounds to a finite
    value, decided exactly, as C's stof and the scanner decide it: float() rounds
    3.4028235677973366e38, a little below the limit, onto it."""
    number = abs(decimal_number(text))
    if number < _NEAR_LIMIT:
        return True
    return not math.isnan(number) and Decimal(text).copy_abs() < _FLOAT32_LIMIT


def _check_number(text: str, value: str, path, lineno: int, fmt: str) -> None:
    """Raise unless ``text`` (the field --value writes) is a number within float32's range,
    as generate-netcdf will read it: checked here so that the message names this file's line."""
    if not _within_float32(text):
        raise DataFormatError(path, f"the {value} {_show(text)} is not a number within float32's "
                              f"range ({_NUMBER_FORM}), but --value writes it as each item's "
                              "value, which "
                              "generate-netcdf reads as a float32; expected rows of "
                              f"{_LAYOUTS[fmt]}. Fix the row, or give another --value (none "
                              "writes no values).", line=lineno)


def _cr_error(path, lineno: int) -> DataFormatError:
    return DataFormatError(path, "the line ends with a carriage return (Windows CRLF or old Mac "
                           "CR line ends); expected Unix LF line ends. Convert the file first, "
                           "e.g. with dos2unix.", line=lineno)


def _field_count_error(line: str, fields, path, lineno: int, fmt: str) -> DataFormatError:
    if "\r" in line:
        # Lines ended by a lone CR read as one long line: report the line ends instead.
        return _cr_error(path, lineno)
    if not line.strip():
        found = "a blank line"
    else:
        found = f"{len(fields)} field{'s' if len(fields) != 1 else ''} in {_show(line)}"
    return DataFormatError(path, f"found {found}; expected 4 fields, {_LAYOUTS[fmt]}. Fix or "
                           "remove the line, or give the right --format if the file is another "
                           "of the MovieLens layouts.", line=lineno)


def _nul_error(line: str, sep: str | None, path, lineno: int) -> DataFormatError:
    """The refusal of a NUL byte in ``line``, in generate-netcdf's words: a NUL is valid UTF-8,
    but copied into the DSSTNE text written it would be refused there, naming that file's line
    instead of this one. ``sep`` None: the separator is unknown, so no field is named."""
    at = line.index("\0")
    field = line[:at].count(sep) if sep is not None else None
    where = f" in its {_FIELDS[field]} field" if field is not None and field < len(_FIELDS) else ""
    return DataFormatError(path, f"the line {_show(line)} holds a NUL byte (\\x00){where}. "
                           "No MovieLens field holds one, and the DSSTNE text written cannot "
                           f"(generate-netcdf refuses it); {NUL_REMEDY}", line=lineno,
                           column=at + 1)


def _check_row(line: str, fields, value_index, path, lineno: int) -> None:
    """Raise for a CR, an empty field or a DSSTNE separator in one of the fields written."""
    if "\r" in line:
        raise _cr_error(path, lineno)
    used = (0, 1) if value_index is None else (0, 1, value_index)
    needed = ", ".join(f"a {_FIELDS[i]}" for i in used)
    for i in used:
        if not fields[i]:
            raise DataFormatError(path, f"the {_FIELDS[i]} field is empty; every row needs "
                                  f"{needed}. Fix or remove the row.", line=lineno)
    # DSSTNE text gives these characters a meaning: TAB ends the name, ':' joins items and
    # ',' separates an item from its value.
    for i in used:
        for char in "\t" if i == 0 else "\t:,":
            if char in fields[i]:
                raise DataFormatError(
                    path, f"the {_FIELDS[i]} field {_show(fields[i])} contains {_show(char)}, "
                    "which is a separator in DSSTNE text and would change the record's "
                    "meaning; expected a plain id or number. Rename it in the input.",
                    line=lineno)


def _decode_error(path) -> DataFormatError:
    """Find the line and byte of the first invalid UTF-8 (text mode only says 'somewhere')."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                return DataFormatError(path, f"byte 0x{raw[e.start]:02x} is not valid UTF-8; "
                                       "expected UTF-8 (or ASCII) text as MovieLens ships it. "
                                       "Convert the file, e.g. with iconv -f latin1 -t utf-8.",
                                       line=lineno, column=e.start + 1)
    return DataFormatError(path, "the file is not valid UTF-8; convert it, e.g. with iconv -f "
                           "latin1 -t utf-8.")


def _show(text: str, limit: int = 60) -> str:
    text = text.rstrip("\n")
    return repr(text if len(text) <= limit else text[:limit] + "...")
