#!/usr/bin/env python3
"""Convert MovieLens ratings to DSSTNE text (replaces DSSTNE's convert_ratings.awk).

    python scripts/convert_ratings.py ml-20m/ratings.csv -o ml-20m_ratings
    python scripts/convert_ratings.py ml-100k/u.data --value rating --min-rating 4 > out.txt

Reads ratings.csv, u.data or ratings.dat (detected from the first line unless --format is
given) and writes one line per user, 'USER<TAB>item,value:item,value...'. A file output is
written beside the target and renamed into place at the end, so a failed run never leaves a
partial file. Bad input: a message on stderr starting with 'Error: ' and exit code 1. A reader
that leaves stdout's pipe early (| head) stops it as it would cat (SIGPIPE, status 141).
"""

from __future__ import annotations

# Before the imports below (up to a second, numba): Ctrl-C's default action while they load,
# as the installed commands have it. Only when run: tests load the scripts as modules.
if __name__ == "__main__":
    from destiny.cli.entry import default_ctrl_c_while_loading

    default_ctrl_c_while_loading()

import contextlib  # noqa: E402

import click  # noqa: E402

from destiny.cli.common import library_errors, run_program  # noqa: E402
from destiny.cli.options import FiniteRange, path_given, stdin_for_dash  # noqa: E402
from destiny.io.atomic import check_outputs, exclusive, is_stream, text_output  # noqa: E402
from destiny.io.ratings import FORMATS, VALUES, convert_ratings  # noqa: E402
from destiny.wording import counted  # noqa: E402

OUTPUT = "converted ratings file (-o)"  # (what every message calls the output)


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.argument("ratings", type=click.Path(), callback=stdin_for_dash)
@click.option("-o", "--output", default="-", show_default=True, callback=path_given,
              help="DSSTNE text file to write; '-' writes stdout.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True,
              help="Input layout: csv (ratings.csv), udata (u.data), dat (ratings.dat).")
@click.option("--value", type=click.Choice(VALUES), default="timestamp", show_default=True,
              help="What follows each item: its timestamp (DSSTNE's example), its rating, "
                   "or nothing.")
@click.option("--min-rating", type=FiniteRange(), default=None,
              help="Keep only ratings at least this high (e.g. 4 for 'liked').")
@library_errors
def main(ratings, output, fmt, value, min_rating):
    """Convert the MovieLens ratings file RATINGS to DSSTNE text."""
    options = {"fmt": fmt, "value": value, "min_rating": min_rating}
    with contextlib.ExitStack() as held:
        if not is_stream(output):  # (stdout, a pipe: written in place, unlocked)
            check_outputs([(output, OUTPUT)], inputs=[(ratings, "ratings file")])
            # (as the commands' outputs: an overlapping run fails at once, and the temporary
            # files of killed runs are removed)
            held.enter_context(exclusive(output, OUTPUT))
        with text_output(output) as out:
            report = convert_ratings(ratings, out, **options)
    skipped = ""
    if min_rating is not None:
        skipped = f", {report.skipped_below_min} below --min-rating left out"
    where = "stdout" if output == "-" else output
    click.echo(f"convert_ratings: {counted(report.users, 'user')}, "
               f"{counted(report.ratings, 'rating')} ({report.fmt} input{skipped}) written to "
               f"{where}", err=True)


if __name__ == "__main__":
    run_program(main, "convert_ratings.py")
