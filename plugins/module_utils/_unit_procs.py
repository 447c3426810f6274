"""What a systemd unit's processes are and whether its server answers, read from /proc and HTTP.

The readers the smoke check (module_utils/_smoke/host.py) and the fleet report (module_utils/_report.py)
share: the unit's cgroup members, a process's title, environment and start time, the health endpoint's
status and who listens on its port. Stdlib only, and its only imports of other module_utils are
_http_client.py and _unit_socket.py (both stdlib only): scripts/testhosts/hostread.py sends this
source to a test host's python3 with the smoke check's host reader.
"""

from __future__ import annotations

import os

from ansible_collections.kdtree.fleet.plugins.module_utils._http_client import HttpFailure, request
from ansible_collections.kdtree.fleet.plugins.module_utils._unit_socket import listeners, owner, url_port

HEALTH_TIMEOUT_S = 2.0

# SGLang's process title of a scheduler (one per TP rank: sglang::scheduler_TP0, ...).
SCHEDULER_PREFIX = "sglang::scheduler"


def health_status(url: str) -> str:
    """The status code ("200", "503"), "refused", or "down (<reason>)", from the one HTTP client
    (module_utils/_http_client.py: bounded, no redirects followed: a 3xx is its code)."""
    try:
        return str(request("GET", url, timeout_s=HEALTH_TIMEOUT_S).status)
    except HttpFailure as exc:
        if exc.status:
            return str(exc.status)
        if "ConnectionRefusedError" in exc.reason:
            return "refused"
        return f"down ({exc.reason})"


def health_owner(url: str, unit: str, unit_pids: list[int]) -> str:
    """ "" when the unit (or nobody this check can see) listens on the URL's port, else who does."""
    port = url_port(url)
    if port is None:
        return ""
    found = owner(listeners(port), unit_pids)
    if found is None or found.in_unit:
        return ""
    return f"from pid {found.pid} ({found.comm}), not {unit}.service"


def cgroup_pids(control_group: str) -> list[int]:
    """PIDs whose systemd cgroup is exactly the unit's: its cgroup.procs (v2, hybrid or v1 name=systemd
    mount), else a scan of /proc/PID/cgroup."""
    if not control_group:
        return []
    for mount in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd"):
        try:
            with open(f"{mount}{control_group.rstrip('/')}/cgroup.procs", encoding="ascii") as handle:
                return sorted(int(item) for item in handle.read().split())
        except (OSError, ValueError):
            continue
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
            hierarchy, _sep, path = line.partition(":")[2].partition(":")
            if hierarchy in ("", "name=systemd") and path == control_group:
                pids.append(int(entry))
                break
    return sorted(pids)


def process_title(pid: int) -> str:
    """The process title as `ps` shows it (setproctitle rewrites cmdline)."""
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


def process_start(pid: int) -> float | None:
    """Epoch seconds at which the process started (/proc/PID/stat starttime + /proc/stat btime)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read().decode("ascii", "replace")
        with open("/proc/stat", encoding="ascii", errors="replace") as handle:
            btime = next(int(line.split()[1]) for line in handle if line.startswith("btime "))
        ticks = int(stat.rpartition(")")[2].split()[19])  # field 22; fields after the comm
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None
