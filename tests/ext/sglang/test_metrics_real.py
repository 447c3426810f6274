"""The patch's metrics join SGLang's own /metrics (``--enable-metrics``) with the real prometheus_client.

SGLang 0.5.23 sets PROMETHEUS_MULTIPROC_DIR in the launcher and serves /metrics from
`add_prometheus_middleware`'s MultiProcessCollector over that directory. Here a spawned process (as a
scheduler is) publishes through `kdtree_verify.telemetry.promclient.Mirror` into the directory it
inherited, and SGLang's own /metrics route, called as the HTTP server would, must serve those samples
with each process's pid, beside a counter that SGLang-style code made in another process.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXT_DIR = Path(__file__).resolve().parents[3] / "files" / "sglang_ext"

SCHEDULER = """
import json, os, sys
from kdtree_verify.telemetry import promclient
assert promclient.wanted()
doc = json.loads(sys.argv[1])
doc["pid"] = os.getpid()
mirror = promclient.Mirror()
mirror.update(doc)
doc["counters"]["kernel_calls"] += 5
doc["counters"]["kernel_calls_device"] += 40
mirror.update(doc)
print(os.getpid())
"""

# A dead scheduler with this process's pid left its counter file behind (PROMETHEUS_MULTIPROC_DIR
# persists across server runs): 1000 kernel calls under the very key this process's counter uses.
INHERIT = """
import json, os, sys, time
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from kdtree_verify.telemetry import metrics, promclient
pid = os.getpid()
directory = os.environ["PROMETHEUS_MULTIPROC_DIR"]
path = os.path.join(directory, f"counter_{pid}.db")
dead = MmapedDict(path)
key = mmap_key("kdtree_verify_calls", "kdtree_verify_calls_total", ("pid", "path", "reason"),
               (str(pid), "kernel", ""), metrics.FAMILIES[metrics.CALLS][1])
dead.write_value(key, 1000.0, 0.0)
dead.close()
past = promclient.process_start() - 60
os.utime(path, (past, past))
doc = json.loads(sys.argv[1])
doc["pid"] = pid
promclient.Mirror().update(doc)
print(pid)
"""

OTHER = """
import prometheus_client
prometheus_client.Counter("sglang_like_requests", "a counter of another library", registry=None).inc(3)
"""


def _doc() -> dict:
    return {
        "mode": "validate",
        "state": "active",
        "sglang": "0.5.23",
        "build_id": "b1234",
        "updated": 1700000000.5,
        "counters": {
            "kernel_calls": 7,
            "kernel_calls_device": 60,
            "original_calls": {"not_verify": 3},
            "runtime_fallbacks": 0,
            "runtime_fallback_reason": "",
        },
        "validate": {"compared": 7, "mismatches": 0, "max_diff": 0.25},
    }


def _spawn(code: str, env: dict[str, str], *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip()


def _get_metrics(app) -> str:
    """GET /metrics through the ASGI app, as uvicorn would call it."""
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/metrics",
        "raw_path": b"/metrics",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 30000),
    }
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    assert start["status"] == 200, sent
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body").decode()


def test_a_spawned_processs_kdtree_metrics_are_served_by_sglangs_own_metrics_route(tmp_path, monkeypatch):
    pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families
    from sglang.srt.utils.common import add_prometheus_middleware
    from starlette.applications import Starlette

    env = {
        **os.environ,
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
        "PYTHONPATH": os.pathsep.join([str(EXT_DIR), os.environ.get("PYTHONPATH", "")]),
    }
    pids = [_spawn(SCHEDULER, env, json.dumps(_doc())) for _ in range(2)]
    _spawn(OTHER, env)

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    app = Starlette()
    add_prometheus_middleware(app)
    text = _get_metrics(app)

    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    for pid in pids:
        assert (
            samples[("kdtree_verify_calls_total", (("path", "kernel"), ("pid", pid), ("reason", "")))] == 12
        )
        assert samples[("kdtree_verify_kernel_launches_total", (("pid", pid),))] == 100
        assert (
            samples[
                ("kdtree_verify_calls_total", (("path", "original"), ("pid", pid), ("reason", "not_verify")))
            ]
            == 3
        )
        assert samples[("kdtree_verify_runtime_fallbacks_total", (("pid", pid),))] == 0
        assert samples[("kdtree_verify_validate_compared_total", (("pid", pid),))] == 7
        assert samples[("kdtree_verify_validate_max_abs_diff", (("pid", pid),))] == 0.25
        info = (
            ("build_id", "b1234"),
            ("mode", "validate"),
            ("pid", pid),
            ("sglang", "0.5.23"),
            ("state", "active"),
        )
        assert samples[("kdtree_verify_patch_info", info)] == 1
    assert samples[("sglang_like_requests_total", ())] == 3


def test_a_dead_processs_counters_with_the_same_pid_are_not_inherited(tmp_path):
    """Before, the new process's counter started from the dead one's 1000: 1007 kernel calls."""
    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(EXT_DIR),
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
    }
    pid = _spawn(INHERIT, env, json.dumps(_doc()))
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(tmp_path))
    value = registry.get_sample_value(
        "kdtree_verify_calls_total", {"pid": pid, "path": "kernel", "reason": ""}
    )
    assert value == 7
