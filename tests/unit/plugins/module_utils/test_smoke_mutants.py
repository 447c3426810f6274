"""Two rules of the smoke check's judge() that no other test pinned tightly enough to catch a slip
(scripts/mutation-check.sh applies each slip and expects these tests to fail):

- every wanted NCCL variable must be present in a scheduler's environment: a missing one is as
  wrong as a wrong value (slip: compare only the variables the scheduler has);
- the scheduler count must equal the TP size: more schedulers than TP ranks is not healthy (slip:
  `count >= expected`).
"""

from __future__ import annotations

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke import judge as sj
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.run import RunState

INVOCATION = "fedcba9876543210fedcba9876543210"
T0 = 1_764_500_000.0
NCCL = {"NCCL_P2P_LEVEL": "SYS", "NCCL_ALGO": "Ring"}


def snapshot(hu, marker, schedulers: dict[int, dict[str, str]], at: float = 20.0):
    """A live unit, health 200, every scheduler in `schedulers` (pid -> environ) marked active."""
    journal = [
        marker.format_line({"pid": pid, "ppid": 100, "title": f"sglang::scheduler_TP{i}", "state": "active"})
        for i, pid in enumerate(schedulers)
    ]
    markers, fallbacks = hu.parse_journal(journal, marker)
    return hu.Snapshot(
        read_at=T0 + at,
        invocation_id=INVOCATION,
        props={"ActiveState": "active", "SubState": "running", "NRestarts": "0", "InvocationID": INVOCATION},
        journal=journal,
        markers=markers,
        runtime_fallbacks=fallbacks,
        health="200",
        schedulers=[
            hu.Process(pid=pid, title=f"sglang::scheduler_TP{i} ", environ=env)
            for i, (pid, env) in enumerate(schedulers.items())
        ],
    )


def wanted(expected: int, nccl_env: dict[str, str] | None = None):
    return sj.Wanted(
        unit="sglang",
        run=RunState(invocation_id=INVOCATION, baseline_nrestarts=0, started_at=T0),
        timeout_s=60.0,
        expected_schedulers=expected,
        marker_state="active",
        nccl_env=dict(NCCL) if nccl_env is None else nccl_env,
        settle_s=0.0,
    )


def test_the_baseline_two_schedulers_with_the_nccl_environment_are_healthy(hu, marker):
    snap = snapshot(hu, marker, {201: dict(NCCL), 202: dict(NCCL)})
    assert sj.judge(snap, wanted(2)).state == "ok"


@pytest.mark.parametrize(
    "environ",
    [{"NCCL_P2P_LEVEL": "SYS"}, {"PATH": "/usr/bin", "SPT_NOENV": "1"}],
    ids=["one-of-two-missing", "none-of-them-set"],
)
def test_a_scheduler_missing_a_wanted_nccl_variable_fails_and_names_it(hu, marker, environ):
    snap = snapshot(hu, marker, {201: dict(NCCL), 202: environ})
    verdict = sj.judge(snap, wanted(2))
    assert verdict.state == "failed"
    assert "does not run with the templated NCCL environment" in verdict.why
    assert '"NCCL_ALGO": null' in verdict.detail
    assert [s["nccl_env_ok"] for s in verdict.schedulers] == [True, False]


def test_a_missing_nccl_variable_is_never_healthy_even_after_the_settle_time(hu, marker):
    for at in (5.0, 30.0, 59.0):
        snap = snapshot(hu, marker, {201: {"NCCL_P2P_LEVEL": "SYS"}}, at=at)
        assert sj.judge(snap, wanted(1)).state == "failed"


@pytest.mark.parametrize("extra", [1, 2])
def test_more_schedulers_than_tp_ranks_never_becomes_healthy(hu, marker, extra):
    pids = {201 + i: dict(NCCL) for i in range(2 + extra)}
    verdict = sj.judge(snapshot(hu, marker, pids), wanted(2))
    assert verdict.state == "pending"
    assert f"schedulers={2 + extra}/2" in verdict.progress
    late = sj.judge(snapshot(hu, marker, pids, at=61.0), wanted(2))
    assert late.state == "failed" and "not healthy within 60 s" in late.why


def test_fewer_schedulers_than_tp_ranks_keeps_waiting(hu, marker):
    verdict = sj.judge(snapshot(hu, marker, {201: dict(NCCL)}), wanted(2))
    assert verdict.state == "pending"
