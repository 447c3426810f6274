#!/usr/bin/python
"""Read the environment a systemd unit's own files give its service, leaving out named drop-ins."""

from __future__ import annotations

# Ansible's module layout: documentation strings first, imports after them.
# ruff: noqa: E402

DOCUMENTATION = r"""
module: kdtree_unit_env
short_description: Read the environment of a systemd unit from its unit file and drop-ins
description:
  - Merges the C(Environment=) and C(UnsetEnvironment=) lines of the unit file and its drop-ins (as
    C(systemctl show -p FragmentPath -p DropInPaths) lists them, in that order) the way systemd does,
    leaving out the drop-ins named in O(exclude_dropins).
  - This answers "what does the service get without my drop-in", which C(systemctl show -p Environment)
    cannot answer once that drop-in is installed. The kdtree_service role uses it to prepend its
    directory to the PYTHONPATH the operator's unit already sets instead of replacing it.
  - Reads only; changes nothing.
options:
  exclude_dropins:
    description: File names of drop-ins to leave out (e.g. V(50-kdtree.conf)).
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - kdtree.fleet.attributes
  - kdtree.fleet.attributes.read_only
  - kdtree.fleet.unit.unit_file
author: kdtree-fleet contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: The environment of the operator's unit, without kdtree's drop-in
  kdtree.fleet.kdtree_unit_env:
    unit: sglang.service
    exclude_dropins: [50-kdtree.conf]
  register: __env
"""

RETURN = r"""
environment:
  description: The merged variables of the unit file and the drop-ins read.
  type: dict
  returned: always
  sample: {PYTHONPATH: /opt/cpu-shims, TRITON_INTERPRET: "1"}
environment_files:
  description: The C(EnvironmentFile=) entries (their variables are not read).
  type: list
  elements: str
  returned: always
  sample: ["-/etc/default/sglang"]
sources:
  description: The files read, in order.
  type: list
  elements: str
  returned: always
  sample: [/etc/systemd/system/sglang.service]
"""

import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kdtree.fleet.plugins.module_utils._unit_env import unit_environment, unit_files


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "exclude_dropins": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    unit = module.params["unit"]
    try:
        fragment, dropins = unit_files(unit)
        if not fragment:
            module.fail_json(msg=f"{unit} has no unit file (not installed?)")
        env = unit_environment(fragment, dropins, module.params["exclude_dropins"])
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        module.fail_json(msg=f"cannot read the environment of {unit}: {exc}")
    module.exit_json(
        changed=False,
        environment=env.environment,
        environment_files=env.environment_files,
        sources=env.sources,
    )


if __name__ == "__main__":
    main()
