"""``generate-netcdf``: DSSTNE text records to a dataset NetCDF file plus index files.

Follows DSSTNE's generateNetCDF (spec 1): features and samples are numbered in order of
first appearance, an existing feature index is reused (unknown features dropped) unless ``-c``
creates or ``-m`` merges, rows are the samples present in the input sorted by sample index
(quirk 10.1), and ``width`` is the feature count rounded up to 128 (quirk 10.2). All outputs
are written to temporary files and renamed together at the end.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from destiny.errors import DataFormatError, DestinyError, starts_as_netcdf
from destiny.io import atomic
from destiny.io.dataset import SparseDataset, round_up_width, write_dataset
from destiny.io.index import (LabelTable, check_appendable, index_digest, load_table, read_index,
                              rows_digest, write_index)
from destiny.io.netcdf_names import check_netcdf_names
from destiny.io.text import input_files, read_records
from destiny.sparse import repeated_entries, take_rows
from destiny.wording import abridged, counted


@dataclass
class GenerateReport:
    """What ``generate_netcdf`` did, for the command line to report."""

    samples: int
    entries: int
    width: int
    features: int
    new_features: int
    new_samples: int
    dropped: int
    lines_with_drops: int
    written: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    waited: float = 0.0  # seconds spent waiting for another run's lock


def generate_netcdf(
    *,
    input_path,
    output,
    dataset_name: str,
    feature_index,
    sample_index,
    create: bool = False,
    merge: bool = False,
    analog: bool = False,
    strict: bool = False,
    progress: Callable[[int], None] | None = None,
    on_wait: Callable[[str], None] = lambda line: None,
) -> GenerateReport:
    """Convert DSSTNE text (a file, or a directory of files) into a dataset NetCDF file.

    ``create`` (``-c``) starts a fresh feature index, ``merge`` (``-m``) appends new features
    to the existing one; with neither, ``feature_index`` must exist and unknown features are
    dropped (or raise with ``strict``). The sample index is read when it exists and written
    when new samples appear. ``analog`` keeps each feature's value (0.0 without one).
    Another run writing one of the outputs is waited for; ``on_wait`` hears of it.
    """
    if create and merge:
        raise DestinyError("-c (create a new feature index) and -m (merge into the existing "
                           "one) contradict each other; give one of them.")
    if not dataset_name:
        raise DestinyError("the dataset name (-d) is empty; give the DataSet name of the "
                           "network layer that will read this file.")
    dataset_out = (output, "output NetCDF file (-o)")
    features_out = (feature_index, "feature index (-f)")
    samples_out = (sample_index, "sample index (-s)")
    check_netcdf_names(outputs=[dataset_out], names=[(dataset_name, "dataset name (-d)")])
    atomic.check_outputs((dataset_out, features_out, samples_out),
                         inputs=[(input_path, "input text (-i)")])
    if create:
        _check_not_netcdf(feature_index)
    files = input_files(input_path)
    # The index files are read, extended and written back, so runs sharing one (make -j
    # converting the input and the output data with one -s, as DSSTNE's example does) would
    # each number new entries from what it read, and the later would silently drop the
    # earlier's. Runs sharing an output take turns instead; a feature index only read (no
    # -c or -m) is not an output, and runs sharing it go on at once.
    written = (dataset_out, samples_out) + ((features_out,) if create or merge else ())
    waits: list[float] = []

    def waiting(line: str) -> None:
        waits.append(time.perf_counter())
        on_wait(line)

    with atomic.exclusive_all(written, on_wait=waiting):
        locked = time.perf_counter()
        report = _convert(files, output, dataset_name, feature_index, sample_index,
                          create=create, update=create or merge, analog=analog, strict=strict,
                          progress=progress)
    report.waited = locked - waits[0] if waits else 0.0
    return report


def _convert(files, output, dataset_name, feature_index, sample_index, *, create, update, analog,
             strict, progress) -> GenerateReport:
    if create:
        features = LabelTable()
    elif os.path.exists(feature_index):
        features = load_table(feature_index)
    else:
        raise DataFormatError(feature_index, "the feature index does not exist. Use -c to create "
                              "it from this input, or give the index written by an earlier run.")
    samples = _load_samples(sample_index)

    records = read_records(files, features, update=update, strict=strict, keep_values=analog,
                           progress=progress)
    # (the feature index is complete once the records are read: its entries, loaded first)
    feature_labels, feature_values = features.labels(), features.values()
    check_appendable(feature_index, feature_labels, feature_values, features.loaded, "feature",
                     "Renumber the index file to 0..n-1, or rebuild it with -c.")
    records.check_unique()  # (DSSTNE kept a repeated sample's last line silently)
    sample_ids, new_samples = _number_samples(records.labels, samples)
    if new_samples:  # (the sample index grown: its entries, the loaded ones first)
        grown = (list(samples) + new_samples, np.array(
            [*samples.values(), *range(len(samples), len(samples) + len(new_samples))]))
        # (no "-c" in the remedy: -c builds a feature index only)
        check_appendable(sample_index, *grown, len(samples), "sample")

    width = round_up_width(len(features))
    if len(records.indices) and int(records.indices.max()) >= width:
        raise DataFormatError(feature_index, f"holds index {int(records.indices.max())}, but it "
                              f"has only {len(features)} entries, so the dataset width is {width} "
                              "(entries rounded up to 128, as DSSTNE does). Renumber the index to "
                              "0..n-1, or rebuild it with -c.")
    order = np.argsort(sample_ids, kind="stable")
    indptr, indices, values = records.indptr, records.indices, records.values
    if not np.array_equal(order, np.arange(len(order))):
        indptr, indices, values = take_rows(indptr, indices, values, order)
    dataset = SparseDataset(name=dataset_name, width=width, indptr=indptr, indices=indices,
                            values=values)
    if dataset.nnz == 0 and update:  # (-c, -m: every feature read went into the index)
        raise DataFormatError(", ".join(files), "no sample lists a feature, so the dataset "
                              "would be empty, which DSSTNE's loader refuses. Each line must be "
                              "'NAME<TAB>feature[,value]:feature[,value]...'.")
    if dataset.nnz == 0:
        raise DataFormatError(", ".join(files), "no sample has a feature that is in the feature "
                              "index, so the dataset would be empty, which DSSTNE's loader "
                              "refuses. Check that -f names the index built for this data.")

    report = GenerateReport(
        samples=dataset.rows, entries=dataset.nnz, width=width, features=len(features),
        new_features=len(features) - features.loaded if update else 0,
        new_samples=len(new_samples), dropped=records.dropped,
        lines_with_drops=records.lines_with_drops)
    rows, repeats = repeated_entries(indptr, indices, width)
    if repeats:
        report.notes.append(
            f"{counted(rows, 'sample')} {'lists' if rows == 1 else 'list'} a feature more than "
            f"once ({counted(repeats, 'repeat')}); each is kept "
            "and counts again in training, as in DSSTNE (quirk 10.5). Duplicate ratings in the "
            "raw data are the usual cause: remove them upstream if they are not meant.")
    for what, labels in (("feature", feature_labels[features.loaded:] if update else []),
                         ("sample", new_samples)):
        spaced = [label for label in labels if label != label.strip()]
        if spaced:  # (a refusal would break DSSTNE's files, which kept them: a note)
            shown = ", ".join(abridged(label) for label in spaced[:3])
            report.notes.append(
                f"{counted(len(spaced), f'new {what} label')} "
                f"{'has' if len(spaced) == 1 else 'have'} spaces at the start or end "
                f"({shown}{', ...' if len(spaced) > 3 else ''}); labels are kept as written, "
                f"as in DSSTNE, so 'a ' and 'a' are two {what}s. Remove the spaces upstream if "
                "they are not meant.")
    missing = len(samples) - (len(records.labels) - len(new_samples))
    if missing > 0:
        report.notes.append(
            f"the sample index {sample_index} holds {counted(missing, 'sample')} that "
            f"{'is' if missing == 1 else 'are'} not in this input; rows follow the samples "
            "present, so datasets built from different inputs line up only if they hold the "
            "same samples (DSSTNE quirk, spec 1.4).")

    # The indexes are renamed into place before the dataset. A run killed between the renames
    # (SIGKILL, a power cut: nothing runs to undo the first) then leaves the old dataset, which
    # make sees as older than its text and converts again; and beside it indexes that only grew
    # (check_appendable), so still number its rows and features, or with -c a new feature
    # index that predict refuses for a network trained on it (by the digest it recorded). The
    # other order left a new dataset beside indexes without its new entries, and make took it
    # as up to date.
    with atomic.atomic_outputs() as out:
        if create or report.new_features:
            write_index(out.path(feature_index), feature_labels, feature_values)
            report.written.append(str(feature_index))
        if new_samples:
            write_index(out.path(sample_index), *grown)
            report.written.append(str(sample_index))
        write_dataset(out.path(output), dataset,
                      index=(len(feature_labels),
                             index_digest(feature_labels, feature_values, len(feature_labels))),
                      rows=rows_digest([records.labels[i] for i in order.tolist()]))
        report.written.insert(0, str(output))  # (the dataset named first in the note)
    # An index output left as it was takes the dataset's time, for make: a rule that lists it
    # as a target of the text would otherwise run again on every make (it stayed older than
    # the text), and a rule of the other dataset that reads it must still see it no newer
    # than that dataset (DSSTNE's two conversions sharing -s).
    kept = [sample_index] if not new_samples else []
    if update and not (create or report.new_features):  # (-m, nothing new: not written)
        kept.append(feature_index)
    with contextlib.suppress(OSError):  # (only make's view of them is at stake)
        written = os.stat(output).st_mtime_ns
        for path in kept:
            os.utime(path, ns=(os.stat(path).st_atime_ns, written))
    return report


def _check_not_netcdf(feature_index) -> None:
    """Refuse -c where the -f path is a NetCDF file (a dataset or a trained network, -f and -o
    swapped): -c does not read -f, and would replace that file with the new index."""
    if starts_as_netcdf(feature_index):
        raise DataFormatError(feature_index, "is a NetCDF file (a dataset written by "
                              "generate-netcdf, or a network written by train), and -c would "
                              "replace it with the new feature index; -f names the feature "
                              "index (text), -o the dataset. Check that -f and -o are not "
                              "swapped; nothing was written.")


def _load_samples(sample_index) -> dict[str, int]:
    if not os.path.exists(sample_index):
        return {}
    labels, values = read_index(sample_index)
    return dict(zip(labels, values.tolist(), strict=True))


def _number_samples(labels: list[str], samples: dict[str, int]):
    """Sample index of every row; new labels get ``len(index)`` in order (spec 1.3), which
    ``check_appendable`` checks are free."""
    ids = np.empty(len(labels), dtype=np.int64)
    new: list[str] = []
    for row, label in enumerate(labels):
        sample = samples.get(label)
        if sample is None:
            sample = len(samples) + len(new)
            new.append(label)
        ids[row] = sample
    return ids, new
