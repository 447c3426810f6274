"""Every molecule scenario has a make target that runs it, alone and in `make test-molecule`
(mk/collection.mk). `make -n` prints the recipes without running them."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))


def _dry_run(target: str) -> str:
    proc = subprocess.run(
        ["make", "-n", "--no-print-directory", target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_scenarios_own_target_runs_that_scenario(scenario):
    assert re.findall(r"molecule test -s (\S*);", _dry_run(f"test-molecule-{scenario}")) == [scenario]


def test_make_test_molecule_runs_every_scenario_once():
    assert len(SCENARIOS) >= 8
    ran = re.findall(r"molecule test -s (\S*);", _dry_run("test-molecule"))
    assert sorted(ran) == SCENARIOS
