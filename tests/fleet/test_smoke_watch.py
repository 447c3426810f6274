"""The smoke check's decisions (roles/kdtree_smoke/library/kdtree_smoke.py), host reads replaced.

Each test feeds one picture of a host (unit properties, journal lines of the current invocation,
/health, processes) into Watch.poll and checks the verdict.
"""

from __future__ import annotations

import pytest

INVOCATION = "0123456789abcdef0123456789abcdef"
NCCL = {"NCCL_P2P_LEVEL": "SYS", "NCCL_ALGO": "Ring"}
TRACEBACK = [
    "[2026-11-29 09:14:52 TP1] Load weight begin.",
    "[2026-11-29 09:14:55 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "scheduler.py", line 84, in run_scheduler_process',
    "RuntimeError: boom",
    "[2026-11-29 09:14:55] Received sigquit from a child process. It usually means the child failed.",
]


def marker(pid: int, state: str = "active") -> str:
    return (
        f"kdtree-verify: pid={pid} ppid=1 title=sglang::scheduler_TP0 mode=validate state={state} "
        "reason=- lib=/opt/kdtree/current/libkdtree_verify.so lib_sha256=ab sglang=0.5.23"
    )


class Host:
    """A fake host: what the module would read with systemctl, journalctl, urllib and /proc."""

    def __init__(self) -> None:
        self.props = {
            "ActiveState": "active",
            "SubState": "running",
            "Result": "success",
            "NRestarts": "0",
            "InvocationID": INVOCATION,
            "ExecMainStatus": "0",
            "MainPID": "100",
            "ControlGroup": "/system.slice/sglang.service",
        }
        self.journal: list[str] = []
        self.health = "200"
        self.processes = {
            100: ("/opt/sglang/venv/bin/python -m sglang.launch_server", dict(NCCL)),
            101: ("sglang::scheduler_TP0", dict(NCCL)),
            102: ("sglang::scheduler_TP1", dict(NCCL)),
            103: ("sglang::detokenizer", dict(NCCL)),
        }

    def install(self, module, monkeypatch) -> None:
        monkeypatch.setattr(module, "systemctl_show", lambda unit: dict(self.props))
        monkeypatch.setattr(
            module, "journal_lines", lambda inv: list(self.journal) if inv == INVOCATION else []
        )
        monkeypatch.setattr(module, "health", lambda url: self.health)
        monkeypatch.setattr(module, "cgroup_pids", lambda cg: sorted(self.processes))
        monkeypatch.setattr(module, "process_title", lambda pid: self.processes[pid][0])
        monkeypatch.setattr(module, "process_environ", lambda pid: self.processes[pid][1])
        monkeypatch.setattr(module.time, "sleep", lambda s: None)


def params(**over):
    base = {
        "unit": "sglang",
        "invocation_id": INVOCATION,
        "baseline_nrestarts": 0,
        "started_at": 0.0,
        "chunk_s": 0.0,
        "timeout_s": 1e12,
        "poll_s": 0.0,
        "settle_s": 0.0,
        "health_url": "http://127.0.0.1:30000/health",
        "expected_schedulers": 2,
        "scheduler_prefix": "sglang::scheduler",
        "marker_state": "active",
        "nccl_env": dict(NCCL),
    }
    base.update(over)
    return base


@pytest.fixture
def host(smoke_module, monkeypatch):
    fake = Host()
    fake.install(smoke_module, monkeypatch)
    return fake


def poll(module, **over):
    return module.Watch(params(**over)).poll()


def test_healthy_when_health_200_and_every_scheduler_marked_active_with_nccl(smoke_module, host):
    host.journal = [marker(101), marker(102)]
    result = poll(smoke_module)
    assert result["state"] == "ok"
    assert sorted(s["pid"] for s in result["schedulers"]) == [101, 102]


def test_keeps_waiting_while_one_scheduler_has_no_marker(smoke_module, host):
    host.journal = [marker(101)]
    assert poll(smoke_module) is None


def test_keeps_waiting_while_health_is_503(smoke_module, host):
    host.journal = [marker(101), marker(102)]
    host.health = "503"
    assert poll(smoke_module) is None


def test_keeps_waiting_until_every_tp_rank_has_a_scheduler(smoke_module, host):
    host.journal = [marker(101)]
    del host.processes[102]
    assert poll(smoke_module) is None


def test_traceback_fails_at_once_and_carries_the_traceback(smoke_module, host):
    host.journal = [marker(101), *TRACEBACK]
    result = poll(smoke_module)
    assert result["state"] == "failed"
    assert "Traceback (most recent call last)" in result["msg"]
    assert "RuntimeError: boom" in result["msg"]


def test_error_in_sitecustomize_fails_at_once(smoke_module, host):
    host.journal = ["Error in sitecustomize; set PYTHONVERBOSE for traceback:", "ImportError: x"]
    assert poll(smoke_module)["state"] == "failed"


def test_a_failed_unit_fails_even_without_a_traceback(smoke_module, host):
    host.props.update(ActiveState="failed", SubState="failed", Result="signal", ExecMainStatus="9")
    result = poll(smoke_module)
    assert result["state"] == "failed"
    assert "ExecMainStatus=9" in result["msg"]


def test_a_new_invocation_counts_as_a_restart(smoke_module, host):
    host.props["InvocationID"] = "f" * 32
    result = poll(smoke_module)
    assert result["state"] == "failed"
    assert "restarted" in result["msg"]


def test_an_automatic_restart_counts_as_a_restart(smoke_module, host):
    host.props["NRestarts"] = "1"
    assert "restarted" in poll(smoke_module)["msg"]


def test_a_fallback_marker_fails_with_the_marker_line(smoke_module, host):
    host.journal = [marker(101), marker(102, "fallback")]
    result = poll(smoke_module)
    assert result["state"] == "failed"
    assert "pid=102" in result["msg"]
    assert "fallback" in result["msg"]


def test_a_runtime_fallback_after_an_active_marker_fails_with_its_reason(smoke_module, host):
    gave_up = "kdtree-verify-fallback: pid=102 state=fallback reason=device\\x20cuda:0:\\x20sm_89"
    host.journal = [marker(101), marker(102), gave_up]
    result = poll(smoke_module)
    assert result["state"] == "failed"
    assert "pid 102" in result["msg"]
    assert "fell back to Triton at run time" in result["msg"]
    assert gave_up in result["msg"]


def test_a_runtime_fallback_of_another_process_does_not_count(smoke_module, host):
    host.journal = [marker(101), marker(102), "kdtree-verify-fallback: pid=100 state=fallback reason=x"]
    assert poll(smoke_module)["state"] == "ok"


def test_a_marker_of_another_process_does_not_count(smoke_module, host):
    host.journal = [marker(100), marker(101)]
    assert poll(smoke_module) is None


def test_a_missing_nccl_value_in_a_scheduler_fails(smoke_module, host):
    host.journal = [marker(101), marker(102)]
    host.processes[102] = ("sglang::scheduler_TP1", {"NCCL_P2P_LEVEL": "SYS", "NCCL_ALGO": "Tree"})
    result = poll(smoke_module)
    assert result["state"] == "failed"
    assert "NCCL" in result["msg"]
    assert "Tree" in result["msg"]


def test_a_clobbered_environ_is_reported_with_the_spt_noenv_hint(smoke_module, host):
    host.processes[101] = ("sglang::scheduler_TP0", {})
    result = poll(smoke_module)
    assert result["state"] == "failed"
    assert "SPT_NOENV" in result["msg"]


def test_timeout_fails_with_progress(smoke_module, host):
    host.health = "503"
    result = poll(smoke_module, timeout_s=-1.0)
    assert result["state"] == "failed"
    assert "not healthy within" in result["msg"]


def test_settle_time_delays_success(smoke_module, host):
    host.journal = [marker(101), marker(102)]
    watch = smoke_module.Watch(params(settle_s=3600.0))
    assert watch.poll() is None
    assert watch.healthy_since is not None


def test_rollback_mode_skips_markers_and_environment(smoke_module, host):
    host.processes = {101: ("sglang::scheduler_TP0", {})}
    result = poll(smoke_module, marker_state="", nccl_env={}, expected_schedulers=0)
    assert result["state"] == "ok"


def test_marker_regex_follows_the_contract(smoke_module):
    found = smoke_module.markers([marker(4242, "off"), "kdtree-verify: something else", "noise"])
    assert found == {4242: ("off", marker(4242, "off"))}


def test_run_returns_pending_when_the_chunk_ends(smoke_module, host):
    host.health = "503"
    assert smoke_module.Watch(params(chunk_s=0.0)).run()["state"] == "pending"
