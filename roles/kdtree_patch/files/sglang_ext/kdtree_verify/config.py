"""The environment the patch reads (docs/CONTRACTS.md section 2): KDTREE_VERIFY, KDTREE_VERIFY_TOL,
KDTREE_LIB.

`KDTREE_VERIFY_TOL` (default 0.02): a validate call counts as a mismatch when the max abs
difference exceeds it (bf16 outputs of magnitude ~1 differ by up to ~1e-2 between two correct
kernels that accumulate in a different order).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

logger = logging.getLogger(__name__)

MODES = ("off", "validate", "on")
DEFAULT_TOL = 0.02


def read_mode(env: Mapping[str, str]) -> tuple[str, str]:
    """(mode, problem). An unknown value gives mode 'off' and a problem text."""
    raw = env.get("KDTREE_VERIFY", "off").strip().lower() or "off"
    if raw in MODES:
        return raw, ""
    return "off", f"unknown KDTREE_VERIFY={raw!r} (use off, validate or on)"


def read_tol(env: Mapping[str, str]) -> float:
    raw = env.get("KDTREE_VERIFY_TOL", "")
    try:
        return float(raw) if raw else DEFAULT_TOL
    except ValueError:
        logger.error("kdtree-verify: ignoring KDTREE_VERIFY_TOL=%r (not a number)", raw)
        return DEFAULT_TOL


def read_lib(env: Mapping[str, str]) -> str:
    """The library path as given (checked later by the binding: absolute, present, right ABI)."""
    return env.get("KDTREE_LIB", "")
