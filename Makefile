# Two entry points: `make run` (the main job on the embedded default) and `make test`; `make
# test-fast` is the two-minute loop while editing. Each creates .venv when it is missing; `make test`
# also builds the Kubernetes test binaries with Go.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run install test test-fast test-k8s test-hami k8s-bin hami-bin lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# `XPUPOOL_PORT=8081 make run` serves on another port: `xpupool up` reads XPUPOOL_PORT when no
# --port is given; the data dir is the default, .xpupool/ here.
run: $(STAMP)
	$(BIN)/xpupool up --cluster examples/cluster-mixed.yaml

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

# The Kubernetes tests run a real kube-apiserver, kube-scheduler, kwok and etcd, built once into
# ~/.cache/xpupool/k8s by tools/k8s/build.sh (about 10 minutes on two cores the first time, then
# nothing): a missing binary is a test failure, never a skip.
# The unit and property tests run in two processes (pytest-xdist: each keeps what it makes in its
# own temporary folders); the tests that start servers, agents, a browser or a cluster run one at
# a time after them, as they share the host's job root, cgroups, uids and container engine. Both
# parts run when the first fails; tests/unit/test_make_test.py checks that together they select
# every test but HAMi's, each once.
TEST_PARALLEL_MARKERS := not integration and not browser and not k8s and not hami
TEST_SERIAL_MARKERS := (integration or browser or k8s) and not hami
test: lint
	tools/k8s/build.sh >/dev/null
	rc=0; \
	$(BIN)/python -m pytest -n 2 -m '$(TEST_PARALLEL_MARKERS)' || rc=$$?; \
	$(BIN)/python -m pytest -m '$(TEST_SERIAL_MARKERS)' || rc=$$?; \
	exit $$rc

# What `make test-fast` leaves out: every test that starts servers, agents, a browser or a cluster
# (tests/conftest.py marks tests/integration, tests/browser and tests/e2e/k8s by folder) and the
# unit tests marked `slow` (real processes, sleeps, a quarter second or more). The property tests
# stay in, drawing a tenth of their examples (XPUPOOL_TEST_FAST). tests/unit/test_test_fast.py
# reads this line and fails if it would select a test of those folders.
TEST_FAST_MARKERS := not integration and not browser and not k8s and not slow and not hami

# Unit and property tests only, in about two minutes on an idle two-core box; no lint, no Go.
test-fast: $(STAMP)
	XPUPOOL_TEST_FAST=1 $(BIN)/python -m pytest -m '$(TEST_FAST_MARKERS)'

# Only the Kubernetes binaries: kube-apiserver, kube-scheduler, kubectl, kwok, etcd and helm, into
# the versioned cache (nothing when they are there).
k8s-bin:
	tools/k8s/build.sh

# Only the Kubernetes tests.
test-k8s: $(STAMP)
	tools/k8s/build.sh
	$(BIN)/python -m pytest -m 'k8s and not hami' tests/e2e/k8s

# HAMi's scheduler (v2.10.0) for bench/vs_hami.py, into the same cache; never built by `make test`
# or CI. Where the module proxy refuses HAMi, point XPUPOOL_HAMI_GIT at a clone holding the commit.
hami-bin:
	tools/k8s/build.sh --hami

# The HAMi tests (marker `hami`, deselected by default in pyproject's addopts): the vs-HAMi smoke
# test and the switch over and back audited by HAMi's own code (issue 56). Builds HAMi's scheduler
# and xpupool-hami-check (tools/hami-check, compiled inside HAMi's module) when missing or stale;
# where the module proxy refuses HAMi, `XPUPOOL_HAMI_GIT=<a clone holding the commit> make
# test-hami`. A missing binary fails the tests.
test-hami: $(STAMP)
	tools/k8s/build.sh
	tools/k8s/build.sh --hami-check
	$(BIN)/python -m pytest -m hami tests/e2e/k8s

bench: $(STAMP)
	$(BIN)/python bench/placement.py --nodes 5000 --json

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
