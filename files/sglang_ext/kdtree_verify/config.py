"""The environment the patch reads (docs/CONTRACTS.md section 2): KDTREE_VERIFY, KDTREE_VERIFY_TOL,
KDTREE_LIB, KDTREE_STATUS_INTERVAL (KDTREE_STATUS_DIR is read by marker.py, which imports nothing of
the package).

`KDTREE_VERIFY_TOL` (default 0.02): a validate call counts as a mismatch when the max abs
difference exceeds it (bf16 outputs of magnitude ~1 differ by up to ~1e-2 between two correct
kernels that accumulate in a different order). A value that is not a finite number in
[0, MAX_TOL] is refused (`nan` would make every comparison false, `inf` or 1e30 would hide every
mismatch): the patch falls back with that reason in modes validate and on.

`KDTREE_STATUS_INTERVAL` (default 5 s) must lie in [MIN_STATUS_INTERVAL, MAX_STATUS_INTERVAL]: a
huge value would overflow the publisher thread's wait (OverflowError) and make the smoke check's
wait for a rewrite effectively endless. Outside it the default is used, with a warning. The role's
kdtree_service_status_interval_s is refused outside the same bounds (roles/kdtree_service
preflight) before anything changes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

MODES = ("off", "validate", "on")
DEFAULT_TOL = 0.02
MAX_TOL = 1.0  # bf16 outputs of magnitude ~1: a larger tolerance would pass any kernel
DEFAULT_STATUS_INTERVAL = 5.0  # seconds between two writes of the status publisher
MIN_STATUS_INTERVAL = 0.05
MAX_STATUS_INTERVAL = 60.0


def read_mode(env: Mapping[str, str]) -> tuple[str, str]:
    """(mode, problem). An unknown value gives mode 'off' and a problem text."""
    raw = env.get("KDTREE_VERIFY", "off").strip().lower() or "off"
    if raw in MODES:
        return raw, ""
    return "off", f"unknown KDTREE_VERIFY={raw!r} (use off, validate or on)"


def _read_number(
    env: Mapping[str, str], name: str, default: float, minimum: float, maximum: float
) -> tuple[float, str]:
    """(value, problem) of the environment variable `name`: unset or empty gives `default` and no
    problem; anything but a finite number in [`minimum`, `maximum`] (``nan``, ``inf``, ``abc``,
    less, more) gives `default` and a problem text."""
    raw = env.get(name, "").strip()
    if not raw:
        return default, ""
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if math.isfinite(value) and minimum <= value <= maximum:
        return value, ""
    return (
        default,
        f"{name}={raw!r} is not a finite number >= {minimum:g} and <= {maximum:g} "
        f"(using the default, {default:g})",
    )


def read_tol(env: Mapping[str, str]) -> tuple[float, str]:
    """(tolerance, problem) from KDTREE_VERIFY_TOL. Unset or empty gives DEFAULT_TOL; anything but a
    finite number in [0, MAX_TOL] (``nan``, ``inf``, ``-1``, ``1e30``, ``abc``) is refused: DEFAULT_TOL
    and a problem text."""
    return _read_number(env, "KDTREE_VERIFY_TOL", DEFAULT_TOL, 0.0, MAX_TOL)


def read_lib(env: Mapping[str, str]) -> str:
    """The library path as given (checked later by the binding: absolute, present, right ABI)."""
    return env.get("KDTREE_LIB", "")


def read_status_interval(env: Mapping[str, str]) -> tuple[float, str]:
    """(seconds, problem) between two writes of the status publisher (`KDTREE_STATUS_INTERVAL`).
    Unset or empty gives DEFAULT_STATUS_INTERVAL; anything but a finite number in
    [MIN_STATUS_INTERVAL, MAX_STATUS_INTERVAL] gives DEFAULT_STATUS_INTERVAL and a problem text (the
    patch itself is not affected)."""
    return _read_number(
        env, "KDTREE_STATUS_INTERVAL", DEFAULT_STATUS_INTERVAL, MIN_STATUS_INTERVAL, MAX_STATUS_INTERVAL
    )
