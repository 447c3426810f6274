"""The kdtree_router action plugin (plugins/action/kdtree_router.py): a wait that pends prints one line
per chunk and hands the time waited to the next call; an action that does not wait runs once."""

from __future__ import annotations

import copy
import importlib
from types import SimpleNamespace

import pytest
from ansible.errors import AnsibleActionFail
from ansible_collections.kdtree.fleet.plugins.module_utils._chunk import WAITED_OPTION


@pytest.fixture(scope="module")
def action():
    return importlib.import_module("ansible_collections.kdtree.fleet.plugins.action.kdtree_router")


def run_action(plugin_module, chunks, monkeypatch, **args):
    lines: list[str] = []
    action = plugin_module
    monkeypatch.setattr(action.display, "display", lambda msg, *a, **k: lines.append(msg))
    calls: list[dict] = []

    class Plugin(action.ActionModule):
        def _execute_module(self, module_name=None, module_args=None, task_vars=None, **kwargs):
            assert module_name == "kdtree.fleet.kdtree_router"
            calls.append(copy.deepcopy(module_args))
            return chunks.pop(0)

    task = SimpleNamespace(args=args, async_val=0, check_mode=False, action="kdtree.fleet.kdtree_router")
    connection = SimpleNamespace(_shell=SimpleNamespace(tmpdir="/tmp/x"))
    plugin = Plugin(task, connection, None, None, None, None)
    return plugin.run(task_vars={"inventory_hostname": "gpu1"}), calls, lines


def pending(progress: str, changed: bool = False) -> dict:
    return {"state": "pending", "progress": progress, "changed": changed, "waited_s": 10.0}


def test_a_drain_wait_prints_a_line_per_chunk_and_hands_the_time_waited_on(action, monkeypatch):
    waiting = "10 s of 300 s for no request in flight on http://h:30000 (2 request(s) in flight)"
    chunks = [pending(waiting)]
    chunks += [{"changed": False, "waited_s": 12.0}]
    result, calls, lines = run_action(
        action, chunks, monkeypatch, action="wait_idle", server_url="http://h:30000"
    )
    assert lines == ["  [gpu1] drain: waiting " + waiting]
    assert WAITED_OPTION not in calls[0]
    assert calls[1][WAITED_OPTION] >= 0 and calls[1]["action"] == "wait_idle"
    assert result["waited_s"] == 12.0 and result["changed"] is False and not result.get("failed")


def test_a_rejoin_is_labelled_rejoin_and_keeps_the_first_chunks_change(action, monkeypatch):
    chunks = [pending("0 s of 60 s for the router to list http://h:30000 healthy", changed=True)]
    chunks += [{"changed": False, "worker": {"url": "http://h:30000"}}]
    result, _calls, lines = run_action(action, chunks, monkeypatch, action="add", worker_url="http://h:30000")
    assert lines[0].startswith("  [gpu1] rejoin: waiting 0 s of 60 s")
    assert result["changed"] is True


def test_a_failure_after_chunks_is_the_modules_failure(action, monkeypatch):
    chunks = [pending("p"), {"failed": True, "msg": "kdtree drain: in-flight requests did not finish"}]
    result, _calls, _lines = run_action(action, chunks, monkeypatch, action="wait_idle")
    assert result["failed"] is True and "did not finish" in result["msg"]


def test_an_action_that_does_not_wait_runs_once_and_prints_nothing(action, monkeypatch):
    result, calls, lines = run_action(
        action, [{"changed": False, "workers": []}], monkeypatch, action="workers"
    )
    assert len(calls) == 1 and lines == [] and result["workers"] == []


def test_a_task_that_sets_the_internal_option_is_refused(action, monkeypatch):
    with pytest.raises(AnsibleActionFail, match=rf"{WAITED_OPTION} is internal"):
        run_action(action, [{}], monkeypatch, action="wait_idle", **{WAITED_OPTION: 1.0})
