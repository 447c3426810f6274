"""The kdtree_command action plugin (plugins/action/kdtree_command.py): the command runs in the
background under ansible.builtin.command and a progress line is printed about every progress_s while
async_status says it runs; the result is the command's; check mode runs nothing in the background; a
command stopped at limit_s fails saying so."""

from __future__ import annotations

import copy
import importlib
from types import SimpleNamespace

import pytest
from ansible.errors import AnsibleActionFail


@pytest.fixture(scope="module")
def plugin_module():
    return importlib.import_module("ansible_collections.kdtree.fleet.plugins.action.kdtree_command")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def run_action(mod, answers, monkeypatch, check_mode=False, ends_at=0.0, **args):
    """answers: what the command module answers (the start: a job id), then what async_status answers
    once the clock reached `ends_at` seconds after the start (before: the job runs)."""
    clock = Clock()
    start = clock.now
    monkeypatch.setattr(mod.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(mod.time, "sleep", clock.sleep)
    lines: list[str] = []
    monkeypatch.setattr(mod.display, "display", lambda msg, *a, **k: lines.append(msg))
    calls: list[tuple] = []

    class Plugin(mod.ActionModule):
        def _execute_module(self, module_name=None, module_args=None, task_vars=None, wrap_async=False, **kw):
            calls.append((module_name, copy.deepcopy(module_args), wrap_async, self._task.async_val))
            if module_name == mod.COMMAND:
                return answers.pop(0)
            if module_args.get("mode") == "cleanup":
                return {"erased": "x"}
            return RUNNING if clock.now - start < ends_at else answers.pop(0)

        def _remote_expand_user(self, path, sudoable=True):
            return "/root/.ansible_async"

        def get_shell_option(self, option, default=None):
            return default

        def _remove_tmp_path(self, tmp_path, force=False):
            return None

    task_args = {"what": "compile sm_90", "limit_s": 630, "progress_s": 10, **args}
    task = SimpleNamespace(
        args=task_args,
        async_val=0,
        check_mode=check_mode,
        action="kdtree.fleet.kdtree_command",
        environment=[],
    )
    connection = SimpleNamespace(_shell=SimpleNamespace(tmpdir=None))
    plugin = Plugin(task, connection, None, None, None, None)
    return plugin.run(task_vars={"inventory_hostname": "gpu1"}), calls, lines, clock


STARTED = {"ansible_job_id": "j1", "started": 1, "finished": 0, "changed": True}
RUNNING = {"ansible_job_id": "j1", "started": 1, "finished": 0}
DONE = {"ansible_job_id": "j1", "started": 1, "finished": 1, "results_file": "/x", "rc": 0}
DONE |= {"stdout": "compiled", "stderr": "", "changed": True}


def test_a_command_of_25_s_prints_two_lines_and_returns_the_commands_result(plugin_module, monkeypatch):
    result, calls, lines, _clock = run_action(
        plugin_module, [STARTED, DONE], monkeypatch, ends_at=25, cmd="sh build.sh"
    )
    assert lines == [
        "  [gpu1] compile sm_90: waiting 10 s of 630 s",
        "  [gpu1] compile sm_90: waiting 20 s of 630 s",
    ]
    start = calls[0]
    assert start[0] == "ansible.legacy.command" and start[2] is True and start[3] == 630
    assert start[1] == {"_raw_params": "sh build.sh", "_uses_shell": True, "executable": "/bin/sh"}
    assert calls[1][1] == {"jid": "j1", "_async_dir": "/root/.ansible_async"}
    looks = len(calls) - 2  # at 0.25, 0.75, 1.75, 3.75 s, then every 2 s (and at each line)
    assert 13 <= looks <= 16
    assert calls[-1][1]["mode"] == "cleanup"
    assert result["stdout"] == "compiled" and result["rc"] == 0 and result["changed"] is True
    assert not set(plugin_module.BOOKKEEPING) & set(result)
    assert 25 <= result["waited_s"] <= 27


def test_argv_and_creates_go_to_the_command_module_as_they_are(plugin_module, monkeypatch):
    result, calls, lines, _clock = run_action(
        plugin_module, [STARTED, DONE], monkeypatch, argv=["python3", "x.py", "claim"], creates="/opt/x.so"
    )
    assert calls[0][1] == {"argv": ["python3", "x.py", "claim"], "creates": "/opt/x.so"}
    assert lines == []  # ended within its first interval
    assert result["waited_s"] == pytest.approx(0.25)  # a quick command is looked at after 0.25 s


def test_a_failing_command_fails_with_its_own_rc_and_stderr(plugin_module, monkeypatch):
    failed = {**DONE, "failed": True, "rc": 1, "stderr": "nvcc: error", "msg": "non-zero return code"}
    result, _calls, _lines, _clock = run_action(
        plugin_module, [STARTED, RUNNING, failed], monkeypatch, cmd="x"
    )
    assert result["failed"] is True and result["rc"] == 1 and result["stderr"] == "nvcc: error"
    assert result["msg"] == "non-zero return code"


def test_a_command_stopped_at_its_limit_fails_naming_what_and_the_limit(plugin_module, monkeypatch):
    stopped = {
        "ansible_job_id": "j1",
        "finished": 1,
        "failed": True,
        "msg": "Timeout exceeded",
        "child_pid": 7,
    }
    result, _calls, _lines, _clock = run_action(
        plugin_module, [STARTED, stopped], monkeypatch, ends_at=8, cmd="x", limit_s=8
    )
    assert result["failed"] is True
    assert result["msg"] == "compile sm_90: did not end within 8 s and was stopped (Timeout exceeded)"


def test_check_mode_runs_the_command_module_once_and_nothing_in_the_background(plugin_module, monkeypatch):
    would = {"changed": False, "skipped": True, "msg": "Command would have run if not in check mode"}
    result, calls, lines, _clock = run_action(plugin_module, [would], monkeypatch, check_mode=True, cmd="x")
    assert [(name, wrap) for name, _args, wrap, _limit in calls] == [("ansible.legacy.command", False)]
    assert result["skipped"] is True and lines == []


def test_a_task_with_both_argv_and_cmd_is_refused_before_anything_runs(plugin_module, monkeypatch):
    with pytest.raises(AnsibleActionFail, match="mutually exclusive"):
        run_action(plugin_module, [], monkeypatch, cmd="x", argv=["y"])
