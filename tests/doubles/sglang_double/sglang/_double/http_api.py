"""TEST DOUBLE of SGLang's HTTP API (stdlib http.server instead of FastAPI/uvicorn).

Endpoints: /health and /health_generate (503 until warm-up is done, then 200), /model_info and
/get_model_info, /v1/models, /server_info, /v1/loads (SGLang 0.5.23's load snapshot: the requests
in flight as num_running_reqs of dp rank 0), /metrics with --enable-metrics (SGLang's own series,
metrics.py; 404 without, as SGLang), and POST /generate. An answer has SGLANG_DOUBLE_OUTPUT_TOKENS
tokens (1 by default; `max_new_tokens`: the request's, SGLang's 128 when it sets none), each " double",
after SGLANG_DOUBLE_GENERATE_SECONDS (0 by default) and SGLANG_DOUBLE_TOKEN_SECONDS per token (0);
with "stream": true it comes as server-sent events and [DONE]: one event (with a Content-Length) for
one token, else one event per token as it is generated (the text so far; the connection's close ends
the body). SGLANG_DOUBLE_ERROR_SHARE of the requests served once ready fail as aborted (HTTP 500
{"detail": ...}, or a streamed {"error": {"message": ...}} event), counted in
sglang:num_aborted_requests_total. The traffic knobs take `VALUE` or `[VALUE,]HOST=VALUE,...`
(knobs.per_host). With SGLANG_DOUBLE_REQUEST_LOG=<path> each POST /generate
appends two JSON lines there, {"event": "arrived"|"answered", "t": <epoch s>, "id", "client", "pid",
"ready"} ("ready": whether the server was ready when the request arrived, on both of its lines: false
for the server's own warm-up request): a request that arrived and was never answered was cut (its
process was stopped while it was in flight).
Like the real engine the socket is bound only after every scheduler reported ready.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.synchronize import Event
from typing import Any

from sglang._double.knobs import Knobs
from sglang._double.metrics import Metrics, patch_series

logger = logging.getLogger(__name__)

DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's SamplingParams default
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
ABORT_MESSAGE = "test double: request aborted (SGLANG_DOUBLE_ERROR_SHARE)"


class ServerState:
    def __init__(
        self,
        args: argparse.Namespace,
        model_config: dict[str, Any],
        scheduler_pids: list[int],
        knobs: Knobs,
        group_lost: Event | None = None,
    ):
        self.args = args
        self.model_config = model_config
        self.scheduler_pids = scheduler_pids
        self.ready = threading.Event()
        # set by a scheduler whose peer node went away (multi-node): the server no longer answers
        self.group_lost = group_lost
        self.knobs = knobs
        self.generate_seconds = knobs.generate_seconds
        self.request_log = knobs.request_log
        self.metrics = Metrics(args.served_model_name, knobs.accept_length)
        self._lock = threading.Lock()
        self.in_flight = 0
        self._served = 0  # requests that arrived once the server was ready, and of them those failed
        self._failed = 0

    def healthy(self) -> bool:
        return self.ready.is_set() and not (self.group_lost is not None and self.group_lost.is_set())

    def hang_if_group_lost(self) -> None:
        """A request to a server whose process group lost a node blocks (the scheduler never answers)."""
        while self.group_lost is not None and self.group_lost.is_set():
            time.sleep(3600)

    def fails(self, ready: bool) -> bool:
        """Whether this request fails (SGLANG_DOUBLE_ERROR_SHARE): exactly that share of the requests
        that arrive once the server is ready, the first of them included (never the warm-up)."""
        if not ready or self.knobs.error_share <= 0:
            return False
        with self._lock:
            self._served += 1
            if self._failed < self.knobs.error_share * self._served:
                self._failed += 1
                return True
            return False

    def output_tokens(self, req: dict[str, Any]) -> int:
        """How many tokens the answer to `req` has (SGLANG_DOUBLE_OUTPUT_TOKENS)."""
        if self.knobs.output_tokens is not None:
            return self.knobs.output_tokens
        params = req.get("sampling_params") or {}
        value = params.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS) if isinstance(params, dict) else None
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"max_new_tokens must be a positive integer, got {value!r}")
        return value

    def enter(self, step: int) -> None:
        with self._lock:
            self.in_flight += step

    def log_request(self, event: str, request_id: str, client: str, ready: bool) -> None:
        """One line of the request log (when SGLANG_DOUBLE_REQUEST_LOG names one), flushed at once. `ready`
        is the server's state when the request arrived: the warm-up's client marks the server ready as
        soon as it has the answer, which may be before the "answered" line is written."""
        if not self.request_log:
            return
        line = json.dumps(
            {
                "event": event,
                "t": time.time(),
                "id": request_id,
                "client": client,
                "pid": os.getpid(),
                "ready": ready,
            }
        )
        with self._lock, open(self.request_log, "a", encoding="utf-8") as log:
            log.write(line + "\n")

    def running(self) -> int:
        with self._lock:
            return self.in_flight

    def loads(self) -> dict[str, Any]:
        running = self.running()
        snapshot = {
            "timestamp": time.time(),
            "dp_rank": 0,
            "num_running_reqs": running,
            "num_waiting_reqs": 0,
        }
        return {"version": "0.5.23+testdouble", "loads": [snapshot]}

    def model_info(self) -> dict[str, Any]:
        return {
            "model_path": self.args.model_path,
            "tokenizer_path": self.args.tokenizer_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "model_type": self.model_config.get("model_type"),
            "architectures": self.model_config.get("architectures"),
            "test_double": True,
        }

    def context_length(self) -> int:
        return int(self.args.context_length or self.model_config.get("max_position_embeddings", 4096))


def _handler_class(state: ServerState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "sglang-test-double"

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            self.log_message('"%s" %s', self.requestline, str(code))

        def log_message(self, format: str, *args: Any) -> None:
            # uvicorn's access-log shape: 127.0.0.1:PORT - "GET /health HTTP/1.1" 200
            logger.info("%s:%d - %s", self.client_address[0], self.client_address[1], format % args)

        def _send(self, code: int, body: dict[str, Any] | str) -> None:
            data = (json.dumps(body) if isinstance(body, dict) else body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json" if isinstance(body, dict) else "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _send_events(self, code: int, events: list[dict[str, Any]]) -> None:
            data = "".join(f"data: {json.dumps(event)}\n\n" for event in events) + "data: [DONE]\n\n"
            encoded = data.encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(encoded)))
            self.end_headers()
            self.wfile.write(encoded)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path in ("/health", "/health_generate", "/ready"):
                self._send(200, "") if state.healthy() else self._send(503, "")
            elif path in ("/model_info", "/get_model_info"):
                self._send(200, state.model_info())
            elif path == "/v1/models":
                card = {
                    "id": state.args.served_model_name,
                    "object": "model",
                    "owned_by": "sglang",
                    "root": state.args.model_path,
                    "max_model_len": state.context_length(),
                }
                self._send(200, {"object": "list", "data": [card]})
            elif path == "/v1/loads":
                self._send(200, state.loads())
            elif path == "/metrics" and state.args.enable_metrics:
                # the patch's series after SGLang's own, as SGLang's multiprocess collector merges them
                body = (state.metrics.render(state.ready.is_set(), state.running()) + patch_series()).encode()
                self.send_response(200)
                self.send_header("Content-Type", METRICS_CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            elif path in ("/server_info", "/get_server_info"):
                info = dict(vars(state.args))
                info.update(
                    test_double=True, scheduler_pids=state.scheduler_pids, version="0.5.23+testdouble"
                )
                self._send(200, info)
            else:
                self._send(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b"{}"
            if self.path.split("?", 1)[0] != "/generate":
                self._send(404, {"detail": "Not Found"})
                return
            try:
                req = json.loads(raw or b"{}")
            except json.JSONDecodeError as exc:
                self._send(400, {"error": {"message": f"invalid JSON: {exc}"}})
                return
            prompt = str(req.get("text", ""))
            try:
                tokens = state.output_tokens(req)
            except ValueError as exc:
                self._send(400, {"error": {"message": str(exc)}})
                return
            meta = {
                "id": uuid.uuid4().hex,
                "finish_reason": {"type": "length", "length": tokens},
                "prompt_tokens": len(prompt.split()),
                "completion_tokens": tokens,
            }
            state.enter(1)  # in flight until its answer (and its access-log line) is out
            ready = state.ready.is_set()
            state.log_request("arrived", meta["id"], self.client_address[0], ready)
            try:
                if self._generate(req, meta, tokens, ready):
                    state.log_request("answered", meta["id"], self.client_address[0], ready)
            finally:
                state.enter(-1)

        def _generate(self, req: dict[str, Any], meta: dict[str, Any], tokens: int, ready: bool) -> bool:
            """Answer one /generate (False when the client went away first) and record it in the
            metrics: time to the first output, the inter-token latency of a streamed answer's later
            outputs, the request when it is done."""
            started = time.monotonic()
            state.hang_if_group_lost()
            time.sleep(state.generate_seconds)
            metrics = state.metrics
            if state.fails(ready):
                metrics.finished(meta["prompt_tokens"], 0, time.monotonic() - started, aborted=True)
                if req.get("stream"):  # SGLang's stream ends with the error as an event
                    self._send_events(200, [{"error": {"message": ABORT_MESSAGE}}])
                else:
                    self._send(500, {"detail": ABORT_MESSAGE})
                return True
            if req.get("stream") and tokens > 1:
                return self._stream(meta, tokens, started)
            time.sleep(tokens * state.knobs.token_seconds)
            e2e = time.monotonic() - started
            metrics.first_token(e2e)  # one output: the first is the last
            metrics.tokens_generated(tokens)
            metrics.finished(meta["prompt_tokens"], tokens, e2e)
            answer = {"text": " double" * tokens, "meta_info": meta}
            if req.get("stream"):
                # SGLang's streamed /generate: one server-sent event per output, then [DONE]
                self._send_events(200, [answer])
            else:
                self._send(200, answer)
            return True

        def _stream(self, meta: dict[str, Any], tokens: int, started: float) -> bool:
            """One server-sent event per token as it is generated (the text so far, finish_reason on
            the last), then [DONE]; the connection's end closes the body."""
            metrics = state.metrics
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            last = started
            try:
                for count in range(1, tokens + 1):
                    time.sleep(state.knobs.token_seconds)
                    now = time.monotonic()
                    if count == 1:
                        metrics.first_token(now - started)
                    else:
                        metrics.inter_token(now - last, 1)
                    last = now
                    metrics.tokens_generated(1)
                    event_meta = {
                        **meta,
                        "completion_tokens": count,
                        "finish_reason": meta["finish_reason"] if count == tokens else None,
                    }
                    event = {"text": " double" * count, "meta_info": event_meta}
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                # the client went away: SGLang aborts the request
                metrics.finished(meta["prompt_tokens"], 0, time.monotonic() - started, aborted=True)
                self.close_connection = True
                return False
            metrics.finished(meta["prompt_tokens"], tokens, time.monotonic() - started)
            return True

    return Handler


def start_http_server(state: ServerState) -> ThreadingHTTPServer:
    """Bind host:port and serve in a daemon thread. Raises OSError when the bind fails."""
    server = ThreadingHTTPServer((state.args.host, state.args.port), _handler_class(state))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server


def _dummy_handler_class(args: argparse.Namespace) -> type[BaseHTTPRequestHandler]:
    class DummyHandler(BaseHTTPRequestHandler):
        server_version = "sglang-test-double"

        def log_message(self, format: str, *fargs: Any) -> None:
            pass  # uvicorn runs the dummy server with log_level="warning": no access log

        def _send(self, code: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path in ("/health", "/health_generate", "/ping"):
                self._send(200, b"")
            elif path == "/metrics" and args.enable_metrics:
                self._send(200, b"", "text/plain; version=0.0.4; charset=utf-8")
            else:
                self._send(404, b'{"detail": "Not Found"}')

        def do_POST(self) -> None:
            self._send(404, b'{"detail": "Not Found"}')

    return DummyHandler


def start_dummy_health_server(args: argparse.Namespace) -> ThreadingHTTPServer:
    """A node > 0's `launch_dummy_health_check_server`: /health, /health_generate and /ping answer 200
    (whatever node 0 does), /metrics (no series of its own) with --enable-metrics, nothing else."""
    server = ThreadingHTTPServer((args.host, args.port), _dummy_handler_class(args))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server
