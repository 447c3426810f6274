"""Promotion on evidence (playbooks/promote.yml): whether a host may go from mode validate to on.

qualify() judges one host's fleet-report row (module_utils/_report.py, module kdtree_report) and
answers (qualifies, why). It is pure: no host, no file, no clock. The play runs it on the controller
through the kdtree_promote_verdict filter, then deploys mode on to the hosts that qualify; the others
stay in validate and are listed with their `why` (format_table(), laid out by the report's table
module, plugin_utils/_report_table.py).

A host qualifies when every rule holds (`why` names every rule that does not):

- the report read the host without errors, and kdtree is deployed;
- the current deploy (the history entry that describes what runs now) ended healthy, and the newest
  deploy did too (a failed deploy that went back to an older one is not evidence for what would run);
- its mode is validate (not on already, not off);
- the unit is active and /health answers 200 (a multi-node host of rank > 0: its schedulers decide);
- every expected scheduler is patched and reporting: a live status file in mode validate, state active,
  with validate statistics, for each of the history's expected schedulers;
- the statistics are the current run's: every scheduler process started, and its publisher's `since`
  is, at or after the current deploy's start (stale files of earlier runs the report ignores already);
- the schedulers run the build the history names;
- every scheduler runs an SGLang release of the patch's supported window (the report's
  sglang_in_window): a release outside it (let through by kdtree_service_allow_untested_sglang) stays
  in validate, and so does one the report could not place;
- validate.compared, summed over the schedulers, is at least `min_compared`, and every scheduler
  compared at least one call;
- no mismatch, the largest difference is at most `tolerance`, no runtime fallback;
- no non-finite value in the statistics (NaN/inf in an output or the difference: its own reason);
- every count is a count: an int >= 0, never a string, bool, list or missing (the patch's
  statusdir.py count_problem, loaded by path: the one owner of what a status count is);
- every scheduler's statistics are fresh (the report's per-scheduler `fresh`, statusdir's bound);
- speed (module_utils/_speed.py, the one definition): at least `min_timed_calls` calls timed on
  both paths in the current run (the report's `speed`, summed over the schedulers), and a speedup
  (the original's seconds / the kernel's) of at least `min_speedup` (DEFAULT_MIN_SPEEDUP: 1.0 plus a
  noise margin); no bucket shown (enough samples) slower than the original (below SLOW_BUCKET); each
  scheduler timed on its own and neither it nor one of its buckets slower than the original; the
  figure is re-derived here from the buckets, and odd timing (NaN, a negative or missing value, no
  kernel time with calls) refuses, never counts as zero. A host that fails says its figure and the
  worst bucket;
- when `expected` is given (the build id and patch digest the promotion's deploy would install), the
  host runs those: evidence for another build or patch version is no evidence.

The defaults: DEFAULT_MIN_COMPARED here, the tolerance from the patch's own config.py (DEFAULT_TOL,
the one owner of the validate tolerance), loaded by default_tolerance() from the patch source the
caller names (the play passes the patch role's kdtree_patch_source_dir): nothing here guesses where
the collection keeps its files.

Controller only (the kdtree_promote_* filters); stdlib and module_utils.
"""

from __future__ import annotations

import calendar
import math
import time
from pathlib import Path
from typing import Any

from ansible_collections.kdtree.fleet.plugins.module_utils import _patch_files as patch_files
from ansible_collections.kdtree.fleet.plugins.module_utils import _speed as speed
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _report_table as report_table

# validate.compared summed over a host's schedulers, at least (kdtree_promote_min_compared).
DEFAULT_MIN_COMPARED = 1000
# calls timed on both paths over a host's schedulers, at least (kdtree_promote_min_timed_calls).
DEFAULT_MIN_TIMED_CALLS = 200
# the speedup a host needs (kdtree_promote_min_speedup): 1.0, plus 5 % for the noise of timing two
# implementations call by call on live traffic (the margin the argument spec documents).
DEFAULT_MIN_SPEEDUP = 1.05
# a bucket with enough samples (module_utils/_speed.MIN_BUCKET_CALLS) whose speedup is below this
# (the kernel slower than the original on those shapes) refuses, whatever the host's figure.
SLOW_BUCKET = 1.0
# The patch's config.py (the owner of DEFAULT_TOL), relative to the patch source directory
# (kdtree_patch_source_dir: the directory that holds sitecustomize.py and kdtree_verify/).
PATCH_CONFIG = Path(patch_files.CONFIG_FILE)
# (key, header) of the promotion's table (render()ed like the report's).
COLUMNS = (("host", "HOST"), ("promote", "PROMOTE"), ("why", "WHY"))
# The patch's status reader (the owner of what a status count is), loaded by path too.
PATCH_STATUSDIR = Path(patch_files.STATUSDIR_FILE)
# history.now()'s format
HISTORY_TIME = "%Y-%m-%dT%H:%M:%SZ"


class PromoteError(Exception):
    """A setting of the promotion that cannot be used (the message says which)."""


def default_tolerance(patch_source: str | Path) -> float:
    """DEFAULT_TOL of the patch's config.py (PATCH_CONFIG) under the patch source directory."""
    if not str(patch_source or ""):
        raise PromoteError(
            "no patch source directory to read the default tolerance from "
            "(pass kdtree_patch_source_dir, or set kdtree_promote_tolerance)"
        )
    path = Path(patch_source) / PATCH_CONFIG
    try:
        return float(patch_files.load_file(path, "kdtree_promote_patch_config", ("DEFAULT_TOL",)).DEFAULT_TOL)
    except (patch_files.PatchFileError, TypeError, ValueError) as exc:
        raise PromoteError(f"cannot read DEFAULT_TOL from the patch's {path}: {exc}") from exc


def status_reader(patch_source: str | Path) -> Any:
    """The patch's status reader (PATCH_STATUSDIR) under the patch source directory, loaded by path."""
    if not str(patch_source or ""):
        raise PromoteError(
            "no patch source directory to load the status reader from (pass kdtree_patch_source_dir)"
        )
    path = Path(patch_source) / PATCH_STATUSDIR
    try:
        return patch_files.load_file(
            path, "kdtree_promote_statusdir", ("count_problem", "nonfinite_problem"), "the status reader"
        )
    except patch_files.PatchFileError as exc:
        raise PromoteError(f"cannot load the patch's status reader {path}: {exc}") from exc


def _evidence_problems(row: dict[str, Any], reporting: list[dict[str, Any]], reader: Any) -> list[str]:
    """What in the row's statistics this gate does not understand or must refuse on its own: a
    count that is not a count, a non-finite value, a scheduler whose statistics are not fresh."""
    why: list[str] = []
    odd = []
    for item in reporting:
        for key in ("compared", "mismatches", "runtime_fallbacks"):
            problem = reader.count_problem(item.get(key))
            if problem:
                odd.append(f"pid {item.get('pid')} {key} is {problem}")
    for key in ("validate_mismatches", "runtime_fallbacks"):
        if key in row and row[key] is not None and reader.count_problem(row[key]):
            odd.append(f"{key} is {reader.count_problem(row[key])}")
    if odd:
        why.append("statistics this gate does not understand: " + "; ".join(odd))
    nonfinite = str(row.get("validate_nonfinite") or "")
    if not nonfinite:
        diffs = [row.get("validate_max_diff"), *(s.get("max_diff") for s in reporting)]
        bad = [d for d in diffs if isinstance(d, float) and not math.isfinite(d)]
        if bad:
            nonfinite = reader.nonfinite_problem({"max_diff": bad[0]})
    if nonfinite:
        why.append(nonfinite)
    stale = [
        f"pid {s.get('pid')}: {s['fresh'] if 'fresh' in s else 'freshness unknown'}"
        for s in reporting
        if s.get("fresh", "freshness unknown") != ""
    ]
    if stale:
        why.append("statistics not fresh (" + "; ".join(stale) + ")")
    return why


def _sglang_problems(row: dict[str, Any]) -> list[str]:
    """A host runs mode on only on an SGLang release of the patch's window (module_utils/_report
    sglang_facts); an untested one (kdtree_service_allow_untested_sglang) stays in validate, and so
    does one whose release or window the report could not read."""
    versions = ",".join(row.get("sglang_versions") or []) or "?"
    in_window = row.get("sglang_in_window")
    if in_window is True:
        return []
    if in_window is False:
        window = row.get("sglang_window") or ["?"]
        return [
            f"sglang {versions} is outside the patch's supported window {window[0]} to {window[-1]}: "
            "the patch mirrors only those releases, so it stays in validate (untested release)"
        ]
    detail = row.get("sglang_window_problem") or "no scheduler reports its SGLang version"
    return [f"cannot tell whether sglang {versions} is in the patch's supported window ({detail})"]


def _whole(value: Any, name: str, default: int) -> int:
    """A play variable as a whole number >= 1; "" or None takes `default`."""
    if value in ("", None):
        return default
    try:
        count = int(str(value))
    except ValueError:
        count = -1
    if count < 1:
        raise PromoteError(f"{name}={value!r} is not a whole number >= 1")
    return count


def _finite(value: Any, name: str, *, zero_allowed: bool) -> float:
    """A play variable as a finite number > 0 (>= 0 when `zero_allowed`)."""
    try:
        figure = float(str(value))
    except ValueError:
        figure = math.nan
    if not (math.isfinite(figure) and (figure >= 0 if zero_allowed else figure > 0)):
        raise PromoteError(f"{name}={value!r} is not a finite number {'>=' if zero_allowed else '>'} 0")
    return figure


def settings(min_compared: Any = "", tolerance: Any = "", patch_source: str | Path = "") -> tuple[int, float]:
    """(min_compared, tolerance) from the play's variables; "" or None takes the default (the
    tolerance's from the patch source directory, default_tolerance())."""
    count = _whole(min_compared, "kdtree_promote_min_compared", DEFAULT_MIN_COMPARED)
    if tolerance in ("", None):
        return count, default_tolerance(patch_source)
    return count, _finite(tolerance, "kdtree_promote_tolerance", zero_allowed=True)


def speed_settings(min_timed_calls: Any = "", min_speedup: Any = "") -> tuple[int, float]:
    """(min_timed_calls, min_speedup) from the play's variables; "" or None takes the default."""
    count = _whole(min_timed_calls, "kdtree_promote_min_timed_calls", DEFAULT_MIN_TIMED_CALLS)
    if min_speedup in ("", None):
        return count, DEFAULT_MIN_SPEEDUP
    return count, _finite(min_speedup, "kdtree_promote_min_speedup", zero_allowed=False)


def speed_problems(row: dict[str, Any], min_timed_calls: int, min_speedup: float) -> tuple[list[str], str]:
    """(why the row's speed does not qualify, [] when it does; the evidence in words)."""
    given = row.get("speed")
    if not isinstance(given, dict):
        return ["no timing of the kernel against the original (a patch without validate timing?)"], ""
    figure = speed.speed(given.get("buckets"))  # re-derived: the row's own figure is not trusted
    if figure["problem"]:
        return [f"timing this gate does not understand: {figure['problem']}"], ""
    why = []
    timed = figure["timed_calls"]
    if timed < min_timed_calls:
        why.append(f"{timed} calls timed, fewer than {min_timed_calls}")
    worst = figure["worst_bucket"]
    worst_text = f" (worst bucket {worst['label']} {worst['speedup']:.2f})" if worst else ""
    if figure["speedup"] is not None and figure["speedup"] < min_speedup:
        why.append(f"speedup {figure['speedup']:.2f} < {min_speedup:g}{worst_text}")
    elif worst and worst["speedup"] < SLOW_BUCKET:
        why.append(f"bucket {worst['label']} is slower than the original (speedup {worst['speedup']:.2f})")
    evidence = f"speedup {figure['speedup']:.2f} over {timed} timed calls{worst_text}" if timed else ""
    return why, evidence


def scheduler_speed_problems(reporting: list[dict[str, Any]]) -> list[str]:
    """Each scheduler judged on its own timing (its report entry's `speed`, re-derived from its buckets):
    timed at all, and neither slower than the original overall nor in a bucket with enough samples
    (SLOW_BUCKET). A host's sum can hide one slow or untimed scheduler; this does not."""
    why = []
    for item in reporting:
        pid = item.get("pid")
        given = item.get("speed")
        if not isinstance(given, dict):
            why.append(f"scheduler pid {pid} has no timing")
            continue
        figure = speed.speed(given.get("buckets"))
        if figure["problem"]:
            why.append(f"scheduler pid {pid} timing this gate does not understand: {figure['problem']}")
        elif not figure["timed_calls"]:
            why.append(f"scheduler pid {pid} timed no call")
        elif figure["speedup"] < SLOW_BUCKET:
            why.append(f"scheduler pid {pid} is slower than the original (speedup {figure['speedup']:.2f})")
        elif figure["worst_bucket"] and figure["worst_bucket"]["speedup"] < SLOW_BUCKET:
            worst = figure["worst_bucket"]
            why.append(
                f"scheduler pid {pid} bucket {worst['label']} is slower than the original "
                f"(speedup {worst['speedup']:.2f})"
            )
    return why


def _epoch(text: Any) -> float | None:
    try:
        return float(calendar.timegm(time.strptime(str(text), HISTORY_TIME)))
    except (TypeError, ValueError):
        return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _current_run(schedulers: list[dict[str, Any]], deploy_start: float | None) -> list[str]:
    """Why the statistics are not (provably) the current run's; [] when they are."""
    if deploy_start is None:
        return ["the current deploy's start time is unknown, so the statistics cannot be dated"]
    old = []
    for item in schedulers:
        started, since = _number(item.get("process_start")), _number(item.get("since"))
        if started is None or since is None or started < deploy_start or since < deploy_start:
            old.append(str(item.get("pid")))
    if old:
        return [f"statistics of pid {', '.join(old)} are older than the current deploy (or undated)"]
    return []


def qualify(
    row: dict[str, Any],
    min_compared: int,
    tolerance: float,
    expected: dict[str, Any] | None = None,
    reader: Any = None,
    min_timed_calls: int = DEFAULT_MIN_TIMED_CALLS,
    min_speedup: float = DEFAULT_MIN_SPEEDUP,
) -> tuple[bool, str]:
    """(qualifies, why) for one host's report row. Why names every rule that fails, or, when the
    host qualifies, the evidence. `reader`: the patch's status reader (status_reader())."""
    if reader is None:
        raise PromoteError("qualify() needs the patch's status reader (status_reader(patch_source))")
    tol = float(tolerance)
    if "unit" not in row:  # report_table.rows() made the row: the host was not read
        return False, "; ".join(row.get("problems") or ["no report"])
    why: list[str] = []
    if row.get("errors"):
        why.append("the report could not read everything: " + "; ".join(map(str, row["errors"])))
    if not row.get("deployed"):
        return False, "; ".join([*why, "kdtree is not deployed"])
    mode = row.get("mode") or "unknown"
    if mode != "validate":  # nothing else to judge: there are no validate statistics
        return False, "; ".join(
            [*why, f"mode is {mode}" + (" already" if mode == "on" else "") + ", not validate"]
        )

    current = row.get("current_deploy") or {}
    last = row.get("last_deploy") or {}
    if current.get("result") != "healthy":
        why.append(f"the current deploy is {current.get('result') or 'unknown'}, not healthy")
    if last and last.get("result") != "healthy":
        text = f"the last deploy {last.get('id') or '?'} is {last.get('result') or 'unknown'}"
        if last.get("rolled_back_to"):
            text += f" (rolled back to {last['rolled_back_to']})"
        if last.get("why"):
            text += f": {last['why']}"
        why.append(text)

    unit_state = str(row.get("unit_state") or "unknown")
    if not unit_state.startswith("active/"):
        why.append(f"unit is {unit_state}")
    if row.get("health") != "ok" and not row.get("node_rank"):
        why.append(f"health is {row.get('health') or 'not read'}")

    schedulers = [s for s in row.get("schedulers") or [] if isinstance(s, dict)]
    expected_count = row.get("schedulers_expected")
    reporting = [
        s
        for s in schedulers
        if s.get("state") == "active" and s.get("mode") == "validate" and s.get("compared") is not None
    ]
    if not expected_count:
        why.append("the history does not say how many schedulers to expect")
    elif len(reporting) != expected_count or row.get("schedulers_patched") != expected_count:
        why.append(
            f"{len(reporting)}/{expected_count} schedulers report validate statistics "
            f"({row.get('schedulers_patched', 0)} patched, {row.get('schedulers_running', 0)} running)"
        )
    why += _current_run(schedulers, _epoch(current.get("started")))
    why += _evidence_problems(row, reporting, reader)

    why += _sglang_problems(row)

    running = row.get("running_build_ids") or []
    if running and running != [row.get("build_id")]:
        why.append(f"schedulers run build {','.join(running)}, the history says {row.get('build_id')}")
    if expected:
        build, digest = str(expected.get("build_id") or ""), str(expected.get("patch_digest") or "")
        if build and row.get("build_id") != build:
            why.append(f"runs build {row.get('build_id') or '?'}, the promotion would deploy {build}")
        short = str(row.get("patch_digest") or "")
        if digest and (not short or not digest.startswith(short)):
            why.append(f"runs patch {short or '?'}, the promotion would deploy {digest[: len(short) or 12]}")

    compared = [s.get("compared") for s in reporting]
    total = sum(c for c in compared if isinstance(c, int) and not isinstance(c, bool) and c > 0)
    if total < min_compared:
        why.append(f"{total} calls compared, fewer than {min_compared}")
    idle = [str(s.get("pid")) for s in reporting if not s.get("compared")]
    if idle:
        why.append(f"scheduler pid {', '.join(idle)} compared no call")
    mismatches = row.get("validate_mismatches")
    if mismatches is None and reporting:
        why.append("no mismatch count")
    elif mismatches:
        why.append(f"{mismatches} mismatches")
    max_diff = _number(row.get("validate_max_diff"))
    if max_diff is None and reporting:
        why.append("no largest difference")
    elif max_diff is not None and (math.isnan(max_diff) or max_diff > tol):  # NaN never passes
        why.append(f"max diff {max_diff:.3g} > tolerance {tol:g}")
    fallbacks = row.get("runtime_fallbacks")
    if fallbacks is None:
        why.append("no runtime fallback count (a patch without counters)")
    elif fallbacks:
        reason = row.get("runtime_fallback_reason") or "?"
        why.append(f"{fallbacks} runtime fallbacks ({reason})")

    slow, evidence = speed_problems(row, min_timed_calls, min_speedup)
    why += slow or scheduler_speed_problems(reporting)

    if why:
        return False, "; ".join(why)
    return True, (
        f"{total} calls compared over {len(reporting)} schedulers, 0 mismatches, "
        f"max diff {max_diff or 0.0:.3g} <= {tol:g}, no runtime fallback, {evidence}"
    )


def verdict(
    row: dict[str, Any],
    min_compared: Any = "",
    tolerance: Any = "",
    expected: dict[str, Any] | None = None,
    patch_source: str | Path = "",
    min_timed_calls: Any = "",
    min_speedup: Any = "",
) -> dict[str, Any]:
    """{host, qualified, why, min_compared, tolerance, min_timed_calls, min_speedup, speedup,
    worst_bucket} for one row, with the play's settings (settings(), speed_settings(): "" takes
    the defaults, the tolerance's read from `patch_source`)."""
    count, tol = settings(min_compared, tolerance, patch_source)
    timed, figure = speed_settings(min_timed_calls, min_speedup)
    ok, why = qualify(row, count, tol, expected, status_reader(patch_source), timed, figure)
    given = row.get("speed")
    measured = speed.speed(given.get("buckets")) if isinstance(given, dict) else {}
    return {
        "host": str(row.get("host") or "?"),
        "qualified": ok,
        "why": why,
        "min_compared": count,
        "tolerance": tol,
        "min_timed_calls": timed,
        "min_speedup": figure,
        "speedup": measured.get("speedup"),
        "worst_bucket": measured.get("worst_bucket"),
    }


def format_table(verdicts: list[dict[str, Any]]) -> str:
    """One line per host: HOST, PROMOTE (on / stays validate), WHY; qualifying hosts first."""
    ordered = sorted(verdicts, key=lambda v: not v.get("qualified"))
    lines = [
        {
            "host": str(v.get("host") or "?"),
            "promote": "on" if v.get("qualified") else "stays",
            "why": str(v.get("why") or ""),
        }
        for v in ordered
    ]
    return report_table.render(COLUMNS, lines)
