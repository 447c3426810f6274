"""What one kdtree_history module call does (the module is its documentation, argument spec and
main()): read, begin or finish an entry of a host's deploy history under the history's lock, and
check the last good deploy's recorded drop-in fields for a previous rollback; every write rewrites the
textfile of the host's deploys and rollbacks too (module_utils/_change_metrics.py). Stdlib only."""

from __future__ import annotations

import os

from ansible_collections.kdtree.fleet.plugins.module_utils import _change_metrics as change_metrics
from ansible_collections.kdtree.fleet.plugins.module_utils import _history as history
from ansible_collections.kdtree.fleet.plugins.module_utils._small_file import read_small


def live_digest(path: str | None) -> str:
    """sha256 of the live drop-in's bytes ("" when none): any bytes, UTF-8 or not, have one."""
    if not path:
        return ""
    try:
        return history.digest(read_small(path))  # kdtree's own drop-in: a link or a FIFO there is refused
    except FileNotFoundError:
        return ""


def change(params: dict, check_mode: bool, entries: list, out: dict) -> list:
    action = params["action"]
    if action == "begin":
        out["entry"] = history.begin(entries, params["record"] or {})
        out["changed"] = True
    elif action == "finish":
        if not params.get("id") or not params.get("result"):
            raise history.HistoryError("action=finish needs id and result")
        extra = {"rolled_back_to": params["rolled_back_to"]} if params["rolled_back_to"] else {}
        figures = params.get("decode")
        if check_mode and params["id"] not in {e.get("id") for e in entries}:
            out["entry"] = history.finish(
                [{"id": params["id"]}],
                params["id"],
                params["result"],
                params["why"],
                figures,
                params.get("bake"),
                **extra,
            )
        else:
            out["entry"] = history.finish(
                entries, params["id"], params["result"], params["why"], figures, params.get("bake"), **extra
            )
        out["changed"] = True
    return history.trim(entries, params["keep"])


def run(params: dict, check_mode: bool) -> dict:
    """The module's work, apart from AnsibleModule (tests call this)."""
    path = params["path"]
    history.check_dir(os.path.dirname(path) or ".")
    live = live_digest(params.get("dropin_path"))
    out: dict = {"changed": False}
    if params["action"] == "read" or check_mode:
        entries = change(params, check_mode, history.load(path), out)
    else:
        with history.locked(path):  # read-modify-write: a concurrent writer waits, loses nothing
            entries = change(params, check_mode, history.load(path), out)
            history.save(path, entries)
            textfile = change_metrics.textfile_for(path, params.get("textfile"))
            if (
                textfile
            ):  # the host's deploys and rollbacks for node-exporter (module_utils/_change_metrics.py)
                history.check_dir(os.path.dirname(textfile) or ".")
                change_metrics.write(textfile, entries)
    good = history.last_good(entries, params.get("unlike_digest") or live)
    out.update(
        entries=entries,
        last_good=good,
        live_dropin_digest=live,
        referenced=history.referenced(entries),
    )
    restore = params.get("restore")
    if restore and good is not None:
        try:
            out["last_good_fields"] = history.restore_fields(
                good,
                restore["build_root"],
                restore["patch_root"],
                restore["status_dir"],
                list(restore.get("extra_keys") or []),
            )
            out["last_good_refusal"] = ""
        except history.HistoryError as exc:
            out["last_good_fields"], out["last_good_refusal"] = None, str(exc)
    elif restore:
        out["last_good_fields"], out["last_good_refusal"] = None, ""
    return out
