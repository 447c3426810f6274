"""The Prometheus text format (0.0.4) of status documents (`<pid>.json`, docs/CONTRACTS.md section 3b):
the node-exporter textfile `<pid>.prom` and ``python -m kdtree_verify.status --prom``.

Stdlib only and no import of the package: `statusdir.py` loads this file by path on a host.
Every sample carries ``pid="<pid>"``; counters end in ``_total``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

CALLS = "kdtree_verify_calls_total"
KERNEL_LAUNCHES = "kdtree_verify_kernel_launches_total"
RUNTIME_FALLBACKS = "kdtree_verify_runtime_fallbacks_total"
VALIDATE_COMPARED = "kdtree_verify_validate_compared_total"
VALIDATE_MISMATCHES = "kdtree_verify_validate_mismatches_total"
VALIDATE_MAX_ABS_DIFF = "kdtree_verify_validate_max_abs_diff"
KERNEL_SECONDS = "kdtree_verify_kernel_seconds_total"
ORIGINAL_SECONDS = "kdtree_verify_original_seconds_total"
TIMED_CALLS = "kdtree_verify_timed_calls_total"
UNTIMED_CALLS = "kdtree_verify_untimed_calls_total"
PATCH_INFO = "kdtree_verify_patch_info"
UPDATED = "kdtree_verify_status_updated_timestamp_seconds"

# The keys of a timing bucket in the status document and the labels of its series, the one owner
# (telemetry/timing.py writes them, statusdir.py checks them).
BUCKET_LABELS = ("batch", "draft", "prefix", "heads")
# The untimed_<why> counts of the status document's timing.
UNTIMED_WHY = ("warmup", "captured", "backlog")

# name -> (type, help). The order is the order of the text.
FAMILIES: dict[str, tuple[str, str]] = {
    CALLS: (
        "counter",
        "forward_extend calls by the path whose output was returned: the kdtree kernel, or the "
        "original method and why (calls replayed from a CUDA graph are not counted).",
    ),
    KERNEL_LAUNCHES: (
        "counter",
        "Library runs counted on the device (CUDA graph replays included; mode on and validate).",
    ),
    RUNTIME_FALLBACKS: ("counter", "Times the kernel library failed at run time (load, GPU check or call)."),
    VALIDATE_COMPARED: ("counter", "Validate mode: calls whose kernel output was compared with Triton's."),
    VALIDATE_MISMATCHES: ("counter", "Validate mode: compared calls beyond the tolerance."),
    VALIDATE_MAX_ABS_DIFF: ("gauge", "Validate mode: largest max abs difference kernel vs Triton so far."),
    KERNEL_SECONDS: (
        "counter",
        "Validate mode: seconds of the kdtree kernel's attention over the timed calls, by shape bucket.",
    ),
    ORIGINAL_SECONDS: (
        "counter",
        "Validate mode: seconds of the original's attention (KV write excluded) over the same timed calls.",
    ),
    TIMED_CALLS: ("counter", "Validate mode: calls timed on both paths, by shape bucket (warm-up excluded)."),
    UNTIMED_CALLS: (
        "counter",
        "Validate mode: calls not timed, by why (warmup, captured under a CUDA graph, backlog of events).",
    ),
    PATCH_INFO: ("gauge", "The patch in this process: mode, state, library build and SGLang version."),
    UPDATED: ("gauge", "When this process last wrote its status (Unix time)."),
}


def escape_label(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float | int) -> str:
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def samples(doc: dict[str, Any]) -> list[tuple[str, dict[str, str], float | int]]:
    """(metric name, labels, value) of one status document."""
    pid = str(doc.get("pid", ""))
    out: list[tuple[str, dict[str, str], float | int]] = []
    counters = doc.get("counters") or {}
    out.append((CALLS, {"pid": pid, "path": "kernel"}, int(counters.get("kernel_calls", 0))))
    for reason, value in sorted((counters.get("original_calls") or {}).items()):
        out.append((CALLS, {"pid": pid, "path": "original", "reason": str(reason)}, int(value)))
    if "kernel_calls_device" in counters:
        out.append((KERNEL_LAUNCHES, {"pid": pid}, int(counters["kernel_calls_device"])))
    out.append((RUNTIME_FALLBACKS, {"pid": pid}, int(counters.get("runtime_fallbacks", 0))))
    validate = doc.get("validate")
    if isinstance(validate, dict):
        out.append((VALIDATE_COMPARED, {"pid": pid}, int(validate.get("compared", 0))))
        out.append((VALIDATE_MISMATCHES, {"pid": pid}, int(validate.get("mismatches", 0))))
        out.append((VALIDATE_MAX_ABS_DIFF, {"pid": pid}, float(validate.get("max_diff", 0.0))))
    timing = doc.get("timing")
    if isinstance(timing, dict):
        for bucket in timing.get("buckets") or []:
            labels = {"pid": pid, **{key: str(bucket.get(key, "")) for key in BUCKET_LABELS}}
            out.append((KERNEL_SECONDS, labels, float(bucket.get("kernel_s", 0.0))))
            out.append((ORIGINAL_SECONDS, labels, float(bucket.get("original_s", 0.0))))
            out.append((TIMED_CALLS, labels, int(bucket.get("timed_calls", 0))))
        for why in UNTIMED_WHY:
            out.append((UNTIMED_CALLS, {"pid": pid, "why": why}, int(timing.get(f"untimed_{why}", 0))))
    info = {
        "pid": pid,
        "mode": str(doc.get("mode", "")),
        "state": str(doc.get("state", "")),
        "build_id": str(doc.get("build_id", "")),
        "sglang": str(doc.get("sglang", "")),
    }
    out.append((PATCH_INFO, info, 1))
    if "updated" in doc:
        out.append((UPDATED, {"pid": pid}, float(doc["updated"])))
    return out


def render(docs: Iterable[dict[str, Any]]) -> str:
    """The text format of any number of status documents: one HELP/TYPE per family, then its
    samples, one per process."""
    by_family: dict[str, list[str]] = {name: [] for name in FAMILIES}
    for doc in docs:
        for name, labels, value in samples(doc):
            text = ",".join(f'{key}="{escape_label(val)}"' for key, val in labels.items())
            by_family[name].append(f"{name}{{{text}}} {format_value(value)}")
    lines: list[str] = []
    for name, rows in by_family.items():
        if not rows:
            continue
        kind, help_text = FAMILIES[name]
        lines.append(f"# HELP {name} {escape_help(help_text)}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(rows)
    return "\n".join(lines) + "\n" if lines else ""
