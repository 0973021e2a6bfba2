#!/usr/bin/env python3
"""Print a short summary of DSSTNE dataset NetCDF files (a readable stand-in for ncdump).

Example:
  python scripts/describe_dataset.py gl_input.nc gl_output.nc
"""

from __future__ import annotations

# Before the imports below (up to a second, numba): Ctrl-C's default action while they load,
# as the installed commands have it. Only when run: tests load the scripts as modules.
if __name__ == "__main__":
    from destiny.cli.entry import default_ctrl_c_while_loading

    default_ctrl_c_while_loading()

import click  # noqa: E402

from destiny.cli.common import library_errors, run_program  # noqa: E402
from destiny.io.dataset import dataset_names, read_dataset  # noqa: E402
from destiny.io.netcdf_names import check_netcdf_names  # noqa: E402


def describe(path: str) -> str:
    lines = []
    for name in dataset_names(path):
        ds = read_dataset(path, name)
        kind = "indicator" if ds.indicator else "analog"
        if ds.ignore_zero:
            kind += ", SparseIgnoreZero"
        density = ds.nnz / (ds.rows * ds.width)
        lines.append(f"{path}: dataset {name!r} ({kind}), {ds.rows:,} samples x width "
                     f"{ds.width:,}, {ds.nnz:,} entries (density {density:.4f})")
        for r in range(min(2, ds.rows)):
            row = ds.indices[ds.indptr[r]:ds.indptr[r + 1]].tolist()
            shown = ", ".join(map(str, row[:8])) + (", ..." if len(row) > 8 else "")
            lines.append(f"    row {r}: {len(row)} features [{shown}]")
    return "\n".join(lines)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("datasets", nargs=-1, required=True, metavar="FILE.nc...")
@library_errors
def main(datasets):
    """Print each dataset of the NetCDF files: kind, samples, width, entries, first rows."""
    check_netcdf_names(inputs=[(path, "dataset file") for path in datasets])
    click.echo("\n".join(describe(path) for path in datasets))


if __name__ == "__main__":
    run_program(main, "describe_dataset.py")
