"""TEST DOUBLE of sglang.srt.managers.scheduler.run_scheduler_process (one process per TP rank).

Mirrored: the process title, the `[time TP<r>]` log prefix, PR_SET_PDEATHSIG, the import of
`sglang.srt.layers.attention.triton_backend` while the model runner is built, the "ready" message
to the parent over a pipe, and the failure path: any exception is logged as
`Scheduler hit an exception: <traceback>` and the child sends SIGQUIT to its parent.
Simulated: weight loading (sleep SGLANG_DOUBLE_LOAD_SECONDS) and the event loop (sleep).
Journal noise before the backend import (the smoke check's watcher must survive it): bytes that are
not UTF-8 and a 100 KiB line (SGLANG_DOUBLE_LOG_BYTES=1), the traceback SGLang 0.5.23 logs when its
optional OpenAIServingResponses fails to initialise (SGLANG_DOUBLE_BENIGN_TRACEBACK=1), and a flood
of N lines (SGLANG_DOUBLE_FLOOD_LINES=N) that trips journald's rate limiting before the marker.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import time
import traceback
from multiprocessing.connection import Connection

from sglang._double.knobs import Knobs
from sglang._double.logs import configure_logger
from sglang._double.proc import kill_itself_when_parent_died, set_process_title
from sglang._double.server_args import scheduler_title

logger = logging.getLogger(__name__)

BACKEND_MODULE = "sglang.srt.layers.attention.triton_backend"


class SimulatedSchedulerError(RuntimeError):
    """Raised on purpose by the test double (SGLANG_DOUBLE_CRASH_AFTER)."""


def _check_crash(knobs: Knobs, tp_rank: int, started: float) -> None:
    if knobs.crash_after is None or tp_rank != knobs.crash_rank:
        return
    if time.monotonic() - started >= knobs.crash_after:
        raise SimulatedSchedulerError(
            f"test double: SGLANG_DOUBLE_CRASH_AFTER={knobs.crash_after:g} reached on TP rank {tp_rank}"
        )


def _sleep_checking(seconds: float, knobs: Knobs, tp_rank: int, started: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        _check_crash(knobs, tp_rank, started)
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(0.1, left))


def _journal_noise(knobs: Knobs) -> None:
    """What a real run may log before the marker: binary output, a benign traceback, a flood."""
    if knobs.log_bytes:
        sys.stderr.flush()
        os.write(2, b"test double: binary \xff\xfe\x80 output\n")
        os.write(2, b"x" + "é".encode() * 51_200 + b"\n")  # 100 KiB: journald cuts it at 48 KiB inside an "é"
    if knobs.benign_traceback:
        try:
            raise OSError("test double: harmony vocab download failed")
        except OSError as exc:
            logger.warning(
                "OpenAI Responses API (/v1/responses) disabled: OpenAIServingResponses init failed (%s: %s)",
                type(exc).__name__,
                exc,
            )
            logger.warning("OpenAIServingResponses init traceback:\n%s", traceback.format_exc())
    for number in range(knobs.flood_lines):
        logger.info("test double: flood line %d of %d", number + 1, knobs.flood_lines)


def _build_model_runner(args: argparse.Namespace, knobs: Knobs, tp_rank: int, started: float) -> None:
    _journal_noise(knobs)
    backend = importlib.import_module(BACKEND_MODULE)
    logger.info(
        "Attention backend module %s imported (class %s.TritonAttnBackend).",
        BACKEND_MODULE,
        backend.__name__,
    )
    logger.info("Load weight begin. (test double: simulating %.1f s)", knobs.load_seconds)
    _sleep_checking(knobs.load_seconds, knobs, tp_rank, started)
    logger.info("Load weight end. type=TestDouble, dtype=%s", args.dtype)
    logger.info("KV Cache is allocated. (test double)")


def _event_loop(knobs: Knobs, tp_rank: int, started: float) -> None:
    while True:
        _sleep_checking(3600.0, knobs, tp_rank, started)


def run_scheduler_process(
    args: argparse.Namespace, gpu_id: int, tp_rank: int, pipe_writer: Connection
) -> None:
    title, prefix = scheduler_title(args, tp_rank)
    set_process_title(title)
    configure_logger(prefix, args.log_level)
    kill_itself_when_parent_died()
    parent = os.getppid()
    knobs = Knobs.from_env()
    started = time.monotonic()
    try:
        logger.info("Scheduler started (TEST DOUBLE of sglang 0.5.23) pid=%d gpu_id=%d", os.getpid(), gpu_id)
        _build_model_runner(args, knobs, tp_rank, started)
        if knobs.hang and tp_rank == knobs.hang_rank:
            logger.info("test double: SGLANG_DOUBLE_HANG set, TP rank %d never becomes ready", tp_rank)
            _event_loop(knobs, tp_rank, started)
        pipe_writer.send({"status": "ready", "max_total_num_tokens": 4096, "max_req_input_len": 4090})
        _event_loop(knobs, tp_rank, started)
    except Exception:
        logger.error("Scheduler hit an exception: %s", traceback.format_exc())
        os.kill(parent, signal.SIGQUIT)
