"""``evaluate``: score a recommendation file (predict output) against held-out interactions."""

from __future__ import annotations

import contextlib
import json
import os

import click

from destiny.cli.common import library_errors, note, run_program
from destiny.cli.options import CONTEXT, path_given, stdin_for_dash
from destiny.wording import counted

NAME = "evaluate"


@click.command(NAME, context_settings=CONTEXT)
@click.option("-r", "--recommendations", "recs_path", required=True, metavar="RECS.txt",
              callback=stdin_for_dash,
              help="Recommendations as predict writes them (-s): "
                   "NAME<TAB>item,score:item,score:...: with items best first; '-' reads stdin.")
@click.option("-t", "--held-out", "held_out_path", required=True, metavar="HELD.txt",
              callback=stdin_for_dash,
              help="Held-out interactions in DSSTNE text: NAME<TAB>item[,value]:... "
                   "(values ignored; '-' reads stdin).")
@click.option("-k", "--k", "k", type=click.IntRange(min=1), default=10, show_default=True,
              help="Score the first k recommendations of every user.")
@click.option("--popularity", "train_path", metavar="TRAIN.txt", callback=stdin_for_dash,
              help="Also score a popularity baseline built from this training file (DSSTNE "
                   "text): every user gets the k items listed by most users that their own "
                   "training line does not list.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object instead of the table.")
@click.option("--json-out", metavar="FILE", callback=path_given,
              help="Also write the JSON object to FILE (replaced atomically).")
@click.option("-q", "--quiet", is_flag=True, help="No notes on stderr.")
@library_errors
def evaluate(recs_path, held_out_path, k, train_path, as_json, json_out, quiet):
    """Score recommendations against held-out items: precision, recall, NDCG and MAP at k.

    Samples and items are matched by label. Metrics are averaged over the held-out users
    with at least one item; held-out users without a recommendation line count as empty
    lists (all misses). Recall and NDCG are normalised by min(k, held-out items), so a
    perfect list scores 1 (DSSTNE's encoder did not truncate its ideal DCG at k).

    \b
    Example:
      evaluate -r recs -t heldout.txt -k 10 --popularity train.txt
    """
    from destiny.evaluate import evaluate as run
    from destiny.io.atomic import check_outputs, exclusive, is_stream, text_output

    _check_one_stdin(recs_path, held_out_path, train_path)
    _check_not_the_same(recs_path, held_out_path, train_path)
    with contextlib.ExitStack() as held:  # the output's lock, held to the end
        if json_out is not None and not is_stream(json_out):  # (/dev/stdout, a pipe: in place)
            what = "JSON output (--json-out)"
            check_outputs([(json_out, what)], inputs=(
                (recs_path, "recommendations (-r)"), (held_out_path, "held-out items (-t)"),
                (train_path, "training text (--popularity)")))
            held.enter_context(exclusive(json_out, what))  # (overlapping cron runs, as predict)
        result = run(recs_path, held_out_path, k, popularity_train=train_path)
        payload = json.dumps(result.as_dict())
        if json_out is not None:
            with text_output(json_out) as f:
                f.write(payload + "\n")
    if not quiet:
        _notes(result, recs_path, held_out_path, k, train_path)
    # (through text_output, so that a failure to write it, a full disk, names standard output)
    with text_output("-") as out:
        out.write((payload if as_json else _table(result)) + "\n")


def _check_one_stdin(recs_path, held_out_path, train_path) -> None:
    """Standard input can be read once: two files given as '-' would find it drained."""
    flags = [flag for flag, path in (("-r", recs_path), ("-t", held_out_path),
                                     ("--popularity", train_path)) if path == "/dev/stdin"]
    if len(flags) > 1:
        raise click.UsageError(f"{' and '.join(flags)} are both '-', but standard input can "
                               "be read only once; write all but one of them to a file.")


# --popularity's file given as another (the one a user meant to compare is the training part)
_POPULARITY_WANTS = ("--popularity wants the training interactions, DSSTNE text of the items "
                     "the model was trained on (scripts/split_holdout.py's --train), not")


def _check_not_the_same(recs_path, held_out_path, train_path=None) -> None:
    """The recommendations given as the held-out file as well (`-r recs -t recs`) parse as
    DSSTNE text, their scores as values, and score 1.0 everywhere without a word; the
    held-out file given as --popularity's training file leaves each user's held-out items
    out of their baseline list (as items they have), which scores 0.0 everywhere, and the
    recommendations given so rank the items recommended most: baselines of nothing. Refused
    as every command refuses paths that are one file (``atomic.check_distinct``: an output
    over an input), exit status 1: the file system tells, through links, not the flags."""
    from destiny.errors import DestinyError

    pairs = (
        ("-r", recs_path, "-t", held_out_path,
         "-t wants the held-out interactions, DSSTNE text of the items hidden from training "
         "(scripts/split_holdout.py's --heldout), not predict's recommendations, which scored "
         "against themselves score 1.0 everywhere. Give the held-out file with -t."),
        ("-t", held_out_path, "--popularity", train_path,
         f"{_POPULARITY_WANTS} the held-out ones, which the baseline would leave out of each "
         "user's list as items the user has already, scoring 0.0 everywhere. Give the "
         "training file with --popularity."),
        ("-r", recs_path, "--popularity", train_path,
         f"{_POPULARITY_WANTS} predict's recommendations, which would make the baseline the "
         "items recommended most, leaving out of each user's list those recommended to them. "
         "Give the training file with --popularity."))
    for flag, path, other_flag, other, why in pairs:
        if path is None or other is None or "/dev/stdin" in (path, other):  # ('-': one only,
            continue  # _check_one_stdin's)
        try:
            same = (os.path.isfile(path) and os.path.isfile(other)
                    and os.path.samefile(path, other))
        except OSError:  # (gone since: the readers say so, naming the file)
            continue
        if same:
            raise DestinyError(f"{flag} and {other_flag} name the same file ({path}): {why}")


# A held-out item at every rank for every user is no model's score: below this many users it
# may still be chance (a hand-made test file), above it the files are suspect.
_PERFECT_USERS = 10


def _notes(result, recs_path, held_out_path, k: int, train_path=None) -> None:
    model = result.model
    note(NAME, f"scored {counted(model.metrics.users, 'held-out user')} at k={k}")
    if result.not_in_held_out:
        note(NAME, f"skipped {counted(result.not_in_held_out, 'sample')} of {recs_path} that "
                   f"{'is' if result.not_in_held_out == 1 else 'are'} not in {held_out_path}")
    if result.empty_held_out:
        note(NAME, f"skipped {counted(result.empty_held_out, 'line')} of {held_out_path} without "
                   "items")
    if model.missing_recommendations:
        one = model.missing_recommendations == 1
        note(NAME, f"{counted(model.missing_recommendations, 'held-out user')} "
                   f"{'has' if one else 'have'} no line in {recs_path}; "
                   f"{'it counts as an empty list' if one else 'they count as empty lists'} "
                   "(all misses)")
        if model.missing_recommendations == model.metrics.users:
            note(NAME, "no held-out user has a recommendation line: do both files use the same "
                       "sample labels?")
    if (model.metrics.users and model.metrics.precision == 0.0
            and model.missing_recommendations < model.metrics.users):
        # (a pipeline that trained and filtered on all the data, held-out items included:
        # predict's -f then removes every held-out item from the lists)
        note(NAME, f"no recommendation in {recs_path} is a held-out item: if predict's -f "
                   "file or the training data listed the held-out items, they were filtered "
                   "out; train and filter with the training part alone (split_holdout.py's "
                   "--train)")
    # Recall and NDCG, not precision: with -k above predict's the lists are short of k, and
    # precision is below 1 for the same mistake.
    if (model.metrics.users >= _PERFECT_USERS and model.metrics.recall == 1.0
            and model.metrics.ndcg == 1.0):
        note(NAME, f"all {counted(model.metrics.users, 'held-out user')} score a recall and "
                   f"NDCG of 1.0: each one's held-out items, up to k={k} of them, are the first "
                   "of their recommendations. A perfect score usually "
                   f"means that -t's {held_out_path} is the recommendations themselves (-t "
                   "wants the held-out items, as scripts/split_holdout.py's --heldout writes "
                   "them), or that the held-out items were not held out of training")
    popularity = result.popularity
    if (popularity is not None and popularity.metrics.users >= _PERFECT_USERS
            and popularity.metrics.precision == 0.0 and "/dev/stdin" not in (
                train_path, held_out_path)):
        # (the same file as -t is refused, _check_not_the_same; a copy of it is not. A real
        # training part may score 0.0 too, where the held-out items are new: read again, the
        # files tell)
        from destiny.evaluate import held_out_listed

        found, total = held_out_listed(train_path, held_out_path)
        if 2 * found >= total > 0:
            note(NAME, f"the popularity baseline recommends no held-out item to any of the "
                       f"{counted(popularity.metrics.users, 'held-out user')}: --popularity's "
                       f"{train_path} lists {found:,} of the {counted(total, 'held-out item')} "
                       "under their users (a copy of -t's file, or all the data), and each "
                       "user's items are left out of their list, as items they have; "
                       "--popularity wants the training part alone (scripts/split_holdout.py's "
                       "--train)")
    if result.longest_list < k:
        longest = counted(result.longest_list, "item")
        note(NAME, f"the longest recommendation list has {longest}, fewer than k={k}: the "
                   "missing ranks count as misses (run predict with a larger -k)")


def _table(result) -> str:
    """The rankings' rows under a header. Each column keeps its usual width and grows to fit
    its header and values with a space before each: a k of many digits ran the headers
    together (precision@99999999999999recall@...)."""
    k = result.model.metrics.k
    rows = [(name, (f"{s.metrics.precision:.4f}", f"{s.metrics.recall:.4f}",
                    f"{s.metrics.ndcg:.4f}", f"{s.metrics.map:.4f}", f"{s.metrics.users:,}",
                    f"{s.metrics.skipped:,}", f"{s.missing_recommendations:,}"))
            for name, s in (("model", result.model), ("popularity", result.popularity))
            if s is not None]
    lines = [("ranking", (f"precision@{k}", f"recall@{k}", f"ndcg@{k}", f"map@{k}", "users",
                          "skipped", "no recs")), *rows]
    first = max(12, *(len(name) + 1 for name, _ in lines))  # (left-aligned: its own space)
    # (the first right-aligned column has the names' padding before it: precision@1000 fills
    # its 14 characters, as it always did)
    widths = [max(usual, *(len(cells[i]) + (i > 0) for _, cells in lines))
              for i, usual in enumerate((14, 12, 11, 10, 10, 9, 9))]
    return "\n".join(f"{name:<{first}}" + "".join(f"{cell:>{width}}" for cell, width in
                                                   zip(cells, widths, strict=True))
                     for name, cells in lines)


def main():
    return run_program(evaluate, NAME)
