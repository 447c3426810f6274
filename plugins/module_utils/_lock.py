"""A host's kdtree lock: one deploy or rollback at a time (stdlib only; the owner of the file format).

The lock is a JSON file (default /var/lib/kdtree/lock.json) created with O_CREAT|O_EXCL, so two runs
racing for it cannot both win. It names its holder: `run_id` (unique per playbook run), `owner`
(user@controller), `play`, `started` (UTC) and `pid` of the module that took it. Only the run that
holds it releases it; a lock left by a killed run stays until an operator breaks it explicitly.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

DEFAULT_PATH = "/var/lib/kdtree/lock.json"


class LockHeld(Exception):
    """Another run holds the lock; `holder` is what its file says."""

    def __init__(self, holder: dict[str, Any]):
        super().__init__(describe(holder))
        self.holder = holder


def describe(holder: dict[str, Any]) -> str:
    started = holder.get("started_epoch")
    age = f", {int(time.time() - started)} s ago" if isinstance(started, (int, float)) else ""
    return (
        f"{holder.get('owner', '?')} (play {holder.get('play', '?')!r}, run {holder.get('run_id', '?')}, "
        f"since {holder.get('started', '?')}{age})"
    )


def read(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"owner": "?", "play": "?", "run_id": "?", "started": "unreadable lock file"}
    return data if isinstance(data, dict) else {"owner": "?", "run_id": "?"}


def acquire(path: str, holder: dict[str, Any], *, break_lock: bool, check_mode: bool) -> dict[str, Any]:
    """Take the lock for `holder` (run_id, owner, play). Returns {"changed", "broken"}.

    Already ours: nothing to do. Someone else's: LockHeld, unless `break_lock` (then it is replaced and
    returned as "broken").
    """
    current = read(path)
    if current is not None and current.get("run_id") == holder["run_id"]:
        return {"changed": False, "broken": None}
    if current is not None and not break_lock:
        raise LockHeld(current)
    if check_mode:
        return {"changed": True, "broken": current}
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    if current is not None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    record = dict(
        holder, started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), started_epoch=time.time()
    )
    record["pid"] = os.getpid()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError as exc:  # another run won the race between our read and create
        raise LockHeld(read(path) or {}) from exc
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(record, handle)
        handle.write("\n")
    return {"changed": True, "broken": current}


def release(path: str, run_id: str, *, check_mode: bool) -> dict[str, Any]:
    """Remove the lock if `run_id` holds it; anyone else's lock is left alone (and reported)."""
    current = read(path)
    if current is None:
        return {"changed": False, "held_by": None}
    if current.get("run_id") != run_id:
        return {"changed": False, "held_by": current}
    if not check_mode:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    return {"changed": True, "held_by": None}
