"""The GPU health per node in the fleet report (roles/kdtree_report, playbooks/report.yml) through
ansible-playbook on localhost, whose nvidia-smi is the CPU test hosts' TEST DOUBLE
(tests/doubles/nvidia_smi, driven by its state file): the role reads it as the preflight's gpu check does
unless kdtree_service_preflight_skip turns that check off. The decision itself:
tests/unit/plugins/module_utils/test__gpu_health.py; the preflight's refusal: test__preflight.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import PLAYBOOK_BIN, ROOT, run_report_play

pytestmark = pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")

DOUBLE = ROOT / "tests" / "doubles" / "nvidia_smi" / "nvidia-smi"


def report(tmp_path: Path, gpus: dict, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    """The report of one local host whose nvidia-smi (first on PATH) is the double in state `gpus`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if not (bin_dir / "nvidia-smi").exists():
        (bin_dir / "nvidia-smi").symlink_to(DOUBLE)
    state = tmp_path / "nvidia-smi.json"
    state.write_text(json.dumps(gpus))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        json.dumps(
            {
                "gpu-hosts": {
                    "hosts": {
                        "node-1": {"ansible_connection": "local", "kdtree_service_name": "kdtree-gpu-test"}
                    }
                }
            }
        )
    )
    out_json = tmp_path / "report.json"
    out = run_report_play(
        inventory,
        "-e",
        f"kdtree_report_json={out_json}",
        "-e",
        "kdtree_report_view=full",
        *extra,
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "NVIDIA_SMI_DOUBLE_STATE": str(state)},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    (row,) = json.loads(out_json.read_text())
    return out, row


def gpus_cell(out: subprocess.CompletedProcess) -> str:
    """The node's line of the printed table from its GPUS column on (the lines carry the callback's
    quoting before HOST)."""
    lines = out.stdout.splitlines()
    header = next(line for line in lines if line.strip().startswith("HOST ") and "GPUS" in line)
    row = next(line for line in lines if line.strip().startswith("node-1 "))
    return row[header.index("GPUS") - header.index("HOST") + row.index("node-1") :]


def test_the_report_shows_a_nodes_bad_gpu_in_the_full_view_and_its_notes(tmp_path):
    out, row = report(tmp_path, {"count": 8, "gpus": {"6": {"ecc.errors.uncorrected.volatile.total": 1}}})
    assert row["gpu_health"]["count"] == 8 and row["gpu_health"]["ok"] is False
    gpu6 = "GPU 6 (GPU-00000000-0000-4000-8000-000000000006)"
    assert f"gpu: {gpu6}: 1 uncorrectable ECC errors since the driver loaded" in row["problems"]
    assert gpus_cell(out).startswith("BAD 1 of 8  ")
    # the default threshold is the role's (argument_specs): 8192 MiB
    assert row["gpu_health"]["min_free_mib"] == 8192


def test_a_healthy_node_reads_ok_and_turning_the_check_off_leaves_the_gpus_unread(tmp_path):
    _out, row = report(tmp_path, {"count": 4})
    assert row["gpu_health"]["ok"] is True and not [p for p in row["problems"] if p.startswith("gpu:")]
    out, row = report(tmp_path, {"fail": {"rc": 9}}, "-e", '{"kdtree_service_preflight_skip": ["gpu"]}')
    assert row["gpu_health"]["checked"] is False
    assert not [p for p in row["problems"] if p.startswith("gpu:")]
    assert gpus_cell(out).startswith("off  ")
