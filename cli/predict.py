"""``predict``: top-k recommendations from a trained network (DSSTNE's predict)."""

from __future__ import annotations

import contextlib
import os
import re
import sys
from typing import Iterator, TextIO

import click

from destiny.cli.common import library_errors, note, products_note, progress_bar, run_command
from destiny.cli.options import CONTEXT, no_stdin, path_given, stdin_for_dash, tf32_option
from destiny.wording import counted, quoted

NAME = "predict"
# (one process alone could read an index from standard input; -r and -f may need it, and under
# mpiexec the other processes would have none)
_INDEX = ("under mpiexec every process reads the index file, where standard input reaches one "
          "process only; '-' is for the samples (-r -) or the filter (-f -)")


# printf's flags, width and precision, then a floating-point conversion: anything else (a
# literal suffix, %d, %s, a ',' or ':') would write records that do not parse, with exit 0.
_SCORE_FORMAT = re.compile(r"[-+ #0]*(\d*)(?:\.(\d*))?[hlL]?[eEfFgG]")  # (C's 4.3lf too)
_MAX_FORMAT_DIGITS = 99  # width and precision: more is no score, and 10**9 took all memory


def _check_format(ctx, param, fmt: str) -> str:
    # A parse-time check: under mpiexec every rank then agrees on it with the other usage errors.
    m = _SCORE_FORMAT.fullmatch(fmt)
    if not m:
        raise click.BadParameter(f"{quoted(fmt)} is not a printf conversion for a number, such as "
                                 "4.3f, 6.5f or .3e (without the %)", param_hint="-p")
    if any(int(n or 0) > _MAX_FORMAT_DIGITS for n in m.groups()):
        raise click.BadParameter(f"{quoted(fmt)} asks for a width or precision above "
                                 f"{_MAX_FORMAT_DIGITS}; a score needs far fewer, such as 4.3f",
                                 param_hint="-p")
    return fmt


@click.command(NAME, context_settings=CONTEXT)
@click.option("-n", "--network", "network_path", required=True, metavar="NET.nc",
              callback=no_stdin("the network file", "a NetCDF file is read by seeking within "
                                "it, its weights mapped from the file"),
              help="Trained network file.")
@click.option("-r", "--input", "input_path", required=True, metavar="PATH",
              callback=stdin_for_dash,
              help="Samples to score, DSSTNE text (a file or a directory; '-' reads stdin).")
@click.option("-i", "--input-index", required=True, metavar="FILE",
              callback=no_stdin("the input index", _INDEX),
              help="Feature index of the network's input (from generate-netcdf).")
@click.option("-o", "--output-index", required=True, metavar="FILE",
              callback=no_stdin("the output index", _INDEX),
              help="Feature index of the network's output: maps output units to item labels.")
@click.option("-s", "--output", "output_path", required=True, metavar="FILE", callback=path_given,
              help="Recommendations file to write; '-' writes stdout.")
@click.option("-f", "--filter", "filter_path", metavar="PATH", callback=stdin_for_dash,
              help="Items to leave out per sample, DSSTNE text (e.g. the ratings already seen; "
                   "a file or a directory; '-' reads stdin).")
@click.option("--filter-mode", type=click.Choice(["remove", "multiply"]), default="remove",
              show_default=True,
              help="remove: never recommend a filtered item; multiply: DSSTNE's rule, "
                   "score *= the filter's value (0 without one).")
@click.option("-d", "--dataset", default=None, metavar="NAME",
              help="Dataset base name; the network's input layer must read NAME_input (as "
                   "in DSSTNE). Optional.")
@click.option("-k", "--k", "k", type=click.IntRange(min=1), default=100, show_default=True,
              help="Recommendations per sample (not capped at 128).")
@click.option("-b", "--batch", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Samples scored at a time (memory: batch x items scores).")
@click.option("-p", "--format", "score_format", default="4.3f", show_default=True,
              metavar="FMT", callback=_check_format,
              help="printf conversion for scores, as DSSTNE's -p.")
@click.option("-l", "--layer", metavar="LAYER", default="Output", show_default=True,
              help="Output layer to read.")
@click.option("--backend", type=click.Choice(["auto", "cpu", "gpu"]), default="auto",
              show_default=True, help="Where to score: auto takes the GPU when numba.cuda finds "
                                      "one.")
@click.option("--split-layers", is_flag=True,
              help="Under mpiexec: split every layer across the processes as train does, each "
                   "holding about 1/P of the network, for a network too large for one "
                   "process. Without it every process holds the whole network and scores its "
                   "share of the samples, with no collective per batch.")
@tf32_option
@click.option("-q", "--quiet", is_flag=True,
              help="No progress or summary on stderr (input features dropped as unknown are "
                   "still reported).")
@library_errors
def predict(network_path, input_path, input_index, output_index, output_path, filter_path,
            filter_mode, dataset, k, batch, score_format, layer, backend, split_layers, tf32,
            quiet):
    """Write the top-k items for every sample, in input order, as DSSTNE does.

    Each line is NAME<TAB>item,score:item,score:...: with scores in descending order.
    Filtered items (unless --filter-mode multiply) and items the network never saw as a
    training target are never recommended; samples whose features are all unknown still get
    a line.

    \b
    Example:
      predict -b 256 -d gl -i features_input -o features_output -k 10 -n gl.nc \\
          -f ml-20m_ratings -s recs -r ml-20m_ratings
    """
    from destiny.addrspace import map_thread_memory
    from destiny.errors import DestinyError
    from destiny.io import atomic
    from destiny.parallel import all_or_none, get_comm
    from destiny.predict import MULTIPLY_PARSES_AGAIN, Predictor, predict_file

    # (under ulimit -v: OpenBLAS's buffer and numba's threads while there is room; refused
    # later, each library ends the process itself)
    too_little_room = map_thread_memory()
    comm = get_comm()
    with contextlib.ExitStack() as held:  # the output's lock, held to the end
        with all_or_none(comm):  # under mpiexec, a failure on any rank stops them all
            if too_little_room:
                raise DestinyError(too_little_room)
            if comm.size > 1:
                _check_read_once(input_path, filter_path)
            elif filter_mode == "multiply":  # (known before anything is read)
                _check_parsed_once(input_path, filter_path, MULTIPLY_PARSES_AGAIN)
            # (stdout, a device or a pipe is written in place: nothing to check or lock)
            if not atomic.is_stream(output_path) and comm.is_root:
                atomic.check_outputs([(output_path, "recommendations file (-s)")], inputs=(
                    (network_path, "network file (-n)"), (input_index, "input index (-i)"),
                    (output_index, "output index (-o)"), (input_path, "input text (-r)"),
                    (filter_path, "filter file (-f)")))
                held.enter_context(atomic.exclusive(output_path, "recommendations file (-s)"))
            # Under mpiexec every process holds the network file open before any reads it:
            # the block's end is where they meet (_check_one_network).
            network_replaced = (held.enter_context(atomic.pinned(network_path))
                                if comm.size > 1 else None)
        with all_or_none(comm):
            predictor = Predictor(network_path, input_index, output_index, dataset=dataset,
                                  layer=layer, backend=backend, tf32=tf32,
                                  comm=comm if split_layers else None,
                                  job=comm)  # (each rank on a machine: its own GPU)
            if network_replaced is not None:
                _check_one_network(network_path, network_replaced)
            if comm.size == 1:  # (before either is read)
                why = predictor.input_parsed_again(values=filter_mode == "multiply")
                if why is not None:
                    _check_parsed_once(input_path, filter_path, why)
        if split_layers and comm.size == 1 and not quiet:
            note(NAME, "--split-layers has nothing to split without mpiexec: this one process "
                       "holds every layer")
        options = dict(k=k, filter_path=filter_path, multiply=filter_mode == "multiply",
                       batch_size=batch, score_format=score_format, comm=comm)
        # A bar of the records written, by rank 0, unless they go to the same terminal
        # (stdout None: closed, which _records_out refuses)
        to_terminal = output_path == "-" and sys.stdout is not None and sys.stdout.isatty()
        bar = held.enter_context(_Progress(quiet or not comm.is_root or to_terminal))
        with _records_out(output_path, comm) as out:
            report = predict_file(predictor, input_path, out, **options, on_start=bar.start,
                                  on_written=bar.update)
    if not comm.is_root:
        return
    if report.dropped:
        are = "is" if report.dropped == 1 else "are"
        note(NAME, f"dropped {counted(report.dropped, 'feature')} that {are} not in {input_index} "
                   f"or that no training example had, from "
                   f"{counted(report.lines_with_drops, 'line')}")
    if report.no_known_feature:
        one = report.no_known_feature == 1
        note(NAME, f"{counted(report.no_known_feature, 'sample')} {'has' if one else 'have'} no "
                   f"known feature; {'its' if one else 'their'} recommendations come from the "
                   "output biases alone (the most popular items)")
    if k > predictor.recommendable and not quiet:
        note(NAME, f"-k {k} is more than the {counted(predictor.recommendable, 'item')} the "
                   "network can recommend (the output index's items that were training "
                   "targets): each line lists all of them but those filtered out")
    if not quiet:
        where = "stdout" if output_path == "-" else output_path
        note(NAME, f"wrote {counted(report.samples, 'recommendation line')} (top {k}) to {where}"
                   + (f", {counted(report.filtered, 'filter entry', 'filter entries')} applied "
                      f"({filter_mode})"
                      if filter_path else "") + f"; backend {predictor.kernels.name}"
                   + products_note(predictor.kernels)
                   + (f", layers split over {comm.size} processes" if predictor.split
                      else f", samples shared out over {comm.size} processes" if comm.size > 1
                      else ""))


class _Progress(contextlib.AbstractContextManager):
    """The records written, as a bar on stderr (``progress_bar``) once the input is read: its
    count is known only then. Closed (cleared) before predict's notes or an error message."""

    def __init__(self, off: bool):
        self.off, self.bar = off, None

    def start(self, samples: int) -> None:
        if not self.off:
            self.bar = progress_bar(samples, NAME, unit="sample")

    def update(self, records: int) -> None:
        if self.bar is not None:
            self.bar.update(records)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()


def _check_one_network(network_path, replaced) -> None:
    """Refuse a network file replaced while the processes read it (``atomic.pinned``, taken
    by every process before any read): a ``train --force`` renaming a new network over it (a
    cron job's retraining) gave processes that read it later the new network, and those
    before it the old one, so one output held lines of two networks; a process of
    --split-layers, which reads its blocks of the weights by the path after the rest, scored
    with parts of both. One process alone reads one file whole (``read_network``)."""
    from destiny.errors import DataFormatError

    if replaced():
        raise DataFormatError(network_path, "was replaced while predict read it (by a train "
                              "writing it?), so the processes may have read parts of two "
                              "networks; nothing was predicted. Run predict again once that "
                              "run is done.")


def _check_read_once(input_path, filter_path) -> None:
    """Under mpiexec every process reads -r and -f in full: standard input or a pipe would
    be read by one process, and the others would wait for ever."""
    from destiny.errors import DestinyError
    from destiny.io import atomic

    for path, flag in ((input_path, "-r"), (filter_path, "-f")):
        if path is not None and atomic.is_stream(path):
            raise DestinyError(f"{path}: under mpiexec every process reads {flag} in full, but "
                               "standard input or a pipe can be read only once; write it to a "
                               f"file and give that with {flag}.")


def _check_parsed_once(input_path, filter_path, why: str) -> None:
    """`-r - -f -` (the same stream for both) is one read of standard input, the filter being
    the input's own parse (``Predictor.read_filter``); where the filter is parsed apart from
    it (``why``), the second read found the stream drained, and filtered nothing without a
    word (from a terminal, it waited for more). Exit status 1, not a usage error: what
    standard input is decides it, not the flags; a file (standard input redirected from one)
    is opened again, and read whole."""
    import stat

    from destiny.errors import DestinyError
    from destiny.io import atomic

    if filter_path is None or not atomic.same_file(input_path, filter_path):
        return
    try:
        mode = os.stat(input_path).st_mode
    except OSError:  # (the reader says so, naming the file)
        return
    fd = atomic.descriptor(input_path)
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
            or stat.S_ISCHR(mode) and fd is not None and os.isatty(fd)):
        return
    message = (f"{input_path}: -r and -f both read it, but standard input or a pipe can be "
               f"read only once, and the filter is parsed apart from the input here: {why}; "
               "write it to a file and give that with -r and -f.")
    raise DestinyError(message)


@contextlib.contextmanager
def _records_out(output_path: str, comm) -> Iterator[TextIO | None]:
    """Where the records go, on rank 0 only: ``atomic.text_output`` (stdout, a file renamed
    into place at the end, or a device or pipe written in place); the other MPI ranks send
    their records to rank 0, and get None."""
    from destiny.io import atomic
    from destiny.parallel import all_or_none

    with contextlib.ExitStack() as output:
        yield output.enter_context(atomic.text_output(output_path)) if comm.is_root else None
        # Once every record is written, rank 0 writes the text still buffered and puts the
        # file in place, after the other ranks are done: its failure there (a full disk; the
        # whole output of a small input is written only then) reaches them as theirs, instead
        # of stopping the job through MPI_Abort.
        with all_or_none(comm):
            output.close()


def main():
    return run_command(predict, NAME)


if __name__ == "__main__":
    sys.exit(main())
