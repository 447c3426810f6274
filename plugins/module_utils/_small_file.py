"""One reader for the small files the deploy reads as root that a non-root user may control or point
elsewhere (stdlib only; no Ansible imports): a venv's pyvenv.cfg, METADATA and .pth files, the unit's
files and its EnvironmentFile= files, the patch's status files, kdtree's own drop-in.

Regular files only (a FIFO would block the read, and with it the host's lock; a device such as
/dev/zero never ends), opened without blocking, never through a symbolic link unless the caller says the
path may be one (systemd's own unit paths and an operator's EnvironmentFile=; the target must still be a
regular file), and never more than a cap: a larger file is refused, not read in part.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable

MAX_BYTES = 1 << 20  # 1 MiB: far above any unit, METADATA header block, .pth or status file


class SmallFileRefused(ValueError):
    """The file is not one this reader reads; str() names the path and why."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _open_regular(path: str, follow: bool) -> int:
    """A read-only, non-blocking descriptor of `path` when it is a regular file (checked before and
    after the open: a swap between the two is refused too)."""
    try:
        info = os.stat(path) if follow else os.lstat(path)
    except ValueError as exc:  # a NUL in the path
        raise SmallFileRefused(repr(path), "not a path") from exc
    if not stat.S_ISREG(info.st_mode):
        raise SmallFileRefused(path, f"{_kind(info.st_mode)}, not a regular file: not read")
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SmallFileRefused(path, "a symbolic link, not a regular file: not read") from exc
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise SmallFileRefused(path, f"{_kind(info.st_mode)}, not a regular file: not read")
    return fd


def read_small(
    path: str,
    *,
    max_bytes: int = MAX_BYTES,
    follow: bool = False,
    check: Callable[[os.stat_result], None] | None = None,
) -> bytes:
    """The whole of regular file `path`, at most `max_bytes`; SmallFileRefused for anything else
    (a link unless `follow`, a FIFO, a device, a directory, a larger file), OSError when it cannot be
    opened or read (FileNotFoundError when it is not there). `check`, when given, judges the open
    file's fstat (its owner and mode, say) before a byte is read, and raises what it refuses."""
    fd = _open_regular(path, follow)
    try:
        info = os.fstat(fd)
        if check is not None:
            check(info)
        size = info.st_size
        if size > max_bytes:
            raise SmallFileRefused(path, f"{size} bytes, more than the {max_bytes} this reader reads")
        chunks: list[bytes] = []
        left = max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:  # it grew while read
        raise SmallFileRefused(path, f"more than the {max_bytes} bytes this reader reads")
    return data


def read_small_text(path: str, *, max_bytes: int = MAX_BYTES, follow: bool = False) -> str:
    """read_small decoded as UTF-8 (undecodable bytes replaced)."""
    return read_small(path, max_bytes=max_bytes, follow=follow).decode("utf-8", "replace")


def read_head(path: str, count: int, *, follow: bool = True) -> bytes:
    """The first `count` bytes of regular file `path` (an executable may be large: only its head is
    read); SmallFileRefused / OSError as read_small."""
    fd = _open_regular(path, follow)
    try:
        return os.read(fd, count)
    finally:
        os.close(fd)
