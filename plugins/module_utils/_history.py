"""A host's deploy history: the one owner of its file format (stdlib only; no Ansible imports).

The file (default /var/lib/kdtree/state.json, root-owned 0600 in a 0700 directory) holds
`{"format": 1, "entries": [...]}`, oldest first. Each entry is one deploy (or a restore of an older
one): what it installed (build id, library, patch directory and digest, verify mode, the drop-in's
full text and digest, what the smoke check expects), when it started and ended, and how it ended:

    running      the deploy was started and has not ended (a killed play leaves it so)
    healthy      the smoke check passed; the newest such entry is the host's "last good"
    rolled_back  the deploy failed; `why` says why, `rolled_back_to` says to what (previous/stock)
    removed      kdtree was removed from the host (rollback to stock) after this entry

Writes are atomic (a temporary file in the same directory, fsync, rename), so a reader never sees a
half-written file and a killed run leaves the previous version.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import tempfile
import time
from typing import Any

DEFAULT_PATH = "/var/lib/kdtree/state.json"
FORMAT = 1
RESULTS = ("running", "healthy", "rolled_back", "removed")
# Entries kept; older ones are dropped, except the newest healthy entry (the last good).
DEFAULT_KEEP = 20
# What an entry records about the deploy (the caller's values); the rest is set here.
ENTRY_FIELDS = (
    "build_id",
    "lib_path",
    "patch_dir",
    "patch_digest",
    "mode",
    "marker_state",
    "expected_schedulers",
    "nccl_env",
    "status_dir",
    "dropin_path",
    "dropin",
    "exec_start_replaced",
    "restored_from",
)


class HistoryError(Exception):
    """The history file cannot be read or written (the message says which and why)."""


def digest(text: str) -> str:
    """The digest of a drop-in's text as the history records it (sha256, hex)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def new_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)


def load(path: str) -> list[dict[str, Any]]:
    """The entries, oldest first; [] when the file does not exist."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise HistoryError(f"cannot read the deploy history {path}: {exc}") from exc
    if (
        not isinstance(data, dict)
        or data.get("format") != FORMAT
        or not isinstance(data.get("entries"), list)
    ):
        raise HistoryError(f"{path} is not a kdtree deploy history of format {FORMAT}; move it aside")
    return [e for e in data["entries"] if isinstance(e, dict) and e.get("id")]


def save(path: str, entries: list[dict[str, Any]]) -> None:
    """Write atomically: root-owned 0600 file in a 0700 directory."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".state.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({"format": FORMAT, "entries": entries}, handle, indent=1, sort_keys=True)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise HistoryError(f"cannot write the deploy history {path}: {exc}") from exc
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass


def last_good(entries: list[dict[str, Any]], live_dropin: str = "") -> dict[str, Any] | None:
    """The deploy `kdtree_rollback_to=previous` puts back, given the live drop-in's digest.

    The newest healthy entry whose drop-in differs from the live one ("" = none live: any). When
    the newest entry is itself a healthy restore whose drop-in is live, the host is already there:
    that entry is returned, so a second rollback to previous changes nothing.
    """
    if entries:
        newest = entries[-1]
        if (
            newest.get("restored_from")
            and newest.get("result") == "healthy"
            and newest.get("dropin_digest") == live_dropin
        ):
            return newest
    for entry in reversed(entries):
        if entry.get("result") == "healthy" and entry.get("dropin_digest") != live_dropin:
            return entry
    return None


def trim(entries: list[dict[str, Any]], keep: int) -> list[dict[str, Any]]:
    """The newest `keep` entries, plus the last good one if it is older."""
    if len(entries) <= keep:
        return entries
    kept = entries[-keep:]
    good = last_good(entries, "-")
    if good is not None and good not in kept:
        kept = [good, *kept]
    return kept


def referenced(entries: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The build ids and patch directories the kept entries name (never pruned)."""
    return {
        "build_ids": sorted({str(e["build_id"]) for e in entries if e.get("build_id")}),
        "patch_dirs": sorted({str(e["patch_dir"]) for e in entries if e.get("patch_dir")}),
    }


def begin(entries: list[dict[str, Any]], record: dict[str, Any]) -> dict[str, Any]:
    """A new running entry from `record` (only ENTRY_FIELDS are taken), appended to `entries`."""
    entry: dict[str, Any] = {k: record[k] for k in ENTRY_FIELDS if k in record}
    entry.update(id=new_id(), started=now(), ended=None, result="running", why="")
    if isinstance(entry.get("dropin"), str):
        entry["dropin_digest"] = digest(entry["dropin"])
    entries.append(entry)
    return entry


def finish(
    entries: list[dict[str, Any]], entry_id: str, result: str, why: str = "", **extra: Any
) -> dict[str, Any]:
    """End the entry `entry_id` with `result` (one of RESULTS) and `why`."""
    if result not in RESULTS:
        raise HistoryError(f"result must be one of {', '.join(RESULTS)}, not {result!r}")
    for entry in entries:
        if entry.get("id") == entry_id:
            entry.update(result=result, why=why, ended=now(), **extra)
            return entry
    raise HistoryError(f"no deploy {entry_id!r} in the history")
