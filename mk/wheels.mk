# The SGLang releases of the supported window (kdtree_verify/target.py), each read from its own wheel.
.PHONY: sglang-wheels test-sglang-wheels

SGLANG_WHEELS := $(ROOT)/.cache/sglang-wheels

# Download every SGLang release of the window (cached).
# `pip download --no-deps sglang==X` for every release of the window (cached; only the files the
# tests read are extracted; a release that left the window is removed). Needs the package registry once.
sglang-wheels: venv
	bash scripts/sglang-wheels.sh $(SGLANG_WHEELS) $(VBIN)/python

# Each release's code that the patch mirrors, read from its own wheel.
# Each release's forward_extend (signature, branch conditions, KV-write form, descales), its verify
# metadata and its kernel's mask layout against what dispatch.py mirrors; a release missing fails.
test-sglang-wheels: venv sglang-wheels
	KDTREE_SGLANG_WHEELS=$(SGLANG_WHEELS) KDTREE_REQUIRE_SGLANG_WHEELS=1 \
	  $(VBIN)/pytest -q -p no:cacheprovider tests/ext/wheels

TEST_TARGETS += test-sglang-wheels
