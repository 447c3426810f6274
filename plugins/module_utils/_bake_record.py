"""The bake's verdict as a deploy's history entry keeps it (under `bake`): the verdict's names and
figures, each defined here once (plugin_utils/_bake.py computes them; module_utils/_history.py stores
them; docs/bake.md explains them).

A record: {verdict (one of VERDICTS), message (one line), reference_hosts (names), baked and
reference ({figure: a finite number >= 0 or None} over FIGURES)}. checked() refuses anything else.

Stdlib only (runs on the hosts and on the controller).
"""

from __future__ import annotations

import math
from typing import Any

VERDICTS = ("pass", "fail", "not_enough_traffic", "refused")
FIGURES = (
    "requests",
    "error_rate",
    "itl_samples",
    "itl_mean_s",
    "itl_high_s",
    "accept_length",
    "fallbacks",
    "mismatches",
)
MESSAGE_LIMIT = 2000


def _figures(value: Any, side: str) -> dict[str, float | None]:
    if not isinstance(value, dict):
        raise ValueError(f"bake {side} figures must be a dict, not {type(value).__name__}")
    out: dict[str, float | None] = {}
    for name in FIGURES:
        figure = value.get(name)
        if figure is not None and (
            not isinstance(figure, (int, float))
            or isinstance(figure, bool)
            or not math.isfinite(figure)
            or figure < 0
        ):
            raise ValueError(f"bake {side} figure {name} {figure!r} is not a finite number >= 0")
        out[name] = None if figure is None else float(figure)
    return out


def checked(record: Any) -> dict[str, Any]:
    """A bake record as the history stores it; ValueError naming the field otherwise."""
    if not isinstance(record, dict):
        raise ValueError(f"a bake record must be a dict, not {type(record).__name__}")
    verdict = record.get("verdict")
    if verdict not in VERDICTS:
        raise ValueError(f"bake verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
    message = record.get("message")
    if not isinstance(message, str) or "\n" in message or len(message) > MESSAGE_LIMIT:
        raise ValueError("a bake message must be one line of text")
    hosts = record.get("reference_hosts")
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise ValueError("bake reference_hosts must be a list of host names")
    return {
        "verdict": verdict,
        "message": message,
        "reference_hosts": list(hosts),
        "baked": _figures(record.get("baked"), "baked"),
        "reference": _figures(record.get("reference"), "reference"),
    }
