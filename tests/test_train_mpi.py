"""``mpiexec -n P train``: every layer split across ranks computes the network one process does.

Every run is a real job under MPICH's mpiexec with one numba and BLAS thread per rank. The
network has uneven splits (37, 23 and 97 units over 2 and 3 ranks), both matrix layouts (rows
for Input -> H1 and the hidden H1 -> H2, columns for H1 -> Output), a layer whose two sources
are both split by rows (H3), sparse input and output, a skip layer, dropout and denoising:
spec 7's whole arithmetic.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import textwrap
import time

import netCDF4
import numpy as np
import pytest

from destiny import shard
from destiny.io.dataset import dataset_widths
from destiny.io.network_file import connections, read_network
from tests import batch
from tests.batch import succeeded
from tests.conftest import write_sample_data
from tests.test_parallel import MPIEXEC, needs_mpiexec, rank_env

TRAIN = pathlib.Path(sys.executable).parent / "train"

pytestmark = needs_mpiexec

ENV = rank_env()

NETDEF = {
    "Version": 0.7, "Name": "split", "Kind": "FeedForward", "ShuffleIndices": True,
    "Denoising": {"p": 0.2}, "ErrorFunction": "CrossEntropy",
    "Layers": [
        {"Name": "Input", "Kind": "Input", "N": "auto", "DataSet": "gl_input", "Sparse": True},
        {"Name": "H1", "Kind": "Hidden", "Type": "FullyConnected", "N": 37,
         "Activation": "Sigmoid", "pDropout": 0.1},
        {"Name": "H2", "Kind": "Hidden", "Type": "FullyConnected", "N": 23,
         "Activation": "Tanh", "pDropout": 0.2},
        {"Name": "H3", "Kind": "Hidden", "Type": "FullyConnected", "N": 23,
         "Source": ["H1", "Input"], "Activation": "RELU", "Skip": ["H2"]},
        {"Name": "Output", "Kind": "Output", "Type": "FullyConnected", "N": "auto",
         "Source": ["H3", "H1"], "DataSet": "gl_output", "Activation": "Sigmoid",
         "Sparse": True},
    ],
}

# A test-only launcher: rank FAIL_RANK fails in its third update, or its FAIL_AT-th (a
# DestinyError, a bug, a sudden death, or a SIGTERM that it alone gets), or every rank finds
# the training diverged there, or FAIL_RANK gets a SIGTERM as the ranks set up or write the
# network file, through the real command line; the library has no hook for it. (small-blocks:
# no failure, the matrices drawn, gathered and written a few rows at a time.)
FAILING = textwrap.dedent("""
    import os, signal, sys
    from destiny import shard
    from destiny.errors import DestinyError
    from destiny.network import Network

    rank, mode, real, calls = int(os.environ["FAIL_RANK"]), os.environ["FAIL_MODE"], \\
        Network.update, []
    at = int(os.environ.get("FAIL_AT", "3"))
    if mode == "small-blocks":
        shard._BLOCK_VALUES = 50
    if mode == "sigterm-late":  # then, LATE_S later, the other rank's copy (mpiexec's)
        import threading
        from destiny.parallel import get_comm
        pids = get_comm().allgather(os.getpid())

    def update(self, *args, **kwargs):
        calls.append(1)
        if mode == "diverged" and len(calls) == at:
            from destiny.train import TrainingDivergedError
            raise TrainingDivergedError("simulated divergence")
        if self.comm.rank == rank and len(calls) == at:
            if mode == "error":
                raise DestinyError("simulated failure")
            if mode == "bug":
                raise RuntimeError("simulated bug")
            if mode in ("sigterm", "sigterm-late"):
                os.kill(os.getpid(), signal.SIGTERM)
                if mode == "sigterm-late":
                    threading.Timer(float(os.environ["LATE_S"]), os.kill,
                                    (pids[1 - rank], signal.SIGTERM)).start()
            if mode == "die":
                os._exit(3)
        return real(self, *args, **kwargs)

    def initialize(self, *args, **kwargs):  # (as the ranks set up, before any collective)
        if mode == "sigterm-setup" and self.comm.rank == rank:
            os.kill(os.getpid(), signal.SIGTERM)
        return real_initialize(self, *args, **kwargs)

    Network.update, real_initialize, Network.initialize = update, Network.initialize, initialize

    import destiny.fit
    real_save = destiny.fit.save_network

    def save_network(path, net, **kwargs):  # (the network file, as the ranks write it)
        if mode == "sigterm-final" and net.comm.rank == rank and "arrays" in kwargs:
            os.kill(os.getpid(), signal.SIGTERM)
        if mode == "sigterm-checkpoint" and net.comm.rank == rank and "optimizer_state" in kwargs:
            os.kill(os.getpid(), signal.SIGTERM)
        return real_save(path, net, **kwargs)

    destiny.fit.save_network = save_network

    import destiny.io.checkpoint as checkpoint
    real_write = checkpoint.write_network

    def write_network(path, *args, **kwargs):  # (rank 0 writes the file the ranks gather)
        if mode == "full-disk" and os.path.basename(str(path)).startswith(".gl.nc2.nc"):
            raise OSError(28, "No space left on device", str(path))
        return real_write(path, *args, **kwargs)

    checkpoint.write_network = write_network
    from destiny.cli.train import main
    sys.argv[0] = "train"
    main()
""")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = write_sample_data(tmp_path_factory.mktemp("split"), users=160, items=97,
                          mean_per_user=8, seed=4)
    (d / "net.json").write_text(json.dumps(NETDEF))
    return d


def run(command, env=ENV):
    return subprocess.run([str(c) for c in command], env=env, capture_output=True, timeout=120)


def train_argv(data, network, *args, config="net.json", targets="gl_output.nc",
               inputs="gl_input.nc") -> list:
    return ["-c", data / config, "-i", data / inputs, "-o", data / targets,
            "-n", network, "-b", "32", "-e", "3", "-q", *args]


def train(data, network, *args, ranks=1, launcher=(), **files):
    prefix = [MPIEXEC, "-n", ranks] if ranks > 1 else []
    return run([*prefix, *(launcher or [TRAIN]), *train_argv(data, network, *args, **files)])


def errors(done) -> list[str]:
    return [line for line in done.stderr.decode().splitlines() if line.startswith("Error:")]


def assert_same_network(a, b, rtol=1e-4):
    one, other = read_network(a), read_network(b)
    for k in one.weights:
        scale = np.abs(one.weights[k]).max()
        np.testing.assert_allclose(other.weights[k], one.weights[k], rtol=0, atol=rtol * scale)
    for k in one.biases:
        scale = max(np.abs(one.biases[k]).max(), 1e-3)
        np.testing.assert_allclose(other.biases[k], one.biases[k], rtol=0, atol=rtol * scale)
    assert sorted(one.arrays) == sorted(other.arrays)
    for name, array in one.arrays.items():
        scale = max(np.abs(array).max(), 1e-3)
        np.testing.assert_allclose(other.arrays[name], array, rtol=0, atol=rtol * scale)


def layout(path) -> list:
    """Every attribute (name, type, and value except Destiny's run extras), variable and
    dimension of a file, in file order."""
    with netCDF4.Dataset(path) as nc:
        attrs = [(k, type(v).__name__, getattr(v, "dtype", None),
                  None if k.startswith("destiny_") else str(v))
                 for k, v in ((k, nc.getncattr(k)) for k in nc.ncattrs())]
        return [attrs, [(n, v.dtype, v.dimensions, v.shape) for n, v in nc.variables.items()],
                [(n, len(d)) for n, d in nc.dimensions.items()]]


# The tests that compare the networks one process and P ranks train read only what the runs
# left: the runs of the tests selected go together (tests/batch.py), every one-process run in
# one process and every run on P ranks in one mpiexec -n P job, the first time a test asks.
BATCHED = batch.Batched("train")


@pytest.fixture(scope="module")
def batch_runs(softmax_data, tmp_path_factory, request) -> dict:
    # (softmax_data is the data folder with the SoftMax cases' files added: one for all)
    return BATCHED.run(request, tmp_path_factory, softmax_data, ENV, MPIEXEC)


@pytest.fixture
def runs(batch_runs, request) -> tuple:
    """This test's runs (BATCHED): (its folder, {key: its run})."""
    return batch_runs[request.node.originalname]


@pytest.fixture(scope="module")
def single(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("single")
    done = train(data, out / "gl.nc", "--checkpoint-every", "2", "--metrics", out / "m.jsonl")
    assert done.returncode == 0, done.stderr.decode()
    return out


def test_ranks_write_the_network_a_few_rows_at_a_time(data, single, tmp_path):
    """Rank 0 gathers each matrix from the ranks a block of rows at a time (16 MB in a real
    run, a few rows here): the network and checkpoint one process writes."""
    done, out = train_failing(data, tmp_path, "small-blocks", "-b", "32", "-e", "3",
                              "--checkpoint-every", "2")
    assert done.returncode == 0, done.stderr.decode()
    for name in ("gl.nc", "gl.nc2.nc"):
        assert_same_network(single / name, out / name)


def ranks_runs(data, d) -> dict:
    """single's run on 2 and on 3 ranks, each in its folder."""
    for ranks in (2, 3):
        (d / str(ranks)).mkdir()
    return {ranks: (ranks, train_argv(data, d / str(ranks) / "gl.nc", "--checkpoint-every",
                                      "2", "--metrics", d / str(ranks) / "m.jsonl"))
            for ranks in (2, 3)}


@BATCHED(ranks_runs)
@pytest.mark.parametrize("ranks", [2, 3])
def test_ranks_train_what_one_process_trains(single, runs, ranks):
    d, done = runs
    tmp_path = d / str(ranks)
    succeeded(done[ranks])
    assert sorted(os.listdir(tmp_path)) == ["gl.nc", "gl.nc2.nc", "m.jsonl"]  # no temporary
    for name in ("gl.nc", "gl.nc2.nc"):  # the checkpoint holds Adam's state, split like W
        assert_same_network(single / name, tmp_path / name)
        assert layout(tmp_path / name) == layout(single / name)
    # Each epoch's loss: each rank's, of its own output units, summed over the ranks.
    one, many = ([json.loads(line) for line in (d / "m.jsonl").read_text().splitlines()]
                 for d in (single, tmp_path))
    for key in ("loss", "training_error"):
        assert [r[key] for r in many] == pytest.approx([r[key] for r in one], rel=1e-4), key


def on_3_runs(data, d) -> dict:
    """The network checkpointed each epoch on 3 ranks."""
    return {3: (3, train_argv(data, d / "gl.nc", "--checkpoint-every", "1"))}


@BATCHED(on_3_runs)
def test_resume_on_other_ranks(data, single, runs):
    # Checkpoint on 3 ranks, then continue on 2: the same run as one process.
    tmp_path, done = runs
    succeeded(done[3])
    os.remove(tmp_path / "gl.nc")
    os.remove(tmp_path / "gl.nc3.nc")  # the last epoch's (spec 5.2)
    os.remove(tmp_path / "gl.nc2.nc")
    done = train(data, tmp_path / "gl.nc", "--checkpoint-every", "1", "--resume",
                 "--keep-checkpoints", "1", ranks=2)
    assert done.returncode == 0, done.stderr.decode()
    assert_same_network(single / "gl.nc", tmp_path / "gl.nc")
    assert sorted(os.listdir(tmp_path)) == ["gl.nc", "gl.nc3.nc"]  # rank 0 removed the rest


RESIZED_STATES = {
    "destiny_bias_state0_0": "the optimizer state 'destiny_bias_state0_0' holds 3 values; the "
                             "layer 'H1' it is for has 37 units.",
    "destiny_state1_1": "the optimizer state 'destiny_state1_1' holds 3 values; the weights "
                        "H1 -> H2 it is for hold 37 x 23.",
}


def checkpointed_on_2_runs(data, d) -> dict:
    """For each state of RESIZED_STATES, in its folder, 2 epochs checkpointed on 2 ranks."""
    runs = {}
    for state in RESIZED_STATES:
        (d / state).mkdir()
        runs[state] = (2, train_argv(data, d / state / "gl.nc", "--checkpoint-every", "1",
                                     "-e", "2"))
    return runs


@BATCHED(checkpointed_on_2_runs)
@pytest.mark.parametrize("state, message", RESIZED_STATES.items())
def test_resume_refuses_optimizer_state_of_another_size(data, runs, state, message):
    """Each rank reads its block of a checkpoint's optimizer state: one of another size than
    its weights or biases is refused as damage, one message, as one process refuses it (a
    rank's block was read from what the variable held)."""
    d, done = runs
    tmp_path = d / state
    succeeded(done[state])
    os.remove(tmp_path / "gl.nc")
    with netCDF4.Dataset(tmp_path / "gl.nc2.nc", "a") as nc:  # (no resizing in place)
        nc.renameVariable(state, state + "_old")
        nc.createDimension(state + "_resized", 3)
        nc.createVariable(state, "f4", (state + "_resized",))[:] = 0
    done = train(data, tmp_path / "gl.nc", "--checkpoint-every", "1", "--resume", ranks=2)
    assert done.returncode == 1, done.stderr.decode()
    (line,) = errors(done)
    assert line.startswith(f"Error: {tmp_path / 'gl.nc2.nc'}: {message}"), line
    assert "Traceback" not in done.stderr.decode() and "Abort" not in done.stderr.decode()
    assert not (tmp_path / "gl.nc").exists()


# Each rank's fit with --resume (a checkpoint found) and with --resume-or-restart (the same
# file passed over): rank 0 alone looks for the checkpoint and judges it, and every rank must
# then load that checkpoint and hear of the one passed over. Loading it (_resume) is stopped
# as it starts, and the training at on_start, so that a rank left out still ends at once,
# and rank 0 prints what each rank saw.
DECIDED = textwrap.dedent("""
    import json, sys
    import destiny.fit
    from destiny.parallel import get_comm
    from destiny.train import train_config

    data, out = sys.argv[1:]
    comm, seen = get_comm(), []

    class Stopped(Exception):
        pass

    def resume(net, path, settings, epochs, comm, **flag):
        raise Stopped(f"resumed from {path}")

    def start(net, data, state):
        raise Stopped("started afresh")

    destiny.fit._resume = resume
    for restart in (False, True):
        try:
            destiny.fit.fit(
                config_path=f"{data}/net.json", input_path=f"{data}/gl_input.nc",
                output_path=f"{data}/gl_output.nc", network_path=f"{out}/gl.nc",
                cfg=train_config(batch=32, epochs=3), resume=True, restart=restart,
                on_start=start, on_restart=lambda path, why: seen.append(f"passed over {path}"),
                comm=comm)
        except Stopped as e:
            seen.append(str(e))
    ranks = comm.gather(seen)
    if comm.rank == 0:
        print(json.dumps({f"rank {r}": seen for r, seen in enumerate(ranks)}))
""")


def test_every_rank_resumes_from_the_checkpoint_rank_0_found(data, tmp_path):
    """Rank 0 alone finds the newest checkpoint (and, with --resume-or-restart, passes over
    one of another run) and sends the ranks its decision: a rank that went on without it
    trained afresh while rank 0 loaded the checkpoint, and the job hung."""
    netCDF4.Dataset(tmp_path / "gl.nc2.nc", "w").close()  # (no settings: not this run's)
    script = tmp_path / "decided.py"
    script.write_text(DECIDED)
    done = run([MPIEXEC, "-n", 2, sys.executable, "-m", "mpi4py", script, data, tmp_path])
    assert done.returncode == 0, done.stderr.decode()
    checkpoint = tmp_path / "gl.nc2.nc"
    each = [f"resumed from {checkpoint}", f"passed over {checkpoint}", "started afresh"]
    assert json.loads(done.stdout) == {"rank 0": each, "rank 1": each}


def notes_runs(data, d) -> dict:
    """Quiet with metrics in a file and loud with them on standard output (which every rank
    has) on 2 ranks, and loud in one process."""
    loud = ["-c", data / "net.json", "-i", data / "gl_input.nc", "-o", data / "gl_output.nc",
            "-b", "32", "-e", "1"]
    return {"quiet": (2, train_argv(data, d / "gl.nc", "--checkpoint-every", "0", "--metrics",
                                    d / "m.jsonl")),
            "loud": (2, [*loud, "-n", d / "loud.nc", "--metrics", "-"]),
            "one": (1, [*loud, "-n", d / "one.nc"])}


@BATCHED(notes_runs)
def test_metrics_and_notes_come_once(runs):
    tmp_path, done = runs
    succeeded(done["quiet"])
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) == 3
    loud = done["loud"]
    assert loud.returncode == 0, loud.stderr.decode()
    text = loud.stderr.decode()
    assert text.count("epoch 1/1: loss") == 1 and "(2 MPI ranks x 1 thread)" in text, text
    assert [json.loads(line)["epoch"] for line in loud.stdout.decode().splitlines()] == [1]
    one = done["one"]
    assert one.returncode == 0 and "backend cpu (1 thread)" in one.stderr.decode(), one.stderr


def test_unsplittable_definition_is_refused_once(data, tmp_path):
    assert dataset_widths(data / "gl_input.nc") == {"gl_input": 128}
    netdef = json.loads(json.dumps(SHARED_NETDEFS["tied"]))  # 128 -> 100 -> ... -> 100 -> 128:
    netdef["Layers"][1]["N"] = netdef["Layers"][3]["N"] = 100  # Input -> H1's W and H3 ->
    # Output's W.T both split by their output units, in other blocks
    (tmp_path / "shared.json").write_text(json.dumps(netdef))
    done = run([MPIEXEC, "-n", 2, TRAIN, "-c", tmp_path / "shared.json", "-i",
                data / "gl_input.nc", "-o", data / "gl_output.nc", "-n", tmp_path / "gl.nc"])
    assert done.returncode == 1
    assert len(errors(done)) == 1
    assert (f"Error: {tmp_path / 'shared.json'}: Layers[4].SharedWeights: the weight H3 -> "
            "Output uses Input -> H1's matrix (128 x 100 units) transposed") in errors(done)[0]
    assert os.listdir(tmp_path) == ["shared.json"]


def test_transposed_share_of_a_sparse_input_is_refused_once(data, tmp_path):
    # Input -> H1 uses H3 -> Output's matrix transposed (split by its rows: it would pass
    # check_splittable): refused as the network is built, before any collective, naming the
    # file, once (it was refused by each rank's first forward pass, which then aborted).
    netdef = json.loads(json.dumps(NETDEF))
    netdef["Layers"][1]["SharedWeights"] = {"InputLayer": "Input", "SourceInputLayer": "H3",
                                            "SourceOutputLayer": "Output", "Transposed": True}
    netdef["Layers"][3] = {**netdef["Layers"][3], "N": 37, "Source": "H1", "Skip": []}
    netdef["Layers"][4]["Source"] = "H3"
    (tmp_path / "shared.json").write_text(json.dumps(netdef))
    for ranks in (1, 2):
        done = train(data, tmp_path / "gl.nc", ranks=ranks,
                     config=tmp_path / "shared.json")
        assert done.returncode == 1
        assert errors(done) == [f"Error: {tmp_path / 'shared.json'}: Layers[1].SharedWeights: "
                                "a transposed shared matrix cannot read a sparse input layer."]
        assert "Abort" not in done.stderr.decode()
        assert os.listdir(tmp_path) == ["shared.json"]


# Shared matrices (spec 3.14) split across the ranks: each rank uses its block of the owner's
# matrix for every connection sharing it. "tied" is a tied-weights autoencoder, 128 -> 37 -> 23
# -> 37 -> 128, whose decoder uses the encoder's matrices transposed: Input -> H1's, split by
# the input's rows, read by the output split by its columns (H3 -> Output), and H2 -> H3's,
# split by H3's columns, read by H1 -> H2 split by H1's rows (a share of a later matrix).
# "untransposed" has H3 use H1 -> H2's and Input -> H2's matrices as they are.
SHARED_NETDEFS = {
    "tied": {**NETDEF, "Layers": [
        NETDEF["Layers"][0],
        {"Name": "H1", "Kind": "Hidden", "N": 37, "Activation": "Sigmoid", "pDropout": 0.1},
        {"Name": "H2", "Kind": "Hidden", "N": 23, "Activation": "Tanh", "SharedWeights": {
            "InputLayer": "H1", "SourceInputLayer": "H2", "SourceOutputLayer": "H3",
            "Transposed": True}},
        {"Name": "H3", "Kind": "Hidden", "N": 37, "Activation": "Tanh"},
        {**NETDEF["Layers"][4], "Source": "H3", "SharedWeights": {
            "InputLayer": "H3", "SourceInputLayer": "Input", "SourceOutputLayer": "H1",
            "Transposed": True}}]},
    "untransposed": {**NETDEF, "Layers": [
        *NETDEF["Layers"][:2], {**NETDEF["Layers"][2], "Source": ["H1", "Input"]},
        {**NETDEF["Layers"][3], "SharedWeights": [
            {"InputLayer": "H1", "SourceInputLayer": "H1", "SourceOutputLayer": "H2"},
            {"InputLayer": "Input", "SourceInputLayer": "Input", "SourceOutputLayer": "H2"}]},
        NETDEF["Layers"][4]]},
    # H1 -> H2 uses Input -> H3's matrix transposed: a sparse input's matrix whose dense user
    # comes first in the forward order, last in the backward one.
    "earlier": {**NETDEF, "Layers": [
        *NETDEF["Layers"][:2],
        {"Name": "H2", "Kind": "Hidden", "N": 128, "Activation": "Tanh", "SharedWeights": {
            "InputLayer": "H1", "SourceInputLayer": "Input", "SourceOutputLayer": "H3",
            "Transposed": True}},
        {"Name": "H3", "Kind": "Hidden", "N": 37, "Source": ["Input", "H2"],
         "Activation": "RELU"},
        {**NETDEF["Layers"][4], "Source": "H3"}]},
}
SHARED_LAYOUTS = {  # (owner, sharer) of every share, as spec 7 splits them
    "tied": [(shard.COLS, shard.ROWS), (shard.ROWS, shard.COLS)],
    "untransposed": [(shard.ROWS, shard.ROWS)] * 2,
    "earlier": [(shard.ROWS, shard.COLS)],
}


SHARED_RANKS = [("tied", 2), ("tied", 3), ("untransposed", 3), ("earlier", 2)]


def shared_runs(data, d) -> dict:
    """Each network of SHARED_NETDEFS trained by one process, and on the ranks of
    SHARED_RANKS: {(case, ranks): ...}, each in the folder case/ranks."""
    for case, netdef in SHARED_NETDEFS.items():
        (data / f"{case}.json").write_text(json.dumps(netdef))
    runs = {}
    for case, ranks in [(case, 1) for case in SHARED_NETDEFS] + SHARED_RANKS:
        (d / case / str(ranks)).mkdir(parents=True)
        runs[case, ranks] = (ranks, train_argv(data, d / case / str(ranks) / "gl.nc",
                                               "--checkpoint-every", "2", config=f"{case}.json"))
    return runs


@pytest.fixture(scope="module")
def shared_single(batch_runs):
    """Each network of SHARED_NETDEFS trained by one process (shared_runs): {case: folder}."""
    d, done = batch_runs["test_ranks_train_shared_weights_as_one_process_does"]
    succeeded(*(done[case, 1] for case in SHARED_NETDEFS))
    return {case: d / case / "1" for case in SHARED_NETDEFS}


@BATCHED(shared_runs, "test_ranks_resume_shared_weights_on_other_ranks")
@pytest.mark.parametrize("case, ranks", SHARED_RANKS)
def test_ranks_train_shared_weights_as_one_process_does(shared_single, runs, case, ranks):
    """Both connections' gradients add up in the owner's block on each rank (no collective
    of their own), and rank 0 writes the owners' matrices alone, as one process does."""
    from destiny.kernels import get_backend
    from destiny.network import Network
    from tests.test_shard import FakeComm

    netdef = read_network(shared_single[case] / "gl.nc").netdef
    net = Network(netdef, get_backend("cpu"), comm=FakeComm(0, ranks))
    assert [(c.owner.layout, c.layout) for c in net.connections if c.shared] == \
        SHARED_LAYOUTS[case]
    d, done = runs
    tmp_path = d / case / str(ranks)
    succeeded(done[case, ranks])
    for name in ("gl.nc", "gl.nc2.nc"):  # (the checkpoint: the owners' Adam state)
        assert_same_network(shared_single[case] / name, tmp_path / name)
        assert layout(tmp_path / name) == layout(shared_single[case] / name)


def tied_on_3_runs(data, d) -> dict:
    """The tied autoencoder checkpointed each epoch on 3 ranks."""
    return {3: (3, train_argv(data, d / "gl.nc", "--checkpoint-every", "1",
                              config="tied.json"))}


@BATCHED(tied_on_3_runs)
def test_ranks_resume_shared_weights_on_other_ranks(data, shared_single, runs):
    # The tied autoencoder checkpointed on 3 ranks, continued on 2: one process's run.
    tmp_path, done = runs
    succeeded(done[3])
    for name in ("gl.nc", "gl.nc3.nc", "gl.nc2.nc"):
        os.remove(tmp_path / name)
    done = train(data, tmp_path / "gl.nc", "--checkpoint-every", "1", "--resume", ranks=2,
                 config="tied.json")
    assert done.returncode == 0, done.stderr.decode()
    for name in ("gl.nc", "gl.nc2.nc"):
        assert_same_network(shared_single["tied"] / name, tmp_path / name)


def delta_norm_runs(data, d) -> dict:
    """NETDEF with DeltaNorm limits, trained by 1, 2 and 3 ranks into d/RANKS.nc."""
    netdef = json.loads(json.dumps(NETDEF))
    netdef["Layers"][1]["DeltaNorm"] = 0.3
    netdef["Layers"][4]["DeltaNorm"] = 3.0
    (data / "delta_norm.json").write_text(json.dumps(netdef))
    return {n: (n, train_argv(data, d / f"{n}.nc", config="delta_norm.json")) for n in (1, 2, 3)}


@BATCHED(delta_norm_runs)
@pytest.mark.parametrize("ranks", [2, 3])
def test_ranks_train_a_network_with_delta_norm_as_one_process_does(runs, ranks):
    """DeltaNorm rescales each row of a layer's delta to a norm over all its units: each rank
    sums its units' squares, and the ranks add the sums up (a hidden layer split 12/12/13
    units, the output 32/32/33; limits that some rows exceed and others do not)."""
    tmp_path, done = runs
    succeeded(done[1], done[ranks])
    assert_same_network(tmp_path / "1.nc", tmp_path / f"{ranks}.nc")


# WeightNorm's limits for H1, H3 and the output layer, per optimizer: each matrix into them
# ends with some columns rescaled and others below the limit.
WEIGHT_NORMS = {"adam": {1: 0.76, 3: 0.7, 4: 0.5}, "rmsprop": {1: 0.65, 3: 0.63, 4: 0.33}}


WEIGHT_NORM_RANKS = [(2, "adam"), (3, "rmsprop")]


def weight_norm_runs(data, d) -> dict:
    """NETDEF with WEIGHT_NORMS' limits, trained with each optimizer by one process and by the
    ranks of WEIGHT_NORM_RANKS into d/OPTIMIZER/RANKS.nc."""
    runs = {}
    for ranks, optimizer in WEIGHT_NORM_RANKS:
        netdef = json.loads(json.dumps(NETDEF))
        for i, limit in WEIGHT_NORMS[optimizer].items():
            netdef["Layers"][i]["WeightNorm"] = limit
        (data / f"weight_norm_{optimizer}.json").write_text(json.dumps(netdef))
        (d / optimizer).mkdir()
        for n in (1, ranks):
            runs[optimizer, n] = (n, train_argv(data, d / optimizer / f"{n}.nc", "--optimizer",
                                                optimizer, config=f"weight_norm_{optimizer}.json"))
    return runs


@BATCHED(weight_norm_runs)
@pytest.mark.parametrize("ranks, optimizer", WEIGHT_NORM_RANKS)
def test_ranks_train_a_network_with_weight_norm_as_one_process_does(runs, ranks, optimizer):
    """WeightNorm rescales each column of a matrix into the layer (a unit's incoming weights)
    to a norm over all its rows: a matrix split by rows (Input -> H1, H1 -> H3, Input -> H3)
    has each rank sum its rows' squares and the ranks add the sums up; one split by columns
    (H3 -> Output, H1 -> Output) holds whole columns. RMSProp updates only the batch's rows
    of the input layers' matrices (Network.update), then WeightNorm takes the whole columns."""
    d, done = runs
    tmp_path = d / optimizer
    succeeded(done[optimizer, 1], done[optimizer, ranks])
    assert_same_network(tmp_path / "1.nc", tmp_path / f"{ranks}.nc")
    one, names = read_network(tmp_path / "1.nc"), [layer["Name"] for layer in NETDEF["Layers"]]
    limited = {names[i]: limit for i, limit in WEIGHT_NORMS[optimizer].items()}
    layouts = []
    for k, (source, dest) in enumerate(connections(one.netdef)):
        if dest in limited:
            W = one.weights[k]
            layouts.append(shard.layout(*W.shape, ranks))
            norms = np.sqrt((W.astype(np.float64) ** 2).sum(axis=0))
            at_limit = np.isclose(norms, limited[dest], rtol=1e-5)
            assert at_limit.any() and not at_limit.all(), (source, dest)
            assert norms.max() <= limited[dest] * (1 + 1e-5)
    assert sorted(layouts) == [shard.COLS] * 2 + [shard.ROWS] * 3


# A SoftMax output over the catalogue, and a SoftMax hidden layer with dropout, each split
# across the ranks (23 and 97 units over 2 and 3): its rows are normalized over all the ranks'
# units, its CrossEntropy targets are 1/n with n counted over the whole row, and its Jacobian
# sums over the whole row (DSSTNE normalized each GPU's slice alone).
SOFTMAX_NETDEF = {**NETDEF, "Name": "softmax", "Layers": [
    *NETDEF["Layers"][:2], dict(NETDEF["Layers"][2], Activation="SoftMax"),
    dict(NETDEF["Layers"][4], Source=["H2", "H1"], Activation="SoftMax")]}
SOFTMAX_CASES = {  # the definition's changes, and the targets' file
    "crossentropy": ({}, "gl_output.nc"),
    "smce": ({"ErrorFunction": "ScaledMarginalCrossEntropy", "ScaledMarginalCrossEntropy": {
        "oneTarget": 0.02, "zeroTarget": 0.005, "oneScale": 1.5, "zeroScale": 0.7},
        # (and a sparseness penalty on the hidden SoftMax: its units' means over the batch)
        "SparsenessPenalty": {"p": 0.1, "beta": 0.5}, "Layers": [
            *SOFTMAX_NETDEF["Layers"][:2], dict(SOFTMAX_NETDEF["Layers"][2], Sparse=True),
            SOFTMAX_NETDEF["Layers"][3]]}, "gl_output.nc"),
    "crossentropy-analog": ({}, "analog_output.nc"),
    "l1-boost-analog": ({"ErrorFunction": "L1", "DeltaBoost": {"one": 2.0, "zero": 0.5}},
                        "analog_output.nc"),
    "l2": ({"ErrorFunction": "L2"}, "gl_output.nc"),
    "hinge": ({"ErrorFunction": "Hinge"}, "gl_output.nc"),
    "l2hinge-analog": ({"ErrorFunction": "L2Hinge"}, "analog_output.nc"),
}


@pytest.fixture(scope="module")
def softmax_data(data):
    from destiny.generate import generate_netcdf

    generate_netcdf(input_path=data / "ratings.txt", output=data / "analog_output.nc",
                    dataset_name="gl_output", feature_index=data / "features_output",
                    sample_index=data / "samples", analog=True)
    for case, (changes, _) in SOFTMAX_CASES.items():
        (data / f"{case}.json").write_text(json.dumps(dict(SOFTMAX_NETDEF, **changes)))
    return data


SOFTMAX_RANKS = [("crossentropy", 2), ("crossentropy", 3), ("smce", 3),
                 ("crossentropy-analog", 2), ("l1-boost-analog", 3), ("l2", 2), ("hinge", 3),
                 ("l2hinge-analog", 2)]


def softmax_runs(softmax_data, d) -> dict:
    """Each case of SOFTMAX_CASES trained by one process and by the ranks of SOFTMAX_RANKS,
    into d/CASE/RANKS.nc with its metrics in d/CASE/RANKS.jsonl."""
    runs = {}
    for case, ranks in SOFTMAX_RANKS:
        (d / case).mkdir(exist_ok=True)
        for n in (1, ranks):
            runs[case, n] = (n, train_argv(softmax_data, d / case / f"{n}.nc", "--metrics",
                                           d / case / f"{n}.jsonl", config=f"{case}.json",
                                           targets=SOFTMAX_CASES[case][1]))
    return runs


@BATCHED(softmax_runs)
@pytest.mark.parametrize("case,ranks", SOFTMAX_RANKS)
def test_ranks_train_a_softmax_network_as_one_process_does(runs, case, ranks):
    """Split SoftMax layers, hidden and output, train the network one process trains."""
    d, done = runs
    tmp_path, losses = d / case, {}
    for n in (1, ranks):
        succeeded(done[case, n])
        losses[n] = [json.loads(line)["loss"] for line in
                     (tmp_path / f"{n}.jsonl").read_text().splitlines()]
    assert_same_network(tmp_path / "1.nc", tmp_path / f"{ranks}.nc")
    assert losses[ranks] == pytest.approx(losses[1], rel=1e-5)


# A test-only launcher: the memory free on the machine reads FREE_BYTES (a real shortage would
# take the machine's memory).
SMALL_MEMORY = textwrap.dedent("""
    import os, sys
    import destiny.memory
    destiny.memory.available_memory = lambda: (int(os.environ["FREE_BYTES"]), "a test's figure")
    from destiny.cli.train import main
    sys.argv[0] = "train"
    main()
""")


def test_ranks_larger_together_than_the_memory_free_are_refused_once(data, tmp_path):
    """The ranks on one machine add up their shares of the memory before any allocates its
    weights: each one's fits in the memory free but the two do not, and the job stops with
    one message, exit status 1 and no output (it was the OOM killer: exit status 9, no word).
    NETDEF at -b 32 with Adam certainly writes 79,360 float32 (317,440 bytes: weights 17,062,
    the gradients of the matrices fed by dense layers 9,382, Adam's two state arrays 34,124,
    biases with their gradients and states 1,448, a batch's activations and deltas
    32 x (211 x 2 + 83), 155,376 and 157,328 bytes of it on ranks 0 and 1; and, as a second
    epoch runs, the largest temporary of a batch, counted once for the two ranks, which make
    theirs at moments of their own (each adding it made 322,176 bytes): 32 x 37, H1's
    activations, scaled for the gradient of a rank's block of the matrix to Output. No rows of
    the input's gradient: the input is denoised.)"""
    script = tmp_path / "small_memory.py"
    script.write_text(SMALL_MEMORY)
    out = tmp_path / "out"
    out.mkdir()
    done = run([MPIEXEC, "-n", 2, sys.executable, script, "-c", data / "net.json", "-i",
                data / "gl_input.nc", "-o", data / "gl_output.nc", "-n", out / "gl.nc", "-b",
                "32", "-q"], env=dict(ENV, FREE_BYTES="200000"))
    assert done.returncode == 1, done.stderr.decode()
    assert errors(done) == [
        "Error: out of memory: training needs at least 310.0 KiB of this machine's memory for the "
        "2 processes of this job on it (each with its block of the layers), for the network's "
        "weights, their gradients and optimizer state, and a batch's activations and deltas, and "
        "195.3 KiB is free (a test's figure); 160.6 KiB of it is for layer 'Output', of 128 units "
        "(its weights, to and from narrower layers, and its activations and deltas). Nothing was "
        "trained, and no output was replaced. Use fewer units, run the job over more machines "
        "(more processes on this one share its memory: they do not help), or run on a machine "
        "with more memory."]
    assert os.listdir(out) == []


def test_existing_network_is_refused_once(data, tmp_path):
    (tmp_path / "gl.nc").write_text("keep me")
    done = train(data, tmp_path / "gl.nc", ranks=3)
    assert done.returncode == 1 and len(errors(done)) == 1
    assert "already exists" in errors(done)[0]
    assert (tmp_path / "gl.nc").read_text() == "keep me"


def train_failing(data, tmp_path, mode, *args, rank=0, **extra):
    """``mpiexec -n 2`` train through the FAILING launcher into ``tmp_path/out``: (the run,
    the output directory)."""
    script = tmp_path / "failing.py"
    script.write_text(FAILING)
    out = tmp_path / "out"
    out.mkdir()
    env = dict(ENV, FAIL_RANK=str(rank), FAIL_MODE=mode, **extra)
    done = run([MPIEXEC, "-n", 2, sys.executable, script, "-c", data / "net.json", "-i",
                data / "gl_input.nc", "-o", data / "gl_output.nc", "-n", out / "gl.nc", "-q",
                *args], env=env)
    return done, out


@pytest.mark.parametrize("rank,mode,message", [
    (1, "error", "Error: rank 1 of 2: simulated failure"),
    (0, "error", "Error: simulated failure"),
    (1, "bug", "Traceback (most recent call last):"),
])
def test_failure_while_training_stops_all(data, tmp_path, rank, mode, message):
    done, out = train_failing(data, tmp_path, mode, rank=rank)
    assert done.returncode != 0
    assert message in done.stderr.decode()
    # No network file, no checkpoint, no temporary. The ranks stopped by MPI_Abort may leave
    # the network's empty lock file (the kernel released the lock with the process).
    assert [p for p in os.listdir(out) if p != ".gl.nc.lock"] == []


def test_rank_that_dies_stops_the_job(data, tmp_path):
    done, out = train_failing(data, tmp_path, "die", rank=1)
    assert done.returncode != 0
    assert not (out / "gl.nc").exists()


def test_sigterm_to_mpiexec_stops_every_rank_with_its_status(data, tmp_path):
    """`timeout` (or a scheduler) sends SIGTERM to mpiexec, which passes it to the ranks: the
    job stops with one message naming the checkpoint to resume from and exit status 143, as
    one process does, and leaves only its checkpoints (no lock, no temporary)."""
    argv = [MPIEXEC, "-n", "2", TRAIN, "-c", data / "net.json", "-i", data / "gl_input.nc",
            "-o", data / "gl_output.nc", "-n", tmp_path / "gl.nc", "-b", "32", "-e", "100000",
            "-q", "--checkpoint-every", "1"]
    proc = subprocess.Popen([str(a) for a in argv], env=ENV, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not (tmp_path / "gl.nc1.nc").exists():
            assert proc.poll() is None and time.time() < deadline, proc.stderr.read()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1 and lines[0].startswith("Error: interrupted; ") and \
        "--resume" in lines[0], stderr
    assert "Abort" not in stderr, stderr
    assert all(re.fullmatch(r"gl\.nc\d+\.nc", name) for name in os.listdir(tmp_path))


@pytest.mark.parametrize("rank,late", [(0, None), (1, None), (0, 0.0005), (1, 0.05)])
def test_stop_signal_on_one_rank_stops_all_after_one_step(data, single, tmp_path, rank, late):
    """mpiexec passes a SIGTERM to each rank at its own moment: here rank ``rank`` gets it in
    epoch 2, and the other rank never does, or ``late`` s later, once the ranks agreed to stop
    (it used to interrupt that rank's clean-up, or kill it as it shut down). Every rank stops
    after the same step, with one message naming the checkpoint of epoch 1, exit status 143,
    and nothing else left; --resume then trains on from it to the network one process
    trains."""
    done, out = train_failing(data, tmp_path, "sigterm" if late is None else "sigterm-late",
                              "-b", "32", "-e", "3", "--checkpoint-every", "1", rank=rank,
                              FAIL_AT="8", LATE_S=str(late))  # (5 updates an epoch)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr.decode()
    assert errors(done) == [
        f"Error: interrupted; {out / 'gl.nc'} was not written. To go on, run the same command "
        f"with --resume to continue from {out / 'gl.nc1.nc'} (epoch 1), the newest checkpoint."]
    assert "Abort" not in done.stderr.decode() and "BAD TERMINATION" not in done.stderr.decode()
    assert os.listdir(out) == ["gl.nc1.nc"]
    done = train(data, out / "gl.nc", "--checkpoint-every", "1", "--resume", ranks=2)
    assert done.returncode == 0, done.stderr.decode()
    assert_same_network(single / "gl.nc", out / "gl.nc")


@pytest.mark.parametrize("rank", [0, 1])
def test_stop_signal_while_setting_up_stops_all(data, tmp_path, rank):
    """A SIGTERM that one rank gets as the ranks read the data and build the network: every
    rank stops, with one message and exit status 143, and leaves nothing (not even a lock)."""
    done, out = train_failing(data, tmp_path, "sigterm-setup", rank=rank)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr.decode()
    assert errors(done) == [f"Error: interrupted before the first checkpoint; {out / 'gl.nc'} "
                            "was not written. Run the command again to start afresh "
                            "(--checkpoint-every sets how often checkpoints are written)."]
    assert "Abort" not in done.stderr.decode() and "BAD TERMINATION" not in done.stderr.decode()
    assert os.listdir(out) == []


@pytest.mark.parametrize("rank", [0, 1])
def test_stop_signal_while_the_network_is_written_stops_all_once_it_is(data, tmp_path, rank):
    """A SIGTERM that one rank gets as the ranks write the network file: the file is finished,
    and every rank stops, with one message saying it is complete, and exit status 143."""
    done, out = train_failing(data, tmp_path, "sigterm-final", "-b", "32", "-e", "1",
                              "--checkpoint-every", "0", rank=rank)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr.decode()
    assert errors(done) == [f"Error: interrupted as {out / 'gl.nc'} was put in place, once it "
                            "was: it is complete."]
    assert "Abort" not in done.stderr.decode() and "BAD TERMINATION" not in done.stderr.decode()
    assert os.listdir(out) == ["gl.nc"]
    assert read_network(out / "gl.nc").arrays  # whole: its counts are the last thing written


@pytest.mark.parametrize("rank", [0, 1])
def test_stop_signal_while_the_last_checkpoint_is_written_stops_all_once_it_is(data, tmp_path,
                                                                               rank):
    """A SIGTERM that one rank gets as the ranks write the last epoch's checkpoint: every rank
    stops once it is written, before the network file, with one message naming it as the
    trained network, and exit status 143 (the block of epochs ended with the signal held)."""
    done, out = train_failing(data, tmp_path, "sigterm-checkpoint", "-b", "32", "-e", "1",
                              "--checkpoint-every", "1", rank=rank)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr.decode()
    assert errors(done) == [
        f"Error: interrupted; {out / 'gl.nc'} was not written. To go on, use "
        f"{out / 'gl.nc1.nc'}, the checkpoint of the last epoch (1): it is the trained network "
        f"(with the optimizer's state, which predict ignores), so copy it to {out / 'gl.nc'}."]
    assert "Abort" not in done.stderr.decode() and "BAD TERMINATION" not in done.stderr.decode()
    assert os.listdir(out) == ["gl.nc1.nc"]


@pytest.mark.parametrize("flag", [None, "--resume", "--resume-or-restart"])
def test_full_disk_names_the_checkpoint_to_resume_from_once(data, tmp_path, flag):
    """A full disk as rank 0 writes epoch 2's checkpoint: one message, which names the
    checkpoint of epoch 1 to go on from, as one process's does (it was a traceback); with a
    flag that resumes, as the same command run again, which goes on from it, in one
    instruction as one process says it: free space, then run the same command again (it said
    to run the command again "or write the outputs elsewhere", where the checkpoint is not
    found, then, apart, to run the same command again; before that, "instead" of running the
    command again, and to run it with --resume)."""
    done, out = train_failing(data, tmp_path, "full-disk", "-b", "32", "-e", "3",
                              "--checkpoint-every", "1", *([flag] if flag else []))
    assert done.returncode == 1, done.stderr.decode()
    (line,) = errors(done)
    assert f"No space left on device; {out / 'gl.nc'} was not written. " in line, line
    if flag is None:
        assert line.endswith(
            f"To go on from this run's newest checkpoint instead, run the same command with "
            f"--resume to continue from {out / 'gl.nc1.nc'} (epoch 1), the newest checkpoint."
        ), line
    else:
        assert line.endswith(
            f"was not written. Free space on that file system (or raise the quota), then run "
            f"the same command again to continue from {out / 'gl.nc1.nc'} (epoch 1), the newest "
            f"checkpoint, which its {flag} takes."), line
        assert "elsewhere" not in line and "To go on" not in line, line
    assert "Abort" not in done.stderr.decode()
    assert os.listdir(out) == ["gl.nc1.nc"]


def test_divergence_after_a_checkpoint_is_its_message_alone(data, tmp_path):
    """The ranks find the training diverged in epoch 2, once epoch 1's checkpoint is written:
    its message alone, as one process says it; only a failure of the system's (a full disk,
    above) adds the checkpoint to go on from (from which the run would diverge again)."""
    done, out = train_failing(data, tmp_path, "diverged", "-b", "32", "-e", "3",
                              "--checkpoint-every", "1", FAIL_AT="8")
    assert done.returncode == 1, done.stderr.decode()
    assert errors(done) == ["Error: simulated divergence"]
    assert "Abort" not in done.stderr.decode()
    assert "gl.nc1.nc" in os.listdir(out)


def test_divergence_is_reported_once(data, tmp_path):
    """Every rank finds the divergence alike: one message, exit status 1, no rank aborted."""
    done = train(data, tmp_path / "gl.nc", "--optimizer", "sgd", "-alpha", "1e30", ranks=2)
    assert done.returncode == 1
    assert len(errors(done)) == 1 and "training diverged" in errors(done)[0], done.stderr
    assert "Abort" not in done.stderr.decode()
    assert os.listdir(tmp_path) == []


def lazy_runs(data, d) -> dict:
    return {name: (ranks, train_argv(data, d / f"{name}.nc", "--optimizer", "rmsprop",
                                     "--checkpoint-every", "2"))
            for name, ranks in (("one", 1), ("two", 2))}


@BATCHED(lazy_runs)
def test_ranks_update_the_input_rows_lazily_alike(runs):
    """RMSProp updates only the batch's rows of the input layer (Network.update), each rank
    its part; checkpoints hold the settled state. Split or not, the same network."""
    tmp_path, done = runs
    succeeded(done["one"], done["two"])
    for suffix in (".nc", ".nc2.nc"):
        assert_same_network(tmp_path / f"one{suffix}", tmp_path / f"two{suffix}")


def denoise_runs(data, tmp_path) -> dict:
    """The fixture's ratings, analog, trained one example a batch by one process and 3 ranks."""
    from destiny import synthetic
    from destiny.generate import generate_netcdf

    # (the fixture's ratings, with the ratings as values: its timestamps saturate every unit)
    synthetic.write_ratings_dsstne(tmp_path / "rated.txt", synthetic.generate_ratings(
        users=160, items=97, mean_per_user=8, seed=4), value="rating")
    generate_netcdf(input_path=tmp_path / "rated.txt", output=tmp_path / "analog_input.nc",
                    dataset_name="gl_input", feature_index=data / "features_input",
                    sample_index=data / "samples", analog=True)
    return {name: (n, train_argv(data, tmp_path / f"{name}.nc", "-b", "1", "-e", "1",
                                 "--checkpoint-every", "0", inputs=tmp_path / "analog_input.nc"))
            for name, n in (("one", 1), ("many", 3))}


@BATCHED(denoise_runs)
def test_ranks_denoise_analog_input_as_one_process(runs):
    """Analog input, denoised (spec 3.9), one example a batch over 3 ranks: a rank often holds
    none of a batch's entries in its columns, and stores no values then, as Boolean data does;
    its partial product's bias must stay the analog path's, unscaled (5.4), not q times it as
    the Boolean path's (it was, and the ranks trained another network)."""
    tmp_path, done = runs
    succeeded(done["one"], done["many"])
    assert_same_network(tmp_path / "one.nc", tmp_path / "many.nc")


HIDDEN_RANKS = [(37, 2), (100, 3)]  # (the input's matrix split by rows, then by columns)


def skip_runs(data, d) -> dict:
    """For each of HIDDEN_RANKS, in d/HIDDEN: an output adding the input, trained by one
    process into one.nc and by the ranks into many.nc."""
    runs = {}
    for hidden, ranks in HIDDEN_RANKS:
        (d / str(hidden)).mkdir()
        netdef = {**NETDEF, "Layers": [
            NETDEF["Layers"][0],
            {"Name": "H", "Kind": "Hidden", "N": hidden, "Activation": "Tanh", "pDropout": 0.1},
            {**NETDEF["Layers"][4], "Source": "H", "Skip": "Input"}]}
        (d / str(hidden) / "skip.json").write_text(json.dumps(netdef))
        for name, n in (("one", 1), ("many", ranks)):
            runs[hidden, name] = (n, train_argv(data, d / str(hidden) / f"{name}.nc",
                                                "--checkpoint-every", "0",
                                                config=d / str(hidden) / "skip.json"))
    return runs


@BATCHED(skip_runs)
@pytest.mark.parametrize("hidden, ranks, split", [(37, 2, shard.ROWS), (100, 3, shard.COLS)],
                         ids=["rows", "columns"])
def test_ranks_skip_from_the_input_layer_as_one_process(data, runs, hidden, ranks, split):
    """The output adds the denoised input (spec 3.16), each rank its own units' columns of it.
    A rank holds the input's columns of its own units where the input's matrix is split by
    rows (37 hidden units), or every column where it is split by the hidden units (100, more
    than two thirds of the input's: spec 7), and then adds only its share."""
    (width,) = dataset_widths(data / "gl_input.nc").values()
    assert shard.layout(width, hidden, ranks) == split
    d, done = runs
    tmp_path = d / str(hidden)
    succeeded(done[hidden, "one"], done[hidden, "many"])
    assert_same_network(tmp_path / "one.nc", tmp_path / "many.nc")
    assert read_network(tmp_path / "one.nc").netdef.layers[2].skips == ("Input",)


def echo_runs(data, d) -> dict:
    """For each of HIDDEN_RANKS, in d/HIDDEN: an output adding a second input layer that feeds
    nothing else, trained by one process into one.nc and by the ranks into many.nc."""
    runs = {}
    for hidden, ranks in HIDDEN_RANKS:
        (d / str(hidden)).mkdir()
        netdef = {**NETDEF, "Layers": [
            NETDEF["Layers"][0],
            {"Name": "Echo", "Kind": "Input", "N": "auto", "DataSet": "gl_input",
             "Sparse": True},
            {"Name": "H", "Kind": "Hidden", "N": hidden, "Source": "Input",
             "Activation": "Tanh", "pDropout": 0.1},
            {**NETDEF["Layers"][4], "Source": "H", "Skip": "Echo"}]}
        (d / str(hidden) / "echo.json").write_text(json.dumps(netdef))
        for name, n in (("one", 1), ("many", ranks)):
            runs[hidden, name] = (n, train_argv(data, d / str(hidden) / f"{name}.nc", "-e", "2",
                                                "--checkpoint-every", "0",
                                                config=d / str(hidden) / "echo.json"))
    return runs


@BATCHED(echo_runs)
@pytest.mark.parametrize("hidden, ranks, split", [(37, 2, shard.ROWS), (100, 3, shard.COLS)],
                         ids=["rows", "columns"])
def test_ranks_add_an_input_layer_that_feeds_only_through_a_skip(data, runs, hidden, ranks,
                                                                  split):
    """A second input layer, of the same dataset, that only the output's Skip reads: no matrix
    out of it, so every rank reads its own units' columns of it (spec 7), while the first
    input's matrix is split by rows (each rank its own columns of the shared dataset too) or
    by the hidden units (every column of it). Split or not, the same network."""
    (width,) = dataset_widths(data / "gl_input.nc").values()
    assert shard.layout(width, hidden, ranks) == split
    assert dataset_widths(data / "gl_output.nc") == {"gl_output": width}  # (a skip: one size)
    d, done = runs
    tmp_path = d / str(hidden)
    succeeded(done[hidden, "one"], done[hidden, "many"])
    assert_same_network(tmp_path / "one.nc", tmp_path / "many.nc")
    assert read_network(tmp_path / "one.nc").netdef.layers[3].skips == ("Echo",)


@pytest.fixture(scope="module")
def split_checkpoint(data, tmp_path_factory):
    """A checkpoint of epoch 1 written by 2 ranks (Adam's state split like W)."""
    out = tmp_path_factory.mktemp("split_checkpoint")
    done = train(data, out / "gl.nc", "--checkpoint-every", "1", "-e", "1", ranks=2)
    assert done.returncode == 0, done.stderr.decode()
    return out / "gl.nc1.nc"


# Weight 5 (H1 -> Output) is split by columns, Adam's state of weight 0 (Input -> H1) by rows:
# their last value lies in rank 1's block alone.
@pytest.mark.parametrize("variable", ["weight5_weights", "destiny_state0_0"])
def test_a_nan_in_one_ranks_block_is_refused_as_one_process_refuses_it(
        data, split_checkpoint, tmp_path, variable):
    """Each rank of a split network reads and checks only its block; what rank 1 finds in its
    own is told of the whole variable, in the words one process uses for the file."""
    checkpoint = tmp_path / "gl.nc1.nc"
    checkpoint.write_bytes(split_checkpoint.read_bytes())
    with netCDF4.Dataset(checkpoint, "a") as nc:
        nc.variables[variable][-1] = np.nan
    one = train(data, tmp_path / "gl.nc", "--resume")
    split = train(data, tmp_path / "gl.nc", "--resume", ranks=2)
    assert one.returncode == split.returncode == 1
    (message,) = errors(one)
    assert f"the variable {variable!r} holds 1 value that is not finite" in message
    assert errors(split) == [message.replace("Error: ", "Error: rank 1 of 2: ", 1)]
    assert sorted(os.listdir(tmp_path)) == ["gl.nc1.nc"]


BOTH_WAYS_RANKS = [(2, "rmsprop"), (3, "adam")]


def both_ways_runs(data, d) -> dict:
    """The input feeding a narrow and a wide layer, with each optimizer of BOTH_WAYS_RANKS in
    d/OPTIMIZER: trained by one process into one.nc and by the ranks into many.nc."""
    netdef = {**NETDEF, "Layers": [
        NETDEF["Layers"][0],
        {"Name": "Narrow", "Kind": "Hidden", "N": 37, "Source": "Input",
         "Activation": "Sigmoid", "pDropout": 0.1},
        {"Name": "Wide", "Kind": "Hidden", "N": 100, "Source": "Input", "Activation": "Tanh"},
        {**NETDEF["Layers"][4], "Source": ["Wide", "Narrow"], "Skip": "Input"}]}
    (d / "both.json").write_text(json.dumps(netdef))
    runs = {}
    for ranks, optimizer in BOTH_WAYS_RANKS:
        (d / optimizer).mkdir()
        for name, n in (("one", 1), ("many", ranks)):
            runs[optimizer, name] = (n, train_argv(
                data, d / optimizer / f"{name}.nc", "-e", "2", "--optimizer", optimizer,
                "--checkpoint-every", "0", config=d / "both.json"))
    return runs


@BATCHED(both_ways_runs)
@pytest.mark.parametrize("ranks, optimizer", BOTH_WAYS_RANKS)
def test_ranks_train_an_input_split_both_ways_as_one_process(data, runs, ranks, optimizer):
    """The input feeds a narrow layer (37 units: its matrix split by the input's units) and a
    wide one (100, more than two thirds of the input's: split by their own), and the output
    adds it (Skip): every rank holds all the input's columns and takes its own share of each
    batch, denoised, for the narrow layer's product and gradient (RMSProp: the rows it
    updates lazily). Split or not, the same network."""
    (width,) = dataset_widths(data / "gl_input.nc").values()
    assert [shard.layout(width, n, ranks) for n in (37, 100)] == [shard.ROWS, shard.COLS]
    d, done = runs
    tmp_path = d / optimizer
    succeeded(done[optimizer, "one"], done[optimizer, "many"])
    assert_same_network(tmp_path / "one.nc", tmp_path / "many.nc")
