"""The "now" a status file's freshness is judged at, on the host's monotonic clock where it can be.

The installed patch's statusdir.freshness_problem(doc, now, interval) owns the rule (a document is fresh
when its `updated` lies within a few status intervals of `now`); both sides of it are wall-clock times,
so a step of the host's clock would make a live publisher's file stale or a dead one's fresh. A document
of status schema 2 carries `updated_mono`, the publisher's CLOCK_MONOTONIC at the write (one clock for
every process of a host): judged_now() hands the rule its `updated` plus the monotonic time since that
write, so the age it computes is monotonic. Older patches' files (no `updated_mono`) keep the wall clock.
The smoke check's traffic proof and the fleet report call it (both on the host); an installed patch of any
version keeps its own freshness_problem signature. Stdlib only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def judged_now(doc: Mapping[str, Any], wall_now: float, mono_now: float) -> float:
    """`wall_now`, or for a document with `updated` and `updated_mono` the wall-clock time its age
    on the monotonic clock stands for: updated + (mono_now - updated_mono)."""
    updated, updated_mono = _number(doc.get("updated")), _number(doc.get("updated_mono"))
    if updated is None or updated_mono is None:
        return wall_now
    return updated + (mono_now - updated_mono)
