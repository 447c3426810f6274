#!/usr/bin/python
"""Take a host out of SGLang's router (sglang-router or smg) and put it back, check the drain's safety
rule, wait for the host's in-flight requests (the thin Ansible side of module_utils/_router)."""

from __future__ import annotations

# Ansible's module layout: documentation strings first, imports after them.
# ruff: noqa: E402

DOCUMENTATION = r"""
module: kdtree_router
short_description: Drain a host from SGLang's router and rejoin it
description:
  - Talks to SGLang's router (sglang-router 0.3.2 or its successor smg 1.13.0, as O(router_kind) says;
    their worker API C(GET /workers), C(POST /workers), C(DELETE /workers/{id})) and to the host's own
    SGLang (C(GET /v1/loads)). The role kdtree.fleet.kdtree_drain calls it around every restart the
    collection makes.
  - O(action=check) refuses (fails) when removing O(draining) would take more than O(max_share) of the
    router's healthy workers out at once, or leave it none. Changes nothing.
  - O(action=remove) asks the router to remove O(worker_url) and waits until C(GET /workers) no
    longer lists it (the router queues the change); O(action=add) asks it to add the worker and waits
    until it is listed healthy. Both within O(wait_timeout_s), a failure naming what was last seen.
  - Worker URLs are compared in one form (scheme and host lower case, the port as a number, 80/443 when
    absent, no trailing slash). A worker the router does not list in that form is a failure naming both
    spellings (O(worker_url) and the router's list), never "already drained"; a host name and an IP
    address are never taken as the same host. A malformed URL (a bad IPv6 literal or port, credentials,
    a query) is a failure before any request.
  - O(action=record) runs on the host and reads the drain record at O(record_path) that a killed run may
    have left - only a regular file (never through a symbolic link, without blocking), owned by root or
    the user the module runs as, not group- or world-writable, at most 64 KiB - and compares the router
    and worker it names with O(router_url) and O(worker_url) (the inventory's). A record naming another
    router or worker, or one this collection does not write, is a failure; its URLs are never used.
  - O(action=wait_idle) runs on the host and waits until its SGLang at O(server_url) has had no request
    running or waiting for O(settle_s) on end; when O(timeout_s) runs out that is a failure with its own
    message, unless O(force=true) (a warning, and the restart goes on).
  - The waits of V(remove), V(add) and V(wait_idle) run in chunks of O(chunk_s) seconds - each call
    returns RV(state=pending) with RV(progress) when its chunk is used up - and the action plugin of the
    same name calls the module again until the wait ends, printing one progress line per chunk (what is
    waited for, how long of its limit, what was last seen). The limit is the whole wait's, never a
    chunk's.
  - The API key is sent as a Bearer token and never appears in a result, a message or a log - nor any 4
    characters of it, an C(Authorization) or C(Bearer) value, or the user:password@ of a URL.
  - Answers are bounded (1 MiB); one nested too deeply or not JSON is a failure, never a traceback.
options:
  action:
    description: What to do.
    type: str
    required: true
    choices: [workers, check, remove, add, wait_idle, record]
  router_url:
    description: The router's base URL (every action but V(wait_idle); V(record) compares with it).
    type: str
    default: ""
  router_kind:
    description: >-
      Which router answers at O(router_url). V(smg) lists a removed worker as C(draining) (out of
      rotation) for a few seconds before it drops it, and counts a worker healthy only when its
      C(status) is C(ready). A worker list that does not look like this kind (a C(status) from
      V(sglang-router), none from V(smg)) is a failure naming the kind to set, before anything changes.
    type: str
    default: sglang-router
    choices: [sglang-router, smg]
  api_key:
    description: The router's API key (also sent to the host's SGLang by V(wait_idle)); may be empty.
    type: str
    default: ""
  worker_url:
    description: >-
      The host's worker URL as the router knows it (V(remove), V(add); V(check) refuses when the router
      does not list it; V(record) compares with it).
    type: str
    default: ""
  draining:
    description: Worker URLs about to be removed together (V(check)).
    type: list
    elements: str
    default: []
  out:
    description: Worker URLs this run removed and has not added back yet (V(check)).
    type: list
    elements: str
    default: []
  max_share:
    description: The largest share of the router's healthy workers out at once (V(check)), in (0, 1].
    type: float
    default: 0.5
  request_timeout_s:
    description: The bound of each request.
    type: float
    default: 10
  wait_timeout_s:
    description: How long V(remove) and V(add) wait for the change to show in C(GET /workers).
    type: float
    default: 60
  server_url:
    description: >-
      The host's SGLang URL as the host reaches it (V(wait_idle)); only its scheme, host and port are
      used (its health URL will do).
    type: str
    default: ""
  timeout_s:
    description: How long V(wait_idle) waits for the in-flight requests.
    type: float
    default: 300
  settle_s:
    description: How long the host must have had none in flight on end (V(wait_idle)).
    type: float
    default: 1
  force:
    description: When V(wait_idle) runs out of time, warn and succeed instead of failing.
    type: bool
    default: false
  chunk_s:
    description: >-
      Seconds one call waits before it returns RV(state=pending) (the action plugin prints a progress
      line and calls again); V(0) waits to the end in one call.
    type: float
    default: 10
  record_path:
    description: The drain record on the host (V(record)).
    type: path
    default: ""
  rejoin_hooks:
    description: >-
      Whether the inventory has a rejoin hook (V(record) refuses a record drained by hooks without one).
    type: bool
    default: false
extends_documentation_fragment:
  - kdtree.fleet.attributes
attributes:
  check_mode:
    support: full
    details: >-
      V(workers), V(check) and V(record) only read and run as usual; V(remove) and V(add) read the
      router's list and say what they would do (a worker it does not list still fails); V(wait_idle)
      says what it would wait for and makes no request (nothing was removed, so nothing would drain).
  diff_mode:
    support: none
    details: The router's worker list is not configuration.
author: kdtree-fleet contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Take the host out of the router
  kdtree.fleet.kdtree_router:
    action: remove
    router_url: http://router.example:30000
    api_key: "{{ vault_router_key }}"
    worker_url: http://gpu1.example:30000
  delegate_to: localhost

- name: Wait for its in-flight requests
  kdtree.fleet.kdtree_router:
    action: wait_idle
    server_url: http://127.0.0.1:30000
    timeout_s: 300
"""

RETURN = r"""
workers:
  description: >-
    The router's workers (V(workers), V(check)), each with id, url, healthy and load (and smg's status).
  type: list
  elements: dict
  returned: for workers and check
counts:
  description: The safety rule's counts (V(check)) - healthy, draining, allowed.
  type: dict
  returned: for check
worker:
  description: The worker as the router lists it after V(add); null after V(remove).
  type: dict
  returned: for remove and add
waited_s:
  description: Seconds V(wait_idle) waited (0 in check mode); while pending, seconds the wait has waited.
  type: float
  returned: for wait_idle, and while pending
state:
  description: V(pending) while a wait goes on after its chunk (the action plugin calls again).
  type: str
  returned: while pending
progress:
  description: What a pending wait waits for, how long of its limit, and what it saw last.
  type: str
  returned: while pending
msg:
  description: In check mode, what V(remove), V(add) or V(wait_idle) would do.
  type: str
  returned: in check mode, when something would be done
found:
  description: Whether there is a drain record (V(record)).
  type: bool
  returned: for record
record:
  description: The record's mode, run_id and since (V(record)); its URLs matched the inventory's.
  type: dict
  returned: for record, when found
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kdtree.fleet.plugins.module_utils import _drain_record as drain_record
from ansible_collections.kdtree.fleet.plugins.module_utils import _http_client as http_client
from ansible_collections.kdtree.fleet.plugins.module_utils import _router as router
from ansible_collections.kdtree.fleet.plugins.module_utils._chunk import WAITED_OPTION, Chunk, ChunkOver

ACTIONS = ("workers", "check", "remove", "add", "wait_idle", "record")
ARGUMENT_SPEC = {
    "action": {"type": "str", "required": True, "choices": list(ACTIONS)},
    "router_url": {"type": "str", "default": ""},
    "router_kind": {"type": "str", "default": router.SGLANG_ROUTER, "choices": list(router.KINDS)},
    "api_key": {"type": "str", "default": "", "no_log": True},
    "worker_url": {"type": "str", "default": ""},
    "draining": {"type": "list", "elements": "str", "default": []},
    "out": {"type": "list", "elements": "str", "default": []},
    "max_share": {"type": "float", "default": 0.5},
    "request_timeout_s": {"type": "float", "default": 10},
    "wait_timeout_s": {"type": "float", "default": 60},
    "server_url": {"type": "str", "default": ""},
    "timeout_s": {"type": "float", "default": 300},
    "settle_s": {"type": "float", "default": 1},
    "force": {"type": "bool", "default": False},
    "record_path": {"type": "path", "default": ""},
    "rejoin_hooks": {"type": "bool", "default": False},
    "chunk_s": {"type": "float", "default": 10.0},
    # internal (the action plugin sets it between chunks; a task that sets it is refused)
    WAITED_OPTION: {"type": "float", "default": None},
    router.ASKED_OPTION: {"type": "bool", "default": None},
}


def chunk_of(p: dict, limit_s: float) -> Chunk:
    """This call's share of a wait of `limit_s` (what earlier calls waited is the internal option)."""
    return Chunk(limit_s, waited_s=p.get(WAITED_OPTION) or 0.0, chunk_s=p.get("chunk_s") or 0.0)


def continued(p: dict) -> bool:
    """Whether an earlier call started this wait (then its request is not sent again)."""
    return p.get(WAITED_OPTION) is not None


def pending(over: ChunkOver, what: str, changed: bool) -> tuple[dict, list[str]]:
    """The result of a call whose chunk ran out before its wait ended."""
    result = {"changed": changed, "state": "pending", "waited_s": round(over.waited_s, 3)}
    return {**result, "progress": over.progress(what)}, []


def wait_idle(p: dict, check_mode: bool, request) -> tuple[dict, list[str]]:
    """V(wait_idle): in check mode only say what would be waited for (nothing was removed)."""
    if not p["server_url"]:
        raise router.RouterError("wait_idle needs server_url")
    base = router.origin(p["server_url"], "SGLang server URL")
    if check_mode:
        msg = f"check mode: would wait up to {p['timeout_s']:g} s for no request in flight on {base}"
        return {"changed": False, "waited_s": 0.0, "msg": msg}, []
    try:
        result = router.wait_idle(
            base,
            p["timeout_s"],
            p["api_key"],
            settle_s=p["settle_s"],
            request=request,
            chunk=chunk_of(p, p["timeout_s"]),
        )
    except ChunkOver as over:
        return pending(over, f"no request in flight on {base}", changed=False)
    except router.InFlightTimeout as exc:
        if not p["force"]:
            raise
        return {"changed": False, "waited_s": p["timeout_s"]}, [f"kdtree drain: {exc}; going on (force)"]
    return {"changed": False, "waited_s": result["waited_s"]}, []


def record(p: dict) -> tuple[dict, list[str]]:
    """V(record): the drain record read safely and compared with the inventory's URLs."""
    if not p["record_path"] or not p["worker_url"]:
        raise router.RouterError("record needs record_path and worker_url")
    found = drain_record.read(p["record_path"])
    if found is None:
        return {"changed": False, "found": False}, []
    decided = drain_record.compare(
        p["record_path"], found, p["router_url"], p["worker_url"], p["rejoin_hooks"]
    )
    return {"changed": False, "found": True, "record": decided}, []


def remove(client: router.Router, p: dict, check_mode: bool) -> tuple[dict, list[str]]:
    """V(remove): NotListed (never a success) when the router does not list the worker."""
    if check_mode:
        found = client.listed(p["worker_url"])
        spelled = ", ".join(client.show(w)["url"] for w in found)
        msg = f"check mode: would remove {spelled} and wait up to {p['wait_timeout_s']:g} s for it to go"
        return {"changed": True, "worker": None, "msg": msg}, []
    if not continued(p):
        client.remove(p["worker_url"])
    try:
        client.wait_for(
            p["worker_url"],
            present=False,
            timeout_s=p["wait_timeout_s"],
            chunk=chunk_of(p, p["wait_timeout_s"]),
        )
    except ChunkOver as over:
        return pending(over, f"the router to drop {router.canonical(p['worker_url'])}", changed=True)
    return {"changed": True, "worker": None}, []


def add(client: router.Router, p: dict, check_mode: bool) -> tuple[dict, list[str]]:
    """V(add): nothing when the router lists the worker healthy already."""
    healthy = next((w for w in client.matching(p["worker_url"]) if w.healthy), None)
    if healthy is not None:
        return {"changed": False, "worker": client.show(healthy)}, []
    if check_mode:
        return {"changed": True, "worker": None, "msg": f"check mode: would add {p['worker_url']}"}, []
    try:
        worker = client.rejoin(
            p["worker_url"],
            p["wait_timeout_s"],
            chunk=chunk_of(p, p["wait_timeout_s"]),
            asked=bool(p.get(router.ASKED_OPTION)),
        )
    except ChunkOver as over:
        # changed: whether this wait asked the router yet (the next call must not ask again)
        what = f"the router to list {router.canonical(p['worker_url'])} healthy"
        return pending(over, what, changed=over.asked)
    return {"changed": True, "worker": client.show(worker) if worker else None}, []


def run(p: dict, check_mode: bool, request=http_client.request) -> tuple[dict, list[str]]:
    """The module's work apart from AnsibleModule: (result, warnings). RouterError."""
    action = p["action"]
    if action == "wait_idle":
        return wait_idle(p, check_mode, request)
    if action == "record":
        return record(p)
    if not p["router_url"]:
        raise router.RouterError(f"{action} needs router_url")
    client = router.Router(
        p["router_url"],
        p["api_key"],
        timeout_s=p["request_timeout_s"],
        request=request,
        kind=p["router_kind"],
    )
    if action == "workers":
        return {"changed": False, "workers": [client.show(w) for w in client.workers()]}, []
    if action == "check":
        workers = client.workers()
        if p["worker_url"]:  # the host about to drain: refused here, before its record is written
            client.listed(p["worker_url"], workers)
        counts = router.check_share(workers, p["draining"], p["max_share"], p["out"])
        return {"changed": False, "counts": counts, "workers": [client.show(w) for w in workers]}, []
    if not p["worker_url"]:
        raise router.RouterError(f"{action} needs worker_url")
    return remove(client, p, check_mode) if action == "remove" else add(client, p, check_mode)


def outcome(p: dict, check_mode: bool, request=http_client.request) -> tuple[bool, dict, list[str]]:
    """(failed, what exit_json or fail_json gets, warnings), every text in them redacted (the key,
    Authorization/Bearer values, user:password@; what the router echoed was scrubbed already)."""
    secrets = [p.get("api_key") or ""]
    try:
        result, warnings = run(p, check_mode, request)
    except router.InFlightTimeout as exc:
        failed, result, warnings = (
            True,
            {
                "msg": (
                    f"kdtree drain: in-flight requests did not finish: {exc}; the host was NOT restarted "
                    "(raise kdtree_drain_timeout_s, or set kdtree_drain_force=true to restart anyway)"
                )
            },
            [],
        )
    except router.DrainUnsafe as exc:
        failed, result, warnings = True, {"msg": f"kdtree drain: {exc}; nothing was drained"}, []
    except router.RouterError as exc:
        failed, result, warnings = True, {"msg": f"kdtree drain: {exc}"}, []
    else:
        failed = False
    return failed, router.redact_tree(result, secrets), [router.redact(w, secrets) for w in warnings]


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    failed, result, warnings = outcome(module.params, module.check_mode)
    for warning in warnings:
        module.warn(warning)
    if failed:
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
