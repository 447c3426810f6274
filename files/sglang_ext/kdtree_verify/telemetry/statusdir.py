"""Read every `<pid>.json` of a status directory (docs/CONTRACTS.md section 3b) into one summary.

    python -m kdtree_verify.statusdir --dir /run/kdtree [--json | --prom]
    python /path/to/kdtree_verify/telemetry/statusdir.py --dir /run/kdtree --prom

Stdlib only: a report or a smoke check on a host loads this file by path, without the package (the
``--prom`` text comes from `metrics.py` next to this file).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

SCHEMA = 1


def read_dir(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The status documents of `path` (`<digits>.json`, sorted by pid). A file that is not JSON
    (caught mid-rename on a foreign filesystem, or damaged) is skipped; `.tmp` files are ignored."""
    docs: list[dict[str, Any]] = []
    for entry in sorted(Path(path).glob("*.json"), key=lambda p: (len(p.stem), p.stem)):
        if not entry.stem.isdigit() or not entry.is_file():
            continue
        try:
            doc = json.loads(entry.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict):
            docs.append(doc)
    return docs


def summary(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """One document for many processes: totals over them, and the processes themselves."""
    kernel = runtime = compared = mismatches = 0
    device: int | None = None  # kernel_calls_device over the processes that report it
    max_diff = 0.0
    original: dict[str, int] = {}
    states: dict[str, int] = {}
    for doc in docs:
        counters = doc.get("counters") or {}
        kernel += int(counters.get("kernel_calls", 0))
        if "kernel_calls_device" in counters:
            device = (device or 0) + int(counters["kernel_calls_device"])
        runtime += int(counters.get("runtime_fallbacks", 0))
        for reason, value in (counters.get("original_calls") or {}).items():
            original[reason] = original.get(reason, 0) + int(value)
        validate = doc.get("validate")
        if isinstance(validate, dict):
            compared += int(validate.get("compared", 0))
            mismatches += int(validate.get("mismatches", 0))
            max_diff = max(max_diff, float(validate.get("max_diff", 0.0)))
        state = str(doc.get("state", ""))
        states[state] = states.get(state, 0) + 1
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "processes": len(docs),
        "states": states,
        "kernel_calls": kernel,
        "original_calls": dict(sorted(original.items())),
        "runtime_fallbacks": runtime,
        "validate": {"compared": compared, "mismatches": mismatches, "max_diff": max_diff},
        "pids": [doc.get("pid") for doc in docs],
        "docs": docs,
    }
    if device is not None:
        doc["kernel_calls_device"] = device
    return doc


def load_metrics() -> ModuleType:
    """The `metrics.py` next to this file, loaded by path (this file imports nothing of the package,
    so it works the same from the package, as a file run by path, or loaded by path)."""
    path = Path(__file__).with_name("metrics.py")
    spec = importlib.util.spec_from_file_location("kdtree_verify_metrics", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, help="the KDTREE_STATUS_DIR to read")
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="one JSON summary (default)")
    fmt.add_argument("--prom", action="store_true", help="Prometheus text format, every process")
    args = parser.parse_args(argv)
    docs = read_dir(args.dir)
    if args.prom:
        sys.stdout.write(load_metrics().render(docs))
    else:
        json.dump(summary(docs), sys.stdout, indent=2, sort_keys=True, default=str)
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
