#!/usr/bin/python
"""Read and write a host's kdtree deploy history (the thin Ansible side of module_utils/_history)."""

from __future__ import annotations

# Ansible's module layout: documentation strings first, imports after them.
# ruff: noqa: E402

DOCUMENTATION = r"""
module: kdtree_history
short_description: Read and write a host's kdtree deploy history
description:
  - Keeps the history of kdtree deploys on a host in one root-owned JSON file (mode 0600, written
    atomically). For each deploy it holds the build id, library, patch directory and digest, verify
    mode, the full text and digest of the drop-in it installed, start and end time, and its result
    (V(running), V(healthy), V(rolled_back) with why and to what, V(removed)).
  - The newest V(healthy) entry whose drop-in differs from the live one is the host's B(last good),
    what C(kdtree_rollback_to=previous) puts back.
  - O(action=read) changes nothing. O(action=begin) adds a V(running) entry; O(action=finish) ends one.
    The file keeps O(keep) entries, and always the last good one.
options:
  action:
    description: V(read) the history, V(begin) a deploy, or V(finish) one.
    type: str
    choices: [read, begin, finish]
    default: read
  path:
    description: The history file.
    type: path
    default: /var/lib/kdtree/state.json
  dropin_path:
    description:
      - The kdtree drop-in as installed on the host. When it exists, its digest is returned as
        RV(live_dropin_digest) and RV(last_good) is the newest healthy entry with a different drop-in.
    type: path
  unlike_digest:
    description:
      - A drop-in digest RV(last_good) must differ from, instead of the live drop-in's (the deploy's
        rescue passes the digest of the drop-in that just failed, which it has removed already).
    type: str
    default: ""
  record:
    description:
      - For O(action=begin), what the deploy installs (build_id, lib_path, patch_dir, patch_digest,
        mode, marker_state, expected_schedulers, nccl_env, dropin_path, dropin, exec_start_replaced,
        restored_from). Other keys are ignored.
    type: dict
    default: {}
  id:
    description: For O(action=finish), the entry to end (RV(entry.id) of its begin).
    type: str
  result:
    description: For O(action=finish), how the deploy ended.
    type: str
    choices: [healthy, rolled_back, removed]
  why:
    description: For O(action=finish), why it ended so (a failure, the rollback target).
    type: str
    default: ""
  rolled_back_to:
    description: For O(action=finish) with O(result=rolled_back), V(previous) or V(stock) (and the entry id).
    type: str
    default: ""
  keep:
    description: Entries kept in the file (the last good one is always kept).
    type: int
    default: 20
extends_documentation_fragment:
  - kdtree.fleet.attributes
attributes:
  check_mode:
    support: full
    details: In check mode begin and finish report the entry they would write and write nothing.
  diff_mode:
    support: none
    details: The file is a log, not configuration.
author: kdtree-fleet contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: What was deployed here, and the last good deploy
  kdtree.fleet.kdtree_history:
    dropin_path: /etc/systemd/system/sglang.service.d/50-kdtree.conf
  register: __history

- name: Start a deploy's entry
  kdtree.fleet.kdtree_history:
    action: begin
    record: {build_id: sm_120a-1a2b3c, mode: validate, dropin: "{{ lookup('file', 'dropin.conf') }}"}
  register: __entry

- name: End it
  kdtree.fleet.kdtree_history:
    action: finish
    id: "{{ __entry.entry.id }}"
    result: healthy
"""

RETURN = r"""
entries:
  description: The history after this call, oldest first.
  type: list
  elements: dict
  returned: always
entry:
  description: The entry begun or finished.
  type: dict
  returned: when action is begin or finish
  contains:
    id:
      description: The entry's id; a later call passes it as O(id) with O(action=finish).
      type: str
      sample: 20261130T120000Z-1a2b3c
last_good:
  description: The newest healthy entry whose drop-in differs from the live one; null when none.
  type: dict
  returned: always
live_dropin_digest:
  description: sha256 of the live drop-in; empty when O(dropin_path) is unset or the file is absent.
  type: str
  returned: always
referenced:
  description: The build ids and patch directories the kept entries name (the roles never prune them).
  type: dict
  returned: always
  sample: {build_ids: [sm_120a-1a2b3c4d5e6f], patch_dirs: [/opt/kdtree/patches/0123456789abcdef]}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kdtree.fleet.plugins.module_utils import _history as history


def _live_digest(path: str | None) -> str:
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8") as handle:
            return history.digest(handle.read())
    except FileNotFoundError:
        return ""


def run(params: dict, check_mode: bool) -> dict:
    """The module's work, apart from AnsibleModule (tests call this)."""
    path = params["path"]
    entries = history.load(path)
    live = _live_digest(params.get("dropin_path"))
    out: dict = {"changed": False}
    action = params["action"]
    if action == "begin":
        out["entry"] = history.begin(entries, params["record"] or {})
        out["changed"] = True
    elif action == "finish":
        if not params.get("id") or not params.get("result"):
            raise history.HistoryError("action=finish needs id and result")
        extra = {"rolled_back_to": params["rolled_back_to"]} if params["rolled_back_to"] else {}
        if check_mode and params["id"] not in {e.get("id") for e in entries}:
            out["entry"] = {"id": params["id"], "result": params["result"], "why": params["why"], **extra}
        else:
            out["entry"] = history.finish(entries, params["id"], params["result"], params["why"], **extra)
        out["changed"] = True
    entries = history.trim(entries, params["keep"])
    if out["changed"] and not check_mode:
        history.save(path, entries)
    out.update(
        entries=entries,
        last_good=history.last_good(entries, params.get("unlike_digest") or live),
        live_dropin_digest=live,
        referenced=history.referenced(entries),
    )
    return out


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "choices": ["read", "begin", "finish"], "default": "read"},
            "path": {"type": "path", "default": history.DEFAULT_PATH},
            "dropin_path": {"type": "path"},
            "unlike_digest": {"type": "str", "default": ""},
            "record": {"type": "dict", "default": {}},
            "id": {"type": "str"},
            "result": {"type": "str", "choices": ["healthy", "rolled_back", "removed"]},
            "why": {"type": "str", "default": ""},
            "rolled_back_to": {"type": "str", "default": ""},
            "keep": {"type": "int", "default": history.DEFAULT_KEEP},
        },
        required_if=[("action", "finish", ("id", "result"))],
        supports_check_mode=True,
    )
    try:
        module.exit_json(**run(module.params, module.check_mode))
    except (history.HistoryError, OSError) as exc:
        module.fail_json(msg=f"kdtree_history: {exc}")


if __name__ == "__main__":
    main()
