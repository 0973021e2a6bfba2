"""``--backend gpu`` end to end: the CUDA backend trains the network the cpu backend trains.

Without a GPU this runs the CUDA kernels in numba's simulator (conftest.py), so the network is
tiny: a few batches of 4 examples, 128 outputs (the smallest dataset width). Same seed, same
data: the same shuffle, the same counter-based dropout and denoising masks on both backends.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from destiny.fit import fit
from destiny.io.network_file import read_network
from destiny.train import train_config

from . import batch
from .backends import _fast_simulator
from .conftest import write_sample_data
from .test_parallel import MPIEXEC, needs_mpiexec, rank_env

NETDEF = {
    "Kind": "FeedForward", "Denoising": {"p": 0.2}, "ErrorFunction": "CrossEntropy",
    "Layers": [
        {"Name": "Input", "Kind": "Input", "N": "auto", "DataSet": "gl_input", "Sparse": True},
        {"Name": "Hidden", "Kind": "Hidden", "Type": "FullyConnected", "N": 5,
         "Activation": "Sigmoid", "pDropout": 0.2},
        {"Name": "Output", "Kind": "Output", "Type": "FullyConnected", "N": "auto",
         "DataSet": "gl_output", "Activation": "Sigmoid", "Sparse": True},
    ],
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = write_sample_data(tmp_path_factory.mktemp("gpu"), users=12, items=20,
                          mean_per_user=4, seed=3)
    (d / "net.json").write_text(json.dumps(NETDEF))
    return d


@pytest.mark.parametrize("optimizer", ["adam", "rmsprop"])
def test_gpu_trains_what_the_cpu_trains(files, optimizer):
    written = {}
    for backend in ("cpu", "gpu"):
        path = files / f"{backend}_{optimizer}.nc"
        with _fast_simulator():
            report = fit(config_path=files / "net.json", input_path=files / "gl_input.nc",
                         output_path=files / "gl_output.nc", network_path=path,
                         cfg=train_config(optimizer, batch=4, epochs=1), backend=backend,
                         checkpoint_every=0)
        written[backend] = read_network(path)
        assert report.records[0].loss > 0
    cpu, gpu = written["cpu"], written["gpu"]
    assert (cpu.destiny["backend"], gpu.destiny["backend"]) == ("cpu", "cuda")
    for k in cpu.weights:
        np.testing.assert_allclose(gpu.weights[k], cpu.weights[k], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(gpu.biases[k], cpu.biases[k], rtol=1e-4, atol=1e-6)


def test_gpu_streams_data_larger_than_its_budget_and_trains_the_same(files, tmp_path,
                                                                     monkeypatch):
    """Data above the device's budget (half its free memory; here a device of 600 bytes free)
    is copied a chunk at a time, which ``train`` says: the weights are those of the data held
    whole."""
    from click.testing import CliRunner

    import destiny.kernels.cuda.dense
    import destiny.train
    from destiny.cli.train import train

    chunks = []
    seen = destiny.train.TrainData.chunks
    monkeypatch.setattr(destiny.train.TrainData, "chunks",
                        lambda self, *a: chunks.append(seen(self, *a)) or chunks[-1])
    notes = {}
    for free in (None, 600):
        monkeypatch.setattr(destiny.kernels.cuda.dense, "free_memory", lambda f=free: f)
        with _fast_simulator():
            result = CliRunner().invoke(train, [
                "-c", str(files / "net.json"), "-i", str(files / "gl_input.nc"),
                "-o", str(files / "gl_output.nc"), "-n", str(tmp_path / f"{free}.nc"),
                "-b", "4", "-e", "1", "--backend", "gpu"])
        assert result.exit_code == 0, result.output
        notes[free] = "a chunk at a time" in result.output
    assert notes == {None: False, 600: True}
    assert "more than 300 bytes (half of the memory free there)" in result.output
    assert len(chunks) == 1 and len(chunks[0]) > 1  # (streamed, in several chunks)
    whole, streamed = read_network(tmp_path / "None.nc"), read_network(tmp_path / "600.nc")
    for k in whole.weights:
        np.testing.assert_array_equal(streamed.weights[k], whole.weights[k])
        np.testing.assert_array_equal(streamed.biases[k], whole.biases[k])


@pytest.mark.parametrize("multiply", [False, True])
def test_gpu_predicts_what_the_cpu_predicts(files, multiply):
    import io

    from destiny.predict import Predictor, predict_file

    network = files / "predict.nc"
    if not network.exists():
        fit(config_path=files / "net.json", input_path=files / "gl_input.nc",
            output_path=files / "gl_output.nc", network_path=network,
            cfg=train_config(batch=4, epochs=2), backend="cpu", checkpoint_every=0)
    lines = {}
    for backend in ("cpu", "gpu"):
        predictor = Predictor(network, files / "features_input", files / "features_output",
                              dataset=None, backend=backend)
        out = io.StringIO()
        with _fast_simulator():
            predict_file(predictor, files / "ratings.txt", out, k=5, batch_size=5,
                         filter_path=files / "ratings.txt", multiply=multiply,
                         score_format="9.6f")
        lines[backend] = out.getvalue().splitlines()
    assert len(lines["gpu"]) == len(lines["cpu"]) == 12
    for cpu_line, gpu_line in zip(lines["cpu"], lines["gpu"], strict=True):
        name, cpu_recs = cpu_line.split("\t")
        assert gpu_line.startswith(name + "\t")
        cpu_items = [r.split(",") for r in cpu_recs.split(":") if r]
        gpu_items = [r.split(",") for r in gpu_line.split("\t")[1].split(":") if r]
        assert_same_ranking([i for i, _ in cpu_items], [float(s) for _, s in cpu_items],
                            [i for i, _ in gpu_items], [float(s) for _, s in gpu_items])


def assert_same_ranking(cpu_items, cpu_scores, gpu_items, gpu_scores, rtol=1e-5, atol=1e-6):
    """The same scores within float32 tolerance, and the same items in the same order but
    where scores tie within it: a GPU's products (cuBLAS, libdevice) round otherwise than the
    cpu's, so two near-equal items may swap, and at the end of the list one item may give way
    to another tied with it."""
    np.testing.assert_allclose(gpu_scores, cpu_scores, rtol=rtol, atol=atol)
    close = np.isclose(cpu_scores[1:], cpu_scores[:-1], rtol=rtol, atol=atol * 2)
    groups = np.split(np.arange(len(cpu_items)), np.flatnonzero(~close) + 1)
    for group in groups[:-1]:  # (the last may hold items tied with others beyond the list)
        assert {gpu_items[j] for j in group} == {cpu_items[j] for j in group}, (cpu_items,
                                                                                gpu_items)


def test_the_ranking_comparison_lets_only_ties_differ():
    same = assert_same_ranking
    same(["a", "b", "c"], [0.9, 0.5, 0.1], ["a", "b", "c"], [0.9, 0.5, 0.1])
    same(["a", "b", "c"], [0.5, 0.5, 0.1], ["b", "a", "c"], [0.5, 0.5, 0.1])  # a tie, swapped
    same(["a", "b", "c"], [0.9, 0.5, 0.5], ["a", "b", "x"], [0.9, 0.5, 0.5])  # one at the end
    for items, scores in [(["b", "a", "c"], [0.9, 0.5, 0.1]), (["a", "x", "c"], [0.9, 0.5, 0.1]),
                          (["a", "b", "c"], [0.9, 0.4, 0.1])]:
        with pytest.raises(AssertionError):
            same(["a", "b", "c"], [0.9, 0.5, 0.1], items, scores)


def test_gpu_trains_a_skip_from_the_input_layer_as_the_cpu(files, tmp_path):
    """The output adds the denoised input (spec 3.16, 3.9): the CUDA kernel's sums are the
    cpu's."""
    netdef = json.loads(json.dumps(NETDEF))
    netdef["Layers"][2]["Skip"] = "Input"
    (tmp_path / "net.json").write_text(json.dumps(netdef))
    written = {}
    for backend in ("cpu", "gpu"):
        with _fast_simulator():
            fit(config_path=tmp_path / "net.json", input_path=files / "gl_input.nc",
                output_path=files / "gl_output.nc", network_path=tmp_path / f"{backend}.nc",
                cfg=train_config("rmsprop", batch=4, epochs=1), backend=backend,
                checkpoint_every=0)
        written[backend] = read_network(tmp_path / f"{backend}.nc")
    assert written["gpu"].netdef.layers[2].skips == ("Input",)
    for k in written["cpu"].weights:
        np.testing.assert_allclose(written["gpu"].weights[k], written["cpu"].weights[k],
                                   rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(written["gpu"].biases[k], written["cpu"].biases[k],
                                   rtol=1e-4, atol=1e-6)


# test_split_across_ranks_on_the_gpu_backend's runs read only the networks they wrote: they go
# together (tests/batch.py), the one-process runs in one process and those on 2 ranks in one
# mpiexec job, each as ``python tests/simulated_train.py ARGS`` runs it.
BATCHED = batch.Batched(str(Path(__file__).with_name("simulated_train.py")))
SPLIT_ACTIVATIONS = ["Sigmoid", "SoftMax"]


@pytest.fixture(scope="module")
def batch_runs(tmp_path_factory, request) -> dict:
    return BATCHED.run(request, tmp_path_factory, request.getfixturevalue,
                       rank_env(NUMBA_ENABLE_CUDASIM="1"), MPIEXEC)


def split_runs(fixture, d) -> dict:
    """For each activation, in d/ACTIVATION: one cpu process's network one.nc and 2 gpu
    ranks' two.nc, of net.json (NETDEF with that activation)."""
    files, runs = fixture("files"), {}
    for activation in SPLIT_ACTIVATIONS:
        (d / activation).mkdir()
        config = d / activation / "net.json"
        config.write_text(json.dumps(dict(NETDEF, Layers=[
            dict(layer, Activation=activation) if layer["Kind"] != "Input" else layer
            for layer in NETDEF["Layers"]])))
        args = ["-c", config, "-i", files / "gl_input.nc", "-o", files / "gl_output.nc",
                "-b", "4", "-e", "1", "-q", "--checkpoint-every", "0"]
        runs[activation, 1] = (1, [*args, "-n", d / activation / "one.nc", "--backend", "cpu"])
        runs[activation, 2] = (2, [*args, "-n", d / activation / "two.nc", "--backend", "gpu"])
    return runs


@needs_mpiexec
@BATCHED(split_runs)
@pytest.mark.parametrize("activation", SPLIT_ACTIVATIONS)
def test_split_across_ranks_on_the_gpu_backend(batch_runs, activation):
    # Collectives of device arrays go through host memory: the same network as one cpu process
    # (SoftMax: the hidden layer, with its dropout, and the output, each normalized over the
    # ranks' units by the CUDA kernels).
    import os

    d, ran = batch_runs["test_split_across_ranks_on_the_gpu_backend"]
    tmp_path = d / activation
    one, two = ran[activation, 1], ran[activation, 2]
    assert one.returncode == 0, one.stderr.decode()
    assert two.returncode == 0, two.stderr.decode()
    cpu, gpu = read_network(tmp_path / "one.nc"), read_network(tmp_path / "two.nc")
    assert gpu.destiny["backend"] == "cuda" and sorted(os.listdir(tmp_path)) == [
        "net.json", "one.nc", "two.nc"]
    for k in cpu.weights:
        np.testing.assert_allclose(gpu.weights[k], cpu.weights[k], rtol=1e-4, atol=1e-6)


def test_tf32_is_asked_for_on_the_command_line_and_recorded(files, tmp_path):
    """``train --tf32`` allows TF32 products: the GPU backend takes it (said on stderr and
    in the network file), the cpu, whose products are float32 anyway, runs as without it."""
    from click.testing import CliRunner

    from destiny.cli.train import train

    for backend, products in (("gpu", "tf32"), ("cpu", "float32")):
        path = tmp_path / f"{backend}.nc"
        with _fast_simulator():
            result = CliRunner().invoke(train, [
                "-c", str(files / "net.json"), "-i", str(files / "gl_input.nc"),
                "-o", str(files / "gl_output.nc"), "-n", str(path), "-b", "4", "-e", "1",
                "--backend", backend, "--tf32"])
        assert result.exit_code == 0, result.output
        assert ("with TF32 products" in result.output) == (products == "tf32")
        assert read_network(path).destiny["products"] == products


def test_gpu_lazy_rows_with_their_gradient_in_one_kernel_train_exactly_as_dense_updates(
        files, tmp_path, monkeypatch):
    """On the GPU the input layer's gradient and its lazy row update are one kernel
    (``sparse_grad_update_rows``) once rows lag behind: every weight, bias and state bit is
    what dense updates of every row give."""
    import destiny.network
    from destiny.kernels.cuda import optim

    calls = []
    fused = optim.sparse_grad_update_rows
    monkeypatch.setattr(optim, "sparse_grad_update_rows",
                        lambda *args: calls.append(1) or fused(*args))
    written = []
    for lazy in (True, False):
        if not lazy:
            monkeypatch.setattr(destiny.network, "LAZY_MODES", ())
        path = tmp_path / f"{lazy}.nc"
        with _fast_simulator():
            fit(config_path=files / "net.json", input_path=files / "gl_input.nc",
                output_path=files / "gl_output.nc", network_path=path,
                cfg=train_config("rmsprop", batch=4, epochs=2), backend="gpu",
                checkpoint_every=0)
        written.append(read_network(path))
        if lazy:
            assert len(calls) >= 4  # every update after the first (dense) one
    for k in written[0].weights:
        np.testing.assert_array_equal(written[0].weights[k], written[1].weights[k])
        np.testing.assert_array_equal(written[0].biases[k], written[1].biases[k])
