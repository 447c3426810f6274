"""The status publisher: one daemon thread per patched process that keeps `$KDTREE_STATUS_DIR/<pid>.json`
and `<pid>.prom` current (docs/CONTRACTS.md section 3b), and SGLang's /metrics when it runs with
``--enable-metrics`` (`kdtree_verify.telemetry.promclient`).

Started by the lifecycle once the install (or plugin-mode report) has printed the marker, in that
process only: never at interpreter start-up. It writes at once, then every KDTREE_STATUS_INTERVAL
seconds (default 5), and once more at exit (atexit, bounded by EXIT_WRITE_TIMEOUT_S; a SIGKILL leaves the last
periodic write). The
files go through the marker's safe writer (`marker.write_status`). Nothing here raises into SGLang:
the first failure to write is said once, on the marker's ``kdtree-verify-status: ... state=unwritable``
line (not again when the marker already said it for this directory).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from kdtree_verify import config
from kdtree_verify.state import STATE
from kdtree_verify.telemetry import counters, marker, metrics, promclient

logger = logging.getLogger(__name__)

SCHEMA = 2  # 2: + updated_mono (docs/CONTRACTS.md)
THREAD_NAME = "kdtree-verify-status"
EXIT_THREAD_NAME = "kdtree-verify-status-exit"
# The exit-time write gives up after this long: it may wait on a device read (a hung GPU) or on the
# periodic thread's write lock, and process exit never waits behind either.
EXIT_WRITE_TIMEOUT_S = 2.0


def build_id(lib: str) -> str:
    """The build directory's name: KDTREE_LIB=/opt/kdtree/builds/<id>/libkdtree_verify.so -> <id>
    (symlinks resolved, so a `current` link names the build it points to); '' without a library."""
    if not lib:
        return ""
    return os.path.basename(os.path.dirname(os.path.realpath(lib)))


def _capturing_cuda_graph() -> bool:
    """Is SGLang capturing a CUDA graph in this process now? A copy issued from another thread
    during a capture in "global" error mode could invalidate it. Read from the module when SGLang
    imported it; never imported from here."""
    import sys

    capture = sys.modules.get("sglang.srt.model_executor.runner_utils.capture_mode")
    check = getattr(capture, "get_is_capture_mode", None)
    try:
        return bool(check()) if check is not None else False
    except Exception:
        return False


class Publisher:
    def __init__(self, interval: float, since: float) -> None:
        self.interval = interval
        self.since = since
        self.pid = os.getpid()
        self._stop = threading.Event()
        self._write_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._said = False
        self._validate: dict[str, Any] | None = None  # the last device snapshot
        self._device_calls = 0  # the last read of the library's device call counter
        self._mirror: promclient.Mirror | None = None
        self._mirror_failed = False

    # -- the document ------------------------------------------------------------------------------
    def _validate_stats(self) -> dict[str, Any] | None:
        if STATE.mode != "validate":
            return None
        stats = STATE.validate_stats
        if stats is not None and not _capturing_cuda_graph():
            try:
                self._validate = stats.snapshot()
            except Exception as exc:
                logger.debug("kdtree-verify: cannot read the validate statistics: %s", exc)
        return dict(self._validate or {"compared": 0, "mismatches": 0, "max_diff": 0.0})

    def _timing(self) -> dict[str, Any] | None:
        """Validate mode's timing sums (telemetry/timing.py): completed CUDA events read first
        (never while a graph is being captured: an event query from another thread could break it)."""
        timings = STATE.timings
        if STATE.mode != "validate" or timings is None:
            return None
        if not _capturing_cuda_graph():
            try:
                timings.drain()
            except Exception as exc:
                logger.debug("kdtree-verify: cannot read the timing events: %s", exc)
        return timings.snapshot()

    def _kernel_calls_device(self) -> int:
        """The library's device call counter (ABI 4), read on a side stream; the last value while a
        CUDA graph is being captured or when the read fails."""
        if not _capturing_cuda_graph():
            try:
                self._device_calls = counters.read_device_calls(STATE.kernel)
            except Exception as exc:
                logger.debug("kdtree-verify: cannot read the device call counter: %s", exc)
        return self._device_calls

    def extra(self) -> dict[str, Any]:
        """The publisher's fields of the status document (the marker's fields come from marker.py)."""
        extra: dict[str, Any] = {
            "schema": SCHEMA,
            "counters": counters.snapshot(self._kernel_calls_device()),
            "build_id": build_id(STATE.lib),
            "since": self.since,
            "updated": time.time(),
            # CLOCK_MONOTONIC, one clock for every process of the host: the smoke check's "written
            # after" compares it with its own, so a step of the wall clock cannot hide a rewrite
            "updated_mono": time.monotonic(),
        }
        validate = self._validate_stats()
        if validate is not None:
            extra["validate"] = validate
        timing = self._timing()
        if timing is not None:
            extra["timing"] = timing
        return extra

    # -- writing -----------------------------------------------------------------------------------
    def _report(self, reason: str, marker_said: bool) -> None:
        if self._said:
            return
        self._said = True
        if not marker_said:  # else the marker's own write said it already, for this directory
            marker.say_unwritable(reason)

    def write_once(self) -> None:
        """Write `<pid>.json` and `<pid>.prom` (and update prometheus_client). Never raises."""
        try:
            with self._write_lock:
                marker_said = marker.delivery()["status_file"].startswith(marker.STATUS_UNWRITABLE)
                extra = self.extra()
                problem = marker.publish_status(extra)
                fields = marker.emitted()
                if fields is None:
                    return
                doc = {**fields, **extra}
                if not problem:
                    name = f"{fields['pid']}.prom"
                    try:
                        marker.write_status(name, metrics.render([doc]).encode("utf-8"))
                    except (OSError, ValueError) as exc:
                        problem = marker.write_problem(exc, name)
                if problem:
                    self._report(problem, marker_said)
                self._update_mirror(doc)
        except Exception as exc:  # never into SGLang
            logger.debug("kdtree-verify: status write failed", exc_info=True)
            self._report(f"status publisher: {type(exc).__name__}: {exc}", False)

    def _update_mirror(self, doc: dict[str, Any]) -> None:
        if self._mirror_failed or not promclient.wanted():
            return
        try:
            if self._mirror is None:
                self._mirror = promclient.Mirror()
            self._mirror.update(doc)
        except Exception as exc:  # ImportError (no prometheus_client), or the client refused
            self._mirror_failed = True
            logger.info("kdtree-verify: no prometheus_client metrics: %s", exc)

    # -- the thread --------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self.write_once()
            if self._stop.wait(self.interval):
                return

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()
        atexit.register(self.at_exit)

    def at_exit(self, timeout_s: float | None = None) -> bool:
        """The last write (atexit), in the process that started the publisher only: in a daemon
        thread joined for at most `timeout_s`, so that a device read that does not return (or a
        periodic write stuck in one, holding the write lock) never blocks the process's exit
        (`timeout_s` None: EXIT_WRITE_TIMEOUT_S). True when the write finished in time."""
        if os.getpid() != self.pid:
            return False
        timeout_s = EXIT_WRITE_TIMEOUT_S if timeout_s is None else timeout_s
        self._stop.set()
        writer = threading.Thread(target=self.write_once, name=EXIT_THREAD_NAME, daemon=True)
        writer.start()
        writer.join(timeout=timeout_s)
        if writer.is_alive():
            logger.warning("kdtree-verify: the exit-time status write gave up after %g s", timeout_s)
            return False
        return True

    def stop(self) -> None:
        """Stop the thread without a last write (tests, uninstall)."""
        self._stop.set()
        atexit.unregister(self.at_exit)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)


_lock = threading.Lock()
_publisher: Publisher | None = None


def start(env: Mapping[str, str] | None = None) -> Publisher | None:
    """Start this process's publisher (once; again in a forked child) when KDTREE_STATUS_DIR or
    PROMETHEUS_MULTIPROC_DIR is set. Returns it, or None. Never raises."""
    global _publisher
    try:
        env = os.environ if env is None else env
        if not env.get("KDTREE_STATUS_DIR") and not promclient.wanted(env):
            return None
        with _lock:
            if _publisher is not None and _publisher.pid == os.getpid():
                return _publisher
            interval, problem = config.read_status_interval(env)
            if problem:
                logger.warning("kdtree-verify: %s", problem)
            _publisher = Publisher(interval, since=time.time())
            _publisher.start()
            return _publisher
    except Exception:
        logger.debug("kdtree-verify: cannot start the status publisher", exc_info=True)
        return None


def current() -> Publisher | None:
    """This process's publisher, or None."""
    return _publisher if _publisher is not None and _publisher.pid == os.getpid() else None


def stop_for_tests() -> None:
    global _publisher
    with _lock:
        if _publisher is not None:
            _publisher.stop()
        _publisher = None
