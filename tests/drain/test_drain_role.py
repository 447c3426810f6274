"""roles/kdtree_drain through ansible-playbook on this machine (hosts h0..h2, local connection), against
the REAL router in front of SGLang test doubles: drain, the safety rule over a batch, rejoin, the drain
record and recover, the hooks. Records under tmp_path. The drain and the rejoin run with each router
kind (sglang-router, smg: kdtree_drain_router_kind); the rest, which the kind does not change (recover
rejoins through the same rejoin), with sglang-router."""

from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
import yaml
from ansible_collections.kdtree.fleet.plugins.module_utils import _router as router
from ansible_collections.kdtree.fleet.tests.helpers.polling import free_port
from conftest import KEY, ROOT

BIN = Path(sys.executable).parent


def _play(
    tmp: Path,
    entries: str,
    hosts: str,
    extra: dict,
    doubles,
    limit: str = "all",
    strategy: str = "linear",
    delays: tuple[float, ...] = (),
) -> tuple[int, str]:
    """One ansible-playbook run of the entry points `entries` (comma-separated, in order) on `limit`;
    host i first waits delays[i] s (with strategy free the hosts then reach the drain one by one)."""
    inventory = {
        "all": {
            "hosts": {
                f"h{i}": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": sys.executable,
                    "kdtree_drain_worker_url": d.url,
                    "kdtree_drain_record_path": str(tmp / f"h{i}-drain.json"),
                    "_server": d.url,
                    "_delay": delays[i] if delays else 0,
                }
                for i, d in enumerate(doubles)
            }
        }
    }
    (tmp / "inventory.yml").write_text(yaml.safe_dump(inventory))
    tasks = [
        {
            "name": f"Drain entry point {entry}",
            "ansible.builtin.include_role": {"name": "kdtree.fleet.kdtree_drain", "tasks_from": entry},
            "vars": {"_kdtree_drain_health_url": "{{ _server }}/health"},
        }
        for entry in entries.split(",")
    ]
    if delays:
        tasks.insert(
            0, {"name": "Arrive late", "ansible.builtin.command": "sleep {{ _delay }}", "changed_when": False}
        )
    play = {"name": "Drain", "hosts": hosts, "gather_facts": False, "vars": extra, "tasks": tasks}
    play["strategy"] = strategy
    (tmp / "play.yml").write_text(yaml.safe_dump([play]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    out = subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            str(tmp / "inventory.yml"),
            "-l",
            limit,
            "-v",
            str(tmp / "play.yml"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=180,
        check=False,
    )
    return out.returncode, re.sub(r"\s+", " ", out.stdout + out.stderr)


def _router_vars(rtr, **more) -> dict:
    return {
        "kdtree_drain_mode": "sglang_router",
        "kdtree_drain_router_url": rtr.url,
        "kdtree_drain_router_kind": rtr.kind,
        "kdtree_drain_router_api_key": KEY,
        **more,
    }


def _listed(rtr) -> list[str]:
    return sorted(w.url for w in rtr.client().workers() if w.healthy)


@pytest.mark.parametrize("router_kind", router.KINDS)
def test_refuse_a_batch_over_the_share_then_drain_and_rejoin_one_host(fleet, tmp_path: Path) -> None:
    rtr, doubles = fleet(hosts=3)
    rc, text = _play(
        tmp_path, "drain", "all", _router_vars(rtr, kdtree_drain_max_share=0.5), doubles, limit="h0,h1"
    )
    assert rc != 0
    assert "refusing to drain 2 of the router's 3 healthy workers at once: at most 1" in text
    assert _listed(rtr) == sorted(d.url for d in doubles)
    assert not list(tmp_path.glob("*-drain.json"))

    rc, text = _play(tmp_path, "drain", "all", _router_vars(rtr), doubles, limit="h0")
    assert rc == 0, text
    assert _listed(rtr) == sorted(d.url for d in doubles[1:])
    record = json.loads((tmp_path / "h0-drain.json").read_text())
    assert record["worker_url"] == doubles[0].url and record["mode"] == "sglang_router"
    assert KEY not in text and KEY not in json.dumps(record)

    rc, text = _play(tmp_path, "rejoin", "all", _router_vars(rtr), doubles, limit="h0")
    assert rc == 0, text
    assert _listed(rtr) == sorted(d.url for d in doubles)
    assert not (tmp_path / "h0-drain.json").exists()
    assert KEY not in text


def test_recover_keeps_an_unhealthy_host_out_and_rejoins_it_once_healthy(fleet, tmp_path: Path) -> None:
    rtr, doubles = fleet(hosts=2)
    # no record (every deploy and rollback of a host never drained): nothing to do, nothing changed
    rc, text = _play(tmp_path, "recover", "all", {}, doubles, limit="h0")
    assert rc == 0 and "changed=0" in text and "failed=0" in text, text
    rc, text = _play(tmp_path, "drain", "all", _router_vars(rtr), doubles, limit="h0")
    assert rc == 0, text
    # the run is killed here, and the host's SGLang is down; the next run starts with recover (drain off)
    doubles[0].stop()
    drain_off = {
        "kdtree_drain_router_url": rtr.url,
        "kdtree_drain_router_kind": rtr.kind,
        "kdtree_drain_router_api_key": KEY,
    }
    rc, text = _play(tmp_path, "recover", "all", drain_off, doubles, limit="h0")
    assert rc == 0, text
    assert "was taken out of rotation by run" in text and "is NOT healthy: it stays out of rotation" in text
    assert (tmp_path / "h0-drain.json").exists()
    assert doubles[0].url not in _listed(rtr)

    doubles[0].start()
    rc, text = _play(tmp_path, "recover", "all", drain_off, doubles, limit="h0")
    assert rc == 0, text
    assert "its SGLang is healthy: rejoining it now" in text
    assert _listed(rtr) == sorted(d.url for d in doubles)
    assert not (tmp_path / "h0-drain.json").exists()


def _logging_hooks(tmp_path: Path, line: str, **role_vars: object) -> tuple[Path, dict]:
    """Hooks mode whose drain and rejoin commands each append `line` (shell words of the hook's
    environment) to a log: the log and the role's variables (`role_vars` added)."""
    log = tmp_path / "hooks.log"
    hook = ["sh", "-c", f'echo "{line}" >> {log}']
    commands = {"kdtree_drain_drain_command": hook, "kdtree_drain_rejoin_command": hook}
    return log, {"kdtree_drain_mode": "hooks", **commands, **role_vars}


def test_hooks_run_on_the_controller_with_the_host_and_the_share_counts_the_play(
    fleet, tmp_path: Path
) -> None:
    _, doubles = fleet(hosts=2)
    log, hooks = _logging_hooks(tmp_path, "$KDTREE_DRAIN_ACTION $KDTREE_DRAIN_HOST $KDTREE_DRAIN_WORKER_URL")
    rc, text = _play(tmp_path, "drain,rejoin", "all", hooks, doubles, limit="h1")
    assert rc == 0, text
    assert log.read_text().splitlines() == [f"drain h1 {doubles[1].url}", f"rejoin h1 {doubles[1].url}"]
    assert not (tmp_path / "h1-drain.json").exists()
    # the play's two hosts at once with a share of 0.5: refused before any hook ran
    rc, text = _play(tmp_path, "drain", "all", hooks, doubles)
    assert rc != 0 and "refusing to drain 2 of the play's 2 hosts at once" in text
    assert len(log.read_text().splitlines()) == 2


def _refused(text: str) -> list[str]:
    return sorted(set(re.findall(r"fatal: \[(h\d)[] ]", text)))


def test_strategy_free_a_full_batch_lets_the_share_through_and_refuses_the_rest(
    fleet, tmp_path: Path
) -> None:
    """The deploy's strategy free with a 100 % batch: the hosts reach the safety rule one by one. A host
    counts as out from the moment its check passed (before its removal), so a later host sees it: the
    share is never exceeded; the rule refuses the hosts beyond it (they fail, nothing of theirs is
    drained), it does not make them wait."""
    rtr, doubles = fleet(hosts=3)
    share = _router_vars(rtr, kdtree_drain_max_share=0.5)  # 1 of 3 at once
    rc, text = _play(tmp_path, "drain", "all", share, doubles, strategy="free", delays=(0, 3, 6))
    assert rc != 0
    assert _refused(text) == ["h1", "h2"], text
    assert "refusing to drain 2 of the router's 3 healthy workers at once: at most 1" in text
    assert _listed(rtr) == sorted(d.url for d in doubles[1:])
    assert sorted(p.name for p in tmp_path.glob("*-drain.json")) == ["h0-drain.json"]


def test_strategy_free_hosts_checking_together_never_exceed_the_share(fleet, tmp_path: Path) -> None:
    rtr, doubles = fleet(hosts=3)
    rc, text = _play(
        tmp_path, "drain", "all", _router_vars(rtr, kdtree_drain_max_share=0.5), doubles, strategy="free"
    )
    drained = [d.url for d in doubles if d.url not in _listed(rtr)]
    assert rc != 0 and len(drained) <= 1, text
    assert len(_refused(text)) == 3 - len(drained)
    assert len(list(tmp_path.glob("*-drain.json"))) == len(drained)


def test_strategy_free_hooks_count_a_host_of_the_batch_already_out(fleet, tmp_path: Path) -> None:
    _, doubles = fleet(hosts=3)
    line = "$KDTREE_DRAIN_ACTION $KDTREE_DRAIN_HOST"
    log, hooks = _logging_hooks(tmp_path, line, kdtree_drain_max_share=0.5)
    rc, text = _play(tmp_path, "drain", "all", hooks, doubles, strategy="free", delays=(0, 3, 6))
    assert rc != 0 and _refused(text) == ["h1", "h2"], text
    assert "refusing to drain 2 of the play's 3 hosts at once (at most 1" in text
    assert log.read_text().splitlines() == ["drain h0"]


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Another router (or backend) a planted record names: records every request it gets."""

    seen: ClassVar[list[str]] = []

    def _any(self) -> None:
        _Recorder.seen.append(f"{self.command} {self.path} {self.headers.get('Authorization', '')}")
        self.send_response(202)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_POST = do_DELETE = _any

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def evil() -> Iterator[str]:
    _Recorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _entries(rtr) -> list[str]:
    """The router's list as it spells it, every entry (a worker added twice shows twice), read without
    the client under test."""
    req = urllib.request.Request(rtr.url + "/workers", headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        return sorted(w["url"] for w in json.load(resp)["workers"])


def test_recover_never_acts_on_a_planted_record_naming_another_router_or_worker(
    fleet, tmp_path: Path, evil: str
) -> None:
    rtr, doubles = fleet(hosts=2)
    rc, text = _play(tmp_path, "drain", "all", _router_vars(rtr), doubles, limit="h0")
    assert rc == 0, text
    path = tmp_path / "h0-drain.json"
    genuine = json.loads(path.read_text())
    foreign = f"http://127.0.0.1:{free_port()}"
    before = _entries(rtr)
    for planted, says in (
        ({"router_url": evil, "worker_url": foreign}, "names the router"),
        ({"worker_url": foreign}, "names the worker"),
    ):
        path.write_text(json.dumps({**genuine, **planted}))
        rc, text = _play(tmp_path, "recover", "all", _router_vars(rtr), doubles, limit="h0")
        assert _Recorder.seen == [], f"the planted record's router was contacted: {_Recorder.seen}"
        assert rc != 0 and says in text and "not acted on" in text, text
        assert _entries(rtr) == before, "the planted record's worker reached the router"
        assert path.exists() and KEY not in text
    # a record that is a link to one, or world-writable, is not read at all
    path.write_text(json.dumps(genuine))
    link = tmp_path / "h0-link.json"
    link.symlink_to(path)
    rc, text = _play(
        tmp_path, "recover", "all", _router_vars(rtr, kdtree_drain_record_path=str(link)), doubles, limit="h0"
    )
    assert rc != 0 and "symbolic link" in text, text
    path.chmod(0o666)
    rc, text = _play(tmp_path, "recover", "all", _router_vars(rtr), doubles, limit="h0")
    assert rc != 0 and "world-writable" in text, text
    assert _entries(rtr) == before
    # the genuine record, matching the inventory: the host is rejoined with the inventory's URLs
    path.chmod(0o600)
    rc, text = _play(tmp_path, "recover", "all", _router_vars(rtr), doubles, limit="h0")
    assert rc == 0 and "rejoining it now" in text, text
    assert _entries(rtr) == sorted(d.url for d in doubles) and not path.exists()


def test_a_worker_spelled_otherwise_is_refused_naming_both_or_drained_and_rejoined_once(
    fleet, tmp_path: Path
) -> None:
    rtr, doubles = fleet(hosts=2)
    everyone = sorted(d.url for d in doubles)
    by_name = f"http://localhost:{doubles[0].port}"
    rc, text = _play(
        tmp_path, "drain", "all", _router_vars(rtr, kdtree_drain_worker_url=by_name), doubles, limit="h0"
    )
    assert rc != 0 and "does not list the worker" in text, text
    assert by_name in text and doubles[0].url in text
    assert _entries(rtr) == everyone and not (tmp_path / "h0-drain.json").exists()
    # the same worker written otherwise (upper-case scheme, a leading zero in the port, a trailing slash)
    odd = f"HTTP://127.0.0.1:0{doubles[0].port}/"
    odd_vars = _router_vars(rtr, kdtree_drain_worker_url=odd)
    rc, text = _play(tmp_path, "drain", "all", odd_vars, doubles, limit="h0")
    assert rc == 0, text
    assert _entries(rtr) == [doubles[1].url]
    rc, text = _play(tmp_path, "rejoin", "all", odd_vars, doubles, limit="h0")
    assert rc == 0, text
    assert len(_entries(rtr)) == 2 and _listed(rtr) == everyone
