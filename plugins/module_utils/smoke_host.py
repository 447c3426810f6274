"""Everything the kdtree smoke check reads on a host, as one plain-data Snapshot.

read_host() is the only code of the check that looks at the host: `systemctl show`, `journalctl`
for one invocation, the HTTP health GET and /proc (cgroup, cmdline, environ of the unit's
processes). restart_unit() is the check's only action. Deciding what a snapshot means is the
module's judge() (plugins/modules/kdtree_smoke.py); it never reads the host.

Stdlib only and without imports of other module_utils: scripts/testhosts/hostread.py sends this file's
source to a test host's python3 and calls read_host() there.

Marker lines are parsed with the host's installed kdtree_verify/marker.py (load_marker): the
check parses the journal with exactly the code the schedulers print it with.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Any

SHOW_PROPS = (
    "ActiveState",
    "SubState",
    "Result",
    "NRestarts",
    "InvocationID",
    "ExecMainStatus",
    "MainPID",
    "ControlGroup",
    "DropInPaths",
)
# systemctl show and journalctl answer in well under a second; a hung one must not hang the check.
COMMAND_TIMEOUT_S = 15.0
HEALTH_TIMEOUT_S = 2.0
# What read_host() can read; `parts` picks a subset (a journal-only re-read after a failure).
ALL_PARTS = frozenset(("unit", "journal", "health", "schedulers"))
MARKER_FILE = os.path.join("kdtree_verify", "marker.py")


class HostError(Exception):
    """A host command failed or did not answer in time."""


class MarkerError(Exception):
    """The host's marker.py is missing or cannot be used."""


# SGLang's process title of a scheduler (one per TP rank: sglang::scheduler_TP0, ...).
SCHEDULER_PREFIX = "sglang::scheduler"


@dataclass
class Query:
    """What to read: the unit, which run's journal, where /health is, which processes are schedulers."""

    unit: str
    invocation_id: str = ""  # "" = the unit's current invocation
    health_url: str = ""
    scheduler_prefix: str = SCHEDULER_PREFIX


@dataclass
class Process:
    """One scheduler process of the unit's cgroup; environ None: it exited while being read."""

    pid: int
    title: str
    environ: dict[str, str] | None


@dataclass
class Marker:
    """The last `kdtree-verify:` line of one process in the run's journal."""

    pid: int
    state: str
    line: str


@dataclass
class RuntimeFallback:
    """The first `kdtree-verify-fallback:` line of one process in the run's journal."""

    pid: int
    line: str


@dataclass
class Snapshot:
    """One look at the host. Parts that were not read stay empty."""

    read_at: float
    invocation_id: str = ""
    props: dict[str, str] = field(default_factory=dict)  # systemctl show (SHOW_PROPS)
    journal: list[str] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    runtime_fallbacks: list[RuntimeFallback] = field(default_factory=list)
    health: str = ""
    schedulers: list[Process] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Snapshot:
        return cls(
            read_at=float(data["read_at"]),
            invocation_id=data.get("invocation_id", ""),
            props=dict(data.get("props", {})),
            journal=list(data.get("journal", [])),
            markers=[Marker(**item) for item in data.get("markers", [])],
            runtime_fallbacks=[RuntimeFallback(**item) for item in data.get("runtime_fallbacks", [])],
            health=data.get("health", ""),
            schedulers=[Process(**item) for item in data.get("schedulers", [])],
        )


def load_marker(patch_dir: str) -> Any:
    """<patch_dir>/kdtree_verify/marker.py, loaded by path as a standalone module."""
    path = os.path.join(patch_dir, MARKER_FILE)
    if not os.path.isfile(path):
        raise MarkerError(f"{path} does not exist: is the kdtree patch installed in {patch_dir}?")
    try:
        spec = importlib.util.spec_from_file_location("kdtree_smoke_host_marker", path)
        if spec is None or spec.loader is None:
            raise ImportError("no loader for this path")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as exc:
        raise MarkerError(f"cannot load {path}: {type(exc).__name__}: {exc}") from exc
    wanted = ("match_marker", "match_runtime_fallback")
    missing = [name for name in wanted if not callable(getattr(module, name, None))]
    if missing:
        raise MarkerError(f"{path} has no {' or '.join(missing)}(): not the marker module this check reads")
    return module


def parse_journal(lines: list[str], marker: Any) -> tuple[list[Marker], list[RuntimeFallback]]:
    """Marker lines per pid (the last one counts) and runtime fallback lines (the first one counts)."""
    markers: dict[int, Marker] = {}
    fallbacks: dict[int, RuntimeFallback] = {}
    for line in lines:
        found = marker.match_marker(line)
        if found is not None:
            pid, state = found
            markers[pid] = Marker(pid=pid, state=state, line=line)
            continue
        pid = marker.match_runtime_fallback(line)
        if pid is not None and pid not in fallbacks:
            fallbacks[pid] = RuntimeFallback(pid=pid, line=line)
    return list(markers.values()), list(fallbacks.values())


def _command(args: list[str], timeout_s: float, check: bool) -> str:
    try:
        proc = subprocess.run(args, capture_output=True, text=True, check=False, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise HostError(f"`{' '.join(args)}` did not finish within {timeout_s:g} s") from exc
    except OSError as exc:
        raise HostError(f"`{' '.join(args)}` cannot run: {exc}") from exc
    if check and proc.returncode != 0:
        raise HostError(f"`{' '.join(args)}` failed (rc={proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def _systemctl_show(unit: str) -> dict[str, str]:
    out = _command(
        ["systemctl", "show", "-p", ",".join(SHOW_PROPS), f"{unit}.service"], COMMAND_TIMEOUT_S, check=True
    )
    props = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        props[key] = value
    return props


def _journal(invocation_id: str) -> list[str]:
    if not invocation_id:
        return []
    out = _command(
        ["journalctl", "-o", "cat", "--no-pager", f"_SYSTEMD_INVOCATION_ID={invocation_id}"],
        COMMAND_TIMEOUT_S,
        check=False,
    )
    return out.splitlines()


def _health(url: str) -> str:
    """The status code ("200", "503"), "refused", or "down (<reason>)"."""
    try:
        with urllib.request.urlopen(url, timeout=HEALTH_TIMEOUT_S) as response:
            return str(response.status)
    except urllib.error.HTTPError as exc:
        return str(exc.code)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, ConnectionRefusedError):
            return "refused"
        return f"down ({reason})"


def _cgroup_pids(control_group: str) -> list[int]:
    """PIDs whose systemd cgroup (v1 name=systemd or v2 unified) is exactly the unit's."""
    if not control_group:
        return []
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


def _title(pid: int) -> str:
    """The process title as `ps` shows it (setproctitle rewrites cmdline)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            raw = handle.read()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()


def _environ(pid: int) -> dict[str, str] | None:
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


def read_host(query: Query, marker: Any = None, parts: frozenset[str] = ALL_PARTS) -> Snapshot:
    """One look at the host.

    marker: the host's marker module (load_marker) to parse marker lines with; None reads no markers.
    The journal is read before the unit state, so a unit found dead has its traceback in a journal
    read right after (the module re-reads it then).
    """
    snap = Snapshot(read_at=time.time(), invocation_id=query.invocation_id)
    if "unit" in parts and not snap.invocation_id:
        snap.props = _systemctl_show(query.unit)
        snap.invocation_id = snap.props.get("InvocationID", "")
    if "journal" in parts:
        snap.journal = _journal(snap.invocation_id)
        if marker is not None:
            snap.markers, snap.runtime_fallbacks = parse_journal(snap.journal, marker)
    if "unit" in parts and not snap.props:
        snap.props = _systemctl_show(query.unit)
    if "health" in parts and query.health_url:
        snap.health = _health(query.health_url)
    if "schedulers" in parts:
        for pid in _cgroup_pids(snap.props.get("ControlGroup", "")):
            title = _title(pid)
            if query.scheduler_prefix and title.startswith(query.scheduler_prefix):
                snap.schedulers.append(Process(pid=pid, title=title, environ=_environ(pid)))
    return snap


def restart_unit(unit: str, timeout_s: float) -> None:
    """systemctl restart, bounded: a unit whose start hangs must not hang the play."""
    try:
        subprocess.run(
            ["systemctl", "restart", f"{unit}.service"],
            capture_output=True,
            text=True,
            check=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired as exc:
        raise HostError(f"systemctl restart {unit}.service did not return within {timeout_s:g} s") from exc
    except subprocess.CalledProcessError as exc:
        raise HostError(
            f"systemctl restart {unit}.service failed (rc={exc.returncode}): {(exc.stderr or '').strip()}"
        ) from exc
