"""The deploy's rescue: what it puts back, whether it restarts, what it kills (one pure owner).

kdtree_deploy's rescue (roles/kdtree_deploy/tasks/rescue.yml) holds tasks only; every choice it makes
is plan() here, which the filter kdtree.fleet.kdtree_rescue_plan hands the play's facts to. The rescue
learns its facts in three steps and asks again after each (an input not known yet is None):

1. why the deploy failed and which task failed, the plan kdtree_rollback's `plan` entry point made
   before the change (kdtree_rollback_plan), the digest of the drop-in that just failed, and the unit's
   run before the change (kdtree_service_unit_before): whether the plan still holds, what to put back,
   whether to kill, and whether the unit's run must be read again;
2. that read (the registered ansible.builtin.systemd_service result): whether the unit still runs its
   run of before (the deploy failed before its restart: put the files back, never restart);
3. the exit status of the one host command that undid the change: what the rollback is told, and
   whether a host this deploy drained (kdtree_drain_out) is checked and put back into rotation.

summary() then words the ROLLBACK line of the failed host's message from how the rollback went.

Stdlib only, no Ansible imports: tests/unit/plugins/plugin_utils/test__rescue.py calls it directly.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

# The smoke module's reason when `systemctl restart` did not return in time (module_utils/_smoke/
# host.py restart_unit: "restart did not finish within N s ..."): the unit's stop hangs, so the rescue
# kills it instead of a second stop that would hang too, and takes no plan that restarts it first.
RESTART_STUCK = "restart did not finish"
# The failed drop-in's digest the rollback is told when this node's own drop-in did not fail (never a
# sha256: the history's last good is then its newest healthy entry, as in the deploy's plan).
NO_FAILED_DROPIN = "-"
# The smoke module's action names: a failure there means the unit was restarted (or tried to be).
SMOKE_ACTIONS = frozenset(("kdtree.fleet.kdtree_smoke", "kdtree_smoke"))
# The undo command's exit status when its first step (put back or remove the drop-in) failed.
UNDO_DROPIN_FAILED = 10
# What the ROLLBACK line adds when the run of before kept serving but its host stayed drained.
STILL_OUT = (
    "; the host is still OUT of rotation (its drain record stays; the next run rejoins it once healthy)"
)


class RescueInputError(ValueError):
    """The facts handed to plan() are not what the rescue knows (a renamed fact, a wrong type)."""


@dataclass(frozen=True)
class RescuePlan:
    """plan()'s answer; the fields a later step decides are None until their input is known."""

    # the plan made before the change holds: its drop-in is not the one that just failed, and the
    # unit's stop did not hang
    fast: bool
    # put the plan's previous drop-in back (else remove kdtree's)
    putback: bool
    # "put" or "remove": the undo command's first step
    undo: str
    # the drop-in text the undo writes ("" when it removes)
    dropin_text: str
    # SIGKILL the unit's processes instead of a stop (its restart did not finish)
    kill: bool
    # read the unit's run again: a task other than the smoke module failed and the unit was active
    read_unit: bool
    # the unit still runs its run of before the deploy (step 2; None before)
    untouched: bool | None
    # the undo command restarts the unit into the planned target (step 2; None before)
    undo_restart: bool | None
    # the rollback's hand-over: kdtree_rollback entry point restore's _kdtree_rollback_<key> options
    # (step 3; None before)
    rollback: dict[str, Any] | None
    # the run of before kept serving and this deploy drained the host: check its health, then rejoin
    # (step 2; None before)
    rejoin: bool | None


def _mapping(value: Any, name: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RescueInputError(f"{name} must be a mapping, not {type(value).__name__}")
    return value


def _text(value: Any, name: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise RescueInputError(f"{name} must be a string, not {type(value).__name__}")
    return value


def _still_untouched(before: Mapping[str, Any], now: Any) -> bool:
    """The re-read (a registered systemd_service result) shows the run of before, still active."""
    if not isinstance(now, Mapping) or now.get("skipped") or now.get("failed"):
        return False
    status = _mapping(now.get("status"), "unit_now.status")
    invocation = _text(before.get("invocation_id"), "unit_before.invocation_id")
    return (
        bool(invocation)
        and status.get("InvocationID", "") == invocation
        and status.get("ActiveState", "") == "active"
    )


def plan(
    why: Any,
    failed_action: Any,
    rollback_plan: Any,
    failed_digest: Any,
    unit_before: Any,
    unit_now: Any = None,
    undo_rc: Any = None,
    drain_out: Any = False,
    own_change: Any = True,
) -> RescuePlan:
    """The rescue's choices from what it knows (see the module's docstring for the three steps).

    why: why the deploy failed (the failed task and its message); failed_action: that task's action;
    rollback_plan: kdtree_rollback_plan (target, previous_digest, dropin_text) or None when the plan
    never ran; failed_digest: sha256 of the drop-in that failed ("" when none was recorded);
    unit_before: {invocation_id, active_state} before the change ({} when not read); unit_now: the
    re-read's registered result, None before step 2; undo_rc: the undo command's exit status, None
    before step 3; drain_out: the drain role's kdtree_drain_out (this run has the host out of
    rotation); own_change: False for a node of a serving group that restarted only because its group
    did (the preflight found its own files unchanged): its drop-in did not fail, so the plan's previous,
    the run it had, is its way back, and the rollback is told NO_FAILED_DROPIN."""
    why = _text(why, "why")
    failed_action = _text(failed_action, "failed_action")
    failed_digest = _text(failed_digest, "failed_digest")
    if not isinstance(own_change, bool):
        raise RescueInputError(f"own_change must be a boolean, not {own_change!r}")
    if not own_change:
        failed_digest = NO_FAILED_DROPIN
    before = _mapping(unit_before, "unit_before")
    stuck = RESTART_STUCK in why
    if rollback_plan is None:
        target, previous_digest, planned_text = "", "", ""
    else:
        planned = _mapping(rollback_plan, "rollback_plan")
        target = _text(planned.get("target"), "rollback_plan.target")
        if target not in ("stock", "previous"):
            raise RescueInputError(f"rollback_plan.target must be stock or previous, not {target!r}")
        previous_digest = _text(planned.get("previous_digest"), "rollback_plan.previous_digest")
        planned_text = _text(planned.get("dropin_text"), "rollback_plan.dropin_text")
    # a previous drop-in equal to the one that failed is no way back
    new_previous = target == "previous" and previous_digest != failed_digest
    fast = bool(target) and not stuck and (target == "stock" or new_previous)
    putback = new_previous
    read_unit = (
        failed_action not in SMOKE_ACTIONS
        and bool(_text(before.get("invocation_id"), "unit_before.invocation_id"))
        and before.get("active_state") == "active"
    )
    if not isinstance(drain_out, bool):
        raise RescueInputError(f"drain_out must be a boolean, not {drain_out!r}")
    untouched: bool | None = None
    undo_restart: bool | None = None
    rollback: dict[str, Any] | None = None
    rejoin: bool | None = None
    if unit_now is not None or not read_unit:
        untouched = read_unit and _still_untouched(before, unit_now)
        undo_restart = fast and not untouched
        # a restarted unit rejoins through its rollback's smoke check; the run of before never restarts
        rejoin = untouched and drain_out
        if undo_rc is not None:
            if isinstance(undo_rc, bool) or not isinstance(undo_rc, int):
                raise RescueInputError(f"undo_rc must be an integer, not {undo_rc!r}")
            rollback = {
                # restarted whatever it finds, unless the deploy never restarted the unit
                "force_restart": not untouched,
                "unit_untouched": untouched,
                "kill": stuck,
                "failed_dropin_digest": failed_digest,
                # the undo restarted the unit already with this drop-in: watched, not restarted again
                "restarted": undo_rc == 0 and undo_restart,
                "restarted_dropin": planned_text if putback else "",
            }
    return RescuePlan(
        fast=fast,
        putback=putback,
        undo="put" if putback else "remove",
        dropin_text=planned_text if putback else "",
        kill=stuck,
        read_unit=read_unit,
        untouched=untouched,
        undo_restart=undo_restart,
        rollback=rollback,
        rejoin=rejoin,
    )


def _shown(value: Any) -> str:
    return "" if value is None else value if isinstance(value, str) else str(value)


def summary(
    rescue: Mapping[str, Any],
    rollback_summary: Any,
    undo_rc: Any,
    undo_stderr: Any,
    drain_out: Any = False,
    failed_task: Any = None,
    failed_msg: Any = "",
    unit: Any = "sglang",
) -> str:
    """The ROLLBACK line of a failed deploy, from the rescue's plan (plan_dict()) and how it went: the
    rollback role's own summary, then what the operator must know besides - the host is still out of
    rotation (the run of before kept serving and `drain_out`, the drain role's kdtree_drain_out after
    the rejoin, is still true), the undo's first step failed (its exit status and stderr). When the
    rollback itself failed (`failed_task` and `failed_msg`: the task that failed in it), what was put
    back or removed and that unit `unit` needs a look by hand."""
    # words only: any value is shown as text, never refused (the host's failure message must print)
    rescue = rescue if isinstance(rescue, Mapping) else {}
    putback = bool(rescue.get("putback"))
    rc = undo_rc if isinstance(undo_rc, int) and not isinstance(undo_rc, bool) else None
    stderr = _shown(undo_stderr)
    if failed_task is not None:
        if rc == UNDO_DROPIN_FAILED:
            dropin = ("could NOT be put back" if putback else "could NOT be removed") + ": " + stderr
        else:
            dropin = "was put back" if putback else "was removed"
        return (
            f"the rollback itself FAILED at '{_shown(failed_task)}': {_shown(failed_msg)}; "
            f"kdtree's drop-in {dropin}; check {_shown(unit)}.service by hand"
        )
    text = _shown(rollback_summary) or "did not run"
    if rescue.get("untouched") and drain_out is True:
        text += STILL_OUT
    if rc:
        text += f"; the first rescue step (exit {rc}): {stderr.strip()}"
    return text


def plan_dict(facts: Mapping[str, Any]) -> dict[str, Any]:
    """plan() from one mapping of the facts (the filter's input), as a plain dict."""
    facts = _mapping(facts, "the rescue's facts")
    parameters = inspect.signature(plan).parameters  # the facts are plan()'s parameters, by name
    known = set(parameters)
    unknown = sorted(set(facts) - known)
    if unknown:
        raise RescueInputError(f"unknown fact(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    # a fact of the first step that is missing counts as None; a later one takes plan()'s default
    given = {name: facts.get(name) for name, p in parameters.items() if p.default is p.empty}
    given.update(
        {name: facts[name] for name, p in parameters.items() if p.default is not p.empty and name in facts}
    )
    return asdict(plan(**given))
