"""kdtree_deploy's bake (tasks/bake.yml) in real plays: four local-connection hosts in serial batches
[1, 2, 1] under strategy free, each with a fake SGLang /metrics of its own (every read adds one step of
traffic: requests, inter-token samples at the host's latency, its accept length). The canary stop and
the rescue are kdtree_common's and a stand-in (the real rescue is the deploy's rescue.yml): what is
under test is the bake's verdict, its meeting with the batch (a sibling's failure fails the host),
and that no later batch starts."""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from conftest import PLAYBOOK_BIN, run_ansible

HOSTS = ("h1", "h2", "h3", "h4")
BOUNDS = ("0.01", "0.02", "0.05", "0.1", "+Inf")


class FakeSglang:
    """One host's /metrics: each read adds `requests` requests and 600 inter-token samples of
    `itl_s` seconds (SGLang 0.5.23's series names, the kdtree patch's fallback counter)."""

    def __init__(self, itl_s: float = 0.015, requests: int = 50, accept: float = 3.0) -> None:
        self.itl_s, self.requests, self.accept = itl_s, requests, accept
        # from this read on, each step's latency is slower_itl_s (a restart into a slower kernel)
        self.slower_from: int | None = None
        self.slower_itl_s = 0.03
        self.reads = 0
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = fake.text().encode()
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]

    def text(self) -> str:
        with self.lock:
            self.reads += 1
            steps = self.reads
        slow = 0 if self.slower_from is None else max(0, steps - self.slower_from + 1)
        tokens = 600 * steps
        itl_sum = self.itl_s * 600 * (steps - slow) + self.slower_itl_s * 600 * slow
        label = 'model_name="m"'
        lines = [
            f"sglang:num_requests_total{{{label}}} {self.requests * steps}",
            f"sglang:num_aborted_requests_total{{{label}}} 0",
            f"sglang:inter_token_latency_seconds_sum{{{label}}} {itl_sum}",
            f"sglang:inter_token_latency_seconds_count{{{label}}} {tokens}",
            f"sglang:spec_accept_length{{{label}}} {self.accept}",
            'kdtree_verify_runtime_fallbacks_total{pid="7"} 0',
        ]
        for le in BOUNDS:
            fast = 600 * (steps - slow) if le == "+Inf" or self.itl_s <= float(le) else 0
            count = fast + (600 * slow if le == "+Inf" or self.slower_itl_s <= float(le) else 0)
            lines.append(f'sglang:inter_token_latency_seconds_bucket{{le="{le}",{label}}} {count}')
        return "\n".join(lines) + "\n"


@pytest.fixture
def fleet() -> Iterator[dict[str, FakeSglang]]:
    fakes = {host: FakeSglang() for host in HOSTS}
    threads = [threading.Thread(target=f.server.serve_forever, daemon=True) for f in fakes.values()]
    for thread in threads:
        thread.start()
    yield fakes
    for fake in fakes.values():
        fake.server.shutdown()
        fake.server.server_close()


def _common(entry: str) -> dict:
    return {
        "name": f"kdtree_common {entry}",
        "ansible.builtin.import_role": {"name": "kdtree.fleet.kdtree_common", "tasks_from": entry},
        "vars": {"kdtree_common_outcome_play": "deploy", "kdtree_common_outcome_defer": True},
    }


def _run(
    tmp_path: Path, fakes: dict[str, FakeSglang], *extra: str, serial: list | None = None
) -> tuple[int, str]:
    inventory = {
        "all": {
            "hosts": {
                host: {"kdtree_service_health_url": f"http://127.0.0.1:{fake.port}/health"}
                for host, fake in fakes.items()
            }
        }
    }
    play = {
        "name": "Deploy in batches with a bake",
        "hosts": "all",
        "gather_facts": False,
        "strategy": "free",
        "serial": serial or [1, 2, 1],
        "vars": {
            "kdtree_deploy_bake_s": 1,
            "kdtree_deploy_bake_batch_wait_s": 120,
            "kdtree_service_verify_mode": "on",
            "kdtree_smoke_api_key": "",
        },
        "tasks": [
            # main.yml's first task: the batch as it starts
            {
                "name": "Batch",
                "ansible.builtin.set_fact": {"_kdtree_deploy_batch": "{{ ansible_play_batch }}"},
            },
            _common("stop"),
            # the deploy's reads of its pre-restart window (change.yml: before the build, before the restart)
            *(
                {
                    "name": f"Read /metrics ({name})",
                    "ansible.builtin.uri": {
                        "url": "{{ kdtree_service_health_url | kdtree.fleet.kdtree_metrics_url }}",
                        "return_content": True,
                    },
                    "register": name,
                }
                for name in ("__kdtree_deploy_bake_pre_start", "__kdtree_deploy_bake_pre_end")
            ),
            {
                "name": "The change and its bake",
                "block": [
                    {
                        "name": "Bake",
                        "ansible.builtin.import_role": {
                            "name": "kdtree.fleet.kdtree_deploy",
                            "tasks_from": "bake",
                        },
                    }
                ],
                "rescue": [
                    {
                        "name": "Roll back",
                        "ansible.builtin.debug": {
                            "msg": "rolled back {{ inventory_hostname }}: {{ ansible_failed_result.msg }}"
                        },
                    },
                    _common("failed"),
                ],
            },
            _common("end"),
            {"name": "Deployed", "ansible.builtin.debug": {"msg": "deployed {{ inventory_hostname }}"}},
        ],
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    playbook = tmp_path / "run.yml"
    playbook.write_text(yaml.safe_dump([play], sort_keys=False))
    out = run_ansible(
        "ansible-playbook",
        "-i",
        str(tmp_path / "hosts.yml"),
        "-c",
        "local",
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        *extra,
        str(playbook),
        timeout=300,
    )
    text = out.stdout + out.stderr
    return out.returncode, re.sub(r"\s+", " ", text)


pytestmark = pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="needs the tools venv")


def test_an_unchanged_fleet_bakes_every_batch_and_passes(tmp_path, fleet) -> None:
    rc, flat = _run(tmp_path, fleet)
    assert rc == 0, flat[-4000:]
    for host in HOSTS:
        assert f"deployed {host}" in flat
        assert f"bake pass on {host}: error rate 0.00% vs 0.00%" in flat
    # the canary against the three not yet deployed; the last batch against the three before it
    assert "against h2, h3, h4 (not yet deployed)" in flat
    assert "against h1, h2, h3 (earlier batches that passed)" in flat


def test_a_slower_host_rolls_its_whole_batch_back_and_no_later_batch_starts(tmp_path, fleet) -> None:
    fleet["h3"].itl_s = 0.03  # twice the others' inter-token latency
    rc, flat = _run(tmp_path, fleet)
    assert "deployed h1" in flat
    assert "bake fail on h3: mean ITL 30.0 ms vs 15.0 ms (+100.0%, at most +10%)" in flat
    assert "rolled back h3: bake fail on h3" in flat
    # h2's own bake passed; its sibling's failure rolls it back too
    assert "bake pass on h2" in flat
    assert "rolled back h2: the bake of the batch failed on h3: bake fail on h3: mean ITL" in flat, (
        re.findall(r"(?:rolled back h2|bake \S+ on h2|h2\] =>).{0,400}", flat)
    )
    assert "deployed h2" not in flat and "deployed h3" not in flat
    assert "not deploying to h4: the rollout stopped because h2, h3 failed in an earlier batch" in flat
    assert "deployed h4" not in flat
    assert rc == 0, flat[-4000:]  # deferred: the host ended without failing the play (no outcome play here)


def test_too_little_traffic_is_not_a_pass(tmp_path, fleet) -> None:
    fleet["h1"].requests = 2
    _rc, flat = _run(tmp_path, fleet)
    assert "bake not enough traffic on h1: baked 2 requests (at least 20)" in flat
    assert "rolled back h1" in flat
    assert "deployed h1" not in flat and "deployed h2" not in flat


def test_prometheus_down_refuses_the_bake(tmp_path, fleet) -> None:
    _rc, flat = _run(
        tmp_path, fleet, "-e", '{"kdtree_deploy_bake_prometheus": {"url": "http://127.0.0.1:9"}}'
    )
    assert "bake refused on h1: Prometheus http://127.0.0.1:9 did not answer" in flat
    assert "rolled back h1" in flat
    assert "deployed h1" not in flat


def test_a_lone_host_bakes_against_its_own_pre_restart_window(tmp_path, fleet) -> None:
    rc, flat = _run(tmp_path, {"h1": fleet["h1"]}, serial=[1])
    assert rc == 0, flat[-4000:]
    assert "against h1 (no reference host: its own figures before its restart)" in flat
    assert "bake pass on h1: error rate 0.00% vs 0.00%" in flat
    assert "(vs 1 reference host(s), 50 requests)" in flat
    assert "deployed h1" in flat


def test_promote_puts_back_a_host_whose_decode_got_worse_after_its_restart(tmp_path, fleet) -> None:
    # playbooks/promote.yml bakes against itself: reads 1 and 2 are the validate run, 3 on is mode on
    fleet["h2"].slower_from = 3
    fleet["h3"].itl_s = 0.03  # against the fleet (h3, not yet promoted), h2 would pass
    rc, flat = _run(tmp_path, fleet, "-e", "kdtree_deploy_bake_against=self", "-l", "h1,h2,h3", serial=[2, 1])
    assert "bake pass on h1" in flat
    assert "bake fail on h2: mean ITL 30.0 ms vs 15.0 ms (+100.0%, at most +10%)" in flat
    assert "against h2 (its own figures before its restart)" in flat
    assert "rolled back h2: bake fail on h2" in flat
    assert "rolled back h1: the bake of the batch failed on h2" in flat
    assert "not deploying to h3" in flat
    assert rc == 0, flat[-4000:]


def test_the_confirm_gate_lets_a_batch_go_on_go_and_stops_the_rollout_on_stop(tmp_path) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    play = {
        "name": "Batches behind a confirm gate",
        "hosts": "all",
        "gather_facts": False,
        "strategy": "free",
        "serial": 1,
        "vars": {"kdtree_deploy_confirm_dir": str(gate), "kdtree_deploy_confirm_timeout_s": 60},
        "tasks": [
            {
                "name": "Batch",
                "ansible.builtin.set_fact": {"_kdtree_deploy_batch": "{{ ansible_play_batch }}"},
            },
            _common("stop"),
            {
                "name": "The gate",
                "block": [
                    {
                        "name": "Gate",
                        "ansible.builtin.include_role": {
                            "name": "kdtree.fleet.kdtree_deploy",
                            "tasks_from": "confirm",
                        },
                        "vars": {
                            "_kdtree_deploy_confirm_file": f"{gate}/go-{{{{ _kdtree_deploy_batch | first }}}}"
                        },
                        "when": "_kdtree_deploy_batch | first != ansible_play_hosts_all | first",
                    }
                ],
                "rescue": [_common("failed")],
            },
            _common("end"),
            {"name": "Deployed", "ansible.builtin.debug": {"msg": "deployed {{ inventory_hostname }}"}},
        ],
    }
    playbook = tmp_path / "gate.yml"
    playbook.write_text(yaml.safe_dump([play], sort_keys=False))

    def answer() -> None:
        for name, word in (("go-h2", "go\n"), ("go-h3", "stop\n")):
            time.sleep(3)
            (gate / name).write_text(word)

    writer = threading.Thread(target=answer, daemon=True)
    writer.start()
    out = run_ansible(
        "ansible-playbook",
        "-i",
        "h1,h2,h3,h4,",
        "-c",
        "local",
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        str(playbook),
        timeout=300,
    )
    writer.join()
    flat = re.sub(r"\s+", " ", out.stdout + out.stderr)
    assert "deployed h1" in flat and "deployed h2" in flat, flat[-4000:]
    assert f"echo go > {gate}/go-h2" in flat
    assert f"the operator stopped the rollout before the batch h3 ({gate}/go-h3 says stop)" in flat
    assert "deployed h3" not in flat
    assert "not deploying to h4: the rollout stopped because h3 failed" in flat


def test_the_deploy_waits_at_the_gate_before_its_lock() -> None:
    tasks = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "roles/kdtree_deploy/tasks/main.yml").read_text()
    )
    names = [t["name"] for t in tasks]
    refusals = tasks[
        names.index("Refuse batches the capacity does not allow (before this batch changes anything)")
    ]
    gate = next(
        t
        for t in refusals["block"]
        if t.get("ansible.builtin.include_tasks", {}).get("file") == "confirm.yml"
    )
    assert "_kdtree_deploy_batch | first != ansible_play_hosts_all | first" in gate["when"]
    assert "kdtree_deploy_confirm_dir | length > 0" in gate["when"]
    assert names.index(
        "Refuse batches the capacity does not allow (before this batch changes anything)"
    ) < next(i for i, name in enumerate(names) if "lock" in name)
