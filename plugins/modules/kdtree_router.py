#!/usr/bin/python
"""Take a host out of SGLang's router and put it back, check the drain's safety rule, wait for the
host's in-flight requests (the thin Ansible side of module_utils/_router)."""

from __future__ import annotations

# Ansible's module layout: documentation strings first, imports after them.
# ruff: noqa: E402

DOCUMENTATION = r"""
module: kdtree_router
short_description: Drain a host from SGLang's router and rejoin it
description:
  - Talks to SGLang's router (sglang-router 0.3.2, its worker API C(GET /workers), C(POST /workers),
    C(DELETE /workers/{id})) and to the host's own SGLang (C(GET /v1/loads)). The role
    kdtree.fleet.kdtree_drain calls it around every restart the collection makes.
  - O(action=check) refuses (fails) when removing O(draining) would take more than O(max_share) of the
    router's healthy workers out at once, or leave it none. Changes nothing.
  - O(action=remove) asks the router to remove O(worker_url) and waits until C(GET /workers) no
    longer lists it (the router queues the change); O(action=add) asks it to add the worker and waits
    until it is listed healthy. Both within O(wait_timeout_s), a failure naming what was last seen.
  - O(action=wait_idle) runs on the host and waits until its SGLang at O(server_url) has had no request
    running or waiting for O(settle_s) on end; when O(timeout_s) runs out that is a failure with its own
    message, unless O(force=true) (a warning, and the restart goes on).
  - The API key is sent as a Bearer token and never appears in a result, a message or a log.
options:
  action:
    description: What to do.
    type: str
    required: true
    choices: [workers, check, remove, add, wait_idle]
  router_url:
    description: The router's base URL (every action but V(wait_idle)).
    type: str
    default: ""
  api_key:
    description: The router's API key (also sent to the host's SGLang by V(wait_idle)); may be empty.
    type: str
    default: ""
  worker_url:
    description: The host's worker URL as the router knows it (V(remove), V(add)).
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
    description: The host's SGLang base URL as the host reaches it (V(wait_idle)).
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
extends_documentation_fragment:
  - kdtree.fleet.attributes
attributes:
  check_mode:
    support: full
    details: >-
      V(workers), V(check) and V(wait_idle) only read and run as usual; V(remove) and V(add) say what
      they would do.
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
  description: The router's workers (V(workers), V(check)), each with id, url, healthy and load.
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
  description: Seconds V(wait_idle) waited.
  type: float
  returned: for wait_idle
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kdtree.fleet.plugins.module_utils import _router as router

ACTIONS = ("workers", "check", "remove", "add", "wait_idle")


def run(p: dict, check_mode: bool) -> tuple[dict, list[str]]:
    """The module's work apart from AnsibleModule: (result, warnings). RouterError."""
    action = p["action"]
    if action == "wait_idle":
        if not p["server_url"]:
            raise router.RouterError("wait_idle needs server_url")
        try:
            result = router.wait_idle(p["server_url"], p["timeout_s"], p["api_key"], settle_s=p["settle_s"])
        except router.InFlightTimeout as exc:
            if not p["force"]:
                raise
            return {"changed": False, "waited_s": p["timeout_s"]}, [f"kdtree drain: {exc}; going on (force)"]
        return {"changed": False, "waited_s": result["waited_s"]}, []
    if not p["router_url"]:
        raise router.RouterError(f"{action} needs router_url")
    client = router.Router(p["router_url"], p["api_key"], timeout_s=p["request_timeout_s"])
    if action == "workers":
        return {"changed": False, "workers": [w.as_dict() for w in client.workers()]}, []
    if action == "check":
        workers = client.workers()
        counts = router.check_share(workers, p["draining"], p["max_share"], p["out"])
        return {"changed": False, "counts": counts, "workers": [w.as_dict() for w in workers]}, []
    if not p["worker_url"]:
        raise router.RouterError(f"{action} needs worker_url")
    listed = client.find(p["worker_url"])
    if action == "remove":
        if listed is None:
            return {"changed": False, "worker": None}, []
        if not check_mode:
            client.remove(p["worker_url"])
            client.wait_for(p["worker_url"], present=False, timeout_s=p["wait_timeout_s"])
        return {"changed": True, "worker": None}, []
    if listed is not None and listed.healthy:
        return {"changed": False, "worker": listed.as_dict()}, []
    if check_mode:
        return {"changed": True, "worker": None}, []
    if listed is None:
        client.add(p["worker_url"])
    worker = client.wait_for(p["worker_url"], present=True, timeout_s=p["wait_timeout_s"])
    return {"changed": True, "worker": worker.as_dict() if worker else None}, []


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "required": True, "choices": list(ACTIONS)},
            "router_url": {"type": "str", "default": ""},
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
        },
        supports_check_mode=True,
    )
    try:
        result, warnings = run(module.params, module.check_mode)
    except router.InFlightTimeout as exc:
        module.fail_json(
            msg=f"kdtree drain: in-flight requests did not finish: {exc}; the host was NOT restarted "
            "(raise kdtree_drain_timeout_s, or set kdtree_drain_force=true to restart anyway)"
        )
    except router.DrainUnsafe as exc:
        module.fail_json(msg=f"kdtree drain: {exc}; nothing was drained")
    except router.RouterError as exc:
        module.fail_json(msg=f"kdtree drain: {exc}")
    for warning in warnings:
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
