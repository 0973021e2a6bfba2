#!/usr/bin/env python3
"""Split DSSTNE text into a training part and a held-out part, per sample.

For every line ``NAME<TAB>feat:feat...``, a seeded random fraction of the features goes to the
held-out file and the rest to the training file (samples with fewer than 2 features keep them
all). Train on the first, `predict` with it as the filter, and `evaluate` against the second.

Both outputs are written beside their targets and renamed into place only when the whole
input split, so a failed run leaves no partial file. Bad input (a line without a TAB, CRLF
line ends, bytes that are not UTF-8, a NUL byte, a value that is not a number: whatever
generate-netcdf would refuse in the parts; an output that is the input, ...): a message on stderr
starting with 'Error: ' that names the file and line, and exit code 1; so too a full disk.
Stopped (Ctrl-C, SIGTERM), it removes its temporary files, as the commands do.

Example:
  python scripts/split_holdout.py ratings.txt --train train.txt --heldout heldout.txt --fraction 0.2
"""

from __future__ import annotations

# Before the imports below (up to a second, numba): Ctrl-C's default action while they load,
# as the installed commands have it. Only when run: tests load the scripts as modules.
if __name__ == "__main__":
    from destiny.cli.entry import default_ctrl_c_while_loading

    default_ctrl_c_while_loading()

import os  # noqa: E402
import re  # noqa: E402

import click  # noqa: E402
import numpy as np  # noqa: E402

from destiny.cli.common import library_errors, run_program  # noqa: E402
from destiny.cli.options import SEED, FiniteRange, path_given, stdin_for_dash  # noqa: E402
from destiny.errors import DataFormatError, open_files_failure  # noqa: E402
from destiny.holdout import held_out_count  # noqa: E402
from destiny.io.text import bom_line_error, ratings_hint, record_line_error  # noqa: E402
from destiny.io.textscan import BOM, check_text_start  # noqa: E402
from destiny.io.atomic import atomic_outputs, check_outputs, exclusive_all  # noqa: E402
from destiny.io.ratings import DECIMAL  # noqa: E402
from destiny.wording import counted  # noqa: E402

_FIX_FORMAT = "Each line must be 'NAME<TAB>feature[,value]:feature[,value]...'"
# Features that generate-netcdf reads, surely: a name without ',', ':' or NUL, and an optional
# decimal value. A line whose features are not all such (a NUL, ',5', '10,1,2', '10,abc'), or
# whose values might be beyond float32's range (an exponent, 39 digits), is left to its scanner.
_FEATURE = rf"[^,:\0]+(?:,(?:{DECIMAL})?)?"
_PLAIN_FEATURES = re.compile(rf"{_FEATURE}(?::{_FEATURE})*")
_EXPONENT = re.compile(r",[^:]*[eE]")
_ZEROS = bytes.maketrans(b"123456789", b"000000000")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("text", type=click.Path(), callback=stdin_for_dash)
@click.option("--train", "train_path", required=True, metavar="FILE", callback=path_given,
              help="Training part to write (DSSTNE text).")
@click.option("--heldout", "heldout_path", required=True, metavar="FILE", callback=path_given,
              help="Held-out part to write (DSSTNE text; samples with none held out are "
                   "left out).")
@click.option("--fraction", type=FiniteRange(0.0, 1.0, max_open=True), default=0.2,
              show_default=True,
              help="Share of each sample's features held out, rounded; each sample keeps at "
                   "least one for training.")
@click.option("--seed", type=SEED, default=1, show_default=True,
              help="Seed of the draw: the same seed, the same split.")
@library_errors
def main(text, train_path, heldout_path, fraction, seed):
    """Hold out a fraction of each sample's features of the DSSTNE text file TEXT ('-':
    stdin)."""
    outputs = [(train_path, "training part (--train)"), (heldout_path, "held-out part (--heldout)")]
    check_outputs(outputs, [(text, "input text")])
    # Locked as the commands' outputs are: two overlapping runs (cron) would each put a pair
    # in place, one's training part beside the other's held-out part, which may overlap it.
    with exclusive_all(outputs), atomic_outputs() as out, out.open(train_path) as train, \
            out.open(heldout_path) as heldout:  # (each names its own failure: a full disk)
        kept, held = split_text(text, train, heldout, fraction, seed)
    click.echo(f"split_holdout: {counted(kept, 'feature')} to {train_path}, {held:,} to "
               f"{heldout_path}", err=True)


def split_text(path, train, heldout, fraction: float, seed: int) -> tuple[int, int]:
    """Write each sample of ``path`` to ``train`` and ``heldout``; (features kept, held out)."""
    rng = np.random.default_rng(seed)
    kept = held = 0
    try:
        src = open(path, "rb")  # lines end at LF only: a CR stays in the line and is reported
    except OSError as e:
        raise open_files_failure(e, path) or DataFormatError(
            path, f"the input text cannot be read ({e.strerror or e}); check the path and its "
            "permissions.") from None
    line_no = 0
    with src:
        try:
            check_text_start(path, src.peek(8)[:8])  # (a NetCDF file, a byte-order mark)
            for line_no, raw in enumerate(src, 1):
                name, tokens = _parse(path, raw, line_no)
                n_out = held_out_count(len(tokens), fraction)
                chosen = set(rng.choice(len(tokens), size=n_out, replace=False).tolist())
                train.write(name + "\t" + ":".join(t for i, t in enumerate(tokens)
                                                   if i not in chosen) + "\n")
                if chosen:
                    heldout.write(name + "\t" + ":".join(t for i, t in enumerate(tokens)
                                                         if i in chosen) + "\n")
                kept += len(tokens) - n_out
                held += n_out
        except OSError as e:  # the outputs name their own failures; a read's names no file
            if e.filename is not None or e.strerror is None:
                raise
            raise OSError(e.errno, e.strerror, os.fspath(path)) from None
    if line_no == 0:
        raise DataFormatError(path, f"the file is empty; expected samples. {_FIX_FORMAT}; check "
                              "that the right file was given.", line=1)
    return kept, held


def _parse(path, raw: bytes, line_no: int) -> tuple[str, list[str]]:
    """(name, features) of one line, or the error generate-netcdf would give it later."""
    if raw.startswith(BOM):  # (the file's start is checked as it is opened: one joined on)
        raise bom_line_error(path, raw, 0, line_no)
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataFormatError(path, f"byte 0x{raw[e.start]:02x} is not valid UTF-8; Destiny "
                              "reads text as UTF-8. Convert the file first (for example with "
                              "`iconv -f latin1 -t utf-8`).", line=line_no,
                              column=e.start + 1) from None
    line = line.removesuffix("\n")
    quote = "the line " + repr(line if len(line) <= 80 else line[:77] + "...")
    name, tab, rest = line.partition("\t")
    problem = None
    if "\r" in line:
        problem = (f"{quote} contains a carriage return (Windows CRLF line ends). Convert the "
                   "file with `dos2unix` or `sed -i 's/\\r$//'`.")
    elif not line:
        problem = "the line is blank. Remove blank lines (for example with `grep -v '^$'`)."
    elif not tab:
        problem = (f"{quote} has no TAB between the sample name and its features. "
                   f"{_FIX_FORMAT}; check the separator (spaces are not a TAB)."
                   + ratings_hint(line))
    elif not name:
        problem = f"{quote} starts with a TAB: the sample name is empty. {_FIX_FORMAT}."
    elif "\t" in rest:
        problem = (f"{quote} has a second TAB inside its features. {_FIX_FORMAT}: only the "
                   "first TAB separates the name; features are separated by ':'."
                   + ratings_hint(line))
    tokens = rest.split(":") if rest else []
    if problem is None and "" in tokens:
        problem = (f"{quote} has an empty feature ('::', or ':' at the start or end of the "
                   f"features). {_FIX_FORMAT}: features are separated by single ':'.")
    if problem is not None:
        raise DataFormatError(path, problem, line=line_no)
    if ("\0" in name or not _PLAIN_FEATURES.fullmatch(rest)
            or (b"e" in raw or b"E" in raw) and _EXPONENT.search(rest)
            or b"0" * 39 in raw.translate(_ZEROS)):
        if (error := record_line_error(path, raw, line_no)) is not None:
            raise error  # (generate-netcdf's, naming this file's line, not the output's)
    return name, tokens


if __name__ == "__main__":
    run_program(main, "split_holdout.py")
