# Mutation check of the patch and smoke tests (scripts/mutation_check.py lists the mutants).
.PHONY: mutation-check

# Deliberate bugs in a copy of the tree: each must fail its tests.
# Apply each listed deliberate bug to a temporary copy of the tree and expect its tests to fail. One
# line per mutant (KILLED/SURVIVED, seconds); fails if any survived or its site is gone. The kernel's
# mutants are killed by its CPU-emulator tests, which run in the torch venv.
mutation-check: venv sglang-venv
	bash scripts/mutation-check.sh
TEST_TARGETS += mutation-check
