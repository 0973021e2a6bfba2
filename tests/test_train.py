"""The engine and ``train``: backends agree, DSSTNE's SGD arithmetic, files, resume, NaN guard."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

from destiny.cli.train import train
from destiny.io.dataset import SparseDataset, write_dataset
from destiny.io.network_file import read_network
from destiny.kernels import get_backend
from destiny.netdef import LayerKind, parse_netdef
from destiny.netdef_fields import as_float32 as f32
from destiny.network import Batch, Network
from destiny.train import TrainConfig, TrainData, TrainState, train_epochs

from . import nctypes, without_root

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent


def small_netdef(**top):
    d = {"ErrorFunction": "ScaledMarginalCrossEntropy", "ShuffleIndices": True,
         "ScaledMarginalCrossEntropy": {"oneTarget": 1.0, "zeroTarget": 0.0, "oneScale": 1.0,
                                        "zeroScale": 1.0},
         "Layers": [
             {"Name": "Input", "Kind": "Input", "N": "auto", "DataSet": "gl_input", "Sparse": True},
             {"Name": "Hidden", "Kind": "Hidden", "N": 16, "Activation": "Sigmoid",
              "pDropout": 0.2},
             {"Name": "Output", "Kind": "Output", "N": "auto", "DataSet": "gl_output",
              "Activation": "Sigmoid"}]}
    d.update(top)
    return d


def random_dataset(name, rows=300, width=128, items=100, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 9, rows)
    indptr = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    indices = np.concatenate([rng.choice(items, n, replace=False) for n in lengths])
    return SparseDataset(name=name, width=width, indptr=indptr, indices=indices.astype(np.int32))


@pytest.fixture
def files(tmp_path):
    ds = random_dataset("x")
    for name in ("gl_input", "gl_output"):
        write_dataset(tmp_path / f"{name}.nc", SparseDataset(name, ds.width, ds.indptr, ds.indices))
    (tmp_path / "net.json").write_text(json.dumps(small_netdef()))
    return tmp_path


def run_train(tmp, *args, network="net.nc"):
    argv = ["-c", str(tmp / "net.json"), "-i", str(tmp / "gl_input.nc"),
            "-o", str(tmp / "gl_output.nc"), "-n", str(tmp / network), *args]
    return CliRunner().invoke(train, argv)


def weights_of(path):
    nf = read_network(path)
    return [nf.weights[k] for k in sorted(nf.weights)] + [nf.biases[k] for k in sorted(nf.biases)]


def test_backends_agree_over_training(files):
    from destiny.io.dataset import read_dataset

    datasets = {n: read_dataset(files / f"{n}.nc") for n in ("gl_input", "gl_output")}
    results = []
    for backend in ("reference", "cpu"):
        nd = parse_netdef(small_netdef()).resolve({"gl_input": 128, "gl_output": 128})
        net = Network(nd, get_backend(backend))
        net.initialize(7)
        cfg = TrainConfig(batch=64, epochs=3, optimizer="adam", alpha=0.01, lam=1e-4,
                          mu=0.9, mu1=0.999, seed=3, shuffle=True)
        net.init_optimizer(cfg.optimizer_config())
        train_epochs(net, TrainData(net, datasets), cfg, TrainState())
        results.append([c.W.copy() for c in net.connections]
                       + [c.b.copy() for c in net.connections])
    for ref, cpu in zip(*results, strict=True):
        np.testing.assert_allclose(cpu, ref, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("ignore_zero", [False, True], ids=["zeros", "ignore_zero"])
def test_sparse_ignore_zero_targets_leave_unlisted_units_alone(files, ignore_zero):
    """Output data with DSSTNE's SparseIgnoreZero bit (spec 2.3, 5.5): only listed entries
    are targets, so with plain SGD and no decay the weights into units no example lists
    (items 100 to 127 of the 128) never move; without the bit they learn to stay off."""
    from destiny.io.dataset import read_dataset

    ds = random_dataset("gl_output")
    write_dataset(files / "gl_output.nc", SparseDataset("gl_output", ds.width, ds.indptr,
                                                        ds.indices, ignore_zero=ignore_zero))
    assert read_dataset(files / "gl_output.nc").ignore_zero is ignore_zero
    d = small_netdef()
    d["Layers"][1]["pDropout"] = 0.0
    (files / "net.json").write_text(json.dumps(d))
    result = run_train(files, "-e", "2", "-b", "64", "--optimizer", "sgd", "-lambda", "0",
                       "--initial-network", str(files / "init.nc"))
    assert result.exit_code == 0, result.output
    before, after = read_network(files / "init.nc"), read_network(files / "net.nc")
    unlisted = slice(100, 128)
    same = [np.array_equal(before.weights[1][:, unlisted], after.weights[1][:, unlisted]),
            np.array_equal(before.biases[1][unlisted], after.biases[1][unlisted])]
    assert same == [ignore_zero, ignore_zero]
    assert not np.array_equal(before.weights[1][:, :100], after.weights[1][:, :100])


def test_batch_views_follow_the_buffers_when_a_larger_batch_grows_them(files):
    """The network slices its buffers once per batch size; a larger batch reallocates them,
    and a smaller batch after it must read the new buffers, not the old ones."""
    from destiny.io.dataset import read_dataset

    datasets = {n: read_dataset(files / f"{n}.nc") for n in ("gl_input", "gl_output")}
    nd = parse_netdef(small_netdef()).resolve({"gl_input": 128, "gl_output": 128})

    def output_of(net, data, rows):
        net.forward(data.batch(np.asarray(rows)))
        return net.to_host(net.activation("Output", len(rows))).copy()

    net = Network(nd, get_backend("cpu"))
    net.initialize(7)
    data = TrainData(net, datasets)
    first = output_of(net, data, range(5))
    output_of(net, data, range(20, 29))  # grows the buffers
    again = output_of(net, data, range(40, 45))
    fresh = Network(nd, get_backend("cpu"))
    fresh.initialize(7)
    np.testing.assert_array_equal(first, output_of(fresh, TrainData(fresh, datasets), range(5)))
    np.testing.assert_array_equal(again, output_of(fresh, TrainData(fresh, datasets),
                                                   range(40, 45)))
    assert not np.array_equal(first, again)
    # and the views are of the new buffers (the old ones are free to go)
    assert np.shares_memory(net.activation("Output", 5), net._buffers["Output"]["Z"])


# What training small_netdef on ``files`` (300 examples, -b 1024) with Adam certainly writes,
# float32: the weights 128 x 16 and 16 x 128, the gradient of the second, and of the first, fed
# by the sparse input, the rows of the 100 features the data lists (each batch writes its
# features' rows), Adam's two state arrays of both, the biases with their gradients and states
# (16 + 128, four times), a batch's activations and deltas (300 x (16 + 128), twice, and the
# hidden layer's dA, 300 x 16). (destiny/memory.py)
SMALL_NETDEF_BYTES = (2 * 128 * 16 + 16 * 128 + 100 * 16 + 2 * 2 * 128 * 16 + 4 * (16 + 128)
                      + 2 * 300 * (16 + 128) + 300 * 16) * 4


def test_a_network_larger_than_the_memory_free_is_refused_before_training(files, monkeypatch):
    """Where the weights, gradients, optimizer state and a batch need more than the memory
    free (patched: a real shortage would take the machine's memory), train stops before
    allocating them, with one paragraph naming the layer and the bytes, exit code 1 and no
    output; the same figure as needed trains. (Without the optimizer state, a network that
    fitted was ended by the OOM killer at its first step: exit status 137, no message; seen in
    a 3 GiB cgroup, with Adam.)"""
    import destiny.memory

    free = SMALL_NETDEF_BYTES - 1
    monkeypatch.setattr(destiny.memory, "available_memory", lambda: (free, "a test's figure"))
    result = run_train(files, "-e", "1")
    assert result.exit_code == 1, result.output
    assert result.output == (
        "Error: out of memory: training needs at least 420.8 KiB of this machine's memory, for "
        "the network's weights, their gradients and optimizer state, and a batch's activations "
        "and deltas, and 420.7 KiB is free (a test's figure); 334.0 KiB of it is for layer "
        "'Output', of 128 units (its weights, to and from narrower layers, and its activations "
        "and deltas). Nothing was trained, and no output was replaced. Use fewer units, split the "
        "layers over several machines with mpiexec (the README's section on it), or run on a "
        "machine with more memory.\n")
    assert sorted(os.listdir(files)) == ["gl_input.nc", "gl_output.nc", "net.json"]
    free = SMALL_NETDEF_BYTES
    result = run_train(files, "-e", "1")
    assert result.exit_code == 0, result.output
    assert (files / "net.nc").exists()


@pytest.mark.parametrize("optimizer, lam", [("sgd", 1e-4), ("rmsprop", 1e-4), ("adam", 0.0),
                                         ("rmsprop", 0.0)])
def test_the_memory_checks_figure_is_the_arrays_training_writes(files, monkeypatch, optimizer,
                                                                lam):
    """memory.training_bytes, counted from the layout and the data, against the arrays the
    network holds once two epochs have run (a two-hidden-layer network with a skip, so that a
    layer has two sources): the weights, the gradients of matrices a dense layer feeds, the
    optimizer state, the biases with theirs, each layer's buffers a batch writes (z and its
    delta, and a hidden layer's dA; not its "tmp", which only a layer fed twice writes, nor
    dropout's), and the rows of the sparse input's gradient that the batches write: every
    feature the data lists, with weight decay or Adam, and no figure for RMSProp without decay,
    whose first batch alone writes some (memory.listed_features); and, apart
    (memory.largest_temporary), the largest temporary a batch's products make."""
    from destiny.io.dataset import read_dataset
    from destiny.memory import largest_temporary, listed_features, training_bytes
    from destiny.network import rows_only_updates

    datasets = {n: read_dataset(files / f"{n}.nc") for n in ("gl_input", "gl_output")}
    d = small_netdef()
    d["Layers"].insert(2, {"Name": "Hidden2", "Kind": "Hidden", "N": 24, "Activation": "Tanh",
                           "Source": ["Hidden"]})
    d["Layers"][-1]["Source"] = ["Hidden2", "Hidden"]
    nd = parse_netdef(d).resolve({"gl_input": 128, "gl_output": 128})
    net = Network(nd, get_backend("cpu"))
    data = TrainData(net, datasets)
    net.initialize(3)
    batch = 64
    cfg = TrainConfig(**{**vars(TrainConfig()), "batch": batch, "epochs": 2,
                         "optimizer": optimizer, "lam": lam})
    net.init_optimizer(cfg.optimizer_config())
    kb, rows, temporaries = net.backend, set(), [0]
    gemm, sparse_grad = kb.gemm, kb.sparse_fc_weight_grad

    def counted_gemm(out, a, b, *args, alpha=1.0, **kw):
        if alpha != 1.0:  # (the cpu's product scales a copy of its smaller operand)
            temporaries[0] = max(temporaries[0], min(a.nbytes, b.nbytes))
        return gemm(out, a, b, *args, alpha=alpha, **kw)

    def written_rows(dW, indptr, indices, *args):
        rows.update(np.unique(indices).tolist())
        return sparse_grad(dW, indptr, indices, *args)

    monkeypatch.setattr(kb, "gemm", counted_gemm)
    monkeypatch.setattr(kb, "sparse_fc_weight_grad", written_rows)
    train_epochs(net, data, cfg, TrainState())
    listed = (None if rows_only_updates(cfg.optimizer_config())
              else listed_features(net, data.inputs))
    if listed is None:
        assert 0 < len(rows) < 100  # (the first batch's; the data lists 100 features)
    else:
        assert rows == set(listed["Input"].tolist()) and len(rows) == 100
    written = 0
    for c in net.connections:
        if not c.shared:
            written += c.W.nbytes + sum(a.nbytes for a in c.state)
            if c.source.kind != LayerKind.Input:
                written += c.G.nbytes
            elif listed is not None:
                written += len(rows) * c.G[0].nbytes
        written += c.b.nbytes + c.gb.nbytes + sum(a.nbytes for a in c.bias_state)
    for name, layer in net.layers.items():
        if layer.kind != LayerKind.Input:
            kept = ["Z", "dZ"] + (["dA"] if layer.kind == LayerKind.Hidden else [])
            written += sum(net._buffers[name][k][:batch].nbytes for k in kept)
    states = kb.state_arrays_needed(cfg.optimizer_config().mode)

    assert sum(training_bytes(net, 0, batch_rows=batch, states=states,
                              listed=listed).values()) == written
    assert temporaries[0] == batch * 24 * 4  # (Hidden2's, 24 units: the widest but Output)
    assert largest_temporary(net, 0, batch_rows=batch) == (temporaries[0], "Output")


@pytest.mark.parametrize("optimizer, lam", [("sgd", 1e-4), ("rmsprop", 0.0)])
def test_a_tied_autoencoders_input_matrix_counts_its_whole_gradient(files, monkeypatch,
                                                                   optimizer, lam):
    """A sparse input's matrix that a dense layer's product uses too (a tied autoencoder: the
    Output layer shares Input -> Hidden, transposed) has its whole gradient written by that
    product every batch: memory.training_bytes counted only the rows of the features the data
    lists, or none for a lazy optimizer (which then updates the matrix densely)."""
    from destiny.io.dataset import read_dataset
    from destiny.memory import listed_features, training_bytes
    from destiny.network import rows_only_updates

    datasets = {n: read_dataset(files / f"{n}.nc") for n in ("gl_input", "gl_output")}
    d = small_netdef()
    d["Layers"][-1]["SharedWeights"] = {"SourceInputLayer": "Input", "SourceOutputLayer": "Hidden",
                                        "InputLayer": "Hidden", "Transposed": True}
    net = Network(parse_netdef(d).resolve({"gl_input": 128, "gl_output": 128}),
                  get_backend("cpu"))
    encoder, decoder = net.connections
    assert decoder.owner is encoder
    data = TrainData(net, datasets)
    net.initialize(3)
    cfg = TrainConfig(**{**vars(TrainConfig()), "batch": 64, "epochs": 1,
                         "optimizer": optimizer, "lam": lam})
    net.init_optimizer(cfg.optimizer_config())
    kb, whole = net.backend, []
    gemm = kb.gemm

    def recorded(out, *args, **kw):
        whole.append(np.shares_memory(out, encoder.G) and out.size == encoder.G.size)
        return gemm(out, *args, **kw)

    monkeypatch.setattr(kb, "gemm", recorded)
    train_epochs(net, data, cfg, TrainState())
    assert any(whole)  # (a product wrote all of the encoder's gradient)
    listed = (None if rows_only_updates(cfg.optimizer_config())
              else listed_features(net, data.inputs))
    states = kb.state_arrays_needed(cfg.optimizer_config().mode)
    figure = training_bytes(net, 0, batch_rows=64, states=states, listed=listed)
    assert figure["Input"] == (2 + states) * encoder.W.nbytes  # (weights, gradient, state)


def test_the_features_listed_are_the_units_of_the_entries_this_process_holds():
    """memory.listed_features: the features a sparse input's data lists at least once, as the
    layer's unit indexes (a rank's shard holds its columns re-based: ``offset`` added back);
    none for a denoised input (each epoch drops entries at random) or one without entries."""
    from destiny.memory import listed_features

    nd = parse_netdef(small_netdef()).resolve({"gl_input": 128, "gl_output": 128})
    net = Network(nd, get_backend("cpu"))
    indptr = np.array([0, 3, 5])
    shard = SparseDataset("gl_input", 128, indptr, np.array([7, 2, 7, 0, 9], np.int32),
                          columns=(40, 60))
    np.testing.assert_array_equal(listed_features(net, {"Input": shard})["Input"],
                                  [40, 42, 47, 49])
    empty = SparseDataset("gl_input", 128, np.zeros(3, np.int64), np.zeros(0, np.int32))
    assert listed_features(net, {"Input": empty}) == {}
    noisy = Network(parse_netdef(small_netdef(Denoising={"p": 0.3})).resolve(
        {"gl_input": 128, "gl_output": 128}), get_backend("cpu"))
    assert listed_features(noisy, {"Input": shard}) == {}


def test_an_input_and_an_output_with_the_same_entries_are_held_and_gathered_once(files):
    """An autoencoder's two datasets usually list the same entries: one copy on the backend,
    one gather per batch. Datasets that differ anywhere (an entry, a value) stay apart, and a
    denoised input (its own entries each epoch) is gathered on its own."""
    from destiny.io.dataset import read_dataset

    datasets = {n: read_dataset(files / f"{n}.nc") for n in ("gl_input", "gl_output")}
    nd = parse_netdef(small_netdef()).resolve({"gl_input": 128, "gl_output": 128})
    net = Network(nd, get_backend("cpu"))
    data = TrainData(net, datasets)
    batch = data.batch(np.arange(10, 20))
    assert data._held["Input"] is data._held["Output"]
    assert batch.inputs["Input"] is batch.targets["Output"]

    same = datasets["gl_input"]
    ones = SparseDataset("gl_input", same.width, same.indptr, same.indices,
                         values=np.ones(same.nnz, np.float32))
    for inp, changed in ((same, SparseDataset("gl_output", same.width, same.indptr,
                                              same.indices + 1)),
                         (same, SparseDataset("gl_output", same.width, same.indptr,
                                              same.indices, values=ones.values)),
                         (ones, SparseDataset("gl_output", same.width, same.indptr,
                                              same.indices, values=2 * ones.values))):
        apart = TrainData(net, {"gl_input": inp, "gl_output": changed})
        batch = apart.batch(np.arange(10, 20))
        assert apart._held["Input"] is not apart._held["Output"]
        np.testing.assert_array_equal(batch.targets["Output"][1], changed.indices[
            same.indptr[10]:same.indptr[20]])
        if changed.values is not None:
            np.testing.assert_array_equal(batch.targets["Output"][2], changed.values[
                same.indptr[10]:same.indptr[20]])

    data.set_denoised({"Input": (same.indptr, same.indices, None)})
    batch = data.batch(np.arange(10, 20))
    assert batch.inputs["Input"] is not batch.targets["Output"]
    for got, expected in zip(batch.inputs["Input"], batch.targets["Output"], strict=True):
        np.testing.assert_array_equal(got, expected)


def _streaming_case(seed=5):
    """A network reading an analog input with denoising and a target dataset of other
    entries, and its two datasets (the cases a chunk must carry: values, two matrices, an
    epoch's denoised copy)."""
    rng = np.random.default_rng(seed)
    inp = random_dataset("gl_input", rows=203, seed=seed)
    inp = SparseDataset("gl_input", inp.width, inp.indptr, inp.indices,
                        values=rng.random(inp.nnz).astype(np.float32))
    out = random_dataset("gl_output", rows=203, seed=seed + 1)
    nd = parse_netdef(small_netdef(Denoising={"p": 0.3})).resolve(
        {"gl_input": 128, "gl_output": 128})
    return nd, {"gl_input": inp, "gl_output": out}


def _train_streaming(budget, epochs=2):
    nd, datasets = _streaming_case()
    net = Network(nd, get_backend("cpu"))
    net.initialize(7)
    cfg = TrainConfig(**{**vars(TrainConfig()), "batch": 16, "epochs": epochs,
                         "optimizer": "adam", "alpha": 0.01, "lam": 0.0, "seed": 3,
                         "shuffle": True})
    net.init_optimizer(cfg.optimizer_config())
    data = TrainData(net, datasets, device_budget=budget)
    state = train_epochs(net, data, cfg, TrainState())
    return net, data, state


@pytest.mark.parametrize("budget", [1, 3000, 8000])
def test_streamed_data_trains_exactly_as_data_held_whole(budget):
    """Data larger than the device's budget goes to it a chunk of whole batches at a time, in
    the epoch's order: the same batches, so the same weights, bit for bit (a budget below one
    batch makes chunks of one batch)."""
    whole, held, _ = _train_streaming(None)
    streamed, data, state = _train_streaming(budget)
    assert not held.streamed and data.streamed and state.epoch == 2
    order = np.random.default_rng(0).permutation(data.examples)
    assert len(data.chunks(order, 16)) > 1
    for a, b in zip(_parameters(streamed), _parameters(whole), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("budget", [1, 2500, 9000])
def test_a_chunk_is_whole_batches_within_the_budget(budget):
    """Chunks cover the epoch's order in turn, start and end on batch boundaries (the last may
    be short), and take at most the budget on the backend, unless one batch alone is more."""
    nd, datasets = _streaming_case()
    net = Network(nd, get_backend("cpu"))
    data = TrainData(net, datasets, device_budget=budget)
    inp, out = datasets["gl_input"], datasets["gl_output"]
    assert data.bytes == 2 * (inp.indptr.nbytes + inp.indices.nbytes + inp.values.nbytes) + (
        out.indptr.nbytes + out.indices.nbytes)  # (the input, its denoised copy, the target)
    data.set_denoised({"Input": (inp.indptr[:1].repeat(inp.rows + 1), inp.indices[:0], None)})
    order = np.random.default_rng(1).permutation(data.examples)
    chunks = data.chunks(order, 16)
    assert [c0 for c0, _ in chunks] == [0] + [c1 for _, c1 in chunks[:-1]]
    assert chunks[-1][1] == len(order) and all(c0 % 16 == 0 for c0, _ in chunks)

    def size(c0, c1):  # this epoch: the denoised input is empty, the target 4 bytes an entry
        rows = order[c0:c1]
        return 8 * len(rows) + 8 * len(rows) + 4 * int((out.indptr[rows + 1]
                                                        - out.indptr[rows]).sum())

    for c0, c1 in chunks:
        assert size(c0, c1) <= budget or c1 - c0 <= 16
        if c1 < len(order):  # (the next batch would not have fit)
            assert size(c0, min(c1 + 16, len(order))) > budget
    batches = list(data.batches(order, 16))
    assert [pos for pos, _ in batches] == list(range(0, len(order), 16))
    for pos, batch in batches:
        rows = order[pos:pos + 16]
        expected = np.concatenate([out.indices[out.indptr[r]:out.indptr[r + 1]] for r in rows])
        np.testing.assert_array_equal(batch.targets["Output"][1], expected)
        assert batch.inputs["Input"][1].size == 0


def test_the_budget_is_what_the_network_and_its_optimizer_leave_free(files, monkeypatch):
    """The device's free memory is asked when the data is first used, once the weights,
    gradients and optimizer state are there (they were made after the data was bound)."""
    import destiny.kernels.cpu.dense
    import destiny.network
    from destiny.fit import fit
    from destiny.train import train_config

    events = []
    made = destiny.network.Network.init_optimizer
    monkeypatch.setattr(destiny.network.Network, "init_optimizer",
                        lambda self, opt: events.append("optimizer state") or made(self, opt))
    monkeypatch.setattr(destiny.kernels.cpu.dense, "free_memory",
                        lambda: events.append("free memory asked"))
    fit(config_path=files / "net.json", input_path=files / "gl_input.nc",
        output_path=files / "gl_output.nc", network_path=files / "n.nc",
        cfg=train_config(batch=64, epochs=1), backend="cpu", checkpoint_every=0)
    assert events == ["optimizer state", "free memory asked"]


def test_a_batch_of_streamed_data_is_the_batch_of_data_held_whole():
    """``batch`` (the benchmarks') copies its rows alone where the data is streamed: the same
    arrays, the denoised input's included."""
    nd, datasets = _streaming_case()
    net = Network(nd, get_backend("cpu"))
    inp = datasets["gl_input"]
    half = (inp.indptr // 2, inp.indices[: inp.nnz // 2], inp.values[: inp.nnz // 2])
    rows = np.array([7, 3, 200, 3, 51])
    got = []
    for budget in (None, 1):
        data = TrainData(net, datasets, device_budget=budget)
        data.set_denoised({"Input": half})
        got.append(data.batch(rows))
    assert got[1].size == got[0].size == 5
    for name in ("inputs", "targets"):
        for layer, csr in getattr(got[0], name).items():
            for a, b in zip(csr, getattr(got[1], name)[layer], strict=True):
                np.testing.assert_array_equal(a, b)


def test_data_within_the_budget_is_held_whole():
    nd, datasets = _streaming_case()
    net = Network(nd, get_backend("cpu"))
    assert TrainData(net, datasets).budget is None  # (the cpu: the data is where it works)
    fits = TrainData(net, datasets, device_budget=10**9)
    assert not fits.streamed and fits.chunks(np.arange(fits.examples), 16) == [(0, 203)]


def test_a_budget_of_whole_batches_exactly_is_filled_and_data_of_its_size_held_whole():
    """Examples of one input and one target entry take 24 bytes each on the backend (two
    4-byte indices, two 8-byte offsets), a batch of 2 48 bytes: a budget of 96 bytes takes
    chunks of 2 whole batches, not 1. Data of exactly the budget's size is held whole."""
    net, data = _loop_case(9)
    datasets = {"in": data.inputs["Input"], "out": data.targets["Output"]}
    streamed = TrainData(net, datasets, device_budget=96)
    assert streamed.streamed
    assert streamed.chunks(np.arange(9), 2) == [(0, 4), (4, 8), (8, 9)]
    assert not TrainData(net, datasets, device_budget=data.bytes).streamed
    assert TrainData(net, datasets, device_budget=data.bytes - 1).streamed


def test_a_layer_narrower_than_its_dataset_is_refused_by_train_data():
    """TrainData checks the widths itself, for library callers (fit checks before reading)."""
    from destiny.errors import DestinyError

    net, data = _loop_case(6)
    ds = data.inputs["Input"]
    wide = SparseDataset("in", 7, ds.indptr, ds.indices)
    with pytest.raises(DestinyError, match=r"^the dataset 'in' has width 7, but Layers\[0\]\.N "
                       r"gives layer 'Input' only 6 units; use N \"auto\" or an N of at "
                       r"least 7\.$"):
        TrainData(net, {"in": wide, "out": data.targets["Output"]})


def _train_small(files, backend, optimizer, epochs, *, net=None, state=None, hidden=None):
    from destiny.io.dataset import read_dataset

    datasets = {n: read_dataset(files / f"{n}.nc") for n in ("gl_input", "gl_output")}
    if net is None:
        d = small_netdef()
        d["Layers"][1].update(hidden or {})
        nd = parse_netdef(d).resolve({"gl_input": 128, "gl_output": 128})
        net = Network(nd, get_backend(backend))
        net.initialize(7)
        net.connections[0].W[::3] = -0.0  # as a Constant 0 init draws: the sign must survive
    cfg = TrainConfig(**{**vars(TrainConfig()), "batch": 16, "epochs": epochs,
                         "optimizer": optimizer, "alpha": 0.01, "lam": 0.0, "mu": 0.9,
                         "seed": 3, "shuffle": True})
    if state is None:
        net.init_optimizer(cfg.optimizer_config())
    state = train_epochs(net, TrainData(net, datasets), cfg, state or TrainState())
    return net, state


def _parameters(net):
    """Every weight, bias and optimizer state array, as their bits (-0.0 is not 0.0)."""
    net.settle_optimizer()
    arrays = ([c.W for c in net.connections] + [c.b for c in net.connections]
              + [s for c in net.connections for s in c.state])
    return [net.to_host(a).view(np.uint32) for a in arrays]


@pytest.mark.parametrize("optimizer", ["rmsprop", "adadelta", "adagrad", "sgd"])
@pytest.mark.parametrize("weight_norm", [0.0, 0.4])
def test_lazy_input_rows_train_exactly_as_dense_updates(files, optimizer, weight_norm,
                                                        monkeypatch):
    """Updating only the batch's rows of the input layer (Network.update) changes no bit, with
    WeightNorm too: it rescales the whole matrix after either update, and a row the batch
    does not list is the same in both."""
    import destiny.network

    hidden = {"WeightNorm": weight_norm}
    lazy, _ = _train_small(files, "cpu", optimizer, 2, hidden=hidden)
    assert lazy.connections[0].current is not None  # the lazy path ran: rows lag behind
    monkeypatch.setattr(destiny.network, "LAZY_MODES", ())
    dense, _ = _train_small(files, "cpu", optimizer, 2, hidden=hidden)
    if weight_norm:  # (columns were rescaled: the limit is below their norms)
        norms = np.sqrt((dense.connections[0].W.astype(np.float64) ** 2).sum(axis=0))
        assert norms.max() == pytest.approx(weight_norm, rel=1e-5)
    for a, b in zip(_parameters(lazy), _parameters(dense), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_pending_sparse_gradient_is_computed_by_the_update_or_dropped(files):
    """While input rows lag behind, backward leaves the input layer's gradient to the update:
    G stays zero; a batch the brake skips leaves no trace; a dense update (another optimizer
    setting) computes it into G first, as backward would have."""
    from destiny.io.dataset import read_dataset
    from destiny.network import OptimizerConfig

    net, _ = _train_small(files, "cpu", "rmsprop", 1)
    c = net.connections[0]
    assert c.current is not None
    datasets = {n: read_dataset(files / f"{n}.nc") for n in ("gl_input", "gl_output")}
    batch = TrainData(net, datasets).batch(np.arange(16))
    net.forward(batch, train=True, dropout_key=1)
    net.backward()
    assert c.pending is not None and not c.G.any()
    before = c.W.copy()
    net.discard_gradients()  # the brake's skip
    assert c.pending is None and not c.G.any()
    np.testing.assert_array_equal(c.W, before)

    net.forward(batch, train=True, dropout_key=1)
    net.backward()
    pending = c.pending
    expected = np.zeros_like(c.G)
    net.backend.sparse_fc_weight_grad(expected, *pending)
    weights = net.connections[1].W.copy()
    G_out = net.connections[1].G.copy()
    adam = OptimizerConfig(mode=6, mu=0.9, mu1=0.999)  # not lazy: every row, from G
    net.init_optimizer(adam)  # (fresh state for Adam; keeps c.pending)
    c.pending = pending
    seen = {}
    update_weights = net.backend.update_weights

    def spy(W, G, *args):
        if W is c.W:
            seen["G"] = G.copy()
        update_weights(W, G, *args)

    net.backend.update_weights = spy
    try:
        net.update(0.01, 1, adam)
    finally:
        net.backend.update_weights = update_weights
    np.testing.assert_array_equal(seen["G"], expected)
    assert expected.any() and not c.G.any() and c.pending is None
    assert not np.array_equal(net.connections[1].W, weights) and G_out.any()


def test_a_dense_update_after_lazy_ones_catches_the_rows_up_to_the_update_before(files,
                                                                                  monkeypatch):
    """An update the lazy path cannot take (here weight decay turned on) first brings every
    row's RMSProp state up to t - 1, then decays it once in the dense update: the same bits
    as dense updates all along."""
    import destiny.network
    from destiny.io.dataset import read_dataset
    from destiny.kernels.reference.optim import RMSPROP
    from destiny.network import OptimizerConfig

    datasets = {n: read_dataset(files / f"{n}.nc") for n in ("gl_input", "gl_output")}
    nets = []
    for lazy_modes in (destiny.network.LAZY_MODES, ()):
        monkeypatch.setattr(destiny.network, "LAZY_MODES", lazy_modes)
        net, _ = _train_small(files, "cpu", "rmsprop", 1)
        assert (net.connections[0].current is not None) == bool(lazy_modes)
        net.forward(TrainData(net, datasets).batch(np.arange(16)))
        net.backward()
        net.update(0.01, net._last_update[0] + 1, OptimizerConfig(mode=RMSPROP, lam=1e-3, mu=0.9))
        nets.append(net)
    for a, b in zip(_parameters(nets[0]), _parameters(nets[1]), strict=True):
        np.testing.assert_array_equal(a, b)


def test_lazy_input_rows_resume_from_a_checkpoint_exactly(files):
    """A checkpoint written while input rows lag holds their settled state."""
    from destiny.io.checkpoint import load_weights, save_network

    straight, _ = _train_small(files, "cpu", "rmsprop", 3)
    first, state = _train_small(files, "cpu", "rmsprop", 1)
    assert first.connections[0].current is not None  # some rows lag behind
    save_network(files / "ck.nc", first, destiny={}, optimizer_state=True)
    nd = parse_netdef(small_netdef()).resolve({"gl_input": 128, "gl_output": 128})
    resumed = Network(nd, get_backend("cpu"))
    resumed.initialize(99)
    resumed.init_optimizer(TrainConfig(optimizer="rmsprop").optimizer_config())
    load_weights(resumed, files / "ck.nc")
    resumed, _ = _train_small(files, "cpu", "rmsprop", 3, net=resumed, state=state)
    for a, b in zip(_parameters(straight), _parameters(resumed), strict=True):
        np.testing.assert_array_equal(a, b)


def test_inputs_sharing_a_matrix_leave_no_gradient_behind():
    """Two sparse inputs into one matrix: each batch's rows of both are zeroed after it."""
    d = {"ErrorFunction": "L2", "Layers": [
        {"Name": "A", "Kind": "Input", "N": 10, "DataSet": "a", "Sparse": True},
        {"Name": "B", "Kind": "Input", "N": 10, "DataSet": "b", "Sparse": True},
        {"Name": "Hidden", "Kind": "Hidden", "N": 4, "Activation": "Sigmoid", "Source": ["A", "B"],
         "SharedWeights": {"InputLayer": "B", "SourceInputLayer": "A",
                           "SourceOutputLayer": "Hidden"}},
        {"Name": "Output", "Kind": "Output", "N": 3, "DataSet": "out", "Activation": "Sigmoid"}]}
    net = Network(parse_netdef(d), get_backend("cpu"))
    net.initialize(0)
    net.allocate_gradients()
    none = np.zeros(0, np.float32)
    batch = Batch(size=1, inputs={"A": (np.array([0, 1]), np.array([1], np.int32), none),
                                  "B": (np.array([0, 1]), np.array([7], np.int32), none)},
                  targets={"Output": (np.array([0, 1]), np.array([0], np.int32), none)})
    net.forward(batch, train=True)
    net.backward()
    owner = net.connections[0].owner
    assert set(np.flatnonzero(np.abs(owner.G).sum(axis=1))) == {1, 7}
    net.discard_gradients()
    assert not owner.G.any()


def test_sgd_step_is_dsstnes_arithmetic():
    # One SGD step of the MovieLens-style network, recomputed in NumPy from spec 5.5-5.8:
    # SMCE 1/0/1/1 on a Sigmoid output is binary cross-entropy, delta = a - t.
    nd = parse_netdef({**small_netdef(), "Layers": [
        {"Name": "Input", "Kind": "Input", "N": 128, "DataSet": "gl_input", "Sparse": True},
        {"Name": "Hidden", "Kind": "Hidden", "N": 16, "Activation": "Sigmoid"},
        {"Name": "Output", "Kind": "Output", "N": 128, "DataSet": "gl_output",
         "Activation": "Sigmoid"}]})
    net = Network(nd, get_backend("cpu"))
    net.initialize(1)
    cfg = TrainConfig(batch=300, optimizer="sgd", alpha=0.025, lam=1e-4, mu=0.5, mu1=0.0)
    net.init_optimizer(cfg.optimizer_config())
    ds = random_dataset("x", rows=32)
    X = np.zeros((32, 128))
    X[np.repeat(np.arange(32), np.diff(ds.indptr)), ds.indices] = 1.0
    W1, b1, W2, b2 = (net.connections[0].W.astype(np.float64), net.connections[0].b.copy(),
                      net.connections[1].W.astype(np.float64), net.connections[1].b.copy())
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    H = sig(X @ W1 + b1)
    A = sig(H @ W2 + b2)
    d2 = A - X
    d1 = (d2 @ W2.T) * H * (1 - H)
    expected_W2 = W2 + 0.025 * (-(H.T @ d2) / 32 - 1e-4 * W2)
    expected_W1 = W1 + 0.025 * (-(X.T @ d1) / 32 - 1e-4 * W1)
    csr = (ds.indptr, ds.indices, np.zeros(0, np.float32))
    net.forward(Batch(size=32, inputs={"Input": csr}, targets={"Output": csr}))
    loss = net.backward()
    net.update(0.025, 1, cfg.optimizer_config())
    assert loss == pytest.approx(-np.sum(X * np.log(A) + (1 - X) * np.log(1 - A)), rel=1e-5)
    np.testing.assert_allclose(net.connections[1].W, expected_W2, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(net.connections[0].W, expected_W1, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(net.connections[1].b, b2 - 0.025 * d2.mean(axis=0), atol=1e-6)


def test_datasets_of_other_samples_are_refused(files):
    """Two halves of the users converted with one sample index have as many rows each, but
    row r is another user in each: training on them paired one user's input with another's
    targets, silently (DSSTNE did the same)."""
    from destiny.generate import generate_netcdf

    users = [f"u{i}\t" + ":".join(f"i{(i * 7 + j) % 50}" for j in range(5)) for i in range(40)]
    (files / "a.txt").write_text("\n".join(users[:20]) + "\n")
    (files / "b.txt").write_text("\n".join(users[20:]) + "\n")
    (files / "same.txt").write_text("\n".join(reversed(users[:20])) + "\n")
    for text, name, out in (("a.txt", "gl_input", "a.nc"), ("b.txt", "gl_output", "b.nc"),
                            ("same.txt", "gl_output", "same.nc")):
        generate_netcdf(input_path=str(files / text), output=str(files / out), dataset_name=name,
                        feature_index=str(files / "features"), sample_index=str(files / "samples"),
                        create=not (files / "features").exists())
    argv = ["-c", str(files / "net.json"), "-i", str(files / "a.nc"), "-e", "1"]
    result = CliRunner().invoke(train,
                                argv + ["-o", str(files / "b.nc"), "-n", str(files / "x.nc")])
    assert result.exit_code == 1
    assert "'gl_input'" in result.output and "'gl_output'" in result.output
    assert "hold other samples, or the same in another order" in result.output
    assert not (files / "x.nc").exists()
    # The same users in another line order: rows follow the sample index, so they line up.
    result = CliRunner().invoke(train, argv + ["-o", str(files / "same.nc"),
                                               "-n", str(files / "y.nc")])
    assert result.exit_code == 0, result.output


def test_a_dataset_replaced_as_train_reads_it_is_refused(files, monkeypatch):
    """A generate-netcdf renaming a new dataset file over the input as train starts (a cron
    job converting the next day's data): train checked the old file's rows and widths, then
    read the new one's entries, and trained on parts of two files without a word."""
    import destiny.fit

    write_dataset(files / "next.nc", random_dataset("gl_input", seed=9))
    read = destiny.fit.read_training_datasets

    def renamed_over_first(pool, net):
        (files / "next.nc").replace(files / "gl_input.nc")
        return read(pool, net)

    monkeypatch.setattr(destiny.fit, "read_training_datasets", renamed_over_first)
    result = run_train(files, "-e", "1")
    assert result.exit_code == 1, result.output
    assert (f"{files / 'gl_input.nc'}: was replaced while train read it (by a generate-netcdf "
            "writing it?)") in result.output
    assert "Traceback" not in result.output
    assert not (files / "net.nc").exists()


def test_a_dataset_in_both_files_is_taken_from_the_input_file(tmp_path):
    """Spec 5.1: the datasets of the input and output files form one pool; a name in both
    is taken from the first (-i)."""
    from destiny.fit import dataset_pool

    for name, width in (("a.nc", 128), ("b.nc", 64)):
        ds = random_dataset("x", width=width, items=60)
        write_dataset(tmp_path / name, ds)
    assert dataset_pool([tmp_path / "a.nc", tmp_path / "b.nc"]) == {"x": (tmp_path / "a.nc", 128)}


def test_train_writes_dsstne_network_file(files):
    result = run_train(files, "-b", "64", "-e", "2", "--metrics", str(files / "m.jsonl"))
    assert result.exit_code == 0, result.output
    nf = read_network(files / "net.nc")
    assert [layer.name for layer in nf.netdef.layers] == ["Input", "Hidden", "Output"]
    assert [layer.n for layer in nf.netdef.layers] == [128, 16, 128]
    assert nf.weights[0].shape == (128, 16) and nf.weights[1].shape == (16, 128)
    # The default backend is auto: the GPU where numba.cuda drives one (found so on an H100).
    auto = get_backend("auto").name
    assert nf.destiny["backend"] == auto and nf.destiny["optimizer"] == "adam"
    lines = [json.loads(x) for x in (files / "m.jsonl").read_text().splitlines()]
    assert [x["epoch"] for x in lines] == [1, 2]
    assert {"loss", "seconds", "learning_rate"} <= set(lines[0])
    if nctypes.LIB is not None:
        types = nctypes.types(files / "net.nc")
        assert types["version"] == nctypes.NC_FLOAT and types["name"] == nctypes.NC_CHAR
        assert types["layers"] == types["layer0_Nx"] == types["weights"] == nctypes.NC_UINT
        assert types["maxout_k"] == nctypes.NC_INT
        assert types["weight0_width"] == nctypes.NC_UINT64
        assert types["weight0_weights"] == types["weight0_bias"] == nctypes.NC_FLOAT


@pytest.mark.skipif(nctypes.LIB is None, reason="libnetcdf not found for ctypes")
def test_names_beyond_ascii_are_written_as_text_dsstne_reads(files):
    """netCDF4-python writes a str that is not ASCII as NC_STRING, which DSSTNE's reader
    cannot read as text: every name goes in as NC_CHAR, and reads back the same."""
    names = {"gl_input": "entrée", "gl_output": "sortie_ü"}
    ds = random_dataset("x")
    for file, name in names.items():
        write_dataset(files / f"{file}.nc", SparseDataset(name, ds.width, ds.indptr, ds.indices))
    d = small_netdef(Name="réseau")
    d["Layers"][0].update(Name="Entrée", DataSet="entrée")
    d["Layers"][1].update(Name="Caché")
    d["Layers"][2].update(Name="Output", DataSet="sortie_ü", Source="Caché")
    (files / "net.json").write_text(json.dumps(d, ensure_ascii=False), encoding="utf-8")
    result = run_train(files, "-e", "1")
    assert result.exit_code == 0, result.output
    nf = read_network(files / "net.nc")
    assert [layer.name for layer in nf.netdef.layers] == ["Entrée", "Caché", "Output"]
    assert nf.netdef.layers[0].dataset == "entrée" and nf.netdef.name == "réseau"
    for path in (files / "net.nc", files / "gl_input.nc"):
        assert nctypes.NC_STRING not in nctypes.types(path).values(), path
    assert nctypes.types(files / "gl_input.nc")["name0"] == nctypes.NC_CHAR


def test_the_seed_draws_the_initial_weights(files):
    """--seed seeds the weights as drawn (the initial network), not only the run's draws."""
    for seed in ("1", "2"):
        result = run_train(files, "-e", "1", "--seed", seed, "--initial-network",
                           str(files / f"init{seed}.nc"), network=f"net{seed}.nc")
        assert result.exit_code == 0, result.output
    one, two = read_network(files / "init1.nc").weights, read_network(files / "init2.nc").weights
    assert sorted(one) == sorted(two) and len(one) == 2
    assert all(not np.array_equal(one[k], two[k]) for k in one)  # (the biases start at 0)


def test_each_epochs_line_shows_its_metrics(files):
    """The line on stderr after each epoch shows the numbers of its --metrics line, and
    names skipped batches only where there were any."""
    result = run_train(files, "-b", "64", "-e", "2", "--metrics", str(files / "m.jsonl"))
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (files / "m.jsonl").read_text().splitlines()]
    assert [list(r) for r in records] == [[
        "epoch", "loss", "training_error", "regularization_error", "seconds", "learning_rate",
        "samples_per_s", "skipped_batches"]] * 2  # (docs/commands.md, --metrics)
    for r in records:
        assert r["skipped_batches"] == 0
        assert (f"\ntrain: epoch {r['epoch']}/2: loss {r['loss']:.6f} (training "
                f"{r['training_error']:.6f}, regularization {r['regularization_error']:.6f}), "
                f"{r['seconds']:.1f} s, {r['samples_per_s']:,.0f} examples/s, "
                f"lr {r['learning_rate']:g}\n") in result.output


def test_the_epochs_line_counts_the_batches_the_brake_skipped(files, monkeypatch):
    """One batch in 300 (batches of one example) whose loss is 50 times the others' after
    the 100 exempt ones: skipped, and the epoch's line says so."""
    import destiny.network

    backward, calls = destiny.network.Network.backward, []

    def spiking(self):
        calls.append(1)
        return backward(self) * (50.0 if len(calls) == 150 else 1.0)

    monkeypatch.setattr(destiny.network.Network, "backward", spiking)
    result = run_train(files, "-b", "1", "-e", "1", "--metrics", str(files / "m.jsonl"))
    assert result.exit_code == 0, result.output
    assert json.loads((files / "m.jsonl").read_text())["skipped_batches"] == 1
    assert " examples/s, lr 0.01, 1 batch skipped by the divergence brake\n" in result.output


def test_the_progress_bar_counts_each_epochs_examples_with_the_running_loss(files,
                                                                             progress_bars):
    """A bar per epoch, on stderr, shown only on a terminal (tqdm's disable=None) and cleared
    when done; its loss is the running mean per example, which ends at the epoch's training
    error (the --metrics value)."""
    result = run_train(files, "-b", "64", "-e", "2", "--metrics", str(files / "m.jsonl"))
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (files / "m.jsonl").read_text().splitlines()]
    assert len(progress_bars) == 2
    for bar, r in zip(progress_bars, records, strict=True):
        assert bar.on_stderr and bar.kwargs == dict(
            total=300, desc=f"epoch {r['epoch']}/2", unit="ex", unit_scale=True, disable=None,
            leave=False)
        assert bar.updates == [64, 64, 64, 64, 44] and bar.closed
        assert len(bar.postfix) == 5 and bar.postfix[-1] == f"loss {r['training_error']:.5f}"
    progress_bars.clear()
    assert run_train(files, "-e", "1", "-q", "--force").exit_code == 0
    assert progress_bars == []  # (-q: nothing on stderr)


def test_the_metrics_of_an_epoch_are_in_the_file_once_it_is_done(files):
    """Each line is flushed with its epoch: a run killed later keeps the lines of the epochs
    it finished (a watcher tailing the file sees them)."""
    from destiny.fit import fit

    seen = []
    fit(config_path=files / "net.json", input_path=files / "gl_input.nc",
        output_path=files / "gl_output.nc", network_path=files / "n.nc",
        cfg=TrainConfig(batch=64, epochs=2), checkpoint_every=0,
        metrics_path=files / "m.jsonl",
        on_epoch=lambda r: seen.append((files / "m.jsonl").read_text().count("\n")))
    assert seen == [1, 2]


def test_data_beyond_half_the_free_memory_is_streamed_with_a_note(files, monkeypatch):
    """The budget is half of the memory free on the device (DEVICE_DATA_SHARE): here 1,000 of
    2,000 bytes, which the data (an input and an output of the same entries, held once)
    exceeds; the first lines say so."""
    import destiny.kernels.cpu.dense
    from destiny.io.dataset import read_dataset

    monkeypatch.setattr(destiny.kernels.cpu.dense, "free_memory", lambda: 2000)
    ds = read_dataset(files / "gl_input.nc")
    held = ds.indptr.nbytes + ds.indices.nbytes
    result = run_train(files, "-b", "64", "-e", "1", "--backend", "cpu")
    assert result.exit_code == 0, result.output
    assert (f"train: the training data takes {held / 1024:.1f} KiB on the device, more than "
            "1,000 bytes (half of the memory free there): it is copied a chunk at a time, in "
            "each epoch's order\n") in result.output


def test_the_same_seed_writes_the_same_network_file_byte_for_byte(files):
    """Two runs with the same data, definition, flags and seed: the network files differed
    in one attribute, the time the run started (kept for checkpoints), so a checksum said
    that training had not reproduced. Checkpoints keep it; the trained network does not."""
    from destiny.io.network_file import destiny_attributes

    args = ["-b", "64", "-e", "2", "--seed", "5", "--checkpoint-every", "2"]
    assert run_train(files, *args).exit_code == 0
    assert run_train(files, *args, network="again.nc").exit_code == 0
    assert (files / "net.nc").read_bytes() == (files / "again.nc").read_bytes()
    assert "run_started" not in destiny_attributes(files / "net.nc")
    assert "run_started" in destiny_attributes(files / "net.nc2.nc")


def test_without_seed_or_checkpoint_flags_train_seeds_12134_and_checkpoints_every_10(files):
    """The defaults: DSSTNE's FIXED_SEED 12134 (spec 1) and a checkpoint every 10 epochs
    (docs/commands.md's --checkpoint-every): 11 epochs write NET.nc10.nc and no other checkpoint
    (none of the last epoch, which 10 does not divide, as DSSTNE), and the weights are those of
    an explicit --seed 12134."""
    assert run_train(files, "-b", "300", "-e", "11").exit_code == 0
    assert sorted(p.name for p in files.glob("net.nc*.nc")) == ["net.nc10.nc"]
    assert run_train(files, "-b", "300", "-e", "11", "--seed", "12134", "--checkpoint-every",
                     "0", network="again.nc").exit_code == 0
    for a, b in zip(weights_of(files / "net.nc"), weights_of(files / "again.nc"), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("flags, expected", [([], ("auto", False)),
                                             (["--backend", "cpu", "--tf32"], ("cpu", True))])
def test_backend_and_tf32_reach_the_backend(files, monkeypatch, flags, expected):
    """--backend (auto by default) and --tf32 (off) choose the kernels train gets."""
    import destiny.fit

    asked = []

    def spy(backend, tf32=False, **kw):
        asked.append((backend, tf32))
        return get_backend("cpu", **kw)

    monkeypatch.setattr(destiny.fit, "get_backend", spy)
    assert run_train(files, "-b", "300", "-e", "1", *flags).exit_code == 0
    assert asked == [expected]


def test_train_refuses_to_overwrite(files):
    (files / "net.nc").write_bytes(b"keep me")
    result = run_train(files, "-e", "1")
    assert result.exit_code == 1 and "already exists" in result.output
    assert (files / "net.nc").read_bytes() == b"keep me"
    result = run_train(files, "-e", "1", "--resume")  # (no checkpoint: it would train afresh)
    assert result.exit_code == 1 and "already exists" in result.output
    assert (files / "net.nc").read_bytes() == b"keep me"
    assert run_train(files, "-e", "1", "--force").exit_code == 0


def test_an_existing_initial_network_is_kept_without_force(files):
    """--initial-network named a trained network by mistake: it used to be overwritten with
    an untrained one, without a word. An earlier run's initial network is replaced (a stopped
    run is run again as it was). --resume with no checkpoint starts afresh, so it writes one
    (it used to skip it without a word), and refuses this one alike."""
    (files / "init.nc").write_bytes(b"a trained network")
    result = run_train(files, "-e", "1", "--initial-network", str(files / "init.nc"))
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert (f"Error: {files / 'init.nc'}: the initial network file (--initial-network) already "
            "exists") in result.output and "--force" in result.output
    assert (files / "init.nc").read_bytes() == b"a trained network"
    assert not (files / "net.nc").exists()
    result = run_train(files, "-e", "1", "--resume", "--checkpoint-every", "1",
                       "--initial-network", str(files / "init.nc"))
    assert result.exit_code == 1 and "is not an earlier run's initial network" in result.output
    assert (files / "init.nc").read_bytes() == b"a trained network"
    assert run_train(files, "-e", "1", "--checkpoint-every", "1", network="ck.nc").exit_code == 0
    (files / "ck.nc").unlink()  # (a run stopped after its checkpoint: --resume writes none)
    result = run_train(files, "-e", "2", "--resume", "--initial-network", str(files / "init.nc"),
                       network="ck.nc")
    assert result.exit_code == 0 and "resumed from" in result.output, result.output
    assert (files / "init.nc").read_bytes() == b"a trained network"
    result = run_train(files, "-e", "1", "--force", "--initial-network", str(files / "init.nc"))
    assert result.exit_code == 0, result.output
    assert read_network(files / "init.nc").weights
    (files / "net.nc").unlink()  # an earlier run's initial network is replaced: running the
    assert run_train(files, "-e", "1", "--initial-network",  # command again works
                     str(files / "init.nc")).exit_code == 0
    result = run_train(files, "-e", "1", "--force", "--initial-network", str(files / "net.nc"),
                       network="net2.nc")
    assert result.exit_code == 0, result.output  # (--force: a trained one too)
    result = run_train(files, "-e", "1", "--initial-network", str(files / "net2.nc"),
                       network="net3.nc")
    assert result.exit_code == 1 and "is not an earlier run's initial network" in result.output


def test_dsstne_flags_parse(files):
    result = run_train(files, "-b", "50", "-e", "1", "-alpha", "0.01", "-lambda", "0.001",
                       "-lambda1", "0", "-mu", "0.8", "-mu1", "0.99", "-d", "ignored")
    assert result.exit_code == 0, result.output
    assert "train: -d is ignored, as in DSSTNE\n" in result.output


def test_the_first_line_names_the_settings_and_flags_the_optimizer_ignores(files):
    """-mu with sgd, or -alpha with AdaDelta (which has no learning rate), trained exactly as
    without it, and the first line named only alpha: a tuner's grid over them changed nothing
    without a word. The line names every setting the optimizer reads, and a note each flag
    that it does not."""
    result = run_train(files, "-e", "1", "--optimizer", "sgd", "-mu", "0.9")
    assert result.exit_code == 0, result.output
    assert ("train: -mu has no effect with --optimizer sgd, which reads only -alpha, -lambda "
            "and -lambda1") in result.output
    assert "optimizer sgd (alpha 0.025, lambda 0.0001, lambda1 0)" in result.output
    result = run_train(files, "-e", "1", "--force", "--optimizer", "adadelta", "-alpha", "0.5",
                       "-mu1", "0.9", "--metrics", str(files / "m.jsonl"))
    assert result.exit_code == 0, result.output
    assert ("train: -alpha and -mu1 have no effect with --optimizer adadelta, which reads only "
            "-lambda, -lambda1 and -mu") in result.output
    assert "examples/s, lr" not in result.output  # (an "lr 0.5" nothing reads)
    assert json.loads((files / "m.jsonl").read_text())["learning_rate"] is None  # (nor 0.5)
    result = run_train(files, "-e", "1", "--force", "-mu", "0.8", "-alpha", "0.003")
    assert result.exit_code == 0, result.output
    assert "no effect" not in result.output and "examples/s, lr 0.003" in result.output
    assert ("optimizer adam (alpha 0.003, lambda 0, lambda1 0, mu 0.8, mu1 0.999)"
            in result.output)


def test_dsstnes_alpha_or_mu_without_optimizer_says_that_adam_reads_them(files):
    """A DSSTNE command line ported as it was (`-alpha 0.025 -mu 0.5`) trains with Adam,
    Destiny's default, where DSSTNE trained with SGD: a note says so and how to choose; an
    --optimizer given, even adam, or no -alpha and -mu, makes none, and -q none."""
    result = run_train(files, "-e", "1", "-alpha", "0.025", "-lambda", "0.0001", "-mu", "0.5")
    assert result.exit_code == 0, result.output
    assert ("train: -alpha and -mu set adam's settings: Destiny trains with adam unless "
            "--optimizer says otherwise, where DSSTNE always trained with sgd; add --optimizer "
            "sgd for DSSTNE's training") in result.output
    for args in (("-alpha", "0.01", "--optimizer", "adam"), ("-mu", "0.5", "--optimizer", "sgd"),
                 ("-lambda", "0.001",), ("-alpha", "0.01", "-q")):
        result = run_train(files, "-e", "1", "--force", *args)
        assert result.exit_code == 0 and "adam's settings" not in result.output, result.output
    result = run_train(files, "-e", "1", "--force", "-mu", "0.5")
    assert "train: -mu sets adam's settings" in result.output


def test_the_network_file_keeps_the_parameters_the_run_trained_with(files):
    """The definition's numbers are float32 from the start (as DSSTNE's, and as the file
    stores them), so the network read back is the one trained, to the bit."""
    netdef = small_netdef(ScaledMarginalCrossEntropy={"oneTarget": 0.9, "zeroTarget": 0.1,
                                                       "oneScale": 1.3, "zeroScale": 0.7},
                          Denoising={"p": 0.3}, DeltaBoost={"one": 1.1, "zero": 0.9})
    netdef["Layers"][1].update({"pDropout": 0.3, "Activation": "LeakyRectifiedLinear",
                                "RELUSlope": 0.01, "WeightNorm": 0.3, "DeltaNorm": 0.7})
    (files / "net.json").write_text(json.dumps(netdef))
    assert run_train(files, "-e", "1", "-b", "64").exit_code == 0
    trained = parse_netdef(netdef).resolve({"gl_input": 128, "gl_output": 128})
    saved = read_network(files / "net.nc").netdef
    for key in ("smce", "denoising", "delta_boost", "sparseness_penalty"):
        assert getattr(saved, key) == getattr(trained, key), key
    for mine, theirs in zip(saved.layers, trained.layers, strict=True):
        for key in ("p_dropout", "relu_slope", "elu_alpha", "selu_lambda", "weight_norm",
                    "delta_norm", "sparseness_penalty"):
            assert getattr(mine, key) == getattr(theirs, key), (mine.name, key)


def test_layers_that_lead_to_no_output_are_noted(files):
    """DSSTNE trains a network with a layer that feeds nothing; train does too, but says
    so: such a layer is usually a Source that names the wrong one."""
    netdef = small_netdef()
    netdef["Layers"].append({"Name": "Stray", "Kind": "Hidden", "N": 4, "Source": "Input"})
    (files / "net.json").write_text(json.dumps(netdef))
    result = run_train(files, "-e", "1", "-b", "64")
    assert result.exit_code == 0, result.output
    assert ("train: no Source or Skip leads from 'Stray' (Hidden) to an Output layer: it "
            "reaches neither the loss nor the predictions") in result.output
    (files / "net.json").write_text(json.dumps(small_netdef()))
    result = run_train(files, "-e", "1", "-b", "64", "--force")
    assert result.exit_code == 0 and "no Source or Skip" not in result.output, result.output


def test_resume_without_a_checkpoint_says_it_trains_from_the_start(files):
    """--resume where there is no checkpoint (the first run of a cron rule, or a mistyped
    -n) trains afresh, as its help says, with a note; a resumed run, one that --resume-or-
    restart restarts (its own note), and -q make none."""
    result = run_train(files, "-e", "1", "-b", "64", "--resume")
    assert result.exit_code == 0, result.output
    note = (f"train: no checkpoint of {files / 'net.nc'} to resume from "
            f"({files / 'net.nc'}<epoch>.nc): training from the start")
    assert note in result.output
    result = run_train(files, "-e", "2", "-b", "64", "--force", "--checkpoint-every", "1",
                       "--resume")
    assert result.exit_code == 0 and note in result.output, result.output
    result = run_train(files, "-e", "3", "-b", "64", "--force", "--checkpoint-every", "1",
                       "--resume")
    assert result.exit_code == 0 and "resumed from" in result.output, result.output
    assert "no checkpoint of" not in result.output
    result = run_train(files, "-e", "3", "-b", "64", "--force", "--checkpoint-every", "1",
                       "--resume-or-restart")  # (at -e already: restarted, with its own note)
    assert result.exit_code == 0 and "trains afresh" in result.output, result.output
    assert "no checkpoint of" not in result.output
    (files / "net.nc").unlink()
    for path in files.glob("net.nc*.nc"):
        path.unlink()
    assert run_train(files, "-e", "1", "-b", "64", "--resume", "-q").output == ""


def test_each_optimizer_reads_its_settings_with_the_readmes_defaults():
    """docs/commands.md ("-alpha, ..."): each optimizer's settings and their defaults, as the first
    line names them; and each name selects its own update rule (the kernels' mode)."""
    from destiny.kernels.reference import optim
    from destiny.train import OPTIMIZERS, optimizer_settings, train_config

    assert {name: optimizer_settings(train_config(name)) for name in OPTIMIZERS} == {
        "sgd": "alpha 0.025, lambda 0.0001, lambda1 0",
        "momentum": "alpha 0.025, lambda 0.0001, lambda1 0, mu 0.9",
        "nesterov": "alpha 0.025, lambda 0.0001, lambda1 0, mu 0.9",
        "adagrad": "alpha 0.01, lambda 0, lambda1 0",
        "rmsprop": "alpha 0.001, lambda 0, lambda1 0, mu 0.9",
        "adadelta": "lambda 0, lambda1 0, mu 0.95",
        "adam": "alpha 0.01, lambda 0, lambda1 0, mu 0.9, mu1 0.999"}
    assert {name: getattr(optim, name.upper()) for name in OPTIMIZERS} == OPTIMIZERS


@pytest.mark.parametrize("flag,value,message", [
    ("-alpha", "-1", "-1.0 is not in the range x>0.0"),
    ("-alpha", "nan", "'nan' is not a finite number"),
    ("-lambda", "-0.1", "-0.1 is not in the range x>=0.0"),
    ("-lambda1", "inf", "'inf' is not a finite number"),
    ("-mu", "1", "1.0 is not in the range 0.0<=x<1.0"),
    ("-mu1", "-0.5", "-0.5 is not in the range 0.0<=x<1.0"),
    # Training computes in float32: these became 0 (no learning), infinity and 1.0 (Adam's
    # bias correction then divides by 0), without a word.
    ("-alpha", "1e-320", "'1e-320' is below float32's smallest normal number"),
    ("-lambda", "1e39", "'1e39' is beyond float32's range (3.4e38)"),
    ("-mu", "0.9999999999", "'0.9999999999' becomes 1.0 in float32, the precision training "
                            "computes in, which is outside 0.0<=x<1.0"),
    ("--seed", "-1", "-1 is not in the range 0<=x<=9223372036854775807"),  # (a traceback)
    ("--seed", str(2**63), "is not in the range"),  # (failed once the network was trained)
    ("-e", "0", "0 is not in the range x>=1"),
    ("-b", "0", "0 is not in the range x>=1"),
    ("--checkpoint-every", "-1", "-1 is not in the range x>=0"),
    ("--keep-checkpoints", "-1", "-1 is not in the range x>=0"),
])
def test_hyperparameters_out_of_range_are_usage_errors(files, flag, value, message):
    """A negative or NaN learning rate used to train (or 'diverge') instead of being refused."""
    result = run_train(files, flag, value)
    assert result.exit_code == 2 and message in result.output
    assert not (files / "net.nc").exists()


def test_a_definition_with_a_byte_order_mark_trains_as_without(files):
    """load_netdef skipped the mark, but the definition was read again for the checkpoints'
    settings without skipping it: a traceback (json's 'Unexpected UTF-8 BOM')."""
    assert run_train(files, "-b", "64", "-e", "1", network="plain.nc").exit_code == 0
    path = files / "net.json"
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    result = run_train(files, "-b", "64", "-e", "1", network="bom.nc")
    assert result.exit_code == 0, result.output
    for a, b in zip(weights_of(files / "plain.nc"), weights_of(files / "bom.nc"), strict=True):
        np.testing.assert_array_equal(a, b)


def test_divergence_stops_with_message(files):
    result = run_train(files, "-b", "64", "-e", "6", "--optimizer", "sgd", "-alpha", "1e38")
    assert result.exit_code == 1
    error = result.output.splitlines()[-1]
    assert error.startswith("Error: training diverged in epoch 1: the ")
    assert "layer 'Hidden'" in error or "layer 'Output'" in error
    assert error.endswith("is kept; lower the learning rate (-alpha) or use the default "
                          "optimizer (adam).")
    assert not (files / "net.nc").exists()


@pytest.mark.parametrize("optimizer, values, advice", [
    ("adam", {}, "lower the learning rate (-alpha)"),
    ("sgd", {"lam": 1e30}, "lower the learning rate (-alpha) or lower the weight decay "
                           "(-lambda 1e+30) or use the default optimizer (adam)"),
    ("adam", {"lam": 0.5, "lam1": 2.0}, "lower the learning rate (-alpha) or lower the "
                                        "weight decay (-lambda1 2)"),
    ("adadelta", {"lam": 3.0}, "lower the weight decay (-lambda 3) or use the default "
                               "optimizer (adam)"),  # (adadelta reads no -alpha)
])
def test_divergence_advice_names_the_settings_the_optimizer_reads(optimizer, values, advice):
    """A divergence used to advise -alpha always: for adadelta, which reads none, and for a
    weight decay of 1e30 (weights shrink past 0 by 1 - alpha * lambda each step)."""
    from destiny.train import _divergence_advice, train_config

    assert _divergence_advice(train_config(optimizer, **values)) == advice


def test_divergence_keeps_the_last_good_checkpoint(files):
    from destiny.fit import fit
    from destiny.train import TrainingDivergedError

    held = {}

    def poison(record):
        if record.epoch == 2:  # diverge after the checkpoint of epoch 2 is written
            held["net"].connections[0].W[0, 0] = np.nan

    cfg = TrainConfig(batch=64, epochs=5, optimizer="adam", alpha=0.01, lam=0, mu=0.9, mu1=0.999)
    with pytest.raises(TrainingDivergedError, match="epoch 3"):
        fit(config_path=files / "net.json", input_path=files / "gl_input.nc",
            output_path=files / "gl_output.nc", network_path=str(files / "net.nc"), cfg=cfg,
            checkpoint_every=1, on_start=lambda net, data, state: held.update(net=net),
            on_epoch=poison)
    assert not (files / "net.nc").exists()
    assert np.isfinite(weights_of(files / "net.nc2.nc")[0]).all()


def test_resume_after_kill_reaches_the_same_weights(files):
    argv = [str(BIN / "train"), "-c", str(files / "net.json"), "-i", str(files / "gl_input.nc"),
            "-o", str(files / "gl_output.nc"), "-b", "16", "-e", "8", "--checkpoint-every", "1",
            "-q"]
    subprocess.run(argv + ["-n", str(files / "straight.nc")], check=True)
    proc = subprocess.Popen(argv + ["-n", str(files / "killed.nc")])
    deadline = time.time() + 120
    while not (files / "killed.nc3.nc").exists():
        assert proc.poll() is None and time.time() < deadline, "no checkpoint appeared"
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (files / "killed.nc").exists()
    leftovers = [p for p in os.listdir(files) if p.endswith(".tmp")]
    subprocess.run(argv + ["-n", str(files / "killed.nc"), "--resume"], check=True)
    for a, b in zip(weights_of(files / "straight.nc"), weights_of(files / "killed.nc"),
                    strict=True):
        np.testing.assert_array_equal(a, b)
    assert all(not p.endswith(".tmp") or p in leftovers for p in os.listdir(files))


def test_a_finished_run_continues_from_its_last_checkpoint(files):
    """As DSSTNE (spec 5.2), the last epoch gets its checkpoint too (gl.nc4.nc after -e 4):
    training on to more epochs later resumes from there instead of redoing the last ones,
    and reaches the weights of one longer run."""
    metrics = ["--metrics", str(files / "m.jsonl")]
    assert run_train(files, "-b", "64", "-e", "4", "--checkpoint-every", "2",
                     *metrics).exit_code == 0
    assert (files / "net.nc2.nc").exists() and (files / "net.nc4.nc").exists()
    (files / "net.nc").unlink()
    with open(files / "m.jsonl", "a") as f:  # as if a run to 6 was stopped during epoch 6
        f.write('{"epoch": 5, "loss": 1.0}\n')
    result = run_train(files, "-b", "64", "-e", "6", "--checkpoint-every", "2", "--resume",
                       *metrics)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in (files / "m.jsonl").read_text().splitlines()]
    assert [line["epoch"] for line in lines] == [1, 2, 3, 4, 5, 6]
    assert lines[4]["loss"] != 1.0  # epoch 5's line is that of the epoch run again
    assert (f"wrote {files / 'net.nc'} at epoch 6 (2 epochs in this run, resumed from "
            f"{files / 'net.nc4.nc'})") in result.output
    assert "300 examples, batch 64, epochs 5..6\n" in result.output  # (the first line)
    assert run_train(files, "-b", "64", "-e", "6", network="straight.nc").exit_code == 0
    for a, b in zip(weights_of(files / "straight.nc"), weights_of(files / "net.nc"), strict=True):
        np.testing.assert_array_equal(a, b)


def test_ctrl_c_says_what_is_kept_and_how_to_go_on(files, monkeypatch):
    """What an interrupt leaves and how to go on; with an earlier run's checkpoint, as the run
    was given --resume or --resume-or-restart (stopped before it resumed, or having passed the
    checkpoint over): the same command run again is the advice (it said to run the same
    command with --resume, which it had, or which --resume-or-restart would not need)."""
    import destiny.fit

    def interrupted(**_):
        raise KeyboardInterrupt

    monkeypatch.setattr(destiny.fit, "fit", interrupted)
    result = run_train(files)
    assert result.exit_code == 1
    assert "interrupted before the first checkpoint" in result.output
    for epoch in (10, 20):
        (files / f"net.nc{epoch}.nc").write_bytes(b"")
    result = run_train(files)
    assert result.exit_code == 1 and "Aborted" not in result.output
    assert (f"interrupted; {files / 'net.nc'} was not written. This run wrote no checkpoint "
            f"yet. The newest checkpoint, {files / 'net.nc20.nc'} (epoch 20), is an earlier "
            "run's: --resume continues from it if that run had these settings") in result.output
    result = run_train(files, "--resume")
    assert (f"The newest checkpoint, {files / 'net.nc20.nc'} (epoch 20), is an earlier run's: "
            "the same command run again continues from it (its --resume) if that run had "
            "these settings and data; otherwise run it without --resume to start afresh."
            ) in result.output, result.output
    result = run_train(files, "--resume-or-restart")
    assert (f"The newest checkpoint, {files / 'net.nc20.nc'} (epoch 20), is an earlier run's: "
            "the same command run again continues from it (its --resume-or-restart) if that "
            "run had these settings and data, and starts afresh otherwise."
            ) in result.output, result.output
    assert "--resume " not in result.output
    for epoch in (10, 20):
        (files / f"net.nc{epoch}.nc").unlink()
    result = run_train(files, "--checkpoint-every", "0")
    assert "--checkpoint-every 0 writes no checkpoints: run the command again" in result.output
    (files / "net.nc").write_bytes(b"an earlier run's")  # (--force would have replaced it)
    result = run_train(files, "--checkpoint-every", "0", "--force")
    assert (f"interrupted; {files / 'net.nc'} was not written (the one there is left as it "
            "was).") in result.output


def disk_full_writing(monkeypatch, name: str):
    """Make train's writes of the network file ``name`` fail as on a full disk: part of its
    temporary file written, then an OSError naming no file, as a write's."""
    import errno

    import destiny.io.checkpoint

    real = destiny.io.checkpoint.write_network

    def write(path, *args, **kwargs):
        if os.path.basename(path).startswith(f".{name}."):  # (its temporary file)
            pathlib.Path(path).write_bytes(b"\x89HDF")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(destiny.io.checkpoint, "write_network", write)
    return real


def test_keep_checkpoints_removes_only_this_runs_older_ones(files):
    """--keep-checkpoints K keeps the K newest of this run, across a resume (the same run), and
    never removes an earlier run's checkpoints (those of epochs this run has not reached)."""
    def names():
        return sorted(p.name for p in files.iterdir() if p.name.startswith("net.nc")
                      and p.name != "net.nc")

    assert run_train(files, "-b", "64", "-e", "5", "--checkpoint-every", "1").exit_code == 0
    assert names() == [f"net.nc{e}.nc" for e in (1, 2, 3, 4, 5)]
    earlier = (files / "net.nc5.nc").read_bytes()
    result = run_train(files, "-b", "64", "-e", "2", "--checkpoint-every", "1",
                       "--keep-checkpoints", "1", "--force")
    assert result.exit_code == 0, result.output
    assert names() == ["net.nc2.nc", "net.nc3.nc", "net.nc4.nc", "net.nc5.nc"]
    (files / "net.nc").unlink()
    result = run_train(files, "-b", "64", "-e", "4", "--checkpoint-every", "1",
                       "--keep-checkpoints", "2", "--resume")
    assert result.exit_code == 0, result.output
    assert "resumed from" in result.output and "net.nc2.nc" in result.output
    # epochs 3 and 4 replaced the earlier run's; its epoch 5 stays, untouched
    assert names() == ["net.nc3.nc", "net.nc4.nc", "net.nc5.nc"]
    assert (files / "net.nc5.nc").read_bytes() == earlier


def test_the_latest_checkpoint_is_the_last_epoch_of_the_run_started_last(tmp_path):
    """checkpoint_path names DSSTNE's gl.nc10.nc; latest_checkpoint takes the last epoch of
    the run started last (destiny_run_started), a checkpoint of an earlier version (no start
    recorded) counting as oldest and one that cannot be read as newest, whatever the epochs."""
    import netCDF4

    from destiny.io.checkpoint import checkpoint_path, latest_checkpoint

    net = tmp_path / "gl.nc"
    assert checkpoint_path(net, 10) == f"{net}10.nc"

    def checkpoint(epoch, started=None):
        with netCDF4.Dataset(checkpoint_path(net, epoch), "w", format="NETCDF4") as nc:
            nc.setncattr("destiny_settings", "{}")
            if started is not None:
                nc.setncattr("destiny_run_started", np.float64(started))

    checkpoint(9)             # an earlier version's, of a later epoch
    checkpoint(7, started=200.0)
    checkpoint(8, started=100.0)  # an earlier run's, of a later epoch
    checkpoint(3, started=200.0)
    assert latest_checkpoint(net) == (f"{net}7.nc", 7)
    checkpoint(10, started=200.0)  # (gl.nc10.nc: its name sorts before gl.nc7.nc's)
    assert latest_checkpoint(net) == (f"{net}10.nc", 10)
    (tmp_path / "gl.nc2.nc").write_bytes(b"damaged")
    assert latest_checkpoint(net) == (f"{net}2.nc", 2)


def test_checkpoints_are_found_by_their_exact_names_and_a_start_not_a_time_counts_newest(
        tmp_path):
    """latest_checkpoint: a network path with glob's characters finds its checkpoints; a
    file only starting like one (gl[1].nc9.nc.copy.nc) is none; a run start that is not a
    finite time (damaged) counts as newest, so that --resume says so."""
    import netCDF4

    from destiny.io.checkpoint import checkpoint_path, latest_checkpoint

    net = tmp_path / "gl[1].nc"

    def checkpoint(path, started):
        with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
            nc.setncattr("destiny_settings", "{}")
            nc.setncattr("destiny_run_started", np.float64(started))

    checkpoint(checkpoint_path(net, 7), 200.0)
    checkpoint(tmp_path / "gl1.nc8.nc", 300.0)  # (what gl[1].nc*.nc matches as a pattern)
    checkpoint(tmp_path / "gl[1].nc9.nc.copy.nc", 300.0)
    assert latest_checkpoint(net) == (f"{net}7.nc", 7)
    checkpoint(checkpoint_path(net, 2), -np.inf)
    assert latest_checkpoint(net) == (f"{net}2.nc", 2)


def test_keep_checkpoints_keeps_all_while_there_are_fewer_than_it_keeps(tmp_path):
    """superseded_checkpoints: after epoch 3 of a run with --keep-checkpoints K, epochs 1 and
    2 are removed for K=1, epoch 1 for K=2, none for K of 3 or more."""
    from destiny.io.checkpoint import superseded_checkpoints

    net = superseded(tmp_path, (1, 2, 3))
    removed = {keep: superseded_checkpoints(net, 100.0, keep, 3) for keep in (1, 2, 3, 4, 5)}
    assert removed == {1: [f"{net}1.nc", f"{net}2.nc"], 2: [f"{net}1.nc"], 3: [], 4: [], 5: []}


def test_keep_checkpoints_keeps_the_newest_by_epoch_not_by_name(tmp_path):
    """Past epoch 9 the names sort otherwise than the epochs (gl.nc10.nc before gl.nc9.nc):
    after epoch 12 with K = 3, epochs 8 and 9 go and 10 and 11 stay, oldest first."""
    from destiny.io.checkpoint import superseded_checkpoints

    net = superseded(tmp_path, (8, 9, 10, 11, 12))
    assert superseded_checkpoints(net, 100.0, 3, 12) == [f"{net}8.nc", f"{net}9.nc"]
    assert superseded_checkpoints(net, 100.0, 1, 12) == [f"{net}{e}.nc" for e in (8, 9, 10, 11)]


def test_a_checkpoints_name_is_one_in_the_networks_directory_however_spelt(tmp_path):
    """checkpoint_epoch: gl.nc7.nc beside gl.nc, through any spelling of its directory, is
    the epoch-7 checkpoint; a file of that name in another directory (a metrics file kept
    elsewhere) is none, nor is one whose epoch is not a number."""
    from destiny.io.checkpoint import checkpoint_epoch

    (tmp_path / "sub").mkdir()
    (tmp_path / "other").mkdir()
    net = tmp_path / "gl.nc"
    assert checkpoint_epoch(net, tmp_path / "gl.nc7.nc") == 7
    assert checkpoint_epoch(net, tmp_path / "sub" / ".." / "gl.nc12.nc") == 12
    assert checkpoint_epoch(net, tmp_path / "other" / "gl.nc7.nc") is None
    assert checkpoint_epoch(net, tmp_path / "gl.ncx.nc") is None
    assert checkpoint_epoch(net, tmp_path / "gl.nc.nc") is None


def test_keep_checkpoints_without_checkpoints_says_so(files):
    result = run_train(files, "-e", "1", "--checkpoint-every", "0", "--keep-checkpoints", "2")
    assert result.exit_code == 0, result.output
    assert ("--keep-checkpoints has nothing to keep: --checkpoint-every 0 writes no "
            "checkpoints") in result.output


def test_keep_checkpoints_passes_over_what_is_not_this_runs_checkpoint(files, monkeypatch):
    """Never removed: a damaged file named like a checkpoint, an --initial-network named like
    one (refused up front: it would be taken for one), or a copy of one named after a later
    epoch. A checkpoint that cannot be removed is noted (even with -q), and the run goes
    on."""
    from destiny.io.checkpoint import superseded_checkpoints
    from destiny.io.network_file import destiny_attributes

    result = run_train(files, "-e", "1", "--initial-network", str(files / "net.nc0.nc"))
    assert result.exit_code == 1
    assert (f"{files / 'net.nc0.nc'}: the initial network file (--initial-network) has the "
            "name of one of the network's checkpoints") in result.output
    assert not (files / "net.nc").exists()

    (files / "net.nc1.nc").write_bytes(b"damaged")
    refused, remove = os.fspath(files / "net.nc2.nc"), os.remove

    def remove_but(path):
        if os.fspath(path) == refused:
            raise PermissionError(13, "Permission denied", path)
        remove(path)

    monkeypatch.setattr(os, "remove", remove_but)
    result = run_train(files, "-b", "64", "-e", "6", "--checkpoint-every", "2", "-q",
                       "--keep-checkpoints", "1", "--initial-network", str(files / "init.nc"))
    monkeypatch.undo()
    assert result.exit_code == 0, result.output
    assert (f"--keep-checkpoints could not remove {refused} (Permission denied); remove them "
            "by hand") in result.output
    assert "notes (but one naming checkpoints --keep-checkpoints could not remove)" in " ".join(
        CliRunner().invoke(train, ["-h"]).output.split())  # (-q's help, as the README says)
    assert sorted(p.name for p in files.iterdir() if p.name.startswith("net.nc")) == [
        "net.nc", "net.nc1.nc", "net.nc2.nc", "net.nc6.nc"]
    assert (files / "net.nc1.nc").read_bytes() == b"damaged"

    started = destiny_attributes(files / "net.nc6.nc")["run_started"]
    assert destiny_attributes(files / "init.nc")["run_started"] == started  # (the same run's)
    (files / "net.nc0.nc").write_bytes((files / "init.nc").read_bytes())
    (files / "net.nc99.nc").write_bytes((files / "net.nc6.nc").read_bytes())
    assert superseded_checkpoints(files / "net.nc", started, 1, 6) == [refused]


@pytest.mark.parametrize("flag, then", [
    ((), "run the same command with --resume to continue from {files}/net.nc2.nc (epoch 2), "
         "the newest checkpoint."),
    (("--resume-or-restart",), "run the same command again to continue from {files}/net.nc2.nc "
                               "(epoch 2), the newest checkpoint, which its --resume-or-restart "
                               "takes.")], ids=["plain", "resume-or-restart"])
def test_a_full_disk_names_the_checkpoint_to_resume_from(files, monkeypatch, flag, then):
    """The disk filling up while the epoch-4 checkpoint is written: the message names that
    checkpoint (a write's failure names no file: it said "No space left on device" alone)
    and the epoch-2 checkpoint to --resume from, not only "run the command again" (which is
    the advice of a run given --resume-or-restart, which takes it: not to add --resume). With
    --keep-checkpoints 1 too: the epoch-2 one is removed only once the next is in place."""
    import destiny.io.checkpoint

    real = disk_full_writing(monkeypatch, "net.nc4.nc")
    result = run_train(files, "-b", "64", "-e", "6", "--checkpoint-every", "2",
                       "--keep-checkpoints", "1", *flag)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert (f"Error: {files / 'net.nc4.nc'}: No space left on device; {files / 'net.nc'} was "
            "not written.") in result.output
    assert ("Free space on that file system (or raise the quota), then "
            f"{then.format(files=files)}") in result.output, result.output
    assert not [p for p in files.iterdir() if p.name.startswith(".net.nc4.nc.")]
    assert (files / "net.nc2.nc").is_file()
    monkeypatch.setattr(destiny.io.checkpoint, "write_network", real)
    resumed = run_train(files, "-b", "64", "-e", "6", "--checkpoint-every", "2",
                        "--keep-checkpoints", "1", "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert f"resumed from {files / 'net.nc2.nc'}" in resumed.output, resumed.output


def test_a_full_disk_after_the_initial_network_does_not_say_nothing_was_replaced(files,
                                                                               monkeypatch):
    """--initial-network's file was written, then the disk filled up (no checkpoint yet): the
    message said "no output was replaced"; it names the network file that was not written."""
    disk_full_writing(monkeypatch, "net.nc")
    (files / "net.nc").write_bytes(b"earlier")
    result = run_train(files, "-b", "64", "-e", "1", "--initial-network",
                       str(files / "initial.nc"), "--force")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.splitlines()[-1] == (
        f"Error: {files / 'net.nc'}: No space left on device; {files / 'net.nc'} was not "
        "written (the one there is left as it was). Free space on that file system (or raise "
        "the quota), then run the command again, or write the outputs elsewhere.")
    assert (files / "initial.nc").exists() and (files / "net.nc").read_bytes() == b"earlier"


@pytest.mark.parametrize("args, written", [
    (("-e", "6", "--checkpoint-every", "2"), "3 checkpoints of "),
    (("-e", "6", "--checkpoint-every", "1", "--keep-checkpoints", "2"), "2 checkpoints of "),
    (("-e", "6", "--checkpoint-every", "0"), "the network file, "),
])
def test_a_run_whose_files_would_not_fit_on_the_disk_is_noted_at_its_start(files, monkeypatch,
                                                                            args, written):
    """A long run with DSSTNE's default (every checkpoint kept) filled the disk and stopped at
    the write that found it full: the start now says what the run would write, against the
    space free beside the network file."""
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**6, 10**6 - 1000, 1000))
    result = run_train(files, "-b", "64", *args)
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.output.splitlines() if "free" in line]
    assert line.startswith(f"train: this run writes {written}"), line
    assert f"but the file system of {files / 'net.nc'} has 1,000 bytes free: it would stop at " \
        "the write that finds the disk full" in line
    assert line.endswith({"3": "; --keep-checkpoints K keeps only the K newest, "
                               "--checkpoint-every N writes fewer",
                          "2": "; a smaller --keep-checkpoints keeps fewer"}.get(
                              written[0], "it would stop at the write that finds the disk full"))
    monkeypatch.undo()
    again = run_train(files, "-b", "64", *args, "--force")
    assert again.exit_code == 0 and "free:" not in again.output


def test_the_disk_space_estimate_is_the_files_size(files):
    """network_bytes: a checkpoint's and the network file's sizes, to within the files'
    headers, as the note on free space counts them."""
    from destiny.io.checkpoint import network_bytes
    from destiny.kernels import get_backend
    from destiny.netdef import load_netdef

    assert run_train(files, "-b", "64", "-e", "1", "--checkpoint-every", "1").exit_code == 0
    net = Network(load_netdef(files / "net.json", {"gl_input": 128, "gl_output": 128}),
                  get_backend("cpu"))
    net.initialize(1)
    from destiny.train import train_config
    net.init_optimizer(train_config().optimizer_config())
    each, trained = network_bytes(net)
    assert 0 <= os.path.getsize(files / "net.nc1.nc") - each < 64 * 1024
    assert 0 <= os.path.getsize(files / "net.nc") - trained < 64 * 1024


def test_a_full_disk_at_the_last_write_names_the_last_checkpoint(files, monkeypatch):
    """The disk fills up as the trained network is written, after the last epoch's checkpoint:
    --resume would have nothing left to train, so the message says that checkpoint is the
    trained network (predict reads it)."""
    disk_full_writing(monkeypatch, "net.nc")
    result = run_train(files, "-b", "64", "-e", "2", "--checkpoint-every", "1")
    assert result.exit_code == 1
    assert (f"then use {files / 'net.nc2.nc'}, the checkpoint of the last epoch (2): it is the "
            f"trained network (with the optimizer's state, which predict ignores), so copy it "
            f"to {files / 'net.nc'}.") in result.output


@pytest.mark.parametrize("name, then", [
    ("net.nc4.nc", "run the same command with --resume to continue from {files}/net.nc2.nc "
                   "(epoch 2), the newest checkpoint."),
    ("net.nc", "use {files}/net.nc6.nc, the checkpoint of the last epoch (6): it is the trained "
               "network")], ids=["checkpoint", "network"])
def test_a_file_that_cannot_be_begun_after_a_checkpoint_names_the_checkpoint(files, monkeypatch,
                                                                           name, then):
    """No inode left (or the directory removed meanwhile) as a later checkpoint's, or the
    network's, temporary file is created: the refusal said what to mend, but neither that
    the network was not written nor that this run's checkpoint goes on from where it stopped."""
    import errno
    import tempfile

    real = tempfile.mkstemp

    def no_inode(*args, prefix="", **kwargs):
        if prefix == f".{name}.":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, prefix=prefix, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", no_inode)
    result = run_train(files, "-b", "64", "-e", "6", "--checkpoint-every", "2")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert (f"Error: {files / name}: cannot create a file in '{files}' to write it (No space left "
            "on device); free space on that file system (or raise the quota), or choose another "
            f"path. {files / 'net.nc'} was not written; to go on from this run's newest "
            f"checkpoint, {then.format(files=files)}") in result.output, result.output
    assert not (files / "net.nc").exists()


def test_a_full_disk_as_the_metrics_are_written_names_them(files):
    """The metrics file's writes failing (here, a link to the full device /dev/full): the
    message names the file as given, where it said "No space left on device" alone, and says
    that it holds what was written (it is written in place, not replaced at the end)."""
    (files / "m.jsonl").symlink_to("/dev/full")
    result = run_train(files, "-b", "64", "-e", "2", "--metrics", str(files / "m.jsonl"))
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert (f"\nError: {files / 'm.jsonl'}: No space left on device; it is written as the "
            "command goes, and holds what was written before the failure.") in result.output, \
        result.output
    assert not (files / "net.nc").exists()


def test_a_full_disk_as_a_metrics_file_is_written_says_it_holds_what_was_written(files,
                                                                                monkeypatch):
    """A plain metrics file (not a stream) is written in place too: a write failing there
    says the file holds what was written, not that no output was replaced (it was emptied
    and written to)."""
    import errno

    import destiny.io.failures

    class Full(destiny.io.failures._NamedFile):
        def write(self, b):
            with self._naming():
                raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(destiny.io.failures, "_NamedFile", Full)
    result = run_train(files, "-b", "64", "-e", "2", "--metrics", str(files / "m.jsonl"))
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert (f"\nError: {files / 'm.jsonl'}: No space left on device; it is written as the "
            "command goes, and holds what was written before the failure.") in result.output, \
        result.output


def test_an_interrupt_held_while_a_file_is_put_in_place_says_it_is_whole(files, monkeypatch):
    """Ctrl-C as the trained network, or a checkpoint, is renamed into place: the interrupt
    waits for the rename, then says the network is complete, or names that checkpoint as
    this run's newest (not as an earlier run's to move away)."""
    from destiny.io import atomic

    rename = os.replace

    def interrupted_rename(ending):
        def replace(src, dst):
            rename(src, dst)
            if str(dst).endswith(ending):
                os.kill(os.getpid(), signal.SIGINT)
        return replace

    monkeypatch.setattr(atomic.os, "replace", interrupted_rename("net.nc"))
    before = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # (pytest run as `... &`)
        result = run_train(files, "-b", "64", "-e", "2", "--checkpoint-every", "0")
        assert result.exit_code == 1
        assert (f"interrupted as {files / 'net.nc'} was put in place, once it was: it is "
                "complete.") in result.output
        assert (files / "net.nc").is_file()
        monkeypatch.setattr(atomic.os, "replace", interrupted_rename("net.nc2.nc"))
        result = run_train(files, "-b", "64", "-e", "4", "--checkpoint-every", "2", "--force")
        assert result.exit_code == 1
        assert (f"To go on, run the same command with --resume to continue from "
                f"{files / 'net.nc2.nc'} (epoch 2), the newest checkpoint.") in result.output
    finally:
        signal.signal(signal.SIGINT, before)


def test_an_interrupt_once_the_network_is_in_place_says_it_is_complete(files, monkeypatch):
    """SIGTERM after the trained network was put in place, as its lock is released (the crash
    campaign's signal at the removal of `.gl.nc.lock`): the message said that the network
    "was not written (the one there is left as it was)" and to copy the last checkpoint over
    it, and the lock file stayed. It now says the network is complete, and no lock is left;
    so too for a checkpoint put in place before this run heard of it: it is the one to go on
    from."""
    from destiny.io import atomic

    unlink = os.unlink

    def signal_then_unlink(path, *args, **kwargs):
        if str(path).endswith(".lock"):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # time for the handler, were it to run now
                pass
        unlink(path, *args, **kwargs)

    monkeypatch.setattr(atomic.os, "unlink", signal_then_unlink)
    before = signal.getsignal(signal.SIGTERM)
    try:
        result = run_train(files, "-b", "64", "-e", "2", "--checkpoint-every", "2")
        assert result.exit_code == 1
        assert result.output.splitlines()[-1] == (
            f"Error: interrupted as the command finished, once {files / 'net.nc'} was put in "
            "place: it is complete.")
        assert sorted(p.name for p in files.iterdir() if p.name.startswith(".")) == []
        monkeypatch.setattr(atomic.os, "unlink", unlink)
        discard = atomic.OutputSet.discard

        def signal_once_put_in_place(outputs):  # (just after the commit, outside its hold)
            discard(outputs)
            if atomic.put_in_place() == [str(files / "net.nc2.nc")]:
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):
                    pass

        monkeypatch.setattr(atomic.OutputSet, "discard", signal_once_put_in_place)
        result = run_train(files, "-b", "64", "-e", "4", "--checkpoint-every", "2", "--force")
        assert result.exit_code == 1
        assert (f"To go on, run the same command with --resume to continue from "
                f"{files / 'net.nc2.nc'} (epoch 2), the newest checkpoint.") in result.output
    finally:
        signal.signal(signal.SIGTERM, before)


def stop_at_once(*_, **__):
    raise KeyboardInterrupt


def test_ctrl_c_names_this_runs_checkpoint_not_an_earlier_runs(files, monkeypatch):
    """Ctrl-C after epoch 3 of a run checkpointing every 2 epochs names its own epoch-2
    checkpoint, which --resume takes, even where an earlier run left one of a later epoch (4)
    and the files' times say otherwise (a copy sets them in its own order): --resume goes on
    with the run started last (it used to take epoch 4, another run's). A resumed run that
    finished no epoch since names the checkpoint it resumed from, as the same command run again
    goes on from (it said to run it with --resume, which it had, or --resume-or-restart)."""
    import destiny.fit

    real = destiny.fit.train_epochs

    def stop_after(last):
        def run(net, data, cfg, state, on_batch, on_epoch):
            def done(record, st):
                on_epoch(record, st)
                if record.epoch == last:
                    raise KeyboardInterrupt
            return real(net, data, cfg, state, on_batch=on_batch, on_epoch=done)
        return run

    this_run = (f"To go on, run the same command with --resume to continue from "
                f"{files / 'net.nc2.nc'} (epoch 2), the newest checkpoint.")
    assert run_train(files, "-b", "64", "-e", "4", "--checkpoint-every", "2").exit_code == 0
    monkeypatch.setattr(destiny.fit, "train_epochs", stop_after(3))
    result = run_train(files, "-b", "64", "-e", "5", "--checkpoint-every", "2", "--force")
    assert result.exit_code == 1 and this_run in result.output
    os.utime(files / "net.nc4.nc", (time.time() + 100,) * 2)  # the earlier run's, copied last
    monkeypatch.setattr(destiny.fit, "train_epochs", real)
    result = run_train(files, "-b", "64", "-e", "2", "--checkpoint-every", "2", "--resume",
                       "--force")
    assert result.exit_code == 1  # (it resumed from epoch 2, with nothing left to train)
    assert (f"{files / 'net.nc2.nc'}: --resume takes the newest checkpoint, and this file is at "
            "epoch 2 already, and -e 2 asks for no more; give a larger -e") in result.output
    monkeypatch.setattr(destiny.fit, "train_epochs", stop_at_once)
    for flag in ("--resume", "--resume-or-restart"):
        result = run_train(files, "-b", "64", "-e", "5", "--checkpoint-every", "2", flag,
                           "--force")
        assert result.exit_code == 1 and (
            f"To go on, run the same command again to continue from {files / 'net.nc2.nc'} "
            f"(epoch 2), the newest checkpoint, which its {flag} takes.") in result.output, \
            result.output


def test_a_second_run_writing_the_same_network_stops_at_once(files):
    """Overlapping cron jobs: while one run holds the network file's lock, another run to the
    same -n fails before any work instead of silently replacing the first one's network."""
    from destiny.io.atomic import exclusive

    with exclusive(files / "net.nc", "network file (-n)"):
        result = run_train(files, "--force")
        assert result.exit_code == 1
        assert "net.nc: another run is writing this network file (-n) now" in result.output
        assert not (files / "net.nc").exists()
    assert not (files / ".net.nc.lock").exists()
    (files / ".net.nc.lock").write_bytes(b"")  # left by a killed run: free, taken again
    assert run_train(files).exit_code == 0
    assert sorted(p.name for p in files.iterdir() if p.name.startswith(".")) == []


def test_a_run_writing_the_same_initial_network_stops_at_once(files):
    """Two runs given one --initial-network (or one whose -n it is): the second stops before
    any work. Holding the lock, a run removes the temporary initial network a killed run left,
    a file as large as the network."""
    from destiny.io.atomic import ABANDONED_SECONDS, exclusive

    initial = files / "init.nc"
    with exclusive(initial, "network file (-n)"):
        result = run_train(files, "--initial-network", str(initial))
        assert result.exit_code == 1
        assert ("init.nc: another run is writing this initial network file (--initial-network) "
                "now") in result.output
        assert not (files / "net.nc").exists() and not initial.exists()
    left = files / ".init.nc.abcd1234.tmp"
    left.write_bytes(b"\0" * 1000)  # a killed run's
    os.utime(left, (time.time() - ABANDONED_SECONDS - 10,) * 2)
    assert run_train(files, "--initial-network", str(initial)).exit_code == 0
    assert initial.exists() and not left.exists()
    assert sorted(p.name for p in files.iterdir() if p.name.startswith(".")) == []


def test_a_network_written_as_this_run_takes_the_lock_is_not_replaced(files, monkeypatch):
    """Another run writes the network and releases the lock just as this one starts: this
    run, which takes the lock next, then finds the network there and stops (without
    --force), instead of training on and replacing it."""
    from destiny.io import atomic

    real = atomic.exclusive

    def exclusive(path, *args, **kwargs):
        if os.fspath(path) == os.fspath(files / "net.nc"):
            (files / "net.nc").write_bytes(b"the other run's")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(atomic, "exclusive", exclusive)
    result = run_train(files, "-e", "1")
    assert result.exit_code == 1 and "already exists" in result.output, result.output
    assert (files / "net.nc").read_bytes() == b"the other run's"


def test_a_killed_runs_temporary_network_and_checkpoints_are_removed(files):
    """A run killed outright (SIGKILL, the OOM killer) leaves its temporary checkpoint, as
    large as the network and its optimizer state: the next run to that -n removes such files
    of the network and of its checkpoints once they are an hour old, and no other's."""
    import os
    import time

    from destiny.io.atomic import ABANDONED_SECONDS

    removed = (".net.nc.0123abcd.tmp", ".net.nc10.nc.k3m_x9qa.tmp", ".net.nc2.nc.0123abcd.tmp")
    kept = (".net.nc.nc.0123abcd.tmp", ".net.ncx.nc.0123abcd.tmp", ".net.nc10.nc.0123abc.tmp",
            ".other.nc10.nc.0123abcd.tmp", "net.nc10.nc.0123abcd.tmp")
    old = time.time() - ABANDONED_SECONDS - 60
    for name in removed + kept:
        (files / name).write_bytes(b"partial")
        os.utime(files / name, (old, old))
    (files / ".net.nc3.nc.fresh123.tmp").write_bytes(b"written a minute ago")
    assert run_train(files, "-e", "1", "--checkpoint-every", "0").exit_code == 0
    left = {p.name for p in files.iterdir() if p.name.endswith(".tmp")}
    assert left == {*kept, ".net.nc3.nc.fresh123.tmp"}


def test_a_killed_runs_checkpoints_beside_a_linked_network_are_removed(files, tmp_path):
    """-n a link to a file in another directory: the network's temporary is beside the file
    it points to, and its checkpoints (named after the link) beside the link; both of a
    killed run are removed."""
    import os
    import time

    from destiny.io.atomic import ABANDONED_SECONDS

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (files / "net.nc").symlink_to(elsewhere / "real.nc")
    old = time.time() - ABANDONED_SECONDS - 60
    left = [files / ".net.nc10.nc.k3m_x9qa.tmp", elsewhere / ".real.nc.0123abcd.tmp"]
    for path in left:
        path.write_bytes(b"partial")
        os.utime(path, (old, old))
    assert run_train(files, "-e", "2", "--checkpoint-every", "1").exit_code == 0
    assert not any(path.exists() for path in left)
    assert (files / "net.nc").is_symlink() and (elsewhere / "real.nc").is_file()
    assert (files / "net.nc2.nc").is_file()


def test_metrics_to_a_device_are_written_in_place_and_a_checkpoints_name_is_refused(files):
    import stat

    (files / "null").symlink_to("/dev/null")
    result = run_train(files, "-e", "1", "--metrics", str(files / "null"))
    assert result.exit_code == 0, result.output
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    result = run_train(files, "-e", "2", "--checkpoint-every", "1", "--force",
                       "--metrics", str(files / "net.nc2.nc"))
    assert result.exit_code == 1
    assert "net.nc2.nc: the metrics file has the name of one of the network's checkpoints" \
        in result.output


def test_a_damaged_newest_checkpoint_says_how_to_go_on(files):
    assert run_train(files, "-b", "64", "-e", "2", "--checkpoint-every", "1").exit_code == 0
    (files / "net.nc").unlink()
    data = (files / "net.nc2.nc").read_bytes()
    (files / "net.nc2.nc").write_bytes(data[:len(data) // 2])  # cut short (a full disk)
    result = run_train(files, "-b", "64", "-e", "3", "--checkpoint-every", "1", "--resume")
    assert result.exit_code == 1
    assert (f"--resume takes the newest checkpoint, {files / 'net.nc2.nc'}: if it is damaged "
            "or not a checkpoint of this run, move it away") in result.output
    (files / "net.nc2.nc").unlink()
    result = run_train(files, "-b", "64", "-e", "3", "--checkpoint-every", "1", "--resume")
    assert result.exit_code == 0 and "resumed from" in result.output


def test_resume_refuses_a_checkpoint_of_other_data_or_a_finished_one(files):
    """A checkpoint is resumed only by the same run: other data of the same number of
    examples (cron's new day, a cron job passing --resume every time) is refused, and so
    is a checkpoint already at -e, or past it, which would publish its weights as they were."""
    assert run_train(files, "-b", "64", "-e", "2", "--checkpoint-every", "1").exit_code == 0
    (files / "net.nc").unlink()
    finished = run_train(files, "-b", "64", "-e", "2", "--checkpoint-every", "1", "--resume")
    assert finished.exit_code == 1
    assert "this file is at epoch 2 already, and -e 2 asks for no more" in finished.output
    beyond = run_train(files, "-b", "64", "-e", "1", "--checkpoint-every", "1", "--resume")
    assert beyond.exit_code == 1 and not (files / "net.nc").exists()
    assert "this file is at epoch 2 already, and -e 1 asks for no more" in beyond.output
    other = random_dataset("x", seed=5)  # as many examples, other entries
    for name in ("gl_input", "gl_output"):
        write_dataset(files / f"{name}.nc",
                      SparseDataset(name, other.width, other.indptr, other.indices))
    result = run_train(files, "-b", "64", "-e", "3", "--checkpoint-every", "1", "--resume")
    assert result.exit_code == 1 and "made with other settings (dataset gl_input: " in result.output
    assert "entries in the checkpoint's data" in result.output


def test_resume_tells_data_changed_in_place_from_the_same_data_written_again(files):
    """Data whose sizes did not change (one user's item swapped for another: as many examples,
    entries and the same index) is not the run's data: --resume refuses it and
    --resume-or-restart trains afresh. The same entries written again to a new file resume."""
    ds = random_dataset("x")
    assert run_train(files, "-b", "64", "-e", "2", "--checkpoint-every", "1").exit_code == 0
    (files / "net.nc").unlink()
    (files / "net.nc2.nc").unlink()  # (as a run stopped after epoch 1)
    for name in ("gl_input", "gl_output"):  # the same entries, a new file
        write_dataset(files / f"{name}.nc", SparseDataset(name, ds.width, ds.indptr, ds.indices))
    result = run_train(files, "-b", "64", "-e", "2", "--checkpoint-every", "1", "--resume")
    assert result.exit_code == 0 and "resumed from" in result.output, result.output
    (files / "net.nc").unlink()
    (files / "net.nc2.nc").unlink()
    swapped = ds.indices.copy()
    row = ds.indices[ds.indptr[0]:ds.indptr[1]]
    swapped[ds.indptr[0]] = next(i for i in range(ds.width) if i not in row)
    write_dataset(files / "gl_output.nc",
                  SparseDataset("gl_output", ds.width, ds.indptr, swapped))
    result = run_train(files, "-b", "64", "-e", "2", "--checkpoint-every", "1", "--resume")
    assert result.exit_code == 1
    assert ("this file is made with other settings (dataset gl_output: other entries in this "
            "data than in the checkpoint's (as many of them)); resuming from it would not "
            "continue the same run") in result.output, result.output
    result = run_train(files, "-b", "64", "-e", "2", "--checkpoint-every", "1",
                       "--resume-or-restart")
    assert result.exit_code == 0 and "resumed from" not in result.output, result.output
    assert "--resume-or-restart trains afresh" in result.output


def test_a_checkpoint_replaced_as_resume_or_restart_judged_it_is_refused_naming_the_flag(
        files, monkeypatch):
    """Rank 0 judges the newest checkpoint before each rank loads it, judging it again: a file
    replaced between the two (here, as if) is refused, naming --resume-or-restart, the flag
    given (the refusal said --resume). The remedy is to run the same command again, which
    passes over the file by itself: it said to move the file away, or to start afresh
    without the flag, neither of which a make rule or cron job passing it needs."""
    import destiny.fit

    args = ("-b", "64", "--checkpoint-every", "1")
    assert run_train(files, "-e", "1", *args, "--initial-network",
                     str(files / "init.nc")).exit_code == 0
    shutil.copy(files / "init.nc", files / "net.nc2.nc")  # no run's checkpoint
    judged, calls = destiny.fit._judged, []

    def passed_the_first_time(*a, **k):
        calls.append(a)
        return None if len(calls) == 1 else judged(*a, **k)

    monkeypatch.setattr(destiny.fit, "_judged", passed_the_first_time)
    result = run_train(files, "-e", "3", *args, "--force", "--resume-or-restart")
    assert result.exit_code == 1 and len(calls) == 2, result.output
    assert (f"{files / 'net.nc2.nc'}: --resume-or-restart takes the newest checkpoint, and this "
            "file is not a checkpoint Destiny's train wrote") in result.output
    assert ("it was replaced as --resume-or-restart judged it, which passes over such a file. "
            "Run the same command again: it passes over this file and trains afresh."
            ) in result.output, result.output
    assert "--resume " not in result.output and "move it away" not in result.output
    monkeypatch.setattr(destiny.fit, "_judged", judged)
    again = run_train(files, "-e", "3", *args, "--force", "--resume-or-restart")
    assert again.exit_code == 0 and "--resume-or-restart trains afresh" in again.output


def test_resume_or_restart_trains_afresh_where_resume_refuses(files):
    """A make rule or cron job that passes --resume-or-restart every time: it resumes its own
    interrupted run, and where --resume would refuse the newest checkpoint (new data, or a run
    already at -e) it trains afresh with a note, as one without --resume would."""
    args = ("-b", "64", "--checkpoint-every", "1", "--force", "--resume-or-restart")
    first = run_train(files, "-e", "1", *args)
    assert first.exit_code == 0 and "resumed from" not in first.output, first.output
    resumed = run_train(files, "-e", "2", *args)  # (as a run stopped after epoch 1)
    assert resumed.exit_code == 0, resumed.output
    assert f"resumed from {files / 'net.nc1.nc'}" in resumed.output
    fresh = run_train(files, "-e", "2", *args, "--metrics", str(files / "m.jsonl"))
    assert fresh.exit_code == 0, fresh.output
    assert (f"the newest checkpoint, {files / 'net.nc2.nc'}, is at epoch 2 already, and -e 2 "
            "asks for no more: --resume-or-restart trains afresh") in fresh.output
    assert "resumed from" not in fresh.output and "(2 epochs in this run)" in fresh.output
    assert [json.loads(line)["epoch"] for line in open(files / "m.jsonl")] == [1, 2]
    np.testing.assert_array_equal(weights_of(files / "net.nc")[0],
                                  weights_of(files / "net.nc2.nc")[0])
    other = random_dataset("x", seed=5)  # cron's new day: as many examples, other entries
    for name in ("gl_input", "gl_output"):
        write_dataset(files / f"{name}.nc",
                      SparseDataset(name, other.width, other.indptr, other.indices))
    result = run_train(files, "-e", "3", *args, "--initial-network", str(files / "init.nc"))
    assert result.exit_code == 0, result.output
    assert (f"the newest checkpoint, {files / 'net.nc2.nc'}, is made with other settings "
            "(dataset gl_input: ") in result.output and "resumed from" not in result.output
    assert read_network(files / "init.nc").destiny["epoch"] == 0  # (a run started afresh)
    shutil.copy(files / "init.nc", files / "net.nc4.nc")  # a network named like a checkpoint
    result = run_train(files, "-e", "4", *args)
    assert result.exit_code == 0, result.output
    assert (f"the newest checkpoint, {files / 'net.nc4.nc'}, is not a checkpoint Destiny's train "
            "wrote (it records no run settings") in result.output
    for epoch in (1, 2, 3):
        (files / f"net.nc{epoch}.nc").unlink(missing_ok=True)
    shutil.copy(files / "init.nc", files / "net.nc4.nc")
    result = run_train(files, "-e", "5", "-b", "64", "--force", "--resume")  # (refused, by name)
    assert result.exit_code == 1 and ("--resume takes the newest checkpoint, and this file is "
                                      "not a checkpoint Destiny's train wrote") in result.output
    assert ("; move it away and --resume continues from the one before, or start afresh "
            "without --resume (--resume-or-restart does so by itself).") in result.output
    (files / "net.nc4.nc").unlink()
    assert run_train(files, "-e", "3", *args).exit_code == 0
    (files / "net.nc3.nc").write_bytes(b"damaged")  # not another run: said, not passed over
    result = run_train(files, "-e", "4", *args)  # (naming the flag given, not --resume)
    assert result.exit_code == 1 and (f"--resume-or-restart takes the newest checkpoint, "
                                      f"{files / 'net.nc3.nc'}: if it is damaged or not a "
                                      "checkpoint of this run, move it away and "
                                      "--resume-or-restart continues from the one before."
                                      ) in result.output
    assert "--resume " not in result.output
    (files / "net.nc3.nc").unlink()
    assert run_train(files, "-e", "2", *args, "-q").output == ""  # (a restart; -q: no note)


def test_resuming_keeps_the_metrics_lines_up_to_the_checkpoint_and_lines_not_its_own(tmp_path):
    """_kept_metrics: on resuming from epoch 2, the lines of epochs 1 and 2 and any line that
    is not an epoch's (a note someone added) stay; a later epoch's goes. A metrics stream
    (standard output, /dev/fd/N: a log) is not read back: it keeps what it holds."""
    from destiny.fit import _kept_metrics

    lines = ['{"epoch": 1, "loss": 3.0}\n', '{"epoch": 2, "loss": 2.0}\n', "# moved hosts\n",
             '{"epoch": 3, "loss": 1.0}\n', '{"note": "by hand"}\n']
    path = tmp_path / "m.jsonl"
    path.write_text("".join(lines))
    assert _kept_metrics(path, 2) == lines[:3] + lines[4:]
    assert _kept_metrics(path, 1) == [lines[0], lines[2], lines[4]]
    assert _kept_metrics(path, 0) == []
    with open(path, "a") as log:
        assert _kept_metrics(f"/dev/fd/{log.fileno()}", 2) == []


def test_a_stop_as_a_resumed_run_opens_its_metrics_file_keeps_the_lines_it_kept(tmp_path,
                                                                                  monkeypatch):
    """_open_metrics on resuming from epoch 2: the file is cut after the kept lines, never
    emptied first. A signal (or SIGKILL, or a power cut) just as it was opened left it empty
    where it was emptied and written again, and the epochs before the checkpoint were lost
    for good: the run that resumed next wrote from epoch 3 on."""
    from destiny import fit

    lines = ['{"epoch": 1, "loss": 3.0}\n', '{"epoch": 2, "loss": 2.0}\n',
             '{"epoch": 3, "loss": 1.0}\n']
    path = tmp_path / "m.jsonl"
    path.write_text("".join(lines))
    kept = fit._kept_metrics(path, 2)
    opened = fit.failures.open_text

    def then_interrupted(*args, **kwargs):  # (the signal as the file is opened)
        opened(*args, **kwargs).close()
        raise KeyboardInterrupt

    monkeypatch.setattr(fit.failures, "open_text", then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        fit._open_metrics(path, kept)
    assert path.read_text() == "".join(lines[:2])
    monkeypatch.setattr(fit.failures, "open_text", opened)
    with fit._open_metrics(path, kept) as metrics:  # (resumed again: appends after them)
        metrics.write('{"epoch": 3, "loss": 0.5}\n')
    assert path.read_text() == "".join(lines[:2]) + '{"epoch": 3, "loss": 0.5}\n'
    path.write_text("# edited\n" + "".join(lines))  # (not as read: written again, as before)
    with fit._open_metrics(path, kept):
        pass
    assert path.read_text() == "".join(kept)
    with fit._open_metrics(path, []):  # (a fresh run: emptied)
        pass
    assert path.read_text() == ""


def test_a_checkpoint_of_an_earlier_version_is_judged_by_the_settings_it_records():
    """Checkpoints of earlier versions recorded fewer settings (no feature indexes): those
    they record must agree, the others are not taken for differences."""
    from destiny.fit import _other_settings

    settings = {"config": {"batch": 64, "epochs": 5}, "netdef": "{}", "examples": 300,
                "entries": {"gl_input": 1350}, "indexes": ""}
    earlier = {k: v for k, v in settings.items() if k != "indexes"}
    assert _other_settings(earlier, settings) == []
    assert _other_settings(earlier | {"examples": 200}, settings) == [
        "200 examples in the checkpoint's data, 300 in this data"]


def test_a_checkpoint_of_other_settings_in_any_one_of_them_but_epochs_is_another_runs():
    """_other_settings: each TrainConfig field the checkpoint records but -e (a seed, the
    brake, ...) changed alone makes the checkpoint another run's, which --resume refuses."""
    from dataclasses import asdict, fields

    from destiny.fit import _other_settings

    config = TrainConfig(batch=64, epochs=5, optimizer="adam", alpha=0.01, lam=0.0, mu=0.9,
                         mu1=0.999, shuffle=True)
    settings = {"config": asdict(config), "netdef": "{}", "examples": 300,
                "entries": {"gl_input": 1350}, "indexes": "", "contents": {"gl_input": "d"}}
    other = {"batch": 32, "epochs": 6, "optimizer": "sgd", "alpha": 0.5, "lam": 0.1,
             "lam1": 0.1, "mu": 0.5, "mu1": 0.9, "seed": 7, "shuffle": False, "brake": False}
    assert other.keys() == {f.name for f in fields(TrainConfig)}  # (a new field: add it)
    for name, value in other.items():
        now = dict(settings, config=dict(settings["config"], **{name: value}))
        assert bool(_other_settings(json.loads(json.dumps(settings)), now)) == (
            name != "epochs"), name


def test_a_setting_no_optimizer_of_the_two_reads_does_not_make_a_checkpoint_another_runs():
    """-mu under sgd, -alpha under adadelta: train notes that they have no effect, so a
    checkpoint differing in them alone is this run's (--resume refused it, and
    --resume-or-restart trained afresh). Where the optimizers differ, the settings beside them
    are those both read: one read by only one of them was listed as if the other had it."""
    from dataclasses import asdict

    from destiny.fit import _other_settings

    def settings(**config):
        config = asdict(TrainConfig(**{"batch": 64, "epochs": 5, **config}))
        return json.loads(json.dumps({"config": config, "netdef": "{}", "examples": 300}))

    assert _other_settings(settings(optimizer="sgd", mu=0.9, mu1=0.5),
                           settings(optimizer="sgd", mu=0.5, mu1=0.9)) == []
    assert _other_settings(settings(optimizer="adadelta", alpha=0.5),
                           settings(optimizer="adadelta", alpha=1.0)) == []
    assert _other_settings(settings(optimizer="sgd", alpha=0.5),
                           settings(optimizer="sgd", alpha=1.0)) == [
        "-alpha 0.5 in the checkpoint, 1.0 now"]
    assert _other_settings(settings(optimizer="sgd", mu=0.9, alpha=0.5),  # (sgd reads no -mu)
                           settings(optimizer="momentum", mu=0.5, alpha=1.0)) == [
        "-alpha 0.5 in the checkpoint, 1.0 now", "--optimizer sgd in the checkpoint, momentum now"]
    assert _other_settings(settings(optimizer="adam", mu=0.9, mu1=0.999),
                           settings(optimizer="sgd", mu=0.5, mu1=0.0)) == [
        "--optimizer adam in the checkpoint, sgd now"]
    assert _other_settings(settings(optimizer="sgd", mu1=0.9),  # (neither reads -mu1)
                           settings(optimizer="momentum", mu1=0.5)) == [
        "--optimizer sgd in the checkpoint, momentum now"]


def superseded(tmp_path, epochs):
    """Checkpoints of ``epochs`` of one run (started at 100) beside ``tmp_path / "gl.nc"``."""
    import netCDF4

    from destiny.io.checkpoint import checkpoint_path

    net = tmp_path / "gl.nc"
    for epoch in epochs:
        with netCDF4.Dataset(checkpoint_path(net, epoch), "w", format="NETCDF4") as nc:
            nc.setncattr("destiny_settings", "{}")
            nc.setncattr("destiny_run_started", np.float64(100.0))
    return net


def test_keep_checkpoints_never_removes_a_run_started_later(tmp_path):
    """superseded_checkpoints: only this run's (the same start) older checkpoints go; one of
    a run started later (a copy, another machine's clock) is never among them."""
    import netCDF4

    from destiny.io.checkpoint import checkpoint_path, superseded_checkpoints

    net = superseded(tmp_path, (2,))  # (this run's, started at 100)
    with netCDF4.Dataset(checkpoint_path(net, 1), "w", format="NETCDF4") as nc:
        nc.setncattr("destiny_settings", "{}")
        nc.setncattr("destiny_run_started", np.float64(200.0))
    assert superseded_checkpoints(net, 100.0, 1, 3) == [f"{net}2.nc"]


def test_a_superseded_checkpoint_removed_meanwhile_is_no_failure(tmp_path, monkeypatch):
    """--keep-checkpoints: a checkpoint gone before its removal (removed by hand meanwhile) is
    not noted as one that could not be removed."""
    from destiny.fit import _remove_superseded

    net = superseded(tmp_path, (1, 2, 3))
    remove = os.remove

    def gone_first(path):
        if os.fspath(path).endswith("gl.nc1.nc"):
            remove(path)
            raise FileNotFoundError(2, "No such file or directory", path)
        remove(path)

    monkeypatch.setattr(os, "remove", gone_first)
    assert _remove_superseded(net, 100.0, 1, 3) == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gl.nc3.nc"]


def test_an_interrupt_during_the_removal_of_superseded_checkpoints_waits_for_all(
        tmp_path, monkeypatch):
    """Ctrl-C as --keep-checkpoints removes this run's older checkpoints: the removals all
    happen, then the interrupt."""
    from destiny.fit import _remove_superseded

    net = superseded(tmp_path, (1, 2, 3))
    remove = os.remove

    def remove_then_signal(path):
        remove(path)
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(os, "remove", remove_then_signal)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # (pytest run as `&`)
    try:
        with pytest.raises(KeyboardInterrupt):
            _remove_superseded(net, 100.0, 1, 3)
    finally:
        signal.signal(signal.SIGINT, before)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gl.nc3.nc"]


def test_metrics_to_stdout_append_to_the_log_that_stdout_is(files):
    """`train --metrics /dev/stdout >> cron.log 2>&1` (or `--metrics -`): the metrics go
    through stdout's own descriptor, after what the log held and beside the notes on stderr;
    opening /dev/stdout again used to empty the log. With `> log 2>&1` (one offset for both
    streams) neither overwrites the other."""
    for mode, name in (("ab", "/dev/stdout"), ("wb", "-")):
        log = files / "cron.log"
        log.write_text("old\n")
        with open(log, mode) as out:
            if mode == "wb":
                out.write(b"old\n")
                out.flush()
            done = subprocess.run(
                [str(BIN / "train"), "-c", str(files / "net.json"), "-i",
                 str(files / "gl_input.nc"), "-o", str(files / "gl_output.nc"), "-n",
                 str(files / "net.nc"), "-b", "64", "-e", "2", "--force", "--metrics", name],
                stdout=out, stderr=subprocess.STDOUT, timeout=300)
        lines = log.read_text().splitlines()
        assert done.returncode == 0, lines
        assert lines[0] == "old" and lines[-1].startswith("train: wrote"), lines
        assert [json.loads(line)["epoch"] for line in lines if line.startswith("{")] == [1, 2]
        assert sum(line.startswith("train: epoch") for line in lines) == 2


def test_a_run_failing_before_its_first_epoch_leaves_the_metrics_file_as_it_was(files):
    """The metrics file is emptied with the first epoch's line: a cron run that diverges at
    once keeps the last good run's metrics (it was left empty)."""
    (files / "m.jsonl").write_text("old\n")
    result = run_train(files, "-b", "64", "-e", "2", "--optimizer", "sgd", "-alpha", "1e38",
                       "--metrics", str(files / "m.jsonl"))
    assert result.exit_code == 1 and "diverged" in result.output, result.output
    assert (files / "m.jsonl").read_text() == "old\n"


def test_a_metrics_file_that_cannot_be_written_is_refused_before_training(files):
    """A metrics file whose mode refuses writing. Under root (as CI runs) train runs without
    root's file access overrides (tests/without_root.py): the mode refuses it too."""
    (files / "m.jsonl").write_text("old\n")
    (files / "m.jsonl").chmod(0o444)
    result = without_root.run(
        "train", "-c", str(files / "net.json"), "-i", str(files / "gl_input.nc"),
        "-o", str(files / "gl_output.nc"), "-n", str(files / "net.nc"), "-b", "64", "-e", "1",
        "--metrics", str(files / "m.jsonl"))
    assert result.returncode == 1, result.stderr
    assert result.stderr == (f"Error: {files / 'm.jsonl'}: the metrics file is not writable; "
                             "check its permissions or choose another path.\n"), result.stderr
    assert not (files / "net.nc").exists()
    assert (files / "m.jsonl").read_text() == "old\n"


def test_a_metrics_file_that_cannot_be_written_is_refused_before_training_simulated(
        files, monkeypatch):
    """The same check in-process (CliRunner): the metrics file reports as not writable (its
    other access checks, and every other file's, as they are)."""
    metrics = str(files / "m.jsonl")
    real_access = os.access

    def access(path, mode, **kwargs):
        if os.fspath(path) == metrics and mode & os.W_OK:
            return False
        return real_access(path, mode, **kwargs)

    (files / "m.jsonl").write_text("old\n")
    monkeypatch.setattr(os, "access", access)
    result = run_train(files, "-b", "64", "-e", "1", "--metrics", metrics)
    assert result.exit_code == 1
    assert "m.jsonl: the metrics file is not writable" in result.output
    assert not (files / "net.nc").exists()
    assert (files / "m.jsonl").read_text() == "old\n"


def test_metrics_file_through_a_link_stays_a_link(files):
    (files / "target.jsonl").write_text("old\n")
    (files / "m.jsonl").symlink_to(files / "target.jsonl")
    assert run_train(files, "-b", "64", "-e", "2", "--metrics", str(files / "m.jsonl")
                     ).exit_code == 0
    assert (files / "m.jsonl").is_symlink()
    assert [json.loads(line)["epoch"] for line in
            (files / "target.jsonl").read_text().splitlines()] == [1, 2]


def test_a_file_system_without_flock_trains_unlocked(files, monkeypatch):
    import errno
    import fcntl

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    assert run_train(files, "-b", "64", "-e", "1").exit_code == 0
    assert (files / "net.nc").exists() and not (files / ".net.nc.lock").exists()


def test_an_interrupt_mid_run_releases_the_lock_and_keeps_the_checkpoints(files):
    from destiny.fit import fit
    from destiny.train import train_config

    def stop_after_two(record):
        if record.epoch == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fit(config_path=files / "net.json", input_path=files / "gl_input.nc",
            output_path=files / "gl_output.nc", network_path=files / "net.nc",
            cfg=train_config(batch=64, epochs=5), checkpoint_every=1,
            metrics_path=files / "m.jsonl", on_epoch=stop_after_two)
    assert not (files / ".net.nc.lock").exists() and not (files / "net.nc").exists()
    assert (files / "net.nc2.nc").exists()
    assert len((files / "m.jsonl").read_text().splitlines()) == 2  # flushed and closed


def _descriptors_of(path: str) -> list[int]:
    """This process's open descriptors of the file at ``path``, or of its remains once it
    was removed ("path (deleted)"), from /proc/self/fd."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # (the listing's own descriptor, closed by now)
            if os.readlink(f"/proc/self/fd/{name}") in (path, f"{path} (deleted)"):
                found.append(int(name))
    return found


@pytest.mark.parametrize("ending", ["finished", "failed"])
def test_the_network_files_lock_is_released_when_fit_returns_or_fails(files, ending):
    """fit, in a process that goes on (a notebook, a scheduler running runs in turn), leaves
    no descriptor of the network file's lock open: one left open holds the flock on the lock
    file, removed from the directory but not released, and a run that opened it to wait
    (generate-netcdf waits for its index files' holders) would wait for ever. Here the test is
    that run: it opens the lock file while fit holds it, and may take it the moment fit ends."""
    import fcntl

    from destiny.fit import fit
    from destiny.io import atomic
    from destiny.train import train_config

    lock, waiter = atomic.lock_path(files / "net.nc"), []

    def open_the_lock(net, data, state):
        waiter.append(os.open(lock, os.O_RDWR))
        with pytest.raises(BlockingIOError):  # (held by fit for now)
            fcntl.flock(waiter[0], fcntl.LOCK_EX | fcntl.LOCK_NB)

    def fail(record):
        raise RuntimeError("a failure mid-run")

    try:
        with contextlib.nullcontext() if ending == "finished" else pytest.raises(RuntimeError):
            fit(config_path=files / "net.json", input_path=files / "gl_input.nc",
                output_path=files / "gl_output.nc", network_path=files / "net.nc",
                cfg=train_config(batch=64, epochs=1), on_start=open_the_lock,
                on_epoch=None if ending == "finished" else fail)
        assert not os.path.exists(lock)
        if os.path.isdir("/proc/self/fd"):  # (Linux: the descriptors open on it, ours alone)
            assert _descriptors_of(lock) == waiter, "fit left its lock file's descriptor open"
        try:
            fcntl.flock(waiter[0], fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pytest.fail("the network file's lock is still held after fit ended")
    finally:
        for fd in waiter:
            os.close(fd)


def test_sigterm_stops_as_ctrl_c_does(files):
    """timeout, systemd and batch schedulers stop a job with SIGTERM: the run says how to go
    on, leaves no temporary or lock file (SIGTERM used to stop it at once, as SIGKILL), then
    dies by the signal."""
    proc = subprocess.Popen(
        [str(BIN / "train"), "-c", str(files / "net.json"), "-i", str(files / "gl_input.nc"),
         "-o", str(files / "gl_output.nc"), "-n", str(files / "net.nc"), "-b", "16",
         "-e", "1000", "--checkpoint-every", "1", "-q"],
        stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (files / "net.nc2.nc").exists():
        assert proc.poll() is None and time.time() < deadline, "no checkpoint appeared"
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM  # exit status 143, as a shell reports it
    assert "interrupted" in stderr and "--resume" in stderr and "Traceback" not in stderr
    left = [p.name for p in files.iterdir() if p.name.endswith((".tmp", ".lock"))]
    assert left == [] and not (files / "net.nc").exists()


def test_a_reader_of_stderr_that_leaves_does_not_stop_training(files):
    """`train ... 2>&1 | head`: once head has its lines and leaves, train's notes, progress
    and summary have nowhere to go, and they are dropped; training goes on and writes its
    network (it used to die by SIGPIPE at its next line, exit status 141, the run lost). A
    failure still exits 1."""
    argv = [str(BIN / "train"), "-c", str(files / "net.json"), "-i", str(files / "gl_input.nc"),
            "-o", str(files / "gl_output.nc"), "-n", str(files / "net.nc"), "-b", "64",
            "-e", "3"]
    for expected in (0, 1):  # the second run: the network file exists, no --force
        proc = subprocess.Popen(argv, stderr=subprocess.PIPE)
        proc.stderr.close()  # the reader left before the first line
        assert proc.wait(timeout=300) == expected
        assert read_network(files / "net.nc").weights
    assert sorted(p.name for p in files.iterdir()) == ["gl_input.nc", "gl_output.nc",
                                                       "net.json", "net.nc"]


def test_checkerboard_known_answer():
    # implicit's checkerboard: user u likes the items of its parity, item u withheld. A trained
    # autoencoder must rank item u first among the items user u has not seen.
    n = 16
    rows = [[i for i in range(n) if i % 2 == u % 2 and i != u] for u in range(n)]
    indptr = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
    indices = np.concatenate(rows).astype(np.int32)
    nd = parse_netdef({"ErrorFunction": "CrossEntropy", "Layers": [
        {"Name": "Input", "Kind": "Input", "N": n, "DataSet": "in", "Sparse": True},
        {"Name": "Hidden", "Kind": "Hidden", "N": 4, "Activation": "Sigmoid"},
        {"Name": "Output", "Kind": "Output", "N": n, "DataSet": "out", "Activation": "Sigmoid"}]})
    net = Network(nd, get_backend("cpu"))
    net.initialize(0)
    cfg = TrainConfig(batch=n, epochs=300, optimizer="adam", alpha=0.03, lam=0.0, mu=0.9,
                      mu1=0.999, shuffle=True)
    net.init_optimizer(cfg.optimizer_config())
    ds = SparseDataset("in", n, indptr, indices)
    data = TrainData(net, {"in": ds, "out": SparseDataset("out", n, indptr, indices)})
    train_epochs(net, data, cfg, TrainState())
    from destiny.predict import score_batches, top_k

    (_, scores), = list(score_batches(net, indptr, indices))
    items, _ = top_k(scores, 1, exclude_indptr=indptr, exclude_indices=indices)
    assert items[:, 0].tolist() == list(range(n))


def test_resume_refusal_names_each_difference():
    from destiny.fit import _differences

    saved = {"config": {"batch": 64, "shuffle": None, "seed": 12134}, "netdef": "a",
             "examples": 1000, "entries": {"in": 5000}, "indexes": "x"}
    now = {"config": {"batch": 64, "shuffle": False, "seed": 7}, "netdef": "b",
           "examples": 1200, "entries": {"in": 5000, "out": 7}, "indexes": "y"}
    assert _differences(saved, now) == [
        "--seed 12134 in the checkpoint, 7 now",  # (as typed: no thousands separator)
        "--shuffle/--no-shuffle not given in the checkpoint, off now",
        "another network definition (-c)",
        "1,000 examples in the checkpoint's data, 1,200 in this data",
        "dataset out: not in the checkpoint's data",
        "other feature indexes (generate-netcdf's -f files) for the datasets"]
    assert _differences(saved, saved) == ["settings of another version"]
    saved["contents"] = {"in": "1", "out": "2"}
    same_counts = dict(saved, contents={"in": "3", "out": "4"}, entries={"in": 5000, "out": 8})
    assert _differences(saved, same_counts) == [  # (out: not in the checkpoint: said above)
        "dataset out: not in the checkpoint's data",
        "dataset in: other entries in this data than in the checkpoint's (as many of them)"]


def test_resume_names_another_definition_of_other_layers(files):
    """A checkpoint of a definition with other layer sizes is judged by its settings before
    its weights are loaded: the refusal names the definition, not only layers that differ."""
    assert run_train(files, "-b", "64", "-e", "1", "--checkpoint-every", "1").exit_code == 0
    wider = small_netdef()
    wider["Layers"][1]["N"] = 32
    (files / "net.json").write_text(json.dumps(wider))
    result = run_train(files, "-b", "64", "-e", "2", "--resume", "--force")
    assert result.exit_code == 1
    assert (f"{files / 'net.nc1.nc'}: --resume takes the newest checkpoint, and this file is "
            "made with other settings (another network definition (-c)); resuming from it "
            "would not continue the same run: use the original flags and data, or start afresh "
            "without --resume") in result.output, result.output


def test_resume_refuses_other_settings(files):
    assert run_train(files, "-b", "64", "-e", "3", "--checkpoint-every", "1").exit_code == 0
    (files / "net.nc").unlink()
    result = run_train(files, "-b", "32", "-e", "5", "-alpha", "0.5", "--resume")
    assert result.exit_code == 1
    assert ("made with other settings (-alpha 0.01 in the checkpoint, 0.5 now; -b 64 in the "
            "checkpoint, 32 now); resuming from it would not") in result.output
    more = run_train(files, "-b", "64", "-e", "5", "--resume")  # only -e changed: fine
    assert more.exit_code == 0, more.output
    assert read_network(files / "net.nc").destiny["epoch"] == 5


@pytest.mark.parametrize("case,expected", [
    ("missing-config", "nope.json: cannot read the network definition: No such file or "
                       "directory; check the -c path"),
    ("bad-json", "bad.json: line 1, column 13: invalid JSON"),
    ("unknown-dataset", "layer 'Output' reads the dataset 'gl_out', but the dataset files hold "
                        "'gl_input', 'gl_output'"),
    # (said "'auto' needs the width of dataset 'gl_out', which was not given")
    ("unknown-dataset-auto", "net.json: Layers[2].DataSet: 'auto' needs the width of dataset "
                             "'gl_out', but the datasets given hold 'gl_input', 'gl_output'; "
                             "the layer's DataSet must equal the -d name given to "
                             "generate-netcdf"),
    ("missing-data", "nothere.nc: the dataset file does not exist"),
    ("not-netcdf", "net.json: is not a readable NetCDF file"),
    ("gpu", "--backend gpu: no NVIDIA GPU is usable here"),
    ("rows-differ", "the datasets hold different numbers of examples"),
    ("network-dir", "the directory"),
    ("network-on-input", "the network file (-n) would replace the input dataset file (-i)"),
    ("network-on-config", "the network file (-n) would replace the network definition (-c)"),
    ("metrics-on-network", "given as both the network file (-n) and the metrics file"),
    ("narrow-layer", "gl_output.nc: the dataset 'gl_output' has width 128, but Layers[2].N gives "
                     "layer 'Output' only 64 units; use N \"auto\" or an N of at least 128."),
    ("output-dropout", "dropout.json: Layers[2].pDropout: dropout on an Output layer is not "
                       "supported"),
])
def test_train_bad_input(files, case, expected, monkeypatch):
    args = {"-c": str(files / "net.json"), "-i": str(files / "gl_input.nc"),
            "-o": str(files / "gl_output.nc"), "-n": str(files / "out.nc")}
    extra = []
    if case == "missing-config":
        args["-c"] = str(files / "nope.json")
    elif case == "bad-json":
        (files / "bad.json").write_text('{"Layers": [')
        args["-c"] = str(files / "bad.json")
    elif case == "unknown-dataset":
        d = small_netdef()
        d["Layers"][2].update(N=128, DataSet="gl_out")
        (files / "other.json").write_text(json.dumps(d))
        args["-c"] = str(files / "other.json")
    elif case == "unknown-dataset-auto":
        d = small_netdef()
        d["Layers"][2].update(DataSet="gl_out")
        (files / "net.json").write_text(json.dumps(d))
    elif case == "missing-data":
        args["-o"] = str(files / "nothere.nc")
    elif case == "not-netcdf":
        args["-o"] = str(files / "net.json")
    elif case == "gpu":  # as on a machine without a GPU and without the test's simulator
        import destiny.kernels

        monkeypatch.setattr(destiny.kernels, "_simulated", lambda: False)
        monkeypatch.setattr(destiny.kernels, "cuda_available", lambda: False)
        extra = ["--backend", "gpu"]
    elif case == "rows-differ":
        write_dataset(files / "short.nc", random_dataset("gl_output", rows=100))
        args["-o"] = str(files / "short.nc")
    elif case == "network-dir":
        args["-n"] = str(files / "no" / "such" / "dir.nc")
    elif case == "network-on-input":
        args["-n"] = args["-i"]
        extra = ["--force"]
    elif case == "network-on-config":
        args["-n"] = str(files / "." / "net.json")
        extra = ["--force"]
    elif case == "metrics-on-network":
        extra = ["--metrics", args["-n"]]
    elif case == "narrow-layer":
        d = small_netdef()
        d["Layers"][2]["N"] = 64
        (files / "narrow.json").write_text(json.dumps(d))
        args["-c"] = str(files / "narrow.json")
    elif case == "output-dropout":
        d = small_netdef()
        d["Layers"][2]["pDropout"] = 0.1
        (files / "dropout.json").write_text(json.dumps(d))
        args["-c"] = str(files / "dropout.json")
    before = {p.name: p.read_bytes() for p in files.iterdir() if p.is_file()}
    result = CliRunner().invoke(train, [x for kv in args.items() for x in kv] + extra)
    assert result.exit_code == 1, result.output
    assert expected in result.output
    assert {p.name: p.read_bytes() for p in files.iterdir() if p.is_file()} == before


def test_denoising_norms_and_penalty_train_alike_on_both_backends(files):
    from destiny.io.dataset import read_dataset

    d = small_netdef(Denoising={"p": 0.3}, SparsenessPenalty={"p": 0.3, "beta": 0.5})
    d["Layers"][1].update(Sparse=True, WeightNorm=0.5, DeltaNorm=2.0, pDropout=0.0)
    d["Layers"][2].update(WeightNorm=0.8)
    datasets = {n: read_dataset(files / f"{n}.nc") for n in ("gl_input", "gl_output")}
    nets = []
    for backend in ("reference", "cpu"):
        nd = parse_netdef(d).resolve({"gl_input": 128, "gl_output": 128})
        net = Network(nd, get_backend(backend))
        net.initialize(5)
        cfg = TrainConfig(batch=50, epochs=2, optimizer="momentum", alpha=0.05, lam=1e-3,
                          lam1=1e-4, mu=0.9, mu1=0.0, seed=2, shuffle=True)
        net.init_optimizer(cfg.optimizer_config())
        train_epochs(net, TrainData(net, datasets), cfg, TrainState())
        nets.append(net)
    for ref, cpu in zip(*(n.connections for n in nets), strict=True):
        np.testing.assert_allclose(cpu.W, ref.W, rtol=1e-4, atol=1e-5)
    into_hidden, into_output = nets[1].connections
    assert np.linalg.norm(into_hidden.W, axis=0).max() <= 0.5 + 1e-5  # WeightNorm (spec 3.13)
    assert np.linalg.norm(into_output.W, axis=0).max() <= 0.8 + 1e-5
    assert nets[1].layers["Input"].denoising


def test_network_file_attributes_in_dsstne_order(files):
    assert run_train(files, "-b", "64", "-e", "1").exit_code == 0
    import netCDF4

    with netCDF4.Dataset(files / "net.nc") as nc:
        names = [a for a in nc.ncattrs() if not a.startswith("destiny_")]
    network = ["version", "name", "kind", "errorFunction", "maxout_k", "decay", "LRN_k", "LRN_n",
               "LRN_alpha", "LRN_beta", "bSparsenessPenalty", "sparsenessPenalty_p",
               "sparsenessPenalty_beta", "bDenoising", "denoising_p", "deltaBoost_one",
               "deltaBoost_zero", "SMCE_oneScale", "SMCE_zeroScale", "SMCE_oneTarget",
               "SMCE_zeroTarget", "ShuffleIndices", "checkpoint_name", "checkpoint_interval",
               "checkpoint_epochs", "layers"]
    layer = ["name", "kind", "type", "dataSet", "Nx", "Ny", "Nz", "Nw", "dimensions", "kernelX",
             "kernelY", "kernelZ", "kernelDimensions", "kernelStrideX", "kernelStrideY",
             "kernelStrideZ", "kernelPaddingX", "kernelPaddingY", "kernelPaddingZ", "pDropout",
             "weightInit", "weightInitScale", "biasInit", "weightNorm", "deltaNorm",
             "activation", "sparsenessPenalty_p", "sparsenessPenalty_beta", "RELUSlope",
             "ELUAlpha", "SELULambda", "attributes", "sources"]
    weight = ["inputLayer", "outputLayer", "width", "height", "length", "depth", "breadth",
              "bShared", "bLocked", "norm"]
    expected = list(network)
    sources = {0: [], 1: ["Input"], 2: ["Hidden"]}
    for i in range(3):
        expected += [f"layer{i}_{a}" for a in layer]
        expected += [f"layer{i}_source{j}" for j in range(len(sources[i]))] + [f"layer{i}_skips"]
    expected.append("weights")
    for k in range(2):
        expected += [f"weight{k}_{a}" for a in weight]
    assert names == expected


def test_dsstne_network_file_without_destiny_attributes_loads(files):
    # A file as DSSTNE writes it: the same layout, none of Destiny's attributes.
    assert run_train(files, "-b", "64", "-e", "1").exit_code == 0
    import netCDF4

    with netCDF4.Dataset(files / "net.nc", "a") as nc:
        for a in [a for a in nc.ncattrs() if a.startswith("destiny_")]:
            nc.delncattr(a)
    nf = read_network(files / "net.nc")
    assert nf.destiny == {}
    net = Network(nf.netdef, get_backend("cpu"))
    from destiny.io.checkpoint import load_weights
    load_weights(net, files / "net.nc")
    np.testing.assert_array_equal(net.connections[0].W, nf.weights[0])


def test_a_reader_that_needs_neither_weights_nor_optimizer_state_reads_neither(files):
    """A rank of a split network reads its blocks of the weights itself, and predict needs a
    checkpoint's counts, not its optimizer state: read_network leaves out what it is told to,
    and still checks every matrix's size."""
    assert run_train(files, "-e", "2", "--checkpoint-every", "2",
                     "--optimizer", "rmsprop").exit_code == 0
    counts = lambda name: name.startswith(("input_counts_", "target_counts_"))  # noqa: E731
    for path in (files / "net.nc2.nc", files / "net.nc"):  # a checkpoint, the network
        whole = read_network(path)
        assert whole.weights and whole.arrays
        lean = read_network(path, weights=False, arrays=counts)
        assert lean.weights == {} and sorted(lean.biases) == sorted(whole.biases)
        assert lean.netdef == whole.netdef and lean.destiny == whole.destiny
        assert sorted(lean.arrays) == sorted(filter(counts, whole.arrays))
        assert read_network(path, arrays=False).arrays == {}
    assert any(n.startswith("state") for n in read_network(files / "net.nc2.nc").arrays)
    assert read_network(files / "net.nc", arrays=counts).arrays  # (the network's counts)


# -- the epoch loop against spec 5.2, on a tiny network whose loss the test decides --------

def _loop_case(examples, *, batch=1, seed=0, **top):
    """A tiny reference network and data where example i lists feature i alone (its batches
    tell which examples they hold), with ``top`` added to the definition."""
    d = {"ErrorFunction": "L2", "ShuffleIndices": False, **top, "Layers": [
        {"Name": "Input", "Kind": "Input", "N": examples, "DataSet": "in", "Sparse": True},
        {"Name": "Hidden", "Kind": "Hidden", "N": 2, "Activation": "Sigmoid"},
        {"Name": "Output", "Kind": "Output", "N": 3, "DataSet": "out", "Activation": "Sigmoid"}]}
    net = Network(parse_netdef(d), get_backend("reference"), dtype=np.float64)
    net.initialize(seed)
    indptr = np.arange(examples + 1, dtype=np.int64)
    ds_in = SparseDataset("in", examples, indptr, np.arange(examples, dtype=np.int32))
    ds_out = SparseDataset("out", 3, indptr, (np.arange(examples) % 3).astype(np.int32))
    return net, TrainData(net, {"in": ds_in, "out": ds_out})


def _spy(net, monkeypatch, losses=None):
    """Record every update's (step, t) and every forward pass's examples and denoising; with
    ``losses``, backward returns them in turn (after computing the real gradients)."""
    seen = {"updates": [], "examples": [], "denoise": []}
    forward, backward, update = net.forward, net.backward, net.update

    def spy_forward(batch, **kw):
        seen["examples"].append(batch.inputs["Input"][1].tolist())
        seen["denoise"].append(kw.get("denoise"))
        forward(batch, **kw)

    def spy_backward():
        real = backward()
        return real if losses is None else next(losses)

    def spy_update(step, t, opt):
        seen["updates"].append((step, t))
        update(step, t, opt)

    monkeypatch.setattr(net, "forward", spy_forward)
    monkeypatch.setattr(net, "backward", spy_backward)
    monkeypatch.setattr(net, "update", spy_update)
    return seen


def _run(net, data, epochs, batch=1, **cfg):
    cfg = TrainConfig(**{**vars(TrainConfig()), "batch": batch, "epochs": epochs,
                         "optimizer": "sgd", "alpha": 0.1, "lam": 0.0, "shuffle": False, **cfg})
    net.init_optimizer(cfg.optimizer_config())
    records = []
    train_epochs(net, data, cfg, TrainState(), on_epoch=lambda r, s: records.append(r))
    return records


def test_divergence_brake_skips_the_batch_then_takes_a_tenth_of_the_step_24_times(monkeypatch):
    """Spec 5.2: the moving average m = 0.9 m + 0.1 err; after the first 100 batches of an
    epoch, a batch with err > 2 m is skipped (no update) and the next 24 take 0.1 alpha.
    Epoch 1: losses 1, but 50 at batch 50 (inside the 100 exempt batches) and 3.5 at batch
    101, where m = 1.2727: above 2 m = 2.55, below 3 m = 3.82. Epoch 2 starts over: its first
    batch's 50 is exempt again."""
    E = 130
    net, data = _loop_case(E)
    epoch1 = [1.0] * E
    epoch1[49], epoch1[100] = 50.0, 3.5
    epoch2 = [50.0] + [1.0] * (E - 1)
    seen = _spy(net, monkeypatch, iter(epoch1 + epoch2))
    records = _run(net, data, epochs=2)

    alpha = 0.1
    expected = ([(alpha, t) for t in range(1, 101)]  # batches 1-100
                # batch 101 skipped; batches 102-125 slowed; then alpha again
                + [(0.1 * alpha, t) for t in range(101, 125)]
                + [(alpha, t) for t in range(125, 130)]
                + [(alpha, t) for t in range(130, 260)])  # epoch 2: nothing braked
    assert [t for _, t in seen["updates"]] == [t for _, t in expected]
    np.testing.assert_allclose([s for s, _ in seen["updates"]], [s for s, _ in expected],
                               rtol=1e-12)
    assert [r.skipped_batches for r in records] == [1, 0]
    # The skipped batch's error still counts in the epoch's training error.
    assert records[0].training_error == pytest.approx(sum(epoch1) / E, rel=1e-12)
    assert records[1].training_error == pytest.approx(sum(epoch2) / E, rel=1e-12)


def test_no_brake_without_it(monkeypatch):
    net, data = _loop_case(110)
    seen = _spy(net, monkeypatch, iter([1.0] * 105 + [50.0] + [1.0] * 4))
    records = _run(net, data, epochs=1, brake=False)
    assert [s for s, _ in seen["updates"]] == [0.1] * 110
    assert records[0].skipped_batches == 0


def test_the_first_100_batches_of_each_epoch_are_exempt_from_the_brake(monkeypatch):
    """Spec 5.2: the brake looks at a batch from the 101st of the epoch on. Losses 1 but 3.5
    at batches 100 and 101: batch 100 is exempt (m = 1.25 after it), batch 101 (3.5 > 2 m =
    2.95) is skipped, and batch 102 takes 0.1 alpha."""
    net, data = _loop_case(102)
    losses = [1.0] * 102
    losses[99] = losses[100] = 3.5
    seen = _spy(net, monkeypatch, iter(losses))
    records = _run(net, data, epochs=1)
    assert records[0].skipped_batches == 1
    assert [t for _, t in seen["updates"]] == list(range(1, 102))
    np.testing.assert_allclose([s for s, _ in seen["updates"]], [0.1] * 100 + [0.01],
                               rtol=1e-12)


def test_a_batch_the_brake_skips_leaves_no_trace(monkeypatch):
    """A skipped batch's gradients are dropped: the weights are the same whatever the
    skipped example lists (here batch 101 of 130, with the losses the test decides, so that
    both runs brake alike). Kept, they went into the next update."""
    E = 130
    weights = []
    for other in (False, True):
        net, data = _loop_case(E)
        if other:  # example 100 lists feature 5 and target 0 instead of 100 and 1
            indptr = np.arange(E + 1, dtype=np.int64)
            inputs, targets = np.arange(E, dtype=np.int32), (np.arange(E) % 3).astype(np.int32)
            inputs[100], targets[100] = 5, 0
            data = TrainData(net, {"in": SparseDataset("in", E, indptr, inputs),
                                   "out": SparseDataset("out", 3, indptr, targets)})
        losses = [1.0] * E
        losses[100] = 3.5
        _spy(net, monkeypatch, iter(losses))
        assert _run(net, data, epochs=1)[0].skipped_batches == 1
        weights.append([c.W.copy() for c in net.connections] + [c.b.copy()
                                                                 for c in net.connections])
        monkeypatch.undo()
    for a, b in zip(*weights, strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_epochs_errors_are_means_over_its_examples(monkeypatch):
    """5 examples in batches of 2, 2 and 1 whose losses (sums over their examples) are 3, 5
    and 7: the training error is 15 / 5 examples (not / 3 batches); on_batch hears each
    batch's own size; samples_per_s is the examples over the epoch's seconds."""
    net, data = _loop_case(5)
    _spy(net, monkeypatch, iter([3.0, 5.0, 7.0, 3.0, 5.0, 7.0]))
    cfg = TrainConfig(**{**vars(TrainConfig()), "batch": 2, "epochs": 2, "optimizer": "sgd",
                         "alpha": 0.1, "lam": 0.0, "shuffle": False})
    net.init_optimizer(cfg.optimizer_config())
    records, sizes = [], []
    train_epochs(net, data, cfg, TrainState(), on_batch=lambda n, err: sizes.append((n, err)),
                 on_epoch=lambda r, s: records.append(r))
    assert sizes == [(2, 3.0), (2, 5.0), (1, 7.0)] * 2
    for record in records:
        assert record.training_error == pytest.approx(3.0, rel=1e-12)
        assert record.samples_per_s == pytest.approx(5 / record.seconds, rel=1e-12)


@pytest.mark.parametrize("bad", [np.inf, np.nan])
def test_a_loss_that_is_not_finite_names_its_epoch_and_first_example(monkeypatch, bad):
    """The NaN guard: a loss of inf stops training as NaN does, naming the epoch and the
    position in the epoch of the batch's first example (here epoch 2, batch 2 of 2 examples:
    example 2)."""
    from destiny.train import TrainingDivergedError

    net, data = _loop_case(6)
    _spy(net, monkeypatch, iter([1.0, 1.0, 1.0, 1.0, bad]))
    with pytest.raises(TrainingDivergedError) as failed:
        _run(net, data, epochs=3, batch=2)
    assert str(failed.value).startswith(f"training diverged in epoch 2: the loss of layer "
                                        f"'Output' became {bad} at example 2. ")


def test_dropout_draws_anew_for_each_batch_and_epoch(monkeypatch):
    """Every batch of every epoch has its own dropout draw: 2 epochs of 3 batches, 6 keys."""
    net, data = _loop_case(6)
    keys = []
    forward = net.forward
    monkeypatch.setattr(net, "forward", lambda batch, **kw: keys.append(kw["dropout_key"])
                        or forward(batch, **kw))
    _run(net, data, epochs=2, batch=2)
    assert len(keys) == 6 and len(set(keys)) == 6


def test_decay_divides_alpha_by_one_plus_decay_times_the_updates_made(monkeypatch):
    """Spec 5.2: step = alpha / (1 + Decay * _batches), _batches counted before this update's
    increment (the first update takes alpha), across epochs."""
    net, data = _loop_case(4, Decay=0.5)
    seen = _spy(net, monkeypatch)
    records = _run(net, data, epochs=2)
    steps = [0.1 / (1 + 0.5 * n) for n in range(8)]
    np.testing.assert_allclose([s for s, _ in seen["updates"]], steps, rtol=1e-12)
    assert [t for _, t in seen["updates"]] == list(range(1, 9))
    assert records[1].learning_rate == pytest.approx(steps[-1], rel=1e-12)


def test_shuffle_draws_a_new_order_each_epoch_and_none_without_it(monkeypatch):
    """ShuffleIndices (spec 5.2): each epoch visits every example once, in a new random
    order; without it, in file order."""
    E = 12
    orders = {}
    for shuffle in (False, True):
        net, data = _loop_case(E)
        seen = _spy(net, monkeypatch)
        _run(net, data, epochs=2, batch=3, shuffle=shuffle)
        visits = [e for batch in seen["examples"] for e in batch]
        orders[shuffle] = [visits[:E], visits[E:]]
        monkeypatch.undo()
    assert orders[False] == [list(range(E))] * 2
    first, second = orders[True]
    assert sorted(first) == sorted(second) == list(range(E))
    assert first != list(range(E)) and second != list(range(E)) and first != second


def test_each_seed_draws_its_own_orders(monkeypatch):
    """The order of epoch e depends on (seed, e) together: seed 2's first epoch is not seed
    1's second (a seed plus the epoch drew one order for both)."""
    E = 12
    orders = {}
    for seed in (1, 2):
        net, data = _loop_case(E)
        seen = _spy(net, monkeypatch)
        _run(net, data, epochs=2, batch=3, shuffle=True, seed=seed)
        visits = [e for batch in seen["examples"] for e in batch]
        orders[seed] = [visits[:E], visits[E:]]
        monkeypatch.undo()
    assert orders[1][1] != orders[2][0]
    assert orders[1][0] != orders[2][0] and orders[1][1] != orders[2][1]


def test_denoising_keeps_each_entry_with_probability_one_minus_p_and_scales_by_q(monkeypatch):
    """Spec 3.9: one draw per stored entry per epoch drops it with probability p; the kept
    entries are scaled by q = 1 / (1 - p). Here 2,000 one-entry examples, p = 0.3."""
    E = 2000
    net, data = _loop_case(E, Denoising={"p": 0.3})
    seen = _spy(net, monkeypatch)
    _run(net, data, epochs=2, batch=500)
    kept = {1: [], 2: []}
    for n, denoise in enumerate(seen["denoise"]):
        (indptr, indices, values), q = denoise["Input"]
        assert q == pytest.approx(1 / (1 - f32(0.3)), rel=1e-12)  # (p is float32, as parsed)
        assert len(values) == 0  # boolean data: q goes into the products (spec 5.4)
        kept[1 + n // 4] += indices.tolist()
    for epoch in (1, 2):
        assert len(set(kept[epoch])) == len(kept[epoch])
        assert abs(len(kept[epoch]) / E - 0.7) < 0.04
    assert kept[1] != kept[2]  # a new draw each epoch


def test_each_denoised_input_layer_draws_its_own_mask():
    """Two input layers reading one dataset drop different entries (each draw is keyed by
    its layer too), about half each at p = 0.5."""
    from destiny.train import denoised

    nd = parse_netdef({"ErrorFunction": "L2", "Denoising": {"p": 0.5}, "Layers": [
        {"Name": "In1", "Kind": "Input", "N": 128, "DataSet": "x", "Sparse": True},
        {"Name": "In2", "Kind": "Input", "N": 128, "DataSet": "x", "Sparse": True},
        {"Name": "Hidden", "Kind": "Hidden", "N": 2, "Source": ["In1", "In2"],
         "Activation": "Sigmoid"},
        {"Name": "Output", "Kind": "Output", "N": 128, "DataSet": "x", "Activation": "Sigmoid"}]})
    net = Network(nd, get_backend("cpu"))
    ds = random_dataset("x")
    one, two = (denoised(net, name, ds, 3, 1) for name in ("In1", "In2"))
    assert not np.array_equal(one[0], two[0])
    assert all(abs(len(kept[1]) / ds.nnz - 0.5) < 0.05 for kept in (one, two))


def test_the_epoch_loss_adds_half_lambda_w_squared_and_lambda1_w_abs(monkeypatch):
    """Spec 5.2: the regularization error is the sum over the weight matrices of
    0.5 lam w^2 + lam1 |w| (Destiny takes it once, at the epoch's end: docs/dsstne.md), and the
    epoch's loss is the training error plus it. alpha = 0 leaves the weights as drawn."""
    net, data = _loop_case(6)
    W = [c.W.copy() for c in net.connections]
    records = _run(net, data, epochs=1, alpha=0.0, lam=0.02, lam1=0.003)
    reg = sum(0.5 * 0.02 * (w ** 2).sum() + 0.003 * np.abs(w).sum() for w in W)
    (record,) = records
    assert record.regularization_error == pytest.approx(reg, rel=1e-12)
    assert record.loss == pytest.approx(record.training_error + reg, rel=1e-12)


def test_the_definitions_shuffle_indices_decide_unless_a_flag_is_given(files):
    """ShuffleIndices (spec 3.2; default true, quirk 10.11) decides whether train shuffles;
    --shuffle / --no-shuffle overrides it."""
    for shuffle_indices, same_as, other in ((False, "--no-shuffle", "--shuffle"),
                                            (True, "--shuffle", "--no-shuffle")):
        (files / "net.json").write_text(json.dumps(small_netdef(ShuffleIndices=shuffle_indices)))
        nets = []
        for name, flags in (("plain", []), ("same", [same_as]), ("other", [other])):
            path = f"{name}-{shuffle_indices}.nc"
            result = run_train(files, "-e", "1", "-b", "64", *flags, network=path)
            assert result.exit_code == 0, result.output
            nets.append(weights_of(files / path))
        plain, same, different = nets
        assert all(np.array_equal(a, b) for a, b in zip(plain, same, strict=True))
        assert not all(np.array_equal(a, b) for a, b in zip(plain, different, strict=True))


def test_dsstnes_batch_and_epochs_are_the_defaults():
    """Spec 5.1: train's -b defaults to 1024 and -e to 40; predict's -b to 1024 (8.1)."""
    from destiny.cli.predict import predict

    defaults = {(cmd.name, p.name): p.default for cmd in (train, predict) for p in cmd.params}
    assert defaults[(train.name, "batch")] == 1024
    assert defaults[(train.name, "epochs")] == 40
    assert defaults[(predict.name, "batch")] == 1024
    # and the library's TrainConfig is DSSTNE's train: SGD with its values and fixed seed
    assert vars(TrainConfig()) == {
        "batch": 1024, "epochs": 40, "optimizer": "sgd", "alpha": 0.025, "lam": 1e-4,
        "lam1": 0.0, "mu": 0.5, "mu1": 0.0, "seed": 12134, "shuffle": None, "brake": True}


def test_too_little_address_space_left_to_run_is_refused_before_anything_is_done(files,
                                                                                   monkeypatch):
    """Under ulimit -v 390 MiB a warm train had 58 MiB left as it started, where any run maps
    more than 100 MiB: it went on to "libgomp: Thread creation failed", with no message. Now the
    reason (addrspace.map_thread_memory's) is raised once the ranks have started."""
    from destiny import addrspace

    monkeypatch.setattr(addrspace, "map_thread_memory", lambda: "out of memory: too little")
    result = run_train(files, "-e", "1")
    assert result.exit_code == 1, result.output
    assert result.output == "Error: out of memory: too little\n"
    assert not (files / "net.nc").exists()
