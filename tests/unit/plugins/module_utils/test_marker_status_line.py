"""The patch's `kdtree-verify-status: ... state=unwritable` line (KDTREE_STATUS_DIR could not be
written) through the smoke check's journal parsing: never read as a runtime fallback to Triton,
never as a marker; marker.py's match_status_problem() is how a parser can recognise it."""

from __future__ import annotations

from ansible_collections.kdtree.fleet.plugins.module_utils._smoke import judge as sj
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.run import RunState

INVOCATION = "00112233445566778899aabbccddeeff"
T0 = 1_764_510_000.0


def status_line(marker, pid: int) -> str:
    reason = marker.escape("/run/kdtree-status is group- or world-writable (mode 0777)")
    return f"{marker.STATUS_PREFIX} pid={pid} state={marker.STATUS_UNWRITABLE} reason={reason}"


def test_the_status_line_is_neither_a_marker_nor_a_runtime_fallback(marker):
    line = status_line(marker, 301)
    assert marker.match_marker(line) is None
    assert marker.match_runtime_fallback(line) is None
    assert marker.match_status_problem(line) == (301, "unwritable")


def test_the_smoke_check_passes_an_active_scheduler_whose_status_file_was_unwritable(hu, marker):
    journal = [
        marker.format_line({"pid": 301, "ppid": 100, "title": "sglang::scheduler", "state": "active"}),
        status_line(marker, 301),
    ]
    markers, fallbacks = hu.parse_journal(journal, marker)
    assert [(m.pid, m.state) for m in markers] == [(301, "active")] and fallbacks == []
    snap = hu.Snapshot(
        read_at=T0 + 10,
        invocation_id=INVOCATION,
        props={"ActiveState": "active", "NRestarts": "0", "InvocationID": INVOCATION},
        journal=journal,
        markers=markers,
        runtime_fallbacks=fallbacks,
        health="200",
        schedulers=[hu.Process(pid=301, title="sglang::scheduler", environ={"NCCL_ALGO": "Ring"})],
    )
    wanted = sj.Wanted(
        unit="sglang",
        run=RunState(invocation_id=INVOCATION, started_at=T0),
        timeout_s=60.0,
        expected_schedulers=1,
        nccl_env={"NCCL_ALGO": "Ring"},
        settle_s=0.0,
    )
    verdict = sj.judge(snap, wanted)
    assert verdict.state == "ok", verdict.msg
    assert "fell back" not in verdict.msg
