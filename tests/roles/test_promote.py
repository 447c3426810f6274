"""The promotion's playbook (playbooks/promote.yml) and role (kdtree_promote): the playbook is checked
with ansible-playbook --list-hosts (both plays' host patterns, the group play 2 runs on) and run on
localhost, where no host qualifies: the run ends OK, play 2 runs on no host and the table says why each
host stays; the defaults are the plugin's alone. The judge itself (plugin_utils/_promote) is unit-tested in
tests/unit/plugins/plugin_utils/test__promote.py. Nothing here needs systemd or a container.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _promote as promote
from conftest import PLAYBOOK_BIN, ROOT, load_yaml, run_ansible


def test_the_defaults_are_not_restated_in_the_playbook_or_the_filter():
    role = ROOT / "roles" / "kdtree_promote"
    for path in (
        ROOT / "playbooks" / "promote.yml",
        ROOT / "plugins" / "filter" / "promote.py",
        *sorted(role.glob("*/main.yml")),
    ):
        code = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))
        assert not re.search(r"\b1000\b|\b0\.02\b", code), path
    assert not re.search(r"\b0\.02\b", (ROOT / "plugins" / "plugin_utils" / "_promote.py").read_text())


def test_the_play_passes_the_patch_role_s_source_dir_to_both_verdicts():
    text = (ROOT / "roles" / "kdtree_promote" / "tasks" / "main.yml").read_text(encoding="utf-8")
    assert text.count("patch_source=kdtree_patch_source_path") == 2
    facts = load_yaml(ROOT / "roles" / "kdtree_patch" / "tasks" / "facts.yml")
    published = facts[0]["ansible.builtin.set_fact"]
    assert published["kdtree_patch_source_path"] == "{{ kdtree_patch_source_dir }}"


# ---------------------------------------------------------------------------------------------
# the playbook


def _inventory(tmp_path: Path, groups: dict) -> Path:
    path = tmp_path / "hosts.yml"
    path.write_text(json.dumps(groups))
    return path


def _playbook(tmp_path: Path, inventory: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_ansible(
        "ansible-playbook", "-i", str(inventory), str(ROOT / "playbooks" / "promote.yml"), *extra, timeout=300
    )


def _plays(listing: str) -> list[tuple[str, list[str], list[str]]]:
    """(play name, pattern, hosts) per play of --list-hosts output."""
    out = []
    for block in re.split(r"\n\s*play #\d+ ", listing)[1:]:
        name = block.split("\t")[0].split(": ", 1)[1]
        pattern = re.search(r"pattern: (\[.*\])", block).group(1)
        hosts = re.search(r"hosts \(\d+\):\n((?:\s{6}\S+\n?)*)", block).group(1).split()
        out.append((name, yaml.safe_load(pattern), sorted(hosts)))
    return out


@pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")
def test_play_2_is_the_deploy_on_the_qualified_group_and_hosts_can_be_chosen(tmp_path):
    # a static group of that name stands in for the one play 1's group_by makes: it shows that the
    # var passed to import_playbook reaches deploy.yml's hosts: template
    inventory = _inventory(
        tmp_path,
        {
            "gpu-hosts": {"hosts": {"g1": {}, "g2": {}}},
            "canary": {"hosts": {"g2": {}}},
            "kdtree_promote_qualified": {"hosts": {"g1": {}}},
        },
    )
    out = _playbook(tmp_path, inventory, "--list-hosts")
    assert out.returncode == 0, out.stdout + out.stderr
    plays = _plays(out.stdout)
    assert plays[0][1:] == (["gpu-hosts"], ["g1", "g2"])
    assert plays[1][0] == "Deploy kdtree verify attention to SGLang hosts"
    assert plays[1][1:] == (["kdtree_promote_qualified"], ["g1"])
    # the closing report (report.yml's play, which deploy.yml imports) covers every host judged; the
    # deploy's last play then fails the promoted hosts whose deploy failed or stopped
    assert plays[-2][0] == "Report the kdtree state of SGLang hosts (read-only)"
    assert plays[-2][1:] == (["gpu-hosts"], ["g1", "g2"])
    assert plays[-1][0] == "Fail the hosts whose deploy failed or stopped"
    assert plays[-1][1:] == (["kdtree_promote_qualified"], ["g1"])
    out = _playbook(tmp_path, inventory, "--list-hosts", "-e", "kdtree_promote_hosts=canary")
    assert _plays(out.stdout)[0][1:] == (["canary"], ["g2"])
    assert _plays(out.stdout)[-2][1:] == (["canary"], ["g2"])


def test_play_2_deploys_mode_on_with_the_deploy_s_own_flow():
    plays = yaml.safe_load((ROOT / "playbooks" / "promote.yml").read_text())
    assert plays[-1]["ansible.builtin.import_playbook"] == "deploy.yml"
    assert plays[-1]["vars"] == {
        "kdtree_deploy_hosts": "kdtree_promote_qualified",
        "kdtree_service_verify_mode": "on",
        "kdtree_report_hosts": "{{ kdtree_promote_hosts | default('gpu-hosts') }}",
        # the bake judges each host moved to on against its own validate run (its pre-restart window)
        "kdtree_deploy_bake_against": "self",
    }
    deploy = yaml.safe_load((ROOT / "playbooks" / "deploy.yml").read_text())
    assert deploy[0]["hosts"] == "{{ kdtree_deploy_hosts | default('gpu-hosts') }}"
    judge_play = plays[0]
    assert (judge_play["strategy"], judge_play["gather_facts"], judge_play["become"]) == (
        "linear",
        False,
        True,
    )
    assert "serial" not in judge_play  # the report collects every host's row once
    assert [t["ansible.builtin.import_role"] for t in judge_play["tasks"]] == [
        {"name": "kdtree.fleet.kdtree_promote"}
    ]
    role_tasks = yaml.safe_load((ROOT / "roles" / "kdtree_promote" / "tasks" / "main.yml").read_text())
    group_by = [t for t in role_tasks if "ansible.builtin.group_by" in t]
    assert group_by[0]["ansible.builtin.group_by"]["key"] == "kdtree_promote_qualified"


@pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")
@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_when_no_host_qualifies_the_run_ends_ok_and_says_why(tmp_path, check):
    inventory = _inventory(
        tmp_path,
        {
            "gpu-hosts": {
                "hosts": {
                    "local-a": {
                        "ansible_connection": "local",
                        "kdtree_service_name": "kdtree-promote-test-a",
                    },
                    "local-b": {"ansible_connection": "local", "kdtree_service_port": 1},
                }
            }
        },
    )
    out = _playbook(
        tmp_path,
        inventory,
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        "-e",
        "ansible_become=false",
        "-e",
        f"kdtree_report_json={tmp_path / 'report.json'}",
        *(["--check"] if check else []),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PLAY [Deploy kdtree verify attention to SGLang hosts]" in out.stdout
    assert "skipping: no hosts matched" in out.stdout
    table = out.stdout[out.stdout.index("PROMOTE  WHY") :]  # after the report's own table
    lines = table.splitlines()[1:3]
    assert [line.split()[:2] for line in lines] == [["local-a", "stays"], ["local-b", "stays"]]
    assert all("kdtree is not deployed" in line for line in lines), lines
    recap = out.stdout[out.stdout.index("PLAY RECAP") :]
    assert re.findall(r"changed=(\d+)", recap) == ["0", "0"]
    assert re.findall(r"failed=(\d+)", recap) == ["0", "0"]


def test_the_argument_spec_documents_the_speed_defaults_and_the_noise_margin():
    spec = load_yaml(ROOT / "roles/kdtree_promote/meta/argument_specs.yml")["argument_specs"]["main"][
        "options"
    ]
    text = spec["kdtree_promote_min_speedup"]["description"]
    assert f"{promote.DEFAULT_MIN_SPEEDUP:g}" in text and "noise margin" in text
    # the operator reads the default itself, not where in the source it lives
    for name, default in [
        ("min_timed_calls", promote.DEFAULT_MIN_TIMED_CALLS),
        ("min_compared", promote.DEFAULT_MIN_COMPARED),
    ]:
        assert f"default, {default}." in spec[f"kdtree_promote_{name}"]["description"], name
