"""The fleet report's controller side: one row per host, and the one table that shows them.

rows() turns the hosts' registered kdtree_report results (module_utils/_report.py, which owns a
row's fields) into one row per host, a host without a result included, and adds what this run did to
the host when it failed or stopped there (its outcome). COLUMNS is the one list of the table's
columns (key, header) and cells() fills them from a row; format_table() prints the full view (every
column, a line per host and, under a host, a line per live scheduler) or the compact one
(COMPACT_COLUMNS, hosts with problems first, no scheduler lines). render() is the fixed-width
layout every kdtree table uses (the report's, the promotion's). A new column is one COLUMNS entry
and its cell in cells() (and, when a scheduler has it, in scheduler_cells()).

Controller only (the kdtree_report_* and kdtree_promote_* filters): it may import module_utils,
module_utils never imports it.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.kdtree.fleet.plugins.module_utils import _decode as decode
from ansible_collections.kdtree.fleet.plugins.module_utils import _gpu_health as gpu_health
from ansible_collections.kdtree.fleet.plugins.module_utils import _report as report
from ansible_collections.kdtree.fleet.plugins.module_utils import _speed as speed

NONE = report.NONE

# (key, header) in table order; the last column is not padded.
COLUMNS = (
    ("host", "HOST"),
    ("ok", "OK"),
    ("gpu", "GPU"),
    ("build", "BUILD"),
    ("patch", "PATCH"),
    ("mode", "MODE"),
    ("sglang", "SGLANG"),
    ("algo", "ALGO"),
    ("accept", "ACCEPT"),
    ("unit", "UNIT"),
    ("health", "HEALTH"),
    ("patched", "PATCHED"),
    ("kernel", "KERNEL"),
    ("fallbacks", "FALLBACKS"),
    ("rt_fb", "RT_FB"),
    ("validate", "VALIDATE(mis/cmp)"),
    ("speedup", "SPEEDUP"),
    ("coverage", "COVERAGE"),
    ("decode", "DECODE(vs prev)"),
    ("nccl", "NCCL"),
    ("gpus", "GPUS"),
    ("group", "GROUP"),
    ("last", "LAST DEPLOY"),
    ("notes", "NOTES"),
)

# The compact view's columns (a subset of COLUMNS, same cells): what an operator reads first.
COMPACT_COLUMNS = tuple(
    column
    for column in COLUMNS
    if column[0]
    in (
        "host",
        "ok",
        "mode",
        "build",
        "sglang",
        "algo",
        "health",
        "patched",
        "kernel",
        "speedup",
        "last",
        "notes",
    )
)
VIEWS = ("compact", "full")
# What a run's outcome (kdtree.fleet.kdtree_common's kdtree_common_outcome) adds to a host's problems.
OUTCOME_RESULTS = ("failed", "stopped")


# How the DECODE cell writes each figure of module_utils/_decode.FIGURES: (label, unit, scale, digits).
DECODE_CELL = {
    "tokens_per_s": ("", "t/s", 1.0, 1),
    "itl_mean_s": ("itl ", "ms", 1000.0, 1),
    "accept_length": ("acc ", "", 1.0, 2),
}


def decode_change(row: dict[str, Any], threshold_pct: float | None) -> dict[str, Any]:
    """The row's newest measured deploy against the one before it (module_utils/_decode.compare,
    the one rule of the flag), with `worse_text` naming what got worse ("" when nothing did)."""
    info = row.get("decode") or {}
    change = decode.compare(info.get("figures"), info.get("previous"), threshold_pct)
    change["worse_text"] = ", ".join(f"{name} {change['change_pct'][name]:+.1f}%" for name in change["worse"])
    return change


def outcome_problem(outcome: Any, host: str) -> str | None:
    """What this run did to a host, as a problem of its row: the first line of the message its failed
    or stopped run recorded; None when the run did not fail or stop there."""
    if not isinstance(outcome, dict) or outcome.get("result") not in OUTCOME_RESULTS:
        return None
    play = str(outcome.get("play") or "run")
    lines = str(outcome.get("msg") or "").strip().splitlines()
    first = lines[0] if lines else "?"
    # the message names the run and the host (kdtree_common's failed and stop entry points): not again
    prefixes = (
        f"kdtree {play} FAILED on {host}",
        f"kdtree {play} FAILED",
        f"kdtree {play} did not complete on {host}:",
        f"kdtree {play}:",
    )
    for prefix in prefixes:
        first = first.removeprefix(prefix)
    first = first.lstrip(" ;:") or "?"
    return f"this {play} {outcome['result'].upper()}: {report.short(first, 120)}"


def rows(
    results: list[Any],
    hosts: list[str],
    decode_change_pct: float | None = None,
    outcomes: list[Any] | None = None,
    serving: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One row per host, in `hosts` order, from each host's registered module result; a host
    without a row (unreachable, failed before the report) gets one that says so. Every row gets
    `decode_change` (decode_change(): a change of more than decode_change_pct is flagged; None
    flags nothing). `outcomes` (same order, optional): each host's kdtree_common_outcome; a run that
    failed or stopped on a host puts that first among the row's problems (outcome_problem()).
    `serving` (host -> its serving group's name): a node of a multi-node server's row names it."""
    if outcomes is not None and len(outcomes) != len(hosts):
        raise ValueError(f"{len(outcomes)} outcomes for {len(hosts)} hosts")
    out = []
    for host, result in zip(hosts, results, strict=True):
        result = result if isinstance(result, dict) else {}
        row = result.get("row")
        if isinstance(row, dict):
            out.append({**row, "host": host})
            continue
        if result.get("unreachable"):
            why = f"unreachable: {report.short(result.get('msg'))}"
        elif result.get("failed"):
            why = f"report failed: {report.short(result.get('msg'))}"
        else:
            why = "no report (the host failed or was skipped earlier in this run)"
        out.append({"host": host, "errors": [why], "problems": [why]})
    for row, outcome in zip(out, outcomes or [None] * len(out), strict=True):
        problem = outcome_problem(outcome, row["host"])
        if problem:
            row["problems"] = [problem, *(row.get("problems") or [])]
    for row in out:
        if (serving or {}).get(row["host"]):
            row["group"] = serving[row["host"]]
    return [{**row, "decode_change": decode_change(row, decode_change_pct)} for row in out]


def _count(value: Any) -> str:
    return NONE if value is None else str(value)


def _kernel(item: dict[str, Any]) -> str:
    """The kernel calls, and why in a few words when they are 0 (module_utils/_report.kernel_note)."""
    text = _count(item.get("kernel_calls"))
    return f"{text} ({item['kernel_calls_why']})" if item.get("kernel_calls_why") else text


def _fallbacks(item: dict[str, Any]) -> str:
    text = _count(item.get("fallbacks"))
    return f"{text} ({item['fallback_top_reason']})" if item.get("fallback_top_reason") else text


def _algo(row: dict[str, Any]) -> str:
    """The unit's --speculative-algorithm (module_utils/_report.speculative_algorithm): "none" for an
    SGLang launch without it, NONE when the command line cannot say."""
    algo = row.get("speculative_algorithm")
    return NONE if algo is None else (algo or "none")


def _accept(row: dict[str, Any]) -> str:
    value = row.get("spec_accept_length")
    return NONE if value is None else f"{value:.2f}"


def _decode(row: dict[str, Any]) -> str:
    """The newest measured deploy's decode figures (DECODE_CELL), each with its % change against
    the deploy before it when both have it, `!` when flagged; NONE when no deploy recorded any."""
    figures = (row.get("decode") or {}).get("figures")
    if not figures:
        return NONE
    change = row.get("decode_change") or {}
    parts = []
    for name in decode.FIGURES:
        label, unit, scale, digits = DECODE_CELL[name]
        value = figures.get(name)
        text = f"{label}{NONE}" if value is None else f"{label}{value * scale:.{digits}f}{unit}"
        if name in (change.get("change_pct") or {}):
            flag = "!" if name in (change.get("flagged") or []) else ""
            text += f"({change['change_pct'][name]:+.0f}%{flag})"
        parts.append(text)
    return " ".join(parts)


def _sglang(row: dict[str, Any]) -> str:
    """The SGLang the schedulers run, "(untested)" after one outside the patch's window, "(window?)"
    when the window could not be read (module_utils/_report.sglang_facts)."""
    versions = row.get("sglang_versions") or []
    if not versions:
        return NONE
    mark = {True: "", False: " (untested)", None: " (window?)"}[row.get("sglang_in_window")]
    return ",".join(versions) + mark


def cells(row: dict[str, Any]) -> dict[str, str]:
    """A host's line: one text per COLUMNS key."""
    if "unit" not in row:  # no row from the host (rows() made one): only its name and why
        return {
            "host": str(row.get("host") or "?"),
            "ok": "CHECK",
            "notes": "; ".join(row.get("problems") or []),
        }
    arch, cc = row.get("arch"), row.get("compute_capability")
    expected = row.get("schedulers_expected")
    validate = NONE
    if row.get("validate_compared") is not None or row.get("validate_mismatches") is not None:
        validate = f"{_count(row.get('validate_mismatches'))}/{_count(row.get('validate_compared'))}"
        if row.get("validate_max_diff") is not None:
            validate += f" max {row['validate_max_diff']:.2g}"
    last = row.get("last_deploy") or {}
    last_text = NONE
    if last:
        last_text = str(last.get("result") or "?")
        if last.get("rolled_back_to"):
            last_text += f"->{str(last['rolled_back_to']).split()[0]}"
        last_text += f" {last.get('when') or '?'}"
        if last.get("why") and last.get("result") != "healthy":
            last_text += f" {last['why']}"
    health = row.get("health") or NONE
    if row.get("node_rank"):
        health = f"{health} (rank {row['node_rank']}: schedulers decide)"
    nccl = {True: "ok", False: "DIFF", None: NONE}[row.get("nccl_env_ok")]
    return {
        "host": str(row.get("host") or "?"),
        "ok": "ok" if not row.get("problems") else "CHECK",
        "gpu": "/".join(x for x in (arch, cc) if x) or NONE,
        "build": row.get("build_id") or NONE,
        "patch": row.get("patch_digest") or NONE,
        "mode": row.get("mode") or NONE,
        "sglang": _sglang(row),
        "algo": _algo(row),
        "accept": _accept(row),
        "unit": row.get("unit_state") or NONE,
        "health": health,
        "patched": f"{row.get('schedulers_patched', 0)}/{expected if expected else NONE}",
        "kernel": _kernel(row),
        "fallbacks": _fallbacks(row),
        "rt_fb": _count(row.get("runtime_fallbacks")),
        "validate": validate,
        "speedup": speed.speed_text(row.get("speed")) or NONE,
        "coverage": speed.coverage_text(row.get("coverage")) or NONE,
        "decode": _decode(row),
        "nccl": nccl,
        "gpus": gpu_health.summary(row.get("gpu_health")),
        "group": row.get("group") or NONE,
        "last": last_text,
        "notes": "; ".join(row.get("problems") or []) or NONE,
    }


def scheduler_cells(item: dict[str, Any]) -> dict[str, str]:
    """A scheduler's line under its host: its title and pid, its mode and marker state, and its own
    kernel calls (with why when 0), calls sent to the original (top reason), runtime fallbacks and
    validate counts."""
    title = str(item.get("title") or "scheduler").removeprefix("sglang::")
    validate = ""
    if item.get("compared") is not None or item.get("mismatches") is not None:
        validate = f"{_count(item.get('mismatches'))}/{_count(item.get('compared'))}"
    blank = {key: "" for key, _title in COLUMNS}
    return {
        **blank,
        "host": f"  {title} pid {item.get('pid', '?')}",
        "mode": str(item.get("mode") or NONE),
        "patched": str(item.get("state") or NONE),
        "kernel": _kernel(item),
        "fallbacks": _fallbacks(item),
        "rt_fb": _count(item.get("runtime_fallbacks")),
        "validate": validate,
        "speedup": speed.speed_text(item.get("speed")),
        "coverage": speed.coverage_text(item.get("coverage")),
    }


# C0 and C1 control characters and DEL: a status field (a title, an SGLang version, a reason) written by
# the service account could carry ANSI escapes or line breaks into the operator's terminal or log.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with every control character shown as its escape (\\x1b, \\n), never acted on."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def render(columns: tuple[tuple[str, str], ...], lines: list[dict[str, str]]) -> str:
    """A header line and one line per dict of `lines`, each column as wide as its widest cell, two
    spaces between columns; the last column is not padded, a missing cell is NONE; control characters
    in a cell are shown escaped (printable())."""
    lines = [{k: printable(str(v)) for k, v in c.items()} for c in lines]
    keys = [key for key, _title in columns]
    widths = {key: max([len(head)] + [len(c.get(key, NONE)) for c in lines]) for key, head in columns}

    def line(values: dict[str, str]) -> str:
        parts = [values.get(k, NONE).ljust(widths[k]) for k in keys[:-1]] + [values.get(keys[-1], NONE)]
        return "  ".join(parts).rstrip()

    return "\n".join([line(dict(columns)), *(line(c) for c in lines)])


def compact_cells(row: dict[str, Any]) -> dict[str, str]:
    """A host's line in the compact view: cells() without the why of a failed last deploy (NOTES
    carries the problems)."""
    values = cells(row)
    last = row.get("last_deploy") or {}
    if last and values.get("last", NONE) != NONE:
        values["last"] = " ".join(values["last"].split(" ")[:2])
    return values


def format_table(table_rows: list[dict[str, Any]], view: str = "full") -> str:
    """The report. full: a header line and one line per row; under a host whose row lists its live
    schedulers (`schedulers`), one indented line per scheduler with its own counts (KERNEL: that
    scheduler's kernel calls). compact: COMPACT_COLUMNS, one line per host, the hosts with problems
    first (each group in the rows' order)."""
    if view not in VIEWS:
        raise ValueError(f"view {view!r} is not one of {', '.join(VIEWS)}")
    if view == "compact":
        ordered = [r for r in table_rows if r.get("problems")] + [
            r for r in table_rows if not r.get("problems")
        ]
        return render(COMPACT_COLUMNS, [compact_cells(row) for row in ordered])
    lines = []
    for row in table_rows:
        lines.append(cells(row))
        if "unit" in row:
            lines.extend(scheduler_cells(s) for s in row.get("schedulers") or [] if isinstance(s, dict))
    return render(COLUMNS, lines)
