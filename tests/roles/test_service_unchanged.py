"""A redeploy that changes nothing (kdtree_service "Unchanged"): the preflight finds the service unchanged
only from the host's own evidence, read once, and only then leaves out its probe, the change's writes and
the deploy's rescue plan. Every rule is rendered with Ansible's templar from the role's own files."""

from __future__ import annotations

import hashlib

import pytest
from conftest import ROLES, load_yaml

ansible_template = pytest.importorskip("ansible.template")

SERVICE = ROLES / "kdtree_service" / "tasks"
DROPIN_TEXT = '[Service]\nEnvironment="KDTREE_VERIFY=validate"\n'


def _task(tasks_file, name_start: str) -> dict:
    return next(t for t in _all(load_yaml(tasks_file)) if t.get("name", "").startswith(name_start))


def _all(tasks):
    for task in tasks or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _all(task.get(key))


def _render(expression, **variables):
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    templar = Templar(loader=DataLoader(), variables=variables)
    if isinstance(expression, list):
        return [templar.template(trust_as_template("{{ " + e + " }}")) for e in expression]
    return templar.template(trust_as_template(expression))


def _left_by_change() -> str:
    """What the read prints on a host the change left as it leaves it (change.yml's own modes)."""
    copy = _task(SERVICE / "change.yml", "Install the drop-in")["ansible.builtin.copy"]
    directory = _task(SERVICE / "change.yml", "Create the unit's drop-in directory")["ansible.builtin.file"]
    assert (copy["owner"], copy["group"], directory["owner"], directory["group"]) == ("root",) * 4
    sha = hashlib.sha256(DROPIN_TEXT.encode()).hexdigest()
    return (
        f"dropin: 'regular file {copy['mode'].lstrip('0')} 0 0'\n"
        f"dropin_sha256: '{sha}'\n"
        f"dropin_dir: 'directory {directory['mode'].lstrip('0')} 0 0'\n"
        "backup: 'present'\n"
        "secret: 'absent'\n"
    )


def unchanged(stdout: str | None) -> bool:
    decide = _task(SERVICE / "preflight.yml", "Find whether the change has anything to do")
    read = {"skipped": True} if stdout is None else {"changed": False, "stdout": stdout}
    value = _render(
        decide["ansible.builtin.set_fact"]["kdtree_service_unchanged"],
        __kdtree_service_now=read,
        kdtree_service_dropin_text=DROPIN_TEXT,
    )
    return value in (True, "True")


def test_the_host_as_the_change_leaves_it_is_unchanged():
    assert unchanged(_left_by_change())


@pytest.mark.parametrize(
    ("line", "now"),
    [
        ("dropin: 'regular file 644 0 0'", "dropin: 'regular file 600 0 0'"),  # the copy would fix the mode
        ("dropin: 'regular file 644 0 0'", "dropin: 'regular file 644 1000 0'"),  # and the owner
        ("dropin: 'regular file 644 0 0'", "dropin: 'symbolic link 777 0 0'"),
        ("dropin: 'regular file 644 0 0'", "dropin: 'absent'"),
        ("directory 755 0 0", "directory 775 0 0"),
        ("backup: 'present'", "backup: 'absent'"),  # the stock unit's backup is made before any change
        ("secret: 'absent'", "secret: 'present'"),  # the change would remove it (and restart)
    ],
)
def test_anything_the_change_would_touch_takes_the_full_path(line, now):
    left = _left_by_change()
    assert line in left
    assert not unchanged(left.replace(line, now))


def test_another_drop_in_text_takes_the_full_path():
    left = _left_by_change()
    other = hashlib.sha256(b"[Service]\n").hexdigest()
    assert not unchanged(left.replace(hashlib.sha256(DROPIN_TEXT.encode()).hexdigest(), other))


def test_no_read_is_no_evidence():
    assert not unchanged(None)


GOOD_RUN = {
    "_kdtree_service_inputs_unchanged": True,
    "kdtree_service_force_restart": False,
    "kdtree_service_env_secret": {},
    "__kdtree_service_unit": {"status": {"ActiveState": "active", "NeedDaemonReload": "no"}},
}


@pytest.mark.parametrize(
    "over",
    [
        {"_kdtree_service_inputs_unchanged": False},  # the build or patch is not vouched for
        {"kdtree_service_force_restart": True},
        {"kdtree_service_env_secret": {"TOKEN": "x"}},  # a secret file's content is never read back
        {"__kdtree_service_unit": {"status": {"ActiveState": "failed", "NeedDaemonReload": "no"}}},
        {"__kdtree_service_unit": {"status": {"ActiveState": "active", "NeedDaemonReload": "yes"}}},
        {"__kdtree_service_unit": {"status": {"ActiveState": "active"}}},  # no answer is not "no"
    ],
)
def test_the_host_is_read_for_a_no_op_only_when_nothing_else_forces_the_change(over):
    read = _task(SERVICE / "preflight.yml", "Read what the change would touch")
    assert all(_render(read["when"], **GOOD_RUN))
    assert not all(_render(read["when"], **{**GOOD_RUN, **over}))


def test_the_read_changes_nothing_and_runs_in_check_mode_too():
    read = _task(SERVICE / "preflight.yml", "Read what the change would touch")
    assert read["changed_when"] is False and read["check_mode"] is False and read["timeout"] > 0


@pytest.mark.parametrize(
    ("found", "group", "skipped"),
    [
        (True, False, ["sglang", "probe", "gpu"]),
        (False, False, ["sglang"]),
        (True, True, ["sglang", "probe"]),
        (False, True, ["sglang"]),
    ],
)
def test_only_an_unchanged_service_leaves_out_the_probe_and_the_gpu_check(found, group, skipped):
    """Nothing restarts: neither whether a restart would load the patch nor whether the GPUs would take
    it is asked; a change asks both. A serving group's node checks its GPUs even when unchanged: a peer's
    change restarts it, and that is decided after every node's preflight."""
    preflight = _task(SERVICE / "preflight.yml", "Preflight the unit as systemd merges it")
    skip = preflight["kdtree.fleet.kdtree_preflight"]["skip"]
    rendered = _render(
        skip,
        kdtree_service_preflight_skip=["sglang"],
        kdtree_service_unchanged=found,
        _kdtree_service_gpu_always=group,
    )
    assert rendered == skipped


@pytest.mark.parametrize(("group", "always"), [({}, False), ({"name": "g", "members": ["a", "b"]}, True)])
def test_the_deploy_has_a_serving_groups_nodes_check_their_gpus_even_when_unchanged(group, always):
    steps = load_yaml(ROLES / "kdtree_deploy" / "tasks" / "steps.yml")
    preflight = next(t for t in _all(steps) if t.get("name", "").startswith("Preflight (a refusal"))
    expression = preflight["vars"]["_kdtree_service_gpu_always"]
    assert str(_render(expression, _kdtree_deploy_group=group)).strip() == str(always)
    assert str(_render(expression)).strip() == "False"  # a deploy outside any group


WRITERS = ("ansible.builtin.copy", "ansible.builtin.file", "ansible.builtin.shell", "ansible.builtin.command")


def test_every_write_of_the_change_is_left_out_when_the_service_is_unchanged():
    change = load_yaml(SERVICE / "change.yml")
    block = next(t for t in change if "block" in t)
    assert _render([block["when"]], kdtree_service_unchanged=True) == [False]
    assert _render([block["when"]], kdtree_service_unchanged=False) == [True]
    outside = [t for t in change if "block" not in t]
    assert not [t["name"] for t in outside if set(t) & set(WRITERS)]
    assert {w for t in block["block"] for w in WRITERS if w in t} == {
        "ansible.builtin.copy",
        "ansible.builtin.file",
        "ansible.builtin.shell",
    }


def test_the_deploy_vouches_for_build_and_patch_only_when_apply_changes_neither():
    steps = load_yaml(ROLES / "kdtree_deploy" / "tasks" / "steps.yml")
    preflight = next(t for t in _all(steps) if t.get("name", "").startswith("Preflight (a refusal"))
    expression = preflight["vars"]["_kdtree_service_inputs_unchanged"]
    facts = {"kdtree_build_present": True, "kdtree_build_current": True, "kdtree_patch_present": True}
    assert str(_render(expression, **facts)).strip() == "True"
    for name in facts:
        assert str(_render(expression, **{**facts, name: False})).strip() == "False", name
    # build apply switches the link exactly when kdtree_build_current is false (the one rule)
    link = _task(ROLES / "kdtree_build" / "tasks" / "apply.yml", "Switch the current link")
    assert link["when"] == "not kdtree_build_current | bool"


def test_the_rescue_is_not_planned_for_an_unchanged_service():
    plan = load_yaml(ROLES / "kdtree_deploy" / "tasks" / "plan.yml")[0]
    facts = {"kdtree_build_lib_path": "/l", "kdtree_patch_installed_dir": "/p"}
    assert all(_render(plan["when"], **facts, kdtree_service_unchanged=False))
    assert not all(_render(plan["when"], **facts, kdtree_service_unchanged=True))


def test_a_no_op_leaves_out_the_deploys_whole_changing_half_as_one_task():
    deploy = ROLES / "kdtree_deploy" / "tasks"
    steps = load_yaml(deploy / "steps.yml")
    (gate,) = [t for t in steps if "ansible.builtin.include_tasks" in t]
    assert gate["ansible.builtin.include_tasks"] == {"file": "change.yml"}
    assert gate is steps[-1]  # after the preflight: a refusal there never reaches it
    # tag always: change.yml's tasks keep their own tags, so each tag still runs alone
    assert gate["tags"] == ["always"]
    assert _render([gate["when"]], kdtree_service_unchanged=True) == [False]
    assert _render([gate["when"]], kdtree_service_unchanged=False) == [True]
    assert _render([gate["when"]]) == [True]  # tags left the preflight out: the change decides as before
    # every step that plans, builds, installs, writes, restarts or records is behind the gate
    change = [t["name"] for t in load_yaml(deploy / "change.yml")]
    assert change == [
        "Plan the rescue (its target decided and its files checked before anything changes)",
        "Read this host's /metrics before the build (the start of its own pre-restart window, for the bake)",
        "Build the kernel (side by side with older builds; the service is not touched)",
        "Install the patch (a new directory per version; the service is not touched)",
        "Change the service and prove the host healthy, or roll it back",
    ]
    assert not [t["name"] for t in steps if {"kdtree.fleet.kdtree_history", "ansible.builtin.copy"} & set(t)]
