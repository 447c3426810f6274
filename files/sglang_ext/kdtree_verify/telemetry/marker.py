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

The status file ``$KDTREE_STATUS_DIR/<pid>.json`` is written only into a directory that is not a
symlink, is owned by root or by this process's euid and is not group/world-writable, through a
``<pid>.json.tmp`` created with O_EXCL|O_NOFOLLOW and renamed. When that cannot be done the process
says so on a ``kdtree-verify-status: pid=<pid> state=unwritable reason=<r>`` line: a state of its
own, matched by neither contract regex (``match_status_problem`` matches it). Every write to stderr
goes through ``say()``: a broken stderr costs the line, never the caller.
"""

from __future__ import annotations

import errno
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
# A status file that cannot be written (KDTREE_STATUS_DIR unsafe or not writable) is its own state
# on its own line: the patch itself may well be active. Neither regex above matches this line.
STATUS_PREFIX = "kdtree-verify-status:"
STATUS_UNWRITABLE = "unwritable"
STATUS_PROBLEM_RE = re.compile(rf"^{re.escape(STATUS_PREFIX)} pid=(\d+) state=({STATUS_UNWRITABLE}) ")
FIELDS = ("pid", "ppid", "title", "mode", "state", "reason", "lib", "lib_sha256", "sglang")

_lock = threading.Lock()
_emitted: dict[str, Any] | None = None
_printed = False  # did this process's marker line reach stderr?
_status_file = ""  # the status file written last, or "unwritable: <reason>"; "" when none was asked for
_status_extra: dict[str, Any] = {}  # the status publisher's fields (counters, times), merged into <pid>.json


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
        name, _sep, value = token.partition("=")
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


def match_status_problem(line: str) -> tuple[int, str] | None:
    """(pid, state) of a ``kdtree-verify-status:`` line (state ``unwritable``), or None."""
    match = STATUS_PROBLEM_RE.match(line)
    return (int(match.group(1)), match.group(2)) if match else None


def say(text: str) -> bool:
    """Write one line to stderr; never raises. False when the line was lost.

    A broken stderr (a full disk such as /dev/full, a closed pipe, a closed or missing stream)
    costs the line, never the caller. On a stream with a real file descriptor the bytes go straight
    to the descriptor (after flushing what Python buffered), so a failed write leaves nothing in
    Python's buffer to fail again, and change the exit status, at interpreter exit.
    """
    data = text.rstrip("\n") + "\n"
    stream = sys.stderr
    if stream is None:
        return False
    try:
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):  # pytest's capture, StringIO, a closed stream
            stream.write(data)
            stream.flush()
            return True
        try:
            stream.flush()
        except Exception:
            pass
        raw = data.encode("utf-8", "backslashreplace")
        while raw:
            raw = raw[os.write(fd, raw) :]
        return True
    except Exception:
        return False


def _status_dir_problem(dir_fd: int, status_dir: str) -> str:
    """Why the opened status directory must not be written to, or ''."""
    st = os.fstat(dir_fd)
    if st.st_uid not in (0, os.geteuid()):
        return f"{status_dir} is owned by uid {st.st_uid}, not by root or this euid ({os.geteuid()})"
    if st.st_mode & 0o022:
        return f"{status_dir} is group- or world-writable (mode {st.st_mode & 0o7777:04o})"
    return ""


def _open_status_dir(status_dir: str) -> int:
    """The status directory, opened without following a symlink; created (0755) when missing."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(status_dir, flags)
    except FileNotFoundError:
        try:
            os.mkdir(status_dir, 0o755)
        except FileExistsError:
            pass
        return os.open(status_dir, flags)


def _create_exclusive(name: str, dir_fd: int) -> int:
    """Create `name` in the directory, never through a symlink or over an existing file. One stale
    entry of that name (a crashed process with this pid, a planted link) is unlinked (the link
    itself, never its target) and the creation tried once more."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(name, flags, 0o644, dir_fd=dir_fd)
    except FileExistsError:
        os.unlink(name, dir_fd=dir_fd)
        return os.open(name, flags, 0o644, dir_fd=dir_fd)


def write_status(name: str, data: bytes) -> str:
    """Write `data` as `$KDTREE_STATUS_DIR/<name>` through `<name>.tmp` (O_EXCL|O_NOFOLLOW) and a rename,
    into a directory checked as the module docstring says. Returns the path written, '' when
    KDTREE_STATUS_DIR is not set. Raises ValueError or OSError; `write_problem()` words either."""
    status_dir = os.environ.get("KDTREE_STATUS_DIR")
    if not status_dir:
        return ""
    tmp = f"{name}.tmp"
    if not os.path.isabs(status_dir):
        raise ValueError(f"KDTREE_STATUS_DIR={status_dir!r} is not an absolute path")
    if os.path.islink(status_dir):  # said clearly here; O_NOFOLLOW below closes the race
        raise ValueError(f"{status_dir} is a symlink")
    dir_fd = _open_status_dir(status_dir)
    try:
        problem = _status_dir_problem(dir_fd, status_dir)
        if problem:
            raise ValueError(problem)
        fd = _create_exclusive(tmp, dir_fd)
        try:
            try:
                while data:
                    data = data[os.write(fd, data) :]
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError:  # a full disk: leave no half-written .tmp behind
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
            raise
    finally:
        os.close(dir_fd)
    return os.path.join(status_dir, name)


def write_problem(exc: BaseException, name: str) -> str:
    """The one-line reason for a `write_status` failure."""
    if isinstance(exc, OSError) and exc.errno == errno.ELOOP:
        return f"{os.environ.get('KDTREE_STATUS_DIR')} or {name}.tmp became a symlink: {exc}"
    return str(exc)


def say_unwritable(reason: str) -> None:
    """The ``kdtree-verify-status: pid=<pid> state=unwritable reason=<r>`` line."""
    say(f"{STATUS_PREFIX} pid={os.getpid()} state={STATUS_UNWRITABLE} reason={escape(reason)}")


def _write_status_file(fields: dict[str, Any]) -> str:
    """`<KDTREE_STATUS_DIR>/<pid>.json` (when the variable is set): the marker fields plus what the
    status publisher set, written safely. Returns the problem ('' when the file was written or not
    asked for); the callers report it on the ``kdtree-verify-status:`` line, never as a fallback."""
    global _status_file
    name = f"{fields['pid']}.json"
    try:
        data = json.dumps({**fields, **_status_extra}, sort_keys=True, default=str).encode("utf-8")
        path = write_status(name, data)
        if path:
            _status_file = path
        return ""
    except (OSError, ValueError) as exc:
        reason = write_problem(exc, name)
        _status_file = f"{STATUS_UNWRITABLE}: {reason}"
        return reason


def _write_status_file_loud(fields: dict[str, Any]) -> None:
    reason = _write_status_file(fields)
    if reason:
        say_unwritable(reason)


def set_status_extra(extra: dict[str, Any]) -> None:
    """Fields the status file carries besides the marker's (the status publisher's counters and
    times); kept for the marker's own later writes (a runtime fallback) too."""
    global _status_extra
    with _lock:
        _status_extra = dict(extra)


def publish_status(extra: dict[str, Any]) -> str:
    """Rewrite this process's `<pid>.json`: the marker fields plus `extra` (kept as with
    `set_status_extra`). Nothing is printed: returns the problem, or '' (written, or nothing to
    write: no marker in this process or no KDTREE_STATUS_DIR)."""
    global _status_extra
    with _lock:
        _status_extra = dict(extra)
        if _emitted is None or _emitted["pid"] != os.getpid():
            return ""
        return _write_status_file(_emitted)


def emit(
    mode: str, state: str, reason: str = "", lib: str = "", lib_sha256: str = "", sglang: str = ""
) -> bool:
    """Print the marker once per process. Returns False when it was already printed."""
    global _emitted, _printed
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
        _printed = say(format_line(fields))
        _emitted = fields
        _write_status_file_loud(fields)
        return True


def emit_runtime_fallback(reason: str) -> None:
    """A process that said state=active and then had to fall back: say so, loudly, once per reason."""
    with _lock:
        line = f"{RUNTIME_PREFIX} pid={os.getpid()} state=fallback reason={escape(reason)}"
        say(line)
        if _emitted is not None and _emitted["pid"] == os.getpid():
            _emitted["state"] = "fallback"
            _emitted["reason"] = reason
            _emitted["runtime_fallback"] = True
            _write_status_file_loud(_emitted)


def emitted() -> dict[str, Any] | None:
    """The fields of this process's marker, or None."""
    if _emitted is not None and _emitted["pid"] == os.getpid():
        return dict(_emitted)
    return None


def delivery() -> dict[str, Any]:
    """Where this process's marker went: printed to stderr or lost, and the status file (its path,
    ``unwritable: <reason>``, or '' when KDTREE_STATUS_DIR is not set)."""
    mine = _emitted is not None and _emitted["pid"] == os.getpid()
    return {"marker_printed": mine and _printed, "status_file": _status_file if mine else ""}


def reset_for_tests() -> None:
    """Forget this process's marker, so the next emit() prints again (tests only)."""
    global _emitted, _printed, _status_file, _status_extra
    with _lock:
        _emitted = None
        _printed = False
        _status_file = ""
        _status_extra = {}
