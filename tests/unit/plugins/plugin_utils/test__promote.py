"""Promotion on evidence (plugin_utils/_promote, filters kdtree_promote_*): qualify() judged rule by
rule on report rows (one qualifying row, then one change per rule), the settings and their one owner
(the patch's DEFAULT_TOL), the filters, promotion on speed; and a row gathered by the real report code
from a fixture host (tests/unit/helpers/report_host.py: live titled processes, a status directory, a history)
qualifies, and does not once its statistics predate the deploy. The playbook and the role:
tests/roles/test_promote.py. Nothing here needs systemd or a container.
"""

from __future__ import annotations

import importlib.util
import math
import time

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.kdtree.fleet.plugins.filter import promote as promote_filter
from ansible_collections.kdtree.fleet.plugins.module_utils import _speed as speed
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _promote as promote
from ansible_collections.kdtree.fleet.tests.unit.helpers.collection_tree import PATCH_DIR, ROOT
from ansible_collections.kdtree.fleet.tests.unit.helpers.promote_rows import (
    STARTED,
    T0,
    date_deploy,
    good_row,
    judge,
    scheduler,
    timing_bucket,
    write_schedulers,
)
from ansible_collections.kdtree.fleet.tests.unit.helpers.report_host import gather

# ---------------------------------------------------------------------------------------------
# qualify(), rule by rule


def test_a_healthy_validate_host_with_enough_clean_evidence_qualifies():
    ok, why = judge(good_row())
    assert ok, why
    assert (
        why == "1200 calls compared over 2 schedulers, 0 mismatches, max diff 0.004 <= 0.02, "
        "no runtime fallback, speedup 1.50 over 400 timed calls (worst bucket b1/n4/le1024/h16 1.50)"
    )


@pytest.mark.parametrize(
    ("change", "said"),
    [
        pytest.param(
            {"schedulers": [scheduler(101, 400), scheduler(102, 400)], "validate_compared": 800},
            "800 calls compared, fewer than 1000",
            id="too-few-compared",
        ),
        pytest.param(
            {"schedulers": [scheduler(101, 1200), scheduler(102, 0)]},
            "scheduler pid 102 compared no call",
            id="one-scheduler-compared-nothing",
        ),
        pytest.param({"validate_mismatches": 1}, "1 mismatches", id="a-mismatch"),
        pytest.param(
            {"validate_max_diff": 0.021}, "max diff 0.021 > tolerance 0.02", id="max-diff-over-tolerance"
        ),
        pytest.param({"validate_max_diff": float("nan")}, "max diff nan > tolerance", id="max-diff-nan"),
        pytest.param(
            {"runtime_fallbacks": 1, "runtime_fallback_reason": "kernel raised"},
            "1 runtime fallbacks (kernel raised)",
            id="runtime-fallback",
        ),
        pytest.param(
            {"runtime_fallbacks": None}, "no runtime fallback count", id="runtime-fallbacks-unknown"
        ),
        pytest.param({"mode": "on"}, "mode is on already, not validate", id="mode-on-already"),
        pytest.param({"mode": "off"}, "mode is off, not validate", id="mode-off"),
        pytest.param({"deployed": False, "mode": "stock"}, "kdtree is not deployed", id="not-deployed"),
        pytest.param(
            {"current_deploy": {"result": "running", "started": STARTED}},
            "the current deploy is running, not healthy",
            id="current-deploy-not-ended",
        ),
        pytest.param(
            {
                "last_deploy": {
                    "id": "d2",
                    "result": "rolled_back",
                    "rolled_back_to": "previous",
                    "why": "smoke: traceback",
                }
            },
            "the last deploy d2 is rolled_back (rolled back to previous): smoke: traceback",
            id="unhealthy-last-deploy",
        ),
        pytest.param({"unit_state": "failed/failed"}, "unit is failed/failed", id="unit-not-active"),
        pytest.param({"health": "503"}, "health is 503", id="health-not-ok"),
        pytest.param(
            {"schedulers": [scheduler(101, 1200)], "schedulers_patched": 1},
            "1/2 schedulers report validate statistics (1 patched, 2 running)",
            id="a-scheduler-not-reporting",
        ),
        pytest.param(
            {"schedulers": [scheduler(101), scheduler(102, state="fallback")]},
            "1/2 schedulers report validate statistics",
            id="a-scheduler-fell-back",
        ),
        pytest.param({"schedulers_expected": None}, "how many schedulers to expect", id="expected-unknown"),
        pytest.param(
            {"schedulers": [scheduler(101, process_start=T0 - 3600, since=T0 - 3500), scheduler(102)]},
            "statistics of pid 101 are older than the current deploy",
            id="stale-statistics-from-before-the-deploy",
        ),
        pytest.param(
            {"schedulers": [scheduler(101, process_start=T0 - 1), scheduler(102)]},
            "statistics of pid 101 are older than the current deploy",
            id="process-started-before-the-deploy",
        ),
        pytest.param(
            {"schedulers": [scheduler(101), scheduler(102, since=T0 - 1)]},
            "statistics of pid 102 are older than the current deploy",
            id="publisher-since-before-the-deploy",
        ),
        pytest.param(
            {"schedulers": [scheduler(101), scheduler(102, process_start=None)]},
            "statistics of pid 102 are older than the current deploy (or undated)",
            id="process-start-unreadable",
        ),
        pytest.param(
            {"current_deploy": {"result": "healthy", "started": ""}},
            "the current deploy's start time is unknown",
            id="deploy-start-unknown",
        ),
        pytest.param(
            {"running_build_ids": ["ffff"]},
            "schedulers run build ffff, the history says 0123456789abcdef",
            id="running-another-build",
        ),
        pytest.param(
            {"errors": ["cannot list /run/x"]},
            "could not read everything: cannot list /run/x",
            id="report-errors",
        ),
        # issue 19: evidence that cannot be fooled
        pytest.param(
            {
                "validate_max_diff": math.nan,
                "schedulers": [scheduler(101, max_diff=math.nan), scheduler(102)],
            },
            "non-finite values in validate: largest difference nan",
            id="nan-max-diff",
        ),
        pytest.param(
            {"validate_nonfinite": "non-finite values in validate: kernel output NaN/inf in 3 calls"},
            "non-finite values in validate: kernel output NaN/inf in 3 calls",
            id="nonfinite-kernel-output",
        ),
        pytest.param(
            {"schedulers": [scheduler(101, compared=True), scheduler(102, compared=1200)]},
            "pid 101 compared is bool True, not a count",
            id="bool-compared",
        ),
        pytest.param(
            {"schedulers": [scheduler(101, mismatches="0"), scheduler(102)]},
            "pid 101 mismatches is str '0', not a count",
            id="string-mismatches",
        ),
        pytest.param(
            {"schedulers": [scheduler(101, runtime_fallbacks=-1), scheduler(102)]},
            "pid 101 runtime_fallbacks is -1, a negative count",
            id="negative-fallbacks",
        ),
        pytest.param(
            {"validate_mismatches": False},
            "validate_mismatches is bool False, not a count",
            id="bool-row-mismatches",
        ),
        pytest.param(
            {"schedulers": [scheduler(101, fresh="last updated 3600 s ago"), scheduler(102)]},
            "statistics not fresh (pid 101: last updated 3600 s ago)",
            id="stale-statistics",
        ),
        pytest.param(
            {"schedulers": [{k: v for k, v in scheduler(101).items() if k != "fresh"}, scheduler(102)]},
            "statistics not fresh (pid 101: freshness unknown)",
            id="freshness-unknown",
        ),
    ],
)
def test_each_rule_keeps_the_host_in_validate_and_says_why(change, said):
    ok, why = judge(good_row(**change))
    assert not ok
    assert said in why, why


def test_every_failing_rule_is_named():
    ok, why = judge(good_row(validate_mismatches=2, runtime_fallbacks=3, health="refused"))
    assert not ok
    assert [part.split(" ")[0] for part in why.split("; ")] == ["health", "2", "3"]


def test_a_rank_above_zero_is_judged_by_its_schedulers_not_its_health():
    assert judge(good_row(node_rank=1, health="200 dummy"))[0]


def test_the_thresholds_are_the_callers():
    assert judge(good_row(), min_compared=1200)[0]
    assert not judge(good_row(), min_compared=1201)[0]
    assert judge(good_row(validate_max_diff=0.05), tolerance=0.05)[0]
    assert judge(good_row(validate_max_diff=0.0), tolerance=0.0)[0]  # 0 <= 0 qualifies


def test_the_build_and_patch_the_deploy_would_install_must_be_the_evidence_s():
    same = {"build_id": "0123456789abcdef", "patch_digest": "fedcba987654" + "0" * 52}
    assert judge(good_row(), expected=same)[0]
    ok, why = judge(good_row(), expected={**same, "build_id": "aaaa"})
    assert not ok and "runs build 0123456789abcdef, the promotion would deploy aaaa" in why
    ok, why = judge(good_row(), expected={**same, "patch_digest": "0" * 64})
    assert not ok and "runs patch fedcba987654, the promotion would deploy 000000000000" in why


def test_a_host_without_a_row_stays_with_the_report_s_reason():
    from ansible_collections.kdtree.fleet.plugins.plugin_utils import _report_table as report_table

    row = report_table.rows([{"unreachable": True, "msg": "ssh: timeout"}], ["gone"])[0]
    ok, why = judge(row)
    assert not ok and why.startswith("unreachable: ssh: timeout")


# ---------------------------------------------------------------------------------------------
# the settings and their one owner


def _patch_default_tol() -> float:
    spec = importlib.util.spec_from_file_location("patch_config", PATCH_DIR / "kdtree_verify" / "config.py")
    config = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(config)
    return config.DEFAULT_TOL


def test_the_default_tolerance_is_the_patch_s_default_tol():
    tol = _patch_default_tol()
    assert promote.default_tolerance(PATCH_DIR) == tol
    assert promote.default_tolerance(str(PATCH_DIR)) == tol
    assert promote.settings("", "", PATCH_DIR) == (promote.DEFAULT_MIN_COMPARED, tol)
    assert promote.settings(None, None, PATCH_DIR) == (promote.DEFAULT_MIN_COMPARED, tol)
    assert promote.settings("50", "0.1") == (50, 0.1)  # a tolerance given: no patch source needed
    assert promote.settings(50, 0) == (50, 0.0)


def test_a_missing_patch_config_is_a_clear_error(tmp_path):
    with pytest.raises(promote.PromoteError, match="cannot read DEFAULT_TOL"):
        promote.default_tolerance(tmp_path)


def test_without_a_tolerance_or_a_patch_source_the_promotion_refuses():
    with pytest.raises(promote.PromoteError, match="no patch source directory"):
        promote.settings("", "")
    with pytest.raises(AnsibleFilterError, match="no patch source directory"):
        promote_filter.kdtree_promote_verdict({"row": good_row()}, "gpu-9")


def test_the_promotion_finds_no_file_through_its_own_location():
    """The patch source is received (the play passes the patch role's kdtree_patch_source_dir), never
    derived from where the plugin lies."""
    for path in (ROOT / "plugins" / "plugin_utils").glob("*.py"):
        assert "__file__" not in path.read_text(encoding="utf-8"), path


@pytest.mark.parametrize(
    ("count", "tol"), [("0", ""), ("abc", ""), ("1.5", ""), ("", "nan"), ("", "-1"), ("", "inf"), ("", "x")]
)
def test_unusable_settings_are_refused(count, tol):
    with pytest.raises(promote.PromoteError, match="kdtree_promote_"):
        promote.settings(count, tol, PATCH_DIR)


# ---------------------------------------------------------------------------------------------
# the filters


def test_the_verdict_filter_judges_a_registered_result_with_the_play_s_settings():
    verdict = promote_filter.kdtree_promote_verdict(
        {"changed": False, "row": good_row()}, "gpu-9", patch_source=str(PATCH_DIR)
    )
    assert verdict["host"] == "gpu-9" and verdict["qualified"] is True
    assert (verdict["min_compared"], verdict["tolerance"]) == (
        promote.DEFAULT_MIN_COMPARED,
        promote.default_tolerance(PATCH_DIR),
    )
    verdict = promote_filter.kdtree_promote_verdict({"row": good_row()}, "gpu-9", "5000", "", None, PATCH_DIR)
    assert verdict["qualified"] is False and "fewer than 5000" in verdict["why"]
    # skipped or failed before the report
    verdict = promote_filter.kdtree_promote_verdict({}, "gpu-9", patch_source=PATCH_DIR)
    assert verdict["qualified"] is False and "no report" in verdict["why"]
    with pytest.raises(AnsibleFilterError, match="kdtree_promote_tolerance"):
        promote_filter.kdtree_promote_verdict({"row": good_row()}, "gpu-9", "", "nan")


def test_the_table_lists_the_qualifying_hosts_first_and_every_host_once():
    good = promote.verdict(good_row(host="a"), patch_source=PATCH_DIR)
    bad = promote.verdict(good_row(host="b", validate_mismatches=4), patch_source=PATCH_DIR)
    table = promote_filter.kdtree_promote_table([bad, None, good], ["b", "c", "a"])
    lines = table.splitlines()
    assert lines[0].split() == ["HOST", "PROMOTE", "WHY"]
    assert [line.split()[:2] for line in lines[1:]] == [["a", "on"], ["b", "stays"], ["c", "stays"]]
    assert lines[2].endswith("4 mismatches") and "not judged" in lines[3]
    with pytest.raises(AnsibleFilterError):
        promote_filter.kdtree_promote_table([good], ["a", "b"])


# ---------------------------------------------------------------------------------------------
# rows gathered by the real report code from fixtures


def test_a_gathered_row_of_the_current_run_qualifies(host, health_server):
    host.deploy(nccl_env={})
    date_deploy(host, time.time() - 60)  # the deploy began before these processes started
    write_schedulers(host, since=time.time())
    row = gather(host, health_server)
    assert [s["pid"] for s in row["schedulers"]] == sorted([host.tp0.pid, host.tp1.pid])
    assert row["current_deploy"]["result"] == "healthy" and row["current_deploy"]["started"]
    ok, why = judge(row)
    assert ok, why
    assert why.startswith("1400 calls compared over 2 schedulers")


def test_statistics_of_processes_older_than_the_deploy_do_not_count(host, health_server):
    host.deploy(nccl_env={})
    date_deploy(host, time.time() + 60)  # e.g. a deploy that did not restart this run
    write_schedulers(host, since=time.time())
    ok, why = judge(gather(host, health_server))
    assert not ok and "older than the current deploy" in why, why


def test_a_gathered_row_with_a_mismatch_stays(host, health_server):
    host.deploy(nccl_env={})
    date_deploy(host, time.time() - 60)
    write_schedulers(host, since=time.time(), mismatches=1, max_diff=0.5)
    ok, why = judge(gather(host, health_server))
    assert not ok and "2 mismatches" in why and "max diff 0.5 > tolerance 0.02" in why, why


# ---------------------------------------------------------------------------------------------
# promotion on speed (module_utils/_speed.py defines the figure once; _promote.py the rule)


def _speed_row(*buckets) -> dict:
    return good_row(speed={"buckets": list(buckets)})


@pytest.mark.parametrize(
    ("original_s", "kernel_s", "qualifies"),
    [
        pytest.param(2.2, 2.0, True, id="above"),  # 1.10
        pytest.param(2.1, 2.0, True, id="at"),  # 1.05, the default threshold itself
        pytest.param(2.09, 2.0, False, id="below"),  # 1.045: within the noise margin is not faster
        pytest.param(1.0, 2.0, False, id="slower"),
    ],
)
def test_the_speedup_must_reach_the_threshold(original_s, kernel_s, qualifies):
    ok, why = judge(_speed_row(timing_bucket(400, original_s, kernel_s)))
    assert ok is qualifies, why
    if not qualifies:
        figure = original_s / kernel_s
        assert f"speedup {figure:.2f} < 1.05 (worst bucket b1/n4/le1024/h16 {figure:.2f})" in why


def test_the_speedup_threshold_and_the_timed_calls_are_the_callers():
    row = _speed_row(timing_bucket(400, 2.0, 2.0))
    assert not judge(row)[0]
    assert judge(row, min_speedup=1.0)[0]
    ok, why = judge(_speed_row(timing_bucket(150)))
    assert not ok and "150 calls timed, fewer than 200" in why  # promote.DEFAULT_MIN_TIMED_CALLS
    assert judge(_speed_row(timing_bucket(150)), min_timed_calls=150)[0]


def test_a_slow_bucket_refuses_even_when_the_host_s_figure_passes():
    fast, slow = timing_bucket(400, 8.0, 2.0), timing_bucket(100, 0.9, 1.0, batch=16)
    ok, why = judge(_speed_row(fast, slow))
    assert not ok and why.endswith("bucket b16/n4/le1024/h16 is slower than the original (speedup 0.90)")
    # below the bucket's sample minimum it is not shown, and cannot be the worst
    few = timing_bucket(speed.MIN_BUCKET_CALLS - 1, 0.5, 1.0, batch=16)
    assert judge(_speed_row(fast, few))[0]


def test_warm_up_calls_are_not_evidence():
    # the patch drops each bucket's first calls (timing.WARMUP_CALLS) before they reach a bucket;
    # here the status document says so: 3 untimed warm-up calls, 0 timed -> too few, no figure
    ok, why = judge(_speed_row(timing_bucket(0, 0.0, 0.0)))
    assert not ok and "0 calls timed, fewer than 200" in why and "speedup" not in why


@pytest.mark.parametrize(
    ("over", "said"),
    [
        pytest.param({"kernel_s": math.nan}, "kernel_s is nan, not a time", id="nan"),
        pytest.param({"kernel_s": math.inf}, "kernel_s is inf, not a time", id="inf"),
        pytest.param({"original_s": -1.0}, "original_s is -1.0, not a time", id="negative"),
        pytest.param({"kernel_s": 0.0}, "kernel_s is 0 with 400 timed calls", id="zero-kernel-time"),
        pytest.param({"timed_calls": "400"}, "timed_calls is '400', not a count", id="string-count"),
        pytest.param({"kernel_s": None}, "kernel_s is None, not a time", id="missing-value"),
    ],
)
def test_odd_timing_refuses_never_counts_as_zero(over, said):
    ok, why = judge(
        _speed_row(
            timing_bucket(400, **over) if "timed_calls" not in over else {**timing_bucket(400), **over}
        )
    )
    assert not ok and "timing this gate does not understand" in why and said in why


def test_a_row_without_timing_or_with_a_bucket_missing_a_field_refuses():
    row = good_row()
    del row["speed"]
    ok, why = judge(row)
    assert not ok and "no timing of the kernel against the original" in why
    bucket = timing_bucket(400)
    del bucket["heads"]
    ok, why = judge(_speed_row(bucket))
    assert not ok and "has no heads" in why


def test_the_row_s_own_speedup_is_not_trusted():
    row = _speed_row(timing_bucket(400, 1.0, 2.0))
    row["speed"]["speedup"] = 9.0  # a row that claims more than its buckets show
    ok, why = judge(row)
    assert not ok and "speedup 0.50 < 1.05" in why


def test_the_speed_settings_refuse_bad_input():
    assert promote.speed_settings("", "") == (promote.DEFAULT_MIN_TIMED_CALLS, promote.DEFAULT_MIN_SPEEDUP)
    assert promote.speed_settings("5", "1.2") == (5, 1.2)
    for bad in (
        {"min_timed_calls": "0"},
        {"min_timed_calls": "x"},
        {"min_speedup": "nan"},
        {"min_speedup": "0"},
    ):
        with pytest.raises(promote.PromoteError):
            promote.speed_settings(**bad)


@pytest.mark.parametrize(
    ("second", "part"),
    [
        pytest.param(
            scheduler(102, buckets=[timing_bucket(batch=8, original_s=1.0, kernel_s=1.25)]),
            "scheduler pid 102 is slower than the original (speedup 0.80)",
            id="one-slow-scheduler",
        ),
        pytest.param(
            scheduler(102, buckets=[]), "scheduler pid 102 timed no call", id="one-untimed-scheduler"
        ),
        pytest.param(scheduler(102, speed=None), "scheduler pid 102 has no timing", id="no-timing-at-all"),
        pytest.param(
            scheduler(
                102, buckets=[timing_bucket(batch=8), timing_bucket(batch=2, original_s=1.0, kernel_s=2.0)]
            ),
            "scheduler pid 102 bucket b2/n4/le1024/h16 is slower than the original (speedup 0.50)",
            id="a-slow-bucket-of-one-scheduler",
        ),
    ],
)
def test_each_scheduler_is_judged_on_its_own_timing_not_only_the_hosts_sum(second, part):
    # the host's sum (row["speed"]) stays the good 1.50: only the scheduler's own figure shows it
    ok, why = judge(good_row(schedulers=[scheduler(101), second]))
    assert not ok and part in why, why


def test_a_host_with_every_scheduler_timed_and_faster_qualifies_with_its_evidence():
    ok, why = judge(good_row())
    assert ok and "speedup 1.50 over 400 timed calls" in why, why
