"""Validate mode's A/B timing: per target-verify call, the time of the original's attention and of
the kernel's on the same inputs, summed per shape bucket (docs/CONTRACTS.md section 3b, "timing").

What is timed: the attention computation only. Validate writes the KV cache once, as mode on does
(`dispatch._write_kv_like_original`), then runs the original with ``save_kv_cache=False`` and the
kernel into a scratch buffer; the shared KV write is in neither figure.

A bucket is (batch size, draft tokens n, prefix-length bucket, heads) (`bucket_key`). The first
WARMUP_CALLS calls of each bucket in a process are not timed (counted as ``untimed_warmup``): the
first calls compile, allocate and fill caches, on either side.

Clocks:
- ``host`` (CPU tensors, the library double): `time.perf_counter_ns` around each call; CPU torch
  ops are synchronous, so the host clock is the computation's time.
- ``cuda_event`` (GPU): three `torch.cuda.Event(enable_timing=True)` recorded on the forward's
  stream (before the original, between, after the kernel); nothing waits on them in the forward.
  The status publisher's thread calls `drain()`, which reads, in order, the calls whose last event
  has completed (`Event.query()`, no wait) and adds `elapsed_time` to the bucket; the rest stay for
  the next drain. At most MAX_PENDING calls wait: beyond that a call is not timed
  (``untimed_backlog``). Events are reused once read.
- Sampling rule under CUDA graphs: a call that runs while a graph is being captured is not timed
  (an event recorded into a capture times the capture, not a replay), and is counted as
  ``untimed_captured``. Replays of a captured graph do not pass through Python at all: they are
  neither counted nor timed (as the call counters, section 3b). The timed sample is therefore the
  eager calls (batch sizes beyond the graphs', and every call with CUDA graphs off).

Stdlib only at import: torch is imported for the CUDA clock when the first GPU call needs it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from kdtree_verify.telemetry.metrics import BUCKET_LABELS  # the bucket's keys, their one owner

# The calls of each bucket (per process) not timed at the start: compilation, allocation, cold caches.
WARMUP_CALLS = 3
# GPU: calls whose events wait for the publisher's drain, at most (then untimed_backlog).
MAX_PENDING = 4096
# The prefix-length buckets: the mean prefix per request, rounded up to one of these (else "more").
PREFIX_BOUNDS = (256, 1024, 4096, 16384, 65536)
HOST_CLOCK = "host"
CUDA_CLOCK = "cuda_event"
UNKNOWN = "unknown"


def prefix_bucket(prefix_tokens: Any, batch: int) -> str:
    """The prefix-length label of a call: "le<bound>" for the mean prefix per request
    (`prefix_tokens` summed over the batch, e.g. ForwardBatch.seq_lens_sum, a host int),
    "more" beyond the last bound, UNKNOWN when the batch does not say."""
    if isinstance(prefix_tokens, bool) or not isinstance(prefix_tokens, int) or batch < 1:
        return UNKNOWN
    mean = prefix_tokens / batch
    for bound in PREFIX_BOUNDS:
        if mean <= bound:
            return f"le{bound}"
    return "more"


def bucket_key(batch: int, draft: int, prefix: str, heads: int) -> tuple[int, int, str, int]:
    return (int(batch), int(draft), str(prefix), int(heads))


class _Bucket:
    __slots__ = ("kernel_ns", "original_ns", "seen", "timed")

    def __init__(self) -> None:
        self.seen = 0
        self.timed = 0
        self.kernel_ns = 0
        self.original_ns = 0


class Timings:
    """One process's timing sums. The forward thread calls `start`/`host`/`events`/`captured`;
    the publisher's thread `drain` and `snapshot`. `event_factory` makes a timing event (tests pass
    a fake; default `torch.cuda.Event(enable_timing=True)`)."""

    def __init__(self, clock: str = HOST_CLOCK, event_factory: Callable[[], Any] | None = None) -> None:
        self.clock = clock
        self._event_factory = event_factory
        self._lock = threading.Lock()
        self._buckets: dict[tuple[int, int, str, int], _Bucket] = {}
        self._pending: deque[tuple[tuple[int, int, str, int], Any, Any, Any]] = deque()
        self._free: deque[Any] = deque()
        self.untimed = {"warmup": 0, "captured": 0, "backlog": 0}

    # -- the forward thread ------------------------------------------------------------------------
    def start(self, key: tuple[int, int, str, int]) -> bool:
        """One more call of `key`; True when it is to be timed (past the warm-up)."""
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = self._buckets[key] = _Bucket()
            bucket.seen += 1
            if bucket.seen <= WARMUP_CALLS:
                self.untimed["warmup"] += 1
                return False
            return True

    def captured(self) -> None:
        """A call under CUDA graph capture: not timed (the sampling rule)."""
        with self._lock:
            self.untimed["captured"] += 1

    def host(self, key: tuple[int, int, str, int], original_ns: int, kernel_ns: int) -> None:
        """A call timed by the host clock."""
        with self._lock:
            bucket = self._buckets[key]
            bucket.timed += 1
            bucket.original_ns += int(original_ns)
            bucket.kernel_ns += int(kernel_ns)

    def event(self) -> Any:
        """A timing event, reused when one was read already."""
        try:
            return self._free.popleft()
        except IndexError:
            pass
        if self._event_factory is None:
            import torch

            self._event_factory = lambda: torch.cuda.Event(enable_timing=True)
        return self._event_factory()

    def room(self) -> bool:
        """May one more call's events wait for the drain? (False: counted untimed_backlog.)"""
        if len(self._pending) < MAX_PENDING:
            return True
        with self._lock:
            self.untimed["backlog"] += 1
        return False

    def events(self, key: tuple[int, int, str, int], before: Any, between: Any, after: Any) -> None:
        """A call whose events were recorded: before the original, between, after the kernel."""
        self._pending.append((key, before, between, after))

    # -- the publisher's thread --------------------------------------------------------------------
    def drain(self) -> int:
        """Add the calls whose events completed (in order; never waits); returns how many."""
        done = 0
        while self._pending:
            key, before, between, after = self._pending[0]
            if not after.query():
                break
            self._pending.popleft()
            original_ms = float(before.elapsed_time(between))
            kernel_ms = float(between.elapsed_time(after))
            self._free.extend((before, between, after))
            with self._lock:
                bucket = self._buckets[key]
                bucket.timed += 1
                bucket.original_ns += round(original_ms * 1e6)
                bucket.kernel_ns += round(kernel_ms * 1e6)
            done += 1
        return done

    def snapshot(self) -> dict[str, Any]:
        """The status document's ``timing``: the clock, the warm-up, the untimed calls by why, and
        per bucket with a timed call its sums (seconds)."""
        with self._lock:
            rows = [
                {
                    **dict(zip(BUCKET_LABELS, key, strict=True)),
                    "timed_calls": b.timed,
                    "original_s": b.original_ns / 1e9,
                    "kernel_s": b.kernel_ns / 1e9,
                }
                for key, b in sorted(self._buckets.items())
                if b.timed
            ]
            untimed = dict(self.untimed)
        return {
            "clock": self.clock,
            "warmup_calls": WARMUP_CALLS,
            "untimed_warmup": untimed["warmup"],
            "untimed_captured": untimed["captured"],
            "untimed_backlog": untimed["backlog"],
            "pending": len(self._pending),
            "buckets": rows,
        }


def now_ns() -> int:
    return time.perf_counter_ns()
