"""The fleet report's host side: what one host runs now, read without changing anything.

gather() is the kdtree_report module's work: the unit's state (`systemctl show` through
unit_env.systemctl_show), the health answer and who holds its port, the deploy history
(history.load, the one reader of its format), the patch's status files of the unit's live processes
(`<status_dir>/<pid>.json`), the main process's NCCL_* environment and command line, and the GPU's
compute capability, and the mean accept length SGLang publishes on its /metrics
(module_utils/_decode.accept_length, when the unit runs speculative decoding). Every host read goes through
a HostReader, so tests hand it a fake; every
command it runs has a timeout. Nothing is written. This file is the one owner of a row's fields.

A zero kernel count comes with why (kernel_note(): mode off, no --speculative-algorithm on the
unit's command line, no call reached the patch yet, every call went to the original code), from
what the host itself shows.

The table that shows the rows is the controller's (plugins/plugin_utils/_report_table.py); this
file travels to the hosts and imports module_utils only.

Status files are written by the patch (kdtree_verify/telemetry/marker.py) and grow new fields over time; every
field is optional here and a file of an older patch is read as far as it goes. A file counts only
when its name is `<pid>.json` of a live process of the unit (the unit's cgroup) that started before
the file was written; the others are stale (an earlier run, or a reused pid): ignored, never
opened, and counted. A live process's file is read and checked by the installed patch's
kdtree_verify/telemetry/statusdir.py (the one validating reader: regular file, size and depth caps, pid field
== name, types): one it refuses is an error of the row, never read as zeros. Each scheduler's
`fresh` says whether its `updated` is within statusdir's freshness bound of the interval the unit
runs with (its KDTREE_STATUS_INTERVAL), and `validate_nonfinite` names NaN/inf evidence.

Stdlib only (the module runs it on the host).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ansible_collections.kdtree.fleet.plugins.module_utils import (
    _decode as decode,
)
from ansible_collections.kdtree.fleet.plugins.module_utils import (
    _gpu_health as gpu_health,
)
from ansible_collections.kdtree.fleet.plugins.module_utils import (
    _history as history,
)
from ansible_collections.kdtree.fleet.plugins.module_utils import (
    _patch_files as patch_files,
)
from ansible_collections.kdtree.fleet.plugins.module_utils import (
    _speed as speed,
)
from ansible_collections.kdtree.fleet.plugins.module_utils import (
    _unit_env as unit_env,
)
from ansible_collections.kdtree.fleet.plugins.module_utils import (
    _unit_procs as unit_procs,
)
from ansible_collections.kdtree.fleet.plugins.module_utils._http_client import HttpFailure, request
from ansible_collections.kdtree.fleet.plugins.module_utils._small_file import (
    SmallFileRefused,
    read_small_text,
)
from ansible_collections.kdtree.fleet.plugins.module_utils._status_clock import judged_now

SHOW_PROPS = ("ActiveState", "SubState", "MainPID", "ExecMainStartTimestamp", "ControlGroup")
NVIDIA_SMI_TIMEOUT_S = 10.0
# The build directory's BUILD_INFO (kdtree_build writes id=, arch=, compute_capability=).
BUILD_INFO = "BUILD_INFO"
SHORT_DIGEST = 12
SHORT_WHY = 60
NONE = "-"
# SGLang's flag that turns speculative decoding (and so verify calls) on; argparse accepts any
# prefix of it down to SPECULATIVE_FLAG_PREFIX (shorter ones are ambiguous: --speculative-accept-...).
SPECULATIVE_FLAG = "--speculative-algorithm"
SPECULATIVE_FLAG_PREFIX = "--speculative-al"
METRICS_TIMEOUT_S = 5.0


@dataclass
class Query:
    """What to report on: the unit (without .service), its health URL and status directory.

    status_dir "" takes the one the history's current entry names; history_path is the deploy
    history; nvidia_smi is asked for the compute capability only when the history's build does not
    say it (and only when it is installed)."""

    unit: str
    host: str = ""
    health_url: str = ""
    status_dir: str = ""
    history_path: str = history.DEFAULT_PATH
    scheduler_prefix: str = unit_procs.SCHEDULER_PREFIX
    nvidia_smi: str = "nvidia-smi"
    # the GPU health (module_utils/_gpu_health.py, the preflight's gpu check): read only when on
    gpu_check: bool = False
    gpu_min_free_mib: int = 0


class HostReader:
    """Every read of the host the report makes (tests replace these methods)."""

    def show(self, unit: str) -> dict[str, str]:
        return unit_env.systemctl_show(f"{unit}.service", *SHOW_PROPS)

    def cgroup_pids(self, control_group: str) -> list[int]:
        return unit_procs.cgroup_pids(control_group)

    def title(self, pid: int) -> str:
        return unit_procs.process_title(pid)

    def cmdline(self, pid: int) -> list[str]:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                raw = handle.read()
        except OSError:
            return []
        return [arg.decode("utf-8", "replace") for arg in raw.split(b"\0") if arg]

    def environ(self, pid: int) -> dict[str, str] | None:
        return unit_procs.process_environ(pid)

    def process_start(self, pid: int) -> float | None:
        return unit_procs.process_start(pid)

    def health(self, url: str) -> str:
        return unit_procs.health_status(url)

    def health_owner(self, url: str, unit: str, pids: list[int]) -> str:
        return unit_procs.health_owner(url, unit, pids)

    def metrics(self, url: str) -> str:
        """The server's Prometheus text at `url`, through the one bounded HTTP client (raises ValueError
        with the client's reason when it cannot be read)."""
        try:
            return request("GET", url, timeout_s=METRICS_TIMEOUT_S).body.decode("utf-8", "replace")
        except HttpFailure as exc:
            raise ValueError(exc.reason) from exc

    def history(self, path: str) -> list[dict[str, Any]]:
        return history.load(path)

    def read_text(self, path: str) -> str:
        return read_small_text(path)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def mtime(self, path: str) -> float:
        return os.stat(path).st_mtime

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        """The host's CLOCK_MONOTONIC (status schema 2's updated_mono is on it)."""
        return time.monotonic()

    def statusdir(self, patch_dir: str) -> Any:
        """The installed patch's status reader, patch_files.STATUSDIR_FILE (PatchFileError when it
        cannot be loaded)."""
        return patch_files.load_installed(
            patch_dir,
            patch_files.STATUSDIR_FILE,
            "kdtree_report_statusdir",
            ("read_file", "name_pid", "freshness_problem", "nonfinite_problem", "load_sibling", "Refused"),
            "the status reader the report needs",
        )

    def read_status(self, statusdir: Any, path: str) -> dict[str, Any]:
        """One status file, read and checked by statusdir.read_file (Refused or OSError)."""
        return statusdir.read_file(path)

    def gpu_query(self, argv: list[str], timeout_s: float) -> str:
        """One nvidia-smi query of the GPU health check (gpu_health.GpuReadError when it cannot be read)."""
        return gpu_health.run_nvidia_smi(argv, timeout_s)

    def nvidia_smi(self, binary: str) -> str:
        """The first GPU's compute capability, "" when nvidia-smi is absent or says nothing."""
        if not shutil.which(binary):
            return ""
        out = subprocess.run(
            [binary, "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            errors="replace",
            check=False,
            timeout=NVIDIA_SMI_TIMEOUT_S,
        )
        lines = out.stdout.strip().splitlines()
        return lines[0].strip() if out.returncode == 0 and lines else ""


# ---------------------------------------------------------------------------------------------
# the deploy history


def current_entry(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The entry that describes what runs now; None when kdtree is not (or no longer) deployed.

    The newest entry, unless it removed kdtree (a rollback to stock) or is a deploy that was rolled
    back: then the last good one when it went back to previous, else none. (The deploy's rescue
    ends the failed entry after the rollback's own entry, so that entry is usually the newest.)
    """
    if not entries:
        return None
    newest = entries[-1]
    if newest.get("restored_from") == "stock" or newest.get("result") == "removed":
        return None
    if newest.get("result") == "rolled_back":
        if str(newest.get("rolled_back_to", "")).startswith("previous"):
            return history.last_good(entries[:-1], "-")
        return None
    return newest


def last_deploy(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest deploy (not a restore or a removal by a rollback)."""
    for entry in reversed(entries):
        if not entry.get("restored_from"):
            return entry
    return None


def _when(entry: dict[str, Any]) -> str:
    return str(entry.get("ended") or entry.get("started") or "")


def short(text: Any, limit: int = SHORT_WHY) -> str:
    """`text` on one line, cut to `limit` characters (the report's short why)."""
    line = " ".join(str(text or "").split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def deploy_summary(entry: dict[str, Any] | None) -> dict[str, Any] | None:
    if entry is None:
        return None
    return {
        "id": entry.get("id", ""),
        "result": entry.get("result", ""),
        "rolled_back_to": entry.get("rolled_back_to", ""),
        "why": short(entry.get("why")),
        "when": _when(entry),
        "started": str(entry.get("started") or ""),
        "build_id": entry.get("build_id", ""),
    }


def decode_deploys(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What the newest deploy that recorded decode figures did to decode, beside the deploy with
    figures before it (history.measured): {deploy, when, figures, previous_deploy, previous}
    (previous_deploy "" and previous None when it is the first); None when no deploy recorded any."""
    newest, previous = history.measured(entries)
    if newest is None:
        return None
    return {
        "deploy": str(newest.get("id", "")),
        "when": _when(newest),
        "figures": history.decode_of(newest),
        "previous_deploy": str((previous or {}).get("id", "")),
        "previous": history.decode_of(previous),
    }


def build_info(text: str) -> dict[str, str]:
    """BUILD_INFO's `key=value` lines."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


# ---------------------------------------------------------------------------------------------
# status files


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def read_status_files(
    reader: HostReader, status_dir: str, live_pids: list[int], statusdir: Any = None
) -> tuple[list[dict[str, Any]], int, list[str]]:
    """(the live processes' status files, how many stale files, problems reading the directory).

    A file is `<pid>.json` (a `.tmp` is a write in progress and skipped); it counts when its name's
    pid is one of live_pids and it was written after that process started; any other name is stale
    and never opened. A live pid's file is read by statusdir (the installed patch's reader): one it
    refuses (a copy under another pid's name, a FIFO, odd types) is a problem, not a file."""
    if not status_dir:
        return [], 0, []
    try:
        names = [n for n in reader.listdir(status_dir) if n.endswith(".json")]
    except FileNotFoundError:
        return [], 0, []  # the unit is stopped (RuntimeDirectory= is gone) or never ran patched
    except OSError as exc:
        return [], 0, [f"cannot list {status_dir}: {exc}"]
    live = set(live_pids)
    found: list[dict[str, Any]] = []
    problems: list[str] = []
    stale = 0
    for name in names:
        pid = statusdir.name_pid(name) if statusdir is not None else None
        if pid not in live:
            stale += 1  # not a live process's name (or no reader): never opened
            continue
        path = os.path.join(status_dir, name)
        try:
            data = reader.read_status(statusdir, path)
            written = reader.mtime(path)
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:  # statusdir.Refused is a ValueError
            problems.append(f"status file {name} refused: {exc}")
            continue
        started = reader.process_start(pid)
        if started is not None and written < started - 1.0:
            stale += 1
            continue
        found.append({**data, "pid": pid})
    if names and statusdir is None:
        problems.append("the status files cannot be read: no status reader (statusdir.py) of the patch")
    return found, stale, problems


def status_reader(reader: HostReader, entry: dict[str, Any] | None) -> tuple[Any, str]:
    """(the installed patch's statusdir module or None, the problem when None) for the history's
    current entry (its patch_dir)."""
    patch_dir = str((entry or {}).get("patch_dir") or "")
    if not patch_dir:
        return None, "the history names no patch_dir: no status reader"
    try:
        return reader.statusdir(patch_dir), ""
    except patch_files.PatchFileError as exc:
        return None, str(exc)


def sglang_window(entry: dict[str, Any] | None) -> tuple[list[str], str]:
    """(the supported SGLang window of the history's current patch, its target.py, or [], the
    problem when it cannot be read)."""
    patch_dir = str((entry or {}).get("patch_dir") or "")
    if not patch_dir:
        return [], "the history names no patch_dir: no SGLang window"
    try:
        target = patch_files.load_installed(
            patch_dir, patch_files.TARGET_FILE, "kdtree_report_target", ("SUPPORTED_SGLANG_VERSIONS",)
        )
    except patch_files.PatchFileError as exc:
        return [], str(exc)
    return [str(v) for v in target.SUPPORTED_SGLANG_VERSIONS], ""


def sglang_facts(scheduler_files: list[dict[str, Any]], entry: dict[str, Any] | None) -> dict[str, Any]:
    """The SGLang the schedulers report (their status files' `sglang`) and whether each is in the
    window of the patch they run: sglang_in_window None when either cannot be read (never taken as
    in the window)."""
    versions = sorted({str(f["sglang"]) for f in scheduler_files if f.get("sglang")})
    window, problem = sglang_window(entry) if versions else ([], "")
    in_window = None
    if versions and window:
        in_window = all(v.split("+", 1)[0] in window for v in versions)
    return {
        "sglang_versions": versions,
        "sglang_window": window,
        "sglang_in_window": in_window,
        "sglang_window_problem": problem,
    }


def freshness(
    statusdir: Any, reader: HostReader, files: list[dict[str, Any]], env: dict[str, str] | None
) -> tuple[float, dict[int, str]]:
    """(the status interval the unit runs with, {pid: statusdir.freshness_problem}) at the host's
    clock now (each file's age on the host's monotonic clock when it carries updated_mono:
    module_utils/_status_clock.py); the interval is the main process's KDTREE_STATUS_INTERVAL read by
    the patch's config.py rules (its default when unset or refused)."""
    interval, _why = statusdir.load_sibling("config").read_status_interval(env or {})
    now, now_mono = reader.now(), reader.monotonic()
    # each file's age on the host's monotonic clock where it says when it was written on it
    return interval, {
        f["pid"]: statusdir.freshness_problem(f, judged_now(f, now, now_mono), interval) for f in files
    }


def summarize_status(files: list[dict[str, Any]]) -> dict[str, Any]:
    """Sums over the live status files. A sum is None when no file has the field (an older patch).
    kernel_calls: per file counters.kernel_calls_device when present (docs/CONTRACTS.md 3b), else
    counters.kernel_calls."""
    kernel_calls: list[int] = []
    originals: Counter[str] = Counter()
    has_originals = False
    runtime = 0
    has_runtime = False
    runtime_reason = ""
    compared: list[int] = []
    mismatches: list[int] = []
    max_diffs: list[float] = []
    buckets: list[Any] = []
    timed_files = 0
    for item in files:
        timing = item.get("timing")
        if isinstance(timing, dict):
            timed_files += 1
            buckets.extend(timing.get("buckets") if isinstance(timing.get("buckets"), list) else [None])
        counters = item.get("counters") if isinstance(item.get("counters"), dict) else {}
        # the library's own count (ABI 4: CUDA graph replays included) over Python's when present
        for key in ("kernel_calls_device", "kernel_calls"):
            if _int(counters.get(key)) is not None:
                kernel_calls.append(counters[key])
                break
        calls = counters.get("original_calls")
        if isinstance(calls, dict):
            has_originals = True
            for reason, count in calls.items():
                if _int(count):
                    originals[str(reason)] += count
        count = _int(counters.get("runtime_fallbacks"))
        if count is None and "runtime_fallback" in item:  # a file of a patch without counters
            count = 1 if item.get("runtime_fallback") else 0
        if count is not None:
            has_runtime = True
            runtime += count
        if count and not runtime_reason:
            runtime_reason = str(counters.get("runtime_fallback_reason") or item.get("reason") or "")
        validate = item.get("validate") if isinstance(item.get("validate"), dict) else {}
        for key, into in (("compared", compared), ("mismatches", mismatches)):
            if _int(validate.get(key)) is not None:
                into.append(validate[key])
        if _num(validate.get("max_diff")) is not None:
            max_diffs.append(float(validate["max_diff"]))
    # NaN-aware: Python's max drops a NaN or not depending on where it stands
    max_diff = math.nan if any(math.isnan(d) for d in max_diffs) else max(max_diffs, default=None)
    top = originals.most_common(1)
    return {
        "kernel_calls": sum(kernel_calls) if kernel_calls else None,
        "fallbacks": sum(originals.values()) if has_originals else None,
        "fallbacks_by_reason": dict(originals),
        "fallback_top_reason": top[0][0] if top else "",
        "runtime_fallbacks": runtime if has_runtime else None,
        "runtime_fallback_reason": runtime_reason,
        "validate_compared": sum(compared) if compared else None,
        "validate_mismatches": sum(mismatches) if mismatches else None,
        "validate_max_diff": max_diff,
        # validate's A/B timing and the kernel's share of the verify calls (module_utils/_speed.py)
        "speed": speed.speed(buckets) if timed_files else None,
        "coverage": speed.coverage(
            [item["counters"] for item in files if isinstance(item.get("counters"), dict)]
        )
        if any(isinstance(item.get("counters"), dict) for item in files)
        else None,
    }


def scheduler_details(
    reader: HostReader,
    files: list[dict[str, Any]],
    speculative: str | None = None,
    fresh: dict[int, str] | None = None,
) -> list[dict[str, Any]]:
    """Per scheduler status file, by pid: what a promotion judges (plugin_utils/_promote.py: its
    process's start (epoch s, None when unreadable), the file's `since` and `updated`, its mode and
    state, its validate statistics and runtime fallbacks) and what the table's scheduler lines show
    (its kernel calls, with why when 0 (kernel_note(); `speculative` is the unit's
    speculative_algorithm()), and calls sent to the original, with the top reason). A field is None
    where the file has no such field. `fresh`: freshness() of the files; a file it has no word on is
    "freshness not checked"."""
    fresh = fresh or {}
    out = []
    for item in sorted(files, key=lambda f: f["pid"]):
        counters = item.get("counters") if isinstance(item.get("counters"), dict) else {}
        validate = item.get("validate") if isinstance(item.get("validate"), dict) else {}
        runtime = _int(counters.get("runtime_fallbacks"))
        if runtime is None and "runtime_fallback" in item:
            runtime = 1 if item.get("runtime_fallback") else 0
        own = summarize_status([item])
        why, note = kernel_note(
            own["kernel_calls"],
            own["fallbacks"],
            own["validate_compared"],
            str(item.get("mode") or ""),
            speculative,
        )
        out.append(
            {
                "kernel_calls": own["kernel_calls"],
                "kernel_calls_why": why,
                "kernel_calls_note": note,
                "fallbacks": own["fallbacks"],
                "fallback_top_reason": own["fallback_top_reason"],
                "pid": item["pid"],
                "title": str(item.get("title") or ""),
                "mode": str(item.get("mode") or ""),
                "state": str(item.get("state") or ""),
                "process_start": reader.process_start(item["pid"]),
                "since": _num(item.get("since")),
                "updated": _num(item.get("updated")),
                "compared": _int(validate.get("compared")),
                "mismatches": _int(validate.get("mismatches")),
                "max_diff": _num(validate.get("max_diff")),
                "runtime_fallbacks": runtime,
                "speed": own["speed"],
                "coverage": own["coverage"],
                "fresh": fresh.get(item["pid"], "freshness not checked"),
            }
        )
    return out


def node_rank(args: list[str]) -> int:
    """--node-rank of a launch command line (0 when absent or unreadable)."""
    for i, arg in enumerate(args):
        value = None
        if arg == "--node-rank" and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--node-rank="):
            value = arg.partition("=")[2]
        if value is not None:
            return int(value) if value.isdigit() else 0
    return 0


def speculative_algorithm(args: list[str]) -> str | None:
    """--speculative-algorithm of an SGLang launch command line: its value, "" when the line is an
    SGLang launch without it (SGLang then runs no speculative decoding, so no verify call), None
    when the line cannot say (unreadable, not an SGLang launch such as a shell wrapper, or a
    --config file that may set it). argparse's unambiguous abbreviations (--speculative-al...) count."""
    launches = any(arg.endswith("sglang.launch_server") for arg in args) or any(
        os.path.basename(arg) == "sglang" and i + 1 < len(args) and args[i + 1] == "serve"
        for i, arg in enumerate(args)
    )
    if not launches:
        return None
    found = ""
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name == "--config" or (name.startswith("--conf") and "--config".startswith(name)):
            return None
        if len(name) >= len(SPECULATIVE_FLAG_PREFIX) and SPECULATIVE_FLAG.startswith(name):
            found = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            found = found or "?"  # the flag without a value: on, algorithm unknown
    return found


# SGLang's own gauge of the mean accept length and the server's /metrics URL: module_utils/_decode.py's
metrics_url = decode.metrics_url


def accept_length(text: str) -> float | None:
    """SGLang's mean accept length from its /metrics text (module_utils/_decode.accept_length: the
    mean over the gauge's series above 0); None when absent, still 0 or refused."""
    return decode.accept_length(text).value


def _accept_length(reader: HostReader, query: Query, speculative: str | None) -> float | None:
    """The accept length SGLang publishes, when the unit runs speculative decoding and answers; a
    server without --enable-metrics (404) or not answering gives None, never a problem."""
    if not speculative or not query.health_url:
        return None
    try:
        return accept_length(reader.metrics(metrics_url(query.health_url)))
    except (OSError, ValueError):
        return None


def kernel_note(
    kernel_calls: int | None,
    fallbacks: int | None,
    compared: int | None,
    mode: str,
    speculative: str | None,
) -> tuple[str, str]:
    """(why, note) for a kernel count of 0: a few words for the table's KERNEL cell and a sentence
    for the JSON, from what the host shows, first that holds: mode off (the patch wraps nothing),
    the unit's command line has no --speculative-algorithm (no verify call is expected), no call of
    any kind reached the patch (no traffic yet), every call went to the original code (its top
    reason). ("", "") for a count above 0, an unknown count, or a 0 none of these explains."""
    if kernel_calls != 0:
        return "", ""
    if mode == "off":
        return "mode off", "mode off: the patch wraps no call, so the kernel serves none"
    if speculative == "":
        return (
            "no spec decoding",
            "no speculative decoding (the unit's command line has no --speculative-algorithm): "
            "no verify calls expected",
        )
    if fallbacks == 0 and not compared:
        return "no traffic yet", "no call reached the patch since the schedulers started: no traffic sent yet"
    if fallbacks:
        return "all to original", f"all {fallbacks} calls went to the original code (see FALLBACKS)"
    return "", ""


def health_word(answer: str) -> str:
    """ok for 200, else the code or the error as read."""
    if answer == "200":
        return "ok"
    return answer or NONE


# ---------------------------------------------------------------------------------------------
# one host


def _schedulers_of(reader: HostReader, pids: list[int], prefix: str) -> list[int]:
    return [pid for pid in pids if reader.title(pid).startswith(prefix)]


def _nccl(
    reader: HostReader, main_pid: int, wanted: dict[str, Any]
) -> tuple[bool | None, dict[str, Any], str]:
    """(every templated NCCL_* value is in the main process's environ, the differing ones, problem)."""
    if not main_pid:
        return None, {}, ""
    env = reader.environ(main_pid)
    if not env:
        return None, {}, f"cannot read /proc/{main_pid}/environ (empty: SPT_NOENV unset?)"
    wrong = {k: env.get(k) for k, v in (wanted or {}).items() if env.get(k) != str(v)}
    return not wrong, wrong, ""


def command_error(exc: Exception) -> str:
    """A failed or timed-out host command, in one short line."""
    if isinstance(exc, subprocess.CalledProcessError):
        return short(f"rc={exc.returncode} {exc.stderr or ''}", 120)
    if isinstance(exc, subprocess.TimeoutExpired):
        return f"no answer within {exc.timeout:g} s"
    return short(exc, 120)


def _gpu(reader: HostReader, query: Query, entry: dict[str, Any] | None, errors: list[str]) -> dict[str, str]:
    info: dict[str, str] = {}
    if entry:
        info = {k: str(entry[k]) for k in ("arch", "compute_capability") if entry.get(k)}
        if entry.get("lib_path") and not info:
            path = os.path.join(os.path.dirname(str(entry["lib_path"])), BUILD_INFO)
            try:
                found = build_info(reader.read_text(path))
                info = {k: found[k] for k in ("arch", "compute_capability") if found.get(k)}
            except SmallFileRefused as exc:
                errors.append(f"build info: {exc}")
            except OSError:
                pass
    if not info.get("compute_capability"):
        try:
            cc = reader.nvidia_smi(query.nvidia_smi)
        except (OSError, subprocess.SubprocessError) as exc:
            errors.append(f"{query.nvidia_smi}: {command_error(exc)}")
            cc = ""
        if cc:
            info["compute_capability"] = cc
    return info


def gather(query: Query, reader: HostReader | None = None) -> dict[str, Any]:
    """One host's row. Never raises for what it cannot read: that goes to `errors` (and problems)."""
    reader = reader or HostReader()
    errors: list[str] = []
    try:
        props = reader.show(query.unit)
    except (OSError, subprocess.SubprocessError) as exc:
        errors.append(f"systemctl show {query.unit}.service: {command_error(exc)}")
        props = {}
    try:
        entries = reader.history(query.history_path)
    except history.HistoryError as exc:
        errors.append(str(exc))
        entries = []
    entry = current_entry(entries)
    last = last_deploy(entries)
    good = history.last_good(entries, "-")

    pids = reader.cgroup_pids(props.get("ControlGroup", "")) if props.get("ControlGroup") else []
    main_pid = int(props.get("MainPID") or 0) if str(props.get("MainPID", "")).isdigit() else 0
    schedulers = _schedulers_of(reader, pids, query.scheduler_prefix)
    status_dir = query.status_dir or str((entry or {}).get("status_dir") or "")
    statusdir, reader_problem = status_reader(reader, entry) if status_dir else (None, "")
    files, stale, problems = read_status_files(reader, status_dir, pids, statusdir)
    if problems and reader_problem:
        problems = [*problems, reader_problem]
    errors += problems
    wanted_state = str((entry or {}).get("marker_state") or "active")
    scheduler_set = set(schedulers)
    scheduler_files = [
        f
        for f in files
        if f["pid"] in scheduler_set or str(f.get("title", "")).startswith(query.scheduler_prefix)
    ]
    patched = sum(1 for f in scheduler_files if f.get("state") == wanted_state)
    expected = _int((entry or {}).get("expected_schedulers"))
    if expected is None and str((entry or {}).get("expected_schedulers", "")).isdigit():
        expected = int(entry["expected_schedulers"])

    command = reader.cmdline(main_pid) if main_pid else []
    rank = node_rank(command)
    speculative = speculative_algorithm(command)
    accept = _accept_length(reader, query, speculative)
    health = ""
    if query.health_url:
        health = health_word(reader.health(query.health_url))
        if health == "ok" and props.get("ControlGroup"):
            foreign = reader.health_owner(query.health_url, query.unit, pids)
            health = f"200 {foreign}" if foreign else health
    nccl_ok, nccl_diff, nccl_problem = _nccl(reader, main_pid, (entry or {}).get("nccl_env") or {})
    if nccl_problem and entry and entry.get("nccl_env"):
        errors.append(nccl_problem)
    gpu = _gpu(reader, query, entry, errors)
    gpus = (
        gpu_health.check(
            expected=expected or 0,
            min_free_mib=query.gpu_min_free_mib,
            unit_pids=pids,
            timeout_s=NVIDIA_SMI_TIMEOUT_S,
            binary=query.nvidia_smi,
            runner=reader.gpu_query,
        )
        if query.gpu_check
        else gpu_health.not_checked("off")
    )
    interval, fresh = (None, {})
    nonfinite = ""
    if statusdir is not None and scheduler_files:
        interval, fresh = freshness(
            statusdir, reader, scheduler_files, reader.environ(main_pid) if main_pid else None
        )
        merged = summarize_status(scheduler_files)
        nonfinite = statusdir.nonfinite_problem(
            {
                "max_diff": merged["validate_max_diff"],
                **{
                    key: sum(_int((f.get("validate") or {}).get(key)) or 0 for f in scheduler_files)
                    for key in ("nonfinite_kernel", "nonfinite_original")
                },
            }
        )
    running_builds = sorted({str(f["build_id"]) for f in scheduler_files if f.get("build_id")})

    status = summarize_status(scheduler_files)
    mode = str((entry or {}).get("mode", "")) if entry else ("stock" if entries else "")
    kernel_why, kernel_text = kernel_note(
        status["kernel_calls"], status["fallbacks"], status["validate_compared"], mode, speculative
    )
    row: dict[str, Any] = {
        "host": query.host,
        "unit": f"{query.unit}.service",
        "unit_state": f"{props.get('ActiveState', '?')}/{props.get('SubState', '?')}" if props else "unknown",
        "main_pid": main_pid,
        "started": props.get("ExecMainStartTimestamp", ""),
        "health": health,
        "node_rank": rank,
        "speculative_algorithm": speculative,
        "spec_accept_length": accept,
        "arch": gpu.get("arch", ""),
        "compute_capability": gpu.get("compute_capability", ""),
        "gpu_health": gpus,
        "deployed": entry is not None,
        "build_id": str((entry or {}).get("build_id", "")),
        "running_build_ids": running_builds,
        **sglang_facts(scheduler_files, entry),
        "patch_digest": str((entry or {}).get("patch_digest", ""))[:SHORT_DIGEST],
        "mode": mode,
        "marker_state": wanted_state,
        "schedulers_running": len(schedulers),
        "schedulers_patched": patched,
        "schedulers_expected": expected,
        "status_dir": status_dir,
        "status_files": len(files),
        "status_files_stale": stale,
        **status,
        "kernel_calls_why": kernel_why,
        "kernel_calls_note": kernel_text,
        "validate_nonfinite": nonfinite,
        "status_interval_s": interval,
        "nccl_env_ok": nccl_ok,
        "nccl_env_diff": nccl_diff,
        "schedulers": scheduler_details(reader, scheduler_files, speculative, fresh),
        "current_deploy": deploy_summary(entry),
        "last_deploy": deploy_summary(last),
        "last_good": deploy_summary(good),
        "decode": decode_deploys(entries),
        "errors": errors,
    }
    row["problems"] = problems_of(row)
    return row


def problems_of(row: dict[str, Any]) -> list[str]:
    """What an operator should look at on this host (empty: nothing)."""
    out = list(row.get("errors") or [])
    if row.get("unit_state") not in (None, "unknown") and not str(row["unit_state"]).startswith("active"):
        out.append(f"unit {row['unit_state']}")
    # a multi-node host of rank > 0 answers /health with a dummy: its schedulers decide
    if row.get("health") and row["health"] != "ok" and not row.get("node_rank"):
        out.append(f"health {row['health']}")
    if row.get("deployed"):
        expected = row.get("schedulers_expected") or 0
        patched = row.get("schedulers_patched") or 0
        if (expected and patched != expected) or (not expected and patched < 1):
            out.append(f"{patched}/{expected or '>=1'} schedulers {row.get('marker_state')}")
        if row.get("running_build_ids") and row["running_build_ids"] != [row.get("build_id")]:
            out.append(
                f"running build {','.join(row['running_build_ids'])}, history says {row.get('build_id')}"
            )
    out += [f"gpu: {problem}" for problem in (row.get("gpu_health") or {}).get("problems") or []]
    if row.get("sglang_in_window") is False:
        window = row.get("sglang_window") or []
        out.append(
            f"sglang {','.join(row.get('sglang_versions') or [])} outside the supported window "
            f"{window[0]} to {window[-1]}: validate only"
        )
    if row.get("runtime_fallbacks"):
        out.append(
            f"{row['runtime_fallbacks']} runtime fallbacks ({row.get('runtime_fallback_reason') or '?'})"
        )
    if row.get("validate_mismatches"):
        out.append(f"{row['validate_mismatches']} validate mismatches")
    for key in ("speed", "coverage"):
        if (row.get(key) or {}).get("problem"):
            out.append(f"{key} refused: {row[key]['problem']}")
    if row.get("nccl_env_ok") is False:
        out.append(f"NCCL differs: {json.dumps(row.get('nccl_env_diff'), sort_keys=True)}")
    if row.get("status_files_stale"):
        out.append(f"{row['status_files_stale']} stale status files ignored")
    last = row.get("last_deploy") or {}
    if last.get("result") in ("rolled_back", "running"):
        out.append(f"last deploy {last['result']}")
    return out
