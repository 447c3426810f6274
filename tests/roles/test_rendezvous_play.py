"""kdtree.fleet.kdtree_rendezvous in real plays under strategy free (as the deploy runs): hosts that
arrive at different moments meet (the early one waits for the late one's word, then all go on), and one
host's failed word ends its peers' wait at once with its name and data; each run meets only itself."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import yaml
from conftest import PLAYBOOK_BIN, on_local_hosts, run_ansible

HOSTS = ("n0", "n1", "n2")


def _run(tmp_path: Path, tasks: list[dict]) -> tuple[int, str, float]:
    play = {"name": "Meet", "hosts": "all", "gather_facts": False, "strategy": "free", "tasks": tasks}
    playbook = tmp_path / "meet.yml"
    playbook.write_text(yaml.safe_dump([play], sort_keys=False))
    started = time.monotonic()
    out = run_ansible(
        "ansible-playbook",
        *on_local_hosts(*HOSTS),
        str(playbook),
    )
    return out.returncode, out.stdout + out.stderr, time.monotonic() - started


def _meet(state: str = "ok", phase: str = "ready", timeout_s: int = 60) -> dict:
    return {
        "name": "Meet the others",
        "kdtree.fleet.kdtree_rendezvous": {
            "name": "group-test",
            "phase": phase,
            "members": list(HOSTS),
            "state": state,
            "data": {"host": "{{ inventory_hostname }}"},
            "timeout_s": timeout_s,
        },
        "register": "__met",
    }


def _show() -> dict:
    return {
        "name": "Show what was met",
        "ansible.builtin.debug": {
            "msg": "met on {{ inventory_hostname }}: ok={{ __met.ok }}"
            " failed={{ __met.failed_members | join(',') }}"
        },
    }


@pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")
def test_hosts_that_arrive_at_different_moments_all_go_on_together(tmp_path):
    late = {
        "name": "n2 arrives late",
        "ansible.builtin.command": "sleep 3",
        "when": "inventory_hostname == 'n2'",
    }
    rc, text, _ = _run(tmp_path, [late, _meet(), _show()])
    assert rc == 0, text[-3000:]
    assert sorted(re.findall(r"met on (n\d): ok=True failed='", text)) == list(HOSTS), text[-3000:]


@pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")
def test_a_host_that_posts_failed_ends_its_peers_wait_at_once(tmp_path):
    meet = _meet(state="{{ 'failed' if inventory_hostname == 'n1' else 'ok' }}", timeout_s=120)
    rc, text, seconds = _run(tmp_path, [meet, _show()])
    assert rc == 0, text[-3000:]
    assert sorted(re.findall(r"met on (n\d): ok=False failed=n1'", text)) == list(HOSTS), text[-3000:]
    assert seconds < 60, text[-3000:]  # nobody waited for the 120 s timeout


@pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")
def test_a_member_that_never_posts_fails_the_wait_at_its_timeout(tmp_path):
    meet = _meet(timeout_s=2)
    meet["when"] = "inventory_hostname != 'n2'"
    rc, text, _ = _run(tmp_path, [meet, {**_show(), "when": "inventory_hostname != 'n2'"}])
    assert rc == 0, text[-3000:]
    assert sorted(re.findall(r"met on (n\d): ok=False failed=n2'", text)) == ["n0", "n1"], text[-3000:]
