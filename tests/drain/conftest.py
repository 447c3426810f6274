"""Shared by the drain tests: the REAL SGLang router (sglang-router 0.3.2 from .cache/router-venv,
`make router-venv`, or its successor smg 1.13.0 from .cache/smg-venv, `make smg-venv`: the fixture
router_kind says which, sglang-router unless a test asks for smg) in front of SGLang test doubles, all on
127.0.0.1, no container; a bounded client sending continuous traffic through the router and counting it
(scripts/testhosts/traffic.py)."""

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
SMG_VENV = Path(os.environ.get("KDTREE_SMG_VENV", ROOT / ".cache" / "smg-venv"))
# each kind's launcher and the make target that builds its venv; both start with `<name> launch`
BINS = {
    router.SGLANG_ROUTER: (ROUTER_BIN, "make router-venv"),
    router.SMG: (SMG_VENV / "bin" / "smg", "make smg-venv"),
}
# smg keeps its listener open 5 s after SIGTERM (a load balancer's propagation window): not in a test
STOP_AT_ONCE = {router.SMG: ("--shutdown-grace-period-secs", "0")}
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


def missing_router(kind: str) -> str:
    """Why the router of `kind` cannot run here ('' when it can): its venv is not built."""
    binary, target = BINS[kind]
    return "" if binary.exists() else f"no {kind} venv: {binary} is missing ({target})"


class Router:
    """The real router of `kind` (sglang-router or smg; the same flags start both) on 127.0.0.1."""

    def __init__(self, tmp: Path, workers: list[str], *extra: str, kind: str = router.SGLANG_ROUTER) -> None:
        self.kind = kind
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [str(BINS[kind][0]), "launch", "--host", "127.0.0.1", "--port", str(self.port)]
        cmd += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
        cmd += [*STOP_AT_ONCE.get(kind, ()), "--policy", "round_robin", "--api-key", KEY]
        cmd += ["--worker-urls", *workers, *extra]
        self.log = (tmp / f"router-{self.port}.log").open("w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        client = self.client()

        def ready() -> bool:
            try:
                return len([w for w in client.workers() if w.healthy]) == len(workers)
            except router.RouterError:
                return False

        wait_until(ready, 30, f"{kind} with every worker healthy")

    def client(self, key: str = KEY) -> router.Router:
        """The collection's client of this router, of its kind."""
        return router.Router(self.url, key, timeout_s=5, kind=self.kind)

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
def router_kind() -> str:
    """The router the fleet runs (a test or a module parametrizes it to run smg too)."""
    return router.SGLANG_ROUTER


@pytest.fixture
def fleet(tmp_path: Path, router_kind: str) -> Iterator[Callable[..., tuple[Router, list[Double]]]]:
    missing = missing_router(router_kind)
    if missing:  # the one reason to skip: make test-drain-fast builds both venvs first
        pytest.skip(missing)
    made: list = []

    def _make(*extra: str, hosts: int = 2) -> tuple[Router, list[Double]]:
        doubles = [Double(tmp_path, f"host{i}") for i in range(hosts)]
        made.extend(doubles)
        rtr = Router(tmp_path, [d.url for d in doubles], *extra, kind=router_kind)
        made.append(rtr)
        return rtr, doubles

    yield _make
    for thing in reversed(made):
        thing.stop()
