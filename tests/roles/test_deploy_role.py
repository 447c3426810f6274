"""roles/kdtree_deploy: a role that ran without publishing a fact the deploy hands on fails the host,
naming the fact and the role; a tag that leaves that role out skips the steps that need its facts with
the documented message instead. Runs the real role on localhost (a scratch lock file, a patch root that
does not exist, tags that reach neither the kernel build nor the service), from a copy of the
collection when a fact is renamed in it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import PLAYBOOK_BIN, ROLES, ROOT, load_yaml, role_play, run_play

COPIED = ("roles", "plugins", "files", "meta", "galaxy.yml")
SKIPPED_MSG = "the service and smoke steps are skipped: they need"


def _collection_copy(tmp_path: Path) -> Path:
    """A copy of this collection under tmp_path/collections (for ANSIBLE_COLLECTIONS_PATH)."""
    dest = tmp_path / "collections" / "ansible_collections" / "kdtree" / "fleet"
    dest.mkdir(parents=True)
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dest / name)
    return dest


def _deploy(tmp_path: Path, *extra: str, collections: Path | None = None) -> subprocess.CompletedProcess:
    play = role_play(
        "kdtree_deploy",
        {"kdtree_patch_root": "/nonexistent-kdtree-deploy-test/patches"},
        # the lock on this machine goes to a scratch file, not /var/lib/kdtree
        module_defaults={"kdtree.fleet.kdtree_lock": {"path": str(tmp_path / "lock.json")}},
    )
    env = {"ANSIBLE_COLLECTIONS_PATH": str(collections)} if collections is not None else None
    return run_play(tmp_path / "deploy.yml", play, *extra, env=env)


@pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")
def test_a_role_that_ran_without_publishing_a_fact_fails_the_host_naming_fact_and_role(tmp_path):
    fleet = _collection_copy(tmp_path)
    check = fleet / "roles" / "kdtree_patch" / "tasks" / "check.yml"
    text = check.read_text(encoding="utf-8")
    assert text.count("    kdtree_patch_installed_dir: ") == 1
    check.write_text(text.replace("    kdtree_patch_installed_dir: ", "    kdtree_patch_install_dir: "))
    out = _deploy(tmp_path, "--tags", "kdtree_patch_check", collections=tmp_path / "collections")
    flat = re.sub(r"\s+", " ", out.stdout + out.stderr)
    assert out.returncode != 0, flat[-3000:]
    assert (
        "kdtree_deploy: fact kdtree_patch_installed_dir is not set: the role kdtree.fleet.kdtree_patch"
        " (tasks_from check) publishes it; it ran on localhost without doing so" in flat
    ), flat[-3000:]
    assert SKIPPED_MSG not in flat  # it failed, it did not skip
    assert "Release the host's lock" in flat and not (tmp_path / "lock.json").exists()


@pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")
def test_a_role_that_published_its_facts_passes_the_check(tmp_path):
    out = _deploy(tmp_path, "--tags", "kdtree_patch_check")
    flat = re.sub(r"\s+", " ", out.stdout + out.stderr)
    assert out.returncode == 0, flat[-3000:]
    assert "Require the facts published by kdtree.fleet.kdtree_patch (tasks_from check)" in flat
    assert SKIPPED_MSG in flat  # the build's check did not run with this tag: the service steps skip


@pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")
def test_a_tag_that_leaves_the_build_and_patch_out_skips_the_service_with_the_message(tmp_path):
    out = _deploy(tmp_path, "--tags", "kdtree_service_check")
    flat = re.sub(r"\s+", " ", out.stdout + out.stderr)
    assert out.returncode == 0, flat[-3000:]
    assert SKIPPED_MSG in flat
    assert "kdtree_deploy: fact" not in flat
    assert re.findall(r"changed=(\d+)", flat) == ["0"]


def _tasks(node):
    for task in node or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key))


def _tasks_with_imports(tasks_dir, entry, tags=None):
    """The tasks of tasks_dir/entry, with the tasks of the files it imports (import_tasks) in their
    place; an imported task takes the tags of its import (as Ansible gives them)."""
    for task in _tasks(load_yaml(tasks_dir / entry)):
        inherited = sorted(set(task.get("tags") or []) | set(tags or []))
        imported = task.get("ansible.builtin.import_tasks")
        if imported:
            yield from _tasks_with_imports(tasks_dir, imported, inherited)
        else:
            yield {**task, "tags": inherited} if tags else task


def _deploy_tasks():
    """Every task of the deploy's steps.yml and of change.yml, which steps.yml includes."""
    tasks = ROLES / "kdtree_deploy" / "tasks"
    yield from _tasks(load_yaml(tasks / "steps.yml"))
    yield from _tasks(load_yaml(tasks / "change.yml"))


# each fact check of the deploy runs exactly when the step that publishes its facts runs (same tags)
PRODUCERS = {
    "kdtree.fleet.kdtree_build (tasks_from check)": ("kdtree_build", "check.yml"),
    "kdtree.fleet.kdtree_patch (tasks_from check)": ("kdtree_patch", "check.yml"),
    "kdtree.fleet.kdtree_service (tasks_from change)": ("kdtree_service", "change.yml"),
}


def test_each_fact_check_carries_the_tags_of_the_tasks_that_publish_its_facts():
    steps = list(_deploy_tasks())
    checks = [t for t in steps if t.get("ansible.builtin.import_tasks") == "require.yml"]
    assert sorted(c["vars"]["_kdtree_deploy_producer"] for c in checks) == sorted(PRODUCERS)
    for check in checks:
        role, entry = PRODUCERS[check["vars"]["_kdtree_deploy_producer"]]
        publishing = [
            t
            for t in _tasks_with_imports(ROLES / role / "tasks", entry)
            if set(t.get("ansible.builtin.set_fact", {})) & set(check["vars"]["_kdtree_deploy_facts"])
        ]
        published = {name for t in publishing for name in t["ansible.builtin.set_fact"]}
        assert set(check["vars"]["_kdtree_deploy_facts"]) <= published, check["name"]
        for task in publishing:
            assert sorted(task["tags"]) == sorted(check["tags"]), (check["name"], task["name"])
