"""A run's outcome on each host (kdtree.fleet.kdtree_common's entry points stop, failed, end, outcome):
the one rule of the canary stop.

A host whose deploy or rollback failed either failed (Ansible removes it from the play) or, when the
playbook defers failures so that the report play still runs, ended with `kdtree_common_outcome`
result "failed". Ansible starts every serial batch with a fresh copy of the play, which forgets the
ended hosts (only the failed ones stay removed), so the rule reads both.

Controller only (the kdtree_stopped_by filter): it may import module_utils, module_utils never imports it.
"""

from __future__ import annotations

from typing import Any

RESULTS = ("failed", "stopped")


class OutcomeInputError(ValueError):
    """An input the rule cannot read (never guessed)."""


def _names(value: Any, what: str) -> list[str]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise OutcomeInputError(f"{what} must be a list of host names, got {value!r}")
    return list(value)


def stopped_by(play_hosts_all: Any, play_hosts: Any, play_batch: Any, outcomes: Any) -> list[str]:
    """The hosts of earlier batches whose run failed, in the play's order: those Ansible removed from
    the play (in play_hosts_all, not in play_hosts) and those whose outcome (`outcomes`, host ->
    kdtree_common_outcome or nothing) says failed; hosts of this batch never count (the batch
    finishes). Empty: the host goes on."""
    every = _names(play_hosts_all, "ansible_play_hosts_all")
    active = set(_names(play_hosts, "ansible_play_hosts"))
    batch = set(_names(play_batch, "ansible_play_batch"))
    if not isinstance(outcomes, dict):
        raise OutcomeInputError(f"outcomes must map host names to outcomes, got {outcomes!r}")
    failed = []
    for host in every:
        if host in batch:
            continue
        outcome = outcomes.get(host)
        if outcome is not None and not isinstance(outcome, dict):
            raise OutcomeInputError(f"the outcome of {host} must be a dict, got {outcome!r}")
        if host not in active or (outcome or {}).get("result") == "failed":
            failed.append(host)
    return failed
