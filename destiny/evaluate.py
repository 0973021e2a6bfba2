"""Scoring a recommendation file (``predict`` output) against held-out interactions.

The recommendation file is what DSSTNE's ``predict`` writes (spec 8.5), one line per sample::

    NAME<TAB>item,score:item,score:...:

Every item, the last one included, is followed by ':'; a line may list no item at all
(``NAME<TAB>``). Items are in rank order, best first; the scores are checked to be numbers and
otherwise ignored. The held-out file is DSSTNE text (spec 1.2), ``NAME<TAB>item[,value]:...``,
with values ignored (a trailing ':' and a line without items are tolerated).

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

import os
import re
from dataclasses import dataclass

from destiny.errors import DataFormatError
from destiny.metrics import RankingMetrics, ranking_metrics

_ITEM = r"[^\t\r,:]+"
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?i:nan|inf|infinity)"
_REC_LINE = re.compile(rf"(?:{_ITEM},(?:{_NUMBER}):)*(?:{_ITEM},(?:{_NUMBER}))?")
_TEXT_ITEM = rf"{_ITEM}(?:,(?:{_NUMBER}))?"
_TEXT_LINE = re.compile(rf"(?:{_TEXT_ITEM}(?::{_TEXT_ITEM})*:?)?")
_NUMBER_ONLY = re.compile(rf"(?:{_NUMBER})")
_LABELS = re.compile(r"([^:,]+)(?:,[^:]*)?")

_REC_FORMAT = ("Each line must be 'NAME<TAB>item,score:item,score:...:' as predict writes it "
               "(every item followed by ':'; 'NAME<TAB>' alone for no recommendation)")
_TEXT_FORMAT = "Each line must be 'NAME<TAB>item[,value]:item[,value]...' (DSSTNE text)"


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
        if self.popularity is None:
            return self.model.as_dict()
        return {"model": self.model.as_dict(), "popularity": self.popularity.as_dict()}


def evaluate(recommendations, held_out, k: int, *, popularity_train=None) -> Evaluation:
    """Score the recommendation file against the held-out file at ``k`` (see the module doc)."""
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    truth = read_held_out(held_out)
    recs, longest = read_recommendations(recommendations, keep=k)
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
    model = Scores(_replace_skipped(metrics, metrics.skipped + not_in_held_out), missing)
    baseline = None
    if popularity_train is not None:
        ranked = popularity_recommendations(popularity_train, users, k)
        baseline = Scores(ranking_metrics(ranked, truth_sets, k), 0)
    return Evaluation(model=model, popularity=baseline, held_out_users=len(users),
                      not_in_held_out=not_in_held_out, empty_held_out=empty,
                      longest_list=longest)


def _replace_skipped(m: RankingMetrics, skipped: int) -> RankingMetrics:
    return RankingMetrics(k=m.k, precision=m.precision, recall=m.recall, ndcg=m.ndcg, map=m.map,
                          users=m.users, skipped=skipped)


def read_recommendations(path, *, keep: int | None = None) -> tuple[dict[str, list[str]], int]:
    """({sample: its first ``keep`` items, best first}, the most items on one line).

    Every line is checked in full (labels, ',' and a numeric score per item) even though only
    the first ``keep`` items are kept.
    """
    recs: dict[str, list[str]] = {}
    first_line: dict[str, int] = {}
    longest = 0
    for line_no, name, rest in _lines(path, "recommendation", "-r", _REC_FORMAT):
        if not _REC_LINE.fullmatch(rest):
            raise _rec_error(path, line_no, name, rest)
        _check_new(path, name, line_no, first_line)
        tokens = rest.split(":") if keep is None else rest.split(":", keep)
        if keep is not None and len(tokens) > keep:
            tokens.pop()  # everything after the first ``keep`` items
            count = keep + rest.count(":", len(":".join(tokens)) + 1)
            if not rest.endswith(":"):
                count += 1
        else:
            if tokens[-1] == "":
                tokens.pop()
            count = len(tokens)
        longest = max(longest, count)
        recs[name] = [t[:t.index(",")] for t in tokens]
    return recs, longest


def read_held_out(path) -> dict[str, set[str]]:
    """{sample: its set of item labels} of a DSSTNE text file (values checked, then ignored)."""
    truth: dict[str, set[str]] = {}
    first_line: dict[str, int] = {}
    for line_no, name, rest in _lines(path, "held-out", "-t", _TEXT_FORMAT):
        if not _TEXT_LINE.fullmatch(rest):
            raise _text_error(path, line_no, name, rest)
        _check_new(path, name, line_no, first_line)
        if "," in rest:
            items = _LABELS.findall(rest)
        else:
            items = rest.split(":")
            if items[-1] == "":
                items.pop()
        truth[name] = set(items)
    return truth


def popularity_recommendations(train_path, users: list[str], k: int) -> list[list[str]]:
    """For each of ``users``, the ``k`` most popular items of ``train_path`` they do not have.

    Popularity is the number of lines (users) listing the item; ties go to the item that
    appears first in the file. Users absent from the training file get the overall top k.
    """
    import numpy as np

    from destiny.io.index import LabelTable
    from destiny.io.text import read_records

    _check_file(train_path, "training", "--popularity")
    features = LabelTable()
    records = read_records([os.fspath(train_path)], features, update=True, keep_values=False)
    row_of: dict[str, int] = {}
    for row, name in enumerate(records.labels):
        if name in row_of:
            raise _duplicate(train_path, name, row_of[name] + 1, row + 1)
        row_of[name] = row
    indptr, indices = records.indptr, records.indices
    n_items = len(features)
    rows = np.repeat(np.arange(len(records.labels), dtype=np.int64), np.diff(indptr))
    pairs = np.unique(rows * n_items + indices)  # an item listed twice on a line counts once
    counts = np.bincount(pairs % n_items, minlength=n_items)
    order = np.argsort(-counts, kind="stable").tolist()  # ties: first appearance
    labels = features.labels()
    top = [labels[i] for i in order[:k]]
    result = []
    for user in users:
        row = row_of.get(user)
        if row is None:
            result.append(top)
            continue
        seen = set(indices[indptr[row]:indptr[row + 1]].tolist())
        picked = []
        for i in order:
            if i not in seen:
                picked.append(labels[i])
                if len(picked) == k:
                    break
        result.append(picked)
    return result


# --- reading and error messages ---------------------------------------------------------------


def _check_file(path, what: str, flag: str) -> None:
    if not os.path.exists(path):
        raise DataFormatError(path, f"the {what} file does not exist; check the {flag} path.")
    if os.path.isdir(path):
        raise DataFormatError(path, f"is a directory; give the {what} file itself with {flag}.")


def _lines(path, what: str, flag: str, fmt: str):
    """Yield (line number, sample name, the rest) for every line, checking the common parts."""
    _check_file(path, what, flag)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise DataFormatError(path, f"cannot open the {what} file ({e.strerror}); check its "
                              "permissions.") from None
    line_no = 0
    with f:
        for line_no, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                column = len(raw[:e.start].decode("utf-8", errors="replace")) + 1
                raise DataFormatError(
                    path, f"the bytes {raw[e.start:e.end]!r} are not valid UTF-8. Destiny reads "
                    "text as UTF-8; convert the file first (for example with "
                    "`iconv -f latin1 -t utf-8`).", line=line_no, column=column) from None
            if line.endswith("\n"):
                line = line[:-1]
            if line.endswith("\r"):
                raise DataFormatError(path, "the line ends with a carriage return (Windows CRLF "
                                      "line ends); convert the file with `dos2unix` or "
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
            yield line_no, name, rest
    if line_no == 0:
        raise DataFormatError(path, f"the {what} file is empty; check the {flag} path.")


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


def _rec_error(path, line_no: int, name: str, rest: str) -> DataFormatError:
    """Find the first bad token of a recommendation line that failed the fast check."""
    line = f"{name}\t{rest}"
    column = len(name) + 2
    tokens = rest.split(":")
    for i, token in enumerate(tokens):
        last = i == len(tokens) - 1
        if token == "" and last:
            break
        item, comma, score = token.partition(",")
        problem = None
        if "\t" in token:
            problem = "has a second TAB inside its items; only the first TAB follows the name"
        elif token == "":
            problem = "has an empty item (':' twice in a row, or a ':' right after the TAB)"
        elif not comma:
            problem = f"has the item {token!r} without a score; each item must be 'item,score'"
        elif not item:
            problem = f"has an item with an empty label ({token!r})"
        elif not _NUMBER_ONLY.fullmatch(score):
            problem = f"has the score {score!r} (in {token!r}), which is not a number"
        if problem:
            return DataFormatError(path, f"{_quote(line)} {problem}. {_REC_FORMAT}.",
                                   line=line_no, column=column)
        column += len(token) + 1
    return DataFormatError(path, f"{_quote(line)} is malformed. {_REC_FORMAT}.", line=line_no)


def _text_error(path, line_no: int, name: str, rest: str) -> DataFormatError:
    """Find the first bad token of a held-out line that failed the fast check."""
    line = f"{name}\t{rest}"
    column = len(name) + 2
    tokens = rest.split(":")
    for i, token in enumerate(tokens):
        if token == "" and i == len(tokens) - 1 and i > 0:
            break
        item, comma, value = token.partition(",")
        problem = None
        if "\t" in token:
            problem = "has a second TAB inside its items; only the first TAB follows the name"
        elif token == "":
            problem = "has an empty item (':' twice in a row, or a ':' right after the TAB)"
        elif not item:
            problem = f"has an item with an empty label ({token!r})"
        elif comma and not _NUMBER_ONLY.fullmatch(value):
            problem = (f"has the value {value!r} (in {token!r}), which is not a number; at most "
                       "one ',value' per item")
        if problem:
            return DataFormatError(path, f"{_quote(line)} {problem}. {_TEXT_FORMAT}.",
                                   line=line_no, column=column)
        column += len(token) + 1
    return DataFormatError(path, f"{_quote(line)} is malformed. {_TEXT_FORMAT}.", line=line_no)
