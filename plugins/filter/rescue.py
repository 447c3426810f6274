"""Filters of the deploy's rescue (roles/kdtree_deploy/tasks/rescue.yml): kdtree_rescue_plan and
kdtree_rescue_summary.

The choices are plugin_utils/_rescue.py's (one owner); this filter only hands the play's facts to it
on the controller.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _rescue as rescue_rules


def kdtree_rescue_plan(facts: Any) -> dict[str, Any]:
    """What the rescue puts back, whether it restarts, what it kills, and what the rollback is told,
    from the facts it knows so far (see plugin_utils/_rescue.py)."""
    try:
        return rescue_rules.plan_dict(facts)
    except rescue_rules.RescueInputError as exc:
        raise AnsibleFilterError(f"kdtree_rescue_plan: {exc}") from exc


def kdtree_rescue_summary(
    rescue: Any,
    rollback_summary: Any,
    undo_rc: Any = None,
    undo_stderr: Any = "",
    drain_out: Any = False,
    failed_task: Any = None,
    failed_msg: Any = "",
    unit: Any = "sglang",
) -> str:
    """The ROLLBACK line of a failed deploy (see plugin_utils/_rescue.py summary(): words only, it
    refuses nothing, so the host's failure message always prints)."""
    return rescue_rules.summary(
        rescue, rollback_summary, undo_rc, undo_stderr, drain_out, failed_task, failed_msg, unit
    )


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"kdtree_rescue_plan": kdtree_rescue_plan, "kdtree_rescue_summary": kdtree_rescue_summary}
