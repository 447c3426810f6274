# Monitoring examples (extras/monitoring) in a real Prometheus: Debian's prometheus and promtool
# (make system-deps), started by the tests as a process of their own (tests/helpers/prometheus.py).
.PHONY: test-monitoring

# Alert rules and dashboard queries in a real Prometheus (seconds).
# promtool check rules; one Prometheus on 127.0.0.1 scraping two crafted hosts every second with the
# shipped rules loaded: the rules without `for:` fire for the faulty host, the others are pending with the
# crafted value, none is active for the steady one; every panel's and annotation's query returns data
# with the host variable at All and at each host (tests/monitoring); the bake's PromQL against two growing
# exporters (test_bake_queries.py). Fails, never skips, without prometheus.
test-monitoring: venv system-deps
	KDTREE_REQUIRE_PROMETHEUS=1 $(VBIN)/pytest -q -p no:cacheprovider tests/monitoring

TEST_TARGETS += test-monitoring
