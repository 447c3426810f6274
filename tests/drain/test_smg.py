"""Where smg 1.13.0 (.cache/smg-venv, `make smg-venv`) answers otherwise than sglang-router 0.3.2, against
the REAL smg in front of SGLang test doubles on 127.0.0.1 (docs/drain.md): a removed worker stays listed
as draining (out of rotation, not healthy) until smg drops it, an addition of a URL smg lists is a 409,
and a router kind set wrong is refused before anything changes. The calls both kinds share run in
test_router_client.py once per kind.

Skipped only when the venv of a router a test runs is absent (make test-drain-fast builds both first).
"""

from __future__ import annotations

import time

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _http_client as http_client
from ansible_collections.kdtree.fleet.plugins.module_utils import _router as router
from ansible_collections.kdtree.fleet.tests.helpers.polling import wait_until
from conftest import KEY

SMG_ONLY = pytest.mark.parametrize("router_kind", [router.SMG])


class Recording:
    """The bounded HTTP client, every call recorded as (method, path)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, method: str, url: str, **kwargs) -> http_client.Answer:
        self.calls.append((method, "/" + url.split("/", 3)[3]))
        return http_client.request(method, url, **kwargs)

    def changes(self) -> list[tuple[str, str]]:
        return [call for call in self.calls if call[0] != "GET"]


def _leaving(client: router.Router, url: str) -> bool:
    return any(w.leaving for w in client.matching(url))


@SMG_ONLY
def test_smg_lists_a_removed_worker_as_draining_and_not_healthy_until_it_drops_it(fleet) -> None:
    rtr, (one, two) = fleet()
    calls = Recording()
    client = router.Router(rtr.url, KEY, timeout_s=5, kind=router.SMG, request=calls)
    assert {w.status for w in client.workers()} == {router.SMG_READY}
    started = time.monotonic()
    assert client.remove(two.url) is True
    wait_until(lambda: _leaving(client, two.url), 3, "smg to list the removed worker as draining")
    (entry,) = client.matching(two.url)
    assert entry.status == router.SMG_DRAINING and not entry.healthy
    assert "status" in client.show(entry)  # scrubbed as all the router sends: the test key has "drain"
    # the safety rule does not count it: one healthy worker is left, and it may not go too
    with pytest.raises(router.DrainUnsafe, match="none would be left"):
        router.check_share(client.workers(), [one.url], 1.0)
    # removing it again asks nothing more: smg drops a draining entry itself
    deletes = len(calls.changes())
    assert client.remove(two.url) is True
    assert len(calls.changes()) == deletes == 1
    assert client.wait_for(two.url, present=False, timeout_s=20) is None
    print(f"smg dropped the removed worker {time.monotonic() - started:.1f} s after its DELETE")
    assert [w.url for w in client.workers()] == [one.url]


@SMG_ONLY
def test_smg_rejoin_right_after_a_removal_waits_out_the_draining_entry(fleet) -> None:
    rtr, (_, two) = fleet()
    client = rtr.client()
    client.remove(two.url)
    wait_until(lambda: _leaving(client, two.url), 3, "smg to list the removed worker as draining")
    worker = client.rejoin(two.url, timeout_s=30)
    assert worker is not None and worker.healthy and worker.status == router.SMG_READY
    (listed,) = client.matching(two.url)
    assert listed.id == worker.id


@SMG_ONLY
def test_smg_answers_409_to_adding_a_listed_url_and_the_client_takes_it_as_listed(fleet) -> None:
    rtr, (one, _) = fleet()
    with pytest.raises(http_client.HttpFailure) as info:
        http_client.request(
            "POST",
            rtr.url + "/workers",
            timeout_s=5,
            body=b'{"url": "%s"}' % one.url.encode(),
            headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
        )
    assert info.value.status == 409 and "already exists" in info.value.reason
    client = rtr.client()
    client.add(one.url)  # no failure: wait_for decides
    assert client.rejoin(one.url, timeout_s=5).url == one.url
    assert len(client.matching(one.url)) == 1


@pytest.mark.parametrize("router_kind", router.KINDS)
def test_a_router_kind_set_wrong_is_refused_naming_the_kind_and_nothing_changes(
    fleet, router_kind: str
) -> None:
    rtr, hosts = fleet()
    one = hosts[0]
    other = router.SMG if router_kind == router.SGLANG_ROUTER else router.SGLANG_ROUTER
    calls = Recording()
    wrong = router.Router(rtr.url, KEY, timeout_s=5, kind=other, request=calls)
    said = "does not answer like smg" if other == router.SMG else "answers like smg"
    for action in (wrong.workers, lambda: wrong.remove(one.url), lambda: wrong.rejoin(one.url, 1)):
        with pytest.raises(router.RouterError, match=f"{said}.*kdtree_drain_router_kind: {router_kind}"):
            action()
    assert calls.changes() == []
    assert sorted(w.url for w in rtr.client().workers() if w.healthy) == sorted(d.url for d in hosts)


def test_an_unknown_router_kind_is_refused_before_any_request() -> None:
    calls = Recording()
    with pytest.raises(router.RouterError, match=r"one of sglang-router, smg, got 'haproxy'"):
        router.Router("http://127.0.0.1:1", kind="haproxy", request=calls)
    assert calls.calls == []
