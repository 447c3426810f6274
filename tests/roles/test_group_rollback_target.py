"""The nodes of a serving group agree where they go back (roles/kdtree_rollback/tasks/agree.yml, run by
the deploy's plan and by rollback.yml in real plays under strategy free): every node goes to the previous
deploy only when all their last good deploys are the same deploy, else every node to stock with the
reason on each; a node that says nothing fails the others' rollback by name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from conftest import PLAYBOOK_BIN, ROLES, on_local_hosts, run_ansible

HOSTS = ("n0", "n1")
AGREE = ROLES / "kdtree_rollback" / "tasks" / "agree.yml"


def _previous(build: str) -> dict:
    return {
        "id": "x",
        "build_id": build,
        "patch_digest": "p1",
        "mode": "on",
        "nccl_env": {"NCCL_P2P_LEVEL": "SYS"},
    }


def _run(tmp_path: Path, n1_build: str, *, n1_says: bool = True) -> tuple[int, str]:
    tasks = [
        {
            "name": "Take this node's own target",
            "ansible.builtin.set_fact": {
                "_kdtree_rollback_target": "previous",
                "_kdtree_rollback_why_stock": "",
                "_kdtree_rollback_previous": "{{ lookup('vars', inventory_hostname ~ '_previous') }}",
            },
        },
        {
            "name": "Agree",
            "ansible.builtin.import_tasks": str(AGREE),
            "when": "inventory_hostname == 'n0' or n1_says | bool",
        },
        {
            "name": "Show",
            "ansible.builtin.debug": {
                "msg": "{{ inventory_hostname }} goes to {{ _kdtree_rollback_target }}: "
                "{{ _kdtree_rollback_why_stock }}"
            },
            "when": "inventory_hostname == 'n0' or n1_says | bool",
        },
    ]
    play = {
        "name": "Agree where the group goes back",
        "hosts": "all",
        "gather_facts": False,
        "strategy": "free",
        "vars": {
            "_kdtree_rollback_agree": {"name": "rollback-ds", "members": list(HOSTS), "timeout_s": 3},
            "n0_previous": _previous("b1"),
            "n1_previous": _previous(n1_build),
            "n1_says": n1_says,
        },
        "tasks": tasks,
    }
    playbook = tmp_path / "agree.yml"
    playbook.write_text(yaml.safe_dump([play], sort_keys=False))
    out = run_ansible("ansible-playbook", *on_local_hosts(*HOSTS), str(playbook))
    return out.returncode, out.stdout + out.stderr


@pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")
def test_nodes_with_the_same_last_good_deploy_all_go_back_to_it(tmp_path):
    rc, text = _run(tmp_path, "b1")
    assert rc == 0, text[-3000:]
    assert sorted(re.findall(r"(n\d) goes to previous: ", text)) == list(HOSTS), text[-3000:]


@pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")
def test_nodes_whose_last_good_deploys_differ_all_go_to_stock_saying_why(tmp_path):
    rc, text = _run(tmp_path, "b0")
    assert rc == 0, text[-3000:]
    # the debug line is YAML-quoted (quotes doubled) and folded
    shown = " ".join(text.replace("''", "'").split())
    why = r"serving group rollback-ds: the nodes' last good deploys differ in build_id \(n0 'b1', n1 'b0'\)"
    assert sorted(re.findall(rf"(n\d) goes to stock: {why}", shown)) == list(HOSTS), text[-3000:]


@pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")
def test_a_node_that_says_nothing_fails_its_peers_rollback_by_name(tmp_path):
    rc, text = _run(tmp_path, "b1", n1_says=False)
    assert rc != 0, text[-3000:]
    assert "go back together, but n1 failed or said nothing about where it can go" in text, text[-3000:]
    assert "n0 goes to" not in text, text[-3000:]
