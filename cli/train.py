"""``train``: a JSON network definition plus datasets to a trained network file (DSSTNE's train)."""

from __future__ import annotations

import os
import sys

import click

from destiny.cli.common import library_errors, note, products_note, run_command
from destiny.cli.options import (CONTEXT, SEED, Float32Range, no_stdin, no_stdout, path_given,
                                 tf32_option)
from destiny.errors import (NOTHING_REPLACED, RUN_AGAIN, RUN_AGAIN_OR_ELSEWHERE, DestinyError,
                            InterruptedAfterOutputs, OutputError, system_failure)
from destiny.train import (DEFAULT_OPTIMIZER, OPTIMIZER_SETTINGS, OPTIMIZERS, SETTING_FLAGS,
                           optimizer_settings, train_config, unused_settings)
from destiny.wording import counted, sized

NAME = "train"
_SEEKED = "a NetCDF file is read by seeking within it, and train opens it more than once"


@click.command(NAME, context_settings=CONTEXT)
@click.option("-c", "--config", "config_path", required=True, metavar="NET.json",
              callback=no_stdin("the network definition", "under mpiexec every process reads "
                                "the file itself"),
              help="Network definition (DSSTNE JSON).")
@click.option("-i", "--input", "input_path", required=True, metavar="IN.nc",
              callback=no_stdin("the input dataset", _SEEKED),
              help="Input dataset file (from generate-netcdf).")
@click.option("-o", "--output", "output_path", required=True, metavar="OUT.nc",
              callback=no_stdin("the output dataset", _SEEKED),
              help="Output (target) dataset file.")
@click.option("-n", "--network", "network_path", required=True, metavar="NET.nc",
              callback=no_stdout("the network file"),
              help="Network file to write; must not exist (see --force).")
@click.option("-b", "--batch", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Minibatch size.")
@click.option("-e", "--epochs", type=click.IntRange(min=1), default=40, show_default=True,
              help="Epochs to train (with --resume: the total, counting the checkpoint's).")
@click.option("-alpha", "--alpha", type=Float32Range(min=0.0, min_open=True), default=None,
              help="Learning rate [default: per optimizer; 0.025 for sgd, 0.01 for adam].")
@click.option("-lambda", "--lambda", "lam", type=Float32Range(min=0.0), default=None,
              help="L2 weight decay [default: 1e-4 for sgd/momentum/nesterov, else 0].")
@click.option("-lambda1", "--lambda1", "lam1", type=Float32Range(min=0.0), default=0.0,
              show_default=True,
              help="L1 weight decay.")
@click.option("-mu", "--mu", type=Float32Range(0.0, 1.0, max_open=True), default=None,
              help="Momentum, or decay of RMSProp/AdaDelta, or Adam's beta1 "
                   "[default: per optimizer].")
@click.option("-mu1", "--mu1", type=Float32Range(0.0, 1.0, max_open=True), default=None,
              help="Adam's beta2 [default: 0.999].")
@click.option("--optimizer", type=click.Choice(sorted(OPTIMIZERS)), default=DEFAULT_OPTIMIZER,
              show_default=True, help="sgd with DSSTNE's defaults reproduces DSSTNE's train.")
@click.option("--seed", type=SEED, default=12134, show_default=True,
              help="Seeds weights, shuffling, dropout and denoising (DSSTNE's fixed seed).")
@click.option("--shuffle/--no-shuffle", default=None,
              help="Shuffle examples every epoch [default: the definition's ShuffleIndices].")
@click.option("--backend", type=click.Choice(["auto", "cpu", "gpu"]), default="auto",
              show_default=True, help="Where to train: auto takes the GPU when numba.cuda finds "
                                      "one.")
@tf32_option
@click.option("--checkpoint-every", type=click.IntRange(min=0), default=10, show_default=True,
              metavar="N", help="Write NET.nc<epoch>.nc every N epochs (0: never).")
@click.option("--keep-checkpoints", type=click.IntRange(min=0), default=0, show_default=True,
              metavar="K", help="Remove this run's older checkpoints as new ones are written, "
                                "keeping the K newest (0: keep all, as DSSTNE).")
@click.option("--resume", is_flag=True,
              help="Continue from the newest checkpoint NET.nc<epoch>.nc, if there is one; "
                   "one of other data, definition or flags (but -e), or at -e already, is "
                   "refused.")
@click.option("--resume-or-restart", "restart", is_flag=True,
              help="As --resume, but train afresh, with a note, where --resume would refuse "
                   "the checkpoint: for make rules and cron jobs, which run again when their "
                   "data changes.")
@click.option("--metrics", "metrics_path", metavar="FILE", callback=path_given,
              help="Write one JSON line per epoch: epoch, loss, seconds, learning_rate, ... "
                   "(with --resume: kept up to the checkpoint's epoch, then appended).")
@click.option("--initial-network", metavar="FILE",
              callback=no_stdout("the initial network"),
              help="Also write the untrained network here (DSSTNE always wrote "
                   "initial_network.nc).")
@click.option("--force", is_flag=True,
              help="Overwrite an existing network file, and an --initial-network FILE that "
                   "is not an earlier run's untrained network.")
@click.option("-d", "ignored_d", metavar="NAME",
              help="Ignored, as in DSSTNE (accepted so that its command lines run).")
@click.option("-q", "--quiet", is_flag=True,
              help="Nothing on stderr but errors: no progress, settings, per-epoch lines, "
                   "summary or notes (but one naming checkpoints --keep-checkpoints could not "
                   "remove).")
@library_errors
def train(config_path, input_path, output_path, network_path, batch, epochs, alpha, lam, lam1,
          mu, mu1, optimizer, seed, shuffle, backend, tf32, checkpoint_every, keep_checkpoints,
          resume, restart, metrics_path, initial_network, force, ignored_d, quiet):
    """Train a network (DSSTNE JSON definition) on datasets made by generate-netcdf.

    \b
    Example:
      train -c netdefs/movielens.json -i gl_input.nc -o gl_output.nc -n gl.nc -b 256 -e 10
    """
    from destiny.addrspace import map_thread_memory
    from destiny.cli import stuck
    from destiny.fit import fit
    from destiny.io import atomic
    from destiny.io.checkpoint import checkpoint_epoch
    from destiny.parallel import ParallelError, all_or_none, get_comm

    # (under ulimit -v: OpenBLAS's buffer and numba's threads while there is room; refused
    # later, each library ends the process itself)
    too_little_room = map_thread_memory()
    comm = get_comm()  # under mpiexec: every layer split across the ranks (spec 7)
    with all_or_none(comm):
        if too_little_room:
            raise DestinyError(too_little_room)
    quiet = quiet or not comm.is_root  # rank 0 speaks for all
    cfg = train_config(optimizer, batch=batch, epochs=epochs, alpha=alpha, lam=lam, lam1=lam1,
                       mu=mu, mu1=mu1, seed=seed, shuffle=shuffle)
    if ignored_d is not None and not quiet:
        note(NAME, "-d is ignored, as in DSSTNE")
    unused = unused_settings(optimizer, {k for k, v in (("alpha", alpha), ("mu", mu),
                                                          ("mu1", mu1)) if v is not None})
    if unused and not quiet:
        reads = [SETTING_FLAGS[k] for k in OPTIMIZER_SETTINGS[optimizer]]
        note(NAME, f"{' and '.join(unused)} {'has' if len(unused) == 1 else 'have'} no effect "
                   f"with --optimizer {optimizer}, which reads only {', '.join(reads[:-1])} "
                   f"and {reads[-1]}")
    if (not quiet and (alpha is not None or mu is not None)
            and click.get_current_context().get_parameter_source("optimizer")
            == click.core.ParameterSource.DEFAULT):
        # A DSSTNE command line ported as it was: its -alpha and -mu were SGD's (spec 5.8)
        given = " and ".join(f for f, v in (("-alpha", alpha), ("-mu", mu)) if v is not None)
        note(NAME, f"{given} {'set' if ' and ' in given else 'sets'} {DEFAULT_OPTIMIZER}'s "
                   f"settings: Destiny trains with {DEFAULT_OPTIMIZER} unless --optimizer says "
                   "otherwise, where DSSTNE always trained with sgd; add --optimizer sgd for "
                   f"DSSTNE's training, or --optimizer {DEFAULT_OPTIMIZER} to keep this one "
                   "without this note")
    if keep_checkpoints and not checkpoint_every and not quiet:
        note(NAME, "--keep-checkpoints has nothing to keep: --checkpoint-every 0 writes no "
                   "checkpoints")
    flag = "--resume-or-restart" if restart else "--resume" if resume else None  # (fit's)
    progress = _Progress(cfg, quiet, comm.size, resume=resume or restart,
                         network_path=network_path,
                         checkpoints=(checkpoint_every, keep_checkpoints))

    def restarted(path, why):
        progress.resume = False  # (trains afresh, as this note says: no other note of it)
        if not quiet:
            note(NAME, f"the newest checkpoint, {path}, is {why}: --resume-or-restart trains "
                       "afresh (the files passed over stay until this run's checkpoints of "
                       "the same epochs replace them)")

    def when_stuck():  # (the watch's thread, as it ends a run stuck in a call into C)
        return _when_stuck(network_path, progress.checkpoint, atomic.put_in_place(), cfg.epochs,
                           flag)

    try:
        with stuck.advising(when_stuck):
            report = fit(config_path=config_path, input_path=input_path,
                         output_path=output_path, network_path=network_path, cfg=cfg,
                         backend=backend, tf32=tf32, checkpoint_every=checkpoint_every,
                         keep_checkpoints=keep_checkpoints, resume=resume or restart,
                         restart=restart, force=force, metrics_path=metrics_path,
                         initial_network=initial_network, on_start=progress.start,
                         on_batch=progress.batch, on_epoch=progress.epoch,
                         on_checkpoint=progress.checkpointed, on_restart=restarted, comm=comm)
    except KeyboardInterrupt as e:  # Ctrl-C: say what is kept and how to go on
        progress.close()
        # Just as files were put in place, or just after (atomic.put_in_place: the network's
        # lock being released, a checkpoint before this run heard of it), where "was not
        # written" would be false.
        paths = e.paths if isinstance(e, InterruptedAfterOutputs) else atomic.put_in_place()
        if any(atomic.same_file(p, network_path) for p in paths):
            raise click.ClickException(
                f"interrupted as {network_path} was put in place, once it was: it is complete."
                if isinstance(e, InterruptedAfterOutputs) else
                f"interrupted as the command finished, once {network_path} was put in place: "
                "it is complete.") from None
        for path in paths:  # a checkpoint: it is whole, and this run's newest
            epoch = checkpoint_epoch(network_path, path)
            if epoch is not None:
                progress.checkpointed(path, epoch)
        raise click.ClickException(_interrupted(network_path, progress.checkpoint,
                                                checkpoint_every, cfg.epochs, flag)) from None
    except ParallelError as e:  # under mpiexec: shared by the ranks
        progress.close()
        if not e.system:
            raise
        # (a full disk, as one process's message below says it) What it says of the outputs
        # is put right here, not given as kept= as below: the rank that failed worded it (for
        # its own file system's inodes, its own limit on open files: it may run on another
        # machine) and the ranks got it as text (FailureText), but only rank 0, which alone
        # writes the network file, can tell what that file is left as. Telling the failing
        # rank would take train's words down through fit, save_network, write_gathered and
        # all_or_none, worded before any failure.
        message = str(e).replace(NOTHING_REPLACED, _not_written(network_path))
        if progress.checkpoint is not None:
            go_on = _go_on(network_path, progress.checkpoint, cfg.epochs, flag)
            # Where the run's flag resumes, running the command again goes on from the
            # checkpoint: the rank's "then run the command again" (", or write the outputs
            # elsewhere", where the checkpoint is not found) becomes how, as one process says
            # it (its then=). Otherwise that starts afresh: going on from it is "instead".
            again = flag is not None and progress.checkpoint[1] < cfg.epochs
            said = next((f"then {d}." for d in (RUN_AGAIN_OR_ELSEWHERE, RUN_AGAIN)
                         if message.endswith(f"then {d}.")), None)
            if again and said:
                message = f"{message[:-len(said)]}then {go_on}."
            else:
                message += (f" To go on from this run's newest checkpoint"
                            f"{'' if again else ' instead'}, {go_on}.")
        raise click.ClickException(message) from None
    except OutputError as e:  # a checkpoint's or the network's file could not be begun or put
        progress.close()  # in place (no inode left, its directory removed meanwhile)
        if progress.checkpoint is None or os.environ.get("DESTINY_DEBUG"):
            raise
        # (as for a full disk below: its message said what to mend, not what the run leaves)
        raise click.ClickException(
            f"{e} {_not_written(network_path)}; to go on from this run's newest checkpoint, "
            f"{_go_on(network_path, progress.checkpoint, cfg.epochs, flag)}.") from None
    except (OSError, RuntimeError) as e:  # a full disk while writing a checkpoint, ...
        progress.close()
        if os.environ.get("DESTINY_DEBUG"):
            raise
        # Not "no output was replaced": the initial network, checkpoints and the metrics may
        # have been written before.
        failure = system_failure(e, kept=_not_written(network_path), **(
            {} if progress.checkpoint is None else
            {"then": _go_on(network_path, progress.checkpoint, cfg.epochs, flag)}))
        if failure is None:
            raise
        raise click.ClickException(failure) from None
    progress.close()
    if not quiet:
        resumed = f", resumed from {report.resumed_from}" if report.resumed_from else ""
        note(NAME, f"wrote {report.written} at epoch {cfg.epochs} "
                   f"({counted(report.epochs_run, 'epoch')} in this run{resumed})")
    if report.not_removed:  # (a note even with -q: they take disk space the user expects free)
        failed = "; ".join(f"{path} ({why})" for path, why in report.not_removed.items())
        note(NAME, f"--keep-checkpoints could not remove {failed}; remove them by hand")


def _interrupted(network_path, ours: tuple[str, int] | None, every: int, epochs: int,
                 flag: str | None = None) -> str:
    """What Ctrl-C leaves and how to go on: ``ours`` is this run's newest checkpoint (the
    one it resumed from or wrote last); ``flag``, the run's --resume or --resume-or-restart
    (None: neither), with which the same command run again goes on from a checkpoint."""
    from destiny.io.checkpoint import latest_checkpoint

    lost = f"interrupted; {_not_written(network_path)}."
    if ours is not None:
        return f"{lost} To go on, {_go_on(network_path, ours, epochs, flag)}."
    newest = latest_checkpoint(network_path)
    if newest is not None:  # (a run given a flag, stopped before it resumed, or passed over)
        earlier = (f"{lost} This run wrote no checkpoint yet. The newest checkpoint, "
                   f"{newest[0]} (epoch {newest[1]}), is an earlier run's: ")
        if flag is None:
            return (f"{earlier}--resume continues from it if that run had these settings and "
                    "data; otherwise run the command again to start afresh.")
        if flag == "--resume":  # (which refuses it otherwise)
            return (f"{earlier}the same command run again continues from it (its --resume) if "
                    "that run had these settings and data; otherwise run it without --resume "
                    "to start afresh.")
        return (f"{earlier}the same command run again continues from it (its {flag}) if that "
                "run had these settings and data, and starts afresh otherwise.")
    if every <= 0:
        return (f"{lost} --checkpoint-every 0 writes no checkpoints: run the command again to "
                "start afresh.")
    return (f"interrupted before the first checkpoint; {network_path} was not written. Run "
            "the command again to start afresh (--checkpoint-every sets how often checkpoints "
            "are written).")


def _when_stuck(network_path, ours: tuple[str, int] | None, put: list[str], epochs: int,
                flag: str | None = None) -> str | None:
    """How to go on, as an interrupt says it (``_interrupted``), where the run is ended stuck
    in a call into C (cli/stuck.py): from this run's newest checkpoint ``ours``, or from one
    that the latest commit put in place (``put``) before the run heard of it (the sync of its
    directory never returned); nothing before the first, nor once the network itself is in
    place (the message says each output is the old file or the complete new one). From the
    names alone, as ``checkpoint_path`` writes them: the file system may be what hangs."""
    import re

    from destiny.io.checkpoint import checkpoint_names

    network_path = os.fspath(network_path)
    names, beside = checkpoint_names(network_path), os.path.dirname(network_path)
    for path in put:
        if path == network_path:
            return None
        found = re.fullmatch(names, os.path.basename(path))
        if found is not None and os.path.dirname(path) == beside:  # (spelt as it was written)
            ours = (path, int(found.group(1)))
    return None if ours is None else f"To go on, {_go_on(network_path, ours, epochs, flag)}."


def _not_written(network_path) -> str:
    """What a run that stopped leaves of the network file (the files written before it, an
    initial network or checkpoints, stay)."""
    kept = " (the one there is left as it was)" if os.path.exists(network_path) else ""
    return f"{network_path} was not written{kept}"


def _go_on(network_path, ours: tuple[str, int], epochs: int, flag: str | None = None) -> str:
    """How to go on from this run's newest checkpoint ``ours`` (a clause): --resume takes the
    checkpoint written last, which it is, so a run given it (``flag``, or --resume-or-restart)
    goes on as the same command run again; one of the last epoch is the trained network
    already (which --resume refuses, and --resume-or-restart passes over to train afresh)."""
    path, epoch = ours
    if epoch >= epochs:
        return (f"use {path}, the checkpoint of the last epoch ({epoch}): it is the trained "
                f"network (with the optimizer's state, which predict ignores), so copy it to "
                f"{network_path}")
    if flag is not None:
        return (f"run the same command again to continue from {path} (epoch {epoch}), the "
                f"newest checkpoint, which its {flag} takes")
    return (f"run the same command with --resume to continue from {path} (epoch {epoch}), the "
            "newest checkpoint")


class _Progress:
    """A bar per epoch (examples/s, running loss) and one line per epoch, on stderr."""

    def __init__(self, cfg, quiet: bool, ranks: int, *, resume: bool, network_path,
                 checkpoints: tuple[int, int] = (0, 0)):
        self.cfg, self.quiet, self.bar, self.ranks = cfg, quiet, None, ranks
        self.resume, self.network_path = resume, network_path
        self.checkpoints = checkpoints  # (--checkpoint-every, --keep-checkpoints)
        self.examples, self.seen, self.loss = 0, 0, 0.0
        self.checkpoint = None  # this run's newest: (path, epoch)

    def checkpointed(self, path, epoch: int):
        self.checkpoint = (path, epoch)

    def start(self, net, data, state):
        self.examples = data.examples
        if self.quiet:
            return
        import numba

        if self.resume and state.epoch == 0:
            # (a mistyped -n in a cron job's --resume would otherwise retrain without a word)
            note(NAME, f"no checkpoint of {self.network_path} to resume from "
                       f"({self.network_path}<epoch>.nc): training from the start")
        where = f"{self.ranks} MPI ranks x " if self.ranks > 1 else ""
        note(NAME, f"backend {net.backend.name}{products_note(net.backend)} ({where}"
                   f"{counted(numba.get_num_threads(), 'thread')}), optimizer "
                   f"{self.cfg.optimizer} ({optimizer_settings(self.cfg)}), "
                   f"{counted(data.examples, 'example')}, batch {self.cfg.batch}, "
                   f"epochs {state.epoch + 1}..{self.cfg.epochs}")
        unused = net.netdef.unused_layers()
        if unused:
            names = ", ".join(f"{layer.name!r} ({layer.kind.name})" for layer in unused)
            note(NAME, f"no Source or Skip leads from {names} to an Output layer: "
                       f"{'they reach' if len(unused) > 1 else 'it reaches'} neither the loss "
                       "nor the predictions, and trains or reads data for nothing (check the "
                       "definition's Source and Skip entries)")
        self._check_space(net, state)
        if data.streamed:
            note(NAME, f"the training data takes {sized(data.bytes)} on the device, more than "
                       f"{sized(data.budget)} (half of the memory free there): it is copied a "
                       "chunk at a time, in each epoch's order")
        self._new_bar(state.epoch + 1)

    def _check_space(self, net, state):
        """Note a run whose checkpoints and network would not fit in the free space beside
        the network file: DSSTNE's default keeps every checkpoint, and a long run filled the
        disk, stopping at the next write (--resume goes on, once space is freed)."""
        import shutil

        from destiny.io.checkpoint import network_bytes

        every, keep = self.checkpoints
        written = self.cfg.epochs // every - state.epoch // every if every > 0 else 0
        if keep:
            written = min(written, keep)
        each, trained = network_bytes(net)
        need = written * each + trained
        try:
            free = shutil.disk_usage(os.path.dirname(os.path.abspath(self.network_path))).free
        except OSError:  # (checked writable already: a file system that cannot tell)
            return
        if need <= free:
            return
        what = (f"{counted(written, 'checkpoint')} of {sized(each)} and the network file of "
                f"{sized(trained)}, {sized(need)} in all" if written else
                f"the network file, {sized(trained)}")
        advice = ("" if written < 2 else "; a smaller --keep-checkpoints keeps fewer" if keep
                  else "; --keep-checkpoints K keeps only the K newest, --checkpoint-every N "
                       "writes fewer")
        note(NAME, f"this run writes {what}, but the file system of "
                   f"{self.network_path} has {sized(free)} free: it would stop at the write "
                   f"that finds the disk full{advice}")

    def _new_bar(self, epoch: int):
        from tqdm import tqdm

        self.seen, self.loss = 0, 0.0
        self.bar = tqdm(total=self.examples, desc=f"epoch {epoch}/{self.cfg.epochs}",
                        unit="ex", unit_scale=True, file=sys.stderr, disable=None, leave=False)

    def batch(self, n: int, err: float):
        if self.bar is None:
            return
        self.seen += n
        self.loss += err
        self.bar.set_postfix_str(f"loss {self.loss / self.seen:.5f}", refresh=False)
        self.bar.update(n)

    def epoch(self, r):
        if self.quiet:
            return
        self.bar.close()
        lr = f", lr {r.learning_rate:g}" if r.learning_rate is not None else ""  # (AdaDelta)
        note(NAME, f"epoch {r.epoch}/{self.cfg.epochs}: loss {r.loss:.6f} (training "
                   f"{r.training_error:.6f}, regularization {r.regularization_error:.6f}), "
                   f"{r.seconds:.1f} s, {r.samples_per_s:,.0f} examples/s{lr}"
                   + (f", {counted(r.skipped_batches, 'batch', 'batches')} skipped by the "
                      "divergence brake"
                      if r.skipped_batches else ""))
        if r.epoch < self.cfg.epochs:
            self._new_bar(r.epoch + 1)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def main():
    return run_command(train, NAME)
