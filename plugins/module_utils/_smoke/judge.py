"""judge(): ok, pending or failed for one snapshot of the watched run; pure (no I/O, no clock).

module_utils/_smoke/host.read_host() reads the host into a Snapshot; judge(snapshot, wanted) decides
from it alone, so every rule of the smoke check is tested without a host.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from ansible_collections.kdtree.fleet.plugins.module_utils._journal import TAIL_LINES
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.host import Marker, Snapshot
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.result import Verdict, failure_msg
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.run import RunState

LIVE_STATES = ("active", "activating", "reloading")


@dataclass(frozen=True)
class Wanted:
    """What a healthy run is: the watched run itself and the rules judge() applies to it."""

    unit: str
    run: RunState
    timeout_s: float
    expected_schedulers: int = 0
    marker_state: str = "active"
    nccl_env: dict[str, Any] = field(default_factory=dict)
    settle_s: float = 3.0
    stall_timeout_s: float = 0.0  # 0: no no-progress timeout
    status_dir: str = ""  # only named in messages; read_host reads it


def excerpt(snapshot: Snapshot) -> str:
    """The traceback (with two lines of context) when the run logged one, else its last lines."""
    return "\n".join(snapshot.fatal or snapshot.journal[-TAIL_LINES:])


def _short_title(title: str) -> str:
    return title.split(" ")[0]


def _check_schedulers(
    snapshot: Snapshot, wanted: Wanted
) -> tuple[list[dict[str, Any]], list[str], tuple[str, str] | None]:
    """(report per live scheduler, reasons to keep waiting, (why, detail) of the first bad scheduler).

    A scheduler's marker is its journal line, else its status file (read_host reads those after
    journald suppressed lines of the run or once the server answers); a status file's runtime
    fallback counts as a fallback line."""
    markers = {item.pid: item for item in snapshot.markers}
    gave_up = {item.pid: item.line for item in snapshot.runtime_fallbacks}
    for status in snapshot.statuses:
        markers.setdefault(status.pid, Marker(pid=status.pid, state=status.state, line=status.line))
        if status.runtime_fallback:
            gave_up.setdefault(status.pid, status.line)
    report: list[dict[str, Any]] = []
    waiting: list[str] = []
    problem: tuple[str, str] | None = None
    for proc in snapshot.schedulers:
        title = _short_title(proc.title)
        found = markers.get(proc.pid)
        state = found.state if found else "none"
        env = proc.environ
        if env is None:
            waiting.append(f"{title} gone")
            continue
        bad: tuple[str, str] | None = None
        wrong = {k: env.get(k) for k, v in wanted.nccl_env.items() if env.get(k) != str(v)}
        if wanted.nccl_env and not env:
            bad = (
                f"{title} (pid {proc.pid}) has an unreadable /proc/{proc.pid}/environ",
                "setproctitle overwrites it unless the unit sets SPT_NOENV=1",
            )
        elif wrong:
            bad = (
                f"{title} (pid {proc.pid}) does not run with the templated NCCL environment",
                f"wanted {json.dumps(wanted.nccl_env, sort_keys=True)}, "
                f"has {json.dumps(wrong, sort_keys=True)}",
            )
        elif wanted.marker_state:
            if state == "none":
                waiting.append(f"{title} no marker yet")
            elif state != wanted.marker_state:
                bad = (
                    f"{title} (pid {proc.pid}) reports the patch {state}, wanted {wanted.marker_state}",
                    found.line if found else "",
                )
            if bad is None and wanted.marker_state == "active" and proc.pid in gave_up:
                bad = (
                    f"{title} (pid {proc.pid}) fell back to Triton at run time: "
                    "the kernel does not run there",
                    gave_up[proc.pid],
                )
        problem = problem or bad
        report.append({"pid": proc.pid, "title": title, "marker": state, "nccl_env_ok": not wrong})
    return report, waiting, problem


def _lost_markers(snapshot: Snapshot, wanted: Wanted, waiting: list[str]) -> tuple[str, str]:
    """(why, detail) for schedulers whose marker journald dropped while the server already answers."""
    unmarked = [item[: -len(" no marker yet")] for item in waiting if item.endswith(" no marker yet")]
    why = (
        f"journald suppressed {snapshot.suppressed} messages of the run and "
        f"{', '.join(unmarked)} has no marker although the health URL answers 200"
    )
    if wanted.status_dir:
        hint = (
            f"no status file of it in {wanted.status_dir} either "
            "(does the unit set KDTREE_STATUS_DIR to that directory?)"
        )
    else:
        hint = (
            "set the module's status_dir (the smoke role's kdtree_smoke_wanted.status_dir) to the unit's "
            "KDTREE_STATUS_DIR to read the marker from the patch's status files, or raise journald's "
            "RateLimitBurst"
        )
    return why, f"{snapshot.suppressed_line}\n{hint}"


def judge(snapshot: Snapshot, wanted: Wanted) -> Verdict:
    """ok, pending or failed for one snapshot of the watched run; pure (no I/O, no clock).

    Rules, in this order: a fatal line in the run's journal (not a benign traceback; read_host
    classified the lines); a restart (another InvocationID, a higher NRestarts); a unit that is not
    active; a scheduler with an unreadable environ, wrong NCCL values, the wrong marker state or (for
    active) a runtime fallback. Healthy = health 200 from the unit's own socket, the expected
    scheduler count, every scheduler marked (in the journal, or in its status file after journald
    suppressed lines); ok once healthy for settle_s (the run's healthy_since carries over polls and
    chunks). A server that answers while journald dropped a scheduler's marker fails at once. Not
    healthy after timeout_s from the restart fails; so does no new journal line and no change of the
    health answer for stall_timeout_s (when set).
    """
    run = wanted.run
    # Durations on the host's monotonic clock when the run knows it (a wall-clock step neither
    # stretches nor cuts a timeout), else on the wall clock (an older run state).
    now = snapshot.mono_at if run.started_mono and snapshot.mono_at else snapshot.read_at
    elapsed = now - (run.started_mono if run.started_mono and snapshot.mono_at else run.started_at)
    moved = snapshot.new_lines > 0 or snapshot.health != run.health or not run.progress_at
    run = replace(
        run,
        journal=snapshot.journal_state or run.journal,
        health=snapshot.health,
        progress_at=now if moved else run.progress_at,
    )
    report, waiting, problem = _check_schedulers(snapshot, wanted)
    count = len(snapshot.schedulers)
    marked = sum(1 for item in report if item["marker"] == wanted.marker_state)
    progress = (
        f"{elapsed:5.1f}s health={snapshot.health} schedulers={count}/{wanted.expected_schedulers or '>=1'} "
        f"markers({wanted.marker_state or 'unchecked'})={marked}/{count}"
    )
    if snapshot.suppressed:
        progress += f" suppressed={snapshot.suppressed}"
    seen = {
        "health": snapshot.health,
        "schedulers": report,
        "progress": progress,
        "elapsed_s": round(elapsed, 2),
        "suppressed": snapshot.suppressed,
        "benign": list(snapshot.benign),
    }

    def failed(why: str, detail: str, follow: str = "") -> Verdict:
        return Verdict(
            state="failed",
            msg=failure_msg(wanted.unit, why, elapsed, detail),
            run=replace(run, healthy_since=None),
            why=why,
            detail=detail,
            follow_journal=follow,
            **seen,
        )

    if snapshot.fatal:
        return failed("the current run logged a fatal error", excerpt(snapshot), "fatal")
    props = snapshot.props
    if props.get("InvocationID") != run.invocation_id:
        why = f"the unit restarted (invocation {props.get('InvocationID')!r})"
        return failed(why, excerpt(snapshot), "unit")
    if int(props.get("NRestarts") or 0) > run.baseline_nrestarts:
        return failed(f"the unit restarted (NRestarts={props.get('NRestarts')})", excerpt(snapshot), "unit")
    if props.get("ActiveState") not in LIVE_STATES:
        why = (
            f"the unit is {props.get('ActiveState')}/{props.get('SubState')} "
            f"(Result={props.get('Result')}, ExecMainStatus={props.get('ExecMainStatus')})"
        )
        return failed(why, excerpt(snapshot), "unit")
    if problem is not None:
        return failed(*problem)

    expected = wanted.expected_schedulers
    count_ok = count >= 1 if expected <= 0 else count == expected
    if snapshot.health == "200" and count_ok and not waiting:
        since = run.healthy_since if run.healthy_since is not None else now
        held = replace(run, healthy_since=since)
        if now - since >= wanted.settle_s:
            msg = f"healthy after {elapsed:.1f} s (held {wanted.settle_s:g} s): {progress}"
            return Verdict(state="ok", msg=msg, run=held, **seen)
        return Verdict(state="pending", msg=f"settling: {progress}", run=held, **seen)
    if snapshot.suppressed and snapshot.health == "200" and any(w.endswith("no marker yet") for w in waiting):
        return failed(*_lost_markers(snapshot, wanted, waiting))
    tail = "\n".join(snapshot.journal[-TAIL_LINES:])
    detail = "; ".join(waiting) + ("\n" if waiting else "") + tail
    if elapsed > wanted.timeout_s:
        return failed(f"not healthy within {wanted.timeout_s:.0f} s: {progress}", detail)
    stalled = now - run.progress_at
    if wanted.stall_timeout_s > 0 and stalled > wanted.stall_timeout_s:
        why = (
            f"no progress for {stalled:.0f} s (stall_timeout_s={wanted.stall_timeout_s:g}): no new "
            "journal line of the run and no change of the health answer; a hang (such as an NCCL P2P "
            f"hang): {progress}"
        )
        return failed(why, detail)
    return Verdict(state="pending", msg=f"waiting: {progress}", run=replace(run, healthy_since=None), **seen)
