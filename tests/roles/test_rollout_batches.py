"""The deploy's batches respect kdtree_deploy_max_unavailable on a real ansible-playbook run: a play with
playbooks/deploy.yml's own `hosts` and `serial` (read from it, not copied) over an inventory of 16
local-connection hosts (and two outside the deploy's group), whose only tasks are the deploy role's
capacity check (roles/kdtree_deploy/tasks/capacity.yml, which also brings the role's defaults, as the
real play's import does) and one line per batch. It proves the host count the serial computes (the
play's pattern within the limit), the derived batches, a refused explicit serial, and the check that
catches what the serial cannot see (the inventory's values). The rules: tests/unit/plugins/plugin_utils/
test__capacity.py.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, load_yaml, needs_ansible, run_ansible

pytestmark = needs_ansible

BATCH = re.compile(r"msg: BATCH (\[.*?\])$", re.MULTILINE)


def _inventory(tmp_path: Path, **group_vars) -> Path:
    inventory = {
        "all": {
            "children": {
                "gpu-hosts": {
                    "hosts": {f"h{i:02d}": None for i in range(16)},
                    "vars": {"ansible_connection": "local", **group_vars},
                },
                "other": {"hosts": {"o1": None, "o2": None}, "vars": {"ansible_connection": "local"}},
            }
        }
    }
    path = tmp_path / "hosts.json"
    path.write_text(json.dumps(inventory))
    return path


def _run(tmp_path: Path, *args: str, **group_vars) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    deploy = load_yaml(ROOT / "playbooks" / "deploy.yml")[0]
    play = {
        "name": "Batches",
        "hosts": deploy["hosts"],
        "serial": deploy["serial"],
        "gather_facts": False,
        "tasks": [
            {
                "name": "The deploy role's capacity check",
                "ansible.builtin.import_role": {
                    "name": "kdtree.fleet.kdtree_deploy",
                    "tasks_from": "capacity",
                },
            },
            {
                "name": "Name the batch",
                "ansible.builtin.debug": {"msg": "BATCH {{ ansible_play_batch | to_json }}"},
                "run_once": True,
            },
        ],
    }
    (tmp_path / "play.yml").write_text(json.dumps([play]))
    inventory = _inventory(tmp_path, **group_vars)
    run = run_ansible("ansible-playbook", "-i", str(inventory), str(tmp_path / "play.yml"), *args)
    return run, [json.loads(found) for found in BATCH.findall(run.stdout)]


def _sizes(batches: list[list[str]]) -> list[int]:
    return [len(batch) for batch in batches]


def test_16_hosts_go_canary_first_then_a_quarter_at_most(tmp_path: Path) -> None:
    run, batches = _run(tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert _sizes(batches) == [1, 4, 4, 4, 3]
    assert sorted(host for batch in batches for host in batch) == [f"h{i:02d}" for i in range(16)]


def test_the_limit_counts_8_hosts_of_the_group_and_ignores_hosts_outside_it(tmp_path: Path) -> None:
    run, batches = _run(tmp_path, "-l", "h00,h01,h02,h03,h04,h05,h06,h07,o1,o2")
    assert run.returncode == 0, run.stdout + run.stderr
    assert _sizes(batches) == [1, 2, 2, 2, 1]


def test_a_count_from_extra_vars_sets_the_batches(tmp_path: Path) -> None:
    run, batches = _run(tmp_path, "-e", "kdtree_deploy_max_unavailable=3")
    assert run.returncode == 0, run.stdout + run.stderr
    assert _sizes(batches) == [1, 3, 3, 3, 3, 3]


def test_an_explicit_serial_within_the_capacity_is_kept(tmp_path: Path) -> None:
    extra = '{"kdtree_deploy_serial": [2, 4], "kdtree_deploy_max_unavailable": 4}'
    run, batches = _run(tmp_path, "-e", extra)
    assert run.returncode == 0, run.stdout + run.stderr
    assert _sizes(batches) == [2, 4, 4, 4, 2]


def test_the_old_default_serial_is_refused_before_any_host_runs_a_task(tmp_path: Path) -> None:
    run, batches = _run(tmp_path, "-e", '{"kdtree_deploy_serial": [1, "25%", "100%"]}')
    assert run.returncode != 0 and batches == []
    text = run.stdout + run.stderr
    assert "kdtree_deploy_serial [1, '25%', '100%'] makes a batch of 11 of the play's 16 hosts" in text
    assert "kdtree_deploy_max_unavailable '25%' allows at most 4" in text
    assert "TASK [" not in text


def test_a_smaller_capacity_in_the_inventory_refuses_the_first_batch_over_it(tmp_path: Path) -> None:
    """The serial does not see the inventory (it derives 25%: 4); the hosts do (2): the canary goes, the
    next batch of 4 is refused by the check before it changes anything, and no batch follows."""
    run, batches = _run(tmp_path, kdtree_deploy_max_unavailable=2)
    assert run.returncode != 0
    assert _sizes(batches) == [1]
    text = run.stdout + run.stderr
    assert "this batch has 4 of the play's 16 hosts" in text and "never the inventory's" in text


def test_a_drain_share_that_would_refuse_a_batch_is_refused_at_the_canary(tmp_path: Path) -> None:
    run, batches = _run(tmp_path, kdtree_drain_mode="hooks", kdtree_drain_max_share=0.1)
    assert run.returncode != 0 and batches == []
    text = run.stdout + run.stderr
    assert "kdtree_drain_max_share 0.1 lets the drain take 1 of the play's 16 hosts out at once" in text


@pytest.mark.parametrize("share", [0.25, 0.5])
def test_a_drain_share_the_batches_respect_is_accepted(tmp_path: Path, share: float) -> None:
    run, batches = _run(tmp_path, kdtree_drain_mode="hooks", kdtree_drain_max_share=share)
    assert run.returncode == 0, run.stdout + run.stderr
    assert _sizes(batches) == [1, 4, 4, 4, 3]


def test_the_real_deploy_playbook_refuses_a_contradicting_drain_share_at_the_canary(tmp_path: Path) -> None:
    """playbooks/deploy.yml itself on the 16 hosts (the report play given no host): the canary is refused
    before its lock (nothing changes, no lock task runs), recorded as failed like any other failure, every
    later batch stops on it, and the run's last play fails them all."""
    inventory = _inventory(tmp_path, kdtree_drain_mode="hooks", kdtree_drain_max_share=0.1)
    run = run_ansible(
        "ansible-playbook", "-i", str(inventory), str(ROOT / "playbooks" / "deploy.yml"),
        "-e", "kdtree_report_hosts=no_such_hosts",
    )  # fmt: skip
    text = run.stdout + run.stderr
    assert run.returncode != 0
    assert "kdtree deploy did not complete on h00" in text
    assert "kdtree_drain_max_share 0.1 lets the drain take 1" in text
    assert all(
        f"not deploying to h{i:02d}: the rollout stopped because h00 failed" in text for i in range(1, 16)
    )
    assert "take the host's lock" not in text.lower() and "lock" not in " ".join(
        re.findall(r"TASK \[(.*?)\]", text)
    )
    recap = dict(re.findall(r"^(h\d\d)\s+: (ok=.*)$", run.stdout, re.MULTILINE))
    assert len(recap) == 16 and all("changed=0 " in line for line in recap.values())
    assert len(re.findall(r"^PLAY \[Deploy kdtree verify attention", run.stdout, re.MULTILINE)) == 5


def test_a_host_that_failed_earlier_in_the_batch_still_counts_toward_its_size(tmp_path: Path) -> None:
    """Ansible drops a failed or ended host from ansible_play_batch: a later host of a refused batch (under
    the free strategy, or a fork that runs late) must not see a batch small enough to pass."""
    play = {
        "name": "Batches",
        "hosts": "gpu-hosts",
        "serial": [1, 4],
        "gather_facts": False,
        "tasks": [
            {
                "name": "One host fails first",
                "ansible.builtin.fail": {"msg": "early"},
                "when": "inventory_hostname == 'h02'",
            },
            {
                "name": "The deploy role's capacity check",
                "ansible.builtin.import_role": {
                    "name": "kdtree.fleet.kdtree_deploy",
                    "tasks_from": "capacity",
                },
            },
            {"name": "Passed", "ansible.builtin.debug": {"msg": "PASSED {{ inventory_hostname }}"}},
        ],
    }
    (tmp_path / "play.yml").write_text(json.dumps([play]))
    inventory = _inventory(tmp_path)
    extra = '{"kdtree_deploy_max_unavailable": 3}'
    run = run_ansible(
        "ansible-playbook",
        "-i",
        str(inventory),
        "-l",
        "h00,h01,h02,h03,h04",
        str(tmp_path / "play.yml"),
        "-e",
        extra,
    )
    passed = re.findall(r"msg: PASSED (h\d+)", run.stdout)
    assert passed == ["h00"], run.stdout[
        -3000:
    ]  # the canary; batch 2 has 4 hosts > 3, h02's failure included
