"""A long wait in chunks (plugins/module_utils/_chunk.py) and the router's waits that use it: a chunk
ends after chunk_s with what was last seen, the next one goes on from the time already waited, and the
wait's own limit and failure message stay the whole wait's."""

from __future__ import annotations

import json

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _http_client as http_client
from ansible_collections.kdtree.fleet.plugins.module_utils import _router as router
from ansible_collections.kdtree.fleet.plugins.module_utils._chunk import WAITED_OPTION, Chunk, ChunkOver
from ansible_collections.kdtree.fleet.plugins.modules import kdtree_router


class Clock:
    """A clock that sleep() moves on."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_chunk_ends_after_chunk_s_and_reports_the_whole_wait() -> None:
    clock = Clock()
    chunk = Chunk(300, waited_s=20, chunk_s=10, clock=clock)
    chunk.check(clock.now + 9.9, "busy")  # inside its share: nothing
    with pytest.raises(ChunkOver) as over:
        chunk.check(clock.now + 10, "3 request(s) in flight")
    assert over.value.waited_s == pytest.approx(30)
    assert over.value.progress("no request in flight") == (
        "30 s of 300 s for no request in flight (3 request(s) in flight)"
    )


def test_the_deadline_is_the_limit_less_what_earlier_chunks_waited() -> None:
    clock = Clock()
    assert Chunk(300, waited_s=295, chunk_s=10, clock=clock).deadline == clock.now + 5


def test_a_chunk_at_the_deadline_leaves_the_end_to_the_waits_own_timeout() -> None:
    clock = Clock()
    chunk = Chunk(12, waited_s=0, chunk_s=10, clock=clock)
    chunk.check(clock.now + 12, "busy")  # no ChunkOver: the caller's timeout (and its message) apply


def test_chunk_s_0_waits_to_the_end_in_one_call() -> None:
    clock = Clock()
    Chunk(300, chunk_s=0, clock=clock).check(clock.now + 299, "busy")


def loads(running: int) -> http_client.Answer:
    return http_client.Answer(200, json.dumps({"loads": [{"num_running_reqs": running}]}).encode(), 0.0)


def test_wait_idle_returns_after_its_chunk_and_goes_on_until_the_host_is_idle() -> None:
    clock = Clock()
    idle_at = clock.now + 25

    def request(method, url, **kwargs):
        return loads(0 if clock.now >= idle_at else 2)

    waited = 0.0
    overs = []
    while True:
        chunk = Chunk(300, waited_s=waited, chunk_s=10, clock=clock)
        try:
            result = router.wait_idle(
                "http://h:30000", 300, request=request, clock=clock, sleep=clock.sleep, chunk=chunk
            )
            break
        except ChunkOver as over:
            overs.append(over)
            waited = over.waited_s
    assert [round(o.waited_s) for o in overs] == [10, 20]
    assert all(o.seen == "2 request(s) in flight" for o in overs)
    assert result["in_flight"] == 0
    assert result["waited_s"] == pytest.approx(26, abs=0.5)  # 25 s busy, then 1 s settled


def test_wait_idle_never_ends_a_chunk_while_the_host_settles(monkeypatch) -> None:
    clock = Clock()
    chunk = Chunk(300, chunk_s=10, clock=clock)
    # idle from the start, settle_s longer than a chunk: one call settles (a next call would start over)
    result = router.wait_idle(
        "http://h:30000",
        300,
        settle_s=15,
        request=lambda *a, **k: loads(0),
        clock=clock,
        sleep=clock.sleep,
        chunk=chunk,
    )
    assert result["in_flight"] == 0 and result["waited_s"] == pytest.approx(15, abs=0.3)


def test_wait_idle_in_chunks_still_fails_at_its_limit_with_its_own_message() -> None:
    clock = Clock()
    waited = 0.0
    calls = 0
    with pytest.raises(
        router.InFlightTimeout, match=r"2 request\(s\) still in flight .* after 30 s of draining"
    ):
        while True:
            calls += 1
            chunk = Chunk(30, waited_s=waited, chunk_s=10, clock=clock)
            try:
                router.wait_idle(
                    "http://h:30000",
                    30,
                    request=lambda *a, **k: loads(2),
                    clock=clock,
                    sleep=clock.sleep,
                    chunk=chunk,
                )
            except ChunkOver as over:
                waited = over.waited_s
    assert calls == 3  # 10 + 10 + the last 10 s, which end in the timeout (not a fourth chunk)
    assert clock.now - 1000.0 == pytest.approx(30, abs=0.3)


class Router:
    """GET /workers lists the worker until `gone`; DELETE is recorded."""

    def __init__(self) -> None:
        self.gone, self.deletes = False, 0

    def __call__(self, method, url, **kwargs):
        if method == "DELETE":
            self.deletes += 1
            return http_client.Answer(202, b"{}", 0.0)
        listed = [] if self.gone else [{"id": "w1", "url": "http://h:30000", "is_healthy": True}]
        return http_client.Answer(200, json.dumps({"workers": listed}).encode(), 0.0)


def module_params(**more) -> dict:
    base = {
        "action": "remove",
        "router_url": "http://router:30000",
        "router_kind": "sglang-router",
        "api_key": "",
        "worker_url": "http://h:30000",
        "request_timeout_s": 2.0,
        "wait_timeout_s": 60.0,
        "chunk_s": 0.1,
    }
    return {**base, **more}


def test_module_remove_pends_after_its_chunk_and_a_continued_call_does_not_ask_again() -> None:
    fake = Router()
    result, _warnings = kdtree_router.run(module_params(), False, request=fake)
    assert result["state"] == "pending" and result["changed"] is True
    assert result["progress"].startswith("0 s of 60 s for the router to drop http://h:30000")
    assert result["progress"].endswith("(listed, healthy=True)")
    assert fake.deletes == 1
    fake.gone = True
    result, _warnings = kdtree_router.run(module_params(**{WAITED_OPTION: 5.0}), False, request=fake)
    assert "state" not in result and result["changed"] is True
    assert fake.deletes == 1  # the continued call only waits: the worker is never removed twice


def test_module_wait_idle_fails_at_the_whole_limit_when_earlier_chunks_used_it(monkeypatch) -> None:
    params = {
        "action": "wait_idle",
        "server_url": "http://h:30000/health",
        "api_key": "",
        "timeout_s": 300.0,
        "settle_s": 1.0,
        "force": False,
        "chunk_s": 10.0,
        WAITED_OPTION: 300.0,
    }
    failed, result, _warnings = kdtree_router.outcome(params, False, request=lambda *a, **k: loads(1))
    assert failed
    assert "1 request(s) still in flight" in result["msg"] and "after 300 s of draining" in result["msg"]
    assert "the host was NOT restarted" in result["msg"]
