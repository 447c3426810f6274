"""Filters of the bake between batches (kdtree_deploy's tasks/bake.yml): kdtree_bake_reference,
kdtree_bake_pair, kdtree_bake_verdict, kdtree_bake_batch_message, kdtree_bake_record and
kdtree_metrics_url.

The rules are plugin_utils/_bake.py's (one owner); these filters only hand the play's data to it on
the controller. The Prometheus source is the lookup kdtree_bake_prometheus.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.kdtree.fleet.plugins.module_utils import _decode as decode
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _bake as bake


def kdtree_bake_reference(play_hosts_all: Any, play_batch: Any, failed: Any = None) -> dict[str, Any]:
    """{hosts, what}: the hosts this batch is compared with (bake.reference_hosts)."""
    try:
        hosts, what = bake.reference_hosts(play_hosts_all, play_batch, list(failed or []))
    except bake.BakeInputError as exc:
        raise AnsibleFilterError(f"kdtree_bake_reference: {exc}") from exc
    return {"hosts": hosts, "what": what}


def kdtree_metrics_url(health_url: Any) -> str:
    """The server's /metrics URL next to its health URL (module_utils/_decode.metrics_url)."""
    return decode.metrics_url(str(health_url))


def kdtree_bake_pair(pair: Any) -> dict[str, Any]:
    """One host's window from the pair (start, end) of its ansible.builtin.uri reads of /metrics (the
    loop item, the host, from the start's)."""
    if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not isinstance(pair[0], dict):
        raise AnsibleFilterError(f"kdtree_bake_pair: expected (start, end) read results, got {pair!r}")
    host = str(pair[0].get("item", "?"))
    (before, why_before), (after, why_after) = bake.scrape_text(pair[0]), bake.scrape_text(pair[1])
    return bake.window_from_scrapes(host, before, after, why_before or why_after).as_dict()


def kdtree_bake_batch_message(result: Any) -> str:
    """Why this host fails with its batch, from its kdtree_rendezvous result."""
    try:
        if not isinstance(result, dict):
            raise bake.BakeInputError(f"not a rendezvous result: {result!r}")
        return bake.batch_message(result.get("failed_members"), result.get("posts"))
    except bake.BakeInputError as exc:
        raise AnsibleFilterError(f"kdtree_bake_batch_message: {exc}") from exc


def kdtree_bake_verdict(
    baked: Any, host: str, references: Any, thresholds: Any = None, expect_mismatches: Any = False
) -> dict[str, Any]:
    """The verdict (bake.judge) on `baked` (a window) against the pooled `references` (windows)."""
    try:
        if not isinstance(references, list):
            raise bake.BakeInputError(f"the reference windows must be a list, got {references!r}")
        pooled = bake.pool([bake.Window.from_dict(item) for item in references])
        return bake.judge(
            str(host), bake.Window.from_dict(baked), pooled, thresholds, bool(expect_mismatches)
        )
    except bake.BakeInputError as exc:
        raise AnsibleFilterError(f"kdtree_bake_verdict: {exc}") from exc


def kdtree_bake_record(verdict: Any) -> dict[str, Any]:
    """A verdict as the deploy's history entry keeps it (bake.record)."""
    try:
        return bake.record(verdict)
    except bake.BakeInputError as exc:
        raise AnsibleFilterError(f"kdtree_bake_record: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "kdtree_bake_reference": kdtree_bake_reference,
            "kdtree_bake_pair": kdtree_bake_pair,
            "kdtree_metrics_url": kdtree_metrics_url,
            "kdtree_bake_record": kdtree_bake_record,
            "kdtree_bake_batch_message": kdtree_bake_batch_message,
            "kdtree_bake_verdict": kdtree_bake_verdict,
        }
