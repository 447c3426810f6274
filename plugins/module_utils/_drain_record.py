"""The drain record a killed run may have left on the host (kdtree_drain_record_path), read without
trusting it (stdlib and _router only; no Ansible imports).

The record is evidence, never instructions: whoever can write that path must not be able to send the
router's API key elsewhere or add a backend to the router. So it is read only when it is a regular file
(module_utils/_small_file: never through a symbolic link, a FIFO never blocks the read; the open
descriptor's fstat decides), owned by root or the user the module runs as, not group- or world-writable,
and at most MAX_BYTES; and its URLs are only COMPARED with the inventory's (the role's variables): a
record naming another router or another worker is refused, and what the recover does uses the
inventory's URLs only.
"""

from __future__ import annotations

import os
import stat

from ansible_collections.kdtree.fleet.plugins.module_utils import _router as router
from ansible_collections.kdtree.fleet.plugins.module_utils import _small_file as small_file

MAX_BYTES = 64 * 1024  # a record is a few hundred bytes
MODES = ("sglang_router", "hooks")


class RecordRefused(router.RouterError):
    """The record is not one the recover acts on; str() says why and that nothing was changed."""


def _refuse(path: str, why: str) -> RecordRefused:
    return RecordRefused(
        f"drain record {path}: {why}; it was not acted on (look at it and remove it by hand). "
        "Nothing was changed"
    )


def check_stat(path: str, info: os.stat_result, owners: set[int], max_bytes: int = MAX_BYTES) -> None:
    """RecordRefused unless `info` (fstat of the open record) is a regular file owned by one of
    `owners`, not group- or world-writable and at most `max_bytes`."""
    if not stat.S_ISREG(info.st_mode):
        raise _refuse(path, "not a regular file")
    if info.st_uid not in owners:
        wanted = " or ".join(f"uid {uid}" for uid in sorted(owners))
        raise _refuse(path, f"owned by uid {info.st_uid}, not by root or the deploying user ({wanted})")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _refuse(path, f"group- or world-writable (mode {stat.S_IMODE(info.st_mode):04o})")
    if info.st_size > max_bytes:
        raise _refuse(path, f"{info.st_size} bytes, more than the {max_bytes} a record may have")


def read(path: str, owners: set[int] | None = None, max_bytes: int = MAX_BYTES) -> dict | None:
    """The record at `path` as a JSON object; None when there is none; RecordRefused for anything the
    recover must not act on (see the module's docstring)."""
    owners = {0, os.geteuid()} if owners is None else owners
    try:
        data = small_file.read_small(
            path, max_bytes=max_bytes, check=lambda info: check_stat(path, info, owners, max_bytes)
        )
    except FileNotFoundError:
        return None
    except small_file.SmallFileRefused as exc:
        raise _refuse(path, exc.reason) from None
    except ValueError:  # a NUL in the path
        raise _refuse(repr(path), "not a path") from None
    except OSError as exc:
        raise _refuse(path, f"cannot be read ({exc.strerror})") from None
    try:
        record = router.parse_json(data, "record")
    except router.RouterError as exc:
        raise _refuse(path, str(exc)) from None
    if not isinstance(record, dict):
        raise _refuse(path, "not a JSON object (not a record this collection writes)")
    return record


def _text(record: dict, key: str) -> str:
    value = record.get(key, "")
    return value if isinstance(value, str) else ""


def _same(path: str, what: str, recorded: str, inventory: str, variable: str) -> None:
    """RecordRefused unless the record's URL is the inventory's (canonical form)."""
    try:
        left = router.canonical(recorded, f"{what} the record names")
    except router.RouterError as exc:
        raise _refuse(path, str(exc)) from None
    right = router.canonical(inventory, f"{what} of the inventory ({variable})")
    if left != right:
        raise _refuse(
            path,
            f"it names the {what} {router.shown(recorded)} but the inventory's is {router.shown(inventory)} "
            f"({variable}); the recover uses the inventory's URLs only and never acts on a record naming "
            "another one",
        )


def compare(path: str, record: dict, router_url: str, worker_url: str, rejoin_hooks: bool) -> dict:
    """What the recover may do with `record`, decided on the inventory's URLs: the record's mode,
    run and time (for the warning). RecordRefused when the record names another worker or router,
    when its mode is unknown, or when the inventory lacks what that mode's rejoin needs."""
    mode = record.get("mode")
    if mode not in MODES:
        raise _refuse(
            path, f"mode {router.shown(mode)} is not one this collection writes ({', '.join(MODES)})"
        )
    if not _text(record, "worker_url"):
        raise _refuse(path, "it names no worker_url (not a record this collection writes)")
    if mode == "sglang_router":
        if not router_url:
            raise _refuse(
                path,
                f"the host was drained from the router {router.shown(_text(record, 'router_url'))}, and the "
                "inventory names no router (kdtree_drain_router_url): set it to rejoin the host",
            )
        _same(path, "router", _text(record, "router_url"), router_url, "kdtree_drain_router_url")
    elif not rejoin_hooks:
        raise _refuse(
            path,
            "the host was drained by hooks, and the inventory has no rejoin hook "
            "(kdtree_drain_rejoin_command or kdtree_drain_rejoin_tasks): set one to rejoin the host",
        )
    _same(path, "worker", _text(record, "worker_url"), worker_url, "kdtree_drain_worker_url")
    return {
        "mode": mode,
        "run_id": _text(record, "run_id")[:100] or "?",
        "since": _text(record, "since")[:100] or "?",
    }
