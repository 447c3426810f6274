"""Where `make test`'s time goes: each target's wall and own CPU seconds, and the machine's CPU meanwhile.

    testtime.py run --log DIR --lane LANE NAME -- CMD...   run CMD, record NAME's figures, exit as CMD did
    testtime.py sample --log DIR [--max-s S]               sample the machine's CPU every second until stopped
    testtime.py stop --log DIR                             stop the sampler
    testtime.py table --log DIR                            print the table of every target recorded

A target's own CPU is what its process tree used and waited for (RUSAGE_CHILDREN of the wrapper): the
test hosts' processes (podman's containers run under conmon, not under make) are not in it. So the
table also gives, for the same interval, the machine's CPU busy share (all processes, /proc/stat) and
its mean 1-minute load (/proc/loadavg): another tenant's load shows there, not in a target's own CPU.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

RECORDS = "targets.jsonl"
SAMPLES = "samples.jsonl"
SAMPLER_PID = "sampler.pid"
SAMPLE_EVERY_S = 1.0
log = logging.getLogger("testtime")


# the CPU lane's control group (scripts/lowprio.sh): its CPU time in ns (cgroup v1 cpuacct) or us (v2)
LOW_USAGE = (
    (Path("/sys/fs/cgroup/cpuacct/kdtree-low/cpuacct.usage"), 1e-9),
    (Path("/sys/fs/cgroup/kdtree-low/cpu.stat"), 1e-6),
)


@dataclass(frozen=True)
class Sample:
    """One reading of the machine: when, CPU jiffies busy and in all (since boot), the 1-minute load,
    and the CPU seconds the CPU lane's control group used so far (None where there is none)."""

    t: float
    busy: int
    total: int
    load1: float
    low_s: float | None = None
    ncpu: int = 1


def read_low_s() -> float | None:
    """The CPU lane's control group's CPU seconds so far; None where it does not exist (yet)."""
    for path, unit in LOW_USAGE:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.name == "cpu.stat":
            fields = dict(line.split() for line in text.splitlines() if len(line.split()) == 2)
            return int(fields["usage_usec"]) * unit if "usage_usec" in fields else None
        return int(text.strip()) * unit
    return None


def read_sample(stat: str, loadavg: str, t: float) -> Sample:
    """The machine's CPU line of /proc/stat and /proc/loadavg as one Sample (idle and iowait are idle)."""
    for line in stat.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            jiffies = [int(x) for x in fields[1:]]
            idle = jiffies[3] + (jiffies[4] if len(jiffies) > 4 else 0)
            total = sum(jiffies[:8])  # guest time is already counted in user and nice
            return Sample(t=t, busy=total - idle, total=total, load1=float(loadavg.split()[0]))
    raise ValueError("/proc/stat has no aggregate cpu line")


def low_between(samples: list[Sample], start: float, end: float) -> float | None:
    """The CPU lane's share of the machine's CPU (0..1) over [start, end]; None without its figures."""
    pts = [s for s in samples if s.low_s is not None]
    before = [s for s in pts if s.t <= start] or [s for s in pts if start <= s.t <= end][:1]
    after = [s for s in pts if s.t >= end] or [s for s in pts if start <= s.t <= end][-1:]
    if not before or not after or after[0].t <= before[-1].t:
        return None
    first, last = before[-1], after[0]
    return (last.low_s - first.low_s) / ((last.t - first.t) * last.ncpu)


def machine_between(samples: list[Sample], start: float, end: float) -> tuple[float, float] | None:
    """(busy share 0..1, mean 1-minute load) over [start, end] from the samples around it; None when
    fewer than two samples bracket the interval (too short to say)."""
    before = [s for s in samples if s.t <= start]
    after = [s for s in samples if s.t >= end]
    inside = [s for s in samples if start <= s.t <= end]
    first = before[-1] if before else (inside[0] if inside else None)
    last = after[0] if after else (inside[-1] if inside else None)
    if first is None or last is None or last.total <= first.total:
        return None
    busy = (last.busy - first.busy) / (last.total - first.total)
    loads = [s.load1 for s in inside] or [first.load1, last.load1]
    return busy, sum(loads) / len(loads)


def _append(path: Path, record: dict) -> None:
    # one short line per write in append mode: concurrent writers (make -j) never interleave it
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")


def run(log_dir: Path, lane: str, name: str, argv: list[str]) -> int:
    """Run argv, then record its wall and own CPU seconds; return its exit status."""
    log_dir.mkdir(parents=True, exist_ok=True)
    start = time.time()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # make's jobserver pipes stay open for a make under it (close_fds=False)
    proc = subprocess.Popen(argv, close_fds=False)
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        rc = proc.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    _append(
        log_dir / RECORDS,
        {"target": name, "lane": lane, "start": start, "end": time.time(), "cpu_s": round(cpu, 1), "rc": rc},
    )
    return rc


def sample(log_dir: Path, max_s: float) -> int:
    """Append a Sample every SAMPLE_EVERY_S until SIGTERM (stop) or max_s have passed."""
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / SAMPLER_PID).write_text(str(os.getpid()))
    deadline = time.monotonic() + max_s
    running = True

    def _stop(*_: object) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, _stop)
    while running and time.monotonic() < deadline:
        s = read_sample(Path("/proc/stat").read_text(), Path("/proc/loadavg").read_text(), time.time())
        s = Sample(s.t, s.busy, s.total, s.load1, read_low_s(), os.cpu_count() or 1)
        _append(log_dir / SAMPLES, s.__dict__)
        time.sleep(SAMPLE_EVERY_S)
    return 0


def stop(log_dir: Path) -> int:
    pid_file = log_dir / SAMPLER_PID
    try:
        os.kill(int(pid_file.read_text()), signal.SIGTERM)
    except (FileNotFoundError, ProcessLookupError, ValueError):
        log.warning("no sampler was running (%s)", pid_file)
    return 0


def _load(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            log.warning("%s: an unreadable line left out: %r", path, line[:80])
    return out


def table(log_dir: Path) -> str:
    """The table: one row per target in start order, then each lane's span and the whole run's."""
    records = sorted(_load(log_dir / RECORDS), key=lambda r: r["start"])
    samples = [Sample(**s) for s in _load(log_dir / SAMPLES)]
    if not records:
        return "testtime: no target recorded"
    rows = [
        "| target | lane | wall s | own CPU s | machine busy % | of it the CPU lane % | mean load | result |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def machine(start: float, end: float) -> tuple[str, str]:
        m = machine_between(samples, start, end)
        low = low_between(samples, start, end)
        busy = "n/a" if m is None else f"{100 * m[0]:.0f}"
        busy += " | n/a" if low is None else f" | {100 * low:.0f}"
        return (busy, "n/a") if m is None else (busy, f"{m[1]:.1f}")

    t0 = records[0]["start"]
    for r in records:
        busy, load = machine(r["start"], r["end"])
        wall = r["end"] - r["start"]
        result = "ok" if r["rc"] == 0 else f"FAILED (rc {r['rc']})"
        rows.append(
            f"| {r['target']} | {r['lane']} | {wall:.0f} (at +{r['start'] - t0:.0f}) | {r['cpu_s']:.0f} "
            f"| {busy} | {load} | {result} |"
        )
    lanes: dict[str, list[dict]] = {}
    for r in records:
        lanes.setdefault(r["lane"], []).append(r)
    for lane, rs in sorted(lanes.items()):
        start, end = min(r["start"] for r in rs), max(r["end"] for r in rs)
        busy, load = machine(start, end)
        rows.append(
            f"| lane {lane}: {len(rs)} targets | {lane} | {end - start:.0f} (at +{start - t0:.0f}) "
            f"| {sum(r['cpu_s'] for r in rs):.0f} | {busy} | {load} | |"
        )
    end = max(r["end"] for r in records)
    busy, load = machine(t0, end)
    rows.append(
        f"| make test | all | {end - t0:.0f} | {sum(r['cpu_s'] for r in records):.0f} | {busy} | {load} | |"
    )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(format="%(name)s: %(message)s", level=logging.INFO)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("run", "sample", "stop", "table"):
        p = sub.add_parser(name)
        p.add_argument("--log", type=Path, required=True)
        if name == "sample":
            p.add_argument("--max-s", type=float, default=3 * 3600.0)
        if name == "run":
            p.add_argument("--lane", required=True)
            p.add_argument("name")
            p.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.cmd == "run":
        command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        if not command:
            parser.error("run: no command after --")
        return run(args.log, args.lane, args.name, command)
    if args.cmd == "sample":
        return sample(args.log, args.max_s)
    if args.cmd == "stop":
        return stop(args.log)
    print(table(args.log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
