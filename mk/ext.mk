# sglang_ext: the verify patch, its injection and the probe (files/sglang_ext, tests/ext).
.PHONY: test-ext-fast test-sglang sglang-venv bench-startup

SGLANG_VENV := $(ROOT)/.cache/sglang-venv
# Debian's python (python3.11-venv from system-deps): test hosts run this one venv bind-mounted at the
# same path, and the real engine then meets Debian's sitecustomize as on an operator's host.
SGLANG_PYTHON ?= /usr/bin/python3.11

# Torch-free: install/dispatch rules against the double, real interpreters for the injection
# (spawn children, Debian's sitecustomize chain, error reports, the probe). Needs gcc for tiny .so files.
test-ext-fast: venv
	$(VBIN)/pytest -q -p no:cacheprovider tests/ext/fast

# Cached venv with torch==2.14.1 (local disk) and the real sglang==0.5.23 wheel (--no-deps + import-time deps).
sglang-venv: system-deps
	bash scripts/sglang-venv.sh $(SGLANG_VENV) $(SGLANG_PYTHON)

# The real wheel: signature binding, `python -m sglang.launch_server --device cpu` scheduler marker,
# the reference against SGLang's Triton extend_attention_fwd (TRITON_INTERPRET=1, float32), modes.
test-sglang: sglang-venv
	$(SGLANG_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/ext/sglang

# `python -c pass` with the hook on PYTHONPATH vs plain (median of interleaved pairs; target < 5 ms).
bench-startup:
	$(PYTHON) bench/startup.py --runs 200

TEST_TARGETS += test-ext-fast test-sglang
TEST_FAST_TARGETS += test-ext-fast
