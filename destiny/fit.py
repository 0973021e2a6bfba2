"""``train`` end to end: definition + datasets -> network, trained, checkpointed, written.

Follows DSSTNE's ``train`` (spec 5.1): the datasets of the input and output files form one
pool that layers pick from by name, ``N: "auto"`` is resolved against them, the network file
must not exist yet, checkpoints are ``<network><epoch>.nc``. What Destiny adds: a choice of
optimizer with good defaults, a seed, resumable checkpoints, per-epoch metrics, a NaN guard.

Under MPI (``comm`` of several ranks) every rank runs this function: each builds its part of
the split network (spec 7) and reads only the feature columns of the data it needs; rank 0
alone checks and writes the output files. Failures while setting up are raised on every rank
alike (``all_or_none``); during training every decision comes from values summed over ranks.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Callable

import numpy as np

from destiny import __version__
from destiny.errors import DataFormatError, DestinyError, NetDefError, OutputError
from destiny.io import atomic, failures
from destiny.io.checkpoint import (checkpoint_epoch, checkpoint_names, checkpoint_path,
                                   latest_checkpoint, load_weights, save_network,
                                   superseded_checkpoints)
from destiny.io.dataset import (DatasetSummary, contents_digests, dataset_summaries, dataset_widths,
                                read_dataset)
from destiny.io.netcdf_names import check_netcdf_names
from destiny.io.network_checks import is_settings
from destiny.io.network_file import FORMAT_VERSION, destiny_attributes
from destiny.kernels import get_backend
from destiny.memory import check_training_memory, listed_features
from destiny.netdef import LayerKind, load_netdef, read_netdef_json
from destiny.network import Network, rows_only_updates
from destiny.parallel import (Comm, StoppedTogether, StoppedTogetherAfterOutputs, all_or_none,
                              stop_together)
from destiny.signals import uninterrupted
from destiny.train import (OPTIMIZER_SETTINGS, SETTING_FLAGS, EpochRecord, TrainConfig,
                           TrainData, TrainState, too_narrow, train_epochs, unknown_dataset)


@dataclass
class FitReport:
    backend: str
    epochs_run: int
    resumed_from: str | None
    records: list[EpochRecord]
    written: str
    not_removed: dict[str, str] = field(default_factory=dict)  # path: why (--keep-checkpoints)


def fit(
    *,
    config_path,
    input_path,
    output_path,
    network_path,
    cfg: TrainConfig,
    backend: str = "auto",
    tf32: bool = False,
    checkpoint_every: int = 10,
    keep_checkpoints: int = 0,
    resume: bool = False,
    restart: bool = False,
    force: bool = False,
    metrics_path=None,
    initial_network=None,
    on_start: Callable[[Network, TrainData, TrainState], None] | None = None,
    on_batch: Callable[[int, float], None] | None = None,
    on_epoch: Callable[[EpochRecord], None] | None = None,
    on_checkpoint: Callable[[str, int], None] | None = None,
    on_restart: Callable[[str, str], None] | None = None,
    comm: Comm | None = None,
) -> FitReport:
    """Train the network of ``config_path`` on the two dataset files and write ``network_path``.

    ``keep_checkpoints``: after each checkpoint, remove this run's older ones but that many
    (0 keeps all, as DSSTNE). ``on_checkpoint(path, epoch)`` hears of the checkpoint resumed
    from and of each written.

    ``resume``: continue from the newest checkpoint, which must be of this run (the same data,
    definition and settings but ``cfg.epochs``) and short of ``cfg.epochs``. With ``restart``
    too, a newest checkpoint of another run, or at ``cfg.epochs`` already, is passed over and
    the run starts afresh (``on_restart(path, why)``): for make rules and cron jobs, which run
    again when their inputs change. A run that starts afresh writes ``initial_network``.
    """
    comm = comm or Comm()
    with contextlib.ExitStack() as held:  # the network file's lock, held to the end
        with all_or_none(comm):
            check_netcdf_names(  # (the checkpoints are written beside the network file)
                inputs=((input_path, "input dataset file (-i)"),
                        (output_path, "output dataset file (-o)")),
                outputs=((network_path, "network file (-n)"),
                         (initial_network, "initial network (--initial-network)")))
            if comm.is_root:
                _claim_outputs(held, network_path, metrics_path, initial_network, force,
                               resume, inputs=((config_path, "network definition (-c)"),
                                       (input_path, "input dataset file (-i)"),
                                       (output_path, "output dataset file (-o)")))
            # (fail fast, before reading the data; each rank on a machine takes its own GPU)
            kernels = get_backend(backend, tf32=tf32, process=comm.local_rank,
                                  processes=comm.local_size)
            # The dataset files are opened several times (their widths, rows and contents,
            # then their entries): a generate-netcdf renaming a new file over one meanwhile
            # (a cron job converting the next day's data) would train on parts of two, the
            # rows checked in the old file and read from the new one.
            pins = held.enter_context(contextlib.ExitStack())
            replaced = [(path, pins.enter_context(atomic.pinned(path)))
                        for path in (input_path, output_path)]
            pool = dataset_pool([input_path, output_path])
            # Read once: the settings text the network file stores is the definition trained.
            definition = read_netdef_json(config_path)
            netdef = load_netdef(definition, dataset_widths={n: w for n, (_, w) in pool.items()},
                                 file=config_path)
            netdef_text = json.dumps(definition, separators=(",", ":"))
            summaries = _summaries(pool, netdef)
            _check_rows_line_up(pool, summaries)
            run = {"netdef_json": netdef_text} | trained_indexes(netdef, summaries)
            if cfg.shuffle is None:
                cfg = replace(cfg, shuffle=netdef.shuffle_indices)
            try:
                net = Network(netdef, kernels, comm=comm)
                net.check_trainable()
            except NetDefError as exc:  # (what the definition asks that cannot run here)
                raise exc.with_file(config_path) from None
            data = TrainData(net, read_training_datasets(pool, net))
        # Before any rank allocates its weights (each block ends once every rank is through
        # it): a job too large for its machines is refused with a message, not ended by the
        # OOM killer as the ranks write the blocks they were each granted (memory.py).
        if kernels.device is None:  # (the host's memory: on a GPU the weights are there)
            with all_or_none(comm):
                opt = cfg.optimizer_config()
                check_training_memory(net, batch=cfg.batch, examples=data.examples,
                                      epochs=cfg.epochs,
                                      states=kernels.state_arrays_needed(opt.mode),
                                      listed=None if rows_only_updates(opt)
                                      else listed_features(net, data.inputs), resumed=resume)
        with all_or_none(comm):
            net.initialize(cfg.seed)
            net.init_optimizer(cfg.optimizer_config())
            # What a checkpoint must share to be resumed: all but -e, the data included
            # (the same numbers of examples and entries, the same feature indexes, and the
            # same contents: rank 0 reads the files whole to tell, once they have been read).
            settings = {"config": asdict(cfg), "netdef": netdef_text, "examples": data.examples,
                        "entries": {name: s.entries for name, s in summaries.items()},
                        "indexes": run.get("indexes", ""),
                        "contents": _contents(pool, summaries) if comm.is_root else None}
            _check_not_replaced(replaced)
            pins.close()  # (not held through training: a file replaced keeps its space)
            state, resumed_from, passed_over = TrainState(), None, None
            found = latest_checkpoint(network_path) if resume and comm.is_root else None
            if found is not None and restart:  # (from its attributes: rank 0 alone)
                judged = _judged(destiny_attributes(found[0]), settings, cfg.epochs)
                if judged is not None:
                    found, passed_over = None, (found[0], judged[0])
            if resume and found is None and comm.is_root:  # (it starts afresh: writes it)
                _check_initial_network(initial_network, force)
        # (no collective inside all_or_none: a failed rank skips it)
        found, passed_over, settings["contents"] = comm.bcast((found, passed_over,
                                                               settings["contents"]))
        if passed_over is not None and on_restart is not None:
            on_restart(*passed_over)
        # When this run started, in every checkpoint: --resume goes on with the run started
        # last (latest_checkpoint). A resumed run is the same run, and keeps the time.
        run["run_started"] = comm.bcast(time.time() if comm.is_root else None)
        if found is not None:
            resumed_from, _ = found
            state, started = _resume(net, resumed_from, settings, cfg.epochs, comm,
                                     flag="--resume-or-restart" if restart else "--resume")
            if started is not None:
                run["run_started"] = started
            if on_checkpoint is not None:
                on_checkpoint(resumed_from, state.epoch)
        elif initial_network:  # (a run that starts afresh)
            with stop_together(comm) as stops:  # (the ranks write it together)
                save_network(initial_network, net, destiny=_extras(kernels, cfg, state, run))
                stops.check()
        if on_start is not None:
            on_start(net, data, state)

        records: list[EpochRecord] = []
        not_removed: dict[str, str] = {}  # superseded checkpoints not removed, and why
        # The metrics file is opened (and emptied) with the first epoch's line, so that a run
        # failing before it leaves an earlier run's file as it was.
        metrics, writes_metrics = None, bool(metrics_path) and comm.is_root
        kept = _kept_metrics(metrics_path, state.epoch if resume else 0) if writes_metrics else []

        def epoch_done(record: EpochRecord, st: TrainState) -> None:
            nonlocal metrics
            records.append(record)
            if writes_metrics:
                if metrics is None:
                    metrics = _open_metrics(metrics_path, kept)
                metrics.write(record.json() + "\n")
                metrics.flush()
            if checkpoint_every > 0 and st.epoch % checkpoint_every == 0:  # the last too (5.2)
                extras = _extras(kernels, cfg, st, run) | {
                    "settings": json.dumps(settings, sort_keys=True)}
                path = checkpoint_path(network_path, st.epoch)
                save_network(path, net, destiny=extras, optimizer_state=True)
                if on_checkpoint is not None:
                    on_checkpoint(path, st.epoch)
                if keep_checkpoints and comm.is_root:  # (once the new one is in place)
                    not_removed.update(_remove_superseded(network_path, run["run_started"],
                                                          keep_checkpoints, st.epoch))
            if on_epoch is not None:
                on_epoch(record)

        try:
            train_epochs(net, data, cfg, state, on_batch=on_batch, on_epoch=epoch_done)
        finally:
            if metrics is not None:
                metrics.close()
        # How often each output unit was a target: predict never recommends units at 0 (items
        # the model never saw, padding). Each rank counts its own units. Likewise each input
        # feature: predict leaves out features no example had (their weights are untrained).
        # Under MPI a stop signal that comes meanwhile stops the ranks once the network is
        # written: the file is complete (a rank stopping in the middle would abort the job).
        with stop_together(comm) as stops:
            counts = {f"target_counts_{name}": np.concatenate(comm.allgather(
                          np.bincount(ds.indices, minlength=net.local_n(name))))
                      for name, ds in data.targets.items()}
            counts |= {f"input_counts_{name}": _input_counts(net, name, ds, comm)
                       for name, ds in data.inputs.items()}
            # Not the run's start time (checkpoints need it to tell runs apart; the trained
            # network does not): the same data, definition, flags and seed then write the same
            # network file, byte for byte, and a checksum can tell that a run reproduced.
            trained = {k: v for k, v in run.items() if k != "run_started"}
            save_network(network_path, net, destiny=_extras(kernels, cfg, state, trained),
                         arrays=counts)
            try:
                stops.check()
            except StoppedTogether as e:
                raise StoppedTogetherAfterOutputs(e.signum, [str(network_path)]) from None
        return FitReport(backend=kernels.name, epochs_run=len(records), resumed_from=resumed_from,
                         records=records, written=str(network_path), not_removed=not_removed)


def _check_not_replaced(replaced) -> None:
    """Refuse datasets replaced while they were read (``atomic.pinned``): what was read may be
    parts of two files."""
    for path, was_replaced in replaced:
        if was_replaced():
            raise DataFormatError(path, "was replaced while train read it (by a generate-netcdf "
                                  "writing it?), so what was read may be parts of two files; "
                                  "nothing was trained. Run train again once that run is done.")


def _remove_superseded(network_path, run_started: float, keep: int, epoch: int
                       ) -> dict[str, str]:
    """Remove the checkpoints ``superseded_checkpoints`` names; those that cannot be removed
    (permissions, a read-only copy) are returned with why, for a note: a run that trains well
    is not stopped for them. Stop signals wait for the removals, so that an interrupt's message
    names the newest checkpoint, which stays, not one just removed."""
    failed = {}
    with uninterrupted():
        for old in superseded_checkpoints(network_path, run_started, keep, epoch):
            try:
                os.remove(old)
            except FileNotFoundError:  # (removed meanwhile)
                pass
            except OSError as e:
                failed[old] = e.strerror
    return failed


def _input_counts(net: Network, name: str, ds, comm: Comm) -> np.ndarray:
    """How many training examples list each feature of input layer ``name``: a rank holds its
    own units' columns of the data, or all of them (``Network.input_columns``)."""
    lo, hi = net.input_columns(name)
    counts = np.bincount(ds.indices, minlength=hi - lo)
    if hi - lo == net.layers[name].n:
        return counts
    return np.concatenate(comm.allgather(counts))


def _resume(net: Network, path, settings: dict, epochs: int, comm: Comm, *,
            flag: str = "--resume") -> tuple[TrainState, float | None]:
    """Load the checkpoint ``path`` into ``net`` (each rank its part), once it is known to be
    of this run (``settings``) and to leave epochs to train before ``epochs``; with the time
    its run started (None from earlier versions). ``flag`` is the one given, which the
    messages name: ``--resume``, or ``--resume-or-restart`` (a damaged file is not passed
    over: it is no other run's)."""
    with all_or_none(comm):
        # (judged from its attributes as --resume-or-restart judges it, before its weights are
        # loaded: loading a checkpoint of another definition would only say its layers differ;
        # under --resume-or-restart, rank 0 passed over a file judged so, unless it was
        # replaced since)
        judged = _judged(destiny_attributes(path), settings, epochs)
        if judged is not None:
            reason, remedy = judged
            if flag == "--resume-or-restart":  # (replaced since: run again, passed over)
                raise DestinyError(
                    f"{path}: {flag} takes the newest checkpoint, and this file is {reason}: "
                    f"it was replaced as {flag} judged it, which passes over such a file. Run "
                    "the same command again: it passes over this file and trains afresh.")
            raise DestinyError(f"{path}: {flag} takes the newest checkpoint, and this file is "
                               f"{reason}; {remedy}, or start afresh without {flag} "
                               "(--resume-or-restart does so by itself).")
        try:
            extras = load_weights(net, path)
        except DestinyError as e:
            raise DestinyError(
                f"{e} {flag} takes the newest checkpoint, {path}: if it is damaged or not a "
                f"checkpoint of this run, move it away and {flag} continues from the one "
                "before.") from None
    started = extras.get("run_started")
    return (TrainState(epoch=int(extras["epoch"]), updates=int(extras["updates"])),
            None if started is None else float(started))


def _kept_metrics(path, epoch: int) -> list[str]:
    """The lines of the metrics file that a run from ``epoch`` keeps: none for a fresh run
    (``epoch`` 0); on resuming, those of epochs 1..``epoch`` (an interrupted run's lines of
    later epochs are dropped, as those epochs run again)."""
    kept = []
    if epoch > 0 and os.path.exists(path) and not atomic.is_stream(path):  # (/dev/stdout)
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    if json.loads(line)["epoch"] <= epoch:
                        kept.append(line)
                except (ValueError, KeyError, TypeError):
                    kept.append(line)  # not ours to judge: kept as it was
    return kept


def _open_metrics(path, kept: list[str]):
    """The metrics file, open for appending and holding the ``kept`` lines. Rewritten in
    place, not renamed: the path may be a link, or a stream ('-', /dev/stdout, a pipe).

    A file that still starts with the kept lines (as train wrote it: a resumed run keeps the
    epochs up to its checkpoint) is cut after them, not emptied and written again: a kill,
    a stop signal or a power cut between the two lost them for good, the resumed run writing
    only its own epochs (a SIGKILL as a run resumed from epoch 4 opened the file left it
    empty, and the next run's file began at epoch 5)."""
    if atomic.is_stream(path):
        metrics = atomic.open_stream(path)
        metrics.writelines(kept)
        return metrics
    text = "".join(kept).encode("utf-8")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        ours = os.pread(fd, len(text), 0) == text  # (b"" for a fresh run: emptied)
        os.ftruncate(fd, len(text) if ours else 0)
        os.lseek(fd, 0, os.SEEK_END)
        metrics = failures.open_text(fd, str(path), in_place=True)  # (a failure names it)
    except BaseException:
        with contextlib.suppress(OSError):  # (closed already by open_text's own failure)
            os.close(fd)
        raise
    if not ours:  # (edited since: written again, as before)
        metrics.writelines(kept)
    return metrics


def _claim_outputs(held, network_path, metrics_path, initial_network, force: bool,
                   resume: bool, inputs) -> None:
    """Check the outputs before any work, and take the network file's lock into ``held``:
    overlapping runs (cron jobs) writing one network stop at the second. The lock comes
    before the test for an existing network, which a run finishing meanwhile could write."""
    # The metrics file is written in place, so it may be a device or pipe (/dev/stdout).
    metrics_file = None if metrics_path is None or atomic.is_stream(metrics_path) else metrics_path
    outputs = ((network_path, "network file (-n)"), (metrics_file, "metrics file"),
               (initial_network, "initial network"))
    atomic.check_outputs(outputs, inputs)
    if (metrics_file is not None and os.path.exists(metrics_file)
            and not os.access(metrics_file, os.W_OK)):  # (written in place, at the 1st epoch)
        raise OutputError(f"{metrics_path}: the metrics file is not writable; check its "
                          "permissions or choose another path.")
    for path, what in ((metrics_file, "the metrics file"),
                       (initial_network, "the initial network file (--initial-network)")):
        if path is not None and checkpoint_epoch(network_path, path) is not None:
            raise OutputError(f"{path}: {what} has the name of one of the network's "
                              f"checkpoints ({os.path.basename(network_path)}<epoch>.nc), "
                              "which would replace it or be taken for it (--resume, "
                              "--keep-checkpoints); choose another name.")
    # Checkpoints are written only under the network's lock: a killed run's temporary
    # checkpoint (as large as the network, with its optimizer state) is removed with its own.
    held.enter_context(atomic.exclusive(network_path, "network file (-n)",
                                        companions=checkpoint_names(network_path)))
    if initial_network:  # (two runs given one, or a run whose -n it is: the second stops, as
        # above, and a killed run's temporary copy, as large as the network, is removed)
        held.enter_context(atomic.exclusive(initial_network, "initial network file "
                                            "(--initial-network)"))
    if os.path.exists(network_path) and not force:
        raise OutputError(f"{network_path}: the network file already exists; DSSTNE's train "
                          "refuses to overwrite it, and so does Destiny. Remove it, choose "
                          "another -n, or pass --force.")
    if not resume:  # (with --resume: once it is known whether the run starts afresh)
        _check_initial_network(initial_network, force)


def _check_initial_network(initial_network, force: bool) -> None:
    """Refuse to replace a file at ``initial_network`` that is not an earlier run's untrained
    network, without ``force``: it may be a trained one."""
    if (initial_network and os.path.exists(initial_network) and not force
            and not _untrained(initial_network)):
        raise OutputError(f"{initial_network}: the initial network file (--initial-network) "
                          "already exists and is not an earlier run's initial network (which "
                          "would be replaced); it may be a trained one, so it is not "
                          "overwritten without --force. Remove it, choose another path, or "
                          "pass --force.")


def _untrained(path) -> bool:
    """Whether ``path`` is a network Destiny wrote before any training (epoch 0)."""
    attrs = destiny_attributes(path)
    try:
        return attrs is not None and "epoch" in attrs and int(attrs["epoch"]) == 0
    except (TypeError, ValueError):  # (not a number: not a file to replace without --force)
        return False


def dataset_pool(paths) -> dict[str, tuple[str, int]]:
    """(file, width) of every dataset of the files, by name, without reading the entries.

    DSSTNE pools the datasets of the input and output files (spec 5.1); a name in both is
    taken from the first file.
    """
    pool = {}
    for path in paths:
        for name, width in dataset_widths(path).items():
            pool.setdefault(name, (path, width))
    return pool


def _summaries(pool, netdef) -> dict[str, DatasetSummary]:
    """``dataset_summaries`` of the datasets the input and output layers read, by name (each
    file's header read once)."""
    used = sorted({layer.dataset for layer in netdef.layers
                   if layer.kind in (LayerKind.Input, LayerKind.Output) and layer.dataset in pool})
    by_file = {path: dataset_summaries(path) for path in {pool[name][0] for name in used}}
    return {name: by_file[pool[name][0]][name] for name in used}


def _contents(pool, summaries: dict[str, DatasetSummary]) -> dict[str, str]:
    """``contents_digests`` of the datasets of ``summaries``, by name."""
    by_file: dict[str, list[str]] = {}
    for name in summaries:
        by_file.setdefault(pool[name][0], []).append(name)
    return {name: digest for path, names in by_file.items()
            for name, digest in contents_digests(path, names).items()}


def _check_rows_line_up(pool, summaries: dict[str, DatasetSummary]) -> None:
    """Refuse datasets whose rows are other samples: row r of the input must be the same
    example as row r of the targets. generate-netcdf numbers rows by the samples present in
    its input (spec 1.4, quirk 10.1), so two files converted from different inputs (or with
    different -s indexes) can hold as many rows and still not line up; DSSTNE trained on them.
    Only datasets that record their rows (``rows_digest``) are compared."""
    recorded = [(name, s.rows) for name, s in summaries.items() if s.rows is not None]
    first, first_rows = recorded[0] if recorded else (None, None)
    for name, rows in recorded[1:]:
        if rows != first_rows:
            raise DestinyError(
                f"the datasets {first!r} ({pool[first][0]}) and {name!r} ({pool[name][0]}) "
                "hold other samples, or the same in another order, so an example's input and "
                "its targets would not be one sample. Write both with generate-netcdf from "
                "the same samples and one -s sample index (DSSTNE's example passes -s "
                "samples_input to both).")


def read_training_datasets(pool: dict[str, tuple[str, int]], net: Network) -> dict:
    """The datasets of ``pool`` (``dataset_pool``) the network's layers read, by name. A rank of
    a split network reads only the feature columns its layers need (spec 7); a dataset no
    layer reads is not read at all."""
    needed: dict[str, tuple[int, int]] = {}
    for name in net.inputs + net.outputs:
        layer = net.layers[name]
        lo, hi = (net.input_columns(name) if layer.kind == LayerKind.Input else net.units[name])
        if layer.dataset not in pool:
            raise unknown_dataset(name, layer.dataset, pool)
        path, width = pool[layer.dataset]
        if width > layer.n:  # before reading it (TrainData checks again, for library callers)
            raise too_narrow(net, name, layer.dataset, width, path)
        if layer.dataset in needed:
            lo, hi = min(lo, needed[layer.dataset][0]), max(hi, needed[layer.dataset][1])
        needed[layer.dataset] = (lo, hi)
    return {name: read_dataset(pool[name][0], name,
                               columns=None if net.comm.size == 1 else needed[name])
            for name in needed}


def _extras(kernels, cfg: TrainConfig, state: TrainState, run: dict) -> dict:
    return {"version": __version__, "backend": kernels.name, "products": kernels.products,
            "optimizer": cfg.optimizer,
            "seed": cfg.seed, "epoch": state.epoch, "updates": state.updates} | run


def trained_indexes(netdef, summaries) -> dict:
    """``{"indexes": JSON}``: for each input and output layer whose dataset file records the
    feature index it was written with (``_summaries``), that index's (entries, digest)
    (`index_digest`), for predict to check its indexes against; ``{}`` where no dataset
    records one (DSSTNE's)."""
    recorded = {layer.name: list(summaries[layer.dataset].index) for layer in netdef.layers
                if layer.dataset in summaries and summaries[layer.dataset].index is not None}
    return {"indexes": json.dumps(recorded, sort_keys=True)} if recorded else {}


def _other_settings(recorded: dict, settings: dict) -> list[str]:
    """How the settings a checkpoint records (its ``destiny_settings``, parsed) differ from
    this run's, in the user's terms; empty where only the number of epochs does, or a
    setting that neither run's optimizer reads (``-mu`` under sgd: train notes that it has no
    effect, so it cannot make the checkpoint another run's). Where the optimizers differ, which
    refuses the checkpoint by itself, only the settings both read are listed beside them: an
    adam checkpoint's -mu against an sgd run's read as if sgd had one."""
    optimizers = {d.get("config", {}).get("optimizer") for d in (recorded, settings)}
    read = set.intersection(*(set(OPTIMIZER_SETTINGS.get(o, SETTING_FLAGS)) for o in optimizers))

    def key(d: dict) -> dict:
        d = json.loads(json.dumps(d))  # the same types as the saved copy
        d["config"] = {k: v for k, v in d.get("config", {}).items()
                       if k != "epochs" and (k not in SETTING_FLAGS or k in read)}
        return d

    saved = key(recorded)
    # (checkpoints of earlier versions recorded fewer settings: those they have must agree)
    now = {k: v for k, v in key(settings).items() if k in saved}
    return [] if saved == now else _differences(saved, now)


# A network file named like a checkpoint that records no run settings (which every checkpoint
# of train's does, ``superseded_checkpoints``): nothing to resume from.
_NOT_A_CHECKPOINT = ("not a checkpoint Destiny's train wrote (it records no run settings: a "
                     "trained or initial network, or one of DSSTNE's, named like a checkpoint)")


def _judged(attrs: dict | None, settings: dict, epochs: int) -> tuple[str, str] | None:
    """Why the newest checkpoint, of ``destiny_`` attributes ``attrs``, is not one this run
    (``settings``, ``-e epochs``) resumes from: (reason, remedy), or None where it is.

    The reason follows "is": ``--resume`` refuses with it and the remedy (``_resume``),
    ``--resume-or-restart`` passes over the file with it (``fit``). None too where nothing
    can be told (attributes not read, settings that do not parse, a later format's settings):
    loading the file then says it is damaged, or to upgrade Destiny, and neither flag passes
    over it (a damaged file is not another run).
    """
    if attrs is None:
        return None
    if "settings" not in attrs:
        return _NOT_A_CHECKPOINT, "move it away and --resume continues from the one before"
    try:
        if int(attrs.get("format_version", FORMAT_VERSION)) > FORMAT_VERSION:
            return None  # (read_network refuses a later layout before reading anything)
        recorded = json.loads(attrs["settings"])
        if not is_settings(recorded):
            return None  # (settings no train records: damaged, and loading says where)
        differences = _other_settings(recorded, settings)
        epoch = int(attrs["epoch"])
    except (KeyError, ValueError, TypeError, AttributeError):  # (damaged: loading says where)
        return None
    if differences:
        return ("made with other settings (" + "; ".join(differences) + ")",
                "resuming from it would not continue the same run: use the original flags "
                "and data")
    if epoch >= epochs:
        return (f"at epoch {epoch} already, and -e {epochs} asks for no more",
                "give a larger -e to train on from it")
    return None


# TrainConfig's fields as train's flags, for the resume refusal: the optimizer's settings'
# (SETTING_FLAGS) and the rest.
_FLAGS = SETTING_FLAGS | {"batch": "-b", "optimizer": "--optimizer", "seed": "--seed",
                          "shuffle": "--shuffle/--no-shuffle"}


def _differences(saved: dict, now: dict) -> list[str]:
    """What differs between a checkpoint's settings and this run's, in the user's terms."""
    out = [f"{_FLAGS.get(name, name)} {_typed(old)} in the checkpoint, {_typed(new)} now"
           for name, old, new in _changed(saved.get("config", {}), now.get("config", {}))]
    if saved.get("netdef") != now.get("netdef"):
        out.append("another network definition (-c)")
    out += [f"{_shown(old)} examples in the checkpoint's data, {_shown(new)} in this data"
            for _, old, new in _changed(saved, now, ["examples"])]
    for name, old, new in _changed(saved.get("entries", {}), now.get("entries", {})):
        out.append(f"dataset {name}: " + (
            "not in the checkpoint's data" if old is None else "not in this data" if new is None
            else f"{_shown(old)} entries in the checkpoint's data, {_shown(new)} in this data"))
    entries = saved.get("entries", {}), now.get("entries", {})
    for name, old, new in _changed(saved.get("contents", {}), now.get("contents", {})):
        if None not in (old, new) and entries[0].get(name) == entries[1].get(name):
            out.append(f"dataset {name}: other entries in this data than in the checkpoint's "
                       "(as many of them)")
    if saved.get("indexes") != now.get("indexes"):
        out.append("other feature indexes (generate-netcdf's -f files) for the datasets")
    return out or ["settings of another version"]


def _changed(old: dict, new: dict, keys=None) -> list[tuple]:
    """(key, old value, new value) for each of ``keys`` (all) whose values differ."""
    keys = sorted(old.keys() | new.keys()) if keys is None else keys
    return [(k, old.get(k), new.get(k)) for k in keys if old.get(k) != new.get(k)]


def _typed(value) -> str:
    """A flag's value as one would type it."""
    if value is None:
        return "not given"
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value}"


def _shown(count) -> str:
    return f"{count:,}"
