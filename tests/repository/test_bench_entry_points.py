"""The controller-side benchmarks (`make bench`) start: every import they need is there. They run only
in CI's `make bench` against a live fleet, so a missing module would otherwise show up only there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("script", ["bench/fleet.py", "bench/noop.py", "bench/smoke.py", "bench/startup.py"])
def test_the_controller_benchmark_starts_and_answers_help(script):
    proc = subprocess.run(
        [sys.executable, str(ROOT / script), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage:" in proc.stdout
