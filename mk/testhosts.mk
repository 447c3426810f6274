# Test hosts: the podman image, the SGLang test double, the local fleet (scripts/testhosts/).
.PHONY: testhost-image testhost-bundle fleet-up fleet-down fleet-status test-testhosts test-double-fast

TESTHOSTS_N ?= 3

# The podman image of a systemd test host (built once).
# The podman image of a systemd test host (localhost/kdtree-testhost:bookworm), built once.
testhost-image: system-deps
	@start=$$(date +%s); bash scripts/testhosts/build-image.sh; \
	  echo "testhost-image: ready in $$(( $$(date +%s) - start )) s"

# What a test host needs to install the SGLang double (cached).
# .cache/testhost/double-bundle-<hash>/ (double-bundle links to it): what a host needs to install the double.
testhost-bundle: venv
	bash scripts/testhosts/make-bundle.sh

# Start the local fleet of test hosts (TESTHOSTS_N; recreates stale ones).
# Start the local fleet of $(TESTHOSTS_N) test hosts (recreates stale ones).
fleet-up: testhost-image venv
	bash scripts/testhosts/fleet.sh up $(TESTHOSTS_N)

# Remove the local fleet's containers.
fleet-down:
	bash scripts/testhosts/fleet.sh down

# Show the local fleet's hosts and their state.
fleet-status:
	bash scripts/testhosts/fleet.sh status

# Real systemd test hosts (podman) with the SGLang double.
# Real systemd test hosts (podman): the stock unit with the double, titles, environ, crash semantics.
test-testhosts: testhost-image venv
	$(VBIN)/pytest -q tests/testhosts/test_hosts.py tests/testhosts/test_fleet_stale.py

# The SGLang double alone, no container.
# The double alone, no container: CLI, process titles, /health, death semantics; the hosts' connection plugin.
test-double-fast: venv
	$(VBIN)/pytest -q tests/testhosts/test_double_local.py tests/testhosts/test_connection_local.py

TEST_TARGETS += test-double-fast test-testhosts
TEST_FAST_TARGETS += test-double-fast
