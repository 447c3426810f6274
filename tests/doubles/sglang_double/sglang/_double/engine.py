"""TEST DOUBLE of sglang.srt.entrypoints.engine/http_server start-up (sglang==0.5.23).

What happens, in the real order:
1. `_set_envs_and_config`: NCCL/CUDA environment defaults, a SIGQUIT handler that kills the whole
   process tree (parent included, by SIGKILL: exit status 137, systemd `status=9/KILL`), and
   `mp.set_start_method("spawn", force=True)`.
2. One scheduler process per `--tp-size` rank (`sglang::scheduler_TP<r>`, or `sglang::scheduler`
   at TP 1), then the detokenizer (`sglang::detokenizer`), all with multiprocessing spawn.
3. The parent waits for every scheduler's "ready" message. There is no overall timeout (a rank
   that hangs keeps the server starting forever). A scheduler that dies without sending SIGQUIT
   gives "Rank <r> scheduler is dead." and the parent exits with an error.
4. Only then the HTTP socket is bound (before: connection refused), /health answers 503 during
   warm-up, then 200, and "The server is fired up and ready to roll!" is logged.

Multi-node (`--nnodes N --node-rank R --dist-init-addr HOST:PORT`, `--tp-size` the whole server's): each
node starts its share of the schedulers (TP ranks R*tp/N .. (R+1)*tp/N - 1, titles and log prefixes of
those ranks). Node 0's first scheduler hosts the process group's store on the dist-init address and
none of node 0's schedulers is ready before every node joined (dist.py), so /health stays refused until
then. Only node 0 serves the HTTP API. A node > 0, once its schedulers are ready, serves SGLang's "dummy
health check server" on --host:--port (/health, /health_generate and /ping answer 200, /metrics with
--enable-metrics, nothing else) and waits on its schedulers. A peer node's death: node 0's scheduler
raises and the launcher exits SGLANG_DOUBLE_PEER_LOSS_EXIT_SECONDS (5) later, or with
SGLANG_DOUBLE_PEER_LOSS=hang node 0 keeps running with /health answering 503 and /generate never
answering; node 0's death ends every node > 0 the same way.

Knobs (environment, see knobs.py): SGLANG_DOUBLE_LOAD_SECONDS, SGLANG_DOUBLE_WARMUP_SECONDS,
SGLANG_DOUBLE_CRASH_AFTER (+ SGLANG_DOUBLE_CRASH_RANK), SGLANG_DOUBLE_HANG (+ SGLANG_DOUBLE_HANG_RANK),
SGLANG_DOUBLE_GENERATE_SECONDS (how long each POST /generate takes), SGLANG_DOUBLE_REQUEST_LOG (a JSON-lines
log of each POST /generate's arrival and answer), SGLANG_DOUBLE_DIST_TIMEOUT, SGLANG_DOUBLE_PEER_LOSS,
SGLANG_DOUBLE_PEER_LOSS_EXIT_SECONDS (multi-node), and per host (knobs.per_host) the traffic that /metrics
reports: SGLANG_DOUBLE_OUTPUT_TOKENS, SGLANG_DOUBLE_TOKEN_SECONDS, SGLANG_DOUBLE_ERROR_SHARE,
SGLANG_DOUBLE_ACCEPT_LENGTH (http_api.py, metrics.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import signal
import sys
import time
import urllib.request
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from pathlib import Path
from types import FrameType
from typing import Any

from sglang._double.detokenizer import run_detokenizer_process
from sglang._double.http_api import ServerState, start_dummy_health_server, start_http_server
from sglang._double.knobs import Knobs
from sglang._double.logs import configure_logger
from sglang._double.proc import kill_process_tree
from sglang._double.scheduler import run_scheduler_process
from sglang._double.server_args import check_parallelism, node_tp_ranks, prepare_server_args

logger = logging.getLogger(__name__)


def _sigquit_handler(signum: int, frame: FrameType | None) -> None:
    logger.error("Received sigquit from a child process. It usually means the child failed.")
    kill_process_tree(os.getpid(), include_parent=True)


def _sigterm_handler(signum: int, frame: FrameType | None) -> None:
    # Like uvicorn: shut down once; later SIGTERM/SIGINT during the shutdown are ignored.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logger.info("Received signal %d, shutting down (test double).", signum)
    raise SystemExit(0)


def set_envs_and_config(args: argparse.Namespace) -> None:
    if "NCCL_CUMEM_ENABLE" not in os.environ or args.enable_symm_mem:
        os.environ["NCCL_CUMEM_ENABLE"] = str(int(args.enable_symm_mem))
    if "NCCL_NVLS_ENABLE" not in os.environ or args.enable_nccl_nvls:
        os.environ["NCCL_NVLS_ENABLE"] = str(int(args.enable_nccl_nvls))
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "8"
    if args.tp_size > 1 and not args.disable_cuda_graph:
        os.environ.setdefault("NCCL_GRAPH_REGISTER", "0")
    signal.signal(signal.SIGQUIT, _sigquit_handler)
    mp.set_start_method("spawn", force=True)


def load_model_config(model_path: str) -> dict[str, Any]:
    """Like transformers.AutoConfig on a local directory: config.json must be there."""
    config = Path(model_path) / "config.json"
    if not config.is_file():
        raise OSError(f"{model_path} does not appear to have a file named config.json.")
    return json.loads(config.read_text())


def launch_subprocesses(
    args: argparse.Namespace, group_lost: Event | None = None
) -> tuple[list[mp.Process], list[tuple[int, Connection]]]:
    """This node's schedulers (and the detokenizer); the pipes come with their TP ranks."""
    procs: list[mp.Process] = []
    readers: list[tuple[int, Connection]] = []
    for local, tp_rank in enumerate(node_tp_ranks(args)):
        reader, writer = mp.Pipe(duplex=False)
        gpu_id = args.base_gpu_id + local * args.gpu_id_step
        proc = mp.Process(target=run_scheduler_process, args=(args, gpu_id, tp_rank, writer, group_lost))
        proc.start()
        writer.close()
        procs.append(proc)
        readers.append((tp_rank, reader))
    if args.node_rank > 0:
        return procs, readers  # like the real engine: no tokenizer or detokenizer on a node > 0
    detok = mp.Process(target=run_detokenizer_process, args=(args,))
    detok.start()
    procs.append(detok)
    return procs, readers


def wait_for_schedulers(readers: list[tuple[int, Connection]]) -> None:
    for rank, reader in readers:
        try:
            data = reader.recv()
        except EOFError:
            logger.error("Rank %d scheduler is dead. Please check if there are relevant logs.", rank)
            raise
        if data.get("status") != "ready":
            raise RuntimeError("Initialization failed. Please see the error messages above.")


def _warmup(state: ServerState) -> None:
    """Like the real _wait_and_warmup: GET /model_info, POST /generate, then mark the server Up."""
    base = f"http://{state.args.host}:{state.args.port}"
    knobs = Knobs.from_env()
    with urllib.request.urlopen(f"{base}/model_info", timeout=10) as resp:
        resp.read()
    time.sleep(knobs.warmup_seconds)
    req = urllib.request.Request(
        f"{base}/generate",
        data=json.dumps(
            {
                "text": "The capital city of France is",
                "sampling_params": {"temperature": 0, "max_new_tokens": 8},
            }
        ).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        resp.read()
    state.ready.set()
    logger.info("The server is fired up and ready to roll!")


def launch_server(args: argparse.Namespace) -> None:
    configure_logger("", args.log_level)
    logger.info("TEST DOUBLE of sglang 0.5.23 (not the real engine): pid=%d", os.getpid())
    check_parallelism(args)
    knobs = Knobs.from_env()  # a bad knob fails here, before anything starts
    signal.signal(signal.SIGTERM, _sigterm_handler)
    signal.signal(signal.SIGINT, _sigterm_handler)
    set_envs_and_config(args)
    model_config = load_model_config(args.model_path)
    # a semaphore (and multiprocessing's resource tracker process) only where there is a group to lose
    group_lost = mp.Event() if args.nnodes > 1 else None
    procs, readers = launch_subprocesses(args, group_lost)
    wait_for_schedulers(readers)
    if args.node_rank > 0:
        _serve_as_peer_node(args)
        return
    pids = [p.pid for p in procs[: len(readers)] if p.pid is not None]  # the schedulers
    state = ServerState(args, model_config, pids, knobs, group_lost)
    server = _listen(args, lambda: start_http_server(state))
    logger.info("Started server process [%d]", os.getpid())
    logger.info("Uvicorn running on http://%s:%d (Press CTRL+C to quit)", args.host, args.port)
    try:
        _warmup(state)
        while True:
            signal.pause()
    finally:
        server.shutdown()
        logger.info("Finished server process [%d]", os.getpid())


def _listen(args: argparse.Namespace, start: Callable[[], ThreadingHTTPServer]) -> ThreadingHTTPServer:
    """start(): an HTTP server on --host/--port; a failed bind is logged with uvicorn's line, then raised."""
    try:
        return start()
    except OSError as exc:
        logger.error(
            "[Errno %s] error while attempting to bind on address (%s, %d)", exc.errno, args.host, args.port
        )
        raise


def _serve_as_peer_node(args: argparse.Namespace) -> None:
    """A node > 0: SGLang's dummy health check server, then wait on the schedulers (a scheduler that
    fails sends SIGQUIT, which kills the whole tree)."""
    server = _listen(args, lambda: start_dummy_health_server(args))
    logger.info("Starting dummy health check server at %s:%d", args.host, args.port)
    try:
        while True:
            signal.pause()
    finally:
        server.shutdown()


def main(argv: list[str]) -> None:
    args = prepare_server_args(argv)
    try:
        launch_server(args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)
    sys.exit(0)
