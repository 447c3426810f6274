"""`pytest --collect-only tests` collects every suite in one process with no error: suites that import
the collection differently (through sys.path, or through Ansible's collection finder for the roles'
FQCN filters) must not break each other, and no two test files may clash by name."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT


def test_the_whole_test_tree_collects_in_one_run_without_an_error():
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    last = (out.stdout.strip().splitlines() or [""])[-1]
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "tests collected" in last and "error" not in last, last
