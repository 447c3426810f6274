"""Waiting on local processes in the suites that start servers on this machine (tests/drain,
tests/testhosts): a free TCP port of 127.0.0.1 and a bounded wait for a condition. Imported by its
collection path, `ansible_collections.kdtree.fleet.tests.helpers.polling`."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(cond: Callable[[], bool], timeout: float, what: str, poll: float = 0.05) -> None:
    """Return once `cond()` is true; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
