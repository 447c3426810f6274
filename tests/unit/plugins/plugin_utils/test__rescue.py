"""The deploy's rescue decides in one place (plugin_utils/_rescue, filter kdtree_rescue_plan): which
plan holds, what is put back, when the unit is read again, left alone, restarted or killed, and what
the rollback is told; each rule in a case of its own, then the filter's refusals. Where the rescue runs
these: tests/roles/test_recovery_order.py; on a host: molecule faults and engine.
"""

from __future__ import annotations

import subprocess

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.kdtree.fleet.plugins.filter import rescue as rescue_filter
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _rescue as rescue

FAILED = "a" * 64
PREVIOUS = "b" * 64
PREVIOUS_PLAN = {
    "target": "previous",
    "previous_digest": PREVIOUS,
    "dropin_text": "[Service]\nEnvironment=X=1\n",
}
STOCK_PLAN = {"target": "stock", "previous_digest": "", "dropin_text": ""}
BEFORE = {"invocation_id": "inv-1", "active_state": "active"}
SMOKE_FAILED = "Restart and check: sglang.service: scheduler traceback"
STUCK = "Restart and check: restart did not finish within 150 s (`systemctl restart sglang.service`)"


def decide(**facts):
    base = {
        "why": SMOKE_FAILED,
        "failed_action": "kdtree.fleet.kdtree_smoke",
        "rollback_plan": PREVIOUS_PLAN,
        "failed_digest": FAILED,
        "unit_before": BEFORE,
    }
    return rescue.plan(**{**base, **facts})


def unit_read(invocation="inv-1", state="active", **extra):
    return {"status": {"InvocationID": invocation, "ActiveState": state}, "changed": False, **extra}


def test_a_crash_goes_back_to_the_planned_previous_deploy_and_restarts_at_once():
    step1 = decide()
    assert (step1.fast, step1.putback, step1.undo, step1.kill) == (True, True, "put", False)
    assert step1.dropin_text == PREVIOUS_PLAN["dropin_text"]
    # the smoke module failed: the unit was restarted, no time is spent reading it again
    assert step1.read_unit is False and step1.untouched is False and step1.undo_restart is True
    step3 = decide(undo_rc=0)
    assert step3.rollback == {
        "force_restart": True,
        "unit_untouched": False,
        "kill": False,
        "failed_dropin_digest": FAILED,
        "restarted": True,
        "restarted_dropin": PREVIOUS_PLAN["dropin_text"],
    }


def test_a_stock_plan_removes_kdtrees_drop_in_and_restarts():
    step = decide(rollback_plan=STOCK_PLAN, undo_rc=0)
    assert (step.fast, step.putback, step.undo, step.dropin_text) == (True, False, "remove", "")
    assert step.undo_restart is True and step.rollback["restarted"] is True
    assert step.rollback["restarted_dropin"] == ""


def test_a_planned_previous_equal_to_the_drop_in_that_failed_is_no_way_back():
    step = decide(rollback_plan={**PREVIOUS_PLAN, "previous_digest": FAILED}, undo_rc=0)
    assert (step.fast, step.putback, step.undo) == (False, False, "remove")
    # not restarted by the undo: the rollback decides (previous_or_stock, with the failed digest excluded)
    assert step.undo_restart is False and step.rollback["restarted"] is False
    assert step.rollback["force_restart"] is True


def test_a_group_node_whose_own_drop_in_did_not_change_goes_back_to_the_run_it_had():
    # the node restarted with its group; the deploy's entry carries its live drop-in's digest, which the
    # plan's previous (its newest healthy entry) has too: that drop-in did not fail, it is the way back
    plan = {**PREVIOUS_PLAN, "previous_digest": FAILED}
    step = decide(rollback_plan=plan, own_change=False, undo_rc=0)
    assert (step.fast, step.putback, step.undo) == (True, True, "put")
    assert step.rollback["failed_dropin_digest"] == rescue.NO_FAILED_DROPIN
    assert step.rollback["restarted"] is True
    with pytest.raises(rescue.RescueInputError, match="own_change must be a boolean"):
        decide(own_change="False")


def test_no_plan_removes_the_drop_in_and_leaves_the_restart_to_the_rollback():
    step = decide(rollback_plan=None, undo_rc=0)
    assert (step.fast, step.putback, step.undo, step.undo_restart) == (False, False, "remove", False)
    assert step.rollback["restarted"] is False


def test_a_restart_that_did_not_finish_kills_instead_of_a_second_stop():
    step = decide(why=STUCK, undo_rc=0)
    assert step.kill is True and step.fast is False and step.undo_restart is False
    assert step.putback is True  # the planned drop-in still goes back; the rollback kills and starts
    assert step.rollback["kill"] is True and step.rollback["restarted"] is False


def test_a_failure_before_the_restart_reads_the_unit_and_leaves_its_run_of_before_serving():
    step1 = decide(failed_action="ansible.builtin.copy")
    assert step1.read_unit is True and step1.untouched is None and step1.undo_restart is None
    assert step1.rollback is None
    step2 = decide(failed_action="ansible.builtin.copy", unit_now=unit_read())
    assert step2.untouched is True and step2.undo_restart is False
    step3 = decide(failed_action="ansible.builtin.copy", unit_now=unit_read(), undo_rc=0)
    assert step3.rollback["unit_untouched"] is True and step3.rollback["force_restart"] is False
    assert step3.rollback["restarted"] is False


@pytest.mark.parametrize(
    "now",
    [
        unit_read(invocation="inv-2"),  # restarted after all
        unit_read(state="activating"),
        unit_read(failed=True),  # the read failed: unknown counts as restarted
        {"skipped": True, "changed": False},
        {"changed": False},  # no status at all
    ],
    ids=["another-run", "not-active", "read-failed", "read-skipped", "no-status"],
)
def test_a_unit_not_seen_in_its_run_of_before_counts_as_restarted(now):
    step = decide(failed_action="ansible.builtin.copy", unit_now=now, undo_rc=0)
    assert step.untouched is False and step.undo_restart is True
    assert step.rollback["force_restart"] is True and step.rollback["restarted"] is True


@pytest.mark.parametrize(
    "before",
    [
        {},
        {"invocation_id": "", "active_state": "active"},
        {"invocation_id": "inv-1", "active_state": "failed"},
    ],
    ids=["not-read", "no-invocation", "not-active"],
)
def test_a_unit_that_was_not_serving_before_is_not_read_again(before):
    step = decide(failed_action="ansible.builtin.copy", unit_before=before, unit_now=unit_read())
    assert step.read_unit is False and step.untouched is False and step.undo_restart is True


@pytest.mark.parametrize("rc", [10, 11, 12])
def test_an_undo_that_failed_tells_the_rollback_nothing_was_restarted(rc):
    step = decide(undo_rc=rc)
    assert step.rollback["restarted"] is False and step.rollback["force_restart"] is True


def test_the_restart_stuck_phrase_is_what_the_smoke_check_says_when_a_restart_hangs(monkeypatch):
    """The smoke check's restart timeout (module_utils/_smoke/host.py restart_unit) says RESTART_STUCK."""
    from ansible_collections.kdtree.fleet.plugins.module_utils._smoke import host

    def hangs(args, **kwargs):
        raise subprocess.TimeoutExpired(args, kwargs.get("timeout"))

    monkeypatch.setattr(host.subprocess, "run", hangs)
    with pytest.raises(host.HostError) as raised:
        host.restart_unit("sglang", timeout_s=150)
    assert rescue.RESTART_STUCK in str(raised.value)
    assert decide(why=f"Restart and check: {raised.value}").kill is True


def test_a_drained_host_whose_run_of_before_kept_serving_is_checked_and_rejoined():
    step = decide(failed_action="ansible.builtin.copy", unit_now=unit_read(), drain_out=True)
    assert step.untouched is True and step.rejoin is True
    # restarted: the rollback's own smoke check rejoins it; not drained: nothing to rejoin
    assert decide(unit_now=unit_read(), drain_out=True).rejoin is False
    assert decide(failed_action="ansible.builtin.copy", unit_now=unit_read()).rejoin is False
    assert decide(failed_action="ansible.builtin.copy").rejoin is None  # not read yet


# ---------------------------------------------------------------------------------------------
# the ROLLBACK line


def test_the_rollback_line_is_the_rollbacks_summary_and_what_the_operator_must_know_besides():
    kept = {"putback": True, "untouched": True}
    assert rescue.summary(kept, "back to PREVIOUS b1: HEALTHY", 0, "") == "back to PREVIOUS b1: HEALTHY"
    line = rescue.summary(kept, "back to PREVIOUS b1: HEALTHY", 0, "", drain_out=True)
    assert line == "back to PREVIOUS b1: HEALTHY" + rescue.STILL_OUT
    assert "still OUT of rotation (its drain record stays" in rescue.STILL_OUT
    line = rescue.summary({"untouched": False}, "", 12, "systemctl restart sglang failed\n", drain_out=True)
    assert line == "did not run; the first rescue step (exit 12): systemctl restart sglang failed"


FAILED_AT = "the rollback itself FAILED at 'Restart': boom; kdtree's drop-in "


@pytest.mark.parametrize(
    ("rc", "putback", "said"),
    [
        (10, True, "could NOT be put back: disk full"),
        (10, False, "could NOT be removed: disk full"),
        (0, True, "was put back"),
        (None, False, "was removed"),
    ],
)
def test_a_rollback_that_failed_says_where_and_what_became_of_the_drop_in(rc, putback, said):
    line = rescue.summary(
        {"putback": putback}, "", rc, "disk full", failed_task="Restart", failed_msg="boom", unit="sglang-a"
    )
    assert line == FAILED_AT + said + "; check sglang-a.service by hand"


def test_the_rollback_line_refuses_nothing_it_only_words():
    line = rescue.summary(None, None, "10", ["odd"], failed_task=3, failed_msg={"a": 1})
    assert line.startswith("the rollback itself FAILED at '3': {'a': 1}; kdtree's drop-in was removed")


# ---------------------------------------------------------------------------------------------
# the filter


def test_the_filter_answers_a_plain_dict():
    out = rescue_filter.FilterModule().filters()["kdtree_rescue_plan"](
        {
            "why": SMOKE_FAILED,
            "failed_action": "kdtree_smoke",
            "rollback_plan": PREVIOUS_PLAN,
            "failed_digest": FAILED,
            "unit_before": BEFORE,
        }
    )
    assert out["undo"] == "put" and out["fast"] is True and out["rollback"] is None


@pytest.mark.parametrize(
    ("facts", "message"),
    [
        ({"why": 3}, "why must be a string"),
        ({"rollback_plan": {"target": "elsewhere"}}, "target must be stock or previous"),
        ({"rollback_plan": "previous"}, "rollback_plan must be a mapping"),
        ({"unit_before": ["inv-1"]}, "unit_before must be a mapping"),
        ({"undo_rc": "0"}, "undo_rc must be an integer"),
        ({"undo_rc": True}, "undo_rc must be an integer"),
        ({"unit_befor": {}}, "unknown fact(s) unit_befor"),
    ],
)
def test_the_filter_refuses_facts_it_does_not_understand(facts, message):
    base = {"failed_action": "kdtree_smoke", "rollback_plan": STOCK_PLAN, "unit_before": BEFORE}
    with pytest.raises(
        AnsibleFilterError, match="kdtree_rescue_plan: .*" + message.replace("(", r"\(").replace(")", r"\)")
    ):
        rescue_filter.kdtree_rescue_plan({**base, **facts})
