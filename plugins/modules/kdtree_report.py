#!/usr/bin/python
"""Report what a host runs now: unit, health, deploy history, the patch's status files (read-only).

The thin Ansible side of module_utils/_report.py: gather() reads the host, main() only wraps it.
"""

from __future__ import annotations

# Ansible's module layout: documentation strings first, imports after them.
# ruff: noqa: E402

DOCUMENTATION = r"""
module: kdtree_report
short_description: Report the kdtree state of one SGLang host without changing anything
version_added: 0.3.0
description:
  - Reads, and never writes, what a host runs now and returns it as one row (RV(row)) for the fleet
    report (C(playbooks/report.yml), role C(kdtree.fleet.kdtree_report)).
  - "The unit: C(systemctl show) C(ActiveState), C(SubState), C(MainPID), C(ExecMainStartTimestamp),
    C(ControlGroup) (15 s timeout)."
  - "Health: a GET of O(health_url) (2 s timeout), V(ok) for 200, else the code or the error; a 200
    from a process outside the unit's cgroup is named. On a multi-node host of C(--node-rank) > 0
    C(/health) is a dummy: its schedulers decide, not its health."
  - "The deploy history (O(history_path), read with the format's one reader): the entry that
    describes what runs now (build id, patch digest, mode, expected schedulers, NCCL values, status
    directory), the newest deploy (result, why, when) and the last good one."
  - "The patch's status files C(<status_dir>/<pid>.json) of the unit's live processes (the unit's
    cgroup): schedulers patched (state as the history's marker state), kernel calls, calls that went
    to the original code and their top reason, runtime fallbacks, validate mismatches / compared /
    largest difference. Every field of a file is optional (files of older patches have no counters:
    the sums are then null). A file whose pid is not a live process of the unit, or that is older
    than its process, is stale: ignored and counted."
  - "NCCL: the history's templated C(NCCL_*) values compared with the unit's main process's
    C(/proc/PID/environ)."
  - "GPU: the arch and compute capability of the history's build (its C(BUILD_INFO)), else the
    first GPU C(nvidia-smi) lists (10 s timeout) when it is installed."
  - "GPU health, with O(gpu_check): every GPU C(nvidia-smi) lists, judged as the preflight's V(gpu) check
    judges it before a restart (module C(kdtree.fleet.kdtree_preflight)): the GPU count against the
    history's expected schedulers, uncorrectable ECC errors, row remapping or page retirement pending,
    persistence mode, free memory (the unit's own processes' memory counted as free) against
    O(gpu_min_free_mib). Each problem is one of RV(row.problems), prefixed C(gpu:); an nvidia-smi that is
    missing or does not parse is a problem too."
  - What cannot be read is reported in RV(row.errors) and never fails the module.
author: kdtree-fleet contributors (!UNKNOWN)
extends_documentation_fragment:
  - kdtree.fleet.attributes
  - kdtree.fleet.attributes.read_only
  - kdtree.fleet.unit
attributes:
  platform:
    details: Linux hosts with systemd and C(/proc); run as root to read the history and
      C(/proc/PID/environ).
options:
  host:
    description: The name the row carries (the role passes C(inventory_hostname)).
    type: str
    default: ""
  health_url:
    description: The health endpoint; empty reads none.
    type: str
    default: ""
  status_dir:
    description:
      - The unit's C(KDTREE_STATUS_DIR) (C(/run/kdtree-<unit>)). Empty takes the one the history's
        current entry records.
    type: path
    default: ""
  history_path:
    description: The deploy history file.
    type: path
    default: /var/lib/kdtree/state.json
  nvidia_smi:
    description: nvidia-smi, asked for the compute capability when the history's build does not say it.
    type: str
    default: nvidia-smi
  gpu_check:
    description:
      - Read and judge the GPU health (the role passes true unless the preflight's V(gpu) check is off).
    type: bool
    default: false
  gpu_min_free_mib:
    description:
      - With O(gpu_check), the least free memory per GPU in MiB (the role passes
        kdtree_service_gpu_min_free_mib).
    type: int
    default: 0
"""

EXAMPLES = r"""
- name: What runs on this host
  kdtree.fleet.kdtree_report:
    unit: sglang
    host: "{{ inventory_hostname }}"
    health_url: http://127.0.0.1:30000/health
    status_dir: /run/kdtree-sglang
  register: __report

- name: One table line per host (on the controller)
  ansible.builtin.debug:
    msg: "{{ [__report.row] | kdtree.fleet.kdtree_report_table }}"
"""

RETURN = r"""
row:
  description:
    - What the host runs now. Sums over status files are null when no live file has the field.
  type: dict
  returned: always
  contains:
    host:
      description: O(host).
      type: str
    unit_state:
      description: ActiveState/SubState, or C(unknown) when systemctl could not say.
      type: str
    main_pid:
      description: MainPID (0 when none).
      type: int
    started:
      description: ExecMainStartTimestamp.
      type: str
    health:
      description: V(ok), the HTTP code, C(refused) or C(down (reason)); empty without O(health_url).
      type: str
    node_rank:
      description: C(--node-rank) of the main process's command line (0 when absent).
      type: int
    speculative_algorithm:
      description:
        - C(--speculative-algorithm) of the main process's command line; empty when that line is an
          SGLang launch without it (no speculative decoding, so no verify calls); null when the line
          cannot say (unreadable, not an SGLang launch, or a C(--config) file).
      type: str
    arch:
      description: The build's arch (sm_120a); empty when unknown.
      type: str
    compute_capability:
      description: The GPU's compute capability (12.0); empty when unknown.
      type: str
    deployed:
      description: Whether the history says kdtree is deployed now.
      type: bool
    build_id:
      description: The current entry's build id.
      type: str
    running_build_ids:
      description: Build ids the live schedulers' status files name (new patches only).
      type: list
    patch_digest:
      description: The current entry's patch digest, first 12 characters.
      type: str
    mode:
      description: The current entry's mode; C(stock) when kdtree was removed.
      type: str
    marker_state:
      description: The state a patched scheduler reports (active, or off in mode off).
      type: str
    schedulers_running:
      description: Processes of the unit titled O(scheduler_prefix).
      type: int
    schedulers_patched:
      description: Live schedulers whose status file reports RV(row.marker_state).
      type: int
    schedulers_expected:
      description: The history's expected schedulers (null when unknown).
      type: int
    status_files:
      description: Live status files read.
      type: int
    status_files_stale:
      description: Status files ignored (not a live process of the unit, or unreadable).
      type: int
    kernel_calls:
      description: Sum of counters.kernel_calls_device (the library's count on the device, CUDA graph
        replays included) where a status file has it, else of counters.kernel_calls.
      type: int
    kernel_calls_why:
      description:
        - Why RV(row.kernel_calls) is 0, in a few words (the table's KERNEL cell), first that holds -
          C(mode off), C(no spec decoding) (RV(row.speculative_algorithm) is empty), C(no traffic yet)
          (no call of any kind reached the patch), C(all to original); empty when the count is not 0,
          unknown, or none of these explains it.
      type: str
    kernel_calls_note:
      description: The same as a sentence.
      type: str
    fallbacks:
      description: Sum of counters.original_calls (calls that went to the original code).
      type: int
    fallbacks_by_reason:
      description: The same per reason.
      type: dict
    fallback_top_reason:
      description: The reason with the most original calls.
      type: str
    runtime_fallbacks:
      description: Sum of counters.runtime_fallbacks (older files, 1 per runtime_fallback).
      type: int
    runtime_fallback_reason:
      description: The first runtime fallback's reason.
      type: str
    validate_compared:
      description: Sum of validate.compared.
      type: int
    validate_mismatches:
      description: Sum of validate.mismatches.
      type: int
    validate_max_diff:
      description: Largest validate.max_diff.
      type: float
    nccl_env_ok:
      description: The history's NCCL values are all in the main process's environ (null when unreadable).
      type: bool
    nccl_env_diff:
      description: The templated NCCL variables that differ, with the value found.
      type: dict
    schedulers:
      description:
        - One item per live scheduler status file, by pid - pid, title, mode, state, process_start
          (epoch s of the process, null when unreadable), since and updated (the file's epoch s),
          compared, mismatches, max_diff (its validate statistics) and runtime_fallbacks; null where
          the file has no such field. The promotion (C(playbooks/promote.yml)) judges these.
        - And what its line of the table shows - kernel_calls with kernel_calls_why and
          kernel_calls_note (as the row's, for this scheduler's own counts), fallbacks and
          fallback_top_reason.
      type: list
      elements: dict
    current_deploy:
      description:
        - "The history entry that describes what runs now (null when none): id, result,
          rolled_back_to, why (short), when, started, build_id."
      type: dict
    last_deploy:
      description: "The newest deploy: id, result, rolled_back_to, why (short), when, started, build_id."
      type: dict
    last_good:
      description: The newest healthy entry (same keys).
      type: dict
    gpu_health:
      description:
        - With O(gpu_check), the GPU health (C(checked) false without it) - ok, expected, count, min_free_mib,
          problems and per GPU index, uuid, persistence, ecc_uncorrected (null when not reported),
          remapped_pending, retired_pending, memory_total_mib, memory_free_mib, memory_unit_mib, problems.
      type: dict
    errors:
      description: What could not be read.
      type: list
    problems:
      description: What an operator should look at (empty when nothing).
      type: list
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kdtree.fleet.plugins.module_utils import (
    _history as history,
)
from ansible_collections.kdtree.fleet.plugins.module_utils import (
    _report as report,
)
from ansible_collections.kdtree.fleet.plugins.module_utils import (
    _unit_procs as unit_procs,
)

ARGUMENT_SPEC = {
    "unit": {"type": "str", "required": True},
    "host": {"type": "str", "default": ""},
    "health_url": {"type": "str", "default": ""},
    "status_dir": {"type": "path", "default": ""},
    "history_path": {"type": "path", "default": history.DEFAULT_PATH},
    "scheduler_prefix": {"type": "str", "default": unit_procs.SCHEDULER_PREFIX},
    "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
    "gpu_check": {"type": "bool", "default": False},
    "gpu_min_free_mib": {"type": "int", "default": 0},
}
# the options that are not text
TYPED = ("gpu_check", "gpu_min_free_mib")


def run(params: dict, reader: report.HostReader | None = None) -> dict:
    """The module's work, apart from AnsibleModule (tests call this)."""
    query = report.Query(
        **{key: params[key] or "" for key in ARGUMENT_SPEC if key not in TYPED},
        gpu_check=bool(params.get("gpu_check")),
        gpu_min_free_mib=int(params.get("gpu_min_free_mib") or 0),
    )
    return {"changed": False, "row": report.gather(query, reader)}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run(module.params))


if __name__ == "__main__":
    main()
