"""Run ansible-playbook as an operator would, timestamping every output line as it arrives."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECAP_RE = re.compile(
    r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+.*rescued=(\d+)"
)


def parse_recap(text: str) -> dict[str, dict[str, int]]:
    """The PLAY RECAP of a run's output: host -> ok, changed, unreachable, failed, rescued (the last
    recap line of a host wins when a playbook has several plays)."""
    recap: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        match = RECAP_RE.match(line.strip())
        if match:
            host, *counts = match.groups()
            recap[host] = dict(
                zip(("ok", "changed", "unreachable", "failed", "rescued"), map(int, counts), strict=True)
            )
    return recap


@dataclass
class Run:
    rc: int
    seconds: float
    lines: list[tuple[float, str]] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)


def ansible_playbook() -> str:
    """The ansible-playbook next to this Python (the project venv), else the one on PATH."""
    beside = Path(sys.executable).parent / "ansible-playbook"
    return str(beside) if beside.exists() else (shutil.which("ansible-playbook") or "ansible-playbook")


def run_playbook(playbook: str, limit: str, extra: dict | None = None, echo: bool = True) -> Run:
    cmd = [ansible_playbook(), f"playbooks/{playbook}", "-l", limit]
    if extra:
        cmd += ["-e", json.dumps(extra)]
    env = dict(os.environ, PYTHONUNBUFFERED="1", ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    env.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))
    start = time.time()
    lines: list[tuple[float, str]] = []
    with subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append((time.time(), line.rstrip("\n")))
            if echo:
                print(line, end="", flush=True)
        rc = proc.wait()
    return Run(rc=rc, seconds=time.time() - start, lines=lines)
