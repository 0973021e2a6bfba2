"""The pieces of model parallelism that need no second process (spec 7).

Multi-rank training itself runs under mpiexec in tests/test_train_mpi.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from destiny import shard
from destiny.initialize import initial_weights
from destiny.io.dataset import SparseDataset, read_dataset, write_dataset
from destiny.kernels import get_backend
from destiny.netdef import WeightInit, parse_netdef
from destiny.network import Network
from destiny.parallel import Comm, unit_counts, unit_range
from destiny.train import TrainData


class FakeComm(Comm):
    """Rank ``rank`` of ``size`` for code that calls no collective (construction, reading)."""

    def __init__(self, rank: int, size: int):
        self.rank, self.size = rank, size


def test_units_split_with_dsstnes_floor_rule():
    assert [unit_range(10, r, 3) for r in range(3)] == [(0, 3), (3, 6), (6, 10)]
    assert [unit_range(2, r, 4) for r in range(4)] == [(0, 0), (0, 1), (1, 1), (1, 2)]
    assert unit_counts(97, 3) == [32, 32, 33] and sum(unit_counts(53, 2)) == 53


@pytest.mark.parametrize("n_in,n_out,expected", [
    (27278, 128, shard.ROWS),   # input -> hidden: split the input features (spec 7's example)
    (128, 27278, shard.COLS),   # hidden -> output: split the output units
    (1024, 1024, shard.COLS),   # 3 * 1024 > 2 * 1024
    (300, 200, shard.ROWS),     # 600 = 600 is not larger
    (300, 201, shard.COLS),
])
def test_larger_side_decides_the_layout(n_in, n_out, expected):
    assert shard.layout(n_in, n_out, 2) == expected
    assert shard.layout(n_in, n_out, 1) == shard.WHOLE


@pytest.mark.parametrize("scheme", list(WeightInit))
def test_a_block_of_the_initial_weights_is_a_block_of_the_whole_draw(scheme, monkeypatch):
    monkeypatch.setattr(shard, "_BLOCK_VALUES", 40)  # many blocks of rows
    whole_rng, part_rng = np.random.default_rng(3), np.random.default_rng(3)
    whole = initial_weights(whole_rng, scheme, 0.5, 23, 9)
    part = initial_weights(part_rng, scheme, 0.5, 23, 9, rows=(5, 17), cols=(2, 7))
    np.testing.assert_array_equal(part, whole[5:17, 2:7])
    assert whole_rng.random() == part_rng.random()  # the next matrix draws the same numbers
    monkeypatch.setattr(shard, "_BLOCK_VALUES", 1 << 22)
    np.testing.assert_array_equal(initial_weights(np.random.default_rng(3), scheme, 0.5, 23, 9),
                                  whole)


class _Counting:
    """A generator that records how many numbers each of its draws returned."""

    def __init__(self, seed):
        self.rng, self.sizes = np.random.default_rng(seed), []

    def random(self, shape):
        self.sizes.append(int(np.prod(shape)))
        return self.rng.random(shape)

    def normal(self, loc, scale, size):
        self.sizes.append(int(np.prod(size)))
        return self.rng.normal(loc, scale, size=size)


@pytest.mark.parametrize("scheme", list(WeightInit))
def test_a_row_wider_than_a_block_is_drawn_a_block_at_a_time(scheme, monkeypatch):
    """A rank drawing its block of a matrix into a layer of 10^9 units held a whole row of it
    at a time, 8 GB in float64 and as much per temporary, on every rank: now at most a block,
    and the same numbers."""
    monkeypatch.setattr(shard, "_BLOCK_VALUES", 4)  # rows of 11: pieces of 4, 4 and 3
    counting = _Counting(3)
    part = initial_weights(counting, scheme, 0.5, 3, 11, rows=(1, 3), cols=(2, 9))
    assert max(counting.sizes, default=0) <= 4
    monkeypatch.setattr(shard, "_BLOCK_VALUES", 1 << 22)
    whole_rng = np.random.default_rng(3)
    whole = initial_weights(whole_rng, scheme, 0.5, 3, 11)
    np.testing.assert_array_equal(part, whole[1:3, 2:9])
    assert whole_rng.random() == counting.rng.random()  # the next matrix draws the same numbers


def test_a_block_holds_at_least_one_row(monkeypatch):
    """A row wider than a block (a layer of more than 4 M units) is a block of its own."""
    monkeypatch.setattr(shard, "_BLOCK_VALUES", 40)
    assert [shard.block_rows(n) for n in (0, 1, 9, 40, 41, 1000)] == [40, 40, 4, 1, 1, 1]


def test_reading_columns_keeps_the_shard_of_every_row(tmp_path, monkeypatch):
    from destiny.io import dataset

    rng = np.random.default_rng(1)
    lengths = rng.integers(0, 9, size=40)
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    indices = rng.integers(0, 256, size=indptr[-1]).astype(np.int32)
    indices[:3] = (99, 100, 200)  # (on the bounds of the shards below)
    values = rng.random(indptr[-1]).astype(np.float32)
    write_dataset(tmp_path / "d.nc", SparseDataset("d", 256, indptr, indices, values))
    monkeypatch.setattr(dataset._Entries, "BLOCK", 17)  # entries read in many blocks
    for lo, hi in [(0, 100), (100, 200), (200, 256), (50, 50)]:
        part = read_dataset(tmp_path / "d.nc", columns=(lo, hi))
        assert part.columns == (lo, hi) and part.offset == lo and part.width == 256
        for r in range(40):
            row = indices[indptr[r]:indptr[r + 1]]
            mine = (row >= lo) & (row < hi)
            got = slice(part.indptr[r], part.indptr[r + 1])
            np.testing.assert_array_equal(part.indices[got] + lo,
                                          indices[indptr[r]:indptr[r + 1]][mine])
            np.testing.assert_array_equal(part.values[got], values[indptr[r]:indptr[r + 1]][mine])


NETDEF = {
    "Kind": "FeedForward",
    "Layers": [
        {"Name": "Input", "Kind": "Input", "N": 300, "DataSet": "in", "Sparse": True},
        {"Name": "Hidden", "Kind": "Hidden", "Type": "FullyConnected", "N": 20,
         "Activation": "Sigmoid"},
        {"Name": "Output", "Kind": "Output", "Type": "FullyConnected", "N": 250,
         "DataSet": "out", "Activation": "Sigmoid"},
    ],
}


def test_each_rank_holds_its_part_of_every_matrix_and_dataset():
    netdef = parse_netdef(NETDEF)
    whole = Network(netdef, get_backend("cpu"))
    whole.initialize(7)
    rng = np.random.default_rng(2)
    indptr = np.arange(0, 41, 4)
    inp = SparseDataset("in", 300, indptr, rng.integers(0, 300, 40).astype(np.int32))
    out = SparseDataset("out", 250, indptr, rng.integers(0, 250, 40).astype(np.int32))
    for rank in range(3):
        net = Network(netdef, get_backend("cpu"), comm=FakeComm(rank, 3))
        net.initialize(7)
        first, second = net.connections
        assert (first.layout, second.layout) == (shard.ROWS, shard.COLS)
        # Every rank's unit counts, in rank order (the collectives' offsets), by hand: the
        # floor rule gives 20 as 6, 7, 7 and 250 as 83, 83, 84 (only the mpiexec tests caught
        # them reversed).
        assert net.counts == {"Input": [100, 100, 100], "Hidden": [6, 7, 7],
                              "Output": [83, 83, 84]}
        r0, r1 = unit_range(300, rank, 3)
        c0, c1 = unit_range(250, rank, 3)
        np.testing.assert_array_equal(first.W, whole.connections[0].W[r0:r1])
        np.testing.assert_array_equal(second.W, whole.connections[1].W[:, c0:c1])
        assert len(first.b) == net.local_n("Hidden") and len(second.b) == c1 - c0
        data = TrainData(net, {"in": inp, "out": out})
        assert data.inputs["Input"].columns == (r0, r1)
        assert data.targets["Output"].columns == (c0, c1)
        kept = (out.indices >= c0) & (out.indices < c1)
        np.testing.assert_array_equal(data.targets["Output"].indices, out.indices[kept] - c0)


def test_a_ranks_memory_figure_counts_its_own_rows_of_the_input_gradient():
    """memory.training_bytes under model parallelism: a rank holding the input's rows (r0, r1)
    of a matrix split by rows writes the gradient's rows of the features its columns of the
    data list, each a whole row of the hidden layer's units, and counts those alone, not every
    feature of the data, even where the process holds them all (the mpiexec tests' input is
    denoised, so none counted them)."""
    from destiny.memory import listed_features, training_bytes

    netdef = parse_netdef(NETDEF)
    rng = np.random.default_rng(5)
    indptr = np.arange(0, 41, 4)
    inp = SparseDataset("in", 300, indptr, rng.integers(0, 300, 40).astype(np.int32))
    out = SparseDataset("out", 250, indptr, rng.integers(0, 250, 40).astype(np.int32))
    features = set(inp.indices.tolist())
    for rank in range(3):
        net = Network(netdef, get_backend("cpu"), comm=FakeComm(rank, 3))
        data = TrainData(net, {"in": inp, "out": out})
        listed = listed_features(net, data.inputs)
        r0, r1 = unit_range(300, rank, 3)
        mine = sorted(f for f in features if r0 <= f < r1)
        assert listed["Input"].tolist() == mine and 0 < len(mine) < len(features)
        # (and where the process holds every column, an input split both ways: its rows only)
        every = {"Input": np.array(sorted(features))}
        without, with_rows, with_every = (
            sum(training_bytes(net, rank, batch_rows=4, states=0, listed=given).values())
            for given in (None, listed, every))
        assert with_rows - without == with_every - without == len(mine) * 20 * 4


def test_a_rank_reads_only_the_columns_of_its_units(tmp_path):
    """(spec 7: the data is not replicated) Each rank reads from the files only the feature
    columns of its own units: the input's of a matrix split by rows, the targets' of its
    output units."""
    from destiny.fit import dataset_pool, read_training_datasets

    indptr = np.arange(0, 41, 4)
    rng = np.random.default_rng(2)
    write_dataset(tmp_path / "in.nc", SparseDataset(
        "in", 300, indptr, rng.integers(0, 300, 40).astype(np.int32)))
    write_dataset(tmp_path / "out.nc", SparseDataset(
        "out", 250, indptr, rng.integers(0, 250, 40).astype(np.int32)))
    pool = dataset_pool([tmp_path / "in.nc", tmp_path / "out.nc"])
    for rank in range(3):
        net = Network(parse_netdef(NETDEF), get_backend("cpu"), comm=FakeComm(rank, 3))
        read = read_training_datasets(pool, net)
        assert read["in"].columns == unit_range(300, rank, 3)
        assert read["out"].columns == unit_range(250, rank, 3)


class OthersComm(FakeComm):
    """Rank ``rank`` of ``size`` in this process: ``theirs`` is what the other ranks bring,
    one object each to ``allgather`` (in rank order), their sum to ``allreduce_sum``."""

    def __init__(self, rank: int, size: int, theirs):
        super().__init__(rank, size)
        self.theirs = theirs

    def allgather(self, obj) -> list:
        return [*self.theirs[:self.rank], obj, *self.theirs[self.rank:]]

    def allreduce_sum(self, x):
        return float(x) + self.theirs


def test_every_rank_names_the_first_layer_any_rank_finds_not_finite():
    """check_finite under MPI: each rank looks at its own blocks, and all of them name the
    first layer that one process would (a rank naming its own would raise alone)."""
    net = Network(parse_netdef(NETDEF), get_backend("cpu"), comm=OthersComm(0, 2, [None]))
    net.initialize(7)
    assert net.check_finite() is None
    net.comm.theirs = [1]  # another rank found the weights into Output not finite
    assert net.check_finite() == "Output"
    net.connections[1].b[0] = np.nan  # this rank finds Output's, another Hidden's
    net.comm.theirs = [0]
    assert net.check_finite() == "Hidden"


def test_the_regularization_error_is_the_whole_networks_on_every_rank():
    """Each rank sums its blocks of the matrices, and the ranks add up their sums: the
    number one process reports."""
    netdef = parse_netdef(NETDEF)
    whole = Network(netdef, get_backend("cpu"))
    whole.initialize(7)
    lam, lam1 = 0.1, 0.01
    nets = [Network(netdef, get_backend("cpu"), comm=OthersComm(rank, 3, 0.0))
            for rank in range(3)]
    own = []
    for net in nets:
        net.initialize(7)
        own.append(sum(0.5 * lam * np.sum(c.W.astype(np.float64) ** 2)
                       + lam1 * np.sum(np.abs(c.W.astype(np.float64))) for c in net.connections))
    for rank, net in enumerate(nets):
        net.comm.theirs = sum(own) - own[rank]
        assert net.regularization_error(lam, lam1) == pytest.approx(
            whole.regularization_error(lam, lam1), rel=1e-6)


def test_column_range_keeps_a_boolean_datasets_empty_values():
    from destiny.sparse import column_range

    indptr = np.array([0, 3, 3, 5], np.int64)
    indices = np.array([0, 4, 5, 5, 9], np.int32)
    for values, kept in [(np.zeros(0, np.float32), []), (None, None),
                         (np.arange(5, dtype=np.float32), [1.0, 2.0, 3.0])]:
        got_indptr, got_indices, got_values = column_range(indptr, indices, values, 4, 9)
        np.testing.assert_array_equal(got_indptr, [0, 2, 2, 3])
        np.testing.assert_array_equal(got_indices, [0, 1, 1])
        assert got_indices.flags.owndata  # a rank's share, not a view of every entry
        if kept is None:
            assert got_values is None
        else:
            np.testing.assert_array_equal(got_values, kept)
            assert got_values.flags.owndata


def test_join_puts_row_and_column_pieces_in_place():
    W = np.arange(35, dtype=np.float32).reshape(7, 5)
    rows = [shard.Part(W[a:b], (a, b), (0, 5), (7, 5)) for a, b in [(0, 2), (2, 4), (4, 7)]]
    cols = [shard.Part(W[:, a:b], (0, 7), (a, b), (7, 5)) for a, b in [(0, 1), (1, 1), (1, 5)]]
    for parts in (rows, cols):
        pieces = [(p.cols, p.piece(1, 6)) for p in parts]
        np.testing.assert_array_equal(shard._join(pieces, 5, 5), W[1:6])


def test_a_softmax_layer_is_split_like_any_other():
    """SoftMax layers were refused under MPI; now each rank holds its units of them, as of
    any layer (the network adds up their rows across the ranks: tests/test_train_mpi.py)."""
    netdef = parse_netdef(dict(NETDEF, Layers=[NETDEF["Layers"][0], dict(
        NETDEF["Layers"][1], Activation="SoftMax"), dict(
        NETDEF["Layers"][2], Activation="SoftMax")]))
    for rank in range(3):
        net = Network(netdef, get_backend("cpu"), comm=FakeComm(rank, 3))
        assert net.units["Output"] == unit_range(250, rank, 3)
        assert net.units["Hidden"] == unit_range(20, rank, 3)


def test_norms_are_split_like_the_rest():
    """WeightNorm and DeltaNorm were refused under MPI; now the ranks add up the norms that
    span them (a ROWS matrix's column norms, a delta's row norms: tests/test_train_mpi.py),
    and each rank holds its units of the layer, as of any."""
    for key in ("WeightNorm", "DeltaNorm"):
        netdef = parse_netdef(dict(NETDEF, Layers=[NETDEF["Layers"][0], dict(
            NETDEF["Layers"][1], **{key: 1.5}), dict(NETDEF["Layers"][2], **{key: 2.5})]))
        for rank in range(3):
            net = Network(netdef, get_backend("cpu"), comm=FakeComm(rank, 3))
            assert net.units["Hidden"] == unit_range(20, rank, 3)
            assert [c.layout for c in net.connections] == [shard.ROWS, shard.COLS]


def shared_netdef(h2: int):
    """Input 300 -> Hidden 20 -> H2 -> H3 20 -> Output, H3 using Hidden -> H2's matrix
    transposed."""
    return parse_netdef(dict(NETDEF, Layers=[
        *NETDEF["Layers"][:2], {"Name": "H2", "Kind": "Hidden", "N": h2, "Activation": "Tanh"},
        {"Name": "H3", "Kind": "Hidden", "N": 20, "Activation": "Tanh", "SharedWeights": {
            "SourceInputLayer": "Hidden", "SourceOutputLayer": "H2", "InputLayer": "H2",
            "Transposed": True}},
        dict(NETDEF["Layers"][2], Source="H3")]))


def test_a_transposed_share_uses_the_block_its_rank_holds():
    """Hidden -> H2 [20, 30] is split by H2's units (columns), H2 -> H3 [30, 20] by H2's
    units too (rows): the rows of W.T a rank needs are the columns of W it holds."""
    netdef = shared_netdef(30)
    whole = Network(netdef, get_backend("cpu"))
    whole.initialize(7)
    for rank in range(3):
        net = Network(netdef, get_backend("cpu"), comm=FakeComm(rank, 3))
        net.initialize(7)
        owner, sharer = net.connections[1], net.connections[2]
        assert sharer.owner is owner and sharer.W is None and owner.sharing == 2
        assert (owner.layout, sharer.layout) == (shard.COLS, shard.ROWS)
        assert sharer.rows == owner.cols == unit_range(30, rank, 3)
        np.testing.assert_array_equal(owner.W, whole.connections[1].W[:, slice(*owner.cols)])


def test_a_share_whose_blocks_differ_is_refused():
    """Hidden -> H2 [20, 25] and H2 -> H3 [25, 20] are both split by their output units: a
    rank would need rows of W.T whose columns of W another rank holds."""
    from destiny.errors import NetDefError

    netdef = shared_netdef(25)
    Network(netdef, get_backend("cpu"))  # one process: fine
    with pytest.raises(NetDefError, match=r"Layers\[3\]\.SharedWeights: the weight H2 -> H3 "
                                          r"uses Hidden -> H2's matrix \(20 x 25 units\) "
                                          r"transposed.*at most two thirds"):
        Network(netdef, get_backend("cpu"), comm=FakeComm(0, 2))


def test_an_input_split_both_ways_reads_all_columns_and_its_own_for_the_rows_matrix():
    """An input feeding a narrow layer (its matrix split by the input's units) and a wide one
    (split by the layer's own): a rank holds every column, and the narrow layer's product and
    gradient read its own share of the batch, denoised and scaled alike, indices re-based to
    its block of rows. (Training and predicting with it: tests/test_*_mpi.py.)"""
    from destiny.network import Batch

    mixed = dict(NETDEF, Layers=[*NETDEF["Layers"][:2], dict(
        NETDEF["Layers"][2], Source=["Hidden", "Input"])])  # Input -> Output: 300 -> 250, cols
    netdef = parse_netdef(mixed)
    net = Network(netdef, get_backend("cpu"), comm=FakeComm(1, 2))
    rows, cols = net.outgoing["Input"]
    assert (rows.layout, cols.layout) == (shard.ROWS, shard.COLS)
    assert net.input_columns("Input") == (0, 300) and rows.rows == (150, 300)
    batch = (np.array([0, 3, 5]), np.array([2, 151, 299, 149, 150], dtype=np.int32),
             np.array([1.0, 2.0, 3.0, 4.0, 5.0], dtype=np.float32))
    net._batch, net._inputs = Batch(size=2, inputs={"Input": batch}), {}
    for denoise, q in (({}, 1.0), ({"Input": (batch, 2.0)}, 2.0)):
        net._denoise, net._inputs = denoise, {}
        assert net._input_of("Input", cols)[0] is net._input_of("Input")[0]
        (indptr, indices, values), got_q = net._input_of("Input", rows)
        assert got_q == q
        np.testing.assert_array_equal(indptr, [0, 2, 3])
        np.testing.assert_array_equal(indices, [1, 149, 0])
        np.testing.assert_array_equal(values, q * np.array([2.0, 3.0, 5.0]))
        assert net._gradient_input("Input", rows)[1] is indices
    alike = dict(NETDEF, Layers=[*NETDEF["Layers"][:2], dict(
        NETDEF["Layers"][2], N=150, Source=["Hidden", "Input"])])  # 300 -> 150: rows too
    net = Network(parse_netdef(alike), get_backend("cpu"), comm=FakeComm(1, 2))
    assert net.input_columns("Input") == (150, 300)
    assert not any(net._reads_own_columns(c) for c in net.outgoing["Input"])


def test_a_layer_with_fewer_units_than_ranks_is_refused():
    from destiny.errors import NetDefError

    netdef = parse_netdef(dict(NETDEF, Layers=[NETDEF["Layers"][0], dict(
        NETDEF["Layers"][1], N=2), NETDEF["Layers"][2]]))
    Network(netdef, get_backend("cpu"), comm=FakeComm(1, 2))
    with pytest.raises(NetDefError, match=r"Layers\[1\]\.N: layer 'Hidden' has 2 units, fewer "
                                          r"than the 3 MPI ranks .* at most 2 ranks"):
        Network(netdef, get_backend("cpu"), comm=FakeComm(0, 3))


@pytest.mark.parametrize("values_kind", ["float", "empty", "none"])
@pytest.mark.parametrize("base", [0, 7])
def test_drop_entries_matches_numpys_masks(base, values_kind):
    """drop_entries against NumPy's boolean indexing and count by row, with empty rows, a row
    losing every entry, and an indptr that does not start at 0 (keep[k] is entry
    indptr[0] + k); values float, empty (a boolean dataset's) or None, returned as given."""
    from destiny.sparse import drop_entries

    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 6, size=40)
    lengths[::5] = 0
    indptr = np.full(41, base, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    indptr[1:] += base
    nnz = int(lengths.sum())
    indices = rng.integers(0, 50, size=nnz).astype(np.int32)
    values = {"float": rng.random(nnz, dtype=np.float32), "empty": np.empty(0, np.float32),
              "none": None}[values_kind]
    keep = rng.random(nnz) < 0.6
    keep[indptr[3] - base:indptr[4] - base] = False
    rows = np.repeat(np.arange(40), lengths)
    expected = np.concatenate([[0], np.cumsum(np.bincount(rows[keep], minlength=40))])

    got_indptr, got_indices, got_values = drop_entries(indptr, indices, values, keep)
    np.testing.assert_array_equal(got_indptr, expected)
    np.testing.assert_array_equal(got_indices, indices[keep])
    assert got_indices.dtype == indices.dtype
    if values_kind == "float":
        np.testing.assert_array_equal(got_values, values[keep])
    else:
        assert got_values is values
    no_rows = drop_entries(np.array([base], np.int64), indices[:0], values, keep[:0])
    np.testing.assert_array_equal(no_rows[0], [0])
    assert len(no_rows[1]) == 0
