"""Read every `<pid>.json` of a status directory (docs/CONTRACTS.md section 3b) into one summary.

    python -m kdtree_verify.statusdir --dir /run/kdtree [--json | --prom]
    python /path/to/kdtree_verify/telemetry/statusdir.py --dir /run/kdtree --prom

Stdlib only: a report or a smoke check on a host loads this file by path, without the package (the
``--prom`` text comes from `metrics.py` next to this file).

This file is the one validating reader of a status document: the smoke check, the fleet report and
promote use its check() / scan() / freshness_problem() / nonfinite_problem(). A file is read only
when it is a regular `<pid>.json` (never a link, FIFO or device; at most MAX_BYTES) whose `pid`
field is its name's; a field of the wrong type (a string, bool, negative or list for a count) is
refused, never read as 0; NaN and inf in the validate statistics are kept, never dropped by a max.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import stat
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

SCHEMA = 1
# What the reader accepts (docs/operations.md "Faults the gate refuses"). A status document is a few
# KiB and nests three levels deep; anything larger or deeper is not one.
MAX_BYTES = 1 << 20
MAX_DEPTH = 8
# Freshness, the one owner: a document is fresh when its `updated` lies within FRESH_INTERVALS status
# intervals plus FRESH_SLACK_S of now (and not more than FRESH_SLACK_S ahead of it). The smoke
# check's wait for a rewrite, the report and promote all use fresh_bound_s().
FRESH_INTERVALS = 3
FRESH_SLACK_S = 10.0
COUNTERS_COUNTS = ("kernel_calls", "kernel_calls_device", "runtime_fallbacks")
VALIDATE_COUNTS = ("compared", "mismatches")
# calls whose kernel / original output held a NaN or an infinity (validate.py); absent in older files
VALIDATE_NONFINITE = ("nonfinite_kernel", "nonfinite_original")
# validate mode's timing (telemetry/timing.py): its counts and a bucket's sums, in seconds
TIMING_COUNTS = ("warmup_calls", "untimed_warmup", "untimed_captured", "untimed_backlog", "pending")
TIMING_SECONDS = ("kernel_s", "original_s")
TEXT_FIELDS = ("mode", "state", "reason", "title", "build_id", "lib", "sglang")


class Refused(ValueError):
    """A status file or document this reader does not understand (the message says why)."""


def count_problem(value: Any) -> str:
    """'' when `value` is a count (an int >= 0, not a bool), else what it is instead."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{type(value).__name__} {_short(value)}, not a count"
    if value < 0:
        return f"{value}, a negative count"
    return ""


def number_problem(value: Any, finite: bool = True) -> str:
    """'' when `value` is a number (int or float, not a bool; finite unless `finite` is False)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{type(value).__name__} {_short(value)}, not a number"
    if finite and not math.isfinite(value):
        return f"{value!r}, not a finite number"
    return ""


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _depth_problem(doc: Any) -> str:
    """'' when `doc` nests at most MAX_DEPTH containers deep (iterative: no recursion)."""
    stack = [(doc, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_DEPTH:
                return f"nested deeper than {MAX_DEPTH} levels"
            values = item.values() if isinstance(item, dict) else item
            stack.extend((value, depth + 1) for value in values)
    return ""


def load_bytes(raw: bytes) -> dict[str, Any]:
    """The JSON object of a status file's bytes; Refused for anything else (too large, not UTF-8,
    not JSON, too deep, not an object)."""
    if len(raw) > MAX_BYTES:
        raise Refused(f"larger than {MAX_BYTES} bytes")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise Refused(f"nested deeper than {MAX_DEPTH} levels") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise Refused(f"not JSON ({type(exc).__name__})") from None
    problem = _depth_problem(doc)
    if problem:
        raise Refused(problem)
    if not isinstance(doc, dict):
        raise Refused(f"a JSON {type(doc).__name__}, not an object")
    return doc


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """At most MAX_BYTES + 1 bytes of a regular file, never following a link and never blocking on
    a FIFO or a device; Refused for anything else, OSError when it cannot be opened or read."""
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        raise Refused("not a regular file")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped after the lstat
            raise Refused("not a regular file")
        chunks: list[bytes] = []
        left = MAX_BYTES + 1
        while left > 0:
            chunk = os.read(fd, min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def name_pid(name: str) -> int | None:
    """The pid of a status file's name `<pid>.json` (digits only), else None."""
    stem, dot, ext = name.partition(".")
    if dot and ext == "json" and stem.isdigit() and stem == str(int(stem)) and int(stem) > 0:
        return int(stem)
    return None


def check(doc: Any, pid: int | None = None) -> dict[str, Any]:
    """`doc` when it is a status document this reader understands, else Refused naming the first
    field it does not: `pid` a count > 0 (equal to `pid`, the file name's, when given); `updated`
    and `since` finite numbers; counts (ints >= 0, not bools, strings or lists) for every counter and
    validate count; validate.max_diff a number >= 0 or NaN/+inf (kept: non-finite evidence, judged by
    nonfinite_problem); the text fields strings. A field may be absent (an older patch, or the
    marker's first write), never of another type."""
    if not isinstance(doc, dict):
        raise Refused(f"a {type(doc).__name__}, not a JSON object")
    problem = _depth_problem(doc)
    if problem:
        raise Refused(problem)
    if "pid" not in doc:
        raise Refused("no pid")
    own = doc["pid"]
    problem = count_problem(own)
    if problem or own == 0:
        raise Refused(f"pid is {problem or '0'}")
    if pid is not None and own != pid:
        raise Refused(f"pid {own} in the file named for pid {pid} (a copy?)")
    for key in ("updated", "since", "updated_mono"):
        if key in doc and number_problem(doc[key]):
            raise Refused(f"{key} is {number_problem(doc[key])}")
    for key in TEXT_FIELDS:
        if key in doc and not isinstance(doc[key], str):
            raise Refused(f"{key} is {type(doc[key]).__name__}, not a string")
    _check_counters(doc.get("counters"), "counters" in doc)
    _check_validate(doc.get("validate"), "validate" in doc)
    _check_timing(doc.get("timing"), "timing" in doc)
    return doc


def _check_counters(counters: Any, present: bool) -> None:
    if not present:
        return
    if not isinstance(counters, dict):
        raise Refused(f"counters is {type(counters).__name__}, not an object")
    for key in COUNTERS_COUNTS:
        if key in counters and count_problem(counters[key]):
            raise Refused(f"counters.{key} is {count_problem(counters[key])}")
    calls = counters.get("original_calls", {})
    if not isinstance(calls, dict):
        raise Refused(f"counters.original_calls is {type(calls).__name__}, not an object")
    for reason, value in calls.items():
        if count_problem(value):
            raise Refused(f"counters.original_calls.{reason} is {count_problem(value)}")
    reason = counters.get("runtime_fallback_reason", "")
    if not isinstance(reason, str):
        raise Refused(f"counters.runtime_fallback_reason is {type(reason).__name__}, not a string")


def _check_validate(validate: Any, present: bool) -> None:
    if not present:
        return
    if not isinstance(validate, dict):
        raise Refused(f"validate is {type(validate).__name__}, not an object")
    for key in (*VALIDATE_COUNTS, "max_diff"):
        if key not in validate:
            raise Refused(f"validate has no {key}")
    for key in (*VALIDATE_COUNTS, *VALIDATE_NONFINITE):
        if key in validate and count_problem(validate[key]):
            raise Refused(f"validate.{key} is {count_problem(validate[key])}")
    diff = validate["max_diff"]
    problem = number_problem(diff, finite=False)
    if problem or diff < 0:  # NaN < 0 is False: NaN and +inf are kept (non-finite evidence)
        raise Refused(f"validate.max_diff is {problem or f'{diff!r}, a negative difference'}")


def _check_timing(timing: Any, present: bool) -> None:
    """Validate mode's timing (telemetry/timing.py): every field present and of its type; seconds
    finite and >= 0; a bucket with timed calls and no kernel (or original) time is refused (a clock
    that did not run is no evidence of speed, never a speedup of infinity)."""
    if not present:
        return
    if not isinstance(timing, dict):
        raise Refused(f"timing is {type(timing).__name__}, not an object")
    for key in TIMING_COUNTS:
        if key not in timing:
            raise Refused(f"timing has no {key}")
        if count_problem(timing[key]):
            raise Refused(f"timing.{key} is {count_problem(timing[key])}")
    if not isinstance(timing.get("clock"), str):
        raise Refused("timing.clock is not a string")
    buckets = timing.get("buckets")
    if not isinstance(buckets, list):
        raise Refused(f"timing.buckets is {type(buckets).__name__}, not a list")
    labels = load_sibling("metrics").BUCKET_LABELS
    for index, bucket in enumerate(buckets):
        where = f"timing.buckets[{index}]"
        if not isinstance(bucket, dict):
            raise Refused(f"{where} is {type(bucket).__name__}, not an object")
        for key in (*labels, "timed_calls", *TIMING_SECONDS):
            if key not in bucket:
                raise Refused(f"{where} has no {key}")
        for key in ("batch", "draft", "heads", "timed_calls"):
            if count_problem(bucket[key]):
                raise Refused(f"{where}.{key} is {count_problem(bucket[key])}")
        if not isinstance(bucket["prefix"], str):
            raise Refused(f"{where}.prefix is not a string")
        for key in TIMING_SECONDS:
            value = bucket[key]
            problem = number_problem(value) or ("a negative time" if value < 0 else "")
            if problem:
                raise Refused(f"{where}.{key} is {problem}")
            if bucket["timed_calls"] > 0 and value == 0:
                raise Refused(f"{where}.{key} is 0 with {bucket['timed_calls']} timed calls")


def merge_timing(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The timing of many checked documents: untimed counts summed, buckets summed by their labels
    (sums only: the speedup is the fleet's module_utils/_speed.py's, defined once)."""
    labels = load_sibling("metrics").BUCKET_LABELS
    merged: dict[str, Any] = dict.fromkeys(TIMING_COUNTS, 0)
    buckets: dict[tuple[Any, ...], dict[str, Any]] = {}
    for doc in docs:
        timing = doc.get("timing")
        if not isinstance(timing, dict):
            continue
        for key in TIMING_COUNTS:
            merged[key] += timing[key]
        for bucket in timing["buckets"]:
            key = tuple(bucket[name] for name in labels)
            into = buckets.setdefault(
                key,
                {
                    **dict(zip(labels, key, strict=True)),
                    "timed_calls": 0,
                    **dict.fromkeys(TIMING_SECONDS, 0.0),
                },
            )
            into["timed_calls"] += bucket["timed_calls"]
            for name in TIMING_SECONDS:
                into[name] += float(bucket[name])
    merged["buckets"] = [buckets[key] for key in sorted(buckets, key=str)]
    return merged


def read_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The checked document of one status file `<pid>.json` (read_bytes, load_bytes, check with the
    name's pid); Refused or OSError otherwise."""
    pid = name_pid(os.path.basename(os.fspath(path)))
    if pid is None:
        raise Refused("not named <pid>.json")
    return check(load_bytes(read_bytes(path)), pid)


def scan(path: str | os.PathLike[str], pids: Any = None) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """(the checked documents of `path`'s `<pid>.json` files, sorted by pid; {file name: why refused}).
    With `pids` (a collection of ints) only those pids' files are read: the rest (a copy, an earlier
    run's process) is neither read nor counted. A file that vanished while listed is skipped; `.tmp`
    files and other names are ignored. OSError when the directory cannot be listed."""
    wanted = None if pids is None else set(pids)
    docs: list[dict[str, Any]] = []
    refused: dict[str, str] = {}
    for name in sorted(os.listdir(path)):
        pid = name_pid(name)
        if pid is None or (wanted is not None and pid not in wanted):
            continue
        try:
            docs.append(read_file(os.path.join(path, name)))
        except FileNotFoundError:
            continue
        except Refused as exc:
            refused[name] = str(exc)
        except OSError as exc:
            refused[name] = f"unreadable: {exc.strerror or exc}"
    docs.sort(key=lambda d: d["pid"])
    return docs, refused


def read_dir(path: str | os.PathLike[str], pids: Any = None) -> list[dict[str, Any]]:
    """The checked status documents of `path` (scan() without the refusals)."""
    return scan(path, pids)[0]


def fresh_bound_s(interval_s: Any) -> float:
    """How old a fresh document's `updated` may be: FRESH_INTERVALS status intervals + FRESH_SLACK_S.
    Refused for an interval the patch itself would not use (config.py MIN_/MAX_STATUS_INTERVAL):
    a huge one would make every wait on it endless."""
    config = load_sibling("config")
    low, high = config.MIN_STATUS_INTERVAL, config.MAX_STATUS_INTERVAL
    if number_problem(interval_s) or not low <= interval_s <= high:
        raise Refused(f"status interval {interval_s!r} is not a number of seconds in [{low:g}, {high:g}]")
    return FRESH_INTERVALS * float(interval_s) + FRESH_SLACK_S


def freshness_problem(doc: dict[str, Any], now: float, interval_s: float) -> str:
    """'' when `doc`'s `updated` is within fresh_bound_s(interval_s) before `now` (and at most
    FRESH_SLACK_S after it), else why not (no `updated`: a publisher that never ran; too old: a dead
    or stuck publisher; from the future: not this host's clock)."""
    updated = doc.get("updated")
    if number_problem(updated):
        return "no update time"
    age = now - float(updated)
    if age > fresh_bound_s(interval_s):
        return f"last updated {age:.0f} s ago (more than {fresh_bound_s(interval_s):g} s: a dead publisher?)"
    if age < -FRESH_SLACK_S:
        return f"updated {-age:.0f} s in the future"
    return ""


def nan_max(values: Any) -> float:
    """max() that keeps NaN (Python's max drops it or not depending on the order), 0.0 when empty."""
    out = 0.0
    for value in values:
        value = float(value)
        if math.isnan(value):
            return math.nan
        out = max(out, value)
    return out


def nonfinite_problem(validate: Any) -> str:
    """'' when validate statistics hold no non-finite value, else the refusal's own reason:
    "non-finite values in validate: kernel output NaN/inf in 3 calls, ..."."""
    if not isinstance(validate, dict):
        return ""
    parts = []
    for key, what in (("nonfinite_kernel", "kernel output"), ("nonfinite_original", "original output")):
        value = validate.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            parts.append(f"{what} NaN/inf in {value} calls")
    diff = validate.get("max_diff")
    if isinstance(diff, float) and not math.isfinite(diff):
        parts.append(f"largest difference {diff!r}")
    return "non-finite values in validate: " + ", ".join(parts) if parts else ""


def summary(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """One document for many processes: totals over them, and the processes themselves. Every
    document is check()ed first (Refused for one this reader does not understand); the largest
    difference keeps NaN and inf (nan_max)."""
    kernel = runtime = compared = mismatches = 0
    device: int | None = None  # kernel_calls_device over the processes that report it
    diffs: list[float] = []
    nonfinite = dict.fromkeys(VALIDATE_NONFINITE, 0)
    original: dict[str, int] = {}
    states: dict[str, int] = {}
    for doc in docs:
        check(doc)
        counters = doc.get("counters") or {}
        kernel += counters.get("kernel_calls", 0)
        if "kernel_calls_device" in counters:
            device = (device or 0) + counters["kernel_calls_device"]
        runtime += counters.get("runtime_fallbacks", 0)
        for reason, value in (counters.get("original_calls") or {}).items():
            original[reason] = original.get(reason, 0) + value
        validate = doc.get("validate")
        if isinstance(validate, dict):
            compared += validate["compared"]
            mismatches += validate["mismatches"]
            diffs.append(validate["max_diff"])
            for key in VALIDATE_NONFINITE:
                nonfinite[key] += validate.get(key, 0)
        state = str(doc.get("state", ""))
        states[state] = states.get(state, 0) + 1
    merged: dict[str, Any] = {"compared": compared, "mismatches": mismatches, "max_diff": nan_max(diffs)}
    merged.update((key, value) for key, value in nonfinite.items() if value)
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "processes": len(docs),
        "states": states,
        "kernel_calls": kernel,
        "original_calls": dict(sorted(original.items())),
        "runtime_fallbacks": runtime,
        "validate": merged,
        "pids": [doc.get("pid") for doc in docs],
        "docs": docs,
    }
    if any(isinstance(d.get("timing"), dict) for d in docs):
        doc["timing"] = merge_timing(docs)
    problem = nonfinite_problem(merged)
    if problem:
        doc["problems"] = [problem]
    if device is not None:
        doc["kernel_calls_device"] = device
    return doc


# The stdlib-only files this one loads, relative to this file (it imports nothing of the package, so
# it works the same from the package, run by path, or loaded by path).
SIBLINGS = {"metrics": "metrics.py", "config": "../config.py"}


def load_sibling(name: str) -> ModuleType:
    """The package's `<name>` file (SIBLINGS: metrics.py, config.py), loaded by path."""
    path = (Path(__file__).parent / SIBLINGS[name]).resolve()
    spec = importlib.util.spec_from_file_location(f"kdtree_verify_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_metrics() -> ModuleType:
    """The `metrics.py` next to this file, loaded by path."""
    return load_sibling("metrics")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, help="the KDTREE_STATUS_DIR to read")
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="one JSON summary (default)")
    fmt.add_argument("--prom", action="store_true", help="Prometheus text format, every process")
    args = parser.parse_args(argv)
    docs, refused = scan(args.dir)
    for name, why in sorted(refused.items()):
        sys.stderr.write(f"statusdir: {name} refused: {why}\n")
    if args.prom:
        sys.stdout.write(load_metrics().render(docs))
    else:
        json.dump(summary(docs), sys.stdout, indent=2, sort_keys=True, default=str)
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
