"""Kernels: the same functions in ``reference`` (NumPy), ``cpu`` (numba) and ``cuda`` (numba.cuda).

Conventions for every backend:

* Dimension letters: ``B`` batch rows, ``I`` input units (features), ``O`` output units,
  ``K`` entries of a CSR batch.
* Kernels take raw arrays only. A CSR batch is ``(indptr, indices, values)``: ``indptr`` int64
  of length B + 1, ``indices`` int32 of length K, ``values`` float32 of length K, or of length
  0 for indicator data (every listed value is 1). Dense arrays are C-contiguous float32.
* Outputs are passed in, first; kernels allocate nothing the caller can reuse.
"""
