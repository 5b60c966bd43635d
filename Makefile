# chapter20 — every target bootstraps .venv first (once; a stamp makes later calls instant).
#
#   make run        set up, execute every notebook into build/ (+ HTML), print the claims audit
#   make test       set up, unit tests, then every notebook under nbval
#   make lab        JupyterLab on notebooks/
#   make notebooks  re-execute the committed notebooks in place, in order
#   make gpu-check  on a CUDA machine: cuda tests, GPU benches, notebooks 03 and 09 (<= 5 min);
#                   appends the figures to data/gpu_measurements.csv (GPU_CHECK_ARGS=--dry-run)
#
# TORCH_SPEC is installed before the package, so a machine can choose its torch build:
#   make test TORCH_SPEC="torch==2.13.0"     (the CPU wheel CI uses; see README, "Hardware")
# The default is a lower bound only; pip keeps an installed torch that satisfies it.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
TORCH_SPEC ?= torch>=2.4
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.chapter20-installed
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))
BUILD := build
NB_TIMEOUT ?= 1800
# Kernels draw figures inline; an MPLBACKEND from the caller's shell would hide them.
NB_ENV := env -u MPLBACKEND
PIP_QUIET := --quiet --disable-pip-version-check

.PHONY: run test test-unit test-notebooks lab notebooks env lint clean venv gpu-check

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@echo "== setting up $(VENV) (torch: $(TORCH_SPEC))"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install $(PIP_QUIET) "$(TORCH_SPEC)"
	$(BIN)/python -m pip install $(PIP_QUIET) -e ".[dev]"
	@touch $(STAMP)

run: $(STAMP)
	@rm -rf $(BUILD)/claims $(BUILD)/notebooks
	@mkdir -p $(BUILD)/notebooks
	@for nb in $(NOTEBOOKS); do \
		echo "== executing $$nb"; start=$$SECONDS; \
		$(NB_ENV) CHAPTER20_RESULTS=$(CURDIR)/$(BUILD)/claims $(BIN)/jupyter nbconvert --to notebook --execute \
			--ExecutePreprocessor.timeout=$(NB_TIMEOUT) --ExecutePreprocessor.kernel_name=python3 \
			--output-dir $(BUILD)/notebooks "$$nb" --log-level WARN; \
		$(BIN)/jupyter nbconvert --to html --output-dir $(BUILD)/notebooks \
			"$(BUILD)/notebooks/$$(basename $$nb)" --log-level WARN; \
		echo "   done in $$((SECONDS - start)) s"; \
	done
	@echo "== executed notebooks and HTML: $(BUILD)/notebooks/"
	@CHAPTER20_RESULTS=$(CURDIR)/$(BUILD)/claims $(BIN)/python -m chapter20 audit

test: test-unit test-notebooks

test-unit: $(STAMP)
	@echo "== unit tests"
	CHAPTER20_RESULTS=$(CURDIR)/$(BUILD)/test-claims $(BIN)/python -m pytest tests -q

test-notebooks: $(STAMP)
	@echo "== notebooks under nbval"
	$(NB_ENV) CHAPTER20_RESULTS=$(CURDIR)/$(BUILD)/test-claims $(BIN)/python -m pytest --nbval \
		--nbval-current-env --nbval-cell-timeout=$(NB_TIMEOUT) -q notebooks/

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/

notebooks: $(STAMP)
	@for nb in $(NOTEBOOKS); do \
		echo "== re-executing $$nb in place"; \
		$(NB_ENV) $(BIN)/jupyter nbconvert --to notebook --execute --inplace \
			--ExecutePreprocessor.timeout=$(NB_TIMEOUT) --ExecutePreprocessor.kernel_name=python3 \
			"$$nb" --log-level WARN; \
	done

gpu-check: $(STAMP)
	$(NB_ENV) $(BIN)/python chapter20/scripts/gpu_check.py $(GPU_CHECK_ARGS)

env: $(STAMP)
	$(BIN)/python -m chapter20 env

lint: $(STAMP)
	$(BIN)/ruff check chapter20 tests

clean:
	rm -rf $(BUILD)
