"""GPU health of one node before a restart: what nvidia-smi says, and whether a restart could work.

The preflight (module_utils/_preflight.py, check `gpu`) refuses a node whose GPUs would fail SGLang's
restart for reasons that are not the deploy's; the fleet report (module_utils/_report.py) shows the same
judgement per node. This file is the one owner of the queries, their parsing and the decision.

A node is healthy when nvidia-smi lists at least as many GPUs as this node's share of the schedulers
(one GPU per scheduler), and every GPU it lists has no uncorrectable ECC error since the driver loaded
(`ecc.errors.uncorrected.volatile.total`), no memory repair pending (`remapped_rows.pending` on Ampere
and later, `retired_pages.pending` before), persistence mode on, and at least `min_free_mib` MiB of
memory free once the unit itself is stopped (`memory.free` plus what the unit's own processes hold,
`--query-compute-apps`). nvidia-smi answers `[N/A]` or `[Not Supported]` for what a GPU does not
report (ECC turned off, no row remapping before Ampere): that is shown as not reported and refuses
nothing. Anything else that does not parse (a missing nvidia-smi, a failed or timed-out query, a
field the driver does not know, a line of the wrong width) refuses: unknown is never healthy.

Stdlib only (it runs on the host).
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

LOG = logging.getLogger(__name__)

NVIDIA_SMI = "nvidia-smi"
# The fields asked for, in nvidia-smi's own names (nvidia-smi --help-query-gpu), in this order.
GPU_FIELDS = (
    "index",
    "uuid",
    "persistence_mode",
    "memory.total",
    "memory.free",
    "ecc.errors.uncorrected.volatile.total",
    "retired_pages.pending",
    "remapped_rows.pending",
)
APP_FIELDS = ("gpu_uuid", "pid", "used_memory")
CSV_FORMAT = "--format=csv,noheader,nounits"
# what nvidia-smi prints for a field the GPU does not report
NOT_REPORTED = ("[N/A]", "N/A", "[Not Supported]", "Not Supported")
# what the operator sets to turn the check off (argument_specs documents it)
OFF_SETTING = "kdtree_service_preflight_skip: [gpu]"
NONE = "-"
THRESHOLD_SETTING = "kdtree_service_gpu_min_free_mib"

Runner = Callable[[Sequence[str], float], str]


class GpuReadError(Exception):
    """nvidia-smi could not be run or its answer could not be read (the check refuses)."""


@dataclass
class Gpu:
    index: int
    uuid: str
    persistence: bool
    memory_total_mib: int
    memory_free_mib: int
    ecc_uncorrected: int | None  # None: not reported by this GPU
    retired_pending: bool | None
    remapped_pending: bool | None


def query_argv(binary: str, fields: Sequence[str], what: str = "gpu") -> list[str]:
    return [binary, f"--query-{what}={','.join(fields)}", CSV_FORMAT]


def run_nvidia_smi(argv: Sequence[str], timeout_s: float) -> str:
    """stdout of one nvidia-smi query, bounded by timeout_s (GpuReadError for everything else)."""
    if not shutil.which(argv[0]):
        raise GpuReadError(f"{argv[0]} not found on the node (no NVIDIA driver?)")
    try:
        out = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            errors="replace",
            check=False,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired as exc:
        raise GpuReadError(f"{argv[0]} gave no answer within {timeout_s:g} s") from exc
    except OSError as exc:
        raise GpuReadError(f"{argv[0]} could not run: {exc}") from exc
    if out.returncode != 0:
        said = " ".join((out.stdout + " " + out.stderr).split())[:200]
        raise GpuReadError(f"{argv[0]} failed (rc={out.returncode}): {said}")
    return out.stdout


def _rows(text: str, width: int, what: str) -> list[list[str]]:
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != width:
            raise GpuReadError(f"{what} line {number} has {len(cells)} fields, not {width}: {line[:120]!r}")
        rows.append(cells)
    return rows


def _count(value: str, field: str) -> int | None:
    if value in NOT_REPORTED:
        return None
    if not value.isdigit():
        raise GpuReadError(f"{field} is {value!r}, not a count")
    return int(value)


def _flag(value: str, field: str, yes: str = "Yes", no: str = "No") -> bool | None:
    if value in NOT_REPORTED:
        return None
    if value not in (yes, no):
        raise GpuReadError(f"{field} is {value!r}, not {yes} or {no}")
    return value == yes


def _mib(value: str, field: str) -> int:
    found = _count(value, field)
    if found is None:
        raise GpuReadError(f"{field} is not reported")
    return found


def parse_gpus(text: str) -> list[Gpu]:
    """The GPUs of `nvidia-smi --query-gpu=<GPU_FIELDS> --format=csv,noheader,nounits`."""
    gpus = []
    for cells in _rows(text, len(GPU_FIELDS), "--query-gpu"):
        # _rows checked the width; no strict=: the hosts run Python 3.9 (tests/config.yml)
        values = dict(zip(GPU_FIELDS, cells))  # noqa: B905
        index = _count(values["index"], "index")
        persistence = _flag(values["persistence_mode"], "persistence_mode", "Enabled", "Disabled")
        if index is None or persistence is None:
            raise GpuReadError(f"index or persistence_mode not reported: {cells}")
        gpus.append(
            Gpu(
                index=index,
                uuid=values["uuid"],
                persistence=persistence,
                memory_total_mib=_mib(values["memory.total"], "memory.total"),
                memory_free_mib=_mib(values["memory.free"], "memory.free"),
                ecc_uncorrected=_count(
                    values["ecc.errors.uncorrected.volatile.total"], "ecc.errors.uncorrected.volatile.total"
                ),
                retired_pending=_flag(values["retired_pages.pending"], "retired_pages.pending"),
                remapped_pending=_flag(values["remapped_rows.pending"], "remapped_rows.pending"),
            )
        )
    return gpus


def parse_apps(text: str) -> list[tuple[str, int, int | None]]:
    """(gpu uuid, pid, MiB used or None when not reported) of `--query-compute-apps=<APP_FIELDS>`."""
    apps = []
    for uuid, pid, used in _rows(text, len(APP_FIELDS), "--query-compute-apps"):
        found = _count(pid, "pid")
        if found is None:
            raise GpuReadError("--query-compute-apps: pid not reported")
        apps.append((uuid, found, _count(used, "used_memory")))
    return apps


def gpu_problems(gpu: Gpu, own_mib: int, min_free_mib: int) -> list[str]:
    """Why a restart on this GPU could fail (empty: none)."""
    out = []
    if gpu.ecc_uncorrected:
        out.append(f"{gpu.ecc_uncorrected} uncorrectable ECC errors since the driver loaded")
    if gpu.remapped_pending:
        out.append("row remapping pending (reset the GPU)")
    if gpu.retired_pending:
        out.append("page retirement pending (reset the GPU)")
    if not gpu.persistence:
        out.append("persistence mode off")
    free = gpu.memory_free_mib + own_mib
    if free < min_free_mib:
        out.append(
            f"{free} MiB free once the unit stops ({gpu.memory_total_mib - free} MiB held by other "
            f"processes), below {THRESHOLD_SETTING} {min_free_mib}"
        )
    return out


def judge(
    gpus: list[Gpu],
    apps: list[tuple[str, int, int | None]],
    unit_pids: Sequence[int],
    expected: int,
    min_free_mib: int,
) -> dict[str, Any]:
    """The node's verdict: every GPU with its facts and problems, and the node's problems.
    `expected`: the schedulers this node runs (one GPU each); 0 when not known (the count is not judged)."""
    own: dict[str, int] = {}
    for uuid, pid, used in apps:
        if pid in unit_pids and used is not None:
            own[uuid] = own.get(uuid, 0) + used
    rows = []
    problems = []
    if expected and len(gpus) < expected:
        problems.append(f"{len(gpus)} GPUs, this node's share of the schedulers needs {expected}")
    for gpu in gpus:
        found = gpu_problems(gpu, own.get(gpu.uuid, 0), min_free_mib)
        problems += [f"GPU {gpu.index} ({gpu.uuid}): {p}" for p in found]
        rows.append(
            {
                "index": gpu.index,
                "uuid": gpu.uuid,
                "persistence": gpu.persistence,
                "ecc_uncorrected": gpu.ecc_uncorrected,
                "remapped_pending": gpu.remapped_pending,
                "retired_pending": gpu.retired_pending,
                "memory_total_mib": gpu.memory_total_mib,
                "memory_free_mib": gpu.memory_free_mib,
                "memory_unit_mib": own.get(gpu.uuid, 0),
                "problems": found,
            }
        )
    return {
        "checked": True,
        "ok": not problems,
        "expected": expected,
        "count": len(gpus),
        "min_free_mib": min_free_mib,
        "gpus": rows,
        "problems": problems,
    }


def check(
    expected: int,
    min_free_mib: int,
    unit_pids: Sequence[int] = (),
    timeout_s: float = 30.0,
    binary: str = NVIDIA_SMI,
    runner: Runner = run_nvidia_smi,
) -> dict[str, Any]:
    """Read the node with nvidia-smi and judge it; never raises. What cannot be read is a problem (ok
    False), never a healthy GPU."""
    try:
        gpus = parse_gpus(runner(query_argv(binary, GPU_FIELDS), timeout_s))
        if not gpus:
            raise GpuReadError(f"{binary} listed no GPU")
        apps = parse_apps(runner(query_argv(binary, APP_FIELDS, "compute-apps"), timeout_s))
    except GpuReadError as exc:
        LOG.info("GPU health unreadable: %s", exc)
        return {
            "checked": True,
            "ok": False,
            "expected": expected,
            "count": None,
            "min_free_mib": min_free_mib,
            "gpus": [],
            "problems": [f"cannot read the GPUs: {exc}"],
        }
    return judge(gpus, apps, unit_pids, expected, min_free_mib)


def not_checked(why: str) -> dict[str, Any]:
    """The result of a check that did not run (turned off, or nothing restarts)."""
    return {"checked": False, "ok": None, "why": why, "gpus": [], "problems": []}


def refusal(result: dict[str, Any]) -> str:
    """The preflight's message for a node `result` refuses."""
    return (
        "; ".join(result["problems"])
        + f". A restart would fail for reasons that are not the deploy's: fix the node (or turn the check "
        f"off with {OFF_SETTING})."
    )


def summary(result: dict[str, Any] | None) -> str:
    """One short cell: `ok 8`, `BAD 2 of 8`, `BAD (4 GPUs)`, `unreadable`, the first word of why it did
    not run (`off`, `skipped`), `-` without a result."""
    if not result:
        return "-"
    if not result.get("checked"):
        return str(result.get("why") or NONE).split(" ", maxsplit=1)[0]
    count = result.get("count")
    if count is None:
        return "unreadable"
    if result.get("ok"):
        return f"ok {count}"
    bad = sum(1 for gpu in result.get("gpus") or [] if gpu.get("problems"))
    return f"BAD {bad} of {count}" if bad else f"BAD ({count} GPUs)"
