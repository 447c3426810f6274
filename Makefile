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

.PHONY: help venv collection-link system-deps lint test test-fast demo bench
# Every target with its description, generated from the comments above the rules (scripts/make_help.py).
help:
	@$(PYTHON) scripts/make_help.py

# The controller's tools venv (.venv): ansible, ansible-lint, molecule, pytest, ruff, yamllint.
venv: $(VENV)/.stamp collection-link
$(VENV)/.stamp: requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VBIN)/pip install -q --upgrade pip
	$(VBIN)/pip install -q -r requirements-dev.txt
	touch $@

# collections/ansible_collections/kdtree/fleet -> this clone (git-ignored): how ansible.cfg, molecule
# and pytest resolve kdtree.fleet from a clone or worktree (scripts/collection_link.py).
collection-link:
	@$(PYTHON) scripts/collection_link.py

# Debian packages the test hosts need on this machine (podman, runc, debootstrap, ...).
system-deps:
	bash scripts/install-system-deps.sh

include $(sort $(wildcard mk/*.mk))

# ruff, yamllint and every component's lint target (ansible-lint).
lint: venv $(LINT_TARGETS)
	$(VBIN)/ruff check .
	$(VBIN)/ruff format --check .
	$(VBIN)/yamllint -s .

# Every test (lint first); installs what it needs. CI runs this on a fresh clone.
test: lint $(TEST_TARGETS)
	@echo "make test: all test targets passed ($(TEST_TARGETS))"

# The quick inner-loop tests (no containers, no torch).
test-fast: venv $(TEST_FAST_TARGETS)
	@echo "make test-fast: passed ($(TEST_FAST_TARGETS))"

# Benchmarks that need no GPU; each prints its figures (and fails only when the thing measured broke).
bench: bench-startup bench-smoke bench-noop
