"""Filters of the promotion (playbooks/promote.yml): kdtree_promote_verdict and kdtree_promote_table.

The rules are plugin_utils/_promote.py's (one owner); these filters only hand the play's data to it
on the controller.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _promote as promote
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _report_table as report_table


def kdtree_promote_verdict(
    result: Any,
    host: str,
    min_compared: Any = "",
    tolerance: Any = "",
    expected: Any = None,
    patch_source: Any = "",
    min_timed_calls: Any = "",
    min_speedup: Any = "",
) -> dict[str, Any]:
    """{host, qualified, why, min_compared, tolerance} from one host's registered kdtree_report
    result. min_compared / tolerance "" take the defaults (promote.DEFAULT_MIN_COMPARED; the
    DEFAULT_TOL of the patch under patch_source, the patch role's kdtree_patch_source_dir).
    expected: {build_id, patch_digest} the promotion's deploy would install, or None (not compared).
    min_timed_calls / min_speedup "" take promote.DEFAULT_MIN_TIMED_CALLS / DEFAULT_MIN_SPEEDUP."""
    row = report_table.rows([result if isinstance(result, dict) else {}], [str(host)])[0]
    if expected is not None and not isinstance(expected, dict):
        raise AnsibleFilterError("kdtree_promote_verdict: expected must be a dict (build_id, patch_digest)")
    try:
        return promote.verdict(
            row,
            min_compared,
            tolerance,
            dict(expected) if expected else None,
            str(patch_source or ""),
            min_timed_calls,
            min_speedup,
        )
    except promote.PromoteError as exc:
        raise AnsibleFilterError(f"kdtree_promote_verdict: {exc}") from exc


def kdtree_promote_table(verdicts: list[Any], hosts: list[str]) -> str:
    """The table (HOST, PROMOTE, WHY), one line per host of `hosts`; a host without a verdict (it
    failed or was unreachable before it was judged) stays and says so."""
    verdicts, hosts = list(verdicts), [str(h) for h in hosts]
    if len(verdicts) != len(hosts):
        raise AnsibleFilterError(f"kdtree_promote_table: {len(verdicts)} verdicts for {len(hosts)} hosts")
    rows = []
    for host, item in zip(hosts, verdicts, strict=True):
        if isinstance(item, dict) and "qualified" in item:
            rows.append({**item, "host": host})
        else:
            rows.append(
                {"host": host, "qualified": False, "why": "not judged (the host failed or was unreachable)"}
            )
    return promote.format_table(rows)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "kdtree_promote_verdict": kdtree_promote_verdict,
            "kdtree_promote_table": kdtree_promote_table,
        }
