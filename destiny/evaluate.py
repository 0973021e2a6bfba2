"""Scoring a recommendation file (``predict`` output) against held-out interactions.

The recommendation file is what DSSTNE's ``predict`` writes (spec 8.5), one line per sample::

    NAME<TAB>item,score:item,score:...:

Every item, the last one included, is followed by ':'; a line may list no item at all
(``NAME<TAB>``). Items are in rank order, best first; the scores are checked to be numbers that
never rise along the line (a file in another order is refused), and otherwise ignored. The
held-out file is DSSTNE text (spec 1.2), ``NAME<TAB>item[,value]:...``, with values ignored (a
trailing ':' and a line without items are tolerated).

Samples and items are matched by their labels (strings). Held-out users without a line in the
recommendation file are scored as empty lists (all misses) and counted; users of the
recommendation file that are not in the held-out file, and held-out lines without items, are
skipped and counted. The metrics are those of ``destiny.metrics``.

The optional popularity baseline ranks the items of a training file (DSSTNE text, as given to
``generate-netcdf``) by the number of lines (users) that list them, ties broken by first
appearance in the file (the order of generate-netcdf's feature index, and so of predict's
tie-break by index), and recommends to every held-out user the k most popular items that
their own training line does not list.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numba import njit

from destiny.errors import DataFormatError, open_files_failure
from destiny.io.ratings import DECIMAL
from destiny.io.text import bom_line_error, line_chunks, nul_error
from destiny.io.textscan import bom_line
from destiny.metrics import RankingMetrics, ranking_metrics

if TYPE_CHECKING:
    from destiny.holdout import Unseen

# A decimal as generate-netcdf reads it (ratings.DECIMAL, which matches each text one way), or
# NaN or an infinity as Python and C print them.
_NUMBER = rf"{DECIMAL}|[-+]?(?i:nan|inf|infinity)"
_NUMBER_ONLY = re.compile(rf"(?:{_NUMBER})")

_REC_FORMAT = ("Each line must be 'NAME<TAB>item,score:item,score:...:' as predict writes it "
               "(best first, so scores never rise; 'NAME<TAB>' alone for no recommendation)")
# How far (relatively) a score may rise along a line before the line is refused: far above the
# error of the scanner's decimal reading (1e-15 or so), far below two scores printed apart.
_RISE = 1e-12
_TEXT_FORMAT = "Each line must be 'NAME<TAB>item[,value]:item[,value]...' (DSSTNE text)"
# A NUL is valid UTF-8, but no label of predict's output or generate-netcdf's input can hold one:
# a label holding one matches nothing, and the scores would be silently low.
_NUL_WHY = ("Labels are matched with those of the other files, which cannot hold one "
            "(generate-netcdf and predict refuse it), so a label holding one would match nothing "
            "and silently lower the scores")


@dataclass(frozen=True)
class Scores:
    """The metrics of one ranking (the model's or the popularity baseline's)."""

    metrics: RankingMetrics
    missing_recommendations: int = 0  # held-out users scored as empty lists

    def as_dict(self) -> dict:
        return {**self.metrics.as_dict(), "missing_recommendations": self.missing_recommendations}


@dataclass(frozen=True)
class Evaluation:
    """The model's scores, the baseline's if asked for, and what was matched."""

    model: Scores
    popularity: Scores | None
    held_out_users: int          # lines in the held-out file
    not_in_held_out: int         # recommendation lines whose sample is not in the held-out file
    empty_held_out: int          # held-out lines without items
    longest_list: int            # the most items on one recommendation line

    def as_dict(self) -> dict:
        """The model's scores at the top level, whether or not the baseline was asked for
        (a script reading ``precision`` keeps working when ``--popularity`` is added)."""
        if self.popularity is None:
            return self.model.as_dict()
        return {**self.model.as_dict(), "popularity": self.popularity.as_dict()}


def evaluate(recommendations, held_out, k: int, *, popularity_train=None) -> Evaluation:
    """Score the recommendation file against the held-out file at ``k`` (see the module doc)."""
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    # Millions of small strings and sets, and no reference cycles: the cyclic garbage
    # collector would only rescan them again and again (a third of the time).
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _evaluate(recommendations, held_out, k, popularity_train)
    finally:
        if enabled:
            gc.enable()


def _evaluate(recommendations, held_out, k: int, popularity_train) -> Evaluation:
    # A k past every list scores as the longest list does: the readers and the baseline, which
    # hold k in NumPy's int64, get at most 2^62; the metrics (plain Python) and the report, k.
    depth = min(k, 2**62)
    truth = read_held_out(held_out)
    recs, longest = read_recommendations(recommendations, keep=depth)
    users = list(truth)
    truth_sets = [truth[u] for u in users]
    lists, missing = [], 0
    for user in users:
        items = recs.get(user)
        if items is None:
            if truth[user]:
                missing += 1
            items = []
        lists.append(items)
    not_in_held_out = sum(1 for user in recs if user not in truth)
    empty = sum(1 for items in truth_sets if not items)
    metrics = ranking_metrics(lists, truth_sets, k)
    model = Scores(dataclasses.replace(metrics, skipped=metrics.skipped + not_in_held_out),
                   missing)
    baseline = None
    if popularity_train is not None:
        ranked = popularity_recommendations(popularity_train, users, depth)
        baseline = Scores(ranking_metrics(ranked, truth_sets, k), 0)
    return Evaluation(model=model, popularity=baseline, held_out_users=len(users),
                      not_in_held_out=not_in_held_out, empty_held_out=empty,
                      longest_list=longest)


def read_recommendations(path, *, keep: int | None = None) -> tuple[dict[str, list[str]], int]:
    """({sample: its first ``keep`` items, best first}, the most items on one line).

    Every line is checked in full (labels, ',' and a numeric score per item) even though only
    the first ``keep`` items are kept.
    """
    recs: dict[str, list[str]] = {}
    longest = 0
    for name, items, most in _read(path, "recommendation", "-r", _REC_FORMAT, keep=keep,
                                   scores=True):
        recs[name] = items
        longest = max(longest, most)
    return recs, longest


def read_held_out(path) -> dict[str, set[str]]:
    """{sample: its set of item labels} of a DSSTNE text file (values checked, then ignored)."""
    return {name: set(items) for name, items, _ in
            _read(path, "held-out", "-t", _TEXT_FORMAT, keep=None, scores=False)}


def popularity_recommendations(train_path, users: list[str], k: int) -> list[Unseen]:
    """For each of ``users``, the ``k`` most popular items of ``train_path`` they do not have.

    Popularity is the number of lines (users) listing the item; ties go to the item that
    appears first in the file (the lower number in the feature index read here, as
    generate-netcdf numbers them). Users absent from the training file get the overall top k.
    Each user's list is a sized iterable of item labels, made as it is read (``Unseen``).
    """
    from destiny.holdout import popularity_lists
    from destiny.io.index import LabelTable
    from destiny.io.text import read_records

    _check_file(train_path, "training", "--popularity")
    features = LabelTable()
    records = read_records([os.fspath(train_path)], features, update=True, keep_values=False,
                           flag="--popularity")
    row_of: dict[str, int] = {}
    for row, name in enumerate(records.labels):
        if name in row_of:
            raise _duplicate(train_path, name, row_of[name] + 1, row + 1)
        row_of[name] = row
    return popularity_lists(records.indptr, records.indices, len(features), k,
                            [row_of.get(user) for user in users], features.labels())


def held_out_listed(train_path, held_out) -> tuple[int, int]:
    """(the held-out items that the training file ``train_path`` lists under the same users,
    all held-out items): a training file that lists most of them is not the training part of
    the split (a copy of the held-out file, or all the data). Both files are read again."""
    truth = read_held_out(held_out)
    found = 0
    for name, items, _ in _read(train_path, "training", "--popularity", _TEXT_FORMAT, keep=None,
                                scores=False):
        held = truth.get(name)
        if held:
            found += len(held.intersection(items))
    return found, sum(len(items) for items in truth.values())


# --- reading and error messages ---------------------------------------------------------------


def _check_file(path, what: str, flag: str) -> None:
    if not os.path.exists(path):
        raise DataFormatError(path, f"the {what} file does not exist; check the {flag} path.")
    if os.path.isdir(path):
        raise DataFormatError(path, f"is a directory; give the {what} file itself with {flag}.")


def _read(path, what: str, flag: str, fmt: str, *, keep: int | None, scores: bool):
    """Yield (sample, its first ``keep`` items, its number of items) per line, in file order.

    A numba kernel checks the bytes of each chunk and copies out the labels it keeps; the
    first problem is then explained by ``_diagnose`` from the text of its line.
    """
    _check_file(path, what, flag)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise open_files_failure(e, path) or DataFormatError(
            path, f"cannot open the {what} file ({e.strerror}); check its permissions.") from None
    first_line: dict[str, int] = {}
    line_no = 1
    with f:
        for chunk in line_chunks(f, path):
            try:
                chunk.decode("utf-8")  # checked here so that the error can name line and column
            except UnicodeDecodeError as e:
                start = chunk.rfind(b"\n", 0, e.start) + 1
                _diagnose(path, line_no + chunk.count(b"\n", 0, start), chunk, start, fmt,
                          scores)
                raise  # not reached: _diagnose raises
            bom = -1 if chunk.isascii() else bom_line(chunk)
            lines = chunk.count(b"\n")
            out = np.empty(len(chunk), dtype=np.uint8)
            totals = np.empty(lines, dtype=np.int64)
            status, pos, used = _scan_lines(np.frombuffer(chunk, dtype=np.uint8),
                                            -1 if keep is None else keep, scores, out, totals)
            if bom >= 0 and (status == _OK or bom < pos):  # (the first fault, as text.py)
                raise bom_line_error(path, chunk, bom, line_no)
            if status != _OK:
                start = chunk.rfind(b"\n", 0, pos) + 1
                _diagnose(path, line_no + chunk.count(b"\n", 0, start), chunk, start, fmt,
                          scores)
            tot = totals.tolist()
            for i, line in enumerate(out[:used].tobytes().decode("utf-8").split("\n")[:lines]):
                name, _, rest = line.partition("\t")
                _check_new(path, name, line_no + i, first_line)
                yield name, rest.split(":") if rest else [], tot[i]
            line_no += lines
    if line_no == 1:
        raise DataFormatError(path, f"the {what} file is empty; check the {flag} path.")


def _diagnose(path, line_no: int, chunk: bytes, start: int, fmt: str, scores: bool):
    """Raise the ``DataFormatError`` explaining the line of ``chunk`` that starts at ``start``."""
    end = chunk.find(b"\n", start)
    raw = chunk[start:end if end >= 0 else len(chunk)]
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        column = len(raw[:e.start].decode("utf-8", errors="replace")) + 1
        raise DataFormatError(
            path, f"the bytes {raw[e.start:e.end]!r} are not valid UTF-8. Destiny reads "
            "text as UTF-8; convert the file first (for example with "
            "`iconv -f latin1 -t utf-8`).", line=line_no, column=column) from None
    nul = raw.find(b"\0")
    if nul >= 0:  # (first: a NUL after every character is UTF-16 text, whatever else is wrong)
        raise nul_error(path, raw, nul, line_no, why=_NUL_WHY, entry="item")
    if "\r" in line:
        raise DataFormatError(path, f"{_quote(line)} holds a carriage return (Windows CRLF "
                              "line ends?); convert the file with `dos2unix` or "
                              "`sed -i 's/\\r$//'`.", line=line_no)
    name, tab, rest = line.partition("\t")
    if not tab:
        if not line:
            raise DataFormatError(path, f"the line is blank. {fmt}; remove blank lines "
                                  "(for example with `grep -v '^$'`).", line=line_no)
        raise DataFormatError(path, f"{_quote(line)} has no TAB after the sample name. "
                              f"{fmt}; check the separator (spaces are not a TAB).",
                              line=line_no)
    if not name:
        raise DataFormatError(path, f"{_quote(line)} starts with a TAB: the sample name "
                              f"is empty. {fmt}.", line=line_no, column=1)
    raise _token_error(path, line_no, name, rest, scores)


def _check_new(path, name: str, line_no: int, first_line: dict[str, int]) -> None:
    first = first_line.setdefault(name, line_no)
    if first != line_no:
        raise _duplicate(path, name, first, line_no)


def _duplicate(path, name: str, first: int, again: int) -> DataFormatError:
    return DataFormatError(path, f"the sample {name!r} has a second line (line {again}; the first "
                           f"is line {first}). Every sample must have exactly one line: merge "
                           "or remove the duplicate.", line=again)


def _quote(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")


def _token_error(path, line_no: int, name: str, rest: str, scores: bool) -> DataFormatError:
    """Find the first bad token of a line that failed the fast check.

    ``scores``: a recommendation line (every item has ',score'; a trailing ':' is normal);
    otherwise a held-out line (',value' optional; a trailing ':' tolerated after an item).
    """
    line = f"{name}\t{rest}"
    column = len(name) + 2
    tokens = rest.split(":")
    problem = None
    best, best_text = math.inf, ""  # the lowest score so far
    for i, token in enumerate(tokens):
        if token == "" and i == len(tokens) - 1 and (scores or i > 0):
            break
        item, comma, number = token.partition(",")
        problem = None
        if "\t" in token:
            problem = "has a second TAB inside its items; only the first TAB follows the name"
        elif token == "":
            problem = "has an empty item (':' twice in a row, or a ':' right after the TAB)"
        elif scores and not comma:
            problem = f"has the item {token!r} without a score; each item must be 'item,score'"
        elif not item:
            problem = f"has an item with an empty label ({token!r})"
        elif scores and not _NUMBER_ONLY.fullmatch(number):
            problem = f"has the score {number!r} (in {token!r}), which is not a number"
        elif comma and not _NUMBER_ONLY.fullmatch(number):
            problem = (f"has the value {number!r} (in {token!r}), which is not a number; at most "
                       "one ',value' per item")
        elif scores and _rises(float(number), best):
            problem = (f"has the score {number} (in {token!r}) above the score {best_text} "
                       "before it, but recommendations come best first; check that -r names "
                       "recommendations (as predict -s writes them), not DSSTNE text, and that "
                       "-r and -t are not swapped")
        if problem:
            break
        if scores and float(number) < best:
            best, best_text = float(number), number
        column += len(token) + 1
    fmt = _REC_FORMAT if scores else _TEXT_FORMAT
    if problem:
        return DataFormatError(path, f"{_quote(line)} {problem}. {fmt}.", line=line_no,
                               column=column)
    return DataFormatError(path, f"{_quote(line)} is malformed. {fmt}.", line=line_no)


# --- the byte scanner -------------------------------------------------------------------------

_OK, _BAD = 0, 1
_NUL, _TAB, _LF, _CR, _COLON, _COMMA = 0, 9, 10, 13, 58, 44


@njit(cache=True)
def _rises(score, best):
    """Whether ``score`` is above ``best`` (the lowest before it on its line) by more than
    reading error; NaN rises above nothing."""
    return score > best and score - best > _RISE * abs(best)


@njit(cache=True)
def _number(buf, p):
    """(The end of the decimal number (or nan/inf) starting at ``p``, or -1 if there is none;
    its value, as 19 significant digits times a power of ten: within 1e-15 or so of float()
    (bar the largest doubles, within 1e-16 of overflowing, read as inf), enough to order
    scores.)"""
    sign = 1.0
    if buf[p] == 43 or buf[p] == 45:  # + -
        sign = -1.0 if buf[p] == 45 else 1.0
        p += 1
    digits = 0
    value = 0.0
    scale = 0
    kept = 0  # significant digits in value: past 19 the rest only move the point
    while 48 <= buf[p] <= 57:
        if kept < 19:
            value = value * 10.0 + (buf[p] - 48)
            kept += 1 if value > 0 else 0
        else:
            scale += 1
        p += 1
        digits += 1
    if buf[p] == 46:  # .
        p += 1
        while 48 <= buf[p] <= 57:
            if kept < 19:
                value = value * 10.0 + (buf[p] - 48)
                kept += 1 if value > 0 else 0
                scale -= 1
            p += 1
            digits += 1
    if digits == 0:
        for word in ("infinity", "inf", "nan"):
            ok = True
            for j in range(len(word)):
                if buf[p + j] | 32 != ord(word[j]):  # ASCII lower case
                    ok = False
                    break
            if ok:
                return p + len(word), sign * (np.nan if word == "nan" else np.inf)
        return -1, 0.0
    if buf[p] == 101 or buf[p] == 69:  # e E
        p += 1
        negative = buf[p] == 45
        if buf[p] == 43 or buf[p] == 45:
            p += 1
        if not 48 <= buf[p] <= 57:
            return -1, 0.0
        exponent = 0
        while 48 <= buf[p] <= 57:
            exponent = min(exponent * 10 + (buf[p] - 48), 100_000)  # (1e400 is inf anyway)
            p += 1
        scale += -exponent if negative else exponent
    if value == 0.0:
        return p, sign * 0.0
    if scale >= -300:
        return p, sign * value * 10.0 ** scale
    # (in two steps: 10.0 ** -310 alone is 0, 1e-310 is not)
    return p, sign * value * 10.0 ** (scale + 300) * 1e-300


@njit(cache=True)
def _scan_lines(buf, keep, scores, out, totals):
    """Check every line of ``buf`` (which ends with LF) and copy its labels to ``out``.

    A line is NAME (no CR or NUL) TAB, then items separated by ':' with an optional ':' after
    the last one; an item is a label (no TAB, CR, NUL, ',' or ':') followed by ',number'
    (required with ``scores``, and then never rising along the line; optional otherwise). ``out``
    receives, per line, ``NAME<TAB>item:item...<LF>`` with the first ``keep`` item labels (all
    when ``keep`` < 0) and ``totals`` the line's number of items. Returns (_OK, len(buf),
    bytes of ``out`` used) or (_BAD, a byte of the first bad line, 0).
    """
    n = len(buf)
    pos = 0
    line = 0
    o = 0
    while pos < n:
        start = pos
        p = pos
        while buf[p] != _TAB and buf[p] != _LF and buf[p] != _CR and buf[p] != _NUL:
            p += 1
        if buf[p] != _TAB or p == start:
            return _BAD, start, 0
        for j in range(start, p + 1):
            out[o] = buf[j]
            o += 1
        p += 1
        count = 0
        best = np.inf
        while buf[p] != _LF:
            s = p
            while (buf[p] != _TAB and buf[p] != _LF and buf[p] != _CR and buf[p] != _COMMA
                   and buf[p] != _COLON and buf[p] != _NUL):
                p += 1
            if p == s or buf[p] == _TAB or buf[p] == _CR or buf[p] == _NUL:
                return _BAD, start, 0
            e = p
            if buf[p] == _COMMA:
                p, number = _number(buf, p + 1)
                if p < 0 or (buf[p] != _COLON and buf[p] != _LF):
                    return _BAD, start, 0
                if scores:  # best first: a score above one before it is a wrong file
                    if _rises(number, best):
                        return _BAD, start, 0
                    best = min(best, number) if number == number else best
            elif scores:
                return _BAD, start, 0
            if keep < 0 or count < keep:
                if count > 0:
                    out[o] = _COLON
                    o += 1
                for j in range(s, e):
                    out[o] = buf[j]
                    o += 1
            count += 1
            if buf[p] == _COLON:
                p += 1
        out[o] = _LF
        o += 1
        totals[line] = count
        line += 1
        pos = p + 1
    return _OK, n, o
