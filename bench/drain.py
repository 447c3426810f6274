"""make bench-drain: what the drain costs and what it saves, on three SGLang test-double hosts of its own.

Starts three test hosts (kdtree-drainb1..3, scripts/testhosts/fleet.sh; removed afterwards unless
--keep), makes their units listen on the hosts' network with a request log (serve-on-network.sh),
starts SGLang's router (sglang-router 0.3.2, .cache/router-venv) on 127.0.0.1 in front of them and
sends continuous traffic through it (scripts/testhosts/traffic.py) during rollback.yml, a deploy and a
deploy in which host 2 crashes and is rolled back, one host at a time: first with the drain off and the
router's retries off, then with the drain on (retries on, the router's default). Prints key=value lines:
per mode and run the requests sent/answered/failed, those cut on a host and those that reached a host
while it was out of the router, the wall time; then the wall time the drain adds per restarted host.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# the local test fleet's helpers (run a playbook, the traffic client) live with the fleet's scripts
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "testhosts"))
import traffic
from playrun import run_playbook

ROOT = Path(__file__).resolve().parents[1]

log = logging.getLogger("bench-drain")
PREFIX = "kdtree-drainb"
HOSTS = [f"{PREFIX}{i}" for i in (1, 2, 3)]
FLEET_ENV = {**os.environ, "KDTREE_FLEET_PREFIX": PREFIX, "KDTREE_FLEET_LABEL": "drainbench"}
KEY = "bench-drain-key-9b2e"
REQUEST_LOG = "/var/log/sglang-requests.jsonl"
GENERATE_S = "0.2"
# the runs, in this order for each mode (each starts where the one before left the hosts); hosts restarted
RUNS = {"rollback": 3, "deploy": 3, "crash": 2}


def _podman(host: str, *cmd: str, stdin: str | None = None, timeout: float = 120) -> str:
    done = subprocess.run(
        ["podman", "exec", "-i", host, *cmd],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    return done.stdout


def _fleet(action: str, *args: str) -> None:
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "testhosts" / "fleet.sh"), action, *args],
        env=FLEET_ENV,
        check=True,
        timeout=1200,
    )


def _serve_on_network() -> dict[str, str]:
    """Each host's unit on its network with the request log; {host: worker URL} once healthy."""
    script = (ROOT / "scripts" / "testhosts" / "serve-on-network.sh").read_text()
    for host in HOSTS:
        _podman(host, "bash", "-s", "--", GENERATE_S, REQUEST_LOG, stdin=script)
    return {host: _podman(host, "bash", "-s", "--", "--url", stdin=script).strip() for host in HOSTS}


def _inventory(tmp: Path) -> Path:
    """These hosts as the local inventory's double-hosts, with its group_vars."""
    (tmp / "group_vars").symlink_to(ROOT / "inventory" / "local" / "group_vars")
    hosts = {host: None for host in HOSTS}
    inventory = {"gpu-hosts": {"children": {"double-hosts": {"hosts": hosts}}}}
    (tmp / "hosts.yml").write_text(json.dumps(inventory))
    return tmp / "hosts.yml"


def _extra(mode: str, run: str, router_url: str) -> tuple[str, dict]:
    extra: dict = {}
    if mode == "on":
        extra = {
            "kdtree_drain_mode": "sglang_router",
            "kdtree_drain_router_url": router_url,
            "kdtree_drain_router_api_key": KEY,
            "kdtree_drain_worker_url": "{{ _bench_workers[inventory_hostname] }}",
        }
    if run == "rollback":
        return "rollback.yml", extra
    env = {"KDTREE_BENCH_RUN": f"{mode}-{run}"}  # a change on every host: each deploy restarts
    if run == "crash":
        env.update(
            SGLANG_DOUBLE_CRASH_AFTER="3", SGLANG_DOUBLE_LOAD_SECONDS="10", SGLANG_DOUBLE_CRASH_HOST=HOSTS[1]
        )
    return "deploy.yml", {**extra, "kdtree_service_env_extra": env}


def _measure(tmp: Path, mode: str, workers: dict[str, str]) -> dict[str, dict]:
    state = tmp / f"router-{mode}"
    router = traffic.router_start(state, list(workers.values()), disable_retries=mode == "off")
    figures = {}
    try:
        for run in RUNS:
            playbook, extra = _extra(mode, run, router["url"])
            extra["_bench_workers"] = workers
            with traffic.Traffic(router["url"], threads=3) as load:
                time.sleep(1)
                result = run_playbook(playbook, "gpu-hosts", extra, echo=False)
                time.sleep(1)
            logs = {}
            for host, url in workers.items():
                path = tmp / f"{mode}-{run}-{host}.jsonl"
                path.write_text(_podman(host, "cat", REQUEST_LOG))
                logs[url] = path
            seen = traffic.check(load.summary(), logs)
            seen.update(wall_s=round(result.seconds, 1), rc=result.rc)
            figures[run] = seen
            want_rc = 2 if run == "crash" else 0
            if result.rc != want_rc:
                log.error("%s %s: rc=%s (want %s)\n%s", mode, run, result.rc, want_rc, result.text[-4000:])
            print(
                f"drain_{mode}_{run}: sent={seen['sent']} answered={seen['answered']} failed={seen['failed']}"
                f" cut={seen['cut']} reached_while_out={seen['reached_while_out']}"
                f" wall_s={seen['wall_s']} rc={result.rc}",
                flush=True,
            )
    finally:
        traffic.router_stop(state)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keep", action="store_true", help="leave the three hosts running")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="bench-drain: %(message)s")
    os.environ[traffic.KEY_ENV] = KEY
    _fleet("up", str(len(HOSTS)))
    try:
        with tempfile.TemporaryDirectory(prefix="bench-drain-") as tmpdir:
            tmp = Path(tmpdir)
            os.environ["ANSIBLE_INVENTORY"] = str(_inventory(tmp))
            workers = _serve_on_network()
            first = run_playbook("deploy.yml", "gpu-hosts", echo=False)  # warm: the kernel from the cache
            if first.rc != 0:
                log.error("the first deploy failed (rc=%s):\n%s", first.rc, first.text[-4000:])
                return 1
            off = _measure(tmp, "off", workers)
            on = _measure(tmp, "on", workers)
    finally:
        if not args.keep:
            _fleet("down")
    ok = True
    for run, restarted in RUNS.items():
        added = (on[run]["wall_s"] - off[run]["wall_s"]) / restarted
        print(f"drain_added_s_per_host_{run}={added:.1f} (hosts restarted: {restarted})")
        ok &= on[run]["failed"] == 0 and on[run]["cut"] == 0 and on[run]["reached_while_out"] == 0
        ok &= on[run]["rc"] == off[run]["rc"] == (2 if run == "crash" else 0)
    failed = {
        mode: sum(f["failed"] for f in figures.values()) for mode, figures in (("off", off), ("on", on))
    }
    print(f"drain_off_failed={failed['off']} drain_on_failed={failed['on']}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
