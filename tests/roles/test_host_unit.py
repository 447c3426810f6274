"""scripts/testhosts/host-unit.sh, the stock-unit steps shared by the test hosts' installers
(install-double.sh, engine-install.sh), run here against a fake systemctl, journalctl and curl."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

LIB = ROOT / "scripts" / "testhosts" / "host-unit.sh"
URL = "http://127.0.0.1:30000/health"
# systemctl: every call is logged; `is-active` and `show -p ActiveState` answer $STATE/active.
SYSTEMCTL = """#!/bin/sh
echo "systemctl $*" >>"$STATE/calls"
case "$1" in
  is-active) [ "$(cat "$STATE/active")" = active ] ;;
  show) case "$3" in ActiveState) cat "$STATE/active" ;; *) echo inv-1 ;; esac ;;
  status) echo "status of the unit" ;;
esac
"""
CURL = """#!/bin/sh
echo "curl $*" >>"$STATE/calls"
cat "$STATE/code"
"""
JOURNALCTL = """#!/bin/sh
echo "journalctl $*" >>"$STATE/calls"
echo "the run's last line"
"""


@pytest.fixture
def host(tmp_path: Path):
    """Run `body` after sourcing the library, with the fakes first on PATH; (result, calls)."""
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    for name, text in (("systemctl", SYSTEMCTL), ("curl", CURL), ("journalctl", JOURNALCTL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)

    def run(body: str, *, active: str = "active", code: str = "200", changed: int = 0):
        (state / "active").write_text(active)
        (state / "code").write_text(code)
        (state / "calls").write_text("")
        script = (
            'set -euo pipefail; log() { echo "test: $*"; }; die() { echo "test: $*" >&2; exit 1; }\n'
            f'source "{LIB}"; changed={changed}\n{body}\n'
            'echo "changed=$changed"\n'
        )
        result = subprocess.run(
            ["bash", "-c", script],
            capture_output=True,
            text=True,
            timeout=30,
            env={"PATH": f"{bin_dir}:/usr/bin:/bin", "STATE": str(state)},
        )
        return result, (state / "calls").read_text().splitlines()

    return run


def test_the_unit_file_is_installed_and_systemd_reloaded_only_when_it_differs(host, tmp_path):
    new, unit = tmp_path / "new.service", tmp_path / "sglang.service"
    new.write_text("[Service]\nExecStart=/bin/true\n")
    first, calls = host(f'unit_put "{new}" "{unit}"')
    assert f"test: installed {unit}" in first.stdout and "changed=1" in first.stdout
    assert unit.read_text() == new.read_text() and oct(unit.stat().st_mode & 0o777) == "0o644"
    assert calls == ["systemctl daemon-reload"]
    again, calls = host(f'unit_put "{new}" "{unit}"')
    assert "installed" not in again.stdout and "changed=0" in again.stdout and calls == []


def test_a_running_unit_with_nothing_changed_is_left_alone(host):
    result, calls = host(f'unit_up "{URL}" 5')
    assert result.returncode == 0, result.stderr
    assert "started" not in result.stdout
    assert f"test: sglang.service healthy ({URL} 200) (already running)" in result.stdout
    assert "systemctl restart sglang.service" not in calls and "systemctl enable -q sglang.service" in calls


@pytest.mark.parametrize(("changed", "active"), [(1, "active"), (0, "inactive")])
def test_a_change_or_a_stopped_unit_restarts_it_and_says_when_it_got_healthy(host, changed, active):
    result, calls = host(f'unit_up "{URL}" 5', changed=changed, active=active)
    assert result.returncode == 0, result.stderr
    assert "test: started sglang.service" in result.stdout and "s after the start" in result.stdout
    assert "systemctl restart sglang.service" in calls


def test_a_failed_unit_dies_with_its_journal_and_status(host):
    result, calls = host(f'unit_up "{URL}" 5', code="000", active="failed")
    assert result.returncode == 1 and "changed=" not in result.stdout
    assert "the run's last line" in result.stderr and "status of the unit" in result.stderr
    assert result.stderr.rstrip().endswith("test: sglang.service failed")
    assert "journalctl -o cat --no-pager _SYSTEMD_INVOCATION_ID=inv-1" in calls


def test_a_unit_never_healthy_dies_after_the_wait_with_its_journal(host):
    result, calls = host(f'unit_up "{URL}" 1', code="503")
    assert result.returncode == 1
    assert "the run's last line" in result.stderr
    assert result.stderr.rstrip().endswith("test: sglang.service not healthy after 1s")
    assert sum(call.startswith("curl ") for call in calls) == 5  # every 0.2 s for 1 s


def test_no_wait_returns_after_the_start_without_asking(host):
    result, calls = host(f'unit_up "{URL}" 0', changed=1)
    assert result.returncode == 0 and "changed=1" in result.stdout
    assert not any(call.startswith("curl ") for call in calls)
