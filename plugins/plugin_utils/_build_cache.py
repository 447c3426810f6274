"""kdtree_build's controller build cache: what may be trusted in it, its compile claims and its locks.

Controller code (stdlib, module_utils/_path_safety and module_utils/_small_file only). A build of the
cache is installed as root on hosts that cannot check it against anything but its own artifact.json, so:

- cache_problem / read_artifact: the cache directory, every directory above it, the artifact directory,
  artifact.json and libkdtree_verify.so must be owned by the controller user (or root) and writable by
  nobody else; the cache and what is used in it are never symlinks (a symlink above the cache must be
  owned by that user or root too, and where it points is checked as well).
- open_lock / run_locked: the compile lock is opened without following a symlink and must be a regular
  file.
- claim: a claim on a build's compile names the run that took it (the controller's ansible-playbook:
  host, boot, pid and the pid's start time); a claim whose run is gone is broken at once, a live run's
  claim is waited for; a claim that names no run of this controller is broken after LEGACY_CLAIM_S.
main() is the command line the role runs (roles/kdtree_build/files/build_cache.py).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import multiprocessing
import os
import re
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from ansible_collections.kdtree.fleet.plugins.module_utils import _path_safety as path_safety
from ansible_collections.kdtree.fleet.plugins.module_utils import _small_file as small_file

LIB = "libkdtree_verify.so"
RECORD = "artifact.json"
MAX_RECORD = 64 * 1024
LEGACY_CLAIM_S = 25 * 60
SHA256 = re.compile(r"^[0-9a-f]{64}$")


class CacheError(Exception):
    """A lock or claim of the cache cannot be used (the message names the path and why)."""


def _entry_problem(path: str, uid: int, directory: bool) -> str:
    """Why the cache entry `path` (a directory or a regular file) cannot be trusted; empty if it can."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"{path}: cannot stat ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symlink (never followed)"
    if directory and not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if not directory and not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file"
    if st.st_uid not in (0, uid):
        return f"{path} is owned by uid {st.st_uid}, not root or uid {uid} (the user running the deploy)"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is group- or world-writable (mode {stat.S_IMODE(st.st_mode):04o})"
    return ""


def cache_problem(cache: str, uid: int | None = None) -> str:
    """Why the build cache `cache` cannot be trusted (empty: it can). A cache not made yet is judged by
    the nearest directory above it that exists (the run makes the rest, as `uid`)."""
    uid = os.geteuid() if uid is None else uid
    if not cache or not os.path.isabs(cache):
        return f"the build cache {cache!r} is not an absolute path"
    cache = os.path.normpath(cache)
    existing = cache
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if existing == cache:
        problem = _entry_problem(cache, uid, directory=True)
        if problem:
            return problem
    elif not os.path.isdir(existing):
        return f"{existing} is not a directory"
    return path_safety.unsafe_reason(existing, (0, uid), trusted_links=True)


def _read_record(path: str) -> tuple[str, dict[str, Any]]:
    try:
        raw = small_file.read_small(path, max_bytes=MAX_RECORD)
    except small_file.SmallFileRefused as exc:
        return str(exc), {}
    except OSError as exc:
        return f"{path}: cannot open ({exc.strerror})", {}
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return f"{path} is not UTF-8 JSON ({type(exc).__name__})", {}
    if not isinstance(data, dict) or not SHA256.match(str(data.get("sha256", ""))):
        return f"{path} is not an artifact record (an object with the library's sha256)", {}
    return "", data


def read_artifact(cache: str, build_id: str, uid: int | None = None) -> tuple[str, dict[str, Any]]:
    """(problem, record): the artifact of `build_id` in the cache when it has one ({} when not), after
    the cache, its directory, artifact.json and the library passed the checks; else the first problem."""
    uid = os.geteuid() if uid is None else uid
    problem = cache_problem(cache, uid)
    if problem:
        return problem, {}
    if not build_id or build_id in (".", "..") or "/" in build_id or "\0" in build_id:
        return f"the build id {build_id!r} is not a plain name", {}
    directory = os.path.join(os.path.normpath(cache), build_id)
    record = os.path.join(directory, RECORD)
    if not os.path.lexists(directory):
        return "", {}
    problem = _entry_problem(directory, uid, directory=True)
    if problem:
        return problem, {}
    if not os.path.lexists(record):
        return "", {}  # not an artifact (yet)
    for path, is_dir in ((record, False), (os.path.join(directory, LIB), False)):
        if not os.path.lexists(path):
            return f"{path} is missing (an incomplete artifact)", {}
        problem = _entry_problem(path, uid, is_dir)
        if problem:
            return problem, {}
    return _read_record(record)


def host_lib_problem(path: str, stat_line: str) -> str:
    """Why a host's build library cannot be taken as already there (empty: it can), from its
    `stat -c '%u %a %F'` line: it must be a regular file (not a symlink) owned by root and writable by
    nobody else."""
    uid, _sep, rest = stat_line.partition(" ")
    mode, _sep, kind = rest.partition(" ")
    if kind != "regular file":
        return f"{path} is a {kind or 'missing file'}, not a regular file"
    if uid != "0":
        return f"{path} is owned by uid {uid}, not root"
    if not re.fullmatch(r"[0-7]{1,4}", mode) or int(mode, 8) & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is group- or world-writable (mode {mode})"
    return ""


def _proc_start(pid: int) -> str | None:
    """The start time of process `pid` (clock ticks since boot, /proc/<pid>/stat field 22); None when
    there is no such process (or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else None


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def controller_run(pid: int | None = None) -> str:
    """The run this process belongs to, as a claim names it (JSON): this controller's host name and boot,
    and the ansible-playbook process (a worker's parent; the process itself when it is not a worker)
    with its start time."""
    if pid is None:
        parent = multiprocessing.parent_process()
        pid = parent.pid if parent is not None and parent.pid else os.getpid()
    record = {"host": socket.gethostname(), "boot": _boot_id(), "pid": pid, "start": _proc_start(pid) or ""}
    return json.dumps(record, sort_keys=True)


def run_state(run: str | None) -> str:
    """'alive', 'gone' (its process ended, or the controller rebooted) or 'unknown' (no run named, or
    another controller's) for the run a claim names."""
    try:
        data = json.loads(run) if run else None
    except ValueError:
        return "unknown"
    if not isinstance(data, dict) or not isinstance(data.get("pid"), int) or data["pid"] <= 0:
        return "unknown"
    if data.get("host") != socket.gethostname():
        return "unknown"
    boot = _boot_id()
    if data.get("boot") and boot and data["boot"] != boot:
        return "gone"
    start = _proc_start(data["pid"])
    if start is not None:
        return "alive" if not data.get("start") or start == data["start"] else "gone"
    if os.path.isdir("/proc/self"):
        return "gone"
    try:  # no /proc: whether the pid exists is all there is to know
        os.kill(data["pid"], 0)
    except ProcessLookupError:
        return "gone"
    except OSError:
        pass
    return "alive"


def _read_small(path: str) -> str | None:
    try:
        return small_file.read_small(path, max_bytes=MAX_RECORD).decode("utf-8", "replace")
    except (OSError, ValueError):  # SmallFileRefused is a ValueError
        return None


def _observe_claim(path: str) -> tuple[tuple[int, int], str | None, float] | None:
    """(identity, the run it names or None, its age in seconds) of the claim; None when there is none."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino), _read_small(os.path.join(path, "run")), time.time() - st.st_mtime


def _take(path: str, host: str, run: str) -> bool:
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        return False
    for name, text in (("run", run), ("host", host)):
        with open(os.path.join(path, name), "w", encoding="utf-8") as handle:
            handle.write(text + "\n" if name == "host" else text)
    return True


def _break(path: str, seen: tuple[tuple[int, int], str | None, float]) -> bool:
    """Move the observed claim away and remove it when it is still that one; else put it back."""
    aside = f"{path}.broken.{os.getpid()}.{secrets.token_hex(4)}"
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False
    now = _observe_claim(aside)
    if now is not None and (now[0], now[1]) == (seen[0], seen[1]):
        shutil.rmtree(aside, ignore_errors=True)
        return True
    with contextlib.suppress(OSError):  # another run's claim: put it back
        os.rename(aside, path)
    return False


def claim(
    cache: str,
    build_id: str,
    host: str,
    run: str,
    *,
    wait_s: float = 1200,
    poll_s: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    say: Callable[[str], None] = lambda text: print(text, file=sys.stderr),
) -> str:
    """Claim the compile of `build_id` for `host` of `run`, or wait for the claim that is there:
    'claimed' (compile it), 'cached' (its artifact is in the cache), 'released' (its holder let go) or
    'timeout'. A claim of a run that is gone is broken at once (then claimed); a claim naming no run of
    this controller, when older than LEGACY_CLAIM_S."""
    os.makedirs(cache, 0o755, exist_ok=True)
    path = os.path.join(cache, f".claim-{build_id}")
    record = os.path.join(cache, build_id, RECORD)
    start = clock()
    noted = False
    while True:
        if _take(path, host, run):
            return "claimed"
        while True:
            if os.path.lexists(record):
                return "cached"
            seen = _observe_claim(path)
            if seen is None:
                return "released"
            state = run_state(seen[1])
            holder = (_read_small(os.path.join(path, "host")) or "?").strip()
            if state == "gone" or (state == "unknown" and seen[2] > LEGACY_CLAIM_S):
                why = (
                    "its run is gone"
                    if state == "gone"
                    else f"it names no live run and is {int(seen[2])} s old"
                )
                if _break(path, seen):
                    say(f"broke the claim of {holder} on {build_id}: {why}")
                break
            if not noted:
                say(f"waiting for {holder} to compile {build_id}")
                with contextlib.suppress(OSError):  # who waits, for the operator
                    with open(os.path.join(path, "waiting"), "a", encoding="utf-8") as handle:
                        handle.write(host + "\n")
                noted = True
            if clock() - start >= wait_s:
                return "timeout"
            sleep(poll_s)


def open_lock(path: str) -> int:
    """A descriptor of the lock file `path` (made 0600 when missing), never through a symlink; CacheError
    when `path` is a symlink or not a regular file."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CacheError(f"the lock {path} is a symlink (never followed)") from exc
        raise CacheError(f"cannot open the lock {path}: {exc.strerror}") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CacheError(f"the lock {path} is not a regular file")
    return fd


def run_locked(
    path: str,
    wait_s: float,
    argv: Sequence[str],
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Run `argv` holding an flock of the lock `path` (open_lock); its exit status. CacheError when the
    lock cannot be opened, or is not free within `wait_s` seconds."""
    os.makedirs(os.path.dirname(path) or ".", 0o755, exist_ok=True)
    fd = open_lock(path)
    try:
        start = clock()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if clock() - start >= wait_s:
                    raise CacheError(f"the lock {path} was not free within {wait_s:g} s") from None
                sleep(0.5)
        return subprocess.run(list(argv), check=False).returncode  # the role's own command
    finally:
        os.close(fd)


USAGE = (
    "usage: build_cache.py claim CACHE ID HOST RUN WAIT_S\n"
    "       build_cache.py locked LOCK WAIT_S -- COMMAND...\n"
)


def main(argv: Sequence[str]) -> int:
    """The command line: `claim` prints its outcome; `locked` runs a command under the lock (exit 2 with
    the reason on stderr when the lock cannot be used)."""
    args = list(argv)
    try:
        if len(args) == 6 and args[0] == "claim":
            print(claim(args[1], args[2], args[3], args[4], wait_s=float(args[5])))
            return 0
        if len(args) >= 5 and args[0] == "locked" and args[3] == "--":
            return run_locked(args[1], float(args[2]), args[4:])
    except (CacheError, OSError, ValueError) as exc:
        print(f"kdtree_build: {exc}", file=sys.stderr)
        return 2
    print(USAGE, end="", file=sys.stderr)
    return 2
