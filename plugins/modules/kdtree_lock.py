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
    the message names the holder and how long it has held the lock.
  - A lock left by a killed run is never taken over silently; break it with O(break_lock=true) once you
    know that run is gone (the playbooks' C(-e kdtree_lock_break=true)).
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

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kdtree.fleet.plugins.module_utils import _lock as lock


def main() -> None:
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
    try:
        if p["state"] == "absent":
            module.exit_json(**lock.release(p["path"], p["run_id"], check_mode=module.check_mode))
        holder = {"run_id": p["run_id"], "owner": p["owner"], "play": p["play"]}
        result = lock.acquire(p["path"], holder, break_lock=p["break_lock"], check_mode=module.check_mode)
    except lock.LockHeld as exc:
        module.fail_json(
            msg=f"kdtree: this host is locked by {exc}; nothing was changed. Wait for that run, or, if it is "
            "gone (killed, controller lost), rerun with -e kdtree_lock_break=true.",
            holder=exc.holder,
        )
    except OSError as exc:
        module.fail_json(msg=f"kdtree: cannot take the lock {p['path']}: {exc}")
    if result["broken"]:
        module.warn(f"kdtree: broke the lock of {lock.describe(result['broken'])} (kdtree_lock_break)")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
