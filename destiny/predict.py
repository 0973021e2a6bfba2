"""Prediction: batched scoring, filters, top-k, and DSSTNE's recommendation records.

``predict`` (spec 8) maps the input text through the training feature index, scores every
sample with a forward pass (no dropout, no denoising), removes each sample's filtered items
inside the top-k kernel (never a dense filter matrix), and writes one record per sample in
input order: ``NAME<TAB>item,score:item,score:...:`` with ``%4.3f`` scores, as DSSTNE does.
Padding units and output units no training example listed as a target (``target_counts``,
whatever the listed value) are never recommended.
"""

from __future__ import annotations

import functools
import io
import json
from dataclasses import dataclass
from typing import Callable, Iterator, TextIO

import numpy as np

from destiny.errors import DataFormatError, DestinyError, NetDefError
from destiny.io.atomic import same_file
from destiny.io.index import LabelTable, index_digest, read_index, table_of
from destiny.io.netcdf_names import check_netcdf_names
from destiny.io.records import EncodedLabels, format_records
from destiny.io.text import Records, input_files, read_records
from destiny.netdef import LayerKind
from destiny.network import Batch, Network
from destiny.parallel import (Comm, ParallelError, all_or_none, end_round, gather_in_order,
                              stop_together)
from destiny.sparse import column_range, gather_ranges
from destiny.wording import quoted

_EMPTY = np.zeros(0, dtype=np.float32)
_NO_ROWS = np.zeros(0, dtype=np.int64)
# Why a filter that is the input file itself is parsed again with --filter-mode multiply
# (``Predictor.input_parsed_again``), which the flags alone tell (cli/predict.py).
MULTIPLY_PARSES_AGAIN = ("--filter-mode multiply reads the filter's values, which the input's "
                         "parse does not keep")


def score_batches(net: Network, indptr, indices, *, batch_size: int = 1024,
                  output: str | None = None,
                  pre_activations: bool = False) -> Iterator[tuple[int, np.ndarray]]:
    """Yield (first row, scores [rows, N]) for each minibatch of the CSR input (its features
    are indicators: predict's text input carries no values); with ``pre_activations`` the
    output layer's pre-activations z instead (see ``fused_activation``).
    """
    (input_name,) = net.inputs
    output = output or net.outputs[0]
    rows = len(indptr) - 1
    columns = net.input_columns(input_name)  # (a rank of a split network: its share)
    for lo in range(0, rows, batch_size):
        hi = min(lo + batch_size, rows)
        start, end = indptr[lo], indptr[hi]
        sub = (indptr[lo:hi + 1] - start, indices[start:end], _EMPTY)
        if columns != (0, net.layers[input_name].n):
            sub = column_range(*sub, *columns)
        sub = tuple(net.backend.to_device(np.ascontiguousarray(x)) for x in sub)
        yield lo, forward_scores(net, Batch(size=hi - lo, inputs={input_name: sub}), output,
                                 pre_activations)


def forward_scores(net: Network, batch: Batch, output: str,
                   pre_activations: bool = False) -> np.ndarray:
    """Run ``batch`` forward; the output layer's activations, or with ``pre_activations``
    its pre-activations z, for ``top_k(..., activation=fused_activation(...))``."""
    if pre_activations:
        net.forward(batch, pre_activation=output)
        return net.pre_activations(output, batch.size)
    net.forward(batch)
    return net.activation(output, batch.size)


# top_k_activated evaluates the activation for the items that can be among the K best: those
# at or above a floor from the maxima of blocks of 32 items. Without enough blocks above K plus
# the items never returned there is no floor and every item is evaluated, one at a time, which
# costs more than the vectorized activation pass it replaces; twice as many blocks as that
# keeps the fused kernel well inside its fast case.
_FUSED_BLOCKS_PER_RANK = 2


def fused_activation(net: Network, layer: str, k: int, n_valid: int,
                     n_not_allowed: int = 0) -> tuple[int, float, float, float] | None:
    """The activation ``(code, slope, alpha, lambda)`` for ``top_k(..., activation=)`` to apply
    while choosing the layer's k best, or None where the activation pass must come first.

    The fused way needs an activation that never decreases as z grows (not SoftMax), a layer
    that feeds no other, and K small beside the row: enough blocks of 32 items
    (``kernels.cpu.topk.THRESHOLD_BLOCK``) for a floor.
    """
    from destiny.kernels.codes import is_monotone
    from destiny.kernels.cpu.topk import THRESHOLD_BLOCK

    spec = net.layers[layer]
    act = (int(spec.activation), spec.relu_slope, spec.elu_alpha, spec.selu_lambda)
    if not is_monotone(*act) or net.feeds_others(layer):
        return None
    if n_valid // THRESHOLD_BLOCK < _FUSED_BLOCKS_PER_RANK * (k + n_not_allowed):
        return None
    return act


def top_k(scores: np.ndarray, k: int, *, exclude_indptr=None, exclude_indices=None,
          n_items: int | None = None, allowed=None, kernels=None,
          activation: tuple[int, float, float, float] | None = None,
          ) -> tuple[np.ndarray, np.ndarray]:
    """The k best items of each row (items, scores), best first, equal scores by index.

    Items listed for a row in the CSR ``exclude_*`` arrays, items >= ``n_items`` (padding
    units) and items whose ``allowed`` flag is 0 are never returned; missing slots hold item
    -1 and score -inf. With an ``activation`` (from ``fused_activation``), ``scores`` are
    pre-activations z and the items are ranked, and their scores given, by f(z).
    """
    items, best = queue_top_k(scores, k, exclude_indptr=exclude_indptr,
                              exclude_indices=exclude_indices, n_items=n_items,
                              allowed=allowed, kernels=kernels, activation=activation)
    return items.get(), best.get()


def queue_top_k(scores, k: int, *, exclude_indptr, exclude_indices, n_items, allowed,
                kernels, activation):
    """``top_k`` with its two answers as downloads (``kernels.download``) not yet waited for:
    their ``get()`` gives the arrays, and on a GPU the next batch can be queued first."""
    if kernels is None:
        from destiny.kernels import get_backend

        kernels = get_backend("cpu")
    B, N = scores.shape
    kb = kernels
    items = kb.empty((B, k), np.int32)
    best = kb.empty((B, k), np.float32)
    indptr = _NO_ROWS if exclude_indptr is None else np.asarray(exclude_indptr, dtype=np.int64)
    indices = (np.zeros(0, np.int32) if exclude_indices is None
               else np.asarray(exclude_indices, dtype=np.int32))
    mask = np.zeros(0, np.uint8) if allowed is None else allowed
    if isinstance(scores, np.ndarray):
        scores = np.ascontiguousarray(scores, dtype=np.float32)
    # On a GPU the scores stay there: the filter and the mask go to them, k per row come back.
    args = (kb.to_device(scores), kb.to_device(indptr), kb.to_device(indices),
            kb.to_device(mask), N if n_items is None else n_items)
    if activation is None:
        kb.top_k(items, best, *args)
    else:
        kb.top_k_activated(items, best, *args, *activation)
    return kb.download(items), kb.download(best)


def queue_recommendations(net: Network, indptr, indices, k: int, *, layer: str,
                          batch_size: int = 1024, filter_csr=None, multiply: bool = False,
                          allowed=None, n_not_allowed: int = 0, n_items: int | None = None):
    """Yield (first row, items, scores) for each minibatch of the CSR input: the k best units
    of ``layer`` (a rank of a split network: of its own, numbered from its first) as
    ``queue_top_k``'s downloads, not yet waited for.

    ``filter_csr`` (indptr, indices, values) has a row for each input row: its items are
    never returned or, with ``multiply``, their scores are multiplied by its values (DSSTNE's
    two filter modes). ``allowed`` and ``n_items`` are ``top_k``'s; ``n_not_allowed`` counts
    the units ``allowed`` leaves out.
    """
    kb = net.backend
    units = net.units[layer]
    n_valid = net.local_n(layer) if n_items is None else n_items
    # DSSTNE's multiplying filter scales the activations: they must exist first.
    activation = None if multiply else fused_activation(net, layer, k, n_valid, n_not_allowed)
    for lo, scores in score_batches(net, indptr, indices, batch_size=batch_size, output=layer,
                                    pre_activations=activation is not None):
        hi = lo + len(scores)
        exclude_ptr = exclude_idx = None
        if filter_csr is not None:
            sub_ptr, sub_idx, sub_val = _csr_rows(filter_csr, lo, hi)
            if net.comm.size > 1:  # this rank's units only
                sub_ptr, sub_idx, sub_val = column_range(sub_ptr, sub_idx, sub_val, *units)
            if multiply:  # DSSTNE's semantics: score *= value (0.0 without one)
                # In place: the scores are the network's output buffer (float32), which only
                # this batch's top-k reads before the next batch's forward pass writes it
                # anew; on a GPU that pass is queued after this top-k on the one stream, as
                # the remove mode's top-k reads the buffer itself too.
                kb.multiply_filter(scores, kb.to_device(sub_ptr), kb.to_device(sub_idx),
                                   kb.to_device(np.ascontiguousarray(sub_val)))
            else:
                exclude_ptr, exclude_idx = sub_ptr, sub_idx
        items, best = queue_top_k(scores, k, exclude_indptr=exclude_ptr,
                                  exclude_indices=exclude_idx, n_items=n_items,
                                  allowed=allowed, kernels=kb, activation=activation)
        yield lo, items, best


@dataclass
class PredictReport:
    samples: int
    dropped: int            # unknown input features left out
    lines_with_drops: int
    no_known_feature: int   # samples scored from the biases alone
    filtered: int           # filter entries applied


def check_trained_index(path, labels, values, trained, which: str, layer: str,
                        digests: dict | None = None) -> None:
    """Refuse an index other than the one layer ``layer`` was trained with: ``trained`` is the
    (entries, digest) its dataset file recorded (`index_digest`). An index grown since keeps
    its entries numbered below that size, and passes. ``digests`` (entries -> digest) keeps
    the digests computed of this mapping for the next call on it."""
    entries, digest = trained
    if len(labels) >= entries:
        digests = {} if digests is None else digests
        if entries not in digests:
            digests[entries] = index_digest(labels, values, entries)
        if digests[entries] == digest:
            return
    found = (f"this file has only {len(labels):,}" if len(labels) < entries else
             f"this file's entries numbered below {entries:,} differ from them")
    raise DataFormatError(path, f"is not the {which} index this network was trained with: its "
                          f"layer {layer!r} learned from a dataset written with an index of "
                          f"{entries:,} entries, and {found}. Give the index generate-netcdf "
                          "wrote with the training data (an index rebuilt with -c numbers the "
                          "items anew), or train the network again on data written with this "
                          "index.")


class Predictor:
    """A trained network with its output labels, ready to score DSSTNE text.

    ``comm``: the ranks the layers are split across (None: this process holds them all).
    ``job``: the job's processes (by default ``comm``; ranks that each score their share of
    the samples pass theirs): this process's rank among them on its machine picks its GPU.
    """

    def __init__(self, network_path, input_index, output_index, *, dataset: str | None,
                 layer: str = "Output", backend: str = "auto", tf32: bool = False,
                 comm: Comm | None = None, job: Comm | None = None):
        from destiny.io.checkpoint import load_weights
        from destiny.io.network_file import read_network
        from destiny.kernels import get_backend

        check_netcdf_names(inputs=[(network_path, "network file (-n)")])
        job = job or comm or Comm()
        self.kernels = get_backend(backend, tf32=tf32, process=job.local_rank,
                                   processes=job.local_size)
        # Mapped, not read: a cold start does not copy hundreds of MB of weights. A rank of a
        # split network reads only its blocks of them (load_weights); none reads a
        # checkpoint's optimizer state, only the counts below.
        split = comm is not None and comm.size > 1
        nf = read_network(network_path, mmap=not split, weights=not split,
                          arrays=lambda name: name.startswith(("input_counts_",
                                                               "target_counts_")))
        in_labels, in_values = read_index(input_index)
        labels, values = read_index(output_index)
        # The filter is read against the output index. Where the two indices are one mapping
        # (an autoencoder's, written from one file), a filter that is the input file itself
        # is the input's own parse (read_filter).
        self.indices_alike = in_labels == labels and np.array_equal(in_values, values)
        _check_layer(nf.netdef, layer, network_path)
        # With a ``comm`` of several ranks, every layer is split across them as in training
        # (spec 7): each rank scores its share of the output units (``own_units``).
        try:
            self.net = Network(nf.netdef, self.kernels, comm=comm)
        except NetDefError as exc:  # (the definition the network file holds)
            raise exc.with_file(network_path) from None
        self.layer = layer
        self.own_units = self.net.units[layer]
        if len(self.net.inputs) != 1:
            # DSSTNE's predict binds one dataset, '<-d>_input' (spec 8.2); a second input
            # layer would have no data, and -r gives one sample file.
            names = ", ".join(map(repr, self.net.inputs))
            raise DestinyError(
                f"{network_path}: the network has {len(self.net.inputs)} input layers "
                f"({names}), and predict feeds one, from the -r samples, as DSSTNE's predict "
                "bound one dataset ('<-d>_input', spec 8.2); it scores networks with one Input "
                "layer only.")
        (input_layer,) = [self.net.layers[n] for n in self.net.inputs]
        if dataset is not None and input_layer.dataset != f"{dataset}_input":
            raise DestinyError(
                f"-d {dataset}: the network's input layer reads the dataset "
                f"{input_layer.dataset!r}, and predict looks for '<-d>_input' (as DSSTNE does); "
                f"use -d {input_layer.dataset.removesuffix('_input')}.")
        trained = json.loads(nf.destiny.get("indexes", "{}"))
        in_digests = {}  # alike indices are one mapping, digested once (0.26 s at 930k items)
        for path, (names, numbers), name, which, digests in (
                (input_index, (in_labels, in_values), input_layer.name, "input", in_digests),
                (output_index, (labels, values), layer, "output",
                 in_digests if self.indices_alike else {})):
            if name in trained:
                check_trained_index(path, names, numbers, trained[name], which, name, digests)
        # Features no training example had (added to the index with -m since, or absent from
        # the training data) have only their initial random weights: they are left out and
        # counted, as features the index lacks are.
        # (The full index still maps filters, whose items are the output's, and must fit.)
        if len(in_labels) > input_layer.n:
            raise DataFormatError(input_index, f"holds {len(in_labels):,} features but the "
                                  f"network's input layer has {input_layer.n:,} units; it is not "
                                  "the index this network was trained with.")
        whole = table_of(in_labels, in_values)
        self.features, self.features_left_out = _trained_features(
            in_labels, in_values, whole, input_layer.n,
            nf.arrays.get(f"input_counts_{input_layer.name}"))
        load_weights(self.net, network_path, gradients=False, nf=nf)
        n_out = self.net.layers[layer].n
        if len(values) and int(values.max()) >= n_out:
            raise DataFormatError(output_index, f"has index {int(values.max())} but the layer "
                                  f"{layer!r} has {n_out:,} units; it is not the output index "
                                  "this network was trained with.")
        self.output_labels = np.full(n_out, None, dtype=object)
        self.output_labels[values] = labels
        self._item_labels: EncodedLabels | None = None
        self.targets = whole if self.indices_alike else table_of(labels, values)
        everyone = _recommendable(values, n_out, nf.arrays.get(f"target_counts_{layer}"))
        # (all ranks' units: a -k above it lists every item a line has not filtered out)
        self.recommendable = int(np.count_nonzero(everyone))
        allowed = np.ascontiguousarray(everyone[self.own_units[0]:self.own_units[1]])
        self.allowed = self.kernels.to_device(allowed)
        self.n_not_allowed = int(np.count_nonzero(allowed == 0))

    @property
    def split(self) -> bool:
        """Whether the network's layers are split across MPI ranks."""
        return self.net.comm.size > 1

    def item_labels(self) -> EncodedLabels:
        """The output labels encoded for the record writer (made at the first record)."""
        if self._item_labels is None:
            self._item_labels = EncodedLabels(self.output_labels)
        return self._item_labels

    def read_input(self, path) -> Records:
        # (an input with no records gets no recommendations: a cron job's list of the day's
        # active users may be empty, as a file or as an empty directory of parts)
        # Values are checked, not kept: the input is scored as indicators, as DSSTNE's predict
        # writes it (spec 8.2).
        records = read_records(input_files(path, "-r", allow_empty=True), self.features,
                               update=False, flag="-r", keep_values=False, allow_empty=True)
        records.check_unique()
        return records

    def read_filter(self, path, records: Records, *, input_path=None,
                    values: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The filter as CSR rows aligned with ``records`` (spec 8.3: samples by label).

        ``predict -r X -f X`` (leave out each sample's own items) is the usual filter: where
        ``path`` is ``input_path``, the two indices map alike, no input feature was left out
        as untrained (``features_left_out``: the filter still removes those items, so
        ``records`` lacks some of its entries) and the filter's ``values`` are not wanted (they
        scale scores only with ``--filter-mode multiply``), the filter is ``records``' own
        entries, row for row (its labels are unique), and the file is not parsed again; its
        values are then zeros.
        """
        if (input_path is not None and self.input_parsed_again(values=values) is None
                and same_file(path, input_path)):
            return records.indptr, records.indices, np.zeros(len(records.indices), np.float32)
        # (a filter with no records filters nothing, as in DSSTNE: a cron job's list of the
        # day's purchases may be empty, as a file or as an empty directory of parts)
        filt = read_records(input_files(path, "-f", allow_empty=True), self.targets,
                            update=False, flag="-f", keep_values=True, allow_empty=True)
        row_of = {label: r for r, label in enumerate(records.labels)}
        chosen = np.full(len(records.labels), -1, dtype=np.int64)
        for line, label in enumerate(filt.labels):
            r = row_of.get(label)
            if r is not None:
                chosen[r] = line  # a later line for the same sample replaces the earlier one
        hit = chosen >= 0  # (samples the filter lists; it may list none, or hold no records)
        starts = np.zeros(len(chosen), np.int64)
        lengths = np.zeros(len(chosen), np.int64)
        starts[hit] = filt.indptr[chosen[hit]]
        lengths[hit] = filt.indptr[chosen[hit] + 1] - starts[hit]
        indptr, take = gather_ranges(starts, lengths)
        return indptr, filt.indices[take], filt.values[take]

    def input_parsed_again(self, *, values: bool) -> str | None:
        """Why a filter that is the input file itself is parsed again (``read_filter``), or
        None where it is the input's own parse: a clause, for the refusal of a stream (standard
        input, a pipe), which can be read only once."""
        if values:
            return MULTIPLY_PARSES_AGAIN
        if not self.indices_alike:
            return ("the input and output indices map the features otherwise (the filter's "
                    "items are the output's)")
        if self.features_left_out:
            return ("the input's features that no training example had are left out of it, "
                    "where the filter still removes those items")
        return None

    def recommend(self, records: Records, k: int, *, filter_csr=None, multiply: bool = False,
                  batch_size: int = 1024) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """Yield (first row, items [rows, k], scores [rows, k]) per minibatch.

        A batch is yielded once the next one is queued: on a GPU the next batch is scored
        while the caller writes this one's records (on the cpu it changes nothing). A ``k``
        above the layer's units gives every item (``-k 99999999999`` asked for memory for that
        many a row).
        """
        k = min(k, self.net.layers[self.layer].n)
        queued = None
        for lo, items, best in queue_recommendations(
                self.net, records.indptr, records.indices, k, layer=self.layer,
                batch_size=batch_size, filter_csr=filter_csr, multiply=multiply,
                allowed=self.allowed, n_not_allowed=self.n_not_allowed):
            if queued is not None:
                yield self._done(*queued)
            queued = lo, items, best
        if queued is not None:
            yield self._done(*queued)

    def _done(self, lo: int, items, best) -> tuple[int, np.ndarray, np.ndarray]:
        """A queued batch's answers; a rank of a split network numbers its units from
        ``own_units[0]``: its items are given the layer's numbers (missing slots stay -1)."""
        items, best = items.get(), best.get()
        if self.own_units[0]:
            items = np.where(items >= 0, items + self.own_units[0], items)
        return lo, items, best


def _check_layer(netdef, layer: str, network_path) -> None:
    """Refuse a ``-l`` that names no layer of the network, or one that is not an output."""
    outputs = [lay.name for lay in netdef.layers if lay.kind == LayerKind.Output]
    if layer not in [lay.name for lay in netdef.layers]:
        raise DestinyError(
            f"{network_path}: the network has no layer named {quoted(layer)}; its output "
            f"layers are {', '.join(map(repr, outputs))}. DSSTNE's predict always read the "
            "layer named 'Output' (name it so in the JSON definition), or choose one with -l.")
    kind = netdef.layer(layer).kind
    if kind != LayerKind.Output:
        what = ("the network's input layer, which has no activations to rank" if
                kind == LayerKind.Input else "a hidden layer, whose units are not items")
        raise DestinyError(
            f"-l {layer}: is {what}; -l names the layer whose units are the output index's "
            f"items: an output layer ({', '.join(map(repr, outputs))}).")


def _trained_features(labels: list[str], values: np.ndarray, whole: LabelTable, n: int,
                      seen) -> tuple[LabelTable, int]:
    """The input index ``whole`` (``labels``, ``values``) without the features no training
    example had, and how many it left out. ``seen``: the input layer's ``input_counts_`` of
    its ``n`` units, None in a network that did not record them (all are kept)."""
    if seen is None or len(seen) != n or not len(values):
        return whole, 0
    keep = values < n
    keep[keep] = seen[values[keep]] > 0
    left_out = int(np.count_nonzero(~keep))
    if not left_out:
        return whole, 0
    return table_of([label for label, kept in zip(labels, keep.tolist(), strict=True) if kept],
                    values[keep]), left_out


def _recommendable(values: np.ndarray, n_out: int, seen) -> np.ndarray:
    """Flags (uint8) of the ``n_out`` output units that may be recommended: units without a
    label in the output index (``values``) are padding, and units never a training target
    (``seen``: ``target_counts_``, None where not recorded) are left out too."""
    allowed = np.zeros(n_out, dtype=np.uint8)
    allowed[values] = 1
    if seen is not None:  # (read_network checked its length)
        allowed &= (seen > 0).astype(np.uint8)
    return allowed


def write_records(out: TextIO, labels: list[str], items: np.ndarray, scores: np.ndarray,
                  item_labels: EncodedLabels, score_format: str = "4.3f") -> None:
    """DSSTNE's record lines (spec 8.5): ``NAME<TAB>item,score:...:`` (every item ends with ':')."""
    out.write(format_records(labels, items, scores, item_labels, score_format))


def predict_file(predictor: Predictor, input_path, out: TextIO | None, *, k: int,
                 filter_path=None, multiply: bool = False, batch_size: int = 1024,
                 score_format: str = "4.3f", comm: Comm | None = None,
                 on_start: Callable[[int], None] | None = None,
                 on_written: Callable[[int], None] | None = None) -> PredictReport:
    """Score every sample of ``input_path`` and write its top-k record to ``out``.

    With a ``comm`` of several MPI ranks, each rank scores its share of the batches and rank 0
    writes every record to ``out`` in input order (the other ranks pass None); any rank's
    failure raises the same ``ParallelError`` on all of them.

    ``on_start(samples)`` is called once the input is read, and ``on_written(records)`` after
    each batch of records is written (under MPI, by rank 0, which writes them all): a progress
    bar's hooks.
    """
    on_start, on_written = on_start or _nothing, on_written or _nothing
    options = dict(k=k, filter_path=filter_path, multiply=multiply, batch_size=batch_size,
                   score_format=score_format, on_start=on_start, on_written=on_written)
    if predictor.split:
        return _predict_split(predictor, input_path, out, **options)
    if comm is not None and comm.size > 1:
        return _predict_ranks(predictor, input_path, out, comm, **options)
    records, filter_csr = _read_inputs(predictor, input_path, filter_path, multiply)
    on_start(len(records.labels))
    for lo, items, scores in predictor.recommend(records, k, filter_csr=filter_csr,
                                                 multiply=multiply, batch_size=batch_size):
        hi = lo + len(items)
        write_records(out, records.labels[lo:hi], items, scores, predictor.item_labels(),
                      score_format)
        on_written(hi - lo)
    return _report(records, filter_csr)


def _nothing(_: int) -> None:
    pass


def _predict_ranks(predictor: Predictor, input_path, out: TextIO | None, comm: Comm, *, k: int,
                   filter_path, multiply: bool, batch_size: int, score_format: str,
                   on_start: Callable[[int], None],
                   on_written: Callable[[int], None]) -> PredictReport:
    """``predict_file`` on MPI ranks; every rank reads the whole input (it is small).

    The batches are exactly those of a single process (rows ``[j*b, (j+1)*b)``), shared out one
    per rank per round, so every sample is scored with the same arithmetic as in a single run
    and the output is the same byte for byte, and rank 0 holds one round of records at a time.
    """
    with all_or_none(comm):
        records, filter_csr = _read_inputs(predictor, input_path, filter_path, multiply)
    _check_same_input(comm, records, filter_csr)
    on_start(len(records.labels))

    def produce(lo: int, hi: int) -> tuple[int, str]:
        sub, sub_filter = _rows(records, filter_csr, lo, hi)
        ((_, items, scores),) = predictor.recommend(sub, k, filter_csr=sub_filter,
                                                    multiply=multiply, batch_size=hi - lo)
        text = io.StringIO()
        write_records(text, sub.labels, items, scores, predictor.item_labels(), score_format)
        return hi - lo, text.getvalue()

    def consume(result: tuple[int, str]) -> None:  # (rank 0 alone consumes, and has ``out``)
        records_in, text = result
        out.write(text)
        on_written(records_in)

    gather_in_order(comm, len(records.labels), batch_size, produce, consume)
    return _report(records, filter_csr)


def _predict_split(predictor: Predictor, input_path, out: TextIO | None, *, k: int, filter_path,
                   multiply: bool, batch_size: int, score_format: str,
                   on_start: Callable[[int], None],
                   on_written: Callable[[int], None]) -> PredictReport:
    """``predict_file`` with the layers split across MPI ranks (``Predictor(comm=)``).

    Every rank reads the whole input and takes every batch through its part of the network
    (the forward pass's collectives are training's); each finds the k best of its own units,
    and rank 0 merges the ranks' k best into the k best of all, as one process ranks them
    (best first, equal scores by item number), and writes the records. A failure while
    writing stops every rank with the same ``ParallelError``; a failure while scoring, where
    the others wait in a collective, stops the job (the command line's ``Comm.abort``).
    """
    comm = predictor.net.comm
    with all_or_none(comm):
        records, filter_csr = _read_inputs(predictor, input_path, filter_path, multiply)
    _check_same_input(comm, records, filter_csr)
    on_start(len(records.labels))

    def write(lo: int, parts: list) -> None:
        items, best = merge_top_k([p[0] for p in parts], [p[1] for p in parts], k)
        hi = lo + len(items)
        write_records(out, records.labels[lo:hi], items, best, predictor.item_labels(),
                      score_format)
        on_written(hi - lo)

    with stop_together(comm) as stops:
        for lo, items, best in predictor.recommend(records, k, filter_csr=filter_csr,
                                                   multiply=multiply, batch_size=batch_size):
            end_round(comm, stops, comm.gather((items, best, stops.pending())),
                      functools.partial(write, lo))
    return _report(records, filter_csr)


def merge_top_k(items: list[np.ndarray], scores: list[np.ndarray], k: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """The k best of each row over several top-k answers of disjoint item ranges (the ranks'),
    ranked as ``top_k`` ranks: best first, equal scores by item number, NaN below every
    number, and the missing slots (item -1, score -inf) after all of them."""
    all_items, all_scores = np.concatenate(items, axis=1), np.concatenate(scores, axis=1)
    # (lexsort sorts by its last key first, along each row; -NaN is NaN, and NaN sorts last)
    order = np.lexsort((all_items, -all_scores, all_items < 0), axis=-1)[:, :k]
    return (np.take_along_axis(all_items, order, axis=1),
            np.take_along_axis(all_scores, order, axis=1))


def _read_inputs(predictor: Predictor, input_path, filter_path, multiply: bool):
    """The samples of ``input_path`` and the filter as CSR rows aligned with them (None
    without one); the filter's values are kept only to ``multiply`` by them."""
    records = predictor.read_input(input_path)
    filter_csr = None if filter_path is None else predictor.read_filter(
        filter_path, records, input_path=input_path, values=multiply)
    return records, filter_csr


def _rows(records: Records, filter_csr, lo: int, hi: int):
    """Rows ``[lo, hi)`` of the input and of the filter, as their own CSR arrays."""
    ptr = records.indptr
    sub = Records(labels=records.labels[lo:hi], indptr=ptr[lo:hi + 1] - ptr[lo],
                  indices=records.indices[ptr[lo]:ptr[hi]])
    return sub, None if filter_csr is None else _csr_rows(filter_csr, lo, hi)


def _csr_rows(csr: tuple, lo: int, hi: int) -> tuple:
    """Rows ``[lo, hi)`` of the CSR triple ``csr``, as their own CSR arrays."""
    ptr, idx, val = csr
    return ptr[lo:hi + 1] - ptr[lo], idx[ptr[lo]:ptr[hi]], val[ptr[lo]:ptr[hi]]


def _check_same_input(comm: Comm, records: Records, filter_csr) -> None:
    """Ranks that read different inputs would share out different batches: stop them all."""
    mine = (len(records.labels), len(records.indices),
            0 if filter_csr is None else len(filter_csr[1]))
    counts = comm.allgather(mine)
    for rank, theirs in enumerate(counts):
        if theirs != counts[0]:
            raise ParallelError(
                f"rank {rank} of {comm.size} read {theirs[0]:,} samples with {theirs[1]:,} "
                f"features and {theirs[2]:,} filter entries, but rank 0 read {counts[0][0]:,} "
                f"with {counts[0][1]:,} and {counts[0][2]:,}; every rank must read the same input "
                "and filter files (paths on a file system that all the nodes share).")


def _report(records: Records, filter_csr) -> PredictReport:
    lengths = np.diff(records.indptr)
    return PredictReport(samples=len(records.labels), dropped=records.dropped,
                         lines_with_drops=records.lines_with_drops,
                         no_known_feature=int(np.sum(lengths == 0)),
                         filtered=0 if filter_csr is None else len(filter_csr[1]))
