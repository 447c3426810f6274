# The real SGLang engine on test hosts (tests/engine, scripts/testhosts/engine-*.sh): the engine venv,
# the tiny MLA model, one real-engine host, and molecule's engine scenario on such a host.
.PHONY: engine-venv engine-model engine-host-up engine-host-down

# The engine runs from the project's one torch+sglang venv (mk/ext.mk: made from Debian's python3.11,
# bind-mounted read-only into the host at the same path). Recursive on purpose: ext.mk is read later.
ENGINE_VENV = $(SGLANG_VENV)
ENGINE_HOST ?= kdtree-engine1

# The venv that runs the real engine (the sglang-venv).
# The venv that runs the real engine: the sglang-venv (one recipe for every suite).
engine-venv: sglang-venv

# The tiny DeepSeek-V3-style MLA model and tokenizer (made once).
# The tiny DeepSeek-V3-style MLA model and tokenizer, made once in the machine-level cache
# (scripts/devcache.py: <home>/engine-model/<recipe hash>/); .cache/engine-model/current links to it:
# molecule's engine scenario mounts that fixed path.
engine-model: engine-venv
	@dir=$$($(ENGINE_VENV)/bin/python tests/engine/make_tiny_model.py) && mkdir -p $(ROOT)/.cache/engine-model && \
	  ln -sfn "$$dir" $(ROOT)/.cache/engine-model/current && echo "engine-model: $$dir"

# Start the real-engine test host (ENGINE_HOST, default kdtree-engine1).
# Start one test host running the real SGLang engine under systemd (ENGINE_HOST, default kdtree-engine1).
engine-host-up: testhost-image engine-model
	@start=$$(date +%s); KDTREE_ENGINE_VENV=$(ENGINE_VENV) bash scripts/testhosts/engine-host.sh up $(ENGINE_HOST); \
	  echo "engine-host-up: ready in $$(( $$(date +%s) - start )) s"

# Remove the real-engine test host.
engine-host-down:
	bash scripts/testhosts/engine-host.sh down $(ENGINE_HOST)
