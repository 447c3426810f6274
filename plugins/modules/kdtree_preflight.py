#!/usr/bin/python
"""Check an SGLang unit, as systemd merges it, before kdtree changes anything about it."""

from __future__ import annotations

# Ansible's module layout: documentation strings first, imports after them.
# ruff: noqa: E402

DOCUMENTATION = r"""
module: kdtree_preflight
short_description: Check that a kdtree drop-in would work on an SGLang unit, before changing it
description:
  - Reads the unit as systemd merges it (C(systemctl show) and the unit file and every drop-in it
    lists, leaving out kdtree's own drop-in) and runs these checks, each of which names the file and
    line to change and how when it fails.
  - V(command) ExecStart runs python (directly or through a python shebang) with SGLang's launcher.
  - V(interpreter) that python honours PYTHONPATH (no C(-I), C(-E) or C(-S)).
  - V(backend) C(--attention-backend) is the backend the patch serves, or absent where SGLang's
    default for the compute capability is that backend.
  - V(stderr) stderr reaches the journal (the deploy reads the markers and any traceback there).
  - V(overrides) no drop-in sorting after kdtree's, no C(EnvironmentFile=) and no C(UnsetEnvironment=)
    (in any file; systemd applies it last) overrides a variable kdtree sets.
  - V(sglang) the venv's installed SGLang version is in the patch's supported window (the installed
    patch's C(kdtree_verify/target.py) says which); read from the venv's C(sglang-*.dist-info/METADATA),
    the unit's python is never run for it. O(allow_untested_sglang) lets a release outside it through
    in mode V(validate) only.
  - V(probe) C(python -m kdtree_verify.probe) run through C(systemd-run) as the unit's C(User=) and
    C(Group=), in its C(WorkingDirectory=), with the unit's merged environment plus O(probe_env), says a
    spawned child would be patched (runs only when every other check passed). A unit without C(User=)
    runs as root, and so would the probe; it refuses unless the interpreter, the venv, its .pth files,
    the working directory and every PYTHONPATH entry are root's alone; C(DynamicUser=yes) is refused. When
    the library in O(probe_env)'s C(KDTREE_LIB) does not exist yet (the deploy builds it after the
    preflight), the probe runs without it and accepts a child patched up to the library (state
    fallback with target.py's C(NO_LIBRARY_REASON)).
  - V(gpu) the node's GPUs would not fail a restart, read with O(nvidia_smi) (C(--query-gpu) and
    C(--query-compute-apps)) - at least as many GPUs as this node's share of the schedulers, no
    uncorrectable ECC error since the driver loaded, no row remapping or page retirement pending,
    persistence mode on, at least O(gpu_min_free_mib) MiB free on each GPU once the unit's own processes
    stop. A missing nvidia-smi or an answer that does not parse refuses; a field the GPU does not report
    (C([N/A])) refuses nothing. The failed check names each GPU's index, UUID and reason.
  - Reads only; changes nothing.
options:
  dropin_name:
    description: File name of kdtree's drop-in (left out of the merge; later drop-ins are compared to it).
    type: str
    required: true
  managed_vars:
    description: The variables kdtree's drop-in sets (no other setting may override them).
    type: list
    elements: str
    default: []
  exec_start:
    description: The argv kdtree's drop-in puts in ExecStart when it replaces it; empty = the unit's own.
    type: list
    elements: str
    default: []
  compute_capability:
    description: The GPU's compute capability (e.g. V(12.0)); decides SGLang's default backend.
    type: str
    default: ""
  patch_dir:
    description:
      - The patch directory (its C(kdtree_verify/target.py); the probe's PYTHONPATH). The deploy passes a
        scratch copy when the version is not installed yet.
    type: path
    required: true
  probe_env:
    description: What kdtree's drop-in adds to the environment (PYTHONPATH, KDTREE_*, NCCL_*), for the probe.
    type: dict
    default: {}
  skip:
    description: Checks not to run (an operator's explicit decision; the deploy still smoke-checks).
    type: list
    elements: str
    choices: [command, interpreter, backend, stderr, overrides, sglang, probe, gpu]
    default: []
  gpu_min_free_mib:
    description: The V(gpu) check's least free memory per GPU, in MiB, once the unit's own processes stop.
    type: int
    default: 0
  nvidia_smi:
    description: The V(gpu) check's nvidia-smi (a name on PATH or a path).
    type: str
    default: nvidia-smi
  timeout_s:
    description: Bound, in seconds, of each command the checks run (systemctl, the probe).
    type: int
    required: true
  secret_env_file:
    description:
      - The EnvironmentFile= kdtree's drop-in names (secrets); an empty EnvironmentFile= in a later
        drop-in would drop it.
    type: str
    default: ""
  allow_untested_sglang:
    description:
      - Pass the V(sglang) check for a release outside the installed patch's window when the mode
        (O(probe_env)'s C(KDTREE_VERIFY)) is V(validate); any other mode is still refused.
    type: bool
    default: false
extends_documentation_fragment:
  - kdtree.fleet.attributes
  - kdtree.fleet.attributes.read_only
  - kdtree.fleet.unit.unit_file
author: kdtree-fleet contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Preflight the unit
  kdtree.fleet.kdtree_preflight:
    unit: sglang.service
    dropin_name: 50-kdtree.conf
    managed_vars: [PYTHONPATH, KDTREE_VERIFY, KDTREE_LIB]
    compute_capability: "12.0"
    patch_dir: /opt/kdtree/patches/0123456789abcdef
    probe_env: {PYTHONPATH: /opt/kdtree/patches/0123456789abcdef, KDTREE_VERIFY: validate}
    timeout_s: 120
"""

RETURN = r"""
checks:
  description: Every check run, in order, with its verdict and message (C(where) is file:line or empty).
  type: list
  elements: dict
  returned: always
  sample: [{name: interpreter, ok: false, where: /etc/systemd/system/sglang.service:12,
            message: "python runs with -I (isolated: ignores PYTHONPATH) ..."}]
launch:
  description:
    - What the command line says (python, attention_backend, tp_size, pp_size, dp_size, dp_attention,
      schedulers, port, unparsed); not the argv itself, which may hold secrets.
  type: dict
  returned: always
gpu_health:
  description:
    - The V(gpu) check's reading (C(checked) false when it was skipped) - C(ok), C(expected) GPUs,
      C(count), C(min_free_mib), C(problems) and per GPU its C(index), C(uuid), C(persistence),
      C(ecc_uncorrected) (null when not reported), C(remapped_pending), C(retired_pending),
      C(memory_total_mib), C(memory_free_mib), C(memory_unit_mib) (held by the unit) and C(problems).
  type: dict
  returned: when the unit has a file
msg:
  description: One line per failed check (or a summary when all passed).
  type: str
  returned: always
"""

import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kdtree.fleet.plugins.module_utils import (
    _patch_files as patch_files,
)
from ansible_collections.kdtree.fleet.plugins.module_utils import (
    _preflight as preflight,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "dropin_name": {"type": "str", "required": True},
            "managed_vars": {"type": "list", "elements": "str", "default": []},
            "exec_start": {"type": "list", "elements": "str", "default": []},
            "compute_capability": {"type": "str", "default": ""},
            "patch_dir": {"type": "path", "required": True},
            "probe_env": {"type": "dict", "default": {}},
            "skip": {"type": "list", "elements": "str", "default": [], "choices": list(preflight.CHECKS)},
            "timeout_s": {"type": "int", "required": True},
            "secret_env_file": {"type": "str", "default": ""},
            "allow_untested_sglang": {"type": "bool", "default": False},
            "gpu_min_free_mib": {"type": "int", "default": 0},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
        },
        supports_check_mode=True,
    )
    try:
        result = preflight.execute(module.params, module.check_mode)
    except (
        OSError,
        subprocess.SubprocessError,
        ValueError,
        AttributeError,
        patch_files.PatchFileError,
    ) as exc:
        module.fail_json(msg=f"kdtree preflight could not read {module.params['unit']}: {exc}")
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
