"""kdtree_common's run outcome (entry points stop, failed, end, outcome), as playbooks/deploy.yml and
rollback.yml use it: a host whose run failed, and the hosts of later batches the canary stop holds
back, end without failing the play, so the play after it (the fleet report) still runs, and the run's
last play fails them with the message each recorded. Without deferring (a play of the user's own)
the host fails at once and, its batch all failed, Ansible ends the run before any later play. Runs
real plays on three local-connection hosts, the first batch a failing canary."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from conftest import PLAYBOOK_BIN, on_local_hosts, run_ansible

HOSTS = ("h1", "h2", "h3")


def _common(entry: str, **extra) -> dict:
    task = {
        "name": f"kdtree_common {entry}",
        "ansible.builtin.import_role": {"name": "kdtree.fleet.kdtree_common", "tasks_from": entry},
    }
    if extra:
        task["vars"] = extra
    return task


def _run(tmp_path: Path, defer: bool):
    outcome_vars = {"kdtree_common_outcome_play": "deploy", "kdtree_common_outcome_defer": defer}
    deploy = {
        "name": "Deploy",
        "hosts": "all",
        "gather_facts": False,
        "strategy": "free",
        "serial": [1, 2],
        "tasks": [
            _common("stop", **outcome_vars),
            {
                "name": "The change",
                "block": [
                    {
                        "name": "Change the host",
                        "ansible.builtin.fail": {"msg": "boom"},
                        "when": "inventory_hostname == 'h1'",
                    }
                ],
                "rescue": [_common("failed", **outcome_vars)],
                "always": [
                    {
                        "name": "Release the lock",
                        "ansible.builtin.debug": {"msg": "released on {{ inventory_hostname }}"},
                    }
                ],
            },
            _common("end"),
            {"name": "Deployed", "ansible.builtin.debug": {"msg": "deployed {{ inventory_hostname }}"}},
        ],
    }
    report = {
        "name": "Report",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {
                "name": "Report",
                "ansible.builtin.debug": {"msg": "report of {{ ansible_play_hosts_all | join(',') }}"},
                "run_once": True,
            }
        ],
    }
    last = {"name": "Outcome", "hosts": "all", "gather_facts": False, "tasks": [_common("outcome")]}
    playbook = tmp_path / "run.yml"
    playbook.write_text(yaml.safe_dump([deploy, report, last], sort_keys=False))
    out = run_ansible(
        "ansible-playbook",
        *on_local_hosts(*HOSTS),
        str(playbook),
    )
    text = out.stdout + out.stderr
    recap = dict(re.findall(r"(?m)^(h\d) +: (.*)$", text))
    return out.returncode, text, re.sub(r"\s+", " ", text), recap


@pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")
def test_a_failed_canary_still_lets_the_report_run_and_the_last_play_fails_it_and_the_stopped_hosts(tmp_path):
    rc, text, flat, recap = _run(tmp_path, defer=True)
    assert rc == 2, text[-3000:]
    assert "report of h1,h2,h3" in flat, text[-3000:]  # every host is in the report play
    assert "released on h1" in flat and "deployed h1" not in flat  # the lock went back, then the host ended
    assert "deployed h2" not in flat and "deployed h3" not in flat
    for host in ("h2", "h3"):
        assert (
            f"kdtree deploy: not deploying to {host}: the rollout stopped because h1 failed"
            " in an earlier batch." in flat
        )
    assert 'kdtree deploy did not complete on h1: "Change the host" failed: boom' in flat
    # the report came before the failures the last play raised
    assert flat.index("report of h1,h2,h3") < flat.rindex(
        'kdtree deploy did not complete on h1: "Change the host"'
    )
    assert all("failed=1" in recap[h] for h in HOSTS), recap


@pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")
def test_without_deferring_the_canary_fails_at_once_and_ansible_ends_the_run_before_the_report(tmp_path):
    rc, text, flat, recap = _run(tmp_path, defer=False)
    assert rc == 2, text[-3000:]
    assert 'kdtree deploy did not complete on h1: "Change the host" failed: boom' in flat
    assert "released on h1" in flat
    assert "report of" not in flat  # Ansible's rule: a batch whose every host failed ends the run
    assert set(recap) == {"h1"} and "failed=1" in recap["h1"], recap
