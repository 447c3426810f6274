"""The filters kdtree_string_options and kdtree_input_type_problems: a role's string options as YAML
delivered them. The rule is module_utils/_yaml_types.py's; these filters hand it a role's values and
argument spec (roles/kdtree_common, entry point inputs)."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.kdtree.fleet.plugins.module_utils import _yaml_types as yaml_types


def _mapping(value: Any, what: str) -> dict:
    if not isinstance(value, dict):
        raise AnsibleFilterError(f"{what} must be a mapping, not {type(value).__name__}")
    return value


def kdtree_string_options(spec_options: Any) -> list[str]:
    """The names of an entry point's options whose value must be a string (str, path, list of them)."""
    return yaml_types.string_options(_mapping(spec_options, "kdtree_string_options: the argument spec"))


def kdtree_input_type_problems(values: Any, spec_options: Any) -> list[str]:
    """Why each string option of `values` (name -> value) is not a string; empty when all are."""
    return yaml_types.type_problems(
        _mapping(values, "kdtree_input_type_problems: the values"),
        _mapping(spec_options, "kdtree_input_type_problems: the argument spec"),
    )


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "kdtree_string_options": kdtree_string_options,
            "kdtree_input_type_problems": kdtree_input_type_problems,
        }
