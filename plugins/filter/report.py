"""Filters of the fleet report: kdtree_report_rows and kdtree_report_table.

A row's fields are module_utils/_report.py's (the host side, module kdtree_report); the rows and
the table are plugin_utils/_report_table.py's (one owner of the columns); these filters only hand
the play's data to it on the controller.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _groups as serving_groups
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _report_table as report_table


def kdtree_report_rows(
    results: list[Any],
    hosts: list[str],
    decode_change_pct: float | None = None,
    outcomes: list[Any] | None = None,
    groups: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One row per host of `hosts` from the kdtree_report results registered on them (same order);
    a host without one (unreachable, failed earlier) gets a row that says so. A decode figure that
    changed by more than decode_change_pct against the previous deploy is flagged. `outcomes` (same
    order): each host's kdtree_common_outcome; a run that failed or stopped there is the row's
    first problem. `groups` (the inventory's): a node of a serving group (kdtree_serving_<name>) gets
    the group's name."""
    results, hosts = list(results), [str(h) for h in hosts]
    outcomes = None if outcomes is None else list(outcomes)
    if len(results) != len(hosts):
        raise AnsibleFilterError(f"kdtree_report_rows: {len(results)} results for {len(hosts)} hosts")
    if decode_change_pct is not None and not isinstance(decode_change_pct, (int, float)):
        try:
            decode_change_pct = float(decode_change_pct)
        except (TypeError, ValueError):
            raise AnsibleFilterError(
                f"kdtree_report_rows: decode_change_pct {decode_change_pct!r} is not a number"
            ) from None
    try:
        serving: dict[str, str] = {}
        for name, members in serving_groups.serving_groups(groups or {}).items():
            for member in members:
                serving[member] = f"{serving[member]}, {name}" if member in serving else name
        return report_table.rows(results, hosts, decode_change_pct, outcomes, serving)
    except ValueError as exc:  # serving_groups.GroupError too
        raise AnsibleFilterError(f"kdtree_report_rows: {exc}") from None


def kdtree_report_table(rows: list[dict[str, Any]], view: str = "full") -> str:
    """The fixed-width table: full (every column, a line per host and per scheduler) or compact
    (the main columns, a line per host, hosts with problems first)."""
    if not isinstance(rows, list):
        raise AnsibleFilterError("kdtree_report_table: expects the list kdtree_report_rows returns")
    if view not in report_table.VIEWS:
        raise AnsibleFilterError(
            f"kdtree_report_table: view {view!r} is not one of {', '.join(report_table.VIEWS)}"
        )
    return report_table.format_table([dict(row) for row in rows], view)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"kdtree_report_rows": kdtree_report_rows, "kdtree_report_table": kdtree_report_table}
