"""A meeting point on the controller for the hosts of one playbook run: each host posts its word (ok or
failed, with a small JSON record) for a phase of a named rendezvous and waits until every member posted,
one posted failed, or the time is up. It works under any strategy (free included), where hostvars are a
snapshot taken when a task starts and cannot be waited on.

Used where one host's outcome decides its peers': the hosts of one serving group (restart together,
roll back together) and the hosts of one batch (a bake that fails rolls the whole batch back).

Where: <tmp>/kdtree-rendezvous-<uid>/<run>/<name>/<phase>/<host>.json, <run> naming the ansible-playbook
process (its pid and start time: a later run never reads an earlier one's words). Every directory is
created 0700 and checked (a real directory, owned by this user, closed to others) before it is read or
written, and so is every record read: a word another user could have placed is refused, never read. A
run's directory is removed by a later run once its process is gone.

A member that failed before it could post its phase posts to ABORT (state failed), which ends every
wait of that rendezvous. Controller only; stdlib only; nothing here reads the inventory.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

LOG = logging.getLogger(__name__)

ABORT = "abort"
STATES = ("ok", "failed")
POLL_S = 0.2
MAX_RECORD_BYTES = 64 * 1024


class RendezvousError(RuntimeError):
    """A directory or record that is not safe to use, or a word that is not a rendezvous word."""


def _safe_name(text: str) -> str:
    """A file name for any string: percent-escaped, prefixed (never '.' or '..')."""
    if not isinstance(text, str) or not text:
        raise RendezvousError(f"a rendezvous name, phase or host must be a non-empty string, not {text!r}")
    return "n-" + quote(text, safe="._-")


def _check_private_dir(path: Path) -> None:
    """Refuse a path that is not a directory of this user's, closed to everyone else."""
    try:
        seen = os.lstat(path)
    except FileNotFoundError:
        raise RendezvousError(f"{path} is missing") from None
    if not stat.S_ISDIR(seen.st_mode):
        raise RendezvousError(f"{path} is not a directory (a link or a file): refusing to use it")
    if seen.st_uid != os.getuid():
        raise RendezvousError(f"{path} belongs to uid {seen.st_uid}, not to this user ({os.getuid()})")
    if seen.st_mode & 0o077:
        raise RendezvousError(f"{path} is open to other users (mode {stat.S_IMODE(seen.st_mode):o})")


def _private_dir(path: Path) -> Path:
    """Create (0700) or check one directory level."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    _check_private_dir(path)
    return path


def process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot (/proc), '' where /proc does not say."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return ""
    # the command name (field 2) may hold spaces and ')': the fields after the last ')' are plain
    fields = text.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else ""


def run_key(pid: int | None = None) -> str:
    """This playbook run's key: the ansible-playbook process (a worker's parent) and its start time."""
    pid = os.getppid() if pid is None else pid
    return f"{pid}-{process_start(pid) or '0'}"


def _alive(key: str) -> bool:
    pid_text, _, started = key.partition("-")
    if not pid_text.isdigit():
        return True  # not one of ours: never removed
    pid = int(pid_text)
    if not Path(f"/proc/{pid}").exists():
        return False
    return started in ("0", process_start(pid))


@dataclass
class Wait:
    """What one wait found: the members' words, who failed, who is missing, how long it took."""

    posts: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed_members: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    waited_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failed_members and not self.missing

    def as_result(self) -> dict[str, Any]:
        return {
            "posts": self.posts,
            "ok": self.ok,
            "failed_members": self.failed_members,
            "missing": self.missing,
            "waited_s": round(self.waited_s, 2),
        }


class Rendezvous:
    """One named rendezvous of one run, in `base` (the user's private directory under the temp dir)."""

    def __init__(self, name: str, run: str | None = None, base: Path | None = None) -> None:
        root = base if base is not None else Path(tempfile.gettempdir()) / f"kdtree-rendezvous-{os.getuid()}"
        self.root = _private_dir(root)
        self.run = run if run is not None else run_key()
        self.run_dir = _private_dir(self.root / _safe_name(self.run))
        self.dir = _private_dir(self.run_dir / _safe_name(name))
        self.name = name

    def _phase_dir(self, phase: str) -> Path:
        return _private_dir(self.dir / _safe_name(phase))

    def post(self, phase: str, host: str, state: str, data: Any = None) -> None:
        """Write this host's word for the phase (atomically; a second word replaces the first)."""
        if state not in STATES:
            raise RendezvousError(f"state {state!r}: one of {', '.join(STATES)}")
        record = json.dumps({"host": host, "state": state, "data": data, "at": time.time()}, sort_keys=True)
        if len(record) > MAX_RECORD_BYTES:
            raise RendezvousError(
                f"{host}'s word for {phase} is {len(record)} bytes (at most {MAX_RECORD_BYTES})"
            )
        where = self._phase_dir(phase)
        fd, tmp = tempfile.mkstemp(dir=where, prefix=".post-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(record)
            os.replace(tmp, where / (_safe_name(host) + ".json"))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        LOG.debug("rendezvous %s/%s: %s posted %s", self.name, phase, host, state)

    def read(self, phase: str, members: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The members' words for the phase (a member with none is left out)."""
        where = self._phase_dir(phase)
        out: dict[str, dict[str, Any]] = {}
        for host in members:
            path = where / (_safe_name(host) + ".json")
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise RendezvousError(f"{path}: {exc}") from None
            with os.fdopen(fd, "rb") as handle:
                seen = os.fstat(handle.fileno())
                if not stat.S_ISREG(seen.st_mode) or seen.st_uid != os.getuid() or seen.st_mode & 0o022:
                    raise RendezvousError(f"{path} is not a record of this user's: refusing to read it")
                raw = handle.read(MAX_RECORD_BYTES + 1)
            if len(raw) > MAX_RECORD_BYTES:
                raise RendezvousError(f"{path} is over {MAX_RECORD_BYTES} bytes")
            try:
                record = json.loads(raw)
            except ValueError:
                raise RendezvousError(f"{path} is not a rendezvous record (not JSON)") from None
            if not isinstance(record, dict) or record.get("host") != host:
                raise RendezvousError(f"{path} is not {host}'s rendezvous record")
            if record.get("state") not in STATES:
                raise RendezvousError(f"{path}: {record.get('state')!r} is not a rendezvous word")
            out[host] = {"state": record["state"], "data": record.get("data")}
        return out

    def wait(
        self,
        phase: str,
        members: Sequence[str],
        timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        on_wait: Callable[[float, list[str]], None] | None = None,
    ) -> Wait:
        """Until every member posted to the phase, one posted failed (to it or to ABORT), or timeout_s."""
        members = list(dict.fromkeys(members))
        started = clock()
        while True:
            posts = self.read(phase, members)
            aborted = self.read(ABORT, members) if phase != ABORT else {}
            failed = [h for h in members if posts.get(h, {}).get("state") == "failed" or h in aborted]
            missing = [h for h in members if h not in posts and h not in failed]
            waited = clock() - started
            if failed or not missing or waited >= timeout_s:
                for host, word in aborted.items():
                    posts.setdefault(host, word)
                # a member with no word by the end counts as failed: silence is never agreement
                late = missing if not failed else []
                return Wait(posts, failed + late, missing, waited)
            if on_wait is not None:
                on_wait(waited, missing)
            sleep(POLL_S)


def sweep(base: Path | None = None, keep: str | None = None) -> list[str]:
    """Remove the directories of runs whose ansible-playbook process is gone; the run keys removed."""
    root = base if base is not None else Path(tempfile.gettempdir()) / f"kdtree-rendezvous-{os.getuid()}"
    removed: list[str] = []
    try:
        _check_private_dir(root)
        entries = list(root.iterdir())
    except (RendezvousError, OSError):
        return removed
    for entry in entries:
        key = entry.name[2:] if entry.name.startswith("n-") else ""
        if not key or key == keep or _alive(key):
            continue
        try:
            _check_private_dir(entry)
        except RendezvousError:
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(key)
    return removed
