"""A host's deploy history: the one owner of its file format (stdlib only; no Ansible imports).

The file (default /var/lib/kdtree/state.json, root-owned 0600 in a 0700 directory) holds
`{"format": 1, "entries": [...]}`, oldest first. Each entry is one deploy (or a restore of an older
one): what it installed (build id, library, patch directory and digest, verify mode, the drop-in's
full text and digest, what the smoke check expects), when it started and ended, and how it ended:

    running      the deploy was started and has not ended (a killed play leaves it so)
    healthy      the smoke check passed; the newest such entry is the host's "last good"
    rolled_back  the deploy failed; `why` says why, `rolled_back_to` says to what (previous/stock)
    removed      kdtree was removed from the host (rollback to stock) after this entry

A deploy whose smoke check sent traffic records what it did to decode under `decode` when it ends
(module_utils/_decode.py defines the figures and checks the record); an entry without it (no
traffic, a restore, or written before the figures existed) reads as before, and decode_of() gives
None for it.

Writes are atomic (a temporary file in the same directory, fsync, rename), so a reader never sees a
half-written file and a killed run leaves the previous version; a change (read, modify, write) holds
an flock() of the history's directory, so concurrent writers never lose each other's entries.

The directory is checked on every call like the build root (check_dir): it and every parent owned by
root and not writable by group or others (a root-owned sticky parent such as /tmp excepted), never a
symlink. A `previous` rollback never trusts the stored drop-in text: restore_fields() checks the
entry's recorded fields (`dropin_fields`, build, patch, mode) against the checked roots, and the
service role renders the drop-in from them with its one template (roles/kdtree_service, render_dropin).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import stat
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from ansible_collections.kdtree.fleet.plugins.module_utils import _bake_record as bake_record
from ansible_collections.kdtree.fleet.plugins.module_utils import _decode as decode
from ansible_collections.kdtree.fleet.plugins.module_utils._dropin_env import CONSTANT_ENV, FIXED_ENV
from ansible_collections.kdtree.fleet.plugins.module_utils._flock import held
from ansible_collections.kdtree.fleet.plugins.module_utils._modes import MODES

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
    # the unit's --node-rank (a node of a multi-node server: rank 0 alone is drained and gets traffic)
    "node_rank",
    "nccl_env",
    "status_dir",
    "dropin_path",
    "dropin",
    "exec_start_replaced",
    "restored_from",
    "dropin_fields",
)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PATH_PART = re.compile(r"^[A-Za-z0-9_.+-]+$")
LIBRARY = "libkdtree_verify.so"
# The entry key of a deploy's decode figures (module_utils/_decode.RECORD_KEYS).
DECODE = "decode"
# Why the decode figures a failed deploy's rescue passed were not recorded (finish).
DECODE_REFUSED = "decode_refused"
# The entry key of the bake's verdict between batches (module_utils/_bake_record), and why a record
# a failed deploy's rescue passed was refused.
BAKE = "bake"
BAKE_REFUSED = "bake_refused"


class HistoryError(Exception):
    """The history file cannot be read or written (the message says which and why)."""


def digest(text: str | bytes) -> str:
    """The digest of a drop-in as the history records it (sha256, hex, of its UTF-8 bytes; bytes as
    they are, so a drop-in that is not UTF-8 still has one)."""
    raw = text if isinstance(text, bytes) else text.encode("utf-8", "surrogateescape")
    return hashlib.sha256(raw).hexdigest()


def _trusted() -> frozenset[int]:
    """Owners trusted: root, and the user this runs as (root on a host: the modules run with become)."""
    return frozenset((0, os.geteuid()))


def unsafe_dirs(directory: str) -> list[str]:
    """The directories of `directory` and its parents that others could use to swap what root reads
    there: "mode uid path" of each not owned by root, writable by group or others (a root-owned sticky
    parent, like /tmp, excepted: others cannot rename root's entries in it), or a symlink. Missing
    ones are skipped (the history creates its own directory, 0700)."""
    found: list[str] = []
    path = os.path.abspath(directory)
    first = True
    while True:
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            info = None
        except OSError as exc:
            found.append(f"? ? {path} ({exc.strerror})")
            info = None
        if info is not None:
            mode = stat.S_IMODE(info.st_mode)
            sticky_parent = not first and mode & stat.S_ISVTX and info.st_uid in _trusted()
            if stat.S_ISLNK(info.st_mode):
                found.append(f"{mode:o} {info.st_uid} {path} (a symlink)")
            elif info.st_uid not in _trusted() or (mode & 0o022 and not sticky_parent):
                found.append(f"{mode:o} {info.st_uid} {path}")
            first = False
        parent = os.path.dirname(path)
        if parent == path:
            return found
        path = parent


def check_dir(directory: str) -> None:
    """HistoryError naming the unsafe directories (see unsafe_dirs)."""
    unsafe = unsafe_dirs(directory)
    if unsafe:
        raise HistoryError(
            f"refusing the deploy history under {directory}: these directories are writable by "
            f"group/others, not owned by root, or symlinks (mode uid path): {'; '.join(unsafe)}"
        )


@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
    """An exclusive flock() of the history's directory around a read-modify-write (created 0700 when
    missing; the kernel drops the lock when the process dies)."""
    directory = os.path.dirname(path) or "."
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise HistoryError(f"cannot lock the deploy history {path}: {exc}") from exc
    with held(fd):
        yield


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def new_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)


def load(path: str) -> list[dict[str, Any]]:
    """The entries, oldest first; [] when the file does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise HistoryError(f"cannot read the deploy history {path}: {exc}") from exc
    try:
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_uid not in _trusted() or info.st_mode & 0o022:
                raise HistoryError(
                    f"refusing the deploy history {path}: not a regular root-owned file that only root "
                    f"can write (mode {stat.S_IMODE(info.st_mode):o}, uid {info.st_uid}); move it aside"
                )
            data = json.loads(handle.read().decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise HistoryError(f"cannot read the deploy history {path}: {type(exc).__name__}: {exc}") from exc
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
    entries: list[dict[str, Any]],
    entry_id: str,
    result: str,
    why: str = "",
    decode_figures: dict[str, Any] | None = None,
    bake: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """End the entry `entry_id` with `result` (one of RESULTS) and `why`, and its decode figures
    (decode.checked) and bake record (bake_record.checked, under BAKE) when given. An odd record
    is refused: for a healthy deploy with HistoryError,
    before anything is written; for a deploy that failed (its rescue records what its smoke traffic
    measured before the rollback) the entry still ends, without the figures and with why they were
    refused under DECODE_REFUSED, so that a failure is never left unrecorded."""
    if result not in RESULTS:
        raise HistoryError(f"result must be one of {', '.join(RESULTS)}, not {result!r}")
    if decode_figures is not None:
        try:
            extra[DECODE] = decode.checked(decode_figures)
        except ValueError as exc:
            if result == "healthy":
                raise HistoryError(f"refusing the decode figures of deploy {entry_id}: {exc}") from exc
            extra[DECODE_REFUSED] = str(exc)
    if bake is not None:
        try:
            extra[BAKE] = bake_record.checked(bake)
        except ValueError as exc:
            if result == "healthy":
                raise HistoryError(f"refusing the bake record of deploy {entry_id}: {exc}") from exc
            extra[BAKE_REFUSED] = str(exc)
    for entry in entries:
        if entry.get("id") == entry_id:
            entry.update(result=result, why=why, ended=now(), **extra)
            return entry
    raise HistoryError(f"no deploy {entry_id!r} in the history")


def decode_of(entry: dict[str, Any] | None) -> dict[str, Any] | None:
    """The decode figures an entry recorded (decode.checked); None when it has none, or a record
    this version cannot read (never an error: the history still reads)."""
    record = (entry or {}).get(DECODE)
    if record is None:
        return None
    try:
        return decode.checked(record)
    except ValueError:
        return None


def measured(entries: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(the newest healthy deploy that recorded decode figures, the one with figures before it);
    None where there is none. Restores and rolled-back deploys are not measured deploys."""
    found = [
        e for e in entries if e.get("result") == "healthy" and not e.get("restored_from") and decode_of(e)
    ]
    newest = found[-1] if found else None
    return newest, found[-2] if len(found) > 1 else None


def _bad_text(value: Any) -> bool:
    return not isinstance(value, str) or any(ord(c) < 32 or ord(c) == 127 for c in value)


def _under(path: str, root: str, shape: str) -> str:
    """ "" when `path` is root/<shape parts> and stays there once resolved, else why not."""
    if _bad_text(path) or not os.path.isabs(path):
        return f"{path!r} is not an absolute path"
    rel = os.path.relpath(os.path.normpath(path), os.path.normpath(root))
    parts = rel.split(os.sep)
    want = shape.split("/")
    if len(parts) != len(want) or any(
        (w == "*" and not PATH_PART.match(p)) or (w != "*" and p != w) or p in (".", "..")
        for p, w in zip(parts, want)  # noqa: B905  # same length (checked above); strict= is Python 3.10+
    ):
        return f"{path} is not {root}/{shape}"
    real = os.path.realpath(path)
    if os.path.commonpath([real, os.path.realpath(root)]) != os.path.realpath(root):
        return f"{path} resolves to {real}, outside {root}"
    return ""


def owned_key(key: str, extra_keys: list[str]) -> bool:
    """Whether a recorded drop-in may set `key`, by an allowlist: kdtree's own (FIXED_ENV), NCCL_*, or
    one today's kdtree_service_env_extra sets (extra_keys). Anything else (PYTHONSTARTUP, LD_PRELOAD,
    BASH_ENV... any variable that makes an interpreter or the loader run other code) is refused: a
    denylist misses what it does not name."""
    return key in FIXED_ENV or key.startswith("NCCL_") or key in extra_keys


def restore_fields(
    entry: dict[str, Any], build_root: str, patch_root: str, status_dir: str, extra_keys: list[str]
) -> dict[str, Any]:
    """The drop-in fields of `entry` (a last good deploy) once each is checked, for the service role's
    render_dropin: {env, argv, secret_names}. HistoryError saying which field is refused and why:
    the roots unsafe (check_dir), the library not <build_root>/builds/<build_id>/libkdtree_verify.so,
    the patch not <patch_root>/<dir>, the mode not one of MODES, an environment key kdtree does not own
    (owned_key), a value that disagrees with the entry or holds a control character,
    no recorded fields (an entry older than this check: its text is never trusted)."""
    name = f"deploy {entry.get('id', '?')}"

    def refuse(why: str) -> HistoryError:
        return HistoryError(f"the last good {name} cannot be put back: {why}")

    fields = entry.get("dropin_fields")
    if not isinstance(fields, dict):
        raise refuse(
            "it has no recorded drop-in fields (recorded by an older kdtree); "
            "its stored text is never trusted"
        )
    for root in (build_root, patch_root):
        unsafe = unsafe_dirs(root)
        if unsafe:
            raise refuse(
                f"{root} is writable by group/others, not owned by root or a symlink: {'; '.join(unsafe)}"
            )
    build_id, lib, patch, mode = (entry.get(k) for k in ("build_id", "lib_path", "patch_dir", "mode"))
    if _bad_text(build_id) or not PATH_PART.match(build_id or ""):
        raise refuse(f"build id {build_id!r} is not a build id")
    why = _under(lib, build_root, f"builds/{build_id}/{LIBRARY}") if isinstance(lib, str) else "no library"
    why = why or (_under(patch, patch_root, "*") if isinstance(patch, str) else "no patch directory")
    if why:
        raise refuse(why)
    if mode not in MODES:
        raise refuse(f"mode {mode!r} is not one of {', '.join(MODES)}")
    env = fields.get("env")
    if not isinstance(env, list) or not env:
        raise refuse("its environment is not a list of [name, value]")
    pairs: list[list[str]] = []
    for item in env:
        if not isinstance(item, (list, tuple)) or len(item) != 2 or _bad_text(item[0]) or _bad_text(item[1]):
            raise refuse(f"environment item {item!r} is not [name, value] of one-line text")
        key, value = str(item[0]), str(item[1])
        if not ENV_NAME.match(key) or not owned_key(key, extra_keys):
            raise refuse(f"environment variable {key} is not one kdtree owns")
        pairs.append([key, value])
    found = dict(pairs)
    if len(found) != len(pairs):
        raise refuse("an environment variable is set twice")
    nccl = entry.get("nccl_env") if isinstance(entry.get("nccl_env"), dict) else {}
    expect = {"KDTREE_VERIFY": mode, "KDTREE_LIB": lib, "KDTREE_STATUS_DIR": status_dir, **CONSTANT_ENV}
    expect.update({str(k): str(v) for k, v in nccl.items()})
    for key, value in expect.items():
        if found.get(key) != value:
            raise refuse(f"{key}={found.get(key)!r} in its environment, not {value!r}")
    if [k for k in found if k.startswith("NCCL_") and k not in nccl]:
        raise refuse("its environment sets NCCL_ variables its nccl_env does not name")
    if found.get("PYTHONPATH", "").split(":")[0] != patch:
        raise refuse(f"PYTHONPATH does not start with its patch directory {patch}")
    if not all(os.path.isabs(part) for part in found["PYTHONPATH"].split(":")):
        raise refuse("PYTHONPATH holds a relative directory")
    for part in found["PYTHONPATH"].split(":")[1:]:  # every entry: the interpreter imports from each
        unsafe = unsafe_dirs(part)
        if unsafe:
            raise refuse(
                f"PYTHONPATH entry {part} is writable by group/others, not owned by root or a symlink: "
                + "; ".join(unsafe)
            )
    try:
        float(found.get("KDTREE_STATUS_INTERVAL", ""))
    except ValueError:
        raise refuse("KDTREE_STATUS_INTERVAL is not a number") from None
    argv = fields.get("argv", [])
    if not isinstance(argv, list) or any(_bad_text(a) for a in argv):
        raise refuse("its command line is not a list of one-line text")
    if bool(argv) != bool(entry.get("exec_start_replaced")):
        raise refuse("its command line and exec_start_replaced disagree")
    if argv and (not os.path.isabs(argv[0]) or argv[1:3] != ["-m", "sglang.launch_server"]):
        raise refuse("its command line is not <python> -m sglang.launch_server ...")
    names = fields.get("secret_names", [])
    if not isinstance(names, list) or not all(isinstance(n, str) and ENV_NAME.match(n) for n in names):
        raise refuse("its secret variable names are not variable names")
    return {"env": pairs, "argv": [str(a) for a in argv], "secret_names": sorted(names)}
