# sglang_ext: the verify patch, its injection and the probe (files/sglang_ext, tests/ext).
.PHONY: test-ext-fast test-sglang test-sglang-launcher sglang-venv test-sglang-oldest sglang-venv-oldest bench-startup

SGLANG_VENV := $(ROOT)/.cache/sglang-venv
# The window's oldest release on the stack it pins (torch 2.13 up to 0.5.21): a venv of its own, which
# serves every release of that stack (scripts/sglang-venv.sh swaps sglang only).
SGLANG_VENV_OLDEST := $(ROOT)/.cache/sglang-venv-oldest
# The window's ends, read from its one owner (files/sglang_ext/kdtree_verify/target.py) when used.
SGLANG_WINDOW_END = $(shell $(PYTHON) -c 'import runpy, sys; \
  print(runpy.run_path("files/sglang_ext/kdtree_verify/target.py")["SUPPORTED_SGLANG_VERSIONS"][$(1)])')
SGLANG_NEWEST = $(call SGLANG_WINDOW_END,-1)
SGLANG_OLDEST = $(call SGLANG_WINDOW_END,0)
# Debian's python (python3.11-venv from system-deps): test hosts run this one venv bind-mounted at the
# same path, and the real engine then meets Debian's sitecustomize as on an operator's host.
SGLANG_PYTHON ?= /usr/bin/python3.11

# The patch's torch-free tests against the SGLang double (tests/ext/fast).
# Torch-free: install/dispatch rules against the double, real interpreters for the injection
# (spawn children, Debian's sitecustomize chain, error reports, the probe). Needs gcc for tiny .so files.
test-ext-fast: venv
	$(VBIN)/pytest -q -p no:cacheprovider tests/ext/fast

# Cached venv with the window's newest SGLang wheel and its torch.
# Cached venv with the window's newest sglang wheel (--no-deps + import-time deps) and the torch it pins.
sglang-venv: system-deps
	bash scripts/sglang-venv.sh $(SGLANG_VENV) $(SGLANG_PYTHON) $(SGLANG_NEWEST)

# Cached venv with the window's oldest SGLang wheel and its stack.
# Cached venv with the window's oldest sglang wheel and its stack (CPU torch 2.13.0 from local disk); the
# real engine of molecule's oldest scenario runs it, mounted read-only into its host: compiled at install.
sglang-venv-oldest: system-deps
	bash scripts/sglang-venv.sh $(SGLANG_VENV_OLDEST) $(SGLANG_PYTHON) $(SGLANG_OLDEST)

# The patch against the real SGLang wheel of the window's newest release (not the launcher tests).
# The real wheel: signature binding, the reference against SGLang's Triton extend_attention_fwd
# (TRITON_INTERPRET=1, float32), modes. Also the dashboard's SGLang series against that venv's sources
# (make test-roles-fast may skip it). The launcher tests: test-sglang-launcher.
test-sglang: venv sglang-venv
	KDTREE_SGLANG_RELEASE=$(SGLANG_NEWEST) $(SGLANG_VENV)/bin/python -m pytest -q -p no:cacheprovider \
	  -m "not launcher" tests/ext/sglang
	KDTREE_REQUIRE_SGLANG_VENV=1 $(VBIN)/pytest -q -p no:cacheprovider tests/repository/test_monitoring.py

# The real SGLang launcher and plugin loader with the patch (minutes, wall-clock bounds).
# `python -m sglang.launch_server --device cpu` on the window's newest release: the scheduler child reports
# the patch active before it dies; the plugin loader finds it (tests/ext/sglang, marker `launcher`; each
# has a bound of 240-300 s, so make test runs them in its main lane).
test-sglang-launcher: venv sglang-venv
	KDTREE_SGLANG_RELEASE=$(SGLANG_NEWEST) $(SGLANG_VENV)/bin/python -m pytest -q -p no:cacheprovider \
	  -m launcher tests/ext/sglang

# The same on the window's oldest release (not the launcher tests).
# The same tests on the window's oldest release, on the stack it pins: the dispatch through SGLang's real
# Triton kernel (interpreted), reference equality, modes, fallbacks; not the `launcher` ones (minutes).
test-sglang-oldest: sglang-venv-oldest
	KDTREE_SGLANG_RELEASE=$(SGLANG_OLDEST) $(SGLANG_VENV_OLDEST)/bin/python -m pytest -q -p no:cacheprovider \
	  -m "not launcher" tests/ext/sglang

# Start-up cost of the hook on `python -c pass` (target < 5 ms).
# `python -c pass` with the hook on PYTHONPATH vs plain (median of interleaved pairs; target < 5 ms).
bench-startup:
	$(PYTHON) bench/startup.py --runs 200

TEST_TARGETS += test-ext-fast test-sglang test-sglang-launcher test-sglang-oldest
TEST_FAST_TARGETS += test-ext-fast
