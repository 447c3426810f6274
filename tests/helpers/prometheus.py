"""A real Prometheus for the tests: Debian's `prometheus` package (bookworm: 2.42, installed by
scripts/install-system-deps.sh) started as a process of the test, never as a service: 127.0.0.1 on a
free port, a data directory of its own, a generated configuration that scrapes the given targets every
second and evaluates the given rule files every second. Imported by its collection path,
`ansible_collections.kdtree.fleet.tests.helpers.prometheus`.

    with Prometheus(tmp_path, [Target("10.88.0.5:9100", {"role": "canary"})], rules=[rules]) as prom:
        prom.wait_for_targets()
        rows = prom.query('sum by (instance) (rate(kdtree_verify_calls_total[1m]))')

A suite that needs it calls `require()` first: a skip where the package is missing, a failure under
KDTREE_REQUIRE_PROMETHEUS=1 (make test-monitoring: it must run, never skip).
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ansible_collections.kdtree.fleet.tests.helpers.polling import free_port, wait_until

log = logging.getLogger(__name__)

PROMETHEUS = "prometheus"
PROMTOOL = "promtool"
REQUIRE_ENV = "KDTREE_REQUIRE_PROMETHEUS"
INSTALL_HINT = "Debian's prometheus package (make system-deps)"
# Scrapes and rule evaluations: often enough that a rate over a few seconds has its two samples.
INTERVAL_S = 1
READY_TIMEOUT_S = 30.0
HTTP_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
_PR_SET_PDEATHSIG = 1


def missing() -> str | None:
    """Why Prometheus cannot run here, or None when `prometheus` and `promtool` are on PATH."""
    absent = [tool for tool in (PROMETHEUS, PROMTOOL) if shutil.which(tool) is None]
    return f"{' and '.join(absent)} not found: {INSTALL_HINT}" if absent else None


def require() -> None:
    """Skip the calling test when Prometheus is not installed; fail under KDTREE_REQUIRE_PROMETHEUS."""
    import pytest

    why = missing()
    if why is None:
        return
    if os.environ.get(REQUIRE_ENV):
        pytest.fail(why)
    pytest.skip(why)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process dies (a killed run leaves no server)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def promtool(*args: str | Path, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """`promtool <args>`, its output captured (the caller judges the return code)."""
    return subprocess.run(
        [PROMTOOL, *map(str, args)], capture_output=True, text=True, timeout=timeout, check=False
    )


@dataclass(frozen=True)
class Target:
    """One scrape target: host:port, the labels Prometheus adds to its series, its metrics path."""

    address: str
    labels: dict[str, str] = field(default_factory=dict)
    path: str = "/metrics"


class PrometheusError(RuntimeError):
    """The API answered with an error, or the server is not running."""


class Prometheus:
    """A Prometheus process of the test; `start()`/`stop()` or a `with` block."""

    def __init__(
        self,
        workdir: Path,
        targets: list[Target],
        rules: list[Path] | None = None,
        interval_s: int = INTERVAL_S,
        job: str = "kdtree",
    ) -> None:
        self.workdir = Path(workdir)
        self.targets = list(targets)
        self.rules = [Path(r).resolve() for r in rules or []]
        self.interval_s = interval_s
        self.job = job
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.workdir / "prometheus.log"
        self.config_path = self.workdir / "prometheus.yml"

    # --- life cycle -------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def config(self) -> dict[str, Any]:
        """The configuration file's content: one job per metrics path, the targets' own labels."""
        interval = f"{self.interval_s}s"
        by_path: dict[str, list[dict[str, Any]]] = {}
        for target in self.targets:
            by_path.setdefault(target.path, []).append({"targets": [target.address], "labels": target.labels})
        jobs = [
            {
                "job_name": self.job if i == 0 else f"{self.job}-{i}",
                "metrics_path": path,
                "static_configs": static,
            }
            for i, (path, static) in enumerate(sorted(by_path.items()))
        ]
        every = {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval}
        return {
            "global": every,
            "rule_files": [str(r) for r in self.rules],
            "scrape_configs": jobs,
        }

    def start(self, timeout: float = READY_TIMEOUT_S) -> Prometheus:
        """Write the configuration, start the server and return once /-/ready answers 200."""
        why = missing()
        if why:
            raise PrometheusError(why)
        self.workdir.mkdir(parents=True, exist_ok=True)
        # JSON is YAML: no YAML library needed to write it
        self.config_path.write_text(json.dumps(self.config(), indent=2))
        self.port = free_port()
        cmd = [
            PROMETHEUS,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]
        log.info("starting %s", " ".join(cmd))
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir, preexec_fn=_die_with_parent
            )
        try:
            wait_until(self._ready, timeout, f"Prometheus /-/ready on {self.url}", poll=0.1)
        except AssertionError as exc:
            self.stop()
            raise PrometheusError(f"{exc}\n{self.log_tail()}") from None
        return self

    def _ready(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            raise PrometheusError(f"prometheus exited ({self._rc()}) before it was ready\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                return resp.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def stop(self) -> None:
        """Terminate the server (kill it if it does not end in STOP_TIMEOUT_S)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)

    def _rc(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def log_tail(self, lines: int = 20) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "prometheus log:\n" + "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> Prometheus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the HTTP API -----------------------------------------------------------------------------
    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>: its `data`; PrometheusError with the API's own error otherwise."""
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as exc:  # 400/422: a bad query, with the reason in the body
            body = json.loads(exc.read() or b"{}")
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            raise PrometheusError(f"{url}: {exc} (prometheus rc {self._rc()})") from None
        if body.get("status") != "success":
            raise PrometheusError(f"{url}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector of a PromQL expression now: [{"metric": {labels}, "value": float}, ...].
        A scalar or string result is one row with no labels."""
        data = self.api("query", query=expr)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": float(data["result"][1])}]
        return [{"metric": row["metric"], "value": float(row["value"][1])} for row in data["result"]]

    def targets_health(self) -> dict[str, str]:
        """address -> health (up, down, unknown) of every active target."""
        active = self.api("targets", state="active")["activeTargets"]
        return {t["discoveredLabels"]["__address__"]: t["health"] for t in active}

    def wait_for_targets(self, timeout: float = 15.0) -> None:
        """Return once every target has been scraped successfully; fail naming those that are not."""
        want = {t.address for t in self.targets}

        def all_up() -> bool:
            health = self.targets_health()
            return want <= set(health) and all(health[a] == "up" for a in want)

        try:
            wait_until(all_up, timeout, "every target up", poll=0.2)
        except AssertionError:
            raise PrometheusError(f"targets not up after {timeout} s: {self.targets_health()}") from None

    def wait_for(self, expr: str, timeout: float = 15.0) -> list[dict[str, Any]]:
        """Poll `expr` until it returns a sample; that result (PrometheusError after `timeout`)."""
        deadline = time.monotonic() + timeout
        while True:
            rows = self.query(expr)
            if rows:
                return rows
            if time.monotonic() > deadline:
                raise PrometheusError(f"no sample of {expr} after {timeout} s")
            time.sleep(0.2)

    def rule_groups(self) -> list[dict[str, Any]]:
        """The loaded rule groups with their rules' state and health (/api/v1/rules)."""
        return self.api("rules")["groups"]

    def alerts(self) -> list[dict[str, Any]]:
        """The active alerts (pending and firing) with their labels (/api/v1/alerts)."""
        return self.api("alerts")["alerts"]


class Exporter:
    """A tiny /metrics server of the test: each GET answers `render()` in the text format 0.0.4.
    Bound to `host` on a free port (any 127.x.y.z is this machine: one per test host to tell hosts
    apart by their instance label)."""

    def __init__(self, render: Callable[[], str], host: str = "127.0.0.1") -> None:
        self.render = render
        handler = _handler(render)
        self.server = ThreadingHTTPServer((host, 0), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def address(self) -> str:
        host, port = self.server.server_address[:2]
        return f"{host}:{port}"

    def __enter__(self) -> Exporter:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(render: Callable[[], str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("exporter %s: " + fmt, self.server.server_address, *args)

    return Handler
