#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: say what the device and the software are, run the test suite
# on the GPU for real (no simulator), and benchmark the CUDA backend beside PyTorch on CUDA with
# TF32 off and on. Each step has its own time limit and log, so one failure does not hide the
# rest; the summary at the end is what to read first.
#
#   OUT=build/gpu STEPS="env test bench" scripts/gpu_check.sh
#
# Steps: env, test-gpu (the launcher's, kernel and GPU training tests), bench (tf32 off and on),
# test (the whole suite), and, when named, profile (where a training step and a prediction
# batch go, host functions and GPU kernels, what one launch costs the host, numba's and
# Destiny's, and what the step's waits for the GPU cost: profile_step.py --waits), and
# quality (held-out quality of models trained with float32 and with TF32 products;
# QUALITY_ARGS adds options, e.g. --config netdefs/benchmark.json), and predict
# (bench_predict.py on the GPU: a cold start, scoring + top-100 beside PyTorch on CUDA, the
# input's parse, and the whole predict command on all users), and mpi (the MPI tests, whose
# ranks then share the GPU: model-parallel training and predict --split-layers on a device;
# they need the mpi4py and MPICH wheels of scripts/gpu_wheels.sh, and so does the whole-suite
# run's share of them).
# TRAIN_SECONDS / PREDICT_SECONDS bound each benchmark, TF32 picks its settings ("off on"),
# PYTEST_ARGS go to the whole-suite run. The default steps take about 9 minutes on
# an H100 machine; a call of the device tool is limited to 10, so run profile in its own.
#
# ab, when named, compares this tree with another checkout on the same machine (Destiny's
# host-bound figures move 20-30% between machines, so commits are compared on one): BASE is
# the other checkout's path (e.g. a `git worktree add .gpu/base <commit>` carried with the
# tree); ROUNDS rounds alternate the two, each a profile_step run of 40 training steps.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu}
STEPS=${STEPS:-env test-gpu bench test}
TRAIN_SECONDS=${TRAIN_SECONDS:-20}
PREDICT_SECONDS=${PREDICT_SECONDS:-8}
PY=${PY:-python3}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
mkdir -p "$OUT"
summary=()

# On a machine without internet, the wheels scripts/gpu_wheels.sh fetched (carried in .gpu/):
# installed beside the image's packages, and Destiny from this tree without its dependencies.
if compgen -G ".gpu/*.whl" >/dev/null; then
    wheels=() mpi=()
    for wheel in .gpu/*.whl; do
        case $(basename "$wheel") in mpi4py-*|mpich-*) mpi+=("$wheel") ;; *) wheels+=("$wheel") ;; esac
    done
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "${wheels[@]}" || exit 1
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    # MPI beside the interpreter, so that mpiexec lands in its bin, where the MPI tests look
    # for it (without it they are skipped, as before).
    if [ ${#mpi[@]} -gt 0 ]; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "${mpi[@]}" \
            || echo "gpu_check.sh: mpi4py and MPICH did not install; the MPI tests will be skipped" >&2
    fi
    "$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
    if [ -f .gpu/torch_reference.py ]; then
        export DESTINY_TORCH_REFERENCE=${DESTINY_TORCH_REFERENCE:-$PWD/.gpu/torch_reference.py}
    fi
fi

run_step() {  # name, seconds, command...
    local name=$1 limit=$2 start rc
    shift 2
    start=$(date +%s)
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    summary+=("$name: exit $rc after $(($(date +%s) - start)) s")
    echo "== $name: exit $rc"
    tail -n 15 "$OUT/$name.log"
}

for step in $STEPS; do
    case $step in
    env)
        run_step env 120 bash -c "nvidia-smi; ls -l /dev/nvidia*; $PY -c '
import numba, numpy, cupy, netCDF4
from numba import cuda
from destiny.kernels import cuda_available, get_backend
from importlib.metadata import version, PackageNotFoundError
try:
    numba_cuda = version(\"numba-cuda\")
except PackageNotFoundError:
    numba_cuda = \"not installed\"
print(\"numba\", numba.__version__, \"numba-cuda\", numba_cuda, \"numpy\", numpy.__version__,
      \"cupy\", cupy.__version__, \"netCDF4\", netCDF4.__version__)
print(\"cuda_available\", cuda_available()); cuda.detect()
kb = get_backend(\"gpu\"); print(\"backend\", kb.name)
'" ;;
    test-gpu)
        # The launcher's own tests first: every launch on a GPU packs its arguments there
        # (under the simulator numba launches), so a fault in it fails everything after.
        run_step test-gpu "${TEST_GPU_LIMIT:-300}" $PY -m pytest -q --maxfail=10 -p no:cacheprovider \
            tests/test_cuda_launch.py tests/test_cuda_device.py tests/test_train_gpu.py \
            tests/test_kernels_matmul.py tests/test_kernels_dense.py tests/test_kernels_sparse.py \
            tests/test_kernels_loss.py tests/test_kernels_pointwise.py tests/test_kernels_optim.py \
            tests/test_kernels_rng.py tests/test_kernels_topk.py tests/test_kernels_batch.py ;;
    bench)
        for tf32 in ${TF32:-off on}; do
            run_step "bench-tf32-$tf32" "${BENCH_LIMIT:-240}" $PY scripts/bench_train.py --backend gpu --torch \
                --tf32 $tf32 --train-seconds "$TRAIN_SECONDS" --predict-seconds "$PREDICT_SECONDS" \
                --json "$OUT/bench-tf32-$tf32.json"
        done ;;
    profile)
        run_step profile-train 240 $PY scripts/profile_step.py --backend gpu --users 20000 \
            --steps 50 --top 30
        run_step profile-predict 240 $PY scripts/profile_step.py --backend gpu --users 20000 \
            --steps 50 --top 30 --predict 100
        # what a step gains if the host never waits for the loss (a brake decided on the GPU)
        run_step profile-waits 240 $PY scripts/profile_step.py --backend gpu --users 20000 \
            --steps 50 --waits
        run_step launch 120 $PY scripts/bench_launch.py ;;
    ab)
        : "${BASE:?ab needs BASE, the path of the checkout to compare with}"
        for round in $(seq "${ROUNDS:-3}"); do
            for tree in "$BASE" "$PWD"; do
                label=$([ "$tree" = "$PWD" ] && echo this || echo base)
                # PYTHONPATH first: the tree's own destiny, not the one installed
                run_step "ab-$label-$round" 240 env PYTHONPATH="$tree:${PYTHONPATH:-}" bash -c \
                    "cd '$tree' && $PY scripts/profile_step.py --backend gpu --users 20000 \
                     --steps 40 --top 1 --workdir '$PWD/build/bench'"
            done
        done ;;
    quality)  # TF32's effect on a model: float32 and TF32 products, the same recipes and seeds
        run_step quality "${QUALITY_LIMIT:-300}" $PY scripts/quality_sample.py --backend gpu \
            --products float32 --products tf32 --recipe "default seed=1" \
            --recipe "default seed=2" ${QUALITY_ARGS:-} --json "$OUT/quality.json" ;;
    predict)
        run_step predict "${PREDICT_LIMIT:-300}" $PY scripts/bench_predict.py --backend gpu --torch \
            --seconds "$PREDICT_SECONDS" --load-runs 3 --json "$OUT/predict.json" ;;
    mpi)  # the MPI tests, their ranks sharing the GPU (auto picks it): split layers on a device
        run_step mpi "${MPI_LIMIT:-300}" $PY -m pytest -q -p no:cacheprovider tests/test_parallel.py \
            tests/test_train_mpi.py tests/test_predict_mpi.py ;;
    test)
        run_step test "${TEST_LIMIT:-420}" $PY -m pytest -q -p no:cacheprovider ${PYTEST_ARGS:-} ;;
    *)
        echo "unknown step $step"; exit 2 ;;
    esac
done
echo "== summary"
printf '%s\n' "${summary[@]}"
