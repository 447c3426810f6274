"""kdtree's verify modes and the marker state each one makes a scheduler report (one owner).

The patch reads the mode from KDTREE_VERIFY (files/sglang_ext/kdtree_verify/config.py, whose MODES
tests/unit/plugins/module_utils/test__modes.py keeps equal to these); the collection decides here what
a deploy in each mode must see (roles/kdtree_service's kdtree_service_marker_state through the filter
kdtree.fleet.kdtree_marker_state, the preflight's probe) and which modes a history entry may name.
Stdlib only.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.kdtree.fleet.plugins.module_utils._yaml_types import YAML_BOOLEANS as _YAML_BOOLEANS

MODES = ("off", "validate", "on")


def marker_state(mode: str) -> str:
    """The state every scheduler's marker reports under `mode`: "off" in mode off (the patch is
    installed and hands every call to the original), "active" in validate and on."""
    return "off" if mode == "off" else "active"


def mode_problem(value: Any) -> str:
    """Empty when `value` is one of MODES; else why not, naming YAML's boolean trap when `value` is the
    boolean an unquoted on/off became."""
    if isinstance(value, bool):
        return (
            f"is the YAML boolean {value}, not one of {', '.join(MODES)}: YAML reads "
            f"{'/'.join(_YAML_BOOLEANS[:4])} without quotes as booleans, so write the mode in quotes "
            f"('{'on' if value else 'off'}')"
        )
    if not isinstance(value, str) or value not in MODES:
        return f"is {value!r}, not one of {', '.join(MODES)}"
    return ""
