"""May root run or import what is at a path? (stdlib only; no Ansible imports.)

The deploy runs as root. Code it runs or imports for a unit that itself runs as root must be as safe
as the unit: every path and each directory above it owned by root and writable by nobody else (a
sticky directory such as /tmp may sit above an entry, since only root may then rename what root owns
there). The same rule as kdtree_patch's check of the patch root.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection


def _owners_text(owners: Collection[int]) -> str:
    others = sorted(uid for uid in set(owners) if uid != 0)
    return "root" + "".join(f" or uid {uid}" for uid in others)


def unsafe_reason(path: str, owners: Collection[int] = (0,), *, trusted_links: bool = False) -> str:
    """Empty when `path` (resolved) and every directory above it are owned by one of `owners` (root
    alone by default) and not group- or world-writable; else why not, naming the offending path.
    With `trusted_links`, a symlink on the way must be owned by one of `owners` too (else whoever
    owns it could point it elsewhere after the check)."""
    if not path:
        return ""
    for candidate in dict.fromkeys([os.path.abspath(path), os.path.realpath(path)]):
        entry = True
        current = candidate
        while True:
            try:
                st = os.lstat(current)
            except OSError as exc:
                return f"{current}: cannot stat ({exc.strerror})"
            if stat.S_ISLNK(st.st_mode):
                if trusted_links and st.st_uid not in owners:
                    return f"{current} is a symlink owned by uid {st.st_uid}, not {_owners_text(owners)}"
            else:
                writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
                sticky_parent = not entry and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
                if st.st_uid not in owners:
                    return f"{current} is owned by uid {st.st_uid}, not {_owners_text(owners)}"
                if writable and not sticky_parent:
                    return f"{current} is group- or world-writable (mode {stat.S_IMODE(st.st_mode):04o})"
            entry = False
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
    return ""


def first_unsafe(paths: list[str]) -> str:
    """The reason for the first unsafe path of `paths` (empty: all safe)."""
    for path in paths:
        reason = unsafe_reason(path)
        if reason:
            return reason
    return ""
