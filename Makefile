# chapter20 — every target bootstraps .venv first (once; a stamp makes later calls instant).
#
#   make run         set up, execute every notebook into build/ (+ HTML), print the claims audit
#   make test        set up, unit tests, then every notebook under nbval
#   make test-all    the same plus the tests marked slow (end-to-end repeats of proofs made elsewhere)
#   make test-slurm  install and start a one-node SLURM (Debian packages, root), run the sbatch test
#   make lab         JupyterLab on notebooks/
#   make book        the committed notebooks as a static site in build/book/ (nothing executed;
#                    open build/book/index.html); make book-check also checks its links and anchors
#   make test-book   make book, then open every page in headless Chromium (installs Debian's
#                    chromium if missing: root) and save screenshots in build/book-screenshots/
#   make notebooks   re-execute the committed notebooks in place, in order
#   make lock        re-resolve the newest allowed versions into constraints.txt (then: make test)
#   make prices MIRROR=DIR  rebuild data/instance_prices*.csv and data/instance_price_history.csv
#                    from a git mirror of github.com/skypilot-org/skypilot-catalog (REV=, SCHEMA=)
#   make gpu-check   on a CUDA machine: cuda tests, GPU benches, notebooks 03 and 09 (<= 5 min);
#                    appends the figures to data/gpu_measurements.csv
#                    (GPU_CHECK_ARGS=--dry-run shows what it would run)
#
# Which torch (README, "Installing"): TORCH_SPEC is installed first, from TORCH_INDEX.
#   default          the tested version; from PyTorch's CPU wheel index on Linux without an NVIDIA
#                    GPU, from your usual index (PyPI: the CUDA build on Linux) otherwise
#   TORCH_SPEC=...   that requirement, from your usual index (unless TORCH_INDEX is given too)
#   TORCH_INDEX=URL  that index for torch (TORCH_INDEX= : your usual index)
# Everything else is installed with the exact versions of CONSTRAINTS (CONSTRAINTS= : none, only
# pyproject.toml's lower bounds).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.chapter20-installed
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))
BUILD := build
NB_TIMEOUT ?= 1800
# Kernels draw figures inline; an MPLBACKEND from the caller's shell would hide them.
NB_ENV := env -u MPLBACKEND

# ---- tested versions and the torch build ---------------------------------------------------------
TORCH_VERSION := 2.13.0
CONSTRAINTS ?= constraints.txt
CPU_TORCH_INDEX := https://download.pytorch.org/whl/cpu
ifeq ($(origin TORCH_INDEX),undefined)
  ifneq ($(origin TORCH_SPEC),undefined)
    TORCH_INDEX :=
  else ifeq ($(shell uname -s),Linux)
    TORCH_INDEX := $(if $(shell nvidia-smi -L 2>/dev/null | grep -m1 GPU),,$(CPU_TORCH_INDEX))
  else
    TORCH_INDEX :=
  endif
endif
TORCH_SPEC ?= torch==$(TORCH_VERSION)
TORCH_FROM := $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX),)
PIP_CONSTRAINTS := $(if $(CONSTRAINTS),--constraint $(CONSTRAINTS),)
# pip's own chatter goes to a log that is shown only when an install fails.
PIP_LOG := $(VENV)/pip-install.log
PIP := quiet_pip() { $(BIN)/python -m pip install --disable-pip-version-check "$$@" >>$(PIP_LOG) 2>&1 \
	|| { tail -n 40 $(PIP_LOG); echo "pip install failed; whole log: $(PIP_LOG)"; exit 1; }; }; quiet_pip

.PHONY: run test test-all test-unit test-notebooks test-slurm lab notebooks env lint lock clean venv gpu-check prices

venv: $(STAMP)

# JupyterLab's event schemas pull in rfc3987-syntax, jsonschema's optional check of the "iri"
# format, which compiles a grammar when jsonschema is imported: 3-8 s in every process that imports
# nbformat (make run, nbval, the book). Nothing here checks IRIs, so it is removed (pip check passes).
$(STAMP): pyproject.toml Makefile $(CONSTRAINTS)
	@echo "== setting up $(VENV): $(TORCH_SPEC) from $(or $(TORCH_INDEX),your package index)," \
		"other packages $(if $(CONSTRAINTS),pinned by $(CONSTRAINTS),at their newest allowed versions)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@: > $(PIP_LOG)
	@$(PIP) $(TORCH_FROM) "$(TORCH_SPEC)"
	@$(PIP) $(PIP_CONSTRAINTS) -e ".[dev]"
	@$(BIN)/python -m pip uninstall --disable-pip-version-check -y rfc3987-syntax >>$(PIP_LOG) 2>&1
	@$(BIN)/python -m pip check >>$(PIP_LOG) 2>&1 || { $(BIN)/python -m pip check; exit 1; }
	@touch $(STAMP)

run: $(STAMP)
	@rm -rf $(BUILD)/claims $(BUILD)/notebooks
	@$(NB_ENV) CHAPTER20_RESULTS=$(CURDIR)/$(BUILD)/claims $(BIN)/python -m chapter20.scripts.run_notebooks \
		--output-dir $(BUILD)/notebooks --html --timeout $(NB_TIMEOUT) $(NOTEBOOKS)
	@echo
	@CHAPTER20_RESULTS=$(CURDIR)/$(BUILD)/claims $(BIN)/chapter20 audit

test: test-unit test-notebooks

# Also the tests marked slow: end-to-end repeats of proofs that notebooks or faster tests make.
test-all: $(STAMP)
	@$(MAKE) --no-print-directory test UNIT_MARKERS="not slurm"

# Runs a command, then says how long it took and the load average (other work on the machine
# slows every phase); keeps the command's exit status.
TIMED := timed() { local name=$$1 start=$$SECONDS status=0; shift; "$$@" || status=$$?; \
	echo "== $$name took $$((SECONDS - start)) s (load average: $$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null))"; \
	return $$status; }; timed

UNIT_MARKERS ?= not slurm and not slow
# Unit tests on two pytest-xdist workers, one torch thread each (tests/conftest.py): many tests
# wait on process start-up (torchrun, spawned ranks), which the other worker fills; UNIT_JOBS=0
# runs them in one process. --dist loadscope keeps each module's tests on one worker, so that a
# module fixture that starts a process group (tests/test_sharding.py, test_ddp_demo.py) runs once,
# not once per worker (measured: 173 s against 222 s); the modules go out longest first
# (tests/conftest.py, LONGEST_FIRST), not reordered by their number of tests. The unit tests do
# not load nbval, which they do not use. The notebooks stay serial: each sets its own threads, and two at once on
# two cores oversubscribe them (measured: twice as long).
UNIT_JOBS ?= 2
test-unit: $(STAMP)
	@echo "== unit tests ($(UNIT_MARKERS); $(UNIT_JOBS) workers)"
	@$(TIMED) "unit tests" env CHAPTER20_RESULTS=$(CURDIR)/$(BUILD)/test-claims \
		$(BIN)/python -m pytest tests -q -m "$(UNIT_MARKERS)" -n $(UNIT_JOBS) -p no:nbval \
		--dist loadscope --no-loadscope-reorder --durations=15

test-notebooks: $(STAMP)
	@echo "== notebooks under nbval"
	@$(TIMED) "notebooks under nbval" $(NB_ENV) CHAPTER20_RESULTS=$(CURDIR)/$(BUILD)/test-claims \
		$(BIN)/python -m pytest --nbval --nbval-current-env --nbval-cell-timeout=$(NB_TIMEOUT) \
		-q --durations=10 notebooks/

# Needs root (apt-get) and Debian's slurm-wlm + munge; see README, "SLURM".
test-slurm: $(STAMP)
	@bash chapter20/scripts/slurm_local.sh start
	CHAPTER20_RESULTS=$(CURDIR)/$(BUILD)/test-claims $(BIN)/python -m pytest tests -q -m slurm -rs

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/

# Committed outputs: recorded in order on a quiet machine (the script refuses a busy one unless
# NB_FORCE=--force); the owners' claim rows of the run are merged into data/claims_recorded.json.
NB_FORCE ?=
notebooks: $(STAMP)
	@rm -rf $(BUILD)/notebook-claims
	@$(NB_ENV) CHAPTER20_RESULTS=$(CURDIR)/$(BUILD)/notebook-claims $(BIN)/python -m \
		chapter20.scripts.run_notebooks --inplace --timeout $(NB_TIMEOUT) $(NB_FORCE) \
		--record-claims data/claims_recorded.json $(NOTEBOOKS)

# The price snapshot of notebook 08 from a mirror of SkyPilot's catalog repository (data/README.md).
REV ?= HEAD
SCHEMA ?=
prices: $(STAMP)
	@test -n "$(MIRROR)" || { echo "make prices needs MIRROR=<git directory of skypilot-catalog>"; exit 2; }
	$(BIN)/python -m chapter20.cost.catalog_build --mirror "$(MIRROR)" --rev "$(REV)" \
		$(if $(SCHEMA),--schema $(SCHEMA),) --out data

gpu-check: $(STAMP)
	$(NB_ENV) $(BIN)/python chapter20/scripts/gpu_check.py $(GPU_CHECK_ARGS)

# ---- the book (README, "Read it") -------------------------------------------------------------
# Sphinx + MyST-NB render the committed notebooks (nb_execution_mode = "off": their recorded
# outputs) with book/conf.py; chapter20.scripts.book_pages assembles the sources in build/book-src
# (book/'s pages, the notebooks, the claims audit and data/README.md). Warnings are errors.
BOOK_STAMP := $(VENV)/.chapter20-book-installed
BROWSER_STAMP := $(VENV)/.chapter20-browser-installed
BOOK_SRC := $(BUILD)/book-src

.PHONY: book book-check test-book

$(BOOK_STAMP): $(STAMP)
	@echo "== installing the book extra (Sphinx, MyST-NB, sphinx-book-theme) into $(VENV)"
	@$(PIP) $(PIP_CONSTRAINTS) -e ".[book]"
	@$(BIN)/python -m pip check >>$(PIP_LOG) 2>&1 || { $(BIN)/python -m pip check; exit 1; }
	@touch $@

book: $(BOOK_STAMP)
	@rm -rf $(BUILD)/book $(BUILD)/book-doctrees
	@$(BIN)/python -m chapter20.scripts.book_pages --out $(BOOK_SRC)
	@$(TIMED) "book" $(BIN)/sphinx-build -W --keep-going -q -b html -c book \
		-d $(BUILD)/book-doctrees $(BOOK_SRC) $(BUILD)/book
	@echo "== open $(BUILD)/book/index.html"

# Every internal link and anchor of the built book (tests/test_book.py; skipped by make test).
book-check: book
	@CHAPTER20_BOOK=1 $(BIN)/python -m pytest tests/test_book.py -q -n 0 -p no:cacheprovider

$(BROWSER_STAMP): $(BOOK_STAMP)
	@$(PIP) $(PIP_CONSTRAINTS) -e ".[book,browser]"
	@$(BIN)/python -m pip check >>$(PIP_LOG) 2>&1 || { $(BIN)/python -m pip check; exit 1; }
	@touch $@

# Debian's chromium, driven by Playwright's Python package (never `playwright install`).
test-book: book $(BROWSER_STAMP)
	@test -x /usr/bin/chromium || { echo "== installing Debian's chromium (apt-get, root)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	@CHAPTER20_BOOK=1 $(BIN)/python -m pytest tests/test_book_browser.py -q -n 0 -m browser \
		-p no:cacheprovider -rs

env: $(STAMP)
	$(BIN)/chapter20 env

# The formatter and the linter over code, tests and notebooks (tests/test_conventions.py runs both).
lint: $(STAMP)
	$(BIN)/ruff format --check chapter20 tests notebooks
	$(BIN)/ruff check chapter20 tests notebooks

# A fresh environment from pyproject.toml's lower bounds alone (the torch of TORCH_SPEC as
# above), frozen into $(CONSTRAINTS). torch and its CUDA libraries stay out: their build differs
# per machine (TORCH_VERSION above is the tested torch).
LOCK_VENV := $(BUILD)/lock-venv
lock:
	@rm -rf $(LOCK_VENV) && $(PYTHON) -m venv $(LOCK_VENV)
	@echo "== resolving into $(LOCK_VENV) (log: $(LOCK_VENV)/pip-install.log)"
	@$(MAKE) --no-print-directory VENV=$(LOCK_VENV) PIP_LOG=$(LOCK_VENV)/pip-install.log \
		CONSTRAINTS= $(LOCK_VENV)/.chapter20-installed
# The book's and the browser test's packages are pinned too (make book, make test-book).
	@$(LOCK_VENV)/bin/python -m pip install --disable-pip-version-check -q -e ".[book,browser]" \
		>>$(LOCK_VENV)/pip-install.log 2>&1
	@{ echo "# Exact versions the tests pass with (make lock; python $$($(LOCK_VENV)/bin/python -c \
		'import platform; print(platform.python_version())'), torch==$(TORCH_VERSION))."; \
	   echo "# The Makefile installs with them; pyproject.toml keeps lower bounds."; \
	   $(LOCK_VENV)/bin/python -m pip freeze --exclude-editable --disable-pip-version-check \
		| grep -v -i -E '^(chapter20|torch|triton|nvidia-[a-z0-9-]+)( @|==)'; } > $(CONSTRAINTS)
	@rm -rf $(LOCK_VENV)
	@echo "== wrote $(CONSTRAINTS); run make test before committing it"

clean:
	rm -rf $(BUILD)
