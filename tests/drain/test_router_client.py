"""The router client (plugins/module_utils/_router.py) against each REAL router it speaks to, in front
of SGLang test doubles, all on 127.0.0.1, no container: sglang-router 0.3.2 (.cache/router-venv, `make
router-venv`) and its successor smg 1.13.0 (.cache/smg-venv, `make smg-venv`), every router test once
per kind. The drain under continuous traffic is proven here too: 0 failed requests with the drain,
failures without it (the control, router retries off). What only smg does (a removed worker listed as
draining, 409 for a URL it lists) and a kind set wrong have tests of their own (test_smg.py).

A router's tests are skipped only when its venv is absent (make test-drain-fast builds both first).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _http_client as http_client
from ansible_collections.kdtree.fleet.plugins.module_utils import _router as router
from ansible_collections.kdtree.fleet.tests.helpers.polling import free_port, wait_until
from conftest import Double, Traffic


@pytest.fixture(params=router.KINDS)
def router_kind(request: pytest.FixtureRequest) -> str:
    """Every test of this module that runs a router runs once with each kind."""
    return request.param


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
    client = rtr.client()
    assert sorted(w.url for w in client.workers()) == sorted([one.url, two.url])
    assert all(w.healthy for w in client.workers())
    assert client.remove(two.url) is True
    assert client.wait_for(two.url, present=False, timeout_s=10) is None
    assert [w.url for w in client.workers()] == [one.url]
    with pytest.raises(router.NotListed, match="never taken as drained"):  # not listed: never "drained"
        client.remove(two.url)
    client.add(two.url)
    worker = client.wait_for(two.url, present=True, timeout_s=20)
    assert worker is not None and worker.healthy


def test_the_key_is_sent_and_never_shown(fleet) -> None:
    rtr, _ = fleet()
    wrong = "wrong-key-0123456789"
    with pytest.raises(router.RouterError) as info:
        rtr.client(wrong).workers()
    assert "401" in str(info.value)
    assert wrong not in str(info.value)
    with pytest.raises(router.RouterError, match="401"):
        rtr.client("").workers()


def test_wait_for_a_worker_that_never_comes_fails_naming_it(fleet, tmp_path: Path) -> None:
    rtr, _ = fleet(hosts=1)
    client = rtr.client()
    dead = f"http://127.0.0.1:{free_port()}"
    client.add(dead)
    with pytest.raises(router.RouterError, match=r"not listed and healthy within 1\.5 s"):
        client.wait_for(dead, present=True, timeout_s=1.5)


@pytest.mark.parametrize("router_kind", [router.SGLANG_ROUTER])  # reads SGLang only: one router will do
def test_in_flight_is_read_from_sglang_and_its_timeout_is_a_failure(fleet) -> None:
    _, (one,) = fleet(hosts=1)
    assert router.in_flight(one.url, timeout_s=5) == 0
    slow = threading.Thread(
        target=http_client.request,
        args=("POST", one.url + "/generate"),
        kwargs={"timeout_s": 10, "body": b"{}"},
    )
    slow.start()
    wait_until(lambda: router.in_flight(one.url, timeout_s=5) == 1, 5, "one request in flight")
    with pytest.raises(router.InFlightTimeout, match=r"1 request\(s\) still in flight"):
        router.wait_idle(one.url, timeout_s=0.05, settle_s=0)
    assert router.wait_idle(one.url, timeout_s=10)["in_flight"] == 0
    slow.join()


def test_drain_under_traffic_loses_nothing_and_the_control_does(fleet) -> None:
    rtr, hosts = fleet(hosts=2)
    client = rtr.client()
    with Traffic(rtr.url) as traffic:
        time.sleep(1)
        for host in hosts:
            _restart(host, client)
            time.sleep(1)
    print(f"drain on: sent {traffic.sent} answered {traffic.answered} failed {dict(traffic.failures)}")
    assert traffic.answered > 10 and not traffic.failures
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
        f"failed {dict(traffic.failures)}"
    )
    assert traffic.failures, "the control run lost no request: the drain test could not fail"


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
    # a worker this run already took out counts in the pool and as leaving
    with pytest.raises(
        router.DrainUnsafe, match=r"drain 2 of the router's 5 healthy workers at once: at most 1"
    ):
        router.check_share(workers, ["http://h0:1"], 0.25, out=["http://gone:1"])
    assert router.check_share(workers, ["http://h0:1"], 0.4, out=["http://gone:1"])["allowed"] == 2


def test_in_flight_refuses_odd_evidence_and_counts_a_refused_port_as_idle() -> None:
    def answer(body: bytes):
        return lambda *a, **k: http_client.Answer(200, body, 0.0)

    for body in (b"[]", b"{}", b'{"loads": []}', b'{"loads": [{"num_running_reqs": -1}]}', b"nope"):
        with pytest.raises(router.RouterError, match="/v1/loads"):
            router.in_flight("http://h:1", 1, request=answer(body))

    def failing(*args, **kwargs):
        raise http_client.HttpFailure("answered 503: busy", 503)

    with pytest.raises(router.RouterError, match="answered 503"):
        router.in_flight("http://h:1", 1, request=failing)
    two = b'{"loads": [{"num_running_reqs": 1, "num_waiting_reqs": 1}, {"num_running_reqs": 0}]}'
    assert router.in_flight("http://h:1", 1, request=answer(two)) == 2
    assert router.in_flight(f"http://127.0.0.1:{free_port()}", 2) == 0
