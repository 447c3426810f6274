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
# Every target, one short line each, grouped by file.
# Generated from the comments above the rules (scripts/make_help.py): a rule's first sentence is its line.
help:
	@$(PYTHON) scripts/make_help.py

# The controller's tools venv (.venv).
# Ansible, ansible-lint, molecule, pytest, ruff, yamllint.
venv: $(VENV)/.stamp collection-link
$(VENV)/.stamp: requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VBIN)/pip install -q --upgrade pip
	$(VBIN)/pip install -q -r requirements-dev.txt
	touch $@

# Link collections/ansible_collections/kdtree/fleet to this clone.
# collections/ansible_collections/kdtree/fleet -> this clone (git-ignored): how ansible.cfg, molecule
# and pytest resolve kdtree.fleet from a clone or worktree (scripts/collection_link.py).
collection-link:
	@$(PYTHON) scripts/collection_link.py

# Debian packages the tests need (podman, runc, debootstrap, prometheus).
system-deps:
	bash scripts/install-system-deps.sh

include $(sort $(wildcard mk/*.mk))

# ruff, yamllint and every component's lint target (ansible-lint).
lint: venv $(LINT_TARGETS)
	$(VBIN)/ruff check .
	$(VBIN)/ruff format --check .
	$(VBIN)/yamllint -s .

# make test runs in three phases, each side by side on TEST_JOBS (2) cores, every target's output
# printed whole when it ends: 1. lint, the roles' tests and the repository-wide checks beside what the
# suites install (TEST_PREP: venvs, the engine's model, the wheels, the image); 2. the molecule
# scenarios (MOLECULE_JOBS at a time); 3. every other suite (TEST_TARGETS without the first two; the
# components' files add them). A target that fails stops its phase once the targets running beside it end.
TEST_JOBS ?= 2
TEST_PREP := testhost-image sglang-venv engine-model sglang-venv-oldest publish-venvs router-venv smg-venv sglang-wheels
# phase 3 starts the longest first (make -j takes the list in order), the rest as the files list them
TEST_LONGEST := test-drain-traffic test-bake-fleet test-publish test-drain-fast test-kernel mutation-check test-testhosts
TEST_LAST := $(foreach t,$(TEST_LONGEST),$(filter $(t),$(TEST_TARGETS))) \
  $(filter-out test-roles-fast test-repository test-molecule $(TEST_LONGEST),$(TEST_TARGETS))
TEST_PHASE = start=$$(date +%s); $(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target

# Every test (lint first); installs what it needs. CI runs this on a fresh clone.
test: venv
	@$(TEST_PHASE) lint test-roles-fast test-repository $(TEST_PREP) test-kernel-cpu && \
	  echo "make test: phase 1 (lint, roles, repository, set-up, kernel on the CPU) passed in $$(( $$(date +%s) - start )) s"
	@start=$$(date +%s); $(MAKE) --no-print-directory test-molecule && \
	  echo "make test: phase 2 (molecule) passed in $$(( $$(date +%s) - start )) s"
	@$(TEST_PHASE) $(TEST_LAST) && echo "make test: phase 3 ($(TEST_LAST)) passed in $$(( $$(date +%s) - start )) s"
	@echo "make test: all test targets passed ($(TEST_TARGETS))"

# The quick inner-loop tests (no containers, no torch).
test-fast: venv $(TEST_FAST_TARGETS)
	@echo "make test-fast: passed ($(TEST_FAST_TARGETS))"

# Benchmarks that need no GPU; each prints its figures.
# Each fails only when the thing measured broke.
bench: bench-startup bench-smoke bench-noop bench-kernel-plan
