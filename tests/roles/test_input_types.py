"""Every role a user sets string options of refuses one that YAML read as another type (an unquoted
on/off/yes/no, 0755, 1.10, an empty value) before anything changes, naming the variable and the trap:
the argument spec's type str lets such a value through. One check (kdtree_common, entry point inputs;
the rule in module_utils/_yaml_types.py), run first by the entry point a caller reaches first."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from conftest import PLAYBOOK_BIN, ROLES, load_yaml, run_play

ROLE_NAMES = sorted(p.name for p in ROLES.iterdir() if (p / "meta" / "argument_specs.yml").exists())

# The task file of each role that checks its options, the first its callers reach: deploy.yml's steps
# (build and patch check, the service preflight, the drain's recover), the roles the playbooks run.
CHECKED = {
    "kdtree_build": ["check.yml"],
    "kdtree_deploy": ["main.yml"],
    "kdtree_drain": ["drain.yml", "rejoin.yml", "recover.yml"],
    "kdtree_patch": ["check.yml"],
    "kdtree_report": ["main.yml"],
    "kdtree_rollback": ["main.yml"],
    "kdtree_service": ["preflight.yml"],
    "kdtree_smoke": ["main.yml"],
}
# No option of theirs is a string a user writes: kdtree_common is private (its callers are the roles),
# kdtree_promote's are numbers.
UNCHECKED = {"kdtree_common", "kdtree_promote"}


def _checks_inputs(task: dict, role: str) -> bool:
    call = task.get("ansible.builtin.import_role") or {}
    return (
        call.get("name") == "kdtree.fleet.kdtree_common"
        and call.get("tasks_from") == "inputs"
        and task.get("vars", {}).get("kdtree_common_inputs_role") == role
    )


def _string_options(role: str) -> list[str]:
    spec = load_yaml(ROLES / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    return [n for n, s in spec.items() if s.get("type") in ("str", "path") or s.get("elements") == "str"]


def test_every_role_with_string_options_is_checked_or_named_as_unchecked():
    assert sorted([*CHECKED, *UNCHECKED]) == ROLE_NAMES
    assert [role for role in UNCHECKED if role != "kdtree_common" and _string_options(role)] == []
    assert all(_string_options(role) for role in CHECKED)


def _in_order(tasks: list[dict]) -> list[dict]:
    """The tasks as they run when nothing fails: a block's own tasks in its place."""
    flat = []
    for task in tasks:
        flat += _in_order(task["block"]) if "block" in task else [task]
    return flat


# What may run before the check: reads and refusals, the service's facts (import_tasks), the canary stop
# (ends or fails the host) and the rollback's lock (bookkeeping: a refusal under it is recorded like any
# failed rollback, and the lock released)
READERS = {
    "ansible.builtin.assert",
    "ansible.builtin.fail",
    "ansible.builtin.set_fact",
    "ansible.builtin.import_tasks",
}
BOOKKEEPING = [{"name": "kdtree.fleet.kdtree_common", "tasks_from": entry} for entry in ("stop", "lock")]


@pytest.mark.parametrize(("role", "task_file"), [(r, f) for r, files in CHECKED.items() for f in files])
def test_the_entry_point_checks_its_options_before_any_task_that_changes_the_host(role, task_file):
    tasks = _in_order(load_yaml(ROLES / role / "tasks" / task_file))
    checks = [i for i, task in enumerate(tasks) if _checks_inputs(task, role)]
    assert len(checks) == 1, (role, task_file)
    before = [
        set(task) & READERS or task.get("ansible.builtin.import_role") in BOOKKEEPING
        for task in tasks[: checks[0]]
    ]
    assert all(before), (role, task_file, tasks[: checks[0]])


SMOKE_REQUIRED = {
    "kdtree_smoke_service_name": "sglang",
    "kdtree_smoke_health_url": "http://127.0.0.1:9/health",
}
# role, entry point, variables as an inventory writes them, the refusal that names the variable and its trap
CASES = [
    (
        "kdtree_build",
        "check",
        {"kdtree_build_compute_capability": "12.0"},
        "capability is the YAML float 12.0",
    ),
    ("kdtree_patch", "check", {"kdtree_patch_root": "~"}, "kdtree_patch_root is null"),
    (
        "kdtree_drain",
        "recover",
        {"kdtree_drain_rejoin_command": "[curl, on]"},
        "command[1] is the YAML boolean",
    ),
    ("kdtree_report", "main", {"kdtree_report_json": "0755"}, "kdtree_report_json is the YAML integer 493"),
    (
        "kdtree_smoke",
        "main",
        {"kdtree_smoke_request_prompt": "yes", **SMOKE_REQUIRED},
        "prompt is the YAML boolean",
    ),
]


@pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")
@pytest.mark.parametrize(("role", "entry", "variables", "refusal"), CASES, ids=[c[0] for c in CASES])
def test_a_value_yaml_read_as_another_type_is_refused_first(tmp_path: Path, role, entry, variables, refusal):
    as_read = {name: yaml.safe_load(f"v: {text}")["v"] for name, text in variables.items()}  # as an inventory
    play = {
        "name": "Role inputs",
        "hosts": "localhost",
        "gather_facts": False,
        "tasks": [
            {
                "name": "Run the entry point",
                "ansible.builtin.include_role": {"name": f"kdtree.fleet.{role}", "tasks_from": entry},
                "vars": as_read,
            }
        ],
    }
    out = run_play(tmp_path / "inputs.yml", play)
    text = re.sub(r"\s+", " ", out.stdout + out.stderr)
    assert out.returncode != 0
    assert refusal in text and "write the value in quotes" in text, text[-2000:]
    assert f"{role}: " in text and "Nothing was changed." in text
    assert "TASK [" not in text.split("Refuse a string option YAML read", 1)[1]  # nothing ran after it
