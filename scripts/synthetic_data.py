#!/usr/bin/env python3
"""Write synthetic ratings: Zipf item popularity, users drawn from a few taste clusters.

The output is MovieLens' ratings.csv (``userId,movieId,rating,timestamp``; feed it to
scripts/convert_ratings.py) or, with ``--format dsstne``, DSSTNE text directly
(``user<TAB>item,timestamp:...``), which skips the conversion for large benchmark inputs.
The file is written beside the target and renamed into place at the end, so a failed run never
leaves a partial file; an output that cannot be written is an 'Error: ' line and exit code 1.
``-o -`` writes the text to stdout (``| head``, ``| gzip``), as ``predict -s -`` does.
The defaults have MovieLens-20M's shape: 138,493 users, 27,278 items, ~144 items per user.

Example:
  python scripts/synthetic_data.py --users 2000 --items 1000 --mean-per-user 40 -o ratings.csv
"""

from __future__ import annotations

# Before the imports below (up to a second, numba): Ctrl-C's default action while they load,
# as the installed commands have it. Only when run: tests load the scripts as modules.
if __name__ == "__main__":
    from destiny.cli.entry import default_ctrl_c_while_loading

    default_ctrl_c_while_loading()

import click  # noqa: E402

from destiny import synthetic  # noqa: E402
from destiny.cli.common import library_errors, run_program  # noqa: E402
from destiny.cli.options import SEED, FiniteRange, path_given  # noqa: E402
from destiny.io.atomic import check_outputs, is_stream, text_output  # noqa: E402
from destiny.limits import MAX_INDEX  # noqa: E402

# Ids are indices once generate-netcdf reads them (int32); and a popularity exponent beyond
# 30 makes 1 / (r + 1) ** zipf overflow or vanish for some item count within that bound.
_COUNT = {1: click.IntRange(1, MAX_INDEX), 2: click.IntRange(2, MAX_INDEX)}
MAX_ZIPF = 30.0


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-o", "--output", required=True, callback=path_given,
              help="File to write; '-' writes stdout.")
@click.option("--users", type=_COUNT[1], default=synthetic.ML20M_USERS, show_default=True)
@click.option("--items", type=_COUNT[2], default=synthetic.ML20M_ITEMS, show_default=True)
@click.option("--mean-per-user", type=FiniteRange(1.0), default=synthetic.ML20M_MEAN_PER_USER,
              show_default=True, help="Mean number of distinct items per user; at most half "
                                      "of --items.")
@click.option("--clusters", type=_COUNT[1], default=8, show_default=True,
              help="Latent taste clusters.")
@click.option("--zipf", type=FiniteRange(-MAX_ZIPF, MAX_ZIPF), default=1.0, show_default=True,
              help="Popularity exponent.")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["csv", "dsstne"]), default="csv",
              show_default=True)
@click.option("--value", type=click.Choice(["timestamp", "rating", "none"]), default=None,
              help="With --format dsstne: the value after each item [default: timestamp].")
@library_errors
def main(output, users, items, mean_per_user, clusters, zipf, seed, fmt, value):
    """Write synthetic ratings with a learnable structure."""
    if value is not None and fmt == "csv":  # (it was ignored without a word)
        raise click.UsageError("--value chooses the value of --format dsstne's items; csv "
                               "always has MovieLens' userId,movieId,rating,timestamp columns. "
                               "Add --format dsstne, or leave --value out.")
    value = value or "timestamp"
    if mean_per_user > items / 2:  # (a user's items are distinct: at most half of them)
        raise click.BadParameter(f"{mean_per_user:g} is more than half of --items {items:,} "
                                 f"({items / 2:g}); lower it or raise --items.",
                                 param_hint="'--mean-per-user'")
    if not is_stream(output):  # (stdout, a pipe or a device is written in place)
        check_outputs([(output, "ratings file (-o)")])
    r = synthetic.generate_ratings(users=users, items=items, mean_per_user=mean_per_user,
                                   clusters=clusters, zipf=zipf, seed=seed)
    with text_output(output) as f:  # (a file: written beside it, renamed into place at the end)
        if fmt == "csv":
            synthetic.write_ratings_csv(f, r)
        else:
            synthetic.write_ratings_dsstne(f, r, value=value)
    where = "standard output" if output == "-" else output
    click.echo(f"wrote {where}: {len(r):,} ratings from {users:,} users on {items:,} items",
               err=True)
    if len(r) < 0.95 * r.asked:  # (a few short users are the draw's noise; this is not)
        click.echo(f"note: {len(r) / users:.1f} items per user, where --mean-per-user asked "
                   f"for {mean_per_user:g}: with --zipf {zipf:g} the draws keep finding the "
                   "same popular items. Lower --zipf or raise --items for more.", err=True)


if __name__ == "__main__":
    run_program(main, "synthetic_data.py")
