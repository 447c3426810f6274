"""make bench-smoke: how long after a crash's traceback reaches the journal Ansible fails the host.

--crash double: deploys to a test-double host with the double's knobs set so that scheduler TP0
raises 3 s after it starts (while the simulated weights load); prints detect_s=.
--crash missing-model: deploys to a real-engine host (tests/engine) with a model path that does not
exist (kdtree_service_replace_exec_start), so the real sglang 0.5.23 server dies while starting;
prints engine_detect_s=.
detect = time of the first `fatal: [host]` line of ansible-playbook (the smoke task) - journal time
of the traceback's last line.
--batch HOST,HOST,...: one batch of those hosts (at least two): the second one's scheduler crashes 3 s
in while the others load for 60 s; prints batch_detect_s= (the crashed host's rescue start, its first
daemon-reload after it put back or removed the drop-in, - the end of its traceback in the journal; goal
< 5 s whatever the others do) and recover_s= (the traceback's end -> `Started sglang.service` of the
unit's next run; goal < 5 s). Both are read from the crashed host's journal since the deploy began, so
they are the same whatever deploys the hosts had before (a last good deploy is put back, not removed).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import subprocess
import sys
import time
from pathlib import Path

# the local test fleet's helpers (run a playbook, read its recap) live with the fleet's scripts
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "testhosts"))
from playrun import run_playbook

# crash kind -> (extra vars of the deploy, the figure's name)
CRASHES = {
    "double": (
        {"kdtree_service_env_extra": {"SGLANG_DOUBLE_CRASH_AFTER": "3", "SGLANG_DOUBLE_LOAD_SECONDS": "30"}},
        "detect_s",
    ),
    "missing-model": (
        {
            # the ExecStart opt-in: the inventory's command line, with a model that is not there
            "kdtree_service_replace_exec_start": True,
            "kdtree_service_model_path": "/models/missing",
            "kdtree_service_extra_args": ["--device", "cpu", "--dtype", "float32"],
        },
        "engine_detect_s",
    ),
}
log = logging.getLogger("bench-smoke")


def traceback_end_time(host: str, invocation: str) -> float:
    """Journal time (epoch s) of the last line of the first traceback of that run."""
    out = subprocess.run(
        [
            "podman",
            "exec",
            host,
            "journalctl",
            "-o",
            "json",
            "--no-pager",
            f"_SYSTEMD_INVOCATION_ID={invocation}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    entries = [json.loads(line) for line in out.splitlines() if line.strip()]
    in_traceback = False
    for entry in entries:
        message = entry.get("MESSAGE", "")
        if isinstance(message, list):  # non-UTF-8 bytes
            message = bytes(message).decode("utf-8", "replace")
        if "Traceback (most recent call last)" in message:
            in_traceback = True
            continue
        if in_traceback and not message.startswith(" "):
            return int(entry["__REALTIME_TIMESTAMP"]) / 1e6
    raise RuntimeError(f"no complete traceback in the journal of invocation {invocation}")


CRASH_TIMES = Path(__file__).resolve().parents[1] / "scripts" / "testhosts" / "crash_times.py"


def batch(hosts: list[str]) -> int:
    """One batch of `hosts`; the second crashes. Prints batch_detect_s= and recover_s=."""
    crash = hosts[1]
    extra = {
        # one batch of every host: the capacity must allow them all at once
        "kdtree_deploy_max_unavailable": len(hosts),
        "kdtree_deploy_serial": [len(hosts)],
        "kdtree_service_env_extra": {
            "SGLANG_DOUBLE_LOAD_SECONDS": "60",
            "SGLANG_DOUBLE_CRASH_AFTER": "3",
            "SGLANG_DOUBLE_CRASH_HOST": crash,
        },
    }
    since = time.time()
    run = run_playbook("deploy.yml", ",".join(hosts), extra, echo=False)
    if run.rc == 0 or f"kdtree deploy FAILED on {crash}" not in run.text:
        log.error("the batch did not fail on %s as expected (rc=%s):\n%s", crash, run.rc, run.text[-4000:])
        return 1
    times = subprocess.run(
        ["podman", "exec", "-i", crash, "python3", "-", f"{since:.0f}"],
        input=CRASH_TIMES.read_text(encoding="utf-8"),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.split()
    if len(times) != 3 or "none" in times:
        log.error("no traceback, rescue reload or restart in the journal of %s: %s", crash, times)
        return 1
    end, reload, started = (float(t) for t in times)
    log.info("batch of %d hosts (%s) in %.1f s; %s crashed", len(hosts), ", ".join(hosts), run.seconds, crash)
    print(f"batch_detect_s={reload - end:.2f}")
    print(f"recover_s={started - end:.2f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="kdtree-host1")
    parser.add_argument("--crash", choices=sorted(CRASHES), default="double")
    parser.add_argument("--batch", help="comma-separated hosts of one batch; the second one crashes")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="bench-smoke: %(message)s")
    if args.batch:
        return batch(args.batch.split(","))
    extra, figure = CRASHES[args.crash]
    run = run_playbook("deploy.yml", args.host, extra, echo=False)
    fatal = [t for t, line in run.lines if line.startswith(f"fatal: [{args.host}]")]
    invocation = re.search(r"invocation_id: ([0-9a-f]{32})", run.text)
    after_restart = re.search(r"WHY: .*?\(([0-9.]+) s after the restart\)", run.text)
    if run.rc == 0 or not fatal or not invocation or "Traceback (most recent call last)" not in run.text:
        log.error("the crash was not reported as expected (rc=%s):\n%s", run.rc, run.text[-4000:])
        return 1
    detect = fatal[0] - traceback_end_time(args.host, invocation.group(1))
    log.info("host=%s restart_to_failure_s=%s", args.host, after_restart.group(1) if after_restart else "?")
    log.info("rolled back: %s", re.search(r"restarted:\s+HEALTHY", run.text) is not None)
    print(f"{figure}={detect:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
