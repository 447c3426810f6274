# The real SGLang engine on test hosts (tests/engine, scripts/testhosts/engine-*.sh): the engine venv,
# the tiny MLA model, one real-engine host. No test target yet.
.PHONY: engine-venv engine-model engine-host-up engine-host-down

# Test hosts have Debian's /usr/bin/python3.11 and run the venv bind-mounted read-only at the same path,
# so the engine venv must be made from that python.
ENGINE_PYTHON := /usr/bin/python3.11
# One venv for all suites once mk/ext.mk makes .cache/sglang-venv from $(ENGINE_PYTHON) (SGLANG_PYTHON);
# until then the engine has its own (.cache/engine-venv). Recursive on purpose: ext.mk is read later.
ENGINE_VENV ?= $(if $(filter $(ENGINE_PYTHON),$(SGLANG_PYTHON)),$(SGLANG_VENV),$(ROOT)/.cache/engine-venv)
ENGINE_HOST ?= kdtree-engine1

# The venv that runs the real engine (torch 2.14.1 + sglang 0.5.23), made once from /usr/bin/python3.11.
engine-venv: system-deps
	bash scripts/sglang-venv.sh $(ENGINE_VENV) $(ENGINE_PYTHON)

# The tiny DeepSeek-V3-style MLA model and tokenizer, made once in .cache/engine-model/<recipe hash>/.
engine-model: engine-venv
	$(ENGINE_VENV)/bin/python tests/engine/make_tiny_model.py

# Start one test host running the real SGLang engine under systemd (ENGINE_HOST, default kdtree-engine1).
engine-host-up: testhost-image engine-model
	@start=$$(date +%s); KDTREE_ENGINE_VENV=$(ENGINE_VENV) bash scripts/testhosts/engine-host.sh up $(ENGINE_HOST); \
	  echo "engine-host-up: ready in $$(( $$(date +%s) - start )) s"

# Remove the real-engine test host.
engine-host-down:
	bash scripts/testhosts/engine-host.sh down $(ENGINE_HOST)
