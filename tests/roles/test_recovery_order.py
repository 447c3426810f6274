"""The recovery is planned before the change (issue 23): the deploy decides and checks the rescue's
target during its preflight (kdtree_rollback's plan entry point, the rule rollback.yml -e
kdtree_rollback_to=previous uses), before anything is built or changed; on failure the rescue puts that
drop-in back (or removes kdtree's), reloads systemd once and restarts, in one host command (run here
with a systemctl that logs its calls), and only then does the rollback
re-read, watch and record; a rollback that finds the unit restarted with its own decision watches that
run instead of restarting it again. Read from the task files (the order is the point)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import ROLES, ROOT, load_yaml

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


def _deploy_order() -> list[str]:
    """The deploy's task names in order: steps.yml with its include of change.yml in its place."""
    names = []
    for task in load_yaml(DEPLOY / "steps.yml"):
        if task.get("ansible.builtin.include_tasks", {}).get("file") == "change.yml":
            names += _names(load_yaml(DEPLOY / "change.yml"))
        else:
            names.append(task["name"])
    return names


def test_the_plan_is_part_of_the_preflight_before_anything_changes():
    steps = _deploy_order()
    plan = steps.index("Plan the rescue (its target decided and its files checked before anything changes)")
    assert steps.index("Preflight the unit as systemd merges it") < plan
    assert plan < steps.index("Build the kernel (side by side with older builds; the service is not touched)")
    (include,) = load_yaml(DEPLOY / "plan.yml")
    assert include["ansible.builtin.include_role"]["tasks_from"] == "plan"
    assert include["vars"]["kdtree_rollback_to"] == "{{ kdtree_deploy_rollback_to }}"


def test_the_plan_reads_only_and_uses_the_rollbacks_own_rule():
    plan = load_yaml(ROLLBACK / "plan.yml")
    assert {"ansible.builtin.import_tasks": "decide.yml"}.items() <= plan[1].items()
    main = _names(load_yaml(ROLLBACK / "restore.yml"))
    assert "Decide where to go (the last good deploy, its fields and files checked, or stock)" in main
    for task in [*plan, *load_yaml(ROLLBACK / "decide.yml")]:
        assert not {"ansible.builtin.copy", "ansible.builtin.file", "ansible.builtin.systemd_service"} & set(
            task
        )
    included = [
        t["ansible.builtin.include_role"]["tasks_from"] for t in plan if "ansible.builtin.include_role" in t
    ]
    assert included == ["facts", "render_dropin"]


# the rollback's hand-over keys the rescue filter answers (plugin_utils/_rescue.py)
KEYS = ("force_restart", "unit_untouched", "kill", "failed_dropin_digest", "restarted", "restarted_dropin")


def _undo_task(rescue):
    return next(t for t in rescue if t["name"].startswith("Undo the change, reload systemd and restart"))


def test_the_rescue_undoes_reloads_and_restarts_in_one_host_command_before_the_rollback():
    rescue = load_yaml(DEPLOY / "rescue.yml")
    changing = [t for t in rescue if set(t) & set(HOST_CHANGES) or "block" in t]
    first = [next(k for k in HOST_CHANGES if k in t) if "block" not in t else "block" for t in changing]
    assert first[:3] == [
        "ansible.builtin.systemd_service",  # a read of the unit's run, never after the smoke module failed
        "ansible.builtin.command",  # the drop-in back (or ours removed), one daemon-reload, the restart
        "block",  # then the rollback
    ], _names(changing)
    read = changing[0]
    assert set(read["ansible.builtin.systemd_service"]) == {"name"}  # reads only
    # when to read is the rescue filter's rule (plugin_utils/_rescue.py; test__rescue.py holds it)
    assert read["when"] == "_kdtree_deploy_rescue.read_unit | bool"
    assert changing[1] is _undo_task(rescue)
    assert changing[1]["failed_when"] is False and changing[1]["timeout"] > 120
    assert changing[2]["block"][0]["ansible.builtin.include_role"]["name"] == "kdtree.fleet.kdtree_rollback"
    # the private restore entry point: the deploy holds the lock (main would take it a second time)
    assert changing[2]["block"][0]["ansible.builtin.include_role"]["tasks_from"] == "restore"
    rollback_vars = changing[2]["block"][0]["vars"]
    # every hand-over option comes from the filter's last answer, the one that knows the undo's exit status
    handover = {k: v for k, v in rollback_vars.items() if k.startswith("_kdtree_rollback_")}
    assert handover == {
        f"_kdtree_rollback_{key}": f"{{{{ _kdtree_deploy_rescue.rollback.{key} }}}}" for key in KEYS
    }
    decisions = [t for t in rescue if "_kdtree_deploy_rescue" in t.get("ansible.builtin.set_fact", {})]
    assert [rescue.index(t) for t in decisions][-1] == rescue.index(changing[1]) + 1  # asked after the undo
    assert "__kdtree_deploy_undo.rc" in decisions[-1]["ansible.builtin.set_fact"]["_kdtree_deploy_rescue"]
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


def _run_undo(
    tmp_path: Path, what: str, restart: str, stdin: str = "", fail: str = "", dropin: Path | None = None
) -> tuple[int, list, Path, str]:
    """The rescue's undo command as the host runs it, with a systemctl that logs its calls (and fails
    the one named in `fail`), on `dropin` (default: one in a drop-in directory that exists). Returns
    (rc, calls, drop-in path, stderr)."""
    argv = _undo_task(load_yaml(DEPLOY / "rescue.yml"))["ansible.builtin.command"]["argv"]
    script = argv[2]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "calls"
    fake = bin_dir / "systemctl"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {log}\n[ "$1" != "{fail}" ]\n')
    fake.chmod(0o755)
    if dropin is None:
        dropin = tmp_path / "sglang.service.d" / "50-kdtree.conf"
        dropin.parent.mkdir(exist_ok=True)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["/bin/sh", "-c", script, "kdtree-rescue", what, str(dropin), "sglang.service", restart],
        input=stdin,
        text=True,
        env=env,
        capture_output=True,
        timeout=30,
        check=False,
    )
    calls = log.read_text().splitlines() if log.exists() else []
    return done.returncode, calls, dropin, done.stderr


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the command chowns to root, as on a host")


@needs_root
def test_the_undo_command_puts_the_planned_drop_in_back_then_reloads_then_restarts(tmp_path):
    rc, calls, dropin, _ = _run_undo(tmp_path, "put", "restart", stdin="[Service]\nEnvironment=A=1\n")
    assert rc == 0
    assert calls == ["daemon-reload", "restart sglang.service"]
    assert dropin.read_text() == "[Service]\nEnvironment=A=1\n"
    assert dropin.stat().st_mode & 0o777 == 0o644
    assert not list(dropin.parent.glob(".kdtree-rescue.*"))  # written aside, then moved in place


def test_the_undo_command_removes_kdtree_s_drop_in_and_restarts_only_when_asked(tmp_path):
    rc, calls, dropin, _ = _run_undo(tmp_path, "remove", "restart")
    assert (rc, calls, dropin.exists()) == (0, ["daemon-reload", "restart sglang.service"], False)
    (tmp_path / "calls").unlink()
    dropin.write_text("x")
    rc, calls, _, _ = _run_undo(tmp_path, "remove", "no-restart")  # a stop that hung, or the run untouched
    assert (rc, calls, dropin.exists()) == (0, ["daemon-reload"], False)


@pytest.mark.parametrize(
    ("fail", "rc", "calls"),
    [
        ("daemon-reload", 11, ["daemon-reload"]),
        ("restart", 12, ["daemon-reload", "restart sglang.service"]),
    ],
)
def test_a_failed_reload_never_restarts_and_each_failure_has_its_exit_code(tmp_path, fail, rc, calls):
    assert _run_undo(tmp_path, "remove", "restart", fail=fail)[:2] == (rc, calls)


def test_a_drop_in_that_cannot_be_put_back_still_reloads_but_never_restarts(tmp_path):
    gone = tmp_path / "gone" / "50-kdtree.conf"
    rc, calls, _, stderr = _run_undo(tmp_path, "put", "restart", stdin="x", dropin=gone)
    assert rc == 10 and "could not put back" in stderr
    assert calls == ["daemon-reload"]


def test_a_rollback_watches_the_run_the_rescue_started_instead_of_restarting_again():
    for entry, same in (
        ("previous.yml", "_kdtree_rollback_restarted_dropin == kdtree_service_dropin_text"),
        ("stock.yml", "_kdtree_rollback_restarted_dropin | length == 0"),
    ):
        smoke = next(
            t
            for t in load_yaml(ROLLBACK / entry)
            if t.get("ansible.builtin.include_role", {}).get("name") == "kdtree.fleet.kdtree_smoke"
        )
        restart = " ".join(smoke["vars"]["kdtree_smoke_restart"].split())
        assert f"not (_kdtree_rollback_restarted | bool and {same})" in restart, (entry, restart)


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


def test_the_rollback_role_is_the_whole_run_under_the_hosts_lock():
    """Calling kdtree_rollback by name stops when a host of an earlier batch failed, takes the lock,
    checks its options, recovers a killed run's drain, restores, records a failure (rescue) and always
    unlocks, then ends a failed host, as kdtree_deploy does; playbooks/rollback.yml is play keywords plus
    this role."""
    main = load_yaml(ROLLBACK / "main.yml")
    steps = [
        (t["ansible.builtin.import_role"]["name"], t["ansible.builtin.import_role"]["tasks_from"])
        for t in (main[0], main[1], main[3])
    ]
    assert steps == [("kdtree.fleet.kdtree_common", e) for e in ("stop", "lock", "end")]
    assert main[0]["vars"]["kdtree_common_outcome_play"] == "rollback"
    assert main[1]["vars"]["kdtree_common_lock_play"] == "rollback"
    block, always = main[2]["block"], main[2]["always"]
    # a node of a serving group first tells its peers that it failed (their waits end), then records why
    abort, failed = main[2]["rescue"][0]["kdtree.fleet.kdtree_rendezvous"], main[2]["rescue"][1]
    assert abort["phase"] == "abort" and abort["state"] == "failed"
    failed = failed["ansible.builtin.import_role"]
    assert (failed["name"], failed["tasks_from"]) == ("kdtree.fleet.kdtree_common", "failed")
    # its options first, under the lock (a refusal is recorded like any failed rollback)
    check = block.pop(0)["ansible.builtin.import_role"]
    assert (check["name"], check["tasks_from"]) == ("kdtree.fleet.kdtree_common", "inputs")
    # then its serving group's name (nothing changes), which the restore's restart meets under
    assert "_kdtree_rollback_group" in block.pop(0)["ansible.builtin.set_fact"]
    recover = block[0]["ansible.builtin.include_role"]
    assert (recover["name"], recover["tasks_from"]) == ("kdtree.fleet.kdtree_drain", "recover")
    assert block[1]["ansible.builtin.import_tasks"] == "restore.yml"
    unlock = always[0]["ansible.builtin.import_role"]
    assert (unlock["name"], unlock["tasks_from"]) == ("kdtree.fleet.kdtree_common", "unlock")
    play = load_yaml(ROOT / "playbooks" / "rollback.yml")[0]
    assert play["tasks"] == [
        {
            "name": play["tasks"][0]["name"],
            "ansible.builtin.import_role": {"name": "kdtree.fleet.kdtree_rollback"},
        }
    ]
