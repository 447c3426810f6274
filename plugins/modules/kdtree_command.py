#!/usr/bin/python
"""Run a long command and say how it goes while it runs (the documentation of the action plugin of
the same name, which does the work: plugins/action/kdtree_command.py)."""

from __future__ import annotations

# Ansible's module layout: documentation strings first, imports after them.
# ruff: noqa: E402

DOCUMENTATION = r"""
module: kdtree_command
short_description: Run a long command, printing a progress line while it runs
description:
  - Runs O(argv), or O(cmd) with O(executable), the way M(ansible.builtin.command) runs it (through that
    module, so its result, C(rc), C(stdout), C(stderr), and O(creates) are the same), but in the
    background (Ansible's async) for at most O(limit_s) seconds, and prints one line about every
    O(progress_s) seconds while it runs, in the smoke check's style (the host, O(what), the seconds
    waited and O(limit_s), as in C([gpu1] compile sm_90 waiting 20 s of 630 s) with a colon after
    O(what)).
  - The command's own bounds stay its own (a C(timeout 600) inside it ends it with its own message);
    O(limit_s) is the last bound, after which the command is killed and the task fails saying so.
  - Runs wherever the task runs (C(delegate_to) included), with the task's C(environment), C(become) and
    C(timeout).
options:
  what:
    description: What is waited for, as the progress lines name it (V(compile sm_90), say).
    type: str
    required: true
  argv:
    description: The command as a list of arguments (no shell). Exactly one of O(argv) and O(cmd).
    type: list
    elements: str
  cmd:
    description: A shell script, run by O(executable). Exactly one of O(argv) and O(cmd).
    type: str
  executable:
    description: The shell that runs O(cmd).
    type: path
    default: /bin/sh
  creates:
    description: When this path exists the command is not run (as M(ansible.builtin.command)'s).
    type: path
  limit_s:
    description: Seconds after which the command is killed and the task fails.
    type: int
    required: true
  progress_s:
    description: Seconds between two progress lines.
    type: float
    default: 10
extends_documentation_fragment:
  - kdtree.fleet.attributes
attributes:
  check_mode:
    support: partial
    details: >-
      As M(ansible.builtin.command): the command is not run (unless the task sets C(check_mode=false));
      with O(creates) the result says whether it would run. Nothing runs in the background.
  diff_mode:
    support: none
    details: A command has no diff.
author: kdtree-fleet contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Compile the kernel
  kdtree.fleet.kdtree_command:
    what: compile sm_90
    cmd: timeout 600 bash build.sh --arch sm_90
    executable: /bin/bash
    creates: /var/lib/kdtree/builds/x/libkdtree_verify.so
    limit_s: 630
  timeout: 660
"""

RETURN = r"""
rc:
  description: The command's exit status (as M(ansible.builtin.command)'s).
  type: int
  returned: when the command ran
stdout:
  description: What the command wrote on standard output.
  type: str
  returned: when the command ran
stderr:
  description: What the command wrote on standard error.
  type: str
  returned: when the command ran
waited_s:
  description: Seconds the task waited for the command.
  type: float
  returned: when the command ran in the background
"""

from ansible.module_utils.basic import AnsibleModule

ARGUMENT_SPEC = {
    "what": {"type": "str", "required": True},
    "argv": {"type": "list", "elements": "str"},
    "cmd": {"type": "str"},
    "executable": {"type": "path", "default": "/bin/sh"},
    "creates": {"type": "path"},
    "limit_s": {"type": "int", "required": True},
    "progress_s": {"type": "float", "default": 10.0},
}


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        mutually_exclusive=[("argv", "cmd")],
        required_one_of=[("argv", "cmd")],
        supports_check_mode=True,
    )
    module.fail_json(
        msg="kdtree_command runs through its action plugin (call it as kdtree.fleet.kdtree_command)"
    )


if __name__ == "__main__":
    main()
