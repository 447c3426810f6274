"""fleet.sh up recovers a host that podman still calls "running" but whose processes are gone.

This is the state a restored machine snapshot (or a killed conmon) leaves: `podman ps` says Up,
`podman exec` fails with "cannot exec in a stopped container". CI once failed on exactly this
(`fleet: kdtree-host1: systemd not up after 60 s (state: none)`). Uses its own name and label.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FLEET = ROOT / "scripts" / "testhosts" / "fleet.sh"
PREFIX = "kdtree-stale-host"
HOST = f"{PREFIX}1"
ENV = {**os.environ, "KDTREE_FLEET_PREFIX": PREFIX, "KDTREE_FLEET_LABEL": "pytest-stale"}


def fleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(FLEET), *args], env=ENV, capture_output=True, text=True, timeout=300, check=False
    )


def inspect(fmt: str) -> str:
    return subprocess.run(
        ["podman", "container", "inspect", "-f", fmt, HOST], capture_output=True, text=True, check=True
    ).stdout.strip()


def can_exec() -> bool:
    return subprocess.run(["podman", "exec", HOST, "true"], capture_output=True, check=False).returncode == 0


@pytest.fixture(scope="module", autouse=True)
def clean() -> Iterator[None]:
    fleet("down")
    yield
    fleet("down")


def make_stale() -> None:
    """Kill conmon first, then the container's init: podman is never told that it exited."""
    conmon, init = int(inspect("{{.State.ConmonPid}}")), int(inspect("{{.State.Pid}}"))
    os.kill(conmon, signal.SIGKILL)
    os.kill(init, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while can_exec() and time.monotonic() < deadline:
        time.sleep(0.2)


def test_fleet_up_recreates_a_host_podman_calls_running_but_whose_processes_are_gone() -> None:
    first = fleet("up", "1")
    assert first.returncode == 0, first.stderr
    old_id = inspect("{{.Id}}")

    make_stale()
    assert inspect("{{.State.Status}}") == "running", "the simulation no longer produces a stale container"
    assert not can_exec()

    second = fleet("up", "1")
    assert second.returncode == 0, second.stderr
    assert "removing the stale container" in second.stderr
    assert inspect("{{.Id}}") != old_id
    health = subprocess.run(
        [
            "podman",
            "exec",
            HOST,
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "http://127.0.0.1:30000/health",
        ],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    assert health == "200"


def test_fleet_up_leaves_a_healthy_running_host_as_it_is() -> None:
    first = fleet("up", "1")
    assert first.returncode == 0, first.stderr
    old_id = inspect("{{.Id}}")
    again = fleet("up", "1")
    assert again.returncode == 0, again.stderr
    assert "removing the stale container" not in again.stderr
    assert inspect("{{.Id}}") == old_id


def test_fleet_down_removes_a_stale_host() -> None:
    first = fleet("up", "1")
    assert first.returncode == 0, first.stderr
    make_stale()
    down = fleet("down")
    assert down.returncode == 0, down.stderr
    assert subprocess.run(["podman", "container", "exists", HOST], check=False).returncode == 1
