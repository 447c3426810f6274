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
# Ansible, ansible-lint, molecule, pytest, ruff, yamllint: built once per recipe in the machine-level
# cache (scripts/devcache.py, scripts/tools-venv.sh), .venv links to it.
venv: $(VENV)/.stamp collection-link
$(VENV)/.stamp: requirements-dev.txt scripts/tools-venv.sh
	bash scripts/tools-venv.sh $(VENV) $(PYTHON)
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
lint: lint-fast $(LINT_TARGETS)

# make test is one dependency graph in lanes, every target timed (scripts/testtime.py: its wall and own
# CPU seconds, the machine's CPU busy share and load meanwhile; the table is printed at the end, failed or
# not, and kept in .cache/testtime/):
#   gate  ruff, yamllint and the hook's start-up check (seconds): a lint error fails first;
#   prep  the tools venv, the Debian packages and the test-host image, one after the other;
#   main  at normal priority, TEST_JOBS (2) at a time, strictly in TEST_MAIN_ORDER: the molecule
#         scenarios and the suites with wall-clock bounds or traffic (TEST_MAIN_TARGETS), default first,
#         then the longest first; a target makes what it needs inside its own slot, so a prerequisite
#         never lets a later target jump the queue;
#   cpu   at the lowest CPU and I/O priority as a group (scripts/lowprio.sh: a control group of the lowest
#         CPU weight, SCHED_IDLE, the idle I/O class), TEST_JOBS at a time, beside main:
#         every other test target (TEST_TARGETS: the components' files add them), after the venvs, the
#         model and the wheels it shares with main are made at normal priority (TEST_PREP).
TEST_JOBS ?= 2
TEST_LOG := $(ROOT)/.cache/testtime
TEST_TIMED = $(PYTHON) scripts/testtime.py run --log $(TEST_LOG)
TEST_LOW := bash scripts/lowprio.sh
TEST_PREP := sglang-venv sglang-venv-oldest publish-venvs router-venv smg-venv sglang-wheels
TEST_GATE := lint-fast bench-startup
TEST_MAIN_TARGETS := test-traffic-fleet test-sglang-launcher test-testhosts test-roles-fast test-drain-fast test-monitoring
# the main lane's order: default first (the later double scenarios install its kernel build), then the
# longest first; a scenario or suite missing here runs after them
TEST_MAIN_ORDER := test-molecule-default test-molecule-engine test-traffic-fleet test-molecule-batch \
  test-molecule-faults test-molecule-operator test-sglang-launcher test-roles-fast test-molecule-rollback \
  test-molecule-oldest \
  test-molecule-crash test-testhosts test-drain-fast test-monitoring
TEST_MAIN = $(TEST_MAIN_ORDER) $(filter-out $(TEST_MAIN_ORDER),$(MOLECULE_SCENARIOS:%=test-molecule-%) $(TEST_MAIN_TARGETS))
# the CPU lane in the order the components list them, the mutation check last (by then the main lane has
# mostly ended: its kernel mutants' emulator runs have a per-run bound)
TEST_CPU_LAST := mutation-check
TEST_CPU = $(LINT_TARGETS) $(filter-out test-molecule $(TEST_MAIN) $(TEST_GATE) $(LINT_TARGETS) $(TEST_CPU_LAST),$(TEST_TARGETS)) \
  $(filter $(TEST_CPU_LAST),$(TEST_TARGETS))

.PHONY: lint-fast test-lane-main test-lane-cpu test-prep
# ruff and yamllint alone (seconds): make test's gate.
lint-fast: venv
	$(VBIN)/ruff check .
	$(VBIN)/ruff format --check .
	$(VBIN)/yamllint -s .

# Every test (lint first); installs what it needs. CI runs this on a fresh clone.
test: venv
	@rm -rf $(TEST_LOG); mkdir -p $(TEST_LOG); \
	  $(PYTHON) scripts/testtime.py sample --log $(TEST_LOG) & \
	  trap '$(PYTHON) scripts/testtime.py stop --log $(TEST_LOG); $(PYTHON) scripts/testtime.py table --log $(TEST_LOG)' EXIT; \
	  for t in $(TEST_GATE); do $(TEST_TIMED) --lane gate $$t -- $(MAKE) --no-print-directory $$t || exit 1; done; \
	  for t in collection-link system-deps testhost-image; do \
	    $(TEST_TIMED) --lane prep $$t -- $(MAKE) --no-print-directory $$t || exit 1; done; \
	  $(MAKE) --no-print-directory -j2 test-lane-main test-lane-cpu && \
	  echo "make test: all test targets passed ($(TEST_GATE) $(TEST_MAIN) $(TEST_CPU))"

# make test's main lane alone (normal priority, TEST_JOBS at a time).
test-lane-main: venv
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target $(TEST_MAIN:%=test-main-%)

# make test's CPU lane alone (the shared venvs first, then the rest at the lowest priority).
test-lane-cpu: venv
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target test-prep && \
	  $(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target $(TEST_CPU:%=test-cpu-%)

# The venvs, wheels and model both lanes use, made at normal priority (each script locks its own).
test-prep:
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target $(TEST_PREP:%=test-prep-%)

test-prep-%:
	@$(TEST_TIMED) --lane prep $* -- $(MAKE) --no-print-directory $*

test-main-%:
	@$(TEST_TIMED) --lane main $* -- $(MAKE) --no-print-directory $*

test-cpu-%:
	@$(TEST_TIMED) --lane cpu $* -- $(TEST_LOW) $(MAKE) --no-print-directory $*


# The quick inner-loop tests (no containers, no torch).
test-fast: venv $(TEST_FAST_TARGETS)
	@echo "make test-fast: passed ($(TEST_FAST_TARGETS))"

# Benchmarks that need no GPU; each prints its figures (the periodic tier, not CI's gate).
# Each fails only when the thing measured broke or missed its target. make test runs bench-startup (its
# gate) and prints the crash figures bench-smoke measures from molecule crash, engine and batch.
bench: bench-startup bench-smoke bench-noop bench-kernel-plan

.PHONY: test-periodic
# The periodic tier: what is too slow for every landing (before a release, and when its subject changes).
# make bench (the crash figures on a fleet of its own, the no-op redeploy, the start-up cost, the kernel's
# plan), the kernel's CPU emulator with long prefixes (test-kernel-cpu-full) and every mutant run afresh
# (make test keeps those killed before); its figures go to docs/benchmarks.md with the date and the commit.
test-periodic: bench test-kernel-cpu-full
	@$(MAKE) --no-print-directory mutation-check MUTATION_ARGS=--fresh
	@echo "make test-periodic: passed (bench test-kernel-cpu-full mutation-check --fresh)"
