# Destiny: `make demo` and `make test` set everything up on a machine with python3 and make.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
DEMO := build/demo

.PHONY: install test demo bench bench-generate sample-data clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

# The DSSTNE MovieLens pipeline on the bundled sample: raw CSV -> DSSTNE text -> NetCDF.
# train and predict join it when they exist (issues 3 and 4).
demo: $(STAMP)
	@mkdir -p $(DEMO)
	$(BIN)/python scripts/convert_ratings.py data/ratings.csv -o $(DEMO)/ratings.txt
	@head -n 2 $(DEMO)/ratings.txt | cut -c 1-100 | sed 's/$$/ .../'
	$(BIN)/generate-netcdf -d gl_input -i $(DEMO)/ratings.txt -o $(DEMO)/gl_input.nc \
		-f $(DEMO)/features_input -s $(DEMO)/samples_input -c
	$(BIN)/generate-netcdf -d gl_output -i $(DEMO)/ratings.txt -o $(DEMO)/gl_output.nc \
		-f $(DEMO)/features_output -s $(DEMO)/samples_input -c
	@$(BIN)/python scripts/describe_dataset.py $(DEMO)/gl_input.nc $(DEMO)/gl_output.nc
	@echo
	@echo "demo: train and predict are not implemented yet; the pipeline stops after generate-netcdf."

bench: bench-generate

bench-generate: $(STAMP)
	$(BIN)/python scripts/bench_generate.py

# Regenerate the bundled sample (byte for byte the same).
sample-data: $(STAMP)
	$(BIN)/python scripts/synthetic_data.py --users 2000 --items 1000 --mean-per-user 40 \
		--seed 2026 -o data/ratings.csv

clean:
	rm -rf build .pytest_cache
