"""NumPy reference for every kernel: slow, obviously correct, the oracle for the tests.

One module per kernel family, mirroring ``destiny.kernels.cpu`` file for file, so that
``reference.sparse.sparse_fc_forward`` and ``cpu.sparse.sparse_fc_forward`` sit side by side.
See ``destiny.kernels`` for the conventions (dimension letters, CSR batches, outputs first).
"""
