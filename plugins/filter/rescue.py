"""Filter of the deploy's rescue (roles/kdtree_deploy/tasks/rescue.yml): kdtree_rescue_plan.

The choices are plugin_utils/_rescue.py's (one owner); this filter only hands the play's facts to it
on the controller.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _rescue as rescue


def kdtree_rescue_plan(facts: Any) -> dict[str, Any]:
    """What the rescue puts back, whether it restarts, what it kills, and what the rollback is told,
    from the facts it knows so far (see plugin_utils/_rescue.py)."""
    try:
        return rescue.plan_dict(facts)
    except rescue.RescueInputError as exc:
        raise AnsibleFilterError(f"kdtree_rescue_plan: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"kdtree_rescue_plan": kdtree_rescue_plan}
