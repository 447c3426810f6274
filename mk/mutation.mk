# Mutation check of the patch and smoke tests (scripts/mutation_check.py lists the mutants).
.PHONY: mutation-check

# MUTATION_ARGS: more arguments (--fresh: run every mutant, even one killed before; --only NAME).
MUTATION_ARGS ?=
# Deliberate bugs in a copy of the tree: each must fail its tests.
# Apply each listed deliberate bug to a temporary copy of the tree and expect its tests to fail. One
# line per mutant (KILLED/SURVIVED, seconds); fails if any survived or its site is gone. The kernel's
# mutants are killed by its CPU-emulator tests, which run in the torch venv. A mutant killed before,
# unchanged with its file and tests, is kept (the machine-level cache) unless MUTATION_ARGS=--fresh.
mutation-check: venv sglang-venv
	bash scripts/mutation-check.sh $(MUTATION_ARGS)
TEST_TARGETS += mutation-check
