"""numba CPU kernels, mirroring ``destiny.kernels.reference`` name for name."""
