"""Client of SGLang's router worker API (sglang-router 0.3.2, docs/drain.md), the safety rule of a
drain, and the wait for a host's in-flight requests (SGLang's own GET /v1/loads). No Ansible imports.

Every request goes through the project's bounded client (_http_client: one deadline per request, no
redirects, bounded answers, the API key redacted from every text). The router's worker changes are
queued jobs (202 Accepted): remove/add only ask, wait_for() polls GET /workers until the change shows,
within its own bound. Odd answers (not JSON, no worker list, a worker without url) are a RouterError
naming what was odd, never an empty fleet.
"""

from __future__ import annotations

import json
import logging
import math
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

from ansible_collections.kdtree.fleet.plugins.module_utils import _http_client as http_client

LOG = logging.getLogger(__name__)
POLL_S = 0.2


class RouterError(Exception):
    """The router (or a host's SGLang) refused, failed or answered something odd; str() says which."""


class DrainUnsafe(RouterError):
    """The safety rule refuses this drain (too large a share, or no healthy worker would be left)."""


class InFlightTimeout(RouterError):
    """Requests were still in flight when the wait's bound ran out."""


@dataclass(frozen=True)
class Worker:
    """One worker as GET /workers lists it."""

    id: str
    url: str
    healthy: bool
    load: int

    def as_dict(self) -> dict:
        return {"id": self.id, "url": self.url, "healthy": self.healthy, "load": self.load}


def normalize(url: str) -> str:
    """A worker URL as the router compares it: scheme and host lower case, no trailing slash."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RouterError(f"not an http(s) worker URL: {url!r}")
    return urllib.parse.urlunsplit(
        (parts.scheme.lower(), parts.netloc.lower(), parts.path.rstrip("/"), "", "")
    )


class Router:
    """SGLang's router at `url`; `api_key` is sent as a Bearer token and never appears in an error."""

    def __init__(
        self,
        url: str,
        api_key: str = "",
        timeout_s: float = 10.0,
        request: Callable[..., http_client.Answer] = http_client.request,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.timeout_s = timeout_s
        self._request = request
        self._clock = clock
        self._sleep = sleep

    def _call(self, method: str, path: str, payload: dict | None = None, ok_404: bool = False) -> dict:
        headers = {"Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        body = None
        if payload is not None:
            body = json.dumps(payload).encode()
            headers["Content-Type"] = "application/json"
        try:
            answer = self._request(
                method,
                self.url + path,
                timeout_s=self.timeout_s,
                body=body,
                headers=headers,
                secrets=[self.api_key],
            )
        except http_client.HttpFailure as exc:
            if ok_404 and exc.status == 404:
                return {}
            raise RouterError(f"router {method} {path}: {exc.reason}") from None
        try:
            data = json.loads(answer.body or b"{}")
        except ValueError:
            raise RouterError(
                f"router {method} {path}: answer is not JSON: {http_client.head(answer.body, [self.api_key])}"
            ) from None
        if not isinstance(data, dict):
            raise RouterError(f"router {method} {path}: answer is not a JSON object")
        return data

    def workers(self) -> list[Worker]:
        """GET /workers: every worker the router routes to."""
        data = self._call("GET", "/workers")
        listed = data.get("workers")
        if not isinstance(listed, list):
            raise RouterError("router GET /workers: no list of workers in the answer")
        out = []
        for item in listed:
            if not isinstance(item, dict) or not isinstance(item.get("url"), str) or not item.get("id"):
                raise RouterError(f"router GET /workers: a worker without url or id: {str(item)[:200]}")
            healthy = item.get("is_healthy")
            if not isinstance(healthy, bool):
                raise RouterError(f"router GET /workers: worker {item['url']} has no is_healthy true/false")
            load = item.get("load", 0)
            out.append(
                Worker(
                    str(item["id"]),
                    normalize(item["url"]),
                    healthy,
                    int(load) if isinstance(load, int) else 0,
                )
            )
        return out

    def find(self, worker_url: str) -> Worker | None:
        want = normalize(worker_url)
        return next((w for w in self.workers() if w.url == want), None)

    def remove(self, worker_url: str) -> bool:
        """Ask the router to remove the worker (DELETE /workers/{id}); False when it is not listed."""
        worker = self.find(worker_url)
        if worker is None:
            return False
        self._call("DELETE", f"/workers/{urllib.parse.quote(worker.id, safe='')}", ok_404=True)
        LOG.info("asked router to remove %s", worker.url)
        return True

    def add(self, worker_url: str) -> None:
        """Ask the router to add the worker (POST /workers); the router checks its health itself."""
        self._call("POST", "/workers", {"url": normalize(worker_url)})
        LOG.info("asked router to add %s", normalize(worker_url))

    def wait_for(self, worker_url: str, present: bool, timeout_s: float) -> Worker | None:
        """Poll GET /workers until the worker is absent (present=False) or listed and healthy
        (present=True), within timeout_s; RouterError naming what was last seen when it runs out."""
        deadline = self._clock() + timeout_s
        while True:
            worker = self.find(worker_url)
            if (worker is None) if not present else (worker is not None and worker.healthy):
                return worker
            if self._clock() >= deadline:
                seen = "not listed" if worker is None else f"listed, healthy={worker.healthy}"
                want = "listed and healthy" if present else "removed"
                raise RouterError(
                    f"router: {normalize(worker_url)} not {want} within {timeout_s:g} s (last seen: {seen})"
                )
            self._sleep(POLL_S)


def check_share(workers: list[Worker], draining: list[str], max_share: float, out: list[str] = ()) -> dict:
    """The safety rule, before the workers `draining` (worker URLs) are removed: at most
    floor(max_share x the healthy pool) are out of the router at once (at least one when max_share > 0),
    and at least one healthy worker stays. The pool is the router's healthy workers plus `out`, the
    workers this run already removed and has not added back (they count as leaving too). Returns the
    counts; DrainUnsafe."""
    if not 0.0 < max_share <= 1.0:
        raise DrainUnsafe(f"the share of healthy workers to drain must be in (0, 1], got {max_share!r}")
    gone = {normalize(u) for u in out}
    healthy = {w.url for w in workers if w.healthy}
    pool = healthy | gone
    leaving = ({normalize(u) for u in draining} & healthy) | gone
    allowed = max(1, math.floor(max_share * len(pool) + 1e-9))
    counts = {"healthy": len(pool), "draining": len(leaving), "allowed": allowed}
    if leaving and len(pool) - len(leaving) < 1:
        raise DrainUnsafe(
            f"refusing to drain {len(leaving)} of the router's {len(pool)} healthy workers: "
            "none would be left"
        )
    if len(leaving) > allowed:
        raise DrainUnsafe(
            f"refusing to drain {len(leaving)} of the router's {len(pool)} healthy workers at once: "
            f"at most {allowed} (share {max_share:g}); make the batches smaller (serial) or raise the share"
        )
    return counts


def in_flight(server_url: str, timeout_s: float, api_key: str = "", request=http_client.request) -> int:
    """Requests running or waiting on a host's SGLang, from its GET /v1/loads (every dp rank); 0 when
    the connection is refused (no server listens: a crashed or stopped unit). Any other failure or an
    odd answer is a RouterError, never 0."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        answer = request(
            "GET",
            server_url.rstrip("/") + "/v1/loads",
            timeout_s=timeout_s,
            headers=headers,
            secrets=[api_key],
        )
        data = json.loads(answer.body)
    except http_client.HttpFailure as exc:
        if "ConnectionRefusedError" in exc.reason:
            return 0  # nothing listens on the port: no process to have a request in flight
        raise RouterError(f"SGLang GET /v1/loads: {exc.reason}") from None
    except ValueError:
        raise RouterError("SGLang GET /v1/loads: answer is not JSON") from None
    loads = data.get("loads") if isinstance(data, dict) else None
    if not isinstance(loads, list) or not loads:
        raise RouterError("SGLang GET /v1/loads: no per-rank loads in the answer")
    total = 0
    for load in loads:
        running = load.get("num_running_reqs") if isinstance(load, dict) else None
        waiting = load.get("num_waiting_reqs", 0) if isinstance(load, dict) else None
        if not isinstance(running, int) or not isinstance(waiting, int) or running < 0 or waiting < 0:
            raise RouterError(f"SGLang GET /v1/loads: odd load entry {str(load)[:200]}")
        total += running + waiting
    return total


def wait_idle(
    server_url: str,
    timeout_s: float,
    api_key: str = "",
    settle_s: float = 1.0,
    request=http_client.request,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict:
    """Wait until the host's SGLang has had no request in flight for settle_s on end (a request the
    router picked this host for just before the removal showed may still be on its way);
    InFlightTimeout when timeout_s runs out first."""
    started = clock()
    deadline = started + timeout_s
    idle_since: float | None = None
    while True:
        left = in_flight(server_url, min(10.0, max(1.0, deadline - clock())), api_key, request)
        now = clock()
        if left:
            idle_since = None
        elif idle_since is None:
            idle_since = now
        if idle_since is not None and now - idle_since >= settle_s:
            return {"waited_s": round(now - started, 3), "in_flight": 0}
        if now >= deadline:
            raise InFlightTimeout(
                f"{left} request(s) still in flight on {server_url} after {timeout_s:g} s of draining"
                if left
                else f"{server_url} was not idle for {settle_s:g} s on end within {timeout_s:g} s of draining"
            )
        sleep(POLL_S)
