#!/usr/bin/env python3
"""Compile every CUDA kernel for a real GPU, on a machine without one.

Under numba's simulator (how CI tests the CUDA backend) a kernel runs as Python, so code that
numba.cuda's compiler refuses, or types differently, would be found only when a GPU is lent.
This compiles each kernel, for each signature a test run launched it with, to PTX for a real
architecture with numba-cuda's compiler (NVVM, which needs no GPU), at a real GPU's launch
sizes (the simulator's are tiny, and shared arrays are sized by them). A kernel no test
launched is reported too.

    DESTINY_CUDA_SIGNATURES=build/cuda-signatures.json pytest      # conftest.py records
    python scripts/cuda_compile_check.py --signatures build/cuda-signatures.json

`make test` does both; the second needs numba-cuda (`pip install 'numba-cuda[cu12]'`), in an
environment of its own (see the Makefile). Exit status 1 if any signature fails to compile
(with numba's message) or any kernel was never launched. With ``--resources`` each compiled
kernel also goes through ptxas (from the same wheels), which says what it would occupy on the
GPU: registers per thread, shared memory per block, and any spills to local memory.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import types

import click

def host_value(d):
    """A host value that numba types as the recorded argument (``tests/cuda_signatures.py``
    describes them): a NumPy array types as a device array of its dtype, dimensions and
    layout does."""
    import numpy as np

    kind = d[0]
    if kind == "tuple":
        return tuple(host_value(x) for x in d[1])
    if kind == "scalar":
        return True if d[1] == "bool" else np.dtype(d[1]).type(0)
    _, dtype, ndim, layout = d
    a = np.empty((2,) * ndim, dtype=dtype)
    if layout == "F":
        a = np.asfortranarray(a)
    elif layout == "A":
        a = a[(slice(None),) * (ndim - 1) + (slice(None, None, 2),)]
    return a


def short(numba_type) -> str:
    """``float32[:, :]`` for a 2-D float32 array type; a scalar's or tuple's own name."""
    if hasattr(numba_type, "ndim") and hasattr(numba_type, "dtype"):
        return f"{numba_type.dtype}[{', '.join([':'] * numba_type.ndim)}]"
    return str(numba_type)


def ptxas_resources(ptx: str, arch: str) -> str:
    """What ptxas reports a kernel would use: registers, shared memory, spills, stack."""
    import nvidia.cuda_nvcc

    ptxas = os.path.join(list(nvidia.cuda_nvcc.__path__)[0], "bin", "ptxas")  # a namespace package
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(ptx)
        f.flush()
        out = subprocess.run([ptxas, f"-arch={arch}", "-v", f.name, "-o", os.devnull],
                             capture_output=True, text=True, check=True).stderr

    def number(what):
        m = re.search(r"(\d+) " + what, out)
        return int(m.group(1)) if m else 0
    return (f"{number('registers'):3d} registers, {number('bytes smem'):6d} B shared, "
            f"{number('bytes spill stores')} B spilled, {number('bytes stack frame')} B stack")


def every_kernel() -> set[tuple[str, str]]:
    """(module, name) of every kernel of the CUDA backend."""
    import pkgutil

    import destiny.kernels.cuda as package
    from destiny.kernels.cuda.launch import _Launcher

    found = set()
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, _Launcher) and value.__module__ == module.__name__:
                found.add((module.__name__, name))  # defined here, not imported
    return found


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--cc", default="9.0", show_default=True,
              help="Compute capability to compile for (9.0: H100 and H200).")
@click.option("--signatures", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The launches a test run recorded (DESTINY_CUDA_SIGNATURES).")
@click.option("--resources", is_flag=True,
              help="Also print each kernel's registers, shared memory and spills (ptxas -v).")
def main(cc, signatures, resources):
    """Compile every recorded CUDA kernel signature to PTX, without a GPU."""
    from numba import config, cuda

    if config.ENABLE_CUDASIM:
        raise click.ClickException("unset NUMBA_ENABLE_CUDASIM: compiling needs numba-cuda's "
                                   "real compiler")
    if importlib.util.find_spec("numba_cuda") is None:
        # numba's own numba.cuda (the tests' .venv, numba 0.68) fails 23 of the suite's 60
        # signatures ("Signature mismatch" as it types an overload of a builtin): failures of
        # that compiler, which the report would list as the kernels' own.
        raise click.ClickException(
            "numba-cuda is not installed in this environment (numba.cuda is numba's own, "
            "which does not compile these kernels): run this in the environment `make "
            ".venv-cuda/.installed` makes, .venv-cuda/bin/python")
    with open(signatures) as f:
        recorded = json.load(f)
    if not recorded:
        raise click.ClickException(f"{signatures} lists no kernel launches; record them with "
                                   "DESTINY_CUDA_SIGNATURES set for the test run")

    major, minor = (int(x) for x in cc.split("."))
    # numba-cuda compiles a device function for the current device's architecture, and there
    # is no device here: it is asked for the one being compiled for instead.
    from numba.cuda import dispatcher as numba_dispatcher

    numba_dispatcher.get_current_device = lambda: types.SimpleNamespace(
        compute_capability=(major, minor))

    failures, kernels, started = [], set(), time.perf_counter()
    for module, name, described in recorded:
        kernel = getattr(importlib.import_module(module), name)
        dispatcher = getattr(kernel, "dispatcher", kernel)  # launch._Launcher wraps numba's
        argtypes = tuple(dispatcher.typeof_pyval(host_value(d)) for d in described)
        kernels.add((module, name))
        try:
            ptx, _ = cuda.compile_ptx(dispatcher.py_func, argtypes, cc=(major, minor))
            if resources:
                print(f"{module.rsplit('.', 1)[1]}.{name}: "
                      f"{ptxas_resources(ptx, f'sm_{major}{minor}')}  "
                      f"({', '.join(map(short, argtypes))})")
        except Exception as e:  # noqa: BLE001 - every failure is reported, then exit 1
            failures.append(f"{module}.{name}{argtypes}:\n  {type(e).__name__}: "
                            + str(e).strip().replace("\n", "\n  "))
    print(f"cuda_compile_check: compiled {len(recorded) - len(failures)} of {len(recorded)} "
          f"signatures of {len(kernels)} kernels for sm_{major}{minor} with numba-cuda's "
          f"compiler in {time.perf_counter() - started:.0f} s")
    for module, name in sorted(every_kernel() - kernels):
        failures.append(f"{module}.{name}: no test launched it, so it was neither tested nor "
                        "compiled; give it a test")
    for failure in failures:
        print(failure)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
