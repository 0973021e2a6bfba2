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


@pytest.fixture
def gpus(monkeypatch):
    """A machine of ``gpus.count`` GPUs as numba and CuPy see them; what each was asked."""
    calls = types.SimpleNamespace(count=2, selected=[], used=[], cupy=True)
    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(
        Device=lambda i: types.SimpleNamespace(use=lambda: calls.used.append(i))))
    numba_cuda = types.SimpleNamespace(select_device=calls.selected.append)
    monkeypatch.setattr(device, "SIMULATED", False)
    monkeypatch.setattr(device, "_bound", None)
    monkeypatch.setattr(device, "cuda", numba_cuda)
    monkeypatch.setattr(device, "cublas_available", lambda: calls.cupy)
    monkeypatch.setattr(device, "cupy_module", lambda: cupy)

    def machine(count, with_cupy=True):
        numba_cuda.gpus = [object()] * count
        calls.cupy = with_cupy
        return calls

    return machine


@pytest.mark.parametrize("process, count", [(0, 2), (1, 2), (3, 2), (2, 4), (5, 1)])
@pytest.mark.parametrize("with_cupy", [True, False])
def test_numba_and_cupy_are_bound_to_the_process_gpu(gpus, process, count, with_cupy):
    """numba's context and CuPy's current device (its pool and cuBLAS handle) are the same
    GPU, once: asking again for it binds nothing more."""
    calls = gpus(count, with_cupy)
    assert device.use_device(process, 6)[0] == process % count
    assert device.use_device(process, 6)[0] == process % count
    assert calls.selected == [process % count]
    assert calls.used == (calls.selected if with_cupy else [])


def test_a_process_drives_one_gpu(gpus):
    """Another GPU asked of a process that drives one already is a clear error (its scratch
    and staging memory belong to the first), as is numba's refusal to switch contexts."""
    from destiny.kernels import BackendUnavailableError

    gpus(2)
    device.use_device(1)
    with pytest.raises(BackendUnavailableError, match="already drives GPU 1 and cannot take "
                                                      "GPU 0 too; one process drives one GPU"):
        device.use_device(0)

    def refused(index):
        raise RuntimeError("Cannot switch CUDA-context.")

    device._bound = None
    device.cuda.select_device = refused
    with pytest.raises(BackendUnavailableError, match="already drives a GPU and cannot take "
                                                      "GPU 0 too"):
        device.use_device(0)


@pytest.mark.parametrize("processes, count, shares", [
    (1, 1, [1]), (4, 4, [1, 1, 1, 1]), (3, 2, [2, 1, 2]), (5, 2, [3, 2, 3, 2, 3])])
def test_processes_sharing_a_gpu_each_count_on_a_share_of_its_memory(
        gpus, monkeypatch, processes, count, shares):
    """More processes on a machine than GPUs: they share them round-robin, and the training
    data's budget on each (``free_memory``) is its share of the GPU's free memory."""
    import destiny.kernels.cuda.dense
    from destiny.kernels import get_backend

    assert [device.sharing(p, processes, count) for p in range(processes)] == shares
    monkeypatch.setattr(destiny.kernels.cuda.dense, "free_memory", lambda: 12_000)
    for p in range(processes):
        gpus(count)
        monkeypatch.setattr(device, "_bound", None)
        kernels = get_backend("gpu", process=p, processes=processes)
        assert kernels.device == p % count
        assert kernels.free_memory() == 12_000 // shares[p]


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
        local_rank, local_size = 1, 3

    processes = []
    monkeypatch.setattr(destiny.parallel, "get_comm", SecondOnItsMachine)
    monkeypatch.setattr(device, "use_device",
                        lambda *given: processes.append(given) or (None, 1))
    with _fast_simulator():
        trained = CliRunner().invoke(train, [
            "-c", str(files / "net.json"), "-i", str(files / "gl_input.nc"),
            "-o", str(files / "gl_output.nc"), "-n", str(files / "net.nc"), "-b", "4",
            "-e", "1", "--backend", "gpu"])
        assert trained.exit_code == 0, trained.output
        assert processes == [(1, 3)]
        predicted = CliRunner().invoke(predict, [
            "-n", str(files / "net.nc"), "-i", str(files / "features_input"),
            "-o", str(files / "features_output"), "-r", str(files / "ratings.txt"),
            "-s", str(files / "recs.txt"), "-k", "3", "--backend", "gpu"])
    assert predicted.exit_code == 0, predicted.output
    assert processes == [(1, 3), (1, 3)]
