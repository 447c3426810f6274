"""make bench-fleet: how deploy, no-op redeploy and rollback time grow with the number of hosts.

For each fleet size (default 1, 4, 8 and 16 hosts) a fresh fleet of test-double hosts is started
(kdtree-bench-h1..N, label kdtree.fleet=bench-fleet, scripts/testhosts/fleet.sh; never the demo fleet),
then timed, each with the playbooks' own defaults, as in production:
  deploy    deploy.yml with its canary batches (from kdtree_deploy_max_unavailable, 25%: 1, then at most a
            quarter at a time; 16 hosts 1, 4, 4, 4, 3) and the warm build cache
            (every host installs the cached artifact; a size whose deploy compiled is run again on a
            fresh fleet, once, so that no figure includes a compile)
  noop      the same deploy again: it must change nothing (changed=0)
  rollback  rollback.yml (to stock, one host at a time: its default serial)
Each run prints a key=value line (wall_s, batches, rc, changed, the machine's cores, the controller's CPU
seconds in all and per host) and one per batch: its hosts, its wall time (its PLAY banner to the next
banner) and the CPU seconds the whole machine spent on it (controller and test hosts, in all and per host).
The test hosts share this machine's cores with the controller: once those are all busy a batch's wall
time grows with its hosts even while the cost per host stays flat, which machine_cpu_per_host_s shows.
The last lines sum it up per run across the sizes, so growth with the fleet is visible. The fleet's
containers are removed at the end (also on failure).
Not part of `make bench` (it takes long).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# the local test fleet's helpers (run a playbook, read its recap and batches) live with the fleet's scripts
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "testhosts"))
from playrun import ROOT, Batch, Run, busy_between, parse_recap, play_batches, run_playbook

log = logging.getLogger("bench-fleet")

FLEET_SH = ROOT / "scripts" / "testhosts" / "fleet.sh"
PREFIX = "kdtree-bench-h"
LABEL = "bench-fleet"
# the play of each playbook whose batches are timed (the report play that follows is not a batch)
RUNS = {
    "deploy": ("deploy.yml", "Deploy kdtree verify attention to SGLang hosts"),
    "noop": ("deploy.yml", "Deploy kdtree verify attention to SGLang hosts"),
    "rollback": ("rollback.yml", "Roll SGLang hosts back"),
}
# kdtree_build's check says which path each host takes (roles/kdtree_build/tasks/check.yml)
BUILD_PATH_RE = re.compile(
    r"kdtree_build on (\S+): build \S+ \([^)]*\):\s+(already on the host|install the artifact|compile)"
)


@dataclass
class Result:
    size: int
    name: str
    run: Run

    @property
    def changed(self) -> int:
        return sum(r["changed"] for r in parse_recap(self.run.text).values())


def fleet(action: str, *args: str) -> None:
    env = dict(os.environ, KDTREE_FLEET_PREFIX=PREFIX, KDTREE_FLEET_LABEL=LABEL)
    proc = subprocess.run(
        ["bash", str(FLEET_SH), action, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"fleet.sh {action} {' '.join(args)} failed (rc={proc.returncode}):\n{proc.stderr[-3000:]}"
        )


def write_inventory(directory: Path, size: int) -> Path:
    """An inventory of the bench hosts with the local fleet's group_vars (the same settings as the
    demo fleet: double hosts, the shared build cache)."""
    (directory / "group_vars").symlink_to(ROOT / "inventory" / "local" / "group_vars")
    hosts = "".join(f"        {PREFIX}{i}:\n" for i in range(1, size + 1))
    (directory / "hosts.yml").write_text(
        f"---\ngpu-hosts:\n  children:\n    double-hosts:\n      hosts:\n{hosts}", encoding="utf-8"
    )
    return directory


def build_paths(run: Run) -> dict[str, int]:
    """How many hosts took each build path (present, artifact, compile) in a deploy's output."""
    names = {"already on the host": "present", "install the artifact": "artifact", "compile": "compile"}
    seen = {host: names[phrase] for host, phrase in BUILD_PATH_RE.findall(run.text)}
    counts: dict[str, int] = {}
    for path in seen.values():
        counts[path] = counts.get(path, 0) + 1
    return counts


def batch_cpu(run: Run, batch: Batch) -> str:
    """What the whole machine (controller and test hosts) spent on a batch, in all and per host: on a
    machine whose cores are all busy, the batch's wall time is this over the cores, so a per-host cost
    that stays flat as batches grow is what the fleet's own CPUs would run side by side."""
    busy = busy_between(run.busy, batch.opened, batch.opened + batch.seconds)
    if busy is None or not batch.hosts:
        return " machine_cpu_s=n/a"
    return f" machine_cpu_s={busy:.1f} machine_cpu_per_host_s={busy / len(batch.hosts):.2f}"


def report(result: Result) -> None:
    playbook_play = RUNS[result.name][1]
    batches = play_batches(result.run.lines, playbook_play)
    extra = ""
    if result.name == "deploy":
        extra = " build_paths=" + ",".join(f"{k}:{v}" for k, v in sorted(build_paths(result.run).items()))
    print(
        f"fleet_hosts={result.size} run={result.name} wall_s={result.run.seconds:.1f} batches={len(batches)}"
        f" changed={result.changed} rc={result.run.rc} load1={os.getloadavg()[0]:.1f} cores={os.cpu_count()}"
        f" controller_cpu_s={result.run.cpu_s:.1f} cpu_per_host_s={result.run.cpu_s / result.size:.2f}"
        f"{extra}",
        flush=True,
    )
    for i, batch in enumerate(batches, 1):
        print(
            f"fleet_hosts={result.size} run={result.name} batch={i}/{len(batches)}"
            f" batch_hosts={len(batch.hosts)} batch_s={batch.seconds:.1f}{batch_cpu(result.run, batch)}",
            flush=True,
        )
    if result.run.rc != 0:
        log.error(
            "%s over %d hosts failed (rc=%s):\n%s",
            result.name,
            result.size,
            result.run.rc,
            result.run.text[-4000:],
        )


def one_size(size: int, inventory: Path, stop_on_compile: bool) -> list[Result]:
    """deploy, noop, rollback over the fleet of `inventory`; stops after a failed run, and after a deploy
    that compiled when `stop_on_compile` (its figures would include a compile)."""
    results: list[Result] = []
    for name in ("deploy", "noop", "rollback"):
        run = run_playbook(RUNS[name][0], "gpu-hosts", echo=False, inventory=str(inventory))
        result = Result(size, name, run)
        results.append(result)
        report(result)
        if run.rc != 0 or (stop_on_compile and name == "deploy" and "compile" in build_paths(run)):
            break
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1,4,8,16", help="comma-separated fleet sizes (default 1,4,8,16)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="bench-fleet: %(message)s")
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    ok = True
    summary: dict[str, dict[int, float]] = {name: {} for name in RUNS}
    try:
        for size in sizes:
            for attempt in (1, 2):
                fleet("down")
                try:
                    fleet("up", str(size))
                except RuntimeError as exc:
                    log.error("no fleet of %d hosts on this machine: %s", size, exc)
                    print(f"fleet_hosts={size} skipped=fleet_up_failed", flush=True)
                    ok = False
                    break
                with tempfile.TemporaryDirectory(prefix="kdtree-bench-fleet-") as tmp:
                    results = one_size(size, write_inventory(Path(tmp), size), stop_on_compile=attempt == 1)
                if attempt == 1 and results[-1].run.rc == 0 and "compile" in build_paths(results[0].run):
                    log.info("%d hosts: the deploy compiled (cold cache); again on a fresh fleet", size)
                    continue
                for result in results:
                    summary[result.name][size] = result.run.seconds
                    ok = ok and result.run.rc == 0
                noop = [r for r in results if r.name == "noop"]
                if noop and noop[0].changed != 0:
                    log.error("the no-op redeploy over %d hosts changed %d tasks", size, noop[0].changed)
                    ok = False
                ok = ok and len(results) == 3
                break
    finally:
        fleet("down")
    for name, by_size in summary.items():
        if by_size:
            print(
                f"bench_fleet run={name} "
                + " ".join(f"hosts_{n}={s:.1f}" for n, s in sorted(by_size.items()))
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
