"""The process-wide patch state and the lock that guards it.

One `PatchState` per process (`STATE`), read and written under `LOCK` by the lifecycle (install,
uninstall, status) and by the dispatch (kernel loading, runtime fallback, counters).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kdtree_verify.config import DEFAULT_TOL

LOCK = threading.RLock()


class PatchState:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.mode = "off"
        self.state = "not-installed"
        self.reason = ""
        self.lib = ""
        self.lib_sha256 = ""
        self.sglang = ""
        self.cls: Any = None
        self.original: Callable[..., Any] | None = None
        self.binding: Any = None
        self.kernel: Any = None  # VerifyKernel once loaded
        self.kernel_error = ""  # set once loading failed: fall back for good
        self.checked_devices: dict[str, str | None] = {}
        self.counts: dict[str, int] = {}
        self.validate_stats: Any = None  # ValidateStats, created on the first validate call
        self.timings: Any = None  # telemetry.timing.Timings, created on the first validate call
        self.tol = DEFAULT_TOL
        self.via = "class-patch"  # or "plugin" (HookRegistry owns the class attribute)
        # Plugin mode: why HookRegistry's hook is not in effect on this class ("" when it is).
        self.hook_problem: Callable[[Any], str] | None = None

    def count(self, key: str) -> None:
        """One more call down `key`'s path. No lock, on purpose: this runs on every forward_extend
        call, and SGLang calls forward_extend from one thread per scheduler process. Readers (the
        status publisher) take `dict(self.counts)`, one C-level copy under the GIL, never a torn dict;
        two threads counting at once could lose an increment, never raise."""
        self.counts[key] = self.counts.get(key, 0) + 1


STATE = PatchState()
