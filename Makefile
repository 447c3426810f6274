# kdtree-fleet: top-level targets. Component targets live in mk/*.mk and add themselves to
# TEST_TARGETS / TEST_FAST_TARGETS / LINT_TARGETS; keep this file small.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

ROOT := $(CURDIR)
PYTHON ?= python3
VENV := $(ROOT)/.venv
VBIN := $(VENV)/bin
export PATH := $(VBIN):$(PATH)
export ANSIBLE_CONFIG := $(ROOT)/ansible.cfg

TEST_TARGETS :=
TEST_FAST_TARGETS :=
LINT_TARGETS :=

.PHONY: help venv system-deps lint test test-fast demo bench
help:
	@echo "make demo       build the local test fleet and deploy to it (installs what it needs)"
	@echo "make test       every test (installs what it needs)"
	@echo "make test-fast  the quick inner-loop tests"
	@echo "make lint       ruff, yamllint, ansible-lint"
	@echo "make bench      the benchmarks that run without a GPU (startup, smoke, noop)"

venv: $(VENV)/.stamp
$(VENV)/.stamp: requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VBIN)/pip install -q --upgrade pip
	$(VBIN)/pip install -q -r requirements-dev.txt
	touch $@

system-deps:
	bash scripts/install-system-deps.sh

include $(sort $(wildcard mk/*.mk))

lint: venv $(LINT_TARGETS)
	$(VBIN)/ruff check .
	$(VBIN)/ruff format --check .
	$(VBIN)/yamllint -s .

test: lint $(TEST_TARGETS)
	@echo "make test: all test targets passed ($(TEST_TARGETS))"

test-fast: venv $(TEST_FAST_TARGETS)
	@echo "make test-fast: passed ($(TEST_FAST_TARGETS))"

# Benchmarks that need no GPU; each prints its figures (and fails only when the thing measured broke).
bench: bench-startup bench-smoke bench-noop
