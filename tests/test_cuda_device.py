"""Which GPU a process drives (``kernels/cuda/device.py``): each rank on a machine its own."""

from __future__ import annotations

import json
import types

import pytest
from click.testing import CliRunner

from destiny.kernels.cuda import device

from .backends import _fast_simulator
from .conftest import write_sample_data


def test_ranks_on_a_machine_take_its_gpus_in_turn():
    assert [device.device_for(p, 4) for p in range(6)] == [0, 1, 2, 3, 0, 1]
    assert [device.device_for(p, 1) for p in range(3)] == [0, 0, 0]


@pytest.mark.parametrize("process, count, bound", [
    (0, 2, None), (1, 2, 1), (3, 2, 1), (2, 4, 2), (5, 1, None)])
@pytest.mark.parametrize("with_cupy", [True, False])
def test_numba_and_cupy_are_bound_to_the_process_gpu(monkeypatch, process, count, bound,
                                                      with_cupy):
    """numba's context and CuPy's current device (its pool and cuBLAS handle) are the same
    GPU; device 0, both libraries' default, is left as it is."""
    selected, used = [], []
    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(
        Device=lambda i: types.SimpleNamespace(use=lambda: used.append(i))))
    monkeypatch.setattr(device, "SIMULATED", False)
    monkeypatch.setattr(device, "cuda", types.SimpleNamespace(gpus=[object()] * count,
                                                              select_device=selected.append))
    monkeypatch.setattr(device, "_cublas", lambda: (cupy, None) if with_cupy else None)
    assert device.use_device(process) == process % count
    assert selected == ([] if bound is None else [bound])
    assert used == (selected if with_cupy else [])


def test_the_simulator_binds_nothing():
    assert device.use_device(3) is None


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = write_sample_data(tmp_path_factory.mktemp("device"), users=8, items=12,
                          mean_per_user=3, seed=5)
    (d / "net.json").write_text(json.dumps({"Layers": [
        {"Name": "Input", "Kind": "Input", "N": "auto", "DataSet": "gl_input", "Sparse": True},
        {"Name": "Hidden", "Kind": "Hidden", "N": 3, "Activation": "Sigmoid"},
        {"Name": "Output", "Kind": "Output", "N": "auto", "DataSet": "gl_output",
         "Activation": "Sigmoid", "Sparse": True}]}))
    return d


def test_train_and_predict_bind_each_process_to_its_gpu(files, monkeypatch):
    """The commands hand the process's rank on its machine to the backend (here the second
    process on a machine: ``Comm.local_rank`` 1), for train and for predict alike."""
    import destiny.parallel
    from destiny.cli.predict import predict
    from destiny.cli.train import train

    class SecondOnItsMachine(destiny.parallel.Comm):
        local_rank = 1

    processes = []
    monkeypatch.setattr(destiny.parallel, "get_comm", SecondOnItsMachine)
    monkeypatch.setattr(device, "use_device", processes.append)
    with _fast_simulator():
        trained = CliRunner().invoke(train, [
            "-c", str(files / "net.json"), "-i", str(files / "gl_input.nc"),
            "-o", str(files / "gl_output.nc"), "-n", str(files / "net.nc"), "-b", "4",
            "-e", "1", "--backend", "gpu"])
        assert trained.exit_code == 0, trained.output
        assert processes == [1]
        predicted = CliRunner().invoke(predict, [
            "-n", str(files / "net.nc"), "-i", str(files / "features_input"),
            "-o", str(files / "features_output"), "-r", str(files / "ratings.txt"),
            "-s", str(files / "recs.txt"), "-k", "3", "--backend", "gpu"])
    assert predicted.exit_code == 0, predicted.output
    assert processes == [1, 1]
