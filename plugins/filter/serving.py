"""Filters of serving groups (the nodes of one multi-node SGLang server, plugin_utils/_groups.py):
kdtree_serving_group (a host's group and its members), kdtree_serving_group_check (what makes the
group's nodes not one server, from the words each node's preflight posted) and kdtree_serving_group_target
(where every node goes back when one fails, from the targets each node's history allows)."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _groups as serving


def kdtree_serving_group(host: Any, hosts: Any, groups: Any) -> dict[str, Any]:
    """{name, members} of the host's serving group among the play's `hosts` (in order); {} alone."""
    try:
        return serving.group_of(str(host), hosts, groups or {})
    except serving.GroupError as exc:
        raise AnsibleFilterError(f"kdtree_serving_group: {exc}. Nothing was changed.") from None


def kdtree_serving_group_check(posts: Any, name: Any, members: Any) -> dict[str, Any]:
    """{problems, rank0} of the group from its members' preflight words (kdtree_rendezvous posts)."""
    if not isinstance(posts, dict):
        raise AnsibleFilterError(f"kdtree_serving_group_check: posts must be a mapping, not {posts!r}")
    return {
        "problems": serving.group_check(str(name), list(members), posts),
        "rank0": serving.rank0(list(members), posts),
    }


def kdtree_serving_group_target(posts: Any, name: Any, members: Any) -> dict[str, str]:
    """{target, why}: previous when every node's last good deploy is the same deploy, else stock."""
    if not isinstance(posts, dict):
        raise AnsibleFilterError(f"kdtree_serving_group_target: posts must be a mapping, not {posts!r}")
    return serving.rollback_target(str(name), list(members), posts)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "kdtree_serving_group": kdtree_serving_group,
            "kdtree_serving_group_check": kdtree_serving_group_check,
            "kdtree_serving_group_target": kdtree_serving_group_target,
        }
