"""A small fleet of SGLang test-double hosts behind SGLang's real router, and one playbook run under
continuous traffic through it: what `make test-traffic-fleet` asserts (the drain and the bake,
tests/trafficfleet) and `make bench-drain` prints.

The hosts are test hosts of their own (scripts/testhosts/fleet.sh with a prefix and label of the
caller's), their stock units listen on the hosts' network with the double's request log
(serve-on-network.sh); the router is sglang-router 0.3.2 on 127.0.0.1 (traffic.router_start); the client
is traffic.Traffic. A run is one of
  rollback: rollback.yml over every host (each restarted once);
  deploy:   a deploy that changes every host (each restarted once);
  crash:    a deploy in which host number `crash_host` (1-based; default the second) crashes 3 s after
            its start and is rolled back (the play fails, rc 2; the hosts after it are never touched).
With the drain on the playbooks get the router's URL, key and each host's worker URL
(kdtree_drain_mode=sglang_router); off, none of it (and the caller starts the router with its retries
off for a control that shows what the drain saves).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import traffic
from playrun import Run, run_playbook

ROOT = Path(__file__).resolve().parents[2]
LOG = logging.getLogger("drainfleet")
REQUEST_LOG = "/var/log/sglang-requests.jsonl"
# the play's exit status each run must end with: the crash run's play fails (the host is rolled back)
WANT_RC = {"rollback": 0, "deploy": 0, "crash": 2}


@dataclass
class Fleet:
    """Test hosts `<prefix>1..<size>` with the label kdtree.fleet=<label>, as gpu-hosts/double-hosts of an
    inventory of their own (the local inventory's group_vars) under `tmp`."""

    prefix: str
    label: str
    size: int
    tmp: Path
    generate_s: float = 0.2
    crash_host: int = 2
    workers: dict[str, str] = field(default_factory=dict)

    @property
    def hosts(self) -> list[str]:
        return [f"{self.prefix}{i}" for i in range(1, self.size + 1)]

    def _env(self) -> dict[str, str]:
        return {**os.environ, "KDTREE_FLEET_PREFIX": self.prefix, "KDTREE_FLEET_LABEL": self.label}

    def _fleet(self, action: str, *args: str) -> None:
        script = ROOT / "scripts" / "testhosts" / "fleet.sh"
        subprocess.run(["bash", str(script), action, *args], env=self._env(), check=True, timeout=1200)

    def podman(self, host: str, *cmd: str, stdin: str | None = None, timeout: float = 120) -> str:
        done = subprocess.run(
            ["podman", "exec", "-i", host, *cmd],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
        return done.stdout

    def up(self) -> None:
        """Start the hosts, put their units on the network, write the inventory (ANSIBLE_INVENTORY)."""
        self._fleet("up", str(self.size))
        script = (ROOT / "scripts" / "testhosts" / "serve-on-network.sh").read_text()
        for host in self.hosts:
            self.podman(host, "bash", "-s", "--", str(self.generate_s), REQUEST_LOG, stdin=script)
        self.workers = {
            host: self.podman(host, "bash", "-s", "--", "--url", stdin=script).strip() for host in self.hosts
        }
        (self.tmp / "group_vars").symlink_to(ROOT / "inventory" / "local" / "group_vars")
        inventory = {"gpu-hosts": {"children": {"double-hosts": {"hosts": dict.fromkeys(self.hosts)}}}}
        (self.tmp / "hosts.yml").write_text(json.dumps(inventory))
        os.environ["ANSIBLE_INVENTORY"] = str(self.tmp / "hosts.yml")

    def down(self) -> None:
        self._fleet("down")

    def extra(
        self, run: str, drain: bool, router_url: str, key: str, tag: str, more: dict | None = None
    ) -> tuple[str, dict]:
        """The playbook and extra vars of `run`; `tag` makes each deploy a change on every host; `more`:
        the caller's own extra vars over them (its kdtree_service_env_extra joins the run's)."""
        more = dict(more or {})
        extra: dict = {"_drainfleet_workers": self.workers}
        if drain:
            extra.update(
                kdtree_drain_mode="sglang_router",
                kdtree_drain_router_url=router_url,
                kdtree_drain_router_api_key=key,
                kdtree_drain_worker_url="{{ _drainfleet_workers[inventory_hostname] }}",
            )
        if run == "rollback":
            return "rollback.yml", {**extra, **more}
        env = {"KDTREE_DRAINFLEET_RUN": tag, **more.pop("kdtree_service_env_extra", {})}
        if run == "crash":
            env.update(
                SGLANG_DOUBLE_CRASH_AFTER="3",
                SGLANG_DOUBLE_LOAD_SECONDS="10",
                SGLANG_DOUBLE_CRASH_HOST=self.hosts[self.crash_host - 1],
            )
        return "deploy.yml", {**extra, **more, "kdtree_service_env_extra": env}

    def under_traffic(
        self,
        run: str,
        drain: bool,
        router_url: str,
        key: str,
        tag: str,
        more: dict | None = None,
        load_args: dict | None = None,
        want_rc: int | None = None,
    ) -> tuple[dict, Run]:
        """One run with continuous traffic through the router; traffic.check's figures (sent, answered,
        failed, cut, reached_while_out, per host) plus wall_s, rc and listed_at_end (the router's worker
        URLs when the traffic stopped), and the playbook run itself. `more`: extra vars over the run's
        (Fleet.extra); `load_args`: traffic.Traffic's (default 3 threads of one-token requests);
        `want_rc`: the exit status expected (default the run's, WANT_RC)."""
        playbook, extra = self.extra(run, drain, router_url, key, tag, more)
        want_rc = WANT_RC[run] if want_rc is None else want_rc
        with traffic.Traffic(router_url, **(load_args or {"threads": 3})) as load:
            time.sleep(1)
            result = run_playbook(playbook, "gpu-hosts", extra, echo=False)
            time.sleep(1)
        logs = {}
        for host, url in self.workers.items():
            path = self.tmp / f"{tag}-{host}.jsonl"
            path.write_text(self.podman(host, "cat", REQUEST_LOG))
            logs[url] = path
        summary = load.summary()
        seen = traffic.check(summary, logs)
        # the router's worker list at the traffic's end (check refuses a traffic never sampled)
        seen.update(
            wall_s=round(result.seconds, 1), rc=result.rc, listed_at_end=summary["changes"][-1]["listed"]
        )
        if result.rc != want_rc:
            LOG.error("%s: rc=%s (want %s)\n%s", tag, result.rc, want_rc, result.text[-4000:])
        return seen, result


def line(name: str, seen: dict) -> str:
    """The key=value line of one run, as make bench-drain prints it."""
    return (
        f"{name}: sent={seen['sent']} answered={seen['answered']} failed={seen['failed']}"
        f" cut={seen['cut']} reached_while_out={seen['reached_while_out']}"
        f" wall_s={seen['wall_s']} rc={seen['rc']}"
    )
