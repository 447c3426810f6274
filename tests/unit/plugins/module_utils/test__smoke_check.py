"""The smoke check's execute() (module_utils/_smoke/check.py) on a fake host: check mode, a bounded
restart, the run it watches across chunks, the marker module it needs, what reaches the reader."""

from __future__ import annotations

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke import check as sc
from ansible_collections.kdtree.fleet.tests.unit.helpers.smoke_fakes import (
    INVOCATION,
    T0,
    Host,
    execute,
    params,
)


def test_check_mode_restarts_and_reads_nothing():
    result = sc.execute(params(restart=True, patch_dir=""), check_mode=True)
    assert result["changed"] is True
    assert result["state"] == "ok"
    assert "check mode" in result["msg"]


def test_a_restart_is_bounded_and_starts_a_new_run(hu):
    host = Host(hu)
    result = execute(host, restart=True, restart_timeout_s=120.0)
    assert host.restarts == [("sglang", 120.0)]
    assert result["changed"] is True
    assert {key: result["run"][key] for key in ("invocation_id", "baseline_nrestarts", "started_at")} == {
        "invocation_id": "a" * 32,
        "baseline_nrestarts": 3,
        "started_at": T0,
    }
    assert result["run"]["healthy_since"] == T0 + 1.0
    assert result["state"] == "ok"


def test_without_a_restart_the_unit_s_current_run_is_watched(hu):
    host = Host(hu)
    result = execute(host)
    assert host.restarts == []
    assert result["changed"] is False
    assert result["run"]["invocation_id"] == INVOCATION
    assert result["run"]["started_at"] == T0
    assert host.reads[0] == frozenset(("unit",))


def test_a_later_chunk_keeps_watching_the_run_it_is_given(hu):
    host = Host(hu)
    run = {"invocation_id": INVOCATION, "baseline_nrestarts": 0, "started_at": T0 - 50, "healthy_since": None}
    result = execute(host, _run=run)
    assert host.reads == [None]  # no look at the unit's current run first
    assert result["run"]["started_at"] == T0 - 50
    assert result["elapsed_s"] == 50.0


def test_a_restart_of_the_watched_run_between_chunks_fails(hu):
    host = Host(hu)
    run = {"invocation_id": "b" * 32, "baseline_nrestarts": 0, "started_at": T0, "healthy_since": None}
    result = execute(host, _run=run)
    assert result["state"] == "failed"
    assert "restarted" in result["msg"]


def test_a_wanted_marker_state_needs_patch_dir(hu):
    host = Host(hu)
    with pytest.raises(sc.SmokeError, match="needs patch_dir"):
        execute(host, restart=True, patch_dir="")
    assert host.restarts == []


def test_a_missing_marker_py_fails_before_the_restart(hu, tmp_path):
    host = Host(hu)
    with pytest.raises(sc.SmokeError, match=r"marker\.py does not exist"):
        execute(host, restart=True, patch_dir=str(tmp_path))
    assert host.restarts == []
    assert host.reads == []


def test_a_rollback_needs_no_marker_py(hu):
    host = Host(hu)
    result = execute(host, restart=True, marker_state="", patch_dir="", nccl_env={})
    assert result["state"] == "ok"
    assert result["schedulers"][0]["marker"] == "none"


def test_a_restart_that_does_not_finish_is_a_failed_run_with_its_own_message(hu):
    """A failed run, not a module failure: with fail_on_error false (a rollback) the caller goes on."""
    host = Host(hu)

    def restart(unit, timeout_s):
        host.now += timeout_s
        raise hu.HostError(
            f"restart did not finish within {timeout_s:g} s (`systemctl restart {unit}.service`)"
        )

    result = sc.execute(
        params(restart=True), read=host.read, restart=restart, clock=host.clock, monotonic=host.clock
    )
    assert result["state"] == "failed"
    assert result["why"].startswith("restart did not finish within 300 s")
    assert result["msg"].startswith("sglang.service: restart did not finish within 300 s")
    assert result["changed"] is True
    assert host.reads == []


def test_a_later_chunk_reads_the_journal_on_from_the_state_it_is_given(hu):
    host = Host(hu)
    state = {"cursor": "s=abc;i=99", "lines": 99}
    run = {"invocation_id": INVOCATION, "baseline_nrestarts": 0, "started_at": T0, "journal": state}
    execute(host, _run=run)
    assert host.queries[0][1] == state


def test_the_benign_patterns_status_dir_and_restart_time_reach_the_reader(hu):
    host = Host(hu)
    execute(
        host,
        restart=True,
        status_dir="/run/kdtree-verify",
        benign_tracebacks=["a"],
        extra_benign_tracebacks=["b"],
    )
    query = host.queries[-1][0]
    assert query.benign_tracebacks == ("a", "b")
    assert query.status_dir == "/run/kdtree-verify"
    assert query.not_before == T0


def test_an_invalid_benign_pattern_fails_before_the_restart(hu):
    host = Host(hu)
    with pytest.raises(sc.SmokeError, match="is not a regex"):
        execute(host, restart=True, extra_benign_tracebacks=["(oops"])
    assert host.restarts == []
