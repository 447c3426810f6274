"""read_host(), restart_unit() and load_marker() (plugins/module_utils/_smoke/host.py) on this machine.

systemctl and journalctl are small fake scripts first on PATH; /health is a local HTTP server; the
scheduler is a real child process (argv[0] = a scheduler title, NCCL values in its environment)
found through this machine's /proc in this process's own cgroup (fake_host.py). The test hosts'
reader (scripts/testhosts/hostread.py) on read_host: tests/roles/test_smoke_host.py.
"""

from __future__ import annotations

import ast
import json
import os
import socket
import time
from pathlib import Path

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils._patch_files import MARKER_FILE
from ansible_collections.kdtree.fleet.tests.unit.helpers import fake_host
from ansible_collections.kdtree.fleet.tests.unit.helpers.collection_tree import PATCH_DIR, ROOT
from ansible_collections.kdtree.fleet.tests.unit.helpers.fake_host import (  # noqa: F401  # pylint: disable=unused-import
    fake_fixture,
    health_server_fixture,
    scheduler_fixture,
)
from ansible_collections.kdtree.fleet.tests.unit.helpers.smoke_fakes import INVOCATION

pytestmark = pytest.mark.skipif(not Path("/proc/self/cgroup").exists(), reason="needs Linux /proc")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_read_host_reads_the_unit_the_run_s_journal_health_and_the_schedulers(
    hu, marker, fake, scheduler, health_server
):
    pid, title = scheduler
    line = marker.format_line({"pid": pid, "state": "active", "title": title})
    gave_up = f"kdtree-verify-fallback: pid={pid} state=fallback reason=x"
    fake.journal = ["noise", line, gave_up]
    fake.write()
    query = hu.Query(
        unit="sglang",
        invocation_id=INVOCATION,
        health_url=f"{health_server}/health",
        scheduler_prefix=title,
    )
    snap = hu.read_host(query, marker)
    assert snap.props["ActiveState"] == "active"
    assert snap.journal == ["noise", line, gave_up]
    assert [(m.pid, m.state) for m in snap.markers] == [(pid, "active")]
    assert [(f.pid, f.line) for f in snap.runtime_fallbacks] == [(pid, gave_up)]
    assert snap.health == "200"
    assert [(p.pid, p.environ) for p in snap.schedulers] == [(pid, {"NCCL_ALGO": "Ring"})]
    assert snap.schedulers[0].title.startswith(title)
    assert fake.journal_calls() == [" ".join(hu.journal_command(INVOCATION))]
    assert hu.Snapshot.from_dict(json.loads(json.dumps(snap.to_dict()))) == snap


def test_read_host_reads_the_journal_before_the_unit_state(hu, fake):
    hu.read_host(hu.Query(unit="sglang", invocation_id=INVOCATION))
    assert [call.split()[0] for call in fake.called()] == ["journalctl", "systemctl"]


def test_without_a_marker_module_no_markers_are_parsed(hu, marker, fake):
    fake.journal = [marker.format_line({"pid": 7, "state": "active"})]
    fake.write()
    snap = hu.read_host(hu.Query(unit="sglang", invocation_id=INVOCATION))
    assert snap.markers == []
    assert len(snap.journal) == 1


def test_no_invocation_reads_the_unit_s_current_run(hu, fake):
    fake.props["InvocationID"] = "f" * 32
    fake.write()
    snap = hu.read_host(hu.Query(unit="sglang"))
    assert snap.invocation_id == "f" * 32
    assert fake.called()[-1] == " ".join(hu.journal_command("f" * 32))


def test_a_journal_only_read_runs_nothing_else(hu, fake):
    snap = hu.read_host(hu.Query(unit="sglang", invocation_id=INVOCATION), parts=frozenset(("journal",)))
    assert [call.split()[0] for call in fake.called()] == ["journalctl"]
    assert snap.props == {}
    assert snap.health == ""


def test_a_hung_journalctl_times_out(hu, fake, monkeypatch):
    monkeypatch.setattr(hu, "COMMAND_TIMEOUT_S", 0.3)
    monkeypatch.setenv("FAKE_JOURNALCTL_SLEEP", "5")
    started = time.time()
    with pytest.raises(hu.HostError, match=r"did not finish within 0\.3 s"):
        hu.read_host(hu.Query(unit="sglang", invocation_id=INVOCATION))
    assert time.time() - started < 3


def test_a_hung_systemctl_show_times_out(hu, fake, monkeypatch):
    monkeypatch.setattr(hu, "COMMAND_TIMEOUT_S", 0.3)
    monkeypatch.setenv("FAKE_SYSTEMCTL_SLEEP", "5")
    with pytest.raises(hu.HostError, match="systemctl show"):
        hu.read_host(hu.Query(unit="sglang", invocation_id=INVOCATION))


def test_a_failing_systemctl_show_is_a_host_error(hu, fake, monkeypatch):
    monkeypatch.setenv("FAKE_SYSTEMCTL_RC", "1")
    with pytest.raises(hu.HostError, match="rc=1"):
        hu.read_host(hu.Query(unit="sglang", invocation_id=INVOCATION))


def test_every_host_command_has_a_timeout():
    calls = []
    for path in sorted((ROOT / "plugins" / "module_utils").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        calls += [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and ast.unparse(node.func)
            in (
                "subprocess.run",
                "subprocess.Popen",
                "subprocess.check_output",
                "urllib.request.urlopen",
                "factory",  # the health GET: http.client.HTTP(S)Connection(..., timeout=...)
                "http.client.HTTPConnection",
                "http.client.HTTPSConnection",
            )
        ]
    assert len(calls) >= 3  # systemctl show / journalctl, systemctl restart, the health GET
    for call in calls:
        assert "timeout" in {kw.arg for kw in call.keywords}, ast.unparse(call)
    for path in (
        "plugins/modules/kdtree_smoke.py",
        "plugins/module_utils/_smoke/check.py",
        "plugins/module_utils/_smoke/watch.py",
        "plugins/module_utils/_smoke/judge.py",
        "plugins/module_utils/_smoke/result.py",
    ):
        source = (ROOT / path).read_text(encoding="utf-8")
        assert "subprocess" not in source, f"{path}: the check runs host commands only through smoke_host"


@pytest.mark.parametrize(("path", "want"), [("/health", "200"), ("/busy", "503")])
def test_health_reports_the_status_code(hu, health_server, path, want):
    snap = hu.read_host(hu.Query(unit="x", health_url=health_server + path), parts=frozenset(("health",)))
    assert snap.health == want


def test_health_reports_a_refused_connection(hu):
    url = f"http://127.0.0.1:{closed_port()}/health"
    assert hu.read_host(hu.Query(unit="x", health_url=url), parts=frozenset(("health",))).health == "refused"


def test_restart_unit_is_bounded(hu, fake, monkeypatch):
    monkeypatch.setenv("FAKE_RESTART_SLEEP", "5")
    with pytest.raises(hu.HostError, match=r"^restart did not finish within 0\.3 s"):
        hu.restart_unit("sglang", 0.3)


def test_restart_unit_reports_systemctl_s_failure(hu, fake, monkeypatch):
    monkeypatch.setenv("FAKE_RESTART_RC", "5")
    with pytest.raises(hu.HostError, match="rc=5"):
        hu.restart_unit("sglang", 10)
    assert fake.called() == ["systemctl restart sglang.service"]


def test_load_marker_fails_clearly_without_marker_py(hu, tmp_path):
    with pytest.raises(hu.MarkerError, match=r"kdtree_verify/telemetry/marker.py does not exist"):
        hu.load_marker(str(tmp_path))


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("def match_marker(:\n", r"cannot load .*SyntaxError"),
        ("import re\nMARKER_RE = re.compile('x')\n", "has no match_marker"),
    ],
    ids=["broken", "old"],
)
def test_load_marker_fails_clearly_on_a_broken_or_old_marker_py(hu, tmp_path, text, error):
    marker_py = tmp_path / MARKER_FILE
    marker_py.parent.mkdir(parents=True)
    marker_py.write_text(text)
    with pytest.raises(hu.MarkerError, match=error):
        hu.load_marker(str(tmp_path))


def test_load_marker_loads_the_installed_file_standalone(hu, marker):
    assert Path(marker.__file__) == PATCH_DIR / "kdtree_verify" / "telemetry" / "marker.py"
    assert marker.__name__ == "kdtree_smoke_host_marker"  # by path, not as the kdtree_verify package


def test_the_second_look_reads_only_the_new_lines_from_the_cursor(hu, marker, fake):
    fake.journal = ["loading", "still loading"]
    fake.write()
    query = hu.Query(unit="sglang", invocation_id=INVOCATION)
    first = hu.read_host(query, marker, parts=frozenset(("journal",)))
    assert first.new_lines == 2
    cursor = first.journal_state["cursor"]
    assert cursor == "s=fake;i=1"
    fake.journal += [marker.format_line({"pid": 101, "state": "active"}), "ready"]
    fake.write()
    second = hu.read_host(query, marker, parts=frozenset(("journal",)), journal=first.journal_state)
    assert fake.journal_calls()[1] == " ".join(hu.journal_command(INVOCATION, cursor))
    assert f"--after-cursor={cursor}" in fake.journal_calls()[1]
    assert second.new_lines == 2  # only the two new ones were read
    assert second.journal == ["loading", "still loading", fake.journal[2], "ready"]
    assert [(m.pid, m.state) for m in second.markers] == [(101, "active")]
    third = hu.read_host(query, marker, parts=frozenset(("journal",)), journal=second.journal_state)
    assert third.new_lines == 0
    assert third.journal_state["cursor"] == "s=fake;i=3"


def test_invalid_utf8_and_a_100_kib_line_do_not_stop_the_reading(hu, marker, fake):
    long_line = ("é" * 50_000).encode()
    fake.journal = [long_line[:49_151], long_line[49_151:98_303], long_line[98_303:], b"\xff\xfe\x00 binary"]
    fake.journal.append(marker.format_line({"pid": 101, "state": "active"}))
    fake.write()
    snap = hu.read_host(
        hu.Query(unit="sglang", invocation_id=INVOCATION), marker, parts=frozenset(("journal",))
    )
    assert snap.new_lines == 5
    assert [(m.pid, m.state) for m in snap.markers] == [(101, "active")]
    assert "\ufffd" in snap.journal[3]
    assert snap.fatal == []


def test_a_traceback_in_another_unit_s_record_is_not_read_as_the_run_s(hu, fake):
    fake.journal = ["loading"]
    fake.records = [
        {"MESSAGE": "Traceback (most recent call last):", "_SYSTEMD_UNIT": "nginx.service", "_PID": "77"}
    ]
    fake.write()
    snap = hu.read_host(hu.Query(unit="sglang", invocation_id=INVOCATION), parts=frozenset(("journal",)))
    assert (snap.new_lines, snap.journal, snap.fatal) == (1, ["loading"], [])


def status_file(directory: Path, pid: int, state: str = "active", **extra) -> Path:
    directory.mkdir(exist_ok=True)
    path = directory / f"{pid}.json"
    path.write_text(json.dumps({"pid": pid, "state": state, "mode": "validate", "reason": "", **extra}))
    return path


def suppressed(fake, count: int = 5000) -> None:
    """A flood of the run's lines, then journald's record that it dropped the rest (the markers)."""
    fake.journal = [f"flood {n}" for n in range(50)]
    fake.records = [
        {
            "MESSAGE": f"Suppressed {count} messages from sglang.service",
            "MESSAGE_ID": "a596d6fe7bfa4994828e72dfa8b8a6d5",
            "N_DROPPED": str(count),
            "OBJECT_SYSTEMD_INVOCATION_ID": INVOCATION,
            "_SYSTEMD_UNIT": "systemd-journald.service",
        }
    ]
    fake.write()


def test_after_journald_suppression_the_status_file_gives_the_marker(hu, marker, fake, scheduler, tmp_path):
    pid, title = scheduler
    suppressed(fake)
    written = status_file(tmp_path / "status", pid)
    query = hu.Query(
        unit="sglang", invocation_id=INVOCATION, scheduler_prefix=title, status_dir=str(tmp_path / "status")
    )
    snap = hu.read_host(query, marker)
    assert snap.suppressed == 5000
    assert snap.markers == []
    assert [(s.pid, s.state, s.runtime_fallback) for s in snap.statuses] == [(pid, "active", False)]
    assert snap.statuses[0].line.startswith(f"{written}: state=active")


def test_no_status_file_is_read_while_loading_without_a_suppression(hu, marker, fake, scheduler, tmp_path):
    pid, title = scheduler
    fake.journal = ["loading"]
    fake.write()
    status_file(tmp_path / "status", pid)
    query = hu.Query(
        unit="sglang", invocation_id=INVOCATION, scheduler_prefix=title, status_dir=str(tmp_path / "status")
    )
    assert hu.read_host(query, marker).statuses == []


def test_a_status_file_of_an_earlier_process_with_the_same_pid_does_not_count(
    hu, marker, fake, scheduler, tmp_path
):
    pid, title = scheduler
    suppressed(fake)
    old = status_file(tmp_path / "status", pid)
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    query = hu.Query(
        unit="sglang", invocation_id=INVOCATION, scheduler_prefix=title, status_dir=str(tmp_path / "status")
    )
    assert hu.read_host(query, marker).statuses == []


def test_a_health_answer_from_a_process_outside_the_unit_is_named(hu, fake, health_server):
    """The health server runs in this test process; a unit whose cgroup holds no process does not own it."""
    fake.props["ControlGroup"] = "/system.slice/kdtree-test-nothing-here.service"
    fake.write()
    query = hu.Query(unit="sglang", invocation_id=INVOCATION, health_url=f"{health_server}/health")
    snap = hu.read_host(query)
    assert (
        snap.health
        == f"200 from pid {os.getpid()} ({Path('/proc/self/comm').read_text().strip()}), not sglang.service"
    )


def test_a_health_answer_from_the_unit_s_own_process_is_healthy(hu, fake, health_server):
    query = hu.Query(unit="sglang", invocation_id=INVOCATION, health_url=f"{health_server}/health")
    assert hu.read_host(query).health == "200"  # this process is in the unit's (own) cgroup


def test_status_files_are_read_once_the_server_answers(hu, marker, fake, scheduler, health_server, tmp_path):
    """journald logs its "Suppressed" record only when the unit logs again: do not wait for it."""
    pid, title = scheduler
    fake.props["ControlGroup"] = fake_host.own_cgroup()
    fake.journal = ["loading"]
    fake.write()
    status_file(tmp_path / "status", pid, state="fallback", runtime_fallback=True)
    query = hu.Query(
        unit="sglang",
        invocation_id=INVOCATION,
        scheduler_prefix=title,
        health_url=f"{health_server}/health",
        status_dir=str(tmp_path / "status"),
    )
    snap = hu.read_host(query, marker)
    assert snap.health == "200"
    assert [(s.pid, s.state, s.runtime_fallback) for s in snap.statuses] == [(pid, "fallback", True)]
