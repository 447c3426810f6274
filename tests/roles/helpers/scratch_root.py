"""Scratch directories the roles accept as a root for code a root service loads (a build root, a patch
root) from any clone, /tmp/<clone> included.

The roles refuse a directory when it or any directory above it is not owned by root or is writable by
group/others (roles/kdtree_common/tasks/safe_dirs.yml; /tmp's mode 1777 is refused too). A test that
runs a role on this machine therefore needs a scratch root whose whole path obeys that rule: the clone's
own build/ when the clone's path does, else a directory of the test suite's own under a safe system
parent. The rule here is the role's, checked the same way (every existing directory of the resolved
path), so a scratch root handed out is one the role accepts.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# Where a scratch root may go, first that is safe wins: the clone's build/ (git-ignored), then parents
# of the test suite's own outside the clone (root's cache, then the system's).
PARENTS = (
    ROOT / "build",
    Path.home() / ".cache" / "kdtree-fleet-tests",
    Path("/var/cache/kdtree-fleet-tests"),
)


def unsafe_reason(path: Path) -> str:
    """Empty when every existing directory of `path` (resolved) up to / is owned by root and not
    writable by group or others, as the roles require; else the first offending directory."""
    current = Path(os.path.realpath(path))
    for entry in (current, *current.parents):
        try:
            st = entry.stat()
        except FileNotFoundError:
            continue
        if st.st_uid != 0:
            return f"{entry} is owned by uid {st.st_uid}, not root"
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"{entry} is writable by group/others (mode {stat.S_IMODE(st.st_mode):o})"
    return ""


def safe_parent(parents: tuple[Path, ...] = PARENTS) -> Path:
    """The first of `parents` whose whole path the roles accept, made (mode 0755) if missing."""
    refused = []
    for parent in parents:
        why = unsafe_reason(parent)
        if why:
            refused.append(why)
            continue
        parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        why = unsafe_reason(parent)  # what mkdir made (a umask could leave group write)
        if not why:
            return parent
        refused.append(why)
    raise RuntimeError("no safe parent for a scratch root: " + "; ".join(refused))


@contextmanager
def scratch_root(prefix: str, parents: tuple[Path, ...] = PARENTS) -> Iterator[Path]:
    """A fresh directory (mode 0755) under the first safe parent, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=safe_parent(parents)))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
