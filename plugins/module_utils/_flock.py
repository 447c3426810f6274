"""An exclusive flock() of an open descriptor for the length of a with-block (stdlib only).

The deploy history's directory lock (_history.locked) and the kdtree lock's guard (_lock.guard) each
open their own descriptor and refuse in their own words when they cannot; from there on they are the
same: wait for the lock, run the block, close the descriptor, which drops the lock (as the kernel
does when the process dies, so it never goes stale).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator


@contextlib.contextmanager
def held(fd: int) -> Iterator[None]:
    """Block until `fd` holds an exclusive flock(), run the block, close `fd` (also on an error)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
