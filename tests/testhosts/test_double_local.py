"""The SGLang TEST DOUBLE run directly on this machine (no container): CLI, process model, death.

Fast (about 60 s on 2 shared cores): part of `make test-fast` (target test-double-fast).
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _decode as decode
from ansible_collections.kdtree.fleet.tests.helpers.polling import free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
DOUBLE = ROOT / "tests" / "doubles" / "sglang_double"
TIMEOUT = 20.0


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_DOUBLE_", "PYTHON"))}
    env["PYTHONPATH"] = str(DOUBLE)
    env.update(extra)
    return env


# every wait here has the same bound
_wait = functools.partial(wait_until, timeout=TIMEOUT)


def _http_status(port: int, path: str) -> int | None:
    """HTTP status, or None when the connection is refused (nothing bound yet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (ConnectionRefusedError, urllib.error.URLError):
        return None


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"


class Server:
    def __init__(self, tmp_path: Path, args: list[str], name: str = "server", **env: str) -> None:
        self.port = free_port()
        model = tmp_path / "model"
        model.mkdir(exist_ok=True)
        (model / "config.json").write_text(
            json.dumps({"model_type": "llama", "max_position_embeddings": 2048})
        )
        self.log_path = tmp_path / f"{name}.log"
        cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(model)]
        cmd += ["--port", str(self.port), *args]
        self.log = self.log_path.open("w")
        self.proc = subprocess.Popen(cmd, env=_env(**env), stdout=self.log, stderr=subprocess.STDOUT)

    def text(self) -> str:
        return self.log_path.read_text()

    def child_pids_from_log(self) -> list[int]:
        return [
            int(line.rsplit("pid=", 1)[1].split()[0])
            for line in self.text().splitlines()
            if "Scheduler started" in line
        ]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def _start(*args: str, name: str = "server", **env: str) -> Server:
        server = Server(tmp_path, list(args), name, **env)
        servers.append(server)
        return server

    yield _start
    for server in servers:
        for pid in _children(server.proc.pid):
            os.kill(pid, signal.SIGKILL)
        server.stop()


def _run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "sglang.launch_server", *args]
    return subprocess.run(cmd, env=_env(**env), capture_output=True, text=True, timeout=TIMEOUT, check=False)


def test_unknown_flag_exits_2_like_the_real_argparse() -> None:
    res = _run_cli("--model-path", "/nonexistent", "--no-such-flag")
    assert res.returncode == 2
    assert "unrecognized arguments: --no-such-flag" in res.stderr


def test_bad_attention_backend_choice_exits_2() -> None:
    res = _run_cli("--model-path", "/nonexistent", "--attention-backend", "kdtree")
    assert res.returncode == 2
    assert "invalid choice: 'kdtree'" in res.stderr


def test_real_flags_parse_with_tp_prefix_and_nextn_alias() -> None:
    argv = [
        "--model-path", "m", "--tp", "4", "--speculative-algorithm", "NEXTN",
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
        "--speculative-num-draft-tokens", "8", "--attention-backend", "triton",
        "--trust-remote-code", "--mem-fraction-static", "0.8",
    ]  # fmt: skip
    code = (
        "import sys; from sglang._double.server_args import prepare_server_args as p; "
        "a = p(sys.argv[1:]); "
        "print(a.tp_size, a.speculative_algorithm, a.attention_backend, a.trust_remote_code, "
        "a.mem_fraction_static)"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, *argv],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    assert res.stdout.split() == ["4", "EAGLE", "triton", "True", "0.8"]


def test_missing_model_config_fails_in_the_parent_with_a_traceback(tmp_path: Path) -> None:
    res = _run_cli("--model-path", str(tmp_path / "absent"), "--port", str(free_port()))
    assert res.returncode == 1
    assert "does not appear to have a file named config.json" in res.stderr
    assert "Traceback (most recent call last)" in res.stderr


def test_tp2_refuses_until_ready_then_503_then_200_with_titled_spawned_children(start) -> None:
    env = {"SGLANG_DOUBLE_LOAD_SECONDS": "1.5", "SGLANG_DOUBLE_WARMUP_SECONDS": "1.5"}
    # SPT_NOENV=1: setproctitle (when installed) would otherwise overwrite /proc/PID/environ.
    env.update(SPT_NOENV="1", NCCL_CUMEM_ENABLE="1", KDTREE_TEST_MARK="local")
    srv = start("--tp-size", "2", **env)
    time.sleep(0.5)
    assert _http_status(srv.port, "/health") is None, "port bound before the schedulers were ready"
    _wait(lambda: _http_status(srv.port, "/health") is not None, what="HTTP bind")
    assert _http_status(srv.port, "/health") == 503
    _wait(lambda: _http_status(srv.port, "/health") == 200, what="/health 200")
    assert "The server is fired up and ready to roll!" in srv.text()

    kids = _children(srv.proc.pid)

    def comms() -> list[str]:
        return sorted(Path(f"/proc/{pid}/comm").read_text().strip() for pid in kids)

    # /proc/PID/comm holds 15 bytes; both setproctitle and the prctl fallback set it (each child once it
    # runs: on a loaded machine that may come after /health answers)
    def titled() -> bool:
        return comms().count("sglang::schedul") == 2 and comms().count("sglang::detoken") == 1

    _wait(titled, what="two schedulers' and the detokenizer's titles")
    for pid in kids:
        if Path(f"/proc/{pid}/comm").read_text().startswith("sglang::"):
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert b"KDTREE_TEST_MARK=local" in environ
            assert b"CUDA_DEVICE_MAX_CONNECTIONS=8" in environ  # overwritten like _set_envs_and_config
            assert b"NCCL_CUMEM_ENABLE=1" in environ  # a user value is kept
    text = srv.text()
    assert "TP0] Attention backend module sglang.srt.layers.attention.triton_backend imported" in text
    assert "TP1] Attention backend module sglang.srt.layers.attention.triton_backend imported" in text

    srv.proc.send_signal(signal.SIGTERM)
    assert srv.proc.wait(timeout=TIMEOUT) == 0
    _wait(lambda: not any(_alive(pid) for pid in kids), what="children to die with the parent")


def test_tp1_scheduler_title_has_no_rank_suffix(start) -> None:
    srv = start("--tp-size", "1", SGLANG_DOUBLE_LOAD_SECONDS="0.2", SGLANG_DOUBLE_WARMUP_SECONDS="0")
    _wait(lambda: _http_status(srv.port, "/health") == 200, what="/health 200")

    def comms() -> list[str]:
        return sorted(Path(f"/proc/{pid}/comm").read_text().strip() for pid in _children(srv.proc.pid))

    # a child sets its title once it runs: on a loaded machine that may come after /health answers
    _wait(lambda: {"sglang::schedul", "sglang::detoken"} <= set(comms()), what="both children's titles")
    assert comms().count("sglang::schedul") == 1, comms()
    started = [line for line in srv.text().splitlines() if "Scheduler started" in line]
    assert len(started) == 1
    assert re.match(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] Scheduler started", started[0]), started


@pytest.mark.parametrize(
    ("load", "crash_after"), [("5", "1"), ("0.2", "2")], ids=["during-load", "after-ready"]
)
def test_crash_after_logs_traceback_and_sigkills_the_whole_tree(start, load: str, crash_after: str) -> None:
    env = {"SGLANG_DOUBLE_LOAD_SECONDS": load, "SGLANG_DOUBLE_WARMUP_SECONDS": "0"}
    env.update(SGLANG_DOUBLE_CRASH_AFTER=crash_after, SGLANG_DOUBLE_CRASH_RANK="1")
    srv = start("--tp-size", "2", **env)
    assert srv.proc.wait(timeout=TIMEOUT) == -signal.SIGKILL
    text = srv.text()
    assert " TP1] Scheduler hit an exception: Traceback (most recent call last):" in text
    assert "SimulatedSchedulerError: test double: SGLANG_DOUBLE_CRASH_AFTER=" in text
    assert "Received sigquit from a child process. It usually means the child failed." in text
    kids = srv.child_pids_from_log()
    assert len(kids) == 2
    _wait(lambda: not any(_alive(pid) for pid in kids), what="schedulers to be killed")


def test_hang_keeps_the_port_closed_and_the_parent_waiting(start) -> None:
    env = {"SGLANG_DOUBLE_LOAD_SECONDS": "0.2", "SGLANG_DOUBLE_HANG": "1", "SGLANG_DOUBLE_HANG_RANK": "1"}
    srv = start("--tp-size", "2", **env)
    _wait(lambda: "never becomes ready" in srv.text(), what="the hang message")
    time.sleep(1.0)
    assert srv.proc.poll() is None
    assert _http_status(srv.port, "/health") is None
    assert "ready to roll" not in srv.text()
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.proc.wait(timeout=TIMEOUT) == 0


def test_crash_host_limits_the_crash_to_the_named_host(start) -> None:
    env = {"SGLANG_DOUBLE_LOAD_SECONDS": "0.2", "SGLANG_DOUBLE_WARMUP_SECONDS": "0"}
    env.update(SGLANG_DOUBLE_CRASH_AFTER="0.5", SGLANG_DOUBLE_CRASH_HOST="not-" + socket.gethostname())
    srv = start("--tp-size", "1", **env)
    _wait(lambda: "ready to roll" in srv.text(), what="the server to be ready")
    time.sleep(1.0)
    assert srv.proc.poll() is None
    assert "SimulatedSchedulerError" not in srv.text()


def test_request_log_has_each_generate_arriving_and_answered_and_a_cut_one_unanswered(
    start, tmp_path: Path
) -> None:
    log = tmp_path / "requests.jsonl"
    env = {"SGLANG_DOUBLE_LOAD_SECONDS": "0", "SGLANG_DOUBLE_WARMUP_SECONDS": "0"}
    srv = start(
        "--tp-size", "1", SGLANG_DOUBLE_GENERATE_SECONDS="0.5", SGLANG_DOUBLE_REQUEST_LOG=str(log), **env
    )
    _wait(lambda: "ready to roll" in srv.text(), what="the server to be ready")
    req = urllib.request.Request(f"http://127.0.0.1:{srv.port}/generate", data=b'{"text": "hi"}')
    before = time.time()
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200
    cut = subprocess.Popen(  # a second request, in flight when the server is killed
        [
            sys.executable,
            "-c",
            f"import urllib.request as u; u.urlopen(u.Request({req.full_url!r}, data=b'{{}}'), timeout=5)",
        ],
        stderr=subprocess.DEVNULL,
    )
    _wait(
        lambda: log.read_text().count('"arrived"') == 3 and log.read_text().count('"answered"') == 2,
        what="the second request to arrive (and ours to be logged as answered)",
    )
    srv.stop()
    cut.wait(timeout=10)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    # per request, in arrival order (the warm-up's "answered" line may come after our request arrived):
    # the warm-up request (not ready), ours, and the cut one (arrived, never answered)
    requests: dict[str, list[dict]] = {}
    for line in lines:
        requests.setdefault(line["id"], []).append(line)
    warmup, ours, cut_one = requests.values()
    assert [[(line["event"], line["ready"]) for line in r] for r in (warmup, ours, cut_one)] == [
        [("arrived", False), ("answered", False)],
        [("arrived", True), ("answered", True)],
        [("arrived", True)],
    ]
    assert ours[0]["t"] >= before and ours[1]["t"] - ours[0]["t"] >= 0.5
    assert {line["pid"] for line in lines} == {srv.proc.pid}
    assert all(line["client"] == "127.0.0.1" for line in lines)


def test_a_streamed_generate_is_answered_as_sglangs_server_sent_events(start) -> None:
    env = {"SGLANG_DOUBLE_LOAD_SECONDS": "0", "SGLANG_DOUBLE_WARMUP_SECONDS": "0"}
    srv = start("--tp-size", "1", **env)
    _wait(lambda: "ready to roll" in srv.text(), what="the server to be ready")
    url = f"http://127.0.0.1:{srv.port}/generate"
    streamed = urllib.request.Request(url, data=b'{"text": "hi", "stream": true}')
    with urllib.request.urlopen(streamed, timeout=5) as resp:
        assert resp.headers["Content-Type"] == "text/event-stream"
        body = resp.read().decode()
    events = body.split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    assert json.loads(events[0].removeprefix("data: "))["meta_info"]["completion_tokens"] == 1
    with urllib.request.urlopen(urllib.request.Request(url, data=b'{"text": "hi"}'), timeout=5) as resp:
        assert json.loads(resp.read())["text"] == " double"  # not streamed: one JSON document
    assert _http_status(srv.port, "/metrics") == 404  # no --enable-metrics: none, as SGLang


# ---------------------------------------------------------------------------------------------
# Multi-node: one server of two nodes (--tp-size 2 --nnodes 2), both here over 127.0.0.1


FAST = {"SGLANG_DOUBLE_LOAD_SECONDS": "0.2", "SGLANG_DOUBLE_WARMUP_SECONDS": "0"}


def _node(start, rank: int, store: int, *extra: str, **env: str) -> Server:
    args = ["--tp-size", "2", "--nnodes", "2", "--node-rank", str(rank)]
    args += ["--dist-init-addr", f"127.0.0.1:{store}", *extra]
    return start(*args, name=f"node{rank}", **{**FAST, **env})


def _tree_gone(srv: Server) -> bool:
    return srv.proc.poll() is not None and not any(_alive(pid) for pid in srv.child_pids_from_log())


def test_rank0_serves_only_once_its_peer_joined_and_rank1_answers_only_health(start) -> None:
    store = free_port()
    node0 = _node(start, 0, store)
    _wait(lambda: "init torch distributed begin" in node0.text(), what="node 0 to host the store")
    time.sleep(1.5)  # node 0 alone: its scheduler waits for the group, nothing is bound
    assert _http_status(node0.port, "/health") is None
    assert "Attention backend module" not in node0.text()  # the model runner comes after the group
    node1 = _node(start, 1, store, "--enable-metrics")
    _wait(lambda: _http_status(node0.port, "/health") == 200, what="node 0's /health 200")
    _wait(lambda: _http_status(node1.port, "/health") == 200, what="node 1's dummy /health 200")
    assert "Starting dummy health check server at 127.0.0.1" in node1.text()
    assert _metrics(node1.port) == ""  # its schedulers publish nothing (not TP rank 0), no tokenizer
    assert _http_status(node1.port, "/v1/models") == 404  # only node 0 serves the API
    assert _http_status(node0.port, "/v1/models") == 200
    # each node runs its share of the TP ranks: node 0 TP0 (and the detokenizer), node 1 TP1 only
    assert " TP0] Attention backend module" in node0.text() and " TP1]" not in node0.text()
    assert " TP1] Attention backend module" in node1.text() and " TP0]" not in node1.text()

    def titles(srv: Server) -> list[str]:
        comms = (Path(f"/proc/{pid}/comm").read_text().strip() for pid in _children(srv.proc.pid))
        return sorted(comm for comm in comms if comm.startswith("sglang::"))

    _wait(lambda: titles(node1) == ["sglang::schedul"], what="node 1's one scheduler, no detokenizer")
    _wait(lambda: titles(node0) == ["sglang::detoken", "sglang::schedul"], what="node 0's children")
    assert "ready to roll" not in node1.text()


def test_rank1_retries_until_rank0_listens(start) -> None:
    store = free_port()
    node1 = _node(start, 1, store)
    time.sleep(1.5)  # nothing listens on the store yet: node 1 keeps trying
    assert node1.proc.poll() is None
    node0 = _node(start, 0, store)
    _wait(lambda: _http_status(node0.port, "/health") == 200, what="node 0's /health 200")
    _wait(lambda: _http_status(node1.port, "/health") == 200, what="node 1's /health 200")


def test_rank1_gives_up_after_the_store_timeout(start) -> None:
    node1 = _node(start, 1, free_port(), SGLANG_DOUBLE_DIST_TIMEOUT="1")
    assert node1.proc.wait(timeout=TIMEOUT) == -signal.SIGKILL
    text = node1.text()
    assert " TP1] Scheduler hit an exception: Traceback" in text
    assert "The client socket has timed out after 1s while trying to connect to (127.0.0.1," in text


def test_a_crash_on_rank1_takes_rank0_down_after_the_launchers_delay(start) -> None:
    store = free_port()
    delay = 1.5
    node0 = _node(start, 0, store, SGLANG_DOUBLE_PEER_LOSS_EXIT_SECONDS=str(delay))
    # the crash knob as a batch sets it: no rank named, so node 1's own first scheduler (TP1) crashes
    node1 = _node(start, 1, store, SGLANG_DOUBLE_CRASH_AFTER="1.5")
    _wait(lambda: _http_status(node0.port, "/health") == 200, what="node 0's /health 200")
    assert node1.proc.wait(timeout=TIMEOUT) == -signal.SIGKILL
    lost = time.monotonic()
    assert (
        "SimulatedSchedulerError: test double: SGLANG_DOUBLE_CRASH_AFTER=1.5 reached on TP rank 1"
        in node1.text()
    )
    _wait(lambda: "Connection closed by peer" in node0.text(), what="node 0's scheduler to raise")
    assert " TP0] Scheduler hit an exception: Traceback" in node0.text()
    assert node0.proc.wait(timeout=TIMEOUT) == -signal.SIGKILL
    assert time.monotonic() - lost >= delay - 0.3  # the launcher exits later, not at once
    assert "Received sigquit from a child process" in node0.text()
    _wait(lambda: _tree_gone(node0), what="node 0's scheduler to be killed")


def test_with_peer_loss_hang_rank0_lives_unhealthy_and_answers_nothing(start) -> None:
    store = free_port()
    node0 = _node(start, 0, store, SGLANG_DOUBLE_PEER_LOSS="hang")
    node1 = _node(start, 1, store)
    _wait(lambda: _http_status(node0.port, "/health") == 200, what="node 0's /health 200")
    node1.stop()  # SIGKILL to node 1's launcher; its scheduler follows (PR_SET_PDEATHSIG)
    _wait(lambda: _http_status(node0.port, "/health") == 503, what="node 0's /health 503")
    assert "SGLANG_DOUBLE_PEER_LOSS=hang, a peer node is gone and TP rank 0 blocks" in node0.text()
    req = urllib.request.Request(f"http://127.0.0.1:{node0.port}/generate", data=b'{"text": "hi"}')
    with pytest.raises(TimeoutError):
        urllib.request.urlopen(req, timeout=1.5)
    assert node0.proc.poll() is None
    assert "Scheduler hit an exception" not in node0.text()


def test_rank0_death_ends_rank1(start) -> None:
    store = free_port()
    node0 = _node(start, 0, store)
    node1 = _node(start, 1, store, SGLANG_DOUBLE_PEER_LOSS_EXIT_SECONDS="0")
    _wait(lambda: _http_status(node1.port, "/health") == 200, what="node 1's /health 200")
    node0.stop()
    assert node1.proc.wait(timeout=TIMEOUT) == -signal.SIGKILL
    assert " TP1] Scheduler hit an exception: Traceback" in node1.text()
    assert "Connection closed by peer" in node1.text()
    _wait(lambda: _tree_gone(node1), what="node 1's scheduler to be killed")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nnodes", "2", "--node-rank", "0"], "--dist-init-addr HOST:PORT is required when --nnodes > 1"),
        (
            ["--tp-size", "3", "--nnodes", "2", "--dist-init-addr", "127.0.0.1:1"],
            "must be a multiple of --nnodes",
        ),
        (
            ["--nnodes", "2", "--node-rank", "2", "--dist-init-addr", "127.0.0.1:1"],
            "--node-rank 2 must be in",
        ),
    ],
    ids=["no-dist-init-addr", "tp-not-divisible", "rank-out-of-range"],
)
def test_a_bad_multi_node_command_line_fails_before_anything_starts(tmp_path: Path, args, message) -> None:
    (tmp_path / "config.json").write_text("{}")
    res = _run_cli("--model-path", str(tmp_path), "--port", str(free_port()), "--tp-size", "2", *args)
    assert res.returncode == 1
    assert message in res.stderr
    assert "Scheduler started" not in res.stderr


# ---------------------------------------------------------------------------------------------
# /metrics and the traffic knobs


def _post(port: int, body: dict) -> tuple[int, bytes, float]:
    """(status, body, seconds) of one POST /generate."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=json.dumps(body).encode())
    started = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status), resp.read(), time.monotonic() - started
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read(), time.monotonic() - started


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return resp.read().decode()


def _delta(before: str, after: str, name: str) -> float:
    """The change of one series (summed over its label sets) between two /metrics texts."""
    return sum(decode.samples(after, [name]).get(name, {}).values()) - sum(
        decode.samples(before, [name]).get(name, {}).values()
    )


def test_metrics_have_sglangs_series_and_labels_and_grow_with_the_traffic(start) -> None:
    token_s = 0.05
    srv = start(
        "--enable-metrics",
        "--served-model-name",
        "tiny",
        **FAST,
        SGLANG_DOUBLE_OUTPUT_TOKENS="max_new_tokens",
        SGLANG_DOUBLE_TOKEN_SECONDS=str(token_s),
        SGLANG_DOUBLE_ACCEPT_LENGTH="2.5",
    )
    _wait(lambda: _http_status(srv.port, "/health") == 200, what="/health 200")
    before = _metrics(srv.port)
    status, body, seconds = _post(
        srv.port, {"text": "a b c", "stream": True, "sampling_params": {"max_new_tokens": 4}}
    )
    assert status == 200 and seconds >= 4 * token_s
    stream = decode.read_stream(body)  # the project's own reader of SGLang's streams
    assert stream.done and not stream.malformed
    assert [e["meta_info"]["completion_tokens"] for e in stream.events] == [1, 2, 3, 4]
    assert [e["meta_info"]["finish_reason"] for e in stream.events] == [
        None,
        None,
        None,
        {"type": "length", "length": 4},
    ]
    assert stream.events[-1]["text"] == " double" * 4
    # the events come as the tokens are generated, not all at the end
    req = urllib.request.Request(
        f"http://127.0.0.1:{srv.port}/generate",
        data=b'{"text": "x", "stream": true, "sampling_params": {"max_new_tokens": 4}}',
    )
    sent = time.monotonic()
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.readline().startswith(b"data: ")
        first = time.monotonic() - sent
        resp.read()
        assert time.monotonic() - sent - first >= 2 * token_s
    status, body, _ = _post(srv.port, {"text": "d e", "sampling_params": {"max_new_tokens": 3}})
    assert status == 200 and decode.completion_tokens(body) == 3
    after = _metrics(srv.port)

    labels = '{engine_type="unified",model_name="tiny"}'
    assert f"sglang:num_requests_total{labels} " in after
    assert "# TYPE sglang:inter_token_latency_seconds histogram" in after
    assert f'sglang:spec_accept_length{labels[:-1]},moe_ep_rank="0",pp_rank="0",tp_rank="0"}} 2.5' in after
    assert _delta(before, after, "sglang:num_requests_total") == 3
    assert _delta(before, after, "sglang:num_aborted_requests_total") == 0
    assert _delta(before, after, "sglang:generation_tokens_total") == 11
    assert _delta(before, after, "sglang:prompt_tokens_total") == 6
    assert _delta(before, after, "sglang:time_to_first_token_seconds_count") == 3
    assert _delta(before, after, "sglang:e2e_request_latency_seconds_count") == 3
    assert _delta(before, after, "sglang:e2e_request_latency_seconds_sum") >= 11 * token_s
    # the smoke check's own figures from these two reads: the ITL of the streamed answers' 6 later tokens
    itl, samples = decode.itl_mean(before, after)
    assert samples == 6
    assert itl.value is not None and token_s <= itl.value < 4 * token_s
    assert decode.accept_length(after).value == 2.5


def test_error_share_fails_exactly_that_share_of_the_served_requests_as_aborts(start) -> None:
    srv = start("--enable-metrics", **FAST, SGLANG_DOUBLE_ERROR_SHARE="0.5")
    _wait(lambda: _http_status(srv.port, "/health") == 200, what="/health 200")  # the warm-up did not fail
    before = _metrics(srv.port)
    statuses = [_post(srv.port, {"text": "hi"})[0] for _ in range(4)]
    assert statuses == [500, 200, 500, 200]
    status, body, _ = _post(srv.port, {"text": "hi", "stream": True})
    assert status == 200 and "aborted" in decode.read_stream(body).events[0]["error"]["message"]
    after = _metrics(srv.port)
    assert _delta(before, after, "sglang:num_aborted_requests_total") == 3
    assert _delta(before, after, "sglang:num_requests_total") == 5
    assert _delta(before, after, "sglang:generation_tokens_total") == 2


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0.2", 0.2),
        ("0.05,{me}=0.2", 0.2),
        ("0.2,not-{me}=0.05", 0.2),
        ("not-{me}=0.2", 0.0),
        ("{me}=0.3", 0.3),
    ],
    ids=["every-host", "this-host-wins", "another-host", "only-another-host", "only-this-host"],
)
def test_a_traffic_knob_can_name_one_host(value: str, expected: float) -> None:
    code = "from sglang._double.knobs import Knobs; print(Knobs.from_env().token_seconds)"
    env = _env(SGLANG_DOUBLE_TOKEN_SECONDS=value.format(me=socket.gethostname()))
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert res.returncode == 0, res.stderr
    assert float(res.stdout) == expected


@pytest.mark.parametrize(
    "env",
    [
        {"SGLANG_DOUBLE_ERROR_SHARE": "1.5"},
        {"SGLANG_DOUBLE_TOKEN_SECONDS": "-1"},
        {"SGLANG_DOUBLE_OUTPUT_TOKENS": "0"},
        {"SGLANG_DOUBLE_PEER_LOSS": "stall"},
    ],
    ids=["share-above-1", "negative-latency", "no-tokens", "unknown-peer-loss"],
)
def test_a_bad_knob_fails_the_launcher_before_anything_starts(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "config.json").write_text("{}")
    res = _run_cli("--model-path", str(tmp_path), "--port", str(free_port()), **env)
    assert res.returncode == 1
    assert next(iter(env)) in res.stderr
    assert "Scheduler started" not in res.stderr


def test_a_stray_connection_to_the_store_does_not_stop_the_group_forming(start) -> None:
    store = free_port()
    node0 = _node(start, 0, store)
    _wait(lambda: "init torch distributed begin" in node0.text(), what="node 0 to host the store")
    _wait(lambda: _connects(store), what="the store to listen")
    with socket.create_connection(("127.0.0.1", store), timeout=5):  # says nothing, stays open
        node1 = _node(start, 1, store)
        _wait(lambda: _http_status(node0.port, "/health") == 200, what="node 0's /health 200")
        _wait(lambda: _http_status(node1.port, "/health") == 200, what="node 1's /health 200")


def _connects(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as probe:
            probe.sendall(b"probe\n")  # not a rank: dropped at once
        return True
    except OSError:
        return False
