"""``generate-netcdf``: DSSTNE text to a dataset NetCDF file (DSSTNE's generateNetCDF)."""

from __future__ import annotations

import os
import time

import click

from destiny.cli.common import library_errors, note, progress_bar, run_program
from destiny.cli.options import CONTEXT, no_stdin, no_stdout, stdin_for_dash
from destiny.wording import counted

NAME = "generate-netcdf"


@click.command(NAME, context_settings=CONTEXT)
@click.option("-i", "--input", "input_path", required=True, metavar="PATH",
              callback=stdin_for_dash,
              help="DSSTNE text (NAME<TAB>feat[,value]:...), or a directory of such files, "
                   "read in sorted name order; '-' reads stdin.")
@click.option("-o", "--output", required=True, metavar="FILE.nc",
              callback=no_stdout("the dataset file"),
              help="The dataset NetCDF file to write (replaced if it exists).")
@click.option("-d", "--dataset", "dataset_name", required=True, metavar="NAME",
              help="Dataset name; must equal the DataSet of the layer that reads it.")
@click.option("-f", "--features", "feature_index", required=True, metavar="FILE",
              callback=no_stdin("the feature index", "it is read (unless -c) and, with -c or "
                                "-m, replaced by a new file renamed over it"),
              help="Feature index file (label<TAB>index): read, and written with -c or -m.")
@click.option("-s", "--samples", "sample_index", required=True, metavar="FILE",
              callback=no_stdin("the sample index", "it is read where it exists and, when new "
                                "samples appear, replaced by a new file renamed over it"),
              help="Sample index file: read if it exists, written when new samples appear.")
@click.option("-c", "--create", is_flag=True,
              help="Create a fresh feature index from this input (ignores an existing -f).")
@click.option("-m", "--merge", is_flag=True,
              help="Merge: keep the existing feature index and append new features to it.")
@click.option("-t", "--type", "data_type", type=click.Choice(["indicator", "analog"]),
              default="indicator", show_default=True,
              help="indicator: every listed feature is 1 (values checked, then ignored); "
                   "analog: keep each value (0.0 where a feature has none).")
@click.option("--strict", is_flag=True,
              help="Make features missing from a reused index an error instead of dropping them.")
@click.option("-q", "--quiet", is_flag=True,
              help="No summary or progress on stderr (features dropped as unknown are still "
                   "reported).")
@library_errors
def generate_netcdf(input_path, output, dataset_name, feature_index, sample_index, create, merge,
                    data_type, strict, quiet):
    """Convert DSSTNE text records into a dataset NetCDF file, as DSSTNE's generateNetCDF.

    Features and samples are numbered in order of first appearance. Without -c or -m the
    feature index must exist; features it does not list are dropped and counted on stderr.
    Outputs appear only when everything succeeded (written to temporary files, then renamed).

    \b
    Example:
      generate-netcdf -d gl_input -i ml-20m_ratings -o gl_input.nc \\
          -f features_input -s samples_input -c
    """
    from destiny.generate import generate_netcdf as run
    from destiny.io.text import input_files

    if create and merge:
        raise click.UsageError("-c (create a new feature index) and -m (merge into the existing "
                               "one) contradict each other; give one of them.")

    waited = False

    def waiting(line):
        nonlocal waited
        waited = True
        if not quiet:
            note(NAME, line)

    def progress(n):
        nonlocal waited
        if waited:  # the bar's clock ran while another run held the lock: its rate starts now
            bar.reset(total)
            waited = False
        bar.update(n)

    started = time.perf_counter()
    total = sum(os.path.getsize(p) for p in input_files(input_path))
    with progress_bar(total, NAME) as bar:
        bar.disable = bar.disable or quiet
        report = run(input_path=input_path, output=output, dataset_name=dataset_name,
                     feature_index=feature_index, sample_index=sample_index, create=create,
                     merge=merge, analog=data_type == "analog", strict=strict,
                     progress=progress, on_wait=waiting)
    if report.dropped:
        are = "is" if report.dropped == 1 else "are"
        note(NAME, f"dropped {counted(report.dropped, 'feature')} that {are} not in "
                   f"{feature_index}, from {counted(report.lines_with_drops, 'line')} (DSSTNE "
                   "drops them silently; -m adds them to the index, --strict makes them an error)")
    if quiet:
        return
    for message in report.notes:
        note(NAME, message)
    note(NAME, f"wrote {', '.join(report.written)}: {counted(report.samples, 'sample')}, "
               f"{counted(report.entries, 'entry', 'entries')}, width {report.width:,} "
               f"({counted(report.features, 'feature')}, {report.new_features:,} new; "
               f"{counted(report.new_samples, 'new sample')}) in "
               f"{time.perf_counter() - started - report.waited:.1f} s"
               + (f", after {report.waited:.1f} s waiting for another run"
                  if report.waited >= 0.05 else ""))  # (shown as 0.0 s below that)


def main():
    return run_program(generate_netcdf, NAME)
