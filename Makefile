# Destiny: `make demo` and `make test` set everything up on a machine with python3 and make.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
DEMO := build/demo

.PHONY: install test demo bench bench-generate bench-train sample-data clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

# The DSSTNE MovieLens pipeline on the bundled sample: raw CSV -> DSSTNE text -> NetCDF ->
# train, then held-out quality against popularity. predict joins it when it exists.
demo: $(STAMP)
	@mkdir -p $(DEMO)
	$(BIN)/python scripts/convert_ratings.py data/ratings.csv -o $(DEMO)/ratings.txt
	@head -n 2 $(DEMO)/ratings.txt | cut -c 1-100 | sed 's/$$/ .../'
	$(BIN)/generate-netcdf -d gl_input -i $(DEMO)/ratings.txt -o $(DEMO)/gl_input.nc \
		-f $(DEMO)/features_input -s $(DEMO)/samples_input -c
	$(BIN)/generate-netcdf -d gl_output -i $(DEMO)/ratings.txt -o $(DEMO)/gl_output.nc \
		-f $(DEMO)/features_output -s $(DEMO)/samples_input -c
	@$(BIN)/python scripts/describe_dataset.py $(DEMO)/gl_input.nc $(DEMO)/gl_output.nc
	rm -f $(DEMO)/gl.nc
	$(BIN)/train -c netdefs/movielens.json -i $(DEMO)/gl_input.nc -o $(DEMO)/gl_output.nc \
		-n $(DEMO)/gl.nc -b 256 -e 10
	@echo
	@echo "Held-out quality (20% of each user's items hidden, the same training on the rest):"
	@$(BIN)/python scripts/quality_sample.py --ratings data/ratings.csv \
		--config netdefs/movielens.json --recipe default --recipe sgd
	@echo
	@echo "demo: predict is not implemented yet; the pipeline stops after train."

bench: bench-generate bench-train

# Destiny beside ../shared/bench/torch_reference.py (needs torch: pip install torch==2.13.0).
bench-train: $(STAMP)
	$(BIN)/python scripts/bench_train.py --torch --json build/bench/train.json

bench-generate: $(STAMP)
	$(BIN)/python scripts/bench_generate.py

# Regenerate the bundled sample (byte for byte the same).
sample-data: $(STAMP)
	$(BIN)/python scripts/synthetic_data.py --users 2000 --items 1000 --mean-per-user 40 \
		--seed 2026 -o data/ratings.csv

clean:
	rm -rf build .pytest_cache
