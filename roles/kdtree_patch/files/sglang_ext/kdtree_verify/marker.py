"""The "patch applied in this process" line (docs/CONTRACTS.md section 3) and the status file.

One line on stderr per process, flushed at once:

    kdtree-verify: pid=<pid> ppid=<ppid> title=<t> mode=<m> state=<s> reason=<r> lib=<p>
    lib_sha256=<h> sglang=<v>          (all on one line)

Values never contain spaces: a space is written as the four characters ``\\x20`` (and a
backslash as ``\\x5c``), an empty value as ``-``. A deploy check matches the line with ``MARKER_RE``
(``match_marker``) and compares the pid with the live scheduler PIDs.

A later change of state inside the same process (the library fails to load on the first verify
call, or the GPU is unsupported) is reported on a separate ``kdtree-verify-fallback:`` line, which
the contract regex does not match, and in the status file.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from typing import Any

PREFIX = "kdtree-verify:"
RUNTIME_PREFIX = "kdtree-verify-fallback:"
# The contract regexes. The smoke check on a host loads this file from the installed patch
# (stdlib only, no package-relative imports) and matches journal lines with match_marker() and
# match_runtime_fallback(): this module is the only place the line format is written down.
MARKER_RE = re.compile(rf"^{re.escape(PREFIX)} pid=(\d+) .* state=(\w+) ")
RUNTIME_FALLBACK_RE = re.compile(rf"^{re.escape(RUNTIME_PREFIX)} pid=(\d+) ")
FIELDS = ("pid", "ppid", "title", "mode", "state", "reason", "lib", "lib_sha256", "sglang")

_lock = threading.Lock()
_emitted: dict[str, Any] | None = None


def escape(value: object) -> str:
    """One token: no whitespace, '-' for empty."""
    text = "" if value is None else str(value)
    if not text:
        return "-"
    text = text.replace("\\", "\\x5c").replace(" ", "\\x20")
    return text.replace("\t", "\\x09").replace("\n", "\\x0a").replace("\r", "\\x0d")


def unescape(token: str) -> str:
    if token == "-":
        return ""
    for code, char in (("\\x20", " "), ("\\x09", "\t"), ("\\x0a", "\n"), ("\\x0d", "\r"), ("\\x5c", "\\")):
        token = token.replace(code, char)
    return token


def process_title() -> str:
    """The title as `ps` shows it now (setproctitle rewrites /proc/self/cmdline)."""
    try:
        with open("/proc/self/cmdline", "rb") as fh:
            raw = fh.read()
    except OSError:
        return " ".join(sys.argv)
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")


def format_line(fields: dict[str, Any]) -> str:
    return PREFIX + " " + " ".join(f"{name}={escape(fields.get(name))}" for name in FIELDS)


def parse_line(line: str) -> dict[str, str]:
    """Inverse of format_line (for tests and the probe)."""
    if not line.startswith(PREFIX + " "):
        raise ValueError(f"not a kdtree-verify marker: {line!r}")
    out: dict[str, str] = {}
    for token in line[len(PREFIX) + 1 :].split(" "):
        name, _, value = token.partition("=")
        out[name] = unescape(value)
    return out


def match_marker(line: str) -> tuple[int, str] | None:
    """(pid, state) of a marker line, or None for any other line."""
    match = MARKER_RE.match(line)
    return (int(match.group(1)), match.group(2)) if match else None


def match_runtime_fallback(line: str) -> int | None:
    """The pid of a ``kdtree-verify-fallback:`` line, or None for any other line."""
    match = RUNTIME_FALLBACK_RE.match(line)
    return int(match.group(1)) if match else None


def _write_status_file(fields: dict[str, Any]) -> None:
    status_dir = os.environ.get("KDTREE_STATUS_DIR")
    if not status_dir:
        return
    try:
        os.makedirs(status_dir, exist_ok=True)
        path = os.path.join(status_dir, f"{fields['pid']}.json")
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(fields, fh, sort_keys=True)
        os.replace(tmp, path)
    except OSError as exc:
        print(
            f"{RUNTIME_PREFIX} pid={os.getpid()} cannot write status file: {exc}", file=sys.stderr, flush=True
        )


def emit(
    mode: str, state: str, reason: str = "", lib: str = "", lib_sha256: str = "", sglang: str = ""
) -> bool:
    """Print the marker once per process. Returns False when it was already printed."""
    global _emitted
    with _lock:
        if _emitted is not None and _emitted["pid"] == os.getpid():
            return False
        fields: dict[str, Any] = {
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "title": process_title(),
            "mode": mode,
            "state": state,
            "reason": reason,
            "lib": lib,
            "lib_sha256": lib_sha256,
            "sglang": sglang,
        }
        print(format_line(fields), file=sys.stderr, flush=True)
        _emitted = fields
        _write_status_file(fields)
        return True


def emit_runtime_fallback(reason: str) -> None:
    """A process that said state=active and then had to fall back: say so, loudly, once per reason."""
    with _lock:
        line = f"{RUNTIME_PREFIX} pid={os.getpid()} state=fallback reason={escape(reason)}"
        print(line, file=sys.stderr, flush=True)
        if _emitted is not None and _emitted["pid"] == os.getpid():
            _emitted["state"] = "fallback"
            _emitted["reason"] = reason
            _emitted["runtime_fallback"] = True
            _write_status_file(_emitted)


def emitted() -> dict[str, Any] | None:
    """The fields of this process's marker, or None."""
    if _emitted is not None and _emitted["pid"] == os.getpid():
        return dict(_emitted)
    return None


def reset_for_tests() -> None:
    """Forget this process's marker, so the next emit() prints again (tests only)."""
    global _emitted
    with _lock:
        _emitted = None
