"""The bake between batches on real test hosts (issue 44): three SGLang test-double hosts
(scripts/testhosts/drainfleet.Fleet) serving continuous traffic from the existing client
(traffic.Traffic, one per host, straight to its worker URL), deployed in batches [1, 2]
(kdtree_deploy_max_unavailable 2) with a 20 s bake read from each host's own /metrics:

  unchanged: a deploy that changes nothing of decode: every batch passes (rc 0);
  slowed:    the deploy makes the third host's tokens three times slower (the double's
             SGLANG_DOUBLE_TOKEN_SECONDS for that host only): the canary passes, the second batch's
             bake fails on the slowed host, both of its hosts are rolled back (rc 2);
  quiet:     no traffic: the canary's verdict is "not enough traffic", it is rolled back and no later
             batch starts (rc 2);
  prom_down: the bake reads a Prometheus that does not answer: refused, rolled back (rc 2);
  prom:      the slowed batch again, its figures read by PromQL from a real Prometheus scraping the
             hosts: the canary passes, the batch is rolled back (rc 2).

Needs the double's /metrics (SGLang's series, --enable-metrics), its traffic knobs, and the kdtree
patch's series beside them (kdtree_verify_runtime_fallbacks_total: the real patch mirrors it into
SGLang's /metrics, the double renders it from the patch's status documents; the bake refuses a baked
host that does not publish it).
Run: make test-bake-fleet (podman test hosts, the image of make testhost-image)."""

from __future__ import annotations

import json
import logging
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import traffic
from drainfleet import Fleet
from playrun import Run, run_playbook

LOG = logging.getLogger("bakefleet")
BAKE_S = 20
# every host's stock traffic: 8 tokens an answer at 10 ms a token, SGLang's metrics on, an accept length
STOCK_DROPIN = """[Service]
Environment=SGLANG_DOUBLE_OUTPUT_TOKENS=8
Environment=SGLANG_DOUBLE_TOKEN_SECONDS=0.01
Environment=SGLANG_DOUBLE_ACCEPT_LENGTH=3.0
"""
SETUP = r"""set -euo pipefail
u=/etc/systemd/system/sglang.service
grep -q -- '--enable-metrics' $u || sed -i 's|--port 30000|--port 30000 --enable-metrics|' $u
mkdir -p $u.d
cat >$u.d/40-bake-test.conf
sha256sum $u | cut -d' ' -f1 >/root/stock-unit.sha256
systemctl daemon-reload
systemctl restart sglang.service
"""


# the existing client's requests streamed, 8 tokens each: SGLang (and the double) observe the
# inter-token latency of a streamed answer only
STREAMED = {"text": "hi", "sampling_params": {"max_new_tokens": 8}, "stream": True}


def _extra(tag: str, **more) -> dict:
    """A deploy that changes every host (a new environment value) with a short bake, batches [1, 2]."""
    env = {"KDTREE_BAKEFLEET_RUN": tag, **more.pop("env", {})}
    return {
        "kdtree_service_env_extra": env,
        "kdtree_deploy_bake_s": BAKE_S,
        "kdtree_deploy_max_unavailable": 2,
        **more,
    }


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    with tempfile.TemporaryDirectory(prefix="bake-fleet-") as tmpdir:
        hosts = Fleet(prefix="kdtree-bake", label="bake", size=3, tmp=Path(tmpdir), generate_s=0.0)
        try:
            hosts.up()
            for host in hosts.hosts:
                hosts.podman(host, "bash", "-c", SETUP, stdin=STOCK_DROPIN)
            script = (
                Path(__file__).resolve().parents[2] / "scripts/testhosts/serve-on-network.sh"
            ).read_text()
            for host in hosts.hosts:
                hosts.workers[host] = hosts.podman(host, "bash", "-s", "--", "--url", stdin=script).strip()
            yield hosts
        finally:
            hosts.down()


def _deploy(fleet: Fleet, extra: dict, with_traffic: bool = True) -> tuple[Run, str]:
    loads = (
        [traffic.Traffic(url, threads=2, payload=STREAMED, backoff_s=0.2) for url in fleet.workers.values()]
        if with_traffic
        else []
    )
    for load in loads:
        load.__enter__()
    try:
        time.sleep(2)
        run = run_playbook("deploy.yml", "gpu-hosts", extra, echo=False)
    finally:
        for load in loads:
            load.__exit__(None, None, None)
    flat = re.sub(r"\s+", " ", run.text)
    LOG.info("deploy %s: rc=%s %.0f s", extra.get("kdtree_service_env_extra"), run.rc, run.seconds)
    return run, flat


def _mode_env(fleet: Fleet, host: str) -> str:
    """The kdtree drop-in's run tag on the host ("" without a kdtree drop-in)."""
    text = fleet.podman(host, "bash", "-c", "cat /etc/systemd/system/sglang.service.d/50-kdtree.conf || true")
    found = re.search(r"KDTREE_BAKEFLEET_RUN=(\S+)", text)
    return found.group(1).strip("\"'") if found else ""


def test_the_bake_passes_an_unchanged_batch_and_rolls_back_a_slowed_one(fleet: Fleet) -> None:
    h1, h2, h3 = fleet.hosts
    run, flat = _deploy(fleet, _extra("unchanged"))
    assert run.rc == 0, run.text[-5000:]
    for host in fleet.hosts:
        assert f"bake pass on {host}" in flat, run.text[-5000:]
    print("\n" + next(line for _t, line in run.lines if "bake pass on" in line).strip())

    slow = {"SGLANG_DOUBLE_TOKEN_SECONDS": f"0.01,{h3}=0.03"}
    run, flat = _deploy(fleet, _extra("slowed", env=slow))
    assert run.rc == 2, run.text[-5000:]
    assert f"bake pass on {h1}" in flat
    assert re.search(rf"bake fail on {h3}: mean ITL \S+ ms vs \S+ ms", flat), run.text[-5000:]
    assert f"the bake of the batch failed on {h3}" in flat
    print(next(line for _t, line in run.lines if f"bake fail on {h3}" in line).strip())
    # the canary keeps the new deploy; the batch is back on the deploy before it
    assert _mode_env(fleet, h1) == "slowed"
    assert _mode_env(fleet, h2) == "unchanged"
    assert _mode_env(fleet, h3) == "unchanged"
    history = json.loads(fleet.podman(h3, "cat", "/var/lib/kdtree/state.json"))
    assert any("bake fail on" in str(entry.get("why", "")) for entry in history.get("entries", [])), history


def test_too_little_traffic_is_not_a_pass_and_stops_the_rollout(fleet: Fleet) -> None:
    h1, h2, h3 = fleet.hosts
    run, flat = _deploy(fleet, _extra("quiet"), with_traffic=False)
    assert run.rc == 2, run.text[-5000:]
    assert f"bake not enough traffic on {h1}" in flat, run.text[-5000:]
    assert f"not deploying to {h2}" in flat and f"not deploying to {h3}" in flat


def test_a_prometheus_that_does_not_answer_refuses_the_bake(fleet: Fleet) -> None:
    h1 = fleet.hosts[0]
    run, flat = _deploy(
        fleet, _extra("prom-down", kdtree_deploy_bake_prometheus={"url": "http://127.0.0.1:9"})
    )
    assert run.rc == 2, run.text[-5000:]
    assert f"bake refused on {h1}: Prometheus http://127.0.0.1:9 did not answer" in flat, run.text[-5000:]


def test_the_bake_read_from_a_real_prometheus_rolls_back_a_slowed_batch(fleet: Fleet, tmp_path: Path) -> None:
    """The same slowed batch, its figures read by PromQL from a real Prometheus (Debian's package, a
    process of this test) that scrapes every host's /metrics on the hosts' network each second, each
    target labelled node=<host> (kdtree_deploy_bake_prometheus label)."""
    from ansible_collections.kdtree.fleet.tests.helpers import prometheus

    prometheus.require()
    h1, _h2, h3 = fleet.hosts
    targets = [
        prometheus.Target(url.removeprefix("http://"), {"node": host}) for host, url in fleet.workers.items()
    ]
    with prometheus.Prometheus(tmp_path, targets) as prom:
        prom.wait_for_targets(timeout=30)
        slow = {"SGLANG_DOUBLE_TOKEN_SECONDS": f"0.01,{h3}=0.03"}
        settings = {"url": prom.url, "label": "node"}
        run, flat = _deploy(fleet, _extra("prom-slowed", env=slow, kdtree_deploy_bake_prometheus=settings))
    assert run.rc == 2, run.text[-5000:]
    assert f"bake pass on {h1}" in flat, run.text[-5000:]
    assert re.search(rf"bake fail on {h3}: mean ITL \S+ ms vs \S+ ms", flat), run.text[-5000:]
    assert f"the bake of the batch failed on {h3}" in flat
    print(next(line for _t, line in run.lines if f"bake fail on {h3}" in line).strip())
    assert _mode_env(fleet, h1) == "prom-slowed"
    assert _mode_env(fleet, h3) != "prom-slowed"
