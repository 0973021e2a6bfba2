#!/usr/bin/env bash
# Fetch, on a machine with internet, what a GPU machine without it needs beside its image's
# packages (numba-cuda, CuPy, PyTorch): NumPy 2.4 (NumPy 2.5 breaks numba-cuda 0.30), netCDF4
# and cftime, mpi4py and MPICH (whose mpiexec runs the MPI tests on the GPU), as CPython 3.12
# wheels, into .gpu/ (ignored by git, about 42 MB), and PyTorch's reference script. Carry .gpu/ to the GPU machine with the tree; scripts/gpu_check.sh installs the
# wheels there (into /tmp/site) before its steps.
#
#   scripts/gpu_wheels.sh            # then, there: STEPS="env test-gpu bench test" scripts/gpu_check.sh
set -eu
cd "$(dirname "$0")/.."
PY=${PY:-python3}
PYTHON_VERSION=${PYTHON_VERSION:-3.12}
mkdir -p .gpu
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
    platforms+=(--platform "$p")
done
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYTHON_VERSION" \
    --implementation cp "${platforms[@]}" -d .gpu 'numpy>=2.4,<2.5' 'netCDF4>=1.7' 'cftime>=1.6' \
    'mpi4py>=3.1' mpich
reference=../shared/bench/torch_reference.py
if [ -f "$reference" ]; then
    cp "$reference" .gpu/
else
    echo "gpu_wheels.sh: $reference not found; bench's PyTorch side needs it (DESTINY_TORCH_REFERENCE)" >&2
fi
ls -l .gpu
