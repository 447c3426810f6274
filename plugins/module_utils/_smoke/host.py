"""Everything the kdtree smoke check reads on a host, as one plain-data Snapshot.

read_host() is the only code of the check that looks at the host: `systemctl show`, `journalctl`
for one invocation from the previous poll's cursor (module_utils/_journal.py builds the command and
folds its output into a JournalState), the HTTP health GET, who listens on its port and /proc (cgroup,
cmdline, environ of the unit's processes) through module_utils/_unit_procs.py, and, after
journald suppressed lines of the run, the patch's status files. restart_unit() is the check's only
action. Deciding what a snapshot means is judge() (module_utils/_smoke/judge.py); it never reads
the host.

Stdlib only, and its only imports of other module_utils are _journal.py, _patch_files.py,
_small_file.py and _unit_procs.py (all stdlib only): scripts/testhosts/hostread.py sends their
source and this file's (HOST_SOURCES) to a test host's python3 and calls read_host() there.

Marker lines are parsed with the host's installed kdtree_verify/telemetry/marker.py (load_marker): the
check parses the journal with exactly the code the schedulers print it with.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ansible_collections.kdtree.fleet.plugins.module_utils._journal import (
    DEFAULT_BENIGN_TRACEBACKS,
    JournalState,
    compile_benign,
    journal_command,
    parse_records,
)
from ansible_collections.kdtree.fleet.plugins.module_utils._patch_files import (
    MARKER_FILE,
    PatchFileError,
    load_installed,
)
from ansible_collections.kdtree.fleet.plugins.module_utils._small_file import read_small
from ansible_collections.kdtree.fleet.plugins.module_utils._unit_procs import (
    SCHEDULER_PREFIX,
    cgroup_pids,
    health_owner,
    health_status,
    process_environ,
    process_start,
    process_title,
)

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
# What read_host() can read; `parts` picks a subset (a journal-only re-read after a failure).
ALL_PARTS = frozenset(("unit", "journal", "health", "schedulers"))


class HostError(Exception):
    """A host command failed or did not answer in time."""


class MarkerError(Exception):
    """The host's marker.py is missing or cannot be used."""


@dataclass
class Query:
    """What to read: the unit, which run's journal, where /health is, which processes are schedulers.

    benign_tracebacks: regexes of tracebacks the run may log (module_utils/_journal.py); status_dir:
    the patch's KDTREE_STATUS_DIR, read after journald suppressed lines of the run or once the health
    URL answers 200 ("" = never);
    not_before: epoch seconds of the restart (a suppression record without the run's
    InvocationID counts from here).
    """

    unit: str
    invocation_id: str = ""  # "" = the unit's current invocation
    health_url: str = ""
    scheduler_prefix: str = SCHEDULER_PREFIX
    benign_tracebacks: tuple[str, ...] = DEFAULT_BENIGN_TRACEBACKS
    status_dir: str = ""
    not_before: float = 0.0


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
class StatusFile:
    """A scheduler's <KDTREE_STATUS_DIR>/<pid>.json (the marker's fields), written since it started."""

    pid: int
    state: str
    runtime_fallback: bool
    line: str


@dataclass
class Snapshot:
    """One look at the host. Parts that were not read stay empty.

    journal: the run's last lines; fatal: the first fatal line with two lines before it and what
    followed (empty: none); markers / runtime_fallbacks: every marker seen in the run so far;
    new_lines: the run's lines this look read; suppressed: messages of the run journald dropped;
    statuses: the schedulers' status files, read only when journald suppressed lines of the run or
    the health URL answers 200;
    journal_state: the JournalState to continue from (plain data).
    """

    read_at: float
    invocation_id: str = ""
    mono_at: float = 0.0  # the host's monotonic clock at read_at (0: not known); the judge's durations
    props: dict[str, str] = field(default_factory=dict)  # systemctl show (SHOW_PROPS)
    journal: list[str] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    runtime_fallbacks: list[RuntimeFallback] = field(default_factory=list)
    health: str = ""
    schedulers: list[Process] = field(default_factory=list)
    fatal: list[str] = field(default_factory=list)
    benign: list[str] = field(default_factory=list)
    new_lines: int = 0
    suppressed: int = 0
    suppressed_line: str = ""
    statuses: list[StatusFile] = field(default_factory=list)
    journal_state: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Snapshot:
        return cls(
            read_at=float(data["read_at"]),
            invocation_id=data.get("invocation_id", ""),
            mono_at=float(data.get("mono_at", 0.0)),
            props=dict(data.get("props", {})),
            journal=list(data.get("journal", [])),
            markers=[Marker(**item) for item in data.get("markers", [])],
            runtime_fallbacks=[RuntimeFallback(**item) for item in data.get("runtime_fallbacks", [])],
            health=data.get("health", ""),
            schedulers=[Process(**item) for item in data.get("schedulers", [])],
            fatal=list(data.get("fatal", [])),
            benign=list(data.get("benign", [])),
            new_lines=int(data.get("new_lines", 0)),
            suppressed=int(data.get("suppressed", 0)),
            suppressed_line=data.get("suppressed_line", ""),
            statuses=[StatusFile(**item) for item in data.get("statuses", [])],
            journal_state=dict(data.get("journal_state", {})),
        )


def apply_journal(snap: Snapshot, state: JournalState) -> Snapshot:
    """Fill the snapshot's journal parts from what the check knows of the run's journal."""
    snap.journal = list(state.tail)
    snap.fatal = list(state.fatal)
    snap.benign = list(state.benign)
    snap.markers = [Marker(pid=int(pid), state=item[0], line=item[1]) for pid, item in state.markers.items()]
    snap.runtime_fallbacks = [
        RuntimeFallback(pid=int(pid), line=line) for pid, line in state.fallbacks.items()
    ]
    snap.suppressed = state.suppressed
    snap.suppressed_line = state.suppressed_line
    snap.journal_state = state.to_dict()
    return snap


def load_patch_module(
    patch_dir: str, relpath: str, name: str, wanted: tuple[str, ...], error: type[Exception], what: str
) -> Any:
    """<patch_dir>/<relpath> (a stdlib-only file of the installed patch), loaded by path as a standalone
    module named `name`; `error` names what is missing, cannot load or lacks a callable of `wanted`."""
    try:
        module = load_installed(patch_dir, relpath, name)
    except PatchFileError as exc:
        raise error(str(exc)) from exc
    missing = [item for item in wanted if not callable(getattr(module, item, None))]
    if missing:
        raise error(f"{os.path.join(patch_dir, relpath)} has no {' or '.join(missing)}(): not {what}")
    return module


def load_marker(patch_dir: str) -> Any:
    """<patch_dir>/<MARKER_FILE>, loaded by path as a standalone module."""
    return load_patch_module(
        patch_dir,
        MARKER_FILE,
        "kdtree_smoke_host_marker",
        ("match_marker", "match_runtime_fallback"),
        MarkerError,
        "the marker module this check reads",
    )


def parse_journal(lines: list[str], marker: Any) -> tuple[list[Marker], list[RuntimeFallback]]:
    """Marker lines per pid (the last one counts) and runtime fallback lines (the first one counts)."""
    state = JournalState()
    for line in lines:
        state.feed_line(line, marker)
    snap = apply_journal(Snapshot(read_at=0.0), state)
    return snap.markers, snap.runtime_fallbacks


def _command(args: list[str], timeout_s: float, check: bool) -> bytes:
    """The command's stdout as bytes (callers decode with replacement)."""
    try:
        proc = subprocess.run(args, capture_output=True, check=False, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise HostError(f"`{' '.join(args)}` did not finish within {timeout_s:g} s") from exc
    except OSError as exc:
        raise HostError(f"`{' '.join(args)}` cannot run: {exc}") from exc
    if check and proc.returncode != 0:
        stderr = proc.stderr.decode("utf-8", "replace").strip()
        raise HostError(f"`{' '.join(args)}` failed (rc={proc.returncode}): {stderr}")
    return proc.stdout


def _systemctl_show(unit: str) -> dict[str, str]:
    out = _command(
        ["systemctl", "show", "-p", ",".join(SHOW_PROPS), f"{unit}.service"], COMMAND_TIMEOUT_S, check=True
    )
    props = {}
    for line in out.decode("utf-8", "replace").splitlines():
        key, _sep, value = line.partition("=")
        props[key] = value
    return props


def _read_journal(query: Query, invocation_id: str, state: JournalState, marker: Any) -> int:
    """Fold the run's journal lines after state.cursor into state; returns how many were new."""
    raw = _command(journal_command(invocation_id, state.cursor), COMMAND_TIMEOUT_S, check=False)
    return state.feed(
        parse_records(raw),
        invocation_id,
        query.unit,
        int(query.not_before * 1_000_000),
        marker,
        compile_benign(query.benign_tracebacks),
    )


def _status_file(status_dir: str, pid: int) -> StatusFile | None:
    """<status_dir>/<pid>.json when this process wrote it (its pid, written since it started)."""
    path = os.path.join(status_dir, f"{pid}.json")
    started = process_start(pid)
    try:
        if started is not None and os.stat(path).st_mtime < started - 1.0:
            return None  # an earlier process with the same pid
        # written by the service's user: a FIFO, a link or a huge file there is no status (SmallFileRefused)
        data = json.loads(read_small(path).decode("utf-8", "replace"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("pid") != pid or not data.get("state"):
        return None
    reason = str(data.get("reason") or "-")
    return StatusFile(
        pid=pid,
        state=str(data["state"]),
        runtime_fallback=bool(data.get("runtime_fallback")),
        line=f"{path}: state={data['state']} reason={reason}",
    )


def read_host(
    query: Query,
    marker: Any = None,
    parts: frozenset[str] = ALL_PARTS,
    journal: dict[str, Any] | None = None,
) -> Snapshot:
    """One look at the host.

    marker: the host's marker module (load_marker) to parse marker lines with; None reads no markers.
    journal: the journal_state of the previous look at this run (plain data); the journal is read
    from its cursor on, so each look reads only new lines.
    The journal is read before the unit state, so a unit found dead has its traceback in a journal
    read right after (the module re-reads it then).
    """
    snap = Snapshot(read_at=time.time(), invocation_id=query.invocation_id, mono_at=time.monotonic())
    state = JournalState.from_dict(journal)
    if "unit" in parts and not snap.invocation_id:
        snap.props = _systemctl_show(query.unit)
        snap.invocation_id = snap.props.get("InvocationID", "")
    if "journal" in parts and snap.invocation_id:
        snap.new_lines = _read_journal(query, snap.invocation_id, state, marker)
    apply_journal(snap, state)
    if "unit" in parts and not snap.props:
        snap.props = _systemctl_show(query.unit)
    pids: list[int] = []
    if parts & {"health", "schedulers"}:
        pids = cgroup_pids(snap.props.get("ControlGroup", ""))
        main_pid = int(snap.props.get("MainPID") or 0)
        if main_pid in pids:
            pids = [main_pid] + [pid for pid in pids if pid != main_pid]
    if "health" in parts and query.health_url:
        snap.health = health_status(query.health_url)
        if snap.health.isdigit() and snap.props.get("ControlGroup"):
            foreign = health_owner(query.health_url, query.unit, pids)
            snap.health = f"{snap.health} {foreign}" if foreign else snap.health
    if "schedulers" in parts:
        for pid in sorted(pids):
            title = process_title(pid)
            if query.scheduler_prefix and title.startswith(query.scheduler_prefix):
                snap.schedulers.append(Process(pid=pid, title=title, environ=process_environ(pid)))
        # journald may drop a marker line (rate limiting); it may also log its "Suppressed" record
        # only when the unit logs again after the interval, so a server that answers reads them too.
        if query.status_dir and (snap.suppressed or snap.health == "200"):
            for proc in snap.schedulers:
                found = _status_file(query.status_dir, proc.pid)
                if found is not None:
                    snap.statuses.append(found)
    return snap


def restart_unit(unit: str, timeout_s: float) -> None:
    """systemctl restart, bounded: a unit whose start hangs must not hang the play."""
    try:
        subprocess.run(
            ["systemctl", "restart", f"{unit}.service"],
            capture_output=True,
            text=True,
            errors="replace",
            check=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired as exc:
        raise HostError(
            f"restart did not finish within {timeout_s:g} s (`systemctl restart {unit}.service`; "
            "systemd may still be running the restart job)"
        ) from exc
    except subprocess.CalledProcessError as exc:
        raise HostError(
            f"systemctl restart {unit}.service failed (rc={exc.returncode}): {(exc.stderr or '').strip()}"
        ) from exc
    except OSError as exc:
        raise HostError(f"systemctl restart {unit}.service cannot run: {exc}") from exc
