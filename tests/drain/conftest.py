"""Shared by the drain tests: the REAL SGLang router (sglang-router 0.3.2 from .cache/router-venv,
`make router-venv`) in front of SGLang test doubles, all on 127.0.0.1, no container; a bounded client
sending continuous traffic through the router and counting it (scripts/testhosts/traffic.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _router as router
from ansible_collections.kdtree.fleet.tests.helpers.polling import free_port, wait_until

# the bounded client is the one molecule batch and make bench-drain use (scripts/testhosts/traffic.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "testhosts"))
import traffic

ROOT = Path(__file__).resolve().parents[2]
DOUBLE = ROOT / "tests" / "doubles" / "sglang_double"
ROUTER_VENV = Path(os.environ.get("KDTREE_ROUTER_VENV", ROOT / ".cache" / "router-venv"))
ROUTER_BIN = ROUTER_VENV / "bin" / "sglang-router"
KEY = "drain-test-key-7f3a9c"
os.environ[traffic.KEY_ENV] = KEY  # the client's key
Traffic = traffic.Traffic
GENERATE_S = 0.4

needs_router = pytest.mark.skipif(
    not ROUTER_BIN.exists(), reason=f"no router venv at {ROUTER_VENV} (make router-venv)"
)


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
        self.port = free_port()
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
        wait_until(lambda: _ok(self.url + "/health"), 20, f"double {self.url} healthy")

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
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [str(ROUTER_BIN), "launch", "--host", "127.0.0.1", "--port", str(self.port)]
        cmd += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
        cmd += ["--policy", "round_robin", "--api-key", KEY, "--worker-urls", *workers, *extra]
        self.log = (tmp / f"router-{self.port}.log").open("w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        client = router.Router(self.url, KEY, timeout_s=5)

        def ready() -> bool:
            try:
                return len([w for w in client.workers() if w.healthy]) == len(workers)
            except router.RouterError:
                return False

        wait_until(ready, 30, "router with every worker healthy")

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
    if not ROUTER_BIN.exists():  # the one reason to skip: make test-drain-fast builds it first
        pytest.skip(f"no router venv at {ROUTER_VENV} (make router-venv)")
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
