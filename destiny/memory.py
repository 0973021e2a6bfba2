"""Whether a training run can fit in its machine's memory, told before its weights are allocated.

Linux lets a process allocate more than the machine has (overcommit): the pages are taken when
first written. One process asking for a matrix larger than the machine is refused at once (a
MemoryError, worded by ``errors.system_failure``), but the ranks of ``mpiexec`` each ask for
their smaller block, are each granted it, and the kernel's OOM killer ends the job as the
weights are drawn: exit status 9 and no message. So, before any rank allocates its weights,
each adds up the bytes that the ranks on its machine will certainly write (``training_bytes``)
and compares them with the memory the machine has free (``available_memory``).

The estimate is a lower bound, so that no job that would run is refused: every rank's block of the
weights and biases, which are drawn whole; and, where training runs at least one batch, the
gradients of the matrices a dense layer's product uses, its own or one it shares (a product writes
all of them), the optimizer state of every matrix and bias (the first update after the weights are
drawn or loaded is dense, and writes all of it: a network that fitted without it was ended by the
OOM killer at its first step, in one process too), every layer's activations and deltas for a batch,
and the rows of a sparse input's gradient for the features its data lists, where every batch writes
its features' rows (``listed_features``): by the end of the first epoch all of them are written, and
none is freed; and, where a second epoch runs, the largest temporary of its first batch (once for
the ranks on a machine, ``largest_temporary``), made while all of that is written (one batch of one
layer: the scaled copy of a gradient product's smaller operand, NumPy's product having no alpha).
Without those rows and that temporary, an ``Input -> 18,500 -> 18,500 -> Output`` sgd network on the
bundled sample passed the check in a 3 GiB cgroup and was ended by the OOM killer at its first
batch: its input's gradient, 72 MiB, was wholly resident after it (NumPy asks for huge pages: a row
written makes its 2 MiB resident), and the temporary, 18 MiB, stayed in malloc's heap. Left out:
those rows where only the first batch writes them (``network.rows_only_updates``) or the input is
denoised, the data (already read), the buffers a batch may leave untouched (dropout's), the other
temporaries, and what the process maps as it loads its kernels and starts its threads (their code,
OpenBLAS's buffers: 19 MiB more in that network, and from 10 to 86 MiB more than the arrays in warm
runs on tiny data; the address space a ``ulimit -v`` counts grew by less). What was resident before
the check is in the figure it is compared with (the cgroup's usage, MemAvailable, VmSize).
"""

from __future__ import annotations

import os

import numpy as np

from destiny import shard
from destiny.addrspace import ADDRESS_SPACE_LIMIT, RAISE_THE_LIMIT, address_space_left
from destiny.errors import DestinyError
from destiny.netdef import LayerKind
from destiny.parallel import unit_range
from destiny.wording import counted, sized

# A cgroup's memory limit at or above this is no limit (v1 writes 2**63 rounded to pages).
_NO_LIMIT = 1 << 60


def _block(net, c, rank: int) -> tuple[tuple[int, int], int, str]:
    """Rank ``rank``'s block of connection ``c``'s matrix: the span of the source's units it
    holds as rows, its number of columns, and the wider of the two layers, the one the matrix
    counts for (the one that makes it large)."""
    size = net.comm.size
    rows = unit_range(c.source.n, rank, size) if c.layout == shard.ROWS else (0, c.source.n)
    lo, hi = unit_range(c.dest.n, rank, size) if c.layout == shard.COLS else (0, c.dest.n)
    wider = c.source.name if c.source.n > c.dest.n else c.dest.name
    return rows, hi - lo, wider


def training_bytes(net, rank: int, *, batch_rows: int, states: int,
                   listed: dict[str, np.ndarray] | None = None) -> dict[str, int]:
    """The bytes rank ``rank`` of ``net.comm.size`` will certainly write, by layer (a layer
    counts the matrices to and from it with fewer units than it has, and its activations): see
    the module's note. ``batch_rows``: the rows of the first batch (0 where no batch is run);
    ``states``: the optimizer's state arrays per parameter (0 to 2); ``listed``: by input
    layer, the features whose rows of its matrix's gradient training writes (sorted unit
    indexes, ``listed_features``; a rank counts those of its rows that are listed). The
    batch's temporary is ``largest_temporary``'s."""
    size, item = net.comm.size, net.dtype.itemsize
    listed = listed or {}

    def units(name: str) -> tuple[int, int]:
        return unit_range(net.layers[name].n, rank, size)

    def width(span: tuple[int, int]) -> int:
        return span[1] - span[0]

    def listed_rows(name: str, span: tuple[int, int]) -> int:
        features = listed.get(name)
        if features is None:
            return 0
        return int(np.searchsorted(features, span[1]) - np.searchsorted(features, span[0]))

    found = {name: 0 for name in net.layers}
    # (the matrices a dense layer's product uses, its own or one it shares: the product writes
    # the whole gradient every batch, a tied autoencoder's input matrix included)
    dense = {id(c.owner) for c in net.connections if c.source.kind != LayerKind.Input}
    for c in net.connections:
        source_rows, cols, wider = _block(net, c, rank)
        local = width(units(c.dest.name))
        weights = 0 if c.shared else width(source_rows) * cols
        gradient = 0
        if batch_rows and not c.shared:
            gradient = (weights if id(c) in dense
                        else listed_rows(c.source.name, source_rows) * cols)
        state = states * weights if batch_rows else 0
        found[wider] += (weights + gradient + state) * item
        # (the bias, and in training its gradient and state)
        found[c.dest.name] += local * ((2 + states) if batch_rows else 1) * item
    for name, layer in net.layers.items():
        if layer.kind != LayerKind.Input:
            # (the forward pass's z and the backward pass's delta, and a hidden layer's
            # delta of its activations, dA)
            buffers = 3 if layer.kind == LayerKind.Hidden else 2
            found[name] += buffers * batch_rows * width(units(name)) * item
    return found


def largest_temporary(net, rank: int, *, batch_rows: int) -> tuple[int, str]:
    """The bytes of the largest temporary a batch of ``batch_rows`` makes on rank ``rank``, and
    the layer it counts for (the wider of the matrix's two): the CPU's product has no alpha, so
    a weight gradient's product scales a copy of its smaller operand, the batch's rows of the
    source's activations or of the destination's deltas (a sparse input's gradient has its own
    kernel). Freed after the product, it stays in malloc's heap; the ranks on a machine make
    theirs at moments of their own, so ``check_training_memory`` counts the largest of theirs,
    once."""
    largest = (0, "")
    for c in net.connections:
        if c.source.kind == LayerKind.Input or not batch_rows:
            continue
        (lo, hi), cols, wider = _block(net, c, rank)
        largest = max(largest, (batch_rows * min(hi - lo, cols) * net.dtype.itemsize, wider))
    return largest


def listed_features(net, inputs: dict) -> dict[str, np.ndarray]:
    """By input layer, the features its data (``inputs``: the ``SparseDataset`` this process
    holds, by layer) lists at least once, as sorted unit indexes: the rows of the layer's
    matrix's gradient that the first epoch writes where every batch writes its features' rows
    (not ``network.rows_only_updates``). A denoised input is left out (each epoch drops
    entries at random), and so are the features of other ranks' columns where this process
    holds only its own. It costs a mask of a byte per feature and the features found, 8 bytes
    each (37 ms for 20 M entries over 27,392 features, 2 cores)."""
    found = {}
    for name, ds in inputs.items():
        if net.layers[name].denoising or ds.indices.size == 0:
            continue
        seen = np.zeros(int(ds.indices.max()) + 1, dtype=bool)
        seen[ds.indices] = True
        found[name] = np.flatnonzero(seen) + ds.offset
    return found


def available_memory() -> tuple[int, str] | None:
    """The bytes this process can still take on its machine, and where the figure comes from:
    /proc/meminfo's MemAvailable and SwapFree, or less where the process's cgroup (a
    container's or a batch job's memory limit) leaves less, or where a limit on its address
    space (ulimit -v: the limit less what it maps already, VmSize) does. None where none of
    them can be read."""
    found = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            info = {k: int(v.split()[0]) * 1024 for k, v in
                    (line.split(":", 1) for line in f if ":" in line)}
        found = (info["MemAvailable"] + info.get("SwapFree", 0),
                 "MemAvailable and SwapFree in /proc/meminfo")
    except (OSError, ValueError, KeyError, IndexError):
        pass
    for limited in (_cgroup_headroom(), address_space_left()):
        if limited is not None and (found is None or limited[0] < found[0]):
            found = limited
    return found


def _cgroup_headroom() -> tuple[int, str] | None:
    """What the memory limits of this process's cgroup and its parents leave (the limit less
    the usage, page cache not counted: the kernel reclaims it), the smallest; None without a
    limit or where it cannot be read."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    best = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":  # cgroup v2
            base, files = "/sys/fs/cgroup", ("memory.max", "memory.current", ("file",))
        elif "memory" in controllers.split(","):
            base, files = "/sys/fs/cgroup/memory", (
                "memory.limit_in_bytes", "memory.usage_in_bytes",
                ("total_active_file", "total_inactive_file"))
        else:
            continue
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts), -1, -1):
            here = os.path.join(base, *parts[:depth])
            room = _headroom(here, *files)
            if room is not None and (best is None or room < best[0]):
                best = (room, f"the memory limit of the cgroup {here}")
    return best


def _headroom(directory: str, limit_file: str, usage_file: str, cache: tuple) -> int | None:
    try:
        with open(os.path.join(directory, limit_file), encoding="ascii") as f:
            text = f.read().strip()
        if text == "max" or int(text) >= _NO_LIMIT:
            return None
        with open(os.path.join(directory, usage_file), encoding="ascii") as f:
            usage = int(f.read().strip())
        cached = 0
        with open(os.path.join(directory, "memory.stat"), encoding="ascii") as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key in cache:
                    cached += int(value)
        return max(0, int(text) - usage + cached)
    except (OSError, ValueError):
        return None


def check_training_memory(net, *, batch: int, examples: int, epochs: int, states: int,
                          listed: dict[str, np.ndarray] | None = None,
                          resumed: bool = False) -> None:
    """Raise a ``DestinyError`` where the ranks on this machine (``comm.local_ranks``; one process
    alone) need more than it has free to train ``net`` (``training_bytes``, with the optimizer's
    ``states`` arrays per parameter and the gradients' ``listed`` rows; with a batch's largest
    temporary where at least two epochs run: not where the run may be ``resumed``, and so have
    one left), before they allocate the weights. Every rank computes every rank's share from the
    layout (and the features this process holds) alone, without a collective; call it where no
    rank has allocated its weights yet. Where the memory free cannot be read, nothing is
    refused."""
    found = available_memory()
    if found is None:
        return
    available, source = found
    comm = net.comm
    rows = min(batch, examples) if epochs > 0 else 0
    by_layer: dict[str, int] = {}
    for rank in comm.local_ranks:
        for name, nbytes in training_bytes(net, rank, batch_rows=rows, states=states,
                                           listed=listed).items():
            by_layer[name] = by_layer.get(name, 0) + nbytes
    if epochs > 1 and not resumed:
        nbytes, name = max(largest_temporary(net, rank, batch_rows=rows)
                           for rank in comm.local_ranks)
        if nbytes:
            by_layer[name] += nbytes
    needed = sum(by_layer.values())
    if needed <= available:
        return
    layer = max(by_layer, key=by_layer.get)
    n = net.layers[layer].n
    what = ("the network's weights" + (
        f", their gradients{' and optimizer state' if states else ''}, and a batch's "
        "activations and deltas" if rows else ""))
    # (a limit on the address space is mended by raising it, not by another machine)
    limited = (f" Here the limit on the address space (ulimit -v) leaves too little: "
               f"{RAISE_THE_LIMIT}." if source.startswith(ADDRESS_SPACE_LIMIT) else "")
    if comm.size == 1:
        whose, more = "", ("split the layers over several machines with mpiexec (the README's "
                           "section on it)")
    else:
        whose = (f" for the {counted(comm.local_size, 'process', 'processes')} of this job "
                 "on it (each with its block of the layers)")
        more = ("run the job over more machines (more processes on this one share its memory: "
                "they do not help)")
    raise DestinyError(
        f"out of memory: training needs at least {sized(needed)} of this machine's memory"
        f"{whose}, for {what}, and {sized(available)} is free ({source}); "
        f"{sized(by_layer[layer])} of it is for layer {layer!r}, of {counted(n, 'unit')} "
        "(its weights, to and from narrower layers, and its activations and deltas). Nothing was "
        "trained, "
        f"and no output was replaced. Use fewer units, {more}, or run on a machine with more "
        f"memory.{limited}")
