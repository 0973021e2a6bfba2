"""Whether a training run can fit in its machine's memory, told before its weights are allocated.

Linux lets a process allocate more than the machine has (overcommit): the pages are taken when
first written. One process asking for a matrix larger than the machine is refused at once (a
MemoryError, worded by ``errors.system_failure``), but the ranks of ``mpiexec`` each ask for
their smaller block, are each granted it, and the kernel's OOM killer ends the job as the
weights are drawn: exit status 9 and no message. So, before any rank allocates its weights,
each adds up the bytes that the ranks on its machine will certainly write (``training_bytes``)
and compares them with the memory the machine has free (``available_memory``).

The estimate is a lower bound, so that no job that would run is refused: every rank's block of
the weights and biases, which are drawn whole; and, where training runs at least one batch, the
gradients of the matrices fed by a dense layer (a product writes all of them), the optimizer
state of every matrix and bias (the first update after the weights are drawn or loaded is dense,
and writes all of it: a network that fitted without it was ended by the OOM killer at its first
step, in one process too), and every layer's activations and deltas for a batch. Left out: the
gradients of a sparse input's matrix (written only in the rows a batch lists), the data (already
read), the buffers a batch may leave untouched (dropout's), the temporaries, and what the process
maps as it loads its kernels (their code: the resident memory of warm runs on tiny data grew by
60-86 MiB more than their arrays, but the address space a ``ulimit -v`` counts by less).
"""

from __future__ import annotations

import os

from destiny import shard
from destiny.addrspace import ADDRESS_SPACE_LIMIT, RAISE_THE_LIMIT, address_space_left
from destiny.errors import DestinyError
from destiny.netdef import LayerKind
from destiny.parallel import unit_range
from destiny.wording import counted, sized

# A cgroup's memory limit at or above this is no limit (v1 writes 2**63 rounded to pages).
_NO_LIMIT = 1 << 60


def training_bytes(net, rank: int, *, batch_rows: int, states: int) -> dict[str, int]:
    """The bytes rank ``rank`` of ``net.comm.size`` will certainly write, by layer (a layer
    counts the matrices to and from it with fewer units than it has, and its activations): see
    the module's note. ``batch_rows``: the rows of the first batch (0 where no batch is run);
    ``states``: the optimizer's state arrays per parameter (0 to 2)."""
    size, item = net.comm.size, net.dtype.itemsize

    def units(name: str) -> tuple[int, int]:
        return unit_range(net.layers[name].n, rank, size)

    def width(span: tuple[int, int]) -> int:
        return span[1] - span[0]

    found = {name: 0 for name in net.layers}
    for c in net.connections:
        rows = width(units(c.source.name)) if c.layout == shard.ROWS else c.source.n
        cols = width(units(c.dest.name)) if c.layout == shard.COLS else c.dest.n
        local = width(units(c.dest.name))
        weights = 0 if c.shared else rows * cols
        gradient = weights if batch_rows and c.source.kind != LayerKind.Input else 0
        state = states * weights if batch_rows else 0
        # (a matrix counts for the wider of its two layers: the one that makes it large)
        wider = c.source.name if c.source.n > c.dest.n else c.dest.name
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


def check_training_memory(net, *, batch: int, examples: int, epochs: int, states: int) -> None:
    """Raise a ``DestinyError`` where the ranks on this machine (``comm.local_ranks``; one process
    alone) need more than it has free to train ``net`` (``training_bytes``, with the optimizer's
    ``states`` arrays per parameter), before they allocate the weights. Every rank computes every
    rank's share from the layout alone, without a collective; call it where no rank has allocated
    its weights yet. Where the memory free cannot be read, nothing is refused."""
    found = available_memory()
    if found is None:
        return
    available, source = found
    comm = net.comm
    rows = min(batch, examples) if epochs > 0 else 0
    by_layer: dict[str, int] = {}
    for rank in comm.local_ranks:
        for name, nbytes in training_bytes(net, rank, batch_rows=rows, states=states).items():
            by_layer[name] = by_layer.get(name, 0) + nbytes
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
