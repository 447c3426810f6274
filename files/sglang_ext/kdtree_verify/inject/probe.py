"""Would the kdtree patch be active in SGLang's workers started with *this* environment?

Run it with the exact environment of the service (same python, same PYTHONPATH, same KDTREE_*):

    python -m kdtree_verify.probe [--json] [--module sglang.srt.layers.attention.triton_backend]

It starts a child with multiprocessing spawn (as SGLang starts its schedulers), imports SGLang's
triton backend there, and reports what the child saw: patch state, the sitecustomize files that
ran, the NCCL_* variables, the library it would load. Exit 0 only when the patch is active there.
It asks the child, never guesses: on Debian's python a sitecustomize.py in a venv's site-packages
is shadowed by /usr/lib/python3.X/sitecustomize.py, and the child shows exactly that.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
from typing import Any

from kdtree_verify.inject import importhook
from kdtree_verify.target import NO_LIBRARY_REASON, TARGET_MODULE

EXIT_ACTIVE, EXIT_NOT_ACTIVE, EXIT_PROBE_FAILED = 0, 1, 2
RECORD_MODULE = "_kdtree_sitecustomize_record"  # sitecustomize.py's _RECORD_NAME


def _sitecustomize_report() -> dict[str, Any]:
    module = sys.modules.get("sitecustomize")
    if module is None:
        return {"module": None, "ran": []}
    # The hook's per-process record (sitecustomize.py) also knows a chain that reached it from another
    # file; without it, the sitecustomize module's own list or just its file.
    record = sys.modules.get(RECORD_MODULE)
    ran = getattr(record, "ran", None) or getattr(module, "KDTREE_RAN", [getattr(module, "__file__", None)])
    return {"module": getattr(module, "__file__", None), "ran": [p for p in ran if p]}


def _library_report() -> dict[str, Any]:
    lib = os.environ.get("KDTREE_LIB", "")
    out: dict[str, Any] = {"path": lib or None}
    if not lib:
        out["error"] = NO_LIBRARY_REASON
        return out
    try:
        from kdtree_verify.kernel import binding as kernel

        out.update(kernel.probe_library(lib))
    except ImportError as exc:
        out["error"] = f"kernel binding not importable: {exc}"
    except Exception as exc:
        out["error"] = str(exc)
    return out


def child_report(module_name: str) -> dict[str, Any]:
    """Runs in the spawned child."""
    report: dict[str, Any] = {
        "pid": os.getpid(),
        "python": sys.executable,
        "sitecustomize": _sitecustomize_report(),
        "hook_installed": importhook.is_installed(),
        "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        "kdtree_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("KDTREE_")},
        "library": _library_report(),
    }
    try:
        import importlib

        importlib.import_module(module_name)
        report["import"] = {"module": module_name, "ok": True}
    except BaseException as exc:  # the backend import may fail in many ways; report it
        report["import"] = {"module": module_name, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
    lifecycle = sys.modules.get("kdtree_verify.inject.lifecycle")
    if lifecycle is None:
        report["patch"] = {
            "state": "absent",
            "reason": "kdtree_verify.inject.lifecycle was never imported in the child",
        }
    else:
        report["patch"] = lifecycle.status()
    report["active"] = report["patch"].get("state") == "active"
    return report


def _child_main(conn: Any, module_name: str) -> None:
    try:
        conn.send(child_report(module_name))
    except BaseException as exc:
        conn.send({"error": f"{type(exc).__name__}: {exc}", "active": False})
    finally:
        conn.close()


def run_probe(module_name: str = TARGET_MODULE, timeout: float = 300.0) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    parent_conn, child_conn = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child_main, args=(child_conn, module_name), name="kdtree-verify-probe")
    proc.start()
    child_conn.close()
    report: dict[str, Any]
    if parent_conn.poll(timeout):
        try:
            report = parent_conn.recv()
        except EOFError:
            report = {"error": "the child died before it reported", "active": False}
    else:
        report = {"error": f"no report from the child within {timeout:.0f} s", "active": False}
    proc.join(10)
    if proc.is_alive():
        proc.kill()
        proc.join()
    report["child_exitcode"] = proc.exitcode
    report["parent_python"] = sys.executable
    return report


def format_table(report: dict[str, Any]) -> str:
    patch = report.get("patch", {})
    site = report.get("sitecustomize", {})
    lib = report.get("library", {})
    imp = report.get("import", {})
    rows = [
        ("patch active in spawn child", "YES" if report.get("active") else "NO"),
        ("child pid / python", f"{report.get('pid', '-')} {report.get('python', '-')}"),
        ("state", f"{patch.get('state', '-')} {patch.get('reason', '') or ''}".strip()),
        ("mode", str(patch.get("mode", "-"))),
        ("backend import", "ok" if imp.get("ok") else f"FAILED {imp.get('error', '')}".strip()),
        ("sitecustomize module", str(site.get("module"))),
        ("sitecustomize files ran", ", ".join(site.get("ran", [])) or "none"),
        ("post-import hook", "installed" if report.get("hook_installed") else "NOT installed"),
        ("library", f"{lib.get('path')} sha256={lib.get('sha256', '-')} {lib.get('error', '')}".strip()),
        ("NCCL_* in child", " ".join(f"{k}={v}" for k, v in report.get("nccl_env", {}).items()) or "none"),
    ]
    if report.get("error"):
        rows.append(("probe error", report["error"]))
    width = max(len(name) for name, _value in rows)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kdtree_verify.probe", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--module", default=TARGET_MODULE, help="backend module the child imports")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the child")
    args = parser.parse_args(argv)
    report = run_probe(args.module, args.timeout)
    print(json.dumps(report, indent=2, sort_keys=True, default=str) if args.json else format_table(report))
    if report.get("error") and "patch" not in report:
        return EXIT_PROBE_FAILED
    return EXIT_ACTIVE if report.get("active") else EXIT_NOT_ACTIVE


if __name__ == "__main__":
    sys.exit(main())
