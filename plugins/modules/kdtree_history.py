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
  - O(action=read) changes nothing. O(action=begin) adds a V(running) entry; O(action=finish) ends one,
    each under an exclusive lock of the history's directory (concurrent writers lose no entry).
    The file keeps O(keep) entries, and always the last good one.
  - Every call refuses a history whose directory (or a parent) is not owned by root, is writable by
    group or others (a root-owned sticky parent excepted) or is a symlink, like the build root.
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
        mode, marker_state, expected_schedulers, node_rank, nccl_env, dropin_path, dropin,
        exec_start_replaced, restored_from, dropin_fields). Other keys are ignored.
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
  decode:
    description:
      - For O(action=finish), what the deploy did to decode, as the smoke check measured it (the
        C(decode) of M(kdtree.fleet.kdtree_smoke)'s C(traffic) result; module_utils/_decode.py
        defines the figures), recorded under the entry's C(decode).
      - A figure that is not a finite number of at least 0 (or null) is refused before anything is
        written. With O(result=rolled_back) (the deploy's rescue passes what the failed deploy's smoke
        traffic measured) the entry still ends, without the figures and with why under C(decode_refused).
        Omitted, the entry records no figures, like entries written before they existed.
    type: dict
  bake:
    description:
      - For O(action=finish), the verdict of the bake between batches (kdtree_deploy's bake, docs/bake.md;
        module_utils/_bake_record.py defines it), recorded under the entry's C(bake) - C(verdict),
        C(message), C(reference_hosts) and the C(baked) and C(reference) figures.
      - An odd record is refused before anything is written; with O(result=rolled_back) the entry still
        ends, without it and with why under C(bake_refused).
    type: dict
  keep:
    description: Entries kept in the file (the last good one is always kept).
    type: int
    default: 20
  textfile:
    description:
      - A Prometheus textfile for node-exporter's textfile collector, rewritten (atomically, 0644) on
        every O(action=begin) and O(action=finish) after the history, saying when the newest deploy
        and newest rollback ended, C(kdtree_fleet_change_timestamp_seconds{action,result,build_id,mode})
        (module_utils/_change_metrics.py). The dashboard's deploy and rollback annotations read it.
      - Its directory is created 0755 when missing and refused like the history's when it is not
        root-owned or is writable by group or others. V("") writes none.
      - Omitted, C(/var/lib/kdtree-metrics/kdtree_changes.prom) for the host's own history (the default
        O(path)), none for a history at another path.
    type: path
  restore:
    description:
      - Check the last good deploy's recorded drop-in fields for a C(previous) rollback
        (RV(last_good_fields), RV(last_good_refusal)); its stored drop-in text is never used.
    type: dict
    suboptions:
      build_root:
        description:
          - The build root; the library must be C(<build_root>/builds/<build_id>/libkdtree_verify.so).
        type: path
        required: true
      patch_root:
        description: The patch root; the patch directory must be a directory right under it.
        type: path
        required: true
      status_dir:
        description: The status directory the drop-in must set (KDTREE_STATUS_DIR).
        type: path
        required: true
      extra_keys:
        description:
          - Environment variables beyond kdtree's own and NCCL_* that the drop-in may set
            (kdtree_service_env_extra).
        type: list
        elements: str
        default: []
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
last_good_fields:
  description:
    - With O(restore), the last good deploy's checked drop-in fields (env, argv, secret_names); null
      when refused or none.
  type: dict
  returned: when restore is set
last_good_refusal:
  description:
    - With O(restore), why the last good deploy cannot be put back; empty when it can (or there is none).
  type: str
  returned: when restore is set
referenced:
  description: The build ids and patch directories the kept entries name (the roles never prune them).
  type: dict
  returned: always
  sample: {build_ids: [sm_120a-1a2b3c4d5e6f], patch_dirs: [/opt/kdtree/patches/0123456789abcdef]}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kdtree.fleet.plugins.module_utils import _history as history
from ansible_collections.kdtree.fleet.plugins.module_utils._history_call import run


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
            "decode": {"type": "dict"},
            "bake": {"type": "dict"},
            "keep": {"type": "int", "default": history.DEFAULT_KEEP},
            "textfile": {"type": "path"},
            "restore": {
                "type": "dict",
                "options": {
                    "build_root": {"type": "path", "required": True},
                    "patch_root": {"type": "path", "required": True},
                    "status_dir": {"type": "path", "required": True},
                    "extra_keys": {"type": "list", "elements": "str", "default": [], "no_log": False},
                },
            },
        },
        required_if=[("action", "finish", ("id", "result"))],
        supports_check_mode=True,
    )
    try:
        module.exit_json(**run(module.params, module.check_mode))
    except (history.HistoryError, OSError, ValueError) as exc:
        module.fail_json(msg=f"kdtree_history: {exc}")


if __name__ == "__main__":
    main()
