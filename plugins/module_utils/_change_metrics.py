"""The deploys and rollbacks of a host as Prometheus text (format 0.0.4) for node-exporter's textfile
collector: the one owner of the family's name, labels and file (stdlib only; no Ansible imports).

kdtree_history (module_utils/_history_call.py) rewrites the file whenever it writes the history, so
the file always says when the newest deploy and the newest rollback of the host ended:

    kdtree_fleet_change_timestamp_seconds{action="deploy",result="healthy",build_id="...",mode="on"} 1.7e9

`action` is `deploy` for a deploy that ended healthy and `rollback` for every way kdtree went back: a
failed deploy rolled back (result rolled_back), a restore of the last good deploy (healthy, with
restored_from) and a removal to stock (removed). A running entry is no change yet. The dashboard's
deploy and rollback annotations read the value as the time (extras/monitoring).
"""

from __future__ import annotations

import calendar
import os
import tempfile
import time
from typing import Any

from ansible_collections.kdtree.fleet.plugins.module_utils import _history as history

CHANGE = "kdtree_fleet_change_timestamp_seconds"
HELP = "When the newest deploy or rollback of kdtree on this host ended (Unix time), by action."
ACTIONS = ("deploy", "rollback")
LABELS = ("action", "result", "build_id", "mode")
DEFAULT_TEXTFILE = "/var/lib/kdtree-metrics/kdtree_changes.prom"
ENDED_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # module_utils/_history.now() (a test holds them equal)


def textfile_for(history_path: str, given: str | None) -> str:
    """The textfile a history write rewrites: the one given ("" for none), else DEFAULT_TEXTFILE for
    the host's own history (the default path) and none for another history (a test's, a copy's)."""
    if given is not None:
        return given
    return DEFAULT_TEXTFILE if history_path == history.DEFAULT_PATH else ""


def action_of(entry: dict[str, Any]) -> str | None:
    """deploy, rollback, or None for an entry that has not ended (or ended in a way not known)."""
    result = entry.get("result")
    if result == "healthy":
        return "rollback" if entry.get("restored_from") else "deploy"
    if result in ("rolled_back", "removed"):
        return "rollback"
    return None


def ended_s(entry: dict[str, Any]) -> float | None:
    """The entry's end as Unix time; None when it has none or an odd one (never counted as 0)."""
    try:
        return float(calendar.timegm(time.strptime(str(entry.get("ended")), ENDED_FORMAT)))
    except ValueError:
        return None


def samples(entries: list[dict[str, Any]]) -> list[tuple[dict[str, str], float]]:
    """(labels, ended) of the newest ended entry of each action, in ACTIONS order."""
    newest: dict[str, tuple[float, dict[str, Any]]] = {}
    for entry in entries:
        action, ended = action_of(entry), ended_s(entry)
        if action is None or ended is None:
            continue
        if action not in newest or ended >= newest[action][0]:
            newest[action] = (ended, entry)
    out = []
    for action in ACTIONS:
        if action in newest:
            ended, entry = newest[action]
            labels = {"action": action, "result": str(entry["result"])}
            labels.update(build_id=str(entry.get("build_id") or ""), mode=str(entry.get("mode") or ""))
            out.append((labels, ended))
    return out


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(entries: list[dict[str, Any]]) -> str:
    """The textfile: HELP and TYPE, then one sample per action that has ended (none: no samples)."""
    lines = [f"# HELP {CHANGE} {HELP}", f"# TYPE {CHANGE} gauge"]
    for labels, ended in samples(entries):
        text = ",".join(f'{key}="{_label(labels[key])}"' for key in LABELS)
        lines.append(f"{CHANGE}{{{text}}} {ended!r}")
    return "\n".join(lines) + "\n"


def write(path: str, entries: list[dict[str, Any]]) -> None:
    """Write the textfile atomically (0644 in a 0755 directory, created when missing): node-exporter
    reads it as another user and never sees half a file."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".kdtree-changes.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(render(entries))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
