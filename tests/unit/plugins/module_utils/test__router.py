"""The router client (plugins/module_utils/_router.py) and the kdtree_router module's run() on what a red
team sent: worker URLs spelled otherwise than the router lists them, a malformed IPv6 URL, an answer
nested 100000 deep or larger than the cap, a router error that echoes the API key, and check mode (it
waits for nothing). Fake routers are functions in place of the HTTP client, or a real local server."""

from __future__ import annotations

import http.server
import json
import time
from collections.abc import Iterator

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _http_client as http_client
from ansible_collections.kdtree.fleet.plugins.module_utils import _router as router
from ansible_collections.kdtree.fleet.plugins.modules import kdtree_router
from ansible_collections.kdtree.fleet.tests.unit.helpers.http_servers import reply, serving

KEY = "rk-9f3Qz7Lw2Xv8Bn4Tq6Ys"


class FakeRouter:
    """GET /workers answers `listing` (or `body`); every call is recorded as (method, url)."""

    def __init__(self, listing: list[str] | None = None, body: bytes | None = None) -> None:
        self.workers = [
            {"id": f"id-{i}", "url": url, "is_healthy": True, "load": 0}
            for i, url in enumerate(listing or [])
        ]
        self.body = body
        self.calls: list[tuple[str, str]] = []

    def __call__(self, method: str, url: str, **kwargs) -> http_client.Answer:
        self.calls.append((method, url))
        if self.body is not None:
            return http_client.Answer(200, self.body, 0.0)
        if method == "GET":
            return http_client.Answer(200, json.dumps({"workers": self.workers}).encode(), 0.0)
        if method == "DELETE":
            gone = url.rsplit("/", 1)[-1]
            self.workers = [w for w in self.workers if w["id"] != gone]
        return http_client.Answer(202, b"{}", 0.0)

    def changes(self) -> list[tuple[str, str]]:
        return [call for call in self.calls if call[0] != "GET"]


def params(**more) -> dict:
    base = {
        "action": "workers",
        "router_url": "http://router.test:30000",
        "router_kind": router.SGLANG_ROUTER,
        "api_key": KEY,
        "worker_url": "",
        "draining": [],
        "out": [],
        "max_share": 0.5,
        "request_timeout_s": 2.0,
        "wait_timeout_s": 1.0,
        "server_url": "",
        "timeout_s": 1.0,
        "settle_s": 0.0,
        "force": False,
        "record_path": "",
        "rejoin_hooks": False,
    }
    base.update(more)
    return base


@pytest.mark.parametrize(
    "spelled",
    [
        "http://10.0.0.5:08000",
        "http://10.0.0.5:8000/",
        "HTTP://10.0.0.5:8000",
        "http://GPU1.example:8000",
        "http://gpu1.example:8000//",
    ],
)
def test_worker_urls_written_otherwise_are_the_same_worker(spelled: str) -> None:
    fake = FakeRouter(["http://10.0.0.5:8000", "http://gpu1.example:8000"])
    client = router.Router("http://router.test:30000", KEY, request=fake)
    assert client.find(spelled) is not None
    fake.workers = [w for w in fake.workers if router.canonical(w["url"]) != router.canonical(spelled)]
    assert client.find(spelled) is None


def test_default_ports_and_ipv6_compare_in_one_form() -> None:
    assert router.canonical("http://h") == router.canonical("http://H:80/")
    assert router.canonical("https://h") == "https://h:443"
    assert router.canonical("http://[::0001]:8000") == router.canonical("http://[::1]:8000/")


def test_remove_refuses_a_worker_the_router_does_not_list_naming_both_spellings() -> None:
    fake = FakeRouter(["http://10.0.0.5:8000", "http://10.0.0.6:8000"])
    client = router.Router("http://router.test:30000", KEY, request=fake)
    with pytest.raises(router.RouterError) as info:
        client.remove("http://gpu1.example:8000")
    text = str(info.value)
    assert "http://gpu1.example:8000" in text and "http://10.0.0.5:8000" in text
    assert "never taken as drained" in text
    assert fake.changes() == []


def test_module_remove_and_check_refuse_an_unlisted_worker_never_a_success() -> None:
    fake = FakeRouter(["http://10.0.0.5:8000"])
    for action in ("remove", "check"):
        for check_mode in (False, True):
            with pytest.raises(router.RouterError, match="does not list the worker"):
                kdtree_router.run(
                    params(action=action, worker_url="http://gpu1:8000"), check_mode, request=fake
                )
    assert fake.changes() == []


@pytest.mark.parametrize(
    "url",
    [
        "http://[::1:8000/",
        "http://h:99999",
        "http://h:80a",
        "ftp://h:1",
        "http://u:pw@h:1",
        "http://h:1/?x=1",
    ],
)
def test_malformed_urls_are_clear_refusals_not_tracebacks(url: str) -> None:
    with pytest.raises(router.RouterError) as info:
        router.canonical(url)
    assert "pw" not in str(info.value)
    with pytest.raises(router.RouterError):
        router.Router(url, KEY, request=FakeRouter())
    with pytest.raises(router.RouterError):
        router.in_flight(url, 1.0, request=FakeRouter())
    with pytest.raises(router.RouterError):
        kdtree_router.run(params(action="remove", worker_url=url), False, request=FakeRouter([]))


def test_an_answer_nested_100000_deep_is_a_refusal() -> None:
    deep = b"[" * 100000 + b"]" * 100000
    client = router.Router("http://router.test:30000", KEY, request=FakeRouter(body=deep))
    with pytest.raises(router.RouterError, match="nested too deeply"):
        client.workers()
    with pytest.raises(router.RouterError, match="nested too deeply"):
        router.in_flight("http://h:1", 1.0, request=FakeRouter(body=b'{"loads": ' + deep + b"}"))


def test_an_answer_larger_than_the_cap_is_a_refusal() -> None:
    big = json.dumps({"workers": [], "pad": "x" * (router.MAX_ANSWER + 10)}).encode()
    seen: dict = {}

    def request(method: str, url: str, **kwargs) -> http_client.Answer:
        seen.update(kwargs)
        return http_client.Answer(200, big, 0.0)

    with pytest.raises(router.RouterError, match="larger than"):
        router.Router("http://router.test:30000", KEY, request=request).workers()
    assert seen["limits"].max_body == router.MAX_ANSWER


class EchoKeyHandler(http.server.BaseHTTPRequestHandler):
    """A router that refuses every request and echoes the key back in many shapes."""

    def do_GET(self) -> None:
        body = json.dumps(
            {
                "error": f"bad key '{KEY[:5]}' (expected {KEY[3:11]}...), header was "
                f"Authorization: {self.headers.get('Authorization')}; see http://admin:{KEY[2:9]}@router/",
                "hint": KEY[-4:] + " " + KEY.upper()[4:12],
            }
        ).encode()
        reply(self, 401, body, "application/json")

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def echo_router() -> Iterator[str]:
    with serving(EchoKeyHandler) as url:
        yield url


def fragments(secret: str, size: int = 4) -> set[str]:
    return {
        secret[i : i + n].lower() for n in range(size, len(secret) + 1) for i in range(len(secret) - n + 1)
    }


def test_no_four_characters_of_the_key_reach_the_module_result(echo_router: str) -> None:
    with pytest.raises(router.RouterError) as info:
        kdtree_router.run(params(router_url=echo_router), False)
    shown = str(info.value).lower()
    assert "401" in shown
    assert not [f for f in fragments(KEY) if f in shown], shown
    failed, result, warnings = kdtree_router.outcome(params(router_url=echo_router), False)
    text = json.dumps([result, warnings]).lower()
    assert failed and "401" in text
    assert not [f for f in fragments(KEY) if f in text], text


def test_scrub_hides_authorization_bearer_and_userinfo() -> None:
    text = router.scrub("Authorization: Basic abcdef; bearer xyz123; http://u:p@h:1/x", [])
    assert "abcdef" not in text and "xyz123" not in text and "u:p@" not in text


def test_check_mode_waits_for_nothing_and_changes_nothing() -> None:
    busy = b'{"loads": [{"num_running_reqs": 3, "num_waiting_reqs": 2}]}'
    fake = FakeRouter(body=busy)
    started = time.monotonic()
    result = kdtree_router.run(
        params(action="wait_idle", server_url="http://h:30000/health", timeout_s=5.0), True, request=fake
    )[0]
    assert time.monotonic() - started < 1.0
    assert fake.calls == [] and result["waited_s"] == 0
    assert "would wait up to 5 s" in result["msg"] and "http://h:30000" in result["msg"]
    listed = FakeRouter(["http://h:30000"])
    result = kdtree_router.run(params(action="remove", worker_url="http://H:30000/"), True, request=listed)[0]
    assert result["changed"] and "would remove http://h:30000" in result["msg"]
    assert listed.changes() == []


def test_remove_waits_until_every_entry_of_the_worker_is_gone() -> None:
    fake = FakeRouter(["http://h:30000", "http://H:30000/", "http://other:30000"])
    result = kdtree_router.run(params(action="remove", worker_url="http://h:30000"), False, request=fake)[0]
    assert result["changed"]
    assert [w["url"] for w in fake.workers] == ["http://other:30000"]


def _smg_record(status: object, healthy: bool = True) -> dict:
    record = {"id": "01a2-0", "url": "http://h:30000", "is_healthy": healthy, "load": 0}
    return record if status is None else {**record, "status": status}


@pytest.mark.parametrize(("status", "healthy"), [("ready", True), ("pending", False), ("draining", False)])
def test_smg_counts_a_worker_healthy_only_when_it_is_ready(status: str, healthy: bool) -> None:
    fake = FakeRouter()
    fake.workers = [_smg_record(status)]
    (worker,) = router.Router("http://router.test:30000", kind=router.SMG, request=fake).workers()
    assert worker.healthy is healthy and worker.status == status
    assert worker.leaving is (status == router.SMG_DRAINING)


@pytest.mark.parametrize(
    ("kind", "status", "said"),
    [
        (router.SMG, None, "does not answer like smg .*kdtree_drain_router_kind: sglang-router"),
        (router.SMG, "", "does not answer like smg"),
        (router.SGLANG_ROUTER, "ready", "answers like smg .*kdtree_drain_router_kind: smg"),
    ],
)
def test_a_worker_list_of_the_other_kind_is_refused_before_any_change(kind: str, status, said: str) -> None:
    fake = FakeRouter()
    fake.workers = [_smg_record(status)]
    client = router.Router("http://router.test:30000", kind=kind, request=fake)
    with pytest.raises(router.RouterError, match=said):
        client.remove("http://h:30000")
    assert fake.changes() == []
    failed, result, _warnings = kdtree_router.outcome(
        params(action="check", router_kind=kind, worker_url="http://h:30000"), False, request=fake
    )
    assert failed and "Nothing was changed" in result["msg"]


class ListsAfter(FakeRouter):
    """A router that lists an added worker only after `delay` GETs (its health checks first)."""

    def __init__(self, delay: int) -> None:
        super().__init__([])
        self.delay = delay

    def __call__(self, method: str, url: str, **kwargs) -> http_client.Answer:
        if method == "POST":
            self.delay_left = self.delay
        elif method == "GET" and getattr(self, "delay_left", None) is not None:
            self.delay_left -= 1
            if self.delay_left == 0:
                self.workers = [{"id": "w", "url": "http://10.0.0.5:8000", "is_healthy": True, "load": 0}]
        return super().__call__(method, url, **kwargs)


def test_a_rejoin_continued_in_a_later_chunk_never_asks_the_router_again() -> None:
    """The chunked V(add): the first call asks and runs out of its chunk before the router lists the
    worker; the next call (asked, as the action plugin passes it on) only waits."""
    fake = ListsAfter(delay=1000)
    clock = iter(range(0, 10_000)).__next__  # each reading one second later
    client = router.Router("http://router.test:30000", KEY, request=fake, clock=clock, sleep=lambda _s: None)
    chunk = router.Chunk(600, chunk_s=5, clock=clock)
    with pytest.raises(router.ChunkOver) as first:
        client.rejoin("http://10.0.0.5:8000", 600, chunk=chunk)
    assert first.value.asked is True and fake.changes() == [("POST", "http://router.test:30000/workers")]
    fake.delay_left = 2
    again = router.Chunk(600, waited_s=6, chunk_s=5, clock=clock)
    worker = client.rejoin("http://10.0.0.5:8000", 600, chunk=again, asked=True)
    assert worker is not None and len(fake.changes()) == 1  # no second POST


def test_the_module_passes_on_whether_a_pending_rejoin_asked_and_asks_only_once() -> None:
    fake = ListsAfter(delay=1000)
    p = params(action="add", worker_url="http://10.0.0.5:8000", wait_timeout_s=600.0, chunk_s=0.3)
    result = kdtree_router.run(p, False, request=fake)[0]
    assert result["state"] == "pending" and result["changed"] is True  # asked: the action passes it on
    assert len(fake.changes()) == 1
    result = kdtree_router.run({**p, "_waited_s": 0.3, router.ASKED_OPTION: True}, False, request=fake)[0]
    assert result["state"] == "pending" and len(fake.changes()) == 1
