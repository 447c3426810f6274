"""Filter of the canary stop (roles/kdtree_common/tasks/stop.yml): kdtree_stopped_by.

The rule is plugin_utils/_outcome.py's (one owner); this filter only hands the play's facts to it on
the controller.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _outcome as outcome_rules


def kdtree_stopped_by(play_hosts_all: Any, play_hosts: Any, play_batch: Any, outcomes: Any) -> list[str]:
    """The hosts of earlier batches whose run failed (see plugin_utils/_outcome.py stopped_by())."""
    try:
        return outcome_rules.stopped_by(
            list(play_hosts_all), list(play_hosts), list(play_batch), dict(outcomes)
        )
    except (TypeError, outcome_rules.OutcomeInputError) as exc:
        raise AnsibleFilterError(f"kdtree_stopped_by: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"kdtree_stopped_by": kdtree_stopped_by}
