"""Filters of the rollout's capacity: kdtree_rollout_batches (the deploy play's serial and the deploy
role's check of it) and kdtree_rollout_share (the drain's share).

The rules are plugin_utils/_capacity.py's (one owner); these filters hand the play's values to it on
the controller and word its refusals as filter errors.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _capacity as capacity


def kdtree_rollout_batches(
    hosts: Any, max_unavailable: Any = "", serial: Any = "", drain_share: Any = "", batch: Any = None
) -> list[int]:
    """The batch sizes for `hosts` hosts (canary first, none larger than max_unavailable allows);
    refuses an explicit serial or a drain share that contradicts max_unavailable, and, with `batch`
    (the size of the batch running now), a batch larger than the plan allows."""
    try:
        sizes = capacity.batches(hosts, max_unavailable, serial, drain_share)
        if batch is not None:
            capacity.check_batch(batch, sizes, hosts, max_unavailable, serial)
    except capacity.CapacityError as exc:  # its words say it all: no cause chained onto them
        raise AnsibleFilterError(f"kdtree_rollout_batches: {exc}. Nothing was deployed.") from None
    return sizes


def kdtree_rollout_share(max_share: Any, max_unavailable: Any = "", hosts: Any = 0) -> float:
    """The share of the healthy pool the drain may take out at once: max_share when set, else the one
    max_unavailable amounts to for `hosts` hosts."""
    try:
        return capacity.drain_share(max_share, max_unavailable, hosts)
    except capacity.CapacityError as exc:  # its words say it all: no cause chained onto them
        raise AnsibleFilterError(f"kdtree_rollout_share: {exc}. Nothing was drained or restarted.") from None


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "kdtree_rollout_batches": kdtree_rollout_batches,
            "kdtree_rollout_share": kdtree_rollout_share,
        }
