"""The shipped monitoring examples (extras/monitoring) against a real Prometheus
(tests/helpers/prometheus.py): two crafted hosts, each with its two scrape targets as on a GPU host
(node-exporter's textfile series of kdtree on one port, SGLang's own /metrics on another), scraped every
second by one Prometheus for the whole suite that also loads the shipped alert rules.

- `steady`: the kernel serves, twice as fast as the original, no mismatch, no runtime fallback, a
  short inter-token latency. No rule may fire or be pending for it.
- `faulty`: validate mismatches and runtime fallbacks rise, the kernel is twice as slow as the original,
  the original serves most verify calls (`shape`), inter-token latency about 0.3 s. Every rule's
  expression holds for it.

The kdtree series are written by their owners (the patch's telemetry/metrics.py from status documents,
module_utils/_change_metrics.py from history entries): the names and labels the hosts publish. The
SGLang series carry the names SGLang defines (tests/repository/test_monitoring.py checks the names
against its sources). The counters grow with the seconds since the exporter started, so rates are
steady from the second scrape on.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from ansible_collections.kdtree.fleet.plugins.module_utils import _change_metrics as change_metrics
from ansible_collections.kdtree.fleet.plugins.module_utils import _patch_files as patch_files
from ansible_collections.kdtree.fleet.tests.helpers import prometheus
from ansible_collections.kdtree.fleet.tests.unit.helpers.collection_tree import PATCH_DIR, ROOT

MONITORING = ROOT / "extras" / "monitoring"
DASHBOARD = MONITORING / "grafana-kdtree-verify.json"
RULES = MONITORING / "kdtree-alerts.yml"

# Each host its own loopback address: the instance label (address:port) tells the hosts apart as the
# dashboard's host variable does, and a host's two targets share the address, not the port.
STEADY = "127.0.0.11"
FAULTY = "127.0.0.12"
HOSTS = (STEADY, FAULTY)
# Scrapes of every target before the suite reads anything: a rate needs two samples, an increase of a
# counter that first appeared one more.
SCRAPES = 3
# SGLang 0.5.23's inter-token latency buckets up to 0.6 s (metrics_collector.py); the rest are empty.
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08)
ITL_BUCKETS += (0.1, 0.2, 0.4, 0.6)
SGLANG_LABELS = 'model_name="kdtree-tiny-mla"'


@dataclass(frozen=True)
class Host:
    """What a crafted host does per second (rates) and its gauges."""

    kernel_calls: float
    original_calls: dict[str, float]  # reason -> calls per second
    fallbacks: float
    mismatches: float
    kernel_s: float  # kernel seconds per second of timed calls
    original_s: float
    timed_calls: float
    accept_length: float
    gen_throughput: float
    itl: dict[float, float]  # an inter-token latency (s) -> tokens per second with it


PROFILES = {
    STEADY: Host(
        kernel_calls=200,
        original_calls={"validate": 20, "not_verify": 100, "draft_runner": 50},
        fallbacks=0,
        mismatches=0,
        kernel_s=0.001,
        original_s=0.002,
        timed_calls=500,
        accept_length=3.2,
        gen_throughput=850.0,
        itl={0.009: 80, 0.018: 20},
    ),
    FAULTY: Host(
        kernel_calls=50,
        original_calls={"validate": 5, "shape": 200, "not_verify": 100},
        fallbacks=1,
        mismatches=1,
        kernel_s=0.004,
        original_s=0.002,
        timed_calls=500,
        accept_length=1.4,
        gen_throughput=300.0,
        itl={0.05: 50, 0.3: 50},
    ),
}
# The history of both: removed to stock once, then deployed (both annotations have a sample).
HISTORY = [
    {"result": "removed", "ended": "2026-12-01T10:00:00Z", "build_id": "", "mode": ""},
    {"result": "healthy", "ended": "2026-12-01T11:00:00Z", "build_id": "b1e2c3", "mode": "validate"},
]


def _metrics_module():
    return patch_files.load_file(PATCH_DIR / patch_files.METRICS_FILE, "kdtree_monitoring_metrics")


def kdtree_text(host: Host, elapsed: Callable[[], float], pid: int = 4242) -> Callable[[], str]:
    """node-exporter's view of a host: the patch's series of one scheduler and the history's textfile."""
    metrics = _metrics_module()

    def render() -> str:
        t = elapsed()
        doc = {
            "pid": pid,
            "mode": "validate",
            "state": "active",
            "build_id": "b1e2c3",
            "sglang": "0.5.23",
            "updated": time.time(),
            "counters": {
                "kernel_calls": int(host.kernel_calls * t),
                "original_calls": {reason: int(rate * t) for reason, rate in host.original_calls.items()},
                "runtime_fallbacks": int(host.fallbacks * t),
            },
            "validate": {
                "compared": int(host.original_calls["validate"] * t),
                "mismatches": int(host.mismatches * t),
                "max_diff": 0.002,
            },
            "timing": {
                "buckets": [
                    {
                        "batch": 4,
                        "draft": 8,
                        "prefix": "le4096",
                        "heads": 16,
                        "kernel_s": host.kernel_s * t,
                        "original_s": host.original_s * t,
                        "timed_calls": int(host.timed_calls * t),
                    }
                ],
                "untimed_warmup": 3,
                "untimed_captured": 0,
                "untimed_backlog": 0,
            },
        }
        return metrics.render([doc]) + change_metrics.render(HISTORY)

    return render


def sglang_text(host: Host, elapsed: Callable[[], float]) -> Callable[[], str]:
    """SGLang's own /metrics of a host: accept length, generation throughput, inter-token latency."""

    def render() -> str:
        t = elapsed()
        itl = "sglang:inter_token_latency_seconds"
        lines = [
            "# TYPE sglang:spec_accept_length gauge",
            f"sglang:spec_accept_length{{{SGLANG_LABELS}}} {host.accept_length}",
            "# TYPE sglang:gen_throughput gauge",
            f"sglang:gen_throughput{{{SGLANG_LABELS}}} {host.gen_throughput}",
            f"# TYPE {itl} histogram",
        ]
        for bound in (*ITL_BUCKETS, math.inf):
            count = sum(int(rate * t) for latency, rate in host.itl.items() if latency <= bound)
            le = "+Inf" if bound == math.inf else repr(bound)
            lines.append(f'{itl}_bucket{{{SGLANG_LABELS},le="{le}"}} {count}')
        total = sum(int(rate * t) for rate in host.itl.values())
        seconds = sum(latency * int(rate * t) for latency, rate in host.itl.items())
        lines += [f"{itl}_sum{{{SGLANG_LABELS}}} {seconds!r}", f"{itl}_count{{{SGLANG_LABELS}}} {total}"]
        return "\n".join(lines) + "\n"

    return render


@dataclass
class Monitoring:
    """The running Prometheus and which target address is which host's."""

    prom: prometheus.Prometheus
    kdtree: dict[str, str]  # host -> the address of its kdtree (node-exporter) target
    sglang: dict[str, str]  # host -> the address of its SGLang target
