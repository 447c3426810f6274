"""The router client (plugins/module_utils/_router.py) against the REAL SGLang router (sglang-router
0.3.2 from .cache/router-venv, `make router-venv`) in front of SGLang test doubles, all on 127.0.0.1,
no container. The drain under continuous traffic is proven here too: 0 failed requests with the
drain, failures without it (the control, router retries off).

Skipped only when the router venv is absent (make test-drain-fast builds it first).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _http_client as http_client
from ansible_collections.kdtree.fleet.plugins.module_utils import _router as router

ROOT = Path(__file__).resolve().parents[2]
DOUBLE = ROOT / "tests" / "doubles" / "sglang_double"
ROUTER_VENV = Path(os.environ.get("KDTREE_ROUTER_VENV", ROOT / ".cache" / "router-venv"))
ROUTER_BIN = ROUTER_VENV / "bin" / "sglang-router"
KEY = "drain-test-key-7f3a9c"
GENERATE_S = 0.4

pytestmark = pytest.mark.skipif(
    not ROUTER_BIN.exists(), reason=f"no router venv at {ROUTER_VENV} (make router-venv)"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _ok(url: str, key: str = "") -> bool:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


class Double:
    """One SGLang test double on 127.0.0.1 (a 'host'); restart() is the service restart."""

    def __init__(self, tmp: Path, name: str) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.model = tmp / "model"
        self.model.mkdir(exist_ok=True)
        (self.model / "config.json").write_text(json.dumps({"model_type": "llama"}))
        self.log_path = tmp / f"{name}.log"
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_DOUBLE_", "PYTHON"))}
        env.update(
            PYTHONPATH=str(DOUBLE),
            SGLANG_DOUBLE_LOAD_SECONDS="0.3",
            SGLANG_DOUBLE_WARMUP_SECONDS="0",
            SGLANG_DOUBLE_GENERATE_SECONDS=str(GENERATE_S),
        )
        cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(self.model)]
        cmd += ["--host", "127.0.0.1", "--port", str(self.port)]
        with self.log_path.open("a") as log:
            self.proc = subprocess.Popen(
                cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        _wait(lambda: _ok(self.url + "/health"), 20, f"double {self.url} healthy")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # a crash-like stop: in-flight requests are lost
            self.proc.wait(timeout=10)

    def generates(self) -> int:
        """POST /generate answered, less the one warm-up request each start makes itself."""
        text = self.log_path.read_text()
        return len(re.findall(r'"POST /generate HTTP/1.1" 200', text)) - text.count("ready to roll")


class Router:
    def __init__(self, tmp: Path, workers: list[str], *extra: str) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [str(ROUTER_BIN), "launch", "--host", "127.0.0.1", "--port", str(self.port)]
        cmd += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(_free_port())]
        cmd += ["--policy", "round_robin", "--api-key", KEY, "--worker-urls", *workers, *extra]
        self.log = (tmp / f"router-{self.port}.log").open("w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        client = router.Router(self.url, KEY, timeout_s=5)

        def ready() -> bool:
            try:
                return len([w for w in client.workers() if w.healthy]) == len(workers)
            except router.RouterError:
                return False

        _wait(ready, 30, "router with every worker healthy")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Callable[..., tuple[Router, list[Double]]]]:
    made: list = []

    def _make(*extra: str, hosts: int = 2) -> tuple[Router, list[Double]]:
        doubles = [Double(tmp_path, f"host{i}") for i in range(hosts)]
        made.extend(doubles)
        rtr = Router(tmp_path, [d.url for d in doubles], *extra)
        made.append(rtr)
        return rtr, doubles

    yield _make
    for thing in reversed(made):
        thing.stop()


@dataclass
class Traffic:
    """A bounded client: one request at a time per thread through the router, counted."""

    url: str
    threads: int = 4
    sent: int = 0
    answered: int = 0
    failed: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _workers: list[threading.Thread] = field(default_factory=list)

    def _loop(self) -> None:
        body = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 1}}).encode()
        headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
        while not self._stop.is_set():
            with self._lock:
                self.sent += 1
            try:
                http_client.request("POST", self.url + "/generate", timeout_s=15, body=body, headers=headers)
                with self._lock:
                    self.answered += 1
            except http_client.HttpFailure as exc:
                with self._lock:
                    self.failed.append(exc.reason)

    def __enter__(self) -> Traffic:
        for _ in range(self.threads):
            thread = threading.Thread(target=self._loop, daemon=True)
            thread.start()
            self._workers.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._workers:
            thread.join(timeout=20)


def _restart(host: Double, client: router.Router | None) -> None:
    """What the roles do around sglang.service's restart: drain, wait for in-flight, restart, rejoin."""
    if client is not None:
        assert client.remove(host.url)
        client.wait_for(host.url, present=False, timeout_s=10)
        router.wait_idle(host.url, timeout_s=10)
    before = host.generates()
    host.stop()
    host.start()
    if client is not None:
        assert host.generates() == before, "a request reached the host between its drain and its restart"
        client.add(host.url)
        client.wait_for(host.url, present=True, timeout_s=20)


def test_workers_remove_add_are_queued_and_waited_for(fleet) -> None:
    rtr, (one, two) = fleet()
    client = router.Router(rtr.url, KEY, timeout_s=5)
    assert sorted(w.url for w in client.workers()) == sorted([one.url, two.url])
    assert all(w.healthy for w in client.workers())
    assert client.remove(two.url) is True
    assert client.wait_for(two.url, present=False, timeout_s=10) is None
    assert [w.url for w in client.workers()] == [one.url]
    assert client.remove(two.url) is False  # not listed: nothing to remove
    client.add(two.url)
    worker = client.wait_for(two.url, present=True, timeout_s=20)
    assert worker is not None and worker.healthy


def test_the_key_is_sent_and_never_shown(fleet) -> None:
    rtr, _ = fleet()
    wrong = "wrong-key-0123456789"
    with pytest.raises(router.RouterError) as info:
        router.Router(rtr.url, wrong, timeout_s=5).workers()
    assert "401" in str(info.value)
    assert wrong not in str(info.value)
    with pytest.raises(router.RouterError, match="401"):
        router.Router(rtr.url, "", timeout_s=5).workers()


def test_wait_for_a_worker_that_never_comes_fails_naming_it(fleet, tmp_path: Path) -> None:
    rtr, _ = fleet(hosts=1)
    client = router.Router(rtr.url, KEY, timeout_s=5)
    dead = f"http://127.0.0.1:{_free_port()}"
    client.add(dead)
    with pytest.raises(router.RouterError, match=r"not listed and healthy within 1\.5 s"):
        client.wait_for(dead, present=True, timeout_s=1.5)


def test_in_flight_is_read_from_sglang_and_its_timeout_is_a_failure(fleet) -> None:
    _, (one,) = fleet(hosts=1)
    assert router.in_flight(one.url, timeout_s=5) == 0
    slow = threading.Thread(
        target=http_client.request,
        args=("POST", one.url + "/generate"),
        kwargs={"timeout_s": 10, "body": b"{}"},
    )
    slow.start()
    _wait(lambda: router.in_flight(one.url, timeout_s=5) == 1, 5, "one request in flight")
    with pytest.raises(router.InFlightTimeout, match=r"1 request\(s\) still in flight"):
        router.wait_idle(one.url, timeout_s=0.05, settle_s=0)
    assert router.wait_idle(one.url, timeout_s=10)["in_flight"] == 0
    slow.join()


def test_drain_under_traffic_loses_nothing_and_the_control_does(fleet) -> None:
    rtr, hosts = fleet(hosts=2)
    client = router.Router(rtr.url, KEY, timeout_s=5)
    with Traffic(rtr.url) as traffic:
        time.sleep(1)
        for host in hosts:
            _restart(host, client)
            time.sleep(1)
    print(f"drain on: sent {traffic.sent} answered {traffic.answered} failed {len(traffic.failed)}")
    assert traffic.answered > 10 and traffic.failed == []
    assert all(host.generates() > 0 for host in hosts)


def test_control_without_drain_and_without_retries_fails_requests(fleet) -> None:
    rtr, hosts = fleet("--disable-retries", hosts=2)
    with Traffic(rtr.url) as traffic:
        time.sleep(1)
        for host in hosts:
            _restart(host, None)
            time.sleep(1)
    print(
        f"drain off, retries off: sent {traffic.sent} answered {traffic.answered} "
        f"failed {len(traffic.failed)}"
    )
    assert traffic.failed, "the control run lost no request: the drain test could not fail"


@pytest.mark.parametrize(
    ("healthy", "draining", "share", "allowed"),
    [(4, 1, 0.25, 1), (4, 2, 0.5, 2), (3, 1, 0.34, 1), (10, 3, 0.3, 3), (2, 1, 0.1, 1)],
)
def test_share_rule_allows(healthy: int, draining: int, share: float, allowed: int) -> None:
    workers = [router.Worker(str(i), f"http://h{i}:1", True, 0) for i in range(healthy)]
    counts = router.check_share(workers, [w.url for w in workers[:draining]], share)
    assert counts == {"healthy": healthy, "draining": draining, "allowed": allowed}


def test_share_rule_refuses_too_many_and_none_left() -> None:
    workers = [router.Worker(str(i), f"http://h{i}:1", True, 0) for i in range(4)]
    workers.append(router.Worker("x", "http://sick:1", False, 0))
    with pytest.raises(
        router.DrainUnsafe, match=r"drain 2 of the router's 4 healthy workers at once: at most 1"
    ):
        router.check_share(workers, ["http://h0:1", "http://H1:1/"], 0.25)
    with pytest.raises(router.DrainUnsafe, match="none would be left"):
        router.check_share(workers, [w.url for w in workers], 1.0)
    with pytest.raises(router.DrainUnsafe, match=r"in \(0, 1\]"):
        router.check_share(workers, [], 0)
    # an unhealthy or unknown worker does not count against the share
    assert router.check_share(workers, ["http://sick:1", "http://other:1"], 0.25)["draining"] == 0
