"""Filters of the service role (roles/kdtree_service): kdtree_dropin_env and kdtree_marker_state.

The rules are module_utils/_dropin_env.py's and module_utils/_modes.py's (one owner each, shared with
the deploy history and the preflight on the host); these filters only hand the role's variables to them.
"""

from __future__ import annotations

import inspect
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.kdtree.fleet.plugins.module_utils import _dropin_env as dropin_env
from ansible_collections.kdtree.fleet.plugins.module_utils import _modes as modes


def kdtree_dropin_env(inputs: Any) -> list[list[str]]:
    """The drop-in's environment, [[NAME, value], ...], from the service role's inputs (a mapping:
    pythonpath, mode, lib, status_dir, status_interval, nccl_env, env_extra, unit_pythonpath)."""
    if not isinstance(inputs, dict):
        raise AnsibleFilterError(
            f"kdtree_dropin_env: the input must be a mapping, not {type(inputs).__name__}"
        )
    parameters = inspect.signature(dropin_env.env_pairs).parameters  # the inputs are its parameters
    unknown = sorted(set(inputs) - set(parameters))
    missing = sorted(name for name, p in parameters.items() if p.default is p.empty and name not in inputs)
    if unknown or missing:
        raise AnsibleFilterError(f"kdtree_dropin_env: unknown inputs {unknown}, missing inputs {missing}")
    try:
        return dropin_env.env_pairs(**inputs)
    except dropin_env.DropinEnvError as exc:
        raise AnsibleFilterError(f"kdtree_dropin_env: {exc}") from exc


def kdtree_marker_state(mode: Any, name: str = "the mode", strict: bool = True) -> str:
    """The marker state every scheduler reports under `mode` (off, or active in validate and on). A
    value that is not one of the modes (an unquoted on/off that YAML made a boolean) is refused, naming
    `name`; with strict false it has no marker state: "" (the service role's facts entry point, which
    the rollback and the report use and which must not stop on a mode they never apply)."""
    problem = modes.mode_problem(mode)
    if problem:
        if not strict:
            return ""
        raise AnsibleFilterError(f"{name} {problem}. Nothing was changed.")
    return modes.marker_state(mode)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"kdtree_dropin_env": kdtree_dropin_env, "kdtree_marker_state": kdtree_marker_state}
