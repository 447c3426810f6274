#!/usr/bin/python
"""Watch one run of a systemd SGLang unit for a short while (runs on the managed host).

The kdtree_smoke action plugin calls this module in chunks of a few seconds and prints progress
between chunks, so a 900 s model load shows progress while a crash is still reported within a
poll interval (0.25 s) of its traceback reaching the journal.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: kdtree_smoke
short_description: Restart a SGLang unit and watch its current run until healthy or failed
description:
  - Reads only the journal lines of the unit's current invocation (_SYSTEMD_INVOCATION_ID) and the
    unit state; fails at once on a Python traceback, "Scheduler hit an exception", a failed unit or a
    restart; succeeds only when /health answers 200, the scheduler processes of the unit's cgroup
    carry the kdtree-verify marker with the wanted state, and their environment holds the NCCL values.
options:
  unit: {type: str, required: true, description: Unit name without .service.}
  restart: {type: bool, default: false, description: Restart the unit first and watch the new run.}
  invocation_id: {type: str, default: "", description: Run to keep watching (from a previous chunk).}
  baseline_nrestarts: {type: int, default: 0, description: NRestarts right after the restart.}
  started_at: {type: float, default: 0, description: Epoch seconds of the restart.}
  chunk_s: {type: float, default: 10, description: Return after this long with state=pending.}
  timeout_s: {type: float, default: 900, description: Total time allowed since the restart.}
  poll_s: {type: float, default: 0.25, description: Poll interval.}
  settle_s: {type: float, default: 3, description: Healthy state must hold this long before success.}
  health_url: {type: str, required: true, description: Health endpoint.}
  expected_schedulers: {type: int, default: 0, description: Scheduler count wanted (0 means at least one).}
  scheduler_prefix: {type: str, default: "sglang::scheduler", description: Process title prefix.}
  marker_state: {type: str, default: active, description: Wanted marker state; empty skips the marker check.}
  nccl_env: {type: dict, default: {}, description: Variables every scheduler's environ must hold.}
  fail_on_error: {type: bool, default: true, description: Fail the task on an unhealthy run (action plugin).}
author: kdtree-fleet
"""

RETURN = r"""
state: {description: ok, pending or failed, type: str, returned: always}
"""

FATAL_PATTERNS = (
    "Traceback (most recent call last)",
    "Scheduler hit an exception",
    "Error in sitecustomize",
)
MARKER_RE = re.compile(r"^kdtree-verify: pid=(\d+) .* state=(\w+) ")
# A process whose patch was active and then gave up at run time (library load, unsupported GPU,
# kernel error: roles/kdtree_patch/files/sglang_ext/kdtree_verify/marker.py) prints this second line; Triton then
# serves its verify calls, so the kernel does not run in that scheduler.
RUNTIME_FALLBACK_RE = re.compile(r"^kdtree-verify-fallback: pid=(\d+) ")
SHOW_PROPS = "ActiveState,SubState,Result,NRestarts,InvocationID,ExecMainStatus,MainPID,ControlGroup"
TRACEBACK_LINES = 80


def systemctl_show(unit: str) -> dict[str, str]:
    out = subprocess.run(
        ["systemctl", "show", "-p", SHOW_PROPS, f"{unit}.service"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    props = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        props[key] = value
    return props


def journal_lines(invocation_id: str) -> list[str]:
    if not invocation_id:
        return []
    out = subprocess.run(
        ["journalctl", "-o", "cat", "--no-pager", f"_SYSTEMD_INVOCATION_ID={invocation_id}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return out.splitlines()


def first_fatal(lines: list[str]) -> int | None:
    for index, line in enumerate(lines):
        if any(pattern in line for pattern in FATAL_PATTERNS):
            return index
    return None


def excerpt(lines: list[str]) -> str:
    """The traceback (with two lines of context) when there is one, else the last 30 lines."""
    fatal = first_fatal(lines)
    if fatal is None:
        return "\n".join(lines[-30:])
    start = max(0, fatal - 2)
    return "\n".join(lines[start : start + TRACEBACK_LINES])


def health(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return str(response.status)
    except urllib.error.HTTPError as exc:
        return str(exc.code)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, ConnectionRefusedError):
            return "refused"
        return f"down ({reason})"


def cgroup_pids(control_group: str) -> list[int]:
    """PIDs whose systemd cgroup (v1 name=systemd or v2 unified) is exactly the unit's."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cgroup", encoding="utf-8") as handle:
                lines = handle.read().splitlines()
        except OSError:
            continue
        for line in lines:
            hierarchy, _, path = line.partition(":")[2].partition(":")
            if hierarchy in ("", "name=systemd") and path == control_group:
                pids.append(int(entry))
                break
    return sorted(pids)


def process_title(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            raw = handle.read()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()


def process_environ(pid: int) -> dict[str, str] | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.decode("utf-8", "replace").partition("=")
        if sep:
            env[key] = value
    return env


def markers(lines: list[str]) -> dict[int, tuple[str, str]]:
    found = {}
    for line in lines:
        match = MARKER_RE.match(line)
        if match:
            found[int(match.group(1))] = (match.group(2), line)
    return found


def runtime_fallbacks(lines: list[str]) -> dict[int, str]:
    """pid -> the first `kdtree-verify-fallback:` line of that process."""
    found: dict[int, str] = {}
    for line in lines:
        match = RUNTIME_FALLBACK_RE.match(line)
        if match:
            found.setdefault(int(match.group(1)), line)
    return found


class Watch:
    def __init__(self, params: dict) -> None:
        self.p = params
        self.result: dict = {}
        self.healthy_since: float | None = None

    def fail(self, why: str, detail: str = "") -> dict:
        elapsed = time.time() - self.p["started_at"]
        msg = f"{self.p['unit']}.service: {why} ({elapsed:.1f} s after the restart)"
        if detail:
            msg += "\n" + detail
        self.result.update(state="failed", msg=msg, why=why, detail=detail, elapsed_s=round(elapsed, 2))
        return self.result

    def fail_with_journal(self, why: str) -> dict:
        """Fail; the traceback of a dying process may reach the journal after the unit state changed."""
        lines: list[str] = []
        for _ in range(5):
            lines = journal_lines(self.p["invocation_id"])
            if first_fatal(lines) is not None:
                break
            time.sleep(0.2)
        return self.fail(why, excerpt(lines))

    def poll(self) -> dict | None:
        """One look at the unit. Returns a final result, or None to keep waiting."""
        p = self.p
        lines = journal_lines(p["invocation_id"])
        if first_fatal(lines) is not None:
            time.sleep(0.3)  # let the rest of the traceback reach the journal
            return self.fail(
                "the current run logged a fatal error", excerpt(journal_lines(p["invocation_id"]))
            )
        props = systemctl_show(p["unit"])
        if props.get("InvocationID") != p["invocation_id"]:
            return self.fail_with_journal(f"the unit restarted (invocation {props.get('InvocationID')!r})")
        if int(props.get("NRestarts") or 0) > p["baseline_nrestarts"]:
            return self.fail_with_journal(f"the unit restarted (NRestarts={props.get('NRestarts')})")
        if props.get("ActiveState") not in ("active", "activating", "reloading"):
            return self.fail_with_journal(
                f"the unit is {props.get('ActiveState')}/{props.get('SubState')} "
                f"(Result={props.get('Result')}, ExecMainStatus={props.get('ExecMainStatus')})"
            )
        tail = "\n".join(lines[-30:])
        code = health(p["health_url"])
        found = markers(lines)
        gave_up = runtime_fallbacks(lines)
        schedulers = []
        for pid in cgroup_pids(props.get("ControlGroup", "")):
            title = process_title(pid)
            if title.startswith(p["scheduler_prefix"]):
                schedulers.append((pid, title.split(" ")[0]))
        report = []
        waiting = []
        for pid, title in schedulers:
            marker_state, marker_line = found.get(pid, ("none", ""))
            env = process_environ(pid)
            if env is None:
                waiting.append(f"{title} gone")
                continue
            if p["nccl_env"] and not env:
                return self.fail(
                    f"{title} (pid {pid}) has an unreadable /proc/{pid}/environ",
                    "setproctitle overwrites it unless the unit sets SPT_NOENV=1",
                )
            wrong = {k: env.get(k) for k, v in p["nccl_env"].items() if env.get(k) != str(v)}
            if wrong:
                return self.fail(
                    f"{title} (pid {pid}) does not run with the templated NCCL environment",
                    f"wanted {json.dumps(p['nccl_env'], sort_keys=True)}, "
                    f"has {json.dumps(wrong, sort_keys=True)}",
                )
            if p["marker_state"]:
                if marker_state == "none":
                    waiting.append(f"{title} no marker yet")
                elif marker_state != p["marker_state"]:
                    return self.fail(
                        f"{title} (pid {pid}) reports the patch {marker_state}, wanted {p['marker_state']}",
                        marker_line,
                    )
                if p["marker_state"] == "active" and pid in gave_up:
                    return self.fail(
                        f"{title} (pid {pid}) fell back to Triton at run time: the kernel does not run there",
                        gave_up[pid],
                    )
            report.append({"pid": pid, "title": title, "marker": marker_state, "nccl_env_ok": True})
        expected = p["expected_schedulers"]
        count_ok = len(schedulers) >= 1 if expected <= 0 else len(schedulers) == expected
        elapsed = time.time() - p["started_at"]
        marked = sum(1 for item in report if item["marker"] == p["marker_state"])
        self.result.update(
            health=code,
            schedulers=report,
            elapsed_s=round(elapsed, 2),
            progress=(
                f"{elapsed:5.1f}s health={code} schedulers={len(schedulers)}/{expected or '>=1'} "
                f"markers({p['marker_state'] or 'unchecked'})={marked}/{len(schedulers)}"
            ),
        )
        if code == "200" and count_ok and not waiting:
            if self.healthy_since is None:
                self.healthy_since = time.time()
            if time.time() - self.healthy_since >= p["settle_s"]:
                self.result.update(
                    state="ok",
                    msg=(
                        f"healthy after {elapsed:.1f} s (held {p['settle_s']:g} s): {self.result['progress']}"
                    ),
                )
                return self.result
            return None
        self.healthy_since = None
        if elapsed > p["timeout_s"]:
            return self.fail(
                f"not healthy within {p['timeout_s']:.0f} s: {self.result['progress']}",
                "; ".join(waiting) + ("\n" if waiting else "") + tail,
            )
        return None

    def run(self) -> dict:
        deadline = time.time() + self.p["chunk_s"]
        while True:
            final = self.poll()
            if final is not None:
                return final
            if time.time() >= deadline:
                self.result["state"] = "pending"
                return self.result
            time.sleep(self.p["poll_s"])


def restart(params: dict) -> None:
    params["started_at"] = time.time()
    subprocess.run(["systemctl", "restart", f"{params['unit']}.service"], check=True, capture_output=True)
    props = systemctl_show(params["unit"])
    params["invocation_id"] = props.get("InvocationID", "")
    params["baseline_nrestarts"] = int(props.get("NRestarts") or 0)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "restart": {"type": "bool", "default": False},
            "invocation_id": {"type": "str", "default": ""},
            "baseline_nrestarts": {"type": "int", "default": 0},
            "started_at": {"type": "float", "default": 0.0},
            "chunk_s": {"type": "float", "default": 10.0},
            "timeout_s": {"type": "float", "default": 900.0},
            "poll_s": {"type": "float", "default": 0.25},
            "settle_s": {"type": "float", "default": 3.0},
            "health_url": {"type": "str", "required": True},
            "expected_schedulers": {"type": "int", "default": 0},
            "scheduler_prefix": {"type": "str", "default": "sglang::scheduler"},
            "marker_state": {"type": "str", "default": "active"},
            "nccl_env": {"type": "dict", "default": {}},
            # consumed by the action plugin; accepted here so the argument spec stays complete
            "fail_on_error": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    params = dict(module.params)
    if module.check_mode:
        module.exit_json(changed=params["restart"], state="ok", msg="check mode: would restart and watch")
    changed = False
    if params["restart"]:
        try:
            restart(params)
        except subprocess.CalledProcessError as exc:
            module.fail_json(msg=f"systemctl restart {params['unit']} failed: {exc.stderr}", state="failed")
        changed = True
    if not params["invocation_id"]:
        props = systemctl_show(params["unit"])
        params["invocation_id"] = props.get("InvocationID", "")
        params["baseline_nrestarts"] = int(props.get("NRestarts") or 0)
        params["started_at"] = params["started_at"] or time.time()
    result = Watch(params).run()
    result.update(
        changed=changed,
        invocation_id=params["invocation_id"],
        baseline_nrestarts=params["baseline_nrestarts"],
        started_at=params["started_at"],
    )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
