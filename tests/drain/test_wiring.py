"""Where the drain sits around the restarts (read from the task files): the smoke role drains right
before its restart task, only when it restarts and the mode is not none, and rejoins only after a
healthy check; the deploy and rollback roles run recover inside their lock. Mode none adds no task
that runs."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _tasks(path: str) -> list[dict]:
    return yaml.safe_load((ROOT / path).read_text())


def _includes(tasks: list[dict], entry: str) -> list[int]:
    return [
        i
        for i, task in enumerate(tasks)
        if (task.get("ansible.builtin.include_role") or {}).get("name") == "kdtree.fleet.kdtree_drain"
        and task["ansible.builtin.include_role"].get("tasks_from") == entry
    ]


def test_the_smoke_role_drains_right_before_its_restart_and_rejoins_after_a_healthy_check() -> None:
    tasks = _tasks("roles/kdtree_smoke/tasks/main.yml")
    restart = next(i for i, t in enumerate(tasks) if "kdtree.fleet.kdtree_smoke" in t)
    # between them only a serving group's meeting (all nodes ready, this one stopped, all stopped)
    assert _includes(tasks, "drain") == [restart - 2]
    assert tasks[restart - 1]["ansible.builtin.include_tasks"] == "group_stop.yml"
    drain = tasks[restart - 2]["when"]
    assert "kdtree_smoke_restart | bool" in drain and "kdtree_drain_mode | default('none') != 'none'" in drain
    assert "kdtree_smoke_node_rank | int == 0" in drain  # only rank 0 is a router worker
    [rejoin] = _includes(tasks, "rejoin")
    assert rejoin > restart
    assert "kdtree_smoke_result.state | default('') == 'ok'" in tasks[rejoin]["when"]
    assert "kdtree_drain_mode | default('none') != 'none'" in tasks[rejoin]["when"]


def test_deploy_and_rollback_recover_first_under_the_lock() -> None:
    deploy = _tasks("roles/kdtree_deploy/tasks/main.yml")
    block = next(t for t in deploy if "block" in t and "always" in t)["block"]
    assert _includes(block, "recover") == [0]
    rollback = _tasks("roles/kdtree_rollback/tasks/main.yml")
    block = next(t for t in rollback if "block" in t and "always" in t)["block"]
    # the rollback checks its options first under the lock and names the host's serving group (both
    # change nothing), then recovers
    assert block[0]["ansible.builtin.import_role"]["tasks_from"] == "inputs"
    assert "_kdtree_rollback_group" in block[1]["ansible.builtin.set_fact"]
    assert _includes(block, "recover") == [2]
