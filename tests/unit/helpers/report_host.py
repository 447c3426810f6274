"""A fixture host for the fleet report's host side (module_utils/_report, module kdtree_report): live
child processes titled like SGLang's schedulers (with their own NCCL_* environment), a cgroup.procs
file, a status directory, a build, a history and a fake `systemctl show`; a /health server in this
process. Used by the report's and the promotion's unit tests and by tests/roles/test_sglang_window.py.

Imported by its collection path
(`ansible_collections.kdtree.fleet.tests.unit.helpers.report_host`), as ansible-test units
imports test files; `host` and `health_server` are fixtures, imported by the test modules that use them.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _history as history
from ansible_collections.kdtree.fleet.plugins.module_utils import _report as report
from ansible_collections.kdtree.fleet.plugins.module_utils import _unit_env as unit_env
from ansible_collections.kdtree.fleet.plugins.modules import kdtree_report
from ansible_collections.kdtree.fleet.tests.unit.helpers.collection_tree import PATCH_DIR
from ansible_collections.kdtree.fleet.tests.unit.helpers.http_servers import serving

CGROUP = "/system.slice/sglang-test.service"
NCCL = {"NCCL_P2P_LEVEL": "SYS", "NCCL_ALGO": "Ring"}


# the test double's stock unit (tests/doubles/sglang.service) and the real-engine host's
# (tests/engine/sglang.service), as the unit's main process shows them in /proc/PID/cmdline
DOUBLE_CMDLINE = [
    "/opt/sglang/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "/models/tiny-test",
    "--tp-size", "2", "--host", "127.0.0.1", "--port", "30000",
]  # fmt: skip
ENGINE_CMDLINE = [*DOUBLE_CMDLINE, "--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8"]


METRICS_TEXT = """# HELP sglang:spec_accept_length Mean acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{engine_type="unified",model_name="/m",tp_rank="0"} 3.5
sglang:spec_accept_length{engine_type="unified",model_name="/m",tp_rank="1"} 2.5
sglang:spec_accept_rate{engine_type="unified",model_name="/m",tp_rank="0"} 0.9
"""


def spawn(title: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A process whose /proc/PID/cmdline starts with `title` (as SGLang's setproctitle makes it)."""
    proc = subprocess.Popen(
        ["bash", "-c", f"exec -a {title} sleep 120"],
        env={"PATH": os.environ["PATH"], **(env or {})},
    )
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            if Path(f"/proc/{proc.pid}/cmdline").read_bytes().startswith(title.encode()):
                return proc
        except OSError:
            pass
        time.sleep(0.02)
    raise AssertionError(f"{title} did not start")


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


class Health(http.server.BaseHTTPRequestHandler):
    code = 200

    def do_GET(self):
        self.send_response(self.code)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def health_server():
    with serving(Health) as url:
        yield f"{url}/health"


def status(pid: int, **fields) -> dict:
    return {
        "pid": pid,
        "state": "active",
        "mode": "validate",
        "reason": "",
        "lib": "/x.so",
        "updated": time.time(),
        **fields,
    }


def counters(kernel_calls: int, original: dict[str, int], runtime: int = 0, reason: str = "") -> dict:
    return {
        "kernel_calls": kernel_calls,
        "original_calls": original,
        "runtime_fallbacks": runtime,
        "runtime_fallback_reason": reason,
    }


class Host:
    """One fixture host: its processes, cgroup, status directory, build and history."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.main = spawn("python3", env=dict(NCCL, NCCL_ALGO="Tree"))
        self.tp0 = spawn("sglang::scheduler_TP0")
        self.tp1 = spawn("sglang::scheduler_TP1")
        self.procs = [self.main, self.tp0, self.tp1]
        self.status_dir = tmp / "run" / "kdtree-sglang-test"
        self.status_dir.mkdir(parents=True)
        self.cgroup = tmp / "cgroup" / CGROUP.strip("/")
        self.cgroup.mkdir(parents=True)
        # this process holds the /health socket: in the unit, like the server's main process
        self.set_cgroup([self.main.pid, self.tp0.pid, self.tp1.pid, os.getpid()])
        self.build = tmp / "builds" / "0123456789abcdef"
        self.build.mkdir(parents=True)
        (self.build / "BUILD_INFO").write_text("id=0123456789abcdef\narch=sm_120a\ncompute_capability=12.0\n")
        self.history = tmp / "state.json"
        self.show = {
            "ActiveState": "active",
            "SubState": "running",
            "MainPID": str(self.main.pid),
            "ExecMainStartTimestamp": "Mon 2026-11-30 12:00:00 UTC",
            "ControlGroup": CGROUP,
        }

    def set_cgroup(self, pids: list[int]) -> None:
        (self.cgroup / "cgroup.procs").write_text("".join(f"{pid}\n" for pid in pids))

    def write_status(self, pid: int, data, name: str = "") -> Path:
        path = self.status_dir / (name or f"{pid}.json")
        path.write_text(data if isinstance(data, str) else json.dumps(data))
        return path

    def deploy(self, result: str = "healthy", **record) -> dict:
        entries = history.load(str(self.history))
        base = {
            "build_id": "0123456789abcdef",
            "lib_path": str(self.build / "libkdtree_verify.so"),
            "patch_digest": "fedcba9876543210fedcba98",
            "mode": "validate",
            "marker_state": "active",
            "expected_schedulers": 2,
            "nccl_env": NCCL,
            "status_dir": str(self.status_dir),
            "patch_dir": str(PATCH_DIR),
            "dropin": "A",
        }
        entry = history.begin(entries, {**base, **record})
        history.finish(entries, entry["id"], result, record.get("why", ""), **record.get("extra", {}))
        history.save(str(self.history), entries)
        return entry

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()


@pytest.fixture
def host(tmp_path, monkeypatch):
    fixture = Host(tmp_path)
    real_run = subprocess.run

    def fake_run(args, *a, **kw):
        """`systemctl show` answers from the fixture, in systemctl's Key=value output."""
        if list(args[:2]) == ["systemctl", "show"]:
            assert kw.get("timeout"), "systemctl show without a timeout"
            props = [args[i + 1] for i, arg in enumerate(args) if arg == "-p"]
            out = "".join(f"{p}={fixture.show.get(p, '')}\n" for p in props)
            return subprocess.CompletedProcess(args, 0, stdout=out, stderr="")
        return real_run(args, *a, **kw)  # pylint: disable=subprocess-run-check

    monkeypatch.setattr(unit_env.subprocess, "run", fake_run)
    yield fixture
    fixture.close()


class FixtureReader(report.HostReader):
    """The real reader, but the unit's cgroup is the fixture's cgroup.procs and nvidia-smi is absent."""

    def __init__(self, fixture: Host, smi: str = ""):
        self.fixture = fixture
        self.smi = smi

    def cgroup_pids(self, control_group: str) -> list[int]:
        path = self.fixture.tmp / "cgroup" / control_group.strip("/") / "cgroup.procs"
        return sorted(int(x) for x in path.read_text().split())

    def nvidia_smi(self, binary: str) -> str:
        return self.smi


def gather(fixture: Host, health_url: str = "", **over) -> dict:
    params = {
        "unit": "sglang-test",
        "host": "gpu-1",
        "health_url": health_url,
        "status_dir": "",
        "history_path": str(fixture.history),
        "scheduler_prefix": "sglang::scheduler",
        "nvidia_smi": "nvidia-smi",
        **over,
    }
    out = kdtree_report.run(params, FixtureReader(fixture))
    assert out["changed"] is False
    return out["row"]


def status_timing(*buckets) -> dict:
    return {
        "clock": "host",
        "warmup_calls": 3,
        "untimed_warmup": 3,
        "untimed_captured": 0,
        "untimed_backlog": 0,
        "pending": 0,
        "buckets": list(buckets),
    }


def status_bucket(batch: int, calls: int, original_s: float, kernel_s: float) -> dict:
    return {
        "batch": batch,
        "draft": 4,
        "prefix": "le256",
        "heads": 16,
        "timed_calls": calls,
        "original_s": original_s,
        "kernel_s": kernel_s,
    }
