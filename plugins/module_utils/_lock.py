"""A host's kdtree lock: one deploy or rollback at a time (stdlib and _flock; the owner of the file format).

The lock is a JSON file (default /var/lib/kdtree/lock.json, 0600) that names its holder: `run_id`
(unique per playbook run), `owner` (user@controller), `play`, `started` (UTC), `started_epoch` and
`pid` of the module that took it. Only the run that holds it releases it; a lock left by a killed run
stays until an operator breaks it explicitly.

- Written whole or not at all: a complete temporary file is hard-linked into place (link() fails
  when the name exists, like O_CREAT|O_EXCL), so two runs racing for it cannot both win and nobody
  ever reads half a lock.
- Every change (take, break, release) happens under an flock() of `<path>.guard` (released by the
  kernel when the process dies, so it never goes stale).
- Breaking is compare-and-swap: the run breaks the lock it observed before it decided, and only
  when that lock is older than the run. Under the guard the file must still be that one (same
  inode, bytes and modification time); it is renamed to a unique name and checked again before the
  new lock goes in. Of N runs breaking the same stale lock at once exactly one wins; the others are
  refused naming the winner.
- Any content reads as a holder or a clear problem (never a traceback): not JSON, not an object, odd
  values, too large, not UTF-8, a directory, a symlink (dangling or not: reported and breakable,
  never followed).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.kdtree.fleet.plugins.module_utils._flock import held

DEFAULT_PATH = "/var/lib/kdtree/lock.json"
MAX_BYTES = 64 * 1024
TEXT_FIELDS = ("run_id", "owner", "play", "started")
MAX_FIELD = 200


class LockHeld(Exception):
    """Another run holds the lock; `holder` is what its file says (plain strings and numbers)."""

    def __init__(self, holder: dict[str, Any]):
        super().__init__(describe(holder))
        self.holder = holder


class LockError(Exception):
    """The lock cannot be read or written (the message says which and why)."""


def _text(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return "?"
    text = " ".join(str(value).split()) or "?"
    return text if len(text) <= MAX_FIELD else text[: MAX_FIELD - 3] + "..."


def holder_of(data: Any, problem: str = "") -> dict[str, Any]:
    """The holder as this module reports it: the text fields as one-line strings ("?" when absent or
    odd), started_epoch a finite number or absent, pid an int or absent, `problem` when the file is
    not a well-formed lock."""
    source = data if isinstance(data, dict) else {}
    holder: dict[str, Any] = {key: _text(source.get(key)) for key in TEXT_FIELDS}
    epoch = source.get("started_epoch")
    if isinstance(epoch, (int, float)) and not isinstance(epoch, bool) and math.isfinite(epoch):
        holder["started_epoch"] = float(epoch)
    pid = source.get("pid")
    if isinstance(pid, int) and not isinstance(pid, bool):
        holder["pid"] = pid
    if not problem and not isinstance(data, dict):
        problem = f"the lock file holds JSON {type(data).__name__}, not an object"
    if not problem and holder["run_id"] == "?":
        problem = "the lock file names no run_id"
    if problem:
        holder["problem"] = problem
    return holder


def describe(holder: dict[str, Any]) -> str:
    """One line naming the holder (any dict: odd values read as "?")."""
    view = holder_of(holder, str(holder.get("problem") or "") if isinstance(holder, dict) else "")
    age = ""
    epoch = view.get("started_epoch")
    if epoch is not None and abs(time.time() - epoch) < 1e12:
        age = f", {int(time.time() - epoch)} s ago"
    text = f"{view['owner']} (play {view['play']!r}, run {view['run_id']}, since {view['started']}{age})"
    if view.get("problem"):
        text += f" [{view['problem']}]"
    return text


@dataclass(frozen=True)
class Observed:
    """What is at the lock's path: its identity (device, inode, bytes) and the holder it names."""

    ident: tuple[int, int]
    raw: bytes
    mtime: float
    holder: dict[str, Any] = field(default_factory=dict)

    def same_as(self, other: Observed | None) -> bool:
        """The same file: inode, bytes and modification time (an inode alone can be reused)."""
        return other is not None and (self.ident, self.raw, self.mtime) == (
            other.ident,
            other.raw,
            other.mtime,
        )

    @property
    def sound(self) -> bool:
        return "problem" not in self.holder

    def started(self) -> float:
        """When it was taken: its started_epoch when that is plausible (not after the file was last
        written), else (a broken file, an odd value) its modification time."""
        epoch = self.holder.get("started_epoch")
        return float(epoch) if isinstance(epoch, float) and epoch <= self.mtime + 1 else self.mtime


def observe(path: str) -> Observed | None:
    """The lock at `path`, None when there is none. Never follows a symlink; never raises for odd
    content (the holder names the problem); LockError when the path cannot be looked at."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LockError(f"cannot look at the lock {path}: {exc}") from exc
    ident = (info.st_dev, info.st_ino)
    if stat.S_ISLNK(info.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        dangling = "dangling " if not os.path.exists(path) else ""
        problem = f"the lock path is a {dangling}symlink to {target!r} (never followed)"
        return Observed(ident, target.encode("utf-8", "replace"), info.st_mtime, holder_of({}, problem))
    if not stat.S_ISREG(info.st_mode):
        return Observed(ident, b"", info.st_mtime, holder_of({}, "the lock path is not a regular file"))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return Observed(ident, b"", info.st_mtime, holder_of({}, f"unreadable lock file ({exc.strerror})"))
    with os.fdopen(fd, "rb") as handle:
        now = os.fstat(handle.fileno())
        if (now.st_dev, now.st_ino) != ident:  # replaced between lstat and open
            return Observed(
                ident, b"", info.st_mtime, holder_of({}, "the lock file changed while it was read")
            )
        raw = handle.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        return Observed(ident, raw, info.st_mtime, holder_of({}, f"lock file larger than {MAX_BYTES} bytes"))
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        problem = f"unreadable lock file (not UTF-8 JSON: {type(exc).__name__})"
        return Observed(ident, raw, info.st_mtime, holder_of({}, problem))
    return Observed(ident, raw, info.st_mtime, holder_of(data))


def read(path: str) -> dict[str, Any] | None:
    """The holder of the lock at `path` (see holder_of), None when there is none."""
    found = observe(path)
    return None if found is None else found.holder


@contextlib.contextmanager
def guard(path: str) -> Iterator[None]:
    """flock() of `<path>.guard` around a change of the lock (the kernel drops it when we die)."""
    name = path + ".guard"
    try:
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise LockError(f"cannot open the lock's guard {name}: {exc}") from exc
    with held(fd):
        yield


def _record(holder: dict[str, Any]) -> bytes:
    record = {key: str(holder.get(key) or "") for key in ("run_id", "owner", "play")}
    record.update(
        started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), started_epoch=time.time(), pid=os.getpid()
    )
    return (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")


def _put(path: str, data: bytes) -> None:
    """Link a complete 0600 file with `data` into place; FileExistsError when the name exists."""
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _swap_out(path: str, seen: Observed) -> bool:
    """Move the observed lock away (rename to a unique name) and make sure it was that one: True when
    it was (and it is gone), False when another file was there (it is put back)."""
    aside = f"{path}.broken.{os.getpid()}.{secrets.token_hex(4)}"
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False
    if seen.same_as(observe(aside)):
        os.unlink(aside)
        return True
    with contextlib.suppress(OSError):  # not ours to break: put it back (never over a newer one)
        os.link(aside, path, follow_symlinks=False)
        os.unlink(aside)
    return False


def acquire(
    path: str,
    holder: dict[str, Any],
    *,
    break_lock: bool,
    check_mode: bool,
    since: float | None = None,
) -> dict[str, Any]:
    """Take the lock for `holder` (run_id, owner, play). Returns {"changed", "broken"}.

    Already ours: nothing to do. Someone else's: LockHeld, unless `break_lock` and the lock is older
    than `since` (when this run started; default now): then it is broken by compare-and-swap and its
    holder returned as "broken"."""
    run_id = holder.get("run_id")
    if not isinstance(run_id, str) or not run_id.strip():
        raise LockError("the lock needs a run_id")
    since = time.time() if since is None else since
    seen = observe(path)
    if seen is not None and seen.sound and seen.holder["run_id"] == run_id:
        return {"changed": False, "broken": None}
    if seen is not None and not break_lock:
        raise LockHeld(seen.holder)
    if seen is not None and seen.started() >= since:
        raise LockHeld(seen.holder)  # taken after this run started: another breaker won, or a new run
    if check_mode:
        return {"changed": True, "broken": seen.holder if seen else None}
    directory = os.path.dirname(path) or "."
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        with guard(path):
            now = observe(path)
            if seen is not None:
                if not seen.same_as(now):
                    raise LockHeld(now.holder if now else holder_of({}, "broken by another run meanwhile"))
                if not _swap_out(path, seen):
                    raise LockHeld(read(path) or holder_of({}, "broken by another run meanwhile"))
            elif now is not None:
                raise LockHeld(now.holder)  # another run took it between our look and the guard
            try:
                _put(path, _record(holder))
            except FileExistsError:
                raise LockHeld(read(path) or {}) from None
    except OSError as exc:
        raise LockError(f"cannot take the lock {path}: {exc}") from exc
    return {"changed": True, "broken": seen.holder if seen else None}


def release(path: str, run_id: str, *, check_mode: bool) -> dict[str, Any]:
    """Remove the lock if `run_id` holds it; anyone else's lock is left alone (and reported)."""
    current = observe(path)
    if current is None:
        return {"changed": False, "held_by": None}
    if not current.sound or current.holder["run_id"] != run_id:
        return {"changed": False, "held_by": current.holder}
    if not check_mode:
        try:
            with guard(path):
                now = observe(path)
                if current.same_as(now):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
        except OSError as exc:
            raise LockError(f"cannot release the lock {path}: {exc}") from exc
    return {"changed": True, "held_by": None}
