"""The counter-based uniforms of every backend: bit for bit the same draws (counter_rng).

Dropout and denoising masks must not depend on where a layer runs (cpu or GPU) or how it is
split across ranks, so every backend must compute exactly the hash of (key, row, column).
"""

from __future__ import annotations

import numpy as np
import pytest

from destiny.kernels import counter_rng
from destiny.kernels.counter_rng import DENOISE, DROPOUT, stream_key
from .backends import family, tiny

BACKENDS = family("rng")
KEYS = [stream_key(12134, DROPOUT, 3, 1), stream_key(7, DENOISE, 0, 0), 0, (1 << 64) - 1]


def mix64(z):
    """SplitMix64's finaliser with its published constants, written out here rather than
    imported: the backends share ``counter_rng``'s constants, so an oracle built on them would
    agree with a mistyped one."""
    z &= (1 << 64) - 1
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & ((1 << 64) - 1)
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & ((1 << 64) - 1)
    return z ^ (z >> 31)


def python_uniform(key, row, col):
    """The formula of ``destiny.kernels.counter_rng`` on Python ints: the independent oracle."""
    return (mix64(key ^ mix64((row << 32) | col)) >> 40) / (1 << 24)


def test_mix64_is_splitmix64():
    """The first outputs of SplitMix64 seeded with 0 (mix64 of i times the golden gamma), as
    its reference implementation gives them, from the oracle and from ``counter_rng``."""
    golden = 0x9E3779B97F4A7C15
    first = [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F, 0xF88BB8A8724C81EC,
             0x1B39896A51A8749B]
    for i, expected in enumerate(first, start=1):
        z = (i * golden) & ((1 << 64) - 1)
        assert mix64(z) == counter_rng.mix64(z) == expected
    assert counter_rng.GOLDEN == golden


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("key", KEYS, ids=["dropout", "denoise", "zero", "ones"])
def test_uniform_fill_is_the_hash_of_each_element(backend, key):
    # Offsets past 2**32 in the columns and large rows: every bit of the counter matters.
    rows, cols = (3, 4) if tiny(backend) else (17, 29)
    out = np.full((rows, cols), np.nan, dtype=np.float32)
    BACKENDS[backend].uniform_fill(out, key, 1000, (1 << 33) + 5)
    expected = [[python_uniform(key, 1000 + r, (1 << 33) + 5 + j) for j in range(cols)]
                for r in range(rows)]
    np.testing.assert_array_equal(out, np.array(expected, dtype=np.float32))
    assert np.all((out >= 0.0) & (out < 1.0))


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_uniform_fill_equals_reference_and_blocks_tile_the_draw(backend):
    # A block at (row_offset, col_offset) is that block of the whole draw: a rank holding
    # columns 3.. of a layer draws what a single process draws there.
    key = KEYS[0]
    rows, cols = (4, 6) if tiny(backend) else (64, 300)
    whole = np.empty((rows, cols), dtype=np.float32)
    BACKENDS["reference"].uniform_fill(whole, key, 0, 0)
    got = np.empty((rows, cols), dtype=np.float32)
    BACKENDS[backend].uniform_fill(got, key, 0, 0)
    np.testing.assert_array_equal(got, whole)
    block = np.empty((rows - 1, cols - 3), dtype=np.float32)
    BACKENDS[backend].uniform_fill(block, key, 1, 3)
    np.testing.assert_array_equal(block, whole[1:, 3:])


def random_csr(rng, rows, features, max_per_row):
    lengths = rng.integers(0, max_per_row + 1, size=rows)
    lengths[::3] = 0  # empty rows
    lengths[-1] = max_per_row  # and a full last one
    indptr = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    return indptr, rng.integers(0, features, size=indptr[-1]).astype(np.int32)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("dtype", [np.bool_, np.uint8])
@pytest.mark.parametrize("p_at", ["0.3", "a draw"])
def test_denoise_keep_equals_the_hash(backend, dtype, p_at):
    """keep is u >= p: with p one entry's own draw (exact), that entry is kept."""
    rng = np.random.default_rng(1)
    rows = 5 if tiny(backend) else 40
    indptr, indices = random_csr(rng, rows, 1000, 6)
    key, p = KEYS[1], 0.3
    if p_at == "a draw":  # the first entry's uniform, which u >= p keeps and u > p would not
        first = int(np.searchsorted(indptr, 0, side="right")) - 1
        p = python_uniform(key, 20 + first, 500 + int(indices[0]))
    keep = np.full(len(indices), 7, dtype=dtype)
    BACKENDS[backend].denoise_keep(keep, indptr, indices, key, 20, 500, p)
    row_of = np.repeat(np.arange(rows), np.diff(indptr))
    expected = [python_uniform(key, 20 + int(r), 500 + int(i)) >= p
                for r, i in zip(row_of, indices, strict=True)]
    np.testing.assert_array_equal(keep.astype(bool), expected)
    assert set(np.unique(keep).tolist()) <= {0, 1}
    if p_at == "a draw":
        assert keep[0]


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_denoise_keep_of_an_empty_matrix(backend):
    keep = np.zeros(0, dtype=np.bool_)
    BACKENDS[backend].denoise_keep(keep, np.zeros(4, dtype=np.int64), np.zeros(0, dtype=np.int32),
                                   KEYS[0], 0, 0, 0.5)
    BACKENDS[backend].uniform_fill(np.zeros((0, 3), dtype=np.float32), KEYS[0], 0, 0)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_denoise_keep_of_a_single_row(backend):
    """A batch of one row (the last of an epoch can be one): its entries are drawn too."""
    key, indices = KEYS[1], np.array([3, 0, 999, 3], dtype=np.int32)
    keep = np.full(4, 7, dtype=np.uint8)
    BACKENDS[backend].denoise_keep(keep, np.array([0, 4], dtype=np.int64), indices, key, 20,
                                   500, 0.3)
    expected = [python_uniform(key, 20, 500 + int(i)) >= 0.3 for i in indices]
    np.testing.assert_array_equal(keep, np.array(expected, dtype=np.uint8))
