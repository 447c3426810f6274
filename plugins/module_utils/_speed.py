"""Speed and coverage, defined once: what the report shows and promotion judges (docs/operations.md,
"Modes").

Speedup: over the timed calls of the current run (validate mode's A/B timing, the patch's
kdtree_verify/telemetry/timing.py: both paths on the same inputs, the KV write in neither, warm-up
excluded), the sum of the original's seconds divided by the sum of the kernel's. A ratio of sums, so
every call weighs what it cost; above 1 the kernel is faster. The same figure per shape bucket
(batch size, draft tokens, prefix-length bucket, heads); a bucket is shown, and can be the worst,
only with at least MIN_BUCKET_CALLS timed calls.

Coverage: of the target-verify calls the dispatch saw (every counted call but those of another
forward mode or of the draft runner: NOT_TARGET_VERIFY), the share the kernel served: mode on's
kernel calls, and validate's compared calls (the kernel ran on them). The rest by reason, largest
first.

Odd evidence refuses, never counts as zero: a bucket without a field, a count that is not an int
>= 0, a time that is not a finite number >= 0, no kernel (or original) time with timed calls, seconds
without a timed call, a time per call outside what a verify call can physically take
([MIN_CALL_S, MAX_CALL_S] on either path), or sums that overflow gives a `problem` and no figure.
The status files were checked by the patch's statusdir.py already; this checks again what it is
handed (a report row's JSON, a test's synthetic evidence).

Stdlib only (module_utils: the report module runs it on the host, promotion on the controller).
"""

from __future__ import annotations

import math
from typing import Any

# A bucket's speedup is shown (and can be the worst) with at least this many timed calls.
MIN_BUCKET_CALLS = 10
# The bucket's keys in a status document (the patch's metrics.BUCKET_LABELS, its owner) and the
# short prefixes of its label: b<batch>/n<draft>/<prefix>/h<heads>.
LABEL_PARTS = (("batch", "b"), ("draft", "n"), ("prefix", ""), ("heads", "h"))
SECONDS = ("original_s", "kernel_s")
# What one timed verify call can take on either path, in seconds (the one owner of these bounds): no
# launch of a CUDA kernel, let alone attention over a prefix, completes in under a microsecond (a launch
# alone is several), and a call of a minute would have tripped every serving timeout first. A time per
# call outside them is fabricated or broken evidence, never a speedup.
MIN_CALL_S = 1e-6
MAX_CALL_S = 60.0
# original_calls slugs (the patch's counters.py) that are not target-verify calls of the target model
NOT_TARGET_VERIFY = ("not_verify", "draft_runner")
# validate's compared calls: the kernel ran on them (counters.py VALIDATE_SLUGS)
SERVED_IN_VALIDATE = "validate"
TOP_REASONS = 3


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _seconds(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def bucket_label(bucket: dict[str, Any]) -> str:
    return "/".join(f"{short}{bucket.get(key, '?')}" for key, short in LABEL_PARTS)


def bucket_problem(bucket: Any) -> str:
    """'' when `bucket` is timing evidence this module understands, else why not."""
    if not isinstance(bucket, dict):
        return f"a bucket is {type(bucket).__name__}, not an object"
    label = bucket_label(bucket)
    for key, _short in LABEL_PARTS:
        if key not in bucket:
            return f"bucket {label} has no {key}"
    calls = bucket.get("timed_calls")
    if not _count(calls):
        return f"bucket {label} timed_calls is {calls!r}, not a count"
    for key in SECONDS:
        if key not in bucket:
            return f"bucket {label} has no {key}"
        if not _seconds(bucket[key]):
            return f"bucket {label} {key} is {bucket[key]!r}, not a time (a finite number >= 0)"
        if calls and not bucket[key]:
            return f"bucket {label} {key} is 0 with {calls} timed calls"
        if not calls and bucket[key]:
            return f"bucket {label} {key} is {bucket[key]!r} with 0 timed calls"
        if calls:
            per_call = float(bucket[key]) / calls
            if not MIN_CALL_S <= per_call <= MAX_CALL_S:
                return (
                    f"bucket {label} {key} is {per_call:.3g} s per call, outside what a verify call takes "
                    f"([{MIN_CALL_S:g}, {MAX_CALL_S:g}] s)"
                )
    return ""


def ratio(original_s: float, kernel_s: float) -> float:
    """The speedup of sums (callers pass checked, positive kernel time)."""
    return float(original_s) / float(kernel_s)


def speed(buckets: Any, min_bucket_calls: int = MIN_BUCKET_CALLS) -> dict[str, Any]:
    """Of timing buckets (one scheduler's or several's: a bucket's sums add up by its label):
    {timed_calls, original_s, kernel_s, speedup (None without a timed call), buckets (each with
    its label and speedup, None below `min_bucket_calls`), worst_bucket ({label, speedup} or None),
    problem ('' or why there is no figure)}."""
    out: dict[str, Any] = {
        "timed_calls": 0,
        "original_s": 0.0,
        "kernel_s": 0.0,
        "speedup": None,
        "buckets": [],
        "worst_bucket": None,
        "problem": "",
    }
    if not isinstance(buckets, list):
        out["problem"] = f"timing buckets are {type(buckets).__name__}, not a list"
        return out
    grouped: dict[str, dict[str, Any]] = {}  # the same bucket of several schedulers: summed
    for bucket in buckets:
        problem = bucket_problem(bucket)
        if problem:
            out["problem"] = problem
            return out
        label = bucket_label(bucket)
        item = grouped.setdefault(
            label,
            {
                **{key: bucket[key] for key, _short in LABEL_PARTS},
                "label": label,
                "timed_calls": 0,
                "original_s": 0.0,
                "kernel_s": 0.0,
            },
        )
        item["timed_calls"] += bucket["timed_calls"]
        for key in SECONDS:
            item[key] += float(bucket[key])
    for label in sorted(grouped):
        item = grouped[label]
        calls = item["timed_calls"]
        shown = calls >= min_bucket_calls and calls > 0
        item["speedup"] = ratio(item["original_s"], item["kernel_s"]) if shown else None
        out["buckets"].append(item)
        out["timed_calls"] += calls
        out["original_s"] += item["original_s"]
        out["kernel_s"] += item["kernel_s"]
    # every summand is finite and >= 0, so a bucket's sum that overflows makes the host's overflow too
    if not (math.isfinite(out["original_s"]) and math.isfinite(out["kernel_s"])):
        out.update(timed_calls=0, original_s=0.0, kernel_s=0.0, buckets=[])
        out["problem"] = "the timing sums overflow (not finite)"
        return out
    if out["timed_calls"]:
        out["speedup"] = ratio(out["original_s"], out["kernel_s"])
    shown = [b for b in out["buckets"] if b["speedup"] is not None]
    if shown:
        worst = min(shown, key=lambda b: b["speedup"])
        out["worst_bucket"] = {"label": worst["label"], "speedup": worst["speedup"]}
    return out


def coverage(counters: list[dict[str, Any]]) -> dict[str, Any]:
    """Over status documents' ``counters`` (kernel_calls, original_calls by slug): {seen, served,
    share (None when no target-verify call was seen), not_served ({reason: calls}, largest first,
    at most TOP_REASONS), problem}."""
    seen = served = 0
    rest: dict[str, int] = {}
    for item in counters:
        if not isinstance(item, dict):
            return {
                "seen": 0,
                "served": 0,
                "share": None,
                "not_served": {},
                "problem": "counters not an object",
            }
        kernel = item.get("kernel_calls", 0)
        calls = item.get("original_calls", {})
        if not _count(kernel) or not isinstance(calls, dict) or not all(_count(v) for v in calls.values()):
            problem = f"counters this does not understand: kernel_calls {kernel!r}, original_calls {calls!r}"
            return {"seen": 0, "served": 0, "share": None, "not_served": {}, "problem": problem}
        served += kernel + calls.get(SERVED_IN_VALIDATE, 0)
        seen += kernel
        for reason, value in calls.items():
            if reason in NOT_TARGET_VERIFY:
                continue
            seen += value
            if reason != SERVED_IN_VALIDATE and value:
                rest[reason] = rest.get(reason, 0) + value
    top = dict(sorted(rest.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_REASONS])
    return {
        "seen": seen,
        "served": served,
        "share": served / seen if seen else None,
        "not_served": top,
        "problem": "",
    }


def speed_text(figure: dict[str, Any] | None) -> str:
    """'1.23 (worst b1/n4/le256/h16 0.91)', '0.12', '' (no timing)."""
    if not figure:
        return ""
    if figure.get("problem"):
        return "REFUSED"
    if figure.get("speedup") is None:
        return ""
    text = f"{figure['speedup']:.2f}"
    worst = figure.get("worst_bucket")
    if worst:
        text += f" (worst {worst['label']} {worst['speedup']:.2f})"
    return text


def coverage_text(figure: dict[str, Any] | None) -> str:
    """'100%', '62% (not_mla 30, dtype 2)', '' (no target-verify call seen)."""
    if not figure or figure.get("share") is None:
        return "REFUSED" if figure and figure.get("problem") else ""
    text = f"{100 * figure['share']:.0f}%"
    if figure.get("not_served"):
        text += " (" + ", ".join(f"{k} {v}" for k, v in figure["not_served"].items()) + ")"
    return text
