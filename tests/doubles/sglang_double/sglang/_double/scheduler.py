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
Multi-node (`--nnodes` > 1, see dist.py): this node's first scheduler joins the process group before
the model runner is built (node 0's hosts the store on --dist-init-addr and waits for every node),
and watches its peers while it serves: a peer's loss raises (`PeerLost`, logged like any scheduler
exception; the SIGQUIT to the launcher follows SGLANG_DOUBLE_PEER_LOSS_EXIT_SECONDS later, 5 s as
the CPU engine's launcher exits over gloo), or on node 0 with SGLANG_DOUBLE_PEER_LOSS=hang it blocks
and the server stops being healthy (NCCL's hang).
The crash and hang knobs name a TP rank (SGLANG_DOUBLE_CRASH_RANK / _HANG_RANK); unset, this node's
first scheduler (TP 0 on one node, the node's own first rank on node > 0).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import logging
import os
import signal
import socket
import sys
import time
import traceback
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event

from sglang._double import dist
from sglang._double.knobs import Knobs
from sglang._double.logs import configure_logger
from sglang._double.proc import kill_itself_when_parent_died, set_process_title
from sglang._double.server_args import node_tp_ranks, scheduler_title

logger = logging.getLogger(__name__)

BACKEND_MODULE = "sglang.srt.layers.attention.triton_backend"


class SimulatedSchedulerError(RuntimeError):
    """Raised on purpose by the test double (SGLANG_DOUBLE_CRASH_AFTER)."""


def _knob_rank(rank: int | None, args: argparse.Namespace) -> int:
    """A crash/hang knob's TP rank: the one named, or this node's first scheduler."""
    return node_tp_ranks(args)[0] if rank is None else rank


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


def _join_group(args: argparse.Namespace, knobs: Knobs) -> list[socket.socket]:
    """This node's first scheduler joins the process group (the others have nothing to do here)."""
    if args.nnodes == 1:
        return []
    logger.info(
        "init torch distributed begin. (test double: node %d of %d, store %s)",
        args.node_rank,
        args.nnodes,
        args.dist_init_addr,
    )
    if args.node_rank == 0:
        peers = dist.serve_store(args.dist_init_addr, args.nnodes, knobs.dist_timeout)
    else:
        peers = [dist.join_store(args.dist_init_addr, args.node_rank, knobs.dist_timeout)]
    logger.info("init torch distributed ends. (test double: %d of %d nodes joined)", args.nnodes, args.nnodes)
    return peers


def _event_loop(
    knobs: Knobs,
    tp_rank: int,
    started: float,
    peers: list[socket.socket],
    group_lost: Event | None,
    node_rank: int,
) -> None:
    if not peers:
        while True:
            _sleep_checking(3600.0, knobs, tp_rank, started)
    try:
        dist.watch(peers, 0.1, lambda: _check_crash(knobs, tp_rank, started))
    except dist.PeerLost:
        if group_lost is not None:
            group_lost.set()
        if node_rank == 0 and knobs.peer_loss == "hang":
            logger.info(
                "test double: SGLANG_DOUBLE_PEER_LOSS=hang, a peer node is gone and TP rank %d blocks",
                tp_rank,
            )
            while True:
                time.sleep(3600)
        raise


def run_scheduler_process(
    args: argparse.Namespace,
    gpu_id: int,
    tp_rank: int,
    pipe_writer: Connection,
    group_lost: Event | None = None,
) -> None:
    title, prefix = scheduler_title(args, tp_rank)
    set_process_title(title)
    configure_logger(prefix, args.log_level)
    kill_itself_when_parent_died()
    parent = os.getppid()
    knobs = Knobs.from_env()
    knobs = dataclasses.replace(
        knobs, crash_rank=_knob_rank(knobs.crash_rank, args), hang_rank=_knob_rank(knobs.hang_rank, args)
    )
    started = time.monotonic()
    peers: list[socket.socket] = []
    try:
        logger.info("Scheduler started (TEST DOUBLE of sglang 0.5.23) pid=%d gpu_id=%d", os.getpid(), gpu_id)
        if tp_rank == node_tp_ranks(args)[0]:
            peers = _join_group(args, knobs)
        _build_model_runner(args, knobs, tp_rank, started)
        if knobs.hang and tp_rank == knobs.hang_rank:
            logger.info("test double: SGLANG_DOUBLE_HANG set, TP rank %d never becomes ready", tp_rank)
            _event_loop(knobs, tp_rank, started, [], None, args.node_rank)
        pipe_writer.send({"status": "ready", "max_total_num_tokens": 4096, "max_req_input_len": 4090})
        _event_loop(knobs, tp_rank, started, peers, group_lost, args.node_rank)
    except dist.PeerLost:
        logger.error("Scheduler hit an exception: %s", traceback.format_exc())
        time.sleep(knobs.peer_loss_exit_seconds)
        os.kill(parent, signal.SIGQUIT)
    except Exception:
        logger.error("Scheduler hit an exception: %s", traceback.format_exc())
        os.kill(parent, signal.SIGQUIT)
