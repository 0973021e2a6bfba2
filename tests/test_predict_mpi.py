"""``mpiexec -n P predict``: the same bytes as one process, and one clear error when a rank fails.

Every run is a real job under MPICH's mpiexec (from the ``mpich`` wheel, beside this Python),
with one numba and BLAS thread per rank so that the ranks do not oversubscribe the cores.
"""

from __future__ import annotations

import itertools
import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests import batch
from tests.batch import succeeded
from tests.conftest import ROOT
from tests.test_parallel import MPIEXEC, needs_mpiexec, rank_env

BIN = pathlib.Path(sys.executable).parent
PREDICT = BIN / "predict"

pytestmark = needs_mpiexec

ENV = rank_env()

# A test-only launcher: rank FAIL_RANK fails while formatting its second batch (a DestinyError,
# a bug, a sudden death, or a SIGTERM that it alone gets), or gets a SIGTERM as it scores its
# second batch (sigterm-score: with --split-layers, where rank 0 alone formats), through the
# real command line; the library has no hook for it.
FAILING = textwrap.dedent("""
    import os, signal, sys
    from destiny import predict
    from destiny.errors import DestinyError
    from destiny.parallel import get_comm

    rank, mode, real, calls = int(os.environ["FAIL_RANK"]), os.environ["FAIL_MODE"], \\
        predict.write_records, []

    def write_records(*args, **kwargs):
        calls.append(1)
        if get_comm().rank == rank and len(calls) == 2:
            if mode == "error":
                raise DestinyError("simulated failure")
            if mode == "bug":
                raise RuntimeError("simulated bug")
            if mode == "sigterm":
                os.kill(os.getpid(), signal.SIGTERM)
            elif mode == "die":
                os._exit(3)
        return real(*args, **kwargs)

    real_done, scored = predict.Predictor._done, []

    def _done(self, *args):
        scored.append(1)
        if mode == "sigterm-score" and get_comm().rank == rank and len(scored) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return real_done(self, *args)

    predict.write_records, predict.Predictor._done = write_records, _done
    if mode == "file-size" and get_comm().rank == rank:  # (once MPI's own files are made)
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
    from destiny.cli.predict import main
    sys.argv[0] = "predict"
    main()
""")


def argv(model, *args):
    return ["-n", str(model / "gl.nc"), "-i", str(model / "features_input"),
            "-o", str(model / "features_output"), "-r", str(model / "ratings.txt"), *args]


def run(command, env=ENV):
    return subprocess.run([str(c) for c in command], env=env, capture_output=True, timeout=120)


def mpiexec(n, *args):
    return run([MPIEXEC, "-n", n, PREDICT, *args])


def errors(done) -> list[str]:
    return [line for line in done.stderr.decode().splitlines() if line.startswith("Error:")]


CASES = {
    "plain": ["-k", "10", "-b", "32"],
    "filter": ["-k", "20", "-b", "7", "-f", "{ratings}"],  # 43 batches: a partial last round
    "multiply": ["-k", "5", "-b", "50", "-f", "{ratings}", "--filter-mode", "multiply"],
    "many": ["-k", "80", "-b", "64", "-f", "{ratings}"],  # k above a rank's 30 items
}


# The tests that compare what one process and P ranks predict read only what the runs left:
# the runs of the tests selected go together (tests/batch.py), every one-process run in one
# process and every run on P ranks in one mpiexec -n P job, the first time a test asks. A
# test's make(fixture, d) gets its fixtures by name (fixture("model")).
BATCHED = batch.Batched("predict")


@pytest.fixture(scope="module")
def batch_runs(tmp_path_factory, request) -> dict:
    return BATCHED.run(request, tmp_path_factory, request.getfixturevalue, ENV, MPIEXEC)


@pytest.fixture
def runs(batch_runs, request) -> tuple:
    """This test's runs (BATCHED): (its folder, {key: its run})."""
    return batch_runs[request.node.originalname]


def param_folder(d, *param) -> pathlib.Path:
    """The folder of a test's parameters ``param`` in its folder ``d``, made."""
    out = d / "-".join(str(p) for p in param)
    out.mkdir()
    return out


SHARED_OUT = [(2, "plain"), (3, "plain"), (2, "filter"), (3, "filter"), (3, "multiply")]


def shared_out_runs(fixture, d) -> dict:
    """For each of SHARED_OUT, in d/N-CASE: one process's records into one.txt, N ranks' into
    many.txt."""
    model, runs = fixture("model"), {}
    for n, case in SHARED_OUT:
        out = param_folder(d, n, case)
        args = [a.format(ratings=model / "ratings.txt") for a in CASES[case]]
        runs[n, case, "one"] = (1, argv(model, *args, "-s", out / "one.txt"))
        runs[n, case, "many"] = (n, argv(model, *args, "-s", out / "many.txt"))
    return runs


@BATCHED(shared_out_runs)
@pytest.mark.parametrize("n,case", SHARED_OUT)
def test_ranks_write_what_one_process_writes(runs, n, case):
    d, ran = runs
    tmp_path = d / f"{n}-{case}"
    one, many = tmp_path / "one.txt", tmp_path / "many.txt"
    single, done = ran[n, case, "one"], ran[n, case, "many"]
    succeeded(single, done)
    assert many.read_bytes() == one.read_bytes()
    assert done.stderr.decode() == single.stderr.decode().replace("one.txt", "many.txt").replace(
        "backend cpu", f"backend cpu, samples shared out over {n} processes")  # the notes, once
    assert sorted(os.listdir(tmp_path)) == ["many.txt", "one.txt"]  # no temporary left


def records(path) -> list[tuple[str, list[int], np.ndarray]]:
    """(sample, items, scores) of each line of a recommendations file."""
    out = []
    for line in path.read_text().splitlines():
        name, _, rest = line.partition("\t")
        pairs = [p.split(",") for p in rest.split(":") if p]
        out.append((name, [int(i) for i, _ in pairs], np.array([float(s) for _, s in pairs])))
    return out


def assert_same_records(one, many, tol=1.5e-3, rtol=1e-6):
    """The same samples, and the same items with the same scores to float32 rounding (and the
    file's %4.3f): a rank of a split network sums its share of each product in another order,
    so two items whose scores differ by less than that may change places, and one scored
    like the k-th may take its place (items 10 and 11 of a sample did, with NumPy 2.4)."""
    a, b = records(one), records(many)
    assert [n for n, _, _ in a] == [n for n, _, _ in b]
    for (name, items, x), (_, others, y) in zip(a, b, strict=True):
        np.testing.assert_allclose(y, x, rtol=rtol, atol=tol, err_msg=name)  # rank by rank
        mine, theirs = dict(zip(items, x, strict=True)), dict(zip(others, y, strict=True))

        def close(p, q):
            return abs(p - q) <= tol + rtol * max(abs(p), abs(q))

        for item in mine.keys() | theirs.keys():
            if item in mine and item in theirs:
                assert close(mine[item], theirs[item]), (name, item)
            else:  # (in one list only: a tie with the last)
                assert close(mine.get(item, theirs.get(item)), x[-1]), (name, item)


def one_and_split_runs(d, args, n, out, *key) -> dict:
    """predict with ``d``'s network in one process into ``out``/one.txt, and with
    ``--split-layers`` under ``mpiexec -n n`` into many.txt: {(*key, "one"), (*key, "split")}
    for a batch (``one_and_split``)."""
    return {(*key, "one"): (1, argv(d, *args, "-s", out / "one.txt")),
            (*key, "split"): (n, argv(d, *args, "--split-layers", "-s", out / "many.txt"))}


def one_and_split(runs, *key):
    """The runs of ``one_and_split_runs`` with ``key``, each succeeding: (one, many, single
    run, split run)."""
    d, ran = runs
    single, done = ran[(*key, "one")], ran[(*key, "split")]
    succeeded(single, done)
    out = d / "-".join(str(p) for p in key)
    return out / "one.txt", out / "many.txt", single, done


@pytest.fixture(scope="module")
def narrow(model, tmp_path_factory):  # noqa: F811
    """The model's data with a hidden layer narrower than the catalogue (37 units, 90 items),
    so that the input layer is split by rows (each rank its input features) and the output
    layer by columns; model's 128 units split them the other way round."""
    return trained_beside(model, tmp_path_factory.mktemp("narrow"), movielens_netdef(37), epochs=3)


def movielens_netdef(hidden: int | None = None) -> dict:
    """netdefs/movielens.json, with ``hidden`` units in its hidden layer where given."""
    netdef = json.loads((ROOT / "netdefs" / "movielens.json").read_text())
    if hidden is not None:
        netdef["Layers"][1]["N"] = hidden
    return netdef


def trained_beside(model, d, netdef: dict, *, epochs: int):
    """``netdef`` trained in ``d`` on the model's data, with the model's indices and ratings
    beside it."""
    from destiny.fit import fit
    from destiny.train import train_config

    (d / "net.json").write_text(json.dumps(netdef))
    fit(config_path=d / "net.json", input_path=model / "gl_input.nc",
        output_path=model / "gl_output.nc", network_path=d / "gl.nc",
        cfg=train_config(batch=64, epochs=epochs), checkpoint_every=0)
    for name in ("features_input", "features_output", "ratings.txt"):
        os.symlink(model / name, d / name)
    return d


def spread_items(src, dst):
    """The network of ``src`` in ``dst`` with its output units reordered, the most trained
    items (by ``target_counts``) dealt out in turn to the stretches of units that 2 and 3 ranks
    split apart: in the trained order, every sample's best items lay in rank 0's units, and
    the ranks' item numbers merged without their offset (``Predictor._done``) passed. Each
    unit keeps its weights' column, bias and count; the index is unchanged (its digest
    checked), so the items' names move with the units."""
    import shutil

    import netCDF4

    from destiny.parallel import unit_range

    shutil.copy(src / "gl.nc", dst / "gl.nc")
    for name in ("features_input", "features_output", "ratings.txt"):
        os.symlink(src / name, dst / name)
    with netCDF4.Dataset(dst / "gl.nc", "a") as nc:
        counts = nc["destiny_target_counts_Output"]
        n = counts.size
        items = int(np.count_nonzero(counts[:]))  # (the index's items, then padding units)
        assert not counts[items:].any()
        cuts = sorted({min(end, items) for size in (2, 3) for rank in range(size)
                       for end in unit_range(n, rank, size)} | {items})
        stretches = sorted((list(range(a, b)) for a, b in itertools.pairwise(cuts) if b > a),
                           key=len)  # (the shortest first: rank 2 of 3 holds 5 items)
        slots = []
        while any(stretches):
            slots += [s.pop(0) for s in stretches if s]
        order = np.arange(n)  # order[new unit] = its old unit
        order[slots] = np.argsort(-counts[:items], kind="stable")
        (k,) = [k for k in range(int(nc.getncattr("weights")))
                if nc.getncattr(f"weight{k}_outputLayer") == "Output"]
        w, b = nc[f"weight{k}_weights"], nc[f"weight{k}_bias"]
        w[:] = w[:].reshape(-1, n)[:, order].ravel()
        b[:], counts[:] = b[:][order], counts[:][order]


@pytest.fixture(scope="module")
def spread(model, narrow, tmp_path_factory):  # noqa: F811
    """model and narrow (``spread_items``), each sample's 10 best items held by every rank of
    2 and of 3: checked here, as one process ranks them."""
    from destiny.parallel import unit_range
    from destiny.predict import Predictor

    out = {}
    for which, src in (("model", model), ("narrow", narrow)):
        out[which] = d = tmp_path_factory.mktemp(f"spread_{which}")
        spread_items(src, d)
        p = Predictor(d / "gl.nc", d / "features_input", d / "features_output", dataset=None,
                      backend="cpu")
        records = p.read_input(d / "ratings.txt")
        best = np.concatenate([items for _, items, _ in p.recommend(records, 10)])
        for size in (2, 3):
            for rank in range(size):
                lo, hi = unit_range(p.net.layers["Output"].n, rank, size)
                held = np.any((best >= lo) & (best < hi), axis=1)
                assert held.all(), (f"{which}: rank {rank} of {size} holds none of the 10 best "
                                    f"items of {np.count_nonzero(~held)} samples")
    return out


SPLIT_LAYERS = [(2, "plain", "model"), (3, "filter", "model"), (2, "filter", "narrow"),
                (3, "multiply", "narrow"), (3, "many", "narrow")]


def split_layers_runs(fixture, d) -> dict:
    runs = {}
    for n, case, which in SPLIT_LAYERS:
        base = fixture("spread")[which]
        args = [a.format(ratings=base / "ratings.txt") for a in CASES[case]]
        runs |= one_and_split_runs(base, args, n, param_folder(d, n, case, which), n, case,
                                   which)
    return runs


@BATCHED(split_layers_runs)
@pytest.mark.parametrize("n,case,which", SPLIT_LAYERS)
def test_split_layers_write_what_one_process_writes(runs, n, case, which):
    """--split-layers: each rank holds its share of every layer, scores every sample with it,
    and rank 0 merges the ranks' k best (each rank's items numbered from its first unit)."""
    one, many, single, done = one_and_split(runs, n, case, which)
    tmp_path = one.parent
    assert_same_records(one, many)
    assert done.stderr.decode() == single.stderr.decode().replace("one.txt", "many.txt").replace(
        "backend cpu", f"backend cpu, layers split over {n} processes")  # the notes, once
    assert sorted(os.listdir(tmp_path)) == ["many.txt", "one.txt"]


SKIP_FROM_THE_INPUT = [(37, 2), (128, 3)]


def skip_runs(fixture, d) -> dict:
    """For each of SKIP_FROM_THE_INPUT, in d/HIDDEN-N: the model with ``hidden`` units whose
    output adds the input, trained for an epoch; one_and_split_runs with it."""
    model, runs = fixture("model"), {}
    for hidden, n in SKIP_FROM_THE_INPUT:
        out = param_folder(d, hidden, n)
        netdef = movielens_netdef(hidden)
        netdef["Layers"][2]["Skip"] = "Input"
        trained_beside(model, out, netdef, epochs=1)
        args = [a.format(ratings=model / "ratings.txt") for a in CASES["filter"]]
        runs |= one_and_split_runs(out, args, n, out, hidden, n)
    return runs


@BATCHED(skip_runs)
@pytest.mark.parametrize("hidden, n", SKIP_FROM_THE_INPUT)
def test_split_skip_from_the_input_as_one_process(runs, hidden, n):
    """A network whose output adds its input (Skip, spec 3.16): each rank adds its own units'
    share of the sample's features, whether it holds the input's columns of its units (37
    hidden units: the input's matrix split by rows) or all of them (128: by columns)."""
    assert_same_records(*one_and_split(runs, hidden, n)[:2])


@pytest.mark.parametrize("split", [(), ("--split-layers",)])
def test_failure_while_writing_stops_all_once(model, split):  # noqa: F811
    """Rank 0 alone writes: its failure (a full disk) reaches the ranks waiting with the next
    batch, and the job stops with its one message, worded as one process words it (it was a
    traceback)."""
    done = mpiexec(2, *argv(model, *split, "-s", "/dev/full"))
    assert done.returncode == 1, done.stderr.decode()
    (line,) = errors(done)
    assert "/dev/full: No space left on device" in line, line  # (the output named)
    assert "Abort" not in done.stderr.decode()


@pytest.mark.parametrize("split", [(), ("--split-layers",)])
def test_failure_writing_a_file_stops_all_once(model, tmp_path, split):  # noqa: F811
    """Rank 0's file of records fails as it is written (a full disk; here its limit on file
    size, 4 KiB of the 54 KiB of records): every rank stops with its one message, as for a
    stream. Closing the temporary file, as the ranks stopped, flushed its last text and failed
    again, which replaced the error the ranks shared: rank 0 then stopped alone, through
    MPI_Abort."""
    done, out = predict_file_size_limited(model, tmp_path, "-k", "20", *split)
    assert done.returncode == 1, done.stderr.decode()
    (line,) = errors(done)
    assert f"{out / 'recs'}: File too large" in line, line
    assert "Abort" not in done.stderr.decode(), done.stderr.decode()
    assert os.listdir(out) == []


def test_failure_putting_a_file_in_place_stops_all_once(model, tmp_path):  # noqa: F811
    """The records of a small input (6.6 KiB here, over rank 0's limit of 4 KiB) are written
    only as the file is closed, after every rank is done: the failure there is shared, one
    message, rather than rank 0 stopping the job through MPI_Abort."""
    done, out = predict_file_size_limited(model, tmp_path, "-k", "2")
    assert done.returncode == 1, done.stderr.decode()
    (line,) = errors(done)
    assert f"{out / 'recs'}: File too large" in line, line
    assert "Abort" not in done.stderr.decode(), done.stderr.decode()
    assert os.listdir(out) == []


def predict_file_size_limited(model, tmp_path, *args):
    """``mpiexec -n 2`` predict through the FAILING launcher, rank 0 limited to files of 4 KiB,
    writing ``tmp_path/out/recs``: (the run, the output directory)."""
    script = tmp_path / "failing.py"
    script.write_text(FAILING)
    out = tmp_path / "out"
    out.mkdir()
    done = run([MPIEXEC, "-n", 2, sys.executable, script,
                *argv(model, *args, "-b", "8", "-s", out / "recs")],
               env=dict(ENV, FAIL_RANK="0", FAIL_MODE="file-size"))
    return done, out


def stdout_runs(fixture, d) -> dict:
    args = argv(fixture("model"), "-k", "7", "-b", "16", "-s", "-")
    return {"one": (1, args), "many": (3, args)}


@BATCHED(stdout_runs)
def test_ranks_write_stdout(runs):
    single, done = runs[1]["one"], runs[1]["many"]
    assert single.returncode == done.returncode == 0, done.stderr.decode()
    assert done.stdout == single.stdout and done.stdout.count(b"\n") == 300
    assert done.stderr.decode().count("wrote 300 recommendation lines") == 1


def test_every_rank_failing_alike_prints_one_error(model, tmp_path):  # noqa: F811
    out = tmp_path / "recs.txt"
    done = mpiexec(3, *argv(model, "-s", out)[:-4], "-r", tmp_path / "missing.txt", "-s", out)
    assert done.returncode == 1
    assert errors(done) == [f"Error: {tmp_path / 'missing.txt'}: the input file does not exist; "
                            "check the -r path."]
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("flag", ["-r", "-f"])
def test_stdin_as_input_is_refused_not_waited_for(model, tmp_path, flag):  # noqa: F811
    """Every rank reads -r and -f in full; stdin reaches rank 0 alone, and the others waited
    for ever."""
    out = tmp_path / "recs.txt"
    command = [MPIEXEC, "-n", 2, PREDICT, *argv(model, "-s", out)[:-4], "-r",
               "-" if flag == "-r" else model / "ratings.txt", "-s", out]
    if flag == "-f":
        command += ["-f", "-"]
    done = subprocess.run([str(c) for c in command], env=ENV, capture_output=True, timeout=120,
                          input=(model / "ratings.txt").read_bytes())
    assert done.returncode == 1
    assert errors(done) == [f"Error: /dev/stdin: under mpiexec every process reads {flag} in "
                            "full, but standard input or a pipe can be read only once; write it "
                            f"to a file and give that with {flag}."]
    assert os.listdir(tmp_path) == []


def tied(model, d, *, hidden: int, middle: int) -> list[dict]:
    """netdefs/movielens.json as a tied-weights autoencoder trained in ``d`` for an epoch:
    Input -> Hidden -> H2 (``middle`` units) -> H3 -> Output, H2 and the output using H2 ->
    H3's and Input -> Hidden's matrices transposed (spec 3.14); its layers."""
    netdef = movielens_netdef(hidden)
    netdef["Layers"][2:2] = [
        {"Name": "H2", "Kind": "Hidden", "N": middle, "Activation": "Tanh", "SharedWeights": {
            "InputLayer": "Hidden", "SourceInputLayer": "H2", "SourceOutputLayer": "H3",
            "Transposed": True}},
        {"Name": "H3", "Kind": "Hidden", "N": hidden, "Activation": "Tanh"}]
    netdef["Layers"][4].update(Source="H3", SharedWeights={
        "InputLayer": "H3", "SourceInputLayer": "Input", "SourceOutputLayer": "Hidden",
        "Transposed": True})
    trained_beside(model, d, netdef, epochs=1)
    return netdef["Layers"]


def tied_runs(fixture, d) -> dict:
    """The tied autoencoder (37 -> 23 -> 37 units), trained in d/N; one_and_split_runs with it
    on 2 and 3 ranks."""
    model, runs = fixture("model"), {}
    for n in (2, 3):
        out = param_folder(d, n)
        tied(model, out, hidden=37, middle=23)
        args = [a.format(ratings=model / "ratings.txt") for a in CASES["filter"]]
        runs |= one_and_split_runs(out, args, n, out, n)
    return runs


@BATCHED(tied_runs)
@pytest.mark.parametrize("n", [2, 3])
def test_split_layers_score_a_tied_autoencoder_as_one_process(runs, n):
    """Each rank scores with its block of each shared matrix, for the owner and for the
    transposed share: the input's 128 features -> 37 -> 23 -> 37 -> 128 items. Input ->
    Hidden is split by its input units, and the output's W.T by its output units: the same
    blocks; H2 -> H3 by H3's units, and Hidden -> H2's W.T by Hidden's (a partial product)."""
    assert_same_records(*one_and_split(runs, n)[:2])


def test_a_network_split_layers_cannot_split_is_refused_naming_it(model, tmp_path):  # noqa: F811
    """A transposed share whose matrix and W.T are both split by their output units (H2 ->
    H3, 100 x 128, and Hidden -> H2) would need blocks that other ranks hold: --split-layers
    refuses it once, naming the network file and the field of the definition that holds it."""
    tied(model, tmp_path, hidden=128, middle=100)
    out = tmp_path / "recs.txt"
    done = mpiexec(2, *argv(model, "--split-layers", "-s", out)[2:], "-n", tmp_path / "gl.nc")
    assert done.returncode == 1
    (line,) = errors(done)
    assert line.startswith(f"Error: {tmp_path / 'gl.nc'}: Layers[2].SharedWeights: the weight "
                           "Hidden -> H2 uses H2 -> H3's matrix (100 x 128 units) transposed"), \
        line
    assert not out.exists()


@pytest.fixture(scope="module")
def softmax(model, tmp_path_factory):  # noqa: F811
    """The model's data and definition with a SoftMax output (CrossEntropy), trained, its
    best items dealt out over the ranks (``spread_items``)."""
    netdef = movielens_netdef()
    netdef["Layers"][2]["Activation"] = "SoftMax"
    netdef["ErrorFunction"] = "CrossEntropy"
    trained = trained_beside(model, tmp_path_factory.mktemp("softmax_trained"), netdef, epochs=3)
    d = tmp_path_factory.mktemp("softmax")
    spread_items(trained, d)
    return d


SOFTMAX_SPLIT = [(2, "plain"), (3, "filter"), (2, "multiply")]


def softmax_runs(fixture, d) -> dict:
    softmax, runs = fixture("softmax"), {}
    for n, case in SOFTMAX_SPLIT:
        args = [a.format(ratings=softmax / "ratings.txt") for a in CASES[case]] + ["-p", "11.9f"]
        runs |= one_and_split_runs(softmax, args, n, param_folder(d, n, case), n, case)
    return runs


@BATCHED(softmax_runs)
@pytest.mark.parametrize("n,case", SOFTMAX_SPLIT)
def test_split_layers_score_a_softmax_output_as_one_process_does(runs, n, case):
    """--split-layers with a SoftMax output: every rank's scores are normalized over the whole
    layer (the ranks add up each row's sums), so the merged items and scores are one
    process's, to float32 rounding (printed with 9 digits here: 4.3f would hide it). exp
    turns a last-digit difference of a pre-activation z into a relative one of about |z| ulps
    in the score (a score differed by 1.5e-6 of itself: 12 ulps)."""
    one, many, _, _ = one_and_split(runs, n, case)
    if case != "multiply":  # (which multiplies the scores by the filter's values)
        scores = np.concatenate([x for _, _, x in records(one)])
        assert 2 / 90 < scores.max() <= 1  # (not a uniform row of 90 items)
    assert_same_records(one, many, tol=1e-9, rtol=1e-5)


def no_records_runs(fixture, d) -> dict:
    """An empty input, predicted with and without --split-layers on 2 ranks into
    d/SPLIT/recs.txt."""
    model, runs = fixture("model"), {}
    empty = d / "empty.txt"
    empty.touch()
    for split in ((), ("--split-layers",)):
        out = param_folder(d, len(split)) / "recs.txt"
        runs[split] = (2, [*argv(model, "-s", out)[:-4], "-r", empty, "-s", out, *split])
    return runs


@BATCHED(no_records_runs)
@pytest.mark.parametrize("split", [(), ("--split-layers",)])
def test_an_input_with_no_records_gets_no_recommendations(runs, split):
    d, ran = runs
    out, done = d / str(len(split)) / "recs.txt", ran[split]
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr.decode().count("wrote 0 recommendation lines") == 1
    assert out.read_bytes() == b""


def test_usage_error_is_printed_once(model, tmp_path):  # noqa: F811
    done = mpiexec(2, *argv(model, "-p", "q", "-s", tmp_path / "recs.txt"))
    assert done.returncode == 2 and len(errors(done)) == 1 and b"-p" in done.stderr
    assert os.listdir(tmp_path) == []
    # rank 1's alone (mpiexec's MPMD form): rank 0 prints it for both, which stop before
    # reading anything
    good = argv(model, "-s", tmp_path / "recs.txt")
    done = run([MPIEXEC, "-n", 1, PREDICT, *good, ":", "-n", 1, PREDICT, *good, "--bogus"])
    assert done.returncode == 2 and errors(done) == ["Error: No such option '--bogus'."], \
        done.stderr.decode()
    assert os.listdir(tmp_path) == []


def test_debug_shows_one_traceback(model, tmp_path):  # noqa: F811
    """DESTINY_DEBUG=1 shows the failure the ranks share as a traceback: rank 0's alone."""
    out = tmp_path / "recs.txt"
    done = run([MPIEXEC, "-n", 3, PREDICT, *argv(model, "-s", out)[:-4], "-r",
                tmp_path / "missing.txt", "-s", out], env=dict(ENV, DESTINY_DEBUG="1"))
    assert done.returncode == 1
    text = done.stderr.decode()
    assert text.count("ParallelError: ") == 1, text  # (one chain of tracebacks)
    assert f"ParallelError: {tmp_path / 'missing.txt'}: the input file does not exist" in text
    assert os.listdir(tmp_path) == []


def test_rank_zero_alone_failing(model, tmp_path):  # noqa: F811
    # Only rank 0 writes, so only rank 0 checks the output directory.
    done = mpiexec(2, *argv(model, "-s", tmp_path / "no" / "recs.txt"))
    assert done.returncode == 1 and len(errors(done)) == 1
    assert "for the recommendations file (-s) does not exist" in errors(done)[0]


def test_one_rank_failing_stops_all(model, tmp_path):  # noqa: F811
    # mpiexec's MPMD form (A : B) gives rank 1 its own command line: a missing input.
    out = tmp_path / "recs.txt"
    good = argv(model, "-s", out)
    bad = [*good[:-4], "-r", tmp_path / "missing.txt", "-s", out]
    done = run([MPIEXEC, "-n", 1, PREDICT, *good, ":", "-n", 1, PREDICT, *bad])
    assert done.returncode == 1
    assert errors(done) == [f"Error: rank 1 of 2: {tmp_path / 'missing.txt'}: the input file "
                            "does not exist; check the -r path."]
    assert os.listdir(tmp_path) == []


def test_ranks_reading_different_inputs_stop(model, tmp_path):  # noqa: F811
    short = tmp_path / "short.txt"
    short.write_text("".join((model / "ratings.txt").read_text().splitlines(True)[:100]))
    out = tmp_path / "recs.txt"
    good = argv(model, "-s", out)
    other = [*good[:-4], "-r", short, "-s", out]
    done = run([MPIEXEC, "-n", 2, PREDICT, *good, ":", "-n", 1, PREDICT, *other])
    assert done.returncode == 1 and len(errors(done)) == 1
    assert errors(done)[0].startswith("Error: rank 2 of 3 read 100 samples")
    assert os.listdir(tmp_path) == ["short.txt"]


@pytest.mark.parametrize("rank,mode,message", [
    (1, "error", "Error: rank 1 of 2: simulated failure"),
    (0, "error", "Error: simulated failure"),
    (1, "bug", "Error: rank 1 of 2: Traceback (most recent call last):"),
])
def test_failure_while_scoring_stops_all(model, tmp_path, rank, mode, message):  # noqa: F811
    script = tmp_path / "failing.py"
    script.write_text(FAILING)
    out = tmp_path / "out" / "recs.txt"
    out.parent.mkdir()
    env = dict(ENV, FAIL_RANK=str(rank), FAIL_MODE=mode)
    done = run([MPIEXEC, "-n", 2, sys.executable, script, *argv(model, "-b", "32", "-s", out)],
               env=env)
    assert done.returncode == 1
    assert errors(done) == [message]
    if mode == "bug":
        assert "RuntimeError: simulated bug" in done.stderr.decode()
    assert os.listdir(out.parent) == []  # neither the file nor its temporary


def test_rank_that_dies_stops_the_job(model, tmp_path):  # noqa: F811
    script = tmp_path / "failing.py"
    script.write_text(FAILING)
    out = tmp_path / "out" / "recs.txt"
    out.parent.mkdir()
    env = dict(ENV, FAIL_RANK="1", FAIL_MODE="die")
    done = run([MPIEXEC, "-n", 2, sys.executable, script, *argv(model, "-b", "32", "-s", out)],
               env=env)
    assert done.returncode != 0
    # mpiexec kills rank 0 outright (SIGKILL): the file is never published, though its hidden
    # temporary (.recs.txt.*.tmp) may stay behind, as after any killed job.
    assert not out.exists()


@pytest.mark.parametrize("rank,split,mode", [(0, (), "sigterm"), (1, (), "sigterm"),
                                             (0, ("--split-layers",), "sigterm"),
                                             (1, ("--split-layers",), "sigterm-score")])
def test_stop_signal_on_one_rank_stops_all(model, tmp_path, rank, split, mode):  # noqa: F811
    """mpiexec passes a SIGTERM to each rank at its own moment: here rank ``rank`` alone gets
    it. Every rank stops after the same round, one message is printed, the job exits 143 (as
    one process stopped by it), and no output or temporary is left."""
    script = tmp_path / "failing.py"
    script.write_text(FAILING)
    out = tmp_path / "out" / "recs.txt"
    out.parent.mkdir()
    env = dict(ENV, FAIL_RANK=str(rank), FAIL_MODE=mode)
    done = run([MPIEXEC, "-n", 2, sys.executable, script,
                *argv(model, "-b", "32", *split, "-s", out)], env=env)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr.decode()
    assert errors(done) == ["Error: interrupted; no output was replaced (each is put in place "
                            "only once complete). Run the command again to start afresh."]
    assert "Abort" not in done.stderr.decode()
    assert os.listdir(out.parent) == []


def test_group_command_prints_once(model, tmp_path):  # noqa: F811
    # `destiny predict` under mpiexec: the same runner as `predict`, one message for all ranks.
    out = tmp_path / "recs.txt"
    done = run([MPIEXEC, "-n", 2, BIN / "destiny", "predict",
                *argv(model, "-s", out)[:-4], "-r", tmp_path / "missing.txt", "-s", out])
    assert done.returncode == 1 and len(errors(done)) == 1
    done = run([MPIEXEC, "-n", 2, BIN / "destiny", "predict", "--bogus"])
    assert done.returncode == 2 and done.stderr.decode().count("No such option") == 1
    assert os.listdir(tmp_path) == []


# A test-only launcher: predict with its progress bar replaced by one that writes what it was
# given to BAR_LOG<rank> when closed.
RECORDING_BAR = textwrap.dedent("""
    import json, os, sys
    import destiny.cli.predict as cli
    from destiny.parallel import get_comm

    class Bar:
        def __init__(self, total, desc, unit):
            self.made, self.updates = [total, desc, unit], []

        def update(self, n):
            self.updates.append(n)

        def close(self):
            with open(os.environ["BAR_LOG"] + str(get_comm().rank), "w") as f:
                json.dump([self.made, self.updates], f)

    cli.progress_bar = Bar
    sys.argv[0] = "predict"
    cli.main()
""")


@pytest.mark.parametrize("split", [(), ("--split-layers",)])
def test_rank_zero_alone_shows_progress_counting_every_ranks_records(model, tmp_path,  # noqa: F811
                                                                     split):
    """Rank 0 writes every record, and its bar counts them all, batch by batch in input
    order (32 samples each, the last 12), whichever rank scored them; the other ranks show
    none."""
    script = tmp_path / "bar.py"
    script.write_text(RECORDING_BAR)
    out = tmp_path / "out" / "recs.txt"
    out.parent.mkdir()
    env = dict(ENV, BAR_LOG=str(tmp_path / "bar"))
    done = run([MPIEXEC, "-n", 3, sys.executable, script,
                *argv(model, "-b", "32", *split, "-s", out)], env=env)
    assert done.returncode == 0, done.stderr.decode()
    assert sorted(p.name for p in tmp_path.glob("bar*")) == ["bar.py", "bar0"]
    made, updates = json.loads((tmp_path / "bar0").read_text())
    assert made == [300, "predict", "sample"] and updates == [32] * 9 + [12]


# A test-only launcher: rank REPLACE_RANK renames the network NEW over the -n file once it has
# read the network's attributes (as it reads the indices), as a train --force may at any moment.
REPLACING = textwrap.dedent("""
    import os, sys
    from destiny import predict
    from destiny.parallel import get_comm

    real, calls = predict.read_index, []

    def read_index(path):
        calls.append(1)
        if get_comm().rank == int(os.environ["REPLACE_RANK"]) and len(calls) == 1:
            os.replace(os.environ["NEW"], os.environ["NETWORK"])
        return real(path)

    predict.read_index = read_index
    from destiny.cli.predict import main
    sys.argv[0] = "predict"
    main()
""")


@pytest.mark.parametrize("split", [(), ("--split-layers",)])
def test_a_network_replaced_as_the_ranks_read_it_is_refused(model, tmp_path, split):  # noqa: F811
    """A train --force renaming a new network over -n as the ranks read it: a rank reading
    later took the new network and one before it the old (lines of two networks in one
    output), and a rank of --split-layers read its blocks of the weights from the new file
    beside the old file's biases, with exit 0."""
    from tests.conftest import network_and_another

    net, new = network_and_another(model, tmp_path)
    script = tmp_path / "replacing.py"
    script.write_text(REPLACING)
    out = tmp_path / "out" / "recs.txt"
    out.parent.mkdir()
    env = dict(ENV, REPLACE_RANK="1", NEW=str(new), NETWORK=str(net))
    done = run([MPIEXEC, "-n", 2, sys.executable, script,
                *argv(model, *split, "-s", out)[2:], "-n", net], env=env)
    assert done.returncode == 1, done.stderr.decode()
    (line,) = errors(done)
    assert line.endswith(f"{net}: was replaced while predict read it (by a train writing it?), "
                         "so the processes may have read parts of two networks; nothing was "
                         "predicted. Run predict again once that run is done."), line
    assert os.listdir(out.parent) == []


def narrow_and_wide_runs(fixture, d) -> dict:
    """The model's input feeding 37 and 128 hidden units, trained in d/N; one_and_split_runs
    with it on 2 and 3 ranks."""
    model, runs = fixture("model"), {}
    for n in (2, 3):
        out = param_folder(d, n)
        netdef = movielens_netdef(37)
        netdef["Layers"].insert(2, {"Name": "Wide", "Kind": "Hidden", "Type": "FullyConnected",
                                    "N": 128, "Source": "Input", "Activation": "Sigmoid"})
        netdef["Layers"][3]["Source"] = ["Hidden", "Wide"]
        trained_beside(model, out, netdef, epochs=1)
        args = [a.format(ratings=model / "ratings.txt") for a in CASES["filter"]]
        runs |= one_and_split_runs(out, args, n, out, n)
    return runs


@BATCHED(narrow_and_wide_runs)
@pytest.mark.parametrize("n", [2, 3])
def test_split_input_feeding_a_narrow_and_a_wide_layer_as_one_process(runs, n):
    """The input feeds the hidden layer of 37 units (its matrix split by the input's units)
    and one of 128 (split by their own): each rank holds every feature of a batch and takes
    its own share for the narrow layer's product."""
    assert_same_records(*one_and_split(runs, n)[:2])
