"""The environment kdtree's drop-in gives the service: its names and values (one owner, stdlib only).

roles/kdtree_service builds the drop-in's environment with the filter kdtree.fleet.kdtree_dropin_env
(env_pairs() here) and refuses a secret named like one of its names; the deploy history's allowlist of a
restored drop-in's environment is FIXED_ENV, NCCL_* and today's kdtree_service_env_extra names
(module_utils/_history.py owned_key). Order and text are the drop-in's: a second deploy with the same
inputs renders the same bytes (a no-op redeploy changes nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The variables the drop-in always sets, in the order it writes them.
FIXED_ENV = ("PYTHONPATH", "KDTREE_VERIFY", "KDTREE_LIB", "KDTREE_STATUS_DIR", "KDTREE_STATUS_INTERVAL",
             "PYTHONUNBUFFERED", "SPT_NOENV")  # fmt: skip
# The ones whose value never changes: Python's output unbuffered (the journal sees every line at once),
# setproctitle leaving /proc/PID/environ readable (the smoke check reads each scheduler's).
CONSTANT_ENV = {"PYTHONUNBUFFERED": "1", "SPT_NOENV": "1"}


class DropinEnvError(ValueError):
    """An input the drop-in's environment cannot be built from."""


def _text(value: Any) -> str:
    """A value as the drop-in writes it (Jinja's `string`: str(); an inventory's 1 is "1")."""
    return value if isinstance(value, str) else str(value)


def _sorted_items(values: Any, name: str) -> list[list[str]]:
    if values is None:
        return []
    if not isinstance(values, Mapping):
        raise DropinEnvError(f"{name} must be a mapping of NAME: value, not {type(values).__name__}")
    # Jinja's dictsort, as the drop-in always ordered them: by name, case folded, stable
    return [[_text(key), _text(values[key])] for key in sorted(values, key=lambda key: str(key).lower())]


def env_pairs(
    pythonpath: str,
    mode: str,
    lib: str,
    status_dir: str,
    status_interval: Any,
    nccl_env: Any = None,
    env_extra: Any = None,
    unit_pythonpath: str = "",
) -> list[list[str]]:
    """[[NAME, value], ...]: FIXED_ENV in order, then kdtree_service_nccl_env and
    kdtree_service_env_extra sorted by name. PYTHONPATH is in unit syntax: kdtree's directory first
    with its % escaped, then the entries the unit already had (`unit_pythonpath`, its file and other
    drop-ins, specifiers as the operator wrote them), kdtree's own directory never twice."""
    own = _text(pythonpath).replace("%", "%%")
    inherited = [part for part in _text(unit_pythonpath or "").split(":") if part and part != own]
    fixed = {
        "PYTHONPATH": ":".join([own, *inherited]),
        "KDTREE_VERIFY": _text(mode),
        "KDTREE_LIB": _text(lib),
        "KDTREE_STATUS_DIR": _text(status_dir),
        "KDTREE_STATUS_INTERVAL": _text(status_interval),
        **CONSTANT_ENV,
    }
    return [
        *([name, fixed[name]] for name in FIXED_ENV),
        *_sorted_items(nccl_env, "kdtree_service_nccl_env"),
        *_sorted_items(env_extra, "kdtree_service_env_extra"),
    ]
