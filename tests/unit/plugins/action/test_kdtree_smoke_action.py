"""The kdtree_smoke action plugin's chunk loop (plugins/action/kdtree_smoke.py): one line per chunk,
the run handed back, fail_on_error, the internal options refused and left out of the invocation."""

from __future__ import annotations

import copy
import importlib
from types import SimpleNamespace

import pytest
from ansible.errors import AnsibleActionFail
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.run import RUN_OPTION
from ansible_collections.kdtree.fleet.tests.unit.helpers.smoke_fakes import INVOCATION, T0


@pytest.fixture(scope="module")
def action():
    return importlib.import_module("ansible_collections.kdtree.fleet.plugins.action.kdtree_smoke")


def run_action(action, chunks, monkeypatch, **args):
    lines: list[str] = []
    monkeypatch.setattr(action.display, "display", lambda msg, *a, **k: lines.append(msg))
    calls: list[tuple[str, dict]] = []

    class Plugin(action.ActionModule):
        def _execute_module(self, module_name=None, module_args=None, task_vars=None, **kwargs):
            calls.append((module_name, copy.deepcopy(module_args)))
            return chunks.pop(0)

    task_args = {"unit": "sglang", "restart": True, "health_url": "http://h/health", **args}
    task = SimpleNamespace(args=task_args, async_val=0, check_mode=False, action="kdtree.fleet.kdtree_smoke")
    connection = SimpleNamespace(_shell=SimpleNamespace(tmpdir="/tmp/x"))
    plugin = Plugin(task, connection, None, None, None, None)
    result = plugin.run(task_vars={"inventory_hostname": "gpu1"})
    return result, calls, lines


def chunk(state: str, n: int, changed: bool = False) -> dict:
    run = {"invocation_id": INVOCATION, "baseline_nrestarts": 0, "started_at": T0, "healthy_since": None}
    return {"state": state, "changed": changed, "progress": f"p{n}", "run": run, "msg": state}


def test_action_prints_one_line_per_chunk_and_hands_the_run_back(action, monkeypatch):
    chunks = [chunk("pending", 1, changed=True), chunk("pending", 2), chunk("ok", 3)]
    result, calls, lines = run_action(action, chunks, monkeypatch)
    assert lines == ["  [gpu1] sglang: waiting p1", "  [gpu1] sglang: waiting p2"]
    assert [name for name, _args in calls] == ["kdtree.fleet.kdtree_smoke"] * 3
    assert calls[0][1]["restart"] is True
    assert RUN_OPTION not in calls[0][1]
    for _name, args in calls[1:]:
        assert args["restart"] is False
        assert args[RUN_OPTION]["invocation_id"] == INVOCATION
    assert all("fail_on_error" not in args for _name, args in calls)
    assert result["state"] == "ok"
    assert result["changed"] is True
    assert not result.get("failed")


@pytest.mark.parametrize(("fail_on_error", "failed"), [(True, True), (False, False), ("false", False)])
def test_action_fails_an_unhealthy_run_unless_fail_on_error_is_false(
    action, monkeypatch, fail_on_error, failed
):
    result, _calls, _lines = run_action(
        action, [chunk("failed", 1)], monkeypatch, fail_on_error=fail_on_error
    )
    assert result["state"] == "failed"
    assert bool(result.get("failed")) is failed


def test_action_passes_a_module_failure_through_whatever_fail_on_error_says(action, monkeypatch):
    broken = {"failed": True, "msg": "marker.py does not exist", "state": "failed"}
    result, calls, _lines = run_action(action, [broken], monkeypatch, fail_on_error=False)
    assert result["failed"] is True
    assert len(calls) == 1


@pytest.mark.parametrize("name", [RUN_OPTION, "_fail_on_error"])
def test_action_refuses_a_task_that_sets_an_internal_option(action, monkeypatch, name):
    with pytest.raises(AnsibleActionFail, match=rf"{name} is internal"):
        run_action(action, [chunk("ok", 1)], monkeypatch, **{name: {"invocation_id": INVOCATION}})


def test_action_leaves_the_internal_option_out_of_the_invocation_it_returns(action, monkeypatch):
    def with_invocation(state: str, n: int) -> dict:
        args = {"unit": "sglang", RUN_OPTION: {"journal": {"cursor": "s=1"}}}
        return {**chunk(state, n), "invocation": {"module_args": args}}

    result, _calls, _lines = run_action(
        action, [with_invocation("pending", 1), with_invocation("ok", 2)], monkeypatch
    )
    assert result["invocation"]["module_args"] == {"unit": "sglang"}
    assert result["run"]["invocation_id"] == INVOCATION


def test_action_has_no_unused_names(action):
    assert not hasattr(action, "ACTION_ONLY")


def test_a_peer_that_failed_ends_this_node_s_watch_at_the_next_chunk(action, monkeypatch, tmp_path):
    rv = importlib.import_module("ansible_collections.kdtree.fleet.plugins.plugin_utils._rendezvous")
    monkeypatch.setattr(rv.tempfile, "gettempdir", lambda: str(tmp_path))
    rv.Rendezvous("deploy-ds").post(rv.ABORT, "gpu2", "failed", {"why": "scheduler crashed"})
    chunks = [chunk("pending", 1, changed=True), chunk("pending", 2), chunk("ok", 3)]
    result, calls, _lines = run_action(
        action, chunks, monkeypatch, group={"name": "deploy-ds", "members": ["gpu1", "gpu2"]}
    )
    assert len(calls) == 1  # the restart ran; the next chunk was not asked for
    assert result["failed"] is True and result["state"] == "failed"
    assert "gpu2 of serving group deploy-ds failed (scheduler crashed)" in result["msg"]
    assert all("group" not in args for _name, args in calls)


def test_a_group_whose_peers_are_fine_is_watched_to_the_end(action, monkeypatch, tmp_path):
    rv = importlib.import_module("ansible_collections.kdtree.fleet.plugins.plugin_utils._rendezvous")
    monkeypatch.setattr(rv.tempfile, "gettempdir", lambda: str(tmp_path))
    # this node's own abort word and another group's are not a peer's
    rv.Rendezvous("deploy-ds").post(rv.ABORT, "gpu1", "failed", {"why": "mine"})
    rv.Rendezvous("deploy-other").post(rv.ABORT, "gpu2", "failed", {"why": "theirs"})
    chunks = [chunk("pending", 1), chunk("ok", 2)]
    result, calls, _lines = run_action(
        action, chunks, monkeypatch, group={"name": "deploy-ds", "members": ["gpu1", "gpu2"]}
    )
    assert len(calls) == 2 and result["state"] == "ok" and not result.get("failed")
