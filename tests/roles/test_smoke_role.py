"""roles/kdtree_smoke through ansible-playbook on localhost: required inputs, the patch_dir guard
(before anything is restarted), tags that run alone, check mode. Nothing here restarts a unit."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import PATCH_DIR, PLAYBOOK_BIN, ROOT, role_play, run_play

INPUTS = {"kdtree_smoke_service_name": "sglang-test", "kdtree_smoke_health_url": "http://127.0.0.1:1/health"}

pytestmark = pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")


def play(tmp_path: Path, role_vars: dict, *extra: str) -> subprocess.CompletedProcess:
    return run_play(tmp_path / "smoke.yml", role_play("kdtree_smoke", role_vars), *extra)


def test_service_name_and_health_url_are_required(tmp_path):
    out = play(tmp_path, {"kdtree_smoke_wanted": {}})
    assert out.returncode != 0
    assert "kdtree_smoke_service_name" in out.stdout
    assert "kdtree_smoke_health_url" in out.stdout
    assert "Restart the unit and watch its new run" not in out.stdout


@pytest.mark.parametrize("tags", [[], ["--tags", "kdtree_smoke"], ["--tags", "kdtree_smoke_run"]])
def test_a_marker_state_without_patch_dir_fails_before_the_restart_with_any_tag(tmp_path, tags):
    out = play(tmp_path, {**INPUTS, "kdtree_smoke_wanted": {"marker_state": "active"}}, *tags)
    assert out.returncode != 0
    assert "kdtree_smoke_wanted.patch_dir is empty" in out.stdout
    assert "sglang-test was not restarted" in out.stdout
    assert "Restart the unit and watch its new run" not in out.stdout


def test_check_mode_runs_the_module_and_changes_nothing(tmp_path):
    wanted = {"marker_state": "active", "patch_dir": str(PATCH_DIR), "build_id": "ignored: not read"}
    out = play(tmp_path, {**INPUTS, "kdtree_smoke_wanted": wanted}, "--check")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "check mode: would restart and watch sglang-test.service" in out.stdout


def test_a_stock_wanted_run_checks_health_alone_and_passes_the_guard(tmp_path):
    """{} (the rollback to stock) has no marker state: the guard passes and its message still renders
    (Ansible renders fail_msg even when the assertion holds)."""
    out = play(tmp_path, {**INPUTS, "kdtree_smoke_wanted": {}}, "--check")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "check mode: would restart and watch sglang-test.service" in out.stdout


def test_each_role_variable_sets_the_module_option_of_its_name_as_the_argument_spec_says():
    """meta/argument_specs.yml says: kdtree_smoke_X sets the module option X, except the variables it
    names; the module's documentation describes the option. Pins that sentence to tasks/main.yml."""
    import re

    from ansible_collections.kdtree.fleet.plugins.modules import kdtree_smoke

    tasks = yaml.safe_load((ROOT / "roles/kdtree_smoke/tasks/main.yml").read_text(encoding="utf-8"))
    (args,) = [task["kdtree.fleet.kdtree_smoke"] for task in tasks if "kdtree.fleet.kdtree_smoke" in task]
    spec = yaml.safe_load((ROOT / "roles/kdtree_smoke/meta/argument_specs.yml").read_text(encoding="utf-8"))
    variables = set(spec["argument_specs"]["main"]["options"])
    renamed = {"unit": "service_name", "chunk_s": "progress_s", "fail_on_error": "fail"}
    # the wanted run, one dict shaped like a deploy-history entry
    renamed |= dict.fromkeys(
        ("marker_state", "patch_dir", "expected_schedulers", "nccl_env", "status_dir"), "wanted"
    )
    passed = set()
    for option, value in args.items():
        assert option in kdtree_smoke.ARGUMENT_SPEC and not option.startswith("_"), option
        used = set(re.findall(r"kdtree_smoke_(\w+)", value))
        assert renamed.get(option, option) in used, (option, value)
        passed |= {f"kdtree_smoke_{name}" for name in used}
    # the serving group's wait before the restart is the role's own (kdtree.fleet.kdtree_rendezvous)
    assert variables - passed == {"kdtree_smoke_group_timeout_s"}
    assert "kdtree_smoke_node_rank" in passed  # the one variable passed that is no module option
