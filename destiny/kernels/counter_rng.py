"""Counter-based random numbers: every draw is a hash of (key, row, column), never a stream.

Dropout and denoising masks must be the same whether a layer lives in one process or is split
across MPI ranks (each rank holding some columns), and the same on the CPU and on a GPU (where
each thread draws its own element). A sequential generator gives neither. Here the uniform for
element (row, col) of a draw is

    u = top 24 bits of mix64(key ^ mix64(row << 32 | col)) / 2**24        in [0, 1)

with ``mix64`` the SplitMix64 finaliser (Steele, Lea and Flood, 2014), so any process can draw
any element on its own. The backends implement the per-element hash (``kernels/*/rng.py``);
this module derives the 64-bit ``key`` of each draw from the run's seed on the host.
"""

from __future__ import annotations

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
MUL1 = 0xBF58476D1CE4E5B9
MUL2 = 0x94D049BB133111EB
UNIFORM_SHIFT = 40  # keep 24 bits: exactly representable in float32
UNIFORM_SCALE = 1.0 / (1 << 24)

# What a key is for: the first part after the seed, so that two kinds of draw never share a key.
DENOISE = 1
DROPOUT = 2


def mix64(z: int) -> int:
    """SplitMix64's finaliser on a Python int (the backends compute the same in uint64)."""
    z &= MASK64
    z = ((z ^ (z >> 30)) * MUL1) & MASK64
    z = ((z ^ (z >> 27)) * MUL2) & MASK64
    return z ^ (z >> 31)


def stream_key(seed: int, *parts: int) -> int:
    """The 64-bit key of one draw, from the seed and what the draw is for (epoch, layer, ...)."""
    key = mix64(seed + GOLDEN)
    for part in parts:
        key = mix64(key ^ ((part + GOLDEN) & MASK64))
    return key
