"""One call's share of a long wait (host side; no Ansible imports).

Ansible shows a task's result only when it ends, so a module that waits for minutes says nothing until
then. A module that waits in chunks returns after `chunk_s` seconds with state=pending; its action
plugin (plugin_utils/_progress.run_chunks) prints one progress line and calls it again with the time
waited so far as an internal option. The wait's own limit stays whole: a chunk's deadline is the limit
less what the earlier chunks waited, so the wait ends (and fails with its own message) when it would
have ended in one call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

WAITED_OPTION = "_waited_s"  # the internal option: seconds the earlier chunks of this wait waited


class ChunkOver(Exception):
    """The chunk's time is up and the wait is not over: the caller returns state=pending."""

    def __init__(self, waited_s: float, limit_s: float, seen: str) -> None:
        super().__init__(seen)
        self.waited_s = waited_s
        self.limit_s = limit_s
        self.seen = seen
        self.asked = False  # a V(add) wait: whether the router was asked to add the worker by now

    def progress(self, what: str) -> str:
        """`what` is waited for, for how long of its limit, and what was last seen."""
        return f"{self.waited_s:.0f} s of {self.limit_s:g} s for {what} ({self.seen})"


@dataclass
class Chunk:
    """A wait of at most `limit_s` of which `waited_s` went by in earlier calls; this call returns after
    `chunk_s` seconds (0: it waits to the end)."""

    limit_s: float
    waited_s: float = 0.0
    chunk_s: float = 0.0
    clock: Callable[[], float] = time.monotonic
    started: float = field(default=-1.0)

    def __post_init__(self) -> None:
        if self.started < 0:
            self.started = self.clock()

    @property
    def deadline(self) -> float:
        """When the whole wait runs out, on `clock`."""
        return self.started + self.limit_s - self.waited_s

    def waited(self, now: float | None = None) -> float:
        """Seconds the whole wait has waited (the earlier chunks and this one)."""
        return self.waited_s + (self.clock() if now is None else now) - self.started

    def check(self, now: float, seen: str) -> None:
        """ChunkOver when this call's share is used up (and the wait's deadline is not reached: then
        the caller's own timeout applies, with its own message)."""
        if self.chunk_s > 0 and now - self.started >= self.chunk_s and now < self.deadline:
            raise ChunkOver(self.waited(now), self.limit_s, seen)
