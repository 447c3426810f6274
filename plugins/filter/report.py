"""Filters of the fleet report: kdtree_report_rows and kdtree_report_table.

The fields and the table format are module_utils/_report.py's (one owner); these filters only
hand the play's data to it on the controller.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.kdtree.fleet.plugins.module_utils import _report as report


def kdtree_report_rows(results: list[Any], hosts: list[str]) -> list[dict[str, Any]]:
    """One row per host of `hosts` from the kdtree_report results registered on them (same order);
    a host without one (unreachable, failed earlier) gets a row that says so."""
    results, hosts = list(results), [str(h) for h in hosts]
    if len(results) != len(hosts):
        raise AnsibleFilterError(f"kdtree_report_rows: {len(results)} results for {len(hosts)} hosts")
    return report.rows(results, hosts)


def kdtree_report_table(rows: list[dict[str, Any]]) -> str:
    """The fixed-width table: a header and one line per row."""
    if not isinstance(rows, list):
        raise AnsibleFilterError("kdtree_report_table: expects the list kdtree_report_rows returns")
    return report.format_table([dict(row) for row in rows])


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"kdtree_report_rows": kdtree_report_rows, "kdtree_report_table": kdtree_report_table}
