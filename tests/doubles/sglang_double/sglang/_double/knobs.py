"""TEST DOUBLE failure and timing knobs, read from the environment (children inherit them)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass


def _float(name: str, default: float | None) -> float | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    return float(raw)


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw else default


@dataclass(frozen=True)
class Knobs:
    load_seconds: float  # simulated weight loading per scheduler
    warmup_seconds: float  # between binding HTTP and "ready to roll"
    crash_after: float | None  # seconds after the scheduler starts; None = never
    crash_rank: int
    hang: bool  # one rank never becomes ready
    hang_rank: int
    # journal robustness (the smoke check's watcher): before the attention backend is imported
    log_bytes: bool = False  # stderr gets bytes that are not UTF-8 and a 100 KiB line
    benign_traceback: bool = False  # SGLang's logged OpenAIServingResponses init traceback
    flood_lines: int = 0  # this many lines, so journald's rate limiting drops the marker after them
    # each POST /generate takes this long (requests really in flight during a drain or a restart)
    generate_seconds: float = 0.0
    # JSON lines, one when each POST /generate arrives and one when it is answered (the request log the
    # drain tests read: which requests reached this host, and when)
    request_log: str = ""

    @classmethod
    def from_env(cls) -> Knobs:
        return cls(
            load_seconds=_float("SGLANG_DOUBLE_LOAD_SECONDS", 2.0) or 0.0,
            warmup_seconds=_float("SGLANG_DOUBLE_WARMUP_SECONDS", 0.5) or 0.0,
            # SGLANG_DOUBLE_CRASH_HOST: only that host crashes (one inventory value for a whole batch)
            crash_after=_float("SGLANG_DOUBLE_CRASH_AFTER", None)
            if os.environ.get("SGLANG_DOUBLE_CRASH_HOST", "") in ("", socket.gethostname())
            else None,
            crash_rank=_int("SGLANG_DOUBLE_CRASH_RANK", 0),
            hang=os.environ.get("SGLANG_DOUBLE_HANG", "") not in ("", "0"),
            hang_rank=_int("SGLANG_DOUBLE_HANG_RANK", 0),
            log_bytes=os.environ.get("SGLANG_DOUBLE_LOG_BYTES", "") not in ("", "0"),
            benign_traceback=os.environ.get("SGLANG_DOUBLE_BENIGN_TRACEBACK", "") not in ("", "0"),
            flood_lines=_int("SGLANG_DOUBLE_FLOOD_LINES", 0),
            generate_seconds=_float("SGLANG_DOUBLE_GENERATE_SECONDS", 0.0) or 0.0,
            request_log=os.environ.get("SGLANG_DOUBLE_REQUEST_LOG", "").strip(),
        )
