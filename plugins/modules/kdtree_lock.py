#!/usr/bin/python
"""Take or release a host's kdtree lock (the thin Ansible side of module_utils/_lock)."""

from __future__ import annotations

# Ansible's module layout: documentation strings first, imports after them.
# ruff: noqa: E402

DOCUMENTATION = r"""
module: kdtree_lock
short_description: One kdtree deploy or rollback at a time on a host
description:
  - O(state=present) takes the host's lock for this run, O(state=absent) releases it. Deploy and
    rollback take it first and release it last (also when they fail).
  - The lock is a root-only JSON file created exclusively, naming its holder (O(run_id), O(owner),
    O(play), start time). A run that finds another run's lock fails before it changes anything, and
    the message names the holder and how long it has held the lock. Any content of the file (not
    JSON, odd values, a symlink, dangling or not) reads as a holder or a named problem, never a crash.
  - A lock left by a killed run is never taken over silently; break it with O(break_lock=true) once you
    know that run is gone (the playbooks' C(-e kdtree_lock_break=true)). Breaking is compare-and-swap,
    only a lock older than this run, and only the one it read; of several runs breaking at once one wins.
  - A failure of the module itself after it took the lock gives the lock back before it fails.
options:
  state:
    description: V(present) to take the lock, V(absent) to release it.
    type: str
    choices: [present, absent]
    default: present
  run_id:
    description: Identifies this playbook run; the lock is this run's when its run_id matches.
    type: str
    required: true
  owner:
    description: Who runs it (e.g. user@controller), shown to a run that finds the lock held.
    type: str
    default: ""
  play:
    description: What runs (the playbook or play name), shown to a run that finds the lock held.
    type: str
    default: ""
  break_lock:
    description: Replace a lock another run holds (report whose it was).
    type: bool
    default: false
  path:
    description: The lock file.
    type: path
    default: /var/lib/kdtree/lock.json
extends_documentation_fragment:
  - kdtree.fleet.attributes
attributes:
  check_mode:
    support: full
    details: In check mode a held lock still refuses the run; nothing is written.
  diff_mode:
    support: none
    details: The lock file is not configuration.
author: kdtree-fleet contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Take the host's lock
  kdtree.fleet.kdtree_lock:
    run_id: "{{ kdtree_lock_run_id }}"
    owner: "{{ lookup('ansible.builtin.env', 'USER') }}@{{ lookup('ansible.builtin.pipe', 'hostname') }}"
    play: deploy
    break_lock: "{{ kdtree_lock_break | default(false) }}"

- name: Release it
  kdtree.fleet.kdtree_lock:
    state: absent
    run_id: "{{ kdtree_lock_run_id }}"
"""

RETURN = r"""
broken:
  description: The lock that O(break_lock) replaced (its holder), or null.
  type: dict
  returned: when state is present
held_by:
  description: On release, the holder of a lock that was not this run's (left alone), or null.
  type: dict
  returned: when state is absent
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kdtree.fleet.plugins.module_utils import _lock as lock

HELD = (
    "kdtree: this host is locked by {holder}; nothing was changed. Wait for that run, or, if it is "
    "gone (killed, controller lost), rerun with -e kdtree_lock_break=true."
)


def run(params: dict, check_mode: bool, started: float) -> tuple[dict, list[str]]:
    """The module's work apart from AnsibleModule: (result, warnings). LockHeld, LockError."""
    if params["state"] == "absent":
        return lock.release(params["path"], params["run_id"], check_mode=check_mode), []
    holder = {"run_id": params["run_id"], "owner": params["owner"], "play": params["play"]}
    result = lock.acquire(
        params["path"], holder, break_lock=params["break_lock"], check_mode=check_mode, since=started
    )
    warnings = []
    if result["broken"]:
        warnings.append(f"kdtree: broke the lock of {lock.describe(result['broken'])} (kdtree_lock_break)")
    return result, warnings


def main() -> None:
    started = time.time()
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "run_id": {"type": "str", "required": True},
            "owner": {"type": "str", "default": ""},
            "play": {"type": "str", "default": ""},
            "break_lock": {"type": "bool", "default": False},
            "path": {"type": "path", "default": lock.DEFAULT_PATH},
        },
        supports_check_mode=True,
    )
    p = module.params
    taking = p["state"] == "present" and not module.check_mode
    try:
        result, warnings = run(p, module.check_mode, started)
    except lock.LockHeld as exc:
        module.fail_json(msg=HELD.format(holder=exc), holder=exc.holder)
    except lock.LockError as exc:
        module.fail_json(msg=f"kdtree: {exc}")
    except Exception as exc:  # never leave a lock this run took behind a traceback: give it back
        released = ""
        if taking:
            try:
                lock.release(p["path"], p["run_id"], check_mode=False)
                released = "; this run's lock, if it took it, was released"
            except Exception as again:  # the failure below says both
                released = f"; releasing this run's lock failed too ({type(again).__name__}: {again})"
        module.fail_json(msg=f"kdtree: the lock module failed ({type(exc).__name__}: {exc}){released}")
    for warning in warnings:
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
