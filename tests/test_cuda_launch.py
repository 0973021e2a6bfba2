"""The CUDA kernels' own launcher (destiny.kernels.cuda.launch): its argument layout here, and
on a real GPU that it computes what numba's launch computes, falling back to numba's launch
for arrays it does not pack itself."""

from __future__ import annotations

import struct

import numpy as np
import pytest
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


@pytest.mark.gpu
def test_launcher_matches_numbas_launch_and_falls_back_for_strided_arrays():
    from numba import cuda

    def fill(out, x, scale, flag, shift):
        i = cuda.grid(1)
        if i < out.shape[0]:
            out[i] = x[i, 0] * scale + (shift if flag else 0)

    fast = launch._Launcher(cuda.jit(fill))
    plain = cuda.jit(fill)
    x = cuda.to_device(np.arange(128, dtype=np.float32).reshape(64, 2))
    for out_array, src in ((cuda.device_array(32, np.float32), x[:32]),
                           (cuda.device_array(32, np.float32), x[::2])):  # strided rows
        fast[1, 32](out_array, src, np.float32(2), True, 3)
        expected = cuda.device_array(32, np.float32)
        plain[1, 32](expected, src, np.float32(2), True, 3)
        np.testing.assert_array_equal(out_array.copy_to_host(), expected.copy_to_host())
    # One signature compiled by the launcher; the strided call went through numba's launch.
    assert len(fast._compiled) == 1 and None not in fast._compiled.values()
