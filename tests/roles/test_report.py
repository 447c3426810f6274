"""The fleet report's role (kdtree_report) and playbook (playbooks/report.yml) through ansible-playbook
on localhost (local connection) with an unreachable host beside it. The host side and the table are
unit-tested in tests/unit/plugins/module_utils/test__report.py and
tests/unit/plugins/plugin_utils/test__report_table.py. Nothing here needs systemd or a container.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import PLAYBOOK_BIN, run_report_play

# ---------------------------------------------------------------------------------------------
# the playbook and the role through ansible-playbook (localhost, and a host that is unreachable)


def run_report(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        json.dumps(
            {
                "gpu-hosts": {
                    "hosts": {
                        "local-a": {
                            "ansible_connection": "local",
                            "kdtree_service_name": "kdtree-report-test-a",
                        },
                        "local-b": {"ansible_connection": "local", "kdtree_service_port": 1},
                        "gone": {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1},
                    }
                }
            }
        )
    )
    return run_report_play(inventory, *extra)


@pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")
@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_the_playbook_writes_valid_json_with_every_host_and_prints_the_table(tmp_path, check):
    out_json = tmp_path / "out" / "report.json"
    out_json.parent.mkdir()
    out = run_report(tmp_path, "-e", f"kdtree_report_json={out_json}", *(["--check"] if check else []))
    assert out.returncode == 0, out.stdout + out.stderr
    rows = json.loads(out_json.read_text())
    assert [row["host"] for row in rows] == ["local-a", "local-b", "gone"]
    assert rows[0]["unit"] == "kdtree-report-test-a.service"  # the service role's settings apply
    assert rows[0]["status_dir"] == "/run/kdtree-kdtree-report-test-a"
    assert rows[2]["problems"][0].startswith("unreachable")
    assert oct(out_json.stat().st_mode & 0o777) == "0o600"
    assert f"JSON: {out_json}" in out.stdout
    table = out.stdout[out.stdout.index("HOST ") :]
    assert [line.split()[0] for line in table.splitlines()[1:4]] == ["local-a", "local-b", "gone"]
    recap = out.stdout[out.stdout.index("PLAY RECAP") :]
    assert re.findall(r"changed=(\d+)", recap) == ["0", "0", "0"]


@pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")
def test_the_default_json_is_written_in_a_fresh_private_directory_and_printed(tmp_path):
    """Not at a predictable /tmp name another local user could pre-empt with a link: in a new 0700
    directory of a random name (mkdtemp), owned by the user running the play."""
    out = run_report(tmp_path, "--limit", "local-b")
    assert out.returncode == 0, out.stdout + out.stderr
    found = re.search(
        r"JSON: (/tmp/kdtree-report-[A-Za-z0-9_]{6,}/kdtree-report-\d{8}T\d{6}Z\.json)", out.stdout
    )
    assert found, out.stdout
    path = Path(found.group(1))
    try:
        assert [row["host"] for row in json.loads(path.read_text())] == ["local-b"]
        info = path.parent.stat()
        assert oct(info.st_mode & 0o777) == "0o700" and info.st_uid == os.getuid()
    finally:
        path.unlink()
        path.parent.rmdir()
