"""Client of SGLang's router worker API (sglang-router 0.3.2 or its successor smg 1.13.0: KINDS,
docs/drain.md), the safety rule of a drain, and the wait for a host's in-flight requests (SGLang's own
GET /v1/loads). No Ansible imports.

Every request goes through the project's bounded client (_http_client: one deadline per request, no
redirects, answers of at most MAX_ANSWER bytes). The router's worker changes are queued jobs (202
Accepted): remove/add only ask, wait_for() polls GET /workers until the change shows, within its own
bound. Odd answers (not JSON, nested too deep, no worker list, a worker without url) are a RouterError
naming what was odd, never an empty fleet.

The two kinds differ where the drain looks (both observed, docs/drain.md): smg lists each worker with a
`status` ("ready", and "draining" for the seconds it keeps a removed worker listed, out of rotation, before
it drops it), counts a worker healthy only when it is `ready`, and answers 409 to an addition of a URL it
lists already. sglang-router's records carry no `status`. A record that does not match the kind the
inventory names is a RouterError naming the kind to set, before anything changes.

Worker URLs are compared in one form, canonical(): scheme and host lower case, the port as a number
(80/443 when absent), IPv6 addresses compressed, no trailing slash. A worker the router does not list
in that form is a refusal naming both spellings (the inventory's and the router's), never "drained": a
host name and an IP address are never taken as the same host (no DNS lookup). Every text that leaves
(an error, a message) goes through redact(): the API key in any form, an Authorization or Bearer value
and the user:password@ of a URL become ***; what the router or a host echoes goes through scrub() too,
which hides any 4 characters of the key in a row as well.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
import time
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ansible_collections.kdtree.fleet.plugins.module_utils import _http_client as http_client
from ansible_collections.kdtree.fleet.plugins.module_utils._chunk import Chunk, ChunkOver

# The internal option of a continued V(add) (kdtree_router's action plugin sets it from the previous
# call's `changed`): an earlier call of this wait asked the router to add the worker already.
ASKED_OPTION = "_asked"

POLL_S = 0.2
DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_ANSWER = 1 << 20  # 1 MiB: a router listing thousands of workers stays far below it
ANSWER_LIMITS = http_client.Limits(max_body=MAX_ANSWER)
FRAGMENT = 4  # any run of this many characters of the key is hidden in every text that leaves
LISTED_SHOWN = 20  # at most this many of the router's workers are named in a refusal
SGLANG_ROUTER, SMG = "sglang-router", "smg"
KINDS = (SGLANG_ROUTER, SMG)  # the routers whose worker API the client speaks
SMG_READY, SMG_DRAINING = "ready", "draining"  # smg's status of a routed worker, and of one leaving
_USERINFO = re.compile(r"(?<=//)[^/?#@\s]*@")
_BEARER = re.compile(r"(?i)\bbearer\s+[^\s\"',;}]+")
_AUTH = re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?)(?:[a-z]+\s+)?[^\s\"',;}]+")


class RouterError(Exception):
    """The router (or a host's SGLang) refused, failed or answered something odd; str() says which."""


class DrainUnsafe(RouterError):
    """The safety rule refuses this drain (too large a share, or no healthy worker would be left)."""


class InFlightTimeout(RouterError):
    """Requests were still in flight when the wait's bound ran out."""


class NotListed(RouterError):
    """The router does not list the worker (in canonical form): never taken as drained."""


# ---------------------------------------------------------------------------------------------
# what leaves: redacted


def _hide_fragments(text: str, secret: str, size: int = FRAGMENT) -> str:
    """`text` with every run of `size` or more characters of `secret` (ignoring case) as ***."""
    grams = {secret[i : i + size].lower() for i in range(len(secret) - size + 1)}
    if not grams:
        return text
    low = text.lower()
    hidden = [False] * len(text)
    for i in range(len(text) - size + 1):
        if low[i : i + size] in grams:
            hidden[i : i + size] = [True] * size
    out: list[str] = []
    for i, char in enumerate(text):
        if not hidden[i]:
            out.append(char)
        elif i == 0 or not hidden[i - 1]:
            out.append(http_client.REDACTED)
    return "".join(out)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with each secret in every form _http_client knows, Authorization/Bearer values and the
    user:password@ of URLs replaced by *** (the last pass over every text that leaves)."""
    secrets = [s for s in secrets if s]
    text = http_client.redact(text, secrets)
    text = _USERINFO.sub(http_client.REDACTED + "@", text)
    text = _BEARER.sub("Bearer " + http_client.REDACTED, text)
    return _AUTH.sub(lambda m: m.group(1) + http_client.REDACTED, text)


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """redact(), and any FRAGMENT characters of a secret in a row hidden too: for what a router or a
    host echoes (a prefix of a wrong key, say). Not for the collection's own words: a key may contain
    some."""
    secrets = [s for s in secrets if s]
    text = redact(text, secrets)
    for secret in secrets:
        text = _hide_fragments(text, secret)
    return text


def redact_tree(value: object, secrets: Iterable[str] = ()) -> object:
    """redact() over every string (keys too) of a result made of dicts, lists and scalars."""
    secrets = [s for s in secrets if s]
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {redact_tree(k, secrets): redact_tree(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_tree(v, secrets) for v in value]
    return value


def shown(url: object, size: int = 200) -> str:
    """A URL (or anything) as a refusal may show it: one line, user:password@ as ***@, cut to `size`."""
    text = " ".join(str(url).split())
    text = _USERINFO.sub(http_client.REDACTED + "@", text)
    return repr(text if len(text) <= size else text[: size - 3] + "...")


def _short_json(value: object, size: int = 200) -> str:
    try:
        text = json.dumps(value)
    except (ValueError, TypeError, RecursionError):
        text = "(not representable)"
    return text if len(text) <= size else text[: size - 3] + "..."


# ---------------------------------------------------------------------------------------------
# URLs in one form


def _host(host: str) -> str:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host.lower()
    return f"[{address.compressed}]" if address.version == 6 else address.compressed


def canonical(url: object, what: str = "worker URL") -> str:
    """`url` in the one form URLs are compared in: scheme://host:port[/path], scheme and host lower
    case, the port a number (80/443 by default), IPv6 compressed, no trailing slash. RouterError for
    anything else (not http(s), no host, a bad port or IPv6 literal, credentials, a query)."""
    if not isinstance(url, str) or not url.strip():
        raise RouterError(f"the {what} is empty or not text: {shown(url)}")
    try:
        parts = urllib.parse.urlsplit(url.strip())
        host = parts.hostname
        port = parts.port
    except ValueError as exc:
        raise RouterError(f"the {what} {shown(url)} is not a valid URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not host:
        raise RouterError(f"the {what} {shown(url)} is not an http(s) URL with a host")
    if "@" in parts.netloc:
        raise RouterError(f"the {what} {shown(url)} carries credentials (user:password@): refused")
    if parts.query or parts.fragment:
        raise RouterError(f"the {what} {shown(url)} has a query or a fragment: refused")
    port = DEFAULT_PORTS[scheme] if port is None else port
    return f"{scheme}://{_host(host)}:{port}{parts.path.rstrip('/')}"


def origin(url: object, what: str = "worker URL") -> str:
    """canonical() of `url` without its path: scheme://host:port."""
    full = canonical(url, what)
    scheme, rest = full.split("://", 1)
    return f"{scheme}://{rest.split('/', 1)[0]}"


def normalize(url: str) -> str:
    """canonical() of a worker URL (the name the callers of before use)."""
    return canonical(url)


def _port(url: str) -> str:
    return url.rsplit(":", 1)[-1].split("/", 1)[0]


# ---------------------------------------------------------------------------------------------
# the router


@dataclass(frozen=True)
class Worker:
    """One worker as GET /workers lists it: `url` canonical, `listed` as the router spells it, `status`
    smg's (empty for sglang-router)."""

    id: str
    url: str
    healthy: bool
    load: int
    listed: str = ""
    status: str = ""

    @property
    def leaving(self) -> bool:
        """smg removes it already: out of rotation, listed only until smg drops it."""
        return self.status == SMG_DRAINING

    def as_dict(self) -> dict:
        shown_ = {"id": self.id, "url": self.listed or self.url, "healthy": self.healthy, "load": self.load}
        return {**shown_, "status": self.status} if self.status else shown_


def parse_json(raw: bytes, what: str) -> object:
    """The JSON of an answer; RouterError (never a traceback) when it is not JSON or nested too deep."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise RouterError(f"{what}: answer nested too deeply to read (refused)") from None
    except ValueError:  # UnicodeDecodeError included
        raise RouterError(f"{what}: answer is not JSON") from None


class Router:
    """SGLang's router at `url`, of `kind` (one of KINDS); `api_key` is sent as a Bearer token and never
    appears in an error."""

    def __init__(
        self,
        url: str,
        api_key: str = "",
        timeout_s: float = 10.0,
        request: Callable[..., http_client.Answer] = http_client.request,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        kind: str = SGLANG_ROUTER,
    ) -> None:
        if kind not in KINDS:
            raise RouterError(f"the router kind must be one of {', '.join(KINDS)}, got {shown(kind)}")
        self.kind = kind
        self.api_key = api_key
        self.url = canonical(url, "router URL")
        self.timeout_s = timeout_s
        self._request = request
        self._clock = clock
        self._sleep = sleep

    def _fail(self, text: str, kind: type[RouterError] = RouterError) -> RouterError:
        return kind(redact(text, [self.api_key]))

    def _echo(self, text: str) -> str:
        """What the router sent, as an error may show it (scrub())."""
        return scrub(text, [self.api_key])

    def show(self, worker: Worker) -> dict:
        """A worker as a result shows it: what the router sent, scrubbed."""
        return {k: self._echo(v) if isinstance(v, str) else v for k, v in worker.as_dict().items()}

    def _call(self, method: str, path: str, payload: dict | None = None, ok: tuple[int, ...] = ()) -> dict:
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
                limits=ANSWER_LIMITS,
            )
        except http_client.HttpFailure as exc:
            if exc.status in ok:
                return {}
            raise self._fail(f"router {method} {path}: {self._echo(exc.reason)}") from None
        if len(answer.body or b"") > MAX_ANSWER:
            raise self._fail(f"router {method} {path}: answer larger than {MAX_ANSWER} bytes (refused)")
        try:
            data = parse_json(answer.body or b"{}", f"router {method} {path}")
        except RouterError as exc:
            raise self._fail(f"{exc}: {self._echo(http_client.head(answer.body, [self.api_key]))}") from None
        if not isinstance(data, dict):
            raise self._fail(f"router {method} {path}: answer is not a JSON object")
        return data

    def _worker(self, item: object) -> Worker:
        if not isinstance(item, dict) or not isinstance(item.get("url"), str) or not item.get("id"):
            raise self._fail(
                f"router GET /workers: a worker without url or id: {self._echo(_short_json(item))}"
            )
        if not isinstance(item["id"], (str, int)):
            raise self._fail(f"router GET /workers: a worker with an odd id: {self._echo(_short_json(item))}")
        healthy = item.get("is_healthy")
        if not isinstance(healthy, bool):
            raise self._fail(
                f"router GET /workers: worker {self._echo(shown(item['url']))} has no is_healthy true/false"
            )
        try:
            url = canonical(item["url"], "worker URL the router lists")
        except RouterError:
            raise self._fail(
                f"router GET /workers lists a worker whose URL is not one: {self._echo(shown(item['url']))}"
            ) from None
        load = item.get("load", 0)
        load = load if isinstance(load, int) and not isinstance(load, bool) else 0
        status = self._status(item)
        healthy = healthy and (self.kind != SMG or status == SMG_READY)
        return Worker(str(item["id"]), url, healthy, load, item["url"], status)

    def _status(self, item: dict) -> str:
        """smg's status of the worker ('' for sglang-router); a record of the other kind is refused."""
        status = item.get("status")
        where = self._echo(shown(item["url"]))
        if self.kind == SMG and not (isinstance(status, str) and status):
            raise self._fail(
                f"router GET /workers: worker {where} has no status, which smg lists for each worker: "
                f"the router at {self.url} does not answer like smg (sglang-router? set "
                f"kdtree_drain_router_kind: {SGLANG_ROUTER}). Nothing was changed"
            )
        if self.kind == SGLANG_ROUTER and status is not None:
            raise self._fail(
                f"router GET /workers: worker {where} has a status ({self._echo(_short_json(status, 40))}), "
                f"which sglang-router never lists: the router at {self.url} answers like smg (set "
                f"kdtree_drain_router_kind: {SMG}). Nothing was changed"
            )
        return status or ""

    def workers(self) -> list[Worker]:
        """GET /workers: every worker the router routes to."""
        listed = self._call("GET", "/workers").get("workers")
        if not isinstance(listed, list):
            raise self._fail("router GET /workers: no list of workers in the answer")
        return [self._worker(item) for item in listed]

    def find(self, worker_url: str, workers: list[Worker] | None = None) -> Worker | None:
        """The worker the router lists as `worker_url` (compared in canonical form); None when none."""
        return next(iter(self.matching(worker_url, workers)), None)

    def matching(self, worker_url: str, workers: list[Worker] | None = None) -> list[Worker]:
        want = canonical(worker_url)
        return [w for w in (self.workers() if workers is None else workers) if w.url == want]

    def listed(self, worker_url: str, workers: list[Worker] | None = None) -> list[Worker]:
        """Every entry the router lists as `worker_url` (one, unless it was added twice); NotListed,
        naming both spellings, when it lists none: a worker the router does not list is never drained."""
        workers = self.workers() if workers is None else workers
        found = self.matching(worker_url, workers)
        if not found:
            raise self._fail(not_listed_text(worker_url, workers, self._echo), NotListed)
        return found

    def remove(self, worker_url: str) -> bool:
        """Ask the router to remove the worker (DELETE /workers/{id}, each entry that is it and is not
        leaving already): True; NotListed when it does not list it (never False: not listed is not
        drained)."""
        for worker in self.listed(worker_url):
            if not worker.leaving:  # smg drops a draining entry itself; another DELETE cuts its drain short
                self._call("DELETE", f"/workers/{urllib.parse.quote(worker.id, safe='')}", ok=(404,))
        return True

    def add(self, worker_url: str) -> None:
        """Ask the router to add the worker (POST /workers); the router checks its health itself. smg's
        409 (it lists the URL already: an addition raced this one) is no failure: wait_for() decides."""
        self._call("POST", "/workers", {"url": canonical(worker_url)}, ok=(409,) if self.kind == SMG else ())

    def rejoin(
        self, worker_url: str, timeout_s: float, chunk: Chunk | None = None, asked: bool = False
    ) -> Worker | None:
        """Put the worker back and wait (within timeout_s) until it is listed healthy: nothing asked when
        it is listed already or `asked` (an earlier call of this wait asked), and an entry smg is still
        dropping (leaving) is waited out first (smg refuses to add a URL it lists). With `chunk`, as
        wait_for(); the ChunkOver it raises says in `asked` whether the router was asked by now."""
        chunk = chunk or Chunk(timeout_s, clock=self._clock)
        try:
            found = self.matching(worker_url)
            if found and all(w.leaving for w in found):
                self.wait_for(worker_url, present=False, timeout_s=timeout_s, chunk=chunk)
                found = []
            if not found and not asked:
                self.add(worker_url)
                asked = True
            return self.wait_for(worker_url, present=True, timeout_s=timeout_s, chunk=chunk)
        except ChunkOver as over:
            over.asked = asked
            raise

    def wait_for(
        self, worker_url: str, present: bool, timeout_s: float, chunk: Chunk | None = None
    ) -> Worker | None:
        """Poll GET /workers until the worker is absent (present=False) or listed and healthy
        (present=True), within timeout_s; RouterError naming what was last seen when it runs out.
        With `chunk` (the same timeout_s, less what earlier calls waited): ChunkOver when its share
        is used up first."""
        want = canonical(worker_url)
        chunk = chunk or Chunk(timeout_s, clock=self._clock)
        while True:
            found = self.matching(want)
            worker = found[0] if found else None
            if (not found) if not present else any(w.healthy for w in found):
                return next((w for w in found if w.healthy), None)
            seen = "not listed" if worker is None else f"listed, healthy={worker.healthy}"
            now = self._clock()
            if now >= chunk.deadline:
                goal = "listed and healthy" if present else "removed"
                raise self._fail(f"router: {want} not {goal} within {timeout_s:g} s (last seen: {seen})")
            chunk.check(now, seen)
            self._sleep(POLL_S)


def not_listed_text(worker_url: str, workers: list[Worker], echo: Callable[[str], str] = str) -> str:
    """The refusal of a worker the router does not list: the inventory's spelling, the form compared,
    and the router's own spellings (those on the same port first)."""
    want = canonical(worker_url)
    same_port = [w.listed or w.url for w in workers if _port(w.url) == _port(want)]
    others = [w.listed or w.url for w in workers if _port(w.url) != _port(want)]
    names = same_port + others
    listing = ", ".join(echo(shown(u)) for u in names[:LISTED_SHOWN]) or "no worker at all"
    if len(names) > LISTED_SHOWN:
        listing += f" and {len(names) - LISTED_SHOWN} more"
    return (
        f"the router does not list the worker {shown(worker_url)} (compared as {want}); the router lists "
        f"{listing}. A worker the router does not list is never taken as drained, and a host name and an "
        "IP address are never taken as the same host: set kdtree_drain_worker_url to the URL the router "
        "lists for this host (or add the host to the router first). Nothing was removed"
    )


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
    base = canonical(server_url, "SGLang server URL")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        answer = request(
            "GET",
            base + "/v1/loads",
            timeout_s=timeout_s,
            headers=headers,
            secrets=[api_key],
            limits=ANSWER_LIMITS,
        )
    except http_client.HttpFailure as exc:
        if "ConnectionRefusedError" in exc.reason:
            return 0  # nothing listens on the port: no process to have a request in flight
        raise RouterError(f"SGLang GET /v1/loads: {scrub(exc.reason, [api_key])}") from None
    data = parse_json(answer.body, "SGLang GET /v1/loads")
    loads = data.get("loads") if isinstance(data, dict) else None
    if not isinstance(loads, list) or not loads:
        raise RouterError("SGLang GET /v1/loads: no per-rank loads in the answer")
    total = 0
    for load in loads:
        running = load.get("num_running_reqs") if isinstance(load, dict) else None
        waiting = load.get("num_waiting_reqs", 0) if isinstance(load, dict) else None
        if not isinstance(running, int) or not isinstance(waiting, int) or running < 0 or waiting < 0:
            raise RouterError(f"SGLang GET /v1/loads: odd load entry {scrub(_short_json(load), [api_key])}")
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
    chunk: Chunk | None = None,
) -> dict:
    """Wait until the host's SGLang has had no request in flight for settle_s on end (a request the
    router picked this host for just before the removal showed may still be on its way);
    InFlightTimeout when timeout_s runs out first. With `chunk` (the same timeout_s, less what earlier
    calls waited): ChunkOver when its share is used up while requests are in flight - never while the
    host settles, as a next call would count settle_s afresh (and never settle when settle_s > chunk_s)."""
    chunk = chunk or Chunk(timeout_s, clock=clock)
    deadline = chunk.deadline
    idle_since: float | None = None
    while True:
        left = in_flight(server_url, min(10.0, max(1.0, deadline - clock())), api_key, request)
        now = clock()
        if left:
            idle_since = None
        elif idle_since is None:
            idle_since = now
        if idle_since is not None and now - idle_since >= settle_s:
            return {"waited_s": round(chunk.waited(now), 3), "in_flight": 0}
        if now >= deadline:
            where = shown(server_url)
            raise InFlightTimeout(
                f"{left} request(s) still in flight on {where} after {timeout_s:g} s of draining"
                if left
                else f"{where} was not idle for {settle_s:g} s on end within {timeout_s:g} s of draining"
            )
        if left:
            chunk.check(now, f"{left} request(s) in flight")
        sleep(POLL_S)
