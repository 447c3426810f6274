#!/usr/bin/python
"""Meet the other hosts of this run on the controller (the documentation of the action plugin of the
same name, which does the work on the controller: plugins/action/kdtree_rendezvous.py; the store is
plugins/plugin_utils/_rendezvous.py)."""

from __future__ import annotations

# Ansible's module layout: documentation strings first, imports after them.
# ruff: noqa: E402

DOCUMENTATION = r"""
module: kdtree_rendezvous
short_description: Post this host's word for a phase and wait for the other members' words
description:
  - Runs on the controller only (its action plugin); nothing is sent to the host. Hosts of one playbook
    run meet under a O(name); each member posts O(state) (and O(data)) for a O(phase), then waits until
    every one of O(members) posted to that phase, one of them posted V(failed) (to the phase, or to the
    phase V(abort), which ends every wait of the rendezvous), or O(timeout_s) passed. A member with no
    word by the end counts as failed.
  - Works under any play strategy (V(free) included), where one host cannot wait on another's facts.
  - The words live in a directory of the controller user's under the temporary directory, one per
    playbook run, created mode 0700 and checked (owner, mode, no links) before every read and write; a
    word another user could have placed is refused. Directories of runs that ended are removed.
  - The kdtree roles use it for serving groups (the nodes of one server restart and roll back together)
    and for batches (a bake that fails rolls the batch back).
options:
  name:
    description: The rendezvous, the same for every member (a serving group's or a batch's name).
    type: str
    required: true
  phase:
    description: The step met at (V(ready), V(stopped), V(verdict) ...); V(abort) ends every wait of O(name).
    type: str
    required: true
  members:
    description: The inventory hostnames whose words are awaited (this host among them, or not).
    type: list
    elements: str
    required: true
  state:
    description: This host's word. Left out, the task only waits (a member that reads another's decision).
    type: str
    choices: [ok, failed]
  data:
    description: A small JSON record posted with the word (at most 64 KiB), returned to every member.
    type: raw
  timeout_s:
    description: The longest wait, in seconds. V(0) posts and reads once, without waiting.
    type: float
    default: 600
  progress_s:
    description: Seconds between the lines saying who is still awaited while the task waits.
    type: float
    default: 30
extends_documentation_fragment:
  - kdtree.fleet.attributes
attributes:
  check_mode:
    support: full
    details: It changes nothing on any host; its words are written on the controller in check mode too.
  diff_mode:
    support: none
    details: Nothing to show.
author: kdtree-fleet contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Wait until every node of the serving group is ready to restart
  kdtree.fleet.kdtree_rendezvous:
    name: "group-{{ kdtree_group_name }}"
    phase: ready
    members: "{{ kdtree_group_members }}"
    state: ok
    data: {rank: 0}
    timeout_s: 900
  register: __ready
"""

RETURN = r"""
ok:
  description: Every member posted V(ok) to the phase in time.
  type: bool
  returned: always
posts:
  description: Each member's word that came in, by host, as C({state, data}).
  type: dict
  returned: always
failed_members:
  description:
    - The members that posted V(failed) (to the phase or to V(abort)), or, at the timeout, those with no word.
  type: list
  elements: str
  returned: always
missing:
  description: The members with no word for the phase when the wait ended.
  type: list
  elements: str
  returned: always
waited_s:
  description: Seconds the task waited.
  type: float
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

ARGUMENT_SPEC = {
    "name": {"type": "str", "required": True},
    "phase": {"type": "str", "required": True},
    "members": {"type": "list", "elements": "str", "required": True},
    "state": {"type": "str", "choices": ["ok", "failed"]},
    "data": {"type": "raw"},
    "timeout_s": {"type": "float", "default": 600.0},
    "progress_s": {"type": "float", "default": 30.0},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg="kdtree_rendezvous runs on the controller through its action plugin only")


if __name__ == "__main__":
    main()
