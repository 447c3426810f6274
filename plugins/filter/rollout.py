"""Filters of the rollout's capacity: kdtree_rollout_batches (the deploy play's serial and the deploy
role's check of it), kdtree_rollout_whole_groups (the rollback play's serial) and kdtree_rollout_share
(the drain's share).

The rules are plugin_utils/_capacity.py's (one owner); these filters hand the play's values to it on
the controller and word its refusals as filter errors.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _capacity as capacity
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _groups as serving


def kdtree_rollout_batches(
    hosts: Any,
    max_unavailable: Any = "",
    serial: Any = "",
    drain_share: Any = "",
    batch: Any = None,
    groups: Any = None,
) -> list[int]:
    """The batch sizes for `hosts` (a count, or the play's hosts in order; canary first, none larger
    than max_unavailable allows); refuses an explicit serial or a drain share that contradicts
    max_unavailable, and, with `batch` (the size of the batch running now), a batch larger than the plan
    allows. With the play's hosts and the inventory's `groups`, no batch cuts a serving group."""
    try:
        units = None
        if not isinstance(hosts, int):
            units = [len(u) for u in serving.units(hosts, groups or {})]
            hosts = len(hosts)
        sizes = capacity.batches(hosts, max_unavailable, serial, drain_share, units)
        if batch is not None:
            capacity.check_batch(batch, sizes, hosts, max_unavailable, serial)
    except (capacity.CapacityError, serving.GroupError) as exc:  # its words say it all
        raise AnsibleFilterError(f"kdtree_rollout_batches: {exc}. Nothing was deployed.") from None
    return sizes


def kdtree_rollout_share(max_share: Any, max_unavailable: Any = "", hosts: Any = 0) -> float:
    """The share of the healthy pool the drain may take out at once: max_share when set, else the one
    max_unavailable amounts to for `hosts` hosts."""
    try:
        return capacity.drain_share(max_share, max_unavailable, hosts)
    except capacity.CapacityError as exc:  # its words say it all: no cause chained onto them
        raise AnsibleFilterError(f"kdtree_rollout_share: {exc}. Nothing was drained or restarted.") from None


def kdtree_rollout_whole_groups(hosts: Any, serial: Any = 1, groups: Any = None) -> list[int]:
    """Ansible's batches of `hosts` (the play's hosts in order) under `serial`, each grown to the end of
    the serving group it would cut (the rollback's serial: one host at a time becomes one group)."""
    try:
        units = [len(u) for u in serving.units(hosts, groups or {})]
        return serving.fit_serial(capacity.serial_sizes(serial, len(hosts)), units)
    except (capacity.CapacityError, serving.GroupError) as exc:  # its words say it all
        raise AnsibleFilterError(f"kdtree_rollout_whole_groups: {exc}. Nothing was changed.") from None


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "kdtree_rollout_batches": kdtree_rollout_batches,
            "kdtree_rollout_whole_groups": kdtree_rollout_whole_groups,
            "kdtree_rollout_share": kdtree_rollout_share,
        }
