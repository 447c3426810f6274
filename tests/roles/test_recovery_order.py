"""The recovery is planned before the change (issue 23): the deploy decides and checks the rescue's
target during its preflight (kdtree_rollback's plan entry point, the rule rollback.yml -e
kdtree_rollback_to=previous uses), before anything is built or changed; on failure the rescue puts that
drop-in back (or removes kdtree's), reloads systemd once and restarts, and only then does the rollback
re-read, watch and record; a rollback that finds the unit restarted with its own decision watches that
run instead of restarting it again. Read from the task files (the order is the point)."""

from __future__ import annotations

from conftest import ROLES, load_yaml

DEPLOY = ROLES / "kdtree_deploy" / "tasks"
ROLLBACK = ROLES / "kdtree_rollback" / "tasks"
HOST_CHANGES = (
    "ansible.builtin.copy",
    "ansible.builtin.file",
    "ansible.builtin.systemd_service",
    "ansible.builtin.include_role",
    "ansible.builtin.command",
    "ansible.builtin.shell",
)


def _names(tasks):
    return [t["name"] for t in tasks]


def test_the_plan_is_part_of_the_preflight_before_anything_changes():
    steps = _names(load_yaml(DEPLOY / "steps.yml"))
    plan = steps.index("Plan the rescue (its target decided and its files checked before anything changes)")
    assert steps.index("Preflight the unit as systemd merges it") < plan
    assert plan < steps.index("Build the kernel (side by side with older builds; the service is not touched)")
    (include,) = load_yaml(DEPLOY / "plan.yml")
    assert include["ansible.builtin.include_role"]["tasks_from"] == "plan"
    assert include["vars"]["kdtree_rollback_to"] == "{{ kdtree_deploy_rollback_to }}"


def test_the_plan_reads_only_and_uses_the_rollbacks_own_rule():
    plan = load_yaml(ROLLBACK / "plan.yml")
    assert {"ansible.builtin.import_tasks": "decide.yml"}.items() <= plan[1].items()
    main = _names(load_yaml(ROLLBACK / "main.yml"))
    assert "Decide where to go (the last good deploy, its fields and files checked, or stock)" in main
    for task in [*plan, *load_yaml(ROLLBACK / "decide.yml")]:
        assert not {"ansible.builtin.copy", "ansible.builtin.file", "ansible.builtin.systemd_service"} & set(
            task
        )
    included = [
        t["ansible.builtin.include_role"]["tasks_from"] for t in plan if "ansible.builtin.include_role" in t
    ]
    assert included == ["facts", "render_dropin"]


def test_the_rescue_puts_back_reloads_once_and_restarts_before_the_rollback():
    rescue = load_yaml(DEPLOY / "rescue.yml")
    changing = [t for t in rescue if set(t) & set(HOST_CHANGES) or "block" in t]
    first = [next(k for k in HOST_CHANGES if k in t) if "block" not in t else "block" for t in changing]
    assert first[:4] == [
        "ansible.builtin.copy",  # the planned last good drop-in back
        "ansible.builtin.file",  # or kdtree's drop-in removed
        "ansible.builtin.systemd_service",  # one daemon-reload
        "ansible.builtin.systemd_service",  # the restart
    ], _names(changing)
    assert changing[2]["ansible.builtin.systemd_service"] == {"daemon_reload": True}
    assert changing[3]["ansible.builtin.systemd_service"]["state"] == "restarted"
    assert changing[4]["block"][0]["ansible.builtin.include_role"]["name"] == "kdtree.fleet.kdtree_rollback"
    rollback_vars = changing[4]["block"][0]["vars"]
    assert "__kdtree_deploy_restarted is succeeded" in rollback_vars["kdtree_rollback_restarted"]
    # the guarantees of old: WHY/ROLLBACK always printed, the history recorded, the host failed
    names = _names(rescue)
    assert names[-2:] == [
        "Record the failed deploy in the host's history",
        "Fail the host with why and how the rollback went",
    ]
    assert (
        "WHY:" in rescue[-1]["ansible.builtin.fail"]["msg"]
        and "ROLLBACK:" in rescue[-1]["ansible.builtin.fail"]["msg"]
    )


def test_a_rollback_watches_the_run_the_rescue_started_instead_of_restarting_again():
    for entry, same in (
        ("previous.yml", "kdtree_rollback_restarted_dropin == kdtree_service_dropin_text"),
        ("stock.yml", "kdtree_rollback_restarted_dropin | length == 0"),
    ):
        smoke = next(
            t
            for t in load_yaml(ROLLBACK / entry)
            if t.get("ansible.builtin.include_role", {}).get("name") == "kdtree.fleet.kdtree_smoke"
        )
        restart = " ".join(smoke["vars"]["kdtree_smoke_restart"].split())
        assert f"not (kdtree_rollback_restarted | bool and {same})" in restart, (entry, restart)


def test_every_condition_of_the_rescue_and_the_plan_parses():
    """A condition that does not parse is an error ignore_errors would hide (the fast restart skipped)."""
    import jinja2

    env = jinja2.Environment()
    for path in (DEPLOY / "rescue.yml", DEPLOY / "plan.yml", ROLLBACK / "plan.yml"):
        for task in load_yaml(path):
            for inner in [task, *task.get("block", []), *task.get("rescue", [])]:
                for cond in (
                    [inner.get("when")] if isinstance(inner.get("when"), str) else inner.get("when") or []
                ):
                    env.parse("{{ " + cond + " }}")
                for value in (inner.get("ansible.builtin.set_fact") or {}).values():
                    if isinstance(value, str):
                        env.parse(value)
