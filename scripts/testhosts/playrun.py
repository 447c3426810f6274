"""Run ansible-playbook as an operator would, timestamping every output line as it arrives."""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECAP_RE = re.compile(
    r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+.*rescued=(\d+)"
)
# a play's banner; with `serial` ansible-playbook prints it again for every batch
PLAY_RE = re.compile(r"^PLAY \[(.*)\] \**$")
# a task's result line for a host: "ok: [h]", "changed: [h -> localhost]", "fatal: [h]: FAILED! ..."
RESULT_RE = re.compile(r"^(?:ok|changed|skipping|failed|fatal|unreachable|included): \[([^\]\s]+)")


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
class Batch:
    """One batch of a play: the hosts that had a task result in it and its wall time (its banner to the
    next play banner, or to the PLAY RECAP)."""

    hosts: list[str]
    seconds: float
    # when its banner arrived (time.time())
    opened: float = 0.0


@dataclass
class Run:
    rc: int
    seconds: float
    lines: list[tuple[float, str]] = field(default_factory=list)
    # controller CPU seconds of the run: ansible-playbook, its workers and the podman clients they ran
    # (user + system of the waited-for descendants)
    cpu_s: float = 0.0
    # (time.time(), machine_busy_s()) about every BUSY_SAMPLE_S during the run: what every core of this
    # machine did, the test hosts' containers included (busy_between reads it)
    busy: list[tuple[float, float]] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)


def ansible_playbook() -> str:
    """The ansible-playbook next to this Python (the project venv), else the one on PATH."""
    beside = Path(sys.executable).parent / "ansible-playbook"
    return str(beside) if beside.exists() else (shutil.which("ansible-playbook") or "ansible-playbook")


def play_batches(lines: list[tuple[float, str]], play: str) -> list[Batch]:
    """The batches of the play named `play` in a run's timestamped output, in order: each banner of
    that play opens one (ansible-playbook prints it once per `serial` batch); the next banner of any
    play, or the PLAY RECAP, closes it."""
    batches: list[Batch] = []
    current: Batch | None = None
    for at, line in lines:
        banner = PLAY_RE.match(line)
        if banner or line.startswith("PLAY RECAP"):
            if current is not None:
                current.seconds = at - current.opened
                batches.append(current)
                current = None
            if banner and banner.group(1) == play:
                current = Batch(hosts=[], seconds=0.0, opened=at)
            continue
        result = RESULT_RE.match(line)
        if current is not None and result and result.group(1) not in current.hosts:
            current.hosts.append(result.group(1))
    if current is not None:  # a run cut short: the batch ends with its last line
        current.seconds = lines[-1][0] - current.opened
        batches.append(current)
    return batches


def run_playbook(
    playbook: str, limit: str, extra: dict | None = None, echo: bool = True, inventory: str | None = None
) -> Run:
    """ansible-playbook playbooks/<playbook> -l limit [-e extra] [-i inventory]; every output line with
    the time it arrived."""
    cmd = [ansible_playbook(), f"playbooks/{playbook}", "-l", limit]
    if inventory:
        cmd += ["-i", inventory]
    if extra:
        cmd += ["-e", json.dumps(extra)]
    env = dict(os.environ, PYTHONUNBUFFERED="1", ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    env.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))
    start = time.time()
    cpu_start = _children_cpu()
    lines: list[tuple[float, str]] = []
    busy: list[tuple[float, float]] = []
    done = threading.Event()
    sampler = threading.Thread(target=_sample_busy, args=(busy, done), daemon=True)
    sampler.start()
    with subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append((time.time(), line.rstrip("\n")))
            if echo:
                print(line, end="", flush=True)
        rc = proc.wait()
    done.set()
    sampler.join()
    return Run(rc=rc, seconds=time.time() - start, lines=lines, cpu_s=_children_cpu() - cpu_start, busy=busy)


BUSY_SAMPLE_S = 0.25


def machine_busy_s() -> float:
    """CPU seconds this machine's cores have been busy since boot: /proc/stat's user, nice, system, irq,
    softirq and steal (everything but idle and iowait), of every process, the test hosts' included."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def _sample_busy(samples: list[tuple[float, float]], done: threading.Event) -> None:
    while True:
        samples.append((time.time(), machine_busy_s()))
        if done.wait(BUSY_SAMPLE_S):
            samples.append((time.time(), machine_busy_s()))
            return


def busy_between(samples: list[tuple[float, float]], start: float, end: float) -> float | None:
    """The machine's busy CPU seconds from `start` to `end` (time.time()), each read from the last sample
    taken at or before it (the first sample for a moment before any); None without samples."""
    if not samples:
        return None

    def at(moment: float) -> float:
        before = [value for when, value in samples if when <= moment]
        return before[-1] if before else samples[0][1]

    return max(0.0, at(end) - at(start))


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
