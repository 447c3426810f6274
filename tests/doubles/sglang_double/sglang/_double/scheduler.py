"""TEST DOUBLE of sglang.srt.managers.scheduler.run_scheduler_process (one process per TP rank).

Mirrored: the process title, the `[time TP<r>]` log prefix, PR_SET_PDEATHSIG, the import of
`sglang.srt.layers.attention.triton_backend` while the model runner is built, the "ready" message
to the parent over a pipe, and the failure path: any exception is logged as
`Scheduler hit an exception: <traceback>` and the child sends SIGQUIT to its parent.
Simulated: weight loading (sleep SGLANG_DOUBLE_LOAD_SECONDS) and the event loop (sleep).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
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


def _build_model_runner(args: argparse.Namespace, knobs: Knobs, tp_rank: int, started: float) -> None:
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
