"""Shared helpers for the fleet tests (no containers needed)."""

from __future__ import annotations

import functools
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"
# The patch as this repository ships it (the smoke check loads <patch dir>/kdtree_verify/telemetry/marker.py).
PATCH_DIR = ROOT / "files" / "sglang_ext"
MODULE_NAMES = sorted(f"kdtree.fleet.{p.stem}" for p in (ROOT / "plugins" / "modules").glob("*.py"))
ANSIBLE_BIN = Path(sys.executable).parent
needs_ansible = pytest.mark.skipif(not (ANSIBLE_BIN / "ansible-doc").exists(), reason="needs the tools venv")


def _install_collection_finder() -> None:
    """Ansible's collection finder, as ansible-playbook installs it: a Templar built here resolves the
    collection's FQCN filters (kdtree.fleet.kdtree_dropin_env, ...) that the roles' expressions call.
    Installed before any test imports ansible_collections (this conftest loads first)."""
    try:
        from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
    except ImportError:  # no Ansible in this venv: the tests that template skip
        return
    # a run over several suites (pytest tests) imported the collection through sys.path already: those
    # modules carry no collection metadata, so the finder imports the collection afresh
    for name in [m for m in sys.modules if m.split(".")[0] == "ansible_collections"]:
        del sys.modules[name]
    _AnsibleCollectionFinder(paths=[str(ROOT / "collections")])._install()


_install_collection_finder()

PLAYBOOK_BIN = ANSIBLE_BIN / "ansible-playbook"


# the host arguments of a run on this machine: localhost through the local connection, with this Python
def on_local_hosts(*hosts: str) -> tuple[str, ...]:
    """ansible-playbook's arguments for an inventory of `hosts`, each a local connection on this
    Python (several names: plays that run per host, under strategy free, on this one machine)."""
    return ("-i", ",".join(hosts) + ",", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}")


ON_LOCALHOST = on_local_hosts("localhost")


def run_ansible(
    tool: str, *args: str, env: dict[str, str] | None = None, timeout: int = 180
) -> subprocess.CompletedProcess:
    """An Ansible command (ansible, ansible-playbook, ansible-doc) of the tools venv, run in this worktree
    with its ansible.cfg (the collection as Ansible finds it), without colours; `env` adds to the
    environment or overrides it. The result is returned whatever the exit status."""
    full_env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", **(env or {}))
    return subprocess.run(
        [str(ANSIBLE_BIN / tool), *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=ROOT,
        timeout=timeout,
        check=False,
    )


def run_report_play(
    inventory: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """playbooks/report.yml with run_ansible on the hosts of `inventory`, on this Python and without
    become (the play's become is for real hosts); `extra` are ansible-playbook's options."""
    return run_ansible(
        "ansible-playbook",
        "-i",
        str(inventory),
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        "-e",
        "ansible_become=false",
        *extra,
        str(ROOT / "playbooks" / "report.yml"),
        env=env,
    )


def run_play(
    path: Path, play: dict, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Write one play to the playbook `path` and run it on localhost (ON_LOCALHOST) with run_ansible."""
    path.write_text(yaml.safe_dump([play]))
    return run_ansible("ansible-playbook", *ON_LOCALHOST, str(path), *extra, env=env)


def role_play(
    role: str, role_vars: dict, *, tasks_from: str | None = None, module_defaults: dict | None = None
) -> dict:
    """A play on localhost, without facts, that imports the role kdtree.fleet.<role> (its entry point
    `tasks_from`, else main) with `role_vars`; `module_defaults` as a play's (e.g. a scratch history)."""
    imported = {"name": f"kdtree.fleet.{role}", **({"tasks_from": tasks_from} if tasks_from else {})}
    return {
        "name": role,
        "hosts": "localhost",
        "gather_facts": False,
        "module_defaults": module_defaults or {},
        "tasks": [{"name": "Run the role", "ansible.builtin.import_role": imported, "vars": role_vars}],
    }


def one_line(proc: subprocess.CompletedProcess) -> tuple[int, str]:
    """A run's exit status and its stdout + stderr with every run of whitespace made one space."""
    return proc.returncode, re.sub(r"\s+", " ", proc.stdout + proc.stderr)


def ansible_doc(*args: str) -> subprocess.CompletedProcess:
    """ansible-doc with this worktree's ansible.cfg (the collection as Ansible finds it)."""
    return run_ansible("ansible-doc", *args, timeout=120)


@functools.lru_cache(maxsize=1)
def rendered_docs() -> dict[str, dict]:
    """Every module's documentation as ansible-doc renders it (doc fragments merged in), by FQCN."""
    out = ansible_doc("-t", "module", "--json", *MODULE_NAMES)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def load_yaml(path: Path):
    with path.open(encoding="utf-8") as handle:
        return yaml.safe_load(handle)


@pytest.fixture(scope="session")
def smoke_module():
    """The kdtree_smoke module (runs on hosts), imported by its collection path as Ansible loads it.

    collections/ansible_collections/kdtree/fleet links to the repository root (tests/conftest.py);
    pyproject.toml puts collections/ on the path, so the module's
    `ansible_collections.kdtree.fleet.plugins.module_utils` imports resolve.
    """
    return importlib.import_module("ansible_collections.kdtree.fleet.plugins.modules.kdtree_smoke")


@pytest.fixture(scope="module")
def hu():
    """module_utils/_smoke/host (Snapshot, parse_journal, load_marker, read_host)."""
    return importlib.import_module("ansible_collections.kdtree.fleet.plugins.module_utils._smoke.host")


@pytest.fixture(scope="module")
def marker(hu):
    """The repository's kdtree_verify/telemetry/marker.py, loaded the way the module loads a host's copy."""
    return hu.load_marker(str(PATCH_DIR))
