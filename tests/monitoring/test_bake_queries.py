"""The bake's PromQL (plugin_utils/_bake_prom) against a real Prometheus (the tests' helper module
`prometheus` of tests.helpers: Debian's package as a process of the test) scraping two exporters that
publish SGLang's and the kdtree patch's series as they grow under traffic: the same verdicts as the
fake API's. Skipped where the package is missing (helper.require(); required under
KDTREE_REQUIRE_PROMETHEUS=1, as make test-monitoring sets it)."""

from __future__ import annotations

import math
import time

import pytest
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _bake as bake
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _bake_prom as bake_prom
from ansible_collections.kdtree.fleet.tests.helpers import prometheus as helper

BOUNDS = ("0.01", "0.02", "0.05", "0.1", "+Inf")


def serving(itl_s: float, requests_per_s: float = 50.0, tokens_per_s: float = 600.0):
    """A /metrics render of a host under steady traffic since it was made (counters grow with time)."""
    start = time.monotonic()

    def render() -> str:
        t = time.monotonic() - start
        tokens = tokens_per_s * t
        label = 'model_name="m"'
        lines = [
            f"sglang:num_requests_total{{{label}}} {requests_per_s * t}",
            f"sglang:num_aborted_requests_total{{{label}}} 0",
            f"sglang:inter_token_latency_seconds_sum{{{label}}} {itl_s * tokens}",
            f"sglang:inter_token_latency_seconds_count{{{label}}} {tokens}",
            f"sglang:spec_accept_length{{{label}}} 3.0",
            'kdtree_verify_runtime_fallbacks_total{pid="7"} 0',
        ]
        for le in BOUNDS:
            count = tokens if le == "+Inf" or itl_s <= float(le) else 0
            lines.append(f'sglang:inter_token_latency_seconds_bucket{{le="{le}",{label}}} {count}')
        return "\n".join(lines) + "\n"

    return render


@pytest.mark.parametrize(("baked_itl_s", "verdict"), [(0.015, "pass"), (0.03, "fail")])
def test_the_bake_reads_a_real_prometheus(tmp_path, baked_itl_s, verdict) -> None:
    helper.require()
    with (
        helper.Exporter(serving(baked_itl_s)) as baked,
        helper.Exporter(serving(0.015)) as reference,
    ):
        targets = [
            helper.Target(baked.address, {"host": "h1"}),
            helper.Target(reference.address, {"host": "r1"}),
        ]
        with helper.Prometheus(tmp_path, targets) as prom:
            prom.wait_for_targets()
            time.sleep(6)  # a few scrapes each
            client = bake_prom.Prometheus(prom.url, label="host")
            at = time.time()
            mine = bake_prom.window(client, "h1", 5, at)
            theirs = bake_prom.window(client, "r1", 5, at)
    result = bake.judge("h1", mine, bake.pool([theirs]), {"min_requests": 20, "min_tokens": 200})
    assert result["verdict"] == verdict, result["message"]
    figures = result["figures"]["baked"]
    assert figures["itl_mean_s"] == pytest.approx(baked_itl_s, rel=0.01)
    assert figures["requests"] > 100  # increase() over 5 s of 50 requests a second, extrapolated
    assert not math.isnan(figures["error_rate"])
