"""One call of the kdtree_smoke module: check the configuration, restart when asked, watch one
chunk and, once the run is healthy, send the traffic that proves the kernel runs.

execute(params) is the whole call (the module's main() only wraps it in AnsibleModule); its
`params` are the module's options as AnsibleModule validated them (plugins/modules/kdtree_smoke.py).

This package (module_utils/_smoke/) is the smoke check's wing: check.py runs it, host.py reads the
host into a Snapshot, judge.py decides what a snapshot means, watch.py ties the two over time,
traffic.py sends the verify traffic and reads its evidence, run.py and result.py carry the run in and
the verdict out. Only the kdtree_smoke module and action import it (tests/repository/test_plugin_layers.py);
the process and health readers it shares with the fleet report are module_utils/_unit_procs.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ansible_collections.kdtree.fleet.plugins.module_utils._journal import compile_benign
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.host import (
    HostError,
    MarkerError,
    Query,
    load_marker,
    read_host,
    restart_unit,
)
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.judge import Wanted
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.result import (
    NO_TRAFFIC,
    Verdict,
    failed_verdict,
    failure_msg,
)
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.run import RUN_OPTION, RunState
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.traffic import (
    Requests,
    StatusDirError,
    TrafficResult,
    load_statusdir,
    read_counts,
    run_traffic,
)
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.watch import Reader, watch


class SmokeError(Exception):
    """The check cannot run (its configuration): the module fails, whatever fail_on_error says."""


Traffic = Callable[[Requests, list[int], Any, dict[str, Any]], TrafficResult]


def host_traffic(req: Requests, pids: list[int], statusdir: Any, params: dict[str, Any]) -> TrafficResult:
    """run_traffic on this host: the status files of `status_dir`, read with the host's statusdir.py
    (which also bounds each wait: fresh_bound_s of the interval, refusing an interval out of bounds)."""
    raw = params.get("status_interval_s")
    interval = 5.0 if raw in (None, "") else float(raw)
    try:
        bound = statusdir.fresh_bound_s(interval)
    except ValueError as exc:
        why = f"traffic: {exc} (status_interval_s)"
        return TrafficResult(ok=False, line=why, why=why)
    return run_traffic(
        req,
        pids,
        lambda wanted: read_counts(statusdir, params["status_dir"], wanted, interval),
        bound,
        float(params.get("poll_s") or 0.25),
    )


def traffic_wanted(params: dict[str, Any]) -> bool:
    """Requests are sent to a run of the patched kernel only (marker state active)."""
    return int(params.get("requests") or 0) > 0 and params["marker_state"] == "active"


def with_traffic(
    verdict: Verdict, params: dict[str, Any], statusdir: Any, traffic: Traffic, clock: Callable[[], float]
) -> Verdict:
    """The healthy verdict after the traffic check: ok with its line added, or failed."""
    req = Requests(
        count=int(params["requests"]),
        health_url=params["health_url"],
        route=params.get("request_route") or "/generate",
        prompt=params.get("request_prompt") or "",
        max_new_tokens=int(params.get("request_max_new_tokens") or 16),
        timeout_s=float(params.get("request_timeout_s") or 30.0),
        total_timeout_s=float(params.get("traffic_timeout_s") or 120.0),
        api_key=params.get("api_key") or "",
        stream=bool(params.get("request_stream", True)),
    )
    pids = [int(item["pid"]) for item in verdict.schedulers]
    result = traffic(req, pids, statusdir, params)
    if result.ok:
        return replace(verdict, msg=f"{verdict.msg}; {result.line}", traffic=result.as_result())
    elapsed = clock() - verdict.run.started_at
    return replace(
        verdict,
        state="failed",
        msg=failure_msg(params["unit"], result.why, elapsed, result.detail),
        why=result.why,
        detail=result.detail,
        elapsed_s=round(elapsed, 2),
        run=replace(verdict.run, healthy_since=None),
        traffic=result.as_result(),
    )


@dataclass(frozen=True)
class Setup:
    """What the check needs before it touches the unit: the benign patterns, the host's marker.py
    (None when no marker state is checked) and its statusdir.py (None when no traffic is sent)."""

    benign: tuple[str, ...]
    marker: Any = None
    statusdir: Any = None


def prepare(params: dict[str, Any]) -> Setup:
    """Check the configuration and load the host's parsers; raises SmokeError before anything is
    restarted or read (a bad pattern, no patch_dir or marker.py, traffic without a status_dir)."""
    benign = tuple(params.get("benign_tracebacks") or ()) + tuple(params.get("extra_benign_tracebacks") or ())
    try:
        compile_benign(benign)
    except ValueError as exc:
        raise SmokeError(str(exc)) from exc
    marker = None
    if params["marker_state"]:
        if not params["patch_dir"]:
            raise SmokeError(f"marker_state={params['marker_state']!r} needs patch_dir (to load marker.py)")
        try:
            marker = load_marker(params["patch_dir"])
        except MarkerError as exc:
            raise SmokeError(f"cannot check the kdtree-verify markers: {exc}") from exc
    statusdir = None
    if traffic_wanted(params):
        if not params.get("status_dir"):
            raise SmokeError(
                f"requests={params['requests']} needs status_dir (the unit's KDTREE_STATUS_DIR) to read "
                "the verify counters; set requests to 0 (kdtree_smoke_requests) to send no traffic"
            )
        try:
            statusdir = load_statusdir(params["patch_dir"])
        except StatusDirError as exc:
            raise SmokeError(f"cannot check the traffic: {exc}") from exc
    return Setup(benign=benign, marker=marker, statusdir=statusdir)


def execute(
    params: dict[str, Any],
    check_mode: bool = False,
    read: Reader = read_host,
    restart: Callable[[str, float], None] = restart_unit,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
    traffic: Traffic = host_traffic,
    monotonic: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """One module call: prepare(), restart when asked, watch one chunk; once the run is healthy, send
    the traffic (requests > 0, marker state active) and judge the status files.

    Raises SmokeError when the check cannot run (its configuration); a restart that fails or does not
    finish within restart_timeout_s is a failed run (state=failed)."""
    unit = params["unit"]
    run = RunState.from_option(params.get(RUN_OPTION))
    if check_mode:
        msg = f"check mode: would {'restart and ' if params['restart'] else ''}watch {unit}.service"
        return Verdict(state="ok", msg=msg, run=run).result(changed=bool(params["restart"]))
    setup = prepare(params)
    changed = False
    if params["restart"]:
        run = RunState(started_at=clock(), started_mono=monotonic())
        try:
            restart(unit, params["restart_timeout_s"])
        except HostError as exc:
            return failed_verdict(unit, run, str(exc), clock()).result(changed=True)
        changed = True
    try:
        if not run.invocation_id:
            now = read(Query(unit=unit), parts=frozenset(("unit",)))
            run = RunState(
                invocation_id=now.props.get("InvocationID", ""),
                baseline_nrestarts=int(now.props.get("NRestarts") or 0),
                started_at=run.started_at or now.read_at,
                started_mono=run.started_mono or now.mono_at,
            )
    except HostError as exc:
        raise SmokeError(str(exc)) from exc
    query = Query(
        unit=unit,
        invocation_id=run.invocation_id,
        health_url=params["health_url"],
        scheduler_prefix=params["scheduler_prefix"],
        benign_tracebacks=setup.benign,
        status_dir=params.get("status_dir") or "",
        not_before=run.started_at,
    )
    wanted = Wanted(
        unit=unit,
        run=run,
        expected_schedulers=params["expected_schedulers"],
        marker_state=params["marker_state"],
        nccl_env=params["nccl_env"] or {},
        settle_s=params["settle_s"],
        timeout_s=params["timeout_s"],
        stall_timeout_s=params.get("stall_timeout_s") or 0.0,
        status_dir=params.get("status_dir") or "",
    )
    verdict = watch(
        query, wanted, params["chunk_s"], params["poll_s"], setup.marker, read, sleep, clock, monotonic
    )
    if verdict.state == "ok" and setup.statusdir is not None:
        verdict = with_traffic(verdict, params, setup.statusdir, traffic, clock)
    elif verdict.state == "ok" and int(params.get("requests") or 0) > 0:
        why = f"marker state {params['marker_state'] or 'unchecked'}: the patched kernel is not wanted"
        line = f"traffic: none sent ({why})"
        verdict = replace(verdict, msg=f"{verdict.msg}; {line}", traffic={**NO_TRAFFIC, "line": line})
    return verdict.result(changed=changed)
