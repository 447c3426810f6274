"""The preflight meeting of a serving group's nodes (roles/kdtree_deploy/tasks/group_meet.yml) in real
plays under strategy free: nodes whose units are one server go on, and every node restarts when any
changes; nodes whose units disagree (a rank on two nodes, --nnodes other than the group's size, a
different build) are refused on every node, each saying why and that nothing was changed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from conftest import PLAYBOOK_BIN, ROLES, on_local_hosts, run_ansible

HOSTS = ("n0", "n1")
MEET = ROLES / "kdtree_deploy" / "tasks" / "group_meet.yml"


def _unit(rank: int, *, nnodes: int = 2, build: str = "b1", unchanged: bool = True) -> dict:
    return {
        "launch": {"nnodes": nnodes, "node_rank": rank, "dist_init_addr": "10.0.0.5:5000"},
        "build": build,
        "unchanged": unchanged,
    }


def _run(tmp_path: Path, n0: dict, n1: dict) -> tuple[int, str]:
    facts = {
        "kdtree_service_launch": "{{ units[inventory_hostname].launch }}",
        "kdtree_build_id": "{{ units[inventory_hostname].build }}",
        "kdtree_service_verify_mode": "on",
        "kdtree_service_unchanged": "{{ units[inventory_hostname].unchanged }}",
    }
    play = {
        "name": "Meet after the preflights",
        "hosts": "all",
        "gather_facts": False,
        "strategy": "free",
        "vars": {
            "units": {"n0": n0, "n1": n1},
            "_kdtree_deploy_group": {"name": "ds", "members": list(HOSTS)},
            "kdtree_deploy_group_timeout_s": 30,
        },
        "tasks": [
            {"name": "Take this node's preflight facts", "ansible.builtin.set_fact": facts},
            {"name": "Meet", "ansible.builtin.import_tasks": str(MEET)},
            {
                "name": "Show",
                "ansible.builtin.debug": {
                    "msg": "{{ inventory_hostname }} goes on, restart={{ _kdtree_deploy_group_restart }}"
                },
            },
        ],
    }
    playbook = tmp_path / "meet.yml"
    playbook.write_text(yaml.safe_dump([play], sort_keys=False))
    out = run_ansible("ansible-playbook", *on_local_hosts(*HOSTS), str(playbook))
    return out.returncode, " ".join((out.stdout + out.stderr).split())


@pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")
def test_nodes_of_one_server_go_on_and_all_restart_when_one_changes(tmp_path):
    rc, text = _run(tmp_path, _unit(0), _unit(1, unchanged=False))
    assert rc == 0, text[-3000:]
    assert sorted(re.findall(r"(n\d) goes on, restart=True", text)) == list(HOSTS), text[-3000:]
    rc, text = _run(tmp_path, _unit(0), _unit(1))
    assert sorted(re.findall(r"(n\d) goes on, restart=False", text)) == list(HOSTS), text[-3000:]


@pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")
@pytest.mark.parametrize(
    ("n1", "why"),
    [
        (_unit(0), "--node-rank 0 is on 2 nodes (n0, n1); no node has --node-rank 1"),
        (_unit(1, nnodes=3), "n1 runs with --nnodes 3, but serving group ds has 2 nodes"),
        (_unit(1, build="b2"), "the nodes disagree on build_id: n0 'b1', n1 'b2'"),
    ],
)
def test_nodes_whose_units_disagree_are_refused_on_every_node_before_anything_changes(tmp_path, n1, why):
    rc, text = _run(tmp_path, _unit(0), n1)
    assert rc != 0, text[-3000:]
    for host in HOSTS:
        refusal = f"kdtree deploy on {host}: serving group ds (n0, n1) is not ready as one server: "
        assert refusal in text, text[-3000:]
    assert f"{why}. Nothing was changed." in text, text[-3000:]
    assert "goes on" not in text, text[-3000:]
