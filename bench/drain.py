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
import logging
import os
import sys
import tempfile
from pathlib import Path

# the local test fleet's helpers (the hosts behind the router, the traffic client, a playbook run) live
# with the fleet's scripts
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "testhosts"))
import drainfleet
import traffic
from playrun import run_playbook

log = logging.getLogger("bench-drain")
KEY = "bench-drain-key-9b2e"
# the runs, in this order for each mode (each starts where the one before left the hosts); hosts restarted
RUNS = {"rollback": 3, "deploy": 3, "crash": 2}


def _measure(fleet: drainfleet.Fleet, mode: str) -> dict[str, dict]:
    state = fleet.tmp / f"router-{mode}"
    router = traffic.router_start(state, list(fleet.workers.values()), disable_retries=mode == "off")
    figures = {}
    try:
        for run in RUNS:
            seen, _ = fleet.under_traffic(run, mode == "on", router["url"], KEY, f"{mode}-{run}")
            figures[run] = seen
            print(drainfleet.line(f"drain_{mode}_{run}", seen), flush=True)
    finally:
        traffic.router_stop(state)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keep", action="store_true", help="leave the three hosts running")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="bench-drain: %(message)s")
    os.environ[traffic.KEY_ENV] = KEY
    with tempfile.TemporaryDirectory(prefix="bench-drain-") as tmpdir:
        fleet = drainfleet.Fleet("kdtree-drainb", "drainbench", 3, Path(tmpdir))
        try:
            fleet.up()
            first = run_playbook("deploy.yml", "gpu-hosts", echo=False)  # warm: the kernel from the cache
            if first.rc != 0:
                log.error("the first deploy failed (rc=%s):\n%s", first.rc, first.text[-4000:])
                return 1
            off = _measure(fleet, "off")
            on = _measure(fleet, "on")
        finally:
            if not args.keep:
                fleet.down()
    ok = True
    for run, restarted in RUNS.items():
        added = (on[run]["wall_s"] - off[run]["wall_s"]) / restarted
        print(f"drain_added_s_per_host_{run}={added:.1f} (hosts restarted: {restarted})")
        ok &= on[run]["failed"] == 0 and on[run]["cut"] == 0 and on[run]["reached_while_out"] == 0
        ok &= on[run]["rc"] == off[run]["rc"] == drainfleet.WANT_RC[run]
    failed = {
        mode: sum(f["failed"] for f in figures.values()) for mode, figures in (("off", off), ("on", on))
    }
    print(f"drain_off_failed={failed['off']} drain_on_failed={failed['on']}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
