"""Zero dropped requests during a rollout (issue 25), on real systemd test hosts behind SGLang's REAL
router (sglang-router 0.3.2), with a bounded client sending continuous traffic through it.

Two SGLang test-double hosts of their own (kdtree-draint1..2, removed afterwards), each POST /generate
taking 0.2 s so that requests are really in flight during a restart, each logging what reached it
(scripts/testhosts/drainfleet.py). In this order, on the same hosts, with the drain on
(kdtree_drain_mode=sglang_router, the router's default retries):
  deploy:   the first deploy, restarting both hosts;
  crash:    a deploy in which the first host crashes and is rolled back (the play fails; the second
            host, never touched, serves alone meanwhile);
  rollback: rollback.yml over both hosts;
then control: a deploy that restarts both hosts with the drain off and the router's retries off:
requests fail (so this test can fail: a restart without a drain does drop requests).
Each drained run: 0 failed requests, 0 cut on a host, none reached a host while the router did not list
it (from the hosts' own request logs), and every restarted host did leave the router and come back.
make test-drain-traffic; make bench-drain prints the same runs on three hosts with both modes.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import drainfleet
import pytest
import traffic

ROOT = Path(__file__).resolve().parents[2]

KEY = "drain-traffic-test-key-41c7"
ROUTER_BIN = (
    Path(os.environ.get("KDTREE_ROUTER_VENV", ROOT / ".cache" / "router-venv")) / "bin" / "sglang-router"
)
pytestmark = pytest.mark.skipif(
    not ROUTER_BIN.exists(), reason=f"no router at {ROUTER_BIN} (make router-venv)"
)


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[str, dict]]:
    """Every run's figures by name (deploy, crash, rollback, control), in that order on the same hosts."""
    os.environ[traffic.KEY_ENV] = KEY
    inventory = os.environ.get("ANSIBLE_INVENTORY")
    with tempfile.TemporaryDirectory(prefix="drain-traffic-") as tmpdir:
        fleet = drainfleet.Fleet("kdtree-draint", "draintest", 2, Path(tmpdir), crash_host=1)
        try:
            fleet.up()
            figures: dict[str, dict] = {}
            for mode, names in (("on", ["deploy", "crash", "rollback"]), ("off", ["control"])):
                state = fleet.tmp / f"router-{mode}"
                router = traffic.router_start(
                    state, list(fleet.workers.values()), disable_retries=mode == "off"
                )
                try:
                    for name in names:
                        run = "deploy" if name == "control" else name
                        seen, result = fleet.under_traffic(run, mode == "on", router["url"], KEY, name)
                        seen["text"] = result.text
                        print(drainfleet.line(f"drain_{mode}_{name}", seen), flush=True)
                        figures[name] = seen
                finally:
                    traffic.router_stop(state)
            yield figures
        finally:
            fleet.down()
            if inventory is None:
                os.environ.pop("ANSIBLE_INVENTORY", None)
            else:
                os.environ["ANSIBLE_INVENTORY"] = inventory


def _why(seen: dict) -> str:
    shown = {k: v for k, v in seen.items() if k != "text"}
    return f"{shown}\n{seen['text'][-3000:]}"


def test_a_restart_without_drain_or_router_retries_drops_requests(runs: dict[str, dict]) -> None:
    seen = runs["control"]
    assert seen["rc"] == 0, _why(seen)
    assert seen["failed"] > 0, _why(seen)


@pytest.mark.parametrize(("name", "restarted", "rc"), [("deploy", 2, 0), ("crash", 1, 2), ("rollback", 2, 0)])
def test_a_drained_run_drops_no_request_and_none_reaches_a_host_while_out(
    runs: dict[str, dict], name: str, restarted: int, rc: int
) -> None:
    seen = runs[name]
    assert seen["rc"] == rc, _why(seen)
    assert seen["answered"] > 0, _why(seen)
    assert (seen["failed"], seen["cut"], seen["reached_while_out"]) == (0, 0, 0), _why(seen)
    assert seen["sent"] == seen["answered"], _why(seen)
    drained = [url for url, host in seen["hosts"].items() if host["out_windows"]]
    assert len(drained) == restarted, _why(seen)


def test_the_crashed_host_is_rolled_back_and_serves_through_the_router_again(runs: dict[str, dict]) -> None:
    seen = runs["crash"]
    assert "the host was rolled back to" in seen["text"], _why(seen)
    # after its drain, crash and rollback the router lists it again (never while out: the test above)
    assert sorted(traffic.norm(url) for url in seen["hosts"]) == seen["listed_at_end"], _why(seen)
