"""Deploy histories as the tests build them: the kdtree_history module's parameters, a deploy through
the module (begin, then finish), decode figures and healthy measured deploys (module_utils/_history,
_decode), and a report row of them (module_utils/_report).

Imported by its collection path (see collection_tree.py); tests/roles uses it too.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.kdtree.fleet.plugins.module_utils import _decode as decode
from ansible_collections.kdtree.fleet.plugins.module_utils import _history as history
from ansible_collections.kdtree.fleet.plugins.module_utils import _report as report
from ansible_collections.kdtree.fleet.plugins.modules import kdtree_history


def params(path: Any, **over: Any) -> dict[str, Any]:
    """kdtree_history's parameters for the history file `path`: a read unless `over` says otherwise."""
    base = {"action": "read", "path": str(path), "dropin_path": None, "unlike_digest": "", "record": {},
            "id": None, "result": None, "why": "", "rolled_back_to": "",
            "keep": history.DEFAULT_KEEP, "restore": None}  # fmt: skip
    base.update(over)
    return base


def deploy(path: Any, dropin: str, result: str, **record: Any) -> dict[str, Any]:
    """One deploy of `dropin` through the module, begun and finished with `result`: its begun entry."""
    begun = kdtree_history.run(params(path, action="begin", record={"dropin": dropin, **record}), False)
    entry = begun["entry"]
    kdtree_history.run(params(path, action="finish", id=entry["id"], result=result), False)
    return entry


def record(
    tokens_per_s: float | None = 40.0, itl: float | None = 0.025, accept: float | None = 1.5
) -> dict[str, Any]:
    """Decode figures as a deploy records them (checked by module_utils/_decode)."""
    return decode.checked(
        {
            "tokens_per_s": tokens_per_s,
            "itl_mean_s": itl,
            "accept_length": accept,
            "completion_tokens": 64,
            "request_s": 1.6,
            "itl_samples": 60,
            "why": {},
        }
    )


def measured_entries(*records: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A history of healthy deploys, oldest first, one per record (None: a deploy without figures)."""
    entries: list[dict[str, Any]] = []
    for figures in records:
        entry = history.begin(entries, {"dropin": f"D{len(entries)}"})
        history.finish(entries, entry["id"], "healthy", decode_figures=figures)
    return entries


def report_row(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """A host's report row (the kdtree_report module's) with the decode figures of `entries`."""
    return {
        "unit": "sglang.service",
        "unit_state": "active/running",
        "decode": report.decode_deploys(entries),
    }
