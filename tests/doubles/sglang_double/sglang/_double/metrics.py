"""TEST DOUBLE of SGLang's /metrics (`--enable-metrics`): SGLang's own series, fed by the double's traffic.

The names, types, buckets and labels are SGLang's (python/sglang/srt/metrics/collector.py):
- the tokenizer's series, labels {engine_type="unified", model_name=<--served-model-name>}:
  counters sglang:prompt_tokens_total, sglang:generation_tokens_total, sglang:cached_tokens_total,
  sglang:num_requests_total, sglang:num_aborted_requests_total (SGLang's one series of requests that
  failed: an aborted request counts there and, as finished, in num_requests_total); histograms
  sglang:time_to_first_token_seconds, sglang:inter_token_latency_seconds (observed from a request's
  second output on: only a streamed request has one; sum += the interval, the count += its new
  tokens, as SGLang's observe_inter_token_latency), sglang:e2e_request_latency_seconds;
- the scheduler's gauges (only TP rank 0's scheduler publishes them by default), labels
  {engine_type, model_name, moe_ep_rank, pp_rank, tp_rank}, once the server is up:
  sglang:num_running_reqs, sglang:num_queue_reqs, sglang:gen_throughput, sglang:max_total_num_tokens,
  sglang:spec_accept_length (SGLANG_DOUBLE_ACCEPT_LENGTH; 0, SGLang's value without speculative
  decoding, when unset).
The text is what prometheus_client's multiprocess collector writes (SGLang serves it that way):
"Multiprocess metric" as every HELP, labels in name order, no `_created` samples.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS = (*TTFT_BUCKETS, 600, 1200, 1800, 2400)
ITL_BUCKETS = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
    0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000,
)  # fmt: skip
MAX_TOTAL_NUM_TOKENS = 4096  # what the double's schedulers report when ready
THROUGHPUT_WINDOW_S = 10.0  # gen_throughput: tokens generated over the last window, per second

COUNTERS = {
    "sglang:prompt_tokens_total": "prompt_tokens",
    "sglang:generation_tokens_total": "generation_tokens",
    "sglang:cached_tokens_total": "cached_tokens",
    "sglang:num_requests_total": "num_requests",
    "sglang:num_aborted_requests_total": "num_aborted_requests",
}


def _number(value: float) -> str:
    """A sample value or bound as prometheus_client writes it (Go's float format)."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _labels(labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "le")
    if "le" in labels:
        inner = f'{inner},le="{labels["le"]}"' if inner else f'le="{labels["le"]}"'
    return "{" + inner + "}"


class Histogram:
    def __init__(self, bounds: Iterable[float]) -> None:
        self.bounds = (*(float(b) for b in bounds), math.inf)
        self.counts = [0] * len(self.bounds)  # per bucket, not cumulative
        self.sum = 0.0

    def observe(self, value: float, count: int = 1, total: float | None = None) -> None:
        """`count` observations of `value` (SGLang's ITL: the interval spread over its new tokens), adding
        `total` (default value * count) to the sum."""
        self.sum += value * count if total is None else total
        for index, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[index] += count
                return

    def lines(self, name: str, labels: dict[str, str]) -> list[str]:
        out, cumulative = [], 0
        for bound, count in zip(self.bounds, self.counts, strict=True):
            cumulative += count
            out.append(f"{name}_bucket{_labels({**labels, 'le': _number(bound)})} {_number(cumulative)}")
        out.append(f"{name}_count{_labels(labels)} {_number(cumulative)}")
        out.append(f"{name}_sum{_labels(labels)} {_number(self.sum)}")
        return out


class Metrics:
    """The series of one server, updated by its HTTP handlers (thread-safe)."""

    def __init__(self, model_name: str, accept_length: float) -> None:
        self.tokenizer_labels = {"model_name": model_name, "engine_type": "unified"}
        self.scheduler_labels = {**self.tokenizer_labels, "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
        self.accept_length = accept_length
        self._lock = threading.Lock()
        self.totals = dict.fromkeys(COUNTERS.values(), 0)
        self.histograms = {
            "sglang:time_to_first_token_seconds": Histogram(TTFT_BUCKETS),
            "sglang:inter_token_latency_seconds": Histogram(ITL_BUCKETS),
            "sglang:e2e_request_latency_seconds": Histogram(E2E_BUCKETS),
        }
        self._generated: deque[tuple[float, int]] = deque()

    def first_token(self, seconds: float) -> None:
        with self._lock:
            self.histograms["sglang:time_to_first_token_seconds"].observe(seconds)

    def inter_token(self, interval: float, new_tokens: int) -> None:
        with self._lock:
            itl = self.histograms["sglang:inter_token_latency_seconds"]
            itl.observe(interval / new_tokens, new_tokens, total=interval)

    def tokens_generated(self, count: int) -> None:
        with self._lock:
            self._generated.append((time.monotonic(), count))

    def finished(
        self, prompt_tokens: int, generation_tokens: int, e2e_s: float, aborted: bool = False
    ) -> None:
        with self._lock:
            self.totals["prompt_tokens"] += prompt_tokens
            self.totals["generation_tokens"] += generation_tokens
            self.totals["num_requests"] += 1
            self.totals["num_aborted_requests"] += int(aborted)
            self.histograms["sglang:e2e_request_latency_seconds"].observe(e2e_s)

    def _gen_throughput(self) -> float:
        cutoff = time.monotonic() - THROUGHPUT_WINDOW_S
        while self._generated and self._generated[0][0] < cutoff:
            self._generated.popleft()
        return sum(count for _, count in self._generated) / THROUGHPUT_WINDOW_S

    def render(self, up: bool, running: int) -> str:
        """The Prometheus text of every series; the scheduler's gauges once the server is `up`."""
        out: list[str] = []

        def family(name: str, kind: str) -> None:
            out.extend((f"# HELP {name} Multiprocess metric", f"# TYPE {name} {kind}"))

        with self._lock:
            for name, key in COUNTERS.items():
                family(name, "counter")
                out.append(f"{name}{_labels(self.tokenizer_labels)} {_number(self.totals[key])}")
            for name, histogram in self.histograms.items():
                family(name, "histogram")
                out.extend(histogram.lines(name, self.tokenizer_labels))
            if up:
                gauges = {
                    "sglang:num_running_reqs": running,
                    "sglang:num_queue_reqs": 0,
                    "sglang:gen_throughput": self._gen_throughput(),
                    "sglang:max_total_num_tokens": MAX_TOTAL_NUM_TOKENS,
                    "sglang:spec_accept_length": self.accept_length,
                }
                for name, value in gauges.items():
                    family(name, "gauge")
                    out.append(f"{name}{_labels(self.scheduler_labels)} {_number(value)}")
        return "\n".join(out) + "\n"


def patch_series() -> str:
    """The kdtree patch's series as SGLang's /metrics carries them (the patch mirrors its status into
    SGLang's prometheus_client multiprocess files; the double has no prometheus_client, so it renders
    the same documents, KDTREE_STATUS_DIR/<pid>.json, with the patch's own telemetry/metrics.py, found
    on this process's sys.path as the unit's PYTHONPATH put it there). '' without the patch."""
    status_dir = os.environ.get("KDTREE_STATUS_DIR", "")
    if not status_dir or not os.path.isdir(status_dir):
        return ""
    render = None
    for entry in sys.path:
        path = os.path.join(entry or ".", "kdtree_verify", "telemetry", "metrics.py")
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location("_kdtree_double_patch_metrics", path)
            if spec is None or spec.loader is None:
                continue
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            render = module.render
            break
    if render is None:
        return ""
    docs = []
    for name in sorted(os.listdir(status_dir)):
        if not name.endswith(".json") or not name[:-5].isdigit():
            continue
        try:
            with open(os.path.join(status_dir, name), encoding="utf-8") as handle:
                doc = json.load(handle)
        except (OSError, ValueError):
            continue  # a document being replaced: the next scrape reads it
        if isinstance(doc, dict) and os.path.exists(f"/proc/{name[:-5]}"):
            docs.append(doc)
    try:
        return render(docs)
    except (KeyError, TypeError, ValueError):
        return ""
