# Destiny: `make demo` and `make test` set everything up on a machine with python3 and make.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
DEMO := build/demo
# The tested versions of every dependency for this Python, where .ci has them (its
# constraints-py<version>.txt says why); CONSTRAINTS= installs the newest instead.
PYVER := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
CONSTRAINTS ?= $(wildcard .ci/constraints-py$(PYVER).txt)
PIN := $(if $(CONSTRAINTS),-c $(CONSTRAINTS))

.PHONY: install test cuda-compile-check demo bench bench-generate bench-train bench-predict bench-parallel gpu-check sample-data clean

$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(PIN) -e '.[dev,mpi]'
	touch $@

# numba-cuda's compiler (with NVVM from NVIDIA's wheels; no GPU needed) in an environment of
# its own: installed beside the tests' numba, numba-cuda would take over numba.cuda and with it
# the simulator the tests run the CUDA kernels in.
CUDA_VENV ?= .venv-cuda
CUDA_STAMP := $(CUDA_VENV)/.installed
SIGNATURES := build/cuda-signatures.json

$(CUDA_STAMP): pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(CUDA_VENV)
	$(CUDA_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(CUDA_VENV)/bin/python -m pip install --quiet $(PIN) -e . 'numba-cuda[cu12]'
	touch $@

install: $(STAMP)

# The style check (ruff, pyproject's [tool.ruff]), the suite (CUDA kernels under numba's
# simulator), then every CUDA kernel compiled for an H100 with the argument types the suite
# launched it with (scripts/cuda_compile_check.py).
test: $(STAMP) $(CUDA_STAMP)
	@mkdir -p build
	$(BIN)/ruff check --quiet .
	DESTINY_CUDA_SIGNATURES=$(SIGNATURES) $(BIN)/python -m pytest -q
	$(CUDA_VENV)/bin/python scripts/cuda_compile_check.py --signatures $(SIGNATURES)

# The same compile check after the CUDA tests alone (about 2 minutes).
cuda-compile-check: $(STAMP) $(CUDA_STAMP)
	@mkdir -p build
	DESTINY_CUDA_SIGNATURES=$(SIGNATURES) NUMBA_ENABLE_CUDASIM=1 $(BIN)/python -m pytest -q \
		-p no:cacheprovider -k "cuda or gpu" tests/test_kernels_*.py tests/test_train_gpu.py
	$(CUDA_VENV)/bin/python scripts/cuda_compile_check.py --signatures $(SIGNATURES)

# The DSSTNE MovieLens pipeline on the bundled sample: raw CSV -> DSSTNE text -> held-out
# split -> NetCDF -> train -> predict -> evaluate against a popularity ranking.
demo: $(STAMP)
	@mkdir -p $(DEMO)
	$(BIN)/python scripts/convert_ratings.py data/ratings.csv -o $(DEMO)/ratings.txt
	@head -n 2 $(DEMO)/ratings.txt | cut -c 1-100 | sed 's/$$/ .../'
	$(BIN)/python scripts/split_holdout.py $(DEMO)/ratings.txt --train $(DEMO)/train.txt \
		--heldout $(DEMO)/heldout.txt --fraction 0.2 --seed 1
	$(BIN)/generate-netcdf -d gl_input -i $(DEMO)/train.txt -o $(DEMO)/gl_input.nc \
		-f $(DEMO)/features_input -s $(DEMO)/samples_input -c
	$(BIN)/generate-netcdf -d gl_output -i $(DEMO)/train.txt -o $(DEMO)/gl_output.nc \
		-f $(DEMO)/features_output -s $(DEMO)/samples_input -c
	rm -f $(DEMO)/gl.nc
	$(BIN)/train -c netdefs/movielens.json -i $(DEMO)/gl_input.nc -o $(DEMO)/gl_output.nc \
		-n $(DEMO)/gl.nc -b 256 -e 10
	$(BIN)/predict -b 256 -d gl -i $(DEMO)/features_input -o $(DEMO)/features_output -k 10 \
		-n $(DEMO)/gl.nc -f $(DEMO)/train.txt -s $(DEMO)/recs -r $(DEMO)/train.txt
	@echo
	@echo "A few recommendations (user<TAB>item,score:...):"
	@head -n 3 $(DEMO)/recs | cut -c 1-110 | sed 's/$$/ .../'
	@echo
	@echo "Held-out quality (20% of each user's items were hidden from training):"
	@$(BIN)/evaluate -r $(DEMO)/recs -t $(DEMO)/heldout.txt -k 10 --popularity $(DEMO)/train.txt

bench: bench-generate bench-train bench-predict bench-parallel

# Destiny beside ../shared/bench/torch_reference.py (needs torch: pip install torch==2.13.0).
bench-train: $(STAMP)
	$(BIN)/python scripts/bench_train.py --torch --json build/bench/train.json

bench-generate: $(STAMP)
	$(BIN)/python scripts/bench_generate.py

bench-predict: $(STAMP)
	$(BIN)/python scripts/bench_predict.py --torch --json build/bench/predict.json

# Model-parallel training: step time and memory per rank for P = 1 and 2 (docs/scaling.md).
bench-parallel: $(STAMP)
	$(BIN)/python scripts/bench_parallel.py --ranks 1,2 --json build/bench/parallel.json

# On a machine with an NVIDIA GPU: the tests on the device and the benchmark beside PyTorch on
# CUDA with TF32 off and on; logs and JSON in build/gpu (needs pip install '.[gpu]' torch).
gpu-check: $(STAMP)
	PY=$(BIN)/python OUT=build/gpu scripts/gpu_check.sh

# Regenerate the bundled sample (byte for byte the same).
sample-data: $(STAMP)
	$(BIN)/python scripts/synthetic_data.py --users 2000 --items 1000 --mean-per-user 40 \
		--seed 2026 -o data/ratings.csv

clean:
	rm -rf build .pytest_cache
