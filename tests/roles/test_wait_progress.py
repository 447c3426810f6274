"""The drain's in-flight wait says how it goes while it waits (roles/kdtree_drain entry point drain, mode
hooks, through ansible-playbook on localhost): one line per kdtree_drain_progress_s (1 s here; 10 s by
default) naming what it waits for, how long of its limit and what it saw last; the limit and its failure
message stay the whole wait's; check mode waits for nothing and prints nothing. The host's SGLang is a
fake GET /v1/loads on 127.0.0.1 that is busy for the first seconds."""

from __future__ import annotations

import http.server
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible_collections.kdtree.fleet.tests.unit.helpers.http_servers import reply, serving
from conftest import PLAYBOOK_BIN, role_play, run_play

pytestmark = pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")

LINE = re.compile(
    r"^  \[localhost\] drain: waiting (\d+) s of (\S+) s for no request in flight on (\S+) \((.*)\)$", re.M
)


class Loads(http.server.BaseHTTPRequestHandler):
    busy_s = 0.0  # how long one request stays in flight, from the first GET /v1/loads
    first = 0.0
    asked = 0
    url = ""

    def do_GET(self) -> None:
        kind = type(self)
        kind.asked += 1
        kind.first = kind.first or time.monotonic()
        running = 1 if time.monotonic() - kind.first < self.busy_s else 0
        body = json.dumps({"loads": [{"num_running_reqs": running, "num_waiting_reqs": 0}]}).encode()
        reply(self, 200 if self.path == "/v1/loads" else 404, body, "application/json")

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def sglang() -> Iterator[type[Loads]]:
    handler = type("BusyLoads", (Loads,), {})
    with serving(handler) as url:
        handler.url = url
        yield handler


def drain(tmp_path: Path, sglang: type[Loads], timeout_s: float, *extra: str):
    role_vars = {
        "kdtree_drain_mode": "hooks",
        "kdtree_drain_drain_command": ["true"],
        "kdtree_drain_rejoin_command": ["true"],
        "_kdtree_drain_health_url": f"{sglang.url}/health",
        "kdtree_drain_record_path": str(tmp_path / "drain.json"),
        "kdtree_drain_timeout_s": timeout_s,
        "kdtree_drain_settle_s": 0.5,
        "kdtree_drain_progress_s": 1,
    }
    play = role_play("kdtree_drain", role_vars, tasks_from="drain")
    return run_play(tmp_path / "play.yml", play, *extra)


def test_a_long_in_flight_wait_prints_a_line_per_interval_then_ends_ok(tmp_path: Path, sglang) -> None:
    sglang.busy_s = 3.5
    out = drain(tmp_path, sglang, 30)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = LINE.findall(out.stdout)
    assert len(lines) >= 2, out.stdout
    assert {(limit, url, seen) for _w, limit, url, seen in lines} == {
        ("30", sglang.url, "1 request(s) in flight")
    }
    waited = [int(w) for w, *_rest in lines]
    assert waited == sorted(waited) and waited[-1] >= 2  # the whole wait's time, not the chunk's


def test_a_wait_that_runs_out_still_fails_at_its_limit_with_its_own_message(tmp_path: Path, sglang) -> None:
    sglang.busy_s = 3600
    started = time.monotonic()
    out = drain(tmp_path, sglang, 3)
    assert out.returncode != 0
    assert "1 request(s) still in flight" in out.stdout and "after 3 s of draining" in out.stdout
    assert "the host was NOT restarted" in out.stdout
    assert 1 <= len(LINE.findall(out.stdout)) <= 3, out.stdout
    assert time.monotonic() - started < 60


def test_check_mode_waits_for_nothing_and_prints_no_line(tmp_path: Path, sglang) -> None:
    sglang.busy_s = 3600
    out = drain(tmp_path, sglang, 30, "--check")
    assert out.returncode == 0, out.stdout + out.stderr
    assert LINE.findall(out.stdout) == [] and sglang.asked == 0
