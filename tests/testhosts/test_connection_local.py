"""The test hosts' connection plugin (tests/ansible_plugins/connection/kdtree_podman.py), no container:
it asks podman for `exec -i` exactly when a command has input, and Ansible reads its options."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_DIR = ROOT / "tests" / "ansible_plugins" / "connection"
VBIN = ROOT / ".venv" / "bin"


def _plugin():
    spec = importlib.util.spec_from_file_location("kdtree_podman_under_test", PLUGIN_DIR / "kdtree_podman.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_exec_gets_dash_i_only_when_the_command_has_input(monkeypatch):
    plugin = _plugin()
    calls = []

    def record(self, cmd, cmd_args=None, in_data=None, use_container_id=True):
        calls.append((cmd, cmd_args, in_data, use_container_id))
        return 0, b"", b""

    monkeypatch.setattr(plugin.PodmanConnection, "_podman", record)
    conn = plugin.Connection.__new__(plugin.Connection)
    conn._podman(["exec"], ["/bin/sh", "-c", "python3"], b"module")
    conn._podman(["exec", "--user", "root"], ["/bin/sh", "-c", "python3"], b"")
    conn._podman(["exec"], ["/bin/sh", "-c", "true"], None)
    conn._podman("mount")
    conn._podman("cp", ["a", "h:/b"], use_container_id=False)
    assert [c[0] for c in calls] == [
        ["exec", "-i"],
        ["exec", "-i", "--user", "root"],
        ["exec"],
        "mount",
        "cp",
    ]
    assert calls[0][1:] == (["/bin/sh", "-c", "python3"], b"module", True)
    assert calls[4][3] is False
    assert plugin.Connection.has_pipelining is True


def test_ansible_finds_the_plugin_through_the_clones_ansible_cfg_and_reads_its_options():
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    out = subprocess.run(
        [str(VBIN / "ansible-doc"), "-t", "connection", "kdtree_podman"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    for option in ("remote_addr", "podman_executable", "pipelining"):
        assert option in out.stdout
