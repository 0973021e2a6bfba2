"""The CUDA backend's host side, which the simulator does not run: the kernels' own launcher
(destiny.kernels.cuda.launch) and the staged uploads of ``to_device``.

Here, with stand-ins for numba's dispatcher, its device arrays and the driver: the launcher's
argument layout and what it would hand cuLaunchKernel, and the uploads' staging slots. On a
real GPU: that the launcher computes what numba's launch computes, falling back to numba's
launch for arrays it does not pack itself."""

from __future__ import annotations

import ctypes
import functools
import pathlib
import struct
import sys
import types as pytypes

import numpy as np
import pytest
from numba import config
from numba.core import types

from destiny.kernels.cuda import launch


def test_param_layout_places_each_argument_at_its_alignment():
    f32_2d = types.Array(types.float32, 2, "C")
    fmt, offsets = launch.param_layout((f32_2d, types.float32, types.boolean, types.int64,
                                        types.uint64, types.int32, types.float64))
    # An array is meminfo, parent, size, itemsize, data, 2 shapes and 2 strides: 9 x 8 bytes.
    assert offsets[:9] == [8 * i for i in range(9)]
    # float32 at 72, bool at 76, int64 aligned up to 80, uint64 88, int32 96, float64 104.
    assert offsets[9:] == [72, 76, 80, 88, 96, 104]
    assert struct.calcsize(fmt) == 112
    values = (0, 0, 6, 4, 1234, 2, 3, 12, 4, 1.5, True, -7, 2**64 - 1, 5, 0.25)
    packed = struct.pack(fmt, *values)
    assert struct.unpack_from("@q", packed, 80)[0] == -7
    assert struct.unpack_from("@Q", packed, 88)[0] == 2**64 - 1
    assert struct.unpack_from("@f", packed, 72)[0] == 1.5


def test_param_layout_of_a_one_dimensional_array_and_scalars():
    fmt, offsets = launch.param_layout((types.Array(types.uint32, 1, "C"), types.int64))
    assert fmt == "@PPqqPqqq"
    assert offsets == [0, 8, 16, 24, 32, 40, 48, 56]
    # 32-bit integers by their sign: a negative int32, a uint32 of 2**31 or more
    fmt, _ = launch.param_layout((types.int32, types.uint32))
    assert struct.unpack(fmt, struct.pack(fmt, -5, 2**32 - 1)) == (-5, 2**32 - 1)


def test_blocks_for_covers_the_items_up_to_max_blocks():
    """One thread per item, the last block part-filled, at most MAX_BLOCKS (the kernels loop
    over the rest with a grid stride)."""
    t = launch.THREADS
    assert [launch.blocks_for(n) for n in (0, 1, t, t + 1)] == [1, 1, 1, 2]
    assert launch.blocks_for(t * launch.MAX_BLOCKS * 3) == launch.MAX_BLOCKS


@pytest.mark.gpu
def test_launcher_matches_numbas_launch_and_falls_back_for_strided_arrays():
    from numba import cuda

    def fill(out, x, scale, flag, shift, pair):
        i = cuda.grid(1)
        if i < out.shape[0]:
            out[i] = x[i, 0] * scale + (shift if flag else 0) + pair[0] * pair[1]

    fast = launch._Launcher(cuda.jit(fill))
    plain = cuda.jit(fill)
    x = cuda.to_device(np.arange(128, dtype=np.float32).reshape(64, 2))
    for out_array, src in ((cuda.device_array(32, np.float32), x[:32]),
                           (cuda.device_array(32, np.float32), x[::2])):  # strided rows
        fast[1, 32](out_array, src, np.float32(2), True, 3, (0.5, 3))
        expected = cuda.device_array(32, np.float32)
        plain[1, 32](expected, src, np.float32(2), True, 3, (0.5, 3))
        np.testing.assert_array_equal(out_array.copy_to_host(), expected.copy_to_host())
    # One signature compiled by the launcher; the strided call went through numba's launch.
    assert len(fast._compiled) == 1 and None not in fast._compiled.values()


class _FakeArray:
    """Stands in for a numba device array: what the launcher reads of one."""

    def __init__(self, shape, dtype, pointer, strides=None):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.size = int(np.prod(shape))
        c_strides = np.empty(shape, dtype).strides if self.size else (0,) * len(shape)
        self.strides = tuple(strides) if strides is not None else c_strides
        # (numba's is a c_void_p: for an empty array c_void_p(0), whose value is None)
        self.device_ctypes_pointer = ctypes.c_void_p(pointer)


class _FakeDispatcher:
    """Stands in for numba's dispatcher: types arguments, compiles, launches by itself."""

    def __init__(self):
        self.compiled, self.fallbacks = [], []

        def kernel_body(a, b):  # the py_func the launcher names in its errors
            pass
        self.py_func = kernel_body

    def typeof_pyval(self, value):
        if isinstance(value, _FakeArray):
            c = value.strides == np.empty(value.shape, value.dtype).strides
            return types.Array(types.float32 if value.dtype == np.float32 else types.int64,
                               len(value.shape), "C" if c or not value.size else "A")
        if isinstance(value, tuple):
            return types.Tuple([self.typeof_pyval(v) for v in value])
        return {int: types.int64, float: types.float64, bool: types.boolean,
                np.float32: types.float32, np.uint64: types.uint64}[type(value)]

    def compile(self, argtypes):
        self.compiled.append(argtypes)
        cufunc = pytypes.SimpleNamespace(handle=ctypes.c_void_p(0xC0DE))
        return pytypes.SimpleNamespace(
            _codelibrary=pytypes.SimpleNamespace(get_cufunc=lambda: cufunc))

    def __getitem__(self, config):
        return lambda *args: self.fallbacks.append((config, args))


def _recorder(calls):
    """A stand-in for cuLaunchKernel that keeps what each launch was given: its arguments as
    the bytes from the first one's address to the end of the last (an 8-byte one in these
    tests), and each one's offset in them."""
    def cu_launch_kernel(handle, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        base = params[0]
        offsets = [p - base for p in params]
        calls.append((handle, (gx, gy, gz), (bx, by, bz),
                      (ctypes.string_at(base, offsets[-1] + 8), offsets)))
        return 0
    return lambda: cu_launch_kernel


@pytest.fixture
def stand_ins(monkeypatch):
    """(a launcher of a stand-in dispatcher, that dispatcher, the recorded launches)."""
    monkeypatch.setattr(launch, "DeviceNDArrayBase", _FakeArray)
    calls = []
    monkeypatch.setattr(launch, "_driver_launch", _recorder(calls))
    dispatcher = _FakeDispatcher()
    return launch._Launcher(dispatcher), dispatcher, calls


def test_launcher_packs_numbas_kernel_abi_and_compiles_once(stand_ins):
    """Without a GPU: the arguments the driver would get, read back from the pointers."""
    fast, dispatcher, calls = stand_ins
    W = _FakeArray((5, 3), np.float32, 0x1000)
    rows = _FakeArray((4,), np.int64, 0x2000)
    fast[7, (32, 2)](W, rows, np.float32(0.5), True, -3, np.uint64(2**64 - 1))
    fast[1, 32](W, rows, np.float32(0.25), False, 9, np.uint64(1))
    assert len(dispatcher.compiled) == 1 and not dispatcher.fallbacks
    (handle, grid, block, first), (_, _, _, second) = calls
    assert handle == 0xC0DE and grid == (7, 1, 1) and block == (32, 2, 1)

    def read(index, ctype, launch=first):
        data, offsets = launch
        return ctype.from_buffer_copy(data, offsets[index]).value

    q, f, b, u = ctypes.c_int64, ctypes.c_float, ctypes.c_bool, ctypes.c_uint64
    # W: meminfo, parent, size, itemsize, data, shape (5, 3), strides (12, 4)
    assert [read(i, q) for i in range(9)] == [0, 0, 15, 4, 0x1000, 5, 3, 12, 4]
    # rows: size 4, itemsize 8, data, shape (4,), strides (8,)
    assert [read(i, q) for i in range(9, 16)] == [0, 0, 4, 8, 0x2000, 4, 8]
    assert read(16, f) == 0.5 and read(17, b) is True and read(18, q) == -3
    assert read(19, u) == 2**64 - 1
    assert read(16, f, second) == 0.25 and read(17, b, second) is False
    assert read(18, q, second) == 9 and read(19, u, second) == 1


def test_launcher_passes_a_tuple_of_scalars_as_its_items(stand_ins):
    """numba flattens a tuple argument into one kernel parameter per item (the loss kernel's
    parameters are one): the launcher packs them in turn instead of leaving it to numba."""
    fast, dispatcher, calls = stand_ins
    x = _FakeArray((3,), np.float32, 0x4000)
    fast[1, 32](x, True, (1.5, 2.5, 7))
    fast[1, 32](x, False, (0.5, -1.0, 8))
    assert not dispatcher.fallbacks and len(dispatcher.compiled) == 1
    fmt, _ = launch.param_layout(dispatcher.compiled[0])
    assert fmt == "@PPqqPqq" + "?" + "ddq"
    for (_, _, _, (data, offsets)), expected in zip(calls, [(True, 1.5, 2.5, 7),
                                                             (False, 0.5, -1.0, 8)], strict=True):
        items = [c.from_buffer_copy(data, offsets[7 + i]).value
                 for i, c in enumerate((ctypes.c_bool, ctypes.c_double, ctypes.c_double,
                                        ctypes.c_int64))]
        assert items == list(expected)
    fast[1, 32](x, True, (1.5, x))  # a tuple holding an array: numba's own launch
    assert len(dispatcher.fallbacks) == 1


def test_launcher_leaves_strided_and_foreign_arrays_to_numba(stand_ins):
    fast, dispatcher, calls = stand_ins
    strided = _FakeArray((4, 2), np.float32, 0x3000, strides=(16, 4))
    fast[1, 32](strided, 1)
    fast[1, 32](np.zeros(3, np.float32), 1)  # a host array: numba copies it
    empty = _FakeArray((0, 2), np.float32, 0)
    fast[1, 32](empty, 1)  # empty: typed C-contiguous, packed by the launcher (null pointer 0)
    assert len(dispatcher.fallbacks) == 2 and len(calls) == 1
    assert dispatcher.compiled == [(types.Array(types.float32, 2, "C"), types.int64)]


def test_launcher_reports_the_drivers_error(stand_ins, monkeypatch):
    fast = stand_ins[0]
    monkeypatch.setattr(launch, "_driver_launch",
                        lambda: lambda *args: 1)  # CUDA_ERROR_INVALID_VALUE
    monkeypatch.setattr(launch, "_error_name", lambda code: f"CUDA_ERROR_INVALID_VALUE ({code})")
    with pytest.raises(RuntimeError, match=r"kernel_body \(grid \(1, 1, 1\), block \(32, 1, "
                                           r"1\)\) failed: CUDA_ERROR_INVALID_VALUE \(1\)"):
        fast[1, 32](_FakeArray((2,), np.float32, 0x10), 1)


def test_launcher_compiles_a_signature_for_each_argument_type(stand_ins):
    """The compiled kernel is looked up by the types of every argument: another scalar or
    array type anywhere in the list is another signature, packed by its own layout."""
    fast, dispatcher, calls = stand_ins
    W = _FakeArray((5, 3), np.float32, 0x1000)
    rows = _FakeArray((4,), np.int64, 0x2000)
    fast[1, 32](W, rows, np.float32(0.5), 3)
    fast[1, 32](W, rows, np.float32(0.5), 3.0)  # a float64 where the int64 was
    fast[1, 32](W, W, np.float32(0.5), 3)  # a float32 matrix where the int64 vector was
    fast[1, 32](W, rows, np.float32(0.5), 4)  # the first signature again
    assert len(dispatcher.compiled) == 3 and not dispatcher.fallbacks
    assert dispatcher.compiled[1][3] == types.float64
    assert dispatcher.compiled[2][1] == types.Array(types.float32, 2, "C")
    data, offsets = calls[1][3]
    assert ctypes.c_double.from_buffer_copy(data, offsets[-1]).value == 3.0


def test_launcher_leaves_a_signature_numba_types_non_contiguous_to_numba(stand_ins):
    """Arrays the launcher finds C-contiguous but numba types otherwise ("A": a layout the
    kernel would be compiled for and packed as C) go through numba's own launch."""
    fast, dispatcher, calls = stand_ins
    typeof = dispatcher.typeof_pyval
    dispatcher.typeof_pyval = lambda value: (types.Array(types.float32, 1, "A")
                                             if isinstance(value, _FakeArray) else typeof(value))
    fast[1, 32](_FakeArray((3,), np.float32, 0x4000), 1)
    assert len(dispatcher.fallbacks) == 1 and not calls and not dispatcher.compiled


def test_launcher_makes_a_thread_new_to_the_device_current_and_launches_again(stand_ins,
                                                                             monkeypatch):
    """cuLaunchKernel on a thread that has not used the device answers
    CUDA_ERROR_INVALID_CONTEXT (201): the launcher has numba make the context current there,
    then launches again."""
    fast = stand_ins[0]
    answers, made_current = [201, 0], []
    launched = []

    def cu_launch_kernel(handle, *args):
        launched.append(handle)
        return answers.pop(0)

    monkeypatch.setattr(launch, "_driver_launch", lambda: cu_launch_kernel)
    monkeypatch.setattr(launch, "cuda", pytypes.SimpleNamespace(
        current_context=lambda: made_current.append(True)))
    fast[1, 32](_FakeArray((2,), np.float32, 0x10), 1)
    assert launched == [0xC0DE, 0xC0DE] and made_current == [True] and not answers


def test_destiny_cuda_launch_numba_keeps_numbas_own_launch(monkeypatch):
    """On a GPU every kernel goes through the launcher; DESTINY_CUDA_LAUNCH=numba (to compare
    the two: README, docs/benchmarks.md) keeps numba's own."""
    dispatcher = _FakeDispatcher()
    monkeypatch.setattr(launch, "SIMULATED", False)
    monkeypatch.setattr(launch, "cuda", pytypes.SimpleNamespace(jit=lambda fn: dispatcher))
    make = launch.kernel
    if isinstance(make, functools.partial):  # (make test's recorder: tests/cuda_signatures.py)
        make = make.args[0]
    monkeypatch.delenv("DESTINY_CUDA_LAUNCH", raising=False)
    assert make(dispatcher.py_func).dispatcher is dispatcher
    monkeypatch.setenv("DESTINY_CUDA_LAUNCH", "numba")
    assert make(dispatcher.py_func) is dispatcher


def test_reshaped_and_viewed_are_kept_per_shape_and_dtype():
    """A scratch array is reshaped to each call's shape (top_k's keys: [B, N] of one size in
    another shape): each shape and dtype its own view, each made once."""
    x = np.arange(12, dtype=np.float32)
    holder = pytypes.SimpleNamespace(reshape=x.reshape, view=x.view)
    a = launch.reshaped(holder, (3, 4))
    assert launch.reshaped(holder, (3, 4)) is a and a.shape == (3, 4)
    assert launch.reshaped(holder, (4, 3)).shape == (4, 3)
    assert launch.viewed(holder, np.uint32).dtype == np.uint32
    assert launch.viewed(holder, np.int32).dtype == np.int32
    assert launch.viewed(holder, np.uint32) is launch.viewed(holder, np.uint32)


def test_only_arrays_that_fit_a_staging_slot_take_one(monkeypatch):
    """On a GPU (not the simulator), ``to_device`` and ``download`` stage arrays of at most
    SLOT_BYTES (a batch's row numbers and offsets) and copy larger ones at once: a larger one
    would write over the next slot."""
    from destiny.kernels.cuda import dense

    staging, _, _ = staging_with_stand_ins(monkeypatch, 2)
    monkeypatch.setattr(dense, "SIMULATED", False)
    monkeypatch.setattr(dense, "_staging", lambda: staging)
    assert dense._slot(dense._Staging.SLOT_BYTES) == 0
    assert dense._slot(dense._Staging.SLOT_BYTES + 1) is None
    assert dense._slot(1) == 1


def staging_with_stand_ins(monkeypatch, slots):
    """cuda/dense.py's ``_Staging`` on stand-ins for numba.cuda, and the log of its events."""
    from destiny.kernels.cuda import dense

    log = []

    class Event:
        def __init__(self, timing):
            self.number = sum(1 for entry in log if entry[0] == "event")
            log.append(("event", self.number))

        def record(self, stream):
            log.append(("record", self.number, stream))

        def synchronize(self):
            log.append(("wait", self.number))

    class DeviceArray:
        def __init__(self, shape, dtype):
            self.shape, self.dtype = shape, np.dtype(dtype)
            self.nbytes = int(np.prod(shape)) * self.dtype.itemsize

        def copy_to_device(self, host, stream):
            self.source, self.data, self.stream = host, host.copy(), stream

        def copy_to_host(self, host, stream):
            host[...] = self.data
            self.target = host

    monkeypatch.setattr(dense, "cuda", pytypes.SimpleNamespace(
        pinned_array=lambda n, dtype: np.zeros(n, dtype), event=Event,
        default_stream=lambda: "legacy", device_array=DeviceArray))
    monkeypatch.setattr(dense._Staging, "SLOTS", slots)
    staging = dense._Staging()
    del log[:]
    return staging, log, DeviceArray


def test_uploads_stage_in_page_locked_slots_and_wait_before_reusing_one(monkeypatch):
    """``to_device``'s staging (cuda/dense.py ``_Staging``), with stand-ins for numba.cuda."""
    staging, log, _ = staging_with_stand_ins(monkeypatch, 2)

    def upload(array):
        return staging.upload(staging.take(), array)

    rows = np.arange(5, dtype=np.int64)
    first = upload(rows)
    second = upload(np.array([[1, 2], [3, 4]], dtype=np.int32))
    rows[:] = -1  # the host array may change once the copy is queued: it was staged
    third = upload(np.array([7, 8], dtype=np.int64))
    assert first.data.tolist() == [0, 1, 2, 3, 4] and first.stream == "legacy"
    assert second.data.tolist() == [[1, 2], [3, 4]] and second.data.dtype == np.int32
    assert third.data.tolist() == [7, 8]
    for out in (first, second, third):  # each copied from the page-locked memory
        assert np.shares_memory(out.source, staging.host)
    # slot 0 is used again only after its first copy is done
    assert log == [("record", 0, "legacy"), ("record", 1, "legacy"), ("wait", 0),
                   ("record", 0, "legacy")]


def test_a_download_holds_its_slot_until_its_get(monkeypatch):
    """``download``'s staging: the copy is queued into a slot and an event recorded; ``get()``
    waits for that event alone, copies the slot out and frees it; an upload meanwhile takes
    another slot, and with every slot held there is none to take (a copy at once instead)."""
    staging, log, DeviceArray = staging_with_stand_ins(monkeypatch, 2)
    scores = DeviceArray((2, 2), np.float32)
    scores.data = np.array([[0.5, 0.25], [1, 2]], np.float32)
    pending = staging.download(staging.take(), scores)
    assert np.shares_memory(scores.target, staging.host)
    uploaded = staging.upload(staging.take(), np.arange(3, dtype=np.int64))
    assert not np.shares_memory(uploaded.source, scores.target)  # slot 1, not the held slot 0
    other = staging.download(staging.take(), scores)  # slot 1 again: its upload is done first
    assert staging.take() is None  # both held
    assert log == [("record", 0, "legacy"), ("record", 1, "legacy"), ("wait", 1),
                   ("record", 1, "legacy")]
    del log[:]
    got = pending.get()
    assert log == [("wait", 0)] and got.tolist() == [[0.5, 0.25], [1, 2]]
    assert not np.shares_memory(got, staging.host) and pending.get() is got
    assert staging.take() == 0  # free again
    assert other.get().tolist() == [[0.5, 0.25], [1, 2]]
    dropped = staging.download(staging.take(), scores)  # never fetched: freed when dropped,
    held = dropped.slot                                  # once its copy is done
    del log[:]
    del dropped
    assert log == [("wait", held)] and not staging.held[held]


_POOL_CHECK = """
import os, sys, types

class Pool:
    def __init__(self):
        self.blocks = 0
    def malloc(self, size):
        self.blocks += 1
        return types.SimpleNamespace(ptr=0x1000 * self.blocks)

gpus = [1]
cupy = types.ModuleType("cupy")
cupy.get_default_memory_pool = lambda pool=Pool(): pool
cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(
    getDeviceCount=lambda: gpus[0], memGetInfo=lambda: (5, 9)))
sys.modules["cupy"] = cupy
from numba import cuda
from destiny.kernels.cuda import memory

chosen = []
cuda.set_memory_manager = chosen.append
assert memory.install() and chosen == [memory.CuPyPool], chosen
for name in ("CUPY_CUDA_PER_THREAD_DEFAULT_STREAM", "NUMBA_CUDA_PER_THREAD_DEFAULT_STREAM"):
    os.environ[name] = "1"
    assert not memory.install(), name
    os.environ[name] = "0"
    assert memory.install(), name
gpus[0] = 0
assert not memory.install() and len(chosen) == 3
pool = memory.CuPyPool(context=None)
pointer = pool.memalloc(64)
assert list(pool._blocks) == [0x1000] and pool.get_memory_info() == (5, 9)
pointer.free()
assert pool._blocks == {}
print("ok")
"""


def test_numbas_allocations_come_from_cupys_pool_only_where_that_is_safe():
    """cuda/memory.py with a stand-in for CuPy, in a process of its own where numba.cuda is
    itself (the simulator has no memory managers): ``install`` hands numba CuPy's pool when
    CuPy sees a GPU, not with a per-thread default stream asked of either library, nor
    without a GPU; and a block goes back to the pool when numba frees its array."""
    import os
    import subprocess

    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}
    for name in ("CUPY_CUDA_PER_THREAD_DEFAULT_STREAM", "NUMBA_CUDA_PER_THREAD_DEFAULT_STREAM"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-c", _POOL_CHECK], env=env, capture_output=True,
                          text=True, cwd=pathlib.Path(__file__).parents[1])
    assert done.stdout == "ok\n", done.stderr


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="counts the simulator's launches")
def test_a_training_step_launches_only_what_the_launcher_takes_and_makes_no_arrays():
    """The host's side of a benchmark-network step on a GPU, counted under the simulator by
    scripts/count_launches.py: every launch is one the launcher packs itself (a tuple holding
    an array, or a strided array, would take numba's launch, twice the cost or more); the
    only device arrays made are the batch's own (its row numbers, row offsets and gathered
    indices: each costs the host about 20 us); the one copy back is the loss. The launch
    count is the budget of docs/benchmarks.md: a change that adds launches updates both."""
    sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "scripts"))
    try:
        from count_launches import count
    finally:
        sys.path.pop(0)
    found = count(str(pathlib.Path(__file__).parents[1] / "netdefs" / "benchmark.json"),
                  steps=1)
    train, predict = found["train"], found["predict"]
    assert not train.slow and not predict.slow
    assert train.arrays == 3 and train.uploads == 2 and train.downloads == 1
    # 37 until the feature counts' prefix sum took three kernels over up to 64 blocks (one
    # block walked 5,860 features a thread at 3 M features): 2 launches, about 20 us a step.
    assert sum(train.launches.values()) == 39, dict(train.launches)
    assert sum(predict.launches.values()) == 11, dict(predict.launches)
