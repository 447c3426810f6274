# Drain and rejoin around restarts (issue 25): the venvs of SGLang's router and of its successor smg,
# and the fast tests of the router client against both real routers in front of local SGLang test
# doubles (no container).
.PHONY: router-venv smg-venv test-drain-fast bench-drain

ROUTER_VENV := $(ROOT)/.cache/router-venv
ROUTER_REQ := sglang-router==0.3.2
SMG_VENV := $(ROOT)/.cache/smg-venv
SMG_REQ := smg==1.13.0

# Cached venv with sglang-router==0.3.2.
# Made by scripts/router-venv.sh; CI keeps .cache.
router-venv:
	bash scripts/router-venv.sh $(ROUTER_VENV) $(ROUTER_REQ)

# Cached venv with smg==1.13.0, the router's successor (kdtree_drain_router_kind smg).
# Made by scripts/router-venv.sh like router-venv; CI keeps .cache.
smg-venv:
	bash scripts/router-venv.sh $(SMG_VENV) $(SMG_REQ)

# The router client, the drain role and the traffic check (tests/drain), with sglang-router and smg.
test-drain-fast: venv router-venv smg-venv
	KDTREE_ROUTER_VENV=$(ROUTER_VENV) KDTREE_SMG_VENV=$(SMG_VENV) $(VBIN)/pytest -q tests/drain

TEST_TARGETS += test-drain-fast
TEST_FAST_TARGETS += test-drain-fast

# What the drain costs and saves, under traffic (about 14 min).
# What the drain costs and saves, on three test-double hosts of its own (kdtree-drainb1..3, removed
# afterwards): requests sent/failed/cut with the drain off (router retries off) and on, and the wall time
# it adds per restarted host (bench/drain.py). Not part of `make bench`: it takes minutes, not seconds.
bench-drain: venv router-venv testhost-image collection-link
	KDTREE_ROUTER_VENV=$(ROUTER_VENV) $(VBIN)/python bench/drain.py
